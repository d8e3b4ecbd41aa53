//! Multi-statement queries: one event per statement the server ran, each with its own result
//! set's rows, bytes and time, fed in every chunking.

use super::*;

const MORE: u16 = 0x0A; // autocommit + more results exist
const LAST: u16 = 0x02;

fn caps_for(deprecate: bool) -> u64 {
    if deprecate {
        BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
    } else {
        BASE_CAPS
    }
}

/// Wire bytes of small packets.
fn wire(payloads: &[Vec<u8>]) -> u64 {
    payloads.iter().map(|p| p.len() as u64 + 4).sum()
}

fn texts(ev: &[QueryEvent]) -> Vec<&str> {
    ev.iter().map(text).collect()
}

#[test]
fn one_event_per_statement_in_one_segment() {
    for deprecate in [true, false] {
        let mut b = B::new();
        b.handshake(caps_for(deprecate), "app", None);
        b.cmd(query(
            "SELECT 1; SELECT a FROM t; UPDATE t SET a = 1; SELECT 2",
        ));
        let rs1 = resultset(&["1"], &[&["1"]], deprecate, MORE);
        let rs2 = resultset(&["a"], &[&["1"], &["2"]], deprecate, MORE);
        let rs3 = vec![ok(5, MORE)];
        let rs4 = resultset(&["2"], &[&["2"]], deprecate, LAST);
        b.srv([rs1.clone(), rs2.clone(), rs3.clone(), rs4.clone()].concat());
        b.cmd(vec![0x0e]);
        b.srv(vec![ok(0, 2)]);
        let r = run(&b, true);
        assert_eq!(r.health, Default::default(), "deprecate {deprecate}");
        assert_eq!(
            cmds(&r.events),
            ["query", "query", "query", "query", "ping"]
        );
        let q = &r.events[..4];
        assert_eq!(
            texts(q),
            [
                "SELECT 1",
                "SELECT a FROM t",
                "UPDATE t SET a = 1",
                "SELECT 2"
            ]
        );
        let rows: Vec<u64> = q.iter().map(|e| e.rows_sent).collect();
        assert_eq!(rows, [1, 2, 0, 1]);
        let affected: Vec<u64> = q.iter().map(|e| e.rows_affected).collect();
        assert_eq!(affected, [0, 0, 5, 0]);
        assert!(q.iter().all(|e| e.outcome == Outcome::Ok));
        // Each later statement has the request bytes from the end of the one before it to its
        // own end, the first the rest; each result set's bytes are its statement's.
        let sent = b.t[3].1.len() as u64;
        let later =
            ["; SELECT a FROM t", "; UPDATE t SET a = 1", "; SELECT 2"].map(|s| s.len() as u64);
        let bytes_in: Vec<u64> = q.iter().map(|e| e.bytes_in).collect();
        assert_eq!(
            bytes_in,
            [
                sent - later.iter().sum::<u64>(),
                later[0],
                later[1],
                later[2]
            ]
        );
        assert_eq!(bytes_in[0], 4 + 1 + "SELECT 1".len() as u64);
        let bytes_out: Vec<u64> = q.iter().map(|e| e.bytes_out).collect();
        assert_eq!(bytes_out, [wire(&rs1), wire(&rs2), wire(&rs3), wire(&rs4)]);
        assert_eq!(bytes_out.iter().sum::<u64>(), b.t[4].1.len() as u64);
        // The first starts with the request, the others when the previous result set ended.
        let (sent, answered) = (b.t[3].2, b.t[4].2);
        assert_eq!(q[0].start_ns, sent);
        for e in &q[1..] {
            assert_eq!(e.start_ns, answered);
        }
        assert!(q.iter().all(|e| e.end_ns == Some(answered)));
    }
}

