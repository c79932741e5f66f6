//! The chat stream as the Responses event stream. The input is a sequence
//! of chat chunk payloads (separated by blank lines), fed one per call or
//! several per call; the output is the same either way, and well-formed:
//! each event's data a JSON object whose `type` is its `event:` name,
//! `sequence_number` counting from 0, one last event (completed,
//! incomplete or failed) and nothing after it, every item added once and
//! done once before it; and the same bytes without the same-shape
//! shortcut.
#![no_main]

use chatgate_core::dialect::responses::events::{End, ResponseStream};
use chatgate_core::dialect::responses::request::Asked;
use chatgate_fuzz::Rng;
use libfuzzer_sys::fuzz_target;

fn run(chunks: &[&[u8]], groups: &mut Rng, fail: bool, shortcut: bool) -> Vec<u8> {
    let mut s = ResponseStream::new(Asked::default(), "req_00ff", 1);
    if !shortcut {
        s = s.without_shortcut();
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < chunks.len() {
        let n = 1 + groups.upto(3);
        let mut part = Vec::new();
        for c in &chunks[i..(i + n).min(chunks.len())] {
            s.chunk(c, &mut part);
        }
        out.extend_from_slice(&part);
        i += n;
    }
    let end = if fail { End::Failed("cut") } else { End::Finished(None) };
    s.end(end, None, &mut out);
    out
}

fuzz_target!(|data: &[u8]| {
    let fail = data.first().is_some_and(|b| b & 1 == 1);
    let chunks: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|c| !c.is_empty())
        .collect();
    let one = run(&chunks, &mut Rng::from_prefix(&[0]), fail, true);
    let grouped = run(&chunks, &mut Rng::from_prefix(data), fail, true);
    assert_eq!(one, grouped, "the same however the chunks are grouped");
    let slow = run(&chunks, &mut Rng::from_prefix(&[0]), fail, false);
    assert_eq!(one, slow, "the same-shape shortcut changes nothing");

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
