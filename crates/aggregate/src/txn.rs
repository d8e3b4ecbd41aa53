//! Transactions and idle-in-transaction time, per connection, from the transaction state each
//! response leaves its connection in ([`proto::QueryEvent::txn`]).
//!
//! A transaction starts with the first request whose response leaves the connection in a
//! transaction, and ends with the response that returns it to idle (a commit or a rollback),
//! or when the connection closes. Idle-in-transaction time is the time inside a transaction
//! between the end of a response and the start of the next request on the same connection:
//! the time the server held the transaction open waiting for the client.
//!
//! Memory is bounded: per-connection state exists only for connections that were seen in a
//! transaction, is removed when the connection closes and is capped at
//! [`TxnConfig::max_conns`] (beyond it, transactions of further connections are not tracked
//! and counted in [`TxnTotals::untracked`]); the transactions and connections reported are
//! kept in top-K lists.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use proto::{Endpoint, QueryEvent, TxnState};

use crate::GroupKey;

/// Groups named per transaction (its first statement's group is always the first).
pub const TXN_GROUPS: usize = 8;

/// Limits of the transaction tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnConfig {
    /// Transactions and connections kept for the report (the longest, the most idle).
    pub top: usize,
    /// Connections tracked at once while in (or after) a transaction.
    pub max_conns: usize,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            top: 20,
            max_conns: 100_000,
        }
    }
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TxnEnd {
    /// A `COMMIT` (or `END`) returned the connection to idle.
    Commit,
    /// A `ROLLBACK` (or `ABORT`) returned the connection to idle.
    Rollback,
    /// Another statement returned it to idle (MySQL: an implicit commit by DDL, ...).
    Other,
    /// The connection closed (or the capture ended) inside the transaction.
    Closed,
}

impl TxnEnd {
    /// The stable name used in every output.
    pub fn name(self) -> &'static str {
        match self {
            TxnEnd::Commit => "commit",
            TxnEnd::Rollback => "rollback",
            TxnEnd::Other => "other",
            TxnEnd::Closed => "closed",
        }
    }
}

/// Who a connection is: its endpoints and the user and database of its first transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnWho {
    pub conn: u64,
    pub client: Endpoint,
    pub server: Endpoint,
    pub user: Option<Arc<str>>,
    pub database: Option<Arc<str>>,
    /// The client process, where known.
    pub peer: Option<Arc<proto::Process>>,
}

/// One transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub who: ConnWho,
    /// Start of the first request of the transaction.
    pub start_ns: u64,
    /// End of the response that ended it (the close time when the connection closed).
    pub end_ns: u64,
    /// Idle-in-transaction time inside it.
    pub idle_ns: u64,
    /// Requests in it, the one that started it and the one that ended it included (count-only
    /// events, [`QueryEvent::timed`] false, are not counted: they are part of an execution).
    pub statements: u64,
    /// Groups of its requests in order of first appearance (at most [`TXN_GROUPS`]).
    pub groups: Vec<GroupKey>,
    /// Requests whose group was beyond [`TXN_GROUPS`] distinct ones.
    pub more_groups: bool,
    pub ended: TxnEnd,
}

impl Txn {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// One connection's idle-in-transaction time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnIdle {
    pub who: ConnWho,
    /// Transactions it ran (ended or not).
    pub transactions: u64,
    /// Idle-in-transaction time over all of them.
    pub idle_ns: u64,
    /// Time inside transactions.
    pub in_txn_ns: u64,
}

/// Totals over all transactions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnTotals {
    /// Transactions ended (by any [`TxnEnd`]).
    pub transactions: u64,
    pub committed: u64,
    pub rolled_back: u64,
    pub other_end: u64,
    pub closed: u64,
    /// Sum of their durations and of their idle-in-transaction times.
    pub duration_ns: u128,
    pub idle_ns: u128,
    /// Requests inside transactions.
    pub statements: u64,
    /// Events whose connection could not be tracked ([`TxnConfig::max_conns`] reached).
    pub untracked: u64,
}

#[derive(Clone, Debug)]
struct Open {
    start_ns: u64,
    /// End of the latest response inside the transaction.
    last_end_ns: u64,
    idle_ns: u64,
    statements: u64,
    groups: Vec<GroupKey>,
    /// One bit per key in `groups` ([`key_bit`]): a key whose bit is clear is not among them,
    /// known without comparing it with each (most of a transaction's statements are).
    group_bits: u64,
    more_groups: bool,
}

