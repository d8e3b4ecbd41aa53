//! Real Redis 7.0 conversations (captured with tcpdump from redis-py with pipelines,
//! transactions and pub/sub, redis-cli in RESP2 and RESP3, redis-benchmark -P 16 and a raw RESP
//! client for RESP3, inline commands and CLIENT REPLY; see tests/data/redis/gen.py) checked
//! against what the clients themselves saw and against the server's own `INFO commandstats`.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use proto::redis::{RedisSession, new_session};
use proto::testing::{
    Chunking, Transcript, assert_chunking_invariant, parse_hex_transcript, run_steps, steps,
    with_gap,
};
use proto::{ConnMeta, Direction, Health, Outcome, QueryEvent, SessionConfig};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/redis")
}

/// Every transcript of the capture: (name, text).
fn transcripts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(data_dir()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name == "commandstats.txt" {
            continue;
        }
        let text = if let Some(stem) = name.strip_suffix(".txt.gz") {
            let mut s = String::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
                .read_to_string(&mut s)
                .unwrap();
            (stem.to_string(), s)
        } else if let Some(stem) = name.strip_suffix(".txt") {
            (stem.to_string(), std::fs::read_to_string(&path).unwrap())
        } else {
            continue;
        };
        out.push(text);
    }
    out.sort();
    assert!(out.len() >= 15, "transcripts missing: {}", out.len());
    out
}

#[derive(Debug)]
struct Expect {
    command: String,
    outcome: Outcome,
    rows: i64,
    text: String,
}

fn expectations(text: &str) -> Vec<Expect> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect "))
        .map(|l| {
            let (head, text) = l.split_once(" text=").unwrap();
            let mut it = head.split(' ');
            let command = it.next().unwrap().to_string();
            let outcome = match it.next().unwrap() {
                "ok" => Outcome::Ok,
                "error" => Outcome::Error,
                "noreply" => Outcome::NoReplyExpected,
                o => panic!("outcome {o}"),
            };
            let rows = it
                .next()
                .unwrap()
                .strip_prefix("rows=")
                .unwrap()
                .parse()
                .unwrap();
            Expect {
                command,
                outcome,
                rows,
                text: text.to_string(),
            }
        })
        .collect()
}

fn expected_pushes(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("# pushes "))
        .map(|n| n.parse().unwrap())
}