#[test]
fn result_sets_in_their_own_segments_time_each_statement() {
    for deprecate in [true, false] {
        let mut b = B::new();
        b.handshake(caps_for(deprecate), "app", None);
        b.cmd(query("SELECT SLEEP(1); SELECT 2; SELECT 3"));
        b.srv(resultset(&["s"], &[&["0"]], deprecate, MORE));
        // The second result set in two segments.
        let rs2 = resultset(&["2"], &[&["2"]], deprecate, MORE);
        b.srv(rs2[..2].to_vec());
        b.srv(rs2[2..].to_vec());
        b.srv(resultset(&["3"], &[&["3"]], deprecate, LAST));
        let r = run(&b, true);
        assert_eq!(r.health, Default::default());
        assert_eq!(
            texts(&r.events),
            ["SELECT SLEEP(1)", "SELECT 2", "SELECT 3"]
        );
        let ts = |i: usize| b.t[i].2;
        let e = &r.events;
        assert_eq!(
            (e[0].start_ns, e[0].first_response_ns, e[0].end_ns),
            (ts(3), Some(ts(4)), Some(ts(4)))
        );
        assert_eq!(
            (e[1].start_ns, e[1].first_response_ns, e[1].end_ns),
            (ts(4), Some(ts(5)), Some(ts(6)))
        );
        assert_eq!(
            (e[2].start_ns, e[2].first_response_ns, e[2].end_ns),
            (ts(6), Some(ts(7)), Some(ts(7)))
        );
        assert_eq!(e[1].latency_ns(), Some(ts(6) - ts(4)));
    }
}

#[test]
fn two_statements_with_warnings_each() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query("SELECT 1/0; SELECT 'a' + 1;"));
    let mut first = resultset(&["1/0"], &[&["NULL"]], true, MORE);
    let l = first.len() - 1;
    first[l] = warn(first[l].clone(), 1);
    let mut second = resultset(&["x"], &[&["1"]], true, LAST);
    let l = second.len() - 1;
    second[l] = warn(second[l].clone(), 4);
    b.srv([first, second].concat());
    let r = run(&b, true);
    assert_eq!(texts(&r.events), ["SELECT 1/0", "SELECT 'a' + 1"]);
    let w: Vec<u64> = r.events.iter().map(|e| e.warnings).collect();
    assert_eq!(w, [1, 4]);
}

#[test]
fn error_in_the_second_statement_ends_the_query() {
    for deprecate in [true, false] {
        let mut b = B::new();
        b.handshake(caps_for(deprecate), "app", None);
        b.cmd(query("SELECT 1; SELECT * FROM nope; SELECT 3"));
        let rs1 = resultset(&["1"], &[&["1"]], deprecate, MORE);
        let e2 = err(1146, "42S02", "Table 'shop.nope' doesn't exist");
        b.srv([rs1.clone(), vec![e2.clone()]].concat());
        b.cmd(query("SELECT 4"));
        b.srv(resultset(&["4"], &[&["4"]], deprecate, LAST));
        let r = run(&b, true);
        assert_eq!(r.health, Default::default());
        // The third statement was not run: no event.
        assert_eq!(
            texts(&r.events),
            ["SELECT 1", "SELECT * FROM nope", "SELECT 4"]
        );
        let e = &r.events;
        assert_eq!(e[0].outcome, Outcome::Ok);
        assert_eq!((e[0].rows_sent, e[0].error.is_none()), (1, true));
        assert_eq!(e[1].outcome, Outcome::Error);
        assert_eq!(e[1].rows_sent, 0);
        assert_eq!(e[1].bytes_out, wire(&[e2]));
        // The unrun statement's request bytes are the failed one's.
        assert_eq!(e[0].bytes_in + e[1].bytes_in, b.t[3].1.len() as u64);
        assert_eq!(e[1].bytes_in, "; SELECT * FROM nope; SELECT 3".len() as u64);
        let er = e[1].error.as_ref().unwrap();
        assert_eq!(er.code, 1146);
        assert_eq!(er.state.as_deref(), Some("42S02"));
        assert_eq!(&*er.message, "Table 'shop.nope' doesn't exist");
        assert_eq!(e[2].outcome, Outcome::Ok);
        assert_eq!(e[2].rows_sent, 1);
    }
}

