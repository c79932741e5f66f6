//! The one URL reader: `scheme://[userinfo@]host[:port][/path]`, as the
//! provider's base URL and the Redis URL are written.
//!
//! Hosts are names or IP literals; an IPv6 literal is written in brackets
//! (`http://[::1]:8080/v1`, `redis://[::1]`) and comes back without them.
//! Percent-escapes are not decoded, and a query or fragment is refused:
//! neither URL has a use for them.

/// A URL split into its parts, borrowed from the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Url<'a> {
    /// The scheme, as listed by the caller (`https`).
    pub(crate) scheme: &'a str,
    /// What comes before `@`, if anything.
    pub(crate) userinfo: Option<&'a str>,
    /// Host name or IP literal (an IPv6 one without its brackets).
    pub(crate) host: &'a str,
    /// The port, when written.
    pub(crate) port: Option<u16>,
    /// The path, from its `/` on (empty when there is none).
    pub(crate) path: &'a str,
}

/// Why a URL was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UrlError {
    /// Not one of the accepted schemes followed by `://`.
    Scheme,
    /// `[` without its `]`, or something other than `:port` after it.
    Ipv6,
    /// A port that is not a number from 0 to 65535.
    Port,
    /// No host.
    NoHost,
    /// A `?` or `#`.
    QueryOrFragment,
}

impl<'a> Url<'a> {
    /// Splits `url`, whose scheme must be one of `schemes`.
    pub(crate) fn parse(url: &'a str, schemes: &[&str]) -> Result<Url<'a>, UrlError> {
        let (scheme, rest) = url.split_once("://").ok_or(UrlError::Scheme)?;
        if !schemes.contains(&scheme) {
            return Err(UrlError::Scheme);
        }
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if rest.contains(['?', '#']) {
            return Err(UrlError::QueryOrFragment);
        }
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
            let (host, after) = bracketed.split_once(']').ok_or(UrlError::Ipv6)?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or(UrlError::Ipv6)?),
            };
            (host, port)
        } else {
            match hostport.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (hostport, None),
            }
        };
        if host.is_empty() {
            return Err(UrlError::NoHost);
        }
        let port = match port {
            None => None,
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                Some(p.parse().map_err(|_| UrlError::Port)?)
            }
            Some(_) => return Err(UrlError::Port),
        };
        Ok(Url {
            scheme,
            userinfo,
            host,
            port,
            path,
        })
    }
}

/// `host` as it is written in a URL or a `Host` header: an IPv6 literal in
/// brackets.
pub(crate) fn host_for_url(host: &str) -> std::borrow::Cow<'_, str> {
    if host.contains(':') {
        format!("[{host}]").into()
    } else {
        host.into()
    }
}

/// Decodes `%XX` escapes (`None` for a bad escape or a result that is not
/// UTF-8).
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The `name=value` pairs of a query string, decoded (`+` is a space);
/// a pair whose escapes do not decode is skipped.
pub(crate) fn query_pairs(query: &str) -> impl Iterator<Item = (String, String)> + '_ {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let decode = |s: &str| percent_decode(&s.replace('+', " "));
            Some((decode(name)?, decode(value)?))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: &[&str] = &["http", "https"];

    type Parts<'a> = (&'a str, Option<&'a str>, &'a str, Option<u16>, &'a str);

    fn parts(url: &str) -> Result<Parts<'_>, UrlError> {
        Url::parse(url, &["http", "https", "redis"])
            .map(|u| (u.scheme, u.userinfo, u.host, u.port, u.path))
    }

    #[test]
    fn names_addresses_and_ports() {
        assert_eq!(
            parts("https://api.provider.example/v1"),
            Ok(("https", None, "api.provider.example", None, "/v1"))
        );
        assert_eq!(
            parts("http://127.0.0.1:8080/v1/"),
            Ok(("http", None, "127.0.0.1", Some(8080), "/v1/"))
        );
        assert_eq!(
            parts("redis://u:p@cache:6380/2"),
            Ok(("redis", Some("u:p"), "cache", Some(6380), "/2"))
        );
        assert_eq!(parts("http://h"), Ok(("http", None, "h", None, "")));
    }

    #[test]
    fn ipv6_literals_with_and_without_a_port() {
        assert_eq!(
            parts("http://[::1]:9/x"),
            Ok(("http", None, "::1", Some(9), "/x"))
        );
        assert_eq!(
            parts("http://[::1]/x"),
            Ok(("http", None, "::1", None, "/x"))
        );
        assert_eq!(parts("redis://[::1]"), Ok(("redis", None, "::1", None, "")));
        assert_eq!(
            parts("redis://:pw@[fe80::1%25eth0]:7000"),
            Ok(("redis", Some(":pw"), "fe80::1%25eth0", Some(7000), ""))
        );
        assert_eq!(parts("http://[::1"), Err(UrlError::Ipv6));
        assert_eq!(parts("http://[::1]x/v1"), Err(UrlError::Ipv6));
        assert_eq!(parts("http://[::1]:/v1"), Err(UrlError::Port));
        assert_eq!(parts("http://[]:80/v1"), Err(UrlError::NoHost));
        // Unbracketed, the colons of an address read as a port.
        assert_eq!(parts("http://::1/v1"), Err(UrlError::NoHost));
        assert_eq!(parts("http://fe80::1/v1"), Err(UrlError::Port));
        assert_eq!(host_for_url("::1"), "[::1]");
        assert_eq!(host_for_url("h.example"), "h.example");
    }

    #[test]
    fn refusals() {
        for (url, why) in [
            ("ftp://x", UrlError::Scheme),
            ("http:/x", UrlError::Scheme),
            ("x", UrlError::Scheme),
            ("http://", UrlError::NoHost),
            ("http://:80/v1", UrlError::NoHost),
            ("http://u@/v1", UrlError::NoHost),
            ("http://h:port/v1", UrlError::Port),
            ("http://h:65536/v1", UrlError::Port),
            ("http://h:-1/v1", UrlError::Port),
            ("http://h:+1/v1", UrlError::Port),
            ("http://h/v1?x", UrlError::QueryOrFragment),
            ("http://h/v1#x", UrlError::QueryOrFragment),
            ("http://h?x", UrlError::QueryOrFragment),
        ] {
            assert_eq!(Url::parse(url, HTTP).err(), Some(why), "{url}");
        }
        assert_eq!(
            Url::parse("redis://h", HTTP).err(),
            Some(UrlError::Scheme),
            "a scheme not listed"
        );
    }
}
