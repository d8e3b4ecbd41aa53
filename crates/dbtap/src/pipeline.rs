//! The offline pipeline: capture frames → L2-L4 decode → TCP reassembly → protocol sessions →
//! a consumer of query events. Single-threaded and deterministic: all time is packet time.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use capture::{Input, Reader};
use flow::{Dir, FlowConfig, FlowTable, Segment};
use proto::{ConnMeta, Direction, Health, Progress, Protocol, QueryEvent, Session, SessionConfig};
use report::{CaptureHealth, FrameHealth, ProtocolHealth, TcpHealth};

use crate::service::ServiceClock;
use wire::{Decoded, Defragmenter};

mod streams;

/// Whatever receives the query events.
pub trait Consumer {
    fn event(&mut self, ev: QueryEvent);
    /// True for consumers that only read events: the pipeline then hands each event to
    /// [`Consumer::event_ref`] instead of moving it into [`Consumer::event`] (a `QueryEvent` is
    /// a few hundred bytes, copied at each move the optimizer does not elide).
    const BY_REF: bool = false;
    /// [`Consumer::event`] by reference, called instead of it when [`Consumer::BY_REF`] is true.
    /// By default a clone handed to `event`.
    fn event_ref(&mut self, ev: &QueryEvent) {
        self.event(ev.clone());
    }
    /// The connection id the events of the engine's connection `conn` carry to this consumer,
    /// asked for each event before it is handed over: `conn` by default (the parallel digest's
    /// workers number connections as one thread would, without moving the event to do it).
    #[inline]
    fn conn_id(&mut self, conn: u64) -> u64 {
        conn
    }
    /// Every TCP segment decoded, before reassembly, with the length of the frame that carried
    /// it. For per-server packet and byte rates; nothing by default.
    fn segment(&mut self, _src: SocketAddr, _dst: SocketAddr, _frame_len: usize) {}
    /// The capture time of every frame, before it is decoded (the packet clock, for consumers
    /// that bin by time); nothing by default.
    fn packet(&mut self, _ts_ns: u64) {}
    /// Connection `conn` ended at `ts_ns` (closed, evicted, or the capture ended), after its
    /// last event. For per-connection state; nothing by default.
    fn close(&mut self, _conn: u64, _ts_ns: u64) {}
    /// Bytes of a socket stream (the eBPF source) to or from `server`, as they are delivered:
    /// the stream counterpart of [`Consumer::segment`]; nothing by default.
    fn stream_bytes(&mut self, _server: &proto::Endpoint, _to_server: bool, _len: usize) {}
    /// A connection was opened (its session or its protocol sniffing starts); for consumers
    /// that follow connections' bytes (`dbtap replay`); nothing by default.
    fn conn_open(&mut self, _meta: &ConnMeta) {}
    /// The bytes of connection `conn` handed to its session, in stream order per direction,
    /// with the time of the packet they came in; nothing by default.
    fn conn_bytes(&mut self, _conn: u64, _to_server: bool, _ts_ns: u64, _bytes: &[u8]) {}
    /// Reassembly lost `len` bytes of connection `conn` in one direction; nothing by default.
    fn conn_gap(&mut self, _conn: u64, _to_server: bool, _len: u64) {}
}

/// Where the pipeline looks for servers.
#[derive(Clone)]
pub struct Settings {
    /// Server ports and the protocol each speaks (defaults plus `--port`, which is sniffed).
    pub ports: Vec<(u16, Option<Protocol>)>,
    /// Explicit servers (`--server`): their protocol is sniffed from the first bytes.
    pub servers: Vec<SocketAddr>,
    pub session: SessionConfig,
    pub progress: bool,
    /// Connections tracked at once when reading files (`--max-connections`); beyond it the
    /// least recently active one is closed and counted (`connections_evicted`). A live capture
    /// sets its own bound.
    pub max_connections: usize,
    /// Live `--source auto` with the eBPF source running: a connection that goes TLS in the
    /// packets is read from the server's TLS plaintext by eBPF, so it is counted there
    /// (`tls_left_to_ebpf`), not as an encrypted connection skipped.
    pub tls_read_elsewhere: bool,
}

