//! The catalogue of the config file's `[[model]]` tables: each model's
//! prices, the `[[upstream]]` endpoints that serve it, its aliases and its
//! fallbacks. Every refusal is one line naming the table and the field.

use super::ConfigError;
use super::endpoints::EndpointConfig;
use super::tables::Table;
use crate::catalog::{Catalog, Model, Price};
use crate::reasoning::ReplayMode;

/// The fields a `[[model]]` table may have.
const FIELDS: [&str; 9] = [
    "id",
    "reasoning_replay",
    "owned_by",
    "upstream_id",
    "input_usd_per_million",
    "output_usd_per_million",
    "endpoints",
    "aliases",
    "fallback",
];

/// The catalogue: the `[[model]]` tables (`None`: the specification's one
/// model), served by `endpoints`; `owned_by` labels the models that set
/// no owner. The endpoints' own names for models (`[[upstream]]`'s
/// `models`) are checked against it and keyed by model id.
pub(super) fn catalog(
    tables: Option<toml::Value>,
    owned_by: &str,
    endpoints: &mut [EndpointConfig],
) -> Result<Catalog, ConfigError> {
    let models = match tables {
        None => {
            let mut m = Model::default_model();
            m.owned_by = owned_by.to_owned();
            vec![m]
        }
        Some(toml::Value::Array(tables)) => {
            let mut models = Vec::with_capacity(tables.len());
            for (i, t) in tables.iter().enumerate() {
                models.push(model(i + 1, t, owned_by, endpoints)?);
            }
            models
        }
        Some(_) => {
            return Err(ConfigError(
                "config file: 'model' is a list of [[model]] tables".into(),
            ));
        }
    };
    if models.is_empty() {
        return Err(ConfigError(
            "config file: [[model]]: the catalogue has no model".into(),
        ));
    }
    // Names are unique: said with the table.
    let mut aliases: Vec<(&str, usize)> = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let bad = |field: &str, why: String| {
            ConfigError(format!("config file: [[model]] #{} {field}: {why}", i + 1))
        };
        if let Some(earlier) = models[..i].iter().position(|o| o.id == m.id) {
            return Err(bad(
                "id",
                format!("'{}' is the id of [[model]] #{}", m.id, earlier + 1),
            ));
        }
        for alias in &m.aliases {
            if let Some(o) = models.iter().position(|o| o.id == *alias) {
                return Err(bad(
                    "aliases",
                    format!("'{alias}' is the id of [[model]] #{}", o + 1),
                ));
            }
            if let Some(&(_, o)) = aliases.iter().find(|(a, _)| a == alias) {
                return Err(bad(
                    "aliases",
                    format!("'{alias}' is already an alias of [[model]] #{o}"),
                ));
            }
            aliases.push((alias, i + 1));
        }
    }
    let mut models = models;
    for i in 0..models.len() {
        let bad = |field: &str, why: String| {
            ConfigError(format!("config file: [[model]] #{} {field}: {why}", i + 1))
        };
        let mut resolved: Vec<String> = Vec::with_capacity(models[i].fallback.len());
        for name in &models[i].fallback {
            let Some(target) = models
                .iter()
                .find(|o| o.id == *name || o.aliases.contains(name))
            else {
                return Err(bad(
                    "fallback",
                    format!("'{name}' is not the id or an alias of a [[model]]"),
                ));
            };
            if target.id == models[i].id {
                return Err(bad(
                    "fallback",
                    format!("'{name}' is this model; a model cannot fall back to itself"),
                ));
            }
            if resolved.contains(&target.id) {
                return Err(bad(
                    "fallback",
                    format!("'{name}' names model '{}' a second time", target.id),
                ));
            }
            resolved.push(target.id.clone());
        }
        models[i].fallback = resolved;
    }
    // Each endpoint's own names for models: keyed by model id.
    for (n, e) in endpoints.iter_mut().enumerate() {
        for (name, _) in &mut e.models {
            let Some(m) = models
                .iter()
                .find(|m| m.id == *name || m.aliases.contains(name))
            else {
                return Err(ConfigError(format!(
                    "config file: [[upstream]] #{} models: '{name}' is not the id or an alias of a [[model]]",
                    n + 1
                )));
            };
            name.clone_from(&m.id);
        }
    }
    Catalog::new(models).map_err(|e| ConfigError(format!("config file: [[model]]: {e}")))
}

