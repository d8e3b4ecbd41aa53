//! Real MongoDB conversations (pymongo 4 against mongo-java-server, captured with tcpdump; see
//! tests/data/mongodb/gen.py) checked against what the client itself saw: pymongo's command
//! monitoring recorded every command's reply (documents returned, n, nModified, error codes).

use std::net::SocketAddr;

use proto::mongodb::new_session;
use proto::testing::{
    Transcript, assert_chunking_invariant, parse_hex_transcript, steps, with_gap,
};
use proto::{ConnMeta, Direction, Health, Outcome, QueryEvent, SessionConfig};

const CRUD: &str = include_str!("data/mongodb/pymongo_crud.txt");
const READS: &str = include_str!("data/mongodb/pymongo_reads.txt");
const ALL: [(&str, &str); 2] = [("pymongo_crud", CRUD), ("pymongo_reads", READS)];

#[derive(Debug)]
struct Expect {
    command: String,
    rows: u64,
    affected: u64,
    err: u32,
    outcome: Outcome,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect "))
        .map(|l| {
            let mut it = l.split(' ');
            let command = it.next().unwrap().to_string();
            let field = |k: &str| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                    .unwrap()
                    .to_string()
            };
            Expect {
                command,
                rows: field("rows").parse().unwrap(),
                affected: field("affected").parse().unwrap(),
                err: field("err").parse().unwrap(),
                outcome: match field("outcome").as_str() {
                    "ok" => Outcome::Ok,
                    "error" => Outcome::Error,
                    "noreply" => Outcome::NoReplyExpected,
                    o => panic!("outcome {o}"),
                },
            }
        })
        .collect()
}

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 1,
        client: "127.0.0.1:40000".parse::<SocketAddr>().unwrap().into(),
        server: "127.0.0.1:27117".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn transcript(text: &str) -> Transcript {
    parse_hex_transcript(text).unwrap()
}

fn run(t: &Transcript, saw_open: bool) -> proto::VecSink {
    assert_chunking_invariant(
        || new_session(meta(saw_open), SessionConfig::default()),
        &steps(t),
    )
}

/// Commands pymongo sends without reporting them to listeners: the handshake and the
/// endSessions of `close()`.
const HIDDEN: [&str; 3] = ["ismaster", "hello", "endsessions"];

fn check(name: &str, events: &[QueryEvent], exp: &[Expect]) {
    let mut i = 0;
    for e in exp {
        let found = events[i..].iter().position(|ev| {
            ev.command == e.command || (ev.command == "unknown" && e.command == "nosuchcommand")
        });
        let Some(k) = found else {
            panic!(
                "{name}: no event for {e:?} after #{i}; events: {:#?}",
                &events[i..]
            );
        };
        for extra in &events[i..i + k] {
            assert!(
                HIDDEN.contains(&extra.command),
                "{name}: unexpected {extra:?}"
            );
            assert_eq!(extra.outcome, Outcome::Ok, "{name}: {extra:?}");
        }
        let ev = &events[i + k];
        assert_eq!(ev.rows_sent, e.rows, "{name}: rows of {e:?}: {ev:?}");
        assert_eq!(
            ev.rows_affected, e.affected,
            "{name}: affected of {e:?}: {ev:?}"
        );
        assert_eq!(
            ev.error.as_ref().map_or(0, |x| x.code),
            e.err,
            "{name}: {ev:?}"
        );
        assert_eq!(ev.outcome, e.outcome, "{name}: {ev:?}");
        assert!(ev.bytes_in > 0 && ev.text.is_some(), "{name}: {ev:?}");
        if e.outcome != Outcome::NoReplyExpected {
            assert!(
                ev.bytes_out > 0 && ev.end_ns >= ev.first_response_ns,
                "{name}: {ev:?}"
            );
        }
        i += k + 1;
    }
    for extra in &events[i..] {
        assert!(
            HIDDEN.contains(&extra.command),
            "{name}: unexpected {extra:?}"
        );
    }
}