#[test]
fn error_in_the_first_statement_is_the_only_event() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query("SELEC 1; SELECT 2"));
    b.srv(vec![err(1064, "42000", "syntax")]);
    let r = run(&b, true);
    assert_eq!(texts(&r.events), ["SELEC 1"]);
    assert_eq!(r.events[0].outcome, Outcome::Error);
    assert_eq!(r.events[0].bytes_in, b.t[3].1.len() as u64);
}

#[test]
fn call_keeps_its_result_sets_until_its_ok() {
    for deprecate in [true, false] {
        let mut b = B::new();
        b.handshake(caps_for(deprecate), "app", None);
        b.cmd(query("CALL p(); SELECT 2; CALL q()"));
        // CALL p(): two result sets, then the OK that ends the CALL.
        let mut resp = resultset(&["a"], &[&["1"], &["2"]], deprecate, MORE);
        resp.extend(resultset(&["b"], &[&["3"]], deprecate, MORE));
        resp.push(ok(0, MORE));
        // SELECT 2.
        resp.extend(resultset(&["2"], &[&["2"]], deprecate, MORE));
        // CALL q(): one result set and its OK.
        resp.extend(resultset(&["c"], &[&["4"]], deprecate, MORE));
        resp.push(ok(1, LAST));
        b.srv(resp);
        let r = run(&b, true);
        assert_eq!(r.health, Default::default());
        assert_eq!(texts(&r.events), ["CALL p()", "SELECT 2", "CALL q()"]);
        let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
        assert_eq!(rows, [3, 1, 1]);
        assert_eq!(r.events[2].rows_affected, 1);
    }
}

#[test]
fn result_sets_beyond_the_statements_belong_to_the_last() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    // A procedure call the splitter cannot see as one (inside a versioned comment).
    b.cmd(query("SELECT 1; /*!50000 CALL p() */"));
    let mut resp = resultset(&["1"], &[&["1"]], true, MORE);
    resp.extend(resultset(&["a"], &[&["1"], &["2"]], true, MORE));
    resp.extend(resultset(&["b"], &[&["3"]], true, MORE));
    resp.push(ok(0, LAST));
    b.srv(resp);
    let r = run(&b, true);
    assert_eq!(texts(&r.events), ["SELECT 1", "/*!50000 CALL p() */"]);
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [1, 3]);
}

#[test]
fn quotes_and_comments_holding_separators() {
    let sql = "SELECT ';' AS a, \"x;\\\"y\" -- c;\n; /* ; */ SELECT `we;ird` FROM t # ;\n;";
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query(sql));
    let mut resp = resultset(&["a", "b"], &[&[";", "x;\"y"]], true, MORE);
    resp.extend(resultset(&["we;ird"], &[&["1"]], true, LAST));
    b.srv(resp);
    let r = run(&b, true);
    assert_eq!(
        texts(&r.events),
        [
            "SELECT ';' AS a, \"x;\\\"y\" -- c;",
            "/* ; */ SELECT `we;ird` FROM t # ;"
        ]
    );
}

#[test]
fn one_statement_keeps_the_whole_text() {
    // A trailing separator or comment does not make a second statement: the text is as sent,
    // and an extra result (an empty query's OK) stays the statement's.
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query("SELECT 1; -- done"));
    let mut resp = resultset(&["1"], &[&["1"]], true, MORE);
    resp.push(ok(0, LAST));
    b.srv(resp);
    b.cmd(query("  SELECT 2 ;\n"));
    b.srv(resultset(&["2"], &[&["2"]], true, LAST));
    let r = run(&b, true);
    assert_eq!(texts(&r.events), ["SELECT 1; -- done", "  SELECT 2 ;\n"]);
    assert_eq!(r.events[0].bytes_out, b.t[4].1.len() as u64);
}