/// The `n`th `[[model]]` table.
fn model(
    n: usize,
    table: &toml::Value,
    owned_by: &str,
    endpoints: &[EndpointConfig],
) -> Result<Model, ConfigError> {
    let t = Table::open("model", n, table, &FIELDS)?;
    let bad = |field: &str, why: String| t.bad(field, why);
    let string = |field: &str| t.string(field);
    let list = |field: &str| t.list(field);
    let usd = |field: &str, default: f64| -> Result<f64, ConfigError> {
        match t.get(field) {
            None => Ok(default),
            Some(toml::Value::Float(f)) => Ok(*f),
            Some(toml::Value::Integer(i)) => Ok(*i as f64),
            Some(_) => Err(bad(field, "must be a number of USD".into())),
        }
    };
    let id = string("id")?.ok_or_else(|| bad("id", "is missing".into()))?;
    let input = usd("input_usd_per_million", 2.85)?;
    let output = usd("output_usd_per_million", 14.25)?;
    let price = Price::from_usd_per_million(input, output).ok_or_else(|| {
        let field = if Price::from_usd_per_million(input, 0.0).is_none() {
            "input_usd_per_million"
        } else {
            "output_usd_per_million"
        };
        bad(field, "must be a non-negative number below 1e9".into())
    })?;
    let served = list("endpoints")?;
    if let Some(names) = &served {
        if names.is_empty() {
            return Err(bad(
                "endpoints",
                "names no endpoint; leave it out to serve the model on every endpoint".into(),
            ));
        }
        for (k, name) in names.iter().enumerate() {
            if !endpoints.iter().any(|e| e.name == *name) {
                let known: Vec<&str> = endpoints.iter().map(|e| e.name.as_str()).collect();
                return Err(bad(
                    "endpoints",
                    format!(
                        "'{name}' is not the name of an [[upstream]] table (endpoints: {})",
                        known.join(", ")
                    ),
                ));
            }
            if names[..k].contains(name) {
                return Err(bad("endpoints", format!("'{name}' is listed twice")));
            }
        }
    }
    Ok(Model {
        id,
        owned_by: string("owned_by")?.unwrap_or_else(|| owned_by.to_owned()),
        upstream_id: string("upstream_id")?,
        price,
        endpoints: served,
        aliases: list("aliases")?.unwrap_or_default(),
        fallback: list("fallback")?.unwrap_or_default(),
        reasoning_replay: match string("reasoning_replay")? {
            None => None,
            Some(v) => Some(ReplayMode::parse(&v).ok_or_else(|| {
                bad(
                    "reasoning_replay",
                    format!("'{v}' is not one of {}", ReplayMode::NAMES),
                )
            })?),
        },
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{ServeConfig, Sources};
    use crate::reasoning::ReplayMode;

    const POOL: &str = r#"
keys = "k"
[[upstream]]
name = "east"
url = "http://127.0.0.1:9001/v1"
models = { "big" = "provider/big-v2" }
[[upstream]]
name = "west"
url = "http://127.0.0.1:9002/v1"
"#;

    fn resolve(models: &str) -> Result<ServeConfig, String> {
        resolve_with("", models)
    }

    #[test]
    fn a_two_provider_catalogue() {
        let c = resolve(
            r#"
[[model]]
id = "small"
endpoints = ["west"]
aliases = ["gpt-4o-mini", "claude-haiku-4-5"]
fallback = ["large"]
[[model]]
id = "big"
aliases = ["large"]
endpoints = ["east"]
input_usd_per_million = 3
output_usd_per_million = 15.5
"#,
        )
        .unwrap();
        let cat = &c.gateway.catalog;
        let small = cat.get("small").unwrap();
        assert_eq!(small.endpoints.as_deref(), Some(&["west".to_owned()][..]));
        assert_eq!(small.fallback, ["big"], "an alias is resolved to its id");
        assert_eq!(cat.resolve("claude-haiku-4-5"), cat.index("small"));
        assert_eq!(cat.resolve("large"), cat.index("big"));
        let big = cat.get("big").unwrap();
        assert_eq!(big.price.cost_nano(1_000_000, 1_000_000), 18_500_000_000);
        let east = &c.gateway.endpoints[0];
        assert_eq!(east.model_name(big), "provider/big-v2");
        assert_eq!(east.model_name(small), "small");
    }

    /// `top` (top-level settings) before the pool, then `models`.
    fn resolve_with(top: &str, models: &str) -> Result<ServeConfig, String> {
        ServeConfig::resolve(Sources {
            flags: Default::default(),
            env: Default::default(),
            file: Some(format!("{top}\n{POOL}{models}")),
        })
        .map_err(|e| e.0)
    }

    #[test]
    fn reasoning_replay_is_per_model_with_the_gateways_default() {
        let c = resolve_with(
            "reasoning_replay = \"tool_calls\"\nreasoning_field = \"reasoning\"",
            "[[model]]\nid = \"kimi\"\n[[model]]\nid = \"big\"\nreasoning_replay = \"strip\"\n\
             [[model]]\nid = \"glm\"\nreasoning_replay = \"all\"\n",
        )
        .unwrap();
        let r = &c.gateway.reasoning;
        let cat = &c.gateway.catalog;
        let mode = |id: &str| r.replay_of(cat.get(id).unwrap());
        assert_eq!(mode("kimi"), ReplayMode::ToolCalls);
        assert_eq!(mode("big"), ReplayMode::Strip);
        assert_eq!(mode("glm"), ReplayMode::All);
        assert_eq!(
            r.field_of(&c.gateway.endpoints[0]),
            crate::reasoning::ReasoningField::Reasoning
        );
        // The default is the specification's.
        let c = resolve("[[model]]\nid = \"big\"").unwrap();
        assert_eq!(
            c.gateway
                .reasoning
                .replay_of(&c.gateway.catalog.models()[0]),
            ReplayMode::Strip
        );
        assert!(c.gateway.reasoning.secret.is_none());
        for (top, models, want) in [
            (
                "",
                "[[model]]\nid = \"big\"\nreasoning_replay = \"yes\"",
                "[[model]] #1 reasoning_replay: 'yes' is not one of strip, tool_calls or all",
            ),
            (
                "reasoning_replay = \"sometimes\"",
                "[[model]]\nid = \"big\"",
                "'reasoning_replay' in the config file = 'sometimes' is not valid: expected strip, tool_calls or all",
            ),
            (
                "reasoning_field = \"thoughts\"",
                "[[model]]\nid = \"big\"",
                "'reasoning_field' in the config file = 'thoughts' is not valid: expected reasoning_content or reasoning",
            ),
            (
                "signing_secret_env = \"NOT_SET_ANYWHERE\"",
                "[[model]]\nid = \"big\"",
                "signing_secret_env: the environment variable NOT_SET_ANYWHERE is not set",
            ),
        ] {
            let e = resolve_with(top, models).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn every_bad_table_names_its_table_and_field() {
        for (models, want) in [
            ("[[model]]\nowned_by = \"x\"", "[[model]] #1 id: is missing"),
            (
                "[[model]]\nid = \"a\"\nendpoint = [\"east\"]",
                "[[model]] #1 endpoint: unknown field",
            ),
            (
                "[[model]]\nid = \"a\"\nendpoints = [\"north\"]",
                "[[model]] #1 endpoints: 'north' is not the name of an [[upstream]] table (endpoints: east, west)",
            ),
            (
                "[[model]]\nid = \"a\"\nendpoints = []",
                "[[model]] #1 endpoints: names no endpoint",
            ),
            (
                "[[model]]\nid = \"a\"\nendpoints = [\"east\", \"east\"]",
                "[[model]] #1 endpoints: 'east' is listed twice",
            ),
            (
                "[[model]]\nid = \"a\"\naliases = \"b\"",
                "[[model]] #1 aliases: must be a list of non-empty strings",
            ),
            (
                "[[model]]\nid = \"a\"\n[[model]]\nid = \"a\"",
                "[[model]] #2 id: 'a' is the id of [[model]] #1",
            ),
            (
                "[[model]]\nid = \"a\"\n[[model]]\nid = \"b\"\naliases = [\"a\"]",
                "[[model]] #2 aliases: 'a' is the id of [[model]] #1",
            ),
            (
                "[[model]]\nid = \"a\"\naliases = [\"x\"]\n[[model]]\nid = \"b\"\naliases = [\"x\"]",
                "[[model]] #2 aliases: 'x' is already an alias of [[model]] #1",
            ),
            (
                "[[model]]\nid = \"a\"\nfallback = [\"c\"]",
                "[[model]] #1 fallback: 'c' is not the id or an alias of a [[model]]",
            ),
            (
                "[[model]]\nid = \"a\"\naliases = [\"x\"]\nfallback = [\"x\"]",
                "[[model]] #1 fallback: 'x' is this model",
            ),
            (
                "[[model]]\nid = \"a\"\nfallback = [\"b\", \"bee\"]\n[[model]]\nid = \"b\"\naliases = [\"bee\"]",
                "[[model]] #1 fallback: 'bee' names model 'b' a second time",
            ),
            (
                "[[model]]\nid = \"a\"\ninput_usd_per_million = -1",
                "[[model]] #1 input_usd_per_million: must be a non-negative number",
            ),
            (
                "[[model]]\nid = \"a\"\noutput_usd_per_million = \"1\"",
                "[[model]] #1 output_usd_per_million: must be a number of USD",
            ),
            // `models` of an endpoint names a model of the catalogue.
            (
                "[[model]]\nid = \"a\"",
                "[[upstream]] #1 models: 'big' is not the id or an alias of a [[model]]",
            ),
        ] {
            let e = resolve(models).unwrap_err();
            assert!(
                e.starts_with(&format!("config file: {want}")),
                "{e}\n{models}"
            );
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
