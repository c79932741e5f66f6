//! Client keys: the keys file, bearer authentication and minting.
//!
//! Keys look like `sk-cg-` followed by base62 characters (43 when minted
//! here: 256 random bits). The gateway stores only their SHA-256. A presented
//! key is hashed, the hash looked up, and the stored hash compared in
//! constant time; the lookup itself branches only on the hash of the
//! presented key, which tells an attacker nothing about any stored key.

use std::collections::HashMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::limits::Limits;

/// Every client key starts with this.
pub const KEY_PREFIX: &str = "sk-cg-";
/// Fewest base62 characters after the prefix.
pub const MIN_KEY_CHARS: usize = 40;

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// One configured key.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyEntry {
    /// Its name: what the ledger, logs and limits refer to.
    pub name: String,
    /// SHA-256 of the full key.
    pub sha256: [u8; 32],
    /// Its limits.
    pub limits: Limits,
    /// When it was minted (RFC 3339), if recorded.
    pub created: Option<String>,
    /// When it stops being accepted (RFC 3339, set by `keys rotate` on the
    /// key it replaces), if ever.
    pub expires: Option<String>,
    /// `expires` in Unix seconds.
    pub expires_unix: Option<u64>,
}

impl KeyEntry {
    /// Whether the key is still accepted at `unix_secs`.
    pub fn valid_at(&self, unix_secs: u64) -> bool {
        self.expires_unix.is_none_or(|e| unix_secs < e)
    }
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry")
            .field("name", &self.name)
            .field("sha256", &format_args!("{}…", &hex(&self.sha256)[..8]))
            .field("limits", &self.limits)
            .field("created", &self.created)
            .field("expires", &self.expires)
            .finish()
    }
}

/// Why authentication failed (both answer 401 `invalid_api_key`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No `Authorization: Bearer …` header.
    Missing,
    /// A key that is malformed or unknown.
    Invalid,
}

/// A keys file that cannot be used, with a message naming the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeysError(pub String);

impl std::fmt::Display for KeysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeysError {}

/// The configured keys, indexed by hash.
#[derive(Debug, Clone, Default)]
pub struct KeyTable {
    entries: Vec<KeyEntry>,
    by_hash: HashMap<[u8; 32], usize>,
}

impl KeyTable {
    /// A table of `entries`; names and hashes must be unique.
    pub fn new(entries: Vec<KeyEntry>) -> Result<KeyTable, KeysError> {
        let mut by_hash = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            if e.name.is_empty() {
                return Err(KeysError(format!("key #{} has an empty name", i + 1)));
            }
            // A name appears twice only while a rotated key's grace runs:
            // then at most one of its entries lasts forever, and they share
            // limits (the limits belong to the name).
            for o in entries[..i].iter().filter(|o| o.name == e.name) {
                if o.expires_unix.is_none() && e.expires_unix.is_none() {
                    return Err(KeysError(format!(
                        "key name '{}' is used twice (a rotated key must have `expires`)",
                        e.name
                    )));
                }
                if o.limits != e.limits {
                    return Err(KeysError(format!(
                        "the entries of key '{}' have different limits",
                        e.name
                    )));
                }
            }
            if by_hash.insert(e.sha256, i).is_some() {
                return Err(KeysError(format!(
                    "key '{}' has the same hash as another key",
                    e.name
                )));
            }
        }
        Ok(KeyTable { entries, by_hash })
    }

    /// Parses a keys file (`[[key]]` tables with `name`, `sha256` and optional
    /// `requests_per_minute`, `tokens_per_minute`, `created`, `expires`);
    /// keys without limits get `defaults`.
    pub fn parse_toml(text: &str, defaults: Limits) -> Result<KeyTable, KeysError> {
        let raw = parse_keys_file(text)?;
        let mut entries = Vec::with_capacity(raw.len());
        for raw in raw {
            let sha256 = parse_hex32(&raw.sha256).ok_or_else(|| {
                KeysError(format!(
                    "key '{}': sha256 must be 64 hexadecimal characters",
                    raw.name
                ))
            })?;
            let rpm = raw
                .requests_per_minute
                .unwrap_or(defaults.requests_per_minute);
            let tpm = raw.tokens_per_minute.unwrap_or(defaults.tokens_per_minute);
            if rpm == 0 || tpm == 0 {
                return Err(KeysError(format!(
                    "key '{}': limits must be positive",
                    raw.name
                )));
            }
            let expires_unix = match &raw.expires {
                None => None,
                Some(t) => Some(crate::time::parse_rfc3339(t).ok_or_else(|| {
                    KeysError(format!(
                        "key '{}': expires must be an RFC 3339 time like 2026-11-22T10:00:00Z",
                        raw.name
                    ))
                })?),
            };
            entries.push(KeyEntry {
                name: raw.name,
                sha256,
                limits: Limits {
                    requests_per_minute: rpm,
                    tokens_per_minute: tpm,
                },
                created: raw.created,
                expires: raw.expires,
                expires_unix,
            });
        }
        KeyTable::new(entries)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No keys at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All keys, in file order.
    pub fn entries(&self) -> &[KeyEntry] {
        &self.entries
    }

    /// Checks an `Authorization` header value.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<&KeyEntry, AuthFailure> {
        let value = authorization.ok_or(AuthFailure::Missing)?;
        let (scheme, key) = value.trim().split_once(' ').ok_or(AuthFailure::Invalid)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(AuthFailure::Missing);
        }
        let key = key.trim_start();
        if !is_well_formed(key) {
            return Err(AuthFailure::Invalid);
        }
        let digest = key_sha256(key);
        let entry = self
            .by_hash
            .get(&digest)
            .map(|&i| &self.entries[i])
            .ok_or(AuthFailure::Invalid)?;
        if bool::from(entry.sha256.ct_eq(&digest)) {
            Ok(entry)
        } else {
            Err(AuthFailure::Invalid)
        }
    }
}

