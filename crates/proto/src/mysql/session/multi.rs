//! Multi-statement queries: a COM_QUERY whose text holds several statements is one request
//! per statement, each paired in order with its result set; the next statement starts when the
//! previous one's result set ends. A `CALL` keeps its result sets until the OK that ends it,
//! and result sets beyond the statements belong to the last one. An ERR ends the query: the
//! statements after the one that failed were not run and give no event (their request bytes
//! are the failed one's).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use super::super::message::caps;
use super::super::split;
use super::conn::{Conn, Effect, Pending};
use super::result::{Resp, Rs};
use super::text::use_statement;

/// `COM_SET_OPTION` arguments.
const MULTI_STATEMENTS_ON: u16 = 0;
const MULTI_STATEMENTS_OFF: u16 = 1;

/// The statements of a query after the one in progress.
#[derive(Debug)]
pub(super) struct Rest {
    /// The query's whole kept text.
    text: Arc<str>,
    /// Statements not reached yet, in order, with the request bytes each is given.
    next: VecDeque<(Range<usize>, u64)>,
    /// The kept text was cut: so is its last statement.
    truncated: bool,
    /// The statement in progress is a `CALL`.
    call: bool,
}

impl Rest {
    /// The request bytes of the statements not reached.
    pub(super) fn unreached_bytes(&self) -> u64 {
        self.next.iter().map(|(_, b)| b).sum()
    }

    /// Heap bytes held: the query's text.
    pub(super) fn heap_bytes(&self) -> usize {
        self.text.len() + self.next.len() * std::mem::size_of::<(Range<usize>, u64)>()
    }
}

impl Conn {
    /// Whether the server runs several statements from one COM_QUERY: as negotiated (the
    /// client's `CLIENT_MULTI_STATEMENTS`) or last set by COM_SET_OPTION; assumed on when the
    /// handshake was not seen (a server that does not split answers with one result anyway).
    pub(super) fn splits_statements(&self) -> bool {
        self.multi_statements.unwrap_or_else(|| {
            self.caps
                .is_none_or(|c| c & caps::CLIENT_MULTI_STATEMENTS != 0)
        })
    }
}

/// What a COM_SET_OPTION changes, once the server accepted it.
pub(super) fn set_option(option: u16) -> Effect {
    match option {
        MULTI_STATEMENTS_ON => Effect::MultiStatements(true),
        MULTI_STATEMENTS_OFF => Effect::MultiStatements(false),
        _ => Effect::None,
    }
}

/// Sets a query request's statement text, and the schema a `USE` selects.
pub(super) fn set_text(p: &mut Pending, text: Arc<str>, truncated: bool) {
    if let Some(db) = use_statement(&text) {
        p.effect = Effect::SetDb(db.into());
    }
    p.core.text = Some(text);
    p.core.text_truncated = truncated;
}

/// A COM_QUERY's text: split into statements when the server would, the request then being
/// its first statement's; one statement (or none) keeps the whole text, as sent.
pub(super) fn query_text(p: &mut Pending, text: Arc<str>, truncated: bool, split_on: bool) {
    let stmts = if split_on && split::may_split(&text) {
        split::statements(&text)
    } else {
        Vec::new()
    };
    if stmts.len() < 2 {
        set_text(p, text, truncated);
        return;
    }
    let mut next = share_bytes(&stmts, text.len(), &mut p.core.bytes_in);
    let (first, _) = next.pop_front().unwrap_or_default();
    let stmt = text.get(first).unwrap_or("");
    let call = split::is_call(stmt);
    set_text(p, Arc::from(stmt), false);
    p.rest = Some(Box::new(Rest {
        text,
        next,
        truncated,
        call,
    }));
}

/// The request bytes of each statement (`bytes_in` is the whole request's, and keeps the first
/// statement's): a later statement is given the text from the end of the one before it to its
/// own end (the last one to the end of the text), the first the rest (packet header and command
/// byte included), so the statements' bytes add up to the request's. A compressed request may
/// be shorter than its text: the later statements then take what there is, in order.
fn share_bytes(
    stmts: &[Range<usize>],
    text_len: usize,
    bytes_in: &mut u64,
) -> VecDeque<(Range<usize>, u64)> {
    let mut out = VecDeque::with_capacity(stmts.len());
    let mut prev_end: Option<usize> = None;
    for (i, r) in stmts.iter().enumerate() {
        let bytes = match prev_end {
            None => 0,
            Some(from) => {
                let to = if i + 1 == stmts.len() {
                    text_len
                } else {
                    r.end
                };
                let want = to.saturating_sub(from) as u64;
                let take = want.min(*bytes_in);
                *bytes_in -= take;
                take
            }
        };
        prev_end = Some(r.end);
        out.push_back((r.clone(), bytes));
    }
    out
}

impl Pending {
    /// Whether a result set that just ended (`ok_packet`: with an OK packet, as a `CALL`
    /// ends) finishes the statement in progress while another statement follows.
    pub(super) fn statement_done(&self, ok_packet: bool) -> bool {
        self.rest
            .as_ref()
            .is_some_and(|r| !r.next.is_empty() && (ok_packet || !r.call))
    }
}

/// The request of the statement after `p`'s (whose result set just ended): it starts when
/// that result set ended, has its share of the request's bytes, and awaits its own result set.
pub(super) fn successor(p: &mut Pending) -> Option<Pending> {
    let mut rest = p.rest.take()?;
    let (range, bytes_in) = rest.next.pop_front()?;
    let last = rest.next.is_empty();
    let mut n = Pending::new(
        p.command,
        p.core.end_ns.unwrap_or(p.core.start_ns),
        bytes_in,
    );
    n.resp = Resp::Results(Rs::Start);
    let stmt = rest.text.get(range).unwrap_or("");
    rest.call = split::is_call(stmt);
    set_text(&mut n, Arc::from(stmt), last && rest.truncated);
    if !last {
        n.rest = Some(rest);
    }
    Some(n)
}
