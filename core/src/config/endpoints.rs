//! Where the provider is, and its key: its endpoints, from `[[upstream]]`
//! tables or the one `--upstream` URL.

use crate::secret::Secret;
use std::collections::HashMap;

use super::ConfigError;
use super::tables::Table;
use crate::catalog::Model;
use crate::dialect::splice::Continuation;
use crate::reasoning::ReasoningField;
use crate::url::{Url, UrlError, host_for_url};

/// Most endpoints a provider may have: the endpoint set keeps their
/// indices in the bits of a `u64`.
pub(crate) const MAX_ENDPOINTS: usize = 64;

/// The name of the one endpoint `--upstream` configures.
pub const DEFAULT_ENDPOINT: &str = "default";

/// One provider endpoint serving the model: where it is, its key, its share
/// of the traffic, and the model id it expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Its name (logs, metrics, the ledger, `GET /upstreams`).
    pub name: String,
    /// Where it is (its key in [`Target::api_key`]).
    pub target: Target,
    /// Its share of the requests, relative to the others' (at least 1).
    pub weight: u32,
    /// The model id this endpoint expects for every model it serves,
    /// when it names them differently (the `model` field is rewritten for
    /// it only).
    pub model: Option<String>,
    /// Its own names for particular models: (catalogue id, its name),
    /// before `model`.
    pub models: Vec<(String, String)>,
    /// Extra CA certificates (a PEM file) for its TLS.
    pub ca: Option<String>,
    /// Who runs it, as traces name it (`gen_ai.provider.name`: `openai`
    /// unless set, the API every endpoint speaks).
    pub provider: Option<String>,
    /// The member its provider reads an assistant message's reasoning
    /// from (`None`: the gateway's `reasoning_field`).
    pub reasoning_field: Option<ReasoningField>,
    /// How it continues a final assistant message: whether a stream cut
    /// mid-answer may be finished there (`--stream-resume`).
    pub continuation: Continuation,
}

impl EndpointConfig {
    /// The one endpoint of a `--upstream` URL.
    pub fn single(target: Target, ca: Option<String>) -> EndpointConfig {
        EndpointConfig {
            name: DEFAULT_ENDPOINT.to_owned(),
            target,
            weight: 1,
            model: None,
            models: Vec::new(),
            ca,
            provider: None,
            reasoning_field: None,
            continuation: Continuation::None,
        }
    }

    /// Who runs it, for traces' `gen_ai.provider.name`.
    pub fn provider_name(&self) -> &str {
        self.provider.as_deref().unwrap_or("openai")
    }

    /// The id this endpoint is sent for `model`: its own name for that
    /// model (`models`), else its name for every model (`model`), else
    /// the catalogue's provider id.
    pub fn model_name<'a>(&'a self, model: &'a Model) -> &'a str {
        self.models
            .iter()
            .find(|(id, _)| *id == model.id)
            .map(|(_, name)| name.as_str())
            .or(self.model.as_deref())
            .unwrap_or_else(|| model.provider_id())
    }
}

/// The fields an `[[upstream]]` table may have.
const FIELDS: [&str; 10] = [
    "name",
    "continuation",
    "reasoning_field",
    "url",
    "api_key_env",
    "weight",
    "model",
    "models",
    "ca",
    "provider",
];

/// The endpoints of the config file's `[[upstream]]` tables; `env` holds the
/// variables their `api_key_env` name. Every refusal is one line naming the
/// table and the field.
pub fn parse_endpoints(
    tables: &toml::Value,
    env: &HashMap<String, String>,
) -> Result<Vec<EndpointConfig>, ConfigError> {
    let toml::Value::Array(tables) = tables else {
        return Err(ConfigError(
            "config file: 'upstream' is a URL or a list of [[upstream]] tables".into(),
        ));
    };
    if tables.is_empty() {
        return Err(ConfigError(
            "config file: [[upstream]]: the pool has no endpoint".into(),
        ));
    }
    let most = MAX_ENDPOINTS;
    if tables.len() > most {
        return Err(ConfigError(format!(
            "config file: [[upstream]]: {} endpoints; a pool has at most {most}",
            tables.len()
        )));
    }
    let mut endpoints: Vec<EndpointConfig> = Vec::with_capacity(tables.len());
    for (i, table) in tables.iter().enumerate() {
        let endpoint = parse_endpoint(i + 1, table, env)?;
        if endpoints.iter().any(|e| e.name == endpoint.name) {
            return Err(ConfigError(format!(
                "config file: [[upstream]] #{} name: '{}' is the name of an earlier endpoint",
                i + 1,
                endpoint.name
            )));
        }
        endpoints.push(endpoint);
    }
    Ok(endpoints)
}

