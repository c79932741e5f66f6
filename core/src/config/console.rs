//! The console's settings: the admin token that opens it, and single
//! sign-on, each checked with what it needs.

use super::ConfigError;
use super::settings::Resolver;
use crate::secret::Secret;

/// The admin token, from the variable `admin_token_env` names. The console
/// is on the admin listener: a token without one is refused, as is a token
/// short enough to guess.
pub(super) fn token(r: &Resolver) -> Result<Option<Secret>, ConfigError> {
    let Some((var, _)) = r.get("admin_token_env") else {
        return Ok(None);
    };
    if r.get("admin_listen").is_none() {
        return Err(ConfigError(
            "admin_token_env: the console is served on the admin listener; set admin_listen too"
                .into(),
        ));
    }
    match r.env.get(&var).filter(|v| !v.is_empty()) {
        None => Err(ConfigError(format!(
            "admin_token_env: the environment variable {var} is not set"
        ))),
        Some(t) if t.trim().chars().count() < 16 => Err(ConfigError(format!(
            "admin_token_env: the token in {var} is shorter than 16 characters; use a long random one (e.g. `openssl rand -hex 32`)"
        ))),
        Some(t) => Ok(Some(Secret::new(t.clone()))),
    }
}

/// Single sign-on, when `sso_issuer` is set: every setting it needs, or
/// the one that is missing.
pub(super) fn sso(
    r: &Resolver,
    console: bool,
) -> Result<Option<crate::console::SsoConfig>, ConfigError> {
    let Some((issuer, _)) = r.get("sso_issuer") else {
        for k in [
            "sso_client_id",
            "sso_client_secret_env",
            "sso_allowed",
            "sso_admins",
            "sso_redirect_url",
        ] {
            if r.get(k).is_some() {
                return Err(ConfigError(format!(
                    "{k}: single sign-on needs sso_issuer too"
                )));
            }
        }
        return Ok(None);
    };
    if !console {
        return Err(ConfigError(
            "sso_issuer: single sign-on opens the console, which needs admin_token_env (the token keeps working for automation)".into(),
        ));
    }
    if !issuer.starts_with("https://") && !issuer.starts_with("http://") {
        return Err(ConfigError(format!(
            "sso_issuer: '{issuer}' is not an http(s) URL"
        )));
    }
    let need = |k: &str| {
        r.get(k)
            .map(|(v, _)| v)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| ConfigError(format!("{k}: single sign-on (sso_issuer) needs it")))
    };
    let client_id = need("sso_client_id")?;
    let var = need("sso_client_secret_env")?;
    let secret = r.env.get(&var).filter(|v| !v.is_empty()).ok_or_else(|| {
        ConfigError(format!(
            "sso_client_secret_env: the environment variable {var} is not set"
        ))
    })?;
    let list = |k: &str| -> Vec<String> {
        r.get(k)
            .map(|(v, _)| {
                v.split(',')
                    .map(|e| e.trim().to_owned())
                    .filter(|e| !e.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (allowed, admins) = (list("sso_allowed"), list("sso_admins"));
    if allowed.is_empty() && admins.is_empty() {
        return Err(ConfigError(
            "sso_allowed: say who may sign in (sso_allowed and/or sso_admins: addresses or @domains)".into(),
        ));
    }
    Ok(Some(crate::console::SsoConfig {
        issuer,
        client_id,
        client_secret: Secret::new(secret.as_str()),
        allowed,
        admins,
        redirect_url: r.get("sso_redirect_url").map(|(v, _)| v),
        login_timeout_ms: r.duration("sso_login_timeout")?.as_millis() as u64,
    }))
}
