//! The store's API: minutes merge, filters and search, examples only when enabled, errors by
//! code, and the JSON field names of the answers.

mod common;

use common::*;
use store::{Filter, GroupQuery, GroupRef, RangeQuery, SortBy, Store, StoreConfig, TopQuery};

const T0: i64 = 1_700_000_040;

fn range(from_s: i64, to_s: i64) -> RangeQuery {
    RangeQuery {
        from_s,
        to_s,
        filter: Filter::default(),
    }
}

fn top(st: &Store, r: RangeQuery, sort: SortBy) -> store::TopAnswer {
    st.top(&TopQuery {
        range: r,
        sort,
        limit: 10,
        spark_points: 3,
    })
    .unwrap()
}

/// Three minutes of 200 events each; returns the store and the aggregator of all of them.
fn three_minutes(cfg: StoreConfig) -> (Store, aggregate::Aggregator) {
    let mut st = Store::memory(cfg).unwrap();
    let mut all = new_agg();
    let mut r = Rng(42);
    for m in 0..3 {
        let mut agg = new_agg();
        for i in 0..200u64 {
            let g = r.below(4) as usize;
            let s = (T0 + m * 60) as u64 * 1_000_000_000 + i * 1_000_000;
            let err = (i % 50 == 7).then_some(1146);
            let ev = event(g, i as usize % 2, s, latency(&mut r), err);
            add(&mut agg, g, &ev);
            add(&mut all, g, &ev);
        }
        let w = st.write_minute(T0 + m * 60, &agg).unwrap();
        assert_eq!(w.rows, 8);
        assert_eq!(w.merged, 0);
    }
    (st, all)
}

#[test]
fn writes_minutes_and_reads_top() {
    let (st, all) = three_minutes(StoreConfig::default());
    assert_eq!(st.span().unwrap(), Some((T0, T0 + 180)));
    let t = top(&st, range(T0, T0 + 180), SortBy::Load);
    assert_eq!(t.totals.count, 600);
    assert_eq!(t.totals.errors, all.totals().stats.errors);
    assert_eq!(t.groups.len(), 4);
    assert!(
        t.groups
            .windows(2)
            .all(|w| w[0].service_sum_us >= w[1].service_sum_us)
    );
    let share: f64 = t.groups.iter().map(|g| g.share).sum();
    assert!((share - 1.0).abs() < 1e-9);
    assert_eq!(t.groups[0].spark.len(), 3);
    let s = st.stats().unwrap();
    assert_eq!((s.minute_rows, s.series), (3 * 8, 8));
    // Rounded out to whole minutes, echoed.
    let t = top(&st, range(T0 + 10, T0 + 70), SortBy::Count);
    assert_eq!((t.from, t.to, t.totals.count), (T0, T0 + 120, 400));
    let limited = st
        .top(&TopQuery {
            range: range(T0, T0 + 180),
            sort: SortBy::Errors,
            limit: 1,
            spark_points: 1,
        })
        .unwrap();
    assert_eq!((limited.groups.len(), limited.omitted), (1, 3));
}

#[test]
fn rewriting_a_minute_merges_into_it() {
    let mut st = Store::memory(StoreConfig::default()).unwrap();
    let mut r = Rng(7);
    let (mut a, mut b, mut both) = (new_agg(), new_agg(), new_agg());
    for i in 0..300u64 {
        let ev = event(0, 0, T0 as u64 * 1_000_000_000 + i, latency(&mut r), None);
        add(if i % 3 == 0 { &mut a } else { &mut b }, 0, &ev);
        add(&mut both, 0, &ev);
    }
    st.write_minute(T0, &a).unwrap();
    let w = st.write_minute(T0, &b).unwrap();
    assert_eq!((w.rows, w.merged), (1, 1));
    let t = top(&st, range(T0, T0 + 60), SortBy::Load);
    let s = &both.groups().next().unwrap().stats;
    let [p50, p95, p99] = s.service.quantiles_ns([0.5, 0.95, 0.99]);
    let us = |v: Option<u64>| v.map(|n| n as f64 / 1e3);
    let g = &t.groups[0];
    assert_eq!(g.count, 300);
    assert_eq!([g.p50_us, g.p95_us, g.p99_us], [us(p50), us(p95), us(p99)]);
    assert_eq!(st.stats().unwrap().minute_rows, 1);
    assert!(st.write_minute(T0 + 1, &a).is_err());
    assert!(st.write_minute(-60, &a).is_err());
    assert!(st.write_minute(i64::MAX / 60 * 60, &a).is_err());
}

