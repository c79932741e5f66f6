//! The Responses API's kept responses as read back from a store (a file
//! or a PostgreSQL row anyone with access could have changed): any bytes
//! are refused with a reason or read as a record whose ids are the
//! gateway's, whose input is a JSON array and whose object a response;
//! a record read encodes to the same bytes and reads back the same; its
//! items, the conversation it holds and an input_items page of it are
//! computed without a panic, the page a JSON list. The same input as a
//! request body: what it needs from the store is read without a panic.
#![no_main]

use chatgate_core::dialect::responses::stored::{Page, StoredResponse, context, item_id, wants};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = StoredResponse::decode(data) {
        assert!(record.id.starts_with("resp_"), "{record:?}");
        assert_eq!(record.encode(), data, "canonical");
        assert_eq!(record.bytes(), data.len() as u64, "counted as stored");
        assert_eq!(StoredResponse::decode(&record.encode()), Ok(record.clone()));
        let chain = [record.clone()];
        let items = context(&chain);
        for it in &items {
            if let Some(id) = item_id(it) {
                assert!(record.item(&id).is_some(), "{id}");
            }
        }
        let _ = record.status();
        for query in ["", "order=asc&limit=2", "limit=100&after=x", "before=y"] {
            let page = Page::read(query).expect("a valid query");
            let body: serde_json::Value =
                serde_json::from_slice(&page.body(&items)).expect("a JSON list");
            assert_eq!(body["object"], "list");
            assert!(body["data"].as_array().is_some_and(|d| d.len() <= page.limit));
        }
    }
    if let Ok(w) = wants(data) {
        assert!(w.references.len() <= chatgate_core::dialect::responses::stored::MAX_REFERENCES);
    }
});
