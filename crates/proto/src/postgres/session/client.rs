//! Frontend messages in the query phase: one function per message type. Each starts or joins
//! a request and queues the responses the server will owe for it.

use std::sync::Arc;

use super::super::message::{Frontend, Target, fe};
use super::super::wire::Message;
use super::query::query_state;
use super::state::{CLOSED, Conn, Flow, Kind, Open, OpenKind, Undo, Want, name_hash};
use super::{Act, Phase};
use crate::Sink;
use crate::kit::{Named, cut_text};

/// What a message did to the queues: whether it queued an owed response.
type Queued = bool;

impl Conn {
    pub(super) fn on_client(&mut self, m: &Message<'_>, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        let wire = m.wire_len();
        match self.phase {
            Phase::Startup => return self.on_startup(m, sink),
            Phase::EncAnswer => {
                // The client spoke before the server answered its encryption request.
                sink.health().malformed += 1;
                act.stop = true;
                return act;
            }
            Phase::Ended => {
                sink.health().unparsed_bytes += wire;
                return act;
            }
            Phase::Auth | Phase::Ready => {}
        }
        if m.tag == fe::PASSWORD {
            if self.phase != Phase::Auth {
                sink.health().unparsed_bytes += wire;
            }
            return act;
        }
        if self.absorbed_by_copy_in(m) || self.skipped_until_sync(m, sink, &mut act) {
            return act;
        }
        let parsed = match Frontend::parse(m.tag, m.head) {
            Ok(f) => Some(f),
            Err(_) => {
                sink.health().malformed += 1;
                None
            }
        };
        let queued = match m.tag {
            fe::QUERY => self.on_query(m, parsed, sink),
            fe::PARSE => self.on_parse(m, parsed, sink),
            fe::BIND => self.on_bind(m, parsed, sink),
            fe::DESCRIBE => self.on_describe(m, parsed, sink),
            fe::EXECUTE => self.on_execute(m, parsed, sink),
            fe::CLOSE => self.on_close(m, parsed, sink),
            fe::SYNC => self.on_sync(m, sink),
            fe::FLUSH => {
                if self.open.kind != OpenKind::Closed {
                    self.add_in(self.open.unit, wire, m.damaged);
                }
                return act;
            }
            fe::TERMINATE => {
                self.terminate(m, sink);
                return act;
            }
            fe::FUNCTION_CALL => {
                let id = self.new_unit(Kind::FunctionCall, m, sink);
                self.push_item(Want::Function, id, sink)
            }
            fe::COPY_DATA | fe::COPY_DONE | fe::COPY_FAIL => {
                // Copy data for a COPY that was lost or abandoned.
                sink.health().unparsed_bytes += wire;
                return act;
            }
            _ => {
                let id = self.new_unit(Kind::Unknown, m, sink);
                self.push_item(Want::Unknown, id, sink)
            }
        };
        if queued {
            act.server_boundary = true;
        }
        self.drain(sink);
        act
    }

    /// COPY IN: the server reads CopyData, CopyDone, CopyFail and ignores Sync and Flush; they
    /// belong to the COPY. Returns whether the message was taken.
    fn absorbed_by_copy_in(&mut self, m: &Message<'_>) -> bool {
        let Some(owner) = self.copy_in else {
            return false;
        };
        match m.tag {
            fe::COPY_DATA | fe::SYNC | fe::FLUSH => {
                self.add_in(owner, m.wire_len(), m.damaged);
                true
            }
            fe::COPY_DONE | fe::COPY_FAIL => {
                self.add_in(owner, m.wire_len(), m.damaged);
                self.copy_in = None;
                true
            }
            _ => {
                self.copy_in = None;
                false
            }
        }
    }

    /// After an error the server discards everything up to the next Sync. Returns whether the
    /// message was discarded that way.
    fn skipped_until_sync(&mut self, m: &Message<'_>, sink: &mut dyn Sink, act: &mut Act) -> bool {
        let Some(owner) = self.skip else {
            return false;
        };
        self.add_in(owner, m.wire_len(), m.damaged);
        if m.tag == fe::SYNC {
            self.skip = None;
            self.open = CLOSED;
            if self.push_item(Want::Ready, owner, sink) {
                act.server_boundary = true;
            }
        } else if m.tag == fe::TERMINATE {
            self.skip = None;
            self.terminate(m, sink);
        }
        true
    }

