//! The model catalogue, as data: each model's prices, the provider
//! endpoints that serve it, the other names that reach it, and the models
//! that answer when it cannot.
//!
//! Adding a model is a configuration change: a [`Model`] more in the list.
//! A request names a model by its id or one of its aliases and is metered
//! under its id. `GET /v1/models` lists the ids a key may call; a request
//! naming a model that is not here, or that its key may not call, gets 404
//! `model_not_found` with the same message (a key learns nothing of the
//! models it may not use).

use rustc_hash::FxHashMap;
use serde::Serialize;

/// The one model of the specification.
pub(crate) const DEFAULT_MODEL_ID: &str = "reasoning-model-k3";

/// The owner label used when the configuration names none.
pub(crate) const DEFAULT_OWNER: &str = "chatgate";

/// Prices in integer nano-dollars (1e-9 USD) per million tokens, so every
/// cost is exact integer arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Price {
    /// Input (`prompt_tokens`) rate, nano-USD per 1,000,000 tokens.
    pub input_nano_per_million: u64,
    /// Output (`completion_tokens`, reasoning included) rate.
    pub output_nano_per_million: u64,
}

impl Price {
    /// The specification's rates: 2.85 and 14.25 USD per million tokens.
    pub const DEFAULT: Price = Price {
        input_nano_per_million: 2_850_000_000,
        output_nano_per_million: 14_250_000_000,
    };

    /// Prices given in USD per million tokens (as in a config file), rounded
    /// to the nano-dollar. Negative or non-finite rates are refused.
    pub fn from_usd_per_million(input: f64, output: f64) -> Option<Price> {
        let nanos = |usd: f64| {
            (0.0..1e9)
                .contains(&usd)
                .then(|| (usd * 1e9).round() as u64)
        };
        Some(Price {
            input_nano_per_million: nanos(input)?,
            output_nano_per_million: nanos(output)?,
        })
    }

    /// Cost of a request in nano-dollars:
    /// `prompt / 1e6 × input + completion / 1e6 × output`, rounded half up to
    /// the nano-dollar (exact for the default prices: 2,850 and 14,250
    /// nano-dollars per token).
    pub fn cost_nano(&self, prompt_tokens: u64, completion_tokens: u64) -> u64 {
        let total = u128::from(prompt_tokens) * u128::from(self.input_nano_per_million)
            + u128::from(completion_tokens) * u128::from(self.output_nano_per_million);
        let nanos = (total + 500_000) / 1_000_000;
        u64::try_from(nanos).unwrap_or(u64::MAX)
    }
}

/// Formats nano-dollars as an exact decimal with nine places, e.g. `0.000028500`.
pub fn format_usd(nanos: u64) -> String {
    format!("{}.{:09}", nanos / 1_000_000_000, nanos % 1_000_000_000)
}

/// One model the gateway serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    /// The id clients use, and the one it is metered under.
    pub id: String,
    /// The `owned_by` label.
    pub owned_by: String,
    /// The id sent to the provider when it differs from `id` (an
    /// endpoint's own name for the model wins over it).
    pub upstream_id: Option<String>,
    /// Its prices.
    pub price: Price,
    /// The names of the endpoints that serve it (`None`: every endpoint).
    pub endpoints: Option<Vec<String>>,
    /// Other names that resolve to it.
    pub aliases: Vec<String>,
    /// The ids of the models that answer, in order, when it cannot.
    pub fallback: Vec<String>,
    /// How its reasoning goes back to its provider in later turns (`None`:
    /// the gateway's `reasoning_replay`).
    pub reasoning_replay: Option<crate::reasoning::ReplayMode>,
}

impl Model {
    /// The specification's model with its prices.
    pub fn default_model() -> Model {
        Model {
            id: DEFAULT_MODEL_ID.to_owned(),
            owned_by: DEFAULT_OWNER.to_owned(),
            upstream_id: None,
            price: Price::DEFAULT,
            endpoints: None,
            aliases: Vec::new(),
            fallback: Vec::new(),
            reasoning_replay: None,
        }
    }

    /// The model id providers are sent unless an endpoint names it its
    /// own way.
    pub fn provider_id(&self) -> &str {
        self.upstream_id.as_deref().unwrap_or(&self.id)
    }

    /// Whether a key's model list (`None`: every model) lets it call this
    /// model: the list names its id or one of its aliases.
    pub fn allowed_by(&self, list: Option<&[String]>) -> bool {
        list.is_none_or(|names| {
            names
                .iter()
                .any(|n| *n == self.id || self.aliases.iter().any(|a| a == n))
        })
    }
}

