//! The transactions section (text and JSON): totals, the longest transactions and the
//! connections with the most idle-in-transaction time, from [`aggregate::txn`]. Shown only
//! when transactions were tracked and at least one was seen.

use std::io::{self, Write};

use aggregate::txn::{ConnIdle, Transactions, Txn};
use aggregate::{Aggregator, GroupKey};
use serde::{Deserialize, Serialize};

use crate::fmt::{duration, rfc3339, sanitize, shorten, thousands, us};
use crate::json::ProcessJson;

/// Characters of the first statement's fingerprint shown per transaction in the text report.
const FP_CHARS: usize = 60;

/// The JSON form: `transactions` in the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TransactionsJson {
    /// Transactions ended (by commit, rollback, another statement, or the connection closing).
    pub count: u64,
    pub committed: u64,
    pub rolled_back: u64,
    /// Ended by another statement (MySQL: an implicit commit).
    pub other_end: u64,
    /// Ended by the connection closing (or the capture ending) inside them.
    pub closed: u64,
    /// Requests inside transactions.
    pub statements: u64,
    /// Sum of the transactions' durations.
    pub duration_us: f64,
    /// Sum of their idle-in-transaction times.
    pub idle_us: f64,
    /// Events of connections not tracked (connection bound reached).
    pub untracked_events: u64,
    /// The longest transactions, longest first.
    pub top: Vec<TxnJson>,
    /// The connections with the most idle-in-transaction time, most first.
    pub connections: Vec<ConnJson>,
}

/// One transaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TxnJson {
    pub start: String,
    pub start_ns: u64,
    pub duration_us: f64,
    pub idle_us: f64,
    pub statements: u64,
    /// "commit", "rollback", "other" or "closed".
    pub ended: String,
    pub conn: u64,
    pub client: String,
    pub server: String,
    /// The client process, where known (eBPF); omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessJson>,
    pub user: Option<String>,
    pub database: Option<String>,
    /// The group of the statement that started it.
    pub first_query_id: String,
    pub first_fingerprint: String,
    /// The groups of its statements in order of first appearance (at most 8).
    pub query_ids: Vec<String>,
    /// More groups than `query_ids` lists took part.
    pub more_groups: bool,
}

/// One connection's idle-in-transaction time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConnJson {
    pub conn: u64,
    pub client: String,
    pub server: String,
    /// The client process, where known (eBPF); omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<ProcessJson>,
    pub user: Option<String>,
    pub database: Option<String>,
    pub transactions: u64,
    /// Time inside transactions.
    pub in_transaction_us: f64,
    pub idle_us: f64,
}

/// The tracker, when on and when it saw a transaction.
fn seen(agg: &Aggregator) -> Option<&Transactions> {
    agg.transactions()
        .filter(|t| t.totals().transactions > 0 || !t.top_connections().is_empty())
}

/// `(id, fingerprint)` of a group.
fn group_name(agg: &Aggregator, key: &GroupKey) -> (String, String) {
    match agg.group(key) {
        Some(g) => (g.id.clone(), g.fingerprint.clone()),
        None => (
            aggregate::OVERFLOW_NAME.to_string(),
            aggregate::OVERFLOW_NAME.to_string(),
        ),
    }
}

fn opt(s: &Option<std::sync::Arc<str>>) -> Option<String> {
    s.as_deref().map(str::to_string)
}

/// The JSON section, when there is one.
pub fn json(agg: &Aggregator) -> Option<TransactionsJson> {
    let t = seen(agg)?;
    let tt = t.totals();
    let top = t
        .top_transactions()
        .into_iter()
        .map(|x| {
            let (first_query_id, first_fingerprint) = x
                .groups
                .first()
                .map_or_else(Default::default, |k| group_name(agg, k));
            TxnJson {
                start: rfc3339(x.start_ns),
                start_ns: x.start_ns,
                duration_us: us(x.duration_ns() as f64),
                idle_us: us(x.idle_ns as f64),
                statements: x.statements,
                ended: x.ended.name().to_string(),
                conn: x.who.conn,
                client: x.who.client.to_string(),
                server: x.who.server.to_string(),
                process: ProcessJson::of(&x.who.peer),
                user: opt(&x.who.user),
                database: opt(&x.who.database),
                first_query_id,
                first_fingerprint,
                query_ids: x.groups.iter().map(|k| group_name(agg, k).0).collect(),
                more_groups: x.more_groups,
            }
        })
        .collect();
    let connections = t
        .top_connections()
        .into_iter()
        .map(|c| ConnJson {
            conn: c.who.conn,
            client: c.who.client.to_string(),
            server: c.who.server.to_string(),
            process: ProcessJson::of(&c.who.peer),
            user: opt(&c.who.user),
            database: opt(&c.who.database),
            transactions: c.transactions,
            in_transaction_us: us(c.in_txn_ns as f64),
            idle_us: us(c.idle_ns as f64),
        })
        .collect();
    Some(TransactionsJson {
        count: tt.transactions,
        committed: tt.committed,
        rolled_back: tt.rolled_back,
        other_end: tt.other_end,
        closed: tt.closed,
        statements: tt.statements,
        duration_us: us(tt.duration_ns as f64),
        idle_us: us(tt.idle_ns as f64),
        untracked_events: tt.untracked,
        top,
        connections,
    })
}

