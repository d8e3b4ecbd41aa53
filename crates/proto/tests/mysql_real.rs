//! Real MariaDB 10.11 conversations (captured with tcpdump from PyMySQL, mysqlclient with
//! compression, the mariadb CLI and a raw binary-protocol client; see tests/data/mysql/gen.py)
//! checked against what the clients themselves saw: rows, affected rows, error codes.

use std::net::SocketAddr;

use proto::mysql::new_session;
use proto::testing::{
    Transcript, assert_chunking_invariant, parse_hex_transcript, steps, with_gap,
};
use proto::{ConnMeta, Direction, Health, Outcome, QueryEvent, SessionConfig};

const PYMYSQL: &str = include_str!("data/mysql/pymysql_text.txt");
const COMPRESSED: &str = include_str!("data/mysql/mysqldb_compressed.txt");
const PREPARED_MARIADB: &str = include_str!("data/mysql/raw_prepared_mariadb.txt");
const PREPARED_EOF: &str = include_str!("data/mysql/raw_prepared_eof.txt");
const CLI: &str = include_str!("data/mysql/mariadb_cli.txt");
const ALL: [(&str, &str); 5] = [
    ("pymysql_text", PYMYSQL),
    ("mysqldb_compressed", COMPRESSED),
    ("raw_prepared_mariadb", PREPARED_MARIADB),
    ("raw_prepared_eof", PREPARED_EOF),
    ("mariadb_cli", CLI),
];

