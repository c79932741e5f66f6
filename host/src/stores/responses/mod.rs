//! The Responses API's store: where kept responses live (`embedded.rs`: a
//! file, the default; or PostgreSQL, shared by a fleet, in
//! `stores/postgres/responses.rs`), carrying out what the core asks
//! ([`chatgate_core::StoreAsk`]) off the reactor threads, and the reaper
//! that forgets expired responses in the background.

mod embedded;

pub(crate) use embedded::RESTARTED;

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::{Gateway, ResponsesStoreAt, StoreAsk, StoreError, StoreReply};

use crate::error::Error;
use crate::runtime::{Runtime, now};

/// How often expired responses are looked for.
const REAP_EVERY: Duration = Duration::from_secs(60);
/// How often (PostgreSQL) this process renews its runs' leases and looks
/// for runs whose instance stopped renewing theirs: a third of a lease.
const CHECK_RUNS_EVERY: Duration =
    Duration::from_secs(crate::stores::postgres::responses::LEASE_SECS / 3);

/// Where kept responses live.
pub(crate) enum ResponsesStore {
    /// A file.
    Embedded(embedded::Embedded),
    /// PostgreSQL.
    Postgres(crate::stores::postgres::responses::PgResponses),
}

impl ResponsesStore {
    /// Opens the store `at` names (a file is created when missing).
    pub(crate) fn open(at: &ResponsesStoreAt) -> Result<Arc<ResponsesStore>, Error> {
        match at {
            ResponsesStoreAt::File(path) => Ok(Arc::new(ResponsesStore::Embedded(
                embedded::Embedded::open(path)?,
            ))),
            ResponsesStoreAt::Postgres(url) => Ok(Arc::new(ResponsesStore::Postgres(
                crate::stores::postgres::responses::PgResponses::open(url)?,
            ))),
        }
    }

    /// Carries out `ask` off the reactor threads.
    pub(crate) async fn answer<R: Runtime>(
        self: Arc<Self>,
        rt: &R,
        gateway: &Gateway,
        ask: StoreAsk,
    ) -> Result<StoreReply, StoreError> {
        let unix = gateway.wall().unix_secs(now());
        rt.unblock(move || match &*self {
            ResponsesStore::Embedded(e) => e.answer(ask, unix),
            ResponsesStore::Postgres(p) => p.answer(ask, unix),
        })
        .await
    }

    /// Forgets expired responses now and then, for as long as the process
    /// lives.
    pub(crate) async fn reap<R: Runtime>(self: Arc<Self>, rt: R, gateway: Arc<Gateway>) {
        let mut next_reap = std::time::Instant::now();
        loop {
            let unix = gateway.wall().unix_secs(now());
            let reap = std::time::Instant::now() >= next_reap;
            if reap {
                next_reap = std::time::Instant::now() + REAP_EVERY;
            }
            let store = Arc::clone(&self);
            let checked = rt
                .unblock(move || match &*store {
                    ResponsesStore::Embedded(e) if reap => e.reap(unix).map(|n| (n, 0)),
                    ResponsesStore::Embedded(_) => Ok((0, 0)),
                    ResponsesStore::Postgres(p) => {
                        let reaped = if reap { p.reap(unix)? } else { 0 };
                        Ok((reaped, p.check_runs(unix)?))
                    }
                })
                .await;
            match checked {
                Ok((reaped, failed)) => {
                    if reaped > 0 {
                        tracing::info!(responses = reaped, "expired responses forgotten");
                    }
                    if failed > 0 {
                        tracing::warn!(
                            responses = failed,
                            "background responses whose instance stopped were marked failed"
                        );
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the responses store could not be tidied"),
            }
            let wait = match &*self {
                ResponsesStore::Embedded(_) => REAP_EVERY,
                ResponsesStore::Postgres(_) => CHECK_RUNS_EVERY,
            };
            rt.timer(std::time::Instant::now() + wait).await;
        }
    }
}
