//! A chat request's assistant turns and their reasoning, and the body a
//! provider is sent with each turn's reasoning as its model's
//! [`ReplayMode`] wants it, under the name its endpoint reads
//! ([`ReasoningField`]).
//!
//! [`ReplayPlan::read`] walks the validated body once and notes every
//! assistant turn that calls tools or carries reasoning: where it is, its
//! calls' ids, and where its `reasoning_content` and `reasoning` members
//! are. The exchange fills in what the memory restores for the turns that
//! call tools without reasoning ([`ReplayPlan::restore`]), then
//! [`ReplayPlan::apply`] writes the body for an attempt: each turn that
//! changes is written again (its other members as the client wrote them,
//! then the reasoning member), everything between them copied as it is.

use std::ops::Range;
use std::sync::Arc;

use super::{ReasoningField, ReplayMode};
use crate::json::{Cursor, Keys, Stop};

/// Where a turn's reasoning came from (the metric's and the trace's
/// `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplaySource {
    /// The client sent it (chat `reasoning_content` or `reasoning`, a
    /// thinking block the gateway signed, a reasoning item it sealed).
    Client,
    /// The memory had it.
    Memory,
    /// Nothing was known: an empty string, so the provider's check passes.
    Empty,
}

impl ReplaySource {
    /// Its label.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplaySource::Client => "client",
            ReplaySource::Memory => "memory",
            ReplaySource::Empty => "empty",
        }
    }

    /// Every source, in the order labels list them.
    pub const ALL: [ReplaySource; 3] = [
        ReplaySource::Client,
        ReplaySource::Memory,
        ReplaySource::Empty,
    ];
}

/// Which sources one request's turns drew on (a bit each, by
/// [`ReplaySource::ALL`]'s order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sources(u8);

impl Sources {
    fn add(&mut self, s: ReplaySource) {
        self.0 |= 1 << s as u8;
    }

    /// Whether `s` is among them.
    pub fn has(self, s: ReplaySource) -> bool {
        self.0 & (1 << s as u8) != 0
    }

    /// None.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Their labels, comma-separated (`memory,empty`).
    pub fn labels(self) -> String {
        ReplaySource::ALL
            .iter()
            .filter(|s| self.has(**s))
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The name a reasoning member has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Name {
    Content,
    Plain,
}

/// One assistant turn of the request.
#[derive(Debug, Clone)]
struct Turn {
    /// The message object's range in the body.
    range: Range<usize>,
    /// Its tool calls' ids (unescaped), in order; none for a turn that
    /// calls no tool.
    calls: Vec<Vec<u8>>,
    /// Its reasoning members: name and value range.
    members: Vec<(Name, Range<usize>)>,
    /// What the memory restored for it.
    restored: Option<Arc<[u8]>>,
}

impl Turn {
    /// The turn's own reasoning: the first string among `reasoning_content`
    /// then `reasoning`.
    fn own<'b>(&self, body: &'b [u8]) -> Option<(Name, &'b [u8])> {
        [Name::Content, Name::Plain].into_iter().find_map(|want| {
            self.members
                .iter()
                .find(|(n, r)| *n == want && body[r.start] == b'"')
                .map(|(n, r)| (*n, &body[r.clone()]))
        })
    }
}

/// A request's assistant turns, as far as replay needs them.
#[derive(Debug, Clone, Default)]
pub struct ReplayPlan {
    turns: Vec<Turn>,
}

/// What [`ReplayPlan::apply`] made.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// The body, when it differs from the one read.
    pub body: Option<Vec<u8>>,
    /// Where the replayed reasoning came from.
    pub sources: Sources,
}

impl ReplayPlan {
    /// The assistant turns of `body`, a chat request the validator
    /// accepted (anything else reads as no turns).
    pub fn read(body: &[u8]) -> ReplayPlan {
        let mut plan = ReplayPlan::default();
        let mut c = Cursor::new(body);
        let _ = c.members(Keys::Skipped, |c, key| {
            if &*c.name(key) != b"messages" || c.peek() != Some(b'[') {
                return c.skip();
            }
            c.elements(|c| {
                let start = c.at();
                if c.peek() != Some(b'{') {
                    return c.skip();
                }
                let turn = read_turn(c)?;
                if let Some(mut turn) = turn {
                    turn.range = start..c.at();
                    plan.turns.push(turn);
                }
                Ok(())
            })
        });
        plan
    }

