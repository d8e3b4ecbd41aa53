//! Aggregation tests: exact arithmetic, merge equals add-all, percentile error, group bound.

use std::net::SocketAddr;
use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, GroupKey, Stats};
use proptest::prelude::*;
use proto::{DbError, Endpoint, Outcome, Protocol, QueryEvent};

fn addr(s: &str) -> Endpoint {
    s.parse::<SocketAddr>()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
        .into()
}

fn event(start_ns: u64, latency_ns: Option<u64>) -> QueryEvent {
    QueryEvent {
        protocol: Protocol::Mysql,
        conn: 1,
        client: addr("10.0.0.1:40000"),
        server: addr("10.0.0.9:3306"),
        start_ns,
        first_response_ns: latency_ns.map(|l| start_ns + l / 2),
        end_ns: latency_ns.map(|l| start_ns + l),
        service_start_ns: latency_ns.map(|_| start_ns),
        user: Some(Arc::from("app")),
        database: Some(Arc::from("shop")),
        command: "query",
        text: Some(Arc::from("SELECT 1")),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 10,
        bytes_out: 100,
        rows_sent: 1,
        rows_affected: 0,
        warnings: 0,
        outcome: if latency_ns.is_some() {
            Outcome::Ok
        } else {
            Outcome::NoResponse
        },
        error: None,
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

fn key(h: u64) -> GroupKey {
    GroupKey {
        protocol: Protocol::Mysql,
        command: "query",
        fingerprint_hash: h,
    }
}

fn describe(h: u64) -> impl FnOnce() -> (String, String) {
    move || (format!("select ? from t{h}"), format!("{h:016X}"))
}

#[test]
fn tcprstat_vector() {
    // shared/reference/fingerprint-vectors.md §6.4: 100, 200, 300, 400, 1000 µs.
    let mut agg = Aggregator::new(AggConfig::default());
    for (i, us) in [100u64, 200, 300, 400, 1000].into_iter().enumerate() {
        agg.add(
            &event(1_000_000_000 + i as u64, Some(us * 1000)),
            key(1),
            describe(1),
        );
    }
    let l = &agg.totals().stats.latency;
    assert_eq!(l.count(), 5);
    assert_eq!(l.min_ns(), Some(100_000));
    assert_eq!(l.max_ns(), Some(1_000_000));
    assert_eq!(l.sum_ns(), 2_000_000);
    assert_eq!(l.mean_ns(), Some(400_000.0));
    assert_eq!(l.quantile_ns(0.5), Some(300_000)); // median at index 2
    let g = agg.groups().next().map(|g| g.stats.latency.clone());
    assert_eq!(g.as_ref(), Some(l));
}

#[test]
fn count_only_events_are_counted_without_time() {
    let mut agg = Aggregator::new(AggConfig::default());
    agg.add(&event(1_000, Some(5_000)), key(1), describe(1));
    let mut folded = event(1_000, Some(5_000));
    folded.timed = false;
    folded.rows_sent = 0;
    agg.add(&folded, key(2), describe(2));
    let t = &agg.totals().stats;
    assert_eq!((t.count, t.ok), (2, 2));
    assert_eq!((t.latency.count(), t.latency.sum_ns()), (1, 5_000));
    assert_eq!(t.ttfb.count, 1);
    let g = agg.group(&key(2)).map(|g| &g.stats);
    assert_eq!(
        g.map(|s| (s.count, s.ok, s.latency.count())),
        Some((1, 1, 0))
    );
    assert_eq!(g.map(|s| (s.latency.sum_ns(), s.ttfb.count)), Some((0, 0)));
    assert_eq!(g.map(|s| s.bytes_out.sum), Some(100));
    assert_eq!(
        g.and_then(|s| s.example.as_ref()).map(|e| e.latency_ns),
        Some(None)
    );
}

#[test]
fn exact_arithmetic_on_known_set() {
    let mut agg = Aggregator::new(AggConfig {
        max_groups: 10,
        keep_examples: true,
    });
    let mut calls = 0;
    let mut e1 = event(1_000, Some(5_000));
    e1.rows_sent = 3;
    e1.bytes_in = 40;
    let mut e2 = event(2_000, Some(9_000));
    e2.outcome = Outcome::Error;
    e2.error = Some(DbError {
        code: 1064,
        state: Some("42000".into()),
        message: "syntax A".into(),
    });
    e2.rows_sent = 0;
    e2.rows_affected = 0;
    e2.client = addr("10.0.0.2:5000");
    e2.text = Some(Arc::from("SELECT slow"));
    let mut e3 = event(3_000, None);
    e3.database = None;
    let mut e4 = event(4_000, Some(1_000));
    e4.outcome = Outcome::Error;
    e4.error = Some(DbError {
        code: 1064,
        state: Some("42000".into()),
        message: "syntax B".into(),
    });
    e4.rows_affected = 7;
    let mut e5 = event(5_000, Some(2_000));
    e5.outcome = Outcome::Incomplete;
    for e in [&e1, &e2, &e3, &e4, &e5] {
        agg.add(e, key(7), || {
            calls += 1;
            ("select ?".into(), "ABC".into())
        });
    }
    assert_eq!(calls, 1, "describe is called once per new group");
    let g = agg
        .groups()
        .next()
        .map(|g| (g.id.clone(), g.fingerprint.clone(), g.stats.clone()));
    let Some((id, fp, s)) = g else {
        panic!("one group expected");
    };
    assert_eq!((id.as_str(), fp.as_str()), ("ABC", "select ?"));
    assert_eq!(s.count, 5);
    assert_eq!(s.ok, 1);
    assert_eq!(s.errors, 2);
    assert_eq!(s.no_response, 1);
    assert_eq!(s.incomplete, 1);
    assert_eq!(
        s.latency.count(),
        4,
        "NoResponse is not in the latency stats"
    );
    assert_eq!(s.latency.sum_ns(), 17_000);
    assert_eq!(s.latency.min_ns(), Some(1_000));
    assert_eq!(s.latency.max_ns(), Some(9_000));
    assert_eq!(s.ttfb.count, 4);
    assert_eq!(s.ttfb.sum, 8_500);
    assert_eq!(s.bytes_in.sum, 80);
    assert_eq!(s.bytes_out.sum, 500);
    assert_eq!(s.rows_sent.sum, 6); // 3 + 0 + 1 + 1 + 1
    assert_eq!(s.rows_affected.sum, 7);
    assert_eq!(s.first_seen_ns, Some(1_000));
    assert_eq!(s.last_seen_ns, Some(11_000)); // e2 ends at 2_000 + 9_000
    let errs = s.errors_by_code.sorted();
    assert_eq!(errs.len(), 1);
    assert_eq!(
        (errs[0].code, errs[0].count, &*errs[0].message),
        (1064, 2, "syntax A")
    );
    let (dbs, rest) = s.databases.top(16);
    assert_eq!(rest, 0);
    assert_eq!(dbs.len(), 2);
    assert_eq!((dbs[0].0.as_deref(), dbs[0].1), (Some("shop"), 4));
    assert_eq!((dbs[1].0.as_deref(), dbs[1].1), (None, 1));
    let (clients, _) = s.clients.top(16);
    assert_eq!(clients.len(), 2);
    let ex = s.example.clone();
    assert_eq!(ex.as_ref().and_then(|e| e.latency_ns), Some(9_000));
    assert_eq!(
        ex.as_ref().and_then(|e| e.text.as_deref()),
        Some("SELECT slow")
    );
    assert_eq!(agg.totals().stats, s);
    assert_eq!(agg.totals().unique_groups, 1);
}

#[test]
fn no_examples_when_disabled() {
    let mut agg = Aggregator::new(AggConfig {
        max_groups: 10,
        keep_examples: false,
    });
    agg.add(&event(1, Some(1)), key(1), describe(1));
    assert!(agg.groups().all(|g| g.stats.example.is_none()));
}

#[test]
fn max_groups_bound() {
    let mut agg = Aggregator::new(AggConfig {
        max_groups: 3,
        keep_examples: true,
    });
    let mut described = 0;
    for i in 0..100u64 {
        agg.add(&event(i, Some(1000 + i)), key(i % 10), || {
            described += 1;
            (format!("fp{i}"), format!("{i}"))
        });
    }
    assert_eq!(described, 3);
    assert_eq!(agg.groups().count(), 4);
    assert_eq!(agg.totals().unique_groups, 3);
    assert_eq!(agg.totals().overflow_events, 70);
    assert_eq!(agg.totals().stats.count, 100);
    let o = agg
        .overflow()
        .map(|g| (g.id.clone(), g.overflow, g.stats.count));
    assert_eq!(o, Some(("other".to_string(), true, 70)));
    let sum: u64 = agg.groups().map(|g| g.stats.count).sum();
    assert_eq!(sum, 100);

    // Merging two full aggregators keeps the bound.
    let mut b = Aggregator::new(AggConfig {
        max_groups: 3,
        keep_examples: true,
    });
    for i in 0..50u64 {
        b.add(&event(i, Some(5)), key(100 + i % 5), describe(100 + i % 5));
    }
    agg.merge(&b);
    assert_eq!(agg.groups().count(), 4);
    assert_eq!(agg.totals().overflow_events, 120);
    assert_eq!(agg.totals().stats.count, 150);
    assert_eq!(agg.groups().map(|g| g.stats.count).sum::<u64>(), 150);
}

/// A small deterministic PRNG (xorshift64*) so the error test needs no extra dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[test]
fn percentile_relative_error_below_one_percent() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for trial in 0..5 {
        let mut lat = aggregate::Latency::default();
        let mut exact = Vec::new();
        let n = 10_000 + trial * 7_919;
        for _ in 0..n {
            // Log-uniform between 1 µs and 100 s, the range database latencies live in.
            let v = (1e3 * 10f64.powf(8.0 * rng.unit())) as u64;
            lat.record(v);
            exact.push(v);
        }
        exact.sort_unstable();
        assert!(!lat.is_exact());
        let mut worst: f64 = 0.0;
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1.0] {
            let truth = exact[aggregate::latency::nearest_rank(q, exact.len()) - 1] as f64;
            let got = lat.quantile_ns(q).map_or(f64::NAN, |v| v as f64);
            let err = (got - truth).abs() / truth;
            worst = worst.max(err);
            assert!(err <= 0.01, "q={q}: got {got}, exact {truth}, error {err}");
        }
        // The bucket midpoint keeps the error within half a bucket: 1/256.
        assert!(worst <= 1.0 / 256.0 + 1e-9, "worst error {worst}");
    }
}

