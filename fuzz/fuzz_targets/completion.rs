//! `usage::parse_completion`, the structural read of a provider's
//! non-streamed answer: never panics; whatever serde_json accepts as a JSON
//! object is accepted too (no false "garbage" 502), with the same
//! `finish_reason` (the first string one among the choices).
#![no_main]

use chatgate_core::parse_completion;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let got = parse_completion(data);
    if let Ok(Value::Object(obj)) = serde_json::from_slice::<Value>(data) {
        let got = got.expect("a JSON object is not garbage");
        let want = obj
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find_map(|c| c.get("finish_reason")?.as_str()));
        assert_eq!(got.finish_reason.as_deref(), want);
    }
});
