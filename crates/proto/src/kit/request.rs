//! The request core every protocol's in-flight record embeds (timestamps, wire bytes, rows,
//! warnings, error, text) and the one place that turns it into a [`QueryEvent`]; also the text
//! helpers that keep a statement's text within `max_text`.

use std::borrow::Cow;
use std::sync::Arc;

use crate::params::BoundParams;
use crate::{ConnMeta, DbError, IndexUse, Outcome, Protocol, QueryEvent};

/// What every request in flight records, whatever the protocol.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestCore {
    /// Timestamp of the packet that carried the request's first byte.
    pub start_ns: u64,
    /// Timestamp of the packet that carried the response's first byte.
    pub first_response_ns: Option<u64>,
    /// Timestamp of the packet that carried the response's last byte.
    pub end_ns: Option<u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub warnings: u64,
    pub error: Option<DbError>,
    /// Bytes of the request or its response were lost or could not be read.
    pub damaged: bool,
    pub text: Option<Arc<str>>,
    pub text_truncated: bool,
    /// Bytes of the request were lost while its framing held (see `QueryEvent::text_partial`).
    pub text_partial: bool,
    /// The server's index-use flags (MySQL/MariaDB).
    pub index: IndexUse,
    /// Bound parameter values, raw (see [`QueryEvent::params`]).
    pub params: Option<Arc<BoundParams>>,
}

/// The protocol-specific parts of an event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    pub command: &'static str,
    pub statement_id: Option<u32>,
    pub user: Option<Arc<str>>,
    pub database: Option<Arc<str>>,
}

impl Tags {
    pub fn new(command: &'static str) -> Self {
        Tags {
            command,
            ..Tags::default()
        }
    }
    pub fn user_db(mut self, user: Option<Arc<str>>, database: Option<Arc<str>>) -> Self {
        self.user = user;
        self.database = database;
        self
    }
    pub fn statement(mut self, id: Option<u32>) -> Self {
        self.statement_id = id;
        self
    }
}

/// Who sends the events: the protocol and the connection.
#[derive(Clone, Copy, Debug)]
pub struct Origin<'a> {
    pub protocol: Protocol,
    pub meta: &'a ConnMeta,
}

impl RequestCore {
    /// A request whose first byte came at `start_ns`, `bytes_in` bytes on the wire so far.
    pub fn new(start_ns: u64, bytes_in: u64) -> Self {
        RequestCore {
            start_ns,
            bytes_in,
            ..RequestCore::default()
        }
    }

    /// A response message of `wire` bytes whose first byte came at `first_ns` and last at
    /// `end_ns`.
    pub fn response(&mut self, first_ns: u64, end_ns: u64, wire: u64) {
        self.bytes_out += wire;
        self.first_response_ns.get_or_insert(first_ns);
        self.end_ns = Some(end_ns);
    }

    /// Adds the warnings a server reported.
    pub fn warned(&mut self, n: u64) {
        self.warnings = self.warnings.saturating_add(n);
    }

    /// The outcome the caller decided, made `Incomplete` when the request was damaged (a
    /// request that expects no reply stays so).
    pub fn settle(&self, outcome: Outcome) -> Outcome {
        if self.damaged && outcome != Outcome::NoReplyExpected {
            Outcome::Incomplete
        } else {
            outcome
        }
    }

    /// The outcome the record implies: no reply expected, else an error, else incomplete when
    /// damaged, else ok.
    pub fn implied_outcome(&self, no_reply: bool) -> Outcome {
        if no_reply {
            Outcome::NoReplyExpected
        } else if self.error.is_some() {
            Outcome::Error
        } else if self.damaged {
            Outcome::Incomplete
        } else {
            Outcome::Ok
        }
    }

    /// The event, with `outcome` as given.
    pub fn into_event(self, origin: Origin<'_>, tags: Tags, outcome: Outcome) -> QueryEvent {
        QueryEvent {
            protocol: origin.protocol,
            conn: origin.meta.id,
            client: origin.meta.client.clone(),
            server: origin.meta.server.clone(),
            start_ns: self.start_ns,
            first_response_ns: self.first_response_ns,
            end_ns: self.end_ns,
            service_start_ns: None,
            user: tags.user,
            database: tags.database,
            command: tags.command,
            text: self.text,
            text_truncated: self.text_truncated,
            text_partial: self.text_partial,
            statement_id: tags.statement_id,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            rows_sent: self.rows_sent,
            rows_affected: self.rows_affected,
            warnings: self.warnings,
            outcome,
            error: self.error,
            timed: true,
            txn: None,
            index: self.index,
            params: self.params,
            peer: origin.meta.peer.clone(),
        }
    }

    /// The event of a record that stays (its text and error are cloned).
    pub fn to_event(&self, origin: Origin<'_>, tags: Tags, outcome: Outcome) -> QueryEvent {
        self.clone().into_event(origin, tags, outcome)
    }
}

/// Bytes as text, replacing invalid UTF-8, without copying twice.
pub fn lossy_arc(b: &[u8]) -> Arc<str> {
    match std::str::from_utf8(b) {
        Ok(s) => Arc::from(s),
        Err(_) => Arc::from(String::from_utf8_lossy(b).as_ref()),
    }
}

