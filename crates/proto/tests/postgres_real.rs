//! Real PostgreSQL 15 conversations (captured with tcpdump from psql, psycopg2, psycopg 3 and
//! pgbench; see tests/data/postgres/gen.py) checked against what the clients themselves saw:
//! rows, affected rows, SQLSTATEs; and, for pgbench, against the server's own
//! pg_stat_statements counters.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use proto::postgres::new_session;
use proto::testing::{
    Transcript, assert_chunking_invariant, parse_hex_transcript, steps, with_gap,
};
use proto::{ConnMeta, Direction, Health, Outcome, QueryEvent, SessionConfig, VecSink};

const PSQL_FILE: &str = include_str!("data/postgres/psql_file.txt");
const PSQL_MULTI: &str = include_str!("data/postgres/psql_multi.txt");
const PSYCOPG2: &str = include_str!("data/postgres/psycopg2_simple.txt");
const PSYCOPG2_CANCEL: &str = include_str!("data/postgres/psycopg2_simple_cancel.txt");
const PSYCOPG3: &str = include_str!("data/postgres/psycopg3_extended.txt");
const PGBENCH: [(&str, &str, &str); 3] = [
    (
        "simple",
        include_str!("data/postgres/pgbench_simple_1.txt"),
        include_str!("data/postgres/pgbench_simple_2.txt"),
    ),
    (
        "extended",
        include_str!("data/postgres/pgbench_extended_1.txt"),
        include_str!("data/postgres/pgbench_extended_2.txt"),
    ),
    (
        "prepared",
        include_str!("data/postgres/pgbench_prepared_1.txt"),
        include_str!("data/postgres/pgbench_prepared_2.txt"),
    ),
];
const CLIENTS: [(&str, &str); 5] = [
    ("psql_file", PSQL_FILE),
    ("psql_multi", PSQL_MULTI),
    ("psycopg2_simple", PSYCOPG2),
    ("psycopg2_simple_cancel", PSYCOPG2_CANCEL),
    ("psycopg3_extended", PSYCOPG3),
];

/// Every transcript, for the checks that apply to all.
fn all() -> Vec<(String, &'static str)> {
    let mut v: Vec<(String, &str)> = CLIENTS.iter().map(|(n, t)| (n.to_string(), *t)).collect();
    for (m, a, b) in PGBENCH {
        v.push((format!("pgbench_{m}_1"), a));
        v.push((format!("pgbench_{m}_2"), b));
    }
    v
}

#[derive(Debug)]
struct Expect {
    command: String,
    rows: u64,
    affected: u64,
    /// SQLSTATE, or "0".
    err: String,
    sql: String,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect "))
        .map(|l| {
            let (head, sql) = l.split_once(" sql=").unwrap();
            let mut it = head.split(' ');
            let command = it.next().unwrap().to_string();
            let mut field = || it.next().unwrap().split_once('=').unwrap().1.to_string();
            let (rows, affected, err) = (field(), field(), field());
            Expect {
                command,
                rows: rows.parse().unwrap(),
                affected: affected.parse().unwrap(),
                err,
                sql: sql.to_string(),
            }
        })
        .collect()
}

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 1,
        client: "127.0.0.1:40000".parse::<SocketAddr>().unwrap().into(),
        server: "127.0.0.1:25432".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn transcript(text: &str) -> Transcript {
    parse_hex_transcript(text).unwrap()
}

fn run(t: &Transcript, saw_open: bool) -> VecSink {
    assert_chunking_invariant(
        || new_session(meta(saw_open), SessionConfig::default()),
        &steps(t),
    )
}

/// Segments up to and including the server's first ReadyForQuery (the startup).
fn startup_len(t: &Transcript) -> usize {
    t.iter()
        .position(|x| x.0 == Direction::ToClient && x.1.ends_with(b"Z\0\0\0\x05I"))
        .map_or(0, |i| i + 1)
}

