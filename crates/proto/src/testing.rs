//! Test support for every protocol session: feed one transcript whole, byte by byte and in
//! seeded random splits and check that the events and health are identical; cut bytes out
//! of a direction to simulate capture loss; read and write transcripts as hex text.

use std::fmt::Write as _;

use crate::{ConnMeta, Direction, Health, Progress, QueryEvent, Session, Sink, VecSink};

/// Bytes of one connection in capture order: direction, payload, timestamp (ns).
pub type Transcript = Vec<(Direction, Vec<u8>, u64)>;

/// One thing that happens to a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Data(Direction, Vec<u8>, u64),
    /// `gap(dir, len, ts)`: reassembly lost `len` bytes.
    Gap(Direction, u64, u64),
}

/// How each [`Step::Data`] is cut into `feed` calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Chunking {
    Whole,
    ByteByByte,
    /// Random pieces of 1..=64 bytes (sometimes much larger), from a seed.
    Random(u64),
}

/// The chunkings [`assert_chunking_invariant`] uses: whole, byte by byte, and 8 random seeds.
pub const DEFAULT_CHUNKINGS: [Chunking; 10] = [
    Chunking::Whole,
    Chunking::ByteByByte,
    Chunking::Random(1),
    Chunking::Random(2),
    Chunking::Random(3),
    Chunking::Random(4),
    Chunking::Random(5),
    Chunking::Random(6),
    Chunking::Random(7),
    Chunking::Random(8),
];

/// A tiny deterministic generator (xorshift64*), so tests need no dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The steps of a transcript with no loss.
pub fn steps(t: &Transcript) -> Vec<Step> {
    t.iter()
        .map(|(d, b, ts)| Step::Data(*d, b.clone(), *ts))
        .collect()
}

/// The transcript with bytes `offset..offset + len` of direction `dir`'s stream (counted over
/// that direction only) removed and replaced by a [`Step::Gap`] at the place they were.
pub fn with_gap(t: &Transcript, dir: Direction, offset: u64, len: u64) -> Vec<Step> {
    let end = offset.saturating_add(len);
    let mut out = Vec::new();
    let mut pos = 0u64;
    let mut gap_emitted = false;
    for (d, b, ts) in t {
        if *d != dir {
            out.push(Step::Data(*d, b.clone(), *ts));
            continue;
        }
        let (s, e) = (pos, pos + b.len() as u64);
        pos = e;
        if e <= offset || s >= end {
            out.push(Step::Data(*d, b.clone(), *ts));
            continue;
        }
        // This piece overlaps the removed range.
        let cut_from = offset.saturating_sub(s) as usize;
        let cut_to = (end.min(e) - s) as usize;
        if cut_from > 0 {
            out.push(Step::Data(*d, b[..cut_from].to_vec(), *ts));
        }
        if !gap_emitted {
            let lost = end.min(pos_total(t, dir)) - offset.min(pos_total(t, dir));
            out.push(Step::Gap(*d, lost, *ts));
            gap_emitted = true;
        }
        if cut_to < b.len() {
            out.push(Step::Data(*d, b[cut_to..].to_vec(), *ts));
        }
    }
    out
}

fn pos_total(t: &Transcript, dir: Direction) -> u64 {
    t.iter()
        .filter(|x| x.0 == dir)
        .map(|x| x.1.len() as u64)
        .sum()
}

/// Feeds `steps` to `session` cut as `chunking` says, then closes it one nanosecond after the
/// last timestamp. Stops feeding after [`Progress::Stop`], as the flow layer does.
pub fn run_steps<S: Session + ?Sized>(
    session: &mut S,
    steps: &[Step],
    chunking: Chunking,
) -> VecSink {
    let mut sink = VecSink::default();
    let mut rng = Rng::new(match chunking {
        Chunking::Random(s) => s,
        _ => 0,
    });
    let mut last_ts = 0;
    let mut stopped = false;
    'outer: for st in steps {
        match st {
            Step::Gap(d, len, ts) => {
                last_ts = last_ts.max(*ts);
                session.gap(*d, *len, *ts, &mut sink);
            }
            Step::Data(d, b, ts) => {
                last_ts = last_ts.max(*ts);
                let mut rest = &b[..];
                while !rest.is_empty() {
                    let n = match chunking {
                        Chunking::Whole => rest.len(),
                        Chunking::ByteByByte => 1,
                        Chunking::Random(_) => {
                            let r = rng.below(100);
                            if r < 5 {
                                1 + rng.below(1 << 16) as usize
                            } else {
                                1 + rng.below(64) as usize
                            }
                        }
                    }
                    .min(rest.len());
                    if session.feed(*d, &rest[..n], *ts, &mut sink) == Progress::Stop {
                        stopped = true;
                        break 'outer;
                    }
                    rest = &rest[n..];
                }
            }
        }
    }
    let _ = stopped;
    session.close(last_ts + 1, &mut sink);
    sink
}

