//! Reloading watched files, in one watcher: the keys file (`keys`), the
//! endpoint set of the config file (`endpoints`) and the listeners' TLS
//! certificates, keys and client CAs (`tls::listener`), each checked every second
//! (modification time, size, inode) and re-read at once on SIGHUP, which
//! also reopens the ledger (so that a ledger moved away by a rotation is
//! recreated at its path). Each applies a change without dropping anything
//! in flight, and keeps what is in force when the file does not load.

pub(crate) mod endpoints;
pub(crate) mod keys;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::runtime::Runtime;
use crate::serving::driver::Shared;

/// How often the watcher looks at the SIGHUP flag.
const TICK: Duration = Duration::from_millis(250);
/// Files are looked at every this many ticks (one second).
const FILE_EVERY: u32 = 4;

/// What tells a changed file: modification time, length, inode.
pub(crate) type Stamp = (std::time::SystemTime, u64, u64);

/// The stamp of the file at `path` now (`None`: it cannot be read).
pub(crate) fn stamp(path: &str) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// A watched file and the stamp of what is in force.
struct Watched<S> {
    src: S,
    last: Option<Stamp>,
}

impl<S> Watched<S> {
    /// Whether the file at `path` changed since the last look.
    fn changed(&mut self, path: &str) -> bool {
        let now = stamp(path);
        let changed = now != self.last;
        self.last = now;
        changed
    }
}

/// Watches the keys file, the config file's endpoint set and SIGHUP for the life
/// of the process. The SIGHUP handler is registered before this returns,
/// so a SIGHUP that comes before the watcher's first turn reloads instead
/// of ending the process.
pub(crate) fn watch<R: Runtime>(
    shared: Arc<Shared<R>>,
    keys: Option<keys::KeysSource>,
    endpoint_set: Option<endpoints::EndpointsSource>,
) -> impl std::future::Future<Output = ()> {
    let hangup = Arc::new(AtomicBool::new(false));
    if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hangup)) {
        tracing::warn!(error = %e, "SIGHUP will not reload the keys, the provider pool or the certificates");
    }
    let keys = keys.map(|src| Watched {
        last: src.loaded,
        src,
    });
    let endpoint_set = endpoint_set.map(|src| Watched {
        last: src.loaded,
        src,
    });
    watching(shared, keys, endpoint_set, hangup)
}

async fn watching<R: Runtime>(
    shared: Arc<Shared<R>>,
    mut keys: Option<Watched<keys::KeysSource>>,
    mut endpoint_set: Option<Watched<endpoints::EndpointsSource>>,
    hangup: Arc<AtomicBool>,
) {
    let mut tick = 0u32;
    loop {
        shared.rt.timer(std::time::Instant::now() + TICK).await;
        tick = tick.wrapping_add(1);
        let hup = hangup.swap(false, Ordering::Relaxed);
        if hup {
            match shared.ledger.reopen() {
                Ok(()) => tracing::info!("ledger reopened (SIGHUP)"),
                Err(e) => tracing::error!("{e}; still appending to the previous file"),
            }
        }
        if !hup && !tick.is_multiple_of(FILE_EVERY) {
            continue;
        }
        let why = if hup { "SIGHUP" } else { "the file changed" };
        if let Some(w) = keys.as_mut()
            && let Some(path) = w.src.file().map(str::to_owned)
            && (w.changed(&path) || hup)
        {
            keys::reload(&shared, &w.src, why);
        }
        if let Some(w) = endpoint_set.as_mut() {
            let path = w.src.path.clone();
            if w.changed(&path) || hup {
                endpoints::apply(&shared, &mut w.src, why);
            }
        }
        for tls in [&shared.tls, &shared.admin_tls].into_iter().flatten() {
            if hup || tls.changed() {
                tls.reload(why);
            }
        }
    }
}
