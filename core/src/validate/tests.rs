//! The validator's unit tests: every finding is also the oracle's
//! ([`super::reference`]), error wording included.

use super::reference::{json_hazard, validate_reference};
use super::*;
use crate::catalog::{Catalog, Model, Price};
use crate::json::MAX_DEPTH;
use serde_json::{Value, json};

fn catalog() -> Catalog {
    Catalog::default()
}

/// The validator's answer, after checking it is the oracle's.
fn validate(body: &str, catalog: &Catalog) -> Result<ChatRequest, ApiError> {
    let got = validate_chat_request(body.as_bytes(), catalog);
    assert_eq!(got, validate_reference(body.as_bytes(), catalog), "{body}");
    got
}

fn ok(body: &str) -> ChatRequest {
    validate(body, &catalog()).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn err(body: &str) -> ApiError {
    validate(body, &catalog()).expect_err(body)
}
const M: &str = r#""messages":[{"role":"user","content":"hi"}]"#;

#[test]
fn nesting_depth_is_capped_outside_strings_only() {
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let at = |n: usize| {
        format!(
            r#"{{"model":"reasoning-model-k3",{M},"x":{},"s":"{}\"[[["}}"#,
            nest(n),
            "[".repeat(500)
        )
    };
    // The top-level object is one level: 127 more fit, 128 more do not.
    ok(&at(MAX_DEPTH - 1));
    let e = err(&at(MAX_DEPTH));
    assert_eq!((e.status, e.code), (400, "invalid_json"));
    assert!(e.message.contains("nested more than 128"), "{}", e.message);
    // Inside a message, and as objects.
    let deep_obj = format!("{}0{}", r#"{"a":"#.repeat(200), "}".repeat(200));
    err(&format!(
        r#"{{"model":"reasoning-model-k3","messages":[{{"role":"user","content":"hi","x":{deep_obj}}}]}}"#
    ));
    let deep = |json: &[u8], limit| json_hazard(json, limit).is_some();
    assert!(deep(b"[[[]]]", 2));
    assert!(!deep(b"[[[]]]", 3));
    // An escaped quote does not end a string.
    assert!(!deep(br#"["\"[[[[[[[[[[[[[["]"#, 2));
    assert!(!deep(
        &format!(r#"["{}"]"#, "[".repeat(300)).into_bytes(),
        1
    ));
    assert!(deep(&nest(300).into_bytes(), 299));
    assert!(!deep(&nest(300).into_bytes(), 300));
}

#[test]
fn lone_surrogate_escapes_are_refused() {
    let with = |text: &str| {
        format!(
            r#"{{"model":"reasoning-model-k3","messages":[{{"role":"user","content":"{text}"}}]}}"#
        )
    };
    ok(&with(
        r"a pair \ud83d\ude00 and \u00e9 and \\ud800 (escaped backslash)",
    ));
    for bad in [
        r"\ud800",
        r"x\ud800y",
        r"\ud800\u0041",
        r"\udc00",
        r"\ud83d\ud83d",
    ] {
        let e = err(&with(bad));
        assert_eq!(e.code, "invalid_json", "{bad}");
        assert!(e.message.contains("surrogate"), "{bad}: {}", e.message);
    }
}

#[test]
fn minimal_request_is_forwarded_unchanged() {
    let body = format!(r#"{{"model":"reasoning-model-k3",{M}, "seed": 7, "user":"u"}}"#);
    let r = ok(&body);
    assert!(!r.stream);
    assert_eq!(r.rewritten, None);
    assert_eq!(r.upstream_body(body.as_bytes()), body.as_bytes());
}

#[test]
fn stream_forces_include_usage_keeping_order_and_values() {
    let body = format!(
        r#"{{"model":"reasoning-model-k3","stream":true,"presence_penalty":0.50,{M},"response_format":{{"type":"json_object"}},"parallel_tool_calls":false,"frequency_penalty":1e-1}}"#
    );
    let r = ok(&body);
    assert!(r.stream);
    let out = String::from_utf8(r.rewritten.unwrap()).unwrap();
    // Raw numbers keep their spelling; order is kept; the option is appended.
    assert_eq!(
        out,
        format!(
            r#"{{"model":"reasoning-model-k3","stream":true,"presence_penalty":0.50,{M},"response_format":{{"type":"json_object"}},"parallel_tool_calls":false,"frequency_penalty":1e-1,"stream_options":{{"include_usage":true}}}}"#
        )
    );
    let r = ok(&format!(
        r#"{{"stream_options":{{"x":1,"include_usage":false}},"model":"reasoning-model-k3","stream":true,{M}}}"#
    ));
    let v: Value = serde_json::from_slice(r.rewritten.as_ref().unwrap()).unwrap();
    assert_eq!(v["stream_options"], json!({"x": 1, "include_usage": true}));
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","stream":true,"stream_options":{{"include_usage":true}},{M}}}"#
    ));
    assert_eq!(r.rewritten, None);
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","stream":true,"stream_options":null,{M}}}"#
    ));
    let v: Value = serde_json::from_slice(r.rewritten.as_ref().unwrap()).unwrap();
    assert_eq!(v["stream_options"], json!({"include_usage": true}));
}

#[test]
fn reasoning_content_is_stripped_from_assistant_turns() {
    let body = r#"{"model":"reasoning-model-k3","messages":[
            {"role":"user","content":"a"},
            {"role":"assistant","content":"b","reasoning_content":"secret thoughts","name":"x"},
            {"role":"user","content":"c","reasoning_content":"kept: not an assistant turn"}]}"#;
    let r = ok(body);
    let v: Value = serde_json::from_slice(r.rewritten.as_ref().unwrap()).unwrap();
    assert_eq!(
        v["messages"][1],
        json!({"role":"assistant","content":"b","name":"x"})
    );
    assert_eq!(
        v["messages"][2]["reasoning_content"],
        "kept: not an assistant turn"
    );
    assert!(!String::from_utf8_lossy(r.rewritten.as_ref().unwrap()).contains("secret"));
}

