//! Bounds and durability: retention per tier, the `max_bytes` bound, a read-only reader beside
//! a writer (WAL), and a writer killed with SIGKILL loses no minute whose write returned.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use store::{Filter, RangeQuery, Retention, SortBy, Store, StoreConfig, TopQuery};

const DAY: i64 = 86_400;
const T0: i64 = 1_700_006_400; // a day start

fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dbtap-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("history.db")
}

/// `n` events of `groups` groups in minute `m` (deterministic per minute).
fn minute_agg(m: i64, n: u64, groups: usize) -> aggregate::Aggregator {
    let mut r = Rng(m as u64 | 1);
    let mut a = new_agg();
    for i in 0..n {
        let g = (i as usize) % groups;
        let ev = event(
            g,
            (i as usize / groups) % 2,
            m as u64 * 1_000_000_000 + i,
            latency(&mut r),
            None,
        );
        add(&mut a, g, &ev);
    }
    a
}

fn count_in(st: &Store, from_s: i64, to_s: i64) -> u64 {
    st.top(&TopQuery {
        range: RangeQuery {
            from_s,
            to_s,
            filter: Filter::default(),
        },
        sort: SortBy::Load,
        limit: 1,
        spark_points: 1,
    })
    .unwrap()
    .totals
    .count
}

fn min_ts(path: &Path, table: &str) -> Option<i64> {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row(&format!("SELECT min(ts) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[test]
fn retention_deletes_old_rows_per_tier() {
    let path = temp("retention");
    let cfg = StoreConfig {
        retention: Retention {
            minutes: Duration::from_secs(2 * 3_600),
            hours: Duration::from_secs(DAY as u64),
            days: Duration::from_secs(3 * DAY as u64),
        },
        max_bytes: None,
        examples: true,
    };
    let mut st = Store::open(&path, cfg).unwrap();
    let mut written = 0u64;
    // Every 20th minute of 6 days.
    for k in 0..(6 * 72) {
        let m = T0 + k * 1_200;
        st.write_minute(m, &minute_agg(m, 5, 2)).unwrap();
        written += 5;
    }
    let last = T0 + (6 * 72 - 1) * 1_200;
    drop(st);
    assert!(min_ts(&path, "m1").unwrap() >= last - 2 * 3_600);
    assert!(min_ts(&path, "h1").unwrap() >= last - DAY);
    assert!(min_ts(&path, "d1").unwrap() >= last - 3 * DAY);
    let st = Store::open_read_only(&path).unwrap();
    // Days older than three are gone; what remains is still counted exactly per tier.
    let kept = count_in(&st, T0 - DAY, last + 60);
    assert!(kept < written && kept >= 5 * 72 * 3, "{kept} of {written}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn max_bytes_bounds_the_file() {
    let path = temp("maxbytes");
    let max = 2u64 << 20;
    let cfg = StoreConfig {
        max_bytes: Some(max),
        ..StoreConfig::default()
    };
    let mut st = Store::open(&path, cfg).unwrap();
    let mut peak = 0;
    for k in 0..900 {
        let m = T0 + k * 60;
        st.write_minute(m, &minute_agg(m, 400, 20)).unwrap();
        let s = st.stats().unwrap();
        peak = peak.max(s.bytes);
        assert!(s.bytes <= max, "minute {k}: {} bytes", s.bytes);
    }
    let s = st.stats().unwrap();
    assert!(s.dropped_minute_rows > 0, "{s:?}");
    assert!(peak > max / 2, "the test did not reach the bound: {peak}");
    drop(st);
    let on_disk = std::fs::metadata(&path).unwrap().len();
    assert!(on_disk <= max, "{on_disk}");
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn reader_beside_a_writer() {
    let path = temp("wal");
    let mut w = Store::open(&path, StoreConfig::default()).unwrap();
    w.write_minute(T0, &minute_agg(T0, 10, 2)).unwrap();
    let r = Store::open_read_only(&path).unwrap();
    assert_eq!(count_in(&r, T0, T0 + 600), 10);
    w.write_minute(T0 + 60, &minute_agg(T0 + 60, 7, 2)).unwrap();
    assert_eq!(count_in(&r, T0, T0 + 600), 17);
    assert!(r.span().unwrap().is_some());
    let mut r = r;
    assert!(r.write_minute(T0 + 120, &minute_agg(T0, 1, 1)).is_err());
    assert!(Store::open_read_only(&path.with_extension("missing")).is_err());
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

const CHILD: &str = "DBTAP_STORE_CRASH_CHILD";

/// The child: writes minutes until killed, printing each minute after its write returned.
fn child(path: &str) {
    let mut st = Store::open(Path::new(path), StoreConfig::default()).unwrap();
    let started = Instant::now();
    let mut k = 0i64;
    while started.elapsed() < Duration::from_secs(60) {
        let m = T0 + k * 60;
        st.write_minute(m, &minute_agg(m, 1 + (k as u64 % 7), 3))
            .unwrap();
        println!("written {m}");
        k += 1;
    }
}

#[test]
fn sigkill_loses_no_written_minute() {
    if let Ok(p) = std::env::var(CHILD) {
        child(&p);
        return;
    }
    let path = temp("crash");
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_loses_no_written_minute",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let mut written = Vec::new();
    while written.len() < 150 {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(m) = l.strip_prefix("written ") {
            written.push(m.parse::<i64>().unwrap());
        }
    }
    c.kill().unwrap(); // SIGKILL
    c.wait().unwrap();
    // Lines printed before the kill but not read yet.
    for l in lines.map_while(Result::ok) {
        if let Some(m) = l.strip_prefix("written ") {
            written.push(m.parse::<i64>().unwrap());
        }
    }
    assert!(written.len() >= 150, "{}", written.len());
    let st = Store::open(&path, StoreConfig::default()).unwrap();
    for &m in &written {
        let k = (m - T0) / 60;
        assert_eq!(count_in(&st, m, m + 60), 1 + (k as u64 % 7), "minute {m}");
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}
