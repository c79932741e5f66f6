//! core/examples/blocking.rs serves real requests with std threads and
//! sockets only: the core needs no async runtime.

use chatgate_tests::*;

#[test]
fn the_blocking_example_serves_streams_and_meters_them() {
    let sim = Sim::start("chatgate-smol", &[], &[]);
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let ledger = dir.path().join("ledger.jsonl");
    let (code, out, err) = run(
        "chatgate-smol",
        &[
            "keys",
            "new",
            "--keys",
            &keys.to_string_lossy(),
            "--name",
            "sync",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let key = out.lines().next().unwrap().to_owned();
    let args = vec![
        "127.0.0.1:0".to_owned(),
        sim.url(),
        keys.to_string_lossy().into_owned(),
        ledger.to_string_lossy().into_owned(),
    ];
    let mut p = Proc::spawn("examples/blocking", &args, &[], &dir.path().join("stderr"));
    let line = p.line();
    let addr: std::net::SocketAddr = line
        .trim_start_matches("listening on http://")
        .trim_end_matches("/v1")
        .parse()
        .unwrap();
    let r = request(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(&stream_body("")),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    assert_eq!(
        String::from_utf8_lossy(&r.body),
        sim.settled(0)["response"].as_str().unwrap()
    );
    let r = request(
        addr,
        "POST",
        "/v1/chat/completions",
        Some(&key),
        Some(&body("")),
    );
    assert!(r.json()["choices"][0]["message"]["reasoning_content"].is_string());
    assert_eq!(request(addr, "GET", "/v1/models", None, None).status, 401);
    eventually("two ledger lines", || {
        std::fs::read_to_string(&ledger).map_or(0, |t| t.lines().count()) == 2
    });
    // One access line per metered request, from its ledger record.
    let log = p.stderr_when("two access lines", |t| {
        t.matches("access: request ").count() == 2
    });
    assert!(log.contains(" status=200 stream=true "), "{log}");
    assert!(log.contains(" status=200 stream=false "), "{log}");
}
