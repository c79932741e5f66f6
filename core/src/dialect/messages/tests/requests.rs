//! The request's translation: Claude Code's own requests, blocks, choices,
//! and every refusal naming its field.

use serde_json::{Value, json};

use crate::dialect::messages::request::{Asked, param_name, translate};

const TURN1: &[u8] =
    include_bytes!("../../../../../tests/fixtures/claude/claude-code-2.1.197-turn1.json");
const TURN2: &[u8] =
    include_bytes!("../../../../../tests/fixtures/claude/claude-code-2.1.197-turn2.json");
const TITLE: &[u8] =
    include_bytes!("../../../../../tests/fixtures/claude/claude-code-2.1.197-title.json");

fn chat(body: &[u8]) -> (Value, Asked) {
    let (out, asked) = translate(body, None).unwrap_or_else(|e| panic!("{e:?}"));
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    (v, asked)
}

fn refused(body: Value) -> (String, String) {
    let e = translate(body.to_string().as_bytes(), None).expect_err("refused");
    (e.param.unwrap_or_default(), e.message)
}

fn minimal(extra: Value) -> Value {
    let mut v = json!({"model": "m", "max_tokens": 100,
                       "messages": [{"role": "user", "content": "Hi"}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

#[test]
fn claude_code_first_turn_becomes_system_and_user_messages_and_function_tools() {
    let (v, asked) = chat(TURN1);
    let cc: Value = serde_json::from_slice(TURN1).unwrap();
    assert_eq!(v["model"], cc["model"]);
    assert_eq!(v["stream"], true);
    assert_eq!(v["max_tokens"], 32000);
    assert!(asked.stream && asked.thinking && !asked.omit_thinking);
    assert_eq!(asked.model, br#""reasoning-model-k3""#);
    let roles: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    // `system` first, then the user's message, then the `system`-role
    // message Claude Code puts in the list.
    assert_eq!(roles, ["system", "user", "system"]);
    let system = v["messages"][0]["content"].as_str().unwrap();
    for block in cc["system"].as_array().unwrap() {
        assert!(system.contains(block["text"].as_str().unwrap()));
    }
    let user = &v["messages"][1]["content"];
    assert_eq!(user[1], json!({"type": "text", "text": "say hi"}));
    assert_eq!(v["messages"][2]["content"], cc["messages"][1]["content"]);
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), cc["tools"].as_array().unwrap().len());
    let bash = tools
        .iter()
        .find(|t| t["function"]["name"] == "Bash")
        .unwrap();
    let original = cc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "Bash")
        .unwrap();
    assert_eq!(bash["function"]["parameters"], original["input_schema"]);
    assert_eq!(bash["function"]["description"], original["description"]);
    assert_eq!(v["reasoning_effort"], "high");
    assert_eq!(v["user"], cc["metadata"]["user_id"]);
    // Read and not applied: not sent to the provider.
    for gone in [
        "system",
        "metadata",
        "thinking",
        "context_management",
        "output_config",
    ] {
        assert!(v.get(gone).is_none(), "{gone}");
    }
    assert!(!v.to_string().contains("cache_control"));
}

#[test]
fn claude_code_tool_turn_becomes_tool_calls_and_a_tool_message_without_thinking() {
    let (v, _) = chat(TURN2);
    let messages = v["messages"].as_array().unwrap();
    let n = messages.len();
    let call = &messages[n - 2];
    assert_eq!(call["role"], "assistant");
    assert_eq!(call["content"], Value::Null);
    let tc = &call["tool_calls"][0];
    assert_eq!(tc["id"], "toolu_d3e4295d07d043beb5c6f4d1");
    assert_eq!(tc["function"]["name"], "Bash");
    let args: Value = serde_json::from_str(tc["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args["command"], "echo chatgate-tool-ok");
    assert_eq!(
        messages[n - 1],
        json!({"role": "tool", "tool_call_id": "toolu_d3e4295d07d043beb5c6f4d1",
               "content": "chatgate-tool-ok"})
    );
    assert!(
        !v.to_string().contains("Let me think about this"),
        "reasoning is never sent back"
    );
}

#[test]
fn claude_code_title_call_asks_for_a_json_schema() {
    let (v, asked) = chat(TITLE);
    let cc: Value = serde_json::from_slice(TITLE).unwrap();
    assert_eq!(v["response_format"]["type"], "json_schema");
    assert_eq!(
        v["response_format"]["json_schema"]["schema"],
        cc["output_config"]["format"]["schema"]
    );
    assert!(v.get("tools").is_none(), "an empty tool list is left out");
    assert!(!asked.thinking);
}

#[test]
fn blocks_images_tool_results_and_choices_translate() {
    let body = minimal(json!({
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc text"}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "chatgate.v1.x"},
                {"type": "redacted_thinking", "data": "xx"},
                {"type": "text", "text": "Calling."},
                {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"q": "a \"b\""}},
                {"type": "tool_use", "id": "toolu_2", "name": "get", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/r.png"}}
                ]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "boom", "is_error": true},
                {"type": "text", "text": "and?"}
            ]}
        ],
        "tools": [
            {"name": "get", "description": "Gets.", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
            {"type": "bash_20250124", "name": "bash"}
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "stop_sequences": ["END"],
        "temperature": 0.3, "top_p": 0.9, "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "context_management": {"edits": []}, "service_tier": "auto"
    }));
    let (v, asked) = chat(body.to_string().as_bytes());
    assert!(asked.thinking && !asked.stream);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
    assert_eq!(
        m[1]["content"][1]["image_url"]["url"],
        "data:image/png;base64,iVBORw0KGgo="
    );
    assert_eq!(
        m[1]["content"][2]["image_url"]["url"],
        "https://example.com/a.png"
    );
    assert_eq!(
        m[1]["content"][3],
        json!({"type": "text", "text": "doc text"})
    );
    // The text and the calls in one assistant message, thinking left out.
    assert_eq!(m[2]["content"], "Calling.");
    assert_eq!(m[2]["tool_calls"].as_array().unwrap().len(), 2);
    let args: Value = serde_json::from_str(
        m[2]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, json!({"q": "a \"b\""}));
    assert_eq!(
        m[3],
        json!({"role": "tool", "tool_call_id": "toolu_1", "content": "one"})
    );
    assert_eq!(
        m[4],
        json!({"role": "tool", "tool_call_id": "toolu_2", "content": "Error:\n\nboom"})
    );
    assert_eq!(m[5]["role"], "user");
    assert_eq!(m[5]["content"][0], json!({"type": "text", "text": "and?"}));
    assert_eq!(
        m[5]["content"][1]["image_url"]["url"],
        "https://example.com/r.png"
    );
    assert_eq!(m.len(), 6);
    assert_eq!(
        v["tools"].as_array().unwrap().len(),
        1,
        "server tools left out"
    );
    assert_eq!(v["tool_choice"], "required");
    assert_eq!(v["parallel_tool_calls"], false);
    assert_eq!(v["stop"], json!(["END"]));
    assert_eq!(
        (v["temperature"].clone(), v["top_k"].clone()),
        (json!(0.3), json!(5))
    );
    assert_eq!(v["reasoning_effort"], "low");
    assert!(v.get("context_management").is_none() && v.get("service_tier").is_none());
}

#[test]
fn what_the_provider_cannot_read_is_refused_only_in_the_newest_user_message() {
    let pdf = json!({"type": "document", "source": {"type": "base64",
        "media_type": "application/pdf", "data": "JVBERi0="}});
    let unknown = json!({"type": "tool_reference", "tool_name": "x"});
    let body = minimal(json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "read this"}, pdf.clone()]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [pdf.clone(), unknown.clone()]},
            {"type": "text", "text": "and now?"}
        ]},
        {"role": "system", "content": "a reminder"}
    ]}));
    let (v, _) = chat(body.to_string().as_bytes());
    let m = v["messages"].as_array().unwrap();
    let note = "[A content block was left out here: the provider reads only text and images.]";
    assert_eq!(m[0]["content"][1], json!({"type": "text", "text": note}));
    assert_eq!(m[2]["role"], "tool");
    assert_eq!(m[2]["content"], format!("{note}\n\n{note}"));
    assert_eq!(m[3]["content"], "and now?");
    // The same in the newest user message: refused, naming it.
    let body = minimal(json!({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": "read this"}, pdf]},
        {"role": "system", "content": "a reminder"}
    ]}));
    let (param, _) = refused(body);
    assert_eq!(param, "messages[2].content[1].source.type");
}

