//! A week of synthetic minutes (random latencies recorded into real aggregators keyed by
//! `STORE_DIMS`), written with re-written and late minutes, rolled up; for random ranges the
//! store's counts, errors and percentiles equal those of one aggregator fed the same events.

mod common;

use std::collections::BTreeMap;

use aggregate::{AggConfig, Aggregator, GroupKey};
use common::*;
use store::{Filter, GroupQuery, GroupRef, RangeQuery, SortBy, Store, StoreConfig, TopQuery};

/// (group, server, start ns, service ns, error code)
type Ev = (usize, usize, u64, u64, Option<u32>);

const DAY: i64 = 86_400;

fn week(t0: i64, r: &mut Rng) -> BTreeMap<i64, Vec<Ev>> {
    let mut out = BTreeMap::new();
    for m in 0..7 * 1_440i64 {
        let minute = t0 + m * 60;
        // Busier in some hours so that some rows keep raw samples and others a histogram.
        let busy = (m / 60) % 5 == 0;
        let n = r.below(if busy { 120 } else { 12 });
        let evs = (0..n)
            .map(|_| {
                let g = (r.below(10) as usize).min(3);
                let err = (r.below(40) == 0).then(|| [1064u32, 1213][r.below(2) as usize]);
                let start = minute as u64 * 1_000_000_000 + r.below(60_000_000_000);
                (g, r.below(2) as usize, start, latency(r), err)
            })
            .collect();
        out.insert(minute, evs);
    }
    out
}

fn agg_of(evs: &[Ev]) -> Aggregator {
    let mut a = new_agg();
    for &(g, s, start, lat, err) in evs {
        add(&mut a, g, &event(g, s, start, lat, err));
    }
    a
}

/// The reference: one aggregator by group (fingerprint only) fed every event in `[from, to)`.
fn reference(all: &BTreeMap<i64, Vec<Ev>>, from: i64, to: i64) -> Aggregator {
    let mut a = Aggregator::new(AggConfig::default());
    for evs in all.range(from..to).map(|(_, v)| v) {
        for &(g, s, start, lat, err) in evs {
            let ev = event(g, s, start, lat, err);
            let key = GroupKey {
                protocol: ev.protocol,
                command: ev.command,
                fingerprint_hash: g as u64,
            };
            a.add(&ev, key, || (GROUPS[g].2.to_string(), group_id(g)));
        }
    }
    a
}

fn us(v: Option<u64>) -> Option<f64> {
    v.map(|n| n as f64 / 1_000.0)
}

/// Writes the week: every minute in order except that some minutes are split in two writes
/// (merge), the last minute of every 7th hour is written after the next hour began (late for
/// the hour rollup) and the last minute of day 2 after day 3 began (late for the day rollup).
fn write_week(st: &mut Store, all: &BTreeMap<i64, Vec<Ev>>, t0: i64) {
    let mut held: Vec<(i64, i64)> = Vec::new(); // (write after this minute, minute)
    let day2_last = (t0.div_euclid(DAY) + 3) * DAY - 60;
    for (&m, evs) in all {
        let late_hour = m % 3_600 == 3_540 && (m / 3_600) % 7 == 0;
        if late_hour || m == day2_last {
            held.push((m + if m == day2_last { 7_200 } else { 120 }, m));
        } else if (m / 60) % 13 == 0 && evs.len() > 1 {
            let (a, b) = evs.split_at(evs.len() / 2);
            st.write_minute(m, &agg_of(a)).unwrap();
            st.write_minute(m, &agg_of(b)).unwrap();
        } else {
            st.write_minute(m, &agg_of(evs)).unwrap();
        }
        held.retain(|&(after, hm)| {
            if after > m {
                return true;
            }
            st.write_minute(hm, &agg_of(&all[&hm])).unwrap();
            false
        });
    }
    for (_, hm) in held {
        st.write_minute(hm, &agg_of(&all[&hm])).unwrap();
    }
    st.finish().unwrap();
}