#[derive(Clone, Debug)]
struct ConnState {
    who: ConnWho,
    open: Option<Open>,
    transactions: u64,
    idle_ns: u64,
    in_txn_ns: u64,
}

/// The transaction tracker: fed every event (with its group) and every connection close.
#[derive(Clone, Debug, Default)]
pub struct Transactions {
    cfg: TxnConfig,
    /// Connections seen in a transaction (looked up per event: a fast hash of the id).
    conns: HashMap<u64, ConnState, foldhash::fast::RandomState>,
    top_txns: Vec<Txn>,
    /// The order key ([`txn_key`]) of the last of `top_txns` when they were last cut to the
    /// top: a transaction ordered after it can never be among them, and is not built.
    txn_cut: Option<(std::cmp::Reverse<u64>, u64, u64)>,
    top_conns: Vec<ConnIdle>,
    totals: TxnTotals,
}

impl Transactions {
    pub fn new(cfg: TxnConfig) -> Self {
        Transactions {
            cfg,
            ..Transactions::default()
        }
    }

    /// One event of group `key`.
    pub fn record(&mut self, ev: &QueryEvent, key: GroupKey) {
        let max = self.cfg.max_conns;
        let starts = ev.txn.is_some_and(TxnState::in_transaction);
        let tracked = self.conns.len();
        if tracked == 0 && !starts {
            return; // no connection has state to update, and this event opens none
        }
        // One lookup: events of connections seen in a transaction find their state directly.
        let st = match self.conns.entry(ev.conn) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(_) if !starts => return,
            Entry::Vacant(_) if tracked >= max => {
                self.totals.untracked += 1;
                return;
            }
            Entry::Vacant(v) => v.insert(ConnState {
                who: ConnWho {
                    conn: ev.conn,
                    client: ev.client.clone(),
                    server: ev.server.clone(),
                    user: ev.user.clone(),
                    database: ev.database.clone(),
                    peer: ev.peer.clone(),
                },
                open: None,
                transactions: 0,
                idle_ns: 0,
                in_txn_ns: 0,
            }),
        };
        let end = ev.end_ns.unwrap_or(ev.start_ns);
        match st.open.as_mut() {
            Some(o) => {
                o.idle_ns += ev.start_ns.saturating_sub(o.last_end_ns);
                // A count-only event (a Parse sent with its execution) is part of that
                // execution, not a statement of its own.
                o.statements += u64::from(ev.timed);
                o.last_end_ns = o.last_end_ns.max(end);
                add_group(o, key);
            }
            None if starts => {
                st.transactions += 1;
                st.open = Some(Open {
                    start_ns: ev.start_ns,
                    last_end_ns: end,
                    idle_ns: 0,
                    statements: u64::from(ev.timed),
                    groups: vec![key],
                    group_bits: key_bit(&key),
                    more_groups: false,
                });
            }
            None => return,
        }
        if ev.txn == Some(TxnState::Idle) {
            let how = end_kind(ev.text.as_deref());
            self.finish(ev.conn, end, how);
        }
    }

    /// The connection `conn` closed at `ts_ns`: a transaction still open ends there, and its
    /// state is dropped.
    pub fn close(&mut self, conn: u64, ts_ns: u64) {
        if self.conns.get(&conn).is_some_and(|s| s.open.is_some()) {
            self.finish(conn, ts_ns, TxnEnd::Closed);
        }
        if let Some(st) = self.conns.remove(&conn) {
            self.push_conn(ConnIdle {
                who: st.who,
                transactions: st.transactions,
                idle_ns: st.idle_ns,
                in_txn_ns: st.in_txn_ns,
            });
        }
    }

    /// Ends every open transaction at `ts_ns` as if its connection closed.
    pub fn close_all(&mut self, ts_ns: u64) {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            self.close(id, ts_ns);
        }
    }

    fn finish(&mut self, conn: u64, end_ns: u64, how: TxnEnd) {
        let Some(st) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(o) = st.open.take() else { return };
        let mut idle = o.idle_ns;
        if how == TxnEnd::Closed {
            // Held open by the client until the connection went away.
            idle += end_ns.saturating_sub(o.last_end_ns);
        }
        let end_ns = end_ns.max(o.start_ns);
        let duration = end_ns.saturating_sub(o.start_ns);
        st.idle_ns += idle;
        st.in_txn_ns += duration;
        let tt = &mut self.totals;
        tt.transactions += 1;
        match how {
            TxnEnd::Commit => tt.committed += 1,
            TxnEnd::Rollback => tt.rolled_back += 1,
            TxnEnd::Other => tt.other_end += 1,
            TxnEnd::Closed => tt.closed += 1,
        }
        tt.duration_ns += u128::from(duration);
        tt.idle_ns += u128::from(idle);
        tt.statements += o.statements;
        let key = (std::cmp::Reverse(duration), o.start_ns, st.who.conn);
        if self.txn_cut.is_some_and(|c| key > c) {
            return; // the top list already holds k transactions ordered before this one
        }
        let t = Txn {
            who: st.who.clone(),
            start_ns: o.start_ns,
            end_ns,
            idle_ns: idle,
            statements: o.statements,
            groups: o.groups,
            more_groups: o.more_groups,
            ended: how,
        };
        let k = self.cfg.top.max(1);
        // push_top sorts and cuts the list to k when it grows past 2k.
        let cuts = self.top_txns.len() >= 2 * k;
        push_top(&mut self.top_txns, t, self.cfg.top, txn_order);
        if cuts {
            self.txn_cut = self.top_txns.last().map(txn_key);
        }
    }

    fn push_conn(&mut self, c: ConnIdle) {
        if c.transactions == 0 {
            return;
        }
        push_top(&mut self.top_conns, c, self.cfg.top, conn_order);
    }

    /// The longest transactions ended so far, longest first (ties: earlier, then by connection).
    pub fn top_transactions(&self) -> Vec<&Txn> {
        sorted(&self.top_txns, self.cfg.top, txn_order)
    }

    /// The connections with the most idle-in-transaction time, closed ones and (their
    /// transactions so far) open ones, most idle first.
    pub fn top_connections(&self) -> Vec<ConnIdle> {
        let mut all: Vec<ConnIdle> = self.top_conns.clone();
        all.extend(
            self.conns
                .values()
                .filter(|s| s.transactions > 0)
                .map(|s| ConnIdle {
                    who: s.who.clone(),
                    transactions: s.transactions,
                    idle_ns: s.idle_ns,
                    in_txn_ns: s.in_txn_ns,
                }),
        );
        all.sort_by(conn_order);
        all.truncate(self.cfg.top);
        all
    }

    pub fn totals(&self) -> &TxnTotals {
        &self.totals
    }

    /// Adds the transactions of `o`, a tracker fed the events of other connections (ids
    /// distinct from this one's) of the same stream: the totals add, the top lists are the top
    /// of both, the connections still tracked are both's.
    pub fn merge(&mut self, o: Transactions) {
        let k = self.cfg.top;
        let t = &mut self.totals;
        let ot = &o.totals;
        t.transactions += ot.transactions;
        t.committed += ot.committed;
        t.rolled_back += ot.rolled_back;
        t.other_end += ot.other_end;
        t.closed += ot.closed;
        t.duration_ns += ot.duration_ns;
        t.idle_ns += ot.idle_ns;
        t.statements += ot.statements;
        t.untracked += ot.untracked;
        self.conns.extend(o.conns);
        for x in o.top_txns {
            push_top(&mut self.top_txns, x, k, txn_order);
        }
        for c in o.top_conns {
            push_top(&mut self.top_conns, c, k, conn_order);
        }
    }

    /// Renames every connection id through `f`, which must keep their order (the parallel
    /// digest numbers connections as one reader would only at the end).
    pub fn renumber(&mut self, f: impl Fn(u64) -> u64) {
        self.conns = std::mem::take(&mut self.conns)
            .into_iter()
            .map(|(id, mut st)| {
                st.who.conn = f(st.who.conn);
                (f(id), st)
            })
            .collect();
        for t in &mut self.top_txns {
            t.who.conn = f(t.who.conn);
        }
        if let Some(c) = &mut self.txn_cut {
            c.2 = f(c.2);
        }
        for c in &mut self.top_conns {
            c.who.conn = f(c.who.conn);
        }
    }

    /// Connections tracked now (in or after a transaction, not yet closed).
    pub fn tracked_connections(&self) -> usize {
        self.conns.len()
    }
}

