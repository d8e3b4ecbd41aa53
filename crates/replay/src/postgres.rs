//! PostgreSQL specifics of a replay: the captured client bytes framed into messages (the
//! captured startup and authentication skipped, the user and database kept), batches up to a
//! Sync, Flush or Query, and dbtap's own login (trust, cleartext, md5 from the RustCrypto
//! `md-5` crate).

use std::collections::{BTreeMap, HashSet};

use md5::{Digest, Md5};

use crate::capture::{Batch, ChunkView, Request};

/// A message longer than this from a connection begun before the capture is not a start.
const MAX_MIDSTREAM: usize = 1 << 20;

fn count(m: &mut BTreeMap<String, u64>, why: &str, n: u64) {
    *m.entry(why.into()).or_default() += n;
}

/// What the framer learnt of a connection.
#[derive(Default, Debug)]
pub(crate) struct Framed {
    pub batches: Vec<Batch>,
    pub user: Option<String>,
    pub database: Option<String>,
}

/// Frames one connection's chunks (see the module doc).
pub(crate) fn frame_conn<'a>(
    saw_open: bool,
    chunks: impl Iterator<Item = ChunkView<'a>>,
    skipped_bytes: &mut BTreeMap<String, u64>,
    skipped: &mut BTreeMap<String, u64>,
) -> Framed {
    let mut f = Framer {
        startup: saw_open,
        ..Framer::default()
    };
    for c in chunks {
        match c {
            ChunkView::Client(ts, data) => f.client(ts, data, skipped_bytes, skipped),
            ChunkView::Reply(_) => {}
            ChunkView::Gap => {
                f.pend.clear();
                f.synced = false;
                f.startup = false;
                f.flush_batch();
            }
        }
    }
    if !f.pend.is_empty() {
        count(skipped_bytes, "incomplete_at_end", f.pend.len() as u64);
    }
    f.flush_batch();
    f.out
}

#[derive(Default)]
struct Framer {
    /// Untyped startup messages come next.
    startup: bool,
    synced: bool,
    pend: Vec<u8>,
    pend_ts: u64,
    cur: Batch,
    /// Skipping a Bind's batch up to its Sync (statement prepared before the capture).
    skipping: bool,
    parsed: HashSet<Vec<u8>>,
    out: Framed,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn cstr(b: &[u8]) -> (&[u8], &[u8]) {
    match b.iter().position(|&c| c == 0) {
        Some(i) => (
            b.get(..i).unwrap_or_default(),
            b.get(i + 1..).unwrap_or_default(),
        ),
        None => (b, &[]),
    }
}

/// The first `n` bytes of `pend` (the caller checked it holds them), taken out: one copy and
/// one move of the rest (`drain(..n).collect()` went through the iterator byte by byte).
fn take_front(pend: &mut Vec<u8>, n: usize) -> Vec<u8> {
    let n = n.min(pend.len());
    let m = pend.get(..n).unwrap_or_default().to_vec();
    pend.drain(..n);
    m
}

/// The message types that may start a request of a connection picked up mid-stream.
fn starts_request(t: u8) -> bool {
    matches!(t, b'Q' | b'P' | b'B')
}

impl Framer {
    fn flush_batch(&mut self) {
        if !self.cur.requests.is_empty() {
            self.out.batches.push(std::mem::take(&mut self.cur));
        }
        self.skipping = false;
    }

    fn client(
        &mut self,
        ts: u64,
        data: &[u8],
        skipped_bytes: &mut BTreeMap<String, u64>,
        skipped: &mut BTreeMap<String, u64>,
    ) {
        if self.pend.is_empty() {
            self.pend_ts = ts;
        }
        self.pend.extend_from_slice(data);
        loop {
            if self.startup {
                let Some(len) = be32(&self.pend, 0).map(|l| l as usize) else {
                    return;
                };
                if !(8..=MAX_MIDSTREAM).contains(&len) {
                    self.startup = false;
                    continue;
                }
                if self.pend.len() < len {
                    return;
                }
                let m = take_front(&mut self.pend, len);
                self.startup_msg(&m, skipped_bytes);
                continue;
            }
            let (Some(&t), Some(len)) = (self.pend.first(), be32(&self.pend, 1)) else {
                return;
            };
            let total = len as usize + 1;
            let plausible = starts_request(t) && (5..MAX_MIDSTREAM).contains(&total);
            if !self.synced && !plausible {
                // Not a start: the login's password messages, or the middle of a message.
                let why = if t == b'p' {
                    "login"
                } else {
                    "midstream_prefix"
                };
                let n = if t == b'p' && total >= 5 { total } else { 1 };
                if self.pend.len() < n {
                    return;
                }
                count(skipped_bytes, why, n as u64);
                self.pend.drain(..n);
                continue;
            }
            if len < 4 {
                count(skipped_bytes, "invalid_message", self.pend.len() as u64);
                self.pend.clear();
                self.synced = false;
                return;
            }
            if self.pend.len() < total {
                return;
            }
            self.synced = true;
            let m = take_front(&mut self.pend, total);
            self.message(t, m, skipped);
            self.pend_ts = ts;
        }
    }

