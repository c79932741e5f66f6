//! Waiting: how long the tests wait for anything that should be quick, and
//! waiting for a condition to hold.

use std::time::{Duration, Instant};

/// How long to wait for anything that should be quick.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Waits until `f` holds.
pub fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(what, PATIENCE, f)
}

/// Waits until `f` holds, for at most `patience` (for what takes its own
/// time, such as a failover).
pub fn eventually_within(what: &str, patience: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
