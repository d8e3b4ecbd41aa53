//! The records of a PostgreSQL conversation: the requests in flight ([`Unit`]), the responses
//! the server owes ([`Item`], [`Want`]), what later client messages may still join
//! ([`Open`]), and the conversation itself ([`Conn`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use super::super::message::{CommandTag, ErrorFields, be};
use super::query::QueryState;
use super::{Phase, TxStatus};
use crate::kit::{Charge, NameCache, Named, RequestCore};
use crate::{ConnMeta, DbError, SessionConfig};

/// Where a result (an Execute, or one statement of a simple query) stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Flow {
    Start,
    Rows,
    CopyIn,
    CopyOut,
}

/// A response the server owes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Want {
    ParseComplete,
    BindComplete,
    CloseComplete,
    /// ParameterDescription, then RowDescription or NoData.
    DescribeStatement {
        params_seen: bool,
    },
    /// RowDescription or NoData.
    DescribePortal,
    Execute(Flow),
    /// Everything up to and including ReadyForQuery.
    Query(Flow),
    /// FunctionCallResponse (or an error), then ReadyForQuery.
    Function,
    /// ReadyForQuery for a Sync.
    Ready,
    /// Any one message (an unknown request type: the server will answer with an error).
    Unknown,
    /// Requests were lost here (client gap, or too many in flight): responses that do not fit
    /// the next item are theirs.
    Lost,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Item {
    pub want: Want,
    pub unit: Option<u64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Query,
    Prepare,
    /// A Bind not (yet) followed by its Execute; becomes `Execute` when it is.
    Bind,
    Execute,
    /// A further Execute of a portal already executed since its Bind: it goes on fetching
    /// rows of a suspended portal (a row limit), one statement execution as far as
    /// pg_stat_statements is concerned.
    Fetch,
    Describe,
    Close,
    FunctionCall,
    Terminate,
    Unknown,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::Prepare => "prepare",
            Kind::Bind => "bind",
            Kind::Execute => "execute",
            Kind::Fetch => "fetch",
            Kind::Describe => "describe",
            Kind::Close => "close",
            Kind::FunctionCall => "function_call",
            Kind::Terminate => "terminate",
            Kind::Unknown => "unknown",
        }
    }
}

/// What later client messages may still join the last request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum OpenKind {
    /// Nothing: the next message starts a new request.
    Closed,
    /// A Sync (or Flush) joins it.
    SyncOnly,
    /// A Parse: a Describe of the same statement, or a Sync, joins it.
    Prepare,
    /// A Bind: a Describe or Execute of the same portal, or a Sync, joins it.
    Bind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Open {
    pub kind: OpenKind,
    /// Hash of the statement or portal name.
    pub name: u64,
    /// The unit, or `None` for a request tracked without an event (overflow).
    pub unit: Option<u64>,
}

pub(super) const CLOSED: Open = Open {
    kind: OpenKind::Closed,
    name: 0,
    unit: None,
};

