//! The response object the stream's first and last events carry, and
//! the store keeps: what was asked, the items so far, the usage; a whole
//! chat completion's (`body`) and a background run's when it is accepted
//! (`queued`) or cancelled.

use crate::http::write::push_decimal;
use crate::json::write::string as json_string;
use crate::usage::Usage;

use super::super::request::Asked;
use super::{Kind, ResponseStream};
use crate::dialect::Carry;

impl ResponseStream {
    /// The last event's response object, when the response is kept (the
    /// store's record of it).
    pub fn take_object(&mut self) -> Option<Vec<u8>> {
        self.kept_object.take()
    }

    /// A background run cancelled: its response object, `cancelled`, with
    /// the items so far (closed as they are), and no event: the run's
    /// stream ends there.
    pub fn cancelled(&mut self, usage: Option<&Usage>) -> Vec<u8> {
        let mut events = Vec::new();
        self.close_all(&mut events);
        self.ended = true;
        let mut o = Vec::with_capacity(1024);
        self.response(&mut o, "cancelled", None, None);
        if let Some(u) = usage {
            o.pop();
            write_usage(&mut o, u);
            o.push(b'}');
        }
        o
    }

    /// The response object: what was asked, and the items so far.
    pub(super) fn response(
        &self,
        o: &mut Vec<u8>,
        status: &str,
        incomplete: Option<&str>,
        error: Option<&str>,
    ) {
        o.extend_from_slice(b"{\"id\":");
        json_string(o, &self.id);
        o.extend_from_slice(b",\"object\":\"response\",\"created_at\":");
        push_decimal(o, self.created_at);
        o.extend_from_slice(b",\"status\":\"");
        o.extend_from_slice(status.as_bytes());
        o.push(b'"');
        o.extend_from_slice(b",\"error\":");
        match error {
            Some(why) => {
                o.extend_from_slice(b"{\"code\":\"server_error\",\"message\":");
                json_string(o, why);
                o.push(b'}');
            }
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b",\"incomplete_details\":");
        match incomplete {
            Some(reason) => {
                o.extend_from_slice(b"{\"reason\":\"");
                o.extend_from_slice(reason.as_bytes());
                o.extend_from_slice(b"\"}");
            }
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b",\"max_output_tokens\":");
        match self.asked.max_output_tokens {
            Some(n) => push_decimal(o, n),
            None => o.extend_from_slice(b"null"),
        }
        o.extend_from_slice(b",\"model\":");
        if self.model.is_empty() {
            o.extend_from_slice(b"\"\"");
        } else {
            o.extend_from_slice(&self.model);
        }
        o.extend_from_slice(b",\"output\":[");
        for i in 0..self.items.len() {
            if i > 0 {
                o.push(b',');
            }
            self.item(o, i);
        }
        o.extend_from_slice(if self.asked.parallel_tool_calls {
            b"],\"parallel_tool_calls\":true"
        } else {
            b"],\"parallel_tool_calls\":false"
        });
        match &self.asked.kept {
            Some(kept) => {
                o.extend_from_slice(if kept.background {
                    b",\"background\":true"
                } else {
                    b",\"background\":false"
                });
                o.extend_from_slice(b",\"previous_response_id\":");
                o.extend_from_slice(kept.previous.as_deref().unwrap_or(b"null"));
                o.extend_from_slice(if kept.store {
                    b",\"store\":true"
                } else {
                    b",\"store\":false"
                });
            }
            None => o.extend_from_slice(b",\"store\":false"),
        }
        o.extend_from_slice(b",\"tool_choice\":\"auto\",\"tools\":[],\"usage\":null}");
    }

