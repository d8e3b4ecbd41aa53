//! The transaction state each event carries: the status of the ReadyForQuery that ended a
//! simple query (I/T/E), or the Sync batch of an extended-protocol request (every event of the
//! batch when it ends in a transaction, only the last one when it ends idle).

use super::*;
use crate::TxnState::{Failed, Idle, InTransaction};

#[test]
fn ready_for_query_status_gives_the_transaction_state() {
    let mut b = B::new();
    b.startup()
        .cli(&[query("SELECT 1")])
        .srv(&[complete("SELECT 1"), ready(b'I')])
        .cli(&[query("BEGIN")])
        .srv(&[complete("BEGIN"), ready(b'T')])
        .cli(&[query("UPDATE t SET a = 1")])
        .srv(&[complete("UPDATE 1"), ready(b'T')])
        .cli(&[query("SELECT nope")])
        .srv(&[error("42703", "column does not exist"), ready(b'E')])
        .cli(&[query("ROLLBACK")])
        .srv(&[complete("ROLLBACK"), ready(b'I')])
        .cli(&[parse("", "SELECT 2"), bind("", ""), execute("", 0), sync()])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("SELECT 1"),
            ready(b'I'),
        ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    let got: Vec<_> = r.events.iter().map(|e| (e.command, e.txn)).collect();
    assert_eq!(
        got,
        [
            ("query", Some(Idle)),
            ("query", Some(InTransaction)),
            ("query", Some(InTransaction)),
            ("query", Some(Failed)),
            ("query", Some(Idle)),
            ("prepare", None),
            ("execute", Some(Idle)),
        ]
    );
}

/// Commands, texts and states of the events.
fn states(r: &VecSink) -> Vec<(&'static str, &str, Option<crate::TxnState>)> {
    r.events
        .iter()
        .map(|e| (e.command, e.text.as_deref().unwrap_or("-"), e.txn))
        .collect()
}

/// One statement as libpq's PQexecParams sends it, and its answer ending in `status`.
fn one_batch(b: &mut B, sql: &str, tag: &str, status: u8) {
    b.cli(&[
        parse("", sql),
        bind("", ""),
        describe(b'P', ""),
        execute("", 0),
        sync(),
    ])
    .srv(&[
        parse_complete(),
        bind_complete(),
        no_data(),
        complete(tag),
        ready(status),
    ]);
}