/// The catalogue: the models, the names that reach them, and the prebuilt
/// `GET /v1/models` body (every model's).
#[derive(Debug, Clone)]
pub struct Catalog {
    models: Vec<Model>,
    /// Every id and alias, with its model's index (FxHash: the names are
    /// the operator's, and a lookup is on every request's path).
    names: FxHashMap<String, usize>,
    list_body: Vec<u8>,
    /// A model sets a reasoning replay of its own that sends reasoning
    /// back.
    replays: bool,
}

impl PartialEq for Catalog {
    fn eq(&self, other: &Self) -> bool {
        self.models == other.models
    }
}

impl Eq for Catalog {}

impl Default for Catalog {
    fn default() -> Self {
        // The default model is valid by construction.
        Catalog::new(vec![Model::default_model()]).expect("default catalogue is valid")
    }
}

impl Catalog {
    /// A catalogue of `models`: at least one; ids and aliases non-empty
    /// and all different; fallbacks naming other models of the list, each
    /// once.
    pub fn new(models: Vec<Model>) -> Result<Catalog, String> {
        if models.is_empty() {
            return Err("the model catalogue is empty".into());
        }
        let mut names: FxHashMap<String, usize> = FxHashMap::default();
        for (i, m) in models.iter().enumerate() {
            for name in std::iter::once(&m.id).chain(&m.aliases) {
                if name.is_empty() {
                    return Err(format!("model #{} has an empty name", i + 1));
                }
                if let Some(&other) = names.get(name) {
                    return Err(format!(
                        "'{name}' names both model '{}' and model '{}'",
                        models[other].id, m.id
                    ));
                }
                names.insert(name.clone(), i);
            }
        }
        for m in &models {
            for (k, f) in m.fallback.iter().enumerate() {
                if *f == m.id {
                    return Err(format!("model '{}' falls back to itself", m.id));
                }
                if !models.iter().any(|o| o.id == *f) {
                    return Err(format!(
                        "model '{}' falls back to '{f}', which is not a model id",
                        m.id
                    ));
                }
                if m.fallback[..k].contains(f) {
                    return Err(format!("model '{}' falls back to '{f}' twice", m.id));
                }
            }
        }
        let list_body = list_body(models.iter());
        let replays = models
            .iter()
            .any(|m| m.reasoning_replay.is_some_and(|r| r.replays()));
        Ok(Catalog {
            models,
            names,
            list_body,
            replays,
        })
    }

    /// Whether a model's own `reasoning_replay` sends reasoning back (the
    /// gateway's default may too, for the models that set none).
    pub fn sets_replay(&self) -> bool {
        self.replays
    }

    /// The model with this id.
    pub fn get(&self, id: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.id == id)
    }

    /// The index of the model this name (an id or an alias) reaches.
    pub fn resolve(&self, name: &str) -> Option<usize> {
        self.names.get(name).copied()
    }

    /// The index of the model with this id.
    pub fn index(&self, id: &str) -> Option<usize> {
        self.resolve(id).filter(|&i| self.models[i].id == id)
    }

    /// All models, in configuration order.
    pub fn models(&self) -> &[Model] {
        &self.models
    }

    /// The catalogue as a key with this model list (`None`: every model)
    /// sees it.
    pub fn seen_by<'a>(&'a self, allowed: Option<&'a [String]>) -> KeyView<'a> {
        KeyView {
            catalog: self,
            allowed,
        }
    }

    /// The `GET /v1/models` response body for a key with this model list
    /// (`None`: every model, the prebuilt body).
    pub fn list_body(&self, list: Option<&[String]>) -> std::borrow::Cow<'_, [u8]> {
        match list {
            None => std::borrow::Cow::Borrowed(&self.list_body),
            Some(_) => std::borrow::Cow::Owned(list_body(
                self.models.iter().filter(|m| m.allowed_by(list)),
            )),
        }
    }
}

/// The catalogue as one key sees it: the models its list lets it call.
#[derive(Debug, Clone, Copy)]
pub struct KeyView<'a> {
    catalog: &'a Catalog,
    allowed: Option<&'a [String]>,
}

impl<'a> KeyView<'a> {
    /// The model `name` (an id or an alias) reaches, if the key may call
    /// it.
    pub fn find(&self, name: &str) -> Option<&'a Model> {
        let m = &self.catalog.models[self.catalog.resolve(name)?];
        m.allowed_by(self.allowed).then_some(m)
    }
}

