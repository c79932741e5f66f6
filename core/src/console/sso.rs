//! Single sign-on to the console with OpenID Connect: the authorization
//! code flow with PKCE (S256), a `state` bound to the browser by a cookie,
//! and a `nonce` bound to the ID token.
//!
//! Pure: the runtime fetches the provider's discovery document and keys
//! ([`Sso::discovery_url`], [`Sso::set_provider`]) and posts the code to
//! its token endpoint ([`Exchange::token_request`]); everything decided is
//! decided here. The ID token is accepted only when its signature verifies
//! with one of the provider's keys (RS256 or ES256, never `none` or a
//! shared-secret algorithm), its issuer is the configured one, its
//! audience is this client (and `azp` is, when there are several), it has
//! not expired, and its nonce is the one this sign-in sent. Who may enter
//! is decided by the verified e-mail address: listed, or of a listed
//! domain; administrators are listed the same way, and others may look but
//! not change.

use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::secret::Secret;

/// The browser cookie that binds a sign-in's `state` to its browser.
pub const STATE_COOKIE: &str = "chatgate_sso";
/// Sign-ins waiting for their callback, at most.
const MAX_PENDING: usize = 256;
/// Clock skew allowed on `exp` and `iat`, in seconds.
const SKEW_SECS: u64 = 60;

/// The single sign-on settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SsoConfig {
    /// The issuer, exactly as the provider names itself.
    pub issuer: String,
    /// This client's id at the provider.
    pub client_id: String,
    /// Its secret (`client_secret_basic`).
    pub client_secret: Secret,
    /// Who may enter: e-mail addresses, or domains as `@example.com`.
    pub allowed: Vec<String>,
    /// Who may change keys (and enter), the same way.
    pub admins: Vec<String>,
    /// The callback URL registered at the provider; `None`: the admin
    /// listener's own `http://HOST/sso/callback`, from the request's
    /// `Host`.
    pub redirect_url: Option<String>,
    /// How long a sign-in may take at the provider.
    pub login_timeout_ms: u64,
}

/// What the provider's discovery document says, and its keys.
#[derive(Debug, Clone)]
pub(crate) struct Provider {
    authorization_endpoint: String,
    token_endpoint: String,
    keys: Vec<Jwk>,
}

/// One of the provider's signing keys.
#[derive(Debug, Clone, Deserialize)]
struct Jwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default, rename = "use")]
    usage: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
}

struct Pending {
    state: String,
    nonce: String,
    verifier: String,
    redirect_uri: String,
    until_ms: u64,
}

/// A code to exchange at the token endpoint, with what checks its answer.
pub struct Exchange {
    code: String,
    verifier: String,
    redirect_uri: String,
    nonce: String,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exchange { .. }")
    }
}

/// Who signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    /// The verified e-mail address.
    pub email: String,
    /// Listed as an administrator.
    pub admin: bool,
}

/// Single sign-on's state in a gateway process.
pub struct Sso {
    config: SsoConfig,
    pending: Mutex<Vec<Pending>>,
    provider: Mutex<Option<(Provider, u64)>>,
}

impl std::fmt::Debug for Sso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the pending sign-ins' state, nonce and verifier.
        f.debug_struct("Sso")
            .field("issuer", &self.config.issuer)
            .field("client_id", &self.config.client_id)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A value derived from the runtime's random `seed` for one purpose.
fn derive(seed: &[u8; 32], label: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(b"chatgate sso ");
    h.update(label.as_bytes());
    h.update(seed);
    h.finalize().into()
}

fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// An address matches an entry: the same address, or an address of the
/// entry's domain (`@example.com` or `example.com`); case-insensitive.
fn listed(email: &str, list: &[String]) -> bool {
    let email = email.to_ascii_lowercase();
    let domain = email.rsplit_once('@').map_or("", |(_, d)| d);
    list.iter().any(|entry| {
        let entry = entry.trim().to_ascii_lowercase();
        if entry.contains('@') && !entry.starts_with('@') {
            entry == email
        } else {
            entry.trim_start_matches('@') == domain
        }
    })
}

