//! The misbehaviours the simulator can imitate, chosen per request or for
//! the whole server.

/// A misbehaviour to imitate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with an error status and an OpenAI-style error body.
    Reject {
        /// Status code.
        status: u16,
        /// Error message.
        message: String,
        /// `Retry-After` seconds (sent with 429 and 503).
        retry_after: Option<u64>,
    },
    /// Reset the connection after `after` events.
    Reset {
        /// Events first.
        after: u32,
    },
    /// End the stream without `[DONE]`.
    OmitDone,
    /// After `after` events, `[DONE]`: an answer ended without its
    /// `finish_reason`.
    EndEarly {
        /// Events first.
        after: u32,
    },
    /// Send nothing at all.
    StallHeaders,
    /// Stop sending after `after` events, keeping the connection open.
    Stall {
        /// Events first.
        after: u32,
    },
    /// Answer with bytes that are not HTTP, then close.
    Garbage,
    /// Break the chunked framing after `after` events.
    BadChunk {
        /// Events first.
        after: u32,
    },
    /// Send one event of `bytes` bytes after `after` events.
    HugeEvent {
        /// Events first.
        after: u32,
        /// Size of the event.
        bytes: usize,
    },
    /// Keep sending events after `[DONE]`.
    DataAfterDone,
    /// After the finish chunk, send comment heartbeats forever.
    HeartbeatAfterFinish,
    /// After the usage chunk, send `: keep-alive` comments forever (no
    /// `[DONE]`).
    KeepaliveAfterUsage,
    /// After `after` events, an error event, then end without `[DONE]`.
    ErrorEvent {
        /// Events first.
        after: u32,
    },
    /// Leave out the usage chunk.
    NoUsage,
    /// Send the response head of a stream, then close.
    CloseAfterHeaders,
    /// Answer a streaming request with a JSON body.
    JsonForStream,
    /// Before the first event, `count` comments (`: ping - <time>`, as
    /// llama.cpp's server sends while a request waits in its queue), one
    /// per token interval; then the answer, or, with `die`, a reset.
    Pings {
        /// Comments first.
        count: u32,
        /// Reset the connection after them instead of answering.
        die: bool,
    },
}

impl Fault {
    /// Parses a fault from its name and parameters (`get` looks one up).
    pub fn parse(name: &str, get: &dyn Fn(&str) -> Option<String>) -> Result<Fault, String> {
        let num = |k: &str, d: u64| -> Result<u64, String> {
            match get(k) {
                Some(v) => v
                    .parse()
                    .map_err(|_| format!("sim option '{k}' must be a number")),
                None => Ok(d),
            }
        };
        let after = num("after", 2)? as u32;
        Ok(match name {
            "reject" => {
                let status = num("status", 500)? as u16;
                Fault::Reject {
                    status,
                    message: get("message")
                        .unwrap_or_else(|| format!("simulated rejection ({status})")),
                    retry_after: match get("retry_after") {
                        Some(v) => Some(
                            v.parse()
                                .map_err(|_| "retry_after must be a number".to_string())?,
                        ),
                        None if status == 429 || status == 503 => Some(2),
                        None => None,
                    },
                }
            }
            "reset" => Fault::Reset { after },
            "omit_done" => Fault::OmitDone,
            "end_early" => Fault::EndEarly { after },
            "stall_headers" => Fault::StallHeaders,
            "stall" => Fault::Stall { after },
            "garbage" => Fault::Garbage,
            "bad_chunk" => Fault::BadChunk { after },
            "huge_event" => Fault::HugeEvent {
                after,
                bytes: num("bytes", 2 << 20)? as usize,
            },
            "data_after_done" => Fault::DataAfterDone,
            "heartbeat_after_finish" => Fault::HeartbeatAfterFinish,
            "keepalive_after_usage" => Fault::KeepaliveAfterUsage,
            "error_event" => Fault::ErrorEvent { after },
            "no_usage" => Fault::NoUsage,
            "close_after_headers" => Fault::CloseAfterHeaders,
            "json_for_stream" => Fault::JsonForStream,
            "pings" => Fault::Pings {
                count: num("count", 2)? as u32,
                die: matches!(get("die").as_deref(), Some("true" | "1")),
            },
            other => return Err(format!("unknown sim fault '{other}'")),
        })
    }
}
