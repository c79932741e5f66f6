//! The audit trail's file: one JSON line per change to the keys, beside
//! the ledger (`<ledger>` without `.jsonl`, then `.audit.jsonl`), mode
//! 0600, each line written with one `write` and synced. A record's id in
//! the file is its line number, from 1.

use chatgate_core::AuditRecord;

use crate::error::Error;

/// The audit file beside a ledger file; none when the ledger is not a
/// file.
pub(crate) fn path_beside(ledger: &str) -> Option<String> {
    if ledger.is_empty() || ledger == "-" || ledger.starts_with("/dev/") {
        return None;
    }
    Some(format!(
        "{}.audit.jsonl",
        ledger.strip_suffix(".jsonl").unwrap_or(ledger)
    ))
}

/// Appends a record (its id left out: the line number is the id).
pub(crate) fn append(path: &str, record: &AuditRecord) -> Result<(), Error> {
    let mut line = serde_json::to_vec(&AuditRecord {
        id: None,
        ..record.clone()
    })
    .unwrap_or_default();
    line.push(b'\n');
    super::keys_file::append_private(path, &line).map_err(|source| Error::File {
        what: format!("cannot append to the audit file '{path}'"),
        source,
    })
}

/// Up to `limit` records, newest first, with ids below `before` (all, when
/// `None`). A line that does not read is skipped (a torn last line after a
/// crash); a missing file has no records.
pub(crate) fn page(
    path: &str,
    before: Option<u64>,
    limit: usize,
) -> Result<Vec<AuditRecord>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::File {
                what: format!("cannot read the audit file '{path}'"),
                source,
            });
        }
    };
    let lines: Vec<&str> = text.lines().collect();
    let end = before.map_or(lines.len(), |b| {
        (b.saturating_sub(1) as usize).min(lines.len())
    });
    Ok(lines[..end]
        .iter()
        .enumerate()
        .rev()
        .filter_map(|(i, l)| {
            let mut r: AuditRecord = serde_json::from_str(l).ok()?;
            r.id = Some(i as u64 + 1);
            Some(r)
        })
        .take(limit)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_the_ledger() {
        assert_eq!(
            path_beside("/var/lib/chatgate/ledger.jsonl").as_deref(),
            Some("/var/lib/chatgate/ledger.audit.jsonl")
        );
        assert_eq!(
            path_beside("usage.log").as_deref(),
            Some("usage.log.audit.jsonl")
        );
        assert_eq!(path_beside("-"), None);
    }

    #[test]
    fn pages_newest_first() {
        let dir = std::env::temp_dir().join(format!("chatgate-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.audit.jsonl").to_string_lossy().into_owned();
        let _ = std::fs::remove_file(&path);
        for i in 0..5 {
            append(
                &path,
                &AuditRecord {
                    id: Some(99),
                    at: format!("t{i}"),
                    actor: "cli:me".into(),
                    address: None,
                    action: "update".into(),
                    key: "k".into(),
                    changes: vec![],
                },
            )
            .unwrap();
        }
        let p = page(&path, None, 2).unwrap();
        assert_eq!(p.iter().map(|r| r.id.unwrap()).collect::<Vec<_>>(), [5, 4]);
        assert_eq!(p[0].at, "t4");
        let p = page(&path, Some(4), 10).unwrap();
        assert_eq!(
            p.iter().map(|r| r.id.unwrap()).collect::<Vec<_>>(),
            [3, 2, 1]
        );
        assert!(page(&path, Some(1), 10).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
