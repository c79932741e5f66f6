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
        models: Vec::new(),
        ca: None,
        provider: None,
        reasoning_field: None,
        continuation: Default::default(),
    }
}

fn set(weights: &[(&str, u32)]) -> EndpointSet {
    EndpointSet::new(
        weights.iter().map(|(n, w)| endpoint(n, *w)).collect(),
        Catalog::default(),
        None,
    )
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
        let a = s.choose(now, &[], 0, None).unwrap();
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
            let a = s.choose(T0, &[], 0, None).unwrap();
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
    let held: Vec<Attempt> = (0..2)
        .map(|_| s.choose(T0, &[], 0, None).unwrap())
        .collect();
    assert_ne!(name(&held[0]), name(&held[1]), "alternates when equal");
    let slow = s.choose(T0, &[], 0, None).unwrap();
    let slow_name = name(&slow);
    // Now slow_name has two in flight, the other one: the next picks go to
    // the other until the loads are within one request per unit of weight.
    let next = s.choose(T0, &[], 0, None).unwrap();
    assert_ne!(name(&next), slow_name);
    drop((held, slow, next));
    assert!(s.endpoints().iter().all(|e| e.load() == 0), "nothing leaks");
}

#[test]
fn tried_endpoints_are_skipped_and_none_is_left_after_all() {
    let s = set(&[("a", 1), ("b", 1), ("c", 1)]);
    let mut tried = Vec::new();
    for _ in 0..3 {
        let a = s.choose(T0, &tried, 0, None).unwrap();
        assert!(!tried.contains(&a.endpoint().id()));
        tried.push(a.endpoint().id());
        a.finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    assert!(s.choose(T0, &tried, 0, None).is_none());
}

#[test]
fn an_ejected_endpoint_gets_nothing_until_its_trial_and_the_soonest_back_is_tried_when_all_are_out()
{
    let s = set(&[("a", 1), ("b", 1)]);
    let a_id = s.endpoints()[0].id();
    for _ in 0..health::EJECT_AFTER {
        let at = s.choose(T0, &[s.endpoints()[1].id()], 0, None).unwrap();
        at.finish(Outcome::Failed(FailureKind::Status5xx), T0);
    }
    assert_eq!(s.status(T0, WallClock::new(0))[0].state, "ejected");
    assert!(s.any_serving(T0));
    for _ in 0..10 {
        let at = s
            .choose(T0 + Duration::from_millis(500), &[], 0, None)
            .unwrap();
        assert_eq!(name(&at), "b");
    }
    // After the cool-down one request is the trial; meanwhile others go to b.
    let later = T0 + Duration::from_secs(1);
    let trial = s.choose(later, &[s.endpoints()[1].id()], 0, None).unwrap();
    assert_eq!(trial.endpoint().id(), a_id);
    assert_eq!(s.status(later, WallClock::new(0))[0].state, "trial");
    assert_eq!(name(&s.choose(later, &[], 0, None).unwrap()), "b");
    trial.finish(Outcome::Answered, later);
    assert_eq!(s.status(later, WallClock::new(0))[0].state, "healthy");

    // b rate limits for 30 s, a fails three times: both out; a is back first.
    s.choose(later, &[a_id], 0, None)
        .unwrap()
        .finish(Outcome::RetryAfter(Duration::from_secs(30)), later);
    for _ in 0..health::EJECT_AFTER {
        s.choose(later, &[s.endpoints()[1].id()], 0, None)
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Timeout), later);
    }
    assert!(!s.any_serving(later));
    let soonest = s.choose(later, &[], 0, None).unwrap();
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
        s.choose(T0, &[s.endpoints()[1].id()], 0, None)
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    let mut moved = endpoint("b", 1);
    moved.target = Target::parse("http://b2.test/v1").unwrap();
    let next = EndpointSet::new(
        vec![endpoint("a", 1), moved, endpoint("c", 2)],
        Catalog::default(),
        Some(&s),
    );
    assert_eq!(next.endpoints()[0].id(), s.endpoints()[0].id());
    assert_eq!(next.status(T0, WallClock::new(0))[0].state, "ejected");
    assert_ne!(
        next.endpoints()[1].id(),
        s.endpoints()[1].id(),
        "a changed URL is new"
    );
    // An attempt on the old set reports into the endpoint it chose.
    let old = s.choose(T0, &[s.endpoints()[0].id()], 0, None).unwrap();
    assert_eq!(old.endpoint().load(), 1);
    drop(old);
    assert_eq!(s.endpoints()[1].load(), 0);
}