/// One line per event, `{:?}` of every field: what the chunking comparison compares.
pub fn render(events: &[QueryEvent]) -> Vec<String> {
    events.iter().map(|e| format!("{e:?}")).collect()
}

/// Runs `steps` through a fresh session for each chunking and asserts identical events and
/// health. Returns the result of the first chunking.
pub fn assert_chunkings<S: Session>(
    make: impl Fn() -> S,
    steps: &[Step],
    chunkings: &[Chunking],
) -> VecSink {
    let mut first: Option<(Chunking, VecSink, Vec<String>)> = None;
    for &c in chunkings {
        let mut s = make();
        let sink = run_steps(&mut s, steps, c);
        let r = render(&sink.events);
        match &first {
            None => first = Some((c, sink, r)),
            Some((c0, s0, r0)) => {
                if *r0 != r {
                    let i = r0
                        .iter()
                        .zip(&r)
                        .position(|(a, b)| a != b)
                        .unwrap_or(r0.len().min(r.len()));
                    panic!(
                        "events differ between {c0:?} and {c:?} ({} vs {} events); first difference at {i}:\n  {:?}\n  {:?}",
                        r0.len(),
                        r.len(),
                        r0.get(i),
                        r.get(i)
                    );
                }
                assert_eq!(
                    s0.health, sink.health,
                    "health differs between {c0:?} and {c:?}"
                );
            }
        }
    }
    first.map(|f| f.1).unwrap_or_default()
}

/// [`assert_chunkings`] with [`DEFAULT_CHUNKINGS`].
pub fn assert_chunking_invariant<S: Session>(make: impl Fn() -> S, steps: &[Step]) -> VecSink {
    assert_chunkings(make, steps, &DEFAULT_CHUNKINGS)
}

/// Connection 1 from `127.0.0.1:40000` to `127.0.0.1:<server_port>`, for tests.
pub fn loopback_meta(server_port: u16, saw_open: bool) -> ConnMeta {
    ConnMeta {
        id: 1,
        client: "127.0.0.1:40000"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
        server: std::net::SocketAddr::from(([127, 0, 0, 1], server_port)).into(),
        saw_open,
        peer: None,
        after_tls: false,
    }
}

/// Feeds `t` to `session` in seeded random pieces of 1..=300 bytes, then closes it one
/// nanosecond after the last timestamp. With `gap_one_in: Some(k)`, each piece is instead lost
/// (a [`Session::gap`] of its length) with probability `1/k`. Asserts `buffered(session) <=
/// bound` after every call. Stops feeding after [`Progress::Stop`].
pub fn drive_random<S: Session>(
    mut session: S,
    buffered: impl Fn(&S) -> usize,
    bound: usize,
    t: &Transcript,
    seed: u64,
    gap_one_in: Option<u64>,
) -> VecSink {
    let mut sink = VecSink::default();
    let mut rng = Rng::new(seed);
    let mut ts = 0;
    'outer: for (d, bytes, t_ns) in t {
        ts = *t_ns;
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = (1 + rng.below(300) as usize).min(rest.len());
            if gap_one_in.is_some_and(|k| rng.below(k) == 0) {
                session.gap(*d, n as u64, ts, &mut sink);
            } else if session.feed(*d, &rest[..n], ts, &mut sink) == Progress::Stop {
                break 'outer;
            }
            rest = &rest[n..];
            assert!(
                buffered(&session) <= bound,
                "buffered {}",
                buffered(&session)
            );
        }
    }
    session.close(ts + 1, &mut sink);
    sink
}

/// Damages `t` with `n` seeded mutations, each on a random segment: flip a bit, truncate,
/// insert 1..=40 bytes from `garbage_byte`, drop the segment, overwrite a byte with
/// `lying_byte` (a plausible but lying length), or swap it with another segment.
pub fn mutate(
    t: &mut Transcript,
    rng: &mut Rng,
    n: usize,
    garbage_byte: impl Fn(&mut Rng) -> u8,
    lying_byte: impl Fn(&mut Rng) -> u8,
) {
    for _ in 0..n {
        if t.is_empty() {
            return;
        }
        let i = rng.below(t.len() as u64) as usize;
        let seg = &mut t[i].1;
        match rng.below(6) {
            0 if !seg.is_empty() => {
                let p = rng.below(seg.len() as u64) as usize;
                seg[p] ^= 1 << rng.below(8);
            }
            1 if !seg.is_empty() => {
                let p = rng.below(seg.len() as u64) as usize;
                seg.truncate(p);
            }
            2 => {
                let p = rng.below(seg.len() as u64 + 1) as usize;
                let garbage: Vec<u8> = (0..1 + rng.below(40)).map(|_| garbage_byte(rng)).collect();
                seg.splice(p..p, garbage);
            }
            3 => {
                t.remove(i);
            }
            4 if !seg.is_empty() => {
                let p = rng.below(seg.len() as u64) as usize;
                seg[p] = lying_byte(rng);
            }
            _ => {
                let j = rng.below(t.len() as u64) as usize;
                t.swap(i, j);
            }
        }
    }
}