#[test]
fn small_groups_have_exact_percentiles() {
    let mut lat = aggregate::Latency::default();
    for v in (1..=50u64).rev() {
        lat.record(v * 1_000_003);
    }
    assert!(lat.is_exact());
    assert_eq!(
        lat.quantiles_ns([0.5, 0.95, 0.99]),
        [Some(25_000_075), Some(48_000_144), Some(50_000_150)]
    );
}

fn arb_event() -> impl Strategy<Value = (u64, QueryEvent)> {
    (
        0u64..6,
        0u64..1_000_000_000,
        prop::option::weighted(0.9, 0u64..5_000_000_000),
        0u8..4,
        0u16..4,
        0u64..5000,
        0u32..3,
        0u64..2_000_000_000,
    )
        .prop_map(|(k, start, lat, db, host, rows, err, queue)| {
            let mut e = event(start, lat);
            // Part of the response time spent queueing behind earlier requests.
            e.service_start_ns = e.end_ns.map(|end| (start + queue).min(end));
            e.database = (db > 0).then(|| Arc::from(format!("db{db}")));
            e.user = (db != 1).then(|| Arc::from("u"));
            e.client = SocketAddr::from(([10, 0, 0, host as u8], 1000 + host)).into();
            e.rows_sent = rows;
            e.rows_affected = rows / 3;
            e.warnings = rows % 4 / 2;
            e.bytes_out = rows * 17;
            if err > 0 && lat.is_some() {
                e.outcome = Outcome::Error;
                e.error = Some(DbError {
                    code: 1000 + err,
                    state: None,
                    message: format!("m{start}").into(),
                });
            }
            (k, e)
        })
}