/// `sk-cg-` followed by at least 40 base62 characters.
pub fn is_well_formed(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX).is_some_and(|rest| {
        rest.len() >= MIN_KEY_CHARS && rest.bytes().all(|b| b.is_ascii_alphanumeric())
    })
}

/// Mints a key from 32 caller-supplied random bytes: `sk-cg-` and the bytes
/// as a 43-character base62 number (62^43 > 2^256, so nothing is lost).
pub fn mint_key(random: &[u8; 32]) -> String {
    let mut n = *random;
    let mut digits = [0u8; 43];
    for slot in digits.iter_mut().rev() {
        // Long division of the 256-bit big-endian number by 62.
        let mut rem = 0u32;
        for byte in n.iter_mut() {
            let cur = (rem << 8) | u32::from(*byte);
            *byte = (cur / 62) as u8;
            rem = cur % 62;
        }
        *slot = BASE62[rem as usize];
    }
    let mut key = String::with_capacity(KEY_PREFIX.len() + digits.len());
    key.push_str(KEY_PREFIX);
    // Base62 digits are ASCII.
    key.push_str(std::str::from_utf8(&digits).expect("base62 is ASCII"));
    key
}

/// SHA-256 of a key.
pub fn key_sha256(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// SHA-256 of a key as 64 lowercase hex characters.
pub fn key_hash_hex(key: &str) -> String {
    hex(&key_sha256(key))
}

/// One `[[key]]` table as written in the keys file (limits not resolved),
/// for the commands that edit the file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    /// `name`.
    pub name: String,
    /// `sha256`, hexadecimal.
    pub sha256: String,
    /// `requests_per_minute`, if set.
    pub requests_per_minute: Option<u64>,
    /// `tokens_per_minute`, if set.
    pub tokens_per_minute: Option<u64>,
    /// `created`, if recorded.
    pub created: Option<String>,
    /// `expires`, if set.
    pub expires: Option<String>,
}

/// Reads the `[[key]]` tables of a keys file as written.
pub fn parse_keys_file(text: &str) -> Result<Vec<RawKey>, KeysError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        #[serde(default)]
        key: Vec<RawKey>,
    }
    let file: File =
        toml::from_str(text).map_err(|e| KeysError(format!("keys file: {}", e.message())))?;
    Ok(file.key)
}

/// A whole keys file with these entries (what `keys revoke` and `keys
/// rotate` write back).
pub fn render_keys_file(keys: &[RawKey]) -> String {
    let mut s = String::from("# chatgate keys: only SHA-256 hashes of the keys are stored here.\n");
    for k in keys {
        s.push_str(&entry_toml(
            &k.name,
            &k.sha256,
            k.requests_per_minute,
            k.tokens_per_minute,
            k.created.as_deref().unwrap_or(""),
        ));
        if let Some(e) = &k.expires {
            s.push_str(&format!("expires = {}\n", toml_string(e)));
        }
    }
    s
}

