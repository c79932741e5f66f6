//! Changes to the client keys, whoever makes them (the `keys` commands,
//! the admin API, the console) and wherever the keys live (the keys file,
//! PostgreSQL): one pure function over the keys as written ([`RawKey`]),
//! and the audit record each change leaves. The stores read the keys,
//! call [`apply_key_op`], and write back what it left, with its record.
//!
//! A name may have several entries: a rotated key keeps its previous
//! secret for a grace period. Its entries share their limits, so a change
//! applies to every entry of the name.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::auth::{KeyDefaults, KeyTable, RawKey, is_valid_name};
use crate::quota::{Period, usd_to_nano};
use crate::time::{parse_rfc3339, rfc3339_ms};

/// The longest a rotated key's previous secret may stay valid.
pub(crate) const MAX_GRACE_MS: u64 = 365 * 24 * 3_600_000;

/// The fields a change may set, as the API and the audit trail name them.
pub(crate) const FIELDS: [&str; 6] = [
    "rpm",
    "tpm",
    "budget_usd",
    "budget_period",
    "max_in_flight",
    "models",
];

/// What a change does to a key's settings: each field left as it is
/// (`None`), removed so that the gateway's default applies (`Some(None)`),
/// or set (`Some(Some(v))`). Values are checked when read, so a change
/// that exists is one the keys accept.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyChanges {
    /// Requests per minute.
    pub rpm: Option<Option<u64>>,
    /// Tokens per minute.
    pub tpm: Option<Option<u64>>,
    /// Spend budget in USD.
    pub budget_usd: Option<Option<f64>>,
    /// The budget's period: `day`, `week`, `month` or `total`.
    pub budget_period: Option<Option<String>>,
    /// Most requests open at once.
    pub max_in_flight: Option<Option<u64>>,
    /// The models it may call (ids or aliases); removed: every model.
    pub models: Option<Option<Vec<String>>>,
}

/// A change that cannot be made, and why; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// No key has this name.
    NotFound(String),
    /// The change conflicts with what is there (a name taken, a key with
    /// no current secret to rotate).
    Conflict(String),
    /// A field's value is refused: the field and why.
    Invalid {
        /// The field as the API names it (`name`, `rpm`, …, or `body`).
        field: String,
        /// Why, in a sentence.
        message: String,
    },
}

impl OpError {
    fn invalid(field: &str, message: impl Into<String>) -> OpError {
        OpError::Invalid {
            field: field.to_owned(),
            message: message.into(),
        }
    }

    /// The HTTP status it answers with: 404, 409 or 400.
    pub fn status(&self) -> u16 {
        match self {
            OpError::NotFound(_) => 404,
            OpError::Conflict(_) => 409,
            OpError::Invalid { .. } => 400,
        }
    }
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::NotFound(name) => write!(f, "no key is named '{name}'"),
            OpError::Conflict(m) => f.write_str(m),
            OpError::Invalid { field, message } => write!(f, "{field}: {message}"),
        }
    }
}

impl std::error::Error for OpError {}

impl KeyChanges {
    /// Nothing to change.
    pub fn is_empty(&self) -> bool {
        *self == KeyChanges::default()
    }