#[test]
fn not_split_when_multi_statements_are_off() {
    let mut b = B::new();
    b.handshake(caps_for(true) & !caps::CLIENT_MULTI_STATEMENTS, "app", None);
    b.cmd(query("SELECT 1; SELECT 2"));
    b.srv(vec![err(1064, "42000", "syntax near 'SELECT 2'")]);
    // COM_SET_OPTION MYSQL_OPTION_MULTI_STATEMENTS_ON, answered by an EOF.
    b.cmd(vec![0x1B, 0, 0]);
    b.srv(vec![eof(2)]);
    b.cmd(query("SELECT 1; SELECT 2"));
    let mut resp = resultset(&["1"], &[&["1"]], true, MORE);
    resp.extend(resultset(&["2"], &[&["2"]], true, LAST));
    b.srv(resp);
    // And off again.
    b.cmd(vec![0x1B, 1, 0]);
    b.srv(vec![eof(2)]);
    b.cmd(query("SELECT 1; SELECT 2"));
    b.srv(vec![err(1064, "42000", "syntax near 'SELECT 2'")]);
    let r = run(&b, true);
    assert_eq!(
        cmds(&r.events),
        [
            "query",
            "set_option",
            "query",
            "query",
            "set_option",
            "query"
        ]
    );
    assert_eq!(text(&r.events[0]), "SELECT 1; SELECT 2");
    assert_eq!(texts(&r.events[2..4]), ["SELECT 1", "SELECT 2"]);
    assert_eq!(text(&r.events[5]), "SELECT 1; SELECT 2");
}

#[test]
fn use_between_statements_changes_the_schema_of_the_next() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", Some("shop"));
    b.cmd(query("SELECT 1; USE other; SELECT 2"));
    let mut resp = resultset(&["1"], &[&["1"]], true, MORE);
    resp.push(ok(0, MORE));
    resp.extend(resultset(&["2"], &[&["2"]], true, LAST));
    b.srv(resp);
    let r = run(&b, true);
    let dbs: Vec<Option<&str>> = r.events.iter().map(|e| e.database.as_deref()).collect();
    assert_eq!(dbs, [Some("shop"), Some("shop"), Some("other")]);
}

#[test]
fn midstream_pickup_splits_without_the_handshake() {
    for deprecate in [true, false] {
        let mut b = B::new();
        // The tail of a multi-statement response whose request we never saw.
        b.seq = 9;
        b.srv(vec![
            row(&["9"]),
            if deprecate { ok_fe(MORE) } else { eof(MORE) },
            ok(1, LAST),
        ]);
        b.cmd(query("SELECT a FROM t; DELETE FROM t"));
        let mut resp = resultset(&["a"], &[&["1"], &["2"]], deprecate, MORE);
        resp.push(ok(2, LAST));
        b.srv(resp);
        let r = run(&b, false);
        assert_eq!(texts(&r.events), ["SELECT a FROM t", "DELETE FROM t"]);
        assert_eq!(r.events[0].rows_sent, 2);
        assert_eq!(r.events[1].rows_affected, 2);
        assert_eq!(r.health.unparsed_bytes, b.t[0].1.len() as u64);
        assert_eq!(r.health.malformed, 0);
    }
}

#[test]
fn server_gap_ends_the_query_at_the_statement_in_progress() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query("SELECT 1; SELECT 2; SELECT 3"));
    b.srv(resultset(&["1"], &[&["1"]], true, MORE));
    b.srv(resultset(&["2"], &[&["2"], &["3"]], true, MORE));
    b.srv(resultset(&["3"], &[&["3"]], true, LAST));
    b.cmd(query("SELECT 4"));
    b.srv(resultset(&["4"], &[&["4"]], true, LAST));
    // Lose 3 bytes inside the second result set.
    let at = stream_offset(&b.t, S, 5) + 6;
    let steps = with_gap(&b.t, S, at, 3);
    let r = assert_chunking_invariant(|| session(true), &steps);
    assert_eq!(texts(&r.events), ["SELECT 1", "SELECT 2", "SELECT 4"]);
    let outcomes: Vec<Outcome> = r.events.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes, [Outcome::Ok, Outcome::Incomplete, Outcome::Ok]);
}

