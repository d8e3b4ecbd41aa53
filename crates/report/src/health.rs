//! The capture-health ledger: what a user must see to know whether the numbers are complete.
//!
//! Counters live in four sections ([`FrameHealth`], [`TcpHealth`], [`ProtocolHealth`],
//! [`LiveHealth`]) and are described by one table, [`COUNTERS`]: name, section, meaning, whether a
//! non-zero value makes the report incomplete, and how it is shown. The merge
//! ([`CaptureHealth::add`]), the verdict ([`CaptureHealth::is_complete`]), the text report, the
//! JSON document (a flat object whose keys are the counter names, see docs/json-format.md) and the
//! Prometheus exposition all read that table, so a new counter is one field and one row.

use std::fmt;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Everything a user must see to know whether numbers are complete. The binary fills it from the
/// capture, flow and protocol layers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CaptureHealth {
    /// Capture files read (or the interface name).
    pub files: Vec<String>,
    pub frames: FrameHealth,
    pub tcp: TcpHealth,
    pub protocol: ProtocolHealth,
    /// Live capture only (`None` for capture files, where kernel drops are unknowable).
    pub live: Option<LiveHealth>,
    /// Connections read as byte streams (the eBPF source, or a file it wrote); `None` when
    /// every connection came from packets, so packet reports are unchanged.
    pub stream: Option<StreamHealth>,
    /// Timestamp of the first packet, ns since the epoch.
    pub first_ts_ns: Option<u64>,
    /// Timestamp of the last packet, ns since the epoch.
    pub last_ts_ns: Option<u64>,
    /// Free-form warnings from any layer.
    pub warnings: Vec<String>,
}

/// Link-layer frames and what became of them before TCP reassembly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrameHealth {
    pub packets: u64,
    pub bytes: u64,
    pub non_tcp: u64,
    pub truncated_packets: u64,
    pub ip_fragments: u64,
    pub ip_datagrams_reassembled: u64,
    pub ip_datagrams_incomplete: u64,
    pub malformed_packets: u64,
    pub read_errors: u64,
}

/// TCP reassembly.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpHealth {
    pub tcp_segments: u64,
    pub connections: u64,
    pub connections_evicted: u64,
    pub duplicates: u64,
    pub retransmitted_bytes: u64,
    pub out_of_order: u64,
    pub out_of_order_too_late: u64,
    pub gaps: u64,
    pub gap_bytes: u64,
    pub not_tracked_segments: u64,
    pub empty_segments_not_tracked: u64,
    pub segments_after_stop: u64,
}

/// The protocol sessions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtocolHealth {
    pub responses_without_request: u64,
    pub unparsed_bytes: u64,
    pub encrypted_connections: u64,
    pub unrecognized_connections: u64,
    pub unrecognized_midstream: u64,
    pub malformed_messages: u64,
    pub inflight_overflow: u64,
    pub unanswered: u64,
    pub resyncs: u64,
    pub negative_latencies: u64,
    pub server_pushes: u64,
    pub server_push_bytes: u64,
    /// Requests whose text was cut to a prefix by the global text budget (`--max-text-total`):
    /// still counted, paired and timed.
    pub text_cut_by_budget: u64,
}

/// A live capture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveHealth {
    pub kernel_drops: u64,
    /// With `--sample N`: only one connection in N was captured and every count in the report
    /// was multiplied by N, so counts are estimates. 0 or 1: everything was captured. Not a
    /// counter: merged by maximum.
    pub sampled_one_in: u32,
    /// The packet reader's longest pause, ms: the longest a block of the capture ring waited
    /// to be read. Drops after long pauses mean a starved or stopped agent; drops with short
    /// pauses, bursts beyond the ring. Not a counter: merged by maximum.
    pub reader_pause_max_ms: u64,
    /// How many times the reader came back to the ring after a pause of 100 ms or more.
    pub reader_long_pauses: u64,
    /// The capture rings' size, MiB (every capture thread's ring); 0 without a packet ring
    /// (the eBPF source, capture files), when none of the reader fields is shown.
    pub ring_mb: u64,
    /// Times a capture ring grew with the traffic (`--ring-max-mb`); shown when above 0.
    pub ring_growths: u64,
}

