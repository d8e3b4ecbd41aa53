//! Synthetic traffic in the live view: `cargo run -p dbtap-top --example demo`.
//! Also the target of terminal tests (tmux send-keys / capture-pane). With
//! `DBTAP_TOP_DEMO_PANIC` set, the feeding thread panics after two frames (to check that the
//! terminal is restored and the panic message readable).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{DbError, Outcome, Protocol, QueryEvent};

const STATEMENTS: [&str; 6] = [
    "SELECT * FROM orders WHERE id = ?",
    "UPDATE stock SET n = n - ? WHERE sku = ?",
    "SELECT name, price FROM products WHERE category IN (?+) ORDER BY price LIMIT ?",
    "INSERT INTO audit (who, what, at) VALUES (?+)",
    "SELECT COUNT(*) FROM sessions WHERE expires > ?",
    "DELETE FROM carts WHERE updated < ?",
];

fn event(i: u64, s: usize, t_ns: u64) -> QueryEvent {
    // Cheap deterministic pseudo-randomness (splitmix64 finalizer).
    let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    let r = (z ^ (z >> 31)) % 1000;
    let lat = (s as u64 + 1) * 200_000 + r * 1_000 * (s as u64 + 1);
    let err = s == 1 && r < 30;
    QueryEvent {
        protocol: Protocol::Mysql,
        conn: i % 7,
        client: SocketAddr::from(([10, 0, 0, (i % 3) as u8 + 1], 40000)).into(),
        server: SocketAddr::from(([10, 0, 0, 9], 3306)).into(),
        start_ns: t_ns,
        first_response_ns: Some(t_ns + lat / 2),
        end_ns: Some(t_ns + lat),
        service_start_ns: Some(t_ns),
        user: Some(Arc::from(["app", "batch", "admin"][(i % 3) as usize])),
        database: Some(Arc::from("shop")),
        command: "query",
        text: Some(Arc::from(STATEMENTS[s])),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 60,
        bytes_out: 400,
        rows_sent: 1,
        rows_affected: 0,
        warnings: 0,
        outcome: if err { Outcome::Error } else { Outcome::Ok },
        error: err.then(|| DbError {
            code: 1213,
            state: Some("40001".into()),
            message: "Deadlock found when trying to get lock".into(),
        }),
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

fn main() -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = Arc::clone(&stop);
    let panic_after = std::env::var_os("DBTAP_TOP_DEMO_PANIC").map(|_| 2u64);
    let feeder = thread::spawn(move || {
        let mut total = Aggregator::new(AggConfig::default());
        let mut i = 0u64;
        for sec in 1u64.. {
            if s2.load(Ordering::Relaxed) {
                break;
            }
            if panic_after.is_some_and(|n| sec > n) {
                panic!("demo: feeder panicked on purpose");
            }
            let mut window = Aggregator::new(AggConfig::default());
            for (s, text) in STATEMENTS.iter().enumerate() {
                for _ in 0..(60 / (s + 1)) {
                    i += 1;
                    let ev = event(i, s, sec * 1_000_000_000 + i);
                    let key = GroupKey {
                        protocol: Protocol::Mysql,
                        command: "query",
                        fingerprint_hash: s as u64 + 1,
                    };
                    let describe = || (text.to_string(), format!("{:016X}", s + 1));
                    window.add(&ev, key, describe);
                }
            }
            total.merge(&window);
            let frame = top::Frame {
                header: format!(
                    "dbtap top - demo - up 00:00:{:02} - synthetic traffic",
                    sec % 60
                ),
                status: format!(
                    "{} pkt/s  drops 0  conns 7",
                    2 * window.totals().stats.count
                ),
                window,
                window_secs: 1.0,
                total: total.clone(),
                total_secs: sec as f64,
            };
            if tx.send(frame).is_err() {
                break;
            }
            thread::sleep(Duration::from_secs(1));
        }
    });
    let res = top::run(rx, Arc::clone(&stop), top::SortBy::Total);
    stop.store(true, Ordering::Relaxed);
    let _ = feeder.join();
    res
}