    /// Item `i` as the `output` array and `output_item` events show it.
    pub(super) fn item(&self, o: &mut Vec<u8>, i: usize) {
        let it = &self.items[i];
        let status: &[u8] = if it.done {
            b"\",\"status\":\"completed\""
        } else {
            b"\",\"status\":\"in_progress\""
        };
        o.extend_from_slice(b"{\"id\":");
        json_string(o, &it.id);
        match it.kind {
            Kind::Reasoning => {
                o.extend_from_slice(b",\"type\":\"reasoning\",\"summary\":[");
                if it.done {
                    o.extend_from_slice(b"{\"type\":\"summary_text\",\"text\":\"");
                    o.extend_from_slice(&it.text);
                    o.extend_from_slice(b"\"}");
                }
                o.push(b']');
                if self.asked.encrypted_reasoning {
                    o.extend_from_slice(b",\"encrypted_content\":");
                    match &it.sealed {
                        Some(sealed) => json_string(o, sealed),
                        None => o.extend_from_slice(b"null"),
                    }
                }
                o.push(b'}');
            }
            Kind::Message => {
                o.extend_from_slice(b",\"type\":\"message");
                o.extend_from_slice(status);
                o.extend_from_slice(b",\"role\":\"assistant\",\"content\":[");
                if it.done {
                    o.extend_from_slice(b"{\"type\":\"output_text\",\"text\":\"");
                    o.extend_from_slice(&it.text);
                    o.extend_from_slice(b"\",\"annotations\":[],\"logprobs\":[]}");
                }
                o.extend_from_slice(b"]}");
            }
            Kind::Call => {
                o.extend_from_slice(if it.custom {
                    b",\"type\":\"custom_tool_call"
                } else {
                    b",\"type\":\"function_call"
                });
                o.extend_from_slice(status);
                o.extend_from_slice(b",\"call_id\":\"");
                o.extend_from_slice(&it.call_id);
                o.extend_from_slice(b"\",\"name\":");
                json_string(o, &it.name);
                if let Some(ns) = &it.namespace {
                    o.extend_from_slice(b",\"namespace\":");
                    json_string(o, ns);
                }
                o.extend_from_slice(if it.custom {
                    b",\"input\":\""
                } else {
                    b",\"arguments\":\""
                });
                if it.done {
                    o.extend_from_slice(&it.text);
                }
                o.extend_from_slice(b"\"}");
            }
        }
    }
}

/// `,"usage":{…}` in the Responses shape, replacing the `usage:null`
/// [`ResponseStream::response`] wrote last.
pub(super) fn write_usage(o: &mut Vec<u8>, u: &Usage) {
    const NULL_USAGE: &[u8] = b",\"usage\":null";
    if o.ends_with(NULL_USAGE) {
        o.truncate(o.len() - NULL_USAGE.len());
    }
    let fields: [(&[u8], u64); 5] = [
        (b",\"usage\":{\"input_tokens\":", u.prompt_tokens),
        (
            b",\"input_tokens_details\":{\"cached_tokens\":",
            u.cached_tokens,
        ),
        (b"},\"output_tokens\":", u.completion_tokens),
        (
            b",\"output_tokens_details\":{\"reasoning_tokens\":",
            u.reasoning_tokens,
        ),
        (
            b"},\"total_tokens\":",
            u.prompt_tokens.saturating_add(u.completion_tokens),
        ),
    ];
    for (name, n) in fields {
        o.extend_from_slice(name);
        push_decimal(o, n);
    }
    o.push(b'}');
}

/// A background run's response object when it is accepted: `queued`, no
/// output yet.
pub fn queued(asked: Asked, request_id: &str, created_at: u64, carry: Carry) -> Vec<u8> {
    let stream = ResponseStream::new(asked, request_id, created_at, carry);
    let mut out = Vec::with_capacity(512);
    stream.response(&mut out, "queued", None, None);
    out
}

/// A whole chat completion as a Responses response object: the same
/// translation as a stream of one chunk, without the events.
pub fn body(
    asked: Asked,
    request_id: &str,
    created_at: u64,
    carry: Carry,
    completion: &[u8],
    usage: Option<&Usage>,
) -> Vec<u8> {
    let mut stream = ResponseStream::new(asked, request_id, created_at, carry);
    let mut events = Vec::new();
    // An answer past the budget is written as far as it was read.
    let _ = stream.chunk(completion, &mut events);
    stream.close_all(&mut events);
    let status_end = match stream.finish_reason.as_deref() {
        Some("length") => ("incomplete", Some("max_output_tokens")),
        Some("content_filter") => ("incomplete", Some("content_filter")),
        _ => ("completed", None),
    };
    let mut out = Vec::new();
    stream.response(&mut out, status_end.0, status_end.1, None);
    if let Some(u) = usage {
        out.pop();
        write_usage(&mut out, u);
        out.push(b'}');
    }
    out
}
