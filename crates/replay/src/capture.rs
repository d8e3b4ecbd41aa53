//! The capture side: each connection's client bytes as the pipeline hands them to its
//! session, with reply and gap markers, framed at the end into requests and batches
//! (requests the client sent back to back before any reply: a pipeline).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use proto::redis::wire::{Probe, probe_command};
use proto::{Protocol, QueryEvent};

use crate::resp::{self, Frame};

/// Bounds on what is held before the replay starts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Client bytes held over all connections; beyond it a connection's further bytes are
    /// dropped and counted (`read_ahead`), and it resumes at no later point.
    pub max_bytes: usize,
}

/// One request: its bytes as captured and its arguments' ranges in them.
#[derive(Clone, Debug)]
pub struct Request {
    pub ts_ns: u64,
    pub bytes: Vec<u8>,
    pub args: Vec<(usize, usize)>,
    /// MySQL: the statement id the captured server gave this COM_STMT_PREPARE.
    pub prepared_id: Option<u32>,
}

impl Request {
    /// The arguments.
    pub fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.args
            .iter()
            .map(|&(s, e)| self.bytes.get(s..e).unwrap_or_default())
    }
}

/// Requests sent back to back before any reply came: they go out together.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub ts_ns: u64,
    pub requests: Vec<Request>,
}

/// The batches of one connection being framed: requests sent back to back before any reply
/// go in one batch.
#[derive(Debug)]
pub(crate) struct Batcher {
    reply_since: bool,
    batches: Vec<Batch>,
}

impl Default for Batcher {
    fn default() -> Batcher {
        Batcher {
            reply_since: true,
            batches: Vec::new(),
        }
    }
}

impl Batcher {
    /// A reply was seen: the next request starts a new batch.
    pub(crate) fn reply(&mut self) {
        self.reply_since = true;
    }

    /// Adds a request to the open batch, or opens one after a reply.
    pub(crate) fn push(&mut self, r: Request) {
        match self.batches.last_mut() {
            Some(b) if !self.reply_since => b.requests.push(r),
            _ => self.batches.push(Batch {
                ts_ns: r.ts_ns,
                requests: vec![r],
            }),
        }
        self.reply_since = false;
    }

    /// The batches framed.
    pub(crate) fn finish(self) -> Vec<Batch> {
        self.batches
    }
}

/// One captured connection, ready to replay.
#[derive(Clone, Debug)]
pub struct Plan {
    pub conn: u64,
    pub protocol: Protocol,
    /// The connection's opening was captured.
    pub saw_open: bool,
    /// The first database its events name (for a connection begun before the capture).
    pub database: Option<Arc<str>>,
    /// The captured user: PostgreSQL's startup message or MongoDB's saslStart, else the
    /// first its events name (MySQL's login, Redis's AUTH); picks its password from
    /// `--credentials`.
    pub user: Option<Arc<str>>,
    pub batches: Vec<Batch>,
    /// When the connection ended in the capture (or the capture did): the replayed
    /// connection is held open until then (a subscriber keeps receiving).
    pub end_ns: u64,
    /// MongoDB: (captured request id, cursor id) of every captured reply that opened a cursor.
    pub mongo_cursors: Vec<(i32, i64)>,
    /// `--live`: the batches come from this feed as the capture frames them (`batches` is
    /// empty).
    pub live: Option<crate::run::LiveFeed>,
}

pub(crate) enum Chunk {
    Client(u64, Vec<u8>),
    /// The server answered; the first (up to 9) bytes of its answer, for a MySQL
    /// PREPARE_OK's statement id (held inline: no allocation per reply).
    Reply([u8; 9], u8),
    Gap,
}

#[derive(Default)]
struct ConnBuf {
    saw_open: bool,
    chunks: Vec<Chunk>,
    overflowed: bool,
    protocol: Option<Protocol>,
    database: Option<Arc<str>>,
    events: u64,
    closed_ns: u64,
    /// MongoDB: the captured replies, scanned for the cursors they name.
    mongo: Option<Box<crate::mongo::ReplyScan>>,
    /// The filters' verdicts on this connection's events (only when filtering).
    verdicts: Vec<crate::filter::Judged>,
    /// The time of the last client bytes held.
    last_held_ns: u64,
    /// The first user its events name (MySQL's login, Redis's AUTH).
    user: Option<Arc<str>>,
}

/// Collects the client bytes of every connection (see the module doc).
pub struct Collector {
    limits: Limits,
    conns: HashMap<u64, ConnBuf>,
    held: usize,
    /// Skipped requests by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Skipped bytes by reason (bytes that framed no request).
    pub skipped_bytes: BTreeMap<String, u64>,
    /// Filters are on: requests are kept or left out by [`Collector::verdict`].
    filtering: bool,
}

