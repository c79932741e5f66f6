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

use crate::limits::Limits;
use crate::quota::{Budget, Period, Quota, usd_to_nano};

/// Every client key starts with this.
pub const KEY_PREFIX: &str = "sk-cg-";
/// Fewest base62 characters after the prefix.
pub(crate) const MIN_KEY_CHARS: usize = 40;

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
    /// Its spend budget and in-flight cap.
    pub quota: Quota,
    /// When it was minted (RFC 3339), if recorded.
    pub created: Option<String>,
    /// When it stops being accepted (RFC 3339, set by `keys rotate` on the
    /// key it replaces), if ever.
    pub expires: Option<String>,
    /// `expires` in Unix seconds.
    pub expires_unix: Option<u64>,
    /// The models it may call (ids or aliases; `None`: every model).
    pub models: Option<std::sync::Arc<[String]>>,
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
            .field("quota", &self.quota)
            .field("created", &self.created)
            .field("expires", &self.expires)
            .field("models", &self.models)
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

/// What a key that sets none of its limits gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDefaults {
    /// Rate limits.
    pub limits: Limits,
    /// Budget (none by default) and in-flight cap (none by default).
    pub quota: Quota,
    /// The period of a budget that names none (`month` by default).
    pub budget_period: Period,
}

impl Default for KeyDefaults {
    fn default() -> Self {
        KeyDefaults {
            limits: Limits::default(),
            quota: Quota::default(),
            budget_period: Period::Month,
        }
    }
}