impl Sso {
    /// Single sign-on with these settings.
    pub fn new(config: SsoConfig) -> Sso {
        Sso {
            config,
            pending: Mutex::new(Vec::new()),
            provider: Mutex::new(None),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SsoConfig {
        &self.config
    }

    /// Where the provider's discovery document is.
    pub fn discovery_url(&self) -> String {
        format!(
            "{}/.well-known/openid-configuration",
            self.config.issuer.trim_end_matches('/')
        )
    }

    /// The provider is known, read at `now_ms` or after (`max_age_ms`
    /// before it, at most): its keys are fresh enough.
    pub fn has_provider(&self, now_ms: u64, max_age_ms: u64) -> bool {
        lock(&self.provider)
            .as_ref()
            .is_some_and(|(_, at)| now_ms.saturating_sub(*at) < max_age_ms)
    }

    /// Reads the discovery document; the URL of its keys.
    pub fn read_discovery(&self, body: &[u8]) -> Result<(String, String, String), String> {
        let d: Value =
            serde_json::from_slice(body).map_err(|e| format!("discovery document: {e}"))?;
        let field = |k: &str| {
            d[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the discovery document has no {k}"))
        };
        let issuer = field("issuer")?;
        if issuer != self.config.issuer {
            return Err(format!(
                "the discovery document names the issuer '{issuer}', not '{}'",
                self.config.issuer
            ));
        }
        Ok((
            field("authorization_endpoint")?,
            field("token_endpoint")?,
            field("jwks_uri")?,
        ))
    }

    /// The provider's endpoints (from [`Sso::read_discovery`]) and its keys
    /// (the JWKS document), read at `now_ms`.
    pub fn set_provider(
        &self,
        authorization_endpoint: String,
        token_endpoint: String,
        jwks: &[u8],
        now_ms: u64,
    ) -> Result<(), String> {
        #[derive(Deserialize)]
        struct Set {
            keys: Vec<Jwk>,
        }
        let set: Set =
            serde_json::from_slice(jwks).map_err(|e| format!("the provider's keys: {e}"))?;
        let keys: Vec<Jwk> = set
            .keys
            .into_iter()
            .filter(|k| k.usage.as_deref().is_none_or(|u| u == "sig"))
            .collect();
        if keys.is_empty() {
            return Err("the provider published no signing key".into());
        }
        *lock(&self.provider) = Some((
            Provider {
                authorization_endpoint,
                token_endpoint,
                keys,
            },
            now_ms,
        ));
        Ok(())
    }

    /// The callback URL for a request that came with `host` (its `Host`),
    /// `https` when it came over TLS.
    pub fn redirect_uri(&self, host: &str, tls: bool) -> String {
        // A host name, an address and a port: nothing else goes in a URL.
        let plain = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        let host = if plain { host } else { "localhost" };
        self.config.redirect_url.clone().unwrap_or_else(|| {
            let scheme = if tls { "https" } else { "http" };
            format!("{scheme}://{host}/sso/callback")
        })
    }

    /// Starts a sign-in at `now_ms` with the runtime's random `seed`: the
    /// provider's URL to send the browser to, and the `Set-Cookie` value
    /// that binds the sign-in to this browser. `None` when the provider is
    /// not known yet.
    pub fn begin(
        &self,
        seed: &[u8; 32],
        redirect_uri: &str,
        now_ms: u64,
    ) -> Option<(String, String)> {
        let authorize = lock(&self.provider)
            .as_ref()
            .map(|(p, _)| p.authorization_endpoint.clone())?;
        let state = B64.encode(derive(seed, "state"));
        let nonce = B64.encode(derive(seed, "nonce"));
        let verifier = B64.encode(derive(seed, "verifier"));
        let challenge = B64.encode(Sha256::digest(verifier.as_bytes()));
        let sep = if authorize.contains('?') { '&' } else { '?' };
        let url = format!(
            "{authorize}{sep}response_type=code&client_id={}&redirect_uri={}&scope=openid%20email&state={state}&nonce={nonce}&code_challenge={challenge}&code_challenge_method=S256",
            urlencode(&self.config.client_id),
            urlencode(redirect_uri),
        );
        let secs = self.config.login_timeout_ms / 1000;
        // Lax: the provider sends the browser back with a top-level GET
        // from its own site, which a Strict cookie would not follow.
        let cookie =
            format!("{STATE_COOKIE}={state}; Path=/sso; Max-Age={secs}; HttpOnly; SameSite=Lax");
        let mut pending = lock(&self.pending);
        pending.retain(|p| p.until_ms > now_ms);
        if pending.len() >= MAX_PENDING {
            pending.remove(0);
        }
        pending.push(Pending {
            state,
            nonce,
            verifier,
            redirect_uri: redirect_uri.to_owned(),
            until_ms: now_ms + self.config.login_timeout_ms,
        });
        Some((url, cookie))
    }

    /// The provider sent the browser back with `query` and `cookie` at
    /// `now_ms`: the code to exchange, or why not. The sign-in's state is
    /// used up either way once it is matched.
    pub fn callback(
        &self,
        query: &str,
        cookie: Option<&str>,
        now_ms: u64,
    ) -> Result<Exchange, String> {
        let param = |name: &str| {
            query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (k == name).then(|| crate::url::percent_decode(&v.replace('+', " ")))?
            })
        };
        if let Some(error) = param("error") {
            let why = param("error_description").unwrap_or_default();
            // The provider's words, as printable text of a sensible length.
            let clean =
                |s: String| -> String { s.chars().filter(|c| !c.is_control()).take(200).collect() };
            return Err(format!(
                "the identity provider refused the sign-in: {} {}",
                clean(error),
                clean(why)
            )
            .trim_end()
            .to_owned());
        }
        let state = param("state").ok_or("the answer has no state")?;
        let code = param("code").ok_or("the answer has no code")?;
        let bound = cookie.and_then(|c| {
            c.split(';').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == STATE_COOKIE).then_some(v.to_owned())
            })
        });
        let mut pending = lock(&self.pending);
        let Some(i) = pending.iter().position(|p| p.state == state) else {
            return Err("this sign-in is not one this gateway started (or it was already used): start again".into());
        };
        let p = pending.remove(i);
        if p.until_ms <= now_ms {
            return Err("this sign-in took too long: start again".into());
        }
        if bound.as_deref() != Some(p.state.as_str()) {
            return Err("this sign-in was started in another browser: start again".into());
        }
        Ok(Exchange {
            code,
            verifier: p.verifier,
            redirect_uri: p.redirect_uri,
            nonce: p.nonce,
        })
    }

    /// The token request for `exchange`: the token endpoint's URL, the
    /// `Authorization` value and the form body.
    pub fn token_request(&self, exchange: &Exchange) -> Option<(String, String, String)> {
        let endpoint = lock(&self.provider)
            .as_ref()
            .map(|(p, _)| p.token_endpoint.clone())?;
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            urlencode(&self.config.client_id),
            urlencode(self.config.client_secret.expose())
        ));
        let body = format!(
            "grant_type=authorization_code&code={}&redirect_uri={}&code_verifier={}",
            urlencode(&exchange.code),
            urlencode(&exchange.redirect_uri),
            exchange.verifier
        );
        Some((endpoint, format!("Basic {basic}"), body))
    }

    /// The token endpoint answered `status` with `body` at `now_ms`: who
    /// signed in, when the ID token holds and they may enter.
    pub fn finish(
        &self,
        exchange: &Exchange,
        status: u16,
        body: &[u8],
        now_ms: u64,
    ) -> Result<SignedIn, String> {
        let answer: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if status != 200 {
            let error = answer["error"].as_str().unwrap_or("no error code");
            return Err(format!(
                "the identity provider refused the code ({status}, {error})"
            ));
        }
        let token = answer["id_token"]
            .as_str()
            .ok_or("the identity provider's answer has no id_token")?;
        let claims = {
            let provider = lock(&self.provider);
            let (p, _) = provider
                .as_ref()
                .ok_or("the identity provider is not known")?;
            verify(token, &p.keys)?
        };
        self.check_claims(&claims, &exchange.nonce, now_ms / 1000)
    }

    /// What `email` may do under the lists in force: `Some(true)` change,
    /// `Some(false)` look, `None` not enter (the lists may have changed
    /// since the session opened).
    pub fn role_of(&self, email: &str) -> Option<bool> {
        if listed(email, &self.config.admins) {
            Some(true)
        } else if listed(email, &self.config.allowed) {
            Some(false)
        } else {
            None
        }
    }

    fn check_claims(&self, c: &Value, nonce: &str, now: u64) -> Result<SignedIn, String> {
        if c["iss"].as_str() != Some(self.config.issuer.as_str()) {
            return Err("the ID token is from another issuer".into());
        }
        let id = self.config.client_id.as_str();
        let audience_ok = match &c["aud"] {
            Value::String(a) => a == id,
            Value::Array(list) => {
                list.iter().any(|a| a == id) && (list.len() == 1 || c["azp"].as_str() == Some(id))
            }
            _ => false,
        };
        if !audience_ok || c["azp"].as_str().is_some_and(|azp| azp != id) {
            return Err("the ID token is for another client".into());
        }
        let exp = c["exp"].as_u64().ok_or("the ID token has no expiry")?;
        if exp + SKEW_SECS <= now {
            return Err("the ID token has expired".into());
        }
        if c["iat"].as_u64().is_some_and(|iat| iat > now + SKEW_SECS)
            || c["nbf"].as_u64().is_some_and(|nbf| nbf > now + SKEW_SECS)
        {
            return Err("the ID token is not valid yet".into());
        }
        if c["nonce"].as_str() != Some(nonce) {
            return Err("the ID token is not for this sign-in (nonce)".into());
        }
        let email = c["email"]
            .as_str()
            .ok_or("the ID token has no e-mail address (ask for the email scope)")?;
        // Only an address the provider says it verified: a provider that
        // does not say so may let users set their own.
        let verified = matches!(&c["email_verified"], Value::Bool(true))
            || c["email_verified"].as_str() == Some("true");
        if !verified {
            return Err(format!(
                "{email} is not an address the identity provider says it verified (email_verified)"
            ));
        }
        let Some(admin) = self.role_of(email) else {
            return Err(format!("{email} may not enter this console"));
        };
        Ok(SignedIn {
            email: email.to_owned(),
            admin,
        })
    }
}

