//! The answer's translation: chat streams as Gemini SSE events and JSON
//! arrays, checked as the clients read them and reassembled; whole
//! answers; the reasoning carried back.

use serde_json::{Value, json};

use crate::dialect::gemini::events::{GeminiStream, body};
use crate::dialect::gemini::request::{Asked, translate};
use crate::dialect::tests::{carry, chunk};
use crate::dialect::{End, Translator};
use crate::usage::Usage;

/// What a Gemini client reassembles from the responses.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Reassembled {
    pub(crate) thoughts: String,
    pub(crate) text: String,
    /// Each call: id, name, args, signature.
    pub(crate) calls: Vec<(String, String, Value, Option<String>)>,
    pub(crate) finish: Option<String>,
    pub(crate) usage: Option<Value>,
    pub(crate) model: Option<String>,
    pub(crate) error: Option<Value>,
}

impl Reassembled {
    /// One response object's parts and members, added; a `finishReason`
    /// only on the last.
    pub(crate) fn add(&mut self, v: &Value) {
        if let Some(e) = v.get("error") {
            self.error = Some(e.clone());
            return;
        }
        assert!(self.finish.is_none(), "nothing after the finish: {v}");
        let c = &v["candidates"][0];
        assert_eq!(c["index"], 0, "{v}");
        assert_eq!(c["content"]["role"], "model", "{v}");
        assert!(
            v["responseId"].is_string() && v["modelVersion"].is_string(),
            "{v}"
        );
        self.model = v["modelVersion"].as_str().map(str::to_owned);
        for p in c["content"]["parts"].as_array().expect("parts") {
            if let Some(f) = p.get("functionCall") {
                assert!(f["args"].is_object(), "{p}");
                self.calls.push((
                    f["id"].as_str().unwrap().into(),
                    f["name"].as_str().unwrap().into(),
                    f["args"].clone(),
                    p["thoughtSignature"].as_str().map(str::to_owned),
                ));
            } else if p["thought"] == true {
                self.thoughts += p["text"].as_str().unwrap();
            } else {
                let t = p["text"].as_str().expect("a text part");
                assert!(!t.is_empty(), "no empty text part: {v}");
                self.text += t;
            }
        }
        self.finish = c["finishReason"].as_str().map(str::to_owned);
        if self.finish.is_some() {
            self.usage = Some(v["usageMetadata"].clone());
        } else {
            assert!(v.get("usageMetadata").is_none(), "{v}");
        }
    }
}

/// Reads a stream as the SDKs do: SSE events `data: …\r\n\r\n` (and a
/// bare error object on a last line of its own), or one JSON array.
pub(crate) fn reassemble(out: &[u8], sse: bool) -> Reassembled {
    let text = std::str::from_utf8(out).expect("UTF-8");
    let mut r = Reassembled::default();
    if !sse {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
        for o in v.as_array().expect("a JSON array") {
            assert!(r.error.is_none(), "the error is the last element");
            r.add(o);
        }
        return r;
    }
    let mut rest = text;
    while let Some(event) = rest.strip_prefix("data: ") {
        let (data, after) = event
            .split_once("\r\n\r\n")
            .expect("an event ends with a blank line");
        assert!(!data.contains('\n'), "one line of data");
        r.add(&serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}")));
        rest = after;
    }
    if !rest.is_empty() {
        let line = rest.strip_suffix('\n').expect("an error line");
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["error"]["code"]
                .as_u64()
                .is_some_and(|c| (400..600).contains(&c))
        );
        r.error = Some(v["error"].clone());
    }
    r
}

pub(crate) fn asked(stream: bool, sse: bool, thoughts: bool) -> Asked {
    Asked {
        model: br#""gemini-asked""#.to_vec(),
        stream,
        sse,
        thoughts,
    }
}

/// The stream of `chunks`, ended as `end` with `usage`.
fn run(asked: Asked, chunks: &[Vec<u8>], end: End<'_>, usage: Option<&Usage>) -> Vec<u8> {
    let mut s = GeminiStream::new(asked, "req_7", carry());
    let mut out = Vec::new();
    for c in chunks {
        s.chunk(c, &mut out).unwrap();
    }
    s.end(end, usage, &mut out);
    out
}