impl Settings {
    /// The registered protocols' default ports, plus `ports` (sniffed unless a default port),
    /// plus `servers` (sniffed).
    pub fn new(ports: &[u16], servers: &[SocketAddr], progress: bool) -> Settings {
        let mut all: Vec<(u16, Option<Protocol>)> = proto::registry::default_ports()
            .map(|(port, p)| (port, Some(p)))
            .collect();
        for &port in ports {
            if !all.iter().any(|(p, _)| *p == port) {
                all.push((port, None));
            }
        }
        Settings {
            ports: all,
            servers: servers.to_vec(),
            session: SessionConfig::default(),
            progress,
            max_connections: flow::DEFAULT_MAX_FLOWS,
            tls_read_elsewhere: false,
        }
    }
}

/// Expire idle connections every this much capture time.
const EXPIRE_EVERY_NS: u64 = 1_000_000_000;

enum Conn {
    Known(Box<dyn Session>),
    /// Orientation known, protocol not yet: decided by the first bytes seen. A connection
    /// picked up mid-stream is given [`SNIFF_TRIES`] deliveries to show a request boundary.
    Sniff(Box<Sniffing>),
}

/// A connection whose protocol is not known yet.
struct Sniffing {
    meta: ConnMeta,
    tries: u32,
    /// Socket streams only: the deliveries so far (direction, time, bytes), at most
    /// [`SNIFF_HOLD`] bytes. A stream delivers what each read returned, and a server that reads
    /// a 4-byte header and then the body (MariaDB) never shows a whole message in one delivery;
    /// a packet carries what the sender wrote, so TCP needs no holding.
    held: Vec<(Dir, u64, Vec<u8>)>,
}

/// The most bytes a socket stream's deliveries are held while its protocol is detected.
const SNIFF_HOLD: usize = 4096;

impl Sniffing {
    /// The protocol of `data` in `dir`, looked for in `data` alone, or for a socket stream
    /// after the held deliveries from each of their starts (a boundary). Returns the protocol
    /// and from which held delivery on the stream is fed.
    fn detect(&self, dir: Dir, data: &[u8]) -> Option<(Protocol, usize)> {
        let opening = self.meta.saw_open || self.meta.after_tls;
        let look = |bytes: &[u8]| {
            if self.meta.after_tls {
                proto::registry::detect_after_tls(direction(dir), bytes)
            } else {
                sniff(dir, bytes, opening)
            }
        };
        for k in 0..self.held.len() {
            let mut bytes: Vec<u8> = self.held[k..]
                .iter()
                .filter(|(d, _, _)| *d == dir)
                .flat_map(|(_, _, b)| b.iter().copied())
                .collect();
            bytes.extend_from_slice(data);
            if let Some(p) = look(&bytes) {
                return Some((p, k));
            }
        }
        look(data).map(|p| (p, self.held.len()))
    }
}

/// How many deliveries a mid-stream connection on a sniffed port may take to show a message
/// that identifies its protocol.
const SNIFF_TRIES: u32 = 64;

/// Opens the session for a protocol, through the registry.
fn new_session(p: Protocol, meta: ConnMeta, cfg: &SessionConfig) -> Option<Box<dyn Session>> {
    proto::registry::spec(p).map(|spec| (spec.new_session)(meta, cfg.clone()))
}

/// Which protocol the bytes in `dir` belong to, if any registered protocol recognises them
/// ([`proto::registry::detect`]). `opening` is true when they are the first bytes of a
/// connection whose start was captured.
fn sniff(dir: Dir, data: &[u8], opening: bool) -> Option<Protocol> {
    proto::registry::detect(direction(dir), data, opening)
}

impl<C: Consumer> Conns<C> {
    /// Opens a connection: its session if its server port names the protocol, else it waits
    /// for its first bytes to tell.
    fn open_meta(&mut self, meta: ConnMeta) {
        let id = meta.id;
        self.consumer.conn_open(&meta);
        let known = meta
            .server
            .port()
            .and_then(|port| self.ports.iter().find(|(p, _)| *p == port))
            .and_then(|(_, proto)| *proto);
        let conn = match known.and_then(|p| new_session(p, meta.clone(), &self.session_cfg)) {
            Some(s) => Conn::Known(s),
            None => Conn::Sniff(Box::new(Sniffing {
                meta,
                tries: 0,
                held: Vec::new(),
            })),
        };
        self.conns.insert(id, conn);
    }