#[test]
fn extended_begin_update_commit_each_in_its_own_batch() {
    let mut b = B::new();
    b.startup();
    one_batch(&mut b, "BEGIN", "BEGIN", b'T');
    one_batch(&mut b, "UPDATE t SET a = 1", "UPDATE 1", b'T');
    one_batch(&mut b, "COMMIT", "COMMIT", b'I');
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        states(&r),
        [
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("prepare", "UPDATE t SET a = 1", Some(InTransaction)),
            ("execute", "UPDATE t SET a = 1", Some(InTransaction)),
            ("prepare", "COMMIT", None),
            ("execute", "COMMIT", Some(Idle)),
        ]
    );
    // Times are those of the messages: the Parse ends at ParseComplete, the execution at its
    // CommandComplete, both in the server's segment.
    for (i, e) in r.events.iter().enumerate() {
        let k = 4 + 2 * (i / 2);
        assert_eq!(e.start_ns, b.t[k].2);
        assert_eq!(e.end_ns, Some(b.t[k + 1].2));
    }
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn pipeline_one_sync_every_event_gets_the_end_state() {
    // BEGIN, INSERT, SELECT in one batch: the transaction begins with its first request. Then
    // UPDATE and COMMIT in one batch: only the COMMIT returned to idle. Then a pipeline of
    // three batches sent at once, answered in two pieces.
    let mut b = B::new();
    b.startup()
        .cli(&[
            parse("b", "BEGIN"),
            bind("", "b"),
            execute("", 0),
            bind("", "b2"),
            execute("", 0),
            parse("", "SELECT 1"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("BEGIN"),
            bind_complete(),
            complete("INSERT 0 1"),
            parse_complete(),
            bind_complete(),
            data_row(&[Some("1")]),
            complete("SELECT 1"),
            ready(b'T'),
        ])
        .cli(&[
            parse("", "UPDATE t SET a = 2"),
            bind("", ""),
            execute("", 0),
            parse("", "COMMIT"),
            bind("", ""),
            execute("", 0),
            sync(),
        ])
        .srv(&[
            parse_complete(),
            bind_complete(),
            complete("UPDATE 1"),
            parse_complete(),
            bind_complete(),
            complete("COMMIT"),
            ready(b'I'),
        ]);
    let mut cli = Vec::new();
    let mut srv = Vec::new();
    for (sql, tag, st) in [
        ("BEGIN", "BEGIN", b'T'),
        ("SELECT 5", "SELECT 1", b'T'),
        ("COMMIT", "COMMIT", b'I'),
    ] {
        cli.extend([parse("", sql), bind("", ""), execute("", 0), sync()]);
        srv.extend([parse_complete(), bind_complete(), complete(tag), ready(st)]);
    }
    b.cli(&cli);
    let (x, y) = srv.split_at(6);
    b.srv(x).srv(y);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        states(&r),
        [
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("execute", "EXECUTE b2", Some(InTransaction)),
            ("prepare", "SELECT 1", Some(InTransaction)),
            ("execute", "SELECT 1", Some(InTransaction)),
            ("prepare", "UPDATE t SET a = 2", None),
            ("execute", "UPDATE t SET a = 2", None),
            ("prepare", "COMMIT", None),
            ("execute", "COMMIT", Some(Idle)),
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("prepare", "SELECT 5", Some(InTransaction)),
            ("execute", "SELECT 5", Some(InTransaction)),
            ("prepare", "COMMIT", None),
            ("execute", "COMMIT", Some(Idle)),
        ]
    );
    // The INSERT's execution ended at its own CommandComplete, in the first server segment.
    assert_eq!(r.events[2].end_ns, Some(b.t[5].2));
    assert_eq!(r.events[2].rows_affected, 1);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn error_mid_batch_the_failed_request_gets_e_or_i() {
    let mut b = B::new();
    b.startup();
    one_batch(&mut b, "BEGIN", "BEGIN", b'T');
    // In a transaction: INSERT ok, SELECT fails, the UPDATE is skipped; the Sync says E.
    b.cli(&[
        parse("", "INSERT INTO t VALUES (1)"),
        bind("", ""),
        execute("", 0),
        parse("", "SELECT nope"),
        bind("", ""),
        execute("", 0),
        parse("", "UPDATE t SET a = 3"),
        bind("", ""),
        execute("", 0),
        sync(),
    ])
    .srv(&[
        parse_complete(),
        bind_complete(),
        complete("INSERT 0 1"),
        error("42703", "column \"nope\" does not exist"),
        ready(b'E'),
    ]);
    one_batch(&mut b, "ROLLBACK", "ROLLBACK", b'I');
    // Outside a transaction: the batch's implicit transaction is rolled back, idle after.
    b.cli(&[
        parse("", "INSERT INTO t VALUES (2)"),
        bind("", ""),
        execute("", 0),
        bind("", "nope"),
        execute("", 0),
        sync(),
    ])
    .srv(&[
        parse_complete(),
        bind_complete(),
        complete("INSERT 0 1"),
        error("26000", "prepared statement \"nope\" does not exist"),
        ready(b'I'),
    ]);
    let r = run(&b);
    assert_eq!(r.health, Health::default());
    assert_eq!(
        states(&r),
        [
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("prepare", "INSERT INTO t VALUES (1)", Some(Failed)),
            ("execute", "INSERT INTO t VALUES (1)", Some(Failed)),
            ("prepare", "SELECT nope", Some(Failed)),
            ("prepare", "ROLLBACK", None),
            ("execute", "ROLLBACK", Some(Idle)),
            ("prepare", "INSERT INTO t VALUES (2)", None),
            ("execute", "INSERT INTO t VALUES (2)", None),
            ("execute", "EXECUTE nope", Some(Idle)),
        ]
    );
    assert_eq!(r.events[4].outcome, Outcome::Error);
    assert_eq!(r.events[9].outcome, Outcome::Error);
    assert_bytes_attributed(&b, &r.events);
}

#[test]
fn close_mid_batch_sends_the_held_events_without_a_state() {
    let mut b = B::new();
    b.startup();
    one_batch(&mut b, "BEGIN", "BEGIN", b'T');
    // The batch's ReadyForQuery never comes: the connection ends after the CommandComplete.
    b.cli(&[
        parse("", "UPDATE t SET a = 4"),
        bind("", ""),
        execute("", 0),
        parse("", "SELECT 1"),
        bind("", ""),
        execute("", 0),
        sync(),
    ])
    .srv(&[
        parse_complete(),
        bind_complete(),
        complete("UPDATE 1"),
        parse_complete(),
        bind_complete(),
        complete("SELECT 1"),
    ]);
    let r = run(&b);
    assert_eq!(
        states(&r),
        [
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("prepare", "UPDATE t SET a = 4", None),
            ("execute", "UPDATE t SET a = 4", None),
            ("prepare", "SELECT 1", None),
            ("execute", "SELECT 1", None),
        ]
    );
    let outcomes: Vec<_> = r.events.iter().map(|e| e.outcome).collect();
    assert_eq!(outcomes[2..5], [Outcome::Ok; 3]);
    assert_eq!(outcomes[5], Outcome::Incomplete);
    assert_eq!(r.events[3].rows_affected, 1);
}

#[test]
fn server_gap_mid_batch_sends_the_held_events_without_a_state() {
    let mut b = B::new();
    b.startup();
    one_batch(&mut b, "BEGIN", "BEGIN", b'T');
    b.cli(&[
        parse("", "UPDATE t SET a = 5"),
        bind("", ""),
        execute("", 0),
        parse("", "COMMIT"),
        bind("", ""),
        execute("", 0),
        sync(),
    ])
    .srv(&[parse_complete(), bind_complete(), complete("UPDATE 1")]);
    let mut steps = b.steps();
    steps.push(Step::Gap(S, 40, b.ts + 500));
    let r = run_steps(&mut session(true), &steps, Chunking::Whole);
    assert_eq!(
        states(&r),
        [
            ("prepare", "BEGIN", Some(InTransaction)),
            ("execute", "BEGIN", Some(InTransaction)),
            ("prepare", "UPDATE t SET a = 5", None),
            ("execute", "UPDATE t SET a = 5", None),
            ("prepare", "COMMIT", None),
            ("execute", "COMMIT", None),
        ]
    );
    assert_eq!(r.events[3].outcome, Outcome::Ok);
    assert_eq!(r.events[5].outcome, Outcome::Incomplete);
}

#[test]
fn events_held_without_a_sync_are_bounded() {
    // A Flush-driven client that never syncs: at most max_inflight events wait, the oldest
    // go out without a state; none is lost.
    let cfg = SessionConfig {
        max_inflight: 2,
        ..SessionConfig::default()
    };
    let mut b = B::new();
    b.startup();
    for i in 0..3 {
        b.cli(&[
            parse("", &format!("SELECT {i}")),
            bind("", ""),
            execute("", 0),
            flush(),
        ])
        .srv(&[parse_complete(), bind_complete(), complete("SELECT 1")]);
    }
    b.cli(&[sync()]).srv(&[ready(b'T')]);
    let mut s = super::super::super::new_session(meta(true), cfg);
    let r = run_steps(&mut s, &b.steps(), Chunking::Whole);
    assert_eq!(r.health, Health::default());
    let got: Vec<_> = r.events.iter().map(|e| e.txn).collect();
    // The last execution is not held: the Sync joins it and it receives the state itself.
    assert_eq!(
        got,
        [
            None,
            None,
            None,
            Some(InTransaction),
            Some(InTransaction),
            Some(InTransaction)
        ]
    );
    assert_eq!(s.conn.held.len(), 0);
}