fn answer_with_two_calls() -> Vec<Vec<u8>> {
    vec![
        chunk(
            json!({"role": "assistant", "reasoning_content": "Think"}),
            None,
        ),
        chunk(json!({"reasoning_content": "ing."}), None),
        chunk(json!({"content": "Hi \"you\"\n"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "f", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"x\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "function": {"name": "g", "arguments": "{}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
}

#[test]
fn a_stream_with_reasoning_text_and_two_calls() {
    let usage = Usage {
        prompt_tokens: 30,
        completion_tokens: 12,
        reasoning_tokens: 5,
        cached_tokens: 10,
        ..Usage::default()
    };
    let out = run(
        asked(true, true, true),
        &answer_with_two_calls(),
        End::Finished(Some("tool_calls")),
        Some(&usage),
    );
    let text = std::str::from_utf8(&out).unwrap();
    // One event a delta with something to say; the calls with the finish;
    // the finish reason and usage last.
    assert_eq!(text.matches("data: ").count(), 5, "{text}");
    assert!(!text.contains("[DONE]"));
    let r = reassemble(&out, true);
    assert_eq!(r.thoughts, "Thinking.");
    assert_eq!(r.text, "Hi \"you\"\n");
    assert_eq!(r.calls.len(), 2);
    assert_eq!((&r.calls[0].0[..], &r.calls[0].1[..]), ("call_a", "f"));
    assert_eq!(r.calls[0].2, json!({"x": 1}));
    assert_eq!((&r.calls[1].0[..], &r.calls[1].2), ("call_b", &json!({})));
    // The first call carries the reasoning, sealed; the second nothing.
    assert!(r.calls[0].3.is_some() && r.calls[1].3.is_none());
    assert_eq!(r.finish.as_deref(), Some("STOP"));
    assert_eq!(
        r.usage,
        Some(
            json!({"promptTokenCount": 30, "candidatesTokenCount": 7, "thoughtsTokenCount": 5,
                    "cachedContentTokenCount": 10, "totalTokenCount": 42})
        )
    );
    assert_eq!(r.model.as_deref(), Some("m-1"));
    assert!(text.contains("\"responseId\":\"7\""));
    // Without includeThoughts: no thought parts, the same signature.
    let hidden = reassemble(
        &run(
            asked(true, true, false),
            &answer_with_two_calls(),
            End::Finished(None),
            None,
        ),
        true,
    );
    assert_eq!(hidden.thoughts, "");
    assert_eq!(hidden.calls, r.calls);
    assert_eq!(
        hidden.usage,
        Some(json!({"promptTokenCount": 0, "candidatesTokenCount": 0, "totalTokenCount": 0}))
    );
}

#[test]
fn empty_chunks_write_nothing_and_finish_reasons_map() {
    let out = run(
        asked(true, true, false),
        &[
            chunk(json!({"role": "assistant", "content": ""}), None),
            chunk(json!({"reasoning_content": "hidden"}), None),
            br#"{"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":1}}"#.to_vec(),
            b"not json".to_vec(),
        ],
        End::Finished(Some("stop")),
        None,
    );
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("data: ").count(), 1, "only the last: {text}");
    for (finish, want) in [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("content_filter", "SAFETY"),
        ("tool_calls", "STOP"),
        ("function_call", "STOP"),
        ("eos", "OTHER"),
    ] {
        let c = chunk(json!({"content": "x"}), Some(finish));
        let r = reassemble(
            &run(
                asked(true, true, false),
                std::slice::from_ref(&c),
                End::Finished(Some(finish)),
                None,
            ),
            true,
        );
        assert_eq!(r.finish.as_deref(), Some(want), "{finish}");
        let b: Value = serde_json::from_slice(&body(
            asked(false, false, false),
            "req_1",
            carry(),
            &completion(&c),
            None,
        ))
        .unwrap();
        assert_eq!(b["candidates"][0]["finishReason"], want, "{finish}");
    }
    // Finished without a finish reason: as `stop`.
    let r = reassemble(
        &run(asked(true, true, false), &[], End::Finished(None), None),
        true,
    );
    assert_eq!(r.finish.as_deref(), Some("STOP"));
    assert_eq!(r.model.as_deref(), Some("gemini-asked"));
}

/// A chunk as the whole completion it would be (`delta` as `message`).
fn completion(chunk: &[u8]) -> Vec<u8> {
    let mut c: Value = serde_json::from_slice(chunk).unwrap();
    c["object"] = json!("chat.completion");
    let delta = c["choices"][0]["delta"].take();
    c["choices"][0]["message"] = delta;
    c.to_string().into_bytes()
}

#[test]
fn without_sse_the_stream_is_one_json_array() {
    let out = run(
        asked(true, false, true),
        &answer_with_two_calls(),
        End::Finished(None),
        None,
    );
    let text = std::str::from_utf8(&out).unwrap();
    assert!(text.starts_with("[{") && text.ends_with("}]"), "{text}");
    assert!(text.contains("},\r\n{"), "{text}");
    let r = reassemble(&out, false);
    assert_eq!((r.thoughts.as_str(), r.calls.len()), ("Thinking.", 2));
    // An empty answer is still an array; a failed one ends with the error.
    let r: Value = serde_json::from_slice(&run(
        asked(true, false, true),
        &[],
        End::Finished(None),
        None,
    ))
    .unwrap();
    assert_eq!(r.as_array().unwrap().len(), 1);
    let out = run(
        asked(true, false, true),
        &[chunk(json!({"content": "par"}), None)],
        End::Failed("the provider's connection was reset"),
        None,
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    let all = v.as_array().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1]["error"]["code"], 500);
    assert_eq!(all[1]["error"]["status"], "INTERNAL");
    let v: Value = serde_json::from_slice(&run(
        asked(true, false, true),
        &[],
        End::Failed("cut"),
        None,
    ))
    .unwrap();
    assert_eq!(v[0]["error"]["code"], 500);
}

#[test]
fn a_broken_sse_stream_ends_with_a_bare_error_object_not_a_finish() {
    let out = run(
        asked(true, true, false),
        &[chunk(json!({"content": "partial"}), None)],
        End::Failed("the provider's connection was reset"),
        None,
    );
    let r = reassemble(&out, true);
    assert_eq!((r.text.as_str(), r.finish.as_deref()), ("partial", None));
    let e = r.error.unwrap();
    assert_eq!(
        (e["code"].clone(), e["status"].clone()),
        (json!(500), json!("INTERNAL"))
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("connection was reset")
    );
    // What the JS SDK parses: the last line alone is the error object.
    let last = std::str::from_utf8(&out)
        .unwrap()
        .rsplit("\r\n\r\n")
        .next()
        .unwrap();
    let v: Value = serde_json::from_str(last).unwrap();
    assert!(v["error"].is_object());
    let r = reassemble(
        &run(
            asked(true, true, false),
            &[],
            End::Failed("the gateway is shutting down"),
            None,
        ),
        true,
    );
    assert_eq!(r.error.unwrap()["status"], "UNAVAILABLE");
    // Nothing after the end.
    let mut s = GeminiStream::new(asked(true, true, false), "req_1", carry());
    let mut out = Vec::new();
    s.end(End::Failed("cut"), None, &mut out);
    let n = out.len();
    s.chunk(&chunk(json!({"content": "late"}), None), &mut out)
        .unwrap();
    s.end(End::Finished(None), None, &mut out);
    assert_eq!(out.len(), n);
}

#[test]
fn arguments_that_are_no_object_are_kept_and_ids_made_up() {
    let out = run(
        asked(true, true, false),
        &[
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "not json"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 1, "function": {"name": "g", "arguments": "[1]"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"index": 2, "function": {"name": "h", "arguments": " "}}]}),
                None,
            ),
        ],
        End::Finished(Some("tool_calls")),
        None,
    );
    let r = reassemble(&out, true);
    let got: Vec<(&str, &Value)> = r.calls.iter().map(|c| (c.0.as_str(), &c.2)).collect();
    assert_eq!(
        got,
        [
            ("call_7_0", &json!({"arguments": "not json"})),
            ("call_7_1", &json!({"arguments": "[1]"})),
            ("call_7_2", &json!({}))
        ]
    );
    assert!(r.calls[0].3.is_none(), "no reasoning, no signature");
}