    /// Bytes for a connection whose protocol is not known yet: detect it (holding a socket
    /// stream's deliveries, [`Sniffing`]), then feed the session; false when it is not read.
    fn sniff_data(&mut self, id: u64, dir: Dir, data: &[u8], ts_ns: u64) -> bool {
        let Some(conn) = self.conns.get_mut(&id) else {
            return false;
        };
        if let Conn::Sniff(sn) = conn {
            let opening = sn.meta.saw_open || sn.meta.after_tls;
            let found = sn.detect(dir, data);
            let session =
                found.and_then(|(p, _)| new_session(p, sn.meta.clone(), &self.session_cfg));
            let held: usize = sn.held.iter().map(|h| h.2.len()).sum();
            let meta = &sn.meta;
            match session {
                Some(s) => {
                    let from = found.map_or(0, |f| f.1);
                    let held = std::mem::take(&mut sn.held);
                    *conn = Conn::Known(s);
                    // The held deliveries from the boundary on, each with its own time.
                    for (d, ts, bytes) in held.into_iter().skip(from) {
                        if !self.feed_known(id, d, &bytes, ts) {
                            return false;
                        }
                    }
                }
                None if meta.id >= streams::FIRST_ID && held + data.len() <= SNIFF_HOLD => {
                    sn.held.push((dir, ts_ns, data.to_vec()));
                    return true;
                }
                None if !opening && sn.tries < SNIFF_TRIES => {
                    // Mid-stream: wait for a delivery that starts at a request boundary.
                    sn.tries += 1;
                    sn.held.clear();
                    return true;
                }
                None => {
                    if opening && self.tls_read_elsewhere && is_tls_handshake(data) {
                        // TLS from the first byte (Redis, MongoDB): read by eBPF instead.
                        self.tls_left_to_ebpf += 1;
                    } else if opening {
                        self.unknown_protocol += 1;
                    } else {
                        self.unknown_midstream += 1;
                        *self
                            .unknown_midstream_ports
                            .entry(meta.server.port().unwrap_or(0))
                            .or_default() += 1;
                    }
                    self.conns.remove(&id);
                    return false;
                }
            }
        }
        self.feed_known(id, dir, data, ts_ns)
    }

    /// Feeds bytes to connection `id`'s session; false when it reads no further.
    fn feed_known(&mut self, id: u64, dir: Dir, data: &[u8], ts_ns: u64) -> bool {
        let Some(Conn::Known(s)) = self.conns.get_mut(&id) else {
            return false;
        };
        let tls_left = self
            .tls_read_elsewhere
            .then_some(&mut self.tls_left_to_ebpf);
        feed_session(
            s.as_mut(),
            &mut self.consumer,
            &mut self.health,
            tls_left,
            (id, dir, data, ts_ns),
        )
    }

    /// Connection `id` carries decrypted TLS plaintext from now on: true if its session reads
    /// on ([`Session::start_tls`]).
    fn start_tls(&mut self, id: u64) -> bool {
        match self.conns.get_mut(&id) {
            Some(Conn::Known(s)) => s.start_tls(),
            Some(Conn::Sniff(sn)) => {
                sn.meta.after_tls = true;
                true
            }
            None => false,
        }
    }
}

/// The per-connection side of the pipeline, driven by the flow table.
struct Conns<C> {
    conns: HashMap<u64, Conn, foldhash::fast::RandomState>,
    consumer: C,
    health: SessionLedger,
    ports: Vec<(u16, Option<Protocol>)>,
    session_cfg: SessionConfig,
    /// Connections sniffed and found to speak no protocol we know.
    unknown_protocol: u64,
    /// Connections picked up mid-stream that showed no recognizable request in
    /// [`SNIFF_TRIES`] deliveries: possibly database traffic, so a loss.
    unknown_midstream: u64,
    /// The same, by server port (for the warning that names the port).
    unknown_midstream_ports: std::collections::BTreeMap<u16, u64>,
    /// See [`Settings::tls_read_elsewhere`].
    tls_read_elsewhere: bool,
    /// Connections that went TLS here and are read by the eBPF source instead.
    tls_left_to_ebpf: u64,
}

/// What the sessions count ([`Health`]), plus what the pipeline counts about their events and
/// bytes as they pass.
#[derive(Default)]
struct SessionLedger {
    health: Health,
    /// Events whose response is time-stamped before their request.
    negative_latencies: u64,
    /// Per connection with a session: payload bytes fed to it and unparsed bytes it reported,
    /// so that a session never reports more unparsed bytes than it was given. Removed at close.
    conn_bytes: HashMap<u64, ConnBytes, foldhash::fast::RandomState>,
    /// Per connection: when its server could start on the next request (service time, for
    /// every protocol). Dropped at close.
    service: ServiceClock,
}

#[derive(Default)]
struct ConnBytes {
    fed: u64,
    unparsed: u64,
}

