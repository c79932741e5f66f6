//! The Rust `async-openai` crate against the real binaries, configured only
//! through its documented settings (`OpenAIConfig::with_api_base`,
//! `with_api_key`, and the `OPENAI_BASE_URL` / `OPENAI_API_KEY` environment
//! variables).
//!
//! What the crate does, read from its source and checked here:
//! - Its chat types have no `reasoning_content`: the typed API drops the
//!   reasoning silently. The crate's documented way to read extra fields is
//!   its `byot` feature ("bring your own types", `create_byot`,
//!   `create_stream_byot`), used below with types that extend the crate's own
//!   with `#[serde(flatten)]`; the same feature is its way to send extra body
//!   members (`x_sim`).
//! - With `byot` enabled, the typed `create_stream` no longer sets
//!   `"stream": true` itself (that line is compiled only without `byot`):
//!   the request must say `stream(true)`.
//! - Its default client retries 429, every 5xx and connect errors, three
//!   times, sleeping `Retry-After` (whole seconds, uncapped) when present and
//!   100 ms, 200 ms, 400 ms otherwise. So a 502 reaches the provider four
//!   times. A client built with `with_http_service(ReqwestService)` has no
//!   retry layer.
//! - On a 5xx it does not parse the error body: `ApiError.message` holds the
//!   whole body and `type`, `code`, `param` are `None`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use async_openai::middleware::ReqwestService;
use async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestMessage, ChatCompletionRequestMessageContentPartImage,
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestToolMessage,
    ChatCompletionRequestUserMessage, ChatCompletionRequestUserMessageContent,
    ChatCompletionRequestUserMessageContentPart, ChatCompletionResponseMessage,
    ChatCompletionStreamResponseDelta, ChatCompletionTool, ChatCompletionTools, CompletionUsage,
    CreateChatCompletionRequest, CreateChatCompletionRequestArgs, FinishReason, FunctionObject,
    ImageUrl,
};
use chatgate_tests::*;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

cases!(
    models_list,
    environment_variables_configure_the_client,
    non_streamed_answer,
    streamed_answer,
    typed_create_stream_needs_stream_true_with_byot,
    tool_call_round_trip,
    image_part_with_a_data_uri,
    errors_are_typed_with_our_status_and_code,
    rate_limit_retry_honours_retry_after,
    provider_error_is_a_502_and_is_retried,
);

const PROMPT: &str = "Why is the sky blue?";

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

fn pair(bin: &str) -> (Sim, Gw) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(bin, &sim.url(), GwOptions::default());
    (sim, gw)
}

fn base_url(gw: &Gw) -> String {
    format!("http://{}/v1", gw.addr)
}

/// The crate's default client, configured with its documented settings.
fn client(gw: &Gw, key: &str) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(base_url(gw))
            .with_api_key(key),
    )
}

/// The same without the crate's retry layer (its documented middleware hook
/// with the plain reqwest service).
fn client_without_retries(gw: &Gw, key: &str) -> Client<OpenAIConfig> {
    client(gw, key).with_http_service(ReqwestService::default())
}

fn user(text: &str) -> ChatCompletionRequestMessage {
    ChatCompletionRequestUserMessage::from(text).into()
}

fn ask(text: &str) -> CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model(MODEL)
        .messages(vec![user(text)])
        .build()
        .expect("request")
}

/// The body the provider received for journal entry `i`.
fn sent(sim: &Sim, i: usize) -> Value {
    serde_json::from_str(sim.settled(i)["body"].as_str().expect("body")).expect("body JSON")
}

/// `(status, type, code, param)` of the crate's typed API error.
fn api_error(e: &OpenAIError) -> (u16, Option<String>, Option<String>, Option<String>) {
    match e {
        OpenAIError::ApiError(r) => (
            r.status_code.as_u16(),
            r.api_error.r#type.clone(),
            r.api_error.code.clone(),
            r.api_error.param.clone(),
        ),
        other => panic!("not an API error: {other:?}"),
    }
}

// The crate's response types, extended with `reasoning_content` the way its
// documentation suggests for fields it lacks (`byot` + `serde(flatten)`).