/// The text section (nothing when no transaction was seen).
pub fn text(out: &mut impl Write, agg: &Aggregator) -> io::Result<()> {
    let Some(t) = seen(agg) else { return Ok(()) };
    let tt = t.totals();
    let idle_pct = if tt.duration_ns > 0 {
        format!(
            " ({:.0}%)",
            tt.idle_ns as f64 * 100.0 / tt.duration_ns as f64
        )
    } else {
        String::new()
    };
    writeln!(out)?;
    writeln!(
        out,
        "# Transactions: {} ({} commit, {} rollback, {} other, {} closed), {} statements, {} in \
         transactions, {} idle in transaction{idle_pct}",
        thousands(tt.transactions),
        thousands(tt.committed),
        thousands(tt.rolled_back),
        thousands(tt.other_end),
        thousands(tt.closed),
        thousands(tt.statements),
        duration(tt.duration_ns as f64),
        duration(tt.idle_ns as f64),
    )?;
    if tt.untracked > 0 {
        writeln!(
            out,
            "#   !! {} events of connections beyond the tracked-connection bound are not in transactions",
            thousands(tt.untracked)
        )?;
    }
    top_transactions(out, agg, &t.top_transactions())?;
    idle_connections(out, &t.top_connections())
}

fn top_transactions(out: &mut impl Write, agg: &Aggregator, top: &[&Txn]) -> io::Result<()> {
    if top.is_empty() {
        return Ok(());
    }
    writeln!(out, "# Longest transactions")?;
    let head = format!(
        "# {:>4} {:<27} {:>8} {:>7} {:>5} {:<8} {:<22} {:<20} {}",
        "Rank",
        "Start",
        "Duration",
        "Idle",
        "Stmts",
        "Ended",
        "Client",
        "User/Database",
        "First statement after BEGIN"
    );
    writeln!(out, "{head}")?;
    for (i, x) in top.iter().enumerate() {
        // The first statement that says what the transaction does (not its BEGIN).
        let names: Vec<String> = x.groups.iter().map(|k| group_name(agg, k).1).collect();
        let first = names
            .iter()
            .find(|f| !is_begin(f))
            .or(names.first())
            .map_or("", |f| f.as_str());
        let mut fp = shorten(&sanitize(first, false), FP_CHARS);
        if x.groups.len() > 1 || x.more_groups {
            let more = if x.more_groups { "+" } else { "" };
            fp.push_str(&format!(" (+{}{more} groups)", x.groups.len() - 1));
        }
        let line = format!(
            "# {:>4} {} {:>8} {:>7} {:>5} {:<8} {:<22} {:<20} {}",
            i + 1,
            rfc3339(x.start_ns),
            duration(x.duration_ns() as f64),
            duration(x.idle_ns as f64),
            thousands(x.statements),
            x.ended.name(),
            sanitize(&x.who.client.to_string(), false),
            user_db(&x.who),
            fp
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A fingerprint that only opens a transaction.
fn is_begin(fp: &str) -> bool {
    let f = fp.trim_start().to_ascii_lowercase();
    f.starts_with("begin") || f.starts_with("start transaction")
}

fn user_db(w: &aggregate::txn::ConnWho) -> String {
    let u = w.user.as_deref().unwrap_or("-");
    let d = w.database.as_deref().unwrap_or("-");
    sanitize(&format!("{u}/{d}"), false)
}

fn idle_connections(out: &mut impl Write, conns: &[ConnIdle]) -> io::Result<()> {
    if conns.is_empty() {
        return Ok(());
    }
    writeln!(out, "# Idle in transaction by connection")?;
    let head = format!(
        "# {:>4} {:<22} {:<22} {:<20} {:>5} {:>8} {:>8} {:>5}",
        "Rank", "Client", "Server", "User/Database", "Txns", "In txn", "Idle", "Idle%"
    );
    writeln!(out, "{head}")?;
    for (i, c) in conns.iter().enumerate() {
        let pct = if c.in_txn_ns > 0 {
            format!("{:.0}%", c.idle_ns as f64 * 100.0 / c.in_txn_ns as f64)
        } else {
            "-".to_string()
        };
        let line = format!(
            "# {:>4} {:<22} {:<22} {:<20} {:>5} {:>8} {:>8} {:>5}",
            i + 1,
            sanitize(&c.who.client.to_string(), false),
            sanitize(&c.who.server.to_string(), false),
            user_db(&c.who),
            thousands(c.transactions),
            duration(c.in_txn_ns as f64),
            duration(c.idle_ns as f64),
            pct
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}
