//! Where the provider is, and its key.

use crate::url::{Url, UrlError, host_for_url};

/// A secret string (the provider's API key): never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// Where the provider is: `{scheme}://{host}:{port}{base_path}/chat/completions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTarget {
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

impl UpstreamTarget {
    /// Parses a base URL such as `https://api.provider.example/v1`.
    pub fn parse(url: &str) -> Result<UpstreamTarget, String> {
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
        Ok(UpstreamTarget {
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

    #[test]
    fn parses_upstream_urls() {
        let t = UpstreamTarget::parse("https://api.provider.example/v1").unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.base_path.as_str()),
            (true, "api.provider.example", 443, "/v1")
        );
        assert_eq!(t.host_header(), "api.provider.example");
        let t = UpstreamTarget::parse("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!((t.tls, t.port, t.base_path.as_str()), (false, 8080, "/v1"));
        assert_eq!(t.host_header(), "127.0.0.1:8080");
        let t = UpstreamTarget::parse("http://[::1]:9/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 9));
        assert_eq!(t.host_header(), "[::1]:9");
        let t = UpstreamTarget::parse("https://[2001:db8::7]/v1").unwrap();
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
            assert!(UpstreamTarget::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            UpstreamTarget::parse("http://u:p@h/v1").unwrap_err(),
            "upstream URL must not carry credentials; use CHATGATE_UPSTREAM_API_KEY"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let mut t = UpstreamTarget::parse("https://h/v1").unwrap();
        t.api_key = Some(Secret::new("sk-provider-secret"));
        assert!(!format!("{t:?}").contains("sk-provider-secret"));
        assert!(!t.display_url().contains("secret"));
    }
}