    /// Reads the fields of a JSON object (the admin API's body): each
    /// field absent, `null` (removed) or its value. Fields other than
    /// [`FIELDS`] and `extra` are refused, naming the field.
    pub fn from_json(obj: &Map<String, Value>, extra: &[&str]) -> Result<KeyChanges, OpError> {
        if let Some(k) = obj
            .keys()
            .find(|k| !FIELDS.contains(&k.as_str()) && !extra.contains(&k.as_str()))
        {
            return Err(OpError::invalid(
                k,
                format!("is not a field of a key (they are {})", FIELDS.join(", ")),
            ));
        }
        fn field<T>(
            obj: &Map<String, Value>,
            name: &str,
            read: impl Fn(&Value) -> Result<T, String>,
        ) -> Result<Option<Option<T>>, OpError> {
            match obj.get(name) {
                None => Ok(None),
                Some(Value::Null) => Ok(Some(None)),
                Some(v) => read(v)
                    .map(|t| Some(Some(t)))
                    .map_err(|m| OpError::invalid(name, m)),
            }
        }
        let whole = |v: &Value| {
            v.as_u64()
                .ok_or_else(|| format!("{v} is not a whole number"))
        };
        let changes = KeyChanges {
            rpm: field(obj, "rpm", whole)?,
            tpm: field(obj, "tpm", whole)?,
            budget_usd: field(obj, "budget_usd", |v| {
                v.as_f64()
                    .ok_or_else(|| format!("{v} is not an amount of USD (a number)"))
            })?,
            budget_period: field(obj, "budget_period", |v| {
                v.as_str().map(str::to_owned).ok_or_else(|| {
                    format!("{v} is not one of \"day\", \"week\", \"month\", \"total\"")
                })
            })?,
            max_in_flight: field(obj, "max_in_flight", whole)?,
            models: field(obj, "models", |v| {
                v.as_array()
                    .and_then(|a| a.iter().map(|m| m.as_str().map(str::to_owned)).collect())
                    .ok_or_else(|| format!("{v} is not a list of model ids or aliases"))
            })?,
        };
        changes.check()?;
        Ok(changes)
    }

    /// Every value given is one a key accepts.
    pub fn check(&self) -> Result<(), OpError> {
        let positive = |field: &str, v: Option<Option<u64>>| match v {
            Some(Some(0)) => Err(OpError::invalid(field, "must be at least 1")),
            _ => Ok(()),
        };
        positive("rpm", self.rpm)?;
        positive("tpm", self.tpm)?;
        positive("max_in_flight", self.max_in_flight)?;
        if let Some(Some(n)) = self.max_in_flight
            && n > u64::from(u32::MAX)
        {
            return Err(OpError::invalid(
                "max_in_flight",
                format!("{n} is above {}", u32::MAX),
            ));
        }
        if let Some(Some(usd)) = self.budget_usd {
            usd_to_nano(usd).map_err(|e| OpError::invalid("budget_usd", e))?;
        }
        if let Some(Some(p)) = &self.budget_period
            && Period::parse(p).is_none()
        {
            return Err(OpError::invalid(
                "budget_period",
                format!("'{p}' is not one of day, week, month, total"),
            ));
        }
        if let Some(Some(list)) = &self.models
            && (list.is_empty() || list.iter().any(|m| m.trim().is_empty()))
        {
            return Err(OpError::invalid(
                "models",
                "must list at least one model id or alias, none empty (null: every model)",
            ));
        }
        Ok(())
    }

    /// Applies the changes to one entry.
    fn apply_to(&self, k: &mut RawKey) {
        fn set<T: Clone>(field: &mut Option<T>, change: &Option<Option<T>>) {
            if let Some(v) = change {
                field.clone_from(v);
            }
        }
        set(&mut k.requests_per_minute, &self.rpm);
        set(&mut k.tokens_per_minute, &self.tpm);
        set(&mut k.budget_usd, &self.budget_usd);
        set(&mut k.budget_period, &self.budget_period);
        set(&mut k.max_in_flight, &self.max_in_flight);
        set(&mut k.models, &self.models);
    }
}

