//! The listening socket and the handler threads (`metrics::http::serve_with`, shared with the
//! agent's endpoint); each request goes to [`crate::api::route`].

use std::io;
use std::net::SocketAddr;

use crate::App;

/// Handler threads: a page loads a few API answers at once.
const HANDLER_THREADS: usize = 4;

/// A running server. [`Server::stop`] or dropping it stops it and joins its threads.
pub use metrics::http::Server;

/// Listens on `addr` (port 0 picks a free port; see [`Server::local_addr`]) and serves `app`
/// until the returned [`Server`] is stopped or dropped.
pub fn serve(addr: SocketAddr, app: App) -> io::Result<Server> {
    metrics::http::serve_with(
        addr,
        HANDLER_THREADS,
        "dbtap-web",
        move |rq: &tiny_http::Request| {
            let auth = rq
                .headers()
                .iter()
                .find(|h| h.field.equiv("Authorization"))
                .map(|h| h.value.as_str().to_string());
            crate::api::route(&app, rq.method(), rq.url(), auth.as_deref())
        },
        || crate::api::json_error(503, "shutting down"),
    )
}
