//! Where the shared limiter's Redis is: one server, a primary that
//! Sentinels watch, or a cluster.

use super::ConfigError;
use super::settings::{Resolver, Source, bad, flag_name};
use crate::limits::Limits;
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

/// How the shared limiter reaches Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTopology {
    /// One server, at the URL's address (`--redis`).
    Server,
    /// The primary that these Sentinels know by `primary`
    /// (`--redis-sentinels`, `--redis-sentinel-master`).
    Sentinel {
        /// The Sentinels' addresses, asked in turn.
        sentinels: Vec<(String, u16)>,
        /// The name the Sentinels monitor it under.
        primary: String,
    },
    /// A Redis Cluster reached first through these nodes
    /// (`--redis-cluster`).
    Cluster {
        /// Any of the cluster's nodes.
        seeds: Vec<(String, u16)>,
    },
}

/// The shared limiter's Redis: how it is reached, and the credentials,
/// database and TLS every connection to it uses (`url`; its address is the
/// server's, or the first Sentinel's or seed's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRedis {
    /// Credentials, database, TLS.
    pub url: RedisUrl,
    /// One server, Sentinel or cluster.
    pub topology: RedisTopology,
}

impl SharedRedis {
    /// How it is reached, for the start-up line (no password).
    pub fn display(&self) -> String {
        let list = |v: &[(String, u16)]| {
            v.iter()
                .map(|(h, p)| format!("{}:{p}", host_for_url(h)))
                .collect::<Vec<_>>()
                .join(",")
        };
        match &self.topology {
            RedisTopology::Server => self.url.display(),
            RedisTopology::Sentinel { sentinels, primary } => format!(
                "'{primary}' via sentinels {} ({})",
                list(sentinels),
                self.url.display()
            ),
            RedisTopology::Cluster { seeds } => {
                format!("cluster {} ({})", list(seeds), self.url.display())
            }
        }
    }
}

/// A list of servers, `HOST:PORT,HOST:PORT` or, with credentials, a
/// database or TLS, `redis[s]://[[user]:password@]HOST:PORT,HOST:PORT[/db]`:
/// one URL per address, every part but the address shared, each read by
/// [`RedisUrl::parse`]. An address without a port gets `default_port`.
pub fn parse_redis_list(list: &str, default_port: u16) -> Result<Vec<RedisUrl>, String> {
    let (scheme, rest) = match list.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => ("redis", list),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (creds, hosts) = match authority.rsplit_once('@') {
        Some((c, h)) => (format!("{c}@"), h),
        None => (String::new(), authority),
    };
    let mut out: Vec<RedisUrl> = Vec::new();
    for host in hosts.split(',') {
        let host = host.trim();
        if host.is_empty() {
            return Err("an address in the list is empty".into());
        }
        // A port is the digits after the last colon outside brackets.
        let has_port = host.rsplit_once(':').is_some_and(|(h, p)| {
            !h.is_empty()
                && (!h.contains(':') || h.ends_with(']'))
                && !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
        });
        let mut url = RedisUrl::parse(&format!("{scheme}://{creds}{host}{path}"))?;
        if !has_port {
            url.port = default_port;
        }
        if out.iter().any(|u| u.host == url.host && u.port == url.port) {
            return Err(format!(
                "{}:{} is listed twice",
                host_for_url(&url.host),
                url.port
            ));
        }
        out.push(url);
    }
    Ok(out)
}