/// One change to the keys.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyOp {
    /// A new key: its name, settings and its secret's SHA-256 (hex).
    Create {
        /// Its name.
        name: String,
        /// Its settings.
        changes: KeyChanges,
        /// SHA-256 of the new secret, hexadecimal.
        sha256: String,
    },
    /// New settings for every entry of a name.
    Update {
        /// The key.
        name: String,
        /// What changes.
        changes: KeyChanges,
    },
    /// A new secret for a name; the current one stays valid for
    /// `grace_ms`, then is refused.
    Rotate {
        /// The key.
        name: String,
        /// How long the current secret stays valid.
        grace_ms: u64,
        /// SHA-256 of the new secret, hexadecimal.
        sha256: String,
    },
    /// Every entry of a name removed: refused at once.
    Revoke {
        /// The key.
        name: String,
    },
    /// A name's entries as another store holds them (hashes, times and
    /// all): `keys import`.
    Import {
        /// The key.
        name: String,
        /// Its entries, each of this name.
        entries: Vec<RawKey>,
    },
}

impl KeyOp {
    /// The key it changes.
    pub fn name(&self) -> &str {
        match self {
            KeyOp::Create { name, .. }
            | KeyOp::Update { name, .. }
            | KeyOp::Rotate { name, .. }
            | KeyOp::Revoke { name }
            | KeyOp::Import { name, .. } => name,
        }
    }

    /// Its name in the audit trail.
    pub fn action(&self) -> &'static str {
        match self {
            KeyOp::Create { .. } => "create",
            KeyOp::Update { .. } => "update",
            KeyOp::Rotate { .. } => "rotate",
            KeyOp::Revoke { .. } => "revoke",
            KeyOp::Import { .. } => "import",
        }
    }
}

/// One field of a key before and after a change (`null`: not set, the
/// gateway's default applies; never a secret or its digest).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldChange {
    /// The field, as the API names it.
    pub field: String,
    /// Its value before.
    pub before: Value,
    /// Its value after.
    pub after: Value,
}

/// One change in the audit trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Its position in the trail (assigned by the store: 1 for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// When (RFC 3339, UTC, milliseconds).
    pub at: String,
    /// Who: `token:VARIABLE` (the admin token, named by the variable that
    /// holds it), `user:EMAIL` (signed in), `cli:USER` (a `keys` command).
    pub actor: String,
    /// The address the change came from, when over the network.
    pub address: Option<String>,
    /// `create`, `update`, `rotate`, `revoke` or `import`.
    pub action: String,
    /// The key's name.
    pub key: String,
    /// What changed.
    pub changes: Vec<FieldChange>,
}

