//! The validator agrees with the oracle (the serde_json implementation it
//! replaced, [`super::reference`]): for every body, the same finding — the
//! same request and rewritten body, or the same error, message included.
//! Bodies are generated as text, so key order, duplicates, whitespace,
//! escapes and broken grammar all occur.

use proptest::prelude::*;

use super::body::{plain_count, plainly_within};
use super::params::{check_max_tokens, number_in};
use super::reference::{self, validate_reference};
use super::{Param, peek_model_and_stream, validate_chat_request};
use crate::catalog::{Catalog, Model};

fn catalogs() -> [Catalog; 3] {
    let mapped = Catalog::new(vec![Model {
        upstream_id: Some("provider/model \"k3\"".into()),
        ..Model::default_model()
    }])
    .expect("a valid catalogue");
    // The usual name is an alias of another model.
    let aliased = Catalog::new(vec![Model {
        id: "k3-large".into(),
        aliases: vec!["reasoning-model-k3".into()],
        ..Model::default_model()
    }])
    .expect("a valid catalogue");
    [Catalog::default(), mapped, aliased]
}

/// Checks `body` against the oracle with both catalogues; true when it is
/// accepted.
fn agrees(body: &[u8]) -> bool {
    let mut accepted = false;
    for catalog in catalogs() {
        let got = validate_chat_request(body, &catalog);
        assert_eq!(
            got,
            validate_reference(body, &catalog),
            "{}",
            String::from_utf8_lossy(body)
        );
        accepted |= got.is_ok();
    }
    accepted
}

const SMALL: &str = r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"max_tokens":512,"x_sim":{"reasoning_tokens":20,"answer_tokens":10}}"#;

#[test]
fn usual_requests_are_accepted() {
    let long = "Lorem ipsum dolor sit amet, \u{e9}\u{4e2d}\u{6587} \u{1f600}. ".repeat(40);
    let bodies = [
        SMALL.to_owned(),
        SMALL.replace(r#""max_tokens""#, r#""stream":true,"max_tokens""#),
        SMALL.replace(
            r#""max_tokens""#,
            r#""stream":true,"stream_options":{"include_usage":false,"x":1},"max_tokens""#,
        ),
        SMALL.replace(
            r#""max_tokens""#,
            r#""stream":true,"stream_options":{"include_usage":true},"max_tokens""#,
        ),
        serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(SMALL).unwrap())
            .unwrap()
            .replace(r#""max_tokens""#, r#""stream": true, "max_tokens""#),
        format!(
            r#"{{"model":"reasoning-model-k3","messages":[{{"role":"user","content":"{long}"}},{{"role":"assistant","content":"b","reasoning_content":"secret","name":"x"}},{{"role":"user","content":"\u00e9\ud83d\ude00 \"q\" \\ \/ \n"}}],"temperature":0.7,"top_p":1,"stop":["a","b"],"seed":7,"user":"u"}}"#
        ),
        r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"f"}},"stream":true}"#.to_owned(),
        " { \"model\" : \"reasoning-model-k3\" ,\n\"messages\":[ {\"role\":\"assistant\" , \"reasoning_content\" : [1, {\"a\":2}], \"content\" : \"x\" } ] , \"max_completion_tokens\" : 9 } \n"
            .to_owned(),
    ];
    for body in &bodies {
        assert!(agrees(body.as_bytes()), "refused: {body}");
    }
    for (number, max) in [
        ("1.99999999999999", b'2'),
        ("2.00000000000000", b'2'),
        ("0.99999999999999", b'1'),
        ("0", b'1'),
        ("null", b'1'),
    ] {
        assert!(plainly_within(number.as_bytes(), max), "{number}");
    }
    for (number, max) in [
        ("1.999999999999999", b'2'),
        ("2.01", b'2'),
        ("-0.0", b'2'),
        ("1e0", b'2'),
        ("2.000000000000001", b'2'),
        ("1.5", b'1'),
        ("10", b'2'),
    ] {
        assert!(!plainly_within(number.as_bytes(), max), "{number}");
    }
}

