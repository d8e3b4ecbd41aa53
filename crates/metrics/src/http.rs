//! The agent's HTTP endpoint: Prometheus metrics and JSON digests, served by `tiny_http` from
//! two handler threads.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | 200, `text/plain; version=0.0.4; charset=utf-8`: [`Provider::metrics`] |
//! | `GET /api/digest`, `GET /api/digest?window=current` | 200, JSON of the current window |
//! | `GET /api/digest?window=total` | 200, JSON since the agent started |
//! | `GET /` | 200, a plain-text index of these routes |
//!
//! A bad `window` value gives 400, an unknown path 404, a method other than GET 405 (with
//! `Allow: GET`), a provider that panics 500; each with a one-line plain-text message.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tiny_http::{Header, Method, Request, Response};

/// Which aggregate a digest covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Window {
    /// The current (latest) window.
    Current,
    /// Everything since the agent started.
    Total,
}

impl Window {
    pub fn name(self) -> &'static str {
        match self {
            Window::Current => "current",
            Window::Total => "total",
        }
    }
}

/// What the endpoint serves. Called from the handler threads, so it must be cheap to share;
/// each call builds a fresh answer.
pub trait Provider: Send + Sync + 'static {
    /// The Prometheus text exposition (format 0.0.4).
    fn metrics(&self) -> String;
    /// The JSON digest of `window`.
    fn digest_json(&self, window: Window) -> Vec<u8>;
}

/// Content type of `/metrics`.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

const HANDLER_THREADS: usize = 2;

const INDEX: &str = "dbtap live\n\
\n\
GET /metrics                     Prometheus metrics (text format 0.0.4)\n\
GET /api/digest                  JSON digest of the current window\n\
GET /api/digest?window=current   the same\n\
GET /api/digest?window=total     JSON digest since the agent started\n";

/// A running endpoint. [`Server::stop`] or dropping it stops it and joins its threads.
pub struct Server {
    inner: Arc<tiny_http::Server>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Listens on `addr` (port 0 picks a free port; see [`Server::local_addr`]) and serves
/// `provider` until the returned [`Server`] is stopped or dropped.
pub fn serve(addr: SocketAddr, provider: Arc<dyn Provider>) -> io::Result<Server> {
    serve_with(
        addr,
        HANDLER_THREADS,
        "dbtap-http",
        move |rq: &Request| route(rq.method(), rq.url(), provider.as_ref()),
        || text(503, "shutting down"),
    )
}

/// Listens on `addr` and answers every request with `handle` on `threads` handler threads
/// named `name-N` (`busy` answers those that arrive while the server stops), until the
/// returned [`Server`] is stopped or dropped. The agent's endpoint and `crates/web` both
/// serve through it.
pub fn serve_with<H>(
    addr: SocketAddr,
    threads: usize,
    name: &str,
    handle: H,
    busy: fn() -> Reply,
) -> io::Result<Server>
where
    H: Fn(&Request) -> Reply + Send + Sync + 'static,
{
    let listener = TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    let inner = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| io::Error::other(format!("cannot serve on {local}: {e}")))?;
    let mut server = Server {
        inner: Arc::new(inner),
        addr: local,
        stopping: Arc::new(AtomicBool::new(false)),
        threads: Vec::with_capacity(threads),
    };
    let handle = Arc::new(handle);
    for i in 0..threads {
        let (inner, stopping, handle) = (
            server.inner.clone(),
            server.stopping.clone(),
            handle.clone(),
        );
        let t = std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || handler_loop(&inner, &stopping, handle.as_ref(), busy))?;
        // On an error above, dropping `server` stops the threads already running.
        server.threads.push(t);
    }
    Ok(server)
}

impl Server {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the handler threads (a request being answered is finished first).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        for _ in &self.threads {
            self.inner.unblock(); // wakes one thread blocked in recv()
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Dropping the last reference to `inner` closes the listener.
    }
}

fn handler_loop(
    server: &tiny_http::Server,
    stopping: &AtomicBool,
    handle: &(dyn Fn(&Request) -> Reply + Send + Sync),
    busy: fn() -> Reply,
) {
    loop {
        match server.recv() {
            Ok(rq) => {
                let reply = if stopping.load(Ordering::SeqCst) {
                    busy()
                } else {
                    handle(&rq)
                };
                // A client that went away is not our problem.
                let _ = rq.respond(reply);
            }
            // Either unblock() from Drop, or an accept error pushed by tiny_http's listener.
            Err(_) if stopping.load(Ordering::SeqCst) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// An answer of [`route`].
pub type Reply = Response<io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Header {
    // Both are ASCII constants of this module.
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

fn text(status: u16, msg: &str) -> Reply {
    Response::from_data(format!("{msg}\n").into_bytes())
        .with_status_code(status)
        .with_header(header("Content-Type", "text/plain; charset=utf-8"))
}

/// The answer to `method url` (public so that `crates/web` serves `/metrics` and
/// `/api/digest` exactly as this endpoint does).
pub fn route(method: &Method, url: &str, provider: &dyn Provider) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let known = matches!(path, "/" | "/metrics" | "/api/digest");
    if !known {
        return text(404, &format!("not found: {path} (see / for the routes)"));
    }
    if *method != Method::Get {
        return text(405, &format!("method {method} not allowed: use GET"))
            .with_header(header("Allow", "GET"));
    }
    match path {
        "/" => text(200, INDEX.trim_end()),
        "/metrics" => match catch_unwind(AssertUnwindSafe(|| provider.metrics())) {
            Ok(body) => Response::from_data(body.into_bytes())
                .with_header(header("Content-Type", METRICS_CONTENT_TYPE)),
            Err(_) => text(500, "internal error while rendering metrics"),
        },
        _ => {
            let window = match parse_window(query) {
                Ok(w) => w,
                Err(msg) => return text(400, &msg),
            };
            match catch_unwind(AssertUnwindSafe(|| provider.digest_json(window))) {
                Ok(body) => Response::from_data(body)
                    .with_header(header("Content-Type", "application/json")),
                Err(_) => text(500, "internal error while rendering the digest"),
            }
        }
    }
}

/// The `window` parameter of a query string (the last one wins; absent: current).
fn parse_window(query: &str) -> Result<Window, String> {
    let mut w = Window::Current;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k != "window" {
            continue;
        }
        w = match v {
            "current" => Window::Current,
            "total" => Window::Total,
            _ => {
                let shown: String = v.chars().take(40).filter(|c| !c.is_control()).collect();
                return Err(format!(
                    "bad window {shown:?}: expected window=current or window=total"
                ));
            }
        };
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows() {
        assert_eq!(parse_window(""), Ok(Window::Current));
        assert_eq!(parse_window("window=current"), Ok(Window::Current));
        assert_eq!(parse_window("window=total"), Ok(Window::Total));
        assert_eq!(parse_window("x=1&window=total&"), Ok(Window::Total));
        assert!(parse_window("window=").is_err());
        assert!(
            parse_window("window=week")
                .unwrap_err()
                .contains("\"week\"")
        );
    }
}
