//! How one command is sent again when Redis is more than one server: the
//! policy the runtimes' client follows, one attempt at a time. After each
//! attempt it says whether the caller has its answer, or where the command
//! goes next and what the topology learnt: a `MOVED` (the slot's new
//! node), an `ASK` (this command alone goes there, at once), a failover
//! under way or a server that is no longer primary (forget it, pause, ask
//! again), a connection that failed before the command ran (send again)
//! or after it may have run (only a command that may run twice is sent
//! again). Pauses grow by [`STEP_PAUSE`] up to [`MAX_PAUSE`]; the caller's
//! deadline decides when to stop.

use std::time::Duration;

use super::{NodeAddr, RedisErrorKind, classify_error};
use crate::error::StoreError;
use crate::redis_protocol::RedisReply;

/// The pause before sending again after a failover step (growing by this
/// much each time, up to [`MAX_PAUSE`]): a cluster promotes a replica, or
/// the Sentinels agree, within seconds, and meanwhile the caller's
/// deadline decides.
pub(crate) const STEP_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two sendings of one command.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(250);

/// What one attempt came to.
#[derive(Debug)]
pub enum RedisAttempt {
    /// No server to send it to: the topology could not be asked, or the
    /// server could not be set up.
    NoServer(StoreError),
    /// The server answered (an error reply included).
    Reply(RedisReply),
    /// The connection failed before the command was sent or ran.
    FailedBefore(StoreError),
    /// The connection failed after the command was sent: it may have run.
    FailedAfter(StoreError),
}

/// What the topology learnt from an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopologyUpdate {
    /// Nothing.
    Nothing,
    /// `MOVED`: the slot is served by this node now.
    Moved {
        /// The slot.
        slot: u16,
        /// Its node.
        to: NodeAddr,
    },
    /// The node failed as the primary: ask again where commands go.
    Forget(NodeAddr),
}

/// What to do after an attempt: apply the update to the topology, then
/// give the caller its answer, or send the command again (see
/// [`RedisRetry::pause`] and [`RedisRetry::take_ask`]).
#[derive(Debug)]
pub struct RedisNext {
    /// What the topology learnt.
    pub update: TopologyUpdate,
    /// The caller's answer, when there is one: a reply (the command's own
    /// error reply included), or why there is none.
    pub done: Option<Result<RedisReply, StoreError>>,
}

impl RedisNext {
    fn done(update: TopologyUpdate, answer: Result<RedisReply, StoreError>) -> RedisNext {
        RedisNext {
            update,
            done: Some(answer),
        }
    }

    fn again(update: TopologyUpdate) -> RedisNext {
        RedisNext { update, done: None }
    }
}

/// One command's attempts.
#[derive(Debug)]
pub struct RedisRetry {
    idempotent: bool,
    attempt: u32,
    ask: Option<NodeAddr>,
    last: StoreError,
}

impl RedisRetry {
    /// A command's first attempt; `idempotent`: running it twice is the
    /// same as once (an admission or a settlement is not: one whose answer
    /// was lost after it was sent is not sent again).
    pub fn new(idempotent: bool) -> RedisRetry {
        RedisRetry {
            idempotent,
            attempt: 0,
            ask: None,
            last: StoreError::Unreachable("no answer".into()),
        }
    }

    /// The pause before this attempt: none before the first, nor before
    /// one an `ASK` sends elsewhere; else [`STEP_PAUSE`] more each time, at
    /// most [`MAX_PAUSE`]. A caller whose deadline comes first gives up
    /// ([`RedisRetry::give_up`]).
    pub fn pause(&self) -> Option<Duration> {
        (self.attempt > 0 && self.ask.is_none()).then(|| (STEP_PAUSE * self.attempt).min(MAX_PAUSE))
    }

    /// Where an `ASK` sends this attempt (after `ASKING`), if one did;
    /// else the node the topology routes the slot to.
    pub fn take_ask(&mut self) -> Option<NodeAddr> {
        self.ask.take()
    }

    /// Why the command has no answer, when the caller stops.
    pub fn give_up(self) -> StoreError {
        self.last
    }

