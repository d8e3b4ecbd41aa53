//! Simulations of the diff's verdicts: pairs of samples drawn from one distribution must be
//! called different no more often than the nominal level; a shifted distribution must be
//! detected; a tiny shift in a huge sample must not be called a regression.

use std::collections::BTreeMap;

use aggregate::Latency;
use diff::side::GroupData;
use diff::stats::{mann_whitney, poisson_rates, quantile_test, two_proportions};
use diff::{Key, Settings, Side, Status, Verdict, compare};

/// xorshift64*: deterministic, good enough for simulations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
    /// Log-normal latency in ns: median `median_ns`, log-sd 0.6 (a typical query's spread).
    fn latency(&mut self, median_ns: f64) -> u64 {
        (median_ns * (0.6 * self.normal()).exp()) as u64
    }
    /// Poisson count with mean `lambda` (arrivals in one unit of time).
    fn poisson(&mut self, lambda: f64) -> u64 {
        let (mut t, mut n) = (0.0, 0);
        loop {
            t += -self.uniform().ln() / lambda;
            if t > 1.0 {
                return n;
            }
            n += 1;
        }
    }
}

fn sample(rng: &mut Rng, n: u64, median_ns: f64) -> Latency {
    let mut l = Latency::default();
    (0..n).for_each(|_| l.record(rng.latency(median_ns)));
    l
}

const LEVEL: f64 = 0.05;

/// Nominal level plus three standard errors of a rate estimated from `runs` trials.
fn ceiling(runs: u64) -> f64 {
    LEVEL + 3.0 * (LEVEL * (1.0 - LEVEL) / runs as f64).sqrt()
}

#[test]
fn each_test_holds_its_level_under_the_null() {
    let runs = 2_000u64;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut rejections = [0u64; 7];
    for _ in 0..runs {
        let n1 = 40 + rng.next() % 400;
        let n2 = 40 + rng.next() % 400;
        let (a, b) = (
            sample(&mut rng, n1, 200_000.0),
            sample(&mut rng, n2, 200_000.0),
        );
        let (ba, bb) = (a.bucket_counts(), b.bucket_counts());
        let ps = [
            mann_whitney(&ba, &bb).unwrap().p,
            quantile_test(&ba, &bb, 0.5).unwrap().p,
            quantile_test(&ba, &bb, 0.95).unwrap().p,
            quantile_test(&ba, &bb, 0.99).unwrap().p,
            poisson_rates(rng.poisson(300.0), 1.0, rng.poisson(600.0), 2.0),
            {
                let (e1, e2) = (
                    (0..n1).filter(|_| rng.uniform() < 0.02).count(),
                    (0..n2).filter(|_| rng.uniform() < 0.02).count(),
                );
                two_proportions(e1 as u64, n1, e2 as u64, n2)
            },
            poisson_rates(rng.poisson(5.0), 1.0, rng.poisson(5.0), 1.0),
        ];
        for (r, p) in rejections.iter_mut().zip(ps) {
            *r += u64::from(p < LEVEL);
        }
    }
    let names = [
        "mann_whitney",
        "p50",
        "p95",
        "p99",
        "rate",
        "errors",
        "rate(small)",
    ];
    for (name, r) in names.iter().zip(rejections) {
        let rate = r as f64 / runs as f64;
        println!("{name}: false-positive rate {rate:.4} over {runs} null pairs at level {LEVEL}");
        assert!(rate <= ceiling(runs), "{name}: {rate} > {}", ceiling(runs));
    }
}

fn group(fp: &str, lat: Latency, errors: u64) -> GroupData {
    GroupData {
        fingerprint: fp.to_string(),
        count: lat.count(),
        errors,
        response: lat.clone(),
        service: lat,
    }
}

