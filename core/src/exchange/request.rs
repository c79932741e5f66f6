//! Client HTTP: request heads and bodies, routing, authentication, the
//! model list, and the client's own inputs (bytes, EOF, bytes written).

use std::borrow::Cow;
use std::sync::Arc;

use super::admission::QuotaHold;
use super::respond::{common_headers, http_error, limit_headers};
use super::stored::StoredCall;
use super::timers::Timer;
use super::upstream::UpState;
use super::{Connection, Phase};
use crate::auth::{AuthFailure, KeyEntry, KeyTable};
use crate::dialect::Dialect;
use crate::dialect::gemini::Gemini;
use crate::dialect::messages::Messages;
use crate::dialect::responses::Responses;
use crate::dialect::responses::stored::Page;
use crate::endpoints::EndpointSet;
use crate::error::ApiError;
use crate::http::BodyDecoder;
use crate::http::write::{self, header, header_u64};
use crate::http::{Framing, HttpLimits};
use crate::http::{Method, RequestHead, leading_empty_lines, parse_request_head};
use crate::limits::{LimitStatus, Limits};
use crate::quota::Quota;
use crate::routes::{CHAT_PATH, Route, route, served};
use crate::time::Instant;
use crate::validate::ChatRequest;

/// The client output buffer a stream keeps between events: about two
/// events. A larger one is released once written when what it carried was
/// small (the head and first events) or under a quarter of it (a burst is
/// over), so a stream that stays open for minutes holds what its next
/// event needs, not its largest write; one a burst filled is kept while
/// the burst lasts.
const CLIENT_OUT_KEPT: usize = 1024;

/// The key a request authenticated with.
#[derive(Debug, Clone)]
pub(super) struct KeyRef {
    pub(super) name: String,
    pub(super) limits: Limits,
    pub(super) quota: Quota,
    /// The models it may call (`None`: every model).
    pub(super) models: Option<Arc<[String]>>,
}

impl KeyRef {
    /// Its model list.
    pub(super) fn models(&self) -> Option<&[String]> {
        self.models.as_deref()
    }
}

/// The request being served.
#[derive(Debug)]
pub(super) struct Request {
    pub(super) id: String,
    pub(super) started: Instant,
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) keep_alive: bool,
    pub(super) http10: bool,
    pub(super) key: Option<KeyRef>,
    pub(super) body: Vec<u8>,
    pub(super) decoder: Option<BodyDecoder>,
    pub(super) chat: Option<ChatRequest>,
    /// `model` and `stream` read from a body that failed validation.
    pub(super) peeked: Option<(String, bool)>,
    pub(super) reserved: u64,
    /// Its key's budget and in-flight cap: what it holds of them.
    pub(super) hold: QuotaHold,
    pub(super) limit_status: Option<LimitStatus>,
    /// The request for the provider: head, then body from `body_at`.
    pub(super) upstream_request: Vec<u8>,
    pub(super) body_at: usize,
    /// The body sent carries an endpoint's own model id.
    pub(super) body_model: bool,
    /// Retries on a fresh connection after a pooled one turned out dead.
    pub(super) conn_retries: u8,
    /// Endpoints tried before the current attempt (by id), the current or
    /// last one, and how many attempts.
    pub(super) tried: Vec<u64>,
    pub(super) endpoint: Option<std::sync::Arc<crate::endpoints::Endpoint>>,
    /// While a retry waits for its pause: the endpoint tried last (what
    /// the record names if the request ends meanwhile).
    pub(super) endpoint_before_retry: Option<std::sync::Arc<crate::endpoints::Endpoint>>,
    pub(super) attempts: u32,
    /// Attempts sent again to an endpoint already tried.
    pub(super) retries: u32,
    /// The current attempt's `X-Request-Id` for the provider.
    pub(super) provider_id: String,
    pub(super) committed: bool,
    /// Committed by the first-event keep-alive, before the provider's
    /// first event: the client has the head and keep-alives only.
    pub(super) awaiting_first_event: bool,
    pub(super) first_byte: Option<Instant>,
    pub(super) upstream_status: Option<u16>,
    /// When the provider was first asked (for the overhead metric).
    pub(super) up_started: Option<Instant>,
    /// Admitted by the shared limiter (so settled there too).
    pub(super) shared: bool,
    /// Its trace, when tracing is on (chat requests).
    pub(super) trace: Option<Box<super::spans::RequestTrace>>,
    /// The client's API when it is not chat completions.
    pub(super) dialect: Option<Box<dyn Dialect>>,
    /// `POST /v1/messages/count_tokens`: the prompt is counted, nothing
    /// is asked of the provider, nothing metered.
    pub(super) count_tokens: bool,
    /// The endpoints and catalogue in force when it was validated: every
    /// attempt chooses among them (a reload meanwhile changes nothing for
    /// it).
    pub(super) routes: Option<Arc<EndpointSet>>,
    /// The model answering it (its index in `routes`' catalogue): the one
    /// asked for, or a fallback.
    pub(super) model: usize,
    /// Attempts on the model answering it, and when the first of them
    /// started (its first-byte timeout counts from there).
    pub(super) model_attempts: u32,
    pub(super) model_started: Option<Instant>,
    /// The conversation it belongs to (its `prompt_cache_key`, a session
    /// header, its `user`), hashed: what its endpoint is chosen by.
    pub(super) affinity: Option<u64>,
    /// The session header's hash.
    pub(super) session: Option<u64>,
    /// Its reasoning replay, when a model that may answer replays
    /// reasoning and its turns have some.
    pub(super) replay: Option<Box<super::reasoning::Replay>>,
    /// A Responses request with the store on: its conversation, and what
    /// is kept of it.
    pub(super) storing: Option<Box<super::stored::Storing>>,
    /// A call on a kept response, waiting for the store.
    pub(super) call: Option<super::stored::StoredCall>,
    /// A stream that may be finished after a cut (`--stream-resume`):
    /// what its client has, and the continuation in progress.
    pub(super) resume: Option<Box<super::resume::Resume>>,
}

