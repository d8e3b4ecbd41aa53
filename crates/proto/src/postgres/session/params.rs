//! Bound parameters on the session side: the parameter types of each statement, remembered by
//! statement name (bounded): those its Parse names, replaced by those the server describes
//! (ParameterDescription, the answer to a Describe of the statement, which clients that Parse
//! without types read before binding in binary); and the raw parameter bytes of each Bind put
//! on its request (decoded only later, for a group's example: see [`crate::postgres::params`]).

use std::collections::HashMap;
use std::sync::Arc;

use super::super::params::{RawParams, parse_oids};
use super::super::wire::Message;
use super::state::{Conn, name_hash};
use crate::params::BoundParams;

/// Statements whose parameter types a connection remembers, and the OIDs they may hold.
const MAX_STMTS: usize = 4096;
const MAX_OIDS: usize = 64 << 10;
/// Bytes of a Bind kept after its two names: the parameters of an execution longer than
/// this are not kept.
pub(super) const BIND_PARAMS_KEEP: usize = 4096;

/// Bytes of a ParameterDescription kept (1,023 parameter types).
pub(super) const PARAM_DESC_KEEP: usize = 4094;

/// Parameter types by statement name (its hash).
#[derive(Debug, Default)]
pub(super) struct ParamTypes {
    by_stmt: HashMap<u64, Arc<[u32]>, foldhash::fast::RandomState>,
    oids: usize,
}

impl ParamTypes {
    fn set(&mut self, name: u64, oids: Option<Arc<[u32]>>) {
        if let Some(old) = self.by_stmt.remove(&name) {
            self.oids = self.oids.saturating_sub(old.len());
        }
        if let Some(o) = oids
            && self.by_stmt.len() < MAX_STMTS
            && self.oids + o.len() <= MAX_OIDS
        {
            self.oids += o.len();
            self.by_stmt.insert(name, o);
        }
    }
}

/// The bytes of `m`'s body after two C strings of lengths `a` and `b`, when the body was
/// read whole.
fn after_names<'a>(m: &Message<'a>, a: usize, b: usize) -> Option<&'a [u8]> {
    if !m.complete() || m.damaged {
        return None;
    }
    m.head.get(a + b + 2..)
}

impl Conn {
    /// A Parse of statement `name` whose text is `sql_len` bytes: the types it names.
    pub(super) fn parse_types(&mut self, m: &Message<'_>, name: &[u8], sql_len: usize) {
        let oids = after_names(m, name.len(), sql_len).and_then(parse_oids);
        self.param_types.set(name_hash(name), oids);
    }

    /// A Describe of statement `name` became request `unit`: its ParameterDescription will
    /// name the statement's types.
    pub(super) fn describing(&mut self, unit: Option<u64>, name: &[u8]) {
        if let Some(u) = self.unit_mut(unit) {
            u.stmt = Some(name_hash(name));
        }
    }

    /// The server described the parameters of the statement `unit` prepared or described.
    pub(super) fn described_types(&mut self, unit: Option<u64>, m: &Message<'_>) {
        if !m.complete() || m.damaged {
            return;
        }
        let Some(stmt) = self.unit_mut(unit).and_then(|u| u.stmt) else {
            return;
        };
        if let Some(oids) = parse_oids(m.head) {
            self.param_types.set(stmt, Some(oids));
        }
    }

    /// A Bind of `statement` to `portal`: its parameter bytes onto request `unit`.
    pub(super) fn bind_params(
        &mut self,
        m: &Message<'_>,
        unit: Option<u64>,
        portal: &[u8],
        statement: &[u8],
    ) {
        if !self.cfg.keep_params {
            return;
        }
        let Some(body) = after_names(m, portal.len(), statement.len()) else {
            return;
        };
        if body.len() > self.cfg.max_text {
            return;
        }
        // No parameters: format count 0 and parameter count 0.
        if body.get(..4) == Some(&[0, 0, 0, 0]) {
            return;
        }
        let oids = self.param_types.by_stmt.get(&name_hash(statement)).cloned();
        if let Some(u) = self.unit_mut(unit) {
            u.core.params = Some(Arc::new(BoundParams::Postgres(RawParams {
                body: body.into(),
                oids,
            })));
        }
    }
}
