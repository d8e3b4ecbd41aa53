//! The framing state of one direction of a connection: in sync with the message boundaries, or
//! lost and looking for the next one, with the probe that collects the bytes (and the
//! timestamps of the packets that carried them) at a possible boundary. Each protocol decides
//! what a plausible boundary is; the bookkeeping lives here once.

use std::ops::Range;

use crate::Health;

/// Whether a direction knows where its messages begin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sync {
    Synced,
    /// Skipping bytes. `candidate`: the next byte may start a message (at the start of a
    /// mid-stream pickup, after a gap, or at a turn of the conversation).
    Lost {
        candidate: bool,
    },
}

/// Bytes kept at a possible message boundary, each with the timestamp of the packet that
/// carried it. The bytes are contiguous (a protocol judges them as one slice) and the
/// timestamps are kept as runs. Dropping bytes from the front is cheap, so a protocol may
/// slide the probe one byte at a time.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    bytes: Vec<u8>,
    /// `(start index in bytes, timestamp)`, ascending by index; the first run starts at or
    /// before `head`.
    runs: Vec<(usize, u64)>,
    /// Bytes before it were dropped.
    head: usize,
}

/// Bytes dropped from the front before the buffer is compacted.
const COMPACT_AT: usize = 4096;

impl Probe {
    /// The bytes kept.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(self.head..).unwrap_or(&[])
    }
    pub fn len(&self) -> usize {
        self.bytes.len().saturating_sub(self.head)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps all of `data`, carried by a packet at `ts`.
    pub fn push(&mut self, data: &[u8], ts: u64) {
        if data.is_empty() {
            return;
        }
        if self.runs.last().is_none_or(|r| r.1 != ts) {
            self.runs.push((self.bytes.len(), ts));
        }
        self.bytes.extend_from_slice(data);
    }

    /// Keeps bytes of `data` until the probe holds `want`; returns how many it took.
    pub fn fill(&mut self, data: &[u8], ts: u64, want: usize) -> usize {
        let n = want.saturating_sub(self.len()).min(data.len());
        self.push(data.get(..n).unwrap_or(&[]), ts);
        n
    }

    /// Drops up to `n` bytes from the front; returns how many were dropped.
    pub fn drop_front(&mut self, n: usize) -> usize {
        let n = n.min(self.len());
        self.head += n;
        if self.head >= self.bytes.len() {
            self.clear();
        } else if self.head >= COMPACT_AT && self.head * 2 >= self.bytes.len() {
            self.compact();
        }
        n
    }

    fn compact(&mut self) {
        let head = self.head;
        // The run holding the new first byte: the last that starts at or before it.
        let keep = self.runs.partition_point(|r| r.0 <= head).saturating_sub(1);
        self.runs.drain(..keep);
        for r in &mut self.runs {
            r.0 = r.0.saturating_sub(head);
        }
        self.bytes.drain(..head);
        self.head = 0;
    }

    /// Forgets everything; returns how many bytes were kept.
    pub fn clear(&mut self) -> u64 {
        let n = self.len() as u64;
        self.bytes.clear();
        self.runs.clear();
        self.head = 0;
        n
    }

    /// The runs of bytes carried by one packet: `(range in [`Probe::bytes`], timestamp)`, in
    /// order. Replaying a probe run by run gives every message the timestamp of its first
    /// byte, as if fed live.
    pub fn runs(&self) -> impl Iterator<Item = (Range<usize>, u64)> + '_ {
        let head = self.head;
        let end = self.bytes.len();
        self.runs
            .iter()
            .enumerate()
            .filter_map(move |(i, &(start, ts))| {
                let next = self.runs.get(i + 1).map_or(end, |r| r.0);
                let (s, e) = (start.max(head), next.min(end));
                (s < e).then(|| (s - head..e - head, ts))
            })
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity() + self.runs.capacity() * std::mem::size_of::<(usize, u64)>()
    }
}

/// The sync state of one direction and its probe.
#[derive(Clone, Debug)]
pub struct Framing {
    pub sync: Sync,
    pub probe: Probe,
}

impl Framing {
    pub fn new(sync: Sync) -> Self {
        Framing {
            sync,
            probe: Probe::default(),
        }
    }
    /// In sync from the first byte (the connection was seen from its start).
    pub fn synced() -> Self {
        Framing::new(Sync::Synced)
    }
    /// Picked up mid-stream: `candidate` says whether the first byte may start a message.
    pub fn lost(candidate: bool) -> Self {
        Framing::new(Sync::Lost { candidate })
    }
    pub fn is_synced(&self) -> bool {
        self.sync == Sync::Synced
    }
    /// Lost, and the next byte may start a message.
    pub fn is_candidate(&self) -> bool {
        self.sync == (Sync::Lost { candidate: true })
    }

    /// The direction lost its place: the probe is dropped and counted as unparsed, and a
    /// resync is counted if it was in sync. The caller counts the protocol's own partial
    /// message. Skips bytes until [`Framing::candidate`].
    pub fn lose(&mut self, health: &mut Health) {
        health.unparsed_bytes += self.probe.clear();
        if self.sync == Sync::Synced {
            health.resyncs += 1;
        }
        self.sync = Sync::Lost { candidate: false };
    }

