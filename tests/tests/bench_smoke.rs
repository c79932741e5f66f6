//! The benchmark harness keeps working: a short run of the workloads that
//! need no load generator but its own (start-up, timed streams, held
//! streams, open loop, many long streams) against the debug binaries and
//! a real nginx. The figures are not checked here (speed lives in
//! benchmarks, not tests); that the tables come out is, and that every
//! long stream was delivered and metered.

use std::process::Command;

#[test]
fn the_benchmark_harness_runs() {
    let bin = chatgate_tests::bin_path("chatgate-bench");
    let dir = bin.parent().expect("target directory").to_owned();
    let out = Command::new(&bin)
        .args([
            "--quick",
            "--seconds",
            "1",
            "--only",
            "startup,timed,hold,openloop,long",
            "--bin-dir",
        ])
        .arg(&dir)
        .output()
        .expect("run chatgate-bench");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "### Start-up",
        "### Timed streams",
        "slow streams held open",
        "### Open loop",
        "### Many long streams: 200 open at once",
        // Every stream delivered, and the ledger one whole line each.
        "| 200/200 | exact |",
        "| chatgate-smol |",
        "| chatgate-tokio |",
        "| nginx |",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}
