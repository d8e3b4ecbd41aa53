//! Capture gaps inside a message whose length the header announced: the framing holds up to
//! the message's last byte, the request is counted, paired and timed with its text marked
//! partial; a gap longer than what the message has left still loses sync. Every chunking.

use super::*;

/// The client's `SELECT a FROM t` is transcript index 4 (5 header bytes, 15 SQL bytes, NUL).
const Q1: u64 = 21;

#[test]
fn client_gap_inside_a_query_marks_its_text_partial() {
    let b = busy();
    let off = bytes(&b.t[..4], C, 0);
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off + 7, 3));
    assert_eq!(r.events.len(), 5);
    let e = &r.events[0];
    assert!(e.text_partial);
    assert_eq!(e.text.as_deref(), Some("SE"));
    assert_eq!(e.bytes_in, Q1);
    assert_eq!(e.start_ns, b.t[4].2);
    assert_eq!(e.end_ns, Some(b.t[5].2));
    assert_eq!(e.rows_sent, 2);
    assert!(r.events[1..].iter().all(|e| !e.text_partial));
    assert_eq!(r.health.resyncs, 0);
}

#[test]
fn client_gap_ending_exactly_at_the_end_of_a_query() {
    let b = busy();
    let off = bytes(&b.t[..4], C, 0);
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off + 10, Q1 - 10));
    assert_eq!(r.health.resyncs, 0);
    assert_eq!(r.events.len(), 5);
    let e = &r.events[0];
    assert!(e.text_partial);
    assert_eq!(e.text.as_deref(), Some("SELEC"));
    assert_eq!(e.end_ns, Some(b.t[5].2));
    assert_eq!(e.rows_sent, 2);
    assert_eq!(
        texts(&r.events)[1..],
        [
            "SELECT $1",
            "SELECT $1",
            "UPDATE t SET a = 2",
            "DELETE FROM t"
        ]
    );
    // One byte more takes the next message's type byte: sync is lost, the request with it.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off + 10, Q1 - 9));
    assert!(r.health.resyncs >= 1);
    assert!(r.events.iter().all(|e| !e.text_partial));
    assert_eq!(texts(&r.events), ["UPDATE t SET a = 2", "DELETE FROM t"]);
}

#[test]
fn client_gap_inside_parse_marks_the_execution_partial() {
    let b = busy();
    // The extended batch (index 6) starts with Parse("", "SELECT $1"): 5 header bytes, the
    // empty name's NUL, then the text.
    let off = bytes(&b.t[..6], C, 0);
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off + 9, 3));
    assert_eq!(r.health.resyncs, 0);
    assert_eq!(r.events.len(), 5);
    let partial: Vec<&str> = r
        .events
        .iter()
        .filter(|e| e.text_partial)
        .map(|e| e.command)
        .collect();
    assert!(
        !partial.is_empty() && partial.iter().all(|c| *c != "query"),
        "{partial:?}"
    );
}

#[test]
fn server_gap_ending_exactly_at_the_end_of_a_row() {
    let b = busy();
    // The 300-byte DataRow starts 37 bytes into the response at index 7: a 5-byte header,
    // the column count, the value's length, the value.
    let start = bytes(&b.t[..7], S, 0) + 37;
    let row_len = 5 + 2 + 4 + 300;
    let r = assert_chunking_invariant(
        || session(true),
        &with_gap(&b.t, S, start + 20, row_len - 20),
    );
    assert_eq!(r.health.resyncs, 0);
    let e = &r.events[2];
    assert_eq!(e.outcome, Outcome::Incomplete);
    assert_eq!(e.rows_sent, 1);
    assert_eq!(e.end_ns, Some(b.t[7].2));
    assert!(!e.text_partial);
    assert!(r.events[3..].iter().all(|e| e.outcome == Outcome::Ok));
    // One byte more: the next message's type byte is lost with it.
    let st = with_gap(&b.t, S, start + 20, row_len - 19);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(r.health.resyncs, 1);
    assert_eq!(r.events[2].outcome, Outcome::Incomplete);
}