/// Connections that arrived as byte streams with exact gaps (the eBPF source: Unix sockets, TLS
/// plaintext, TCP read at the socket), not as packets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamHealth {
    pub stream_connections: u64,
    pub stream_bytes: u64,
    /// Connections whose stream carried decrypted TLS plaintext.
    pub stream_tls_connections: u64,
    pub stream_gaps: u64,
    pub stream_gap_bytes: u64,
    /// Bytes of messages longer than the per-record copy limit that were not copied (their
    /// framing survives: lengths are exact).
    pub stream_uncopied_bytes: u64,
    pub stream_duplicate_bytes: u64,
    pub stream_connections_evicted: u64,
    pub stream_bad_records: u64,
    /// Records the kernel could not put in the ring (full): their bytes are in the gaps.
    pub ebpf_lost_records: u64,
    /// Connections that went TLS in the packets and are read from the eBPF source instead
    /// (`--source auto`): not a loss.
    pub tls_left_to_ebpf: u64,
    /// Runs and run time of the BPF programs, when the kernel counts them
    /// (`sysctl kernel.bpf_stats_enabled=1`; every traced syscall of the machine, not only the
    /// servers').
    pub ebpf_runs: u64,
    pub ebpf_run_ns: u64,
}

/// Where a counter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Section {
    Frames,
    Tcp,
    Protocol,
    Live,
    Stream,
}

/// What a non-zero value means for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A volume (packets, bytes, connections): neither good nor bad.
    Count,
    /// Worth knowing, not a loss: never makes the report incomplete.
    Info,
    /// Something was lost or not read: the report is incomplete and says so.
    Loss,
}

/// How a value is printed in the text report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// `1,234`.
    Count,
    /// `1.57k`.
    Bytes,
}

/// One row of the ledger.
pub struct Counter {
    /// The JSON key and the name in the text report's `!!` lines.
    pub name: &'static str,
    pub section: Section,
    pub kind: Kind,
    pub unit: Unit,
    /// What a non-zero value means, for the `!!` line of a loss.
    pub meaning: &'static str,
    /// The text report's line for a count or informational counter: `{name}` is replaced by the
    /// value of counter `name`. A count's line is always shown, an informational one when a
    /// counter it names is non-zero. `None`: shown in another counter's line (or not at all).
    pub note: Option<&'static str>,
    /// Prometheus metric name (a counter) and its help text.
    pub metric: Option<(&'static str, &'static str)>,
    get: fn(&CaptureHealth) -> Option<u64>,
    add: fn(&mut CaptureHealth, u64),
}

impl Counter {
    /// The value; `None` when its section is absent (kernel drops of a capture file).
    pub fn get(&self, h: &CaptureHealth) -> Option<u64> {
        (self.get)(h)
    }

    /// Adds `v` to the counter (creating its section if absent).
    pub fn add(&self, h: &mut CaptureHealth, v: u64) {
        (self.add)(h, v)
    }
}

impl fmt::Debug for Counter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("name", &self.name)
            .field("section", &self.section)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

macro_rules! row {
    (stream.$field:ident, $kind:ident, $unit:ident, $meaning:expr, $note:expr, $metric:expr) => {
        Counter {
            name: stringify!($field),
            section: Section::Stream,
            kind: Kind::$kind,
            unit: Unit::$unit,
            meaning: $meaning,
            note: $note,
            metric: $metric,
            get: |h| h.stream.as_ref().map(|l| l.$field),
            add: |h, v| {
                let l = h.stream.get_or_insert_with(StreamHealth::default);
                l.$field = l.$field.saturating_add(v);
            },
        }
    };
    (live.$field:ident, $kind:ident, $unit:ident, $meaning:expr, $note:expr, $metric:expr) => {
        Counter {
            name: stringify!($field),
            section: Section::Live,
            kind: Kind::$kind,
            unit: Unit::$unit,
            meaning: $meaning,
            note: $note,
            metric: $metric,
            get: |h| h.live.as_ref().map(|l| l.$field),
            add: |h, v| {
                let l = h.live.get_or_insert_with(LiveHealth::default);
                l.$field = l.$field.saturating_add(v);
            },
        }
    };
    ($sec:ident . $field:ident, $section:ident, $kind:ident, $unit:ident, $meaning:expr,
     $note:expr, $metric:expr) => {
        Counter {
            name: stringify!($field),
            section: Section::$section,
            kind: Kind::$kind,
            unit: Unit::$unit,
            meaning: $meaning,
            note: $note,
            metric: $metric,
            get: |h| Some(h.$sec.$field),
            add: |h, v| h.$sec.$field = h.$sec.$field.saturating_add(v),
        }
    };
}

