//! Criterion bench of the MySQL and PostgreSQL fingerprint hot paths on sysbench and pgbench
//! queries; prints ns/query.

use std::hint::black_box;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const SYSBENCH: &[&str] = &[
    "SELECT c FROM sbtest1 WHERE id=5022",
    "UPDATE sbtest3 SET k=k+1 WHERE id=4981",
    "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN 100 AND 199 ORDER BY c",
    "INSERT INTO sbtest7 (id, k, c, pad) VALUES (5000, 4993, \
     '12345678901-23456789012-34567890123-45678901234-56789012345-67890123456-78901234567-89012345678-90123456789-01234567890', \
     '12345678901-23456789012-34567890123-45678901234-56789012345')",
];

const PGBENCH: &[&str] = &[
    "UPDATE pgbench_accounts SET abalance = abalance + -4030 WHERE aid = 29312;",
    "SELECT abalance FROM pgbench_accounts WHERE aid = 29312;",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, 29312, -4030, CURRENT_TIMESTAMP);",
    "SELECT id, name FROM items WHERE name IN ('apple', 'fig', 'nope') ORDER BY 1 DESC LIMIT 2",
];

fn bench_postgres(c: &mut Criterion) {
    let mut out = String::with_capacity(256);
    let mut g = c.benchmark_group("postgres");
    g.throughput(Throughput::Elements(PGBENCH.len() as u64));
    g.bench_function("fingerprint/pgbench4", |b| {
        b.iter(|| {
            for q in PGBENCH {
                black_box(fingerprint::postgres::fingerprint(black_box(q), &mut out));
                black_box(&out);
            }
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let mut out = String::with_capacity(256);
    let mut g = c.benchmark_group("mysql");
    g.throughput(Throughput::Elements(SYSBENCH.len() as u64));
    g.bench_function("fingerprint/sysbench4", |b| {
        b.iter(|| {
            for q in SYSBENCH {
                fingerprint::mysql::fingerprint(black_box(q), &mut out);
                black_box(&out);
            }
        })
    });
    g.bench_function("fingerprint_pt/sysbench4", |b| {
        b.iter(|| {
            for q in SYSBENCH {
                fingerprint::mysql::fingerprint_pt(black_box(q), &mut out);
                black_box(&out);
            }
        })
    });
    g.bench_function("fingerprint+hash64/sysbench4", |b| {
        b.iter(|| {
            for q in SYSBENCH {
                fingerprint::mysql::fingerprint(black_box(q), &mut out);
                black_box(fingerprint::hash64(&out));
            }
        })
    });
    g.finish();

    if std::env::var_os("DBTAP_BENCH_NO_SUMMARY").is_some() {
        return;
    }
    // A plain ns/query summary per query, independent of criterion's report format. On a shared
    // machine wall time includes time spent descheduled; the thread's CPU time does not.
    println!("{:>15}  {:>9}  {:>9}  query", "", "wall ns", "cpu ns");
    for (name, f) in [
        (
            "fingerprint",
            fingerprint::mysql::fingerprint as fn(&str, &mut String),
        ),
        ("fingerprint_pt", fingerprint::mysql::fingerprint_pt),
    ] {
        for q in SYSBENCH {
            let iters = 2_000_000u32;
            let (t, c) = (Instant::now(), thread_cpu_ticks());
            for _ in 0..iters {
                f(black_box(q), &mut out);
                black_box(&out);
            }
            let wall = t.elapsed().as_nanos() as f64 / f64::from(iters);
            let cpu = c
                .zip(thread_cpu_ticks())
                .map(|(a, b)| (b - a) as f64 * 1e7 / f64::from(iters));
            let cpu = cpu.map_or("n/a".to_string(), |c| format!("{c:.1}"));
            let short: String = q.chars().take(44).collect();
            println!("{name:>15}  {wall:9.1}  {cpu:>9}  {short}");
        }
    }
}

/// This thread's user+system CPU time in clock ticks (assumed 100 Hz), from /proc on Linux.
fn thread_cpu_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = after.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

criterion_group!(benches, bench, bench_postgres);
criterion_main!(benches);