fn add_group(o: &mut Open, key: GroupKey) {
    let bit = key_bit(&key);
    if o.group_bits & bit != 0 && o.groups.contains(&key) {
        return;
    }
    if o.groups.len() < TXN_GROUPS {
        o.groups.push(key);
        o.group_bits |= bit;
    } else {
        o.more_groups = true;
    }
}

/// The bit of [`Open::group_bits`] that `key` sets (equal keys have equal hashes).
#[inline]
fn key_bit(key: &GroupKey) -> u64 {
    1 << (key.fingerprint_hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58)
}

/// How a statement that returned its connection to idle ended the transaction.
fn end_kind(text: Option<&str>) -> TxnEnd {
    let Some(t) = text else {
        return TxnEnd::Other;
    };
    // The first word (its first 10 ASCII letters), compared without copying it.
    let t = t.trim_start();
    let n = t
        .bytes()
        .take_while(u8::is_ascii_alphabetic)
        .take(10)
        .count();
    let word = t.as_bytes().get(..n).unwrap_or_default();
    let is = |w: &str| word.eq_ignore_ascii_case(w.as_bytes());
    if is("commit") || is("end") {
        TxnEnd::Commit
    } else if is("rollback") || is("abort") {
        TxnEnd::Rollback
    } else {
        TxnEnd::Other
    }
}