    /// Sets the text of `unit`, if it is tracked and there is one.
    fn set_unit_text(&mut self, unit: Option<u64>, text: Option<Named>) {
        if let Some(u) = self.unit_mut(unit)
            && let Some(t) = text
        {
            u.set_text(t);
        }
    }

    /// Leaves `unit` open to a Sync (or Flush) only.
    fn open_sync_only(&mut self, unit: Option<u64>) {
        self.open = Open {
            kind: OpenKind::SyncOnly,
            name: 0,
            unit,
        };
    }

    fn on_query(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let (sql, complete) = match parsed {
            Some(Frontend::Query { sql, sql_complete }) => (sql, sql_complete),
            _ => (&b""[..], false),
        };
        let id = self.new_unit(Kind::Query, m, sink);
        let max = self.cfg.max_text;
        let wire = m.wire_len();
        let charge = self.pending_text.take();
        if let Some(u) = self.unit_mut(id) {
            u.text_charge = charge;
            u.core.bytes_in = 0;
            u.query = Some(Box::new(query_state(
                sql,
                !complete || m.damaged,
                max,
                wire,
            )));
        }
        self.push_item(Want::Query(Flow::Start), id, sink)
    }

    fn on_parse(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let id = self.new_unit(Kind::Prepare, m, sink);
        // The statement's text stays in the cache after the event: the cache holds its share.
        let charge = self.pending_text.take();
        let Some(Frontend::Parse {
            name,
            sql,
            sql_complete,
        }) = parsed
        else {
            self.open_sync_only(id);
            return self.push_item(Want::ParseComplete, id, sink);
        };
        self.parse_types(m, name, sql.len());
        // Drivers re-parse the same SQL into the unnamed statement for every execution: the
        // text already held is shared rather than copied again (unnamed only: a named
        // statement's undo tells its texts apart by allocation). Whole and equal bytes are
        // that text without decoding them again.
        let held = name.is_empty().then(|| self.stmts.get(name)).flatten();
        let cut = !sql_complete || m.damaged;
        let whole = !cut && sql.len() <= self.cfg.max_text;
        let (text, tr) = match held {
            Some(p) if whole && !p.truncated && p.text.as_bytes() == sql => (p.text, false),
            held => match (whole && name.is_empty())
                .then(|| self.recent.find(sql))
                .flatten()
            {
                Some(t) => (t, false),
                None => {
                    let (t, tr) = cut_text(sql, cut, self.cfg.max_text);
                    let text: Arc<str> = match held {
                        Some(p) if p.truncated == tr && *p.text == *t => p.text,
                        _ => Arc::from(t.as_ref()),
                    };
                    if name.is_empty() && !tr {
                        self.recent.add(&text);
                    }
                    (text, tr)
                }
            },
        };
        let prev = self
            .stmts
            .insert_charged(name.into(), text.clone(), tr, charge);
        self.open = Open {
            kind: OpenKind::Prepare,
            name: name_hash(name),
            unit: id,
        };
        if let Some(u) = self.unit_mut(id) {
            u.stmt = Some(name_hash(name));
            u.core.text = Some(text.clone());
            u.core.text_truncated = tr;
            if !name.is_empty() {
                u.undo = Some(Box::new(Undo {
                    name: name.into(),
                    previous: prev,
                    inserted: Some(text),
                }));
            }
        }
        self.push_item(Want::ParseComplete, id, sink)
    }

    fn on_bind(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let id = self.new_unit(Kind::Bind, m, sink);
        let (portal, statement) = match parsed {
            Some(Frontend::Bind { portal, statement }) => (portal, statement),
            _ => (&b"\xff"[..], &b"\xff"[..]),
        };
        let text = match self.stmts.get(statement) {
            Some(t) => Some(t),
            None if !statement.is_empty() && parsed.is_some() => {
                // Prepared before the capture: counted under its name.
                let t: Arc<str> =
                    Arc::from(format!("EXECUTE {}", String::from_utf8_lossy(statement)));
                self.stmts.insert(statement.into(), t.clone(), false);
                Some(Named {
                    text: t,
                    truncated: false,
                })
            }
            None => None,
        };
        if parsed.is_some() {
            self.fold_parse(statement, id);
            self.bind_params(m, id, portal, statement);
        }
        // A new portal under this name: not executed yet.
        self.forget_executed(portal);
        match &text {
            Some(t) => {
                self.portals
                    .insert(portal.into(), t.text.clone(), t.truncated);
            }
            None => {
                self.portals.remove(portal);
            }
        }
        self.set_unit_text(id, text);
        self.open = Open {
            kind: OpenKind::Bind,
            name: name_hash(portal),
            unit: id,
        };
        self.push_item(Want::BindComplete, id, sink)
    }

