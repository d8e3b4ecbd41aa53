//! `Store::import_minute` (the rows `dbtap ui --clickhouse` reads back): a minute imported as
//! per-series rows with their distributions' states answers exactly as the same minute written
//! from its aggregator, also when a minute is imported in parts.

mod common;

use common::*;
use store::{Filter, ImportRow, RangeQuery, SortBy, Store, StoreConfig, TopQuery};

const T0: i64 = 1_700_006_400;

fn rows_of(agg: &aggregate::Aggregator) -> Vec<ImportRow> {
    agg.groups()
        .map(|g| {
            let d = store::DimText::of(g);
            let s = &g.stats;
            ImportRow {
                protocol: g.key.protocol.name().to_string(),
                command: g.key.command.to_string(),
                qid: g.id.clone(),
                fingerprint: g.fingerprint.clone(),
                server: d.server,
                client: d.client,
                db: String::new(),
                user: String::new(),
                count: s.count,
                ok: s.ok,
                errors: s.errors,
                no_response: s.no_response,
                incomplete: s.incomplete,
                bytes_in: s.bytes_in.sum as u64,
                bytes_out: s.bytes_out.sum as u64,
                rows_sent: s.rows_sent.sum as u64,
                rows_affected: s.rows_affected.sum as u64,
                service: s.service.state(),
                latency: s.latency.state(),
                errors_by_code: s
                    .errors_by_code
                    .sorted()
                    .iter()
                    .map(|e| (e.code, e.count))
                    .collect(),
            }
        })
        .collect()
}

fn top(st: &Store) -> store::TopAnswer {
    st.top(&TopQuery {
        range: RangeQuery {
            from_s: T0,
            to_s: T0 + 3_600,
            filter: Filter::default(),
        },
        sort: SortBy::Load,
        limit: 0,
        spark_points: 4,
    })
    .unwrap()
}

fn agg_of(m: i64, n: u64, groups: usize) -> aggregate::Aggregator {
    let mut r = Rng(m as u64 | 1);
    let mut a = new_agg();
    for i in 0..n {
        let g = (i as usize) % groups;
        let ev = event(
            g,
            i as usize % 2,
            m as u64 * 1_000_000_000 + i,
            latency(&mut r),
            None,
        );
        add(&mut a, g, &ev);
    }
    a
}

#[test]
fn imported_minutes_answer_as_written_ones() {
    let cfg = StoreConfig {
        examples: false,
        ..StoreConfig::default()
    };
    let mut written = Store::memory(cfg.clone()).unwrap();
    let mut imported = Store::memory(cfg).unwrap();
    for (k, n) in [(0, 500u64), (1, 30), (2, 2_000)] {
        let m = T0 + 60 * k;
        let a = agg_of(m, n, 5);
        written.write_minute(m, &a).unwrap();
        // In two parts: a minute imported again merges.
        let rows = rows_of(&a);
        let (x, y) = rows.split_at(rows.len() / 2);
        imported.import_minute(m, x).unwrap();
        imported.import_minute(m, y).unwrap();
    }
    written.finish().unwrap();
    imported.finish().unwrap();
    let (a, b) = (top(&written), top(&imported));
    assert_eq!(a.totals.count, 2_530);
    assert_eq!(a.groups.len(), b.groups.len());
    for (x, y) in a.groups.iter().zip(&b.groups) {
        assert_eq!(
            (&x.id, &x.fingerprint, x.count, x.p50_us, x.p99_us, x.max_us),
            (&y.id, &y.fingerprint, y.count, y.p50_us, y.p99_us, y.max_us)
        );
        assert_eq!(x.spark, y.spark);
    }
    assert!(imported.import_minute(T0 + 1, &[]).is_err(), "not a minute");
}