#[test]
fn filters_and_search() {
    let (st, all) = three_minutes(StoreConfig::default());
    let mut r = range(T0, T0 + 180);
    r.filter.server = Some(SERVERS[1].to_string());
    let t = top(&st, r.clone(), SortBy::Load);
    let want = all
        .groups()
        .filter(|g| {
            g.dims
                .as_ref()
                .unwrap()
                .server
                .as_ref()
                .unwrap()
                .to_string()
                == SERVERS[1]
        })
        .map(|g| g.stats.count)
        .sum::<u64>();
    assert_eq!(t.totals.count, want);
    r.filter.database = Some("shop".into()); // server 1 is "crm"
    assert_eq!(top(&st, r, SortBy::Load).totals.count, 0);
    let mut r = range(T0, T0 + 180);
    r.filter.search = Some("from ORDERS".into());
    let t = top(&st, r.clone(), SortBy::Load);
    assert_eq!(t.groups.len(), 1);
    assert_eq!(t.groups[0].fingerprint, GROUPS[2].2);
    r.filter.search = None;
    r.filter.protocol = Some("redis".into());
    let t = top(&st, r.clone(), SortBy::Load);
    assert!(t.groups.iter().all(|g| g.protocol == "redis"));
    let d = st.dims(&range(T0, T0 + 180)).unwrap();
    let servers = &d.dims["server"];
    assert_eq!(servers.len(), 2);
    assert_eq!(servers.iter().map(|s| s.count).sum::<u64>(), 600);
    assert_eq!(d.dims["user"][0].value, "app");
}

#[test]
fn group_answer_and_examples() {
    let (st, all) = three_minutes(StoreConfig::default());
    let g0 = all.groups().find(|g| g.id == group_id(0)).unwrap();
    let q = GroupQuery {
        range: range(T0, T0 + 180),
        group: GroupRef {
            protocol: "mysql".into(),
            command: "query".into(),
            id: group_id(0),
        },
        points: 3,
    };
    let a = st.group(&q).unwrap();
    let count: u64 = all
        .groups()
        .filter(|g| g.id == group_id(0))
        .map(|g| g.stats.count)
        .sum();
    assert_eq!(a.summary.count, count);
    assert_eq!(a.series.len(), 3);
    assert_eq!(a.step_s, 60);
    assert_eq!(a.heatmap.cells.len(), 3);
    assert_eq!(a.heatmap.bounds_us.len(), a.heatmap.cells[0].len() + 1);
    assert_eq!(a.group.fingerprint, g0.fingerprint);
    assert!(
        a.examples
            .iter()
            .any(|e| e.kind == "slowest" && !e.text.is_empty())
    );
    if a.summary.errors > 0 {
        assert_eq!(a.errors[0].code, 1146);
        assert_eq!(a.errors[0].message, "error 1146");
    }
    let d: u64 = a.distribution.iter().map(|b| b.count).sum();
    assert_eq!(d, count);
    // Examples off: none kept.
    let (st, _) = three_minutes(StoreConfig {
        examples: false,
        ..StoreConfig::default()
    });
    assert!(st.group(&q).unwrap().examples.is_empty());
}

#[test]
fn answers_have_the_api_field_names() {
    let (st, _) = three_minutes(StoreConfig::default());
    let keys = |v: &serde_json::Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let t = serde_json::to_value(top(&st, range(T0, T0 + 180), SortBy::Load)).unwrap();
    assert_eq!(
        keys(&t),
        ["from", "groups", "omitted", "step_s", "to", "totals"]
    );
    assert_eq!(
        keys(&t["totals"]),
        ["count", "errors", "load", "service_sum_us"]
    );
    assert_eq!(
        keys(&t["groups"][0]),
        [
            "bytes_in",
            "bytes_out",
            "command",
            "count",
            "errors",
            "fingerprint",
            "id",
            "load",
            "max_us",
            "p50_us",
            "p95_us",
            "p99_us",
            "protocol",
            "rows",
            "service_sum_us",
            "share",
            "spark"
        ]
    );
    let d = serde_json::to_value(st.dims(&range(T0, T0 + 180)).unwrap()).unwrap();
    assert_eq!(
        keys(&d["dims"]),
        ["client", "database", "protocol", "server", "user"]
    );
    assert_eq!(
        keys(&d["dims"]["server"][0]),
        ["count", "service_sum_us", "share", "value"]
    );
    let g = st
        .group(&GroupQuery {
            range: range(T0, T0 + 180),
            group: GroupRef {
                protocol: "mysql".into(),
                command: "query".into(),
                id: group_id(0),
            },
            points: 3,
        })
        .unwrap();
    let g = serde_json::to_value(g).unwrap();
    assert_eq!(
        keys(&g),
        [
            "dims",
            "distribution",
            "errors",
            "examples",
            "from",
            "group",
            "heatmap",
            "series",
            "step_s",
            "summary",
            "to"
        ]
    );
    assert_eq!(
        keys(&g["group"]),
        [
            "command",
            "fingerprint",
            "first_seen",
            "id",
            "last_seen",
            "protocol"
        ]
    );
    assert_eq!(
        keys(&g["series"][0]),
        [
            "bytes_in",
            "bytes_out",
            "count",
            "errors",
            "p50_us",
            "p95_us",
            "p99_us",
            "rows",
            "service_sum_us",
            "ts"
        ]
    );
    assert_eq!(keys(&g["heatmap"]), ["bounds_us", "cells"]);
    assert_eq!(keys(&g["distribution"][0]), ["count", "hi_us", "lo_us"]);
    assert_eq!(
        keys(&g["examples"][0]),
        [
            "client",
            "code",
            "database",
            "kind",
            "latency_us",
            "message",
            "text",
            "ts",
            "user"
        ]
    );
}