impl Collector {
    pub fn new(limits: Limits) -> Collector {
        Collector {
            limits,
            conns: HashMap::new(),
            held: 0,
            skipped: BTreeMap::new(),
            skipped_bytes: BTreeMap::new(),
            filtering: false,
        }
    }

    /// Turns the filters on: each event's request is then kept or left out by its
    /// [`verdict`](Collector::verdict) (see [`crate::filter`]).
    pub fn filter(&mut self) {
        self.filtering = true;
    }

    /// The filters' verdict on an event of `conn` whose request started at `start_ns` (the
    /// packet time of its first byte). Held only for requests whose bytes are held, and
    /// counted against the read-ahead.
    pub fn verdict(
        &mut self,
        conn: u64,
        start_ns: u64,
        command: &'static str,
        v: crate::filter::Verdict,
    ) {
        if !self.filtering {
            return;
        }
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.chunks.is_empty() || start_ns > c.last_held_ns {
            return;
        }
        self.held += std::mem::size_of::<crate::filter::Judged>();
        c.verdicts.push(crate::filter::Judged {
            start_ns,
            command,
            verdict: v,
        });
    }

    /// A connection opened (`saw_open`: its start was captured).
    pub fn open(&mut self, conn: u64, saw_open: bool) {
        self.conns.entry(conn).or_default().saw_open = saw_open;
    }

    /// Bytes of `conn` handed to its session.
    pub fn bytes(&mut self, conn: u64, to_server: bool, ts_ns: u64, data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if !to_server {
            scan_mongo_reply(c, data);
            if !matches!(c.chunks.last(), Some(Chunk::Reply(..)) | None) {
                c.chunks.push(Chunk::reply(data));
            }
            return;
        }
        if c.protocol.is_some_and(|p| !supported(p)) {
            return;
        }
        if c.overflowed || self.held + data.len() > self.limits.max_bytes {
            if !c.overflowed {
                c.chunks.push(Chunk::Gap);
            }
            c.overflowed = true;
            *self.skipped_bytes.entry("read_ahead".into()).or_default() += data.len() as u64;
            return;
        }
        self.held += data.len();
        c.last_held_ns = ts_ns;
        c.chunks.push(Chunk::Client(ts_ns, data.to_vec()));
    }

    /// Reassembly lost bytes of `conn`.
    pub fn gap(&mut self, conn: u64, to_server: bool, len: u64) {
        if let Some(c) = self.conns.get_mut(&conn)
            && to_server
        {
            c.chunks.push(Chunk::Gap);
            *self.skipped_bytes.entry("capture_gap".into()).or_default() += len;
        }
    }

    /// The connection ended at `ts_ns`.
    pub fn close(&mut self, conn: u64, ts_ns: u64) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.closed_ns = ts_ns;
        }
    }

    /// An event of the capture: tells the connection's protocol and database.
    pub fn event(&mut self, ev: &QueryEvent) {
        let Some(c) = self.conns.get_mut(&ev.conn) else {
            return;
        };
        c.events += 1;
        if c.database.is_none() {
            c.database = ev.database.clone();
        }
        if c.user.is_none() {
            c.user = ev.user.clone();
        }
        if c.protocol.is_none() {
            c.protocol = Some(ev.protocol);
            if ev.protocol != Protocol::Mongodb {
                c.mongo = None;
            } else if c.mongo.is_none() {
                c.mongo = Some(Box::default());
            }
            if !supported(ev.protocol) {
                let freed: usize = c.chunks.iter().map(chunk_len).sum();
                self.held = self.held.saturating_sub(freed);
                c.chunks = Vec::new();
            }
        }
    }

    /// The connections to replay, in order of their first request, with what was skipped.
    pub fn finish(mut self) -> (Vec<Plan>, BTreeMap<String, u64>, BTreeMap<String, u64>) {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        let mut plans = Vec::new();
        for id in ids {
            let Some(c) = self.conns.remove(&id) else {
                continue;
            };
            match c.protocol {
                Some(p) if supported(p) => {}
                Some(p) => {
                    let reason = format!("{}_not_supported_yet", p.name());
                    *self.skipped.entry(reason).or_default() += c.events;
                    continue;
                }
                None => continue,
            }
            let protocol = c.protocol.unwrap_or(Protocol::Redis);
            let f = frame(
                protocol,
                c.saw_open,
                c.chunks.iter().map(Chunk::view),
                &mut self.skipped_bytes,
                &mut self.skipped,
            );
            // The login's user from the framing (PostgreSQL's startup), else from the events
            // (MySQL's login, Redis's AUTH).
            let user = f.user.map(Arc::from).or_else(|| c.user.clone());
            let database = f.database.map(Arc::from).or_else(|| c.database.clone());
            let batches = f.batches;
            let framed_last = batches.last().map_or(0, |b| b.ts_ns);
            let batches = if self.filtering {
                crate::filter::apply(protocol, batches, &c.verdicts, &mut self.skipped)
            } else {
                batches
            };
            let last = batches.last().map_or(0, |b| b.ts_ns);
            // Requests after the last one kept are not waited for.
            let closed_ns = if last < framed_last {
                last
            } else {
                c.closed_ns
            };
            if !batches.is_empty() {
                plans.push(Plan {
                    end_ns: closed_ns.max(last),
                    conn: id,
                    protocol,
                    saw_open: c.saw_open,
                    database,
                    user,
                    mongo_cursors: crate::mongo::opened(
                        &batches,
                        c.mongo.map(|m| m.cursors).unwrap_or_default(),
                    ),
                    batches,
                    live: None,
                });
            }
        }
        plans.sort_by_key(|p| (p.batches.first().map_or(0, |b| b.ts_ns), p.conn));
        (plans, self.skipped, self.skipped_bytes)
    }
}