/// The sink of one call into one connection's session. On drop, the unparsed bytes the call
/// reported are held to what the connection's session was fed and has not already reported:
/// bytes lost in a capture gap were never seen, so they are gap bytes, not unparsed ones.
struct SinkRef<'a, C> {
    consumer: &'a mut C,
    ledger: &'a mut SessionLedger,
    conn: u64,
    unparsed_before: u64,
    closing: bool,
}

impl<'a, C> SinkRef<'a, C> {
    /// A sink for a call that feeds `fed` bytes (0 for a gap) to connection `conn`.
    fn new(consumer: &'a mut C, ledger: &'a mut SessionLedger, conn: u64, fed: usize) -> Self {
        if fed > 0 {
            ledger.conn_bytes.entry(conn).or_default().fed += fed as u64;
        }
        let unparsed_before = ledger.health.unparsed_bytes;
        SinkRef {
            consumer,
            ledger,
            conn,
            unparsed_before,
            closing: false,
        }
    }

    /// A sink for the call that closes connection `conn` (its byte counts are dropped after).
    fn closing(consumer: &'a mut C, ledger: &'a mut SessionLedger, conn: u64) -> Self {
        let mut sink = Self::new(consumer, ledger, conn, 0);
        sink.closing = true;
        sink
    }
}

impl<C> Drop for SinkRef<'_, C> {
    fn drop(&mut self) {
        let l = &mut *self.ledger;
        let reported = l.health.unparsed_bytes.saturating_sub(self.unparsed_before);
        if self.closing {
            l.service.close(self.conn);
            let b = l.conn_bytes.remove(&self.conn).unwrap_or_default();
            let kept = reported.min(b.fed.saturating_sub(b.unparsed));
            l.health.unparsed_bytes -= reported - kept;
            return;
        }
        if reported == 0 {
            return;
        }
        let b = l.conn_bytes.entry(self.conn).or_default();
        let kept = reported.min(b.fed.saturating_sub(b.unparsed));
        b.unparsed += kept;
        l.health.unparsed_bytes -= reported - kept;
    }
}

impl<C: Consumer> proto::Sink for SinkRef<'_, C> {
    fn event(&mut self, mut ev: QueryEvent) {
        let before = |t: Option<u64>| t.is_some_and(|t| t < ev.start_ns);
        if before(ev.end_ns) || before(ev.first_response_ns) {
            self.ledger.negative_latencies += 1;
        }
        // The one place service time is computed: every protocol's events pass here.
        self.ledger.service.stamp(&mut ev);
        ev.conn = self.consumer.conn_id(ev.conn);
        if C::BY_REF {
            self.consumer.event_ref(&ev);
        } else {
            self.consumer.event(ev);
        }
    }
    fn health(&mut self) -> &mut Health {
        &mut self.ledger.health
    }
}

/// Feeds one delivery to a session. `tls_left`: under `Settings::tls_read_elsewhere`, where a
/// connection the session stops as encrypted is booked instead (it is read by eBPF).
fn feed_session<C: Consumer>(
    s: &mut dyn Session,
    consumer: &mut C,
    ledger: &mut SessionLedger,
    tls_left: Option<&mut u64>,
    (id, dir, data, ts_ns): (u64, Dir, &[u8], u64),
) -> bool {
    let encrypted = ledger.health.encrypted_connections;
    consumer.conn_bytes(id, dir == Dir::ToServer, ts_ns, data);
    let mut sink = SinkRef::new(consumer, ledger, id, data.len());
    let go_on = s.feed(direction(dir), data, ts_ns, &mut sink) == Progress::Continue;
    drop(sink);
    if let Some(left) = tls_left
        && !go_on
        && ledger.health.encrypted_connections > encrypted
    {
        ledger.health.encrypted_connections = encrypted;
        *left += 1;
    }
    go_on
}

/// A TLS handshake record (content type 22, version 3.x): a connection that is TLS from its
/// first byte.
fn is_tls_handshake(b: &[u8]) -> bool {
    matches!(b, [0x16, 0x03, 0x00..=0x04, ..])
}

fn direction(d: Dir) -> Direction {
    match d {
        Dir::ToServer => Direction::ToServer,
        Dir::ToClient => Direction::ToClient,
    }
}

impl<C: Consumer> flow::Handler for Conns<C> {
    fn open(
        &mut self,
        id: u64,
        client: SocketAddr,
        server: SocketAddr,
        saw_syn: bool,
        _ts_ns: u64,
    ) -> bool {
        self.open_meta(ConnMeta {
            id,
            client: client.into(),
            server: server.into(),
            saw_open: saw_syn,
            peer: None,
            after_tls: false,
        });
        true
    }