#[test]
fn metrics_and_status_never_show_a_key() {
    let mut e = endpoint("a", 1);
    e.target.api_key = Some(crate::config::Secret::new("sk-endpoint-secret"));
    let s = EndpointSet::new(vec![e], Catalog::default(), None);
    s.choose(T0, &[], 0, None)
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

/// Two models on disjoint endpoints, a third on every one.
fn two_models() -> EndpointSet {
    let model = |id: &str, on: Option<&[&str]>| crate::catalog::Model {
        id: id.into(),
        endpoints: on.map(|names| names.iter().map(|n| (*n).to_owned()).collect()),
        ..crate::catalog::Model::default_model()
    };
    let catalog = Catalog::new(vec![
        model("small", Some(&["a", "b"])),
        model("big", Some(&["c"])),
        model("any", None),
    ])
    .unwrap();
    EndpointSet::new(
        vec![endpoint("a", 1), endpoint("b", 1), endpoint("c", 1)],
        catalog,
        None,
    )
}

#[test]
fn a_model_is_served_by_its_endpoints_only() {
    let s = two_models();
    assert_eq!(
        (s.serving(0), s.serving(1), s.serving(2)),
        (0b011, 0b100, 0b111)
    );
    for _ in 0..20 {
        assert_ne!(name(&s.choose(T0, &[], 0, None).unwrap()), "c");
        assert_eq!(name(&s.choose(T0, &[], 1, None).unwrap()), "c");
    }
    // Its only endpoint tried, a model has no other.
    let c = s.endpoints()[2].id();
    assert!(s.choose(T0, &[c], 1, None).is_none());
    // Even all ejected, another model's endpoint is never tried.
    for _ in 0..health::EJECT_AFTER {
        s.choose(T0, &[], 1, None)
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    assert_eq!(name(&s.choose(T0, &[], 1, None).unwrap()), "c");
    let status = s.status(T0, WallClock::new(0));
    let ids = |i: usize| -> Vec<&str> { status[i].models.iter().map(|m| m.id.as_str()).collect() };
    assert_eq!((ids(0), ids(2)), (vec!["small", "any"], vec!["big", "any"]));
}

#[test]
fn a_conversation_stays_on_one_endpoint_moves_when_it_is_ejected_and_comes_back() {
    let s = set(&[("a", 1), ("b", 1), ("c", 1)]);
    // Fifty conversations spread over the three endpoints, each on one.
    let mut on = std::collections::BTreeMap::new();
    for k in 0..50u64 {
        let key = affinity_hash(format!("conversation-{k}").as_bytes());
        let first = name(&s.choose(T0, &[], 0, Some(key)).unwrap());
        for _ in 0..20 {
            assert_eq!(name(&s.choose(T0, &[], 0, Some(key)).unwrap()), first);
        }
        *on.entry(first).or_insert(0) += 1;
    }
    assert_eq!(on.len(), 3, "spread: {on:?}");
    assert!(on.values().all(|&n| n >= 8), "spread: {on:?}");
    // A conversation on `b`: `b` is ejected, it moves; back, it returns.
    let key = (0..)
        .map(|k: u64| affinity_hash(format!("c{k}").as_bytes()))
        .find(|&key| name(&s.choose(T0, &[], 0, Some(key)).unwrap()) == "b")
        .unwrap();
    let b = s.endpoints()[1].id();
    let others: Vec<u64> = vec![s.endpoints()[0].id(), s.endpoints()[2].id()];
    for _ in 0..health::EJECT_AFTER {
        s.choose(T0, &others, 0, Some(key))
            .unwrap()
            .finish(Outcome::Failed(FailureKind::Connect), T0);
    }
    let moved = name(&s.choose(T0, &[], 0, Some(key)).unwrap());
    assert_ne!(moved, "b");
    for _ in 0..5 {
        assert_eq!(name(&s.choose(T0, &[], 0, Some(key)).unwrap()), moved);
    }
    // Readmitted by its trial: the conversation goes back.
    let later = T0 + Duration::from_secs(60);
    let trial = s.choose(later, &others, 0, None).unwrap();
    assert_eq!(trial.endpoint().id(), b);
    trial.finish(Outcome::Answered, later);
    assert_eq!(name(&s.choose(later, &[], 0, Some(key)).unwrap()), "b");
}

#[test]
fn one_hot_conversation_cannot_overload_its_endpoint() {
    let s = set(&[("a", 1), ("b", 1), ("c", 1)]);
    let key = affinity_hash(b"hot");
    let home = name(&s.choose(T0, &[], 0, Some(key)).unwrap());
    // Thirty requests of it in flight at once: its endpoint takes its
    // bounded share, the others the rest.
    let held: Vec<Attempt> = (0..30)
        .map(|_| s.choose(T0, &[], 0, Some(key)).unwrap())
        .collect();
    let on_home = held.iter().filter(|a| name(a) == home).count();
    // At most twice its share (10 of 30), plus one.
    assert!((15..=21).contains(&on_home), "{on_home} of 30 on {home}");
    assert!(held.iter().all(|a| a.endpoint().load() <= 21));
    drop(held);
    // Idle again: back home.
    assert_eq!(name(&s.choose(T0, &[], 0, Some(key)).unwrap()), home);
}
