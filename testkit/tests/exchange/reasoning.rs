//! Reasoning through the tool loop, in the exchange: a provider that
//! requires its reasoning back (the simulator as Kimi) is given it from the
//! client, from the memory of what the gateway served (here, or through
//! the shared store from another instance), or as an empty string; a key
//! never gets another's; and the specification's rule (strip) stays the
//! default.

use chatgate_core::reasoning::ReplayMode;
use chatgate_core::{GatewayConfig, Limits, SharedLimits};
use chatgate_sim::{ReplayCheck, SimOptions};
use chatgate_testkit::Pair;
use serde_json::{Value, json};

use super::common::{MODEL, chunks, responses, send};

/// A pair whose model replays reasoning as `mode`, in front of a
/// simulator that requires it back as Kimi does; `shared`: with shared
/// limits (the shared reasoning memory on).
fn pair(mode: ReplayMode, shared: bool) -> Pair {
    Pair::new(
        |c: &mut GatewayConfig| {
            c.reasoning.replay = mode;
            if shared {
                c.shared_limits = Some(SharedLimits { fail_closed: false });
            }
        },
        SimOptions {
            require_reasoning_replay: Some(ReplayCheck::Kimi),
            ..SimOptions::default()
        },
        Limits::default(),
    )
}

const TOOLS: &str = r#""tools":[{"type":"function","function":{"name":"run","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}}]"#;

/// The first turn: the model calls the tool. Its answer's tool call and
/// reasoning, as the client read them.
fn first_turn(pair: &mut Pair, stream: bool) -> (Value, String) {
    let body = format!(
        r#"{{"model":"{MODEL}","stream":{stream},"messages":[{{"role":"user","content":"list the files"}}],{TOOLS}}}"#
    );
    send(pair, &body);
    let r = responses(pair).pop().expect("an answer");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    if !stream {
        let v = r.json();
        let m = &v["choices"][0]["message"];
        return (
            m["tool_calls"][0].clone(),
            m["reasoning_content"].as_str().unwrap().to_owned(),
        );
    }
    let (mut reasoning, mut call) = (String::new(), json!({}));
    for c in chunks(&r) {
        let d = &c["choices"][0]["delta"];
        if let Some(t) = d["reasoning_content"].as_str() {
            reasoning += t;
        }
        if let Some(tc) = d["tool_calls"][0].as_object() {
            if tc.contains_key("id") {
                call = json!({"id": tc["id"], "type": "function", "function": {"name": tc["function"]["name"], "arguments": ""}});
            }
            if let Some(a) = tc["function"]["arguments"].as_str() {
                let args = call["function"]["arguments"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned()
                    + a;
                call["function"]["arguments"] = json!(args);
            }
        }
    }
    (call, reasoning)
}

/// The second turn, the assistant's call sent back with `reasoning`
/// (members of its object, or none), and the tool's result.
fn second_turn(pair: &mut Pair, call: &Value, reasoning: &str) -> chatgate_testkit::ClientResponse {
    let body = format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"list the files"}},{{"role":"assistant","content":null{reasoning},"tool_calls":[{call}]}},{{"role":"tool","tool_call_id":{id},"content":"a.txt"}}],{TOOLS}}}"#,
        id = call["id"]
    );
    let before = responses(pair).len();
    send(pair, &body);
    let all = responses(pair);
    assert_eq!(all.len(), before + 1);
    all.into_iter().last().unwrap()
}

fn replays(pair: &Pair) -> Vec<String> {
    pair.gateway
        .render_metrics(pair.now)
        .lines()
        .filter(|l| l.starts_with("chatgate_reasoning_replay_total{"))
        .map(str::to_owned)
        .collect()
}

/// What the provider was sent last for the assistant message.
fn sent_assistant(pair: &Pair) -> Value {
    let journal = pair.sim.journal();
    let last = journal.last().expect("the provider was asked");
    let body: Value = serde_json::from_str(&last.body).unwrap();
    body["messages"][1].clone()
}

#[test]
fn strip_is_the_default_and_the_provider_refuses_the_next_turn() {
    let mut p = pair(ReplayMode::Strip, false);
    let (call, reasoning) = first_turn(&mut p, true);
    // The client sent its reasoning back; the specification's rule removes
    // it, and a provider that requires it refuses: today's behaviour.
    let r = second_turn(
        &mut p,
        &call,
        &format!(r#","reasoning_content":{}"#, json!(reasoning)),
    );
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    let e = r.json();
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thinking is enabled but reasoning_content is missing in assistant tool call message at index 1"),
        "{e}"
    );
    assert!(sent_assistant(&p).get("reasoning_content").is_none());
    assert!(replays(&p).is_empty());
}

