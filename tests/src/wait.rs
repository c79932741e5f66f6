//! Waiting: how long the tests wait for anything that should be quick, and
//! waiting for a condition to hold.

use std::time::{Duration, Instant};

/// How long to wait for anything that should be quick.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Waits until `f` holds.
pub fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
