//! A minimal HTTP/1.1 client for ClickHouse's HTTP interface: one `POST` per connection
//! (`Connection: close`), the statement in the `query` parameter, the data in the body;
//! replies read with `Content-Length`, chunked, or up to the close, bounded. `http://`, or
//! `https://` through rustls (`crate::tls`). Written by hand: the workspace has no HTTP client
//! (tiny_http is a server), and a few kinds of request (insert, a count, a select) do not
//! justify a client stack and a runtime.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Most bytes of a reply body kept (error texts, a count).
const MAX_REPLY: usize = 1 << 20;

/// Where the server is: `http[s]://[user[:password]@]host[:port][/?database=db]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// `https://`: TLS, verified against `ca` or the system's roots.
    pub tls: bool,
    /// PEM file of the certificate authorities to trust (`--clickhouse-ca`).
    pub ca: Option<std::path::PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Query parameters kept from the URL (`database=...`), already encoded.
    pub params: Vec<(String, String)>,
}

/// Why a request failed, and whether the server may have applied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpError {
    /// Nothing reached the server (resolve or connect failed): safe to send again.
    Connect(String),
    /// The request was (maybe partly) sent but no complete reply came: it may have applied.
    Io(String),
    /// The server answered with this status and body.
    Status(u16, String),
    /// A bad URL.
    Url(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Connect(s) => write!(f, "cannot connect: {s}"),
            HttpError::Io(s) => write!(f, "{s}"),
            HttpError::Status(c, b) => {
                let b: String = b.split_whitespace().collect::<Vec<_>>().join(" ");
                write!(f, "HTTP {c}: {}", b.chars().take(300).collect::<String>())
            }
            HttpError::Url(s) => write!(f, "bad ClickHouse URL: {s}"),
        }
    }
}

impl std::error::Error for HttpError {}

fn pct_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (c, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encodes a query parameter value.
pub fn pct_encode(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, HttpError> {
        let bad = |why: &str| HttpError::Url(format!("{s}: {why}"));
        let (tls, rest) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
            (Some(r), _) => (false, r),
            (None, Some(r)) => (true, r),
            (None, None) => return Err(bad("expected http:// or https://")),
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (auth, path) = rest.split_at(end);
        let (creds, hostport) = match auth.rsplit_once('@') {
            Some((c, h)) => (Some(c), h),
            None => (None, auth),
        };
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || hostport.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| bad("the port is not a number"))?,
            ),
            _ => (hostport, if tls { 8443 } else { 8123 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let (user, password) = match creds.map(|c| c.split_once(':').unwrap_or((c, ""))) {
            Some((u, p)) => (Some(pct_decode(u)), Some(pct_decode(p))),
            None => (None, None),
        };
        let query = path.split_once('?').map_or("", |(_, q)| q);
        let params = query
            .split('&')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        Ok(Url {
            host: host.to_string(),
            port,
            tls,
            ca: None,
            user,
            password,
            params,
        })
    }

    /// The URL without its password (for messages).
    pub fn display(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            format!("{scheme}://[{}]:{}/", self.host, self.port)
        } else {
            format!("{scheme}://{}:{}/", self.host, self.port)
        }
    }

    fn target(&self, extra: &[(&str, &str)]) -> String {
        let mut q: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if let Some(u) = &self.user {
            q.push(format!("user={}", pct_encode(u)));
        }
        if let Some(p) = &self.password {
            q.push(format!("password={}", pct_encode(p)));
        }
        q.extend(extra.iter().map(|(k, v)| format!("{k}={}", pct_encode(v))));
        format!("/?{}", q.join("&"))
    }
}

/// Timeouts of one request.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub connect: Duration,
    pub io: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            io: Duration::from_secs(30),
        }
    }
}

/// `POST /?<url params>&<params>` with `body`; the reply body (lossy UTF-8, at most 1 MiB)
/// on 200.
pub fn post(
    url: &Url,
    params: &[(&str, &str)],
    body: &[u8],
    t: Timeouts,
) -> Result<String, HttpError> {
    post_bytes(url, params, body, t, MAX_REPLY).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// As [`post`], the reply's bytes, at most `max_reply` of them (more is an error).
pub fn post_bytes(
    url: &Url,
    params: &[(&str, &str)],
    body: &[u8],
    t: Timeouts,
    max_reply: usize,
) -> Result<Vec<u8>, HttpError> {
    let addrs = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| HttpError::Connect(format!("{}: {e}", url.display())))?;
    let mut last = HttpError::Connect(format!("{}: no address", url.display()));
    let mut conn = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, t.connect) {
            Ok(s) => {
                conn = Some(s);
                break;
            }
            Err(e) => last = HttpError::Connect(format!("{}: {e}", url.display())),
        }
    }
    let s = conn.ok_or(last)?;
    let io = |e: std::io::Error| HttpError::Io(format!("{}: {e}", url.display()));
    s.set_read_timeout(Some(t.io)).map_err(io)?;
    s.set_write_timeout(Some(t.io)).map_err(io)?;
    if url.tls {
        let cfg = crate::tls::config(url.ca.as_deref()).map_err(HttpError::Url)?;
        // A failed handshake sent no request: nothing can have been applied.
        let s = crate::tls::connect(cfg, &url.host, s)
            .map_err(|e| HttpError::Connect(format!("{}: TLS: {e}", url.display())))?;
        exchange(s, url, params, body, max_reply)
    } else {
        exchange(s, url, params, body, max_reply)
    }
}