    fn data(&mut self, id: u64, dir: Dir, data: &[u8], ts_ns: u64) -> bool {
        match self.conns.get_mut(&id) {
            // The hot path: one lookup.
            Some(Conn::Known(s)) => {
                let tls_left = self
                    .tls_read_elsewhere
                    .then_some(&mut self.tls_left_to_ebpf);
                feed_session(
                    s.as_mut(),
                    &mut self.consumer,
                    &mut self.health,
                    tls_left,
                    (id, dir, data, ts_ns),
                )
            }
            Some(Conn::Sniff(_)) => self.sniff_data(id, dir, data, ts_ns),
            None => false,
        }
    }

    fn gap(&mut self, id: u64, dir: Dir, len: u64, ts_ns: u64) {
        self.consumer.conn_gap(id, dir == Dir::ToServer, len);
        let mut sink = SinkRef::new(&mut self.consumer, &mut self.health, id, 0);
        if let Some(Conn::Known(s)) = self.conns.get_mut(&id) {
            s.gap(direction(dir), len, ts_ns, &mut sink);
        }
    }

    fn close(&mut self, id: u64, ts_ns: u64) {
        {
            let mut sink = SinkRef::closing(&mut self.consumer, &mut self.health, id);
            if let Some(Conn::Known(mut s)) = self.conns.remove(&id) {
                s.close(ts_ns, &mut sink);
            }
        }
        self.consumer.close(id, ts_ns);
    }
}

/// Counts of the frames that never reached TCP reassembly.
#[derive(Default)]
struct FrameCounts {
    packets: u64,
    bytes: u64,
    non_tcp: u64,
    truncated_headers: u64,
    malformed: u64,
    fragments: u64,
    unsupported_link: u64,
    first_ts: Option<u64>,
    last_ts: Option<u64>,
}

/// The pipeline from a frame to query events, fed one frame at a time: L2-L4 decode, IP
/// defragmentation, TCP reassembly, protocol sessions. One engine per capture thread; the file
/// reader ([`run`]) and the live capture workers drive the same code.
pub struct Engine<C> {
    table: FlowTable,
    conns: Conns<C>,
    defrag: Defragmenter,
    counts: FrameCounts,
    last_expire: u64,
    warnings: Vec<String>,
    streams: streams::Streams,
    /// False under the parallel digest: its reader decides when every worker expires
    /// (`parallel.rs`), at the same frames as one thread would.
    self_expire: bool,
}

impl<C: Consumer> Engine<C> {
    pub fn new(settings: &Settings, flow: FlowConfig, consumer: C) -> Self {
        let flow_cfg = FlowConfig {
            server_ports: settings.ports.iter().map(|(p, _)| *p).collect(),
            servers: settings.servers.clone(),
            track_unknown_with_syn: true,
            ..flow
        };
        Engine {
            table: FlowTable::new(flow_cfg),
            conns: Conns {
                conns: HashMap::default(),
                consumer,
                health: SessionLedger::default(),
                ports: settings.ports.clone(),
                // The budget is shared; its cuts are counted per engine, so that the health
                // of several capture threads adds up.
                session_cfg: SessionConfig {
                    text_budget: settings.session.text_budget.counting_apart(),
                    ..settings.session.clone()
                },
                unknown_protocol: 0,
                unknown_midstream: 0,
                unknown_midstream_ports: Default::default(),
                tls_read_elsewhere: settings.tls_read_elsewhere,
                tls_left_to_ebpf: 0,
            },
            defrag: Defragmenter::new(),
            counts: FrameCounts::default(),
            last_expire: 0,
            warnings: Vec::new(),
            streams: streams::Streams::new(),
            self_expire: true,
        }
    }

