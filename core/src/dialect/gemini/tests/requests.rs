//! The request's translation: a request shaped as Gemini CLI sends one,
//! parts, calls paired with their responses, configuration, and every
//! refusal naming its Gemini field.

use serde_json::{Value, json};

use crate::dialect::gemini::request::{Asked, param_name, translate, translate_count};

fn chat_of(body: &Value, stream: bool, sse: bool) -> (Value, Asked) {
    let (out, asked) = translate(body.to_string().as_bytes(), "gemini-m", stream, sse, None)
        .unwrap_or_else(|e| panic!("{e:?}"));
    let v = serde_json::from_slice(&out)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)));
    (v, asked)
}

fn chat(body: &Value) -> Value {
    chat_of(body, false, false).0
}

fn refused(body: Value) -> (String, String) {
    let e = translate(body.to_string().as_bytes(), "m", false, false, None).expect_err("refused");
    (e.param.unwrap_or_default(), e.message)
}

fn minimal(extra: Value) -> Value {
    let mut v = json!({"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

fn user(parts: Value) -> Value {
    json!({"role": "user", "parts": parts})
}

fn model(parts: Value) -> Value {
    json!({"role": "model", "parts": parts})
}

/// A second turn as Gemini CLI sends it: the system instruction as a
/// Content, its tools as `parametersJsonSchema`, thinking shown, and the
/// model's call (with the signature it was given) answered.
fn gemini_cli_turn() -> Value {
    json!({
        "contents": [
            user(json!([{"text": "<session_context>This is Gemini CLI.</session_context>"}])),
            user(json!([{"text": "list the files"}])),
            model(json!([
                {"text": "Looking.", "thought": true},
                {"functionCall": {"id": "call_a1", "name": "list_directory", "args": {"dir_path": "."}},
                 "thoughtSignature": "skip_thought_signature_validator"}
            ])),
            user(json!([{"functionResponse": {"id": "call_a1", "name": "list_directory",
                "response": {"output": "a.txt\nb.txt"}}}]))
        ],
        "systemInstruction": {"role": "user", "parts": [{"text": "You are an interactive CLI agent."}]},
        "tools": [{"functionDeclarations": [
            {"name": "list_directory", "description": "Lists a directory.",
             "parametersJsonSchema": {"type": "object", "properties": {"dir_path": {"type": "string"}},
                                      "required": ["dir_path"]}},
            {"name": "read_file", "description": "Reads a file.",
             "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}
        ]}],
        "generationConfig": {"temperature": 0, "topP": 1,
            "thinkingConfig": {"includeThoughts": true, "thinkingBudget": 8192}},
        "session_id": "5e0c…"
    })
}

#[test]
fn a_gemini_cli_turn_becomes_messages_tools_and_parameters() {
    let (v, asked) = chat_of(&gemini_cli_turn(), true, true);
    assert_eq!(
        asked,
        Asked {
            model: br#""gemini-m""#.to_vec(),
            stream: true,
            sse: true,
            thoughts: true
        }
    );
    assert_eq!(v["model"], "gemini-m");
    assert_eq!(v["stream"], true);
    let m = v["messages"].as_array().unwrap();
    assert_eq!(
        m[0],
        json!({"role": "system", "content": "You are an interactive CLI agent."})
    );
    assert_eq!(m[1]["role"], "user");
    assert_eq!(m[2], json!({"role": "user", "content": "list the files"}));
    // The shown thought is left out; the call keeps its id.
    assert_eq!(m[3]["role"], "assistant");
    assert_eq!(m[3]["content"], Value::Null);
    assert!(m[3].get("reasoning_content").is_none());
    let call = &m[3]["tool_calls"][0];
    assert_eq!(call["id"], "call_a1");
    assert_eq!(call["function"]["name"], "list_directory");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"dir_path": "."}));
    assert_eq!(m[4]["role"], "tool");
    assert_eq!(m[4]["tool_call_id"], "call_a1");
    let response: Value = serde_json::from_str(m[4]["content"].as_str().unwrap()).unwrap();
    assert_eq!(response, json!({"output": "a.txt\nb.txt"}));
    assert_eq!(m.len(), 5);
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(
        tools[0]["function"]["parameters"]["required"],
        json!(["dir_path"])
    );
    assert_eq!(tools[1]["function"]["description"], "Reads a file.");
    assert_eq!(
        (v["temperature"].clone(), v["top_p"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(v["reasoning_effort"], "medium");
    for gone in [
        "contents",
        "systemInstruction",
        "generationConfig",
        "session_id",
        "tool_choice",
    ] {
        assert!(v.get(gone).is_none(), "{gone}");
    }
    // Not streamed; streamed as a JSON array.
    let (v, asked) = chat_of(&gemini_cli_turn(), false, true);
    assert!(v.get("stream").is_none() && !asked.stream && !asked.sse);
    let (v, asked) = chat_of(&gemini_cli_turn(), true, false);
    assert!(v["stream"] == true && asked.stream && !asked.sse);
}

#[test]
fn calls_without_ids_get_made_up_ones_their_responses_name() {
    let body = minimal(json!({"contents": [
        user(json!([{"text": "weather in two cities"}])),
        model(json!([
            {"text": "Checking."},
            {"functionCall": {"name": "weather", "args": {"city": "Oslo"}}},
            {"functionCall": {"name": "weather", "args": {"city": "Rome"}}},
            {"functionCall": {"name": "time"}}
        ])),
        user(json!([
            {"functionResponse": {"name": "time", "response": {"now": "noon"}}},
            {"functionResponse": {"name": "weather", "response": {"sky": "grey"}}},
            {"functionResponse": {"name": "weather", "response": {"sky": "blue"}}},
            {"text": "and?"}
        ]))
    ]}));
    let v = chat(&body);
    let m = v["messages"].as_array().unwrap();
    let ids: Vec<&str> = m[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_1_0", "call_1_1", "call_1_2"]);
    assert_eq!(m[1]["content"], "Checking.");
    assert_eq!(m[1]["tool_calls"][2]["function"]["arguments"], "{}");
    // Responses named by name, in order; then the user's text.
    let answered: Vec<(&str, &str)> = m[2..5]
        .iter()
        .map(|t| {
            (
                t["tool_call_id"].as_str().unwrap(),
                t["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answered,
        [
            ("call_1_2", r#"{"now":"noon"}"#),
            ("call_1_0", r#"{"sky":"grey"}"#),
            ("call_1_1", r#"{"sky":"blue"}"#)
        ]
    );
    assert_eq!(m[5], json!({"role": "user", "content": "and?"}));
    // A response whose id is not the call's (the call had none) answers
    // the call of its name; one that answers nothing keeps its id.
    let body = minimal(json!({"contents": [
        user(json!([{"text": "go"}])),
        model(json!([{"functionCall": {"name": "f", "args": {}}}])),
        user(json!([
            {"functionResponse": {"id": "client-id", "name": "f", "response": {}}},
            {"functionResponse": {"id": "stray", "name": "g", "response": {}}},
            {"functionResponse": {"name": "h", "response": {}}}
        ]))
    ]}));
    let v = chat(&body);
    let ids: Vec<&str> = v["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|t| t["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["call_1_0", "stray", "call_2_r2"]);
}

#[test]
fn images_are_data_urls_and_other_media_is_refused_only_in_the_newest_user_turn() {
    let png = json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}});
    let pdf = json!({"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}});
    let file = json!({"fileData": {"mimeType": "video/mp4", "fileUri": "https://x/files/1"}});
    let body = minimal(json!({"contents": [
        user(json!([{"text": "look"}, png, pdf, file])),
        model(json!([{"text": "Seen."}, {"executableCode": {"language": "PYTHON", "code": "1"}},
                     {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}}])),
        user(json!([{"text": "thanks"}]))
    ]}));
    let v = chat(&body);
    let m = v["messages"].as_array().unwrap();
    let note = "[A part was left out here: the provider reads only text and images.]";
    assert_eq!(
        m[0]["content"],
        json!([
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "text", "text": note},
            {"type": "text", "text": note}
        ])
    );
    assert_eq!(m[1], json!({"role": "assistant", "content": "Seen."}));
    let newest = |part: Value| {
        refused(minimal(json!({"contents": [
            user(json!([{"text": "hi"}])),
            model(json!([{"text": "hello"}])),
            user(json!([{"text": "read"}, part]))
        ]})))
        .0
    };
    assert_eq!(newest(pdf), "contents[2].parts[1].inlineData");
    assert_eq!(newest(file), "contents[2].parts[1].fileData");
    assert_eq!(newest(json!({"videoMetadata": {}})), "contents[2].parts[1]");
}

#[test]
fn schemas_tools_and_tool_choice_translate() {
    let decls = json!([{"functionDeclarations": [
        {"name": "a", "parameters": {"type": "OBJECT", "properties": {"x": {"type": "STRING", "enum": ["UP"]}}}},
        {"name": "b"},
        {"name": "c", "parametersJsonSchema": {"type": "object", "properties": {"T": {"type": "STRING"}}}}
    ]}, {"googleSearch": {}}, {"codeExecution": {}}]);
    let v = chat(&minimal(json!({"tools": decls})));
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3, "Google's own tools left out");
    assert_eq!(
        tools[0]["function"]["parameters"],
        json!({"type": "object", "properties": {"x": {"type": "string", "enum": ["UP"]}}})
    );
    assert_eq!(
        tools[1]["function"]["parameters"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        tools[2]["function"]["parameters"]["properties"]["T"]["type"], "STRING",
        "JSON Schema is copied as it is"
    );
    let with = |config: Value| {
        let v = chat(&minimal(
            json!({"tools": decls, "toolConfig": {"functionCallingConfig": config}}),
        ));
        let names: Vec<String> = v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        (v["tool_choice"].clone(), names)
    };
    assert_eq!(with(json!({"mode": "AUTO"})).0, "auto");
    assert_eq!(with(json!({"mode": "VALIDATED"})).0, "auto");
    assert_eq!(with(json!({"mode": "NONE"})).0, "none");
    assert_eq!(
        with(json!({"mode": "ANY"})),
        (json!("required"), vec!["a".into(), "b".into(), "c".into()])
    );
    assert_eq!(
        with(json!({"mode": "ANY", "allowedFunctionNames": ["b"]})),
        (
            json!({"type": "function", "function": {"name": "b"}}),
            vec!["b".into()]
        )
    );
    assert_eq!(
        with(json!({"mode": "ANY", "allowedFunctionNames": ["a", "c"]})),
        (json!("required"), vec!["a".into(), "c".into()])
    );
    assert_eq!(with(json!({})).0, Value::Null);
    // A call forced among functions that are not declared: refused, not
    // sent as plain text.
    let (param, _) = refused(minimal(json!({"tools": decls, "toolConfig":
        {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["zz"]}}})));
    assert_eq!(
        param,
        "toolConfig.functionCallingConfig.allowedFunctionNames"
    );
    // The Python SDK's name for a declaration's JSON Schema.
    let snake = json!([{"functionDeclarations": [{"name": "w",
        "parameters_json_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}]);
    let v = chat(&minimal(json!({"tools": snake})));
    assert_eq!(
        v["tools"][0]["function"]["parameters"]["properties"]["city"]["type"],
        "string"
    );
}

#[test]
fn generation_config_maps() {
    let config = |g: Value| chat(&minimal(json!({"generationConfig": g})));
    let v = config(
        json!({"temperature": 0.2, "topP": 0.9, "topK": 40, "maxOutputTokens": 1000,
        "stopSequences": ["END"], "seed": 7, "presencePenalty": 0.1, "frequencyPenalty": -0.1,
        "candidateCount": 1, "responseModalities": ["TEXT"], "mediaResolution": "MEDIA_RESOLUTION_LOW"}),
    );
    for (k, want) in [
        ("temperature", json!(0.2)),
        ("top_p", json!(0.9)),
        ("top_k", json!(40)),
        ("max_tokens", json!(1000)),
        ("stop", json!(["END"])),
        ("seed", json!(7)),
        ("presence_penalty", json!(0.1)),
        ("frequency_penalty", json!(-0.1)),
    ] {
        assert_eq!(v[k], want, "{k}");
    }
    assert!(v.get("responseModalities").is_none() && v.get("n").is_none());
    assert_eq!(
        config(json!({"responseMimeType": "application/json"}))["response_format"],
        json!({"type": "json_object"})
    );
    assert_eq!(
        config(json!({"responseMimeType": "application/json",
            "responseSchema": {"type": "ARRAY", "items": {"type": "STRING"}}}))["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "output",
            "schema": {"type": "array", "items": {"type": "string"}}}})
    );
    assert_eq!(
        config(json!({"responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"}}))["response_format"]["json_schema"]["schema"],
        json!({"type": "object"})
    );
    assert!(
        config(json!({"responseMimeType": "text/plain"}))
            .get("response_format")
            .is_none()
    );
    let effort = |t: Value| config(json!({"thinkingConfig": t}))["reasoning_effort"].clone();
    assert_eq!(effort(json!({"thinkingBudget": 0})), Value::Null);
    assert_eq!(effort(json!({"thinkingBudget": 1})), "low");
    assert_eq!(effort(json!({"thinkingBudget": 4095})), "low");
    assert_eq!(effort(json!({"thinkingBudget": 4096})), "medium");
    assert_eq!(effort(json!({"thinkingBudget": 24576})), "high");
    assert_eq!(effort(json!({"thinkingBudget": -1})), Value::Null);
    assert_eq!(effort(json!({"thinkingLevel": "MINIMAL"})), "low");
    assert_eq!(effort(json!({"thinkingLevel": "low"})), "low");
    assert_eq!(effort(json!({"thinkingLevel": "MEDIUM"})), "medium");
    assert_eq!(
        effort(json!({"thinkingLevel": "HIGH", "thinkingBudget": 0})),
        "high"
    );
    assert_eq!(effort(json!({"includeThoughts": true})), Value::Null);
    let (_, asked) = chat_of(
        &minimal(json!({"generationConfig": {"thinkingConfig": {"includeThoughts": true}}})),
        false,
        false,
    );
    assert!(asked.thoughts);
    let (_, asked) = chat_of(&minimal(json!({})), false, false);
    assert!(!asked.thoughts);
}

#[test]
fn a_system_instruction_is_a_string_or_text_parts() {
    let v = chat(&minimal(json!({"systemInstruction": "Be brief."})));
    assert_eq!(
        v["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    let v = chat(&minimal(
        json!({"systemInstruction": {"parts": [{"text": "One."}, {"text": "Two."}]}}),
    ));
    assert_eq!(
        v["messages"][0],
        json!({"role": "system", "content": "One.\n\nTwo."})
    );
    let v = chat(&minimal(json!({"systemInstruction": {"parts": []}})));
    assert_eq!(v["messages"][0]["role"], "user");
}

#[test]
fn a_token_count_takes_either_shape_without_max_tokens() {
    let inner = minimal(json!({"generationConfig": {"maxOutputTokens": 10}}));
    for body in [
        inner.clone(),
        json!({"generateContentRequest": inner.clone()}),
    ] {
        let (out, asked) = translate_count(body.to_string().as_bytes(), "m").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["messages"], json!([{"role": "user", "content": "Hi"}]));
        assert!(v.get("max_tokens").is_none() && v.get("stream").is_none());
        assert!(!asked.stream);
    }
    let e = translate_count(
        json!({"generateContentRequest": {"contents": [{"role": "x", "parts": []}]}})
            .to_string()
            .as_bytes(),
        "m",
    )
    .unwrap_err();
    assert_eq!(
        e.param.as_deref(),
        Some("generateContentRequest.contents[0].role")
    );
}

#[test]
fn refusals_name_the_gemini_field() {
    let cases = [
        (json!({}), "contents"),
        (
            minimal(json!({"contents": [{"role": "system", "parts": []}]})),
            "contents[0].role",
        ),
        (
            minimal(json!({"contents": [{"role": "user"}]})),
            "contents[0].parts",
        ),
        (
            minimal(json!({"contents": [user(json!([{"text": 1}]))]})),
            "contents[0].parts[0].text",
        ),
        (
            minimal(json!({"contents": [user(json!([{"functionCall": {"name": "f"}}]))]})),
            "contents[0].parts[0].functionCall",
        ),
        (
            minimal(
                json!({"contents": [model(json!([{"functionCall": {"name": "f", "args": [1]}}]))]}),
            ),
            "contents[0].parts[0].functionCall.args",
        ),
        (
            minimal(
                json!({"contents": [user(json!([{"functionResponse": {"name": "f", "response": "x"}}]))]}),
            ),
            "contents[0].parts[0].functionResponse.response",
        ),
        (
            minimal(json!({"contents": [user(json!([{"functionResponse": {"response": {}}}]))]})),
            "contents[0].parts[0].functionResponse.name",
        ),
        (
            minimal(json!({"generationConfig": {"stopSequences": ["a", "b", "c", "d", "e"]}})),
            "generationConfig.stopSequences",
        ),
        (
            minimal(json!({"generationConfig": {"candidateCount": 2}})),
            "generationConfig.candidateCount",
        ),
        (
            minimal(json!({"generationConfig": {"responseMimeType": "text/x.enum"}})),
            "generationConfig.responseMimeType",
        ),
        (
            minimal(json!({"generationConfig": {"thinkingConfig": {"thinkingLevel": "MAX"}}})),
            "generationConfig.thinkingConfig.thinkingLevel",
        ),
        (
            minimal(json!({"generationConfig": {"thinkingConfig": {"thinkingBudget": "lots"}}})),
            "generationConfig.thinkingConfig.thinkingBudget",
        ),
        (
            minimal(json!({"tools": [{"functionDeclarations": [{"name": "f"}, {"name": "f"}]}]})),
            "tools",
        ),
        (
            minimal(json!({"tools": [{"functionDeclarations": [{"description": "x"}]}]})),
            "tools[0].functionDeclarations[0].name",
        ),
        (
            minimal(json!({"tools": [{"functionDeclarations": [{"name": "f"}]}],
                           "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}})),
            "toolConfig.functionCallingConfig.mode",
        ),
        (
            minimal(json!({"systemInstruction": {"parts": [{"inlineData": {}}]}})),
            "systemInstruction.parts[0]",
        ),
    ];
    for (body, param) in cases {
        let (got, message) = refused(body.clone());
        assert_eq!(got, param, "{body}: {message}");
        assert!(!message.is_empty());
    }
    let e = translate(b"[1]", "m", false, false, None).unwrap_err();
    assert_eq!(e.code, "invalid_json");
    let e = translate(br#"{"contents":[],"contents":[]}"#, "m", false, false, None).unwrap_err();
    assert!(e.message.contains("duplicate"), "{}", e.message);
    let e = translate(br#"{"contents":[]}"#, "", false, false, None).unwrap_err();
    assert_eq!(e.param.as_deref(), Some("model"));
    for (chat, gemini) in [
        ("max_tokens", "generationConfig.maxOutputTokens"),
        ("temperature", "generationConfig.temperature"),
        ("top_p", "generationConfig.topP"),
        ("stop", "generationConfig.stopSequences"),
        ("messages[2].content", "contents"),
        ("tools[0].function.parameters", "tools"),
        ("tool_choice", "toolConfig.functionCallingConfig"),
        ("reasoning_effort", "generationConfig.thinkingConfig"),
        ("model", "model"),
    ] {
        assert_eq!(param_name(chat), gemini, "{chat}");
    }
}

#[test]
fn a_model_name_is_written_as_a_json_string() {
    let (out, asked) = translate(
        minimal(json!({})).to_string().as_bytes(),
        "tuned/\"odd\" é",
        false,
        false,
        None,
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["model"], "tuned/\"odd\" é");
    assert_eq!(
        serde_json::from_slice::<Value>(&asked.model).unwrap(),
        v["model"]
    );
}
