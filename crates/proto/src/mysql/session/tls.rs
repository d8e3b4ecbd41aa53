//! A MySQL connection that goes TLS and is read on as decrypted plaintext (a source that
//! reads the TLS library, not packets): after the SSL request the real HandshakeResponse
//! (sequence id 2) follows inside TLS, then authentication and commands as usual.

use super::{MysqlSession, Phase};
use crate::Sink;

/// The server capabilities assumed when the greeting was not delivered ([`crate::ConnMeta::
/// after_tls`]): all of them, so the negotiated set is what the client asked for. A client
/// only asks for what the greeting offered (MariaDB and MySQL 8 clients intersect with the
/// server's flags before answering: CLIENT_DEPRECATE_EOF, compression, ...), so this is
/// right for every client that follows the protocol.
pub(super) const UNKNOWN_SERVER_CAPS: u64 = u64::MAX;

impl MysqlSession {
    /// [`crate::Session::start_tls`]: continue after an SSL request, or, when nothing was fed
    /// yet, read on as after TLS. False when the session is anywhere else.
    pub(super) fn switch_to_tls(&mut self) -> bool {
        if self.conn.tls_requested {
            // Stopped by the SSL request: the HandshakeResponse comes next, in plaintext.
            self.conn.tls_requested = false;
            self.conn.in_tls = true;
            self.uncount = true;
            self.stopped = false;
            self.conn.phase = Phase::ClientResponse;
            for d in self.dirs.iter_mut() {
                // Nothing is pending after a whole SSL request; bytes fed after the stop
                // were ignored and were never counted.
                d.reset();
            }
            return true;
        }
        if self.fed || self.stopped {
            return false;
        }
        self.conn.in_tls = true;
        if self.conn.phase == Phase::Greeting {
            // Nothing seen of an opened connection: the greeting and SSL request are behind
            // us, the first client packet is the HandshakeResponse.
            self.conn.phase = Phase::ClientResponse;
            self.conn.server_caps = UNKNOWN_SERVER_CAPS;
        }
        // Mid-stream: the decrypted stream is picked up like any other.
        true
    }

    /// Applies a pending uncount of the encrypted-connection counter.
    pub(super) fn settle(&mut self, sink: &mut dyn Sink) {
        if std::mem::take(&mut self.uncount) {
            let h = sink.health();
            h.encrypted_connections = h.encrypted_connections.saturating_sub(1);
        }
    }
}