#[derive(Debug, Deserialize)]
struct Reply {
    choices: Vec<ReplyChoice>,
    usage: Option<CompletionUsage>,
}

#[derive(Debug, Deserialize)]
struct ReplyChoice {
    message: ReplyMessage,
    finish_reason: Option<FinishReason>,
}

#[derive(Debug, Deserialize)]
struct ReplyMessage {
    #[serde(flatten)]
    message: ChatCompletionResponseMessage,
    reasoning_content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Chunk {
    choices: Vec<ChunkChoice>,
    usage: Option<CompletionUsage>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    delta: ChunkDelta,
    finish_reason: Option<FinishReason>,
}

#[derive(Debug, Deserialize)]
struct ChunkDelta {
    #[serde(flatten)]
    delta: ChatCompletionStreamResponseDelta,
    reasoning_content: Option<String>,
}

/// The crate's request with extra body members, as its documentation
/// suggests (`byot` + `serde(flatten)`).
#[derive(Serialize)]
struct WithExtra {
    #[serde(flatten)]
    request: CreateChatCompletionRequest,
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

fn with_extra(request: CreateChatCompletionRequest, extra: Value) -> WithExtra {
    let Value::Object(extra) = extra else {
        panic!("extra members must be an object")
    };
    WithExtra { request, extra }
}

fn models_list(bin: &str) {
    let (_sim, gw) = pair(bin);
    block_on(async {
        let list = client(&gw, &gw.key).models().list().await.expect("models");
        assert_eq!(list.object, "list");
        assert_eq!(list.data.len(), 1);
        let m = &list.data[0];
        assert_eq!(
            (
                m.id.as_str(),
                m.object.as_str(),
                m.created,
                m.owned_by.as_str()
            ),
            (MODEL, "model", 0, "chatgate")
        );
        assert_eq!(m.shutdown_date, None);
    });
}

/// `OPENAI_BASE_URL` and `OPENAI_API_KEY` are read when the config is made,
/// so they are tested in a child process (this test binary, running only
/// `environment_probe`) rather than by changing this process's environment
/// under the other tests.
fn environment_variables_configure_the_client(bin: &str) {
    let (_sim, gw) = pair(bin);
    let exe = std::env::current_exe().expect("test binary");
    let run = |key: &str| {
        let out = std::process::Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "environment_probe",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("OPENAI_BASE_URL", base_url(&gw))
            .env("OPENAI_API_KEY", key)
            .env_remove("OPENAI_ORG_ID")
            .env_remove("OPENAI_PROJECT_ID")
            .output()
            .expect("run the probe");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, out) = run(&gw.key);
    assert!(
        ok && out.contains("probe: models [\"reasoning-model-k3\"]"),
        "{out}"
    );
    assert!(
        out.contains("probe: answer You said: Why is the sky blue?"),
        "{out}"
    );
    let (ok, out) = run("sk-cg-not-a-key");
    assert!(!ok && out.contains("probe: error 401"), "{out}");
}

/// Run by `environment_variables_configure_the_client` with the variables set.
#[test]
#[ignore = "run in a child process with OPENAI_BASE_URL and OPENAI_API_KEY set"]
fn environment_probe() {
    block_on(async {
        // Client::new() reads OPENAI_BASE_URL and OPENAI_API_KEY.
        let client = Client::new();
        match client.models().list().await {
            Ok(list) => {
                let ids: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
                println!("probe: models {ids:?}");
            }
            Err(e) => {
                println!("probe: error {}", api_error(&e).0);
                panic!("{e}");
            }
        }
        let r = client.chat().create(ask(PROMPT)).await.expect("answer");
        let content = r.choices[0].message.content.clone().unwrap_or_default();
        println!("probe: answer {content}");
    });
}

fn non_streamed_answer(bin: &str) {
    let (sim, gw) = pair(bin);
    block_on(async {
        let c = client(&gw, &gw.key);
        // Typed: the answer, the finish reason, the usage; no reasoning.
        let r = c.chat().create(ask(PROMPT)).await.expect("answer");
        assert_eq!(r.object, "chat.completion");
        assert!(r.id.starts_with("chatcmpl-"), "{}", r.id);
        assert_eq!(r.model, MODEL);
        let choice = &r.choices[0];
        let content = choice.message.content.clone().expect("content");
        assert!(
            content.starts_with("You said: Why is the sky blue?"),
            "{content}"
        );
        assert_eq!(choice.finish_reason, Some(FinishReason::Stop));
        let usage = r.usage.clone().expect("usage");
        assert_eq!(
            usage.total_tokens,
            usage.prompt_tokens + usage.completion_tokens
        );
        let reasoning_tokens = usage
            .completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
            .expect("reasoning_tokens");
        assert!(reasoning_tokens > 0);
        // The provider's answer had reasoning; the crate's type has no field
        // for it, so a serialization round trip shows it was dropped.
        let provider: Value =
            serde_json::from_str(sim.settled(0)["response"].as_str().unwrap()).unwrap();
        assert!(provider["choices"][0]["message"]["reasoning_content"].is_string());
        let typed = serde_json::to_value(&r).unwrap();
        assert_eq!(
            typed["choices"][0]["message"].get("reasoning_content"),
            None
        );

        // What the crate sent: exactly the members set, nothing added.
        assert_eq!(
            sent(&sim, 0),
            json!({"messages": [{"role": "user", "content": PROMPT}], "model": MODEL})
        );

        // byot with the extended types: reasoning and answer apart.
        let r: Reply = c.chat().create_byot(ask(PROMPT)).await.expect("answer");
        let msg = &r.choices[0].message;
        let reasoning = msg.reasoning_content.clone().expect("reasoning_content");
        assert!(reasoning.len() > 20, "{reasoning}");
        assert_eq!(msg.message.content.as_deref(), Some(content.as_str()));
        assert!(!reasoning.contains("You said"));
        assert_eq!(r.choices[0].finish_reason, Some(FinishReason::Stop));
        assert!(r.usage.is_some());
    });
}

fn streamed_answer(bin: &str) {
    let (sim, gw) = pair(bin);
    block_on(async {
        let c = client(&gw, &gw.key);
        let mut request = ask(PROMPT);
        request.stream = Some(true);

        // Typed, accumulated the way the crate's examples do: append each
        // choice's `delta.content`.
        let mut stream = c
            .chat()
            .create_stream(request.clone())
            .await
            .expect("stream");
        let (mut content, mut finish, mut usage, mut chunks) = (String::new(), None, None, 0);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("chunk");
            chunks += 1;
            for choice in &chunk.choices {
                if let Some(t) = &choice.delta.content {
                    content.push_str(t);
                }
                if choice.finish_reason.is_some() {
                    finish = choice.finish_reason;
                }
            }
            if chunk.usage.is_some() {
                assert!(chunk.choices.is_empty(), "usage comes in its own chunk");
                usage = chunk.usage;
            }
        }
        assert!(
            content.starts_with("You said: Why is the sky blue?"),
            "{content}"
        );
        assert_eq!(finish, Some(FinishReason::Stop));
        // The gateway asked the provider for usage although the crate did not.
        let usage = usage.expect("the usage chunk");
        assert!(usage.completion_tokens > 0);
        let body = sent(&sim, 0);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        // The typed stream ended at [DONE]: every provider event but [DONE]
        // became one item.
        let provider_events = sse_data(sim.settled(0)["response"].as_str().unwrap().as_bytes());
        assert_eq!(provider_events.last().map(String::as_str), Some("[DONE]"));
        assert_eq!(chunks, provider_events.len() - 1);

        // byot, with the extended chunk type: reasoning and answer apart.
        let mut stream = c
            .chat()
            .create_stream_byot::<_, Chunk>(request)
            .await
            .expect("stream");
        let (mut reasoning, mut answer, mut saw_usage) = (String::new(), String::new(), false);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.expect("chunk");
            saw_usage |= chunk.usage.is_some();
            for choice in &chunk.choices {
                if let Some(t) = &choice.delta.reasoning_content {
                    assert!(answer.is_empty(), "reasoning after the answer began");
                    reasoning.push_str(t);
                }
                if let Some(t) = &choice.delta.delta.content {
                    answer.push_str(t);
                }
                let _ = choice.finish_reason;
            }
        }
        assert!(saw_usage);
        assert_eq!(answer, content);
        // The same prompt gives the same reasoning streamed or not.
        let r: Reply = c.chat().create_byot(ask(PROMPT)).await.expect("answer");
        assert_eq!(
            r.choices[0].message.reasoning_content.as_deref(),
            Some(reasoning.as_str())
        );
    });
}

