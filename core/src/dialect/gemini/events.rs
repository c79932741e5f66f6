//! A chat answer as a Gemini answer: the stream of chat chunks (each
//! event's data, as the SSE framer cut it) as a stream of
//! GenerateContentResponse objects, or a whole chat completion as one.
//!
//! Each chunk is translated when it arrives: its reasoning delta a
//! `{"text":…,"thought":true}` part (only when the request asked for
//! `includeThoughts`), its text delta a `{"text":…}` part, each JSON
//! string copied as the provider wrote it, in one response object with
//! no `finishReason`. A chunk with neither (a role, a usage, a call's
//! arguments) writes nothing. Gemini sends a function call whole, so a
//! call's argument deltas are kept until the `finish_reason` comes (or
//! the stream ends), then its `functionCall` part is written with its
//! `args` object. The `finishReason` and the `usageMetadata` wait for the
//! end, as the provider's usage comes after its `finish_reason`.
//!
//! Framing: with `?alt=sse`, each object is one event, `data: ` + JSON +
//! `\r\n\r\n` as Google's server writes them; without it, the stream is
//! one JSON array (`[`, the objects joined by `,\r\n`, `]`). An answer cut
//! short ends with the error object instead of a last response
//! ([`super::errors::stream_error`]); Gemini has no `[DONE]`.
//!
//! The answer's reasoning rides on its first function call as the part's
//! `thoughtSignature`: the reasoning sealed ([`super::signature::give`]).
//! A client that sends the turn back gives a provider that wants it its
//! reasoning back (`contents.rs`). What the answer may make the
//! translator hold is bounded ([`crate::dialect::Budget`]).

use crate::http::write::push_decimal;
use crate::json::Cursor;
use crate::reasoning::AnswerReasoning;
use crate::usage::Usage;

use super::request::Asked;
use crate::dialect::chunk::{CallDelta, Found, Shape};
use crate::dialect::text::valid_text;
use crate::dialect::{Budget, Carry, End, OverBudget};

/// A tool call of the answer, its arguments arriving.
#[derive(Debug)]
struct ToolCall {
    /// The chat call's `index`, and its id (the inside of its string).
    index: u64,
    id: Vec<u8>,
    /// The name as written (a JSON string).
    name: Vec<u8>,
    /// The arguments so far (the insides of JSON strings, joined).
    arguments: Vec<u8>,
}

/// The Gemini stream for one chat stream.
#[derive(Debug)]
pub struct GeminiStream {
    asked: Asked,
    carry: Carry,
    /// `responseId`, from the gateway's request id.
    id: String,
    /// The answer's reasoning (for the signature) and calls.
    log: AnswerReasoning,
    budget: Budget,
    /// The model as the provider named it (a JSON string as written).
    model: Vec<u8>,
    calls: Vec<ToolCall>,
    /// Calls before this one are written.
    written_calls: usize,
    /// Whether the first call (which carries the signature) is written.
    signed: bool,
    /// `finish_reason` arrived: Gemini's `finishReason`.
    finish: Option<&'static str>,
    /// Objects written so far (the JSON array's `[` goes before the first).
    objects: usize,
    /// What ends every object (`,"modelVersion":…,"responseId":…}`),
    /// written once the model is known, and whether it names the
    /// provider's model (else the asked one).
    tail: Vec<u8>,
    tail_names_model: bool,
    ended: bool,
    /// The shape of the last chunk that carried one text delta and nothing
    /// else, and whether that delta was reasoning.
    shape: Option<Shape<bool>>,
    /// Whether shapes are learned and used (always, but for the tests and
    /// fuzz targets that check the output is the same without).
    shortcut: bool,
}

