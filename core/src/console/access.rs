//! Who may read the console: the admin token (`--admin-token-env`),
//! presented as `Authorization: Bearer …` or once in the login form, which
//! opens a session kept in an `HttpOnly`, `SameSite=Strict` cookie.
//!
//! The token is kept only as its SHA-256 digest, and what is presented is
//! digested too, so the comparison is of equal lengths and in constant time
//! whatever was sent. Sessions are 32 random bytes the runtime supplies,
//! kept in memory (a restart asks for the token again), at most
//! [`MAX_SESSIONS`] (the oldest goes first), each for [`SESSION_SECS`].

use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::auth::{constant_time_eq, hex, parse_hex32 as unhex};

/// The session cookie's name.
pub const COOKIE: &str = "chatgate_console";
/// How long a session lasts.
pub const SESSION_SECS: u64 = 12 * 3600;
/// Most sessions open at once.
pub(super) const MAX_SESSIONS: usize = 64;

/// The admin token's digest and the sessions it opened.
pub struct Access {
    token: [u8; 32],
    /// Who presents the token, in the audit trail: `token:` and the name
    /// of the variable it is in.
    token_actor: String,
    /// Open sessions, oldest first.
    sessions: Mutex<Vec<Session>>,
    /// Sessions opened and closed here, for the runtime to write to the
    /// shared store (only while [`Access::persist`] is on).
    outbox: Mutex<Vec<SessionChange>>,
    persist: std::sync::atomic::AtomicBool,
    /// Wrong tokens, by address.
    throttle: super::Throttle,
}

struct Session {
    /// SHA-256 of its id: the cookie holds the id, nothing else does.
    digest: [u8; 32],
    /// When it expires (Unix ms).
    until: u64,
    actor: String,
    admin: bool,
    /// Seen in the shared store: gone from it means closed elsewhere.
    stored: bool,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the token's digest nor the sessions'.
        f.debug_struct("Access")
            .field("token_actor", &self.token_actor)
            .finish_non_exhaustive()
    }
}

/// A session as the shared store keeps it (never its id: its digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSession {
    /// SHA-256 of the session's id.
    pub digest: [u8; 32],
    /// When it expires (Unix ms).
    pub until_ms: u64,
    /// Who: `token:NAME` or `user:EMAIL`.
    pub actor: String,
    /// May change keys.
    pub admin: bool,
}

impl StoredSession {
    /// A digest as the store writes it: 64 hexadecimal digits.
    pub fn hex(digest: &[u8; 32]) -> String {
        hex(digest)
    }

    /// A digest as the store wrote it.
    pub fn unhex(text: &str) -> Option<[u8; 32]> {
        unhex(text)
    }
}

/// A change to the sessions, for the shared store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionChange {
    /// A session was opened.
    Opened(StoredSession),
    /// The session with this digest was closed.
    Closed([u8; 32]),
}

/// A session's digest: of its id and the admin token's digest, so that a
/// new admin token ends every session, here and in the shared store.
fn digest_of(token: &[u8; 32], id: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(token);
    h.update(id);
    h.finalize().into()
}

/// Who a request to the console or the admin API comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Who {
    /// In the audit trail: `token:VARIABLE` or `user:EMAIL`.
    pub actor: String,
    /// May change keys (else may only look).
    pub admin: bool,
    /// With a session cookie: the CSRF token its state-changing requests
    /// must carry in `X-CSRF-Token` (none with a bearer token, which a
    /// browser does not send by itself).
    pub csrf: Option<String>,
}

impl Who {
    /// A state-changing request may go on: a bearer token, or a session
    /// whose CSRF token is `presented`.
    pub fn may_submit(&self, presented: Option<&str>) -> bool {
        match (&self.csrf, presented) {
            (None, _) => true,
            (Some(c), Some(p)) => constant_time_eq(
                &Sha256::digest(c.as_bytes()),
                &Sha256::digest(p.trim().as_bytes()),
            ),
            (Some(_), None) => false,
        }
    }
}