#[test]
fn refusals_and_rare_shapes_agree() {
    for body in [
        "",
        "{}",
        "[1]",
        "\u{feff}{}",
        r#"{"model":"reasoning-model-k3","model":"x","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"\ud800"}]}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x","content":"y"}]}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}],}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}]} x"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"a	b"}]}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}],"n":01}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}],"n":1.}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}],"n":-}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"user","content":"x"}],"n":tru}"#,
    ] {
        assert!(!agrees(body.as_bytes()), "accepted: {body}");
    }
    // Escapes in a key and in a role: accepted as their unescaped selves.
    for body in [
        r#"{"mod\u0065l":"reasoning-model-k3","messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"reasoning-model-k3","messages":[{"role":"us\u0065r","content":"x"}]}"#,
    ] {
        assert!(agrees(body.as_bytes()), "refused: {body}");
    }
    // Not UTF-8, inside a string and outside.
    assert!(!agrees(
        b"{\"model\":\"reasoning-model-k3\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"
    ));
    assert!(!agrees(
        b"{\"model\":\"reasoning-model-k3\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}"
    ));
    // Nesting: 128 levels in all are accepted, 129 are not.
    let nest = |n: usize| {
        format!(
            r#"{{"model":"reasoning-model-k3","messages":[{{"role":"user","content":"x"}}],"x":{}1{}}}"#,
            "[".repeat(n),
            "]".repeat(n)
        )
    };
    assert!(agrees(nest(127).as_bytes()));
    assert!(!agrees(nest(128).as_bytes()));
}

/// Every prefix of a request holding every rule's parameters, and every
/// copy with one byte removed: cut off anywhere, the same error.
#[test]
fn every_prefix_and_every_cut_agree() {
    let body = r#"{"model":"reasoning-model-k3","messages":[{"role":"system","content":"s"},
        {"role":"user","content":[{"type":"text","text":"look \u00e9"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]},
        {"role":"assistant","content":null,"reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"c","content":"42"}],
      "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
      "tool_choice":{"type":"function","function":{"name":"f"}},"stop":["a"],
      "stream":true,"stream_options":{"include_usage":false},"temperature":0.5,"top_p":1,
      "max_tokens":5,"x":[1,-2.5e3,true,null,{"\ud83d\ude00":"\/"}]}"#
        .as_bytes();
    assert!(agrees(body));
    for n in 0..body.len() {
        agrees(&body[..n]);
        let mut cut = body.to_vec();
        cut.remove(n);
        agrees(&cut);
    }
}

fn ws() -> impl Strategy<Value = &'static str> + Clone {
    prop_oneof![12 => Just(""), 1 => Just(" "), 1 => Just("\n\t "), 1 => Just("\r")]
}

fn spaces() -> impl Strategy<Value = Vec<&'static str>> + Clone {
    proptest::collection::vec(ws(), 1..8)
}

fn lit(items: &[&str]) -> impl Strategy<Value = String> + Clone + use<> {
    let items: Vec<String> = items.iter().map(|s| (*s).to_owned()).collect();
    proptest::sample::select(items)
}

/// A JSON string literal (quotes included); unless `good`, now and then
/// one the reference refuses.
fn string_lit(good: bool) -> impl Strategy<Value = String> + Clone {
    let fine = prop_oneof![
        12 => "[a-z ,:{}\\[\\]]{1,12}",
        1 => Just("\u{e9}".to_owned()),
        1 => Just("\u{4e2d}\u{1f600}".to_owned()),
        1 => Just("\\n".to_owned()),
        1 => Just("\\\"".to_owned()),
        1 => Just("\\\\".to_owned()),
        1 => Just("\\/".to_owned()),
        1 => Just("\\u00e9".to_owned()),
        1 => Just("\\uD83D\\uDE00".to_owned()),
        1 => Just("\u{7f}".to_owned()),
    ];
    let broken = lit(&[
        "\\ud800",
        "\\udc00x",
        "\\ud83d\\u0041",
        "\\u12g4",
        "\\x",
        "\u{1}",
        "\t",
    ]);
    let piece = prop_oneof![30 => fine, (if good { 0 } else { 1 }) => broken];
    proptest::collection::vec(piece, 0..5).prop_map(|p| format!("\"{}\"", p.concat()))
}

fn number_lit(good: bool) -> impl Strategy<Value = String> + Clone {
    let odd = lit(&[
        "0",
        "-0",
        "-1",
        "1.5",
        "0.95",
        "2",
        "2.0",
        "2.01",
        "-0.1",
        "1e3",
        "1E-2",
        "1e+1",
        "1e999",
        "0.5e1",
        "99999999999999999999999",
        "18446744073709551615",
        "18446744073709551616",
    ]);
    let broken = lit(&["01", "1.", "-", "1e", ".5", "+1", "1.5.2"]);
    prop_oneof![
        8 => (0u32..3000).prop_map(|n| n.to_string()),
        3 => odd,
        (if good { 0 } else { 1 }) => broken,
    ]
}