/// A side of `groups` groups, group `i` with median `(i + 1) * 100 µs` times `factor[i]`.
fn side(rng: &mut Rng, n: u64, factors: &[f64]) -> Side {
    let mut groups = BTreeMap::new();
    let mut totals = group("", Latency::default(), 0);
    for (i, f) in factors.iter().enumerate() {
        let lat = sample(rng, n, (i as f64 + 1.0) * 100_000.0 * f);
        let errors = (0..n).filter(|_| rng.uniform() < 0.01).count() as u64;
        let g = group(&format!("select {i}"), lat, errors);
        totals.count += g.count;
        totals.errors += g.errors;
        totals.service.merge(&g.service);
        totals.response.merge(&g.response);
        let key = Key {
            protocol: "postgres".into(),
            command: "query".into(),
            id: format!("{i:04}"),
        };
        groups.insert(key, g);
    }
    Side {
        label: "sim".into(),
        span_ns: Some(1_000_000_000),
        complete: true,
        groups,
        totals,
        blocks: Default::default(),
    }
}

#[test]
fn a_whole_diff_of_unchanged_traffic_calls_no_regression() {
    let runs = 300u64;
    let mut rng = Rng(42);
    let mut with_regression = 0;
    let mut with_any_significant = 0;
    for _ in 0..runs {
        let flat = [1.0; 20];
        let (b, a) = (side(&mut rng, 200, &flat), side(&mut rng, 200, &flat));
        let d = compare(&b, &a, &Settings::default());
        assert_eq!(
            d.tests,
            20 * 5
                + d.groups
                    .iter()
                    .filter(|g| g.metrics[5].p_value.is_some())
                    .count() as u64
        );
        with_regression += u64::from(d.summary.regressed > 0);
        let sig = |v: Verdict| !matches!(v, Verdict::NoChange | Verdict::NotTested);
        with_any_significant += u64::from(
            d.groups
                .iter()
                .flat_map(|g| &g.metrics)
                .any(|m| sig(m.verdict)),
        );
    }
    let (fw, sig) = (
        with_regression as f64 / runs as f64,
        with_any_significant as f64 / runs as f64,
    );
    println!(
        "diffs of unchanged traffic (20 groups, about 115 tests each): {fw:.3} called a regression, {sig:.3} had any significant test"
    );
    assert!(sig <= ceiling(runs), "family-wise rate {sig}");
    assert!(fw <= sig);
}

#[test]
fn a_shifted_group_is_detected_and_ranked_first() {
    let runs = 100u64;
    let mut rng = Rng(7);
    let mut detected = 0;
    let mut first = 0;
    let mut others = 0;
    for _ in 0..runs {
        let mut after = [1.0; 20];
        // The group with the most load (median 2 ms) is 50% slower: its change in load (about
        // 0.24 s/s) dwarfs the noise of the others (at most about 0.03), so it ranks first.
        after[19] = 1.5;
        let (b, a) = (side(&mut rng, 200, &[1.0; 20]), side(&mut rng, 200, &after));
        let d = compare(&b, &a, &Settings::default());
        let g = d.groups.iter().find(|g| g.id == "0019").unwrap();
        detected += u64::from(g.status == Status::Regressed);
        first += u64::from(d.groups[0].id == "0019");
        others += d
            .groups
            .iter()
            .filter(|g| g.id != "0019" && g.status == Status::Regressed)
            .count();
    }
    println!(
        "50% slower group: detected in {detected}/{runs}, ranked first in {first}/{runs}; {others} other groups called regressed"
    );
    assert!(detected >= 95, "{detected}");
    assert!(first >= 90, "{first}");
    assert!(others <= 5, "{others}");
}

#[test]
fn a_tiny_change_in_a_huge_sample_is_significant_but_not_a_regression() {
    let mut rng = Rng(99);
    let b = side(&mut rng, 200_000, &[1.0]);
    let a = side(&mut rng, 200_000, &[1.03]);
    let d = compare(&b, &a, &Settings::default());
    let mean = &d.groups[0].metrics[1];
    assert_eq!(mean.name, "shift");
    assert!(mean.p_adjusted.unwrap() < 1e-6, "{mean:?}");
    assert_eq!(mean.verdict, Verdict::Small);
    assert_eq!(d.groups[0].status, Status::Unchanged);
    let strict = Settings {
        min_change: 0.01,
        ..Settings::default()
    };
    assert_eq!(compare(&b, &a, &strict).groups[0].status, Status::Regressed);
}