    /// Judges an attempt sent to `node` (none when there was no server).
    pub fn judge(&mut self, node: Option<&NodeAddr>, attempt: RedisAttempt) -> RedisNext {
        use TopologyUpdate::Nothing;
        self.attempt += 1;
        let forget = || node.map_or(Nothing, |n| TopologyUpdate::Forget(n.clone()));
        match attempt {
            // Credentials or TLS refused: asking again changes nothing.
            RedisAttempt::NoServer(e @ StoreError::Refused(_))
            | RedisAttempt::FailedBefore(e @ StoreError::Refused(_)) => {
                RedisNext::done(Nothing, Err(e))
            }
            RedisAttempt::NoServer(e) => {
                self.last = e;
                RedisNext::again(Nothing)
            }
            RedisAttempt::Reply(RedisReply::Error(text)) => {
                let host = node.map_or("", |n| n.0.as_str());
                match classify_error(&text, host) {
                    RedisErrorKind::Moved { slot, to } => {
                        self.last = StoreError::Protocol(format!("redis: {text}"));
                        RedisNext::again(TopologyUpdate::Moved { slot, to })
                    }
                    RedisErrorKind::Ask { to, .. } => {
                        self.last = StoreError::Protocol(format!("redis: {text}"));
                        self.ask = Some(to);
                        RedisNext::again(Nothing)
                    }
                    RedisErrorKind::Transient | RedisErrorKind::NotPrimary => {
                        self.last = StoreError::Unreachable(match node {
                            Some((host, port)) => format!("redis {host}:{port}: {text}"),
                            None => format!("redis: {text}"),
                        });
                        RedisNext::again(forget())
                    }
                    // The command's own failure (a missing script is
                    // loaded by the caller's sending, before this).
                    RedisErrorKind::NoScript | RedisErrorKind::Other => {
                        RedisNext::done(Nothing, Ok(RedisReply::Error(text)))
                    }
                }
            }
            RedisAttempt::Reply(reply) => RedisNext::done(Nothing, Ok(reply)),
            // Sending it again could count it twice: the caller's
            // fallback applies; the node is asked about again.
            RedisAttempt::FailedAfter(e) if !self.idempotent => RedisNext::done(forget(), Err(e)),
            RedisAttempt::FailedBefore(e) | RedisAttempt::FailedAfter(e) => {
                self.last = e;
                RedisNext::again(forget())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(port: u16) -> NodeAddr {
        ("10.0.0.1".into(), port)
    }

    fn error(text: &str) -> RedisAttempt {
        RedisAttempt::Reply(RedisReply::Error(text.into()))
    }

    #[test]
    fn a_reply_or_the_commands_own_error_is_the_answer() {
        let mut r = RedisRetry::new(true);
        assert!(r.pause().is_none(), "no pause before the first attempt");
        let next = r.judge(Some(&node(1)), RedisAttempt::Reply(RedisReply::Integer(1)));
        assert_eq!(next.done, Some(Ok(RedisReply::Integer(1))));
        assert_eq!(next.update, TopologyUpdate::Nothing);
        for text in [
            "ERR wrong number of arguments",
            "NOSCRIPT No matching script",
        ] {
            let mut r = RedisRetry::new(false);
            let next = r.judge(Some(&node(1)), error(text));
            assert_eq!(next.done, Some(Ok(RedisReply::Error(text.into()))));
        }
    }

    #[test]
    fn moved_updates_the_map_and_ask_goes_at_once() {
        let mut r = RedisRetry::new(false);
        let next = r.judge(Some(&node(1)), error("MOVED 3999 10.0.0.2:7001"));
        assert_eq!(
            (next.update, next.done),
            (
                TopologyUpdate::Moved {
                    slot: 3999,
                    to: ("10.0.0.2".into(), 7001)
                },
                None
            )
        );
        assert_eq!(r.pause(), Some(STEP_PAUSE));
        assert_eq!(r.take_ask(), None);
        // An ASK: this attempt goes there, without a pause.
        let next = r.judge(Some(&node(1)), error("ASK 3999 :7002"));
        assert_eq!((next.update, next.done), (TopologyUpdate::Nothing, None));
        assert_eq!(r.pause(), None);
        assert_eq!(r.take_ask(), Some(("10.0.0.1".into(), 7002)));
        assert!(r.take_ask().is_none(), "the next attempt routes again");
        assert!(r.pause().is_some());
    }

    #[test]
    fn a_failover_under_way_forgets_the_node_and_pauses_more_each_time() {
        let mut r = RedisRetry::new(true);
        for (i, text) in [
            "TRYAGAIN",
            "CLUSTERDOWN",
            "LOADING",
            "MASTERDOWN",
            "READONLY",
            "TRYAGAIN",
            "TRYAGAIN",
        ]
        .iter()
        .enumerate()
        {
            let next = r.judge(Some(&node(1)), error(text));
            assert_eq!(
                (next.update, next.done),
                (TopologyUpdate::Forget(node(1)), None),
                "{text}"
            );
            let want = (STEP_PAUSE * (i as u32 + 1)).min(MAX_PAUSE);
            assert_eq!(r.pause(), Some(want));
        }
        assert_eq!(r.pause(), Some(MAX_PAUSE));
        let why = r.give_up().to_string();
        assert!(why.contains("redis 10.0.0.1:1: TRYAGAIN"), "{why}");
    }

    #[test]
    fn a_lost_answer_is_sent_again_only_if_running_twice_is_harmless() {
        let lost = || RedisAttempt::FailedAfter(StoreError::Unreachable("reset".into()));
        let mut once = RedisRetry::new(false);
        let next = once.judge(Some(&node(1)), lost());
        assert_eq!(next.update, TopologyUpdate::Forget(node(1)));
        assert!(matches!(next.done, Some(Err(StoreError::Unreachable(_)))));
        let mut twice = RedisRetry::new(true);
        let next = twice.judge(Some(&node(1)), lost());
        assert_eq!(
            (next.update, next.done),
            (TopologyUpdate::Forget(node(1)), None)
        );
        // Before it ran: sent again either way.
        let mut once = RedisRetry::new(false);
        let next = once.judge(
            Some(&node(1)),
            RedisAttempt::FailedBefore(StoreError::Unreachable("refused".into())),
        );
        assert_eq!(
            (next.update, next.done),
            (TopologyUpdate::Forget(node(1)), None)
        );
    }

    #[test]
    fn a_refusal_ends_at_once_and_no_server_is_asked_again() {
        for attempt in [
            RedisAttempt::NoServer(StoreError::Refused("WRONGPASS".into())),
            RedisAttempt::FailedBefore(StoreError::Refused("TLS".into())),
        ] {
            let mut r = RedisRetry::new(true);
            let next = r.judge(Some(&node(1)), attempt);
            assert!(matches!(next.done, Some(Err(StoreError::Refused(_)))));
        }
        let mut r = RedisRetry::new(false);
        let next = r.judge(None, RedisAttempt::NoServer(StoreError::Timeout(MAX_PAUSE)));
        assert_eq!((next.update, next.done), (TopologyUpdate::Nothing, None));
        assert!(matches!(r.give_up(), StoreError::Timeout(_)));
    }
}