    /// A turn of the conversation: a direction that is skipping may find a message at its
    /// next byte. No effect in sync.
    pub fn candidate(&mut self) {
        if let Sync::Lost { .. } = self.sync {
            self.sync = Sync::Lost { candidate: true };
        }
    }

    /// The probe did not start a message: its bytes are unparsed and the direction skips
    /// until the next candidate.
    pub fn reject_probe(&mut self, health: &mut Health) {
        health.unparsed_bytes += self.probe.clear();
        self.sync = Sync::Lost { candidate: false };
    }

    /// The probe starts a message: back in sync. Returns the probe, to be replayed with
    /// [`Probe::runs`].
    pub fn accept_probe(&mut self) -> Probe {
        self.sync = Sync::Synced;
        std::mem::take(&mut self.probe)
    }
}

/// The runs of equal timestamps in bytes kept with the timestamp of the packet that carried
/// each (a resynchronization probe): `(index range, timestamp)`, in order. Replaying a probe
/// run by run gives every message the timestamp of its first byte, as if fed live.
pub fn timestamp_runs(probe: &[(u8, u64)]) -> impl Iterator<Item = (Range<usize>, u64)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let ts = probe.get(i)?.1;
        let j = probe
            .get(i..)
            .and_then(|rest| rest.iter().position(|p| p.1 != ts))
            .map_or(probe.len(), |k| i + k);
        let run = i..j;
        i = j;
        Some((run, ts))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(p: &Probe) -> Vec<(Vec<u8>, u64)> {
        p.runs()
            .map(|(r, ts)| (p.bytes()[r].to_vec(), ts))
            .collect()
    }

    #[test]
    fn probe_keeps_bytes_and_timestamp_runs() {
        let mut p = Probe::default();
        assert!(p.is_empty());
        assert_eq!(p.fill(b"abc", 1, 5), 3);
        assert_eq!(p.fill(b"", 2, 5), 0);
        assert_eq!(p.fill(b"de", 1, 5), 2);
        assert_eq!(p.fill(b"fg", 3, 5), 0);
        assert_eq!(p.bytes(), b"abcde");
        // Equal timestamps in a row make one run.
        assert_eq!(runs(&p), vec![(b"abcde".to_vec(), 1)]);
        p.push(b"fg", 3);
        p.push(b"h", 4);
        assert_eq!(
            runs(&p),
            vec![
                (b"abcde".to_vec(), 1),
                (b"fg".to_vec(), 3),
                (b"h".to_vec(), 4)
            ]
        );
        assert_eq!(p.drop_front(6), 6);
        assert_eq!(runs(&p), vec![(b"g".to_vec(), 3), (b"h".to_vec(), 4)]);
        assert_eq!(p.clear(), 2);
        assert!(p.is_empty());
        assert_eq!(runs(&p), vec![]);
        assert_eq!(p.drop_front(1), 0);
    }

    #[test]
    fn sliding_one_byte_at_a_time_compacts() {
        let mut p = Probe::default();
        let mut expect = Vec::new();
        for i in 0..20_000u64 {
            p.push(&[i as u8], i / 7);
            expect.push((i as u8, i / 7));
            if i % 3 != 0 {
                assert_eq!(p.drop_front(1), 1);
                expect.remove(0);
            }
        }
        assert_eq!(p.len(), expect.len());
        assert!(p.heap_bytes() < 200_000, "{}", p.heap_bytes());
        let got: Vec<(u8, u64)> = p
            .runs()
            .flat_map(|(r, ts)| {
                p.bytes()[r]
                    .iter()
                    .map(move |&b| (b, ts))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(got, expect);
        let flat: Vec<_> = timestamp_runs(&expect).collect();
        let mine: Vec<_> = p.runs().collect();
        assert_eq!(flat, mine);
    }

    #[test]
    fn timestamp_runs_of_pairs() {
        let probe = [(1u8, 5u64), (2, 5), (3, 6), (4, 5)];
        let r: Vec<_> = timestamp_runs(&probe).collect();
        assert_eq!(r, vec![(0..2, 5), (2..3, 6), (3..4, 5)]);
        assert_eq!(timestamp_runs(&[]).count(), 0);
    }

    #[test]
    fn framing_counts_what_it_drops() {
        let mut h = Health::default();
        let mut f = Framing::synced();
        assert!(f.is_synced());
        f.candidate();
        assert!(f.is_synced());
        f.lose(&mut h);
        assert_eq!((h.resyncs, h.unparsed_bytes), (1, 0));
        assert_eq!(f.sync, Sync::Lost { candidate: false });
        // Losing again while lost is not another resync.
        f.lose(&mut h);
        assert_eq!(h.resyncs, 1);
        f.candidate();
        assert!(f.is_candidate());
        f.probe.push(b"xyz", 9);
        f.reject_probe(&mut h);
        assert_eq!(h.unparsed_bytes, 3);
        assert_eq!(f.sync, Sync::Lost { candidate: false });
        f.candidate();
        f.probe.push(b"ok", 10);
        let p = f.accept_probe();
        assert!(f.is_synced() && f.probe.is_empty());
        assert_eq!(p.bytes(), b"ok");
        let mut g = Framing::lost(true);
        g.probe.push(b"ab", 1);
        g.lose(&mut h);
        assert_eq!((h.resyncs, h.unparsed_bytes), (1, 5));
    }
}
