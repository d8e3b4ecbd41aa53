//! The transaction state each event carries: the status of the ReadyForQuery that ended a
//! simple query (I/T/E); extended-protocol units end before their Sync's and carry none.

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
            ("execute", None),
        ]
    );
}
