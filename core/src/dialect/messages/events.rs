//! A chat answer as a Messages answer: the stream of chat chunks (each
//! event's data, as the SSE framer cut it) as the Messages event stream,
//! or a whole chat completion as a message object.
//!
//! Each chunk is translated when it arrives, nothing of the text kept: a
//! reasoning delta is a `thinking_delta`, a text delta a `text_delta`, a
//! tool call's arguments an `input_json_delta`, each JSON string copied as
//! the provider wrote it. Blocks open in the order the deltas need them
//! and one at a time, as the Messages stream has them: opening the next
//! closes the one before (a thinking block with its signature). A second
//! tool call that starts while another is still being streamed (a
//! provider that interleaves parallel calls) is kept until the first is
//! done, then written.
//!
//! The stream's `message_delta` (the `stop_reason` and the usage) waits
//! for the end: the provider's usage comes after its `finish_reason`.
//!
//! A thinking block's `signature` is the gateway's HMAC of its text
//! ([`crate::reasoning::ReasoningSeal::sign`]): the one thing kept of the
//! reasoning as it passes is its text, to sign it when the block closes.
//! A client that sends the block back unchanged gives the provider its
//! reasoning back (`request.rs`). What the answer may make the translator
//! hold is bounded ([`crate::dialect::Budget`]).

use crate::http::write::push_decimal;
use crate::json::Cursor;
use crate::reasoning::{AnswerReasoning, Signer, text_of};
use crate::usage::Usage;

use super::request::Asked;
use crate::dialect::chunk::{CallDelta, Found, Shape};
use crate::dialect::text::valid_text;
use crate::dialect::{Budget, Carry, End, OverBudget};

pub use crate::reasoning::SIGNATURE_PREFIX;

/// A content block being streamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
    /// The tool call at this position in `calls`.
    Tool(usize),
}

/// A tool call of the answer.
#[derive(Debug)]
struct ToolCall {
    /// The chat call's `index`, and its id (the inside of its string).
    index: u64,
    id: Vec<u8>,
    /// The name as written (a JSON string).
    name: Vec<u8>,
    /// Arguments that arrived before its block opened (the insides of
    /// JSON strings, joined).
    pending: Vec<u8>,
    state: CallState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallState {
    Waiting,
    Open,
    Closed,
}

/// The Messages event stream for one chat stream.
#[derive(Debug)]
pub struct MessageStream {
    asked: Asked,
    carry: Carry,
    /// `msg_…`, from the gateway's request id.
    id: String,
    /// The answer's reasoning and calls, when the memory keeps them.
    log: Option<AnswerReasoning>,
    /// The open thinking block's signature, made as its text passes
    /// (boxed: a hash's state is larger than the rest of the stream).
    signer: Option<Box<Signer>>,
    budget: Budget,
    /// The model as the provider named it (a JSON string as written).
    model: Vec<u8>,
    started: bool,
    /// The open block and its index.
    open: Option<(Block, u64)>,
    next_index: u64,
    calls: Vec<ToolCall>,
    /// `finish_reason` arrived: the stop reason, and the stop sequence
    /// (a JSON string) when the provider named it.
    stop: Option<(&'static str, Option<Vec<u8>>)>,
    ended: bool,
    /// The shape of the last chunk that carried one text delta and nothing
    /// else, and the block it went to (`None`: reasoning not asked for,
    /// which goes nowhere).
    shape: Option<Shape<Option<Block>>>,
    /// Whether shapes are learned and used (always, but for the tests and
    /// fuzz targets that check the output is the same without).
    shortcut: bool,
}

impl MessageStream {
    /// A stream for the request `request_id` (its `req_…` id), which asked
    /// `asked`; its thinking signed with `carry`'s keys.
    pub fn new(asked: Asked, request_id: &str, carry: Carry) -> Self {
        let tail = request_id.trim_start_matches("req_");
        let log = carry.remember.then(AnswerReasoning::new);
        MessageStream {
            asked,
            carry,
            id: format!("msg_{tail}"),
            log,
            signer: None,
            budget: Budget::default(),
            model: Vec::new(),
            started: false,
            open: None,
            next_index: 0,
            calls: Vec::new(),
            stop: None,
            ended: false,
            shape: None,
            shortcut: true,
        }
    }

    /// Turns the same-shape shortcut off (see [`MessageStream::chunk`]):
    /// for tests and fuzz targets, which check the output is the same.
    pub fn without_shortcut(mut self) -> Self {
        self.shortcut = false;
        self
    }

