//! Capture gaps inside a packet whose length the header announced: the framing holds, the
//! request is still counted, paired and timed (its text marked partial), and a gap that
//! reaches past the packet still loses sync. Fed in every chunking.

use super::*;

fn caps_eof() -> u64 {
    BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
}

/// Handshake, then `SELECT a FROM t` (3 rows), an INSERT, and `SELECT 3`: transcript indexes
/// 3/4, 5/6 and 7/8.
fn three_queries(insert: &str) -> B {
    let mut b = B::new();
    b.handshake(caps_eof(), "app", Some("shop"));
    b.cmd(query("SELECT a FROM t"));
    b.srv(resultset(
        &["a"],
        &[&["first row value"], &["second row value"], &["third"]],
        true,
        2,
    ));
    b.cmd(query(insert));
    b.srv(vec![ok(2, 2)]);
    b.cmd(query("SELECT 3"));
    b.srv(resultset(&["3"], &[&["3"]], true, 2));
    b
}

const INSERT: &str = "INSERT INTO t (a, b) VALUES (1, 'one'), (2, 'two'), (3, 'three')";

#[test]
fn client_gap_inside_a_query_keeps_the_request() {
    let b = three_queries(INSERT);
    let start = stream_offset(&b.t, C, 5);
    // 4 header bytes and the command byte, then 30 SQL bytes seen; 12 lost.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, start + 35, 12));
    assert_eq!(cmds(&r.events), ["query", "query", "query"]);
    let e = &r.events[1];
    assert!(e.text_partial);
    assert!(e.text_truncated);
    // What was seen: the 30 bytes before the gap, joined to the bytes after it.
    assert_eq!(text(e), format!("{}{}", &INSERT[..30], &INSERT[42..]));
    assert_eq!(e.outcome, Outcome::Ok);
    assert_eq!(e.rows_affected, 2);
    // Timed and sized as sent.
    assert_eq!(e.start_ns, b.t[5].2);
    assert_eq!(e.end_ns, Some(b.t[6].2));
    assert_eq!(e.bytes_in, (INSERT.len() + 5) as u64);
    assert!(!r.events[0].text_partial && !r.events[2].text_partial);
    assert_eq!(text(&r.events[2]), "SELECT 3");
    assert_eq!(r.health.resyncs, 0);
    assert_eq!(r.health.unparsed_bytes, 0);
    assert_eq!(r.health.malformed, 0);
}

#[test]
fn client_gap_ending_exactly_at_the_end_of_the_query() {
    let b = three_queries(INSERT);
    let start = stream_offset(&b.t, C, 5);
    let len = b.t[5].1.len() as u64;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, start + 20, len - 20));
    assert_eq!(cmds(&r.events), ["query", "query", "query"]);
    let e = &r.events[1];
    assert!(e.text_partial);
    assert_eq!(text(e), &INSERT[..15]);
    assert_eq!(e.outcome, Outcome::Ok);
    assert_eq!(e.end_ns, Some(b.t[6].2));
    assert_eq!(r.health.resyncs, 0);
    // One byte more reaches into the next command's header: sync is lost as before, and
    // neither request is invented.
    let st = with_gap(&b.t, C, start + 20, len - 19);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(cmds(&r.events), ["query"]);
    assert!(!r.events[0].text_partial);
    assert!(r.health.resyncs >= 1);
}

#[test]
fn client_gap_over_the_command_byte_or_header_loses_sync() {
    let b = three_queries(INSERT);
    let start = stream_offset(&b.t, C, 5);
    // The command byte is lost: the message cannot be told, so sync is lost.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, start + 4, 3));
    assert_eq!(cmds(&r.events), ["query", "query"]);
    assert_eq!(text(&r.events[1]), "SELECT 3");
    assert!(r.health.resyncs >= 1);
    // Inside the header.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, start + 1, 2));
    assert_eq!(cmds(&r.events), ["query", "query"]);
    // The first SQL byte is the first lost: kept, with only the text after the gap.
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, start + 5, 7));
    assert_eq!(cmds(&r.events), ["query", "query", "query"]);
    assert_eq!(text(&r.events[1]), &INSERT[7..]);
    assert!(r.events[1].text_partial);
}

