//! The documentation says what the binaries do.

use chatgate_core::{SERVE_SETTINGS, env_name, flag_name};

fn readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    std::fs::read_to_string(path).expect("README.md")
}

#[test]
fn readme_lists_every_setting_with_its_default() {
    let readme = readme();
    for s in SERVE_SETTINGS {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `--{}` ", flag_name(s.key))))
            .unwrap_or_else(|| panic!("README has no row for --{}", flag_name(s.key)));
        assert!(row.contains(&format!("`{}`", env_name(s.key))), "{row}");
        match s.default {
            Some(d) => assert!(
                row.contains(&format!("`{d}`")),
                "default of --{} missing: {row}",
                flag_name(s.key)
            ),
            None => assert!(row.contains("(required)") || row.contains("| |"), "{row}"),
        }
    }
}

#[test]
fn readme_names_both_commands() {
    let readme = readme();
    assert!(readme.contains("cargo run --release -p chatgate-smol -- demo"));
    assert!(readme.contains("scripts/test.sh"));
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../.ci/run"))
        .expect(".ci/run");
    assert!(
        ci.contains("scripts/test.sh"),
        ".ci/run runs the README's test command"
    );
}

#[test]
fn readme_explains_every_ledger_error_kind() {
    let readme = readme();
    for kind in chatgate_core::UpstreamFault::ALL {
        let row = format!("| `{}` |", kind.as_str());
        assert!(readme.contains(&row), "README has no row for {row}");
    }
}