/// With the `byot` feature the typed `create_stream` sends the request as
/// it is: without `stream(true)` the gateway answers with one JSON body,
/// which the crate's SSE reader turns into no chunk at all, not an error.
fn typed_create_stream_needs_stream_true_with_byot(bin: &str) {
    let (sim, gw) = pair(bin);
    block_on(async {
        let c = client(&gw, &gw.key);
        let mut stream = c.chat().create_stream(ask(PROMPT)).await.expect("stream");
        let mut items = Vec::new();
        while let Some(item) = stream.next().await {
            items.push(item.map(|_| ()).map_err(|e| e.to_string()));
        }
        let body = sent(&sim, 0);
        assert_eq!(body.get("stream"), None, "{body}");
        assert_eq!(sim.settled(0)["stream"], false);
        assert!(items.is_empty(), "{items:?}");
    });
}

fn tool_call_round_trip(bin: &str) {
    let (sim, gw) = pair(bin);
    block_on(async {
        let c = client(&gw, &gw.key);
        let tools = vec![ChatCompletionTools::Function(ChatCompletionTool {
            function: FunctionObject {
                name: "get_weather".into(),
                description: Some("Weather in a city".into()),
                parameters: Some(json!({
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                })),
                strict: None,
            },
        })];
        let first = CreateChatCompletionRequestArgs::default()
            .model(MODEL)
            .messages(vec![user("Paris")])
            .tools(tools.clone())
            .build()
            .unwrap();
        let r = c.chat().create(first).await.expect("tool call");
        assert_eq!(r.choices[0].finish_reason, Some(FinishReason::ToolCalls));
        let calls = r.choices[0].message.tool_calls.clone().expect("tool_calls");
        let ChatCompletionMessageToolCalls::Function(call) = &calls[0] else {
            panic!("not a function call: {calls:?}")
        };
        assert_eq!(call.function.name, "get_weather");
        let args: Value = serde_json::from_str(&call.function.arguments).expect("arguments");
        assert_eq!(args, json!({"city": "Paris"}));

        let second = CreateChatCompletionRequestArgs::default()
            .model(MODEL)
            .messages(vec![
                user("Paris"),
                ChatCompletionRequestAssistantMessage {
                    tool_calls: Some(calls.clone()),
                    ..Default::default()
                }
                .into(),
                ChatCompletionRequestToolMessage {
                    content: "sunny, 21C".into(),
                    tool_call_id: call.id.clone(),
                }
                .into(),
            ])
            .tools(tools)
            .build()
            .unwrap();
        let r = c.chat().create(second).await.expect("answer");
        assert_eq!(r.choices[0].finish_reason, Some(FinishReason::Stop));
        let content = r.choices[0].message.content.clone().unwrap_or_default();
        assert!(
            content.starts_with("The tool returned: sunny, 21C"),
            "{content}"
        );
        // The crate leaves `content` out of an assistant message that has
        // only tool calls (no `"content": null`); the gateway accepts that.
        let body = sent(&sim, 1);
        let assistant = &body["messages"][1];
        assert_eq!(assistant.get("content"), None, "{assistant}");
        assert_eq!(assistant["tool_calls"][0]["type"], "function");
        assert_eq!(assistant["tool_calls"][0]["id"], call.id.as_str());
        assert_eq!(
            body["messages"][2],
            json!({"role": "tool", "content": "sunny, 21C", "tool_call_id": call.id})
        );
        assert_eq!(
            sent(&sim, 0)["tools"][0],
            json!({"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
        );
    });
}

fn image_part_with_a_data_uri(bin: &str) {
    let (sim, gw) = pair(bin);
    // A 1×1 PNG.
    let uri = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    block_on(async {
        let message = ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Array(vec![
                ChatCompletionRequestUserMessageContentPart::Text(
                    ChatCompletionRequestMessageContentPartText::from("What is in this image?"),
                ),
                ChatCompletionRequestUserMessageContentPart::ImageUrl(
                    ChatCompletionRequestMessageContentPartImage::from(ImageUrl::from(uri)),
                ),
            ]),
            name: None,
        };
        let request = CreateChatCompletionRequestArgs::default()
            .model(MODEL)
            .messages(vec![message.into()])
            .build()
            .unwrap();
        let r = client(&gw, &gw.key)
            .chat()
            .create(request)
            .await
            .expect("answer");
        let content = r.choices[0].message.content.clone().unwrap_or_default();
        assert!(
            content.starts_with("You said: What is in this image?"),
            "{content}"
        );
    });
    assert_eq!(
        sent(&sim, 0)["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is in this image?"},
            {"type": "image_url", "image_url": {"url": uri}}
        ])
    );
}

