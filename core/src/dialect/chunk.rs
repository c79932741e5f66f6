//! The one reading of a chat chunk every answer translator shares: where
//! its first choice's reasoning, text, tool calls and `finish_reason` are,
//! and what one tool call delta carries.
//!
//! Member names are compared as the clients' JSON readers take them,
//! unescaped (`"fin\u0069sh_reason"` is `finish_reason`), as the usage
//! reader compares them; a member named twice counts as the last.
//! Reasoning has three names among providers: `reasoning_content`
//! (DeepSeek, Kimi, llama.cpp), `reasoning` (vLLM, OpenRouter) and
//! `reasoning_details` (OpenRouter: `{"type":"reasoning.text","text":…}`
//! blocks); a string under the first two wins over the details, which
//! OpenRouter sends beside the same text.

use std::ops::Range;

use crate::json::{Cursor, Keys};
use crate::reasoning::AnswerReasoning;

use super::text::string_inside_at;

/// Where a chunk's parts are (ranges of its text, each a JSON value as
/// written).
#[derive(Default)]
pub(super) struct Found {
    pub(super) model: Option<Range<usize>>,
    pub(super) reasoning: Option<Range<usize>>,
    /// `reasoning_details`, when it is an array.
    pub(super) details: Option<Range<usize>>,
    pub(super) content: Option<Range<usize>>,
    pub(super) calls: Option<Range<usize>>,
    pub(super) finish: Option<Range<usize>>,
    pub(super) stop_reason: Option<Range<usize>>,
    /// Where the delta that counts opens (its `{`).
    delta_open: Option<usize>,
    /// `reasoning` came as `reasoning_content`, which wins over a
    /// `reasoning` beside it.
    named_content: bool,
}

impl Found {
    /// The parts of the chunk (or whole completion) `data`, walked once;
    /// `None` when it is not a JSON object.
    pub(super) fn read(data: &[u8]) -> Option<Found> {
        let mut found = Found::default();
        let read = Cursor::new(data).members(Keys::Skipped, |c, key| {
            match &*c.name(key) {
                b"model" => found.model = Some(string_at(c)?),
                b"choices" if c.peek() == Some(b'[') => {
                    // The last `choices` counts: its first choice, or none.
                    found.clear_choice();
                    let mut first = true;
                    c.elements(|c| {
                        if !std::mem::take(&mut first) || c.peek() != Some(b'{') {
                            return c.skip();
                        }
                        c.members(Keys::Skipped, |c, key| match &*c.name(key) {
                            b"delta" | b"message" if c.peek() == Some(b'{') => {
                                // The last one counts.
                                found.clear_delta();
                                found.delta_open = Some(c.at());
                                c.members(Keys::Skipped, |c, key| {
                                    match &*c.name(key) {
                                        // Strings only: a `null` beside a
                                        // text (`"refusal":null`) is none.
                                        b"reasoning_content" if c.peek() == Some(b'"') => {
                                            found.reasoning = Some(string_at(c)?);
                                            found.named_content = true;
                                        }
                                        // The older name wins where both
                                        // are sent (vLLM sent both a while).
                                        b"reasoning"
                                            if c.peek() == Some(b'"') && !found.named_content =>
                                        {
                                            found.reasoning = Some(string_at(c)?);
                                        }
                                        b"reasoning_details" if c.peek() == Some(b'[') => {
                                            found.details = Some(string_at(c)?);
                                        }
                                        // A refusal is what the model said
                                        // instead: its text.
                                        b"content" | b"refusal" if c.peek() == Some(b'"') => {
                                            found.content = Some(string_at(c)?);
                                        }
                                        b"tool_calls" => {
                                            let start = c.at();
                                            c.skip()?;
                                            found.calls = Some(start..c.at());
                                        }
                                        _ => c.skip()?,
                                    }
                                    Ok(())
                                })
                            }
                            b"finish_reason" => {
                                found.finish = Some(string_at(c)?);
                                Ok(())
                            }
                            // vLLM's: the stop sequence that ended the answer.
                            b"stop_reason" => {
                                found.stop_reason = Some(string_at(c)?);
                                Ok(())
                            }
                            _ => c.skip(),
                        })
                    })?;
                }
                _ => c.skip()?,
            }
            Ok(())
        });
        read.ok().map(|()| found)
    }

