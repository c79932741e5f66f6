//! One `[[upstream]]` or `[[model]]` table of the config file, read field
//! by field: every refusal is one line naming the table (by its number)
//! and the field.

use super::ConfigError;

/// A table of the config file and where it is.
pub(super) struct Table<'a> {
    /// `upstream` or `model`.
    kind: &'static str,
    /// Its number, from 1.
    n: usize,
    t: &'a toml::Table,
}

impl<'a> Table<'a> {
    /// The `n`th `[[kind]]` entry, when it is a table with no field but
    /// `fields`.
    pub(super) fn open(
        kind: &'static str,
        n: usize,
        value: &'a toml::Value,
        fields: &[&str],
    ) -> Result<Table<'a>, ConfigError> {
        let toml::Value::Table(t) = value else {
            return Err(Table::bad_in(kind, n, "", "is not a table"));
        };
        let table = Table { kind, n, t };
        match t.keys().find(|k| !fields.contains(&k.as_str())) {
            Some(field) => Err(table.bad(
                field,
                format!("unknown field (fields: {})", fields.join(", ")),
            )),
            None => Ok(table),
        }
    }

    fn bad_in(kind: &str, n: usize, field: &str, why: &str) -> ConfigError {
        ConfigError(format!("config file: [[{kind}]] #{n} {field}: {why}"))
    }

    /// The refusal of `field`, saying `why`.
    pub(super) fn bad(&self, field: &str, why: impl AsRef<str>) -> ConfigError {
        Table::bad_in(self.kind, self.n, field, why.as_ref())
    }

    /// The value of `field`, if set.
    pub(super) fn get(&self, field: &str) -> Option<&'a toml::Value> {
        self.t.get(field)
    }

    /// `field` as a non-empty string, if set.
    pub(super) fn string(&self, field: &str) -> Result<Option<String>, ConfigError> {
        match self.t.get(field) {
            None => Ok(None),
            Some(toml::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(self.bad(field, "must be a non-empty string")),
        }
    }

    /// `field` as a list of non-empty strings, if set.
    pub(super) fn list(&self, field: &str) -> Result<Option<Vec<String>>, ConfigError> {
        let Some(v) = self.t.get(field) else {
            return Ok(None);
        };
        let items = v.as_array().map(|a| {
            a.iter()
                .map(|s| s.as_str().filter(|s| !s.is_empty()).map(str::to_owned))
                .collect::<Option<Vec<String>>>()
        });
        match items {
            Some(Some(names)) => Ok(Some(names)),
            _ => Err(self.bad(field, "must be a list of non-empty strings")),
        }
    }
}