#[test]
fn a_whole_completion_is_one_response() {
    let completion = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "reasoning_content": "why", "content": "Here.",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": [1]}"}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}}
        ]}}]});
    let usage = Usage {
        prompt_tokens: 5,
        completion_tokens: 7,
        ..Usage::default()
    };
    let b: Value = serde_json::from_slice(&body(
        asked(false, false, true),
        "req_3",
        carry(),
        completion.to_string().as_bytes(),
        Some(&usage),
    ))
    .unwrap();
    let parts = &b["candidates"][0]["content"]["parts"];
    assert_eq!(parts[0], json!({"text": "why", "thought": true}));
    assert_eq!(parts[1], json!({"text": "Here."}));
    assert_eq!(
        parts[2]["functionCall"],
        json!({"id": "call_1", "name": "f", "args": {"a": [1]}})
    );
    assert!(parts[2]["thoughtSignature"].is_string());
    assert_eq!(
        parts[3]["functionCall"]["args"],
        json!({"arguments": "not json"})
    );
    assert!(parts[3].get("thoughtSignature").is_none());
    assert_eq!(b["candidates"][0]["finishReason"], "STOP");
    assert_eq!(
        b["usageMetadata"],
        json!({"promptTokenCount": 5, "candidatesTokenCount": 7, "totalTokenCount": 12})
    );
    assert_eq!(
        (b["modelVersion"].clone(), b["responseId"].clone()),
        (json!("m"), json!("3"))
    );
}

