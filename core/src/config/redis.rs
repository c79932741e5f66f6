//! Where the shared limiter's Redis is.

use crate::url::{Url, UrlError, host_for_url};

/// Where the shared limiter's Redis is: `redis://[[user]:password@]host[:port][/db]`
/// or `rediss://…` (TLS).
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    /// TLS (`rediss://`).
    pub tls: bool,
    /// Host name or IP literal.
    pub host: String,
    /// Port (6379 by default).
    pub port: u16,
    /// ACL user name, if given.
    pub user: Option<String>,
    /// Password, if given (never printed).
    pub password: Option<String>,
    /// Database number.
    pub db: u32,
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

impl RedisUrl {
    /// Parses a URL (percent-escapes are not decoded: write credentials
    /// plainly).
    pub fn parse(url: &str) -> Result<RedisUrl, String> {
        let u = Url::parse(url, &["redis", "rediss"]).map_err(|e| {
            match e {
                UrlError::Scheme => "the Redis URL must start with redis:// or rediss://",
                UrlError::Ipv6 => "the Redis URL has a bad IPv6 address",
                UrlError::Port => "the Redis URL has a bad port",
                UrlError::NoHost => "the Redis URL has no host",
                UrlError::QueryOrFragment => "the Redis URL must not have a query or fragment",
            }
            .to_owned()
        })?;
        let (user, password) = match u.userinfo {
            None => (None, None),
            Some(c) => match c.split_once(':') {
                Some((u, p)) => ((!u.is_empty()).then(|| u.to_owned()), Some(p.to_owned())),
                None => (None, Some(c.to_owned())),
            },
        };
        let db = match u.path.trim_start_matches('/') {
            "" => 0,
            db => db
                .parse()
                .map_err(|_| "the Redis URL's path must be a database number".to_owned())?,
        };
        Ok(RedisUrl {
            tls: u.scheme == "rediss",
            host: u.host.to_owned(),
            port: u.port.unwrap_or(6379),
            user,
            password,
            db,
        })
    }

    /// The URL without its password.
    pub fn display(&self) -> String {
        let creds = match (&self.user, &self.password) {
            (Some(u), Some(_)) => format!("{u}:***@"),
            (None, Some(_)) => "***@".to_owned(),
            (Some(u), None) => format!("{u}@"),
            (None, None) => String::new(),
        };
        format!(
            "{}://{creds}{}:{}/{}",
            if self.tls { "rediss" } else { "redis" },
            host_for_url(&self.host),
            self.port,
            self.db
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls() {
        let u = RedisUrl::parse("rediss://app:s3cret@cache.internal:6380/2").unwrap();
        assert_eq!(
            (
                u.tls,
                u.host.as_str(),
                u.port,
                u.user.as_deref(),
                u.password.as_deref(),
                u.db
            ),
            (true, "cache.internal", 6380, Some("app"), Some("s3cret"), 2)
        );
        assert_eq!(u.display(), "rediss://app:***@cache.internal:6380/2");
        assert!(!format!("{u:?}").contains("s3cret"));
        let u = RedisUrl::parse("redis://:pw@127.0.0.1").unwrap();
        assert_eq!(
            (u.user, u.password.as_deref(), u.port, u.db),
            (None, Some("pw"), 6379, 0)
        );
        let u = RedisUrl::parse("redis://[::1]:7000").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 7000));
        assert_eq!(u.display(), "redis://[::1]:7000/0");
        // Without a port (refused as a bad port before one URL reader).
        let u = RedisUrl::parse("redis://[::1]").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.db), ("::1", 6379, 0));
        let u = RedisUrl::parse("rediss://:pw@[fd00::5]/3").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port, u.password.as_deref(), u.db),
            (true, "fd00::5", 6379, Some("pw"), 3)
        );
        for bad in [
            "http://h",
            "redis://",
            "redis://h:x",
            "redis://h/zero",
            "redis://[::1",
            "redis://::1",
        ] {
            assert!(RedisUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
