//! The model catalogue and its prices, as data.
//!
//! Adding a model is a configuration change: a [`Model`] more in the list.
//! `GET /v1/models` lists every entry; a request naming an id that is not here
//! gets 404 `model_not_found`.

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
    /// The id clients use.
    pub id: String,
    /// The `owned_by` label.
    pub owned_by: String,
    /// The id sent to the provider when it differs from `id`.
    pub upstream_id: Option<String>,
    /// Its prices.
    pub price: Price,
}

impl Model {
    /// The specification's model with its prices.
    pub fn default_model() -> Model {
        Model {
            id: DEFAULT_MODEL_ID.to_owned(),
            owned_by: DEFAULT_OWNER.to_owned(),
            upstream_id: None,
            price: Price::DEFAULT,
        }
    }
}

/// The catalogue: the models and the prebuilt `GET /v1/models` body.
#[derive(Debug, Clone)]
pub struct Catalog {
    models: Vec<Model>,
    list_body: Vec<u8>,
}

impl Default for Catalog {
    fn default() -> Self {
        // The default model is valid by construction.
        Catalog::new(vec![Model::default_model()]).expect("default catalogue is valid")
    }
}

impl Catalog {
    /// A catalogue of `models`: at least one, ids unique and non-empty.
    pub fn new(models: Vec<Model>) -> Result<Catalog, String> {
        if models.is_empty() {
            return Err("the model catalogue is empty".into());
        }
        for (i, m) in models.iter().enumerate() {
            if m.id.is_empty() {
                return Err(format!("model #{} has an empty id", i + 1));
            }
            if models[..i].iter().any(|o| o.id == m.id) {
                return Err(format!("model '{}' is listed twice", m.id));
            }
        }
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
                .iter()
                .map(|m| Entry {
                    id: &m.id,
                    object: "model",
                    created: 0,
                    owned_by: &m.owned_by,
                })
                .collect(),
        };
        // Plain strings and integers always serialize.
        let list_body = serde_json::to_vec(&list).expect("model list serializes");
        Ok(Catalog { models, list_body })
    }

    /// The model with this id.
    pub fn get(&self, id: &str) -> Option<&Model> {
        self.models.iter().find(|m| m.id == id)
    }

    /// All models, in configuration order.
    pub fn models(&self) -> &[Model] {
        &self.models
    }

    /// The `GET /v1/models` response body.
    pub fn list_body(&self) -> &[u8] {
        &self.list_body
    }
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
        let v: serde_json::Value = serde_json::from_slice(c.list_body()).unwrap();
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
        let v: serde_json::Value = serde_json::from_slice(c.list_body()).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        two.push(Model::default_model());
        assert!(Catalog::new(two).is_err());
    }
}
