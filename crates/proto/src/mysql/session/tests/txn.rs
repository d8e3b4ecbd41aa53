//! The transaction state each event carries: `SERVER_STATUS_IN_TRANS` of the OK or EOF that
//! ended its response (none after an ERR, which has no status flags).

use super::*;
use crate::TxnState::{Idle, InTransaction};

const IN_TRANS: u16 = 0x0003; // in transaction + autocommit
const IDLE: u16 = 0x0002; // autocommit

#[test]
fn status_flags_give_the_transaction_state() {
    for deprecate in [true, false] {
        let c = if deprecate {
            BASE_CAPS | caps::CLIENT_DEPRECATE_EOF
        } else {
            BASE_CAPS
        };
        let mut b = B::new();
        b.handshake(c, "app", Some("shop"));
        b.cmd(query("SELECT 1"));
        b.srv(resultset(&["1"], &[&["1"]], deprecate, IDLE));
        b.cmd(query("BEGIN"));
        b.srv(vec![ok(0, IN_TRANS)]);
        b.cmd(query("SELECT id FROM t"));
        b.srv(resultset(&["id"], &[&["1"]], deprecate, IN_TRANS));
        b.cmd(query("UPDATE t SET a = 1"));
        b.srv(vec![ok(1, IN_TRANS)]);
        b.cmd(query("SELECT nope"));
        b.srv(vec![err(1054, "42S22", "Unknown column")]);
        b.cmd(query("COMMIT"));
        b.srv(vec![ok(0, IDLE)]);
        let r = run(&b, true);
        assert_eq!(r.health, Default::default());
        let got: Vec<_> = r.events.iter().map(|e| e.txn).collect();
        assert_eq!(
            got,
            [
                Some(Idle),
                Some(InTransaction),
                Some(InTransaction),
                Some(InTransaction),
                None,
                Some(Idle)
            ],
            "deprecate {deprecate}"
        );
    }
}
