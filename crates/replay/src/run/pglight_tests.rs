//! The light reader against the full session: the same traffic, batch by batch, read cut at
//! random places, must give exactly the same events (every field) as the session fed all of it.

use proptest::prelude::*;
use proto::{ConnMeta, Direction, Endpoint, Health, Protocol, QueryEvent, Session, Sink};

use super::{Light, shape};
use crate::postgres::{message, startup};

#[derive(Default)]
struct Events(Vec<QueryEvent>, Health);

impl Sink for Events {
    fn event(&mut self, ev: QueryEvent) {
        self.0.push(ev);
    }
    fn health(&mut self) -> &mut Health {
        &mut self.1
    }
}

fn session() -> Box<dyn Session> {
    let meta = ConnMeta {
        id: 7,
        client: Endpoint::Ip("127.0.0.1:40000".parse().unwrap()),
        server: Endpoint::Ip("127.0.0.1:5432".parse().unwrap()),
        saw_open: true,
        peer: None,
        after_tls: false,
    };
    let cfg = proto::SessionConfig {
        keep_params: false,
        ..proto::SessionConfig::default()
    };
    (proto::registry::spec(Protocol::Postgres)
        .unwrap()
        .new_session)(meta, cfg)
}

const SQL: [&str; 6] = [
    "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
    "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, now())",
    "BEGIN;",
    "END;",
    "COPY t FROM STDIN",
];

/// One batch: what is sent, and the reply (whole messages).
#[derive(Clone, Debug)]
struct Batch {
    out: Vec<u8>,
    reply: Vec<u8>,
}

/// Statement names of the named batches.
const NAMES: [&str; 3] = [
    "P_0",
    "P_1",
    "a_statement_name_of_sixty_three_bytes_as_long_as_postgres_allow",
];

fn pg_batch(sql: usize, rows: u8, status: u8, kind: u8) -> Batch {
    let text = SQL[sql % SQL.len()];
    let mut b = exec_batch("", sql, rows, status, kind);
    let mut out = message(b'P', format!("\0{text}\0\0\0").as_bytes());
    out.append(&mut b.out);
    let mut reply = message(b'1', b"");
    reply.append(&mut b.reply);
    Batch { out, reply }
}

/// Parse of the named statement `name` (after a Close of it when `close`), then Sync.
fn prepare_batch(name: usize, sql: usize, close: bool) -> Batch {
    let (name, text) = (NAMES[name % NAMES.len()], SQL[sql % SQL.len()]);
    let mut out = Vec::new();
    let mut reply = Vec::new();
    if close {
        out.extend(message(b'C', format!("S{name}\0").as_bytes()));
        reply.extend(message(b'3', b""));
    }
    out.extend(message(b'P', format!("{name}\0{text}\0\0\0").as_bytes()));
    out.extend(message(b'S', b""));
    reply.extend(message(b'1', b""));
    reply.extend(message(b'Z', b"I"));
    Batch { out, reply }
}

/// Bind of the named statement `name`, Describe, Execute, Sync (`sql`: the statement the
/// reply is made for).
fn named_batch(name: usize, sql: usize, rows: u8, status: u8, kind: u8) -> Batch {
    exec_batch(NAMES[name % NAMES.len()], sql, rows, status, kind)
}

/// Bind of statement `name` ("": the unnamed one), Describe, Execute, Sync and their reply.
fn exec_batch(name: &str, sql: usize, rows: u8, status: u8, kind: u8) -> Batch {
    let mut bind = format!("\0{name}\0").into_bytes();
    bind.extend(b"\0\0\0\x01\0\0\0\x015\0\0");
    let mut out = message(b'B', &bind);
    out.extend(message(b'D', b"P\0"));
    out.extend(message(b'E', b"\0\0\0\0\0"));
    out.extend(message(b'S', b""));
    let mut reply = Vec::new();
    let error = message(b'E', b"SERROR\0C42P01\0Mno such table\0\0");
    match kind % 8 {
        // An error at the Bind: the rest is skipped up to the Sync.
        0 => reply.extend(&error),
        // A notice before the rows.
        1 => {
            reply.extend(message(b'2', b""));
            reply.extend(message(b'N', b"SNOTICE\0Mhello\0\0"));
            reply.extend(message(b'n', b""));
            reply.extend(message(b'C', b"SELECT 0\0"));
        }
        _ => {
            reply.extend(message(b'2', b""));
            if sql.is_multiple_of(SQL.len()) {
                reply.extend(message(
                    b'T',
                    b"\0\x01abalance\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
                ));
                for r in 0..rows {
                    reply.extend(message(
                        b'D',
                        format!("\0\x01\0\0\0\x01{}", r % 10).as_bytes(),
                    ));
                }
                let tag = if kind % 8 == 2 {
                    "SELECT 7"
                } else {
                    &format!("SELECT {rows}")
                };
                reply.extend(message(b'C', format!("{tag}\0").as_bytes()));
            } else {
                reply.extend(message(b'n', b""));
                let tag = match sql % SQL.len() {
                    1 => format!("UPDATE {rows}"),
                    2 => format!("INSERT 0 {rows}"),
                    3 => "BEGIN".into(),
                    4 => "COMMIT".into(),
                    _ => format!("COPY {rows}"),
                };
                reply.extend(message(b'C', format!("{tag}\0").as_bytes()));
            }
        }
    }
    reply.extend(message(b'Z', &[b"ITE"[usize::from(status % 3)]]));
    Batch { out, reply }
}