impl Request {
    fn new(id: String, started: Instant, head: &RequestHead) -> Request {
        let mut r = Request::blank(id, started, head.method, head.path.clone());
        r.keep_alive = head.keep_alive;
        r.http10 = head.http10;
        r.session = head.session;
        r
    }

    /// What a background request's client connection still answers with
    /// once the request went to its run: who asked, how, and its limits'
    /// headers; nothing metered.
    pub(super) fn answering(run: &Request) -> Request {
        let mut r = Request::blank(run.id.clone(), run.started, run.method, run.path.clone());
        r.keep_alive = run.keep_alive;
        r.http10 = run.http10;
        r.key = run.key.clone();
        r.limit_status = run.limit_status;
        r
    }

    fn blank(id: String, started: Instant, method: Method, path: String) -> Request {
        Request {
            id,
            started,
            method,
            path,
            keep_alive: true,
            http10: false,
            key: None,
            body: Vec::new(),
            decoder: None,
            chat: None,
            peeked: None,
            reserved: 0,
            hold: QuotaHold::default(),
            limit_status: None,
            upstream_request: Vec::new(),
            body_at: 0,
            body_model: false,
            conn_retries: 0,
            tried: Vec::new(),
            endpoint: None,
            endpoint_before_retry: None,
            attempts: 0,
            retries: 0,
            provider_id: String::new(),
            committed: false,
            awaiting_first_event: false,
            first_byte: None,
            up_started: None,
            shared: false,
            upstream_status: None,
            trace: None,
            dialect: None,
            count_tokens: false,
            routes: None,
            model: 0,
            model_attempts: 0,
            model_started: None,
            affinity: None,
            session: None,
            replay: None,
            storing: None,
            call: None,
            resume: None,
        }
    }

    /// Whether the client has part of the provider's answer (a stream's
    /// first event or more): from then on a failure ends the stream; before
    /// it, another attempt may still answer.
    pub(super) fn has_answer(&self) -> bool {
        self.committed && !self.awaiting_first_event
    }

    /// Metered: an authenticated chat completion request (in any API).
    pub(super) fn is_metered(&self) -> bool {
        self.key.is_some()
            && (self.dialect.is_some() || self.path == CHAT_PATH)
            && self.method == Method::Post
            && !self.count_tokens
    }
}