    /// Whether the next chunk shaped like the last is read by the
    /// shortcut (for the tests that check it is taken).
    #[cfg(test)]
    pub(crate) fn has_shape(&self) -> bool {
        self.shape.is_some()
    }

    /// The events for one chat chunk (an SSE event's data), appended to
    /// `out`. A chunk that is not a JSON object writes nothing but the
    /// start. A chunk shaped like the last chunk of one text delta (most
    /// of a stream) is that same kind of delta, written without walking it.
    pub fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        if self.ended {
            return Ok(());
        }
        if let Some(shape) = &self.shape {
            // Its block is still the one open (reasoning not asked for goes
            // nowhere, whatever is open).
            let open = match (shape.kind, self.open) {
                (None, _) => Some(None),
                (Some(kind), Some((open, index))) if open == kind => Some(Some((kind, index))),
                _ => None,
            };
            if let Some((open, text)) = open.zip(shape.delta(data)) {
                let reasoning = !matches!(open, Some((Block::Text, _)));
                if reasoning && text.len() > 2 {
                    self.keep_reasoning(text)?;
                }
                match open.filter(|_| text.len() > 2) {
                    Some((Block::Text, index)) => text_delta(out, index, text),
                    Some((Block::Thinking, index)) if !self.asked.omit_thinking => {
                        thinking_delta(out, index, text)
                    }
                    _ => {}
                }
                return Ok(());
            }
        }
        self.other_chunk(data, out)
    }

    /// A chunk of the last shape but for its delta, one text member of its
    /// own ([`Shape::other`]): the turn from reasoning to the answer, or
    /// from the first chunk to the rest, read as the walk would read it
    /// without walking it; any other chunk the long way.
    #[inline(never)]
    fn other_chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        let Some(shape) = self.shape.take() else {
            return self.read_chunk(data, out);
        };
        // An empty text opens no block: the walk, which knows what to keep.
        let Some(other) = shape.other(data).filter(|o| o.text.len() > 2) else {
            return self.read_chunk(data, out);
        };
        let kind = if other.reasoning {
            let index = self
                .asked
                .thinking
                .then(|| self.open_block(Block::Thinking, out));
            self.keep_reasoning(other.text)?;
            if let Some(index) = index.filter(|_| !self.asked.omit_thinking) {
                thinking_delta(out, index, other.text);
            }
            self.asked.thinking.then_some(Block::Thinking)
        } else {
            let index = self.open_block(Block::Text, out);
            text_delta(out, index, other.text);
            Some(Block::Text)
        };
        self.shape = Some(shape.turned(data, &other, kind));
        Ok(())
    }

