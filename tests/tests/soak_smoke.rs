//! A short soak through each binary: the same mixed load and the same
//! reconciliation (ledger lines == requests, ledger tokens == simulator
//! tokens, no unexpected failure, memory flat) as `scripts/soak.sh`, for
//! 20 seconds instead of 10 minutes.

use std::process::Command;

fn soak(bin: &str) {
    let soak = chatgate_tests::bin_path("chatgate-soak");
    let out = Command::new(&soak)
        .args([
            "--bin",
            bin,
            "--seconds",
            "20",
            "--rate",
            "25",
            "--warmup",
            "5",
        ])
        .output()
        .expect("run chatgate-soak");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("| records lost | 0 |"), "{text}");
    println!("{text}");
}

#[test]
fn soak_smol() {
    soak("chatgate-smol");
}

#[test]
fn soak_tokio() {
    soak("chatgate-tokio");
}