#[test]
fn model_mapping() {
    let c = Catalog::new(vec![Model {
        upstream_id: Some("provider-model".into()),
        ..Model::default_model()
    }])
    .unwrap();
    let r = validate_chat_request(
        format!(r#"{{"model":"reasoning-model-k3",{M}}}"#).as_bytes(),
        &c,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(r.rewritten.as_ref().unwrap()).unwrap();
    assert_eq!(v["model"], "provider-model");
    assert_eq!(r.model, "reasoning-model-k3");
    let _ = Price::DEFAULT;
}

#[test]
fn an_alias_is_metered_as_its_model_and_sent_as_its_provider_id() {
    let c = Catalog::new(vec![Model {
        aliases: vec!["gpt-4o".into()],
        ..Model::default_model()
    }])
    .unwrap();
    let r = validate(&format!(r#"{{"model":"gpt-4o",{M}}}"#), &c).unwrap();
    assert_eq!(r.model, "reasoning-model-k3");
    let v: Value = serde_json::from_slice(r.rewritten.as_ref().unwrap()).unwrap();
    assert_eq!(v["model"], "reasoning-model-k3");
    // Its own id needs no rewrite.
    let r = validate(&format!(r#"{{"model":"reasoning-model-k3",{M}}}"#), &c).unwrap();
    assert_eq!(r.rewritten, None);
    // A key that may not call it is told what it would be of an unknown
    // model.
    let list = ["other".to_owned()];
    let e = validate_chat_request(
        format!(r#"{{"model":"gpt-4o",{M}}}"#).as_bytes(),
        c.seen_by(Some(&list)),
    )
    .unwrap_err();
    let unknown =
        validate(&format!(r#"{{"model":"gpt-4o",{M}}}"#), &Catalog::default()).unwrap_err();
    assert_eq!(
        (e.status, e.code, &e.message),
        (404, "model_not_found", &unknown.message)
    );
}

#[test]
fn a_conversation_is_named_by_its_cache_key_or_user() {
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","prompt_cache_key":"conv-1","user":"ann",{M}}}"#
    ));
    let hash = |s: &str| crate::endpoints::affinity_hash(s.as_bytes());
    assert_eq!(
        (r.cache_key, r.user),
        (Some(hash("conv-1")), Some(hash("ann")))
    );
    // Escaped, the same name.
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","prompt_cache_key":"conv\u002d1",{M}}}"#
    ));
    assert_eq!(r.cache_key, Some(hash("conv-1")));
    // Not a string, or empty: no name.
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","prompt_cache_key":7,"user":"",{M}}}"#
    ));
    assert_eq!((r.cache_key, r.user), (None, None));
}

#[test]
fn every_rule_names_its_param() {
    let cases: &[(&str, u16, &str, Option<&str>)] = &[
        ("not json", 400, "invalid_json", None),
        ("[1]", 400, "invalid_json", None),
        (
            r#"{"model":"reasoning-model-k3","model":"x",MSG}"#,
            400,
            "invalid_json",
            None,
        ),
        (r#"{MSG}"#, 400, "missing_required_parameter", Some("model")),
        (r#"{"model":7,MSG}"#, 400, "invalid_type", Some("model")),
        (
            r#"{"model":"gpt-4",MSG}"#,
            404,
            "model_not_found",
            Some("model"),
        ),
        (
            r#"{"model":"reasoning-model-k3"}"#,
            400,
            "missing_required_parameter",
            Some("messages"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[]}"#,
            400,
            "invalid_value",
            Some("messages"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":{}}"#,
            400,
            "invalid_type",
            Some("messages"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[1]}"#,
            400,
            "invalid_type",
            Some("messages[0]"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"content":"x"}]}"#,
            400,
            "missing_required_parameter",
            Some("messages[0].role"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"robot","content":"x"}]}"#,
            400,
            "invalid_value",
            Some("messages[0].role"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user"}]}"#,
            400,
            "missing_required_parameter",
            Some("messages[0].content"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":null}]}"#,
            400,
            "invalid_type",
            Some("messages[0].content"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"audio"}]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content[0].type"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"text","text":5}]}]}"#,
            400,
            "invalid_type",
            Some("messages[0].content[0].text"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content[0].image_url.url"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content[0].image_url.url"),
        ),
        // Found by fuzzing: a character straddling the end of "image/"
        // made the check slice a str inside a character and panic.
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:imageȏng;base64,iVBORw0KGgo="}}]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content[0].image_url.url"),
        ),
        (
            "{\"model\":\"reasoning-model-k3\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image\u{20f}ng;base64,iVBORw0KGgo=\"}}]}]}",
            400,
            "invalid_value",
            Some("messages[0].content[0].image_url.url"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].content[0].type"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"tool","content":"42"}]}"#,
            400,
            "missing_required_parameter",
            Some("messages[0].tool_call_id"),
        ),
        (
            r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x","tool_calls":[]}]}"#,
            400,
            "invalid_value",
            Some("messages[0].tool_calls"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"stream":"yes"}"#,
            400,
            "invalid_type",
            Some("stream"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"stream_options":true}"#,
            400,
            "invalid_type",
            Some("stream_options"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"temperature":2.01}"#,
            400,
            "invalid_value",
            Some("temperature"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"temperature":-0.1}"#,
            400,
            "invalid_value",
            Some("temperature"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"temperature":"1"}"#,
            400,
            "invalid_type",
            Some("temperature"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"temperature":1e999}"#,
            400,
            "invalid_value",
            Some("temperature"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"top_p":1.5}"#,
            400,
            "invalid_value",
            Some("top_p"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"max_tokens":0}"#,
            400,
            "invalid_value",
            Some("max_tokens"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"max_tokens":-5}"#,
            400,
            "invalid_value",
            Some("max_tokens"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"max_tokens":1.5}"#,
            400,
            "invalid_type",
            Some("max_tokens"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"max_tokens":99999999999999999999999}"#,
            400,
            "invalid_value",
            Some("max_tokens"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"stop":["a","b","c","d","e"]}"#,
            400,
            "invalid_value",
            Some("stop"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"stop":[1]}"#,
            400,
            "invalid_type",
            Some("stop[0]"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"stop":5}"#,
            400,
            "invalid_type",
            Some("stop"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tools":{}}"#,
            400,
            "invalid_type",
            Some("tools"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tools":[{"type":"web"}]}"#,
            400,
            "invalid_value",
            Some("tools[0].type"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tools":[{"type":"function","function":{"name":"a b"}}]}"#,
            400,
            "invalid_value",
            Some("tools[0].function.name"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tool_choice":"sometimes"}"#,
            400,
            "invalid_value",
            Some("tool_choice"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tool_choice":"required"}"#,
            400,
            "invalid_value",
            Some("tool_choice"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}"#,
            400,
            "invalid_value",
            Some("tool_choice.function.name"),
        ),
        (
            r#"{"model":"reasoning-model-k3",MSG,"tool_choice":5}"#,
            400,
            "invalid_type",
            Some("tool_choice"),
        ),
    ];
    for (body, status, code, param) in cases {
        let body = body.replace("MSG", M);
        let e = err(&body);
        assert_eq!(
            (e.status, e.code, e.param.as_deref()),
            (*status, *code, *param),
            "{body}"
        );
    }
}

#[test]
fn accepted_shapes() {
    for body in [
        r#"{"model":"reasoning-model-k3",MSG,"temperature":0,"top_p":1,"max_tokens":1,"stop":"x"}"#,
        r#"{"model":"reasoning-model-k3",MSG,"temperature":2,"top_p":0,"stop":["a","b","c","d"]}"#,
        r#"{"model":"reasoning-model-k3",MSG,"temperature":null,"top_p":null,"max_tokens":null,"stop":null,"tools":null,"tool_choice":null,"stream":null}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}],"tool_choice":"auto"}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"\u0068i"}],"unknown":{"deep":[1,2,{"x":null}]}}"#,
    ] {
        ok(&body.replace("MSG", M));
    }
}

#[test]
fn deep_nesting_and_many_keys_do_not_hurt() {
    let deep = format!(
        r#"{{"model":"reasoning-model-k3",{M},"x":{}1{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    // Parsed without a deep stack, then refused for its depth.
    assert_eq!(err(&deep).code, "invalid_json");
    let deep_tools = format!(
        r#"{{"model":"reasoning-model-k3",{M},"tools":[{{"type":"function","function":{{"name":"f","parameters":{}1{}}}}}]}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert_eq!(err(&deep_tools).status, 400);
    let mut many =
        String::from(r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}]"#);
    for i in 0..50_000 {
        many.push_str(&format!(r#","k{i}":0"#));
    }
    many.push_str(r#","k7":1}"#);
    assert_eq!(err(&many).code, "invalid_json");
}

#[test]
fn peek_for_the_ledger() {
    assert_eq!(
        peek_model_and_stream(br#"{"model":"reasoning-model-k3","stream":true,"temperature":9}"#),
        ("reasoning-model-k3".to_owned(), true)
    );
    assert_eq!(peek_model_and_stream(b"{oops"), (String::new(), false));
    assert_eq!(
        peek_model_and_stream(br#"{"model":7}"#),
        (String::new(), false)
    );
    // The serde_json version it replaced answers the same.
    let long = format!(r#"{{"model":"{}","stream":true}}"#, r"\u00e9".repeat(200));
    for body in [
        &br#"{"model":"reasoning-model-k3","stream":true,"temperature":9}"#[..],
        b"{oops",
        br#"{"model":7}"#,
        br#" {"mod\u0065l" : "m\u00e9" , "stream" : true } "#,
        br#"{"model":"m","stream":true,"model":"n"}"#,
        br#"{"model":"\ud800","stream":true}"#,
        br#"{"model":"m","stream":"true"}"#,
        br#"{"model":"m","x":[[[[1]]]],"stream":true} x"#,
        b"{\"model\":\"m\xff\",\"stream\":true}",
        br#"[{"model":"m"}]"#,
        b"",
        long.as_bytes(),
    ] {
        assert_eq!(
            peek_model_and_stream(body),
            super::reference::peek_model_and_stream(body),
            "{}",
            String::from_utf8_lossy(body)
        );
    }
}

#[test]
fn estimates_and_reservation() {
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3","messages":[{{"role":"user","content":"{}"}}],"max_tokens":100}}"#,
        "a".repeat(400)
    ));
    assert_eq!(r.estimated_prompt_tokens, 3 + 4 + 100);
    assert_eq!(r.reservation(), 207);
    let r = ok(&format!(
        r#"{{"model":"reasoning-model-k3",{M},"max_completion_tokens":50}}"#
    ));
    assert_eq!(r.max_tokens, Some(50));
}