/// The CSRF token of a session: derived from its id's digest, which only
/// the session's cookie (and the store, where kept) can give.
fn csrf_of(digest: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"chatgate csrf ");
    h.update(digest);
    hex(&h.finalize())
}

impl Access {
    /// Access with this admin token (surrounding whitespace is not part
    /// of it, here or where it is presented).
    pub fn new(token: &str) -> Access {
        Access::named(token, "admin")
    }

    /// Access with this admin token, which the audit trail calls
    /// `token:{name}`.
    pub fn named(token: &str, name: &str) -> Access {
        Access {
            token: Sha256::digest(token.trim().as_bytes()).into(),
            token_actor: format!("token:{name}"),
            sessions: Mutex::new(Vec::new()),
            outbox: Mutex::new(Vec::new()),
            persist: std::sync::atomic::AtomicBool::new(false),
            throttle: super::Throttle::default(),
        }
    }

    /// The failed logins by address.
    pub fn throttle(&self) -> &super::Throttle {
        &self.throttle
    }

    /// Whether the request presents a token (a `Bearer` one): a guess,
    /// when it is wrong.
    pub fn presents_token(authorization: Option<&str>) -> bool {
        authorization.and_then(bearer).is_some()
    }

    /// The token is `presented`.
    pub fn is_token(&self, presented: &[u8]) -> bool {
        let d: [u8; 32] = Sha256::digest(presented.trim_ascii()).into();
        constant_time_eq(&d, &self.token)
    }