    /// Whether any turn calls tools or carries reasoning.
    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }

    /// The turns that call tools but carry no reasoning of their own: for
    /// each, its index among the plan's turns and its calls' ids (what the
    /// memory is asked for).
    pub fn wanting<'p>(&'p self, body: &'p [u8]) -> impl Iterator<Item = (usize, &'p [Vec<u8>])> {
        self.turns
            .iter()
            .enumerate()
            .filter(move |(_, t)| !t.calls.is_empty() && t.own(body).is_none())
            .map(|(i, t)| (i, t.calls.as_slice()))
    }

    /// Turn `i` (as [`ReplayPlan::wanting`] numbers them) gets `text` (a
    /// JSON string) from the memory.
    pub fn restore(&mut self, i: usize, text: Arc<[u8]>) {
        if let Some(t) = self.turns.get_mut(i) {
            t.restored = Some(text);
        }
    }

    /// Bytes the memory restored (for the prompt's estimate).
    pub fn restored_bytes(&self) -> usize {
        self.turns
            .iter()
            .filter_map(|t| t.restored.as_ref())
            .map(|r| r.len())
            .sum()
    }

    /// `body` (the one read) as a provider whose model replays reasoning
    /// as `mode` says, and whose endpoint reads it as `field`, is sent it.
    pub fn apply(&self, body: &[u8], mode: ReplayMode, field: ReasoningField) -> Applied {
        let mut out: Option<Vec<u8>> = None;
        let mut sources = Sources::default();
        let mut copied = 0;
        let name = field.as_str().as_bytes();
        let want = match field {
            ReasoningField::ReasoningContent => Name::Content,
            ReasoningField::Reasoning => Name::Plain,
        };
        for t in &self.turns {
            let msg = &body[t.range.clone()];
            // What the turn's message becomes: `None` unchanged, else the
            // members to drop and the reasoning to add.
            let (drop, add): (&[Name], Option<&[u8]>) = match mode {
                ReplayMode::Strip => (&[Name::Content], None),
                ReplayMode::ToolCalls if t.calls.is_empty() => {
                    (&[Name::Content, Name::Plain], None)
                }
                _ => {
                    let (source, value) = match (t.own(body), &t.restored) {
                        (Some((_, own)), _) => (ReplaySource::Client, Some(own)),
                        (None, Some(r)) if !t.calls.is_empty() => {
                            (ReplaySource::Memory, Some(&r[..]))
                        }
                        (None, _) if !t.calls.is_empty() => {
                            (ReplaySource::Empty, Some(&b"\"\""[..]))
                        }
                        // A turn without calls or reasoning of its own.
                        (None, _) => (ReplaySource::Client, None),
                    };
                    if value.is_some() {
                        sources.add(source);
                    }
                    (&[Name::Content, Name::Plain], value)
                }
            };
            let unchanged = match add {
                // Already there, alone, under the endpoint's name.
                Some(v) => {
                    t.members.len() == 1
                        && t.members[0].0 == want
                        && &body[t.members[0].1.clone()] == v
                }
                None => !t.members.iter().any(|(n, _)| drop.contains(n)),
            };
            if unchanged {
                continue;
            }
            let out = out.get_or_insert_with(|| Vec::with_capacity(body.len() + 64));
            out.extend_from_slice(&body[copied..t.range.start]);
            write_turn(
                out,
                msg,
                t.range.start,
                &t.members,
                drop,
                add.map(|v| (name, v)),
            );
            copied = t.range.end;
        }
        if let Some(out) = out.as_mut() {
            out.extend_from_slice(&body[copied..]);
        }
        Applied { body: out, sources }
    }
}