/// The ledger, in the order of the JSON document and of the text report's lines.
#[rustfmt::skip]
pub static COUNTERS: &[Counter] = &[
    // Frames.
    row!(frames.packets, Frames, Count, Count,
        "link-layer frames read",
        Some("{packets} packets ({bytes} bytes), {tcp_segments} TCP segments, {connections} connections, {non_tcp} non-TCP"),
        Some(("dbtap_capture_packets_total", "Link-layer frames read from the capture."))),
    row!(frames.bytes, Frames, Count, Bytes,
        "bytes of those frames as captured",
        None,
        Some(("dbtap_capture_bytes_total", "Bytes of the frames read, as captured."))),
    row!(frames.non_tcp, Frames, Count, Count,
        "frames that were not TCP over IP (ignored)",
        None,
        Some(("dbtap_capture_non_tcp_total", "Frames that were not TCP over IP (ignored)."))),
    row!(frames.truncated_packets, Frames, Loss, Count,
        "packets cut by the snap length",
        None,
        Some(("dbtap_capture_truncated_packets_total", "Frames cut short by the capture snap length."))),
    row!(frames.ip_fragments, Frames, Info, Count,
        "IP fragments read",
        Some("IP fragments: {ip_fragments} read, {ip_datagrams_reassembled} datagrams reassembled from them"),
        Some(("dbtap_capture_ip_fragments_total", "IP fragments read (reassembled when complete)."))),
    row!(frames.ip_datagrams_reassembled, Frames, Info, Count,
        "IP datagrams reassembled from fragments",
        None,
        Some(("dbtap_capture_ip_datagrams_reassembled_total", "IP datagrams reassembled from fragments."))),
    row!(frames.ip_datagrams_incomplete, Frames, Loss, Count,
        "IP datagrams whose fragments never all arrived (payload lost)",
        None,
        Some(("dbtap_capture_ip_datagrams_incomplete_total", "IP datagrams whose fragments never all arrived: their payload is lost."))),
    row!(frames.malformed_packets, Frames, Loss, Count,
        "packets whose headers did not parse",
        None,
        Some(("dbtap_capture_malformed_packets_total", "Frames whose link, IP or TCP headers did not parse."))),
    row!(frames.read_errors, Frames, Loss, Count,
        "captures not read to the end (see the warning)",
        None,
        Some(("dbtap_capture_read_errors_total", "Captures not read to the end because of a read error."))),
    // TCP.
    row!(tcp.tcp_segments, Tcp, Count, Count,
        "TCP segments seen",
        None,
        Some(("dbtap_tcp_segments_total", "TCP segments seen."))),
    row!(tcp.connections, Tcp, Count, Count,
        "TCP connections tracked",
        None,
        Some(("dbtap_tcp_connections_total", "TCP connections tracked."))),
    row!(tcp.connections_evicted, Tcp, Loss, Count,
        "connections closed early, least recently active first, to stay within the connection cap",
        None,
        Some(("dbtap_tcp_connections_evicted_total", "TCP connections closed early (the least recently active) to stay within the cap on tracked connections."))),
    row!(tcp.duplicates, Tcp, Info, Count,
        "segments that repeated bytes already delivered",
        Some("repaired: {duplicates} duplicate segments ({retransmitted_bytes} bytes retransmitted), {out_of_order} out of order"),
        Some(("dbtap_tcp_duplicates_total", "TCP segments that repeated bytes already seen (retransmissions)."))),
    row!(tcp.retransmitted_bytes, Tcp, Info, Bytes,
        "payload bytes seen again",
        None,
        Some(("dbtap_tcp_retransmitted_bytes_total", "Payload bytes seen again (retransmissions and overlaps)."))),
    row!(tcp.out_of_order, Tcp, Info, Count,
        "segments held ahead of a hole, then delivered in order",
        None,
        Some(("dbtap_tcp_out_of_order_total", "TCP segments that arrived ahead of a hole and were held."))),
    row!(tcp.out_of_order_too_late, Tcp, Info, Count,
        "segments that arrived after their hole was declared a gap",
        Some("reordered too late: {out_of_order_too_late} segments arrived after their hole was declared lost (their bytes are in gap_bytes)"),
        Some(("dbtap_tcp_out_of_order_too_late_total", "TCP segments that arrived after their hole had been declared a gap (reordered beyond the buffer)."))),
    row!(tcp.gaps, Tcp, Loss, Count,
        "holes in TCP streams: requests or responses in them are missing",
        None,
        Some(("dbtap_tcp_gaps_total", "Holes in TCP streams that were never filled: queries in them are missing."))),
    row!(tcp.gap_bytes, Tcp, Loss, Count,
        "bytes lost in TCP stream holes",
        None,
        Some(("dbtap_tcp_gap_bytes_total", "Bytes missing in TCP stream holes."))),
    row!(tcp.not_tracked_segments, Tcp, Loss, Count,
        "segments with payload of untracked connections",
        None,
        Some(("dbtap_tcp_not_tracked_segments_total", "TCP segments with payload of connections that could not be tracked."))),
    row!(tcp.empty_segments_not_tracked, Tcp, Info, Count,
        "segments without payload (ACK, FIN, RST) outside any tracked connection",
        Some("not reassembled (nothing lost): {empty_segments_not_tracked} empty segments (ACK, FIN, RST) outside tracked connections"),
        Some(("dbtap_tcp_empty_segments_not_tracked_total", "TCP segments without payload outside any tracked connection: nothing lost."))),
    row!(tcp.segments_after_stop, Tcp, Info, Count,
        "segments of connections no longer read (their cause is counted)",
        Some("not read further: {segments_after_stop} segments of connections dbtap stopped reading (TLS, cancel requests, other protocols; the cause is counted)"),
        Some(("dbtap_tcp_segments_after_stop_total", "TCP segments of connections dbtap stopped reading; the cause is counted elsewhere."))),
    // Protocol.
    row!(protocol.responses_without_request, Protocol, Loss, Count,
        "responses whose request was not seen",
        None,
        Some(("dbtap_responses_without_request_total", "Response messages that matched no request."))),
    row!(protocol.unparsed_bytes, Protocol, Loss, Count,
        "stream bytes the parsers skipped",
        None,
        Some(("dbtap_unparsed_bytes_total", "Stream bytes the protocol parsers could not interpret and skipped."))),
    row!(protocol.encrypted_connections, Protocol, Loss, Count,
        "TLS connections not readable",
        None,
        Some(("dbtap_encrypted_connections_total", "Connections that switched to TLS and could not be read."))),
    row!(protocol.unrecognized_connections, Protocol, Info, Count,
        "connections whose opening bytes were no protocol dbtap recognizes: not database traffic (not read)",
        Some("not database traffic: {unrecognized_connections} connections spoke no protocol dbtap recognizes (not read)"),
        Some(("dbtap_unrecognized_connections_total", "Connections whose protocol was not recognized: not database traffic, not read."))),
    row!(protocol.unrecognized_midstream, Protocol, Loss, Count,
        "connections picked up mid-stream on a given port or server that showed no request dbtap recognizes (not read)",
        None,
        Some(("dbtap_unrecognized_midstream_total", "Connections picked up mid-stream on a given port or server that never showed a recognizable request: not read."))),
    row!(protocol.malformed_messages, Protocol, Loss, Count,
        "protocol messages that did not parse",
        None,
        Some(("dbtap_malformed_messages_total", "Protocol messages that failed to parse."))),
    row!(protocol.inflight_overflow, Protocol, Loss, Count,
        "requests dropped: too many in flight",
        None,
        Some(("dbtap_inflight_overflow_total", "Requests dropped because too many were in flight on one connection."))),
    row!(protocol.unanswered, Protocol, Loss, Count,
        "requests without a response (no latency)",
        None,
        Some(("dbtap_unanswered_total", "Requests never answered before the connection or the capture ended."))),
    row!(protocol.resyncs, Protocol, Loss, Count,
        "times a parser lost message sync",
        None,
        Some(("dbtap_resyncs_total", "Times a protocol parser lost message sync and searched for the next boundary."))),
    row!(protocol.negative_latencies, Protocol, Info, Count,
        "responses time-stamped before their request (latency counted as 0)",
        Some("responses time-stamped before their request: {negative_latencies} (their latency counts as 0)"),
        Some(("dbtap_negative_latencies_total", "Responses time-stamped before their request (packet time went back); latency counted as 0."))),
    row!(protocol.server_pushes, Protocol, Info, Count,
        "messages the server pushed outside any reply",
        Some("server pushes (Redis pub/sub messages, RESP3 pushes; not queries): {server_pushes} ({server_push_bytes} bytes)"),
        Some(("dbtap_server_pushes_total", "Messages the server pushed outside any reply (Redis pub/sub messages, RESP3 pushes): not queries, not a loss."))),
    row!(protocol.server_push_bytes, Protocol, Info, Bytes,
        "bytes of those pushes",
        None,
        None),
    row!(protocol.text_cut_by_budget, Protocol, Info, Count,
        "requests whose text was cut to a prefix by the global text budget (still counted)",
        Some("{text_cut_by_budget} requests' text cut to a prefix by the global text budget (--max-text-total; still counted and timed)"),
        Some(("dbtap_text_cut_by_budget_total", "Requests whose text was cut to a prefix by the global text budget (--max-text-total): still counted and timed."))),
    // Streams (the eBPF source).
    row!(stream.stream_connections, Count, Count,
        "connections read as socket streams",
        Some("{stream_connections} socket streams (eBPF: Unix sockets, TLS plaintext, sockets read in place; {stream_tls_connections} TLS), {stream_bytes} bytes"),
        Some(("dbtap_stream_connections_total", "Connections read as socket streams by the eBPF source (Unix sockets, TLS plaintext)."))),
    row!(stream.stream_bytes, Count, Bytes,
        "bytes of those streams",
        None,
        Some(("dbtap_stream_bytes_total", "Bytes read from socket streams."))),
    row!(stream.stream_tls_connections, Count, Count,
        "socket streams that carried decrypted TLS",
        None,
        Some(("dbtap_stream_tls_connections_total", "Socket streams whose TLS plaintext was read (SSL_read/SSL_write)."))),
    row!(stream.stream_gaps, Loss, Count,
        "holes in socket streams (records lost by the kernel ring): requests or responses in them are missing",
        None,
        Some(("dbtap_stream_gaps_total", "Holes in socket streams: queries in them are missing."))),
    row!(stream.stream_gap_bytes, Loss, Bytes,
        "bytes lost in socket stream holes",
        None,
        Some(("dbtap_stream_gap_bytes_total", "Bytes missing in socket stream holes."))),
    row!(stream.stream_uncopied_bytes, Info, Bytes,
        "bytes of long messages beyond the per-record copy limit (framing kept, text cut)",
        Some("not copied: {stream_uncopied_bytes} bytes of long messages beyond the eBPF copy limit (lengths exact, text cut)"),
        Some(("dbtap_stream_uncopied_bytes_total", "Bytes of long messages beyond the eBPF per-record copy limit: their lengths are exact, their content is not read."))),
    row!(stream.stream_duplicate_bytes, Info, Bytes,
        "stream bytes delivered twice and dropped",
        Some("stream bytes seen twice and dropped: {stream_duplicate_bytes}"),
        Some(("dbtap_stream_duplicate_bytes_total", "Socket stream bytes delivered twice and dropped."))),
    row!(stream.stream_connections_evicted, Loss, Count,
        "socket streams closed early to stay within the connection cap",
        None,
        Some(("dbtap_stream_connections_evicted_total", "Socket streams closed early (the least recently active) to stay within the cap."))),
    row!(stream.stream_bad_records, Loss, Count,
        "stream records that did not parse or named no open stream",
        None,
        Some(("dbtap_stream_bad_records_total", "Stream records that did not parse or named no open stream."))),
    row!(stream.ebpf_lost_records, Info, Count,
        "records the kernel could not put in the full eBPF ring (their bytes are in stream_gap_bytes)",
        Some("eBPF ring full: {ebpf_lost_records} records lost (counted in the stream gaps; --ebpf-ring-mb raises the ring)"),
        Some(("dbtap_ebpf_lost_records_total", "Records the kernel could not put in the full eBPF ring buffer (their bytes are stream gaps)."))),
    row!(stream.tls_left_to_ebpf, Info, Count,
        "connections that went TLS in the packets, read from their TLS plaintext by eBPF instead",
        Some("TLS in the packets, read by eBPF instead: {tls_left_to_ebpf} connections"),
        Some(("dbtap_tls_left_to_ebpf_total", "Connections that went TLS in the packets and were read from their TLS plaintext by the eBPF source instead (--source auto)."))),
    row!(stream.ebpf_runs, Info, Count,
        "runs of the BPF programs (with kernel.bpf_stats_enabled=1)",
        Some("BPF programs: {ebpf_runs} runs, {ebpf_run_ns} ns (kernel.bpf_stats_enabled=1; every syscall of the machine passes the filter)"),
        Some(("dbtap_ebpf_runs_total", "Runs of the eBPF source's BPF programs (counted only with kernel.bpf_stats_enabled=1)."))),
    row!(stream.ebpf_run_ns, Info, Count,
        "run time of the BPF programs, ns (with kernel.bpf_stats_enabled=1)",
        None,
        Some(("dbtap_ebpf_run_nanoseconds_total", "Run time of the eBPF source's BPF programs in nanoseconds (counted only with kernel.bpf_stats_enabled=1)."))),
    // Live.
    row!(live.kernel_drops, Loss, Count,
        "packets the kernel dropped before dbtap read them",
        None,
        None),
];

