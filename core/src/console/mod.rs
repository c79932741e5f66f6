//! What the operator's console shows, recorded as the gateway runs, and who
//! may see it: its figures and sessions. The page (HTML, CSS and script
//! embedded from `core/console/`) and the JSON it reads are answered by the
//! admin listener (`admin/console.rs`), behind the admin token.
//!
//! Its figures come from what the gateway already keeps:
//! - the last hour in ten-second slots (`timeline`), recorded as requests
//!   finish and from a one-second sample of the gauges by the runtime;
//! - each key's last 24 hours and the newest failures (`book`), from the
//!   ledger records this process writes and the lines of its ledger file
//!   read at start, so a key's figures are its ledger lines';
//! - spend per budget period and requests in flight from the budgets'
//!   book, provider endpoints from the pool.
//!
//! Nothing is recorded while the console is off (no `--admin-token-env`).
//!
//! | file | job |
//! |---|---|
//! | `access.rs` | the admin token, the login form and the sessions |
//! | `sso.rs` | single sign-on with OpenID Connect: the sign-in's state, nonce and PKCE, the ID token checked, who may enter and who may change |
//! | `book.rs` | each key's and each model's last 24 hours by the hour, and the newest failures |
//! | `throttle.rs` | failed logins by address, and the growing wait after them |
//! | `timeline.rs` | the last hour in ten-second slots, with latency histograms |

mod access;
mod book;
mod sso;
mod throttle;
mod timeline;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The policy on every console answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) use access::form_value;
pub use access::{Access, COOKIE, SESSION_SECS, SessionChange, StoredSession, Who};
pub use book::{Failure, Tally};
pub use sso::{Exchange, STATE_COOKIE, SignedIn, Sso, SsoConfig};
pub use throttle::{Peer, Throttle};
pub use timeline::{Point, SLOT_SECS, SLOTS};

use crate::ledger::LedgerRecord;

/// How long gathered cluster figures stand in for this instance's.
pub const CLUSTER_FRESH_MS: u64 = 15_000;

/// Every instance's figures, gathered by the runtime from the shared
/// stores while someone looks at the console.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterFigures {
    /// When they were gathered (Unix ms).
    pub at_ms: u64,
    /// Each key's tally since midnight UTC, summed over the shared ledger
    /// in PostgreSQL (`--ledger-postgres`), when it is configured.
    pub today: Option<std::collections::HashMap<String, Tally>>,
    /// Each key's spend in its budget's period and its requests in
    /// flight, as Redis holds them for every instance (`--redis`); a key
    /// Redis has not seeded yet is left out.
    pub quota: Option<std::collections::HashMap<String, (u64, u32)>>,
}

/// The console's state in a gateway process.
#[derive(Debug)]
pub struct Console {
    access: Option<Access>,
    sso: Option<Sso>,
    /// Every instance's figures, when the runtime gathers them.
    cluster: Mutex<Option<ClusterFigures>>,
    /// When the overview was last asked for (Unix ms): the runtime
    /// gathers the cluster's figures only while someone looks.
    last_look_ms: std::sync::atomic::AtomicU64,
    timeline: Mutex<timeline::Timeline>,
    book: Mutex<book::Book>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update leaves its state consistent: a panic elsewhere while
    // holding the lock does not poison the figures.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Console {
    /// The console, on when there is an admin token.
    pub fn new(token: Option<&str>) -> Console {
        Console::named(token, "admin")
    }

    /// The console, on when there is an admin token, which the audit trail
    /// calls `token:{name}` (the variable it is in).
    pub fn named(token: Option<&str>, name: &str) -> Console {
        Console {
            access: token.map(|t| Access::named(t, name)),
            sso: None,
            cluster: Mutex::default(),
            last_look_ms: std::sync::atomic::AtomicU64::new(0),
            timeline: Mutex::default(),
            book: Mutex::default(),
        }
    }

    /// On: an admin token is configured.
    pub fn is_on(&self) -> bool {
        self.access.is_some()
    }

    /// With single sign-on too.
    pub fn with_sso(mut self, sso: Option<SsoConfig>) -> Console {
        self.sso = sso.map(Sso::new);
        self
    }

    /// Single sign-on, when configured.
    pub fn sso(&self) -> Option<&Sso> {
        self.sso.as_ref()
    }

    /// Every instance's figures, as the runtime gathered them.
    pub fn set_cluster(&self, figures: ClusterFigures) {
        *lock(&self.cluster) = Some(figures);
    }

    /// The cluster's figures, when gathered in the last
    /// [`CLUSTER_FRESH_MS`] before `now_ms`.
    pub(crate) fn cluster(&self, now_ms: u64) -> Option<ClusterFigures> {
        lock(&self.cluster)
            .as_ref()
            .filter(|c| now_ms.saturating_sub(c.at_ms) < CLUSTER_FRESH_MS)
            .cloned()
    }

    /// Someone looked at the overview at `now_ms`.
    pub(crate) fn looked(&self, now_ms: u64) {
        self.last_look_ms
            .store(now_ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// Someone looked at the overview in the `within_ms` before `now_ms`:
    /// the cluster's figures are worth gathering.
    pub fn watched(&self, now_ms: u64, within_ms: u64) -> bool {
        now_ms.saturating_sub(self.last_look_ms.load(std::sync::atomic::Ordering::Relaxed))
            < within_ms
    }

    /// Who may read it, when it is on.
    pub fn access(&self) -> Option<&Access> {
        self.access.as_ref()
    }

    /// A request finished at `unix_ms` (every request the gateway answers).
    pub(crate) fn finished(
        &self,
        unix_ms: u64,
        status: u16,
        overhead: Duration,
        ttfb: Option<Duration>,
    ) {
        if self.is_on() {
            lock(&self.timeline).finished(unix_ms, status, overhead, ttfb);
        }
    }

    /// A ledger record of this process; `model_known` when its model is
    /// a catalogue id (it was validated).
    pub(crate) fn record(&self, rec: &LedgerRecord, model_known: bool) {
        if self.is_on() {
            lock(&self.book).add_record(rec, model_known);
        }
    }

    /// A line of the ledger file read at start (without its newline),
    /// tallied under its model too when `catalog` has it; `false` when it
    /// cannot be read.
    pub fn seed_line(&self, line: &[u8], now_ms: u64, catalog: &crate::catalog::Catalog) -> bool {
        !self.is_on() || lock(&self.book).add_line(line, now_ms, |m| catalog.get(m).is_some())
    }

    /// The gauges sampled at `unix_ms`: requests in flight and open
    /// streams.
    pub(crate) fn sample(&self, unix_ms: u64, in_flight: u32, streams: u32) {
        if self.is_on() {
            lock(&self.timeline).sample(unix_ms, in_flight, streams);
        }
    }

    pub(crate) fn points(&self, unix_ms: u64) -> Vec<Point> {
        lock(&self.timeline).points(unix_ms)
    }

    pub(crate) fn book(&self) -> MutexGuard<'_, book::Book> {
        lock(&self.book)
    }
}
