//! Store benchmark: writes `--days` days of minutes (one transaction per minute) for `--groups`
//! query groups of which `--active` have events in each minute, then times `top` and `group`
//! over the last 24 hours and 7 days. Prints a small table. Run it through `bench/store.sh`.
//!
//!     cargo run --release -p dbtap-store --example bench -- [--groups 1000] [--active 200]
//!         [--days 7] [--events 4] [--path FILE]

use std::sync::Arc;
use std::time::Instant;

use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{Endpoint, Outcome, Protocol, QueryEvent};
use store::{Filter, GroupQuery, GroupRef, RangeQuery, SortBy, Store, StoreConfig, TopQuery};

struct Args {
    groups: u64,
    active: u64,
    days: i64,
    events: u64,
    path: std::path::PathBuf,
}

fn args() -> Args {
    let mut a = Args {
        groups: 1_000,
        active: 200,
        days: 7,
        events: 4,
        path: std::env::temp_dir().join("dbtap-store-bench.db"),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for w in v.chunks(2) {
        let val = w.get(1).map(String::as_str).unwrap_or("");
        match w[0].as_str() {
            "--groups" => a.groups = val.parse().expect("--groups N"),
            "--active" => a.active = val.parse().expect("--active N"),
            "--days" => a.days = val.parse().expect("--days N"),
            "--events" => a.events = val.parse().expect("--events N"),
            "--path" => a.path = val.into(),
            o => panic!("unknown argument {o}"),
        }
    }
    a.active = a.active.min(a.groups);
    a
}

fn rng(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn event(g: u64, start_ns: u64, lat: u64, server: &Endpoint, client: &Endpoint) -> QueryEvent {
    QueryEvent {
        protocol: Protocol::Mysql,
        conn: g,
        client: client.clone(),
        server: server.clone(),
        start_ns,
        first_response_ns: Some(start_ns + lat / 2),
        end_ns: Some(start_ns + lat),
        service_start_ns: Some(start_ns),
        user: Some(Arc::from("app")),
        database: Some(Arc::from("shop")),
        command: "query",
        text: None,
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 60,
        bytes_out: 300,
        rows_sent: 1,
        rows_affected: 0,
        warnings: 0,
        outcome: Outcome::Ok,
        error: None,
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

/// One minute: `active` groups (a rotating window over all groups), `events` events each, and
/// the first group busy (300 events: a histogram rather than raw samples).
fn minute(a: &Args, k: i64, seed: &mut u64, srv: &Endpoint, cli: &Endpoint) -> Aggregator {
    let mut agg = Aggregator::new(AggConfig::default());
    let m = k as u64 * 60_000_000_000;
    for j in 0..a.active {
        let g = (k as u64 * 37 + j) % a.groups;
        let n = if j == 0 { 300 } else { a.events };
        for i in 0..n {
            let lat = 50_000 + rng(seed) % 400_000;
            let ev = event(g, m + i * 1_000 + j, lat, srv, cli);
            let key = GroupKey {
                protocol: ev.protocol,
                command: ev.command,
                fingerprint_hash: store::STORE_DIMS.group_hash(&ev, g),
            };
            agg.add_with_dims(&ev, key, || {
                (
                    format!("SELECT * FROM t{g} WHERE id = ?"),
                    format!("{g:016x}"),
                    Some(Box::new(store::STORE_DIMS.values(&ev))),
                )
            });
        }
    }
    agg
}

fn median_ms(mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[2]
}

fn main() {
    let a = args();
    let _ = std::fs::remove_file(&a.path);
    let cfg = StoreConfig {
        max_bytes: None,
        ..StoreConfig::default()
    };
    let mut st = Store::open(&a.path, cfg).expect("open");
    let srv: Endpoint = "10.0.0.5:3306".parse().expect("addr");
    let cli: Endpoint = "10.0.0.20:5000".parse().expect("addr");
    let t0 = 1_700_006_400i64 / 60; // minutes since the epoch, a day start
    let minutes = a.days * 1_440;
    let (mut seed, mut rows, mut write_s) = (0x9e37_79b9u64, 0u64, 0.0f64);
    for k in 0..minutes {
        let agg = minute(&a, t0 + k, &mut seed, &srv, &cli);
        let t = Instant::now();
        rows += st.write_minute((t0 + k) * 60, &agg).expect("write").rows;
        write_s += t.elapsed().as_secs_f64();
    }
    st.finish().expect("finish");
    let stats = st.stats().expect("stats");
    let end = (t0 + minutes) * 60;
    let range = |secs: i64| RangeQuery {
        from_s: end - secs,
        to_s: end,
        filter: Filter::default(),
    };
    let top = |secs: i64| TopQuery {
        range: range(secs),
        sort: SortBy::Load,
        limit: 100,
        spark_points: 60,
    };
    let g = st.top(&top(86_400)).expect("top").groups[0].clone();
    let group = |secs: i64| GroupQuery {
        range: range(secs),
        group: GroupRef {
            protocol: g.protocol.clone(),
            command: g.command.clone(),
            id: g.id.clone(),
        },
        points: 300,
    };
    let t24 = median_ms(|| drop(st.top(&top(86_400)).expect("top")));
    let t7 = median_ms(|| drop(st.top(&top(7 * 86_400)).expect("top")));
    let g24 = median_ms(|| drop(st.group(&group(86_400)).expect("group")));
    let g7 = median_ms(|| drop(st.group(&group(7 * 86_400)).expect("group")));
    let s24 = median_ms(|| drop(st.side(&range(86_400), "a").expect("side")));
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| groups (active per minute) | {} ({}) |",
        a.groups, a.active
    );
    println!("| minutes written | {minutes} |");
    println!("| minute rows written | {rows} |");
    println!(
        "| write rate (rows/s, one transaction per minute, rollups and retention included) | {:.0} |",
        rows as f64 / write_s
    );
    println!(
        "| minute write (ms, mean) | {:.2} |",
        write_s * 1e3 / minutes as f64
    );
    println!("| file bytes | {} |", stats.bytes);
    println!(
        "| bytes per group-minute (all tiers and indexes) | {:.1} |",
        stats.bytes as f64 / stats.minute_rows.max(1) as f64
    );
    println!(
        "| rows: minute / hour / day | {} / {} / {} |",
        stats.minute_rows, stats.hour_rows, stats.day_rows
    );
    println!("| top, last 24 h (ms, median of 5) | {t24:.1} |");
    println!("| top, last 7 d (ms) | {t7:.1} |");
    println!("| group, last 24 h, 300 points (ms) | {g24:.1} |");
    println!("| group, last 7 d (ms) | {g7:.1} |");
    println!("| side (diff), last 24 h (ms) | {s24:.1} |");
    drop(st);
    if std::env::var_os("DBTAP_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_file(&a.path);
    }
}
