use std::time::Duration;

use super::*;
use crate::config::Target;

const T0: Instant = Instant::ZERO;

fn endpoint(name: &str, weight: u32) -> EndpointConfig {
    EndpointConfig {
        name: name.to_owned(),
        target: Target::parse(&format!("http://{name}.test/v1")).unwrap(),
        weight,
        model: None,
        ca: None,
    }
}

fn set(weights: &[(&str, u32)]) -> EndpointSet {
    EndpointSet::new(weights.iter().map(|(n, w)| endpoint(n, *w)).collect(), None)
}

fn name(a: &Attempt) -> String {
    a.endpoint().name().to_owned()
}

fn counts(s: &EndpointSet, n: usize, now: Instant) -> Vec<(String, usize)> {
    let mut counts: Vec<(String, usize)> = s
        .endpoints()
        .iter()
        .map(|e| (e.name().to_owned(), 0))
        .collect();
    for _ in 0..n {
        let a = s.choose(now, &[]).unwrap();
        let i = counts.iter().position(|(n, _)| *n == name(&a)).unwrap();
        counts[i].1 += 1;
        a.finish(Outcome::Answered, now);
    }
    counts
}

#[test]
fn weights_are_exact_over_every_cycle_and_spread_out() {
    let s = set(&[("a", 1), ("b", 2), ("c", 3)]);
    assert_eq!(
        counts(&s, 3000, T0),
        [("a".into(), 500), ("b".into(), 1000), ("c".into(), 1500)]
    );
    // Smooth: in one cycle of 6, c never gets three in a row.
    let order: Vec<String> = (0..6)
        .map(|_| {
            let a = s.choose(T0, &[]).unwrap();
            name(&a)
        })
        .collect();
    assert!(
        !order.windows(3).any(|w| w.iter().all(|n| n == "c")),
        "{order:?}"
    );
}

#[test]
fn a_request_goes_to_the_least_loaded_when_the_chosen_one_is_busier() {
    let s = set(&[("a", 1), ("b", 1)]);
    // Four requests stay in flight on whichever is chosen first.
    let held: Vec<Attempt> = (0..2).map(|_| s.choose(T0, &[]).unwrap()).collect();
    assert_ne!(name(&held[0]), name(&held[1]), "alternates when equal");
    let slow = s.choose(T0, &[]).unwrap();
    let slow_name = name(&slow);
    // Now slow_name has two in flight, the other one: the next picks go to
    // the other until the loads are within one request per unit of weight.
    let next = s.choose(T0, &[]).unwrap();
    assert_ne!(name(&next), slow_name);
    drop((held, slow, next));
    assert!(s.endpoints().iter().all(|e| e.load() == 0), "nothing leaks");
}

#[test]
fn tried_endpoints_are_skipped_and_none_is_left_after_all() {
    let s = set(&[("a", 1), ("b", 1), ("c", 1)]);
    let mut tried = Vec::new();
    for _ in 0..3 {
        let a = s.choose(T0, &tried).unwrap();
        assert!(!tried.contains(&a.endpoint().id()));
        tried.push(a.endpoint().id());
        a.finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    assert!(s.choose(T0, &tried).is_none());
}

#[test]
fn an_ejected_endpoint_gets_nothing_until_its_trial_and_the_soonest_back_is_tried_when_all_are_out()
{
    let s = set(&[("a", 1), ("b", 1)]);
    let a_id = s.endpoints()[0].id();
    for _ in 0..health::EJECT_AFTER {
        let at = s.choose(T0, &[s.endpoints()[1].id()]).unwrap();
        at.finish(Outcome::Failed(FailureKind::Status5xx), T0);
    }
    assert_eq!(s.status(T0, WallClock::new(0))[0].state, "ejected");
    assert!(s.any_serving(T0));
    for _ in 0..10 {
        let at = s.choose(T0 + Duration::from_millis(500), &[]).unwrap();
        assert_eq!(name(&at), "b");
    }
    // After the cool-down one request is the trial; meanwhile others go to b.
    let later = T0 + Duration::from_secs(1);
    let trial = s.choose(later, &[s.endpoints()[1].id()]).unwrap();
    assert_eq!(trial.endpoint().id(), a_id);
    assert_eq!(s.status(later, WallClock::new(0))[0].state, "trial");
    assert_eq!(name(&s.choose(later, &[]).unwrap()), "b");
    trial.finish(Outcome::Answered, later);
    assert_eq!(s.status(later, WallClock::new(0))[0].state, "healthy");

    // b rate limits for 30 s, a fails three times: both out; a is back first.
    s.choose(later, &[a_id])
        .unwrap()
        .finish(Outcome::RetryAfter(Duration::from_secs(30)), later);
    for _ in 0..health::EJECT_AFTER {
        s.choose(later, &[s.endpoints()[1].id()])
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Timeout), later);
    }
    assert!(!s.any_serving(later));
    let soonest = s.choose(later, &[]).unwrap();
    assert_eq!(
        soonest.endpoint().id(),
        a_id,
        "a comes back in 1 s, b in 30 s"
    );
    let status = s.status(later, WallClock::new(0));
    assert_eq!(status[1].reason, Some("retry_after"));
    assert!(status[1].ejected_until.is_some());
    assert_eq!(status[0].failures["timeout"], 3);
}

#[test]
fn a_reload_keeps_unchanged_endpoints_and_their_health() {
    let s = set(&[("a", 1), ("b", 1)]);
    for _ in 0..health::EJECT_AFTER {
        s.choose(T0, &[s.endpoints()[1].id()])
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    let mut moved = endpoint("b", 1);
    moved.target = Target::parse("http://b2.test/v1").unwrap();
    let next = EndpointSet::new(vec![endpoint("a", 1), moved, endpoint("c", 2)], Some(&s));
    assert_eq!(next.endpoints()[0].id(), s.endpoints()[0].id());
    assert_eq!(next.status(T0, WallClock::new(0))[0].state, "ejected");
    assert_ne!(
        next.endpoints()[1].id(),
        s.endpoints()[1].id(),
        "a changed URL is new"
    );
    // An attempt on the old set reports into the endpoint it chose.
    let old = s.choose(T0, &[s.endpoints()[0].id()]).unwrap();
    assert_eq!(old.endpoint().load(), 1);
    drop(old);
    assert_eq!(s.endpoints()[1].load(), 0);
}

#[test]
fn metrics_and_status_never_show_a_key() {
    let mut e = endpoint("a", 1);
    e.target.api_key = Some(crate::config::Secret::new("sk-endpoint-secret"));
    let s = EndpointSet::new(vec![e], None);
    s.choose(T0, &[])
        .unwrap()
        .finish(Outcome::Failed(FailureKind::Reset), T0);
    let mut text = String::new();
    s.render_metrics(&mut text);
    assert!(text.contains("chatgate_upstream_failures_total{endpoint=\"a\",kind=\"reset\"} 1"));
    assert!(text.contains("chatgate_upstream_state{endpoint=\"a\",state=\"healthy\"} 1"));
    let status = serde_json::to_string(&s.status(T0, WallClock::new(0))).unwrap();
    for shown in [text.as_str(), status.as_str(), &format!("{:?}", s)] {
        assert!(!shown.contains("sk-endpoint-secret"), "{shown}");
    }
    assert!(
        s.endpoints()[0]
            .prefix()
            .windows(18)
            .any(|w| w == b"sk-endpoint-secret")
    );
}
