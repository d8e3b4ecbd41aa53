//! The packet reader's pauses as metrics: how long the capture ring went unread, so that a
//! starved or stopped agent (long pauses before the drops) can be told from bursts beyond the
//! ring or a lossy network (drops with short pauses).

use crate::prom::{family, sample};

/// How long blocks of the capture ring waited to be read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderPause {
    /// The longest wait during the last interval, ns.
    pub interval_ns: u64,
    /// The longest wait since start, ns.
    pub max_ns: u64,
    /// Reads after a pause of 100 ms or more, since start.
    pub long_pauses: u64,
    /// The capture rings' size in bytes (every capture thread's ring).
    pub ring_bytes: u64,
    /// Times the capture rings grew with the traffic, since start.
    pub ring_growths: u64,
}

/// Appends `dbtap_capture_reader_pause_seconds` (gauge, last interval),
/// `dbtap_capture_reader_pause_max_seconds` (gauge, since start),
/// `dbtap_capture_reader_long_pauses_total` (counter), `dbtap_capture_ring_bytes` (gauge) and
/// `dbtap_capture_ring_growths_total` (counter).
pub fn write_reader_pause(p: ReaderPause, out: &mut String) {
    let rows = [
        (
            "dbtap_capture_reader_pause_seconds",
            "gauge",
            "The longest a block of the capture ring waited to be read during the last interval.",
            p.interval_ns as f64 / 1e9,
        ),
        (
            "dbtap_capture_reader_pause_max_seconds",
            "gauge",
            "The longest a block of the capture ring waited to be read since start.",
            p.max_ns as f64 / 1e9,
        ),
        (
            "dbtap_capture_reader_long_pauses_total",
            "counter",
            "Times the capture reader came back to the ring after a pause of 100 ms or more.",
            p.long_pauses as f64,
        ),
        (
            "dbtap_capture_ring_bytes",
            "gauge",
            "Size of the capture rings (every capture thread's ring) in bytes.",
            p.ring_bytes as f64,
        ),
        (
            "dbtap_capture_ring_growths_total",
            "counter",
            "Times a capture ring was replaced by a larger one (--ring-max-mb), since start.",
            p.ring_growths as f64,
        ),
    ];
    for (name, kind, help, v) in rows {
        family(out, name, kind, help);
        sample(out, name, "", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_in_seconds_and_a_counter() {
        let mut out = String::new();
        write_reader_pause(
            ReaderPause {
                interval_ns: 250_000_000,
                max_ns: 1_500_000_000,
                long_pauses: 3,
                ring_bytes: 32 << 20,
                ring_growths: 2,
            },
            &mut out,
        );
        assert!(out.contains("# TYPE dbtap_capture_reader_pause_seconds gauge\n"));
        assert!(out.contains("\ndbtap_capture_reader_pause_seconds 0.25\n"));
        assert!(out.contains("\ndbtap_capture_reader_pause_max_seconds 1.5\n"));
        assert!(out.contains("# TYPE dbtap_capture_reader_long_pauses_total counter\n"));
        assert!(out.contains("\ndbtap_capture_reader_long_pauses_total 3\n"));
        assert!(out.contains("\ndbtap_capture_ring_bytes 33554432\n"));
        assert!(out.contains("\ndbtap_capture_ring_growths_total 2\n"));
    }
}