/// Matches the events against the client's record, in order. Events the test did not issue
/// (statements a library sends on its own, the Parse/Describe/Close of the extended protocol)
/// may appear in between, but must have succeeded.
fn check(name: &str, events: &[QueryEvent], exp: &[Expect]) {
    let mut i = 0;
    for e in exp {
        let found = events[i..].iter().position(|ev| {
            ev.command == e.command && (e.sql.is_empty() || ev.text.as_deref() == Some(&e.sql))
        });
        let Some(k) = found else {
            panic!(
                "{name}: no event for {e:?} after #{i}; events: {:#?}",
                &events[i..]
            );
        };
        for extra in &events[i..i + k] {
            assert!(
                matches!(
                    extra.command,
                    "query" | "prepare" | "describe" | "close" | "bind"
                ),
                "{name}: unexpected {extra:?}"
            );
            assert_eq!(extra.outcome, Outcome::Ok, "{name}: {extra:?}");
        }
        let ev = &events[i + k];
        assert_eq!(ev.rows_sent, e.rows, "{name}: rows of {e:?}");
        assert_eq!(ev.rows_affected, e.affected, "{name}: affected of {e:?}");
        let state = ev.error.as_ref().and_then(|x| x.state.as_deref());
        assert_eq!(state.unwrap_or("0"), e.err, "{name}: error of {e:?}");
        let want = match (e.err.as_str(), e.command.as_str()) {
            ("0", "terminate" | "cancel") => Outcome::NoReplyExpected,
            ("0", _) => Outcome::Ok,
            _ => Outcome::Error,
        };
        assert_eq!(ev.outcome, want, "{name}: {ev:?}");
        assert!(ev.bytes_in > 0, "{name}: {ev:?}");
        if want != Outcome::NoReplyExpected {
            assert!(ev.bytes_out > 0, "{name}: {ev:?}");
            assert!(
                ev.first_response_ns.unwrap() >= ev.start_ns,
                "{name}: {ev:?}"
            );
            assert!(ev.end_ns >= ev.first_response_ns, "{name}: {ev:?}");
        }
        i += k + 1;
    }
    assert_eq!(
        i,
        events.len(),
        "{name}: events after the last expected one: {:#?}",
        &events[i..]
    );
}

#[test]
fn real_transcripts_match_what_the_clients_saw() {
    for (name, text) in CLIENTS {
        let t = transcript(text);
        let r = run(&t, true);
        assert_eq!(r.health, Health::default(), "{name}");
        check(name, &r.events, &expectations(text));
        if name.ends_with("_cancel") {
            continue;
        }
        for ev in &r.events {
            assert_eq!(ev.user.as_deref(), Some("app"), "{name}");
            assert_eq!(ev.database.as_deref(), Some("shop"), "{name}");
        }
        // Every byte after the startup is attributed to an event.
        let skip = startup_len(&t);
        let total = |d: Direction| -> u64 {
            t.iter()
                .skip(skip)
                .filter(|x| x.0 == d)
                .map(|x| x.1.len() as u64)
                .sum()
        };
        let bytes_in: u64 = r.events.iter().map(|e| e.bytes_in).sum();
        let bytes_out: u64 = r.events.iter().map(|e| e.bytes_out).sum();
        assert_eq!(bytes_in, total(Direction::ToServer), "{name}");
        assert_eq!(bytes_out, total(Direction::ToClient), "{name}");
    }
}

/// The key pg_stat_statements and our events are compared by: the first words of the
/// statement, which tell pgbench's statements apart.
fn key(sql: &str) -> String {
    let words: Vec<String> = sql
        .split_whitespace()
        .take(2)
        .map(|w| w.trim_end_matches(';').to_ascii_lowercase())
        .collect();
    match words.first().map(String::as_str) {
        Some("begin" | "end" | "commit") => words[0].clone(),
        _ => words.join(" "),
    }
}