#[test]
fn side_compares_with_diff() {
    let (st, _) = three_minutes(StoreConfig::default());
    let a = st.side(&range(T0, T0 + 60), "a").unwrap();
    let b = st.side(&range(T0 + 60, T0 + 180), "b").unwrap();
    assert_eq!(a.span_ns, Some(60_000_000_000));
    assert_eq!(a.totals.count + b.totals.count, 600);
    let d = diff::compare(&a, &b, &diff::Settings::default());
    assert!(!d.groups.is_empty());
}

#[test]
fn store_is_send_and_refuses_other_files() {
    fn send<T: Send>() {}
    send::<Store>();
    let dir = std::env::temp_dir().join(format!("dbtap-store-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h.db");
    let _ = std::fs::remove_file(&path);
    drop(Store::open(&path, StoreConfig::default()).unwrap());
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
        [],
    )
    .unwrap();
    drop(c);
    let e = Store::open(&path, StoreConfig::default()).err().unwrap();
    assert!(e.to_string().contains("version 99"), "{e}");
    assert!(!e.to_string().contains('\n'));
    std::fs::write(&path, b"not a database at all, just bytes").unwrap();
    assert!(Store::open_read_only(&path).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn minutes_after_finish_merge_into_the_rolled_up_rows() {
    let (mut st, _) = three_minutes(StoreConfig::default());
    st.finish().unwrap();
    let before = top(&st, range(T0 - 3_600, T0 + 86_400), SortBy::Load)
        .totals
        .count;
    let mut agg = new_agg();
    let mut r = Rng(3);
    for i in 0..10u64 {
        let ev = event(
            1,
            0,
            (T0 + 120) as u64 * 1_000_000_000 + i,
            latency(&mut r),
            None,
        );
        add(&mut agg, 1, &ev);
    }
    st.write_minute(T0 + 120, &agg).unwrap();
    // A whole-day range reads the day row: it holds the late minute too.
    let day = T0.div_euclid(86_400) * 86_400;
    let d = top(&st, range(day, day + 86_400), SortBy::Load);
    assert_eq!(d.totals.count, before + 10);
    assert_eq!(
        top(&st, range(T0 + 120, T0 + 180), SortBy::Load)
            .totals
            .count,
        210
    );
}

#[test]
fn extreme_ranges_and_points_do_not_panic() {
    let (st, _) = three_minutes(StoreConfig::default());
    for (a, b) in [
        (i64::MIN, i64::MAX),
        (i64::MAX, i64::MIN),
        (T0, T0),
        (-5, 5),
    ] {
        let t = st
            .top(&TopQuery {
                range: range(a, b),
                sort: SortBy::P99,
                limit: usize::MAX,
                spark_points: usize::MAX,
            })
            .unwrap();
        assert!(
            t.groups
                .iter()
                .all(|g| g.spark.len() <= store::MAX_POINTS + 1)
        );
        let g = st
            .group(&GroupQuery {
                range: range(a, b),
                group: GroupRef::default(),
                points: usize::MAX,
            })
            .unwrap();
        assert!(g.series.len() <= store::MAX_POINTS + 1);
        st.dims(&range(a, b)).unwrap();
        st.side(&range(a, b), "x").unwrap();
    }
}

#[test]
fn dims_show_twenty_values_then_other_and_unknown_as_dash() {
    let mut st = Store::memory(StoreConfig::default()).unwrap();
    let mut agg = new_agg();
    let mut r = Rng(11);
    for i in 0..250u64 {
        let mut ev = event(0, 0, T0 as u64 * 1_000_000_000 + i, latency(&mut r), None);
        ev.server = format!("10.0.1.{}:3306", i % 25).parse().unwrap();
        if i % 5 == 0 {
            ev.database = None;
        }
        add(&mut agg, 0, &ev);
    }
    st.write_minute(T0, &agg).unwrap();
    let d = st.dims(&range(T0, T0 + 60)).unwrap();
    let servers = &d.dims["server"];
    assert_eq!(servers.len(), 21);
    assert_eq!(servers[20].value, "other");
    assert_eq!(servers.iter().map(|s| s.count).sum::<u64>(), 250);
    assert!((servers.iter().map(|s| s.share).sum::<f64>() - 1.0).abs() < 1e-9);
    let dbs = &d.dims["database"];
    assert!(dbs.iter().any(|s| s.value == "-" && s.count == 50));
    let mut q = range(T0, T0 + 60);
    q.filter.database = Some("-".into());
    assert_eq!(top(&st, q, SortBy::Load).totals.count, 50);
}