    /// Feeds one captured frame of link type `linktype`, captured at `ts` (ns since the epoch).
    /// `name` names the source in a warning about an unsupported link type.
    pub fn frame(&mut self, linktype: u32, data: &[u8], ts: u64, name: &str) {
        if linktype == stream::LINKTYPE {
            self.stream_frame(data, ts);
            return;
        }
        self.counts.packets += 1;
        self.counts.bytes += data.len() as u64;
        self.note_time(ts);
        let counts = &mut self.counts;
        match wire::decode(linktype, data) {
            Decoded::Tcp(t) => feed_tcp(&mut self.table, &mut self.conns, &t, ts, data.len()),
            Decoded::Fragment(f) => {
                counts.fragments += 1;
                if let Some(dgram) = self.defrag.push(&f, ts) {
                    match wire::decode_ip(&dgram) {
                        Decoded::Tcp(t) => {
                            feed_tcp(&mut self.table, &mut self.conns, &t, ts, dgram.len())
                        }
                        Decoded::NotTcp => counts.non_tcp += 1,
                        _ => counts.malformed += 1,
                    }
                }
            }
            Decoded::NotTcp => counts.non_tcp += 1,
            Decoded::Truncated => counts.truncated_headers += 1,
            Decoded::Malformed => counts.malformed += 1,
            Decoded::UnsupportedLink(lt) => {
                if counts.unsupported_link == 0 {
                    self.warnings.push(format!(
                        "{name}: link type {lt} is not supported; those packets were skipped"
                    ));
                }
                counts.unsupported_link += 1;
            }
        }
        if self.self_expire && ts >= self.last_expire.saturating_add(EXPIRE_EVERY_NS) {
            self.expire(ts);
        }
    }

    /// The capture clock: first and last times, and the consumers' packet clock.
    fn note_time(&mut self, ts: u64) {
        let counts = &mut self.counts;
        counts.first_ts.get_or_insert(ts);
        counts.last_ts = Some(counts.last_ts.map_or(ts, |l| l.max(ts)));
        self.conns.consumer.packet(ts);
    }

    /// Closes connections idle since before `now_ns - idle timeout`. Called from [`frame`] every
    /// second of packet time, and by a live capture when no packet arrives for a while.
    ///
    /// [`frame`]: Engine::frame
    pub fn expire(&mut self, now_ns: u64) {
        if self.last_expire != 0 {
            self.table.expire(now_ns, &mut self.conns);
        }
        self.last_expire = now_ns;
    }

    pub fn consumer_mut(&mut self) -> &mut C {
        &mut self.conns.consumer
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.conns.conns.len()
    }

    /// Socket streams open now (the eBPF source).
    #[cfg_attr(not(feature = "ebpf"), allow(dead_code))]
    pub fn open_streams(&self) -> usize {
        self.streams.open_connections()
    }

    /// The capture health so far. `truncated_frames` are frames the source cut short.
    pub fn health(&self, files: Vec<String>, truncated_frames: u64) -> CaptureHealth {
        self.ledger(files, truncated_frames, false)
    }

    /// The capture health; when `finished`, IP datagrams still waiting for fragments are lost.
    fn ledger(&self, files: Vec<String>, truncated_frames: u64, finished: bool) -> CaptureHealth {
        let fs = self.table.stats();
        let warnings = health_warnings(
            self.warnings.clone(),
            self.conns.unknown_protocol,
            &self.conns.unknown_midstream_ports,
            &fs.untracked_ports,
        );
        self.ledger_with(files, truncated_frames, finished, warnings)
    }

