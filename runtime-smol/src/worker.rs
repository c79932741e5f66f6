//! An executor thread: runs tasks, and when it has none, turns the reactor
//! (or, when another thread is turning it, sleeps until woken).

use std::future::Future;
use std::io::Write;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use async_executor::Executor;

use crate::reactor::{Waiter, reactor};

/// How long a thread that always has tasks to run may go without looking
/// at the sockets and timers (a non-blocking turn).
const BUSY_TURN: Duration = Duration::from_millis(1);

/// Wakes an executor thread: unparks it and, when it is waiting for I/O,
/// interrupts the wait.
struct ThreadWaker {
    unparker: parking::Unparker,
    waiting_io: AtomicBool,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if self.unparker.unpark() && self.waiting_io.load(Ordering::SeqCst) {
            reactor().notify();
        }
    }
}

/// Runs `ex`'s tasks on this thread, forever.
pub(crate) fn run(ex: &Executor<'static>) -> ! {
    match block_on(ex.run(std::future::pending::<std::convert::Infallible>())) {}
}

/// Runs `f` to completion on this thread, turning the reactor while it
/// waits. `f` is an executor's `run` future: this thread then runs its
/// tasks too.
pub(crate) fn block_on<T>(f: impl Future<Output = T>) -> T {
    let (parker, unparker) = parking::pair();
    let thread = Arc::new(ThreadWaker {
        unparker,
        waiting_io: AtomicBool::new(false),
    });
    let waker = Waker::from(Arc::clone(&thread));
    let cx = &mut Context::from_waker(&waker);
    let mut f = pin!(f);
    let mut last_turn = Instant::now();
    loop {
        // Runs what is scheduled; pending once there is nothing (the
        // executor then wakes `waker` when a task is scheduled).
        if let std::task::Poll::Ready(t) = f.as_mut().poll(cx) {
            return t;
        }
        if parker.park_timeout(Duration::ZERO) {
            // More to run. Look at the sockets and timers now and then all
            // the same, so that a thread that is never idle does not leave
            // them unattended.
            if last_turn.elapsed() >= BUSY_TURN
                && let Some(mut turn) = reactor().try_turn()
            {
                turned(reactor().react(&mut turn, None));
                last_turn = Instant::now();
            }
            continue;
        }
        let Some(mut turn) = reactor().try_turn() else {
            parker.park();
            continue;
        };
        let waiter = Waiter {
            waiting: &thread.waiting_io,
            parker: &parker,
        };
        turned(reactor().react(&mut turn, Some(&waiter)));
        drop(turn);
        last_turn = Instant::now();
        // Whatever the turn woke was scheduled and unparked this thread:
        // the notification is spent by the poll at the top.
        let _ = parker.park_timeout(Duration::ZERO);
    }
}

fn turned(r: std::io::Result<()>) {
    if let Err(e) = r {
        // epoll_wait fails only on a programming error (EBADF, EINVAL):
        // say so and keep serving what can be served.
        let _ = writeln!(
            std::io::stderr(),
            "chatgate-smol: waiting for I/O failed: {e}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