fn meta(saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 1,
        client: "127.0.0.1:40000".parse::<SocketAddr>().unwrap().into(),
        server: "127.0.0.1:26379".parse::<SocketAddr>().unwrap().into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

fn session(saw_open: bool) -> RedisSession {
    new_session(meta(saw_open), SessionConfig::default())
}

fn bytes(t: &Transcript, d: Direction) -> u64 {
    t.iter()
        .filter(|x| x.0 == d)
        .map(|x| x.1.len() as u64)
        .sum()
}

/// The events match the client's record one to one, in order.
fn check(name: &str, events: &[QueryEvent], exp: &[Expect]) {
    let got: Vec<String> = events
        .iter()
        .map(|e| format!("{} {}", e.command, e.text.as_deref().unwrap_or("")))
        .collect();
    let want: Vec<String> = exp
        .iter()
        .map(|e| format!("{} {}", e.command, e.text))
        .collect();
    assert_eq!(got, want, "{name}");
    for (ev, e) in events.iter().zip(exp) {
        assert_eq!(ev.outcome, e.outcome, "{name}: {e:?} {ev:?}");
        if e.rows >= 0 {
            assert_eq!(ev.rows_sent, e.rows as u64, "{name}: {e:?} {ev:?}");
        }
        assert!(ev.bytes_in > 0, "{name}: {ev:?}");
        if ev.outcome != Outcome::NoReplyExpected {
            assert!(ev.bytes_out > 0, "{name}: {ev:?}");
            assert!(
                ev.first_response_ns.unwrap() >= ev.start_ns,
                "{name}: {ev:?}"
            );
            assert!(ev.end_ns >= ev.first_response_ns, "{name}: {ev:?}");
        }
    }
}

/// Whether the server ran (or rejected) the command of this event, as `INFO commandstats`
/// counts: not for unknown commands, nor for queued commands that never ran.
fn counted(e: &QueryEvent) -> bool {
    if e.command == "unknown" {
        return false;
    }
    let state = e.error.as_ref().and_then(|x| x.state.as_deref());
    let never_ran = matches!(state, Some("DISCARDED" | "ABORTED"))
        || (state == Some("EXECABORT") && e.command != "exec");
    !never_ran
}

/// `INFO commandstats` key of an event: `get`, `config|get`, ...
fn stat_key(e: &QueryEvent) -> String {
    let text = e.text.as_deref().unwrap_or("");
    let container =
        proto::redis::commands::lookup(e.command.as_bytes()).is_some_and(|c| c.container);
    match text.split(' ').nth(1) {
        Some(sub) if container => format!("{}|{}", e.command, sub.to_ascii_lowercase()),
        _ => e.command.to_string(),
    }
}

#[test]
fn real_transcripts_match_the_clients_and_the_server_counters() {
    let mut per_command: BTreeMap<String, u64> = BTreeMap::new();
    for (name, text) in transcripts() {
        let t = parse_hex_transcript(&text).unwrap();
        let r = assert_chunking_invariant(|| session(true), &steps(&t));
        // Pushes (pub/sub messages) are counted, and are no trouble.
        let pushed = r.health.server_push_bytes;
        assert_eq!(
            Health {
                server_pushes: 0,
                server_push_bytes: 0,
                ..r.health.clone()
            },
            Health::default(),
            "{name}"
        );
        let exp = expectations(&text);
        if name.starts_with("other_") {
            assert!(exp.is_empty());
        } else {
            check(&name, &r.events, &exp);
        }
        // redis-benchmark -P 16 -n 2000 -c 1: one connection per test, 2000 commands each.
        for bench in ["set", "get", "lpush", "lpop", "hset"] {
            if name == format!("other_{bench}_1") {
                assert_eq!(r.events.len(), 2000, "{name}");
                assert!(
                    r.events
                        .iter()
                        .all(|e| e.command == bench && e.outcome == Outcome::Ok),
                    "{name}"
                );
            }
        }
        // Every byte is in an event or a push.
        assert_eq!(
            r.events.iter().map(|e| e.bytes_in).sum::<u64>(),
            bytes(&t, Direction::ToServer),
            "{name}"
        );
        assert_eq!(
            r.events.iter().map(|e| e.bytes_out).sum::<u64>() + pushed,
            bytes(&t, Direction::ToClient),
            "{name}"
        );
        assert_eq!(
            r.health.server_pushes,
            expected_pushes(&text).unwrap_or(0),
            "{name}"
        );
        for e in r.events.iter().filter(|e| counted(e)) {
            *per_command.entry(stat_key(e)).or_default() += 1;
        }
    }
    // The server's own counters: calls (including failed ones) plus rejected calls.
    let stats = std::fs::read_to_string(data_dir().join("commandstats.txt")).unwrap();
    let mut server: BTreeMap<String, u64> = BTreeMap::new();
    for line in stats.lines().filter(|l| !l.starts_with('#')) {
        let mut it = line.split(' ');
        let key = it.next().unwrap().to_string();
        let num =
            |s: Option<&str>| -> u64 { s.unwrap().split_once('=').unwrap().1.parse().unwrap() };
        let (calls, rejected) = (num(it.next()), num(it.next()));
        server.insert(key, calls + rejected);
    }
    assert_eq!(per_command, server);
}

#[test]
fn real_resp3_connections_are_recognised() {
    for (name, text) in transcripts() {
        let t = parse_hex_transcript(&text).unwrap();
        let mut s = session(true);
        run_steps(&mut s, &steps(&t), Chunking::Whole);
        let resp3 = name == "raw_resp3" || name == "other_hello_1";
        assert_eq!(s.resp3(), resp3, "{name}");
    }
}

#[test]
fn first_client_bytes_are_detected() {
    for (name, text) in transcripts() {
        let t = parse_hex_transcript(&text).unwrap();
        let first = |d: Direction| t.iter().find(|x| x.0 == d).map(|x| x.1.clone());
        assert!(
            proto::redis::looks_like_request(&first(Direction::ToServer).unwrap()),
            "{name}"
        );
        // Replies are not commands, except that a RESP2 array of bulk strings (`COMMAND
        // DOCS`, `KEYS`, ...) looks exactly like one: detection is for client bytes only.
        if let Some(reply) = first(Direction::ToClient).filter(|r| r.first() != Some(&b'*')) {
            assert!(!proto::redis::looks_like_request(&reply), "{name}");
        }
    }
}

/// Pairs each event of `part` (a run that missed or lost some bytes) with the event of the
/// full run for the same command: same start timestamp and text, counting from the end among
/// equals (a pipelined segment carries many commands with the same start and often the same
/// text; a run that starts late misses the first ones).
fn twins<'a>(
    full: &'a [QueryEvent],
    part: &'a [QueryEvent],
) -> Vec<(&'a QueryEvent, Option<&'a QueryEvent>)> {
    type Key<'k> = (u64, Option<&'k str>);
    let mut groups: BTreeMap<Key<'a>, Vec<&'a QueryEvent>> = BTreeMap::new();
    for e in full {
        groups
            .entry((e.start_ns, e.text.as_deref()))
            .or_default()
            .push(e);
    }
    let mut counts: BTreeMap<Key<'a>, usize> = BTreeMap::new();
    for e in part {
        *counts.entry((e.start_ns, e.text.as_deref())).or_default() += 1;
    }
    let mut seen: BTreeMap<Key<'a>, usize> = BTreeMap::new();
    part.iter()
        .map(|e| {
            let key = (e.start_ns, e.text.as_deref());
            let i = seen.entry(key).or_default();
            let n = counts[&key];
            let twin = groups
                .get(&key)
                .and_then(|g| g.len().checked_sub(n).and_then(|start| g.get(start + *i)))
                .copied();
            *i += 1;
            (e, twin)
        })
        .collect()
}