/// The row named `name`.
pub fn counter(name: &str) -> Option<&'static Counter> {
    COUNTERS.iter().find(|c| c.name == name)
}

/// What the user can do about a loss, by counter name: the text report prints it under the
/// counter's `!!` line when the counter is non-zero.
pub static ADVICE: &[(&str, &str)] = &[(
    "truncated_packets",
    "re-capture with -s 0 (tcpdump's snap length cut packets)",
)];

/// The advice for a loss counter, if there is one.
pub fn advice(name: &str) -> Option<&'static str> {
    ADVICE.iter().find(|a| a.0 == name).map(|a| a.1)
}

impl CaptureHealth {
    /// Adds the counters of another part of the same capture (another capture thread): counts
    /// are summed, the time span widened, new file names and warnings appended.
    pub fn add(&mut self, o: &CaptureHealth) {
        for f in &o.files {
            if !self.files.contains(f) {
                self.files.push(f.clone());
            }
        }
        for c in COUNTERS {
            if let Some(v) = c.get(o) {
                c.add(self, v);
            }
        }
        if let Some(l) = &o.live {
            let mine = self.live.get_or_insert_with(LiveHealth::default);
            mine.sampled_one_in = mine.sampled_one_in.max(l.sampled_one_in);
            mine.reader_pause_max_ms = mine.reader_pause_max_ms.max(l.reader_pause_max_ms);
            mine.reader_long_pauses = mine.reader_long_pauses.saturating_add(l.reader_long_pauses);
            mine.ring_mb = mine.ring_mb.saturating_add(l.ring_mb);
            mine.ring_growths = mine.ring_growths.saturating_add(l.ring_growths);
        }
        self.first_ts_ns = match (self.first_ts_ns, o.first_ts_ns) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ts_ns = self.last_ts_ns.max(o.last_ts_ns);
        for w in &o.warnings {
            if !self.warnings.contains(w) {
                self.warnings.push(w.clone());
            }
        }
    }