/// The dialect a request on `route` speaks (`None`: chat completions, or
/// no API at all).
fn dialect(route: Route, head: &RequestHead) -> Option<Box<dyn Dialect>> {
    match route {
        Route::Gemini | Route::GeminiCount | Route::GeminiModels | Route::GeminiModel => {
            let gemini = Gemini::open(&head.path, &head.query).unwrap_or_default();
            Some(Box::new(gemini))
        }
        Route::Responses => Some(Box::new(Responses::default())),
        Route::Messages => Some(Box::new(Messages::default())),
        Route::CountTokens => Some(Box::new(Messages {
            count: true,
            ..Messages::default()
        })),
        _ => None,
    }
}

/// Whether the request is on the Responses API.
fn req_is_responses(req: Option<&mut Request>) -> bool {
    req.and_then(|r| r.dialect.as_deref_mut())
        .is_some_and(|d| d.responses().is_some())
}

/// The credential a request's dialect read from the head its own way.
fn req_dialect_credential(req: Option<&Request>, head: &RequestHead) -> Option<String> {
    req?.dialect.as_deref()?.credential(head)
}

/// The call on a kept response a route names (`None` for other routes),
/// or why its query is refused.
fn stored_call(
    route: Route,
    method: Method,
    path: &str,
    query: &str,
) -> Option<Result<StoredCall, ApiError>> {
    let (id, _) = crate::routes::stored_response(path)?;
    Some(Ok(match route {
        Route::StoredResponse if method == Method::Delete => StoredCall::Delete(id),
        Route::StoredResponse => match resume(query) {
            Ok(Some(after)) => StoredCall::Resume(id, after),
            Ok(None) => StoredCall::Retrieve(id),
            Err(e) => return Some(Err(e)),
        },
        Route::InputItems => match Page::read(query) {
            Ok(page) => StoredCall::InputItems(id, page),
            Err(e) => return Some(Err(e)),
        },
        Route::Cancel => StoredCall::Cancel(id),
        _ => return None,
    }))
}

/// `?stream=true` (and `starting_after=N`) on `GET /v1/responses/{id}`:
/// `Some(after)` to stream it again, `None` to read it.
fn resume(query: &str) -> Result<Option<Option<u64>>, ApiError> {
    let mut stream = false;
    let mut after = None;
    for (name, value) in crate::url::query_pairs(query) {
        match name.as_str() {
            "stream" => stream = value == "true",
            "starting_after" => {
                after = Some(value.parse().map_err(|_| {
                    ApiError::invalid_value(
                        "starting_after",
                        "'starting_after' must be a sequence number (a whole number).",
                    )
                })?);
            }
            _ => {}
        }
    }
    Ok(stream.then_some(after))
}

impl Connection {
    /// Bytes arrived from the client.
    pub fn handle_client_data(&mut self, now: Instant, data: &[u8]) {
        if self.phase == Phase::Closed || data.is_empty() {
            return;
        }
        self.compact_client_input();
        self.cin.extend_from_slice(data);
        self.process_client(now);
        self.after(now);
    }

    /// The client closed its side or the connection broke: abort whatever is
    /// in progress (the provider request included) and close.
    pub fn handle_client_eof(&mut self, now: Instant) {
        if self.close_emitted {
            return;
        }
        if self.is_run && self.phase == Phase::Upstream {
            // A run's recorder closed: the run is cancelled.
            self.cancel_run(now);
        } else if self.is_run && self.phase == Phase::Resolving {
            self.cancel_run_before_start(now);
        } else if self.phase == Phase::Upstream {
            self.client_gone(now);
        } else if matches!(
            self.phase,
            Phase::Body | Phase::Resolving | Phase::Recalling | Phase::Admitting | Phase::Queued
        ) {
            self.leave_queue(now, false);
            // An authenticated request abandoned before the provider was
            // asked is still metered.
            self.record_abandoned(now);
        }
        self.close();
        self.cout.clear();
        self.cout_pos = 0;
        self.held.clear();
        self.timers.stop(Timer::ClientSend);
        self.after(now);
    }

