//! chatgate-smol's reactor: `polling`'s epoll, edge-triggered, and the
//! timers, turned by whichever executor thread runs out of tasks.
//!
//! A socket is registered once, for reading and writing, and never touched
//! again until it closes: the kernel reports each new arrival of bytes (or
//! of room to write) once, and the reactor keeps what it reported as a
//! readiness flag per direction. An I/O call is made only when its flag is
//! up; a call that finds nothing (`EAGAIN`, or a read or write shorter than
//! asked, which means the socket was emptied or filled) lowers it, unless a
//! newer report arrived meanwhile (a sequence number tells). async-io, which
//! this replaces, registered interest one-shot and re-armed it with an
//! `epoll_ctl` after every event: one system call per relayed event of a
//! trickling stream, and a second reactor thread waking on timeouts
//! (docs/decisions.md, *The smol runtime's reactor*).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use polling::{Event, Events, PollMode, Poller};
use slab::Slab;

/// Reading, in a source's directions.
pub(crate) const READ: usize = 0;
/// Writing.
pub(crate) const WRITE: usize = 1;

/// The process's reactor.
pub(crate) struct Reactor {
    poller: Poller,
    sources: Mutex<Slab<Arc<Source>>>,
    timers: Mutex<Timers>,
    /// Held by the thread turning the reactor, with what a turn reuses.
    turn: Mutex<Turn>,
    timer_ids: AtomicU64,
    /// Stamped into the high half of each source's key, so that an event
    /// the kernel reported for a socket since closed is not taken for the
    /// socket that took its slot.
    generation: AtomicU32,
}

/// What one turn reuses: the kernel's events and the wakers to call.
pub(crate) struct Turn {
    events: Events,
    wakers: Vec<Waker>,
}

struct Timers {
    queue: BTreeMap<(Instant, u64), Waker>,
    /// While a thread waits for I/O: the deadline it waits until (`None`:
    /// none). A timer due before it must wake that thread.
    waiting_until: Option<Option<Instant>>,
}

