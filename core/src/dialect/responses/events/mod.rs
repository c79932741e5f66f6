//! A chat answer as a Responses answer: the stream of chat chunks (each
//! event's data, as the SSE framer cut it) as the Responses event stream,
//! or a whole chat completion as a response object.
//!
//! Each chunk is translated when it arrives: a text, reasoning or tool
//! call's arguments delta is written as its Responses delta at once, the
//! JSON string copied as the provider wrote it. What the `…done` events and
//! the final response repeat whole (each item's text, a tool call's
//! arguments) is kept as it passes — the only thing kept.
//!
//! Items open in the order the provider's deltas need them: reasoning (a
//! `reasoning` item whose summary is the provider's reasoning, whatever
//! it named it, so Codex shows it), then the message, then one
//! `function_call` item per tool call. Opening the next closes the one
//! before, as the Responses stream requires.
//!
//! A request that asked for `reasoning.encrypted_content` gets each
//! reasoning item's text sealed in it when the item is done
//! ([`crate::reasoning::ReasoningSeal::seal`]): a client that sends the
//! item back gives the provider its reasoning back (`request/`). What
//! the answer may make the translator hold is bounded
//! ([`crate::dialect::Budget`]).
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the stream: each chunk's events, the items opened and closed, the last event |
//! | `object.rs` | the response object the first and last events carry and the store keeps, a whole completion's ([`body`]) and a background run's ([`queued`]) |

use crate::http::write::push_decimal;
use crate::json::Cursor;
use crate::reasoning::AnswerReasoning;
use crate::usage::Usage;

pub use crate::dialect::End;
pub use object::{body, queued};

mod object;

use object::write_usage;

use super::request::Asked;
use super::text::custom_input;
use crate::dialect::chunk::{CallDelta, Found, Shape};
use crate::dialect::text::valid_text;
use crate::dialect::{Budget, Carry, OverBudget};

/// One output item, as it is built.
#[derive(Debug)]
struct Item {
    kind: Kind,
    id: String,
    /// Its text (the inside of a JSON string, escapes as written): the
    /// reasoning, the message, or a call's arguments.
    text: Vec<u8>,
    /// A tool call's `call_id` and name (namespace, name).
    call_id: Vec<u8>,
    name: String,
    namespace: Option<String>,
    /// A call of a freeform (`custom`) tool: its arguments are kept whole
    /// and its `input` written when it is done.
    custom: bool,
    /// The chat tool call's `index`.
    index: u64,
    done: bool,
    /// `,"item_id":…,"output_index":…`, as every event of the item names
    /// it, then the member before a delta's string: written once, when the
    /// item opens, and copied into each delta event whole.
    delta_head: Vec<u8>,
    /// Where the member before the delta starts in `delta_head`.
    reference_len: usize,
    /// A reasoning item: where its text starts in the stream's log, and
    /// once done, its text sealed (when the request asked for it).
    log_start: usize,
    sealed: Option<String>,
}

impl Item {
    /// A new item of `kind`, at `index` in the output, named `id`.
    fn new(kind: Kind, id: String, output_index: usize) -> Item {
        let mut delta_head = Vec::with_capacity(64);
        delta_head.extend_from_slice(b",\"item_id\":\"");
        delta_head.extend_from_slice(id.as_bytes());
        delta_head.extend_from_slice(b"\",\"output_index\":");
        push_decimal(&mut delta_head, output_index as u64);
        let reference_len = delta_head.len();
        delta_head.extend_from_slice(match kind {
            Kind::Reasoning => b",\"summary_index\":0,\"delta\":",
            Kind::Message => b",\"content_index\":0,\"delta\":",
            Kind::Call => b",\"delta\":",
        });
        Item {
            kind,
            id,
            // Most texts are longer than a few deltas: not grown from 8.
            text: Vec::with_capacity(256),
            call_id: Vec::new(),
            name: String::new(),
            namespace: None,
            custom: false,
            index: 0,
            done: false,
            delta_head,
            reference_len,
            log_start: 0,
            sealed: None,
        }
    }
}