/// pgbench -M simple / extended / prepared, 5 transactions: statement calls and rows per
/// statement equal pg_stat_statements' deltas over the run (both pgbench connections).
#[test]
fn pgbench_counts_match_pg_stat_statements() {
    for (mode, a, b) in PGBENCH {
        let mut ours: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for text in [a, b] {
            let r = run(&transcript(text), true);
            assert_eq!(r.health, Health::default(), "{mode}");
            for e in &r.events {
                assert!(
                    e.outcome == Outcome::Ok || e.outcome == Outcome::NoReplyExpected,
                    "{mode}: {e:?}"
                );
                // pg_stat_statements counts executions: simple statements and Executes.
                if e.command != "query" && e.command != "execute" {
                    continue;
                }
                let c = ours.entry(key(e.text.as_deref().unwrap())).or_default();
                c.0 += 1;
                c.1 += e.rows_sent + e.rows_affected;
            }
        }
        let mut pgss: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for l in a.lines().filter_map(|l| l.strip_prefix("# pgss ")) {
            let mut it = l.splitn(3, ' ');
            let num =
                |s: Option<&str>| -> u64 { s.unwrap().split_once('=').unwrap().1.parse().unwrap() };
            let (calls, rows) = (num(it.next()), num(it.next()));
            let query = it.next().unwrap().strip_prefix("query=").unwrap();
            let c = pgss.entry(key(query)).or_default();
            c.0 += calls;
            c.1 += rows;
        }
        if mode == "prepared" {
            // PostgreSQL 15 counts a prepared utility statement (BEGIN, END) once, at its
            // first execution, not at every Execute; the events count every Execute.
            for k in ["begin", "end"] {
                assert_eq!(pgss.remove(k), Some((1, 0)), "{mode}");
                assert_eq!(ours.remove(k), Some((5, 0)), "{mode}");
            }
        }
        assert_eq!(ours, pgss, "{mode}");
    }
}

#[test]
fn prepared_statements_share_their_text() {
    let r = run(&transcript(PSYCOPG3), true);
    let sql = "SELECT id, name, price FROM items WHERE id = $1";
    let ex: Vec<&QueryEvent> = r
        .events
        .iter()
        .filter(|e| e.command == "execute" && e.text.as_deref() == Some(sql))
        .collect();
    assert_eq!(ex.len(), 8);
    // psycopg prepares the statement under a name after 5 executions: one named Parse, then
    // every execution points at its text.
    let named: Vec<&Arc<str>> = ex[5..].iter().map(|e| e.text.as_ref().unwrap()).collect();
    assert!(named.iter().all(|t| Arc::ptr_eq(t, named[0])));
    let prepares = r
        .events
        .iter()
        .filter(|e| e.command == "prepare" && e.text.as_deref() == Some(sql))
        .count();
    assert_eq!(prepares, 6, "5 unnamed Parses, then one named");
    // pgbench -M prepared: one Parse per statement, then Bind/Execute only.
    let r = run(&transcript(PGBENCH[2].2), true);
    let prepares = r.events.iter().filter(|e| e.command == "prepare").count();
    assert_eq!(prepares, 7);
    assert_eq!(
        r.events.iter().filter(|e| e.command == "execute").count(),
        35
    );
}

/// The same conversations picked up after the startup: no user or database known.
#[test]
fn real_transcripts_picked_up_mid_stream() {
    for (name, text) in CLIENTS {
        if name.ends_with("_cancel") {
            continue;
        }
        let t = transcript(text);
        let t: Transcript = t.iter().skip(startup_len(&t)).cloned().collect();
        let r = run(&t, false);
        assert_eq!(r.health, Health::default(), "{name}");
        check(name, &r.events, &expectations(text));
        assert!(r.events.iter().all(|e| e.user.is_none()));
    }
}

/// Picked up in the middle of the 3000-row result: the next request resynchronizes.
#[test]
fn pickup_in_the_middle_of_a_big_result() {
    let t = transcript(PSQL_FILE);
    let big = t
        .iter()
        .position(|x| x.0 == Direction::ToClient && x.1.len() >= 8000)
        .unwrap();
    let tail: Transcript = t.into_iter().skip(big + 1).collect();
    let r = run(&tail, false);
    let exp = expectations(PSQL_FILE);
    check("psql_file tail", &r.events, &exp[exp.len() - 2..]);
    assert_eq!(r.health.responses_without_request, 0);
    assert!(r.health.unparsed_bytes > 0);
}