/// Every metric OPERATIONS.md names (its table, alerts and examples) is one
/// the gateway exposes, and every flag its `chatgate-smol` commands use is
/// one the binary accepts.
#[test]
fn operations_guide_matches_the_binaries() {
    use std::path::Path;

    use chatgate_tests::*;
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../OPERATIONS.md"))
        .expect("OPERATIONS.md");
    let bin = "chatgate-smol";
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--admin-listen".into(), "127.0.0.1:0".into()],
            ..GwOptions::default()
        },
    );
    let admin: std::net::SocketAddr = gw
        .proc
        .line()
        .trim()
        .trim_start_matches("chatgate admin listening on http://")
        .parse()
        .unwrap();
    let exposed = String::from_utf8(request(admin, "GET", "/metrics", None, None).body).unwrap();
    let mut named = std::collections::BTreeSet::new();
    for (i, _) in doc.match_indices("chatgate_") {
        let name: String = doc[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        named.insert(name);
    }
    assert!(named.len() > 15, "{named:?}");
    // PostgreSQL's tables are named so too: the schemas say which.
    let tables: Vec<String> = ["ledger.sql", "keys.sql", "console.sql", "responses.sql"]
        .iter()
        .flat_map(|f| {
            let sql = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../host")
                    .join(f),
            )
            .unwrap();
            sql.lines()
                .filter_map(|l| l.strip_prefix("CREATE TABLE IF NOT EXISTS "))
                .map(|l| l.split_whitespace().next().unwrap().to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(tables.iter().any(|t| t == "chatgate_audit"), "{tables:?}");
    for name in named
        .iter()
        .filter(|n| !tables.contains(n) || exposed.contains(&format!("# TYPE {n} ")))
    {
        let family = name
            .trim_end_matches("_bucket")
            .trim_end_matches("_sum")
            .trim_end_matches("_count");
        assert!(
            exposed.contains(&format!("# TYPE {family} ")),
            "OPERATIONS.md names {name}, which /metrics does not expose"
        );
    }
    // Every family /metrics exposes is in the table, with its type.
    for l in exposed.lines() {
        let Some(rest) = l.strip_prefix("# TYPE ") else {
            continue;
        };
        let (family, kind) = rest.split_once(' ').expect("# TYPE name kind");
        let row = doc
            .lines()
            .find(|r| {
                r.starts_with("| `chatgate_")
                    && r.split('|')
                        .nth(1)
                        .is_some_and(|c| c.contains(&format!("`{family}`")))
            })
            .unwrap_or_else(|| panic!("OPERATIONS.md's metrics table has no row for {family}"));
        assert_eq!(
            row.split('|').nth(2).map(str::trim),
            Some(kind),
            "the type of {family}: {row}"
        );
    }
    // Flags of the documented commands (a command continued over several
    // lines with `\` is one command).
    let joined = doc.replace("\\\n", " ");
    let (mut checked, mut flags) = (0, 0);
    for line in joined.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("chatgate-smol ") else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        let sub: Vec<&str> = words
            .iter()
            .take_while(|w| !w.starts_with('-') && !w.contains('/'))
            .copied()
            .filter(|w| {
                [
                    "serve", "keys", "new", "list", "set", "rotate", "revoke", "import", "usage",
                ]
                .contains(w)
            })
            .collect();
        let mut args = sub.clone();
        args.push("--help");
        let (code, help, _) = run(bin, &args, &[]);
        assert_eq!(code, 0, "{line}");
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            flags += 1;
            assert!(
                help.contains(&format!("{flag} ")),
                "`{line}`: {flag} is not a flag of {sub:?}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 7, "{checked} commands checked");
    assert!(
        joined.contains("--key alice") && joined.contains("--since 2026-11-01 --until"),
        "the usage example's continuation line is checked"
    );
    assert!(flags >= 17, "{flags} flags checked");
    assert!(gw.alive());
}

/// The pools the README and OPERATIONS.md show resolve as they say: every
/// table an endpoint, keys from the variables they name.
#[test]
fn documented_pools_resolve() {
    for file in ["README.md", "OPERATIONS.md"] {
        let path = format!("{}/../{file}", env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(path).expect("the document");
        let block = doc
            .split("```toml\n")
            .skip(1)
            .map(|b| b.split("```").next().unwrap_or(""))
            .find(|b| b.contains("[[upstream]]"))
            .unwrap_or_else(|| panic!("{file} shows no pool"));
        let names: Vec<String> = block
            .lines()
            .filter_map(|l| l.strip_prefix("api_key_env = \""))
            .map(|l| l.split('"').next().unwrap_or("").to_owned())
            .collect();
        let env = names
            .iter()
            .map(|n| (n.clone(), format!("secret-of-{n}")))
            .collect();
        let cfg = chatgate_core::ServeConfig::resolve(chatgate_core::Sources {
            flags: Default::default(),
            env,
            file: Some(block.to_owned()),
        })
        .unwrap_or_else(|e| panic!("{file}: {e}"));
        let pool = &cfg.gateway.endpoints;
        assert_eq!(pool.len(), names.len(), "{file}");
        for (e, var) in pool.iter().zip(&names) {
            let key = e.target.api_key.as_ref().map(|k| k.expose().to_owned());
            assert_eq!(key, Some(format!("secret-of-{var}")), "{file}: {}", e.name);
        }
        assert!(pool.iter().any(|e| e.model.is_some()), "{file}");
    }
}

/// Every module a crate root (`lib.rs`, a binary's `main.rs`) or a folder's
/// `mod.rs` declares is named in that file's own doc (its table of rooms),
/// in every crate of the workspace but the two runtimes' single files and
/// the fuzz targets; and every module of core and
/// host in `docs/architecture.md`: a module added without a line in the
/// table that says what it holds fails here, so the tables cannot drift.
#[test]
fn every_module_is_in_its_doc_table() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let architecture =
        std::fs::read_to_string(root.join("docs/architecture.md")).expect("architecture.md");
    let mut missing = Vec::new();
    let crates = [
        "core/src",
        "host/src",
        "sim/src",
        "testkit/src",
        "tests/src",
        "bench/src",
    ];
    for krate in crates {
        let mut dirs = vec![root.join(krate)];
        while let Some(dir) = dirs.pop() {
            // A folder's index: the crate root, its `mod.rs`, or the file
            // of the same name beside it (`validate.rs` for `validate/`).
            let index = ["lib.rs", "main.rs", "mod.rs"]
                .iter()
                .map(|f| dir.join(f))
                .chain([dir.with_extension("rs")])
                .find(|p| p.exists());
            let Some(index) = index else { continue };
            let text = std::fs::read_to_string(&index).unwrap();
            let doc: String = text
                .lines()
                .filter(|l| l.trim_start().starts_with("//!"))
                .collect::<Vec<_>>()
                .join("\n");
            let mut after_cfg_test = false;
            for line in text.lines().map(str::trim) {
                let declared = line
                    .strip_prefix("pub mod ")
                    .or_else(|| line.strip_prefix("pub(crate) mod "))
                    .or_else(|| line.strip_prefix("mod "))
                    .and_then(|rest| rest.strip_suffix(';'));
                let test_only = std::mem::replace(&mut after_cfg_test, line == "#[cfg(test)]");
                let Some(name) = declared else { continue };
                let at = index.strip_prefix(&root).unwrap().display().to_string();
                if test_only || name == "tests" {
                    continue;
                }
                let named = |text: &str| {
                    [
                        format!("`{name}`"),
                        format!("`{name}/`"),
                        format!("`{name}.rs`"),
                    ]
                    .iter()
                    .any(|n| text.contains(n.as_str()))
                };
                if !named(&doc) {
                    missing.push(format!("{at}'s doc does not name `{name}`"));
                }
                // The architecture page names the crates' rooms and the
                // exchange's: a module at most one folder deep, in core or
                // host (deeper ones are their folder's business).
                let depth = dir
                    .strip_prefix(root.join(krate))
                    .map_or(9, |p| p.components().count());
                let in_map = ["core/src", "host/src"].contains(&krate)
                    && (depth == 0
                        || (depth == 1 && (krate == "host/src" || at.contains("exchange"))));
                if in_map && !named(&architecture) {
                    missing.push(format!(
                        "docs/architecture.md does not name `{name}` ({at})"
                    ));
                }
                let sub = dir.join(name);
                if sub.is_dir() {
                    dirs.push(sub);
                }
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// OPERATIONS.md's managed Redis recipes are settings chatgate reads as
/// they are meant: each over TLS, its password shown as `***`.
#[test]
fn the_managed_redis_recipes_are_tls() {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../OPERATIONS.md"))
        .expect("OPERATIONS.md");
    let section = guide
        .split("## Managed Redis")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("OPERATIONS.md has Managed Redis");
    let mut recipes = 0;
    for line in section.lines() {
        let Some((key, value)) = line.split_once(" = ") else {
            continue;
        };
        let port = match key {
            "redis" | "redis_cluster" => 6379,
            _ => continue,
        };
        let value = value.trim().trim_matches('"');
        let urls =
            chatgate_core::parse_redis_list(value, port).unwrap_or_else(|e| panic!("{line}: {e}"));
        for url in urls {
            assert!(url.tls, "not TLS: {line}");
            let shown = url.display();
            assert!(shown.contains("***@"), "{line}: shown as {shown}");
        }
        recipes += 1;
    }
    assert!(recipes >= 5, "{recipes} recipes");
}