    /// Whether its reasoning came as `reasoning_content`.
    pub(super) fn named_content(&self) -> bool {
        self.named_content
    }

    /// Forgets what a choice said (another `choices` follows).
    fn clear_choice(&mut self) {
        self.clear_delta();
        self.finish = None;
        self.stop_reason = None;
    }

    /// Forgets what a delta said (another `delta` follows).
    fn clear_delta(&mut self) {
        self.reasoning = None;
        self.details = None;
        self.content = None;
        self.calls = None;
        self.delta_open = None;
        self.named_content = false;
    }

    /// Each reasoning text the chunk `data` carries, as a JSON string as
    /// written: its `reasoning_content` or `reasoning`, else the text (or
    /// summary) of each of its `reasoning_details`.
    pub(super) fn each_reasoning<'d>(&self, data: &'d [u8], mut f: impl FnMut(&'d [u8])) {
        if let Some(r) = &self.reasoning {
            let t = &data[r.clone()];
            if t.len() > 2 {
                f(t);
            }
            return;
        }
        let Some(details) = &self.details else {
            return;
        };
        let raw = &data[details.clone()];
        let _ = Cursor::new(raw).elements(|c| {
            if c.peek() != Some(b'{') {
                return c.skip();
            }
            let (mut kind, mut text) = (None, None);
            c.members(Keys::Skipped, |c, key| {
                let name = c.name(key);
                let v = c.at();
                c.skip()?;
                let value = &raw[v..c.at()];
                match &*name {
                    b"type" => kind = Some(value),
                    b"text" | b"summary" if value.starts_with(b"\"") => text = Some(value),
                    _ => {}
                }
                Ok(())
            })?;
            let readable = matches!(kind, Some(b"\"reasoning.text\"" | b"\"reasoning.summary\""));
            if let Some(t) = text.filter(|t| readable && t.len() > 2) {
                f(t);
            }
            Ok(())
        });
    }
}

/// Notes in `log` what the chunk (or whole completion) `data`, read as
/// `found`, says as reasoning and which tool calls it makes.
pub(crate) fn record(found: &Found, data: &[u8], log: &mut AnswerReasoning) {
    found.each_reasoning(data, |t| {
        log.push(t);
    });
    CallDelta::each(data, found.calls.as_ref(), |d| {
        if let Some(id) = d.id {
            log.call(id);
        }
    });
}

/// [`record`] for a whole completion not read yet: the chat path, which
/// forwards the provider's bytes unread otherwise.
pub(crate) fn record_chunk(data: &[u8], log: &mut AnswerReasoning) {
    let data = &*super::text::valid_text(data);
    if let Some(found) = Found::read(data) {
        record(&found, data, log);
    }
}

/// A chat stream read for the memory, chunk by chunk, as the chat path
/// forwards it: its reasoning and tool calls ([`record`]). A chunk shaped
/// like the last one-text-delta chunk (most of a stream: [`Shape`]) is
/// read without walking it; an answer text delta is then nothing to keep.
#[derive(Debug, Default)]
pub(crate) struct AnswerRecorder {
    /// The last one-text-delta chunk's shape, and whether its text was
    /// reasoning.
    shape: Option<Shape<bool>>,
    log: AnswerReasoning,
}

impl AnswerRecorder {
    /// Reads one chunk (an SSE event's data). Never inlined: the stream
    /// loop that calls it runs for every chat stream, and most never call
    /// it.
    #[inline(never)]
    pub(crate) fn chunk(&mut self, data: &[u8]) {
        if let Some(shape) = &self.shape
            && let Some(text) = shape.delta(data)
        {
            if shape.kind && text.len() > 2 {
                self.log.push(text);
            }
            return;
        }
        self.shape = None;
        let data = &*super::text::valid_text(data);
        let Some(found) = Found::read(data) else {
            return;
        };
        record(&found, data, &mut self.log);
        if let Some((reasoning, string)) = found.lone_text(data) {
            self.shape = Some(Shape::new(&found, data, string, reasoning));
        }
    }

    /// What the stream said.
    pub(crate) fn into_log(self) -> AnswerReasoning {
        self.log
    }
}

