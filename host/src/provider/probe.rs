//! Probes of ejected provider endpoints: every so often (core decides which
//! are due, [`chatgate_core::EndpointSet::probes_due`]), a cheap request on
//! a connection of its own, whose answer readmits the endpoint. Without it
//! a recovered endpoint waits for a trial request that happens to arrive
//! after its cool-down.

use std::sync::Arc;
use std::time::Duration;

use chatgate_core::Endpoint;
use chatgate_core::http::HttpLimits;
use futures_lite::{AsyncWriteExt, future};

use crate::runtime::{Runtime, now};
use crate::serving::driver::Shared;

/// The longest a probe may take, whatever the interval.
const MAX_PROBE_TIME: Duration = Duration::from_secs(10);

/// Probes ejected endpoints for the life of the process (nothing when the
/// interval is zero).
pub(crate) async fn run<R: Runtime>(shared: Arc<Shared<R>>) {
    let interval = shared.gateway.config().probe_interval;
    if interval.is_zero() {
        return;
    }
    // Looked at five times per interval: a probe is at most a fifth of an
    // interval late.
    let tick = (interval / 5).clamp(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        shared.rt.timer(std::time::Instant::now() + tick).await;
        if shared.gateway.is_draining() {
            return;
        }
        for endpoint in shared.gateway.endpoints().probes_due(now(), interval) {
            shared.rt.spawn(probe(Arc::clone(&shared), endpoint));
        }
    }
}

/// One probe: the status the endpoint answered, reported to its health.
async fn probe<R: Runtime>(shared: Arc<Shared<R>>, endpoint: Arc<Endpoint>) {
    let limit = shared
        .gateway
        .config()
        .probe_interval
        .clamp(Duration::from_secs(1), MAX_PROBE_TIME);
    let work = async {
        // An endpoint a reload removed meanwhile is not probed (nor its
        // connector made again).
        let current = shared.gateway.endpoints();
        if !current
            .endpoints()
            .iter()
            .any(|e| Arc::ptr_eq(e, &endpoint))
        {
            return None;
        }
        let connector = shared.connectors.get(&endpoint).ok()?;
        let mut s = connector.open_unpooled().await.ok()?;
        s.write_all(&endpoint.probe_request()).await.ok()?;
        s.flush().await.ok()?;
        let (head, _) =
            crate::provider::connector::read_response_head(&mut s, &HttpLimits::default())
                .await
                .ok()?;
        Some(head.status)
    };
    let timeout = async {
        shared.rt.timer(std::time::Instant::now() + limit).await;
        None
    };
    let status = future::or(work, timeout).await;
    tracing::debug!(
        endpoint = endpoint.name(),
        status = status.unwrap_or(0),
        "probed an ejected provider endpoint"
    );
    endpoint.probed(status, now());
}