/// The `[[key]]` table to append to a keys file for a new key.
pub fn entry_toml(
    name: &str,
    hash_hex: &str,
    rpm: Option<u64>,
    tpm: Option<u64>,
    created: &str,
) -> String {
    let mut s = String::from("\n[[key]]\n");
    s.push_str(&format!("name = {}\n", toml_string(name)));
    s.push_str(&format!("sha256 = \"{hash_hex}\"\n"));
    if let Some(rpm) = rpm {
        s.push_str(&format!("requests_per_minute = {rpm}\n"));
    }
    if let Some(tpm) = tpm {
        s.push_str(&format!("tokens_per_minute = {tpm}\n"));
    }
    if !created.is_empty() {
        s.push_str(&format!("created = {}\n", toml_string(created)));
    }
    s
}

/// A key name is 1–64 characters of letters, digits, `-`, `_`, `.`, `@`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'))
}

fn toml_string(s: &str) -> String {
    // A TOML basic string has JSON-compatible escaping for these characters.
    serde_json::to_string(s).unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex32(s: &str) -> Option<[u8; 32]> {
    let s = s.as_bytes();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in s.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table_with(key: &str) -> KeyTable {
        let text = entry_toml(
            "alice",
            &key_hash_hex(key),
            Some(5),
            None,
            "2026-11-22T00:00:00.000Z",
        );
        KeyTable::parse_toml(&text, Limits::default()).unwrap()
    }

    #[test]
    fn minted_keys_are_well_formed_and_distinct() {
        let a = mint_key(&[0u8; 32]);
        let b = mint_key(&[0xFF; 32]);
        let c = mint_key(&[7; 32]);
        for k in [&a, &b, &c] {
            assert!(is_well_formed(k), "{k}");
            assert_eq!(k.len(), KEY_PREFIX.len() + 43);
        }
        assert_ne!(a, b);
        assert_ne!(b, c);
        assert_eq!(a, format!("{KEY_PREFIX}{}", "0".repeat(43)));
    }

    #[test]
    fn authenticates_by_hash() {
        let key = mint_key(&[42; 32]);
        let t = table_with(&key);
        let e = t.authenticate(Some(&format!("Bearer {key}"))).unwrap();
        assert_eq!(e.name, "alice");
        assert_eq!(e.limits.requests_per_minute, 5);
        assert_eq!(e.limits.tokens_per_minute, 100_000);
        assert!(t.authenticate(Some(&format!("bearer  {key}"))).is_ok());
        assert_eq!(t.authenticate(None), Err(AuthFailure::Missing));
        assert_eq!(
            t.authenticate(Some(&format!("Basic {key}"))),
            Err(AuthFailure::Missing)
        );
        let other = mint_key(&[43; 32]);
        assert_eq!(
            t.authenticate(Some(&format!("Bearer {other}"))),
            Err(AuthFailure::Invalid)
        );
        assert_eq!(
            t.authenticate(Some("Bearer sk-cg-short")),
            Err(AuthFailure::Invalid)
        );
        assert_eq!(t.authenticate(Some("Bearer")), Err(AuthFailure::Invalid));
        assert!(!format!("{:?}", t).contains(&key_hash_hex(&key)));
    }

    #[test]
    fn keys_file_errors_are_clear() {
        let bad = [
            ("[[key]]\nname = \"a\"\nsha256 = \"zz\"\n", "sha256"),
            ("[[key]]\nname = \"a\"\n", "sha256"),
            ("[[key]]\nname = \"a\"\nsha256 = \"aa\"\nfoo = 1\n", "foo"),
            ("not toml [", "keys file"),
        ];
        for (text, needle) in bad {
            let e = KeyTable::parse_toml(text, Limits::default()).unwrap_err();
            assert!(e.0.contains(needle), "{e} should mention {needle}");
        }
        let h = key_hash_hex("x");
        let dup = format!(
            "{}{}",
            entry_toml("a", &h, None, None, "t"),
            entry_toml("a", &key_hash_hex("y"), None, None, "t")
        );
        assert!(
            KeyTable::parse_toml(&dup, Limits::default())
                .unwrap_err()
                .0
                .contains("twice")
        );
        let zero = entry_toml("a", &h, Some(0), None, "t");
        assert!(KeyTable::parse_toml(&zero, Limits::default()).is_err());
        assert!(
            KeyTable::parse_toml("", Limits::default())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn names() {
        assert!(is_valid_name("alice-01@team.x"));
        assert!(!is_valid_name(""));
        assert!(!is_valid_name("a b"));
        assert!(!is_valid_name("a\"b"));
    }
}