fn check_range(st: &Store, all: &BTreeMap<i64, Vec<Ev>>, from_s: i64, to_s: i64) {
    let range = RangeQuery {
        from_s,
        to_s,
        filter: Filter::default(),
    };
    let top = st
        .top(&TopQuery {
            range: range.clone(),
            sort: SortBy::Count,
            limit: 0,
            spark_points: 50,
        })
        .unwrap();
    let want = reference(all, top.from, top.to);
    assert_eq!(top.from, from_s.div_euclid(60) * 60);
    assert_eq!(
        top.totals.count,
        want.totals().stats.count,
        "{from_s}..{to_s}"
    );
    assert_eq!(top.totals.errors, want.totals().stats.errors);
    assert_eq!(top.groups.len(), want.groups().count());
    let secs = (top.to - top.from) as f64;
    for g in want.groups() {
        let row = top
            .groups
            .iter()
            .find(|r| r.id == g.id)
            .expect("group in top");
        let s = &g.stats;
        assert_eq!((row.count, row.errors), (s.count, s.errors), "{}", g.id);
        let [p50, p95, p99] = s.service.quantiles_ns([0.5, 0.95, 0.99]);
        assert_eq!(
            [row.p50_us, row.p95_us, row.p99_us, row.max_us],
            [us(p50), us(p95), us(p99), us(s.service.max_ns())],
            "{} {from_s}..{to_s}",
            g.id
        );
        assert_eq!(row.bytes_out, s.bytes_out.sum as u64);
        // The sparkline holds the group's whole load.
        let spark: f64 = row.spark.iter().sum::<f64>() * top.step_s as f64;
        assert!(
            (spark - row.load * secs).abs() < 1e-6 * (1.0 + spark),
            "{spark} {}",
            row.load
        );
        let ga = st
            .group(&GroupQuery {
                range: range.clone(),
                group: GroupRef {
                    protocol: row.protocol.clone(),
                    command: row.command.clone(),
                    id: row.id.clone(),
                },
                points: 100,
            })
            .unwrap();
        assert_eq!((ga.summary.count, ga.summary.errors), (s.count, s.errors));
        assert_eq!(ga.summary.p99_us, us(p99));
        assert_eq!(ga.series.iter().map(|p| p.count).sum::<u64>(), s.count);
        let cells: u64 = ga.heatmap.cells.iter().flatten().sum();
        assert_eq!(cells, s.service.count());
        let errs: u64 = ga.errors.iter().map(|e| e.count).sum();
        assert_eq!(
            errs,
            s.errors_by_code
                .sorted()
                .iter()
                .map(|e| e.count)
                .sum::<u64>()
        );
        assert_eq!(ga.group.fingerprint, g.fingerprint);
    }
    let side = st.side(&range, "a").unwrap();
    assert_eq!(side.totals.count, want.totals().stats.count);
    for g in want.groups() {
        let k = side
            .groups
            .iter()
            .find(|(k, _)| k.id == g.id)
            .expect("group in side")
            .1;
        assert_eq!(k.service, g.stats.service);
        assert_eq!(k.response, g.stats.latency);
    }
}

#[test]
fn a_week_of_minutes_reads_back_exactly() {
    let dir = std::env::temp_dir().join(format!("dbtap-store-week-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("history.db");
    let _ = std::fs::remove_file(&path);
    let mut r = Rng(0x5eed_1234);
    let t0 = 1_700_000_000i64.div_euclid(DAY) * DAY + 13 * 3_600 + 25 * 60;
    let all = week(t0, &mut r);
    let mut st = Store::open(&path, StoreConfig::default()).unwrap();
    write_week(&mut st, &all, t0);
    let stats = st.stats().unwrap();
    assert!(stats.day_rows > 0 && stats.hour_rows > 0, "{stats:?}");
    let end = t0 + 7 * DAY;
    assert_eq!(st.span().unwrap(), Some((t0, end)));
    // Whole store, whole days, hour-aligned, and random ranges with unaligned ends.
    check_range(&st, &all, t0, end);
    check_range(&st, &all, (t0 / DAY + 1) * DAY, (t0 / DAY + 4) * DAY);
    check_range(
        &st,
        &all,
        t0 + 2 * DAY - 3_600 * 5,
        t0 + 2 * DAY + 3_600 * 7 + 17,
    );
    for _ in 0..12 {
        let a = t0 + r.below(7 * DAY as u64) as i64;
        let len = [61, 3_600, 5 * 3_600 + 7, DAY, 3 * DAY + 4_000][r.below(5) as usize];
        check_range(&st, &all, a, (a + len).min(end));
    }
    drop(st);
    let _ = std::fs::remove_dir_all(&dir);
}