    fn startup_msg(&mut self, m: &[u8], skipped_bytes: &mut BTreeMap<String, u64>) {
        count(skipped_bytes, "login", m.len() as u64);
        if be32(m, 4) != Some(196_608) {
            // SSLRequest, GSSENCRequest, CancelRequest: another startup message may follow.
            return;
        }
        self.startup = false;
        let mut rest = m.get(8..).unwrap_or_default();
        while !rest.is_empty() {
            let (k, r) = cstr(rest);
            let (v, r) = cstr(r);
            rest = r;
            if k.is_empty() {
                break;
            }
            let v = String::from_utf8_lossy(v).into_owned();
            match k {
                b"user" => self.out.user = Some(v),
                b"database" => self.out.database = Some(v),
                _ => {}
            }
        }
        if self.out.database.is_none() {
            self.out.database = self.out.user.clone();
        }
    }

    fn message(&mut self, t: u8, m: Vec<u8>, skipped: &mut BTreeMap<String, u64>) {
        match t {
            b'P' => {
                let (name, _) = cstr(m.get(5..).unwrap_or_default());
                // Most Parse messages name a statement seen before (the unnamed one): no
                // allocation for those.
                if !self.parsed.contains(name) {
                    self.parsed.insert(name.to_vec());
                }
            }
            b'B' => {
                let (_, r) = cstr(m.get(5..).unwrap_or_default());
                let (stmt, _) = cstr(r);
                if !self.parsed.contains(stmt) {
                    self.skipping = true;
                }
            }
            _ => {}
        }
        // COPY FROM STDIN data ends at CopyDone or CopyFail: a batch of its own after its
        // Query, sent when the target asks for it (see `run::pg`).
        let ends = matches!(t, b'S' | b'H' | b'Q' | b'X' | b'c' | b'f');
        if self.skipping {
            if matches!(t, b'S' | b'Q' | b'X') {
                self.skipping = false;
            } else {
                count(skipped, "statement_prepared_before_capture", 1);
                return;
            }
        }
        if matches!(t, b'Q' | b'X') {
            self.flush_batch();
        }
        if self.cur.requests.is_empty() {
            self.cur.ts_ns = self.pend_ts;
        }
        self.cur.requests.push(Request {
            ts_ns: self.pend_ts,
            bytes: m,
            args: Vec::new(),
            prepared_id: None,
        });
        if ends {
            self.flush_batch();
        }
    }
}

/// The StartupMessage for `user` and `database`.
pub fn startup(user: &str, database: Option<&str>) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&196_608u32.to_be_bytes());
    for (k, v) in [("user", Some(user)), ("database", database)] {
        if let Some(v) = v {
            p.extend_from_slice(k.as_bytes());
            p.push(0);
            p.extend_from_slice(v.as_bytes());
            p.push(0);
        }
    }
    p.push(0);
    let mut m = ((p.len() + 4) as u32).to_be_bytes().to_vec();
    m.extend_from_slice(&p);
    m
}

