//! The listening socket and the handler threads; each request goes to [`crate::api::route`].

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::App;

/// Handler threads: a page loads a few API answers at once.
const HANDLER_THREADS: usize = 4;

/// A running server. [`Server::stop`] or dropping it stops it and joins its threads.
pub struct Server {
    inner: Arc<tiny_http::Server>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// Listens on `addr` (port 0 picks a free port; see [`Server::local_addr`]) and serves `app`
/// until the returned [`Server`] is stopped or dropped.
pub fn serve(addr: SocketAddr, app: App) -> io::Result<Server> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let local = listener.local_addr()?;
    let inner = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| io::Error::other(format!("cannot serve on {local}: {e}")))?;
    let mut server = Server {
        inner: Arc::new(inner),
        addr: local,
        stopping: Arc::new(AtomicBool::new(false)),
        threads: Vec::with_capacity(HANDLER_THREADS),
    };
    let app = Arc::new(app);
    for i in 0..HANDLER_THREADS {
        let (inner, stopping, app) = (server.inner.clone(), server.stopping.clone(), app.clone());
        let t = std::thread::Builder::new()
            .name(format!("dbtap-web-{i}"))
            .spawn(move || handler_loop(&inner, &stopping, &app))?;
        server.threads.push(t);
    }
    Ok(server)
}

impl Server {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and joins the handler threads.
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        for _ in &self.threads {
            self.inner.unblock();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn handler_loop(server: &tiny_http::Server, stopping: &AtomicBool, app: &App) {
    loop {
        match server.recv() {
            Ok(rq) => {
                if stopping.load(Ordering::SeqCst) {
                    let _ = rq.respond(crate::api::json_error(503, "shutting down"));
                    continue;
                }
                let auth = rq
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .map(|h| h.value.as_str().to_string());
                let reply = crate::api::route(app, rq.method(), rq.url(), auth.as_deref());
                let _ = rq.respond(reply);
            }
            Err(_) if stopping.load(Ordering::SeqCst) => return,
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}