    /// [`Self::chunk`] the long way: the chunk walked, and its shape
    /// learned. Apart, so that the shortcut is a small function of its own.
    #[inline(never)]
    fn read_chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        self.shape = None;
        let data = &*valid_text(data);
        let Some(found) = Found::read(data) else {
            return Ok(());
        };
        let text = |r: &Option<std::ops::Range<usize>>| {
            r.clone()
                .map(|r| &data[r])
                .filter(|t| t.starts_with(b"\"") && t.len() > 2)
        };
        if self.model.is_empty()
            && let Some(m) = text(&found.model)
        {
            self.model = m.to_vec();
        }
        self.start(out);
        let mut kept = Ok(());
        found.each_reasoning(data, |t| {
            if kept.is_err() {
                return;
            }
            // The block opens first: its text starts with this delta.
            let index = self
                .asked
                .thinking
                .then(|| self.open_block(Block::Thinking, out));
            kept = self.keep_reasoning(t);
            if let Some(index) = index.filter(|_| kept.is_ok() && !self.asked.omit_thinking) {
                thinking_delta(out, index, t);
            }
        });
        kept?;
        if let Some(t) = text(&found.content) {
            let index = self.open_block(Block::Text, out);
            text_delta(out, index, t);
        }
        // A chunk of one text delta and nothing else gives its shape, when
        // its block is the one open (or it is reasoning that goes nowhere).
        if let Some((reasoning, r)) = found.lone_text(data).filter(|_| self.shortcut) {
            let kind = match (reasoning, self.asked.thinking) {
                (true, false) => None,
                (true, true) => Some(Block::Thinking),
                (false, _) => Some(Block::Text),
            };
            if kind.is_none() || kind == self.open.map(|(k, _)| k) {
                self.shape = Some(Shape::new(&found, data, r, kind));
            }
        }
        let mut calls = Ok(());
        CallDelta::each(data, found.calls.as_ref(), |d| {
            calls = calls.and_then(|()| self.call_delta(d, out));
        });
        calls?;
        if let Some(f) = text(&found.finish) {
            let reason = Cursor::whole(f, Cursor::str).unwrap_or_default();
            let sequence = found
                .stop_reason
                .map(|r| &data[r])
                .filter(|s| s.starts_with(b"\""));
            self.stop = Some(stop_reason(&reason, sequence, !self.calls.is_empty()));
            self.close_all(out);
        }
        Ok(())
    }

    /// A reasoning delta (a JSON string as written), into the open
    /// thinking block's signature and the memory's log.
    fn keep_reasoning(&mut self, text: &[u8]) -> Result<(), OverBudget> {
        if let (Some(signer), Some(t)) = (self.signer.as_mut(), text_of(text)) {
            signer.update(&t);
        }
        match self.log.as_mut() {
            Some(log) => self.budget.keep(log.push(text)),
            None => Ok(()),
        }
    }

    /// The signature of the thinking block that closes (its whole text,
    /// even when it was not shown).
    fn signature(&mut self) -> String {
        match self.signer.take() {
            Some(s) => s.finish(),
            None => self.carry.seal.sign(b""),
        }
    }

    /// `message_start`, once.
    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        event(out, "message_start", |o| {
            o.extend_from_slice(b",\"message\":");
            self.message_head(o);
            o.extend_from_slice(
                b",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\
                  \"usage\":{\"input_tokens\":0,\"output_tokens\":0}}",
            );
        });
    }

    /// `{"id":…,"type":"message","role":"assistant","model":…` (open).
    fn message_head(&self, o: &mut Vec<u8>) {
        o.extend_from_slice(b"{\"id\":\"");
        o.extend_from_slice(self.id.as_bytes());
        o.extend_from_slice(b"\",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        if self.model.is_empty() {
            o.extend_from_slice(&self.asked.model);
        } else {
            o.extend_from_slice(&self.model);
        }
        if self.model.is_empty() && self.asked.model.is_empty() {
            o.extend_from_slice(b"\"\"");
        }
    }

    /// The index of the open block of `kind`, opened now (closing the one
    /// open) if it is not the one open.
    fn open_block(&mut self, kind: Block, out: &mut Vec<u8>) -> u64 {
        if let Some((open, index)) = self.open
            && open == kind
        {
            return index;
        }
        self.close_open(out);
        let index = self.next_index;
        self.next_index += 1;
        self.open = Some((kind, index));
        if kind == Block::Thinking {
            self.signer = Some(Box::new(self.carry.seal.signer()));
        }
        event(out, "content_block_start", |o| {
            index_member(o, index);
            o.extend_from_slice(b",\"content_block\":");
            match kind {
                Block::Thinking => o.extend_from_slice(
                    b"{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}",
                ),
                Block::Text => o.extend_from_slice(b"{\"type\":\"text\",\"text\":\"\"}"),
                Block::Tool(i) => {
                    let call = &self.calls[i];
                    o.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":\"");
                    if call.id.is_empty() {
                        o.extend_from_slice(b"toolu_");
                        o.extend_from_slice(self.id.trim_start_matches("msg_").as_bytes());
                        o.push(b'_');
                        push_decimal(o, i as u64);
                    } else {
                        o.extend_from_slice(&call.id);
                    }
                    o.extend_from_slice(b"\",\"name\":");
                    if call.name.is_empty() {
                        o.extend_from_slice(b"\"\"");
                    } else {
                        o.extend_from_slice(&call.name);
                    }
                    o.extend_from_slice(b",\"input\":{}}");
                }
            }
        });
        if let Block::Tool(i) = kind {
            self.calls[i].state = CallState::Open;
            let pending = std::mem::take(&mut self.calls[i].pending);
            self.budget.release(pending.len());
            if !pending.is_empty() {
                json_delta(out, index, &pending);
            }
        }
        index
    }

    /// Closes the open block: a thinking block with its signature; after a
    /// tool call, the next call waiting opens.
    fn close_open(&mut self, out: &mut Vec<u8>) {
        let Some((kind, index)) = self.open.take() else {
            return;
        };
        if kind == Block::Thinking {
            let signature = self.signature();
            event(out, "content_block_delta", |o| {
                index_member(o, index);
                o.extend_from_slice(b",\"delta\":{\"type\":\"signature_delta\",\"signature\":\"");
                o.extend_from_slice(signature.as_bytes());
                o.extend_from_slice(b"\"}");
            });
        }
        event(out, "content_block_stop", |o| index_member(o, index));
        if let Block::Tool(i) = kind {
            self.calls[i].state = CallState::Closed;
        }
    }

    /// Closes the open block, then writes each call still waiting (its
    /// block opened, its arguments, closed).
    fn close_all(&mut self, out: &mut Vec<u8>) {
        self.close_open(out);
        for i in 0..self.calls.len() {
            if self.calls[i].state == CallState::Waiting {
                self.open_block(Block::Tool(i), out);
                self.close_open(out);
            }
        }
    }

    /// One tool call delta.
    fn call_delta(&mut self, d: CallDelta<'_>, out: &mut Vec<u8>) -> Result<(), OverBudget> {
        let inside = |s: &[u8]| s[1..s.len() - 1].to_vec();
        // The call at this index (the newest: some providers number every
        // call 0, and a delta with another id is another call).
        let known = self.calls.iter().rposition(|c| c.index == d.index);
        let known = match (known, d.id) {
            (Some(i), Some(id)) if self.calls[i].id != id[1..id.len() - 1] => None,
            (known, _) => known,
        };
        let i = match known {
            Some(i) => i,
            // Arguments of a call never started: nothing to attach them to.
            None if d.id.is_none() && d.name.is_none() => return Ok(()),
            None => {
                self.budget.item()?;
                if let (Some(log), Some(id)) = (self.log.as_mut(), d.id) {
                    log.call(id);
                }
                self.calls.push(ToolCall {
                    index: d.index,
                    id: d.id.map(inside).unwrap_or_default(),
                    name: d.name.map(<[u8]>::to_vec).unwrap_or_default(),
                    pending: Vec::new(),
                    state: CallState::Waiting,
                });
                let i = self.calls.len() - 1;
                let tool_open = matches!(self.open, Some((Block::Tool(_), _)));
                if !tool_open {
                    self.open_block(Block::Tool(i), out);
                }
                i
            }
        };
        let Some(args) = d.arguments.filter(|a| a.len() > 2) else {
            return Ok(());
        };
        match self.calls[i].state {
            CallState::Open => {
                let index = self.open.map_or(0, |(_, index)| index);
                json_delta(out, index, &args[1..args.len() - 1]);
            }
            CallState::Waiting => {
                self.budget.keep(args.len() - 2)?;
                self.calls[i]
                    .pending
                    .extend_from_slice(&args[1..args.len() - 1]);
            }
            // A call's arguments after its block closed (text came
            // between): the block is over, so they are dropped.
            CallState::Closed => {}
        }
        Ok(())
    }

    /// The stream's last events: `message_delta` (the stop reason and the
    /// usage) and `message_stop` for an answer that finished; an `error`
    /// event for one that broke off (no `message_stop` after it).
    pub fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.start(out);
        self.ended = true;
        match end {
            End::Finished(reason) => {
                self.close_all(out);
                let (stop, sequence) = match self.stop.take() {
                    Some(s) => s,
                    None => stop_reason(
                        reason.unwrap_or("stop").as_bytes(),
                        None,
                        !self.calls.is_empty(),
                    ),
                };
                event(out, "message_delta", |o| {
                    o.extend_from_slice(b",\"delta\":{\"stop_reason\":\"");
                    o.extend_from_slice(stop.as_bytes());
                    o.extend_from_slice(b"\",\"stop_sequence\":");
                    o.extend_from_slice(sequence.as_deref().unwrap_or(b"null"));
                    o.extend_from_slice(b"},\"usage\":");
                    write_usage(o, usage);
                });
                event(out, "message_stop", |_| {});
            }
            End::Failed(why) => {
                let kind = if why.contains("shutting down") || why.contains("overloaded") {
                    "overloaded_error"
                } else {
                    "api_error"
                };
                let message = format!(
                    "The provider's answer broke off before it was complete ({why}); \
                     the message is truncated."
                );
                super::errors::event(out, kind, &message);
            }
        }
    }
}

