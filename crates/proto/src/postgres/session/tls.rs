//! A PostgreSQL connection that goes TLS and is read on as decrypted plaintext (a source
//! that reads the TLS library, not packets): after SSLRequest and 'S' (or a direct TLS
//! ClientHello) the StartupMessage follows inside TLS, then authentication and queries.

use super::{CLIENT, PgSession, Phase};
use crate::Sink;

impl PgSession {
    /// [`crate::Session::start_tls`]: continue after the switch to TLS, or, when nothing was
    /// fed yet, read on as after TLS (an opened connection's first client message is then the
    /// StartupMessage, which is where a new session starts anyway). False after GSSAPI
    /// encryption or anywhere else.
    pub(super) fn switch_to_tls(&mut self) -> bool {
        if self.tls_stop {
            self.tls_stop = false;
            self.uncount = true;
            self.stopped = false;
            self.conn.phase = Phase::Startup;
            for d in self.dirs.iter_mut() {
                // Nothing is pending after the one-byte 'S' (or the ClientHello, which was
                // never framed); bytes fed after the stop were ignored and never counted.
                d.drop_partial();
                d.framing.probe.clear();
            }
            self.dirs[CLIENT].framer.set_typed(false);
            return true;
        }
        !(self.fed || self.stopped)
    }

    /// Applies a pending uncount of the encrypted-connection counter.
    pub(super) fn settle(&mut self, sink: &mut dyn Sink) {
        if std::mem::take(&mut self.uncount) {
            let h = sink.health();
            h.encrypted_connections = h.encrypted_connections.saturating_sub(1);
        }
    }
}