impl From<Limits> for KeyDefaults {
    fn from(limits: Limits) -> Self {
        KeyDefaults {
            limits,
            ..KeyDefaults::default()
        }
    }
}

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
                if o.limits != e.limits || o.quota != e.quota {
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
    /// `requests_per_minute`, `tokens_per_minute`, `budget_usd`,
    /// `budget_period`, `max_in_flight`, `created`, `expires`, `models`); what a key
    /// does not set comes from `defaults`.
    pub fn parse_toml(text: &str, defaults: impl Into<KeyDefaults>) -> Result<KeyTable, KeysError> {
        KeyTable::from_raw(&parse_keys_file(text)?, &defaults.into())
    }

    /// The table of keys as written (in a keys file or a store's rows);
    /// what a key does not set comes from `defaults`.
    pub fn from_raw(raw: &[RawKey], defaults: &KeyDefaults) -> Result<KeyTable, KeysError> {
        let entries = raw
            .iter()
            .map(|k| k.resolve(defaults))
            .collect::<Result<Vec<_>, _>>()?;
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

    /// The entries of one name (two while a rotated key's grace runs).
    pub fn entries_of(&self, name: &str) -> Vec<&KeyEntry> {
        self.entries.iter().filter(|e| e.name == name).collect()
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
        if constant_time_eq(&entry.sha256, &digest) {
            Ok(entry)
        } else {
            Err(AuthFailure::Invalid)
        }
    }
}

/// `sk-cg-` followed by at least 40 base62 characters.
pub(crate) fn is_well_formed(key: &str) -> bool {
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
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
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
    /// `budget_usd`, if set.
    pub budget_usd: Option<f64>,
    /// `budget_period`, if set.
    pub budget_period: Option<String>,
    /// `max_in_flight`, if set.
    pub max_in_flight: Option<u64>,
    /// `created`, if recorded.
    pub created: Option<String>,
    /// `expires`, if set.
    pub expires: Option<String>,
    /// `models`: the models it may call, if limited.
    pub models: Option<Vec<String>>,
}

impl RawKey {
    /// A table with a name and a hash and nothing else set.
    pub fn new(name: &str, sha256: &str) -> RawKey {
        RawKey {
            name: name.to_owned(),
            sha256: sha256.to_owned(),
            ..RawKey::default()
        }
    }

    /// The key as the gateway uses it: its hash checked, every limit
    /// checked, and what it does not set taken from `defaults`. Errors name
    /// the key and the field.
    pub fn resolve(&self, defaults: &KeyDefaults) -> Result<KeyEntry, KeysError> {
        let fail =
            |field: &str, why: String| KeysError(format!("key '{}': {field}: {why}", self.name));
        let sha256 = parse_hex32(&self.sha256)
            .ok_or_else(|| fail("sha256", "must be 64 hexadecimal characters".into()))?;
        let limits = Limits {
            requests_per_minute: self
                .requests_per_minute
                .unwrap_or(defaults.limits.requests_per_minute),
            tokens_per_minute: self
                .tokens_per_minute
                .unwrap_or(defaults.limits.tokens_per_minute),
        };
        if limits.requests_per_minute == 0 || limits.tokens_per_minute == 0 {
            return Err(KeysError(format!(
                "key '{}': limits must be positive",
                self.name
            )));
        }
        let period = match &self.budget_period {
            None => None,
            Some(p) => Some(Period::parse(p).ok_or_else(|| {
                fail(
                    "budget_period",
                    format!("'{p}' is not one of day, week, month, total"),
                )
            })?),
        };
        let budget = match self.budget_usd {
            Some(usd) => Some(Budget {
                limit_nano: usd_to_nano(usd).map_err(|e| fail("budget_usd", e))?,
                period: period.unwrap_or(defaults.budget_period),
            }),
            None => defaults.quota.budget.map(|b| Budget {
                period: period.unwrap_or(b.period),
                ..b
            }),
        };
        let max_in_flight = match self.max_in_flight {
            Some(0) => return Err(fail("max_in_flight", "must be at least 1".into())),
            Some(n) => Some(
                u32::try_from(n)
                    .map_err(|_| fail("max_in_flight", format!("{n} is above {}", u32::MAX)))?,
            ),
            None => defaults.quota.max_in_flight,
        };
        let expires_unix = match &self.expires {
            None => None,
            Some(t) => Some(crate::time::parse_rfc3339(t).ok_or_else(|| {
                fail(
                    "expires",
                    "must be an RFC 3339 time like 2026-11-22T10:00:00Z".into(),
                )
            })?),
        };
        Ok(KeyEntry {
            name: self.name.clone(),
            sha256,
            limits,
            quota: Quota {
                budget,
                max_in_flight,
            },
            created: self.created.clone(),
            expires: self.expires.clone(),
            expires_unix,
            models: match &self.models {
                None => None,
                Some(list) if list.is_empty() || list.iter().any(String::is_empty) => {
                    return Err(fail(
                        "models",
                        "must list at least one model id or alias, none empty (leave it out for every model)".into(),
                    ));
                }
                Some(list) => Some(list.clone().into()),
            },
        })
    }

    /// The `[[key]]` table, as the commands that edit the file write it.
    pub fn render(&self) -> String {
        let mut s = String::from("\n[[key]]\n");
        s.push_str(&format!("name = {}\n", toml_string(&self.name)));
        s.push_str(&format!("sha256 = \"{}\"\n", self.sha256));
        if let Some(rpm) = self.requests_per_minute {
            s.push_str(&format!("requests_per_minute = {rpm}\n"));
        }
        if let Some(tpm) = self.tokens_per_minute {
            s.push_str(&format!("tokens_per_minute = {tpm}\n"));
        }
        if let Some(usd) = self.budget_usd {
            // `{:?}` keeps a decimal point or an exponent: a TOML float.
            s.push_str(&format!("budget_usd = {usd:?}\n"));
        }
        if let Some(p) = &self.budget_period {
            s.push_str(&format!("budget_period = {}\n", toml_string(p)));
        }
        if let Some(n) = self.max_in_flight {
            s.push_str(&format!("max_in_flight = {n}\n"));
        }
        if let Some(c) = self.created.as_deref().filter(|c| !c.is_empty()) {
            s.push_str(&format!("created = {}\n", toml_string(c)));
        }
        if let Some(e) = &self.expires {
            s.push_str(&format!("expires = {}\n", toml_string(e)));
        }
        if let Some(list) = &self.models {
            let names: Vec<String> = list.iter().map(|m| toml_string(m)).collect();
            s.push_str(&format!("models = [{}]\n", names.join(", ")));
        }
        s
    }
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

/// A whole keys file with these entries (what `keys revoke`, `keys
/// rotate` and `keys set` write back).
pub fn render_keys_file(keys: &[RawKey]) -> String {
    let mut s = String::from("# chatgate keys: only SHA-256 hashes of the keys are stored here.\n");
    for k in keys {
        s.push_str(&k.render());
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
    RawKey {
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
        created: Some(created.to_owned()),
        ..RawKey::new(name, hash_hex)
    }
    .render()
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

/// Lower-case hexadecimal.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 32 bytes from 64 hexadecimal digits.
pub(crate) fn parse_hex32(s: &str) -> Option<[u8; 32]> {
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

/// Whether `a` and `b` (of the same length) are equal, in a time that
/// depends on their length only: the XOR of every 8-byte word (then of
/// every remaining byte) is OR-ed into one accumulator, with no branch on
/// the data, and only the accumulator is tested, once, behind an
/// optimisation barrier per word (a byte-wise compare with a barrier per
/// byte, as the `subtle` crate does, was about 400 instructions for a
/// 60-byte `Authorization` value). The key table's digest check and the
/// connection's cached `Authorization` both use it.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let (wa, wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (wa.remainder(), wb.remainder());
    let mut acc = 0u64;
    for (x, y) in wa.zip(wb) {
        let x = u64::from_ne_bytes(x.try_into().expect("8 bytes"));
        let y = u64::from_ne_bytes(y.try_into().expect("8 bytes"));
        acc = std::hint::black_box(acc | (x ^ y));
    }
    for (x, y) in ra.iter().zip(rb) {
        acc |= u64::from(x ^ y);
    }
    std::hint::black_box(acc) == 0
}

#[cfg(test)]
mod constant_time_tests {
    use super::constant_time_eq;

    #[test]
    fn equal_and_unequal_at_every_position_and_length() {
        for len in 0..40usize {
            let a: Vec<u8> = (0..len as u8).map(|b| b.wrapping_mul(37)).collect();
            assert!(constant_time_eq(&a, &a.clone()));
            for at in 0..len {
                for bit in [1u8, 0x80] {
                    let mut b = a.clone();
                    b[at] ^= bit;
                    assert!(!constant_time_eq(&a, &b), "len {len} at {at}");
                }
            }
        }
    }
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