/// The Messages stop reason for a chat `finish_reason` (and the stop
/// sequence the provider said matched, a JSON string); `calls` when the
/// answer made tool calls (some servers say `stop` after them).
fn stop_reason(
    finish: &[u8],
    sequence: Option<&[u8]>,
    calls: bool,
) -> (&'static str, Option<Vec<u8>>) {
    match finish {
        b"stop" if calls => ("tool_use", None),
        b"stop" => match sequence {
            Some(s) => ("stop_sequence", Some(s.to_vec())),
            None => ("end_turn", None),
        },
        b"length" => ("max_tokens", None),
        b"tool_calls" | b"function_call" => ("tool_use", None),
        b"content_filter" => ("refusal", None),
        _ => ("end_turn", None),
    }
}

/// `event: NAME\ndata: {"type":"NAME"…}\n\n`, `body` writing the members
/// after `type`.
fn event(out: &mut Vec<u8>, name: &str, body: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: {\"type\":\"");
    out.extend_from_slice(name.as_bytes());
    out.push(b'"');
    body(out);
    out.extend_from_slice(b"}\n\n");
}

/// `,"index":N`.
fn index_member(o: &mut Vec<u8>, index: u64) {
    o.extend_from_slice(b",\"index\":");
    push_decimal(o, index);
}