/// Any JSON value, as text; unless `good`, now and then broken.
fn value(good: bool) -> impl Strategy<Value = String> + Clone {
    let leaf = prop_oneof![
        3 => string_lit(good),
        3 => number_lit(good),
        2 => lit(&["true", "false", "null"]),
        (if good { 0 } else { 1 }) => lit(&["nul", "tru", "", "}", "[1,]", "{\"a\":1,}", "{1:2}"]),
    ];
    leaf.prop_recursive(3, 16, 4, move |inner| {
        prop_oneof![
            (proptest::collection::vec(inner.clone(), 0..4), spaces()).prop_map(|(items, sp)| {
                let w = sp[0];
                format!(
                    "[{w}{}{w}]",
                    items.join(&format!("{w},{}", sp[sp.len() - 1]))
                )
            }),
            (
                proptest::collection::vec((string_lit(good), inner), 0..4),
                spaces()
            )
                .prop_map(|(members, sp)| {
                    let members: Vec<String> = members
                        .into_iter()
                        .enumerate()
                        .map(|(i, (k, v))| format!("{k}{}:{}{v}", sp[i % sp.len()], sp[0]))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
        ]
    })
}

/// An object of `members` (keys written as given), whitespace between its
/// tokens.
fn object(members: Vec<(String, String)>, spaces: Vec<&'static str>) -> String {
    let sp = |i: usize| spaces[i % spaces.len()];
    let inner: Vec<String> = members
        .into_iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let (a, b, c, d) = (sp(4 * i), sp(4 * i + 1), sp(4 * i + 2), sp(4 * i + 3));
            format!("{a}\"{k}\"{b}:{c}{v}{d}")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// `members` shuffled by `order` into an object.
fn shuffled(
    mut members: Vec<(String, String)>,
    order: Vec<proptest::sample::Index>,
    spaces: Vec<&'static str>,
) -> String {
    for (i, at) in order.into_iter().enumerate().take(members.len()) {
        let j = at.index(members.len());
        members.swap(i, j);
    }
    object(members, spaces)
}

/// An index `percent` times in a hundred.
fn sometimes(percent: u32) -> impl Strategy<Value = Option<proptest::sample::Index>> + Clone {
    prop_oneof![
        100 - percent => Just(None),
        percent => any::<proptest::sample::Index>().prop_map(Some),
    ]
}

/// One of `members` written a second time.
fn twice(members: &mut Vec<(String, String)>, which: Option<proptest::sample::Index>) {
    if let Some(i) = which {
        let again = members[i.index(members.len())].clone();
        members.push(again);
    }
}

fn array(items: Vec<String>, spaces: Vec<&'static str>) -> String {
    let w = spaces[0];
    format!(
        "[{w}{}{w}]",
        items.join(&format!("{},", spaces[spaces.len() - 1]))
    )
}

fn good_url() -> impl Strategy<Value = String> + Clone {
    lit(&[
        r#""https://x/y.png""#,
        r#""http://a""#,
        r#""data:image/png;base64,iVBORw0KGgo=""#,
        r#""data:image/jpeg;charset=x;BASE64,/9j/4AAQ+SkZJRg==\n""#,
    ])
}

fn image_url(good: bool) -> impl Strategy<Value = String> + Clone {
    let fine = (
        good_url(),
        proptest::option::of(lit(&[r#""low""#, r#""high""#, "7"])),
        any::<bool>(),
        spaces(),
    )
        .prop_map(|(url, detail, swap, sp)| {
            let mut m = vec![("url".to_owned(), url)];
            if let Some(d) = detail {
                m.push(("detail".to_owned(), d));
                if swap {
                    m.swap(0, 1);
                }
            }
            object(m, sp)
        });
    let odd = lit(&[
        r#"{"url":"https:\/\/x\/y.png"}"#,
        r#"{"url":"file:///etc/passwd"}"#,
        r#"{"url":"data:image/png;base64,@@@"}"#,
        r#"{"url":"https://x","url":"https://y"}"#,
        r#"{"url":"https://x","d":1,"d":2}"#,
        r#"{"url":7}"#,
        r#"{}"#,
        r#""https://x""#,
    ]);
    prop_oneof![
        6 => fine,
        (if good { 0 } else { 2 }) => odd,
        (if good { 0 } else { 1 }) => value(false),
    ]
}

/// A content part; `image` allows image parts.
fn part(good: bool, image: bool) -> impl Strategy<Value = String> + Clone {
    let dup = sometimes(if good { 0 } else { 30 });
    let text = (
        string_lit(good),
        proptest::option::of(value(good)),
        prop::collection::vec(any::<proptest::sample::Index>(), 3),
        spaces(),
        dup,
    )
        .prop_map(|(t, extra, order, sp, dup)| {
            let mut m = vec![
                ("type".to_owned(), r#""text""#.to_owned()),
                ("text".to_owned(), t),
            ];
            if let Some(v) = extra {
                m.push(("cache_control".to_owned(), v));
            }
            twice(&mut m, dup);
            shuffled(m, order, sp)
        });
    let picture = (
        image_url(good),
        prop::collection::vec(any::<proptest::sample::Index>(), 2),
        spaces(),
    )
        .prop_map(|(u, order, sp)| {
            let m = vec![
                ("type".to_owned(), r#""image_url""#.to_owned()),
                ("image_url".to_owned(), u),
            ];
            shuffled(m, order, sp)
        });
    let member = prop_oneof![
        4 => lit(&[r#""text""#, r#""image_url""#, r#""audio""#, r#""te\u0078t""#, "5"])
            .prop_map(|v| ("type".to_owned(), v)),
        3 => string_lit(false).prop_map(|v| ("text".to_owned(), v)),
        1 => value(false).prop_map(|v| ("text".to_owned(), v)),
        3 => image_url(false).prop_map(|v| ("image_url".to_owned(), v)),
        1 => value(false).prop_map(|v| ("cache_control".to_owned(), v)),
    ];
    let anything =
        (proptest::collection::vec(member, 0..4), spaces()).prop_map(|(m, s)| object(m, s));
    prop_oneof![
        6 => text,
        (if image || !good { 3 } else { 0 }) => picture,
        (if good { 0 } else { 3 }) => anything,
        (if good { 0 } else { 1 }) => value(false),
    ]
}

fn content(good: bool, image: bool) -> impl Strategy<Value = String> + Clone {
    prop_oneof![
        6 => string_lit(good),
        3 => (proptest::collection::vec(part(good, image), if good { 1..4 } else { 0..4 }), spaces())
            .prop_map(|(p, sp)| array(p, sp)),
        (if good { 0 } else { 1 }) => Just("null".to_owned()),
        (if good { 0 } else { 1 }) => value(false),
    ]
}

const TOOL_CALLS: &str =
    r#"[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]"#;

/// A message the reference accepts (unless `dups` has one of its members
/// written twice).
fn good_message(dups: bool) -> impl Strategy<Value = String> + Clone {
    let role = lit(&["user", "user", "system", "assistant", "assistant", "tool"]);
    (
        role,
        any::<u8>(),
        string_lit(true),
        value(true),
        prop::collection::vec(any::<proptest::sample::Index>(), 5),
        spaces(),
        sometimes(if dups { 50 } else { 0 }),
    )
        .prop_flat_map(|(role, flags, text, extra, order, sp, dup)| {
            content(true, role == "user").prop_map(move |content| {
                let mut m = vec![("role".to_owned(), format!("\"{role}\""))];
                let tool_calls = role == "assistant" && flags & 1 != 0;
                if tool_calls {
                    m.push(("tool_calls".to_owned(), TOOL_CALLS.to_owned()));
                }
                match flags >> 1 & 3 {
                    0 if role == "assistant" => m.push(("content".to_owned(), "null".to_owned())),
                    1 if tool_calls => {}
                    _ => m.push(("content".to_owned(), content)),
                }
                if role == "tool" {
                    m.push(("tool_call_id".to_owned(), text.clone()));
                } else if flags & 8 != 0 && !tool_calls {
                    m.push(("tool_calls".to_owned(), "null".to_owned()));
                }
                if flags & 16 != 0 {
                    m.push(("reasoning_content".to_owned(), extra.clone()));
                }
                if flags & 32 != 0 {
                    m.push(("name".to_owned(), text.clone()));
                }
                if flags & 64 != 0 {
                    m.push(("x\u{e9}".to_owned(), extra.clone()));
                }
                twice(&mut m, dup);
                shuffled(m, order.clone(), sp.clone())
            })
        })
}

/// A message, often one the reference refuses.
fn any_message() -> impl Strategy<Value = String> + Clone {
    let role = lit(&[
        r#""user""#,
        r#""assistant""#,
        r#""system""#,
        r#""tool""#,
        r#""robot""#,
        r#""us\u0065r""#,
        "null",
    ]);
    let tool_calls = prop_oneof![
        3 => lit(&[
            TOOL_CALLS,
            r#"[{"id":"c","function":{"arguments":"{}"}}]"#,
            r#"[{"a":1,"a":2}]"#,
            "[]",
            "null",
            "{}",
        ]),
        1 => value(false),
    ];
    let member = prop_oneof![
        3 => content(false, true).prop_map(|v| ("content".to_owned(), v)),
        2 => tool_calls.prop_map(|v| ("tool_calls".to_owned(), v)),
        2 => value(false).prop_map(|v| ("tool_call_id".to_owned(), v)),
        2 => value(false).prop_map(|v| ("reasoning_content".to_owned(), v)),
        1 => value(false).prop_map(|v| ("name".to_owned(), v)),
        1 => value(false).prop_map(|v| ("ro\\u006ce".to_owned(), v)),
        2 => role.prop_map(|v| ("role".to_owned(), v)),
    ];
    prop_oneof![
        2 => good_message(false),
        2 => good_message(true),
        4 => (proptest::collection::vec(member, 0..5), spaces()).prop_map(|(m, s)| object(m, s)),
        1 => value(false),
    ]
}

/// Optional top-level members the reference accepts.
fn good_member() -> impl Strategy<Value = (String, String)> + Clone {
    let pick =
        |key: &'static str, values: &[&str]| lit(values).prop_map(move |v| (key.to_owned(), v));
    prop_oneof![
        3 => pick("stream", &["true", "false", "null"]),
        2 => pick("stream_options", &[
            r#"{"include_usage":true}"#,
            r#"{"include_usage":false}"#,
            r#"{"x":[1,2],"include_usage":false}"#,
            r#"{ "include_usage" : false , "y" : {} }"#,
            r#"{"include_\u0075sage":false}"#,
            r#"{"x":1}"#,
            "{}",
            "null",
        ]),
        1 => pick("temperature", &["0", "0.7", "2", "1e0", "null", "2.0"]),
        1 => pick("top_p", &["0", "0.95", "1", "null"]),
        2 => pick("max_tokens", &["1", "512", "18446744073709551615", "null"]),
        1 => pick("max_completion_tokens", &["50", "-1", "1.5", r#""x""#, "null"]),
        1 => pick("stop", &[r#""x""#, r#"["a","b"]"#, "[]", "null"]),
        1 => pick("tools", &[
            r#"[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]"#,
            "null",
        ]),
        1 => pick("tool_choice", &[r#""auto""#, r#""none""#, "null"]),
        2 => value(true).prop_map(|v| ("x_sim".to_owned(), v)),
        1 => value(true).prop_map(|v| ("user".to_owned(), v)),
        1 => value(true).prop_map(|v| ("seed".to_owned(), v)),
        1 => value(true).prop_map(|v| ("\u{e9}t\u{e9}".to_owned(), v)),
    ]
}

/// Any top-level member, often one the reference refuses.
fn any_member() -> impl Strategy<Value = (String, String)> {
    let messages = prop_oneof![
        8 => (proptest::collection::vec(any_message(), 0..4), spaces())
            .prop_map(|(m, sp)| array(m, sp)),
        1 => value(false),
    ];
    let pick =
        |key: &'static str, values: &[&str]| lit(values).prop_map(move |v| (key.to_owned(), v));
    prop_oneof![
        4 => good_member(),
        3 => pick("model", &[
            r#""reasoning-model-k3""#,
            r#""reasoning-model-k\u0033""#,
            r#""gpt-4""#,
            "7",
            "null",
        ]),
        3 => messages.prop_map(|v| ("messages".to_owned(), v)),
        1 => pick("stream", &[r#""yes""#, "1"]),
        1 => pick("stream_options", &[r#"{"include_usage":1}"#, r#"{"a":1,"a":2}"#, "true"]),
        1 => number_lit(false).prop_map(|v| ("temperature".to_owned(), v)),
        1 => number_lit(false).prop_map(|v| ("top_p".to_owned(), v)),
        1 => number_lit(false).prop_map(|v| ("max_tokens".to_owned(), v)),
        1 => pick("stop", &[r#"["a","b","c","d","e"]"#, "[1]", "5"]),
        1 => pick("tools", &[
            r#"[{"type":"function","function":{"name":"a b"}}]"#,
            r#"[{"type":"web"}]"#,
            "[]",
            "{}",
        ]),
        1 => pick("tool_choice", &[
            r#""required""#,
            r#""sometimes""#,
            r#"{"type":"function","function":{"name":"f"}}"#,
            "5",
        ]),
        1 => value(false).prop_map(|v| ("x_sim".to_owned(), v)),
        1 => value(false).prop_map(|v| ("mod\\u0065l".to_owned(), v)),
    ]
}

/// A request the reference accepts: the model, messages and optional
/// members without duplicates, in any order (unless `dups`: a member of
/// the top level or of a message may be written twice).
fn good_body(dups: bool) -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(good_message(dups), 1..5),
        proptest::collection::vec(good_member(), 0..6),
        prop::collection::vec(any::<proptest::sample::Index>(), 8),
        spaces(),
        ws(),
        sometimes(if dups { 30 } else { 0 }),
    )
        .prop_map(|(messages, extra, order, sp, outer, dup)| {
            let mut m = vec![
                ("model".to_owned(), r#""reasoning-model-k3""#.to_owned()),
                ("messages".to_owned(), array(messages, sp.clone())),
            ];
            for (k, v) in extra {
                if !m.iter().any(|(o, _)| *o == k) {
                    m.push((k, v));
                }
            }
            twice(&mut m, dup);
            format!("{outer}{}{outer}", shuffled(m, order, sp))
        })
}

/// Any request: usually the model and messages, then other members; now
/// and then one byte edited.
fn any_body() -> impl Strategy<Value = Vec<u8>> {
    let edit = proptest::option::weighted(
        0.3,
        (
            any::<proptest::sample::Index>(),
            0u8..3,
            proptest::sample::select(b"\"{}[],: \\u0e-.\x01\xc3\xff".to_vec()),
        ),
    );
    let base = prop_oneof![
        2 => good_body(false),
        1 => good_body(true),
        1 => (proptest::collection::vec(any_member(), 0..7), spaces())
            .prop_map(|(m, sp)| object(m, sp)),
        1 => (
            proptest::collection::vec(any_message(), 1..4),
            proptest::collection::vec(any_member(), 0..4),
            spaces(),
        )
            .prop_map(|(messages, mut m, sp)| {
                m.insert(0, ("model".to_owned(), r#""reasoning-model-k3""#.to_owned()));
                m.push(("messages".to_owned(), array(messages, sp.clone())));
                object(m, sp)
            }),
    ];
    (base, edit).prop_map(|(body, edit)| {
        let mut body = body.into_bytes();
        if let Some((at, op, byte)) = edit {
            let i = at.index(body.len());
            match op {
                0 => {
                    body.remove(i);
                }
                1 => body.insert(i, byte),
                _ => body[i] = byte,
            }
        }
        body
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Requests the oracle accepts are accepted, the same way.
    #[test]
    fn accepted_requests_agree(body in good_body(false)) {
        prop_assert!(agrees(body.as_bytes()), "refused: {}", body);
        prop_assert!(validate_reference(body.as_bytes(), &Catalog::default()).is_ok(), "{}", body);
    }

    #[test]
    fn any_request_agrees(body in any_body()) {
        agrees(&body);
        prop_assert_eq!(
            peek_model_and_stream(&body),
            reference::peek_model_and_stream(&body),
            "{}", String::from_utf8_lossy(&body)
        );
    }

    /// The shortcuts for numbers answer as the reference's checks.
    #[test]
    fn number_shortcuts_agree(
        number in "-?[0-3](\\.[0-9]{1,20})?([eE][-+]?[0-9])?|[1-9][0-9]{0,20}|0|null",
    ) {
        for (max, param) in [(b'2', "temperature"), (b'1', "top_p")] {
            if plainly_within(number.as_bytes(), max) {
                let max = f64::from(max - b'0');
                prop_assert!(number_in(number.as_bytes(), Param::root(param), 0.0, max).is_ok(), "{}", number);
            }
        }
        if let Some(n) = plain_count(number.as_bytes()) {
            prop_assert_eq!(check_max_tokens(Some(number.as_bytes()), None), Ok(Some(n)));
        }
    }
}