    /// Who the request comes from: the admin token (`Bearer`), or the
    /// session its cookie names, still open at `unix_ms`; `None` for
    /// neither.
    pub fn who(
        &self,
        authorization: Option<&str>,
        cookie: Option<&str>,
        unix_ms: u64,
    ) -> Option<Who> {
        if let Some(token) = authorization.and_then(bearer) {
            return self.is_token(token.as_bytes()).then(|| Who {
                actor: self.token_actor.clone(),
                admin: true,
                csrf: None,
            });
        }
        let id = cookie.and_then(session_cookie).and_then(unhex)?;
        let digest = digest_of(&self.token, &id);
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| s.until > unix_ms);
        // Every open session is compared, whichever matches.
        let found = sessions.iter().fold(None, |found, s| {
            if constant_time_eq(&s.digest, &digest) {
                Some(s)
            } else {
                found
            }
        });
        found.map(|s| Who {
            actor: s.actor.clone(),
            admin: s.admin,
            csrf: Some(csrf_of(&s.digest)),
        })
    }

    /// Sessions are kept in a shared store too: record what opens and
    /// closes for the runtime ([`Access::take_changes`]).
    pub fn persist(&self) {
        self.persist
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The sessions opened and closed since the last call, for the shared
    /// store.
    pub fn take_changes(&self) -> Vec<SessionChange> {
        std::mem::take(&mut *self.outbox.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Changes that could not be written: kept for the next try, before
    /// any made since.
    pub fn requeue(&self, mut changes: Vec<SessionChange>) {
        let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
        changes.append(&mut outbox);
        changes.truncate(MAX_SESSIONS * 4);
        *outbox = changes;
    }

    /// Sessions were opened or closed since the last [`Access::take_changes`].
    pub fn has_changes(&self) -> bool {
        !self
            .outbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn record(&self, change: SessionChange) {
        if self.persist.load(std::sync::atomic::Ordering::Relaxed) {
            let mut outbox = self.outbox.lock().unwrap_or_else(|e| e.into_inner());
            if outbox.len() < MAX_SESSIONS * 4 {
                outbox.push(change);
            }
        }
    }

    /// The sessions the shared store holds at `unix_ms` (this instance's
    /// and the others'): each one not known here is opened here too, and
    /// each one seen in the store before and gone from it now was closed
    /// elsewhere. Sessions opened here and not yet written stay.
    pub fn sync_sessions(&self, stored: &[StoredSession], unix_ms: u64) {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| {
            s.until > unix_ms && (!s.stored || stored.iter().any(|t| t.digest == s.digest))
        });
        let closing: Vec<[u8; 32]> = self
            .outbox
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(|c| match c {
                SessionChange::Closed(d) => Some(*d),
                SessionChange::Opened(_) => None,
            })
            .collect();
        for t in stored
            .iter()
            .filter(|t| t.until_ms > unix_ms && !closing.contains(&t.digest))
        {
            match sessions.iter_mut().find(|s| s.digest == t.digest) {
                Some(s) => s.stored = true,
                None => sessions.push(Session {
                    digest: t.digest,
                    until: t.until_ms,
                    actor: t.actor.clone(),
                    admin: t.admin,
                    stored: true,
                }),
            }
        }
        sessions.sort_by_key(|s| s.until);
        let excess = sessions.len().saturating_sub(MAX_SESSIONS);
        sessions.drain(..excess);
    }

    /// Opens a session for the admin token with the runtime's fresh random
    /// `id` at `unix_ms`: the `Set-Cookie` value.
    pub fn open_session(&self, id: [u8; 32], unix_ms: u64) -> String {
        let actor = self.token_actor.clone();
        self.open_session_for(id, unix_ms, actor, true)
    }

    /// Opens a session for `actor` (an administrator when `admin`).
    pub fn open_session_for(
        &self,
        id: [u8; 32],
        unix_ms: u64,
        actor: String,
        admin: bool,
    ) -> String {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| s.until > unix_ms);
        if sessions.len() >= MAX_SESSIONS {
            sessions.remove(0);
        }
        let session = Session {
            digest: digest_of(&self.token, &id),
            until: unix_ms + SESSION_SECS * 1000,
            actor,
            admin,
            stored: false,
        };
        self.record(SessionChange::Opened(StoredSession {
            digest: session.digest,
            until_ms: session.until,
            actor: session.actor.clone(),
            admin,
        }));
        sessions.push(session);
        format!(
            "{COOKIE}={}; Path=/; Max-Age={SESSION_SECS}; HttpOnly; SameSite=Strict",
            hex(&id)
        )
    }

    /// Closes the request's session, if it has one: the `Set-Cookie` value
    /// that removes the cookie.
    pub fn close_session(&self, cookie: Option<&str>) -> String {
        if let Some(id) = cookie.and_then(session_cookie).and_then(unhex) {
            let digest = digest_of(&self.token, &id);
            let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            let before = sessions.len();
            sessions.retain(|s| !constant_time_eq(&s.digest, &digest));
            if sessions.len() < before {
                self.record(SessionChange::Closed(digest));
            }
        }
        format!("{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict")
    }
}

/// The token of an `Authorization: Bearer` value.
fn bearer(v: &str) -> Option<&str> {
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// The console's session id in a `Cookie` header value.
fn session_cookie(v: &str) -> Option<&str> {
    v.split(';').find_map(|c| {
        let (name, value) = c.trim().split_once('=')?;
        (name == COOKIE).then_some(value)
    })
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub(crate) fn form_value(body: &[u8], name: &str) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| crate::url::percent_decode(&v.replace('+', " ")))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_or_session() {
        let a = Access::new("admin-token-0123456789");
        assert!(
            a.who(Some("Bearer admin-token-0123456789"), None, 0)
                .is_some()
        );
        assert!(
            a.who(Some("bearer  admin-token-0123456789 "), None, 0)
                .is_some()
        );
        assert!(a.is_token(b"admin-token-0123456789\n"));
        assert!(Access::new(" admin-token-0123456789\n").is_token(b"admin-token-0123456789"));
        assert!(
            a.who(Some("Bearer admin-token-012345678"), None, 0)
                .is_none()
        );
        assert!(
            a.who(Some("Basic admin-token-0123456789"), None, 0)
                .is_none()
        );
        assert!(a.who(None, None, 0).is_none());
        let set = a.open_session([7; 32], 1000);
        assert!(set.starts_with("chatgate_console=0707"));
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        let cookie = format!("other=1; {}", set.split(';').next().unwrap());
        assert!(a.who(None, Some(&cookie), 2000).is_some());
        // A wrong Bearer is not rescued by a good cookie.
        assert!(a.who(Some("Bearer nope"), Some(&cookie), 2000).is_none());
        assert!(
            a.who(None, Some(&cookie), 1000 + SESSION_SECS * 1000)
                .is_none()
        );
        assert!(a.who(None, Some("chatgate_console=zz"), 2000).is_none());
        let _ = a.open_session([8; 32], 1000);
        let c8 = format!("chatgate_console={}", hex(&[8; 32]));
        assert!(a.who(None, Some(&c8), 2000).is_some());
        assert!(a.close_session(Some(&c8)).contains("Max-Age=0"));
        assert!(a.who(None, Some(&c8), 2000).is_none());
    }

    #[test]
    fn who_and_csrf() {
        let a = Access::named("admin-token-0123456789", "CHATGATE_ADMIN_TOKEN");
        let w = a
            .who(Some("Bearer admin-token-0123456789"), None, 0)
            .unwrap();
        assert_eq!(w.actor, "token:CHATGATE_ADMIN_TOKEN");
        assert!(w.admin && w.may_submit(None));
        let set = a.open_session_for([3; 32], 0, "user:v@example.com".into(), false);
        let cookie = set.split(';').next().unwrap();
        let w = a.who(None, Some(cookie), 1).unwrap();
        assert_eq!((w.actor.as_str(), w.admin), ("user:v@example.com", false));
        let csrf = w.csrf.clone().unwrap();
        assert_eq!(csrf.len(), 64);
        assert!(w.may_submit(Some(&csrf)));
        assert!(!w.may_submit(None));
        assert!(!w.may_submit(Some("0000")));
        // Another session has another token.
        let _ = a.open_session([4; 32], 0);
        let other = a
            .who(None, Some(&format!("{COOKIE}={}", hex(&[4; 32]))), 1)
            .unwrap();
        assert_ne!(other.csrf, w.csrf);
    }

    #[test]
    fn sessions_are_shared_through_a_store() {
        let here = Access::new("admin-token-0123456789");
        let there = Access::new("admin-token-0123456789");
        here.persist();
        let cookie = here.open_session_for([5; 32], 0, "user:a@b.c".into(), true);
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let changes = here.take_changes();
        let [SessionChange::Opened(stored)] = changes.as_slice() else {
            panic!("{changes:?}")
        };
        assert_ne!(stored.digest, [5; 32], "the store never holds the id");
        // Another instance (or this one after a restart) reads the store.
        there.sync_sessions(std::slice::from_ref(stored), 1);
        let who = there.who(None, Some(&cookie), 2).unwrap();
        assert_eq!(who.actor, "user:a@b.c");
        assert_eq!(who.csrf, here.who(None, Some(&cookie), 2).unwrap().csrf);
        // Not yet written is kept; written and then gone is closed.
        here.sync_sessions(&[], 3);
        assert!(here.who(None, Some(&cookie), 4).is_some());
        there.sync_sessions(&[], 3);
        assert!(there.who(None, Some(&cookie), 4).is_none());
        assert!(here.take_changes().is_empty());
        here.close_session(Some(&cookie));
        assert_eq!(here.take_changes(), [SessionChange::Closed(stored.digest)]);
    }

    #[test]
    fn the_oldest_session_goes_first() {
        let a = Access::new("t");
        for i in 0..=MAX_SESSIONS {
            let _ = a.open_session([i as u8; 32], 0);
        }
        let c = |i: u8| format!("{COOKIE}={}", hex(&[i; 32]));
        assert!(a.who(None, Some(&c(0)), 1).is_none());
        assert!(a.who(None, Some(&c(1)), 1).is_some());
        assert!(a.who(None, Some(&c(MAX_SESSIONS as u8)), 1).is_some());
    }

    #[test]
    fn form_values() {
        assert_eq!(
            form_value(b"a=1&token=x%2By+z", "token").as_deref(),
            Some("x+y z")
        );
        assert_eq!(form_value(b"token=%zz", "token"), None);
        assert_eq!(form_value(b"a=1", "token"), None);
        assert_eq!(form_value(b"token", "token").as_deref(), Some(""));
    }
}