    /// `n` bytes of [`Connection::poll_client_transmit`] were written.
    /// During a stream, a client output buffer larger than
    /// [`CLIENT_OUT_KEPT`] may be released once written (see there).
    pub fn handle_client_written(&mut self, now: Instant, n: usize) {
        self.cout_pos = (self.cout_pos + n).min(self.cout.len());
        if self.cout_pos == self.cout.len() {
            let (len, cap) = (self.cout.len(), self.cout.capacity());
            if cap > CLIENT_OUT_KEPT
                && (len <= 2 * CLIENT_OUT_KEPT || len * 4 < cap)
                && self.streaming()
            {
                // A head, or a burst that is over, left it large: between
                // the events of a long stream it would stay so for
                // minutes. A buffer a burst just filled is kept for the
                // next (freed and taken again per read, it cost a full-speed
                // stream 5 % more instructions).
                self.cout = Vec::new();
            }
            self.cout.clear();
            self.cout_pos = 0;
            self.timers.stop(Timer::ClientSend);
        } else if n > 0 {
            let send = self.gw.config().timeouts.client_send;
            self.timers.set(Timer::ClientSend, now + send);
        }
        self.after(now);
    }

    /// A stream's events are being relayed.
    fn streaming(&self) -> bool {
        self.up
            .as_ref()
            .is_some_and(|u| u.state == UpState::Streaming)
    }

    /// Drops the consumed part of the client input once it is at least as
    /// long as what is still unread. Pipelined writes that end a byte into
    /// the next request never leave the buffer fully consumed, so waiting
    /// for that would let it grow by a request per request; moving only
    /// when the consumed part dominates keeps the copying O(bytes read).
    /// No parser keeps offsets into the buffer: the head scanner and the
    /// body decoder work on `cin[cin_pos..]`, which this does not change.
    fn compact_client_input(&mut self) {
        let unread = self.cin.len() - self.cin_pos;
        if unread == 0 {
            self.cin.clear();
            self.cin_pos = 0;
        } else if self.cin_pos >= unread {
            self.cin.drain(..self.cin_pos);
            self.cin_pos = 0;
        }
    }

    /// Reads requests from the client input as far as it goes.
    pub(super) fn process_client(&mut self, now: Instant) {
        loop {
            let progressed = match self.phase {
                Phase::Head => self.read_head(now),
                Phase::Body => self.read_body(now),
                _ => false,
            };
            if !progressed {
                break;
            }
        }
    }

    fn http_limits(&self) -> HttpLimits {
        self.gw.config().http
    }

    /// Returns true when a request started (more input may be processed).
    fn read_head(&mut self, now: Instant) -> bool {
        if self.head_started.is_none() {
            self.cin_pos += leading_empty_lines(&self.cin[self.cin_pos..]);
            if self.cin_pos == self.cin.len() {
                return false;
            }
            self.head_started = Some(now);
            self.scanner.reset();
            self.timers.stop(Timer::ClientIdle);
            let header = self.gw.config().timeouts.client_header;
            self.timers.set(Timer::ClientHead, now + header);
        }
        let limits = self.http_limits();
        let head = match self
            .scanner
            .scan(&self.cin[self.cin_pos..], limits.max_head)
        {
            Ok(None) => return false,
            Ok(Some(len)) => {
                parse_request_head(&self.cin[self.cin_pos..self.cin_pos + len], &limits)
            }
            Err(e) => Err(e),
        };
        match head {
            Ok(head) => {
                self.cin_pos += head.head_len;
                self.timers.stop(Timer::ClientHead);
                self.start_request(now, head);
                true
            }
            Err(e) => {
                self.respond_error(now, http_error(&e, &limits), true);
                false
            }
        }
    }