#[test]
fn new_and_gone_groups() {
    let mut rng = Rng(5);
    let b = side(&mut rng, 50, &[1.0, 1.0]);
    let mut a = side(&mut rng, 50, &[1.0, 1.0, 1.0]);
    a.groups.remove(&Key {
        protocol: "postgres".into(),
        command: "query".into(),
        id: "0000".into(),
    });
    let d = compare(&b, &a, &Settings::default());
    let st = |id: &str| d.groups.iter().find(|g| g.id == id).unwrap().status;
    assert_eq!((st("0000"), st("0002")), (Status::Gone, Status::New));
    assert_eq!((d.summary.new, d.summary.gone), (1, 1));
    assert!(d.summary.line.contains("1 new") && d.summary.line.contains("1 gone"));
}

/// A side of 5 groups over one second, every request slowed by the factor of its 50 ms spell
/// (log-normal, log-sd 0.3: another process on the CPU, a checkpoint): requests of one moment
/// are alike, as in real traffic.
fn clustered_side(rng: &mut Rng, n: u64, with_blocks: bool, slower: f64) -> Side {
    let mut s = side(rng, 0, &[1.0; 5]);
    let mut blocks = diff::blocks::Blocks::new(0);
    let mut spell = (u64::MAX, 1.0);
    for i in 0..n {
        let ts = i * 1_000_000_000 / n;
        if ts / 50_000_000 != spell.0 {
            spell = (ts / 50_000_000, (0.3 * rng.normal()).exp());
        }
        let g = (i % 5) as usize;
        let f = if g == 4 { slower } else { 1.0 };
        let ns = (rng.latency((g as f64 + 1.0) * 100_000.0 * f) as f64 * spell.1) as u64;
        let key = Key {
            protocol: "postgres".into(),
            command: "query".into(),
            id: format!("{g:04}"),
        };
        if let Some(gd) = s.groups.get_mut(&key) {
            gd.count += 1;
            gd.service.record(ns);
            gd.response.record(ns);
        }
        s.totals.count += 1;
        s.totals.service.record(ns);
        blocks.record(ts, ns);
    }
    if with_blocks {
        s.blocks = blocks;
    }
    s
}

#[test]
fn clustered_requests_are_not_called_regressions_once_the_design_effect_is_applied() {
    let runs = 100u64;
    let mut rng = Rng(2024);
    let (mut naive, mut corrected) = (0u64, 0u64);
    for _ in 0..runs {
        let seed = rng.next();
        let (mut r1, mut r2) = (Rng(seed | 1), Rng(seed | 1));
        let (b, a) = (
            clustered_side(&mut r1, 3_000, false, 1.0),
            clustered_side(&mut r1, 3_000, false, 1.0),
        );
        let (bb, ab) = (
            clustered_side(&mut r2, 3_000, true, 1.0),
            clustered_side(&mut r2, 3_000, true, 1.0),
        );
        let s = Settings::default();
        naive += u64::from(compare(&b, &a, &s).summary.regressed > 0);
        corrected += u64::from(compare(&bb, &ab, &s).summary.regressed > 0);
    }
    println!(
        "clustered null pairs: {naive}/{runs} called a regression as independent requests, \
         {corrected}/{runs} with the design effect"
    );
    assert!(
        corrected as f64 / runs as f64 <= ceiling(runs),
        "{corrected}"
    );
    assert!(
        naive >= 3 * corrected.max(5),
        "the simulation should show the problem: {naive}"
    );
}

#[test]
fn a_slower_group_is_still_found_among_clustered_requests() {
    let runs = 50u64;
    let mut rng = Rng(77);
    let mut found = 0;
    for _ in 0..runs {
        let b = clustered_side(&mut rng, 3_000, true, 1.0);
        let a = clustered_side(&mut rng, 3_000, true, 2.0);
        let d = compare(&b, &a, &Settings::default());
        let g = d.groups.iter().find(|g| g.id == "0004").unwrap();
        found += u64::from(g.status == Status::Regressed);
    }
    println!("twice as slow group among clustered requests: found in {found}/{runs}");
    assert!(found >= 45, "{found}");
}