#[test]
fn close_before_the_second_result_set() {
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query("SELECT 1; SELECT SLEEP(100)"));
    b.srv(resultset(&["1"], &[&["1"]], true, MORE));
    let r = run(&b, true);
    assert_eq!(texts(&r.events), ["SELECT 1", "SELECT SLEEP(100)"]);
    assert_eq!(r.events[1].outcome, Outcome::NoResponse);
    assert_eq!(r.events[1].start_ns, b.t[4].2);
}

#[test]
fn a_procedure_body_is_one_statement() {
    let create = "CREATE PROCEDURE p() BEGIN SELECT 1; SELECT 2; END";
    let mut b = B::new();
    b.handshake(caps_for(true), "app", None);
    b.cmd(query(&format!("{create}; CALL p()")));
    let mut resp = vec![ok(0, MORE)];
    resp.extend(resultset(&["1"], &[&["1"]], true, MORE));
    resp.extend(resultset(&["2"], &[&["2"]], true, MORE));
    resp.push(ok(0, LAST));
    b.srv(resp);
    let r = run(&b, true);
    assert_eq!(r.health, Default::default());
    assert_eq!(texts(&r.events), [create, "CALL p()"]);
    let rows: Vec<u64> = r.events.iter().map(|e| e.rows_sent).collect();
    assert_eq!(rows, [0, 2]);
}

#[test]
fn any_number_of_statements_and_result_sets_adds_up() {
    // Every pairing of 1-4 statements with 1-5 result sets (an ERR last or not): one event per
    // result set up to the statements (the extra ones are the last statement's), and the
    // query's rows and bytes add up over its events.
    for deprecate in [true, false] {
        for n_stmts in 1..=4usize {
            for n_results in 1..=5usize {
                for err_last in [false, true] {
                    let sql: Vec<String> = (0..n_stmts).map(|i| format!("SELECT {i}")).collect();
                    let mut b = B::new();
                    b.handshake(caps_for(deprecate), "app", None);
                    b.cmd(query(&sql.join("; ")));
                    let mut resp = Vec::new();
                    for k in 0..n_results {
                        if err_last && k + 1 == n_results {
                            resp.push(err(1146, "42S02", "no such table"));
                        } else {
                            let status = if k + 1 == n_results { LAST } else { MORE };
                            let rows: Vec<&[&str]> = vec![&["1"]; k + 1];
                            resp.extend(resultset(&["c"], &rows, deprecate, status));
                        }
                    }
                    b.srv(resp);
                    let r = run(&b, true);
                    let what = format!("{n_stmts} statements, {n_results} results, err {err_last}");
                    assert_eq!(r.health, Default::default(), "{what}");
                    let want = if n_stmts == 1 {
                        1
                    } else {
                        n_results.min(n_stmts)
                    };
                    assert_eq!(r.events.len(), want, "{what}");
                    let rows: u64 = r.events.iter().map(|e| e.rows_sent).sum();
                    let ok_sets = n_results - usize::from(err_last);
                    assert_eq!(rows as usize, ok_sets * (ok_sets + 1) / 2, "{what}");
                    let bytes_in: u64 = r.events.iter().map(|e| e.bytes_in).sum();
                    assert_eq!(bytes_in, b.t[3].1.len() as u64, "{what}");
                    let bytes_out: u64 = r.events.iter().map(|e| e.bytes_out).sum();
                    assert_eq!(bytes_out, b.t[4].1.len() as u64, "{what}");
                    let errors = r.events.iter().filter(|e| e.outcome == Outcome::Error);
                    assert_eq!(errors.count(), usize::from(err_last), "{what}");
                    assert_eq!(
                        r.events.last().unwrap().outcome == Outcome::Error,
                        err_last,
                        "{what}"
                    );
                }
            }
        }
    }
}
