//! Time blocks of one side's requests: how much the requests of one moment resemble each
//! other. Latencies of real traffic are not independent (a stall, a checkpoint or another
//! process slows every request of a few milliseconds), so tests that take each request as an
//! independent sample overstate the evidence. The side's requests are cut into at most
//! [`MAX_BLOCKS`] consecutive blocks of equal length (doubling the length as the span grows); the
//! variance of the blocks' mean log service time against its variance under independence is
//! the design effect by which [`crate::compare`] deflates every test statistic, and the
//! dispersion of the blocks' counts the one of the rate test (a quasi-Poisson correction).

use serde::{Deserialize, Serialize};

/// Blocks kept at most; two neighbours merge when a request falls past the last.
pub const MAX_BLOCKS: usize = 64;
/// Length of a block before any merge.
pub const FIRST_LEN_NS: u64 = 1_000_000;
/// Fewer blocks with requests than this: no design effect is estimated (1 is used).
pub const MIN_BLOCKS: usize = 8;

/// Per block: requests with a service time, the sum of their natural logs (ns) and of the
/// squares of those.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Blocks {
    pub start_ns: u64,
    pub len_ns: u64,
    /// `[count, sum of ln, sum of ln²]` per block, in time order.
    pub blocks: Vec<[f64; 3]>,
}

/// Neighbouring blocks summed two by two.
fn pairs(blocks: &[[f64; 3]]) -> Vec<[f64; 3]> {
    blocks
        .chunks(2)
        .map(|c| {
            let mut s = [0.0; 3];
            for b in c {
                (0..3).for_each(|k| s[k] += b[k]);
            }
            s
        })
        .collect()
}

/// The design effect at one block length (see [`Blocks::design_effect`]).
fn design_effect_of(blocks: &[[f64; 3]]) -> f64 {
    let used: Vec<&[f64; 3]> = blocks.iter().filter(|b| b[0] > 0.0).collect();
    let nb = used.len() as f64;
    let n: f64 = used.iter().map(|b| b[0]).sum();
    if used.len() < MIN_BLOCKS || n < 2.0 {
        return 1.0;
    }
    let mean = used.iter().map(|b| b[1]).sum::<f64>() / n;
    let var = (used.iter().map(|b| b[2]).sum::<f64>() / n - mean * mean) * n / (n - 1.0);
    if var <= 0.0 {
        return 1.0;
    }
    let between: f64 = used
        .iter()
        .map(|b| (b[1] - b[0] * mean).powi(2)) // n_b² (m_b - m)²
        .sum();
    let robust = nb / (nb - 1.0) * between / (n * n);
    (robust / (var / n)).max(1.0)
}

impl Blocks {
    pub fn new(start_ns: u64) -> Blocks {
        Blocks {
            start_ns,
            len_ns: FIRST_LEN_NS,
            blocks: Vec::new(),
        }
    }

    /// Records one request that started at `ts_ns` with service time `ns`.
    pub fn record(&mut self, ts_ns: u64, ns: u64) {
        let mut i = (ts_ns.saturating_sub(self.start_ns) / self.len_ns.max(1)) as usize;
        while i >= MAX_BLOCKS {
            self.halve();
            i = (ts_ns.saturating_sub(self.start_ns) / self.len_ns) as usize;
        }
        if self.blocks.len() <= i {
            self.blocks.resize(i + 1, [0.0; 3]);
        }
        let l = (ns.max(1) as f64).ln();
        if let Some(b) = self.blocks.get_mut(i) {
            b[0] += 1.0;
            b[1] += l;
            b[2] += l * l;
        }
    }

    /// Merges neighbours: half as many blocks, twice as long.
    fn halve(&mut self) {
        self.len_ns = self.len_ns.saturating_mul(2);
        self.blocks = pairs(&self.blocks);
    }

    /// The design effect of the mean log service time: its variance between blocks (cluster
    /// robust) over its variance were the requests independent; at least 1, and 1 when fewer
    /// than [`MIN_BLOCKS`] blocks hold requests. Clustering can last longer than a block (a
    /// stall of 100 ms over blocks of 30 ms makes neighbours alike, and the between-block
    /// variance then understates it), so the estimate is taken at this block length and at
    /// each doubling that still leaves [`MIN_BLOCKS`] blocks with requests (batch means), and
    /// the largest is used: conservative where the clustering's reach is not known.
    pub fn design_effect(&self) -> f64 {
        let mut best = design_effect_of(&self.blocks);
        let mut blocks = self.blocks.clone();
        while blocks.iter().filter(|b| b[0] > 0.0).count() >= 2 * MIN_BLOCKS {
            blocks = pairs(&blocks);
            best = best.max(design_effect_of(&blocks));
        }
        best
    }