/// The shared limiter's Redis, if configured: one server (`redis`), a
/// primary behind Sentinels (`redis_sentinels` with
/// `redis_sentinel_master`), or a cluster (`redis_cluster`); one of them.
pub(super) fn shared(r: &Resolver) -> Result<Option<SharedRedis>, ConfigError> {
    let given: Vec<&str> = ["redis", "redis_sentinels", "redis_cluster"]
        .into_iter()
        .filter(|k| r.get(k).is_some())
        .collect();
    if given.len() > 1 {
        let names: Vec<String> = given
            .iter()
            .map(|k| format!("--{}", flag_name(k)))
            .collect();
        return Err(ConfigError(format!(
            "{} are exclusive: Redis is one server, a primary behind Sentinels, or a cluster",
            names.join(" and ")
        )));
    }
    let master = r.get("redis_sentinel_master");
    if let Some((name, src)) = &master {
        if r.get("redis_sentinels").is_none() {
            return Err(bad(
                "redis_sentinel_master",
                name,
                *src,
                "to be given with --redis-sentinels",
            ));
        }
        if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad(
                "redis_sentinel_master",
                name,
                *src,
                "the name the Sentinels monitor the primary under",
            ));
        }
    }
    let list = |key: &str, default_port: u16| -> Result<Option<Vec<RedisUrl>>, ConfigError> {
        match r.get(key) {
            None => Ok(None),
            Some((v, src)) => parse_redis_list(&v, default_port).map(Some).map_err(|e| {
                bad(
                    key,
                    "…",
                    src,
                    &format!(
                        "HOST:PORT,HOST:PORT or redis[s]://[[user]:password@]HOST:PORT,…[/db] ({})",
                        e.to_lowercase()
                    ),
                )
            }),
        }
    };
    let addrs = |v: &[RedisUrl]| v.iter().map(|u| (u.host.clone(), u.port)).collect();
    if let Some(sentinels) = list("redis_sentinels", 26379)? {
        let Some((primary, _)) = master else {
            return Err(ConfigError(
                "--redis-sentinels needs --redis-sentinel-master: the name the Sentinels monitor the primary under".into(),
            ));
        };
        return Ok(Some(SharedRedis {
            url: sentinels[0].clone(),
            topology: RedisTopology::Sentinel {
                sentinels: addrs(&sentinels),
                primary,
            },
        }));
    }
    if let Some(seeds) = list("redis_cluster", 6379)? {
        if seeds[0].db != 0 {
            let src = r.get("redis_cluster").map_or(Source::Default, |(_, s)| s);
            return Err(bad(
                "redis_cluster",
                "…",
                src,
                "database 0: a Redis Cluster has no other",
            ));
        }
        return Ok(Some(SharedRedis {
            url: seeds[0].clone(),
            topology: RedisTopology::Cluster {
                seeds: addrs(&seeds),
            },
        }));
    }
    match r.get("redis") {
        None => Ok(None),
        Some((url, src)) => RedisUrl::parse(&url)
            .map(|url| {
                Some(SharedRedis {
                    url,
                    topology: RedisTopology::Server,
                })
            })
            .map_err(|e| bad("redis", "…", src, &e.to_lowercase())),
    }
}

/// With Redis, the default limits must be within what the shared limiter's
/// script computes exactly (its doubles).
pub(super) fn within_shared_range(r: &Resolver, defaults: Limits) -> Result<(), ConfigError> {
    let max = crate::limits::SHARED_MAX_PER_MINUTE;
    for (key, n) in [
        ("default_rpm", defaults.requests_per_minute),
        ("default_tpm", defaults.tokens_per_minute),
    ] {
        if n > max {
            let src = r.get(key).map_or(Source::Default, |(_, s)| s);
            return Err(bad(
                key,
                &n.to_string(),
                src,
                &format!("at most {max} with --redis (the shared limiter's exact range)"),
            ));
        }
    }
    Ok(())
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

    #[test]
    fn redis_lists() {
        let v = parse_redis_list("10.0.0.1:26379,10.0.0.2,[::1]:5000", 26379).unwrap();
        let addrs: Vec<_> = v.iter().map(|u| (u.host.as_str(), u.port)).collect();
        assert_eq!(
            addrs,
            [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 5000)]
        );
        assert!(
            v.iter()
                .all(|u| !u.tls && u.password.is_none() && u.db == 0)
        );
        let v = parse_redis_list("rediss://app:pw@a:7000,b:7001/2", 6379).unwrap();
        assert_eq!(v.len(), 2);
        assert!(v.iter().all(|u| u.tls
            && u.user.as_deref() == Some("app")
            && u.password.as_deref() == Some("pw")
            && u.db == 2));
        assert_eq!((v[1].host.as_str(), v[1].port), ("b", 7001));
        let v = parse_redis_list("[fd00::1]", 6379).unwrap();
        assert_eq!((v[0].host.as_str(), v[0].port), ("fd00::1", 6379));
        for bad in [
            "",
            "a:1,,b:2",
            "a:1,a:1",
            "a:x",
            "http://a:1",
            "a:1/x",
            "a:1?q",
        ] {
            assert!(parse_redis_list(bad, 6379).is_err(), "{bad}");
        }
        let s = SharedRedis {
            url: RedisUrl::parse("redis://:pw@a:1").unwrap(),
            topology: RedisTopology::Sentinel {
                sentinels: vec![("a".into(), 1), ("::1".into(), 2)],
                primary: "mymaster".into(),
            },
        };
        assert_eq!(
            s.display(),
            "'mymaster' via sentinels a:1,[::1]:2 (redis://***@a:1/0)"
        );
    }
}
