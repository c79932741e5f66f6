//! Polling a source only when there is a reason to.
//!
//! The connection loop waits on several sources at once (client and provider
//! reads and writes, a connect, a timer, the drain signal). Re-polling every
//! source on every turn is wasteful, and with some reactors costly (async-io,
//! which chatgate-smol once used, tried the read or write system call each
//! time a socket was polled, even if nothing had happened since it last said
//! "pending"). A [`Wakeup`] gives each
//! source its own waker and polls it again only after that waker fired, or
//! after the caller says the source changed (new bytes to write, a new
//! connection, a moved deadline).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use atomic_waker::AtomicWaker;

struct Shared {
    woken: AtomicBool,
    parent: AtomicWaker,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.parent.wake();
    }
}

/// One source's wake-up bookkeeping.
pub(crate) struct Wakeup {
    shared: Arc<Shared>,
    waker: Waker,
    waiting: bool,
}

impl Default for Wakeup {
    fn default() -> Self {
        let shared = Arc::new(Shared {
            woken: AtomicBool::new(false),
            parent: AtomicWaker::new(),
        });
        let waker = Waker::from(Arc::clone(&shared));
        Wakeup {
            shared,
            waker,
            waiting: false,
        }
    }
}

impl Wakeup {
    /// The source changed: poll it at the next opportunity.
    pub(crate) fn reset(&mut self) {
        self.waiting = false;
    }

    /// Polls the source through `f` with this wakeup's waker — unless it said
    /// "pending" before and has not woken since, in which case this returns
    /// `Pending` at once. The task is woken (through `cx`) when the source is.
    pub(crate) fn poll<T>(
        &mut self,
        cx: &Context<'_>,
        f: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        self.shared.parent.register(cx.waker());
        if self.waiting && !self.shared.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let result = f(&mut Context::from_waker(&self.waker));
        self.waiting = result.is_pending();
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn polls_again_only_after_a_wake_or_a_reset() {
        let parent = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&parent));
        let cx = Context::from_waker(&waker);
        let mut wakeup = Wakeup::default();
        let polls = std::cell::Cell::new(0);
        let stored: std::cell::RefCell<Option<Waker>> = std::cell::RefCell::new(None);
        let poll = |wakeup: &mut Wakeup| {
            wakeup.poll(&cx, |cx| {
                polls.set(polls.get() + 1);
                *stored.borrow_mut() = Some(cx.waker().clone());
                Poll::<()>::Pending
            })
        };
        assert!(poll(&mut wakeup).is_pending());
        assert!(poll(&mut wakeup).is_pending());
        assert_eq!(polls.get(), 1, "not polled again without a wake");
        stored.borrow_mut().take().unwrap().wake();
        assert_eq!(parent.0.load(Ordering::SeqCst), 1, "the task is woken");
        assert!(poll(&mut wakeup).is_pending());
        assert_eq!(polls.get(), 2, "polled again after the wake");
        wakeup.reset();
        assert!(poll(&mut wakeup).is_pending());
        assert_eq!(polls.get(), 3, "polled again after a reset");
    }
}