/// The reactor, made at first use.
pub(crate) fn reactor() -> &'static Reactor {
    static REACTOR: OnceLock<Reactor> = OnceLock::new();
    REACTOR.get_or_init(|| Reactor {
        poller: Poller::new().expect("the kernel provides epoll"),
        sources: Mutex::new(Slab::new()),
        timers: Mutex::new(Timers {
            queue: BTreeMap::new(),
            waiting_until: None,
        }),
        turn: Mutex::new(Turn {
            events: Events::with_capacity(std::num::NonZeroUsize::new(1024).expect("non-zero")),
            wakers: Vec::new(),
        }),
        timer_ids: AtomicU64::new(0),
        generation: AtomicU32::new(0),
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing under these locks panics midway; a poisoned one is still whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Reactor {
    /// Registers `fd` for both directions, edge-triggered. `ready`: whether
    /// I/O is tried before the first report (an accepted socket usually has
    /// its request waiting; a connecting one must wait for its report —
    /// registering reports the state the socket is already in).
    pub(crate) fn register(&self, fd: BorrowedFd<'_>, ready: bool) -> io::Result<Arc<Source>> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let mut sources = lock(&self.sources);
        let entry = sources.vacant_entry();
        let source = Arc::new(Source {
            key: entry.key() | (generation as usize) << 32,
            dirs: [
                Mutex::new(Direction::new(ready)),
                Mutex::new(Direction::new(ready)),
            ],
        });
        // SAFETY: the source is deleted from the poller before its
        // descriptor closes (`deregister`, called by its owner's `Drop`).
        unsafe {
            self.poller
                .add_with_mode(fd.as_raw_fd(), Event::all(source.key), PollMode::Edge)?;
        }
        entry.insert(Arc::clone(&source));
        Ok(source)
    }

    /// Removes a source; called before its descriptor closes.
    pub(crate) fn deregister(&self, source: &Source, fd: BorrowedFd<'_>) {
        let _ = self.poller.delete(fd);
        lock(&self.sources).try_remove(slot(source.key));
    }

    /// The turn, unless another thread has it.
    pub(crate) fn try_turn(&self) -> Option<MutexGuard<'_, Turn>> {
        match self.turn.try_lock() {
            Ok(turn) => Some(turn),
            // A turn that panicked left nothing half-done that matters.
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Wakes the thread waiting for I/O, or the next one to wait.
    pub(crate) fn notify(&self) {
        let _ = self.poller.notify();
    }

    /// One turn: fires due timers, waits for I/O until the next timer
    /// (unless `waiter` is `None`, a timer fired, or the waiter was woken
    /// meanwhile), marks what the kernel reported, fires timers due by then,
    /// and wakes every task concerned.
    pub(crate) fn react(&self, turn: &mut Turn, waiter: Option<&Waiter<'_>>) -> io::Result<()> {
        let Turn { events, wakers } = turn;
        let deadline = {
            let mut timers = lock(&self.timers);
            let next = timers.fire(Instant::now(), wakers);
            let waits = wakers.is_empty() && waiter.is_some_and(Waiter::may_wait);
            if waits {
                timers.waiting_until = Some(next);
            }
            waits.then_some(next)
        };
        events.clear();
        let waited = match deadline {
            None => self.poller.wait(events, Some(Duration::ZERO)),
            Some(None) => self.poller.wait(events, None),
            Some(Some(at)) => self.poller.wait_deadline(events, at),
        };
        if let Some(waiter) = waiter {
            waiter.waiting.store(false, Ordering::SeqCst);
        }
        let fired_at = Instant::now();
        {
            let mut timers = lock(&self.timers);
            timers.waiting_until = None;
            timers.fire(fired_at, wakers);
        }
        if !events.is_empty() {
            let sources = lock(&self.sources);
            for ev in events.iter() {
                let Some(source) = sources.get(slot(ev.key)) else {
                    continue;
                };
                if source.key != ev.key {
                    continue;
                }
                let failed = ev.is_interrupt() || ev.is_err() == Some(true);
                if ev.readable {
                    source.report(READ, ev.is_read_closed(), wakers);
                }
                if ev.writable {
                    source.report(WRITE, failed, wakers);
                }
            }
        }
        for waker in wakers.drain(..) {
            waker.wake();
        }
        match waited {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            other => other.map(drop),
        }
    }
}

/// The slab index in a source's key.
fn slot(key: usize) -> usize {
    key & 0xffff_ffff
}

/// A thread about to wait for I/O: its flag, raised while it waits (a
/// waker seeing it interrupts the wait), and its parker, checked after the
/// flag is raised so that a wake-up just before the wait is not slept
/// through.
pub(crate) struct Waiter<'a> {
    pub(crate) waiting: &'a AtomicBool,
    pub(crate) parker: &'a parking::Parker,
}

impl Waiter<'_> {
    fn may_wait(&self) -> bool {
        self.waiting.store(true, Ordering::SeqCst);
        if self.parker.park_timeout(Duration::ZERO) {
            self.waiting.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }
}

impl Timers {
    /// Moves the wakers of timers due at `now` into `wakers`; the next
    /// deadline after them.
    fn fire(&mut self, now: Instant, wakers: &mut Vec<Waker>) -> Option<Instant> {
        while let Some(entry) = self.queue.first_entry() {
            if entry.key().0 > now {
                return Some(entry.key().0);
            }
            wakers.push(entry.remove());
        }
        None
    }
}

/// A registered socket's readiness, per direction.
pub(crate) struct Source {
    key: usize,
    dirs: [Mutex<Direction>; 2],
}

struct Direction {
    /// The kernel reported this direction and no call has found it empty
    /// (or full) since.
    ready: bool,
    /// The peer closed its side or the socket failed: calls no longer
    /// block, and no further report may come, so `ready` stays up.
    closed: bool,
    /// Counts reports, so a call that found nothing lowers `ready` only if
    /// no report came after the flag it acted on.
    seq: u32,
    /// The tasks' wakers for the next report: two, because a TLS stream's
    /// read may wait for room to write (its handshake's or alert's bytes)
    /// beside the write itself, each with its own waker.
    wakers: [Option<Waker>; 2],
}

impl Direction {
    fn new(ready: bool) -> Direction {
        Direction {
            ready,
            closed: false,
            seq: 0,
            wakers: [None, None],
        }
    }
}

impl Source {
    fn report(&self, dir: usize, closed: bool, wakers: &mut Vec<Waker>) {
        let mut d = lock(&self.dirs[dir]);
        d.ready = true;
        d.closed |= closed;
        d.seq = d.seq.wrapping_add(1);
        wakers.extend(d.wakers.iter_mut().filter_map(Option::take));
    }

    /// Ready with the report's sequence number, or pending with `cx`'s
    /// waker kept for the next report.
    pub(crate) fn poll_ready(&self, dir: usize, cx: &Context<'_>) -> Poll<u32> {
        let mut d = lock(&self.dirs[dir]);
        if d.ready {
            return Poll::Ready(d.seq);
        }
        let new = cx.waker();
        if d.wakers.iter().flatten().any(|w| w.will_wake(new)) {
            return Poll::Pending;
        }
        if let Some(free) = d.wakers.iter_mut().find(|w| w.is_none()) {
            *free = Some(new.clone());
        } else {
            // A third waiter: the oldest is woken to poll again (it loses
            // nothing; it finds the direction not ready and waits again).
            let oldest = d.wakers[0].take();
            d.wakers[0] = d.wakers[1].take();
            d.wakers[1] = Some(new.clone());
            drop(d);
            if let Some(w) = oldest {
                w.wake();
            }
        }
        Poll::Pending
    }

    /// A call made on report `seq` found the direction drained.
    fn drained(&self, dir: usize, seq: u32) {
        let mut d = lock(&self.dirs[dir]);
        if d.seq == seq && !d.closed {
            d.ready = false;
        }
    }

    /// Runs `op` while the direction is ready. `short` says whether a
    /// result means the socket was drained (a read or write shorter than
    /// asked); `EAGAIN` always does, and waits for the next report.
    pub(crate) fn poll_io<T>(
        &self,
        dir: usize,
        cx: &Context<'_>,
        mut op: impl FnMut() -> io::Result<T>,
        short: impl Fn(&T) -> bool,
    ) -> Poll<io::Result<T>> {
        loop {
            let seq = std::task::ready!(self.poll_ready(dir, cx));
            match op() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.drained(dir, seq),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(v) => {
                    if short(&v) {
                        self.drained(dir, seq);
                    }
                    return Poll::Ready(Ok(v));
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

/// A timer: pending until its instant, then ready.
pub(crate) struct Timer {
    at: Instant,
    id: u64,
    /// The waker in the reactor's queue, under `(at, id)`, if any.
    queued: Option<Waker>,
}

impl Timer {
    pub(crate) fn at(at: Instant) -> Timer {
        Timer {
            at,
            id: reactor().timer_ids.fetch_add(1, Ordering::Relaxed),
            queued: None,
        }
    }

    pub(crate) fn set_at(&mut self, at: Instant) {
        self.dequeue();
        self.at = at;
    }

    fn dequeue(&mut self) {
        if self.queued.take().is_some() {
            lock(&reactor().timers).queue.remove(&(self.at, self.id));
        }
    }
}

impl std::future::Future for Timer {
    type Output = ();

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.at {
            self.dequeue();
            return Poll::Ready(());
        }
        if self
            .queued
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        let r = reactor();
        let mut timers = lock(&r.timers);
        timers.queue.insert((self.at, self.id), cx.waker().clone());
        // A thread waiting for I/O past this instant is woken to wait less.
        if let Some(until) = timers.waiting_until
            && until.is_none_or(|until| self.at < until)
        {
            timers.waiting_until = Some(Some(self.at));
            r.notify();
        }
        drop(timers);
        self.queued = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.dequeue();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use futures_lite::{AsyncRead, AsyncWrite};

    use super::*;
    use crate::net::Tcp;

    /// Counts its wake-ups.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&c), Waker::from(c))
    }

    /// A connected pair: ours on the reactor, the peer plain.
    fn pair() -> (Tcp, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (ours, _) = l.accept().unwrap();
        (Tcp::adopt(ours).unwrap(), peer)
    }

    /// Turns the reactor without waiting, until `done` (or a few seconds).
    fn turn_until(done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "no report came");
            if let Some(mut turn) = reactor().try_turn() {
                reactor().react(&mut turn, None).unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn read(tcp: &mut Tcp, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        Pin::new(tcp).poll_read(cx, buf)
    }

    /// The peer's last bytes and its FIN arrive in one report; the read
    /// that takes the bytes is short and consumes the FIN with them. The
    /// reader must still learn of the end: no further report will come.
    #[test]
    fn bytes_and_a_fin_in_one_report_end_the_stream() {
        let (mut ours, mut peer) = pair();
        let (woken, waker) = counter();
        let cx = &mut Context::from_waker(&waker);
        let buf = &mut [0u8; 64];
        // Drain the accept-time readiness: nothing to read yet.
        assert!(read(&mut ours, cx, buf).is_pending());
        peer.write_all(b"last words").unwrap();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        turn_until(|| woken.0.load(Ordering::SeqCst) > 0);
        assert!(matches!(read(&mut ours, cx, buf), Poll::Ready(Ok(10))));
        assert!(
            matches!(read(&mut ours, cx, buf), Poll::Ready(Ok(0))),
            "the FIN taken with the bytes is still seen"
        );
    }

    /// The same with a reset: the read after the bytes fails.
    #[test]
    fn bytes_and_a_reset_in_one_report_fail_the_next_read() {
        let (mut ours, peer) = pair();
        let (woken, waker) = counter();
        let cx = &mut Context::from_waker(&waker);
        let buf = &mut [0u8; 64];
        assert!(read(&mut ours, cx, buf).is_pending());
        (&peer).write_all(b"cut").unwrap();
        socket2::SockRef::from(&peer)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(peer);
        std::thread::sleep(Duration::from_millis(20));
        turn_until(|| woken.0.load(Ordering::SeqCst) > 0);
        match read(&mut ours, cx, buf) {
            Poll::Ready(Ok(3)) => assert!(
                matches!(read(&mut ours, cx, buf), Poll::Ready(Err(_))),
                "the reset behind the bytes is still seen"
            ),
            // Linux may drop unread bytes on a reset: the read fails at once.
            other => assert!(matches!(other, Poll::Ready(Err(_))), "{other:?}"),
        }
    }

    /// Two tasks' wakers wait on one direction (a TLS stream's read waits
    /// for room to write beside the write itself): a report wakes both.
    #[test]
    fn a_report_wakes_every_waiter_of_a_direction() {
        let (mut ours, mut peer) = pair();
        let (first, w1) = counter();
        let (second, w2) = counter();
        let chunk = vec![b'x'; 64 * 1024];
        // Fill the socket until a write finds no room.
        let mut written = 0;
        loop {
            match Pin::new(&mut ours).poll_write(&mut Context::from_waker(&w1), &chunk) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => break,
            }
        }
        assert!(
            Pin::new(&mut ours)
                .poll_write(&mut Context::from_waker(&w2), &chunk)
                .is_pending()
        );
        // The peer reads everything: room again.
        let mut sink = vec![0u8; written];
        std::io::Read::read_exact(&mut peer, &mut sink).unwrap();
        turn_until(|| first.0.load(Ordering::SeqCst) > 0 && second.0.load(Ordering::SeqCst) > 0);
    }

    /// A timer fires at its instant, through a turn.
    #[test]
    fn a_timer_fires_through_a_turn() {
        let (woken, waker) = counter();
        let cx = &mut Context::from_waker(&waker);
        let mut t = Timer::at(Instant::now() + Duration::from_millis(30));
        assert!(Pin::new(&mut t).poll(cx).is_pending());
        turn_until(|| woken.0.load(Ordering::SeqCst) > 0);
        assert!(Pin::new(&mut t).poll(cx).is_ready());
    }
}