#[test]
fn tool_choice_and_effort_map() {
    let with_tool = |choice: Value| {
        let (v, _) = chat(
            minimal(
                json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}],
                           "tool_choice": choice}),
            )
            .to_string()
            .as_bytes(),
        );
        v["tool_choice"].clone()
    };
    assert_eq!(with_tool(json!({"type": "auto"})), "auto");
    assert_eq!(with_tool(json!({"type": "none"})), "none");
    assert_eq!(
        with_tool(json!({"type": "tool", "name": "f"})),
        json!({"type": "function", "function": {"name": "f"}})
    );
    let effort =
        |extra: Value| chat(minimal(extra).to_string().as_bytes()).0["reasoning_effort"].clone();
    assert_eq!(effort(json!({"output_config": {"effort": "max"}})), "high");
    assert_eq!(
        effort(json!({"output_config": {"effort": "medium"}})),
        "medium"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "enabled", "budget_tokens": 10000}})),
        "medium"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "enabled", "budget_tokens": 32000}})),
        "high"
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "adaptive"}})),
        Value::Null
    );
    assert_eq!(
        effort(json!({"thinking": {"type": "disabled"}})),
        Value::Null
    );
    let (_, asked) = chat(
        minimal(json!({"thinking": {"type": "adaptive", "display": "omitted"}}))
            .to_string()
            .as_bytes(),
    );
    assert!(asked.thinking && asked.omit_thinking);
}