/// [`txn_order`] as a key: longest first, then earlier, then by connection.
fn txn_key(t: &Txn) -> (std::cmp::Reverse<u64>, u64, u64) {
    (std::cmp::Reverse(t.duration_ns()), t.start_ns, t.who.conn)
}

fn txn_order(a: &Txn, b: &Txn) -> std::cmp::Ordering {
    b.duration_ns()
        .cmp(&a.duration_ns())
        .then(a.start_ns.cmp(&b.start_ns))
        .then(a.who.conn.cmp(&b.who.conn))
}

fn conn_order(a: &ConnIdle, b: &ConnIdle) -> std::cmp::Ordering {
    b.idle_ns
        .cmp(&a.idle_ns)
        .then(b.in_txn_ns.cmp(&a.in_txn_ns))
        .then(a.who.conn.cmp(&b.who.conn))
}

/// Adds `x` to a top-`k` list kept within `2k` entries (sorted and cut when it grows past).
fn push_top<T>(v: &mut Vec<T>, x: T, k: usize, ord: fn(&T, &T) -> std::cmp::Ordering) {
    v.push(x);
    if v.len() > 2 * k.max(1) {
        v.sort_by(ord);
        v.truncate(k);
    }
}

fn sorted<T>(v: &[T], k: usize, ord: fn(&T, &T) -> std::cmp::Ordering) -> Vec<&T> {
    let mut out: Vec<&T> = v.iter().collect();
    out.sort_by(|a, b| ord(a, b));
    out.truncate(k);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Protocol;

    const MS: u64 = 1_000_000;

    fn key(h: u64) -> GroupKey {
        GroupKey {
            protocol: Protocol::Postgres,
            command: "query",
            fingerprint_hash: h,
        }
    }

    fn ev(conn: u64, text: &str, start: u64, end: u64, txn: Option<TxnState>) -> QueryEvent {
        QueryEvent {
            conn,
            client: "127.0.0.1:5000".parse().unwrap(),
            server: "127.0.0.1:5432".parse().unwrap(),
            user: Some(Arc::from("app")),
            database: Some(Arc::from("shop")),
            text: Some(Arc::from(text)),
            txn,
            ..proto::testing::event(Protocol::Postgres, "query", start, Some(end))
        }
    }

    use TxnState::{Idle, InTransaction as T};

    #[test]
    fn one_transaction_with_idle_gaps() {
        let mut t = Transactions::new(TxnConfig::default());
        t.record(&ev(1, "select 1", 0, MS, Some(Idle)), key(9));
        t.record(&ev(1, "BEGIN", 10 * MS, 11 * MS, Some(T)), key(1));
        t.record(&ev(1, "select 2", 12 * MS, 14 * MS, Some(T)), key(2));
        t.record(&ev(1, "update", 314 * MS, 315 * MS, None), key(3));
        t.record(&ev(1, "COMMIT", 515 * MS, 516 * MS, Some(Idle)), key(4));
        t.record(&ev(1, "select 1", 600 * MS, 601 * MS, Some(Idle)), key(9));
        let top = t.top_transactions();
        assert_eq!(top.len(), 1);
        let x = top[0];
        assert_eq!(x.start_ns, 10 * MS);
        assert_eq!(x.duration_ns(), 506 * MS);
        assert_eq!(x.idle_ns, (1 + 300 + 200) * MS);
        assert_eq!(x.statements, 4);
        assert_eq!(x.groups, vec![key(1), key(2), key(3), key(4)]);
        assert_eq!(x.ended, TxnEnd::Commit);
        assert_eq!(t.totals().transactions, 1);
        assert_eq!(t.totals().idle_ns, 501 * u128::from(MS));
        t.close(1, 700 * MS);
        assert_eq!(t.tracked_connections(), 0);
        let c = t.top_connections();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].transactions, c[0].idle_ns), (1, 501 * MS));
    }

    #[test]
    fn rollback_close_and_autocommit() {
        let mut t = Transactions::new(TxnConfig::default());
        // Autocommit statements never create state.
        t.record(&ev(2, "select 1", 0, MS, Some(Idle)), key(9));
        assert_eq!(t.tracked_connections(), 0);
        t.record(&ev(2, "begin", 2 * MS, 3 * MS, Some(T)), key(1));
        t.record(&ev(2, "rollback", 5 * MS, 6 * MS, Some(Idle)), key(5));
        t.record(&ev(3, "begin", 0, MS, Some(T)), key(1));
        t.close(3, 50 * MS);
        let tt = t.totals();
        assert_eq!((tt.transactions, tt.rolled_back, tt.closed), (2, 1, 1));
        let top = t.top_transactions();
        assert_eq!(top[0].ended, TxnEnd::Closed);
        assert_eq!(top[0].idle_ns, 49 * MS);
        assert_eq!(top[1].ended, TxnEnd::Rollback);
        assert_eq!(top[1].idle_ns, 2 * MS);
    }

    /// Connections split over two trackers, merged and renumbered, report what one tracker fed
    /// every event reports.
    #[test]
    fn merged_parts_equal_one_tracker() {
        let cfg = TxnConfig {
            top: 3,
            max_conns: 100,
        };
        let mut one = Transactions::new(cfg.clone());
        let mut parts = [Transactions::new(cfg.clone()), Transactions::new(cfg)];
        for c in 1..=10u64 {
            let evs = [
                ev(c, "begin", c * MS, (c + 1) * MS, Some(T)),
                ev(c, "update", 20 * MS, (21 + c % 4) * MS, Some(T)),
                ev(c, "commit", 40 * MS + c, 41 * MS, Some(Idle)),
                ev(c, "begin", 50 * MS, 51 * MS, Some(T)),
            ];
            for e in &evs {
                one.record(e, key(c % 3));
                // The part numbers connection c as 100 c (its order kept).
                let mut pe = e.clone();
                pe.conn = 100 * c;
                parts[(c % 2) as usize].record(&pe, key(c % 3));
            }
            if c % 3 == 0 {
                one.close(c, 60 * MS);
                parts[(c % 2) as usize].close(100 * c, 60 * MS);
            }
        }
        let [mut a, b] = parts;
        a.merge(b);
        a.renumber(|p| p / 100);
        assert_eq!(a.totals(), one.totals());
        assert_eq!(a.top_transactions(), one.top_transactions());
        assert_eq!(a.top_connections(), one.top_connections());
        assert_eq!(a.tracked_connections(), one.tracked_connections());
    }

    #[test]
    fn bounded() {
        let mut t = Transactions::new(TxnConfig {
            top: 3,
            max_conns: 2,
        });
        for c in 0..10u64 {
            t.record(&ev(c, "begin", c * MS, c * MS + 1, Some(T)), key(1));
        }
        assert_eq!(t.tracked_connections(), 2);
        assert_eq!(t.totals().untracked, 8);
        for c in 0..100u64 {
            t.close(c % 2, 0);
            t.record(&ev(c % 2, "begin", c, c + 1, Some(T)), key(1));
            t.record(
                &ev(c % 2, "commit", c + 1 + c, c + 2 + c, Some(Idle)),
                key(2),
            );
        }
        assert!(t.top_txns.len() <= 6 && t.top_conns.len() <= 6);
        assert_eq!(t.top_transactions().len(), 3);
        // The longest is the last (its gap grows with c).
        assert_eq!(t.top_transactions()[0].start_ns, 99);
    }

    /// The top list skips transactions ordered after the k kept at its last cut: what it
    /// reports is the top k of every transaction, ties and all.
    #[test]
    fn top_transactions_are_the_top_of_all() {
        let k = 3;
        let mut t = Transactions::new(TxnConfig {
            top: k,
            max_conns: 64,
        });
        let mut all = Vec::new();
        let mut x = 7u64;
        for i in 0..400u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let (conn, start, dur) = (x >> 60, i * 100 * MS, (x >> 40) % 50 * MS);
            t.record(&ev(conn, "begin", start, start + 1, Some(T)), key(1));
            t.record(
                &ev(conn, "commit", start + dur, start + dur, Some(Idle)),
                key(2),
            );
            all.push((std::cmp::Reverse(dur), start, conn));
        }
        all.sort();
        let want: Vec<_> = all.into_iter().take(k).collect();
        let got: Vec<_> = t.top_transactions().into_iter().map(txn_key).collect();
        assert_eq!(got, want);
        assert!(t.txn_cut.is_some());
    }

    /// Keys past the first `TXN_GROUPS` set `more_groups`; a repeated key (its bit set) is
    /// not added twice, and a key whose bit another set is still added.
    #[test]
    fn transaction_groups_bounded_and_distinct() {
        let mut t = Transactions::new(TxnConfig::default());
        t.record(&ev(1, "begin", 0, 1, Some(T)), key(0));
        for h in (0..6).chain(0..6) {
            t.record(&ev(1, "x", 2, 3, Some(T)), key(h));
        }
        t.record(&ev(1, "commit", 4, 5, Some(Idle)), key(6));
        let top = t.top_transactions();
        assert_eq!(top[0].groups, (0..7).map(key).collect::<Vec<_>>());
        assert!(!top[0].more_groups);
        t.record(&ev(1, "begin", 10, 11, Some(T)), key(0));
        for h in 0..20 {
            t.record(&ev(1, "x", 12, 13, Some(T)), key(h));
        }
        t.record(&ev(1, "commit", 14, 15, Some(Idle)), key(0));
        let top = t.top_transactions();
        let last = top.iter().find(|x| x.start_ns == 10).unwrap();
        assert_eq!(last.groups, (0..8).map(key).collect::<Vec<_>>());
        assert!(last.more_groups);
    }

    #[test]
    fn end_words() {
        assert_eq!(end_kind(Some("  COMMIT")), TxnEnd::Commit);
        assert_eq!(end_kind(Some("end;")), TxnEnd::Commit);
        assert_eq!(end_kind(Some("ROLLBACK TO x")), TxnEnd::Rollback);
        assert_eq!(end_kind(Some("create table t (a int)")), TxnEnd::Other);
        assert_eq!(end_kind(None), TxnEnd::Other);
        assert_eq!(end_kind(Some("Abort")), TxnEnd::Rollback);
        assert_eq!(end_kind(Some("endless")), TxnEnd::Other);
        assert_eq!(end_kind(Some("commitcommit")), TxnEnd::Other);
        assert_eq!(end_kind(Some("comm\u{e9}")), TxnEnd::Other);
    }

    #[test]
    fn count_only_parse_events_are_part_of_their_execution() {
        // PostgreSQL extended protocol: each statement is a count-only Parse and its
        // execution, one Sync batch; the batch's end state is on both when in a transaction,
        // on the execution only when idle.
        let parse = |s, e, txn| QueryEvent {
            timed: false,
            ..ev(1, "x", s, e, txn)
        };
        let mut t = Transactions::new(TxnConfig::default());
        t.record(&parse(10 * MS, 11 * MS, Some(T)), key(1));
        t.record(&ev(1, "BEGIN", 10 * MS, 11 * MS, Some(T)), key(1));
        t.record(&parse(20 * MS, 21 * MS, Some(T)), key(2));
        t.record(&ev(1, "update", 20 * MS, 22 * MS, Some(T)), key(2));
        t.record(&parse(30 * MS, 31 * MS, None), key(3));
        t.record(&ev(1, "COMMIT", 30 * MS, 32 * MS, Some(Idle)), key(3));
        let x = t.top_transactions()[0];
        assert_eq!((x.start_ns, x.end_ns), (10 * MS, 32 * MS));
        assert_eq!(x.statements, 3);
        assert_eq!(x.idle_ns, (9 + 8) * MS);
        assert_eq!(x.ended, TxnEnd::Commit);
        assert_eq!(t.totals().statements, 3);
    }
}