/// A `content_block_delta` event up to its block's index.
const DELTA_START: &[u8] =
    b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":";
/// A text block's delta up to its string.
const TEXT_DELTA: &[u8] = b",\"delta\":{\"type\":\"text_delta\",\"text\":";
/// A thinking block's delta up to its string.
const THINKING_DELTA: &[u8] = b",\"delta\":{\"type\":\"thinking_delta\",\"thinking\":";
/// A tool use block's delta up to its string.
const JSON_DELTA: &[u8] = b",\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":";

/// A `content_block_delta` of block `index`: `head` (the delta object up
/// to its string: [`TEXT_DELTA`], [`THINKING_DELTA`]), then the JSON
/// string `text`, as written. Most events of a stream are these, so each is
/// a handful of copies; inlined into [`text_delta`] and
/// [`thinking_delta`], where `head` is a constant, copied inline.
#[inline(always)]
fn delta(out: &mut Vec<u8>, index: u64, head: &[u8], text: &[u8]) {
    delta_of(out, index, head, &[text]);
}

/// A text block's `content_block_delta` ([`delta`]).
#[inline(never)]
fn text_delta(out: &mut Vec<u8>, index: u64, text: &[u8]) {
    delta(out, index, TEXT_DELTA, text);
}

/// A thinking block's `content_block_delta` ([`delta`]).
#[inline(never)]
fn thinking_delta(out: &mut Vec<u8>, index: u64, text: &[u8]) {
    delta(out, index, THINKING_DELTA, text);
}

/// An `input_json_delta` whose `partial_json` is `inside` (the inside of
/// a JSON string).
fn json_delta(out: &mut Vec<u8>, index: u64, inside: &[u8]) {
    delta_of(out, index, JSON_DELTA, &[b"\"", inside, b"\""]);
}

/// A `content_block_delta` whose delta is `head` and the JSON string
/// `parts` make (inlined: one part's loop is one copy).
#[inline(always)]
fn delta_of(out: &mut Vec<u8>, index: u64, head: &[u8], parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(DELTA_START.len() + 20 + head.len() + len + 4);
    out.extend_from_slice(DELTA_START);
    push_decimal(out, index);
    out.extend_from_slice(head);
    for p in parts {
        out.extend_from_slice(p);
    }
    out.extend_from_slice(b"}}\n\n");
}

/// The usage object: input without the cached tokens (which are their
/// own field, as the Messages API counts them), output, cache fields.
fn write_usage(o: &mut Vec<u8>, usage: Option<&Usage>) {
    let u = usage.copied().unwrap_or_default();
    let cached = u.cached_tokens.max(u.cache_read_input_tokens);
    o.extend_from_slice(b"{\"input_tokens\":");
    push_decimal(o, u.prompt_tokens.saturating_sub(cached));
    o.extend_from_slice(b",\"output_tokens\":");
    push_decimal(o, u.completion_tokens);
    o.extend_from_slice(b",\"cache_read_input_tokens\":");
    push_decimal(o, cached);
    o.extend_from_slice(b",\"cache_creation_input_tokens\":");
    push_decimal(o, u.cache_created_input_tokens);
    o.push(b'}');
}