impl Found {
    /// The one text delta the chunk `data` carries and nothing else (no
    /// `finish_reason`, no tool calls; `"finish_reason":null` and
    /// `"tool_calls":null` say nothing): whether it is the reasoning, and
    /// where its string is.
    pub(super) fn lone_text(&self, data: &[u8]) -> Option<(bool, Range<usize>)> {
        let finish = self
            .finish
            .as_ref()
            .is_some_and(|r| data[r.start] == b'"' && r.len() > 2);
        let calls = self.calls.as_ref().is_some_and(|r| data[r.start] == b'[');
        // Details beside a text would be read again on a shortcut.
        let details = self.details.as_ref().is_some_and(|r| r.len() > 2);
        if finish || calls || details {
            return None;
        }
        let one = match (&self.reasoning, &self.content) {
            (Some(r), None) => (true, r.clone()),
            (None, Some(r)) => (false, r.clone()),
            _ => return None,
        };
        (data[one.1.start] == b'"').then_some(one)
    }
}

/// The shape of a chunk that was one text delta: its text up to the
/// string's opening quote, and from its closing quote, and what the delta
/// belonged to (`kind`). Most chunks of a stream differ from the one before
/// only in their delta's text (same id, model, created, the rest): one with
/// the same text around a string every reader takes as it is is the same
/// kind of delta, read without walking the chunk. The text around it was
/// made readable when the shape was learned.
///
/// Where the string was the last member of its delta, the shape also knows
/// the text up to the delta's `{` (`head`): a chunk with that text, then a
/// delta of one text member of its own, then the same text after the
/// string, is a lone text too, of the kind its member's name says
/// ([`Shape::other`]) — the stream's turn from reasoning to answer, or from
/// the first chunk (the role beside the text) to the rest.
#[derive(Debug)]
pub(super) struct Shape<K> {
    before: Vec<u8>,
    after: Vec<u8>,
    /// `before`'s length up to and with the delta's `{`, or 0.
    head: usize,
    pub(super) kind: K,
}

/// A chunk read by [`Shape::other`]: a delta of one text member.
pub(super) struct Other<'a> {
    /// Whether the member is reasoning (`reasoning_content`, `reasoning`)
    /// rather than the answer (`content`).
    pub(super) reasoning: bool,
    /// The string, quotes included.
    pub(super) text: &'a [u8],
    /// Where the string's opening quote ends.
    before: usize,
}

/// The names of a delta's one text member [`Shape::other`] knows, as
/// written by every provider (no space, no escape), each with its string's
/// opening quote: whether it is reasoning, and the name.
const TEXT_MEMBERS: [(bool, &[u8]); 3] = [
    (false, b"\"content\":\""),
    (true, b"\"reasoning_content\":\""),
    (true, b"\"reasoning\":\""),
];

impl<K> Shape<K> {
    /// The shape of the (readable) chunk `data`, read as `found`, one text
    /// delta whose string is at `string` ([`Found::lone_text`]).
    pub(super) fn new(found: &Found, data: &[u8], string: Range<usize>, kind: K) -> Shape<K> {
        // The head is known when the string closes its delta (the text
        // after it starts `"}`) and the delta opens at a `{` before it.
        let head = match found.delta_open {
            Some(open) if data.get(string.end) == Some(&b'}') && data[open] == b'{' => open + 1,
            _ => 0,
        };
        Shape {
            before: data[..string.start + 1].to_vec(),
            after: data[string.end - 1..].to_vec(),
            head,
            kind,
        }
    }

    /// The delta's string (quotes included) when `data` has this shape.
    pub(super) fn delta<'a>(&self, data: &'a [u8]) -> Option<&'a [u8]> {
        let (b, a) = (self.before.len(), self.after.len());
        let same = data.len() >= b + a
            && data.starts_with(&self.before)
            && data.ends_with(&self.after)
            && string_inside_at(data, b, data.len() - a);
        same.then(|| &data[b - 1..data.len() - a + 1])
    }

    /// `data` when it has this shape but for its delta, which is one text
    /// member of its own (see [`Shape`]): what a walk of it would find, a
    /// lone text of the member's kind.
    pub(super) fn other<'a>(&self, data: &'a [u8]) -> Option<Other<'a>> {
        let h = self.head;
        if h == 0 || !data.starts_with(&self.before[..h]) {
            return None;
        }
        let (reasoning, name) = TEXT_MEMBERS
            .into_iter()
            .find(|(_, name)| data[h..].starts_with(name))?;
        let (b, a) = (h + name.len(), self.after.len());
        let same = data.len() >= b + a
            && data.ends_with(&self.after)
            && string_inside_at(data, b, data.len() - a);
        same.then(|| Other {
            reasoning,
            text: &data[b - 1..data.len() - a + 1],
            before: b,
        })
    }

    /// The shape of `data`, read by [`Shape::other`] as `other`.
    pub(super) fn turned<J>(&self, data: &[u8], other: &Other<'_>, kind: J) -> Shape<J> {
        Shape {
            before: data[..other.before].to_vec(),
            after: self.after.clone(),
            head: self.head,
            kind,
        }
    }
}