    /// What the parallel digest (`parallel.rs`) merges besides the health's counters: the
    /// engine's own warnings, the connections of no known protocol (all, and those picked up
    /// mid-stream by port), the flow table's statistics, and the entries it holds now.
    pub(crate) fn parts(&self) -> EngineParts<'_> {
        EngineParts {
            warnings: &self.warnings,
            unknown_protocol: self.conns.unknown_protocol,
            midstream_ports: &self.conns.unknown_midstream_ports,
            flow: self.table.stats(),
            table_len: self.table.len(),
        }
    }

    /// Expiry is driven from outside ([`Engine::expire`]), not by this engine's packet clock.
    pub(crate) fn external_expire(&mut self) {
        self.self_expire = false;
    }

    fn ledger_with(
        &self,
        files: Vec<String>,
        truncated_frames: u64,
        finished: bool,
        warnings: Vec<String>,
    ) -> CaptureHealth {
        let counts = &self.counts;
        let defrag = self.defrag.stats();
        let fs = self.table.stats();
        let l = &self.conns.health;
        let h = &l.health;
        CaptureHealth {
            files,
            frames: FrameHealth {
                packets: counts.packets,
                bytes: counts.bytes,
                non_tcp: counts.non_tcp,
                truncated_packets: truncated_frames + counts.truncated_headers,
                ip_fragments: counts.fragments,
                ip_datagrams_reassembled: defrag.reassembled,
                ip_datagrams_incomplete: defrag.dropped()
                    + if finished { defrag.in_progress } else { 0 },
                malformed_packets: counts.malformed + counts.unsupported_link,
                read_errors: 0,
            },
            tcp: TcpHealth {
                tcp_segments: fs.segments,
                connections: fs.connections,
                duplicates: fs.duplicates,
                retransmitted_bytes: fs.retransmitted_bytes,
                out_of_order: fs.out_of_order,
                out_of_order_too_late: fs.out_of_order_too_late,
                gaps: fs.gaps,
                gap_bytes: fs.gap_bytes,
                connections_evicted: fs.evicted,
                not_tracked_segments: fs
                    .not_tracked
                    .saturating_sub(fs.not_tracked_empty + fs.not_tracked_stopped),
                empty_segments_not_tracked: fs.not_tracked_empty,
                segments_after_stop: fs.not_tracked_stopped,
            },
            protocol: ProtocolHealth {
                responses_without_request: h.responses_without_request,
                unparsed_bytes: h.unparsed_bytes,
                encrypted_connections: h.encrypted_connections,
                unrecognized_connections: self.conns.unknown_protocol,
                unrecognized_midstream: self.conns.unknown_midstream,
                malformed_messages: h.malformed,
                inflight_overflow: h.inflight_overflow,
                unanswered: 0,
                resyncs: h.resyncs,
                negative_latencies: l.negative_latencies,
                server_pushes: h.server_pushes,
                server_push_bytes: h.server_push_bytes,
                text_cut_by_budget: self.conns.session_cfg.text_budget.cut(),
            },
            live: None,
            stream: self.stream_health(),
            first_ts_ns: counts.first_ts,
            last_ts_ns: counts.last_ts,
            warnings,
        }
    }

    /// The stream section: the eBPF source's streams, and TLS connections left to it.
    fn stream_health(&self) -> Option<report::StreamHealth> {
        let mut s = self.streams.health();
        if self.conns.tls_left_to_ebpf > 0 {
            s.get_or_insert_with(Default::default).tls_left_to_ebpf = self.conns.tls_left_to_ebpf;
        }
        s
    }

    /// Closes every connection (their unanswered requests become events) and returns the
    /// consumer with the final health.
    pub fn finish(mut self, files: Vec<String>, truncated_frames: u64) -> (C, CaptureHealth) {
        self.table.finish(&mut self.conns);
        let end = self.counts.last_ts.unwrap_or(0);
        self.finish_streams(end);
        let health = self.ledger(files, truncated_frames, true);
        (self.conns.consumer, health)
    }
}

/// The health's warnings: the engine's own (`base`), then the connections of no known
/// protocol, those picked up mid-stream by port, and untracked payload by port.
pub(crate) fn health_warnings(
    mut warnings: Vec<String>,
    unknown_protocol: u64,
    midstream_ports: &std::collections::BTreeMap<u16, u64>,
    untracked_ports: &std::collections::BTreeMap<u16, u64>,
) -> Vec<String> {
    if unknown_protocol > 0 {
        warnings.push(format!(
            "{unknown_protocol} connection(s) on the given ports or servers spoke no protocol \
             dbtap recognizes; they were skipped"
        ));
    }
    for (port, n) in midstream_ports {
        let conns = if *n == 1 { "connection" } else { "connections" };
        warnings.push(format!(
            "{n} {conns} on port {port} spoke no protocol dbtap recognises (picked up \
             mid-stream, no request recognised in {SNIFF_TRIES} deliveries; not read): if \
             it is a database port, capture from the connections' start (their opening names \
             the protocol); otherwise they are not database traffic"
        ));
    }
    for (port, n) in untracked_ports {
        let segs = if *n == 1 { "segment" } else { "segments" };
        warnings.push(format!(
            "{n} {segs} with payload on port {port} belonged to no connection dbtap could \
             tie to a server (their start was not captured and the port is not a known \
             server port): add --port {port} if it is a database port"
        ));
    }
    warnings
}

/// See [`Engine::parts`].
pub(crate) struct EngineParts<'a> {
    pub(crate) warnings: &'a [String],
    pub(crate) unknown_protocol: u64,
    pub(crate) midstream_ports: &'a std::collections::BTreeMap<u16, u64>,
    pub(crate) flow: &'a flow::FlowStats,
    pub(crate) table_len: usize,
}