/// The same conversations picked up after their first segments: every event the session
/// reports with an answer is one the full run reported the same way.
#[test]
fn real_transcripts_picked_up_mid_stream() {
    for (name, text) in transcripts() {
        let full_t = parse_hex_transcript(&text).unwrap();
        let full = assert_chunking_invariant(|| session(true), &steps(&full_t));
        for skip in [1usize, 2, 3, 5] {
            if full_t.len() <= skip + 1 {
                continue;
            }
            let t: Transcript = full_t[skip..].to_vec();
            let r = assert_chunking_invariant(|| session(false), &steps(&t));
            assert_eq!(r.health.responses_without_request, 0, "{name} skip {skip}");
            for (e, twin) in twins(&full.events, &r.events) {
                if !matches!(e.outcome, Outcome::Ok | Outcome::Error) || e.command == "exec" {
                    continue;
                }
                let twin = twin.unwrap_or_else(|| panic!("{name} skip {skip}: no twin for {e:?}"));
                assert_eq!(
                    (twin.outcome, twin.rows_sent, twin.bytes_in, twin.bytes_out),
                    (e.outcome, e.rows_sent, e.bytes_in, e.bytes_out),
                    "{name} skip {skip}: {e:?}"
                );
            }
        }
    }
}

/// Lose bytes in either direction at several places: the session never pairs a reply with
/// the wrong command it reports as answered.
#[test]
fn real_transcripts_with_loss() {
    for (name, text) in transcripts() {
        if !(name.starts_with("py_") || name.starts_with("raw_") || name == "other_set_1") {
            continue;
        }
        let t = parse_hex_transcript(&text).unwrap();
        let full = run_steps(&mut session(true), &steps(&t), Chunking::Whole);
        for d in [Direction::ToServer, Direction::ToClient] {
            let total = bytes(&t, d);
            for k in 1..6u64 {
                let off = total * k / 6;
                let r = assert_chunking_invariant(|| session(true), &with_gap(&t, d, off, 3));
                if r.health.resyncs == 0 {
                    // The gap fell inside a bulk string: the framing held and every command
                    // is still there, paired as in the full run.
                    held(&full, &r, d, &format!("{name} {d:?} at {off}"));
                    continue;
                }
                assert_eq!(r.health.resyncs, 1, "{name} {d:?} at {off}");
                for (e, twin) in twins(&full.events, &r.events) {
                    if e.outcome != Outcome::Ok || e.command == "exec" {
                        continue;
                    }
                    let twin = twin.unwrap_or_else(|| panic!("{name} {d:?} at {off}: {e:?}"));
                    assert_eq!(
                        (twin.outcome, twin.rows_sent, twin.bytes_out),
                        (e.outcome, e.rows_sent, e.bytes_out),
                        "{name} {d:?} at {off}: {e:?}"
                    );
                }
            }
        }
    }
}