impl GeminiStream {
    /// A stream for the request `request_id` (its `req_…` id), which asked
    /// `asked`; its reasoning sealed with `carry`'s keys.
    pub fn new(asked: Asked, request_id: &str, carry: Carry) -> Self {
        GeminiStream {
            asked,
            carry,
            id: request_id.trim_start_matches("req_").to_owned(),
            log: AnswerReasoning::new(),
            budget: Budget::default(),
            model: Vec::new(),
            calls: Vec::new(),
            written_calls: 0,
            signed: false,
            finish: None,
            objects: 0,
            tail: Vec::new(),
            tail_names_model: false,
            ended: false,
            shape: None,
            shortcut: true,
        }
    }

    /// Turns the same-shape shortcut off (see [`GeminiStream::chunk`]):
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

    /// The response for one chat chunk (an SSE event's data), appended to
    /// `out`, if it says anything a Gemini client reads. A chunk shaped
    /// like the last chunk of one text delta (most of a stream) is that
    /// same kind of delta, written without walking it.
    pub fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        if self.ended {
            return Ok(());
        }
        // Calls that came after the finish are written with the next
        // response the long way.
        let calls_waiting = self.finish.is_some() && self.written_calls < self.calls.len();
        if let Some(shape) = self.shape.as_ref().filter(|_| !calls_waiting)
            && let Some(text) = shape.delta(data)
        {
            if text.len() > 2 {
                self.lone_text(out, text, shape.kind)?;
            }
            return Ok(());
        }
        if calls_waiting {
            return self.read_chunk(data, out);
        }
        self.other_chunk(data, out)
    }

    /// The response for a chunk of one text delta, `text` (reasoning or
    /// not), not empty.
    #[inline(always)]
    fn lone_text(
        &mut self,
        out: &mut Vec<u8>,
        text: &[u8],
        reasoning: bool,
    ) -> Result<(), OverBudget> {
        if reasoning {
            self.keep_reasoning(text)?;
        }
        if (!reasoning || self.asked.thoughts) && !self.text_response(out, text, reasoning) {
            self.response(out, |o, _| text_part(o, text, reasoning), None, None);
        }
        Ok(())
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
        // An empty text says nothing: the walk, which knows what to keep.
        let Some(other) = shape.other(data).filter(|o| o.text.len() > 2) else {
            return self.read_chunk(data, out);
        };
        self.lone_text(out, other.text, other.reasoning)?;
        self.shape = Some(shape.turned(data, &other, other.reasoning));
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
        let mut thoughts: Vec<&[u8]> = Vec::new();
        let mut kept = Ok(());
        found.each_reasoning(data, |t| {
            if kept.is_ok() {
                kept = self.keep_reasoning(t);
                thoughts.push(t);
            }
        });
        kept?;
        if !self.asked.thoughts {
            thoughts.clear();
        }
        let content = text(&found.content);
        if let Some((reasoning, r)) = found.lone_text(data).filter(|_| self.shortcut) {
            self.shape = Some(Shape::new(&found, data, r, reasoning));
        }
        let mut calls = Ok(());
        CallDelta::each(data, found.calls.as_ref(), |d| {
            calls = calls.and_then(|()| self.call_delta(d));
        });
        calls?;
        if let Some(f) = text(&found.finish) {
            let reason = Cursor::whole(f, Cursor::str).unwrap_or_default();
            self.finish = Some(finish_reason(&reason));
        }
        let complete = self.finish.is_some() && self.written_calls < self.calls.len();
        if !thoughts.is_empty() || content.is_some() || complete {
            self.response(
                out,
                |o, s| {
                    let mut sep = Separator::default();
                    if !thoughts.is_empty() {
                        sep.next(o);
                        joined_part(o, &thoughts, true);
                    }
                    if let Some(t) = content {
                        sep.next(o);
                        text_part(o, t, false);
                    }
                    if complete {
                        s.call_parts(o, &mut sep);
                    }
                },
                None,
                None,
            );
        }
        Ok(())
    }

    /// A reasoning delta (a JSON string as written), into the log the
    /// signature and the memory are made from.
    fn keep_reasoning(&mut self, text: &[u8]) -> Result<(), OverBudget> {
        self.budget.keep(self.log.push(text))
    }

    /// One tool call delta: a new call, or more of a call's arguments.
    fn call_delta(&mut self, d: CallDelta<'_>) -> Result<(), OverBudget> {
        // The call at this index (the newest: some providers number every
        // call 0, and a delta with another id is another call).
        let known = self.calls.iter().rposition(|c| c.index == d.index);
        let known = match (known, d.id) {
            (Some(i), Some(id)) if self.calls[i].id != id[1..id.len() - 1] => None,
            (known, _) => known,
        };
        let i = match known {
            // Written already (arguments after the finish): dropped.
            Some(i) if i < self.written_calls => return Ok(()),
            Some(i) => i,
            // Arguments of a call never started: nothing to attach them to.
            None if d.id.is_none() && d.name.is_none() => return Ok(()),
            None => {
                self.budget.item()?;
                if let Some(id) = d.id {
                    self.log.call(id);
                }
                self.calls.push(ToolCall {
                    index: d.index,
                    id: d.id.map(|s| s[1..s.len() - 1].to_vec()).unwrap_or_default(),
                    name: d.name.map(<[u8]>::to_vec).unwrap_or_default(),
                    arguments: Vec::new(),
                });
                self.calls.len() - 1
            }
        };
        if let Some(args) = d.arguments.filter(|a| a.len() > 2) {
            self.budget.keep(args.len() - 2)?;
            self.calls[i]
                .arguments
                .extend_from_slice(&args[1..args.len() - 1]);
        }
        Ok(())
    }

    /// The `functionCall` parts of the calls not written yet; the first of
    /// the answer carries the reasoning's signature.
    fn call_parts(&mut self, o: &mut Vec<u8>, sep: &mut Separator) {
        let start = o.len();
        for i in self.written_calls..self.calls.len() {
            sep.next(o);
            let signature = self.signature();
            let c = &self.calls[i];
            call_part(o, &c.id, &c.name, &c.arguments, &self.id, i, signature);
        }
        escape_line_separators(o, start);
        self.written_calls = self.calls.len();
    }

    /// The `thoughtSignature` for the answer's first call: its reasoning
    /// sealed, when it had reasoning (and not more than is kept).
    fn signature(&mut self) -> Option<String> {
        if std::mem::replace(&mut self.signed, true) {
            return None;
        }
        let reasoning = self.log.text().filter(|t| !t.is_empty())?;
        Some(super::signature::give(&self.carry.seal, reasoning))
    }

    /// One GenerateContentResponse, framed: `parts` writes the candidate's
    /// parts; a last one has its `finishReason` and usage.
    fn response(
        &mut self,
        out: &mut Vec<u8>,
        parts: impl FnOnce(&mut Vec<u8>, &mut Self),
        finish: Option<&str>,
        usage: Option<Option<&Usage>>,
    ) {
        self.frame_start(out);
        self.object(out, parts, finish, usage);
        if self.asked.sse {
            out.extend_from_slice(b"\r\n\r\n");
        }
    }

    /// The shortcut's response of one text part, as [`Self::response`]
    /// writes it with SSE, no finish and no usage, in a few copies of
    /// constants; `false` (nothing written) where that writer has more to
    /// do: no SSE, or its tail not made yet.
    fn text_response(&mut self, out: &mut Vec<u8>, text: &[u8], thought: bool) -> bool {
        if !self.asked.sse
            || self.tail.is_empty()
            || !self.tail_names_model && !self.model.is_empty()
        {
            return false;
        }
        out.extend_from_slice(
            b"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":",
        );
        let start = out.len();
        out.extend_from_slice(text);
        escape_delta_separators(out, start);
        out.extend_from_slice(if thought {
            b",\"thought\":true}]},\"index\":0}]"
        } else {
            b"}]},\"index\":0}]"
        });
        out.extend_from_slice(&self.tail);
        out.extend_from_slice(b"\r\n\r\n");
        self.objects += 1;
        true
    }

    /// What goes before the next object: `data: `, or the array's `[` or
    /// `,\r\n`.
    fn frame_start(&mut self, out: &mut Vec<u8>) {
        if self.asked.sse {
            out.extend_from_slice(b"data: ");
        } else if self.asked.stream {
            out.extend_from_slice(if self.objects == 0 { b"[" } else { b",\r\n" });
        }
        self.objects += 1;
    }

    /// The response object.
    fn object(
        &mut self,
        o: &mut Vec<u8>,
        parts: impl FnOnce(&mut Vec<u8>, &mut Self),
        finish: Option<&str>,
        usage: Option<Option<&Usage>>,
    ) {
        o.extend_from_slice(b"{\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[");
        parts(o, self);
        o.extend_from_slice(b"]}");
        if let Some(f) = finish {
            o.extend_from_slice(b",\"finishReason\":\"");
            o.extend_from_slice(f.as_bytes());
            o.push(b'"');
        }
        o.extend_from_slice(b",\"index\":0}]");
        if let Some(u) = usage {
            write_usage(o, u);
        }
        if self.tail.is_empty() || !self.tail_names_model && !self.model.is_empty() {
            self.tail.clear();
            self.tail.extend_from_slice(b",\"modelVersion\":");
            self.tail
                .extend_from_slice(match (&self.model[..], &self.asked.model[..]) {
                    ([], []) => b"\"\"",
                    ([], asked) => asked,
                    (model, _) => model,
                });
            self.tail.extend_from_slice(b",\"responseId\":");
            crate::json::write::string(&mut self.tail, &self.id);
            self.tail.push(b'}');
            escape_line_separators(&mut self.tail, 0);
            self.tail_names_model = !self.model.is_empty();
        }
        o.extend_from_slice(&self.tail);
    }

    /// The stream's last output: a response with the calls not written
    /// yet, the `finishReason` and the usage, for an answer that finished;
    /// the error object for one that broke off. A JSON array is closed.
    pub fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        if self.ended {
            return;
        }
        self.ended = true;
        match end {
            End::Finished(reason) => {
                let finish = self
                    .finish
                    .unwrap_or_else(|| finish_reason(reason.unwrap_or("stop").as_bytes()));
                self.response(
                    out,
                    |o, s| s.call_parts(o, &mut Separator::default()),
                    Some(finish),
                    Some(usage),
                );
                if self.asked.stream && !self.asked.sse {
                    out.push(b']');
                }
            }
            End::Failed(why) => {
                let code = if why.contains("shutting down") || why.contains("overloaded") {
                    503
                } else {
                    500
                };
                let message = format!(
                    "The provider's answer broke off before it was complete ({why}); \
                     the answer is truncated."
                );
                let opened = self.objects > 0;
                super::errors::stream_error(out, self.asked.sse, opened, code, &message);
            }
        }
    }
}