/// The protocols replay supports.
fn supported(p: Protocol) -> bool {
    matches!(
        p,
        Protocol::Redis | Protocol::Mysql | Protocol::Postgres | Protocol::Mongodb
    )
}

/// A server's bytes of a connection that is (or may be) MongoDB: scanned for cursors.
fn scan_mongo_reply(c: &mut ConnBuf, data: &[u8]) {
    if c.mongo.is_none()
        && c.protocol.is_none()
        && c.events == 0
        && crate::mongo::looks_like_reply(data)
    {
        c.mongo = Some(Box::default());
    }
    if let Some(m) = c.mongo.as_mut() {
        m.feed(data);
    }
}

/// A chunk as the protocol framers see it.
#[derive(Clone, Copy)]
pub(crate) enum ChunkView<'a> {
    Client(u64, &'a [u8]),
    Reply(&'a [u8]),
    Gap,
}

impl Chunk {
    /// The reply marker of a server's answer starting with `data`.
    pub(crate) fn reply(data: &[u8]) -> Chunk {
        let mut head = [0u8; 9];
        let n = data.len().min(9);
        if let (Some(h), Some(d)) = (head.get_mut(..n), data.get(..n)) {
            h.copy_from_slice(d);
        }
        Chunk::Reply(head, n as u8)
    }

    pub(crate) fn view(&self) -> ChunkView<'_> {
        match self {
            Chunk::Client(ts, b) => ChunkView::Client(*ts, b),
            Chunk::Reply(h, n) => ChunkView::Reply(h.get(..usize::from(*n)).unwrap_or_default()),
            Chunk::Gap => ChunkView::Gap,
        }
    }
}

pub(crate) fn chunk_len(c: &Chunk) -> usize {
    match c {
        Chunk::Client(_, b) => b.len(),
        _ => 0,
    }
}

/// Frames one connection's chunks by its protocol (a whole capture's, or a window of a live
/// connection's): the batches, and the user and database its login named (PostgreSQL).
pub(crate) fn frame<'a>(
    protocol: Protocol,
    saw_open: bool,
    chunks: impl Iterator<Item = ChunkView<'a>>,
    skipped_bytes: &mut BTreeMap<String, u64>,
    skipped: &mut BTreeMap<String, u64>,
) -> crate::postgres::Framed {
    match protocol {
        Protocol::Postgres => crate::postgres::frame_conn(saw_open, chunks, skipped_bytes, skipped),
        Protocol::Mysql => crate::postgres::Framed {
            batches: crate::mysql::frame_conn(&saw_open, chunks, skipped_bytes, skipped),
            ..Default::default()
        },
        Protocol::Mongodb => {
            let batches = crate::mongo::frame_conn(saw_open, chunks, skipped_bytes);
            // The user of the captured login (saslStart), whose password --credentials gives.
            let msgs = batches.iter().flat_map(|b| &b.requests);
            let user = crate::mongo::auth::captured(msgs.map(|r| r.bytes.as_slice())).user;
            crate::postgres::Framed {
                batches,
                user,
                ..Default::default()
            }
        }
        Protocol::Redis => crate::postgres::Framed {
            batches: frame_conn(saw_open, chunks, skipped_bytes),
            ..Default::default()
        },
    }
}

/// Frames one connection's chunks into batches of requests.
fn frame_conn<'a>(
    saw_open: bool,
    chunks: impl Iterator<Item = ChunkView<'a>>,
    skipped: &mut BTreeMap<String, u64>,
) -> Vec<Batch> {
    let mut f = Framer {
        pend: Vec::new(),
        pend_ts: 0,
        synced: saw_open,
        out: Batcher::default(),
    };
    for chunk in chunks {
        match chunk {
            ChunkView::Client(ts, data) => f.client(ts, data, skipped),
            ChunkView::Reply(..) => f.out.reply(),
            ChunkView::Gap => {
                f.pend.clear();
                f.synced = false;
            }
        }
    }
    if !f.pend.is_empty() {
        *skipped.entry("incomplete_at_end".into()).or_default() += f.pend.len() as u64;
    }
    f.out.finish()
}