    /// The dispersion of the blocks' request counts (variance over mean, blocks from the first
    /// to the last with requests): 1 for a Poisson stream; at least 1.
    pub fn count_dispersion(&self) -> f64 {
        let first = self.blocks.iter().position(|b| b[0] > 0.0);
        let last = self.blocks.iter().rposition(|b| b[0] > 0.0);
        let (Some(a), Some(z)) = (first, last) else {
            return 1.0;
        };
        let counts: Vec<f64> = self.blocks[a..=z].iter().map(|b| b[0]).collect();
        if counts.len() < MIN_BLOCKS {
            return 1.0;
        }
        let k = counts.len() as f64;
        let m = counts.iter().sum::<f64>() / k;
        let v = counts.iter().map(|c| (c - m).powi(2)).sum::<f64>() / (k - 1.0);
        if m > 0.0 { (v / m).max(1.0) } else { 1.0 }
    }

    /// Adds the blocks of another part of the same side, block by block when the two are
    /// aligned alike (the same start and length); otherwise appended after this one's.
    pub fn merge(&mut self, o: &Blocks) {
        if o.blocks.is_empty() {
            return;
        }
        if self.blocks.is_empty() {
            *self = o.clone();
            return;
        }
        while self.len_ns < o.len_ns {
            self.halve();
        }
        let mut other = o.clone();
        while other.len_ns < self.len_ns {
            other.halve();
        }
        if other.start_ns == self.start_ns {
            if self.blocks.len() < other.blocks.len() {
                self.blocks.resize(other.blocks.len(), [0.0; 3]);
            }
            for (a, b) in self.blocks.iter_mut().zip(&other.blocks) {
                (0..3).for_each(|k| a[k] += b[k]);
            }
        } else {
            self.blocks.extend(other.blocks);
        }
        while self.blocks.len() > MAX_BLOCKS {
            self.halve();
        }
    }
}

impl From<&Blocks> for report::mergeable::TimeBlocks {
    fn from(b: &Blocks) -> Self {
        report::mergeable::TimeBlocks {
            start_ns: b.start_ns,
            len_ns: b.len_ns,
            blocks: b.blocks.clone(),
        }
    }
}

impl From<&report::mergeable::TimeBlocks> for Blocks {
    fn from(b: &report::mergeable::TimeBlocks) -> Self {
        Blocks {
            start_ns: b.start_ns,
            len_ns: b.len_ns.max(1),
            blocks: b.blocks.iter().take(MAX_BLOCKS * 2).copied().collect(),
        }
    }
}

/// Records the blocks of every event a consumer sees (lazily started at the first).
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    pub blocks: Option<Blocks>,
}

impl Recorder {
    /// One event: its start and its service time, when it has one.
    pub fn record(&mut self, start_ns: u64, service_ns: Option<u64>) {
        if let Some(ns) = service_ns {
            self.blocks
                .get_or_insert_with(|| Blocks::new(start_ns))
                .record(start_ns, ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn independent_requests_have_a_design_effect_near_one() {
        let mut b = Blocks::new(0);
        let mut x = 12345u64;
        for i in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = 50_000 + (x >> 40) % 100_000;
            b.record(i * 50_000, v);
        }
        assert!(b.blocks.len() <= MAX_BLOCKS && b.blocks.len() >= MAX_BLOCKS / 2);
        let d = b.design_effect();
        assert!(d < 2.0, "{d}");
        assert!(b.count_dispersion() < 1.5);
    }

    #[test]
    fn slow_moments_raise_the_design_effect() {
        let mut b = Blocks::new(0);
        for i in 0..20_000u64 {
            // Every other 50 ms the server is three times slower.
            let slow = (i * 50_000 / 50_000_000) % 2 == 1;
            b.record(
                i * 50_000,
                if slow { 300_000 } else { 100_000 } + i % 7 * 1_000,
            );
        }
        assert!(b.design_effect() > 20.0, "{}", b.design_effect());
    }

    #[test]
    fn clustering_longer_than_a_block_is_measured_at_a_longer_length() {
        // 64 blocks of 1 ms; slow spells last 8 ms (8 blocks) and vary within each block.
        let mut b = Blocks::new(0);
        for i in 0..64_000u64 {
            let ts = i * 1_000; // one request per µs
            let spell = (ts / 8_000_000) % 2 == 1;
            let noise = (i * 7919 % 1000) * 200; // up to 200 µs of per-request noise
            b.record(ts, if spell { 400_000 } else { 300_000 } + noise);
        }
        assert_eq!(b.blocks.len(), 64);
        let one_length = design_effect_of(&b.blocks);
        assert!(
            b.design_effect() > 1.5 * one_length,
            "{} vs {one_length}",
            b.design_effect()
        );
    }

    #[test]
    fn merge_of_aligned_parts_equals_one_pass() {
        let (mut one, mut a, mut c) = (Blocks::new(0), Blocks::new(0), Blocks::new(0));
        for i in 0..5_000u64 {
            one.record(i * 100_000, 1_000 + i);
            if i % 2 == 0 { &mut a } else { &mut c }.record(i * 100_000, 1_000 + i);
        }
        a.merge(&c);
        assert_eq!(a.len_ns, one.len_ns);
        for (x, y) in a.blocks.iter().zip(&one.blocks) {
            for k in 0..3 {
                assert!((x[k] - y[k]).abs() <= 1e-6 * y[k].abs().max(1.0));
            }
        }
    }
}