fn parse_endpoint(
    n: usize,
    table: &toml::Value,
    env: &HashMap<String, String>,
) -> Result<EndpointConfig, ConfigError> {
    let t = Table::open("upstream", n, table, &FIELDS)?;
    let bad = |field: &str, why: String| t.bad(field, why);
    let string = |field: &str| t.string(field);
    let name = string("name")?.ok_or_else(|| bad("name", "is missing".into()))?;
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        || name.len() > 64
    {
        return Err(bad(
            "name",
            format!("'{name}' must be 1 to 64 characters of a-z, A-Z, 0-9, '-', '_' and '.'"),
        ));
    }
    let url = string("url")?.ok_or_else(|| bad("url", "is missing".into()))?;
    let mut target = Target::parse(&url).map_err(|e| bad("url", e))?;
    if let Some(var) = string("api_key_env")? {
        match env.get(&var).filter(|v| !v.is_empty()) {
            Some(key) => target.api_key = Some(Secret::new(key.clone())),
            None => {
                return Err(bad(
                    "api_key_env",
                    format!("the environment variable {var} is not set"),
                ));
            }
        }
    }
    let weight = match t.get("weight") {
        None => 1,
        Some(toml::Value::Integer(w)) if (1..=1_000_000).contains(w) => *w as u32,
        Some(_) => {
            return Err(bad(
                "weight",
                "must be a whole number from 1 to 1000000".into(),
            ));
        }
    };
    let models = match t.get("models") {
        None => Vec::new(),
        Some(toml::Value::Table(m)) => {
            let mut names = Vec::with_capacity(m.len());
            for (model, name) in m {
                match name {
                    toml::Value::String(s) if !s.is_empty() => {
                        names.push((model.clone(), s.clone()))
                    }
                    _ => {
                        return Err(bad(
                            "models",
                            format!(
                                "'{model}' must map to a non-empty string (the endpoint's name for it)"
                            ),
                        ));
                    }
                }
            }
            names
        }
        Some(_) => {
            return Err(bad(
                "models",
                "must be a table of model id = the endpoint's name for it".into(),
            ));
        }
    };
    Ok(EndpointConfig {
        name,
        target,
        weight,
        model: string("model")?,
        models,
        ca: string("ca")?,
        provider: string("provider")?,
        continuation: match string("continuation")? {
            None => Continuation::None,
            Some(v) => Continuation::parse(&v).ok_or_else(|| {
                bad(
                    "continuation",
                    format!("'{v}' is not one of {}", Continuation::NAMES),
                )
            })?,
        },
        reasoning_field: match string("reasoning_field")? {
            None => None,
            Some(v) => Some(ReasoningField::parse(&v).ok_or_else(|| {
                bad(
                    "reasoning_field",
                    format!("'{v}' is not one of {}", ReasoningField::NAMES),
                )
            })?),
        },
    })
}

/// Where the provider is: `{scheme}://{host}:{port}{base_path}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https`.
    pub tls: bool,
    /// Host name or IP literal (no brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Path prefix including the version, e.g. `/v1` (no trailing slash).
    pub base_path: String,
    /// The provider's API key, sent as `Authorization: Bearer …`.
    pub api_key: Option<Secret>,
}

impl Target {
    /// Parses a base URL such as `https://api.provider.example/v1`.
    pub fn parse(url: &str) -> Result<Target, String> {
        let u = Url::parse(url, &["http", "https"]).map_err(|e| match e {
            UrlError::Scheme => format!("upstream URL '{url}' must start with http:// or https://"),
            UrlError::Ipv6 => format!("bad IPv6 address in '{url}'"),
            UrlError::Port => format!("bad port in '{url}'"),
            UrlError::NoHost => format!("upstream URL '{url}' has no host"),
            UrlError::QueryOrFragment => {
                format!("upstream URL '{url}' must not have a query or fragment")
            }
        })?;
        if u.userinfo.is_some() {
            return Err(
                "upstream URL must not carry credentials; use CHATGATE_UPSTREAM_API_KEY".into(),
            );
        }
        let tls = u.scheme == "https";
        Ok(Target {
            tls,
            host: u.host.to_owned(),
            port: u.port.unwrap_or(if tls { 443 } else { 80 }),
            base_path: u.path.trim_end_matches('/').to_owned(),
            api_key: None,
        })
    }