    /// True when nothing was lost or left unread: every [`Kind::Loss`] counter is 0.
    /// Retransmissions and reordering that reassembly repaired, empty segments, non-TCP frames
    /// and free-form warnings do not make a capture incomplete.
    pub fn is_complete(&self) -> bool {
        self.problems().is_empty()
    }

    /// Each loss counter that is non-zero: (name, value, what it means for the report), in
    /// ledger order.
    pub fn problems(&self) -> Vec<(&'static str, u64, &'static str)> {
        COUNTERS
            .iter()
            .filter(|c| c.kind == Kind::Loss)
            .filter_map(|c| {
                c.get(self)
                    .filter(|&v| v > 0)
                    .map(|v| (c.name, v, c.meaning))
            })
            .collect()
    }

    /// Nanoseconds from the first to the last packet, when both are known.
    pub fn span_ns(&self) -> Option<u64> {
        match (self.first_ts_ns, self.last_ts_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        }
    }

    /// The sampling rate of a live capture (`--sample N`); 0 or 1 when everything was captured.
    pub fn sampled_one_in(&self) -> u32 {
        self.live.as_ref().map_or(0, |l| l.sampled_one_in)
    }
}

impl Serialize for CaptureHealth {
    /// A flat object: `files`, the frame, TCP and protocol counters, `first_ts_ns`,
    /// `last_ts_ns`, the live counters (live captures only), `sampled_one_in` (when sampled),
    /// `warnings`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("files", &self.files)?;
        for c in COUNTERS.iter().filter(|c| c.section != Section::Live) {
            if let Some(v) = c.get(self) {
                m.serialize_entry(c.name, &v)?;
            }
        }
        m.serialize_entry("first_ts_ns", &self.first_ts_ns)?;
        m.serialize_entry("last_ts_ns", &self.last_ts_ns)?;
        for c in COUNTERS.iter().filter(|c| c.section == Section::Live) {
            if let Some(v) = c.get(self) {
                m.serialize_entry(c.name, &v)?;
            }
        }
        if let Some(l) = self.live.as_ref().filter(|l| l.ring_mb > 0) {
            // A packet ring's reader only (not the eBPF source).
            m.serialize_entry("reader_pause_max_ms", &l.reader_pause_max_ms)?;
            m.serialize_entry("reader_long_pauses", &l.reader_long_pauses)?;
            m.serialize_entry("ring_mb", &l.ring_mb)?;
            if l.ring_growths > 0 {
                m.serialize_entry("ring_growths", &l.ring_growths)?;
            }
        }
        let sampled = self.sampled_one_in();
        if sampled > 1 {
            m.serialize_entry("sampled_one_in", &sampled)?;
        }
        m.serialize_entry("warnings", &self.warnings)?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for CaptureHealth {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(HealthVisitor)
    }
}