/// The request over a connected stream and its reply.
fn exchange<S: Read + Write>(
    mut s: S,
    url: &Url,
    params: &[(&str, &str)],
    body: &[u8],
    max_reply: usize,
) -> Result<Vec<u8>, HttpError> {
    let io = |e: std::io::Error| HttpError::Io(format!("{}: {e}", url.display()));
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nContent-Length: {}\r\nConnection: close\r\n\
         Content-Type: application/octet-stream\r\n\r\n",
        url.target(params),
        url.host,
        url.port,
        body.len()
    );
    s.write_all(head.as_bytes()).map_err(io)?;
    s.write_all(body).map_err(io)?;
    s.flush().map_err(io)?;
    let (status, reply) = read_reply(&mut BufReader::new(s), max_reply).map_err(io)?;
    if status == 200 {
        Ok(reply)
    } else {
        let text = String::from_utf8_lossy(&reply[..reply.len().min(4096)]).into_owned();
        Err(HttpError::Status(status, text))
    }
}

fn bad(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// Status and body of an HTTP/1.x reply; a body over `max` bytes is an error.
pub fn read_reply(r: &mut impl BufRead, max: usize) -> std::io::Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    r.by_ref().take(8192).read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|_| line.starts_with("HTTP/1."))
        .ok_or_else(|| bad("not an HTTP reply"))?;
    let (mut len, mut chunked) = (None, false);
    for _ in 0..200 {
        line.clear();
        r.by_ref().take(8192).read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "content-length" {
                len = v.parse::<usize>().ok();
            } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        read_chunked(r, &mut body, max)?;
    } else {
        // A length over the bound reads one byte past it: the error below.
        let cap = len.map_or(max + 1, |l| l.min(max + 1)) as u64;
        r.take(cap).read_to_end(&mut body)?;
    }
    if body.len() > max {
        return Err(bad("reply longer than the bound"));
    }
    Ok((status, body))
}

fn read_chunked(r: &mut impl BufRead, body: &mut Vec<u8>, max: usize) -> std::io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        r.by_ref().take(1024).read_line(&mut line)?;
        let size = line.trim().split(';').next().unwrap_or("");
        let n = usize::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
        if n == 0 {
            return Ok(());
        }
        if n > max.saturating_sub(body.len()) {
            return Err(bad("reply longer than the bound"));
        }
        let before = body.len();
        r.by_ref().take(n as u64).read_to_end(body)?;
        if body.len() - before != n {
            return Err(bad("truncated chunk"));
        }
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
        if &crlf != b"\r\n" {
            return Err(bad("chunk not followed by CRLF"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        let u = Url::parse("http://bob:s%40c@ch.example:9000/?database=fleet").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("ch.example", 9000));
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_deref(), Some("s@c"));
        assert_eq!(u.params, vec![("database".into(), "fleet".into())]);
        assert!(
            u.target(&[("query", "SELECT 1")])
                .ends_with("query=SELECT%201")
        );
        let u = Url::parse("http://h:9?database=d").unwrap();
        assert_eq!((u.port, u.params.len()), (9, 1));
        let u = Url::parse("http://localhost").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.user), ("localhost", 8123, None));
        let u = Url::parse("http://[::1]:8124/").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 8124));
        let u = Url::parse("https://u:p@ch.example/?database=d").unwrap();
        assert_eq!(
            (u.tls, u.port, u.display()),
            (true, 8443, "https://ch.example:8443/".into())
        );
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://x:port").is_err());
        assert!(Url::parse("http://").is_err());
    }

    #[test]
    fn replies_read_by_length_chunks_or_close() {
        let r = |s: &str| {
            read_reply(&mut s.as_bytes(), 64)
                .map(|(c, b)| (c, String::from_utf8_lossy(&b).into_owned()))
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            r("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n5\nextra"),
            Ok((200, "5\n".into()))
        );
        assert_eq!(
            r(
                "HTTP/1.1 500 Err\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
            ),
            Ok((500, "abcde".into()))
        );
        assert_eq!(r("HTTP/1.0 404 X\r\n\r\nbye"), Ok((404, "bye".into())));
        assert!(r("garbage").is_err());
        let long = format!("HTTP/1.1 200 OK\r\n\r\n{}", "x".repeat(65));
        assert!(r(&long).is_err(), "over the bound");
        assert!(r("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").is_err());
    }
}