struct Framer {
    pend: Vec<u8>,
    pend_ts: u64,
    synced: bool,
    out: Batcher,
}

impl Framer {
    fn client(&mut self, ts: u64, data: &[u8], skipped: &mut BTreeMap<String, u64>) {
        if self.pend.is_empty() {
            self.pend_ts = ts;
        }
        self.pend.extend_from_slice(data);
        loop {
            if !self.synced {
                match probe_command(&self.pend) {
                    Probe::Match => self.synced = true,
                    Probe::NeedMore => return,
                    Probe::NoMatch => {
                        let n = self.pend.len() as u64;
                        *skipped.entry("midstream_prefix".into()).or_default() += n;
                        self.pend.clear();
                        return;
                    }
                }
            }
            match resp::request(&self.pend) {
                Frame::Whole(len, args) => {
                    let bytes: Vec<u8> = self.pend.drain(..len).collect();
                    self.out.push(Request {
                        ts_ns: self.pend_ts,
                        bytes,
                        args,
                        prepared_id: None,
                    });
                    self.pend_ts = ts;
                    if self.pend.is_empty() {
                        return;
                    }
                }
                Frame::More => return,
                Frame::Invalid => {
                    let n = self.pend.len() as u64;
                    *skipped.entry("unframed".into()).or_default() += n;
                    self.pend.clear();
                    self.synced = false;
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(saw_open: bool, steps: &[(bool, &[u8])]) -> Vec<Vec<Vec<u8>>> {
        let mut c = Collector::new(Limits { max_bytes: 1 << 20 });
        c.open(1, saw_open);
        for (i, (to_server, b)) in steps.iter().enumerate() {
            c.bytes(1, *to_server, i as u64, b);
        }
        let mut ev = proto::testing::event(Protocol::Redis, "get", 0, Some(1));
        ev.conn = 1;
        c.event(&ev);
        let (plans, _, _) = c.finish();
        plans
            .iter()
            .flat_map(|p| p.batches.iter())
            .map(|b| b.requests.iter().map(|r| r.bytes.clone()).collect())
            .collect()
    }

    #[test]
    fn pipelines_are_batches() {
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let b = collect(
            true,
            &[(true, get), (true, get), (false, b"$-1\r\n"), (true, get)],
        );
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].len(), 2);
        assert_eq!(b[1].len(), 1);
        // Split across deliveries.
        let b = collect(true, &[(true, &get[..5]), (true, &get[5..])]);
        assert_eq!(b, vec![vec![get.to_vec()]]);
    }

    #[test]
    fn gaps_and_read_ahead_are_counted() {
        let get: &[u8] = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let mut c = Collector::new(Limits { max_bytes: 40 });
        c.open(1, true);
        c.bytes(1, true, 1, &get[..6]);
        c.gap(1, true, 10);
        c.bytes(1, true, 2, get); // resynchronised at a whole command
        c.bytes(1, true, 3, get); // beyond the 40 bytes held
        let mut ev = proto::testing::event(Protocol::Redis, "get", 0, Some(1));
        ev.conn = 1;
        c.event(&ev);
        let (plans, _, bytes) = c.finish();
        assert_eq!(plans.len(), 1);
        assert_eq!(
            plans[0]
                .batches
                .iter()
                .map(|b| b.requests.len())
                .sum::<usize>(),
            1
        );
        assert_eq!(bytes.get("capture_gap"), Some(&10));
        assert_eq!(bytes.get("read_ahead"), Some(&(get.len() as u64)));
    }

    #[test]
    fn mongodb_bytes_that_frame_nothing_are_counted() {
        let mut c = Collector::new(Limits { max_bytes: 1 << 20 });
        c.open(7, true);
        c.bytes(7, true, 1, b"\x05\x00\x00\x00\x03SEL");
        let mut ev = proto::testing::event(Protocol::Mongodb, "find", 0, Some(1));
        ev.conn = 7;
        c.event(&ev);
        let (plans, skipped, bytes) = c.finish();
        assert!(plans.is_empty());
        assert!(skipped.is_empty());
        assert_eq!(bytes.get("incomplete_at_end"), Some(&8));
    }

    #[test]
    fn midstream_starts_at_first_whole_command() {
        let get = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let b = collect(false, &[(true, b"\r\nk\r\n"), (true, get)]);
        assert_eq!(b, vec![vec![get.to_vec()]]);
    }
}