    /// A whole head arrived: route, authenticate, then answer the model
    /// list or start reading a chat request's body.
    fn start_request(&mut self, now: Instant, head: RequestHead) {
        let started = self.head_started.unwrap_or(now);
        let id = self.gw.next_request_id();
        let mut req = Box::new(Request::new(id, started, &head));
        let route = route(head.method, &head.path, self.gw.config().apis);
        if route.as_ref().is_ok_and(|r| r.is_chat()) {
            req.trace = self.open_trace(&head);
        }
        // The API the path is on (when it is served), for the answer's
        // shape: a wrong method on it is answered in that API's shape too.
        req.dialect = served(&head.path, self.gw.config().apis).and_then(|r| dialect(r, &head));
        self.req = Some(req);
        let has_body = head.framing != Framing::Empty;
        if head.websocket && req_is_responses(self.req.as_deref_mut()) {
            // Codex's Responses WebSocket: answered so that it falls back to
            // HTTP at once (docs/decisions.md).
            return self.respond_error(now, ApiError::websocket_not_served(), true);
        }
        let route = match route {
            Ok(r) => r,
            Err(e) => return self.respond_error(now, e, has_body),
        };
        // A key sent in the API's own way stands for `Authorization`.
        let own = req_dialect_credential(self.req.as_deref(), &head);
        let authorization = own.as_deref().or(head.authorization.as_deref());
        let key = match self.authenticate(now, authorization) {
            Ok(key) => key,
            Err(e) => return self.respond_error(now, e, has_body),
        };
        let req = self.req.as_mut().expect("request just created");
        if matches!(
            route,
            Route::Models | Route::GeminiModels | Route::GeminiModel
        ) {
            let status = self.gw.limiter().status(&key.name, key.limits, now);
            req.limit_status = Some(status);
            req.key = Some(key);
            return self.respond_models(now, has_body);
        }
        req.key = Some(key);
        if let Some(call) = stored_call(route, head.method, &head.path, &head.query) {
            if has_body {
                // Not read: the connection closes after the answer.
                self.close_after = true;
            }
            return match call {
                Ok(call) => self.start_stored_call(now, call),
                Err(e) => self.respond_error(now, e, has_body),
            };
        }
        req.count_tokens = matches!(route, Route::CountTokens | Route::GeminiCount);
        let limits = self.http_limits();
        if let Framing::Length(n) = head.framing
            && n > limits.max_body
        {
            return self.respond_error(now, ApiError::request_too_large(limits.max_body), true);
        }
        let json = head.content_type.as_deref().is_none_or(|ct| {
            ct.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
        if !json {
            return self.respond_error(now, ApiError::unsupported_content_type(), has_body);
        }
        if head.expect_continue && has_body {
            // A token count takes no request from the key's limits.
            let refused = match route {
                Route::CountTokens | Route::GeminiCount => None,
                _ => self.refuse_before_upload(now),
            };
            if let Some(e) = refused {
                return self.respond_error(now, e, true);
            }
            self.push_client(now, b"HTTP/1.1 100 Continue\r\n\r\n");
        }
        let req = self.req.as_mut().expect("request just created");
        req.decoder = Some(BodyDecoder::new(head.framing, limits));
        self.phase = Phase::Body;
        let body = self.gw.config().timeouts.client_body;
        self.timers.set(Timer::ClientBody, now + body);
    }

    /// The key an `Authorization` value names, valid at `now`.
    fn authenticate(
        &mut self,
        now: Instant,
        authorization: Option<&str>,
    ) -> Result<KeyRef, ApiError> {
        let keys = self.gw.keys();
        let entry: &KeyEntry = match self.cached_key(&keys, authorization) {
            Some(i) => &keys.entries()[i],
            None => match keys.authenticate(authorization) {
                Ok(e) => {
                    let i = keys
                        .entries()
                        .iter()
                        .position(|k| k.sha256 == e.sha256)
                        .unwrap_or(0);
                    let value = authorization.unwrap_or_default().to_owned();
                    self.auth_cache = Some((value, Arc::clone(&keys), i));
                    e
                }
                Err(f) => return Err(ApiError::invalid_api_key(f == AuthFailure::Missing)),
            },
        };
        if !entry.valid_at(self.gw.wall().unix_secs(now)) {
            // A rotated key whose grace period ended.
            self.auth_cache = None;
            return Err(ApiError::invalid_api_key(false));
        }
        Ok(KeyRef {
            name: entry.name.clone(),
            limits: entry.limits,
            quota: entry.quota,
            models: entry.models.clone(),
        })
    }

    /// The key index when `authorization` is the value that last
    /// authenticated on this connection against the same key table. The
    /// comparison is constant-time: a balancer may carry several users'
    /// requests on one connection, and a timing difference must not tell
    /// one of them how much of another's key they guessed.
    fn cached_key(&self, keys: &Arc<KeyTable>, authorization: Option<&str>) -> Option<usize> {
        let (value, table, i) = self.auth_cache.as_ref()?;
        let presented = authorization?.as_bytes();
        let same = Arc::ptr_eq(table, keys)
            && value.len() == presented.len()
            && crate::auth::constant_time_eq(value.as_bytes(), presented);
        same.then_some(*i)
    }

    /// Returns true when the body completed (more input may be processed).
    fn read_body(&mut self, now: Instant) -> bool {
        let limits = self.http_limits();
        let req = self.req.as_mut().expect("a body belongs to a request");
        let decoder = req
            .decoder
            .as_mut()
            .expect("set when the body phase starts");
        let input = &self.cin[self.cin_pos..];
        match decoder.decode(input, &mut req.body) {
            Ok(used) => {
                self.cin_pos += used;
                if used > 0 {
                    let body = self.gw.config().timeouts.client_body;
                    self.timers.set(Timer::ClientBody, now + body);
                }
            }
            Err(e) => {
                self.respond_error(now, http_error(&e, &limits), true);
                return false;
            }
        }
        if !decoder.is_done() {
            return false;
        }
        req.decoder = None;
        self.timers.stop(Timer::ClientBody);
        self.chat_request(now);
        true
    }

    /// A token count (`POST /v1/messages/count_tokens`: `{"input_tokens":
    /// N}`), the prompt's upper bound as admission counts it, in the
    /// dialect's shape.
    pub(super) fn respond_count_tokens(&mut self, now: Instant, input_tokens: u64) {
        let req = self.req.as_ref().expect("count request");
        let dialect = req.dialect.as_deref().expect("a count is a dialect's");
        let body = dialect.count_body(input_tokens);
        self.respond_json(now, &body);
    }

    /// `GET /v1/models` (or the Gemini API's `GET /v1beta/models` and
    /// `/v1beta/models/{model}`): the models the key may call.
    fn respond_models(&mut self, now: Instant, has_body: bool) {
        let gw = Arc::clone(&self.gw);
        let close = has_body || self.closing_after_this();
        let req = self.req.as_ref().expect("models request");
        let routes = gw.endpoints();
        let allowed = req.key.as_ref().and_then(KeyRef::models);
        let catalog = routes.catalog();
        let list = match served(&req.path, gw.config().apis) {
            Some(Route::GeminiModels) => Cow::Owned(Gemini::list_body(
                catalog
                    .models()
                    .iter()
                    .filter(|m| m.allowed_by(allowed))
                    .map(|m| m.id.as_str()),
            )),
            Some(Route::GeminiModel) => {
                let asked = crate::routes::gemini_path(&req.path).map(|(m, _)| m);
                let asked = asked.unwrap_or_default();
                match catalog.seen_by(allowed).find(&asked) {
                    Some(_) => Cow::Owned(Gemini::model_body(&asked)),
                    None => {
                        return self.respond_error(
                            now,
                            ApiError::model_not_found(&asked),
                            has_body,
                        );
                    }
                }
            }
            _ => catalog.list_body(allowed),
        };
        let mut out = Vec::with_capacity(512 + list.len());
        write::status_line(&mut out, 200);
        common_headers(&mut out, &req.id, gw.wall().unix_secs(now), close);
        header(&mut out, "Content-Type", "application/json");
        header_u64(&mut out, "Content-Length", list.len() as u64);
        if let Some(s) = &req.limit_status {
            limit_headers(&mut out, s);
        }
        write::end_head(&mut out);
        if req.method != Method::Head {
            out.extend_from_slice(&list);
        }
        self.access_log(now, 200, None);
        self.push_client(now, &out);
        self.end_response(close);
    }

    /// Takes the client output buffer to append to in place; give it back
    /// with [`Connection::put_client_out`].
    pub(super) fn take_client_out(&mut self) -> Vec<u8> {
        if self.cout_pos == self.cout.len() {
            self.cout.clear();
            self.cout_pos = 0;
        }
        std::mem::take(&mut self.cout)
    }

    /// Gives the output buffer back; the send deadline starts when bytes
    /// are waiting and none was running.
    pub(super) fn put_client_out(&mut self, now: Instant, out: Vec<u8>) {
        self.cout = out;
        if self.cout_pos < self.cout.len() && !self.timers.is_set(Timer::ClientSend) {
            let send = self.gw.config().timeouts.client_send;
            self.timers.set(Timer::ClientSend, now + send);
        }
    }

    /// Queues bytes for the client.
    pub(super) fn push_client(&mut self, now: Instant, bytes: &[u8]) {
        if bytes.is_empty() || self.phase == Phase::Closed && self.close_emitted {
            return;
        }
        if self.cout_pos == self.cout.len() {
            self.cout.clear();
            self.cout_pos = 0;
            let send = self.gw.config().timeouts.client_send;
            self.timers.set(Timer::ClientSend, now + send);
        }
        self.cout.extend_from_slice(bytes);
    }
}
