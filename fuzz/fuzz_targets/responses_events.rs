//! The chat stream as the Responses event stream. The input is a sequence
//! of chat chunk payloads (separated by blank lines), fed one per call or
//! several per call; the output is the same either way, and well-formed:
//! each event's data a JSON object whose `type` is its `event:` name,
//! `sequence_number` counting from 0, one last event (completed,
//! incomplete or failed) and nothing after it, every item added once and
//! done once before it; and the same bytes without the same-shape
//! shortcut. With `include` asking for it, every reasoning item done holds
//! its text sealed, and it opens to the item's summary. An answer past the
//! translation's budget ends as a failed one.
#![no_main]

use chatgate_core::dialect::responses::events::{End, ResponseStream};
use chatgate_core::dialect::responses::request::Asked;
use chatgate_fuzz::{Rng, carry};
use libfuzzer_sys::fuzz_target;

/// The translation, and whether it went past the budget.
fn run(chunks: &[&[u8]], groups: &mut Rng, fail: bool, sealed: bool, shortcut: bool) -> (Vec<u8>, bool) {
    let asked = Asked {
        encrypted_reasoning: sealed,
        ..Asked::default()
    };
    let mut s = ResponseStream::new(asked, "req_00ff", 1, carry());
    if !shortcut {
        s = s.without_shortcut();
    }
    let mut out = Vec::new();
    let mut i = 0;
    let mut over = false;
    'feed: while i < chunks.len() {
        let n = 1 + groups.upto(3);
        let mut part = Vec::new();
        for c in &chunks[i..(i + n).min(chunks.len())] {
            if s.chunk(c, &mut part).is_err() {
                out.extend_from_slice(&part);
                over = true;
                break 'feed;
            }
        }
        out.extend_from_slice(&part);
        i += n;
    }
    let end = if fail || over { End::Failed("cut") } else { End::Finished(None) };
    s.end(end, None, &mut out);
    (out, over)
}

fuzz_target!(|data: &[u8]| {
    let fail = data.first().is_some_and(|b| b & 1 == 1);
    let sealed = data.first().is_some_and(|b| b & 2 == 2);
    let chunks: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|c| !c.is_empty())
        .collect();
    let (one, over) = run(&chunks, &mut Rng::from_prefix(&[0]), fail, sealed, true);
    let grouped = run(&chunks, &mut Rng::from_prefix(data), fail, sealed, true);
    assert_eq!((&one, over), (&grouped.0, grouped.1), "the same however the chunks are grouped");
    let slow = run(&chunks, &mut Rng::from_prefix(&[0]), fail, sealed, false);
    assert_eq!((&one, over), (&slow.0, slow.1), "the same-shape shortcut changes nothing");
    let fail = fail || over;
    let seal = carry().seal;

    let text = std::str::from_utf8(&one).expect("UTF-8 out");
    let mut open = std::collections::BTreeSet::new();
    let mut ended = false;
    for (seq, block) in text.split("\n\n").filter(|b| !b.is_empty()).enumerate() {
        assert!(!ended, "nothing after the last event");
        let (event, data) = block.split_once('\n').expect("event and data lines");
        let name = event.strip_prefix("event: ").expect("event line");
        let data = data.strip_prefix("data: ").expect("one data line");
        assert!(!data.contains('\n'), "one data line");
        let v: serde_json::Value = serde_json::from_str(data)
            .unwrap_or_else(|e| panic!("{e}: {data}"));
        assert_eq!(v["type"], name);
        assert_eq!(v["sequence_number"], seq as u64);
        match name {
            "response.output_item.added" => {
                assert!(open.insert(v["output_index"].as_u64().unwrap()), "added once");
            }
            "response.output_item.done" => {
                assert!(open.remove(&v["output_index"].as_u64().unwrap()), "done once, after added");
                let item = &v["item"];
                if item["type"] == "reasoning" {
                    let summary = item["summary"][0]["text"].as_str().expect("its text");
                    match item["encrypted_content"].as_str() {
                        Some(s) => {
                            assert!(sealed, "sealed only when asked");
                            let opened = seal.open(s.as_bytes()).expect("it opens");
                            assert_eq!(opened, summary.as_bytes(), "its own text");
                        }
                        None => assert!(!sealed, "sealed when asked: {item}"),
                    }
                }
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                assert!(open.is_empty(), "every item done before the end");
                assert_eq!(name == "response.failed", fail);
                ended = true;
            }
            _ => {}
        }
    }
    assert!(ended, "a last event");
});