fn errors_are_typed_with_our_status_and_code(bin: &str) {
    let (sim, gw) = pair(bin);
    block_on(async {
        // 401, for the model list and for chat.
        let bad = client(&gw, "sk-cg-0123456789012345678901234567890123456789abc");
        let e = bad.models().list().await.expect_err("401");
        assert_eq!(
            api_error(&e),
            (
                401,
                Some("authentication_error".into()),
                Some("invalid_api_key".into()),
                None
            )
        );
        let e = bad.chat().create(ask(PROMPT)).await.expect_err("401");
        assert_eq!(api_error(&e).0, 401);
        assert!(
            e.to_string()
                .starts_with("401 Unauthorized authentication_error:"),
            "{e}"
        );

        // 400 with the parameter named, streamed or not.
        let c = client(&gw, &gw.key);
        let mut hot = ask(PROMPT);
        hot.temperature = Some(5.0);
        let e = c.chat().create(hot.clone()).await.expect_err("400");
        let want = (
            400,
            Some("invalid_request_error".into()),
            Some("invalid_value".into()),
            Some("temperature".into()),
        );
        assert_eq!(api_error(&e), want);
        hot.stream = Some(true);
        let e = match c.chat().create_stream(hot).await {
            Err(e) => e,
            Ok(_) => panic!("a stream despite temperature 5"),
        };
        assert_eq!(api_error(&e), want);

        // 404 for an unknown model.
        let mut other = ask(PROMPT);
        other.model = "no-such-model".into();
        let e = c.chat().create(other).await.expect_err("404");
        assert_eq!(
            api_error(&e),
            (
                404,
                Some("invalid_request_error".into()),
                Some("model_not_found".into()),
                Some("model".into())
            )
        );
    });
    // None of these reached the provider, and 4xx were not retried.
    assert!(sim.journal().is_empty());
    assert_eq!(gw.ledger_len(3).len(), 3, "401s are not metered");
}

