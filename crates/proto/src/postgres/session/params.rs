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
use crate::params::{BoundParams, ParamRecords};

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
        // Nothing to forget and nothing to record (a driver that names no types, as most do):
        // no hashing.
        if oids.is_none() && self.by_stmt.is_empty() {
            return;
        }
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
        if self.unit_mut(unit).is_none() {
            return;
        }
        let oids = self.param_types.by_stmt.get(&name_hash(statement)).cloned();
        let params = fill(&mut self.param_records, body, oids);
        if let Some(u) = self.unit_mut(unit) {
            u.core.params = Some(params);
        }
    }
}

/// A record of a Bind's `body` and `oids` from `records`: a free one refilled, or a new one.
pub(super) fn fill(
    records: &mut ParamRecords,
    body: &[u8],
    oids: Option<Arc<[u32]>>,
) -> Arc<BoundParams> {
    let refill = |p: &mut BoundParams| match p {
        BoundParams::Postgres(p) => {
            p.body.clear();
            p.body.extend_from_slice(body);
            p.oids.clone_from(&oids);
            true
        }
        _ => false,
    };
    let make = || {
        BoundParams::Postgres(RawParams {
            body: body.to_vec(),
            oids: oids.clone(),
        })
    };
    records.fill(body.len(), refill, make)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: &Arc<BoundParams>) -> &[u8] {
        match &**r {
            BoundParams::Postgres(p) => &p.body,
            _ => &[],
        }
    }

    #[test]
    fn a_record_is_refilled_only_once_nothing_else_holds_it() {
        let mut rs = ParamRecords::default();
        let a = fill(&mut rs, b"\0\0\0\x01\0\0\0\x011", None);
        let a_ptr = Arc::as_ptr(&a);
        // `a` still held (an event in flight, or a group's example): never written again.
        let b = fill(&mut rs, b"\0\0\0\x01\0\0\0\x012", None);
        assert_ne!(Arc::as_ptr(&b), a_ptr);
        assert_eq!(body(&a), b"\0\0\0\x01\0\0\0\x011");
        drop(a);
        // Gone: its allocation takes the next parameters.
        let c = fill(
            &mut rs,
            b"\0\0\0\x01\0\0\0\x013",
            Some(Arc::from(&[23u32][..])),
        );
        assert_eq!(Arc::as_ptr(&c), a_ptr);
        assert_eq!(body(&c), b"\0\0\0\x01\0\0\0\x013");
        assert_eq!(body(&b), b"\0\0\0\x01\0\0\0\x012");
        let BoundParams::Postgres(p) = &*c else {
            panic!("postgres")
        };
        assert_eq!(p.oids.as_deref(), Some(&[23u32][..]));
        // A much larger buffer is not refilled with a short body.
        drop((b, c));
        let big = fill(&mut rs, &[7; 1000], None);
        drop(big);
        let small = fill(&mut rs, b"\0\0\0\0", None);
        let BoundParams::Postgres(p) = &*small else {
            panic!("postgres")
        };
        assert!(p.body.capacity() < 1000);
        // Bounded, whatever is still held.
        let held: Vec<_> = (0..20u8).map(|i| fill(&mut rs, &[i; 100], None)).collect();
        assert_eq!(body(&held[19]), &[19; 100][..]);
        assert!(rs.heap_bytes() <= crate::params::PARAM_RECORDS * (2 * 100 + 64 + 64));
    }
}