/// U+2028 and U+2029 written from `from` on, escaped (`\u2028`): the
/// stream reader Gemini CLI bundles finds an event with a regular
/// expression whose `.` stops at those two, so a raw one in a delta would
/// stall it. In JSON they occur only inside strings, where the escape
/// means the same. Called on what is copied from the provider (texts,
/// calls, its model's name), never on the whole event.
fn escape_line_separators(out: &mut Vec<u8>, from: usize) {
    // A one-byte search (a memmem finder costs more to set up than an
    // event costs to scan); other characters led by E2 (dashes, quotes)
    // only cost a look at the two bytes after.
    let is_separator = |b: &[u8]| matches!(b, [0xE2, 0x80, 0xA8 | 0xA9, ..]);
    let mut at = from;
    let first = loop {
        match memchr::memchr(0xE2, &out[at..]) {
            None => return,
            Some(i) if is_separator(&out[at + i..]) => break at + i,
            Some(i) => at += i + 1,
        }
    };
    let tail = out.split_off(first);
    let mut i = 0;
    while i < tail.len() {
        if is_separator(&tail[i..]) {
            out.extend_from_slice(if tail[i + 2] == 0xA8 {
                b"\\u2028"
            } else {
                b"\\u2029"
            });
            i += 3;
        } else {
            out.push(tail[i]);
            i += 1;
        }
    }
}