#[test]
fn events_match_what_pymongo_saw() {
    for (name, text) in ALL {
        let t = transcript(text);
        let sink = run(&t, true);
        check(name, &sink.events, &expectations(text));
        assert_eq!(sink.health, Health::default(), "{name}");
        // pymongo 4.20's handshake: isMaster over OP_MSG (with helloOk).
        let first = &sink.events[0];
        assert_eq!(
            (first.command, first.text.as_deref()),
            ("ismaster", Some("isMaster admin"))
        );
        assert_eq!(first.outcome, Outcome::Ok);
        // Every getMore carries the shape of the command that opened its cursor.
        let mut opener = None;
        for e in &sink.events {
            match e.command {
                "find" | "aggregate" => opener = e.text.clone(),
                "getmore" => {
                    let o = opener.as_deref().unwrap();
                    let shape = o.split_once(' ').unwrap().1;
                    assert_eq!(
                        e.text.as_deref(),
                        Some(&*format!("getMore {shape}")),
                        "{name}"
                    );
                }
                _ => {}
            }
        }
        // No literal value reaches the text.
        for e in &sink.events {
            let t = e.text.as_deref().unwrap();
            for lit in ["user7", "newbie", "c1", "secret", "\"A\"", "1000"] {
                assert!(!t.contains(lit), "{name}: {t}");
            }
        }
    }
}