#[test]
fn the_signature_gives_the_reasoning_back_with_replay_only() {
    let mut s = GeminiStream::new(asked(true, true, false), "req_1", carry());
    let mut out = Vec::new();
    for c in [
        chunk(
            json!({"reasoning_content": "I should list \"files\" \u{e9}"}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "ls", "arguments": "{}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ] {
        s.chunk(&c, &mut out).unwrap();
    }
    s.end(End::Finished(Some("tool_calls")), None, &mut out);
    assert!(
        s.take_reasoning().is_none(),
        "nothing remembered unless asked"
    );
    let r = reassemble(&out, true);
    let signature = r.calls[0].3.clone().unwrap();
    // Gemini CLI sends the model's turn back as it came.
    let turn = |signature: &str| {
        json!({"contents": [
            {"role": "user", "parts": [{"text": "run it"}]},
            {"role": "model", "parts": [{"functionCall": {"id": "call_1", "name": "ls", "args": {}},
                                         "thoughtSignature": signature}]},
            {"role": "user", "parts": [{"functionResponse": {"id": "call_1", "name": "ls", "response": {"output": "ok"}}}]}
        ]})
        .to_string()
    };
    let seal = carry().seal;
    let chat = |body: &str, replay| {
        let (out, _) = translate(body.as_bytes(), "m", false, false, replay).unwrap();
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let v = chat(&turn(&signature), Some(&seal));
    assert_eq!(
        v["messages"][1]["reasoning_content"],
        "I should list \"files\" \u{e9}"
    );
    assert_eq!(v["messages"][1]["tool_calls"][0]["id"], "call_1");
    assert!(
        chat(&turn(&signature), None)["messages"][1]
            .get("reasoning_content")
            .is_none()
    );
    for other in ["skip_thought_signature_validator", "CiQBjz1rX8w=", ""] {
        let v = chat(&turn(other), Some(&seal));
        assert!(
            v["messages"][1].get("reasoning_content").is_none(),
            "{other}"
        );
    }
    // Remembered when asked: the reasoning and the call.
    let mut c = carry();
    c.remember = true;
    let mut s = GeminiStream::new(asked(true, true, false), "req_1", c);
    let mut out = Vec::new();
    s.chunk(&chunk(json!({"reasoning_content": "r"}), None), &mut out)
        .unwrap();
    s.chunk(
        &chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_9", "function": {"name": "f"}}]}),
            None,
        ),
        &mut out,
    )
    .unwrap();
    s.end(End::Finished(None), None, &mut out);
    let log = s.take_reasoning().unwrap();
    assert_eq!(
        (log.text(), log.calls()),
        (Some(&b"r"[..]), &[b"call_9".to_vec()][..])
    );
}

#[test]
fn calls_past_the_budget_fail_the_stream() {
    let mut s = GeminiStream::new(asked(true, true, false), "req_4", carry());
    let mut out = Vec::new();
    let mut failed_at = None;
    for i in 0..300 {
        let c = chunk(
            json!({"tool_calls": [{"index": i, "id": format!("c{i}"), "function": {"name": "f", "arguments": "{}"}}]}),
            None,
        );
        if s.chunk(&c, &mut out).is_err() {
            failed_at = Some(i);
            break;
        }
    }
    assert_eq!(failed_at, Some(crate::dialect::MAX_ITEMS as u64));
    s.end(End::Failed("over budget"), None, &mut out);
    assert!(reassemble(&out, true).error.is_some());
}

#[test]
fn the_shortcut_is_taken_for_a_chunk_shaped_like_the_last() {
    let provider = |delta: &str| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]}}"#
        )
        .into_bytes()
    };
    let deltas = [
        r#"{"role":"assistant","reasoning_content":"A"}"#,
        r#"{"reasoning_content":"B"}"#,
        r#"{"reasoning_content":"C"}"#,
        r#"{"content":"Hi"}"#,
        r#"{"content":" there"}"#,
        r#"{"content":", \"you\"\n"}"#,
        r#"{"content":"a","refusal":null}"#,
        r#"{"content":"\ud800"}"#,
        r#"{"content":"\ud83d\ude00"}"#,
        r#"{"reasoning_content":"D"}"#,
    ];
    for thoughts in [true, false] {
        let mut s = GeminiStream::new(asked(true, true, thoughts), "req_9", carry());
        let mut slow =
            GeminiStream::new(asked(true, true, thoughts), "req_9", carry()).without_shortcut();
        let (mut out, mut out_slow) = (Vec::new(), Vec::new());
        for (k, d) in deltas.iter().enumerate() {
            s.chunk(&provider(d), &mut out).unwrap();
            slow.chunk(&provider(d), &mut out_slow).unwrap();
            if k == 1 || k == 4 {
                assert!(s.has_shape(), "learned from {d}");
            }
        }
        s.end(End::Finished(Some("stop")), None, &mut out);
        slow.end(End::Finished(Some("stop")), None, &mut out_slow);
        assert_eq!(out, out_slow);
        let r = reassemble(&out, true);
        assert_eq!(r.text, "Hi there, \"you\"\na\u{FFFD}\u{1F600}");
        assert_eq!(r.thoughts, if thoughts { "ABCD" } else { "" });
    }
}

#[test]
fn line_separators_in_text_are_escaped_for_the_clis_reader() {
    // Both the long way (the first chunk) and by the shortcut (the second,
    // shaped like it).
    let chunks = vec![
        chunk(json!({"content": "a\u{2014}\u{2028}b"}), None),
        chunk(json!({"content": " c\u{2029}d"}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "function": {"name": "f",
                "arguments": "{\"s\":\"x\u{2028}y\"}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    let out = run(
        asked(true, true, false),
        &chunks,
        End::Finished(Some("tool_calls")),
        None,
    );
    assert!(
        !out.windows(3)
            .any(|w| w == b"\xE2\x80\xA8" || w == b"\xE2\x80\xA9"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let text = String::from_utf8(out.clone()).unwrap();
    assert!(
        text.contains("a\u{2014}\\u2028b") && text.contains("c\\u2029d"),
        "{text}"
    );
    assert_eq!(reassemble(&out, true).text, "a\u{2014}\u{2028}b c\u{2029}d");
}