/// The message object at the cursor: a [`Turn`] when it is an assistant
/// turn that calls tools or carries reasoning (its range is the caller's
/// to set).
fn read_turn(c: &mut Cursor<'_>) -> Result<Option<Turn>, Stop> {
    let mut assistant = false;
    let mut turn = Turn {
        range: 0..0,
        calls: Vec::new(),
        members: Vec::new(),
        restored: None,
    };
    c.members(Keys::Skipped, |c, key| {
        let name = c.name(key);
        let v = c.at();
        match &*name {
            b"role" => {
                assistant = c.peek() == Some(b'"') && {
                    let role = c.str()?;
                    &*role == b"assistant"
                };
                if c.at() == v {
                    c.skip()?;
                }
            }
            b"tool_calls" if c.peek() == Some(b'[') => {
                c.elements(|c| {
                    if c.peek() != Some(b'{') {
                        return c.skip();
                    }
                    c.members(Keys::Skipped, |c, key| {
                        if &*c.name(key) == b"id" && c.peek() == Some(b'"') {
                            let id = c.str()?;
                            if !id.is_empty() && turn.calls.len() < 256 {
                                turn.calls.push(id.into_owned());
                            }
                            Ok(())
                        } else {
                            c.skip()
                        }
                    })
                })?;
            }
            b"reasoning_content" | b"reasoning" => {
                c.skip()?;
                let n = if &*name == b"reasoning" {
                    Name::Plain
                } else {
                    Name::Content
                };
                turn.members.push((n, v..c.at()));
            }
            _ => c.skip()?,
        }
        Ok(())
    })?;
    let wanted = assistant && (!turn.calls.is_empty() || !turn.members.is_empty());
    Ok(wanted.then_some(turn))
}