pub(super) fn name_hash(name: &[u8]) -> u64 {
    // FNV-1a: only compares a name with the one just sent.
    name.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A statement-map entry to restore when a Parse fails.
#[derive(Debug)]
pub(super) struct Undo {
    pub name: Box<[u8]>,
    pub previous: Option<Named>,
    pub inserted: Option<Arc<str>>,
}

/// A request that will become an event.
#[derive(Debug)]
pub(super) struct Unit {
    pub id: u64,
    pub kind: Kind,
    pub core: RequestCore,
    /// The server skipped it after an earlier error in the same pipeline: no event.
    pub skipped: bool,
    pub copy_out: bool,
    pub no_reply: bool,
    pub items_left: u32,
    pub undo: Option<Box<Undo>>,
    pub query: Option<Box<QueryState>>,
    /// For a Parse: the hash of its statement name, for the Bind that may fold it into an
    /// execution.
    pub stmt: Option<u64>,
    /// False for a Parse folded into the execution it travels with (see
    /// `Conn::fold_parse`): its event is count-only.
    pub timed: bool,
    /// The share of the run's text budget this request's text holds (given back on emit).
    pub text_charge: Charge,
    /// An extended-protocol request that received its Sync's ReadyForQuery (the Sync joined
    /// it, or it failed and the ReadyForQuery ended the skipping): its event carries the state.
    pub synced: bool,
}

impl Unit {
    pub fn new(id: u64, kind: Kind, start_ns: u64, bytes_in: u64) -> Self {
        Unit {
            id,
            kind,
            core: RequestCore::new(start_ns, bytes_in),
            skipped: false,
            copy_out: false,
            no_reply: false,
            items_left: 0,
            undo: None,
            query: None,
            stmt: None,
            timed: true,
            text_charge: Charge::default(),
            synced: false,
        }
    }

    /// Takes a statement's or portal's text.
    pub fn set_text(&mut self, t: Named) {
        self.core.text = Some(t.text);
        self.core.text_truncated = t.truncated;
    }

    /// Applies a CommandComplete tag's row count.
    pub fn apply_tag(&mut self, tag: CommandTag<'_>) {
        let c = &mut self.core;
        (c.rows_sent, c.rows_affected) = tag.counts(self.copy_out, c.rows_sent, c.rows_affected);
    }

    pub fn set_error(&mut self, f: &ErrorFields<'_>) {
        self.core.error = Some(DbError {
            code: 0,
            state: f.code.map(|c| String::from_utf8_lossy(c).into()),
            message: String::from_utf8_lossy(f.message.unwrap_or(b"")).into(),
        });
    }

    /// The statement in progress of a simple query got its answer.
    pub fn stmt_done(&self) -> bool {
        self.query.as_ref().is_some_and(|q| q.stmt_done)
    }
}

/// The conversation: everything but the framing.
#[derive(Debug)]
pub(super) struct Conn {
    pub meta: ConnMeta,
    pub cfg: SessionConfig,
    pub phase: Phase,
    pub user: Option<Arc<str>>,
    pub database: Option<Arc<str>>,
    pub application_name: Option<Arc<str>>,
    pub tx: Option<TxStatus>,
    pub stmts: NameCache<Box<[u8]>>,
    pub portals: NameCache<Box<[u8]>>,
    /// Name hashes of the portals executed since their Bind (at most [`super::MAX_PORTALS`], oldest
    /// dropped): a further Execute of one is a [`Kind::Fetch`].
    pub executed: VecDeque<u64>,
    pub units: VecDeque<Unit>,
    pub items: VecDeque<Item>,
    pub next_id: u64,
    pub open: Open,
    /// The server discards client messages until a Sync (after an error in the extended
    /// protocol); they are counted with the failed request, here (`None`: an untracked one).
    pub skip: Option<Option<u64>>,
    /// The client is in COPY IN mode for this request: its CopyData, and any Sync or Flush,
    /// which the server ignores, belong to it.
    pub copy_in: Option<Option<u64>>,
    /// The server stream was just (re)joined: responses that fit nothing in flight belong to
    /// requests we did not see and are skipped.
    pub fresh: bool,
    /// Requests were lost: a response with nothing in flight is theirs, not a stray.
    pub orphans_expected: bool,
    pub max_items: usize,
    /// The text-budget share taken for the client message being read (by the keep policy),
    /// moved to its unit when the message completes.
    pub pending_text: RefCell<Charge>,
    /// Parameter types named by each statement's Parse (for bound values).
    pub param_types: super::params::ParamTypes,
    /// The records Binds' parameters are copied into (reused once their events are gone).
    pub param_records: crate::params::ParamRecords,
    /// Events of extended-protocol requests waiting for their batch's ReadyForQuery
    /// ([`super::batch`]); at most `max_inflight`.
    pub held: VecDeque<crate::QueryEvent>,
    /// Texts parsed into the unnamed statement lately, shared by the Parses that repeat them.
    pub recent: crate::kit::RecentTexts,
}

/// Result of one server message against the item at the front.
pub(super) enum Step {
    More,
    Done,
    /// An ErrorResponse ended an extended-protocol request: the server skips to the next Sync.
    Failed,
    Mismatch,
}

/// Whether `tag` can be the next message of a response in state `want`.
pub(super) fn fits(want: Want, tag: u8) -> bool {
    let e = tag == be::ERROR_RESPONSE;
    // A simple query or function call always ends with ReadyForQuery.
    let z = tag == be::READY_FOR_QUERY && matches!(want, Want::Query(_) | Want::Function);
    e || z
        || match want {
            Want::ParseComplete => tag == be::PARSE_COMPLETE,
            Want::BindComplete => tag == be::BIND_COMPLETE,
            Want::CloseComplete => tag == be::CLOSE_COMPLETE,
            Want::DescribeStatement { params_seen: false } => tag == be::PARAMETER_DESCRIPTION,
            Want::DescribeStatement { params_seen: true } | Want::DescribePortal => {
                matches!(tag, be::ROW_DESCRIPTION | be::NO_DATA)
            }
            Want::Execute(f) | Want::Query(f) => {
                let query = matches!(want, Want::Query(_));
                match f {
                    Flow::Start => {
                        matches!(
                            tag,
                            be::ROW_DESCRIPTION
                                | be::COMMAND_COMPLETE
                                | be::EMPTY_QUERY_RESPONSE
                                | be::COPY_IN_RESPONSE
                                | be::COPY_OUT_RESPONSE
                                | be::COPY_BOTH_RESPONSE
                        ) || (!query && matches!(tag, be::DATA_ROW | be::PORTAL_SUSPENDED))
                    }
                    Flow::Rows => matches!(
                        tag,
                        be::DATA_ROW | be::COMMAND_COMPLETE | be::PORTAL_SUSPENDED
                    ),
                    Flow::CopyIn => tag == be::COMMAND_COMPLETE,
                    Flow::CopyOut => {
                        matches!(tag, be::COPY_DATA | be::COPY_DONE | be::COMMAND_COMPLETE)
                    }
                }
            }
            Want::Function => matches!(tag, be::FUNCTION_CALL_RESPONSE | be::READY_FOR_QUERY),
            Want::Ready => tag == be::READY_FOR_QUERY,
            Want::Unknown => true,
            Want::Lost => false,
        }
}

pub(super) fn tx_status(s: u8) -> TxStatus {
    TxStatus::from_byte(s).unwrap_or(TxStatus::Idle)
}
