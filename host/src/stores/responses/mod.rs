//! The Responses API's store: where kept responses live (`embedded.rs`: a
//! file, the default; or PostgreSQL, shared by a fleet, in
//! `stores/postgres/responses.rs`), carrying out what the core asks
//! ([`chatgate_core::StoreAsk`]) off the reactor threads, and the reaper
//! that forgets expired responses in the background.

mod embedded;

pub(crate) use embedded::RESTARTED;

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::dialect::responses::stored::StoredResponse;
use chatgate_core::{Gateway, ResponsesStoreAt, StoreAsk, StoreError, StoreReply};

use crate::error::Error;
use crate::runtime::{Runtime, now};

/// How often expired responses are looked for.
const REAP_EVERY: Duration = Duration::from_secs(60);
/// How often (PostgreSQL) this process renews its runs' leases and looks
/// for runs whose instance stopped renewing theirs: a third of a lease.
const CHECK_RUNS_EVERY: Duration =
    Duration::from_secs(crate::stores::postgres::responses::LEASE_SECS / 3);

/// What a store of kept responses does, each call blocking; [`Backend::
/// answer`] carries out what the core asks with them.
pub(crate) trait Backend {
    /// `key`'s responses: `chain` with every response before it, and
    /// `responses` alone, not expired at `unix`; the bytes `key` keeps.
    fn read(
        &self,
        key: &str,
        chain: Option<&str>,
        responses: &[String],
        unix: u64,
    ) -> Result<StoreReply, StoreError>;
    /// Keeps `r` (replacing its earlier record), at `unix`; with
    /// `replace_only`, only if it is still kept.
    fn keep(&self, r: &StoredResponse, unix: u64, replace_only: bool) -> Result<(), StoreError>;
    /// Forgets `key`'s response `id`: whether it was there.
    fn delete(&self, key: &str, id: &str) -> Result<bool, StoreError>;

    /// Carries out `ask` at `unix`.
    fn answer(&self, ask: StoreAsk, unix: u64) -> Result<StoreReply, StoreError> {
        match ask {
            StoreAsk::Read {
                key,
                chain,
                responses,
            } => self.read(&key, chain.as_deref(), &responses, unix),
            StoreAsk::Keep(record) => self.keep(&record, unix, false).map(|()| StoreReply::Kept),
            StoreAsk::Replace(record) => self.keep(&record, unix, true).map(|()| StoreReply::Kept),
            StoreAsk::Delete { key, id } => self.delete(&key, &id).map(StoreReply::Deleted),
        }
    }
}

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

    /// A run of this process ended: its lease is no longer renewed, however
    /// its last record was (or was not) written.
    pub(crate) fn run_ended(&self, id: &str) {
        if let ResponsesStore::Postgres(p) = self {
            p.run_ended(id);
        }
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
                        // Leases first: a long reap must not let them lapse.
                        let failed = p.check_runs(unix)?;
                        let reaped = if reap { p.reap(unix)? } else { 0 };
                        Ok((reaped, failed))
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