/// An event's start as [`ResponseStream::begin`] writes it, for an event
/// name known here: `event: {name}`, and its data's `type`, up to the
/// `sequence_number`'s value.
macro_rules! event_start {
    ($name:literal) => {
        concat!(
            "event: ",
            $name,
            "\ndata: {\"type\":\"",
            $name,
            "\",\"sequence_number\":"
        )
        .as_bytes()
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
    Call,
}

/// The Responses event stream for one chat stream.
#[derive(Debug)]
pub struct ResponseStream {
    asked: Asked,
    carry: Carry,
    /// The answer's reasoning and calls, when reasoning is sealed or the
    /// memory keeps it.
    log: Option<AnswerReasoning>,
    budget: Budget,
    /// `resp_…`, from the gateway's request id.
    id: String,
    model: Vec<u8>,
    created_at: u64,
    sequence: u64,
    started: bool,
    items: Vec<Item>,
    /// The items still open, by index, oldest first (a few at most: the
    /// text being written and the tool calls being streamed).
    open: Vec<usize>,
    finish_reason: Option<String>,
    ended: bool,
    /// The last event's response object, for the store.
    kept_object: Option<Vec<u8>>,
    /// The shape of the last chunk that carried one text delta and nothing
    /// else: a chunk with the same text before and after its string is the
    /// same kind of delta (see [`ResponseStream::chunk`]).
    shape: Option<Shape<usize>>,
    /// Whether shapes are learned and used (always, but for the tests and
    /// fuzz targets that check the output is the same without).
    shortcut: bool,
}

impl ResponseStream {
    /// A stream for the request `request_id` (its `req_…` id), which asked
    /// `asked`; `created_at` in Unix seconds; reasoning sealed with
    /// `carry`'s keys.
    pub fn new(asked: Asked, request_id: &str, created_at: u64, carry: Carry) -> Self {
        let log = (asked.encrypted_reasoning || carry.remember).then(AnswerReasoning::new);
        ResponseStream {
            asked,
            carry,
            log,
            budget: Budget::default(),
            id: format!("resp_{}", request_id.trim_start_matches("req_")),
            model: Vec::new(),
            created_at,
            sequence: 0,
            started: false,
            items: Vec::new(),
            open: Vec::new(),
            shape: None,
            shortcut: true,
            finish_reason: None,
            ended: false,
            kept_object: None,
        }
    }

    /// Turns the same-shape shortcut off (see [`ResponseStream::chunk`]):
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
    /// start. The chunk is walked once: what its first choice carries is
    /// noted where it is, then written in order — reasoning, text, tool
    /// calls, and the ending `finish_reason` brings.
    pub fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        if self.ended {
            return Ok(());
        }
        // A chunk shaped like the last one-delta chunk (see `Shape`): the
        // same kind of delta, for the same item, if it is still open.
        if let Some(shape) = &self.shape
            && let Some(text) = shape
                .delta(data)
                .filter(|_| self.open.contains(&shape.kind))
        {
            if text.len() > 2 {
                self.text_delta(shape.kind, text, out)?;
            }
            return Ok(());
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
        // An empty text opens no item: the walk, which knows what to keep.
        let Some(other) = shape.other(data).filter(|o| o.text.len() > 2) else {
            return self.read_chunk(data, out);
        };
        let kind = if other.reasoning {
            Kind::Reasoning
        } else {
            Kind::Message
        };
        let i = self.open(kind, out)?;
        self.text_delta(i, other.text, out)?;
        self.shape = Some(shape.turned(data, &other, i));
        Ok(())
    }

    /// [`Self::chunk`] the long way: the chunk walked, and its shape
    /// learned. Apart, so that the shortcut is a small function of its own.
    #[inline(never)]
    fn read_chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        self.shape = None;
        // What is copied from it must be text every client can read.
        let data = &*valid_text(data);
        let Some(found) = Found::read(data) else {
            return Ok(());
        };
        let text = |r: &Option<std::ops::Range<usize>>| {
            r.clone()
                .map(|r| &data[r])
                .filter(|t| t.starts_with(b"\"") && t.len() > 2)
        };
        if let Some(m) = text(&found.model)
            && self.model.is_empty()
        {
            self.model = m.to_vec();
        }
        self.start(out);
        // A chunk of one text delta and nothing else gives its shape.
        let one = found.lone_text(data).filter(|_| self.shortcut);
        let mut kept = Ok(());
        found.each_reasoning(data, |t| {
            kept = kept.and_then(|()| {
                let i = self.open(Kind::Reasoning, out)?;
                self.text_delta(i, t, out)
            });
        });
        kept?;
        if let Some(t) = text(&found.content) {
            let i = self.open(Kind::Message, out)?;
            self.text_delta(i, t, out)?;
        }
        if let Some((reasoning, r)) = one {
            let kind = if reasoning {
                Kind::Reasoning
            } else {
                Kind::Message
            };
            let item = self
                .open
                .iter()
                .copied()
                .find(|&i| self.items[i].kind == kind);
            self.shape = item.map(|item| Shape::new(&found, data, r, item));
        }
        let mut calls = Ok(());
        CallDelta::each(data, found.calls.as_ref(), |d| {
            calls = calls.and_then(|()| self.call_delta(d, out));
        });
        calls?;
        if let Some(f) = text(&found.finish) {
            if let Ok(reason) = Cursor::whole(f, Cursor::str) {
                self.finish_reason = Some(String::from_utf8_lossy(&reason).into_owned());
            }
            self.close_all(out);
        }
        Ok(())
    }

    /// The response's opening events, once.
    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let mut response = Vec::with_capacity(1024);
        self.response(&mut response, "in_progress", None, None);
        self.event(out, "response.created", |o| {
            o.extend_from_slice(b",\"response\":");
            o.extend_from_slice(&response);
        });
        self.event(out, "response.in_progress", |o| {
            o.extend_from_slice(b",\"response\":");
            o.extend_from_slice(&response);
        });
    }

    /// The open item of `kind` (the reasoning or the message), opened now
    /// if it is not open (the other text item closed; tool calls being
    /// streamed stay open, so their next deltas still find them).
    fn open(&mut self, kind: Kind, out: &mut Vec<u8>) -> Result<usize, OverBudget> {
        if let Some(&i) = self.open.iter().find(|&&i| self.items[i].kind == kind) {
            return Ok(i);
        }
        self.budget.item()?;
        self.close_text(out);
        let prefix = match kind {
            Kind::Reasoning => "rs",
            Kind::Message => "msg",
            Kind::Call => "fc",
        };
        let n = self.items.len();
        let id = format!("{prefix}_{}_{n}", &self.id[5..]);
        let mut item = Item::new(kind, id, n);
        item.log_start = self.log.as_ref().map_or(0, AnswerReasoning::len);
        self.items.push(item);
        self.open.push(n);
        let i = n;
        self.item_event(out, "response.output_item.added", i);
        match kind {
            Kind::Reasoning => self.part_event(out, "response.reasoning_summary_part.added", i),
            Kind::Message => self.part_event(out, "response.content_part.added", i),
            Kind::Call => {}
        }
        Ok(i)
    }

    /// A text delta of item `i`: `text` is a JSON string as written.
    fn text_delta(&mut self, i: usize, text: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        self.budget.keep(text.len() - 2)?;
        // Most events of a stream are these: the item looked up once, and
        // each branch's event written with its own constant start and end
        // (copied inline, where a length known only here calls memcpy).
        let item = &mut self.items[i];
        let reasoning = item.kind == Kind::Reasoning;
        if reasoning && let Some(log) = self.log.as_mut() {
            self.budget.keep(log.push(text))?;
        }
        let sequence = self.sequence;
        self.sequence += 1;
        if reasoning {
            delta_event(
                out,
                event_start!("response.reasoning_summary_text.delta"),
                sequence,
                &item.delta_head,
                text,
                EVENT_END,
            );
        } else {
            delta_event(
                out,
                event_start!("response.output_text.delta"),
                sequence,
                &item.delta_head,
                text,
                b",\"logprobs\":[]}\n\n",
            );
        }
        item.text.extend_from_slice(&text[1..text.len() - 1]);
        Ok(())
    }

    /// A delta event of item `i` ([`delta_event`]).
    fn item_delta(&mut self, out: &mut Vec<u8>, start: &[u8], i: usize, text: &[u8], end: &[u8]) {
        let sequence = self.sequence;
        self.sequence += 1;
        delta_event(out, start, sequence, &self.items[i].delta_head, text, end);
    }

    /// The next event's `sequence_number` value.
    #[inline(always)]
    fn sequence_number(&mut self, out: &mut Vec<u8>) {
        push_decimal(out, self.sequence);
        self.sequence += 1;
    }

    /// One element of a delta's `tool_calls` (a whole message's calls
    /// carry no `index`: their place in the array is theirs).
    fn call_delta(&mut self, d: CallDelta<'_>, out: &mut Vec<u8>) -> Result<(), OverBudget> {
        let CallDelta {
            index,
            id,
            name,
            arguments,
        } = d;
        let open = self.open.iter().copied().find(|&j| {
            let it = &self.items[j];
            it.kind == Kind::Call && it.index == index
        });
        // A delta with another id at the same index is another call (some
        // providers number every call 0).
        let open = match (open, id) {
            (Some(j), Some(id)) if self.items[j].call_id != id[1..id.len() - 1] => {
                self.close(j, out);
                None
            }
            (open, _) => open,
        };
        let i = match open {
            Some(i) => i,
            // Arguments of a call never started (no id, no name): nothing
            // to attach them to.
            None if id.is_none() && name.is_none() => return Ok(()),
            None => {
                self.budget.item()?;
                if let (Some(log), Some(id)) = (self.log.as_mut(), id) {
                    log.call(id);
                }
                // A new call: its id and name come with its first delta.
                let chat_name = name
                    .and_then(|n| Cursor::whole(n, Cursor::str).ok())
                    .map(|n| String::from_utf8_lossy(&n).into_owned())
                    .unwrap_or_default();
                let custom = self.asked.custom.contains(&chat_name);
                let (namespace, fname) = self.asked.function(&chat_name);
                let (namespace, fname) = (namespace.map(str::to_owned), fname.to_owned());
                self.close_text(out);
                let n = self.items.len();
                let call_id = match id {
                    Some(id) => id[1..id.len() - 1].to_vec(),
                    None => format!("call_{}_{n}", &self.id[5..]).into_bytes(),
                };
                self.items.push(Item {
                    call_id,
                    name: fname,
                    namespace,
                    custom,
                    index,
                    ..Item::new(Kind::Call, format!("fc_{}_{n}", &self.id[5..]), n)
                });
                self.open.push(n);
                self.item_event(out, "response.output_item.added", n);
                n
            }
        };
        if let Some(args) = arguments.filter(|a| a.len() > 2) {
            self.budget.keep(args.len() - 2)?;
            self.items[i]
                .text
                .extend_from_slice(&args[1..args.len() - 1]);
            if self.items[i].custom {
                // Its input is written whole when it is done.
                return Ok(());
            }
            let start = event_start!("response.function_call_arguments.delta");
            self.item_delta(out, start, i, args, EVENT_END);
        }
        Ok(())
    }

    /// Closes every open item, in order.
    fn close_all(&mut self, out: &mut Vec<u8>) {
        for i in std::mem::take(&mut self.open) {
            self.close_item(i, out);
        }
    }

    /// Closes the open reasoning or message item, if any.
    fn close_text(&mut self, out: &mut Vec<u8>) {
        if let Some(at) = self
            .open
            .iter()
            .position(|&i| self.items[i].kind != Kind::Call)
        {
            let i = self.open.remove(at);
            self.close_item(i, out);
        }
    }

    /// Closes open item `i`.
    fn close(&mut self, i: usize, out: &mut Vec<u8>) {
        self.open.retain(|&j| j != i);
        self.close_item(i, out);
    }

    /// Item `i`'s `…done` events (it is no longer in `open`).
    fn close_item(&mut self, i: usize, out: &mut Vec<u8>) {
        if self.items[i].done {
            return;
        }
        self.items[i].done = true;
        match self.items[i].kind {
            Kind::Reasoning => {
                if self.asked.encrypted_reasoning {
                    let text = self.log.as_ref().and_then(AnswerReasoning::text);
                    let start = self.items[i].log_start;
                    let text = text.map_or(&[][..], |t| &t[start.min(t.len())..]);
                    self.items[i].sealed = Some(self.carry.seal.seal(text));
                }
                let member: &[u8] = b",\"summary_index\":0,\"text\":\"";
                self.text_event(
                    out,
                    "response.reasoning_summary_text.done",
                    i,
                    member,
                    b"\"",
                );
                self.part_event(out, "response.reasoning_summary_part.done", i);
            }
            Kind::Message => {
                let member: &[u8] = b",\"content_index\":0,\"text\":\"";
                let after: &[u8] = b"\",\"logprobs\":[]";
                self.text_event(out, "response.output_text.done", i, member, after);
                self.part_event(out, "response.content_part.done", i);
            }
            Kind::Call if self.items[i].custom => {
                self.items[i].text = custom_input(&self.items[i].text);
                let delta: &[u8] = b",\"delta\":\"";
                let input: &[u8] = b",\"input\":\"";
                self.text_event(
                    out,
                    "response.custom_tool_call_input.delta",
                    i,
                    delta,
                    b"\"",
                );
                self.text_event(out, "response.custom_tool_call_input.done", i, input, b"\"");
            }
            Kind::Call => {
                let member: &[u8] = b",\"arguments\":\"";
                self.text_event(
                    out,
                    "response.function_call_arguments.done",
                    i,
                    member,
                    b"\"",
                );
            }
        }
        self.item_event(out, "response.output_item.done", i);
    }

    /// An event of item `i` that carries its text whole: `member` (up to
    /// the string's opening quote), the text, then `after`.
    fn text_event(&mut self, out: &mut Vec<u8>, name: &str, i: usize, member: &[u8], after: &[u8]) {
        self.begin(out, name);
        self.item_ref(out, i);
        out.extend_from_slice(member);
        out.extend_from_slice(&self.items[i].text);
        out.extend_from_slice(after);
        out.extend_from_slice(EVENT_END);
    }

    /// The stream's last event: `response.completed` (or
    /// `response.incomplete` when the provider stopped at `max_tokens` or
    /// its content filter), or `response.failed` for a stream that broke
    /// off. Nothing after it.
    pub fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.start(out);
        self.close_all(out);
        self.ended = true;
        let (name, status, incomplete, error) = match end {
            End::Failed(why) => ("response.failed", "failed", None, Some(why)),
            End::Finished(reason) => match reason.or(self.finish_reason.as_deref()) {
                Some("length") => (
                    "response.incomplete",
                    "incomplete",
                    Some("max_output_tokens"),
                    None,
                ),
                Some("content_filter") => (
                    "response.incomplete",
                    "incomplete",
                    Some("content_filter"),
                    None,
                ),
                _ => ("response.completed", "completed", None, None),
            },
        };
        let text: usize = self.items.iter().map(|it| it.text.len()).sum();
        let mut response = Vec::with_capacity(1024 + 200 * self.items.len() + text);
        self.response(&mut response, status, incomplete, error);
        if let Some(u) = usage {
            response.pop();
            write_usage(&mut response, u);
            response.push(b'}');
        }
        self.event(out, name, |o| {
            o.extend_from_slice(b",\"response\":");
            o.extend_from_slice(&response);
        });
        if self.asked.kept.as_ref().is_some_and(|k| k.store) {
            self.kept_object = Some(response);
        }
    }

    /// `response.output_item.added` or `.done` for item `i`.
    fn item_event(&mut self, out: &mut Vec<u8>, name: &str, i: usize) {
        let mut item = Vec::with_capacity(256 + self.items[i].text.len());
        self.item(&mut item, i);
        self.event(out, name, |o| {
            o.extend_from_slice(b",\"output_index\":");
            push_decimal(o, i as u64);
            o.extend_from_slice(b",\"item\":");
            o.extend_from_slice(&item);
        });
    }

    /// A content or summary part's `.added` or `.done` for item `i`.
    fn part_event(&mut self, out: &mut Vec<u8>, name: &str, i: usize) {
        let (member, after): (&[u8], &[u8]) = if self.items[i].kind == Kind::Reasoning {
            (
                b",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"",
                b"\"}",
            )
        } else {
            (
                b",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"",
                b"\",\"annotations\":[],\"logprobs\":[]}",
            )
        };
        self.begin(out, name);
        self.item_ref(out, i);
        out.extend_from_slice(member);
        // An added part is empty; a done one holds the item's text.
        if name.ends_with(".done") {
            out.extend_from_slice(&self.items[i].text);
        }
        out.extend_from_slice(after);
        out.extend_from_slice(EVENT_END);
    }

    /// `event: {name}` and its data: `type`, `sequence_number`, then what
    /// `body` writes (members, each after a comma).
    fn event(&mut self, out: &mut Vec<u8>, name: &str, body: impl FnOnce(&mut Vec<u8>)) {
        self.begin(out, name);
        body(out);
        out.extend_from_slice(EVENT_END);
    }

    /// An event's start: `event: {name}`, and its data's `type` and
    /// `sequence_number`; its members follow, each after a comma, then
    /// [`EVENT_END`].
    fn begin(&mut self, out: &mut Vec<u8>, name: &str) {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\ndata: {\"type\":\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\",\"sequence_number\":");
        self.sequence_number(out);
    }

    /// `,"item_id":…,"output_index":…` for item `i` (its id is the
    /// gateway's, plain ASCII).
    fn item_ref(&self, out: &mut Vec<u8>, i: usize) {
        let it = &self.items[i];
        out.extend_from_slice(&it.delta_head[..it.reference_len]);
    }
}

/// What closes an event.
const EVENT_END: &[u8] = b"}\n\n";

/// A delta event: `start` (its [`event_start!`]), the `sequence` number,
/// the item's [`Item::delta_head`], the JSON string `text` as written, then
/// `end`. Inlined: most events are these.
#[inline(always)]
fn delta_event(
    out: &mut Vec<u8>,
    start: &[u8],
    sequence: u64,
    head: &[u8],
    text: &[u8],
    end: &[u8],
) {
    out.reserve(start.len() + 20 + head.len() + text.len() + end.len());
    out.extend_from_slice(start);
    push_decimal(out, sequence);
    out.extend_from_slice(head);
    out.extend_from_slice(text);
    out.extend_from_slice(end);
}

impl crate::dialect::Translator for ResponseStream {
    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        ResponseStream::chunk(self, data, out)
    }

    fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        ResponseStream::end(self, end, usage, out);
    }

    fn take_reasoning(&mut self) -> Option<AnswerReasoning> {
        if self.carry.remember {
            self.log.take()
        } else {
            None
        }
    }
}