impl<'a> From<&'a Catalog> for KeyView<'a> {
    /// Every model: a key without a list.
    fn from(catalog: &'a Catalog) -> Self {
        catalog.seen_by(None)
    }
}

/// The `GET /v1/models` body listing `models` (ids; aliases are names a
/// client may use, not models of their own).
fn list_body<'a>(models: impl Iterator<Item = &'a Model>) -> Vec<u8> {
    #[derive(Serialize)]
    struct List<'a> {
        object: &'static str,
        data: Vec<Entry<'a>>,
    }
    #[derive(Serialize)]
    struct Entry<'a> {
        id: &'a str,
        object: &'static str,
        created: u64,
        owned_by: &'a str,
    }
    let list = List {
        object: "list",
        data: models
            .map(|m| Entry {
                id: &m.id,
                object: "model",
                created: 0,
                owned_by: &m.owned_by,
            })
            .collect(),
    };
    // Plain strings and integers always serialize.
    serde_json::to_vec(&list).expect("model list serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_prices_are_exact() {
        let p = Price::DEFAULT;
        assert_eq!(p.cost_nano(1, 0), 2_850);
        assert_eq!(p.cost_nano(0, 1), 14_250);
        assert_eq!(p.cost_nano(1_000_000, 1_000_000), 17_100_000_000);
        assert_eq!(format_usd(p.cost_nano(1_000_000, 0)), "2.850000000");
        assert_eq!(format_usd(p.cost_nano(10, 20)), "0.000313500");
        // Output is five times the input rate.
        assert_eq!(p.output_nano_per_million, 5 * p.input_nano_per_million);
        assert_eq!(
            Price::from_usd_per_million(2.85, 14.25),
            Some(Price::DEFAULT)
        );
        assert_eq!(Price::from_usd_per_million(-1.0, 1.0), None);
    }

    #[test]
    fn list_body_shape() {
        let c = Catalog::default();
        let v: serde_json::Value = serde_json::from_slice(&c.list_body(None)).unwrap();
        assert_eq!(v["object"], "list");
        assert_eq!(v["data"][0]["id"], DEFAULT_MODEL_ID);
        assert_eq!(v["data"][0]["object"], "model");
        assert_eq!(v["data"][0]["created"], 0);
        assert!(c.get(DEFAULT_MODEL_ID).is_some());
        assert!(c.get("gpt-4").is_none());
        let mut two = vec![Model::default_model()];
        two.push(Model {
            id: "other".into(),
            ..Model::default_model()
        });
        let c = Catalog::new(two.clone()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&c.list_body(None)).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        two.push(Model::default_model());
        assert!(Catalog::new(two).is_err());
    }

    #[test]
    fn aliases_reach_their_model_and_a_key_sees_only_its_models() {
        let c = Catalog::new(vec![
            Model {
                aliases: vec!["gpt-4o".into(), "claude-sonnet-4-5".into()],
                fallback: vec!["big".into()],
                ..Model::default_model()
            },
            Model {
                id: "big".into(),
                upstream_id: Some("provider/big".into()),
                ..Model::default_model()
            },
        ])
        .unwrap();
        assert_eq!(c.resolve("claude-sonnet-4-5"), Some(0));
        assert_eq!(c.resolve("big"), Some(1));
        assert_eq!(
            c.resolve("provider/big"),
            None,
            "a provider id is not a name"
        );
        let all = KeyView::from(&c);
        assert_eq!(
            all.find("gpt-4o").map(|m| m.id.as_str()),
            Some(DEFAULT_MODEL_ID)
        );
        // A key's list may name a model by an alias: it may call it by any
        // of its names.
        let list = ["gpt-4o".to_owned()];
        let only = c.seen_by(Some(&list));
        assert!(only.find(DEFAULT_MODEL_ID).is_some());
        assert!(only.find("big").is_none());
        let v: serde_json::Value = serde_json::from_slice(&c.list_body(Some(&list))).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        assert_eq!(v["data"][0]["id"], DEFAULT_MODEL_ID);
        assert_eq!(c.models()[1].provider_id(), "provider/big");
        for bad in [
            vec![Model {
                fallback: vec![DEFAULT_MODEL_ID.into()],
                ..Model::default_model()
            }],
            vec![Model {
                aliases: vec![DEFAULT_MODEL_ID.into()],
                ..Model::default_model()
            }],
            vec![Model {
                fallback: vec!["nope".into()],
                ..Model::default_model()
            }],
        ] {
            assert!(Catalog::new(bad).is_err());
        }
    }
}