/// Statement text kept for an event: at most `max` bytes of `sql`, cut at a character
/// boundary. `cut`: `sql` is already missing its end. Returns the text and whether it is
/// truncated.
pub fn cut_text(sql: &[u8], cut: bool, max: usize) -> (Cow<'_, str>, bool) {
    let mut bytes = sql.get(..sql.len().min(max)).unwrap_or(sql);
    let truncated = cut || bytes.len() < sql.len();
    if truncated
        && let Err(e) = std::str::from_utf8(bytes)
        && e.error_len().is_none()
    {
        // Cut in the middle of a character: drop its first bytes.
        bytes = bytes.get(..e.valid_up_to()).unwrap_or(bytes);
    }
    // Valid UTF-8 (the usual case) is checked by the fast validator, not the lossy one.
    let text = match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    };
    if text.len() <= max {
        return (text, truncated);
    }
    // Replacement characters made it longer.
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (Cow::Owned(text.get(..end).unwrap_or("").to_owned()), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ConnMeta {
        ConnMeta {
            id: 7,
            client: "10.0.0.1:5000"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
            server: "10.0.0.2:5432"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
            saw_open: true,
            peer: None,
            after_tls: false,
        }
    }

    #[test]
    fn builds_the_event() {
        let m = meta();
        let mut c = RequestCore::new(100, 20);
        c.response(150, 160, 30);
        c.response(170, 180, 5);
        c.rows_sent = 2;
        c.rows_affected = 1;
        c.warned(3);
        c.warned(u64::MAX);
        c.text = Some(Arc::from("select 1"));
        let origin = Origin {
            protocol: Protocol::Postgres,
            meta: &m,
        };
        let tags = Tags::new("query")
            .user_db(Some(Arc::from("u")), Some(Arc::from("d")))
            .statement(Some(4));
        let e = c.to_event(origin, tags.clone(), Outcome::Ok);
        assert_eq!(e.protocol, Protocol::Postgres);
        assert_eq!((e.conn, &e.client, &e.server), (7, &m.client, &m.server));
        assert_eq!(e.start_ns, 100);
        assert_eq!(e.first_response_ns, Some(150));
        assert_eq!(e.end_ns, Some(180));
        assert_eq!((e.bytes_in, e.bytes_out), (20, 35));
        assert_eq!((e.rows_sent, e.rows_affected, e.warnings), (2, 1, u64::MAX));
        assert_eq!(e.command, "query");
        assert_eq!(e.statement_id, Some(4));
        assert_eq!(e.user.as_deref(), Some("u"));
        assert_eq!(e.database.as_deref(), Some("d"));
        assert_eq!(e.text.as_deref(), Some("select 1"));
        assert_eq!(e.latency_ns(), Some(80));
        assert_eq!(e.peer, None);
        let e2 = c.into_event(origin, tags.clone(), Outcome::Error);
        assert_eq!(e2.outcome, Outcome::Error);
        assert_eq!(e2.end_ns, e.end_ns);
        // A Unix-socket connection with a known client process: both reach the event.
        let unix = ConnMeta {
            client: crate::Endpoint::unix(""),
            server: crate::Endpoint::unix("/run/postgresql/.s.PGSQL.5432"),
            peer: Some(Arc::new(crate::Process {
                pid: 4242,
                comm: Arc::from("psql"),
            })),
            ..meta()
        };
        let origin = Origin {
            protocol: Protocol::Postgres,
            meta: &unix,
        };
        let e3 = RequestCore::new(1, 1).into_event(origin, tags, Outcome::Ok);
        assert_eq!((&e3.client, &e3.server), (&unix.client, &unix.server));
        assert_eq!(e3.server.to_string(), "/run/postgresql/.s.PGSQL.5432");
        assert_eq!(e3.peer.as_deref().map(|p| p.pid), Some(4242));
    }

    #[test]
    fn outcomes() {
        let mut c = RequestCore::default();
        assert_eq!(c.implied_outcome(false), Outcome::Ok);
        assert_eq!(c.settle(Outcome::Error), Outcome::Error);
        c.damaged = true;
        assert_eq!(c.implied_outcome(false), Outcome::Incomplete);
        assert_eq!(c.implied_outcome(true), Outcome::NoReplyExpected);
        assert_eq!(c.settle(Outcome::Ok), Outcome::Incomplete);
        assert_eq!(c.settle(Outcome::NoReplyExpected), Outcome::NoReplyExpected);
        c.error = Some(DbError {
            code: 1,
            state: None,
            message: "no".into(),
        });
        assert_eq!(c.implied_outcome(false), Outcome::Error);
    }

    #[test]
    fn text_is_cut_at_char_boundaries() {
        assert_eq!(
            cut_text(b"select 1", false, 100),
            ("select 1".into(), false)
        );
        assert_eq!(cut_text(b"select 1", true, 100), ("select 1".into(), true));
        assert_eq!(cut_text(b"select 1", false, 6), ("select".into(), true));
        // "é" is two bytes: a cut after its first byte drops it.
        assert_eq!(cut_text("aé".as_bytes(), false, 2), ("a".into(), true));
        // Invalid bytes become U+FFFD (3 bytes): the text is cut again to fit.
        let (t, tr) = cut_text(b"a\xff\xffb", false, 4);
        assert!(t.len() <= 4 && tr, "{t:?}");
        assert_eq!(cut_text(b"", false, 0), ("".into(), false));
        assert_eq!(&*lossy_arc(b"ok"), "ok");
        assert_eq!(&*lossy_arc(b"o\xffk"), "o\u{fffd}k");
    }
}