/// The payloads (offset, length) of every bulk string, blob error and verbatim string in one
/// direction's stream, nested ones included; inline commands are stepped over.
fn payloads(stream: &[u8]) -> Vec<(u64, u64)> {
    let line_end = |from: usize| -> usize {
        from + stream[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("CRLF")
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    // Values still to read in the open aggregates (0 at top level: one value after another).
    let mut stack: Vec<i64> = Vec::new();
    while at < stream.len() {
        let ty = stream[at];
        if stack.is_empty() && !b"+-:$*_#,(!=%~|>".contains(&ty) {
            // An inline command.
            at += stream[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
            continue;
        }
        let end = line_end(at + 1);
        let line = std::str::from_utf8(&stream[at + 1..end]).unwrap();
        at = end + 2;
        let mut children = 0i64;
        match ty {
            b'$' | b'!' | b'=' => {
                let n: i64 = line.parse().unwrap();
                if n >= 0 {
                    out.push((at as u64, n as u64));
                    at += n as usize + 2;
                }
            }
            b'*' | b'~' | b'>' => children = line.parse().unwrap(),
            b'%' | b'|' => children = 2 * line.parse::<i64>().unwrap(),
            _ => {}
        }
        if ty == b'|' {
            // An attribute precedes the value it annotates: that value is still to come.
            if let Some(top) = stack.last_mut() {
                *top += 1;
            }
        }
        if children > 0 {
            stack.push(children);
            continue;
        }
        // A value ended: close the aggregates it completes.
        while let Some(top) = stack.last_mut() {
            *top -= 1;
            if *top > 0 {
                break;
            }
            stack.pop();
        }
    }
    out
}

fn stream(t: &Transcript, d: Direction) -> Vec<u8> {
    t.iter()
        .filter(|x| x.0 == d)
        .flat_map(|x| x.1.clone())
        .collect()
}

/// A run with a gap whose framing held (`r`) against the full run: the same commands, paired
/// and timed the same, the same bytes, rows and health; at most one event differs: the
/// command whose value lost bytes is marked partial (exactly one when the client lost
/// bytes), or the command whose reply lost bytes is incomplete (none when the bytes were
/// lost from a pushed message).
fn held(full: &proto::VecSink, r: &proto::VecSink, d: Direction, place: &str) {
    assert_eq!(r.health, full.health, "{place}");
    assert_eq!(r.events.len(), full.events.len(), "{place}");
    let mut changed = 0;
    for (e, f) in r.events.iter().zip(&full.events) {
        assert_eq!(
            (e.start_ns, e.end_ns, e.bytes_in, e.bytes_out),
            (f.start_ns, f.end_ns, f.bytes_in, f.bytes_out),
            "{place}"
        );
        // A command whose name lost bytes is unknown (its text is the part seen).
        if !e.text_partial || e.command != "unknown" {
            assert_eq!(e.command, f.command, "{place}");
        }
        assert_eq!(e.rows_sent, f.rows_sent, "{place}");
        if format!("{e:?}") == format!("{f:?}") {
            continue;
        }
        changed += 1;
        if d == Direction::ToServer {
            assert!(e.text_partial && e.outcome == f.outcome, "{place}: {e:?}");
        } else {
            assert!(
                !e.text_partial && e.outcome == Outcome::Incomplete,
                "{place}: {e:?}"
            );
        }
    }
    assert!(changed <= 1, "{place}");
    if d == Direction::ToServer {
        assert_eq!(changed, 1, "{place}");
    }
}

/// Gaps inside the largest values of the real conversations (as a snap length cuts large
/// segments): the framing holds, every command is still counted and paired as in the full
/// run; only the command whose value lost bytes is marked partial, or the command whose
/// reply lost bytes incomplete.
#[test]
fn real_transcripts_with_gaps_inside_values_count_every_command() {
    let mut tried = 0;
    for (name, text) in transcripts() {
        let t = parse_hex_transcript(&text).unwrap();
        let full = run_steps(&mut session(true), &steps(&t), Chunking::Whole);
        for d in [Direction::ToServer, Direction::ToClient] {
            let mut spans = payloads(&stream(&t, d));
            assert!(!spans.is_empty() || d == Direction::ToClient, "{name}");
            // The five largest values of at least 32 bytes.
            spans.sort_by_key(|s| std::cmp::Reverse(s.1));
            for &(at, len) in spans.iter().filter(|s| s.1 >= 32).take(5) {
                tried += 1;
                let (from, lost) = (at + len / 4, len / 2);
                let r = assert_chunking_invariant(|| session(true), &with_gap(&t, d, from, lost));
                held(&full, &r, d, &format!("{name} {d:?} {from}+{lost}"));
            }
        }
    }
    assert!(tried >= 15, "{tried}");
}
