//! The documentation says what the binaries do.

use chatgate_core::config::{SERVE_SETTINGS, env_name, flag_name};

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
    for kind in chatgate_core::error::UpstreamFault::ALL {
        let row = format!("| `{}` |", kind.as_str());
        assert!(readme.contains(&row), "README has no row for {row}");
    }
}
