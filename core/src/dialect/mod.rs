//! The client-facing APIs other than chat completions, translated onto the
//! one chat exchange: pure translators, fed bytes, that write bytes.
//!
//! | module | job |
//! |---|---|
//! | `responses/` | the OpenAI Responses API (`POST /v1/responses`): its request as a chat request (`request.rs`), a chat answer as its events or its response object (`events.rs`) |

pub mod responses;