#[test]
fn server_gap_inside_a_row_keeps_the_pairing() {
    let b = three_queries(INSERT);
    // The first result set: column count (5 bytes), column definition, then the first row.
    let coldef_len = coldef("a").len() as u64 + 4;
    let row1 = stream_offset(&b.t, S, 4) + 5 + coldef_len;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, S, row1 + 6, 8));
    assert_eq!(cmds(&r.events), ["query", "query", "query"]);
    let e = &r.events[0];
    // Damaged responses are incomplete, but the request is paired, counted and timed.
    assert_eq!(e.outcome, Outcome::Incomplete);
    assert_eq!(e.rows_sent, 3);
    assert_eq!(e.end_ns, Some(b.t[4].2));
    assert!(!e.text_partial);
    assert_eq!(e.bytes_out, b.t[4].1.len() as u64);
    assert_eq!(r.events[1].outcome, Outcome::Ok);
    assert_eq!(r.events[2].outcome, Outcome::Ok);
    assert_eq!(r.events[2].rows_sent, 1);
    assert_eq!(r.health.resyncs, 0);
    // The gap ends exactly at the end of the row.
    let row1_len = row(&["first row value"]).len() as u64 + 4;
    let st = with_gap(&b.t, S, row1 + 6, row1_len - 6);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.events[0].rows_sent, 3);
    assert_eq!(r.events[2].outcome, Outcome::Ok);
    assert_eq!(r.health.resyncs, 0);
    // Longer than the row: the framing is lost, as before.
    let st = with_gap(&b.t, S, row1 + 6, row1_len - 5);
    let r = assert_chunking_invariant(|| session(true), &st);
    assert_eq!(r.events[0].outcome, Outcome::Incomplete);
    assert_eq!(r.health.resyncs, 1);
}

#[test]
fn server_gap_inside_a_later_row_keeps_the_pairing() {
    // The second row: the first one made the result set's rows state, so chunkings that cut
    // the second row hand its start to the row skim, and the gap falls inside it there.
    let b = three_queries(INSERT);
    let coldef_len = coldef("a").len() as u64 + 4;
    let row1_len = row(&["first row value"]).len() as u64 + 4;
    let row2 = stream_offset(&b.t, S, 4) + 5 + coldef_len + row1_len;
    let row2_len = row(&["second row value"]).len() as u64 + 4;
    for (skip, resyncs) in [(8, 0), (row2_len - 6, 0), (row2_len - 5, 1)] {
        let st = with_gap(&b.t, S, row2 + 6, skip);
        let r = assert_chunking_invariant(|| session(true), &st);
        let e = &r.events[0];
        assert_eq!(e.outcome, Outcome::Incomplete, "gap of {skip}");
        assert_eq!(r.health.resyncs, resyncs, "gap of {skip}");
        if resyncs == 0 {
            assert_eq!(cmds(&r.events), ["query", "query", "query"]);
            assert_eq!(e.rows_sent, 3);
            assert_eq!(e.end_ns, Some(b.t[4].2));
            assert_eq!(e.bytes_out, b.t[4].1.len() as u64);
            assert_eq!(r.events[2].outcome, Outcome::Ok);
            assert_eq!(r.events[2].rows_sent, 1);
        } else {
            assert_eq!(e.rows_sent, 1);
        }
    }
}

#[test]
fn gap_in_a_statement_split_over_two_packets() {
    let mut sql = String::from("INSERT INTO big VALUES ('");
    sql.push_str(&"x".repeat(0xFF_FFFF + 100));
    sql.push_str("')");
    let b = three_queries(&sql);
    let start = stream_offset(&b.t, C, 5);
    let second = start + 4 + 0xFF_FFFF;
    let cases = [
        // In the first packet, then in the second: the framing holds.
        (start + 40, 1000, true),
        (second + 4 + 10, 50, true),
        // The first packet's last bytes: the gap ends at the second packet's header.
        (second - 100, 100, true),
        // Across the header of the second packet: lost.
        (second - 10, 20, false),
    ];
    for (off, len, kept) in cases {
        let r = assert_chunkings(
            || session(true),
            &with_gap(&b.t, C, off, len),
            &[Chunking::Whole, Chunking::Random(3)],
        );
        if kept {
            assert_eq!(cmds(&r.events), ["query", "query", "query"], "{off} {len}");
            let e = &r.events[1];
            assert!(e.text_partial);
            assert!(text(e).starts_with("INSERT INTO big VALUES ('xxx"));
            assert!(text(e).ends_with("xx')"));
            assert_eq!(e.bytes_in, b.t[5].1.len() as u64);
            assert_eq!(e.rows_affected, 2);
            assert_eq!(r.health.resyncs, 0);
        } else {
            assert_eq!(cmds(&r.events), ["query", "query"], "{off} {len}");
            assert!(r.health.resyncs >= 1);
        }
    }
}

#[test]
fn gap_in_a_compressed_stream_still_loses_sync() {
    let mut b = B::new();
    b.handshake(caps_eof() | caps::CLIENT_COMPRESS, "app", None);
    b.cmd(query(INSERT));
    b.srv(vec![ok(2, 2)]);
    b.cmd(query("SELECT 3"));
    b.srv(resultset(&["3"], &[&["3"]], true, 2));
    let off = stream_offset(&b.t, C, 3) + 20;
    let r = assert_chunking_invariant(|| session(true), &with_gap(&b.t, C, off, 5));
    assert!(r.events.iter().all(|e| !e.text_partial));
    assert!(r.health.resyncs >= 1);
}
