//! The chat request a translator builds: its messages as the other API's
//! items are read (strings and values borrowed as the client wrote them),
//! then written as the chat `messages` array in one pass.

use std::borrow::Cow;

use super::raw::member;

/// A chat message being built.
#[derive(Debug)]
pub(super) enum Message<'a> {
    /// Text parts (JSON strings as written), joined by a blank line.
    System(Vec<&'a [u8]>),
    User(Vec<Part<'a>>),
    Assistant {
        text: Vec<&'a [u8]>,
        calls: Vec<Call<'a>>,
        /// The model's own reasoning the client carried back (JSON
        /// strings, joined as one), sent as `reasoning_content`.
        reasoning: Vec<Cow<'a, [u8]>>,
    },
    Tool {
        call_id: &'a [u8],
        text: Vec<&'a [u8]>,
    },
}

/// A user content part.
#[derive(Debug)]
pub(super) enum Part<'a> {
    /// A JSON string as written.
    Text(&'a [u8]),
    /// An image: its URL (a JSON string, as written or built) and `detail`.
    Image(Cow<'a, [u8]>, Option<&'a [u8]>),
}

/// A tool call of an assistant message.
#[derive(Debug)]
pub(super) struct Call<'a> {
    pub(super) id: &'a [u8],
    pub(super) name: String,
    /// A JSON string: as written, or built (a freeform call's input).
    pub(super) arguments: Cow<'a, [u8]>,
}

/// A tool call, in the assistant message just before it (the model's
/// parallel calls), or in a message of its own; `reasoning` (what the
/// client carried back before it) goes with it.
pub(super) fn push_call<'a>(
    out: &mut Vec<Message<'a>>,
    call: Call<'a>,
    reasoning: &mut Vec<Cow<'a, [u8]>>,
) {
    match out.last_mut() {
        Some(Message::Assistant {
            calls,
            reasoning: r,
            ..
        }) => {
            calls.push(call);
            r.append(reasoning);
        }
        _ => out.push(Message::Assistant {
            text: Vec::new(),
            calls: vec![call],
            reasoning: std::mem::take(reasoning),
        }),
    }
}

/// `,"tools":[…]`: the chat function tools a translator built.
pub(super) fn write_tools(out: &mut Vec<u8>, tools: &[Vec<u8>]) {
    out.extend_from_slice(b",\"tools\":[");
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(t);
    }
    out.push(b']');
}

/// The chat `messages` array.
pub(super) fn write_messages(out: &mut Vec<u8>, messages: &[Message<'_>]) {
    out.push(b'[');
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        match m {
            Message::System(text) => {
                out.extend_from_slice(b"{\"role\":\"system\",\"content\":");
                joined(out, text);
            }
            Message::User(parts) => {
                out.extend_from_slice(b"{\"role\":\"user\",\"content\":");
                match parts.as_slice() {
                    [Part::Text(t)] => out.extend_from_slice(t),
                    _ => {
                        out.push(b'[');
                        for (j, p) in parts.iter().enumerate() {
                            if j > 0 {
                                out.push(b',');
                            }
                            match p {
                                Part::Text(t) => {
                                    out.extend_from_slice(b"{\"type\":\"text\",\"text\":");
                                    out.extend_from_slice(t);
                                    out.push(b'}');
                                }
                                Part::Image(url, detail) => {
                                    out.extend_from_slice(
                                        b"{\"type\":\"image_url\",\"image_url\":{\"url\":",
                                    );
                                    out.extend_from_slice(url.as_ref());
                                    if let Some(d) = detail {
                                        member(out, "detail", d);
                                    }
                                    out.extend_from_slice(b"}}");
                                }
                            }
                        }
                        out.push(b']');
                    }
                }
            }
            Message::Assistant {
                text,
                calls,
                reasoning,
            } => {
                out.extend_from_slice(b"{\"role\":\"assistant\",\"content\":");
                if text.is_empty() {
                    out.extend_from_slice(b"null");
                } else {
                    joined(out, text);
                }
                if !calls.is_empty() {
                    out.extend_from_slice(b",\"tool_calls\":[");
                    for (j, c) in calls.iter().enumerate() {
                        if j > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(b"{\"id\":");
                        out.extend_from_slice(c.id);
                        out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
                        crate::json::write::string(out, &c.name);
                        out.extend_from_slice(b",\"arguments\":");
                        out.extend_from_slice(&c.arguments);
                        out.extend_from_slice(b"}}");
                    }
                    out.push(b']');
                }
                if !reasoning.is_empty() {
                    out.extend_from_slice(b",\"reasoning_content\":\"");
                    for r in reasoning {
                        out.extend_from_slice(&r[1..r.len() - 1]);
                    }
                    out.push(b'"');
                }
            }
            Message::Tool { call_id, text } => {
                out.extend_from_slice(b"{\"role\":\"tool\",\"tool_call_id\":");
                out.extend_from_slice(call_id);
                out.extend_from_slice(b",\"content\":");
                joined(out, text);
            }
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// JSON strings as written, joined into one by a blank line (escapes are
/// whole within each, so their insides can be put side by side).
pub(super) fn joined(out: &mut Vec<u8>, parts: &[&[u8]]) {
    match parts {
        [one] => out.extend_from_slice(one),
        _ => {
            out.push(b'"');
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\\n\\n");
                }
                out.extend_from_slice(&p[1..p.len() - 1]);
            }
            out.push(b'"');
        }
    }
}