/// Runs every capture through the pipeline and hands each query event to `consumer`.
/// Returns the consumer and the capture health. Errors only for input that cannot be read at
/// all (missing, empty, not a capture); a capture cut short yields a warning in the health.
pub fn run<C: Consumer>(
    files: &[PathBuf],
    settings: &Settings,
    consumer: C,
) -> Result<(C, CaptureHealth)> {
    // Standard input can be read once; then check every input first so a typo in the last one
    // fails before minutes of work. A file is checked and closed again (`capture::Input`), and
    // opened only when its turn comes, so memory and open files do not grow with the count.
    capture::check_inputs(files)?;
    let mut inputs = Vec::with_capacity(files.len());
    for f in files {
        inputs.push(Input::check(f)?);
    }
    let flow = FlowConfig {
        max_flows: settings.max_connections,
        ..FlowConfig::default()
    };
    let mut engine = Engine::new(settings, flow, consumer);
    let mut read_warnings = Vec::new();
    let mut names = Vec::new();
    let mut truncated_frames = 0u64;

    let total_len: u64 = inputs.iter().filter_map(Input::input_len).sum();
    let bar = progress_bar(settings.progress, total_len);
    let mut done_len = 0u64;

    for input in inputs {
        let mut reader = input.open()?;
        let name = reader.name().to_string();
        read_capture(&mut engine, &mut reader, &name, &mut read_warnings, |pos| {
            if let Some(b) = &bar {
                b.set_position(done_len + pos);
            }
        });
        truncated_frames += reader.stats().truncated_frames;
        names.push(name);
        done_len += reader.input_len().unwrap_or(0);
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let (consumer, health) = engine.finish(names, truncated_frames);
    Ok((consumer, close_health(health, read_warnings, settings)))
}

/// The run's last word on the health: read errors (first) and the warnings of the bounds
/// that cut something.
pub(crate) fn close_health(
    mut health: CaptureHealth,
    mut read_warnings: Vec<String>,
    settings: &Settings,
) -> CaptureHealth {
    // A read error leaves the rest of its capture unread: the report is incomplete.
    health.frames.read_errors = read_warnings.len() as u64;
    // Read errors first, as before: they explain why the report may be short.
    read_warnings.append(&mut health.warnings);
    health.warnings = read_warnings;
    if health.tcp.connections_evicted > 0 {
        health.warnings.push(format!(
            "{} connection(s) were closed early to track at most {} at once: their requests in \
             flight count as unanswered and what they sent later was picked up mid-stream; \
             --max-connections raises the cap (each connection costs about 3 KB)",
            health.tcp.connections_evicted, settings.max_connections
        ));
    }
    if health.protocol.text_cut_by_budget > 0 {
        health.warnings.push(format!(
            "{} request(s)' text cut to a prefix by --max-text-total ({} bytes of statement text \
             kept at once across all connections): they are counted and timed, and grouped by \
             what was kept",
            health.protocol.text_cut_by_budget,
            settings.session.text_budget.limit()
        ));
    }
    health
}

/// Feeds every frame of one capture to the engine; a read error ends it with a warning.
/// `progress` gets the bytes read from the file every 65,536 frames.
pub(crate) fn read_capture<C: Consumer>(
    engine: &mut Engine<C>,
    reader: &mut Reader,
    name: &str,
    read_warnings: &mut Vec<String>,
    progress: impl Fn(u64),
) {
    let mut since_tick = 0u32;
    loop {
        let frame = match reader.next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) => {
                read_warnings.push(format!("{e}; the report covers what was read before it"));
                break;
            }
        };
        let (linktype, ts) = (frame.linktype, frame.ts_ns);
        engine.frame(linktype, frame.data, ts, name);
        since_tick += 1;
        if since_tick >= 1 << 16 {
            since_tick = 0;
            progress(reader.input_position());
        }
    }
}

fn feed_tcp<C: Consumer>(
    table: &mut FlowTable,
    conns: &mut Conns<C>,
    t: &wire::TcpSegment<'_>,
    ts_ns: u64,
    frame_len: usize,
) {
    let (src, dst) = (
        SocketAddr::new(t.src, t.sport),
        SocketAddr::new(t.dst, t.dport),
    );
    conns.consumer.segment(src, dst, frame_len);
    let seg = Segment {
        ts_ns,
        src,
        dst,
        seq: t.seq,
        ack: t.ack,
        flags: t.flags,
        payload: t.payload,
        missing: t.missing,
    };
    table.process(&seg, conns);
}

pub(crate) fn progress_bar(wanted: bool, total: u64) -> Option<indicatif::ProgressBar> {
    // Small files finish before a bar is worth drawing.
    if !wanted || total < (64 << 20) || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}