/// The fields of an entry as the audit trail shows them.
fn fields_of(k: &RawKey) -> [(&'static str, Value); 6] {
    [
        ("rpm", json!(k.requests_per_minute)),
        ("tpm", json!(k.tokens_per_minute)),
        ("budget_usd", json!(k.budget_usd)),
        ("budget_period", json!(k.budget_period)),
        ("max_in_flight", json!(k.max_in_flight)),
        ("models", json!(k.models)),
    ]
}

/// What differs between two entries' settings.
fn diff(before: Option<&RawKey>, after: Option<&RawKey>) -> Vec<FieldChange> {
    let none = [(); 6].map(|()| ("", Value::Null));
    let b = before.map_or(none.clone(), fields_of);
    let a = after.map_or(none, fields_of);
    FIELDS
        .iter()
        .zip(b.into_iter().zip(a))
        .filter(|(_, ((_, b), (_, a)))| b != a)
        .map(|(f, ((_, b), (_, a)))| FieldChange {
            field: (*f).to_owned(),
            before: b,
            after: a,
        })
        .collect()
}

/// Makes `op` on `keys` at `now_ms`: what changed, for the audit trail.
/// On an error `keys` is as it was. The result is checked whole (every
/// entry resolves, names and secrets are unique) before it is returned.
pub fn apply_key_op(
    keys: &mut Vec<RawKey>,
    op: &KeyOp,
    now_ms: u64,
) -> Result<Vec<FieldChange>, OpError> {
    let name = op.name();
    if !is_valid_name(name) {
        return Err(OpError::invalid(
            "name",
            format!(
                "'{name}' is not a key name: use 1 to 64 letters, digits, '-', '_', '.' or '@'"
            ),
        ));
    }
    let now_secs = now_ms / 1000;
    let mut next = keys.clone();
    let first = next.iter().position(|k| k.name == name);
    let changes = match op {
        KeyOp::Create {
            changes, sha256, ..
        } => {
            if first.is_some() {
                return Err(OpError::Conflict(format!("a key named '{name}' exists")));
            }
            changes.check()?;
            let mut k = RawKey {
                created: Some(rfc3339_ms(now_ms)),
                ..RawKey::new(name, sha256)
            };
            changes.apply_to(&mut k);
            let d = diff(None, Some(&k));
            next.push(k);
            d
        }
        KeyOp::Update { changes, .. } => {
            let i = first.ok_or_else(|| OpError::NotFound(name.to_owned()))?;
            if changes.is_empty() {
                return Err(OpError::invalid(
                    "body",
                    format!("nothing to change: give one of {}", FIELDS.join(", ")),
                ));
            }
            changes.check()?;
            let before = next[i].clone();
            for k in next.iter_mut().filter(|k| k.name == name) {
                changes.apply_to(k);
            }
            diff(Some(&before), Some(&next[i]))
        }
        KeyOp::Rotate {
            grace_ms, sha256, ..
        } => {
            first.ok_or_else(|| OpError::NotFound(name.to_owned()))?;
            // Entries of this name that already expired are of no use.
            next.retain(|k| {
                k.name != name
                    || k.expires
                        .as_deref()
                        .and_then(parse_rfc3339)
                        .is_none_or(|t| t > now_secs)
            });
            let current = next
                .iter()
                .position(|k| k.name == name && k.expires.is_none())
                .ok_or_else(|| {
                    OpError::Conflict(format!(
                        "key '{name}' has no current secret to rotate (it is expiring)"
                    ))
                })?;
            if *grace_ms > MAX_GRACE_MS {
                return Err(OpError::invalid("grace", "must be at most 365 days"));
            }
            let expires = rfc3339_ms(now_ms.saturating_add(*grace_ms));
            let mut fresh = next[current].clone();
            next[current].expires = Some(expires.clone());
            fresh.sha256.clone_from(sha256);
            fresh.created = Some(rfc3339_ms(now_ms));
            fresh.expires = None;
            next.push(fresh);
            vec![FieldChange {
                field: "previous_secret_expires".into(),
                before: Value::Null,
                after: json!(expires),
            }]
        }
        KeyOp::Revoke { .. } => {
            let i = first.ok_or_else(|| OpError::NotFound(name.to_owned()))?;
            let n = next.iter().filter(|k| k.name == name).count();
            let mut d = diff(Some(&next[i]), None);
            d.insert(
                0,
                FieldChange {
                    field: "secrets".into(),
                    before: json!(n),
                    after: json!(0),
                },
            );
            next.retain(|k| k.name != name);
            d
        }
        KeyOp::Import { entries, .. } => {
            if first.is_some() {
                return Err(OpError::Conflict(format!("a key named '{name}' exists")));
            }
            if entries.is_empty() || entries.iter().any(|k| k.name != name) {
                return Err(OpError::invalid(
                    "name",
                    format!("the entries to import are not all of key '{name}'"),
                ));
            }
            next.extend(entries.iter().cloned());
            let shown = entries
                .iter()
                .find(|k| k.expires.is_none())
                .unwrap_or(&entries[0]);
            diff(None, Some(shown))
        }
    };
    check_keys(&next)?;
    *keys = next;
    Ok(changes)
}

/// Every entry resolves and names and secrets are unique: what a store may
/// hold.
pub fn check_keys(keys: &[RawKey]) -> Result<(), OpError> {
    let defaults = KeyDefaults::default();
    for k in keys {
        k.resolve(&defaults)
            .map_err(|e| OpError::invalid("key", e.0))?;
    }
    KeyTable::from_raw(keys, &defaults)
        .map(drop)
        .map_err(|e| OpError::Conflict(e.0))
}

/// A name's state at `now_secs`: `active` (a current secret), `rotating`
/// (a current secret, and the previous one still valid until the time
/// returned), `expiring` (only secrets that expire) or `expired`.
pub(crate) fn state_of<'a>(
    entries: impl Iterator<Item = (&'a Option<String>, Option<u64>)>,
    now_secs: u64,
) -> (&'static str, Option<&'a str>) {
    let mut current = false;
    let mut until: Option<(&'a str, u64)> = None;
    for (expires, expires_unix) in entries {
        match (expires, expires_unix) {
            (None, _) | (Some(_), None) => current = true,
            (Some(e), Some(t)) if t > now_secs && until.is_none_or(|(_, u)| t > u) => {
                until = Some((e.as_str(), t));
            }
            _ => {}
        }
    }
    match (current, until) {
        (true, None) => ("active", None),
        (true, Some((e, _))) => ("rotating", Some(e)),
        (false, Some((e, _))) => ("expiring", Some(e)),
        (false, None) => ("expired", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";
    const H3: &str = "3333333333333333333333333333333333333333333333333333333333333333";

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn create(name: &str, changes: KeyChanges, sha256: &str) -> KeyOp {
        KeyOp::Create {
            name: name.into(),
            changes,
            sha256: sha256.into(),
        }
    }

    #[test]
    fn json_fields_are_absent_null_or_set_and_checked() {
        let c = KeyChanges::from_json(
            &obj(json!({"rpm": 5, "budget_usd": null, "models": ["a"], "name": "x"})),
            &["name"],
        )
        .unwrap();
        assert_eq!(c.rpm, Some(Some(5)));
        assert_eq!(c.budget_usd, Some(None));
        assert_eq!(c.tpm, None);
        assert_eq!(c.models, Some(Some(vec!["a".into()])));
        let field = |v: Value| match KeyChanges::from_json(&obj(v), &[]) {
            Err(OpError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(json!({"name": "x"})), "name");
        assert_eq!(field(json!({"rpm": 0})), "rpm");
        assert_eq!(field(json!({"rpm": -1})), "rpm");
        assert_eq!(field(json!({"tpm": "5"})), "tpm");
        assert_eq!(field(json!({"budget_usd": -1.0})), "budget_usd");
        assert_eq!(field(json!({"budget_period": "year"})), "budget_period");
        assert_eq!(
            field(json!({"max_in_flight": 5_000_000_000u64})),
            "max_in_flight"
        );
        assert_eq!(field(json!({"models": []})), "models");
        assert_eq!(field(json!({"models": [1]})), "models");
        assert_eq!(field(json!({"secret": "x"})), "secret");
    }

    #[test]
    fn a_key_through_its_life() {
        let mut keys = vec![RawKey::new("other", H3)];
        let c = KeyChanges {
            rpm: Some(Some(10)),
            budget_usd: Some(Some(2.5)),
            ..KeyChanges::default()
        };
        let d = apply_key_op(&mut keys, &create("team", c.clone(), H1), 1_000).unwrap();
        assert_eq!(
            d.iter().map(|f| f.field.as_str()).collect::<Vec<_>>(),
            ["rpm", "budget_usd"]
        );
        assert_eq!(d[0].before, Value::Null);
        assert_eq!(d[0].after, json!(10));
        // The name is taken, and the secret too.
        let before = keys.clone();
        assert!(matches!(
            apply_key_op(&mut keys, &create("team", c.clone(), H2), 1_000),
            Err(OpError::Conflict(_))
        ));
        assert!(matches!(
            apply_key_op(&mut keys, &create("new", c, H1), 1_000),
            Err(OpError::Conflict(_))
        ));
        assert_eq!(keys, before);
        // An update records only what changed.
        let up = KeyOp::Update {
            name: "team".into(),
            changes: KeyChanges {
                rpm: Some(Some(10)),
                budget_usd: Some(None),
                ..KeyChanges::default()
            },
        };
        let d = apply_key_op(&mut keys, &up, 2_000).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].field.as_str(), &d[0].before),
            ("budget_usd", &json!(2.5))
        );
        // Rotation: the old secret expires after the grace, the new one
        // keeps the settings.
        let rot = KeyOp::Rotate {
            name: "team".into(),
            grace_ms: 60_000,
            sha256: H2.into(),
        };
        let d = apply_key_op(&mut keys, &rot, 3_000).unwrap();
        assert_eq!(d[0].after, json!("1970-01-01T00:01:03.000Z"));
        let team: Vec<&RawKey> = keys.iter().filter(|k| k.name == "team").collect();
        assert_eq!(team.len(), 2);
        assert_eq!(team[1].sha256, H2);
        assert_eq!(team[1].requests_per_minute, Some(10));
        let (state, until) = state_of(
            team.iter()
                .map(|k| (&k.expires, k.expires.as_deref().and_then(parse_rfc3339))),
            10,
        );
        assert_eq!(
            (state, until),
            ("rotating", Some("1970-01-01T00:01:03.000Z"))
        );
        // A change reaches both entries.
        apply_key_op(
            &mut keys,
            &KeyOp::Update {
                name: "team".into(),
                changes: KeyChanges {
                    tpm: Some(Some(7)),
                    ..KeyChanges::default()
                },
            },
            4_000,
        )
        .unwrap();
        assert!(
            keys.iter()
                .filter(|k| k.name == "team")
                .all(|k| k.tokens_per_minute == Some(7))
        );
        // Revocation removes every entry.
        let d = apply_key_op(
            &mut keys,
            &KeyOp::Revoke {
                name: "team".into(),
            },
            5_000,
        )
        .unwrap();
        assert_eq!(d[0].before, json!(2));
        assert_eq!(keys, vec![RawKey::new("other", H3)]);
        for op in [
            KeyOp::Revoke {
                name: "team".into(),
            },
            rot,
            up,
        ] {
            assert_eq!(
                apply_key_op(&mut keys, &op, 6_000),
                Err(OpError::NotFound("team".into()))
            );
        }
    }

    #[test]
    fn refusals_change_nothing() {
        let mut keys = vec![RawKey::new("a", H1)];
        let bad = [
            create("bad/name", KeyChanges::default(), H2),
            create("b", KeyChanges::default(), "zz"),
            KeyOp::Update {
                name: "a".into(),
                changes: KeyChanges::default(),
            },
            KeyOp::Update {
                name: "a".into(),
                changes: KeyChanges {
                    rpm: Some(Some(0)),
                    ..KeyChanges::default()
                },
            },
        ];
        for op in &bad {
            assert!(
                matches!(apply_key_op(&mut keys, op, 0), Err(OpError::Invalid { .. })),
                "{op:?}"
            );
        }
        assert_eq!(keys, vec![RawKey::new("a", H1)]);
    }

    #[test]
    fn an_expiring_key_cannot_be_rotated_and_expired_entries_go() {
        let mut keys = vec![RawKey {
            expires: Some("1970-01-01T00:00:10Z".into()),
            ..RawKey::new("a", H1)
        }];
        let rot = KeyOp::Rotate {
            name: "a".into(),
            grace_ms: 0,
            sha256: H2.into(),
        };
        assert!(matches!(
            apply_key_op(&mut keys, &rot, 5_000),
            Err(OpError::Conflict(_))
        ));
        assert_eq!(
            state_of(keys.iter().map(|k| (&k.expires, Some(10))), 5),
            ("expiring", Some("1970-01-01T00:00:10Z"))
        );
        assert_eq!(
            state_of(keys.iter().map(|k| (&k.expires, Some(10))), 10),
            ("expired", None)
        );
    }
}