#[test]
fn shapes_of_real_commands() {
    let sink = run(&transcript(CRUD), true);
    let texts: Vec<&str> = sink
        .events
        .iter()
        .map(|e| e.text.as_deref().unwrap())
        .collect();
    assert!(texts.contains(
        &r#"find dbtap_crud.users {"filter":{"age":{"$gte":"?"},"name":{"$ne":"?"}},"sort":{"age":-1,"name":1},"projection":{"name":1,"age":1}}"#
    ));
    assert!(texts.contains(&r#"delete dbtap_crud.users {"q":{"name":{"$in":"?"}},"limit":1}"#));
    assert!(texts.contains(
        &r#"update dbtap_crud.users {"q":{"name":"?"},"u":{"$set":{"age":"?"}},"multi":false,"upsert":true}"#
    ));
    let sink = run(&transcript(READS), true);
    let texts: Vec<&str> = sink
        .events
        .iter()
        .map(|e| e.text.as_deref().unwrap())
        .collect();
    assert!(texts.contains(
        &r#"aggregate dbtap_reads.orders {"pipeline":[{"$match":{"status":"?"}},{"$group":{"_id":"$cust","total":{"$sum":"$amount"}}},{"$sort":{"total":-1}}]}"#
    ));
    assert!(
        texts.contains(
            &r#"distinct dbtap_reads.orders {"key":"cust","query":{"amount":{"$in":"?"}}}"#
        )
    );
}

/// Picked up after the first `skip` segments: the requests seen whole are paired as before,
/// nothing panics, and every event that completed is one the client saw.
#[test]
fn mid_stream_pickup_on_real_conversations() {
    for (name, text) in ALL {
        let full = run(&transcript(text), true).events;
        for skip in 1..12 {
            let mut t = transcript(text);
            t.drain(..skip);
            let sink = run(&t, false);
            assert_eq!(sink.health.responses_without_request, 0, "{name} {skip}");
            // The tail matches the full run event for event.
            let got: Vec<_> = sink
                .events
                .iter()
                .map(|e| (e.command, e.rows_sent, e.rows_affected, e.outcome))
                .collect();
            let want: Vec<_> = full
                .iter()
                .map(|e| (e.command, e.rows_sent, e.rows_affected, e.outcome))
                .collect();
            assert!(got.len() <= want.len(), "{name} {skip}");
            let tail = &want[want.len() - got.len()..];
            assert_eq!(got, tail, "{name} skip {skip}");
            assert!(
                got.len() + 2 * skip >= want.len(),
                "{name} {skip}: lost too much"
            );
        }
    }
}

/// Bytes lost anywhere in either direction: the chunkings agree, nothing panics, the events
/// are never more than the conversation has, and the framing comes back.
#[test]
fn gaps_in_real_conversations() {
    for (name, text) in ALL {
        let t = transcript(text);
        let events = run(&t, true).events;
        let full = events.len();
        let full_ok = events.iter().filter(|e| e.outcome == Outcome::Ok).count();
        for dir in [Direction::ToServer, Direction::ToClient] {
            let total: u64 = t
                .iter()
                .filter(|x| x.0 == dir)
                .map(|x| x.1.len() as u64)
                .sum();
            for k in 0..20u64 {
                let off = total * k / 20;
                for len in [1, 17, 300] {
                    let sink = assert_chunking_invariant(
                        || new_session(meta(true), SessionConfig::default()),
                        &with_gap(&t, dir, off, len),
                    );
                    let n = sink.events.len();
                    assert!(n <= full, "{name} {dir:?} {off}+{len}: {n} of {full}");
                    let ok = sink
                        .events
                        .iter()
                        .filter(|e| e.outcome == Outcome::Ok)
                        .count();
                    // The messages the hole touches, and those it holds whole, are lost.
                    let lost = 2 + len as usize / 50;
                    assert!(
                        ok + lost >= full_ok,
                        "{name} {dir:?} {off}+{len}: {ok} ok of {full_ok}"
                    );
                }
            }
        }
    }
}

/// The messages (offset, length) of one direction's stream, walked by their headers.
fn messages(t: &Transcript, dir: Direction) -> Vec<(u64, u64)> {
    let s: Vec<u8> = t
        .iter()
        .filter(|x| x.0 == dir)
        .flat_map(|x| x.1.clone())
        .collect();
    let mut out = Vec::new();
    let mut at = 0usize;
    while at + 16 <= s.len() {
        let len = u32::from_le_bytes(s[at..at + 4].try_into().unwrap()) as usize;
        out.push((at as u64, len as u64));
        at += len;
    }
    assert_eq!(at, s.len());
    out
}

/// Gaps inside the bodies of the largest messages (as a snap length cuts large segments):
/// the framing holds, every command is still counted, paired and timed as in the full run;
/// only the command that lost bytes is marked partial, or the one whose reply lost bytes is
/// incomplete.
#[test]
fn gaps_inside_messages_count_every_command() {
    let mut tried = 0;
    for (name, text) in ALL {
        let t = transcript(text);
        let full = run(&t, true);
        for dir in [Direction::ToServer, Direction::ToClient] {
            let mut msgs = messages(&t, dir);
            msgs.sort_by_key(|m| std::cmp::Reverse(m.1));
            for &(at, len) in msgs.iter().take(5) {
                let body = len - 16;
                let (from, lost) = (at + 16 + body / 4, body / 2);
                let sink = assert_chunking_invariant(
                    || new_session(meta(true), SessionConfig::default()),
                    &with_gap(&t, dir, from, lost),
                );
                tried += 1;
                let place = format!("{name} {dir:?} {from}+{lost}");
                assert_eq!(sink.health, full.health, "{place}");
                assert_eq!(sink.events.len(), full.events.len(), "{place}");
                let mut changed = 0;
                for (e, f) in sink.events.iter().zip(&full.events) {
                    assert_eq!(
                        (e.command, e.start_ns, e.end_ns, e.bytes_in, e.bytes_out),
                        (f.command, f.start_ns, f.end_ns, f.bytes_in, f.bytes_out),
                        "{place}"
                    );
                    if format!("{e:?}") == format!("{f:?}") {
                        continue;
                    }
                    // A getMore's text is that of the command that opened its cursor, which
                    // may be the one cut.
                    let same_but_text = QueryEvent {
                        text: f.text.clone(),
                        ..e.clone()
                    };
                    if e.command == "getmore" && format!("{same_but_text:?}") == format!("{f:?}") {
                        continue;
                    }
                    changed += 1;
                    assert_eq!(e.outcome, Outcome::Incomplete, "{place}: {e:?}");
                    assert_eq!(e.text_partial, dir == Direction::ToServer, "{place}");
                }
                assert_eq!(changed, 1, "{place}");
            }
        }
    }
    assert_eq!(tried, 20);
}