    /// The `Host` header value.
    pub fn host_header(&self) -> String {
        let host = host_for_url(&self.host);
        if self.port == if self.tls { 443 } else { 80 } {
            host.into_owned()
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// `scheme://host[:port]/base`, without secrets.
    pub fn display_url(&self) -> String {
        format!(
            "{}://{}{}",
            if self.tls { "https" } else { "http" },
            self.host_header(),
            self.base_path
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(text: &str, env: &[(&str, &str)]) -> Result<Vec<EndpointConfig>, String> {
        let file: toml::Table = toml::from_str(text).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        parse_endpoints(&file["upstream"], &env).map_err(|e| e.0)
    }

    #[test]
    fn an_endpoint_says_how_it_continues() {
        let p = endpoints(
            r#"
            [[upstream]]
            name = "vllm"
            url = "http://vllm:8000/v1"
            continuation = "continue_final_message"
            [[upstream]]
            name = "openai"
            url = "https://api.openai.com/v1"
            "#,
            &[],
        )
        .unwrap();
        assert_eq!(p[0].continuation, Continuation::ContinueFinalMessage);
        assert_eq!(p[1].continuation, Continuation::None, "the default");
        let e = endpoints(
            "[[upstream]]\nname = \"x\"\nurl = \"http://x/v1\"\ncontinuation = \"yes\"",
            &[],
        )
        .unwrap_err();
        assert!(
            e.contains("[[upstream]] #1") && e.contains("continuation") && e.contains("'yes'"),
            "{e}"
        );
    }

    #[test]
    fn endpoints_from_tables() {
        let p = endpoints(
            r#"
            [[upstream]]
            name = "east"
            url = "https://east.provider.example/v1"
            api_key_env = "EAST_KEY"
            weight = 3
            [[upstream]]
            name = "local"
            url = "http://127.0.0.1:9001/v1"
            model = "k3-local"
            ca = "/etc/ca.pem"
            "#,
            &[("EAST_KEY", "sk-east")],
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].name.as_str(), p[0].weight), ("east", 3));
        assert_eq!(
            p[0].target.api_key.as_ref().map(Secret::expose),
            Some("sk-east")
        );
        assert_eq!((p[1].weight, p[1].model.as_deref()), (1, Some("k3-local")));
        assert_eq!(
            (p[1].target.api_key.is_none(), p[1].ca.as_deref()),
            (true, Some("/etc/ca.pem"))
        );
    }

    #[test]
    fn every_bad_table_names_its_table_and_field() {
        let one = |body: &str| format!("[[upstream]]\n{body}");
        for (text, env, want) in [
            (
                "upstream = []".to_owned(),
                vec![],
                "[[upstream]]: the pool has no endpoint",
            ),
            (
                one("url = \"http://h/v1\""),
                vec![],
                "[[upstream]] #1 name: is missing",
            ),
            (
                one("name = \"a\""),
                vec![],
                "[[upstream]] #1 url: is missing",
            ),
            (
                one("name = \"a\"\nurl = \"ftp://h\""),
                vec![],
                "[[upstream]] #1 url: upstream URL 'ftp://h' must start with http:// or https://",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\napi_key_env = \"NOPE\""),
                vec![],
                "[[upstream]] #1 api_key_env: the environment variable NOPE is not set",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\napi_key_env = \"EMPTY\""),
                vec![("EMPTY", "")],
                "[[upstream]] #1 api_key_env: the environment variable EMPTY is not set",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\nweight = 0"),
                vec![],
                "[[upstream]] #1 weight: must be a whole number from 1 to 1000000",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\nweight = 1.5"),
                vec![],
                "[[upstream]] #1 weight: must be a whole number",
            ),
            (
                one("name = \"a b\"\nurl = \"http://h/v1\""),
                vec![],
                "[[upstream]] #1 name: 'a b' must be",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\nmodels = 3"),
                vec![],
                "[[upstream]] #1 models: must be a table of model id = the endpoint's name for it",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\nmodels = { m = 1 }"),
                vec![],
                "[[upstream]] #1 models: 'm' must map to a non-empty string",
            ),
            (
                one("name = \"a\"\nurl = \"http://h/v1\"\nkey = \"sk-x\""),
                vec![],
                "[[upstream]] #1 key: unknown field",
            ),
            (
                format!(
                    "{}\n{}",
                    one("name = \"a\"\nurl = \"http://h/v1\""),
                    one("name = \"a\"\nurl = \"http://g/v1\"")
                ),
                vec![],
                "[[upstream]] #2 name: 'a' is the name of an earlier endpoint",
            ),
        ] {
            let e = endpoints(&text, &env).unwrap_err();
            assert!(
                e.starts_with(&format!("config file: {want}")),
                "{e}\n{text}"
            );
            assert!(!e.contains('\n'), "one line: {e}");
            assert!(!e.contains("sk-x"), "no secret in: {e}");
        }
    }

    #[test]
    fn parses_upstream_urls() {
        let t = Target::parse("https://api.provider.example/v1").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.base_path.as_str()),
            (true, "api.provider.example", 443, "/v1")
        );
        assert_eq!(t.host_header(), "api.provider.example");
        let t = Target::parse("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!((t.tls, t.port, t.base_path.as_str()), (false, 8080, "/v1"));
        assert_eq!(t.host_header(), "127.0.0.1:8080");
        let t = Target::parse("http://[::1]:9/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9));
        assert_eq!(t.host_header(), "[::1]:9");
        let t = Target::parse("https://[2001:db8::7]/v1").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("2001:db8::7", 443));
        assert_eq!(t.host_header(), "[2001:db8::7]");
        assert_eq!(t.display_url(), "https://[2001:db8::7]/v1");
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@h/v1",
            "http://h:port/v1",
            "http://h/v1?x",
            "http://[::1/v1",
            "http://::1/v1",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Target::parse("http://u:p@h/v1").unwrap_err(),
            "upstream URL must not carry credentials; use CHATGATE_UPSTREAM_API_KEY"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let mut t = Target::parse("https://h/v1").unwrap();
        t.api_key = Some(Secret::new("sk-provider-secret"));
        assert!(!format!("{t:?}").contains("sk-provider-secret"));
        assert!(!t.display_url().contains("secret"));
    }
}
