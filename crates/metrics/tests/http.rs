//! The endpoint over real loopback HTTP, against a fake provider.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use metrics::http::{METRICS_CONTENT_TYPE, Provider, Window, serve};

#[derive(Default)]
struct Fake {
    calls: AtomicUsize,
}

impl Provider for Fake {
    fn metrics(&self) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        "# HELP up Up.\n# TYPE up gauge\nup 1\n".to_string()
    }
    fn digest_json(&self, window: Window) -> Vec<u8> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match window {
            Window::Current => br#"{"window":"current"}"#.to_vec(),
            Window::Total => br#"{"window":"total"}"#.to_vec(),
        }
    }
}

struct Panics;

impl Provider for Panics {
    fn metrics(&self) -> String {
        panic!("provider bug")
    }
    fn digest_json(&self, _: Window) -> Vec<u8> {
        panic!("provider bug")
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one raw HTTP/1.1 request with `Connection: close` and reads the whole answer.
fn request(addr: SocketAddr, method: &str, target: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("header end");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let mut reply = Reply {
        status,
        headers,
        body: body.to_string(),
    };
    if reply
        .header("Transfer-Encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        reply.body = dechunk(&reply.body);
    }
    reply
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = s.split_once("\r\n").unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            return out;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

#[test]
fn routes() {
    let fake = Arc::new(Fake::default());
    let server = serve(loopback(), fake.clone()).unwrap();
    let addr = server.local_addr();
    assert_ne!(addr.port(), 0);

    let r = request(addr, "GET", "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some(METRICS_CONTENT_TYPE));
    assert_eq!(r.body, "# HELP up Up.\n# TYPE up gauge\nup 1\n");

    for target in [
        "/api/digest",
        "/api/digest?window=current",
        "/api/digest?x=1&window=current",
    ] {
        let r = request(addr, "GET", target);
        assert_eq!(r.status, 200, "{target}");
        assert_eq!(r.header("Content-Type"), Some("application/json"));
        assert_eq!(r.body, r#"{"window":"current"}"#, "{target}");
    }
    let r = request(addr, "GET", "/api/digest?window=total");
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"window":"total"}"#));

    let r = request(addr, "GET", "/api/digest?window=forever");
    assert_eq!(r.status, 400);
    assert_eq!(r.body.lines().count(), 1, "{:?}", r.body);
    assert!(
        r.body.contains("forever") && r.body.contains("window=total"),
        "{}",
        r.body
    );

    let r = request(addr, "GET", "/");
    assert_eq!(r.status, 200);
    assert!(r.header("Content-Type").unwrap().starts_with("text/plain"));
    for route in ["/metrics", "/api/digest", "window=current", "window=total"] {
        assert!(r.body.contains(route), "{route} missing from {:?}", r.body);
    }

    let r = request(addr, "GET", "/nope");
    assert_eq!(r.status, 404);
    assert_eq!(r.body.lines().count(), 1);

    for method in ["POST", "PUT", "DELETE"] {
        let r = request(addr, method, "/metrics");
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("Allow"), Some("GET"));
    }
    let calls = fake.calls.load(Ordering::SeqCst);
    assert_eq!(calls, 1 + 3 + 1, "only successful GETs reach the provider");

    // Concurrent scrapes are all answered.
    let threads: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || request(addr, "GET", "/metrics").status))
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }

    server.stop();
    // Stopped: the port no longer accepts connections (or closes them unanswered).
    match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
        Err(_) => {}
        Ok(mut s) => {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf);
            assert!(!String::from_utf8_lossy(&buf).contains("up 1"));
        }
    }
}

#[test]
fn bind_failure_names_the_address() {
    let taken = TcpListener::bind(loopback()).unwrap();
    let addr = taken.local_addr().unwrap();
    let err = serve(addr, Arc::new(Fake::default()))
        .err()
        .expect("bind must fail");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("cannot listen on {addr}: ")),
        "{msg}"
    );
}

#[test]
fn provider_panic_is_a_500_and_the_server_goes_on() {
    let server = serve(loopback(), Arc::new(Panics)).unwrap();
    let addr = server.local_addr();
    for target in [
        "/metrics",
        "/api/digest",
        "/metrics",
        "/api/digest?window=total",
    ] {
        assert_eq!(request(addr, "GET", target).status, 500, "{target}");
    }
    assert_eq!(request(addr, "GET", "/").status, 200);
    drop(server); // Drop stops it too.
}
