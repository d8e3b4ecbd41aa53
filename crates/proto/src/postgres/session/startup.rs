//! The start of a PostgreSQL connection: the untyped startup packet (user, database,
//! application name), SSLRequest / GSSENCRequest and the server's one-byte answer, a
//! CancelRequest, and the authentication exchange up to the first ReadyForQuery.

use super::super::message::{Backend, StartupPacket};
use super::super::wire::Message;
use super::state::{Conn, Kind, Unit, tx_status};
use super::{Act, PgSession, Phase};
use crate::Sink;
use crate::kit::lossy_arc;

impl Conn {
    /// The client's first packet.
    pub(super) fn on_startup(&mut self, m: &Message<'_>, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match StartupPacket::parse(m.head) {
            Ok(StartupPacket::SslRequest | StartupPacket::GssEncRequest) => {
                self.phase = Phase::EncAnswer;
            }
            Ok(StartupPacket::CancelRequest { .. }) => {
                let mut u = Unit::new(0, Kind::Unknown, m.start_ts, m.wire_len());
                u.no_reply = true;
                let mut ev = self.base_event(&u);
                ev.command = "cancel";
                sink.event(ev);
                act.stop = true;
            }
            Ok(StartupPacket::Startup {
                user,
                database,
                application_name,
                ..
            }) => {
                self.user = user.map(lossy_arc);
                // The database defaults to the user name.
                self.database = database
                    .filter(|d| !d.is_empty())
                    .map(lossy_arc)
                    .or_else(|| self.user.clone());
                self.application_name = application_name.map(lossy_arc);
                self.phase = Phase::Auth;
            }
            Err(_) => {
                // Not PostgreSQL 3.x.
                sink.health().malformed += 1;
                act.stop = true;
            }
        }
        act
    }

    /// A server message before the query phase (or after the conversation ended). Returns
    /// `None` in the query phase, where the message is a response.
    pub(super) fn on_server_outside_queries(
        &mut self,
        m: &Message<'_>,
        sink: &mut dyn Sink,
    ) -> Option<Act> {
        let mut act = Act::default();
        match self.phase {
            Phase::Startup | Phase::EncAnswer => {
                // The server spoke first: not PostgreSQL.
                sink.health().malformed += 1;
                act.stop = true;
            }
            Phase::Ended => sink.health().unparsed_bytes += m.wire_len(),
            Phase::Auth => match Backend::parse(m.tag, m.head) {
                Ok(Backend::ErrorResponse(_)) => self.phase = Phase::Ended,
                Ok(Backend::ReadyForQuery { status }) => {
                    self.phase = Phase::Ready;
                    self.tx = Some(tx_status(status));
                }
                Ok(_) => {}
                Err(_) => sink.health().malformed += 1,
            },
            Phase::Ready => return None,
        }
        Some(act)
    }
}

impl PgSession {
    /// The server's one-byte answer to SSLRequest / GSSENCRequest.
    pub(super) fn enc_answer(&mut self, b: u8, sink: &mut dyn Sink) {
        match b {
            b'S' | b'G' => {
                sink.health().encrypted_connections += 1;
                self.stopped = true;
                // TLS can be read on by a source that sees the plaintext (GSSAPI cannot).
                self.tls_stop = b == b'S';
            }
            b'N' => self.conn.phase = Phase::Startup,
            b'E' => {
                // An error message instead (a server too old for the request): it closes.
                self.conn.phase = Phase::Ended;
                sink.health().unparsed_bytes += 1;
            }
            _ => {
                sink.health().malformed += 1;
                self.stopped = true;
            }
        }
    }
}