/// A whole chat completion as a Messages message object.
pub fn body(
    asked: Asked,
    request_id: &str,
    carry: Carry,
    completion: &[u8],
    usage: Option<&Usage>,
) -> Vec<u8> {
    let data = &*valid_text(completion);
    let found = Found::read(data).unwrap_or_default();
    let text = |r: &Option<std::ops::Range<usize>>| {
        r.clone().map(|r| &data[r]).filter(|t| t.starts_with(b"\""))
    };
    let mut stream = MessageStream::new(asked, request_id, carry);
    if let Some(m) = text(&found.model) {
        stream.model = m.to_vec();
    }
    let mut out = Vec::with_capacity(completion.len() + 256);
    stream.message_head(&mut out);
    out.extend_from_slice(b",\"content\":[");
    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
    };
    // The reasoning, whatever the provider named it: one thinking block.
    let mut shown = Vec::new();
    stream.signer = Some(Box::new(stream.carry.seal.signer()));
    found.each_reasoning(data, |t| {
        if stream.keep_reasoning(t).is_ok() {
            shown.extend_from_slice(&t[1..t.len() - 1]);
        }
    });
    if stream.asked.thinking && !shown.is_empty() {
        sep(&mut out);
        out.extend_from_slice(b"{\"type\":\"thinking\",\"thinking\":\"");
        if !stream.asked.omit_thinking {
            out.extend_from_slice(&shown);
        }
        out.extend_from_slice(b"\",\"signature\":\"");
        out.extend_from_slice(stream.signature().as_bytes());
        out.extend_from_slice(b"\"}");
    }
    if let Some(t) = text(&found.content).filter(|t| t.len() > 2) {
        sep(&mut out);
        out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
        out.extend_from_slice(t);
        out.push(b'}');
    }
    let mut position = 0;
    CallDelta::each(data, found.calls.as_ref(), |d| {
        sep(&mut out);
        tool_use(&mut out, &d, &stream.id, position);
        position += 1;
    });
    out.extend_from_slice(b"],\"stop_reason\":");
    let finish = text(&found.finish).and_then(|f| Cursor::whole(f, Cursor::str).ok());
    let sequence = found
        .stop_reason
        .map(|r| &data[r])
        .filter(|s| s.starts_with(b"\""));
    // No `finish_reason` at all: the answer is whole (the body ended), so
    // it ended its turn, as a stream that finished without one says.
    let finish = finish.as_deref().unwrap_or(b"stop");
    let (stop, sequence) = stop_reason(finish, sequence, position > 0);
    out.push(b'"');
    out.extend_from_slice(stop.as_bytes());
    out.extend_from_slice(b"\",\"stop_sequence\":");
    out.extend_from_slice(sequence.as_deref().unwrap_or(b"null"));
    out.extend_from_slice(b",\"usage\":");
    write_usage(&mut out, usage);
    out.push(b'}');
    out
}

/// A whole tool call as a `tool_use` block: its arguments' JSON object as
/// the `input`; arguments that are no JSON object kept whole, as the
/// string member `arguments` of the input.
fn tool_use(out: &mut Vec<u8>, d: &CallDelta<'_>, message_id: &str, position: u64) {
    out.extend_from_slice(b"{\"type\":\"tool_use\",\"id\":");
    match d.id {
        Some(id) => out.extend_from_slice(id),
        None => {
            out.extend_from_slice(b"\"toolu_");
            out.extend_from_slice(message_id.trim_start_matches("msg_").as_bytes());
            out.push(b'_');
            push_decimal(out, position);
            out.push(b'"');
        }
    }
    out.extend_from_slice(b",\"name\":");
    out.extend_from_slice(d.name.unwrap_or(b"\"\""));
    out.extend_from_slice(b",\"input\":");
    let raw = d.arguments.unwrap_or(b"\"\"");
    let decoded = Cursor::whole(raw, Cursor::str).ok();
    let object = decoded.as_deref().filter(|j| {
        j.trim_ascii_start().starts_with(b"{") && Cursor::whole(j, Cursor::skip).is_ok()
    });
    match object {
        Some(j) => out.extend_from_slice(j.trim_ascii()),
        None if decoded
            .as_deref()
            .is_some_and(|j| j.trim_ascii().is_empty()) =>
        {
            out.extend_from_slice(b"{}")
        }
        None => {
            out.extend_from_slice(b"{\"arguments\":");
            out.extend_from_slice(raw);
            out.push(b'}');
        }
    }
    out.push(b'}');
}

impl crate::dialect::Translator for MessageStream {
    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        MessageStream::chunk(self, data, out)
    }

    fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        MessageStream::end(self, end, usage, out);
    }

    fn take_reasoning(&mut self) -> Option<AnswerReasoning> {
        if self.carry.remember {
            self.log.take()
        } else {
            None
        }
    }
}