/// Spends the key's request bucket; returns the `Retry-After` of the first 429.
fn exhaust(gw: &Gw, key: &str) -> String {
    for _ in 0..200 {
        let r = request(
            gw.addr,
            "POST",
            "/v1/chat/completions",
            Some(key),
            Some(&body("")),
        );
        if r.status == 429 {
            return r.header("retry-after").expect("Retry-After").to_owned();
        }
        assert_eq!(r.status, 200);
    }
    panic!("the key was never limited");
}

fn statuses_of(gw: &Gw, key_name: &str) -> Vec<u16> {
    gw.ledger()
        .iter()
        .filter(|r| r.key == key_name)
        .map(|r| r.status)
        .collect()
}

fn rate_limit_retry_honours_retry_after(bin: &str) {
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            extra_keys: vec![("minute".into(), Some(60), None)],
            ..GwOptions::default()
        },
    );
    let key = gw.keys["minute"].clone();
    block_on(async {
        // Without the retry layer: the typed 429.
        assert_eq!(exhaust(&gw, &key), "1");
        let e = client_without_retries(&gw, &key)
            .chat()
            .create(ask(PROMPT))
            .await
            .expect_err("429");
        assert_eq!(
            api_error(&e),
            (
                429,
                Some("rate_limit_error".into()),
                Some("rate_limit_exceeded".into()),
                None
            )
        );

        // The default client sleeps Retry-After (1 s; its own backoff would
        // have tried after 100 ms, 200 ms and 400 ms, all refused) and the
        // retry succeeds. If the bucket happened to refill before the first
        // attempt there was nothing to retry: spend it again.
        let c = client(&gw, &key);
        for attempt in 0.. {
            assert!(attempt < 5, "never saw a retry");
            let retry_after = exhaust(&gw, &key);
            assert_eq!(retry_after, "1");
            let before = statuses_of(&gw, "minute").len();
            let start = Instant::now();
            let r = c.chat().create(ask(PROMPT)).await.expect("retried");
            let took = start.elapsed();
            assert!(r.choices[0].message.content.is_some());
            let mut after = statuses_of(&gw, "minute");
            let deadline = Instant::now() + PATIENCE;
            while after.last() != Some(&200) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
                after = statuses_of(&gw, "minute");
            }
            let new = &after[before..];
            if new == [200] {
                continue;
            }
            assert_eq!(new, [429, 200], "one refusal, one success");
            assert!(took >= Duration::from_millis(990), "{took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
            break;
        }
    });
}