/// Gemini's `finishReason` for a chat `finish_reason`.
fn finish_reason(finish: &[u8]) -> &'static str {
    match finish {
        b"stop" | b"tool_calls" | b"function_call" => "STOP",
        b"length" => "MAX_TOKENS",
        b"content_filter" => "SAFETY",
        _ => "OTHER",
    }
}

/// The commas between parts.
#[derive(Default)]
struct Separator(bool);

impl Separator {
    fn next(&mut self, o: &mut Vec<u8>) {
        if std::mem::replace(&mut self.0, true) {
            o.push(b',');
        }
    }
}

/// `{"text":…}` (`,"thought":true` for reasoning), the JSON string as
/// written.
fn text_part(o: &mut Vec<u8>, text: &[u8], thought: bool) {
    joined_part(o, &[text], thought);
}

/// A text part of JSON strings as written, joined as one.
fn joined_part(o: &mut Vec<u8>, texts: &[&[u8]], thought: bool) {
    o.extend_from_slice(b"{\"text\":");
    let start = o.len();
    match texts {
        [one] => o.extend_from_slice(one),
        _ => {
            o.push(b'"');
            for t in texts {
                o.extend_from_slice(&t[1..t.len() - 1]);
            }
            o.push(b'"');
        }
    }
    escape_delta_separators(o, start);
    if thought {
        o.extend_from_slice(b",\"thought\":true");
    }
    o.push(b'}');
}