/// A sink that only counts, for runs that must not keep events (fuzzing, benchmarks).
#[derive(Debug, Default)]
pub struct CountSink {
    pub events: u64,
    pub health: Health,
}

impl Sink for CountSink {
    fn event(&mut self, _ev: QueryEvent) {
        self.events += 1;
    }
    fn health(&mut self) -> &mut Health {
        &mut self.health
    }
}

/// Reads a transcript written as text: one line per segment, `C <ts_ns> <hex>` for client to
/// server and `S <ts_ns> <hex>` for server to client. Blank lines and `#` comments are skipped.
pub fn parse_hex_transcript(text: &str) -> Result<Transcript, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_ascii_whitespace();
        let dir = match parts.next() {
            Some("C") => Direction::ToServer,
            Some("S") => Direction::ToClient,
            other => return Err(format!("line {}: bad direction {other:?}", n + 1)),
        };
        let ts: u64 = parts
            .next()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| format!("line {}: bad timestamp", n + 1))?;
        let hex = parts.next().unwrap_or("");
        if hex.len() % 2 != 0 {
            return Err(format!("line {}: odd hex length", n + 1));
        }
        let mut bytes = Vec::with_capacity(hex.len() / 2);
        for i in (0..hex.len()).step_by(2) {
            let b = hex
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("line {}: bad hex", n + 1))?;
            bytes.push(b);
        }
        out.push((dir, bytes, ts));
    }
    Ok(out)
}

/// Writes a transcript in the format [`parse_hex_transcript`] reads.
pub fn to_hex_transcript(t: &Transcript) -> String {
    let mut s = String::new();
    for (d, b, ts) in t {
        let c = if *d == Direction::ToServer { 'C' } else { 'S' };
        let _ = write!(s, "{c} {ts} ");
        for x in b {
            let _ = write!(s, "{x:02x}");
        }
        s.push('\n');
    }
    s
}

/// An event for tests of what consumes events (aggregates, reports, trackers): a `command` of
/// `protocol` from 127.0.0.1:50000 to 127.0.0.1:1 that started at `start_ns` and, when `end_ns`
/// is given, was answered then (`ok`, response and service time from `start_ns`), else has no
/// response. Every other field is empty; set what a test needs with struct update syntax.
pub fn event(
    protocol: crate::Protocol,
    command: &'static str,
    start_ns: u64,
    end_ns: Option<u64>,
) -> QueryEvent {
    QueryEvent {
        protocol,
        conn: 1,
        client: std::net::SocketAddr::from(([127, 0, 0, 1], 50_000)).into(),
        server: std::net::SocketAddr::from(([127, 0, 0, 1], 1)).into(),
        start_ns,
        first_response_ns: end_ns,
        end_ns,
        service_start_ns: end_ns.map(|_| start_ns),
        user: None,
        database: None,
        command,
        text: None,
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 0,
        bytes_out: 0,
        rows_sent: 0,
        rows_affected: 0,
        warnings: 0,
        outcome: if end_ns.is_some() {
            crate::Outcome::Ok
        } else {
            crate::Outcome::NoResponse
        },
        error: None,
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_cuts_one_direction_only() {
        let t: Transcript = vec![
            (Direction::ToServer, b"abcd".to_vec(), 1),
            (Direction::ToClient, b"xyz".to_vec(), 2),
            (Direction::ToServer, b"efgh".to_vec(), 3),
        ];
        let s = with_gap(&t, Direction::ToServer, 2, 4);
        assert_eq!(
            s,
            vec![
                Step::Data(Direction::ToServer, b"ab".to_vec(), 1),
                Step::Gap(Direction::ToServer, 4, 1),
                Step::Data(Direction::ToClient, b"xyz".to_vec(), 2),
                Step::Data(Direction::ToServer, b"gh".to_vec(), 3),
            ]
        );
        let s = with_gap(&t, Direction::ToClient, 0, 3);
        assert_eq!(s[1], Step::Gap(Direction::ToClient, 3, 2));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn hex_roundtrip() {
        let t: Transcript = vec![
            (Direction::ToServer, vec![0, 255, 16], 5),
            (Direction::ToClient, vec![], 6),
        ];
        let text = to_hex_transcript(&t);
        assert_eq!(parse_hex_transcript(&text).unwrap(), t);
        assert!(parse_hex_transcript("X 1 00").is_err());
        assert!(parse_hex_transcript("C 1 0").is_err());
        assert!(parse_hex_transcript("C 1 zz").is_err());
    }

    #[test]
    fn rng_is_deterministic() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..10 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert!(Rng::new(1).below(10) < 10);
    }
}