struct HealthVisitor;

impl<'de> Visitor<'de> for HealthVisitor {
    type Value = CaptureHealth;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a capture-health object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CaptureHealth, A::Error> {
        let mut h = CaptureHealth::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "files" => h.files = map.next_value()?,
                "warnings" => h.warnings = map.next_value()?,
                "first_ts_ns" => h.first_ts_ns = map.next_value()?,
                "last_ts_ns" => h.last_ts_ns = map.next_value()?,
                "sampled_one_in" => {
                    let v: u32 = map.next_value()?;
                    h.live
                        .get_or_insert_with(LiveHealth::default)
                        .sampled_one_in = v;
                }
                "reader_pause_max_ms" | "reader_long_pauses" | "ring_mb" | "ring_growths" => {
                    let v: u64 = map.next_value()?;
                    let l = h.live.get_or_insert_with(LiveHealth::default);
                    *match key.as_str() {
                        "reader_pause_max_ms" => &mut l.reader_pause_max_ms,
                        "reader_long_pauses" => &mut l.reader_long_pauses,
                        "ring_growths" => &mut l.ring_growths,
                        _ => &mut l.ring_mb,
                    } = v;
                }
                name => match counter(name) {
                    Some(c) => {
                        let v: Option<u64> = map.next_value()?;
                        if let Some(v) = v {
                            c.add(&mut h, v);
                        }
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                },
            }
        }
        Ok(h)
    }
}