#[test]
fn the_clients_own_reasoning_goes_through_as_sent() {
    let mut p = pair(ReplayMode::ToolCalls, false);
    let (call, reasoning) = first_turn(&mut p, true);
    let own = format!(r#","reasoning_content":{}"#, json!(reasoning));
    let r = second_turn(&mut p, &call, &own);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    // Byte for byte: the body the client sent is the body the provider got
    // (nothing else needed changing).
    let last = p.sim.journal().last().unwrap().body.clone();
    assert!(last.contains(&own), "{last}");
    assert_eq!(
        replays(&p),
        [format!(
            "chatgate_reasoning_replay_total{{model=\"{MODEL}\",source=\"client\"}} 1"
        )]
    );
}

#[test]
fn a_client_that_drops_reasoning_gets_it_from_the_memory() {
    for stream in [true, false] {
        let mut p = pair(ReplayMode::ToolCalls, false);
        let (call, reasoning) = first_turn(&mut p, stream);
        assert!(!reasoning.is_empty());
        // The simulator checks the text is the one it produced for the
        // call: a filled one would be refused.
        let r = second_turn(&mut p, &call, "");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(sent_assistant(&p)["reasoning_content"], reasoning);
        assert_eq!(
            replays(&p),
            [format!(
                "chatgate_reasoning_replay_total{{model=\"{MODEL}\",source=\"memory\"}} 1"
            )]
        );
        let metrics = p.gateway.render_metrics(p.now);
        assert!(
            metrics.contains("chatgate_reasoning_memory_entries 1"),
            "{metrics}"
        );
    }
}

#[test]
fn nothing_known_is_filled_empty_and_another_keys_call_is_not_known() {
    let mut p = pair(ReplayMode::ToolCalls, false);
    // A conversation from elsewhere: calls the gateway never served.
    let call = json!({"id": "call_from_elsewhere", "type": "function", "function": {"name": "run", "arguments": "{}"}});
    let r = second_turn(&mut p, &call, "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(sent_assistant(&p)["reasoning_content"], "");
    assert_eq!(
        replays(&p),
        [format!(
            "chatgate_reasoning_replay_total{{model=\"{MODEL}\",source=\"empty\"}} 1"
        )]
    );
    // A call the gateway served, sent by another key: the memory is the
    // first key's, so the other key's request is filled empty (and the
    // simulator, which knows the call, refuses an empty reasoning).
    let (call, _) = first_turn(&mut p, true);
    let other = chatgate_core::mint_key(&[9; 32]);
    let mut table = String::new();
    for (name, key) in [("test-key", p.key.clone()), ("other-key", other.clone())] {
        table += &chatgate_core::entry_toml(
            name,
            &chatgate_core::key_hash_hex(&key),
            None,
            None,
            "2026-11-22T00:00:00.000Z",
        );
    }
    p.gateway
        .replace_keys(chatgate_core::KeyTable::parse_toml(&table, Limits::default()).unwrap());
    let mine = p.key.clone();
    p.key = other;
    let r = second_turn(&mut p, &call, "");
    assert_eq!(r.status, 502, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(sent_assistant(&p)["reasoning_content"], "");
    p.key = mine;
    let r = second_turn(&mut p, &call, "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn another_instance_restores_through_the_shared_store() {
    let mut a = pair(ReplayMode::ToolCalls, true);
    let (call, reasoning) = first_turn(&mut a, true);
    let store = a.shared_reasoning.clone().unwrap();
    assert_eq!(
        store.len(),
        1,
        "the answer's reasoning went to the shared store"
    );
    // Instance B: the same provider, the same store, an empty memory.
    let mut b = pair(ReplayMode::ToolCalls, true);
    b.sim = std::sync::Arc::clone(&a.sim);
    b.shared_reasoning = Some(store.clone());
    b.key = a.key.clone();
    let r = second_turn(&mut b, &call, "");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(sent_assistant(&b)["reasoning_content"], reasoning);
    // A store that cannot be reached: filled empty, the request goes on
    // (and this simulator, which knows the call, refuses it).
    let mut c = pair(ReplayMode::ToolCalls, true);
    c.sim = std::sync::Arc::clone(&a.sim);
    c.shared_reasoning = None;
    c.key = a.key.clone();
    let r = second_turn(&mut c, &call, "");
    assert_eq!(r.status, 502);
    assert_eq!(sent_assistant(&c)["reasoning_content"], "");
    // A value in the store that is not one JSON string is never spliced.
    let mut d = pair(ReplayMode::ToolCalls, true);
    let mut bad = store;
    for v in bad.values_mut() {
        *v = b"\"unterminated".to_vec();
    }
    d.sim = std::sync::Arc::clone(&a.sim);
    d.shared_reasoning = Some(bad);
    d.key = a.key.clone();
    let r = second_turn(&mut d, &call, "");
    assert_eq!(r.status, 502);
    assert_eq!(sent_assistant(&d)["reasoning_content"], "");
}
