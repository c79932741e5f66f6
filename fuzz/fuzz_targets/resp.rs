//! `redis_protocol::parse_redis_reply`: never panics; a reply parsed from the whole input is
//! "not yet" for every shorter prefix and the same when the input ends
//! right after it; consumed bytes never exceed the input; and encoding the
//! input's pieces as a command parses back to the same bulk strings.
#![no_main]

use chatgate_core::{RedisReplyLimits, RedisReply, encode_redis_command, parse_redis_reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = RedisReplyLimits {
        max_depth: 4,
        max_elements: 64,
        max_bulk: 4096,
    };
    if let Ok(Some((reply, used))) = parse_redis_reply(data, &limits) {
        assert!(used <= data.len());
        for cut in [0, used / 3, used / 2, used.saturating_sub(1)] {
            if cut < used {
                assert_eq!(parse_redis_reply(&data[..cut], &limits), Ok(None), "prefix {cut}");
            }
        }
        assert_eq!(parse_redis_reply(&data[..used], &limits), Ok(Some((reply, used))));
    }
    let args: Vec<&[u8]> = data.split(|b| *b == 0xff).take(16).collect();
    let mut out = Vec::new();
    encode_redis_command(&mut out, &args);
    let big = RedisReplyLimits {
        max_bulk: data.len() + 1,
        ..RedisReplyLimits::default()
    };
    let (back, used) = parse_redis_reply(&out, &big).unwrap().unwrap();
    assert_eq!(used, out.len());
    let want = RedisReply::Array(Some(
        args.iter().map(|a| RedisReply::Bulk(Some(a.to_vec()))).collect(),
    ));
    assert_eq!(back, want);
});
