//! The Responses API's store: where kept responses live (`embedded.rs`: a
//! file, the default; or PostgreSQL, shared by a fleet, in
//! `stores/postgres/responses.rs`), carrying out what the core asks
//! ([`chatgate_core::StoreAsk`]) off the reactor threads, and the reaper
//! that forgets expired responses in the background.

mod embedded;

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::{Gateway, ResponsesStoreAt, StoreAsk, StoreError, StoreReply};

use crate::error::Error;
use crate::runtime::{Runtime, now};

/// How often expired responses are looked for.
const REAP_EVERY: Duration = Duration::from_secs(60);

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
        loop {
            rt.timer(std::time::Instant::now() + REAP_EVERY).await;
            let unix = gateway.wall().unix_secs(now());
            let store = Arc::clone(&self);
            let reaped = rt
                .unblock(move || match &*store {
                    ResponsesStore::Embedded(e) => e.reap(unix),
                    ResponsesStore::Postgres(p) => p.reap(unix),
                })
                .await;
            match reaped {
                Ok(0) => {}
                Ok(n) => tracing::info!(responses = n, "expired responses forgotten"),
                Err(e) => tracing::warn!(error = %e, "expired responses could not be forgotten"),
            }
        }
    }
}