/// The message `msg` (at `base` in the body) without its reasoning
/// members named in `drop`, then `add` (a name and a JSON value) as its
/// last member.
fn write_turn(
    out: &mut Vec<u8>,
    msg: &[u8],
    base: usize,
    members: &[(Name, Range<usize>)],
    drop: &[Name],
    add: Option<(&[u8], &[u8])>,
) {
    out.push(b'{');
    let mut first = true;
    let dropped = |at: usize| {
        members
            .iter()
            .any(|(n, r)| r.start == base + at && drop.contains(n))
    };
    let mut c = Cursor::new(msg);
    // The message was read whole before: its members are there.
    let _ = c.members(Keys::Skipped, |c, key| {
        let v = c.at();
        c.skip()?;
        if !dropped(v) {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.extend_from_slice(&msg[key.open..=key.close]);
            out.push(b':');
            out.extend_from_slice(&msg[v..c.at()]);
        }
        Ok(())
    });
    if let Some((name, value)) = add {
        if !first {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(name);
        out.extend_from_slice(b"\":");
        out.extend_from_slice(value);
    }
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str =
        r#"{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}"#;

    fn body(messages: &str) -> String {
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}},{messages}],"stream":true}}"#
        )
    }

    fn applied(
        b: &str,
        plan: &ReplayPlan,
        mode: ReplayMode,
        field: ReasoningField,
    ) -> (String, String) {
        let a = plan.apply(b.as_bytes(), mode, field);
        let out = a
            .body
            .map_or_else(|| b.to_owned(), |v| String::from_utf8(v).unwrap());
        serde_json::from_str::<serde_json::Value>(&out).expect("valid JSON");
        (out, a.sources.labels())
    }

    #[test]
    fn the_clients_own_reasoning_goes_through_unchanged() {
        let b = body(&format!(
            r#"{{"role":"assistant","content":null,"reasoning_content":"mine","tool_calls":[{CALL}]}},{{"role":"tool","tool_call_id":"call_1","content":"ok"}}"#
        ));
        let plan = ReplayPlan::read(b.as_bytes());
        assert_eq!(plan.wanting(b.as_bytes()).count(), 0);
        let a = plan.apply(
            b.as_bytes(),
            ReplayMode::ToolCalls,
            ReasoningField::ReasoningContent,
        );
        assert!(a.body.is_none(), "byte for byte");
        assert_eq!(a.sources.labels(), "client");
        // Renamed for an endpoint that reads `reasoning`.
        let (out, _) = applied(&b, &plan, ReplayMode::ToolCalls, ReasoningField::Reasoning);
        assert!(out.contains(r#""tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}],"reasoning":"mine"}"#), "{out}");
        assert!(!out.contains("reasoning_content"));
    }

    #[test]
    fn a_turn_without_reasoning_gets_the_memorys_or_an_empty_string() {
        let b = body(&format!(
            r#"{{"role":"assistant","content":null,"tool_calls":[{CALL}]}},{{"role":"tool","tool_call_id":"call_1","content":"ok"}},{{"role":"assistant","content":"x","tool_calls":[{}]}}"#,
            CALL.replace("call_1", "call_\\u0032")
        ));
        let mut plan = ReplayPlan::read(b.as_bytes());
        let wanting: Vec<(usize, Vec<Vec<u8>>)> = plan
            .wanting(b.as_bytes())
            .map(|(i, c)| (i, c.to_vec()))
            .collect();
        assert_eq!(
            wanting,
            [(0, vec![b"call_1".to_vec()]), (1, vec![b"call_2".to_vec()])]
        );
        plan.restore(0, Arc::from(&b"\"remembered\""[..]));
        assert_eq!(plan.restored_bytes(), 12);
        let (out, sources) = applied(
            &b,
            &plan,
            ReplayMode::ToolCalls,
            ReasoningField::ReasoningContent,
        );
        assert_eq!(sources, "memory,empty");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], "remembered");
        assert_eq!(v["messages"][3]["reasoning_content"], "");
        assert_eq!(v["messages"][3]["content"], "x");
        assert_eq!(v["stream"], true);
    }

    #[test]
    fn each_mode_keeps_what_it_says() {
        let b = body(&format!(
            r#"{{"role":"assistant","content":"plain","reasoning_content":"r1","reasoning":"r1b"}},{{"role":"assistant","content":null,"reasoning":"r2","tool_calls":[{CALL}]}}"#
        ));
        let plan = ReplayPlan::read(b.as_bytes());
        let v = |mode, field| {
            let (out, sources) = applied(&b, &plan, mode, field);
            (
                serde_json::from_str::<serde_json::Value>(&out).unwrap(),
                sources,
            )
        };
        // Strip: today's rule, `reasoning_content` only.
        let (s, sources) = v(ReplayMode::Strip, ReasoningField::ReasoningContent);
        assert!(s["messages"][1].get("reasoning_content").is_none());
        assert_eq!(s["messages"][1]["reasoning"], "r1b");
        assert_eq!(s["messages"][2]["reasoning"], "r2");
        assert_eq!(sources, "");
        // Tool calls: the plain turn loses both, the calling turn keeps its
        // own under the endpoint's name.
        let (t, sources) = v(ReplayMode::ToolCalls, ReasoningField::ReasoningContent);
        let plain = t["messages"][1].as_object().unwrap();
        assert!(!plain.contains_key("reasoning_content") && !plain.contains_key("reasoning"));
        assert_eq!(t["messages"][2]["reasoning_content"], "r2");
        assert!(t["messages"][2].get("reasoning").is_none());
        assert_eq!(sources, "client");
        // All: every turn keeps its own (`reasoning_content` first).
        let (a, _) = v(ReplayMode::All, ReasoningField::Reasoning);
        assert_eq!(a["messages"][1]["reasoning"], "r1");
        assert!(a["messages"][1].get("reasoning_content").is_none());
        assert_eq!(a["messages"][2]["reasoning"], "r2");
    }

    #[test]
    fn a_null_reasoning_is_none_and_other_roles_are_left_alone() {
        let b = body(&format!(
            r#"{{"role":"assistant","content":null,"reasoning_content":null,"tool_calls":[{CALL}]}},{{"role":"user","content":"u","reasoning_content":"kept"}}"#
        ));
        let plan = ReplayPlan::read(b.as_bytes());
        assert_eq!(plan.wanting(b.as_bytes()).count(), 1);
        let (out, sources) = applied(
            &b,
            &plan,
            ReplayMode::ToolCalls,
            ReasoningField::ReasoningContent,
        );
        assert_eq!(sources, "empty");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["messages"][1]["reasoning_content"], "");
        assert_eq!(v["messages"][2]["reasoning_content"], "kept");
        assert_eq!(out.matches("reasoning_content").count(), 2, "{out}");
    }

    #[test]
    fn nothing_to_replay_reads_as_an_empty_plan() {
        for b in [
            body(r#"{"role":"assistant","content":"a"}"#),
            "not json".into(),
            "{}".into(),
        ] {
            let plan = ReplayPlan::read(b.as_bytes());
            assert!(plan.is_empty(), "{b}");
            assert!(
                plan.apply(b.as_bytes(), ReplayMode::All, ReasoningField::Reasoning)
                    .body
                    .is_none()
            );
        }
    }
}
