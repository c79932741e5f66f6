//! The continuation's request: the body the provider was sent, with the
//! part of the answer the client has as the conversation's last message,
//! said as the endpoint's server wants a message continued.

use super::{Continuation, Transcript};
use crate::json::{Cursor, Keys};

/// `body` (a chat request as a provider was sent it) asking `mode`'s
/// endpoint to continue what `part` holds; `None` when `body` is not an
/// object with a `messages` array (it was validated: never).
pub fn continuation_body(body: &[u8], mode: Continuation, part: &Transcript) -> Option<Vec<u8>> {
    // Where the `messages` array ends, and the object.
    let mut messages_end = None;
    let mut empty = true;
    let mut c = Cursor::new(body);
    c.peek();
    c.members(Keys::Skipped, |c, key| {
        let name = c.name(key);
        if &*name == b"messages" && c.peek() == Some(b'[') {
            let mut any = false;
            c.elements(|c| {
                any = true;
                c.skip()
            })?;
            messages_end = Some(c.at() - 1);
            empty = !any;
            Ok(())
        } else {
            c.skip()
        }
    })
    .ok()?;
    let messages_end = messages_end?;
    let object_end = c.at() - 1;
    if body.get(object_end) != Some(&b'}') || body.get(messages_end) != Some(&b']') {
        return None;
    }
    let mut message = Vec::with_capacity(64 + part.content.len() + part.reasoning.len());
    if !empty {
        message.push(b',');
    }
    message.extend_from_slice(b"{\"role\":\"assistant\",\"content\":\"");
    message.extend_from_slice(&part.content);
    message.push(b'"');
    if !part.reasoning.is_empty() && mode.continues_reasoning() {
        message.extend_from_slice(b",\"");
        message.extend_from_slice(part.reasoning_name().as_bytes());
        message.extend_from_slice(b"\":\"");
        message.extend_from_slice(&part.reasoning);
        message.push(b'"');
    }
    match mode {
        Continuation::Prefix => message.extend_from_slice(b",\"prefix\":true"),
        Continuation::Partial => message.extend_from_slice(b",\"partial\":true"),
        _ => {}
    }
    message.push(b'}');
    // vLLM's flags, last in the object: a member named twice counts as
    // its last.
    let flags: &[u8] = match mode {
        Continuation::ContinueFinalMessage => {
            b",\"continue_final_message\":true,\"add_generation_prompt\":false"
        }
        _ => b"",
    };
    let mut out = Vec::with_capacity(body.len() + message.len() + flags.len());
    out.extend_from_slice(&body[..messages_end]);
    out.extend_from_slice(&message);
    out.extend_from_slice(&body[messages_end..object_end]);
    out.extend_from_slice(flags);
    out.extend_from_slice(&body[object_end..]);
    Some(out)
}