#[derive(Debug)]
struct Expect {
    command: String,
    rows: u64,
    affected: u64,
    err: u32,
    sql: String,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect "))
        .map(|l| {
            let (head, sql) = l.split_once(" sql=").unwrap();
            let mut it = head.split(' ');
            let command = it.next().unwrap().to_string();
            let mut num = || {
                it.next()
                    .unwrap()
                    .split_once('=')
                    .unwrap()
                    .1
                    .parse::<u64>()
                    .unwrap()
            };
            let (rows, affected, err) = (num(), num(), num() as u32);
            Expect {
                command,
                rows,
                affected,
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
        server: "127.0.0.1:23306".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn transcript(text: &str) -> Transcript {
    parse_hex_transcript(text).unwrap()
}

/// Matches the events against the client's record, in order. Events the test did not issue
/// (queries a client library sends on its own) may appear in between, but only as queries.
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
            assert_eq!(extra.command, "query", "{name}: unexpected {extra:?}");
            assert_eq!(extra.outcome, Outcome::Ok, "{name}: {extra:?}");
        }
        let ev = &events[i + k];
        assert_eq!(ev.rows_sent, e.rows, "{name}: rows of {e:?}");
        assert_eq!(
            ev.rows_affected, e.affected,
            "{name}: affected rows of {e:?}"
        );
        assert_eq!(
            ev.error.as_ref().map_or(0, |x| x.code),
            e.err,
            "{name}: error of {e:?}"
        );
        let want = match (e.err, e.command.as_str()) {
            (0, "quit" | "close" | "send_long_data") => Outcome::NoReplyExpected,
            (0, _) => Outcome::Ok,
            _ => Outcome::Error,
        };
        assert_eq!(ev.outcome, want, "{name}: {ev:?}");
        assert!(ev.bytes_in > 0, "{name}: {ev:?}");
        if want != Outcome::NoReplyExpected {
            assert!(
                ev.bytes_out > 0 && ev.end_ns >= ev.first_response_ns,
                "{name}: {ev:?}"
            );
            assert!(
                ev.first_response_ns.unwrap() >= ev.start_ns,
                "{name}: {ev:?}"
            );
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
    for (name, text) in ALL {
        let t = transcript(text);
        let r = assert_chunking_invariant(
            || new_session(meta(true), SessionConfig::default()),
            &steps(&t),
        );
        assert_eq!(r.health, Health::default(), "{name}");
        check(name, &r.events, &expectations(text));
        for ev in &r.events {
            assert_eq!(ev.user.as_deref(), Some("app"), "{name}");
        }
        // Wire bytes: every byte of the conversation after the handshake is attributed.
        let after_handshake = |d: Direction| -> u64 {
            t.iter()
                .skip(3)
                .filter(|x| x.0 == d)
                .map(|x| x.1.len() as u64)
                .sum()
        };
        let bytes_in: u64 = r.events.iter().map(|e| e.bytes_in).sum();
        let bytes_out: u64 = r.events.iter().map(|e| e.bytes_out).sum();
        assert_eq!(bytes_in, after_handshake(Direction::ToServer), "{name}");
        assert_eq!(bytes_out, after_handshake(Direction::ToClient), "{name}");
    }
}

#[test]
fn schema_follows_init_db_use_and_session_tracking() {
    let r = assert_chunking_invariant(
        || new_session(meta(true), SessionConfig::default()),
        &steps(&transcript(PYMYSQL)),
    );
    let db_of = |sql: &str| {
        r.events
            .iter()
            .find(|e| e.text.as_deref() == Some(sql))
            .and_then(|e| e.database.as_deref().map(str::to_owned))
    };
    assert_eq!(db_of("SELECT COUNT(*) FROM items").as_deref(), Some("shop"));
    assert_eq!(db_of("SELECT DATABASE()").as_deref(), Some("mysql"));
    assert_eq!(
        db_of("DELETE FROM items WHERE id > 5").as_deref(),
        Some("shop")
    );
    let r = assert_chunking_invariant(
        || new_session(meta(true), SessionConfig::default()),
        &steps(&transcript(CLI)),
    );
    assert!(
        r.events
            .iter()
            .all(|e| e.database.as_deref() == Some("shop"))
    );
}

#[test]
fn prepared_statements_share_their_text() {
    for text in [PREPARED_MARIADB, PREPARED_EOF] {
        let r = assert_chunking_invariant(
            || new_session(meta(true), SessionConfig::default()),
            &steps(&transcript(text)),
        );
        let sel: Vec<&QueryEvent> = r
            .events
            .iter()
            .filter(|e| e.text.as_deref() == Some("SELECT id, name, price FROM items WHERE id > ?"))
            .collect();
        assert!(sel.len() >= 6);
        let id = sel[0].statement_id;
        assert!(id.is_some());
        for e in &sel {
            assert_eq!(e.statement_id, id);
            assert!(std::sync::Arc::ptr_eq(
                e.text.as_ref().unwrap(),
                sel[0].text.as_ref().unwrap()
            ));
        }
    }
}

/// The same conversations picked up after the handshake: no capabilities known, compression
/// and EOF style found from the traffic.
#[test]
fn real_transcripts_picked_up_mid_stream() {
    for (name, text) in ALL {
        let t: Transcript = transcript(text).into_iter().skip(3).collect();
        let r = assert_chunking_invariant(
            || new_session(meta(false), SessionConfig::default()),
            &steps(&t),
        );
        assert_eq!(r.health, Health::default(), "{name}");
        check(name, &r.events, &expectations(text));
        assert!(r.events.iter().all(|e| e.user.is_none()));
    }
}

/// Picked up in the middle of a response: the client's next command resynchronizes.
#[test]
fn pickup_in_the_middle_of_a_big_result() {
    let t = transcript(COMPRESSED);
    // The 3000-row result spans several segments; start inside it.
    let big = t
        .iter()
        .position(|x| x.0 == Direction::ToClient && x.1.len() > 1000)
        .unwrap();
    let tail: Transcript = t.into_iter().skip(big + 1).collect();
    let r = assert_chunking_invariant(
        || new_session(meta(false), SessionConfig::default()),
        &steps(&tail),
    );
    let exp = expectations(COMPRESSED);
    check("compressed tail", &r.events, &exp[1..]);
    assert_eq!(r.health.responses_without_request, 0);
    assert!(r.health.unparsed_bytes > 0);
}

#[test]
fn real_transcripts_with_loss() {
    // Lose bytes inside the 2000-row result: that query is incomplete, everything else exact.
    let t = transcript(PYMYSQL);
    let i = t
        .iter()
        .position(|x| x.0 == Direction::ToClient && x.1.len() > 5000)
        .unwrap();
    let off: u64 = t[..i]
        .iter()
        .filter(|x| x.0 == Direction::ToClient)
        .map(|x| x.1.len() as u64)
        .sum::<u64>()
        + 3000;
    let r = assert_chunking_invariant(
        || new_session(meta(true), SessionConfig::default()),
        &with_gap(&t, Direction::ToClient, off, 700),
    );
    let big = r
        .events
        .iter()
        .find(|e| e.text.as_deref() == Some("SELECT seq FROM seq_1_to_2000"))
        .unwrap();
    assert_eq!(big.outcome, Outcome::Incomplete);
    assert!(big.rows_sent < 2000);
    let last = r
        .events
        .iter()
        .find(|e| e.text.as_deref() == Some("SELEC 1"))
        .unwrap();
    assert_eq!(last.error.as_ref().unwrap().code, 1064);
    assert_eq!(r.health.resyncs, 1);

    // Lose the middle of a client command in the compressed conversation.
    let t = transcript(COMPRESSED);
    let i = t
        .iter()
        .position(|x| x.0 == Direction::ToServer && x.1.len() > 40)
        .unwrap()
        + 2;
    let i = i + t[i..]
        .iter()
        .position(|x| x.0 == Direction::ToServer)
        .unwrap();
    let off: u64 = t[..i]
        .iter()
        .filter(|x| x.0 == Direction::ToServer)
        .map(|x| x.1.len() as u64)
        .sum::<u64>()
        + 5;
    let r = assert_chunking_invariant(
        || new_session(meta(true), SessionConfig::default()),
        &with_gap(&t, Direction::ToServer, off, 3),
    );
    let exp = expectations(COMPRESSED);
    assert_eq!(r.events.len(), exp.len() - 1, "{:#?}", r.events);
    assert_eq!(r.health.responses_without_request, 0);
}

#[test]
fn real_greetings_are_detected() {
    for (name, text) in ALL {
        let t = transcript(text);
        let first = |d: Direction| t.iter().find(|x| x.0 == d).map(|x| x.1.clone()).unwrap();
        assert!(
            proto::mysql::looks_like_server_greeting(&first(Direction::ToClient)),
            "{name}"
        );
        assert!(
            !proto::mysql::looks_like_server_greeting(&first(Direction::ToServer)),
            "{name}"
        );
    }
}