/// Rejects a ledger whose names are not unique or whose notes name unknown counters.
pub fn check_ledger() -> Result<(), String> {
    for (i, c) in COUNTERS.iter().enumerate() {
        if COUNTERS.iter().skip(i + 1).any(|o| o.name == c.name) {
            return Err(format!("counter {} appears twice", c.name));
        }
        if let Some(note) = c.note {
            for name in note_names(note) {
                if counter(name).is_none() {
                    return Err(format!("note of {} names unknown counter {name}", c.name));
                }
            }
        }
    }
    Ok(())
}

/// The counter names a note refers to, in order.
pub fn note_names(note: &str) -> impl Iterator<Item = &str> {
    note.split('{')
        .skip(1)
        .filter_map(|s| s.split_once('}').map(|(name, _)| name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_is_for_loss_counters() {
        for (name, _) in ADVICE {
            assert_eq!(counter(name).map(|c| c.kind), Some(Kind::Loss), "{name}");
        }
        assert!(advice("truncated_packets").is_some_and(|a| a.contains("-s 0")));
        assert_eq!(advice("gaps"), None);
    }

    fn every_counter_set() -> CaptureHealth {
        let mut h = CaptureHealth {
            files: vec!["a.pcap".into()],
            first_ts_ns: Some(5),
            last_ts_ns: Some(9),
            warnings: vec!["w".into()],
            ..CaptureHealth::default()
        };
        for (i, c) in COUNTERS.iter().enumerate() {
            c.add(&mut h, i as u64 + 1);
        }
        h
    }

    #[test]
    fn ledger_is_consistent() {
        assert_eq!(check_ledger(), Ok(()));
        // Every loss has a meaning; every count or informational row is shown by some note or
        // exported.
        for c in COUNTERS {
            assert!(!c.meaning.is_empty(), "{}", c.name);
            let in_note = COUNTERS
                .iter()
                .filter_map(|o| o.note)
                .any(|n| note_names(n).any(|x| x == c.name));
            assert!(c.kind == Kind::Loss || in_note, "{} is never shown", c.name);
        }
    }

    #[test]
    fn json_round_trip_keeps_every_counter() {
        let mut h = every_counter_set();
        if let Some(l) = h.live.as_mut() {
            l.sampled_one_in = 4;
        }
        let s = serde_json::to_string(&h).unwrap_or_default();
        let back: CaptureHealth = serde_json::from_str(&s).unwrap_or_default();
        assert_eq!(back, h);
        for c in COUNTERS {
            assert!(
                s.contains(&format!("\"{}\":", c.name)),
                "{} missing",
                c.name
            );
        }
    }

    #[test]
    fn ring_growths_are_shown_only_when_the_ring_grew_and_add_up() {
        let mut h = CaptureHealth {
            live: Some(LiveHealth {
                ring_mb: 32,
                ..LiveHealth::default()
            }),
            ..CaptureHealth::default()
        };
        let s = serde_json::to_string(&h).unwrap_or_default();
        assert!(
            s.contains("\"ring_mb\":32") && !s.contains("ring_growths"),
            "{s}"
        );
        if let Some(l) = h.live.as_mut() {
            (l.ring_mb, l.ring_growths) = (96, 2);
        }
        let s = serde_json::to_string(&h).unwrap_or_default();
        assert!(s.contains("\"ring_mb\":96,\"ring_growths\":2"), "{s}");
        let back: CaptureHealth = serde_json::from_str(&s).unwrap_or_default();
        assert_eq!(back, h);
        let mut m = h.clone();
        m.add(&h);
        assert_eq!(m.live.map(|l| l.ring_growths), Some(4));
    }

    #[test]
    fn json_round_trip_keeps_the_reader_pauses() {
        let mut h = every_counter_set();
        h.live = Some(LiveHealth {
            kernel_drops: 3,
            sampled_one_in: 0,
            reader_pause_max_ms: 512,
            reader_long_pauses: 2,
            ring_mb: 32,
            ring_growths: 0,
        });
        let s = serde_json::to_string(&h).unwrap_or_default();
        assert!(
            s.contains("\"reader_pause_max_ms\":512,\"reader_long_pauses\":2,\"ring_mb\":32"),
            "{s}"
        );
        let back: CaptureHealth = serde_json::from_str(&s).unwrap_or_default();
        assert_eq!(back, h);
        // Two capture threads: the longest pause, the pauses and the rings added up.
        let mut m = h.clone();
        m.add(&CaptureHealth {
            live: Some(LiveHealth {
                reader_pause_max_ms: 7,
                reader_long_pauses: 1,
                ring_mb: 32,
                ..LiveHealth::default()
            }),
            ..CaptureHealth::default()
        });
        let l = m.live.unwrap_or_default();
        assert_eq!(
            (l.reader_pause_max_ms, l.reader_long_pauses, l.ring_mb),
            (512, 3, 64)
        );
        // Without a packet ring (the eBPF source) there are no reader fields.
        let ebpf = CaptureHealth {
            live: Some(LiveHealth::default()),
            ..CaptureHealth::default()
        };
        let s = serde_json::to_string(&ebpf).unwrap_or_default();
        assert!(!s.contains("reader_pause") && !s.contains("ring_mb"), "{s}");
    }

    #[test]
    fn files_have_no_live_fields() {
        let h = CaptureHealth::default();
        let s = serde_json::to_string(&h).unwrap_or_default();
        assert!(
            !s.contains("kernel_drops") && !s.contains("sampled_one_in"),
            "{s}"
        );
        assert!(h.is_complete());
    }

    #[test]
    fn merge_sums_every_counter() {
        let a = every_counter_set();
        let mut m = a.clone();
        m.add(&a);
        for c in COUNTERS {
            assert_eq!(c.get(&m), c.get(&a).map(|v| v * 2), "{}", c.name);
        }
        assert_eq!((m.files.len(), m.warnings.len()), (1, 1));
    }

    #[test]
    fn only_losses_make_a_report_incomplete() {
        for c in COUNTERS {
            let mut h = CaptureHealth::default();
            c.add(&mut h, 1);
            assert_eq!(h.is_complete(), c.kind != Kind::Loss, "{}", c.name);
        }
    }
}