fn simple_batch(rows: u8) -> Batch {
    let out = message(b'Q', b"SELECT 1\0");
    let mut reply = message(
        b'T',
        b"\0\x01x\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
    );
    for _ in 0..rows {
        reply.extend(message(b'D', b"\0\x01\0\0\0\x011"));
    }
    reply.extend(message(b'C', format!("SELECT {rows}\0").as_bytes()));
    reply.extend(message(b'Z', b"I"));
    Batch { out, reply }
}

/// The full session, and a second session behind the light reader, fed the same traffic.
struct Pair {
    full: Box<dyn Session>,
    lite: Box<dyn Session>,
    light: Light,
    fe: Events,
    le: Events,
    ts: u64,
}

impl Pair {
    /// Feeds both the traffic of a connection's login.
    fn new() -> Pair {
        let mut p = Pair {
            full: session(),
            lite: session(),
            light: Light::default(),
            fe: Events::default(),
            le: Events::default(),
            ts: 1_000_000,
        };
        let login = startup("alice", Some("db1"));
        let mut hello = message(b'R', &[0, 0, 0, 0]);
        hello.extend(message(b'Z', b"I"));
        for (dir, b) in [(Direction::ToServer, &login), (Direction::ToClient, &hello)] {
            p.ts += 1000;
            p.full.feed(dir, b, p.ts, &mut p.fe);
            p.lite.feed(dir, b, p.ts, &mut p.le);
        }
        p.light.set_quiet(true);
        p
    }

    /// Feeds `b` (its reply read in pieces ending at `cuts`) to the full session, and
    /// through the light reader as `run/pg.rs` does.
    fn feed(&mut self, b: &Batch, cuts: &[usize]) {
        let mut parts = vec![(Direction::ToServer, &b.out[..])];
        let mut at = 0;
        for &c in cuts.iter().chain([&b.reply.len()]) {
            let c = c.clamp(at, b.reply.len());
            if c > at {
                parts.push((Direction::ToClient, &b.reply[at..c]));
                at = c;
            }
        }
        self.light.begin(&b.out);
        for (dir, bytes) in parts {
            self.ts += 1000;
            self.full.feed(dir, bytes, self.ts, &mut self.fe);
            if self.light.logging() {
                if self.light.log(dir == Direction::ToServer, self.ts, bytes) {
                    self.light.spill(self.lite.as_mut(), &mut self.le);
                }
            } else {
                self.light.prime(self.lite.as_mut());
                self.lite.feed(dir, bytes, self.ts, &mut self.le);
            }
        }
        let lite = self.lite.as_mut();
        self.light.settle(&b.out, true, true, lite, &mut self.le);
    }
}

/// Both sides' events (each as its `Debug` text: every field) and the batches the light
/// reader answered.
fn run(batches: &[(Batch, Vec<usize>)]) -> (Vec<String>, Vec<String>, u64) {
    let mut p = Pair::new();
    for (b, cuts) in batches {
        p.feed(b, cuts);
    }
    p.ts += 1000;
    p.full.close(p.ts, &mut p.fe);
    p.light.prime(p.lite.as_mut());
    p.lite.close(p.ts, &mut p.le);
    let show = |e: &Events| e.0.iter().map(|e| format!("{e:?}")).collect();
    (show(&p.fe), show(&p.le), p.light.answered)
}

#[test]
fn pgbench_batches_are_answered_as_the_session_would() {
    let batches: Vec<_> = (0..40)
        .map(|i| {
            (
                pg_batch(i % 5, (i % 3) as u8, if i % 5 == 3 { 1 } else { 0 }, 3),
                vec![7 + i],
            )
        })
        .collect();
    let (full, lite, answered) = run(&batches);
    assert_eq!(full.len(), 80);
    assert_eq!(full, lite);
    // The first batch of each of the five statements teaches the light reader.
    assert_eq!(answered, 35);
}

/// pgbench `-M prepared`: each statement is parsed once under its name, then only bound and
/// executed.
#[test]
fn prepared_batches_are_answered_as_the_session_would() {
    let mut batches: Vec<_> = (0..3)
        .map(|n| (prepare_batch(n, n, false), vec![2]))
        .collect();
    batches.extend((0..40).map(|i| {
        let n = i % 3;
        let status = if n == 2 { 1 } else { 0 };
        (named_batch(n, n, (i % 4) as u8, status, 3), vec![5 + i])
    }));
    let (full, lite, answered) = run(&batches);
    assert_eq!(full.len(), 3 + 40);
    assert_eq!(full, lite);
    // The first execution of each of the three names teaches the light reader.
    assert_eq!(answered, 37);
}