#[test]
fn real_transcripts_with_loss() {
    // Lose bytes inside the 3000-row result, within one DataRow's reach or across many rows.
    let t = transcript(PSQL_FILE);
    let i = t
        .iter()
        .position(|x| x.0 == Direction::ToClient && x.1.len() >= 8000)
        .unwrap();
    let off: u64 = t[..i]
        .iter()
        .filter(|x| x.0 == Direction::ToClient)
        .map(|x| x.1.len() as u64)
        .sum::<u64>()
        + 3000;
    let mut framing_held = 0;
    for (extra, len) in (0..16).map(|i| (i, 3)).chain([(0, 700)]) {
        let r = assert_chunking_invariant(
            || new_session(meta(true), SessionConfig::default()),
            &with_gap(&t, Direction::ToClient, off + extra, len),
        );
        let big = r
            .events
            .iter()
            .find(|e| e.text.as_deref() == Some("SELECT g FROM generate_series(1, 3000) g"))
            .unwrap();
        assert_eq!(big.outcome, Outcome::Incomplete, "{len}");
        let last = r.events.iter().rev().nth(1).unwrap();
        assert_eq!(last.text.as_deref(), Some("SELECT 1 AS a, NULL AS b"));
        assert_eq!((last.rows_sent, last.outcome), (1, Outcome::Ok));
        assert_eq!(r.health.responses_without_request, 0);
        assert!(r.health.resyncs <= 1);
        if r.health.resyncs == 0 {
            // The hole was inside one DataRow: every row is still counted.
            assert_eq!(big.rows_sent, 3000);
            framing_held += 1;
        } else {
            assert!(big.rows_sent < 3000);
        }
    }
    // A row is 15 bytes (5 of header): a 3-byte hole starting at 7 of the 15 offsets lies
    // inside one body (6 before the body's last byte, and one ending exactly at it).
    assert_eq!(framing_held, 7);

    // Lose the middle of a pipelined batch from the client: the first statement after the
    // Sync that follows pairs exactly again.
    let t = transcript(PSYCOPG3);
    let i = (0..t.len() - 1)
        .find(|&i| t[i].0 == Direction::ToServer && t[i + 1].0 == Direction::ToServer)
        .unwrap();
    let off: u64 = t[..=i]
        .iter()
        .filter(|x| x.0 == Direction::ToServer)
        .map(|x| x.1.len() as u64)
        .sum::<u64>()
        + 20;
    let r = assert_chunking_invariant(
        || new_session(meta(true), SessionConfig::default()),
        &with_gap(&t, Direction::ToServer, off, 40),
    );
    assert_eq!(r.health.responses_without_request, 0);
    assert_eq!(r.health.resyncs, 1);
    let exp = expectations(PSYCOPG3);
    // Everything from the UPDATE after the first pipeline Sync on is exact.
    let k = exp
        .iter()
        .position(|e| e.sql == "UPDATE items SET price = price WHERE id <= $1")
        .unwrap();
    let j = r
        .events
        .iter()
        .position(|e| e.command == "execute" && e.text.as_deref() == Some(&exp[k].sql[..]))
        .unwrap();
    check("psycopg3 after loss", &r.events[j..], &exp[k..]);
}

#[test]
fn real_startups_are_detected() {
    for (name, text) in all() {
        let t = transcript(text);
        let first = |d: Direction| t.iter().find(|x| x.0 == d).map(|x| x.1.clone()).unwrap();
        assert!(
            proto::postgres::looks_like_startup(&first(Direction::ToServer)),
            "{name}"
        );
        if name.ends_with("_cancel") {
            continue;
        }
        assert!(
            !proto::postgres::looks_like_startup(&first(Direction::ToClient)),
            "{name}"
        );
    }
}