fn provider_error_is_a_502_and_is_retried(bin: &str) {
    let (sim, gw) = pair(bin);
    let fault = json!({"x_sim": {"fault": "reject", "status": 500, "message": "overloaded"}});
    block_on(async {
        // Without retries: one provider call, a typed 502 whose message is our
        // whole error body (the crate does not parse 5xx bodies).
        let e = client_without_retries(&gw, &gw.key)
            .chat()
            .create_byot::<_, Value>(with_extra(ask(PROMPT), fault.clone()))
            .await
            .expect_err("502");
        assert_eq!(api_error(&e), (502, None, None, None));
        let OpenAIError::ApiError(r) = &e else {
            unreachable!()
        };
        let ours: Value = serde_json::from_str(&r.api_error.message).expect("our error body");
        assert_eq!(ours["error"]["type"], "upstream_error");
        assert_eq!(ours["error"]["code"], "upstream_error");
        let msg = ours["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("HTTP 500") && msg.contains("overloaded"),
            "{msg}"
        );
        // One call of the crate; the gateway tried its one endpoint three
        // times (a provider's 500 is transient).
        assert_eq!(sim.journal().len(), 3);
        // The extra member went out as the crate was asked.
        assert_eq!(sent(&sim, 0)["x_sim"], fault["x_sim"]);

        // The default client retries the 502 three times (100, 200, 400 ms):
        // the gateway is asked four times (four ledger lines), the provider
        // three times for each.
        let start = Instant::now();
        let e = client(&gw, &gw.key)
            .chat()
            .create_byot::<_, Value>(with_extra(ask(PROMPT), fault.clone()))
            .await
            .expect_err("502");
        assert_eq!(api_error(&e).0, 502);
        assert!(start.elapsed() >= Duration::from_millis(700));
        assert_eq!(sim.journal().len(), 15);
        let ledger = gw.ledger_len(5);
        assert!(
            ledger
                .iter()
                .all(|r| r.status == 502 && r.upstream_status == Some(500))
        );
    });
}

/// What the crate puts on the wire besides the body: a raw listener
/// records one request head.
#[test]
fn headers_the_crate_sends() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0);
            head.extend_from_slice(&b[..n]);
        }
        let body = r#"{"object":"list","data":[]}"#;
        let _ = write!(
            s,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        String::from_utf8_lossy(&head).into_owned()
    });
    block_on(async {
        let c = Client::with_config(
            OpenAIConfig::new()
                .with_api_base(format!("http://{addr}/v1"))
                .with_api_key("sk-cg-test"),
        );
        c.models().list().await.expect("list");
    });
    let head = server.join().unwrap();
    let mut lines = head.lines();
    assert_eq!(lines.next(), Some("GET /v1/models HTTP/1.1"));
    let mut names: Vec<String> = lines
        .filter(|l| !l.is_empty())
        .map(|l| l.split(':').next().unwrap().to_ascii_lowercase())
        .collect();
    names.sort();
    // No User-Agent, no OpenAI-Organization/Project unless configured.
    assert_eq!(names, ["accept", "authorization", "host"], "{head}");
    assert!(
        head.contains("authorization: Bearer sk-cg-test\r\n"),
        "{head}"
    );
}
