//! The console's figures of every instance. While someone looks at the
//! console (an overview asked for in the last [`WATCHED`]), every
//! [`EVERY`]: each key's tally today from the shared ledger in PostgreSQL
//! (`--ledger-postgres`), and its spend and requests in flight from Redis
//! (`--redis`), handed to core (`Console::set_cluster`), which shows them
//! in place of this instance's and says which they are.

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::Period;
use chatgate_core::console::ClusterFigures;

use crate::runtime::Runtime;
use crate::serving::driver::Shared;

/// How often the figures are gathered.
const EVERY: Duration = Duration::from_secs(2);
/// Gathered only while an overview was asked for this recently.
const WATCHED: u64 = 10_000;

/// Gathers for the life of the process.
pub(crate) async fn gather<R: Runtime>(shared: Arc<Shared<R>>, ledger_postgres: Option<String>) {
    let gw = Arc::clone(&shared.gateway);
    let mut pg: Option<postgres::Client> = None;
    let mut failing = false;
    loop {
        shared.rt.timer(std::time::Instant::now() + EVERY).await;
        let now_ms = gw.wall().unix_ms(crate::runtime::now());
        if !gw.console().watched(now_ms, WATCHED) {
            continue;
        }
        let mut why = Vec::new();
        let today = match &ledger_postgres {
            None => None,
            Some(url) => {
                let (url, client) = (url.clone(), pg.take());
                let since = Period::Day.start(now_ms);
                let (client, read) = shared
                    .rt
                    .unblock(move || {
                        let mut c = match client.filter(|c| !c.is_closed()) {
                            Some(c) => c,
                            None => match crate::stores::postgres::connect_ledger(&url) {
                                Ok(c) => c,
                                Err(e) => return (None, Err(e)),
                            },
                        };
                        let read = crate::stores::postgres::tallies_since(&mut c, since);
                        (Some(c), read)
                    })
                    .await;
                pg = client.filter(|_| read.is_ok());
                read.map_err(|e| why.push(e.to_string())).ok()
            }
        };
        let quota = match &shared.shared_limits {
            None => None,
            Some(limiter) => limiter
                .quota_figures(&gw.keys(), now_ms)
                .await
                .map_err(|e| why.push(e.to_string()))
                .ok(),
        };
        if why.is_empty() {
            if failing {
                tracing::info!("console: every instance's figures can be read again");
            }
            failing = false;
        } else if !failing {
            tracing::warn!(
                "console: cannot read every instance's figures ({}); the page shows this instance's",
                why.join("; ")
            );
            failing = true;
        }
        if today.is_some() || quota.is_some() {
            gw.console().set_cluster(ClusterFigures {
                at_ms: now_ms,
                today,
                quota,
            });
        }
    }
}