/// A typed message.
pub fn message(t: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![t];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// The SASLInitialResponse body choosing SCRAM-SHA-256 from the server's mechanism list
/// `mechanisms` (NUL-terminated names), with the client-first message `first`.
pub fn sasl_initial(mechanisms: &[u8], first: &str) -> Result<Vec<u8>, String> {
    let offered = mechanisms
        .split(|&b| b == 0)
        .any(|m| m == crate::scram::MECHANISM.as_bytes());
    if !offered {
        return Err(format!(
            "the target offers SASL mechanisms {:?}: only {} is supported",
            String::from_utf8_lossy(mechanisms)
                .replace('\0', " ")
                .trim(),
            crate::scram::MECHANISM
        ));
    }
    let mut out = Vec::with_capacity(first.len() + 20);
    out.extend_from_slice(crate::scram::MECHANISM.as_bytes());
    out.push(0);
    out.extend_from_slice(&(first.len() as u32).to_be_bytes());
    out.extend_from_slice(first.as_bytes());
    Ok(out)
}

/// The md5 password: "md5" + md5(md5(password + user) + salt), hex.
pub fn md5_password(user: &str, password: &str, salt: &[u8]) -> Vec<u8> {
    let hex = |d: &[u8]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let mut h = Md5::new();
    h.update(password.as_bytes());
    h.update(user.as_bytes());
    let inner = hex(&h.finalize());
    let mut h = Md5::new();
    h.update(inner.as_bytes());
    h.update(salt);
    let mut out = format!("md5{}", hex(&h.finalize())).into_bytes();
    out.push(0);
    out
}

/// Splits whole server messages off the start of `b`: (type, body) and the bytes used.
pub fn server_message(b: &[u8]) -> Option<(u8, &[u8], usize)> {
    let t = *b.first()?;
    let len = be32(b, 1)? as usize;
    let body = b.get(5..len.checked_add(1)?)?;
    Some((t, body, len + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_postgres() {
        // Computed independently (Python hashlib): "md5" + md5(md5("pw" + "u").hex + salt).hex
        let p = md5_password("u", "pw", b"\x01\x02\x03\x04");
        assert_eq!(p, b"md50803a98a0618b75c8f9a50f280cad373\0");
    }

    #[test]
    fn frames_startup_query_and_extended() {
        let mut bytes = startup("alice", Some("db1"));
        bytes.extend(message(b'p', b"secret\0"));
        bytes.extend(message(b'Q', b"select 1\0"));
        bytes.extend(message(b'P', b"s1\0select $1\0\0\0"));
        bytes.extend(message(b'B', b"\0s1\0\0\0\0\0\0\0"));
        bytes.extend(message(b'E', b"\0\0\0\0\0"));
        bytes.extend(message(b'S', b""));
        bytes.extend(message(b'B', b"\0s9\0\0\0\0\0\0\0"));
        bytes.extend(message(b'E', b"\0\0\0\0\0"));
        bytes.extend(message(b'S', b""));
        let (mut sb, mut s) = (BTreeMap::new(), BTreeMap::new());
        let f = frame_conn(
            true,
            [ChunkView::Client(1, &bytes)].into_iter(),
            &mut sb,
            &mut s,
        );
        assert_eq!(f.user.as_deref(), Some("alice"));
        assert_eq!(f.database.as_deref(), Some("db1"));
        let kinds: Vec<Vec<u8>> = f
            .batches
            .iter()
            .map(|b| b.requests.iter().map(|r| r.bytes[0]).collect())
            .collect();
        assert_eq!(kinds, vec![b"Q".to_vec(), b"PBES".to_vec(), b"S".to_vec()]);
        assert_eq!(s.get("statement_prepared_before_capture"), Some(&2));
        // A connection picked up mid-stream starts at its first Query/Parse/Bind.
        let mid = [&b"xx"[..], &message(b'Q', b"select 2\0")].concat();
        let f = frame_conn(
            false,
            [ChunkView::Client(1, &mid)].into_iter(),
            &mut sb,
            &mut s,
        );
        assert_eq!(f.batches.len(), 1);
        assert_eq!(sb.get("midstream_prefix"), Some(&2));
    }

    #[test]
    fn copy_data_is_a_batch_after_its_query() {
        let mut bytes = message(b'Q', b"COPY t FROM STDIN\0");
        let mut data = message(b'd', b"1\ta\n");
        data.extend(message(b'd', b"2\tb\n"));
        data.extend(message(b'c', b""));
        data.extend(message(b'Q', b"select 1\0"));
        bytes.extend(&data);
        let (mut sb, mut s) = (BTreeMap::new(), BTreeMap::new());
        let f = frame_conn(
            true,
            [
                ChunkView::Client(1, &bytes[..23]),
                ChunkView::Reply(b"G"),
                ChunkView::Client(2, &bytes[23..]),
            ]
            .into_iter(),
            &mut sb,
            &mut s,
        );
        let kinds: Vec<Vec<u8>> = f
            .batches
            .iter()
            .map(|b| {
                b.requests
                    .iter()
                    .filter_map(|r| r.bytes.first().copied())
                    .collect()
            })
            .collect();
        assert_eq!(kinds, vec![b"Q".to_vec(), b"ddc".to_vec(), b"Q".to_vec()]);
        assert!(s.is_empty(), "{s:?}");
    }
}