    fn on_describe(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let (target, name) = match parsed {
            Some(Frontend::Describe { target, name }) => (Some(target), name),
            _ => (None, &b""[..]),
        };
        let want = if target == Some(Target::Portal) {
            Want::DescribePortal
        } else {
            Want::DescribeStatement { params_seen: false }
        };
        let joins = match (self.open.kind, target) {
            (OpenKind::Prepare, Some(Target::Statement))
            | (OpenKind::Bind, Some(Target::Portal)) => self.open.name == name_hash(name),
            _ => false,
        };
        if joins {
            let unit = self.open.unit;
            self.add_in(unit, m.wire_len(), m.damaged);
            return self.push_item(want, unit, sink);
        }
        let id = self.new_unit(Kind::Describe, m, sink);
        if target == Some(Target::Statement) {
            self.describing(id, name);
        }
        let text = match target {
            Some(Target::Statement) => self.stmts.get(name),
            Some(Target::Portal) => self.portals.get(name),
            None => None,
        };
        self.set_unit_text(id, text);
        self.open_sync_only(id);
        self.push_item(want, id, sink)
    }

    fn on_execute(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let portal = match parsed {
            Some(Frontend::Execute { portal, .. }) => Some(portal),
            _ => None,
        };
        let joins = self.open.kind == OpenKind::Bind
            && portal.is_some_and(|p| self.open.name == name_hash(p));
        // Executed before since its Bind: fetching more rows of a suspended portal.
        let fetch = portal.is_some_and(|p| !self.mark_executed(p));
        let unit = if joins {
            let unit = self.open.unit;
            if let Some(u) = self.unit_mut(unit) {
                u.kind = Kind::Execute;
                u.core.bytes_in += m.wire_len();
                u.core.damaged |= m.damaged;
                u.core.text_partial |= m.damaged;
            }
            unit
        } else {
            let kind = if fetch { Kind::Fetch } else { Kind::Execute };
            let id = self.new_unit(kind, m, sink);
            let text = portal.and_then(|p| self.portals.get(p));
            self.set_unit_text(id, text);
            id
        };
        self.open_sync_only(unit);
        self.push_item(Want::Execute(Flow::Start), unit, sink)
    }

    fn on_close(
        &mut self,
        m: &Message<'_>,
        parsed: Option<Frontend<'_>>,
        sink: &mut dyn Sink,
    ) -> Queued {
        let id = self.new_unit(Kind::Close, m, sink);
        let text = match parsed {
            Some(Frontend::Close {
                target: Target::Statement,
                name,
            }) => self.stmts.remove(name),
            Some(Frontend::Close {
                target: Target::Portal,
                name,
            }) => {
                self.forget_executed(name);
                self.portals.remove(name)
            }
            _ => None,
        };
        self.set_unit_text(id, text);
        self.open_sync_only(id);
        self.push_item(Want::CloseComplete, id, sink)
    }

    fn on_sync(&mut self, m: &Message<'_>, sink: &mut dyn Sink) -> Queued {
        let unit = if self.open.kind != OpenKind::Closed {
            self.open.unit
        } else {
            None
        };
        self.add_in(unit, m.wire_len(), m.damaged);
        self.open = CLOSED;
        self.push_item(Want::Ready, unit, sink)
    }

    pub(super) fn terminate(&mut self, m: &Message<'_>, sink: &mut dyn Sink) {
        let id = self.new_unit(Kind::Terminate, m, sink);
        if let Some(u) = self.unit_mut(id) {
            u.no_reply = true;
        }
        self.drain(sink);
    }
}