/// [`escape_line_separators`] from `start`, where a delta's text is: a
/// delta is a few bytes, so a plain look first, where a search's set-up
/// would be most of the cost.
#[inline(always)]
fn escape_delta_separators(o: &mut Vec<u8>, start: usize) {
    let text = &o[start..];
    let lead = if text.len() < 64 {
        !text.is_ascii() && text.contains(&0xE2)
    } else {
        memchr::memchr(0xE2, text).is_some()
    };
    if lead {
        escape_line_separators(o, start);
    }
}

/// A whole call as a `functionCall` part: `id` (the inside of a JSON
/// string; none: `call_{response}_{position}`), `name` (a JSON string as
/// written), `arguments` (the inside of a JSON string: the arguments' JSON
/// text) as the `args` object. Arguments that are no JSON object are kept
/// whole as the string member `arguments` of `args`; none at all are `{}`.
fn call_part(
    o: &mut Vec<u8>,
    id: &[u8],
    name: &[u8],
    arguments: &[u8],
    response_id: &str,
    position: usize,
    signature: Option<String>,
) {
    o.extend_from_slice(b"{\"functionCall\":{\"id\":\"");
    if id.is_empty() {
        o.extend_from_slice(b"call_");
        o.extend_from_slice(response_id.as_bytes());
        o.push(b'_');
        push_decimal(o, position as u64);
    } else {
        o.extend_from_slice(id);
    }
    o.extend_from_slice(b"\",\"name\":");
    o.extend_from_slice(if name.is_empty() { b"\"\"" } else { name });
    o.extend_from_slice(b",\"args\":");
    let quoted = [b"\"", arguments, b"\""].concat();
    let decoded = Cursor::whole(&quoted, Cursor::str).ok();
    let object = decoded.as_deref().filter(|j| {
        j.trim_ascii_start().starts_with(b"{") && Cursor::whole(j, Cursor::skip).is_ok()
    });
    match object {
        Some(j) => o.extend_from_slice(j.trim_ascii()),
        None if decoded
            .as_deref()
            .is_some_and(|j| j.trim_ascii().is_empty()) =>
        {
            o.extend_from_slice(b"{}")
        }
        None => {
            o.extend_from_slice(b"{\"arguments\":");
            o.extend_from_slice(&quoted);
            o.push(b'}');
        }
    }
    o.push(b'}');
    if let Some(s) = signature {
        o.extend_from_slice(b",\"thoughtSignature\":\"");
        o.extend_from_slice(s.as_bytes());
        o.push(b'"');
    }
    o.push(b'}');
}