/// The value at the cursor, skipped: where it is.
fn string_at(c: &mut Cursor<'_>) -> Result<Range<usize>, crate::json::Stop> {
    let start = c.at();
    c.skip()?;
    Ok(start..c.at())
}

/// One element of a chunk's `tool_calls`: the call's `index` (its
/// position in the array when it has none), and its `id`, `function.name`
/// and `function.arguments` when they are strings, as written.
pub(super) struct CallDelta<'a> {
    pub(super) index: u64,
    pub(super) id: Option<&'a [u8]>,
    pub(super) name: Option<&'a [u8]>,
    pub(super) arguments: Option<&'a [u8]>,
}

impl<'a> CallDelta<'a> {
    /// Each delta of the chunk `data`'s `tool_calls` (where [`Found`]
    /// found them), in order; none unless they are an array.
    pub(super) fn each(
        data: &'a [u8],
        calls: Option<&Range<usize>>,
        mut f: impl FnMut(CallDelta<'a>),
    ) {
        let Some(calls) = calls
            .map(|r| &data[r.clone()])
            .filter(|c| c.starts_with(b"["))
        else {
            return;
        };
        let mut position = 0;
        let _ = Cursor::new(calls).elements(|c| {
            let start = c.at();
            c.skip()?;
            if let Some(d) = CallDelta::read(&calls[start..c.at()], position) {
                f(d);
            }
            position += 1;
            Ok(())
        });
    }

    /// The delta `raw`, at `position` in its array; `None` when it is not
    /// an object.
    pub(super) fn read(raw: &'a [u8], position: u64) -> Option<CallDelta<'a>> {
        let mut index = position;
        let mut id = None;
        let mut function = None;
        let mut c = Cursor::new(raw);
        let read = c.members(Keys::Read, |c, key| {
            let name = c.name(key);
            let start = c.at();
            c.skip()?;
            let v = &raw[start..c.at()];
            match &*name {
                b"index" => {
                    index = std::str::from_utf8(v)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(position)
                }
                // An empty id (some servers repeat `"id":""` on every
                // delta) is no id.
                b"id" if v.starts_with(b"\"") && v.len() > 2 => id = Some(v),
                b"function" => function = Some(v),
                _ => {}
            }
            Ok(())
        });
        if read.is_err() {
            return None;
        }
        let (mut name, mut arguments) = (None, None);
        if let Some(f) = function {
            let mut c = Cursor::new(f);
            let _ = c.members(Keys::Read, |c, key| {
                let key_name = c.name(key);
                let start = c.at();
                c.skip()?;
                let v = &f[start..c.at()];
                match &*key_name {
                    b"name" if v.starts_with(b"\"") && v.len() > 2 => name = Some(v),
                    b"arguments" if v.starts_with(b"\"") => arguments = Some(v),
                    _ => {}
                }
                Ok(())
            });
        }
        Some(CallDelta {
            index,
            id,
            name,
            arguments,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{Found, Shape};

    /// A member a provider's delta may hold; `S` is replaced by a string.
    const MEMBERS: [&str; 12] = [
        r#""role":"assistant""#,
        r#""content":null"#,
        r#""reasoning_content":null"#,
        r#""content":S"#,
        r#""reasoning_content":S"#,
        r#""reasoning":S"#,
        r#""refusal":null"#,
        r#""refusal":S"#,
        r#""tool_calls":null"#,
        r#""tool_calls":[{"index":0,"function":{"arguments":S}}]"#,
        r#""reasoning_details":[{"type":"reasoning.text","text":S}]"#,
        r#""content": S"#,
    ];

    fn delta() -> impl Strategy<Value = String> {
        // Short texts from few letters, so that two chunks often share
        // what follows their strings.
        let text = prop_oneof![Just(String::new()), "[ab]", "[a-z \"\\\\\n\u{e9}]{0,5}"];
        proptest::collection::vec((0..MEMBERS.len(), text), 0..4).prop_map(|members| {
            let inside: Vec<String> = members
                .iter()
                .map(|(m, t)| MEMBERS[*m].replace('S', &serde_json::to_string(t).unwrap()))
                .collect();
            format!("{{{}}}", inside.join(","))
        })
    }

    fn chunk(delta: &str, finish: bool) -> Vec<u8> {
        let finish = if finish { r#""stop""# } else { "null" };
        format!(
            r#"{{"id":"c","model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
        )
        .into_bytes()
    }

    proptest! {
        // Many cases: the deltas that would fool a careless shape (a name
        // given twice, a member after the text) are a few in thousands.
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// What a chunk is said to be by the shape of an earlier one, the
        /// walk finds it to be: a lone text of the kind, at that string.
        #[test]
        fn another_delta_is_read_as_the_walk_reads_it(
            learned in delta(),
            next in delta(),
            finish in any::<bool>(),
            turn in proptest::option::of((0..MEMBERS.len(), "[ab]{0,2}")),
        ) {
            let first = chunk(&learned, false);
            let found = Found::read(&first).unwrap();
            let Some((reasoning, r)) = found.lone_text(&first) else {
                return Ok(());
            };
            let shape = Shape::new(&found, &first, r.clone(), reasoning);
            let mut data = chunk(&next, finish);
            // Or the learned chunk with its delta's members up to its text
            // replaced by one member (what a stream's next chunk most
            // often is).
            if let (Some((m, t)), Some(open)) = (turn, found.delta_open) {
                let member = MEMBERS[m].replace('S', &serde_json::to_string(&t).unwrap());
                let Some(member) = member.strip_suffix(&serde_json::to_string(&t).unwrap()) else {
                    return Ok(());
                };
                data = [&first[..=open], member.as_bytes(), &first[r.start..]].concat();
            }
            let walked = Found::read(&data).unwrap();
            let lone = walked.lone_text(&data).map(|(k, r)| (k, &data[r]));
            if let Some(other) = shape.other(&data) {
                prop_assert_eq!(lone, Some((other.reasoning, other.text)));
                let turned = shape.turned(&data, &other, ());
                prop_assert_eq!(turned.delta(&data), Some(other.text));
            }
            if let Some(text) = shape.delta(&data) {
                prop_assert_eq!(lone, Some((reasoning, text)));
            }
        }
    }

    #[test]
    fn the_turn_to_the_answer_and_past_the_role_is_known() {
        let read = |delta: &str| {
            let data = chunk(delta, false);
            let found = Found::read(&data).unwrap();
            let (reasoning, r) = found.lone_text(&data).unwrap();
            Shape::new(&found, &data, r, reasoning)
        };
        let role = read(r#"{"role":"assistant","content":null,"reasoning_content":"a"}"#);
        let next = chunk(r#"{"reasoning_content":"b"}"#, false);
        assert!(role.delta(&next).is_none());
        let other = role.other(&next).unwrap();
        assert!(other.reasoning);
        assert_eq!(other.text, br#""b""#);
        let answer = chunk(r#"{"content":"c"}"#, false);
        let other = read(r#"{"reasoning":"a"}"#).other(&answer).unwrap();
        assert!(!other.reasoning);
        assert_eq!(other.text, br#""c""#);
        // Not where the string was not its delta's last member, nor for a
        // delta of two members, nor a different envelope.
        assert!(
            read(r#"{"content":"a","refusal":null}"#)
                .other(&answer)
                .is_none()
        );
        let two = chunk(r#"{"content":"c","tool_calls":null}"#, false);
        assert!(read(r#"{"reasoning":"a"}"#).other(&two).is_none());
        assert!(
            read(r#"{"reasoning":"a"}"#)
                .other(&chunk(r#"{"content":"c"}"#, true))
                .is_none()
        );
    }
}
