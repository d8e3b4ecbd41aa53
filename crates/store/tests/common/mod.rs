//! Helpers of the store tests: synthetic events recorded into real aggregators keyed by
//! `store::STORE_DIMS`.
#![allow(dead_code)]

use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::{DbError, Endpoint, Outcome, Protocol, QueryEvent};

/// A small deterministic generator (xorshift).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The groups of the synthetic traffic: (protocol, command, fingerprint text).
pub const GROUPS: [(Protocol, &str, &str); 4] = [
    (Protocol::Mysql, "query", "SELECT * FROM t WHERE id = ?"),
    (Protocol::Mysql, "query", "UPDATE t SET v = ? WHERE id = ?"),
    (Protocol::Postgres, "query", "SELECT count(*) FROM orders"),
    (Protocol::Redis, "get", "GET ?"),
];

pub const SERVERS: [&str; 2] = ["10.0.0.5:3306", "10.0.0.6:3306"];

/// One event of group `g` starting at `start_ns` with service time `lat` ns.
pub fn event(g: usize, server: usize, start_ns: u64, lat: u64, error: Option<u32>) -> QueryEvent {
    let (protocol, command, text) = GROUPS[g % GROUPS.len()];
    let addr = |s: &str| s.parse::<Endpoint>().expect("test address");
    QueryEvent {
        protocol,
        conn: 1 + server as u64,
        client: addr("10.0.0.20:5000"),
        server: addr(SERVERS[server % SERVERS.len()]),
        start_ns,
        first_response_ns: Some(start_ns + lat / 2),
        end_ns: Some(start_ns + lat),
        service_start_ns: Some(start_ns),
        user: Some(Arc::from("app")),
        database: Some(Arc::from(if server == 0 { "shop" } else { "crm" })),
        command,
        text: Some(Arc::from(text)),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 40,
        bytes_out: 100 + lat % 50,
        rows_sent: 1,
        rows_affected: 0,
        warnings: 0,
        outcome: if error.is_some() {
            Outcome::Error
        } else {
            Outcome::Ok
        },
        error: error.map(|code| DbError {
            code,
            state: None,
            message: format!("error {code}").into(),
        }),
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

/// The display id of group `g`.
pub fn group_id(g: usize) -> String {
    format!("q{:02}", g % GROUPS.len())
}

/// Adds `ev` (of group `g`) to `agg` keyed by `STORE_DIMS`, as the binary does.
pub fn add(agg: &mut Aggregator, g: usize, ev: &QueryEvent) {
    let (_, _, text) = GROUPS[g % GROUPS.len()];
    let fp = text
        .bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let key = GroupKey {
        protocol: ev.protocol,
        command: ev.command,
        fingerprint_hash: store::STORE_DIMS.group_hash(ev, fp),
    };
    agg.add_with_dims(ev, key, || {
        (
            text.to_string(),
            group_id(g),
            Some(Box::new(store::STORE_DIMS.values(ev))),
        )
    });
}

pub fn new_agg() -> Aggregator {
    Aggregator::new(AggConfig::default())
}

/// A random service time: mostly around 200 µs, a tail up to 50 ms.
pub fn latency(r: &mut Rng) -> u64 {
    let base = 50_000 + r.below(300_000);
    if r.below(50) == 0 {
        base + r.below(50_000_000)
    } else {
        base
    }
}