/// `,"usageMetadata":{…}`: the provider's completion tokens split into the
/// answer's and the reasoning's; cached and reasoning counts only when
/// there are some.
fn write_usage(o: &mut Vec<u8>, usage: Option<&Usage>) {
    let u = usage.copied().unwrap_or_default();
    let cached = u.cached_tokens.max(u.cache_read_input_tokens);
    let thoughts = u.reasoning_tokens.min(u.completion_tokens);
    o.extend_from_slice(b",\"usageMetadata\":{\"promptTokenCount\":");
    push_decimal(o, u.prompt_tokens);
    o.extend_from_slice(b",\"candidatesTokenCount\":");
    push_decimal(o, u.completion_tokens - thoughts);
    if thoughts > 0 {
        o.extend_from_slice(b",\"thoughtsTokenCount\":");
        push_decimal(o, thoughts);
    }
    if cached > 0 {
        o.extend_from_slice(b",\"cachedContentTokenCount\":");
        push_decimal(o, cached);
    }
    o.extend_from_slice(b",\"totalTokenCount\":");
    push_decimal(o, u.prompt_tokens.saturating_add(u.completion_tokens));
    o.push(b'}');
}

/// A whole chat completion as one GenerateContentResponse: its reasoning
/// as one thought part (when asked for), its text as one part, its calls.
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
    let mut s = GeminiStream::new(asked, request_id, carry);
    if let Some(m) = text(&found.model).filter(|m| m.len() > 2) {
        s.model = m.to_vec();
    }
    let mut thoughts = Vec::new();
    found.each_reasoning(data, |t| {
        s.log.push(t);
        thoughts.push(t);
    });
    let mut position = 0;
    CallDelta::each(data, found.calls.as_ref(), |d| {
        if let Some(id) = d.id {
            s.log.call(id);
        }
        s.calls.push(ToolCall {
            index: position,
            id: d.id.map(|i| i[1..i.len() - 1].to_vec()).unwrap_or_default(),
            name: d.name.map(<[u8]>::to_vec).unwrap_or_default(),
            arguments: d
                .arguments
                .map(|a| a[1..a.len() - 1].to_vec())
                .unwrap_or_default(),
        });
        position += 1;
    });
    let finish = text(&found.finish).and_then(|f| Cursor::whole(f, Cursor::str).ok());
    // No `finish_reason` at all: the answer is whole (the body ended).
    let finish = finish_reason(finish.as_deref().unwrap_or(b"stop"));
    let content = text(&found.content).filter(|t| t.len() > 2);
    let mut out = Vec::with_capacity(completion.len() + 256);
    s.object(
        &mut out,
        |o, s| {
            let mut sep = Separator::default();
            if s.asked.thoughts && !thoughts.is_empty() {
                sep.next(o);
                joined_part(o, &thoughts, true);
            }
            if let Some(t) = content {
                sep.next(o);
                text_part(o, t, false);
            }
            s.call_parts(o, &mut sep);
        },
        Some(finish),
        Some(usage),
    );
    out
}

impl crate::dialect::Translator for GeminiStream {
    fn chunk(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), OverBudget> {
        GeminiStream::chunk(self, data, out)
    }

    fn end(&mut self, end: End<'_>, usage: Option<&Usage>, out: &mut Vec<u8>) {
        GeminiStream::end(self, end, usage, out);
    }

    fn take_reasoning(&mut self) -> Option<AnswerReasoning> {
        self.carry.remember.then(|| std::mem::take(&mut self.log))
    }
}