/// The claims of a JWS-signed JWT whose signature one of `keys` verifies.
fn verify(token: &str, keys: &[Jwk]) -> Result<Value, String> {
    let bad = || "the ID token is not a signed JWT".to_owned();
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let header: Value =
        serde_json::from_slice(&B64.decode(h).map_err(|_| bad())?).map_err(|_| bad())?;
    let payload = B64.decode(p).map_err(|_| bad())?;
    let signature = B64.decode(s).map_err(|_| bad())?;
    let alg = header["alg"].as_str().unwrap_or("");
    let kid = header["kid"].as_str();
    let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
    let (kty, algorithm): (&str, &dyn ring::signature::VerificationAlgorithm) = match alg {
        "RS256" => ("RSA", &ring::signature::RSA_PKCS1_2048_8192_SHA256),
        "ES256" => ("EC", &ring::signature::ECDSA_P256_SHA256_FIXED),
        other => {
            return Err(format!(
                "the ID token is signed with {other:?}, not RS256 or ES256"
            ));
        }
    };
    let candidates = keys.iter().filter(|k| {
        k.kty == kty
            && k.alg.as_deref().is_none_or(|a| a == alg)
            && (kid.is_none() || k.kid.as_deref() == kid)
    });
    for k in candidates {
        let ok = match kty {
            "RSA" => {
                let (Some(n), Some(e)) = (k.n.as_deref(), k.e.as_deref()) else {
                    continue;
                };
                let (Ok(n), Ok(e)) = (B64.decode(n), B64.decode(e)) else {
                    continue;
                };
                ring::signature::RsaPublicKeyComponents { n: &n, e: &e }
                    .verify(
                        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
                        signed,
                        &signature,
                    )
                    .is_ok()
            }
            _ => {
                let (Some("P-256"), Some(x), Some(y)) =
                    (k.crv.as_deref(), k.x.as_deref(), k.y.as_deref())
                else {
                    continue;
                };
                let (Ok(x), Ok(y)) = (B64.decode(x), B64.decode(y)) else {
                    continue;
                };
                let mut point = vec![4u8];
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                ring::signature::UnparsedPublicKey::new(algorithm, &point)
                    .verify(signed, &signature)
                    .is_ok()
            }
        };
        if ok {
            return serde_json::from_slice(&payload).map_err(|_| bad());
        }
    }
    Err("the ID token's signature does not verify with the identity provider's keys".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
    use serde_json::json;

    fn config() -> SsoConfig {
        SsoConfig {
            issuer: "https://id.example".into(),
            client_id: "chatgate".into(),
            client_secret: Secret::new("s3cret"),
            allowed: vec!["@example.com".into(), "guest@other.org".into()],
            admins: vec!["boss@example.com".into()],
            redirect_url: None,
            login_timeout_ms: 600_000,
        }
    }

    /// An ES256 key pair and its JWK.
    fn key() -> (EcdsaKeyPair, Value) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let public = pair.public_key().as_ref().to_vec();
        let jwk = json!({
            "kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
            "x": B64.encode(&public[1..33]), "y": B64.encode(&public[33..]),
        });
        (pair, jwk)
    }

    fn sign(pair: &EcdsaKeyPair, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            B64.encode(header.to_string()),
            B64.encode(claims.to_string())
        );
        let sig = pair.sign(&SystemRandom::new(), input.as_bytes()).unwrap();
        format!("{input}.{}", B64.encode(sig.as_ref()))
    }

    /// A provider with `jwk`, and a sign-in started and called back.
    fn signed_in_flow(jwk: &Value) -> (Sso, Exchange) {
        let sso = Sso::new(config());
        let discovery = json!({
            "issuer": "https://id.example", "authorization_endpoint": "https://id.example/auth",
            "token_endpoint": "https://id.example/token", "jwks_uri": "https://id.example/jwks",
        });
        let (a, t, _) = sso
            .read_discovery(discovery.to_string().as_bytes())
            .unwrap();
        sso.set_provider(a, t, json!({ "keys": [jwk] }).to_string().as_bytes(), 0)
            .unwrap();
        let (url, cookie) = sso
            .begin(&[7; 32], "http://127.0.0.1:9/sso/callback", 1_000)
            .unwrap();
        assert!(url.starts_with("https://id.example/auth?response_type=code&client_id=chatgate"));
        assert!(
            url.contains("code_challenge_method=S256")
                && url.contains("redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fsso%2Fcallback")
        );
        assert!(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly"));
        let state = url
            .split("state=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap();
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let ex = sso
            .callback(&format!("code=abc&state={state}"), Some(&cookie), 2_000)
            .unwrap();
        (sso, ex)
    }

    fn claims(ex: &Exchange, email: &str) -> Value {
        json!({
            "iss": "https://id.example", "aud": "chatgate", "exp": 4_000_000_000u64, "iat": 1,
            "nonce": ex.nonce, "email": email, "email_verified": true, "sub": "u1",
        })
    }

    #[test]
    fn a_good_token_signs_in_and_the_lists_decide() {
        let (pair, jwk) = key();
        let (sso, ex) = signed_in_flow(&jwk);
        let (url, auth, body) = sso.token_request(&ex).unwrap();
        assert_eq!(url, "https://id.example/token");
        assert_eq!(
            auth,
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode("chatgate:s3cret")
            )
        );
        assert!(body.contains("code=abc") && body.contains("code_verifier="));
        let h = json!({"alg": "ES256", "kid": "k1"});
        let answer =
            |email: &str| json!({"id_token": sign(&pair, &h, &claims(&ex, email))}).to_string();
        let who = |email: &str| sso.finish(&ex, 200, answer(email).as_bytes(), 3_000);
        assert_eq!(
            who("boss@example.com"),
            Ok(SignedIn {
                email: "boss@example.com".into(),
                admin: true
            })
        );
        assert_eq!(who("Dev@Example.com").map(|s| s.admin), Ok(false));
        assert_eq!(who("guest@other.org").map(|s| s.admin), Ok(false));
        assert!(
            who("mallory@other.org")
                .unwrap_err()
                .contains("may not enter")
        );
        assert!(who("x@example.com.evil").is_err());
    }

    #[test]
    fn bad_tokens_are_refused() {
        let (pair, jwk) = key();
        let (other, _) = key();
        let (sso, ex) = signed_in_flow(&jwk);
        let h = json!({"alg": "ES256", "kid": "k1"});
        let finish = |token: String| {
            sso.finish(
                &ex,
                200,
                json!({"id_token": token}).to_string().as_bytes(),
                1_000_000,
            )
            .unwrap_err()
        };
        let good = claims(&ex, "dev@example.com");
        let with = |k: &str, v: Value| {
            let mut c = good.clone();
            c[k] = v;
            c
        };
        assert!(finish(sign(&other, &h, &good)).contains("signature"));
        assert!(finish(sign(&pair, &h, &with("iss", json!("https://evil")))).contains("issuer"));
        assert!(finish(sign(&pair, &h, &with("aud", json!("someone-else")))).contains("client"));
        assert!(finish(sign(&pair, &h, &with("aud", json!(["chatgate", "x"])))).contains("client"));
        assert!(finish(sign(&pair, &h, &with("exp", json!(2)))).contains("expired"));
        assert!(finish(sign(&pair, &h, &with("nonce", json!("other")))).contains("nonce"));
        assert!(
            finish(sign(&pair, &h, &with("email_verified", json!(false)))).contains("verified")
        );
        assert!(finish(sign(&pair, &h, &with("email_verified", Value::Null))).contains("verified"));
        assert!(finish(sign(&pair, &h, &with("azp", json!("other")))).contains("client"));
        assert!(
            finish(sign(&pair, &h, &with("nbf", json!(4_000_000_000u64))))
                .contains("not valid yet")
        );
        // No algorithm, or a shared-secret one, is never accepted.
        let none = format!(
            "{}.{}.",
            B64.encode(json!({"alg": "none"}).to_string()),
            B64.encode(good.to_string())
        );
        assert!(finish(none).contains("not RS256 or ES256"));
        assert!(finish(sign(&pair, &json!({"alg": "HS256"}), &good)).contains("not RS256"));
        assert!(finish("a.b".into()).contains("not a signed JWT"));
        assert!(
            sso.finish(&ex, 400, br#"{"error":"invalid_grant"}"#, 3_000)
                .unwrap_err()
                .contains("invalid_grant")
        );
    }

    #[test]
    fn a_state_is_used_once_in_its_own_browser_and_in_time() {
        let (_, jwk) = key();
        let sso = Sso::new(SsoConfig {
            login_timeout_ms: 1_000,
            ..config()
        });
        sso.set_provider(
            "https://id.example/auth".into(),
            "https://id.example/token".into(),
            json!({ "keys": [jwk] }).to_string().as_bytes(),
            0,
        )
        .unwrap();
        let start = |seed: u8| {
            let (url, cookie) = sso.begin(&[seed; 32], "http://h/sso/callback", 0).unwrap();
            let state = url
                .split("state=")
                .nth(1)
                .unwrap()
                .split('&')
                .next()
                .unwrap()
                .to_owned();
            (state, cookie.split(';').next().unwrap().to_owned())
        };
        let (s1, c1) = start(1);
        let q = |s: &str| format!("code=c&state={s}");
        assert!(
            sso.callback(&q("forged"), Some(&c1), 10)
                .unwrap_err()
                .contains("not one this gateway started")
        );
        let (s2, _) = start(2);
        assert!(
            sso.callback(&q(&s2), Some(&c1), 10)
                .unwrap_err()
                .contains("another browser")
        );
        assert!(sso.callback(&q(&s1), Some(&c1), 10).is_ok());
        assert!(sso.callback(&q(&s1), Some(&c1), 10).is_err(), "used once");
        let (s3, c3) = start(3);
        assert!(
            sso.callback(&q(&s3), Some(&c3), 1_000)
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            sso.callback("error=access_denied&state=x", None, 0)
                .unwrap_err()
                .contains("access_denied")
        );
    }
}
