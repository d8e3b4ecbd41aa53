//! The connection phase of a MySQL session: the server greeting, the client's handshake
//! response (or TLS switch), authentication exchanges, and the `connect` event of a login the
//! server refused. Once logged in, messages go to [`super::command`] and [`super::result`].

use super::super::message::{Handshake, HandshakeResponse, caps};
use super::super::wire::Message;
use super::conn::Conn;
use super::result::db_error;
use super::{Act, Phase};
use crate::kit::{RequestCore, lossy_arc};
use crate::{Outcome, Sink};

impl Conn {
    /// A whole client message.
    pub(super) fn on_client(&mut self, m: &Message<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match self.phase {
            Phase::Greeting => {
                // The client spoke first: not MySQL.
                sink.health().malformed += 1;
                act.stop = true;
            }
            Phase::ClientResponse => return self.handshake_response(m, wire, sink),
            // Auth data from the client (auth switch responses, public key requests...).
            Phase::Auth => {
                if let Some(l) = &mut self.login {
                    l.bytes_in += wire;
                }
            }
            Phase::Ended => sink.health().unparsed_bytes += wire,
            Phase::Command => return self.client_command(m, wire, sink),
        }
        act
    }

    /// The client's answer to the greeting: a TLS request, or its user, schema and
    /// capabilities.
    fn handshake_response(&mut self, m: &Message<'_>, wire: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match HandshakeResponse::parse(m.head) {
            Ok(r) if r.ssl_request && !self.in_tls => {
                sink.health().encrypted_connections += 1;
                self.tls_requested = true;
                act.stop = true;
            }
            Ok(r) => {
                self.login = Some(RequestCore::new(m.start_ts, wire));
                let eff = r.capabilities & self.server_caps;
                self.caps = Some(eff);
                self.deprecate_eof = Some(eff & caps::CLIENT_DEPRECATE_EOF != 0);
                self.user = Some(lossy_arc(r.user));
                self.database = r.database.filter(|d| !d.is_empty()).map(lossy_arc);
                self.phase = Phase::Auth;
            }
            Err(_) => {
                sink.health().malformed += 1;
                self.phase = Phase::Auth;
            }
        }
        act
    }

    /// A whole server message.
    pub(super) fn on_server(
        &mut self,
        m: &Message<'_>,
        wire: u64,
        ts: u64,
        sink: &mut dyn Sink,
    ) -> Act {
        match self.phase {
            Phase::Greeting => self.greeting(m, wire, ts, sink),
            Phase::ClientResponse => {
                sink.health().malformed += 1;
                sink.health().unparsed_bytes += wire;
                Act::default()
            }
            Phase::Auth => self.auth_reply(m, wire, ts, sink),
            Phase::Ended => {
                sink.health().unparsed_bytes += wire;
                Act::default()
            }
            Phase::Command => self.server_response(m, wire, ts, sink),
        }
    }

    /// The server's first message: a greeting, or a refusal.
    fn greeting(&mut self, m: &Message<'_>, wire: u64, ts: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match Handshake::parse(m.head) {
            Ok(h) => {
                self.server_caps = h.capabilities;
                self.phase = Phase::ClientResponse;
            }
            Err(_) => {
                if m.head.first() == Some(&0xFF) {
                    // A refusal instead of a greeting ("Too many connections", "Host is
                    // blocked"): a failed connect of its own.
                    let mut login = RequestCore::new(ts, 0);
                    login.response(ts, ts, wire);
                    self.failed_connect(login, m.head, ts, sink);
                } else {
                    sink.health().malformed += 1;
                }
                // Not MySQL, or a refusal: nothing to follow.
                act.stop = true;
            }
        }
        act
    }

    /// A server message during authentication: OK (logged in), ERR (refused), or a step of
    /// the exchange (auth switch request, auth more data).
    fn auth_reply(&mut self, m: &Message<'_>, wire: u64, ts: u64, sink: &mut dyn Sink) -> Act {
        let mut act = Act::default();
        match m.head.first() {
            Some(0x00) => {
                // Successful logins are not events (only failed ones are).
                self.login = None;
                self.phase = Phase::Command;
                let c = self.caps.unwrap_or(0);
                if c & (caps::CLIENT_COMPRESS | caps::CLIENT_ZSTD_COMPRESSION_ALGORITHM) != 0 {
                    act.compress = true;
                }
            }
            Some(0xFF) => {
                self.phase = Phase::Ended;
                if let Some(mut l) = self.login.take() {
                    l.response(ts, ts, wire);
                    self.failed_connect(l, m.head, ts, sink);
                }
            }
            _ => {
                if let Some(l) = &mut self.login {
                    l.response(ts, ts, wire);
                }
            }
        }
        act
    }

    /// A `connect` event for a login the server refused with the ERR in `head`.
    fn failed_connect(&self, mut login: RequestCore, head: &[u8], ts: u64, sink: &mut dyn Sink) {
        let Some(error) = db_error(head) else {
            sink.health().malformed += 1;
            return;
        };
        login.error = Some(error);
        login.end_ns = Some(ts);
        sink.event(login.into_event(self.origin(), self.tags("connect"), Outcome::Error));
    }
}
