//! The capture reader's pauses as gauges: how long the packet ring went unread, so that a
//! starved agent (long pauses) can be told from a ring too small for the bursts or a lossy
//! network (kernel drops with short pauses).

use crate::prom::{family, sample};

/// How long blocks of the capture ring waited to be read, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderPause {
    /// The longest wait during the last interval.
    pub interval_ns: u64,
    /// The longest wait since start.
    pub max_ns: u64,
    /// The capture rings' size in bytes (every capture thread's ring).
    pub ring_bytes: u64,
}

/// Appends `dbtap_capture_reader_pause_seconds` (last interval),
/// `dbtap_capture_reader_pause_max_seconds` (since start) and `dbtap_capture_ring_bytes`.
pub fn write_reader_pause(p: ReaderPause, out: &mut String) {
    let rows = [
        (
            "dbtap_capture_reader_pause_seconds",
            "The longest a block of the capture ring waited to be read during the last interval.",
            p.interval_ns as f64 / 1e9,
        ),
        (
            "dbtap_capture_reader_pause_max_seconds",
            "The longest a block of the capture ring waited to be read since start.",
            p.max_ns as f64 / 1e9,
        ),
        (
            "dbtap_capture_ring_bytes",
            "Size of the capture rings (every capture thread's) in bytes.",
            p.ring_bytes as f64,
        ),
    ];
    for (name, help, v) in rows {
        family(out, name, "gauge", help);
        sample(out, name, "", v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_in_seconds() {
        let mut out = String::new();
        write_reader_pause(
            ReaderPause {
                interval_ns: 250_000_000,
                max_ns: 1_500_000_000,
                ring_bytes: 32 << 20,
            },
            &mut out,
        );
        assert!(out.contains("# TYPE dbtap_capture_reader_pause_seconds gauge\n"));
        assert!(out.contains("\ndbtap_capture_reader_pause_seconds 0.25\n"));
        assert!(out.contains("\ndbtap_capture_reader_pause_max_seconds 1.5\n"));
        assert!(out.contains("\ndbtap_capture_ring_bytes 33554432\n"));
    }
}