#[test]
fn refusals_name_the_messages_field() {
    let cases = [
        (json!({"max_tokens": 1, "messages": []}), "model"),
        (json!({"model": "m", "messages": []}), "max_tokens"),
        (json!({"model": "m", "max_tokens": 1}), "messages"),
        (
            minimal(json!({"stop_sequences": ["a", "b", "c", "d", "e"]})),
            "stop_sequences",
        ),
        (
            minimal(json!({"messages": [{"role": "tool", "content": "x"}]})),
            "messages[0].role",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [{"type": "audio"}]}]})),
            "messages[0].content[0].type",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "file", "file_id": "f"}}]}]})),
            "messages[0].content[0].source.type",
        ),
        (
            minimal(json!({"messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "x"}}]}]})),
            "messages[0].content[0].source.type",
        ),
        (
            minimal(json!({"messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": "x"}]}]})),
            "messages[0].content[0].input",
        ),
        (
            minimal(json!({"thinking": {"type": "sometimes"}})),
            "thinking.type",
        ),
        (
            minimal(json!({"output_config": {"effort": "extreme"}})),
            "output_config.effort",
        ),
        (
            minimal(
                json!({"tool_choice": {"type": "all"}, "tools": [{"name": "f", "input_schema": {}}]}),
            ),
            "tool_choice.type",
        ),
        (
            minimal(
                json!({"tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]}),
            ),
            "tools",
        ),
        (
            minimal(json!({"system": [{"type": "image"}]})),
            "system[0].type",
        ),
    ];
    for (body, param) in cases {
        let (got, message) = refused(body.clone());
        assert_eq!(got, param, "{body}: {message}");
        assert!(!message.is_empty());
    }
    let e = translate(b"[1]", None).unwrap_err();
    assert_eq!(e.code, "invalid_json");
    let e = translate(
        br#"{"model":"m","model":"n","max_tokens":1,"messages":[]}"#,
        None,
    )
    .unwrap_err();
    assert!(e.message.contains("duplicate"), "{}", e.message);
    assert_eq!(param_name("stop"), "stop_sequences");
    assert_eq!(param_name("reasoning_effort"), "output_config.effort");
    assert_eq!(param_name("messages[3].content"), "messages");
    assert_eq!(param_name("temperature"), "temperature");
}