fn snapshot(a: &Aggregator) -> (Vec<(GroupKey, String, String, Stats)>, aggregate::Totals) {
    let mut g: Vec<_> = a
        .groups()
        .map(|g| (g.key, g.fingerprint.clone(), g.id.clone(), g.stats.clone()))
        .collect();
    g.sort_by_key(|x| x.0);
    (g, a.totals().clone())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn merge_equals_add_all(events in prop::collection::vec(arb_event(), 0..400), split in 0usize..400) {
        let split = split.min(events.len());
        let cfg = AggConfig { max_groups: 100, keep_examples: true };
        let mut all = Aggregator::new(cfg.clone());
        for (k, e) in &events {
            all.add(e, key(*k), describe(*k));
        }
        let mut a = Aggregator::new(cfg.clone());
        let mut b = Aggregator::new(cfg.clone());
        for (k, e) in &events[..split] {
            a.add(e, key(*k), describe(*k));
        }
        for (k, e) in &events[split..] {
            b.add(e, key(*k), describe(*k));
        }
        a.merge(&b);
        prop_assert_eq!(snapshot(&a), snapshot(&all));
        for g in a.groups() {
            let h = all.group(&g.key).map(|h| h.stats.latency.quantiles_ns([0.5, 0.95, 0.99]));
            prop_assert_eq!(Some(g.stats.latency.quantiles_ns([0.5, 0.95, 0.99])), h);
            let h = all.group(&g.key).map(|h| (h.stats.service.sum_ns(), h.stats.service.quantiles_ns([0.5, 0.95, 0.99])));
            prop_assert_eq!(Some((g.stats.service.sum_ns(), g.stats.service.quantiles_ns([0.5, 0.95, 0.99]))), h);
        }
        let (ta, tall) = (&a.totals().stats.service, &all.totals().stats.service);
        prop_assert_eq!((ta.count(), ta.sum_ns(), ta.min_ns(), ta.max_ns()), (tall.count(), tall.sum_ns(), tall.min_ns(), tall.max_ns()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Scaling by n (the estimate from a 1-in-n connection sample) equals seeing every event n times.
    #[test]
    fn scale_equals_repeating_every_event(events in prop::collection::vec(arb_event(), 0..150), n in 1u64..12) {
        let cfg = AggConfig { max_groups: 100, keep_examples: true };
        let mut scaled = Aggregator::new(cfg.clone());
        let mut repeated = Aggregator::new(cfg);
        for (k, e) in &events {
            scaled.add(e, key(*k), describe(*k));
            for _ in 0..n {
                repeated.add(e, key(*k), describe(*k));
            }
        }
        scaled.scale(n);
        prop_assert_eq!(snapshot(&scaled), snapshot(&repeated));
        for g in scaled.groups() {
            let h = repeated.group(&g.key).map(|h| h.stats.latency.quantiles_ns([0.5, 0.95, 0.99]));
            prop_assert_eq!(Some(g.stats.latency.quantiles_ns([0.5, 0.95, 0.99])), h);
            let h = repeated.group(&g.key).map(|h| h.stats.service.quantiles_ns([0.5, 0.95, 0.99]));
            prop_assert_eq!(Some(g.stats.service.quantiles_ns([0.5, 0.95, 0.99])), h);
        }
    }
}

#[test]
fn service_time_is_kept_beside_response_time() {
    // Three pipelined requests: response 10, 15, 29 µs; service 10, 5, 15 µs; one unanswered.
    let mut agg = Aggregator::new(AggConfig::default());
    for (start, end, svc_start) in [(100, 110, 100), (100, 115, 110), (101, 130, 115)] {
        let mut e = event(start * 1000, Some((end - start) * 1000));
        e.service_start_ns = Some(svc_start * 1000);
        agg.add(&e, key(1), describe(1));
    }
    let mut unanswered = event(200_000, None);
    unanswered.service_start_ns = None;
    agg.add(&unanswered, key(1), describe(1));
    let s = &agg.totals().stats;
    assert_eq!(s.count, 4);
    assert_eq!((s.latency.count(), s.latency.sum_ns()), (3, 54_000));
    assert_eq!((s.service.count(), s.service.sum_ns()), (3, 30_000));
    assert_eq!(s.service.min_ns(), Some(5_000));
    assert_eq!(s.service.max_ns(), Some(15_000));
    assert_eq!(
        s.service.quantiles_ns([0.5, 0.99]),
        [Some(10_000), Some(15_000)]
    );
    let g = agg.groups().next().map(|g| g.stats.service.sum_ns());
    assert_eq!(g, Some(30_000));
    // The slowest example (by response time) carries its service time too.
    let ex = s.example.as_ref().map(|e| (e.latency_ns, e.service_ns));
    assert_eq!(ex, Some((Some(29_000), Some(15_000))));
}
