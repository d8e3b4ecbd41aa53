//! Prepared-statement parameters on the session side: the parameter count each prepare OK
//! announces and the types the first execution sends, remembered per statement (bounded), and
//! the raw parameter bytes of each COM_STMT_EXECUTE put on its request (decoded only later,
//! for a group's example: see [`crate::mysql::params`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::super::message::caps;
use super::super::params::{RawParams, StmtParams, sent_types};
use super::super::wire::Message;
use super::conn::{Conn, Pending};
use super::result::Resp;
use crate::params::{BoundParams, ParamRecords};

/// Statements whose parameter facts a connection remembers, and the type bytes they may hold.
const MAX_STMTS: usize = 4096;
const MAX_TYPE_BYTES: usize = 256 << 10;
/// COM_STMT_EXECUTE's command byte, statement id, flags and iteration count.
const EXECUTE_HEAD: usize = 10;

/// Per-statement parameter facts of one connection.
#[derive(Debug, Default)]
pub(super) struct ParamFacts {
    by_stmt: HashMap<u32, StmtParams, foldhash::fast::RandomState>,
    type_bytes: usize,
    /// The executions' parameter records, refilled once their events are gone.
    records: ParamRecords,
}

impl ParamFacts {
    /// A prepare OK announced `count` parameters for statement `id`.
    pub(super) fn prepared(&mut self, id: u32, count: u16) {
        self.forget(id);
        if count > 0 && self.by_stmt.len() < MAX_STMTS {
            self.by_stmt.insert(id, StmtParams { count, types: None });
        }
    }

    pub(super) fn forget(&mut self, id: u32) {
        if let Some(t) = self.by_stmt.remove(&id).and_then(|s| s.types) {
            self.type_bytes = self.type_bytes.saturating_sub(t.len());
        }
    }

    pub(super) fn clear(&mut self) {
        self.by_stmt.clear();
        self.type_bytes = 0;
    }

    /// Heap bytes of the parameter records.
    pub(super) fn records_bytes(&self) -> usize {
        self.records.heap_bytes()
    }
}

/// An execution's parameter bytes whose statement is not known yet (id -1, "the statement
/// just prepared", sent before the prepare's answer): resolved when its event is emitted.
#[derive(Debug)]
pub(super) struct Deferred {
    body: Box<[u8]>,
    flags: u8,
}

impl Conn {
    /// The parameter bytes of a COM_STMT_EXECUTE of `stmt_id`, onto its request. Kept when the
    /// whole packet was read (its head is at most the 4 KiB kept of any command, and within
    /// `max_text`) and the statement's prepare was seen (now, or by the time the execution's
    /// answer comes, for id -1 or a statement whose prepare is still in flight).
    pub(super) fn bind_params(
        &mut self,
        p: &mut Pending,
        m: &Message<'_>,
        stmt_id: u32,
        flags: u8,
    ) {
        if !self.cfg.keep_params || m.lost > 0 || m.head.len() as u64 != m.len {
            return;
        }
        let Some(body) = m.head.get(EXECUTE_HEAD..) else {
            return;
        };
        if body.len() > self.cfg.max_text {
            return;
        }
        if stmt_id != u32::MAX && self.attach_params(p, stmt_id, body, flags) {
            return;
        }
        // Its prepare, still in flight, will be answered before this is: try again then.
        let preparing = self
            .inflight
            .iter()
            .any(|h| matches!(h.resp, Resp::Prepare(_)));
        if !preparing {
            // Id -1 after the prepare's answer: the statement just prepared.
            if let (u32::MAX, Some(id)) = (stmt_id, self.last_prepared) {
                self.attach_params(p, id, body, flags);
            }
            return;
        }
        p.deferred_params = Some(Box::new(Deferred {
            body: body.into(),
            flags,
        }));
    }

    /// Deferred parameter bytes of a request about to be emitted, with its statement now known.
    pub(super) fn resolve_params(&mut self, p: &mut Pending) {
        let Some(d) = p.deferred_params.take() else {
            return;
        };
        let id = match p.stmt {
            Some(u32::MAX) | None => self.last_prepared,
            s => s,
        };
        if let Some(id) = id {
            self.attach_params(p, id, &d.body, d.flags);
        }
    }

    /// The raw parameters of statement `stmt_id` onto `p`; false when the statement's
    /// parameter count is not known.
    fn attach_params(&mut self, p: &mut Pending, stmt_id: u32, body: &[u8], flags: u8) -> bool {
        let Some(facts) = self.params.by_stmt.get_mut(&stmt_id) else {
            return false;
        };
        let attrs = self
            .caps
            .is_some_and(|c| c & caps::CLIENT_QUERY_ATTRIBUTES != 0);
        // Usually only the first execution sends the types (new-params-bound = 1).
        if let Some(t) = sent_types(body, facts.count, flags, attrs) {
            let old = facts.types.as_ref().map_or(0, |t| t.len());
            let others = self.params.type_bytes.saturating_sub(old);
            if others + t.len() <= MAX_TYPE_BYTES {
                self.params.type_bytes = others + t.len();
                facts.types = Some(Arc::from(t));
            }
        }
        let (count, types) = (facts.count, &facts.types);
        let refill = |r: &mut BoundParams| match r {
            BoundParams::Mysql(r) => {
                (r.count, r.flags, r.query_attrs) = (count, flags, attrs);
                r.body.clear();
                r.body.extend_from_slice(body);
                r.types.clone_from(types);
                true
            }
            _ => false,
        };
        let make = || {
            BoundParams::Mysql(RawParams {
                count,
                flags,
                query_attrs: attrs,
                body: body.to_vec(),
                types: types.clone(),
            })
        };
        p.core.params = Some(self.params.records.fill(body.len(), refill, make));
        true
    }
}
