//! Whole conversations through the exchange, in memory, on a virtual clock:
//! client ↔ Connection ↔ simulated provider.
//!
//! One test binary (`cargo test -p chatgate-testkit --test exchange`), its
//! tests in one module per subject. Each test drives a `Pair` (client,
//! gateway and simulator wired together by `chatgate-testkit`) and checks
//! what the client receives, what the provider saw and the ledger.
//!
//! | module | subject |
//! |---|---|
//! | `common` | the shared helpers: request bodies, sending, reading answers and errors, a retrying pair, a stalled provider body |
//! | `answers` | answers that go right, streamed and not, byte for byte; what is forwarded; tool calls |
//! | `requests` | the client's HTTP: routes, keys, validation, body limits, `Expect`, `HEAD`, HTTP/1.0, malformed requests, pipelining |
//! | `limits` | admission: request and token rates, shared limits, reservations given back, the prompt allowance |
//! | `metering` | the ledger: usage reported late or not at all, worst-case charges, a failed or unacknowledged ledger line |
//! | `aborts` | a client that leaves or stops reading, at every phase; shutdown and its drain timeout |
//! | `timeouts` | deadlines on the client's side, while connecting, for the provider's first byte, body and stream tail |
//! | `streams` | provider streams that go wrong: no `[DONE]`, resets, broken framing, error events, comments only |
//! | `provider_errors` | provider refusals and connect failures, their 502s, and retries |
//! | `pool` | provider connections: keep-alive reuse, stale connections, what may be pooled, split reads |
//! | `drain` | a provider connection read to its last chunk after `[DONE]` before it is pooled |
//! | `reasoning` | reasoning replayed through the tool loop: from the client, the memory, the shared store, or empty; a key never gets another's |

mod common;

mod aborts;
mod answers;
mod drain;
mod limits;
mod metering;
mod pool;
mod provider_errors;
mod reasoning;
mod requests;
mod streams;
mod timeouts;