/// A name closed and parsed again with another statement, or deallocated by a simple query
/// and prepared again, is not answered from the old statement's template: the first execution
/// after it goes to the session (which knows the new text), then teaches again.
#[test]
fn a_statement_redefined_is_not_answered_from_its_old_template() {
    let exec = |sql| (named_batch(0, sql, 1, 0, 3), vec![3]);
    let dealloc = Batch {
        out: message(b'Q', format!("DEALLOCATE {}\0", NAMES[0]).as_bytes()),
        reply: [message(b'C', b"DEALLOCATE\0"), message(b'Z', b"I")].concat(),
    };
    let batches = [
        (prepare_batch(0, 0, false), vec![]),
        exec(0),
        exec(0),
        (prepare_batch(0, 1, true), vec![]),
        exec(1),
        exec(1),
        (dealloc, vec![]),
        (prepare_batch(0, 2, false), vec![]),
        exec(2),
        exec(2),
    ];
    let (full, lite, answered) = run(&batches);
    assert_eq!(full, lite);
    // Each execution names the statement's text of its time.
    let execs: Vec<_> = full
        .iter()
        .filter(|e| e.contains("command: \"execute\""))
        .collect();
    assert_eq!(execs.len(), 6, "{full:#?}");
    for (e, sql) in execs.iter().zip([0, 0, 1, 1, 2, 2]) {
        assert!(
            e.contains(&format!("{:?}", SQL[sql])),
            "{e} lacks {}",
            SQL[sql]
        );
    }
    assert_eq!(answered, 3);
}

#[test]
fn a_reply_past_the_log_bound_goes_to_the_session_as_it_comes() {
    let mut big = pg_batch(0, 3, 0, 3);
    let n = big.reply.len();
    // 40,000 more DataRows (15 bytes each) before the CommandComplete and ReadyForQuery.
    let tail = big.reply.split_off(n - 6 - 14);
    for _ in 0..40_000 {
        big.reply.extend(message(b'D', b"\0\x01\0\0\0\x011"));
    }
    big.reply.extend(tail);
    let cuts: Vec<usize> = (1..40).map(|i| i * 16_000).collect();
    let small = (pg_batch(0, 1, 0, 3), vec![3]);
    let batches = [
        small.clone(),
        small.clone(),
        (big, cuts),
        small.clone(),
        small,
    ];
    let (full, lite, answered) = run(&batches);
    assert_eq!(full, lite);
    assert!(full[5].contains("rows_sent: 40003"), "{}", full[5]);
    // The second and the last two small ones; the big one spilled.
    assert_eq!(answered, 3);
}

#[test]
fn shape_is_exactly_the_unnamed_execution() {
    let b = pg_batch(0, 1, 0, 3);
    assert!(shape(&b.out).is_some());
    for cut in 1..b.out.len() {
        assert!(shape(&b.out[..cut]).is_none(), "cut at {cut}");
    }
    let mut named = b.out.clone();
    named[5] = b's';
    assert!(shape(&named).is_none());
    assert!(shape(&simple_batch(1).out).is_none());
    let n = named_batch(0, 0, 1, 0, 3);
    let s = shape(&n.out).map(|s| (s.key, s.parse, s.rest));
    assert_eq!(s, Some((&b"P_0"[..], false, n.out.len() as u64)));
    for cut in 1..n.out.len() {
        assert!(shape(&n.out[..cut]).is_none(), "cut at {cut}");
    }
    // Not answered here: a Parse before a named statement's Bind, a named portal, a name past
    // PostgreSQL's length.
    assert!(shape(&prepare_batch(0, 0, false).out).is_none());
    let mut portal = n.out.clone();
    portal[5] = b'p';
    assert!(shape(&portal).is_none());
    assert!(shape(&exec_batch(&"x".repeat(65), 0, 1, 0, 3).out).is_none());
    assert!(shape(&exec_batch(&"x".repeat(63), 0, 1, 0, 3).out).is_some());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// Any mix of unnamed executions, named statements parsed (closed first or not) and
    /// executed (rows, tags, transaction states, errors, notices) and simple queries, their
    /// replies read in any pieces: the same events as the session.
    #[test]
    fn light_reader_matches_session(
        spec in proptest::collection::vec(
            (0usize..6, 0u8..4, 0u8..3, 0u8..16, 0u8..8, 0usize..3,
             proptest::collection::vec(0usize..400, 0..4)),
            1..40)
    ) {
        let batches: Vec<_> = spec
            .into_iter()
            .map(|(sql, rows, status, kind, how, name, mut cuts)| {
                cuts.sort_unstable();
                let b = match how {
                    0 if kind < 3 => simple_batch(rows),
                    1 => prepare_batch(name, sql, kind % 2 == 0),
                    2..=4 => named_batch(name, sql, rows, status, kind),
                    _ => pg_batch(sql, rows, status, kind),
                };
                (b, cuts)
            })
            .collect();
        let (full, lite, _) = run(&batches);
        prop_assert_eq!(full, lite);
    }
}
