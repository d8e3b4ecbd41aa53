//! Latency distribution: exact for small groups, a mergeable log-linear histogram for large ones.
//!
//! Most fingerprint groups in real traffic see a handful of executions, so a group keeps its first
//! [`EXACT_CAP`] samples as raw values (exact percentiles, 8 bytes each). Past that it switches to
//! a [`histogram::Histogram`] with grouping power [`GROUPING_POWER`] (7): every bucket is at most
//! 1/128 of its lower bound wide, and a percentile is reported as its bucket's midpoint, so the
//! relative error is at most 1/256 (~0.39%), well inside the 1% the reports promise. Whether a
//! distribution is exact or bucketed depends only on how many samples it holds, so merging two
//! distributions gives exactly the state that recording all their samples into one would.

use histogram::Histogram;

pub mod state;

pub use state::{LatencyState, StateError};

/// Histogram grouping power: buckets are at most 2^-7 (0.78%) of their lower bound wide.
pub const GROUPING_POWER: u8 = 7;
/// Largest value the histogram holds is 2^44 - 1 ns (about 4.9 hours); longer latencies are
/// clamped into the top bucket for percentiles (min, max and sum stay exact).
pub const MAX_VALUE_POWER: u8 = 44;
/// Samples kept raw before switching to the histogram.
pub const EXACT_CAP: usize = 64;

/// Labels of the log10 latency buckets, as pt-query-digest draws its "Query_time distribution".
/// Bucket `i` (0-based) holds latencies in `[10^(i+3), 10^(i+4))` ns; the first also holds anything
/// below 1 µs and the last everything from 10 s up.
pub const DECADE_LABELS: [&str; 8] = ["1us", "10us", "100us", "1ms", "10ms", "100ms", "1s", "10s+"];

/// The lower bounds of the decade buckets from the second one (10 µs) up, ns.
const FROM_SECOND: [u64; 7] = [
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
];

/// For each `k` in `0..64`, `(n, b)` such that a value in `[2^k, 2^(k+1))` reaches `n` of
/// [`FROM_SECOND`], plus one when it is at least `b`: `b` is the bound strictly inside that
/// range (at most one, the bounds being ten times apart). Without one, `b` is 0 and `n` one
/// less (every value counts it), or `u64::MAX` below the first bound (no value there reaches
/// it).
const DECADE_STEPS: [(u8, u64); 64] = decade_steps();

const fn decade_steps() -> [(u8, u64); 64] {
    let mut t = [(0u8, u64::MAX); 64];
    let mut k = 0;
    while k < 64 {
        let lo = 1u128 << k;
        let (mut below, mut inside) = (0u8, None);
        let mut i = 0;
        while i < FROM_SECOND.len() {
            let b = FROM_SECOND[i] as u128;
            if b <= lo {
                below += 1;
            } else if b < lo << 1 {
                inside = Some(FROM_SECOND[i]);
            }
            i += 1;
        }
        t[k] = match inside {
            Some(b) => (below, b),
            None if below > 0 => (below - 1, 0),
            None => (0, u64::MAX),
        };
        k += 1;
    }
    t
}

/// Index into [`DECADE_LABELS`] for a latency in nanoseconds: how many of the buckets' lower
/// bounds from 10 µs up it reaches. Branch-free, from the power of two below `ns`: the bounds
/// under it, plus one when `ns` reaches the bound inside its power of two.
#[inline]
pub fn decade_index(ns: u64) -> usize {
    let k = (63 - (ns | 1).leading_zeros()) as usize;
    let (below, inside) = DECADE_STEPS[k & 63];
    usize::from(below) + usize::from(ns >= inside)
}

#[derive(Clone, Debug)]
enum Samples {
    Exact(Vec<u64>),
    Hist(Histogram),
}

/// Latency statistics of a set of events, in nanoseconds. Count, sum, min, max and the decade
/// counts are exact; percentiles are exact up to [`EXACT_CAP`] samples and within 0.4% after.
#[derive(Clone, Debug)]
pub struct Latency {
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    decades: [u64; 8],
    samples: Samples,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
            decades: [0; 8],
            samples: Samples::Exact(Vec::new()),
        }
    }
}

fn new_histogram() -> Option<Histogram> {
    Histogram::new(GROUPING_POWER, MAX_VALUE_POWER).ok()
}

pub(crate) fn clamp_hist(ns: u64) -> u64 {
    ns.min((1u64 << MAX_VALUE_POWER) - 1)
}

impl Latency {
    /// Records one latency in nanoseconds. Inlined into the caller (two per event in each of
    /// two `Stats`), but for the first [`EXACT_CAP`] samples.
    #[inline(always)]
    pub fn record(&mut self, ns: u64) {
        self.count += 1;
        self.sum += u128::from(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        if let Some(d) = self.decades.get_mut(decade_index(ns)) {
            *d += 1;
        }
        match &mut self.samples {
            Samples::Hist(h) => {
                let _ = h.increment(clamp_hist(ns));
            }
            Samples::Exact(_) => self.record_exact(ns),
        }
    }

    /// [`record`](Latency::record)'s sample while the samples are kept raw.
    #[inline(never)]
    fn record_exact(&mut self, ns: u64) {
        if let Samples::Exact(v) = &mut self.samples {
            v.push(ns);
            if v.len() > EXACT_CAP {
                self.densify();
            }
        }
    }

    /// Switches to the histogram representation (no-op if already there).
    fn densify(&mut self) {
        if let Samples::Exact(v) = &self.samples {
            // Histogram::new cannot fail for our constant parameters; if it ever did, the
            // samples simply stay exact.
            if let Some(mut h) = new_histogram() {
                for &x in v {
                    let _ = h.increment(clamp_hist(x));
                }
                self.samples = Samples::Hist(h);
            }
        }
    }

    /// Adds another distribution to this one. Exact: the result equals recording both sample
    /// sets into one distribution.
    pub fn merge(&mut self, o: &Latency) {
        if o.count == 0 {
            return;
        }
        self.count += o.count;
        self.sum += o.sum;
        self.min = self.min.min(o.min);
        self.max = self.max.max(o.max);
        for (a, b) in self.decades.iter_mut().zip(o.decades.iter()) {
            *a += b;
        }
        if let (Samples::Exact(a), Samples::Exact(b)) = (&mut self.samples, &o.samples)
            && a.len() + b.len() <= EXACT_CAP
        {
            a.extend_from_slice(b);
            return;
        }
        self.densify();
        match (&mut self.samples, &o.samples) {
            (Samples::Hist(h), Samples::Exact(b)) => {
                for &x in b {
                    let _ = h.increment(clamp_hist(x));
                }
            }
            (Samples::Hist(h), Samples::Hist(g)) => {
                // Same configuration on both sides: add bucket-wise.
                for (a, b) in h.as_mut_slice().iter_mut().zip(g.as_slice()) {
                    *a = a.wrapping_add(*b);
                }
            }
            // Only reachable if the histogram could not be created: keep exact samples.
            (Samples::Exact(a), Samples::Exact(b)) => a.extend_from_slice(b),
            (Samples::Exact(a), Samples::Hist(g)) => {
                for bucket in g.iter() {
                    let mid = bucket.start() + (bucket.end() - bucket.start()) / 2;
                    for _ in 0..bucket.count() {
                        a.push(mid);
                    }
                }
            }
        }
    }

    /// Number of latencies recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of all latencies, ns.
    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    /// Smallest latency, ns.
    pub fn min_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.min)
    }

    /// Largest latency, ns.
    pub fn max_ns(&self) -> Option<u64> {
        (self.count > 0).then_some(self.max)
    }

    /// Arithmetic mean, ns.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / self.count as f64)
    }

    /// Counts per log10 bucket, labelled by [`DECADE_LABELS`].
    pub fn decades(&self) -> &[u64; 8] {
        &self.decades
    }

    /// Number of latencies at or below `ns` (what a Prometheus histogram bucket `le` counts).
    ///
    /// Exact while the raw samples are kept. From the histogram it is bucket-granular: it counts
    /// every bucket that starts at or below `ns`, so samples just above `ns` that share its bucket
    /// (at most 1/128 of `ns` above it, 0.78%) are counted too. Counting only buckets that *end* at
    /// or below `ns` would instead miss the samples of that bucket just below `ns`, by the same
    /// margin; this side is chosen because it makes the count never decrease as samples are
    /// recorded or merged, including at the switch from raw samples to the histogram (a sample
    /// counted exactly stays counted), which exported counters rely on. Latencies above the
    /// histogram's range sit in its top bucket, which starts far above any practical bound.
    pub fn count_le(&self, ns: u64) -> u64 {
        match &self.samples {
            Samples::Exact(v) => v.iter().filter(|&&x| x <= ns).count() as u64,
            Samples::Hist(h) => {
                let counts = h.as_slice();
                let end = bucket_index(ns).saturating_add(1).min(counts.len());
                counts[..end].iter().sum()
            }
        }
    }

    /// Calls `f(index, count)` for every non-empty bucket of the histogram layout (see
    /// `bucket_index`), raw samples placed in their bucket: for the fine distribution.
    pub(crate) fn for_each_bucket(&self, mut f: impl FnMut(usize, u64)) {
        match &self.samples {
            Samples::Exact(v) => v.iter().for_each(|&x| f(bucket_index(clamp_hist(x)), 1)),
            Samples::Hist(h) => h
                .as_slice()
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .for_each(|(i, &c)| f(i, c)),
        }
    }

    /// True while percentiles are computed from the raw samples.
    pub fn is_exact(&self) -> bool {
        matches!(self.samples, Samples::Exact(_))
    }

    /// One quantile (`q` in `0.0..=1.0`), nearest rank: the value at rank `ceil(q * n)`.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        self.quantiles_ns([q])[0]
    }

    /// Several quantiles at once (nearest rank, `q` in `0.0..=1.0`; others give `None`).
    /// From the histogram, the value is the midpoint of the bucket holding that rank, clamped to
    /// the exact min and max.
    pub fn quantiles_ns<const N: usize>(&self, qs: [f64; N]) -> [Option<u64>; N] {
        let mut out = [None; N];
        if self.count == 0 {
            return out;
        }
        match &self.samples {
            Samples::Exact(v) => {
                let mut sorted = v.clone();
                sorted.sort_unstable();
                for (o, q) in out.iter_mut().zip(qs) {
                    if (0.0..=1.0).contains(&q) {
                        *o = sorted.get(nearest_rank(q, sorted.len()) - 1).copied();
                    }
                }
            }
            Samples::Hist(h) => {
                for (o, q) in out.iter_mut().zip(qs) {
                    if let Ok(Some(b)) = h.quantile_bucket(q) {
                        let mid = b.start() + (b.end() - b.start()) / 2;
                        *o = Some(mid.clamp(self.min, self.max));
                    }
                }
            }
        }
        out
    }
}

/// Index of the histogram bucket holding `ns` (buckets of [`GROUPING_POWER`]: values below
/// 2^(p+1) have one bucket each, then each power of two splits into 2^p equal buckets). This is
/// the bucket layout of `histogram::Config` that `as_slice` exposes; a test checks it against the
/// buckets the histogram reports. Values past the top bucket give an index past the end.
pub(crate) fn bucket_index(ns: u64) -> usize {
    let p = u32::from(GROUPING_POWER);
    if ns < 1u64 << (p + 1) {
        return ns as usize;
    }
    let s = (63 - ns.leading_zeros()) - p;
    (((s as u64) << p) + (ns >> s)) as usize
}

/// 1-based nearest rank for quantile `q` of `n` sorted values: `ceil(q * n)` clamped to `1..=n`.
pub fn nearest_rank(q: f64, n: usize) -> usize {
    let r = (q * n as f64).ceil();
    if r < 1.0 {
        1
    } else if r >= n as f64 {
        n.max(1)
    } else {
        r as usize
    }
}

impl PartialEq for Latency {
    /// Equal when they hold the same samples (in any order) and the same totals.
    fn eq(&self, o: &Self) -> bool {
        if self.count != o.count
            || self.sum != o.sum
            || self.min_ns() != o.min_ns()
            || self.max_ns() != o.max_ns()
            || self.decades != o.decades
        {
            return false;
        }
        match (&self.samples, &o.samples) {
            (Samples::Exact(a), Samples::Exact(b)) => {
                let (mut a, mut b) = (a.clone(), b.clone());
                a.sort_unstable();
                b.sort_unstable();
                a == b
            }
            (Samples::Hist(a), Samples::Hist(b)) => a.as_slice() == b.as_slice(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decades() {
        assert_eq!(decade_index(0), 0);
        assert_eq!(decade_index(9_999), 0);
        assert_eq!(decade_index(10_000), 1);
        assert_eq!(decade_index(999_999), 2);
        assert_eq!(decade_index(1_000_000), 3);
        assert_eq!(decade_index(9_999_999_999), 6);
        assert_eq!(decade_index(10_000_000_000), 7);
        assert_eq!(decade_index(u64::MAX), 7);
        // The table lookup counts the bounds reached, as a plain count does: at, next to and
        // between every bound and power of two.
        let counted = |ns: u64| FROM_SECOND.iter().filter(|&&b| ns >= b).count();
        let mut probes = vec![0, 1, 2, 3, u64::MAX - 1, u64::MAX];
        for v in FROM_SECOND
            .iter()
            .copied()
            .chain((0..64).map(|k| 1u64 << k))
        {
            probes.extend([v - 1, v, v + 1, v.saturating_mul(3) / 2]);
        }
        for ns in probes {
            assert_eq!(decade_index(ns), counted(ns), "{ns}");
        }
        // Against the loop it replaced, around every power of ten.
        let by_loop = |ns: u64| {
            let (mut bound, mut i) = (10_000u64, 0);
            while i < DECADE_LABELS.len() - 1 && ns >= bound {
                bound = bound.saturating_mul(10);
                i += 1;
            }
            i
        };
        for p in 0..20u32 {
            let t = 10u64.pow(p);
            for ns in [t - 1, t, t + 1, t.saturating_mul(5)] {
                assert_eq!(decade_index(ns), by_loop(ns), "{ns}");
            }
        }
    }

    #[test]
    fn switches_to_histogram_past_cap() {
        let mut l = Latency::default();
        for i in 0..EXACT_CAP as u64 {
            l.record(1000 + i);
        }
        assert!(l.is_exact());
        l.record(5);
        assert!(!l.is_exact());
        assert_eq!(l.count(), EXACT_CAP as u64 + 1);
        assert_eq!(l.min_ns(), Some(5));
    }

    #[test]
    fn huge_latency_is_clamped_not_lost() {
        let mut l = Latency::default();
        for _ in 0..100 {
            l.record(u64::MAX);
        }
        assert_eq!(l.max_ns(), Some(u64::MAX));
        assert_eq!(l.sum_ns(), u128::from(u64::MAX) * 100);
        assert!(l.quantile_ns(0.99).is_some());
    }

    #[test]
    fn empty() {
        let l = Latency::default();
        assert_eq!(l.quantiles_ns([0.5, 0.99]), [None, None]);
        assert_eq!(l.mean_ns(), None);
        assert_eq!(l.min_ns(), None);
    }

    #[test]
    fn bucket_index_matches_histogram_layout() {
        let h = new_histogram().unwrap();
        for (i, b) in h.iter().enumerate() {
            assert_eq!(bucket_index(b.start()), i, "{b:?}");
            assert_eq!(bucket_index(b.end()), i, "{b:?}");
        }
        assert!(bucket_index(u64::MAX) >= h.as_slice().len());
    }

    #[test]
    fn count_le_exact_then_bucketed() {
        let mut l = Latency::default();
        assert_eq!(l.count_le(u64::MAX), 0);
        for v in [10, 99_900, 100_000, 100_001, 5_000_000] {
            l.record(v);
        }
        assert!(l.is_exact());
        assert_eq!(l.count_le(9), 0);
        assert_eq!(l.count_le(10), 1);
        assert_eq!(l.count_le(100_000), 3);
        assert_eq!(l.count_le(u64::MAX), 5);
        // Past the cap: 100_000 sits in the bucket [99_840, 100_351], so 100_001 is counted too.
        let mut prev = l.count_le(100_000);
        for _ in 0..EXACT_CAP {
            l.record(7);
            let now = l.count_le(100_000);
            assert!(now >= prev, "count_le decreased: {prev} -> {now}");
            prev = now;
        }
        assert!(!l.is_exact());
        assert_eq!(l.count_le(100_000), EXACT_CAP as u64 + 4);
        assert_eq!(l.count_le(99_839), EXACT_CAP as u64 + 1);
        assert_eq!(l.count_le(10), EXACT_CAP as u64 + 1);
        assert_eq!(l.count_le(6), 0);
        assert_eq!(l.count_le(u64::MAX), l.count());
    }

    #[test]
    fn count_le_never_decreases_across_the_switch() {
        // A sample just below a bound is counted exactly before the switch and must stay counted.
        let bounds = [100_000u64, 250_000, 1_000_000, 2_500_000_000];
        let mut l = Latency::default();
        let mut prev = [0u64; 4];
        for i in 0..200u64 {
            l.record(bounds[(i % 4) as usize] - (i % 7));
            l.record(u64::MAX);
            for (b, p) in bounds.iter().zip(prev.iter_mut()) {
                let now = l.count_le(*b);
                assert!(now >= *p && now <= l.count());
                *p = now;
            }
        }
        assert_eq!(l.count_le(u64::MAX), l.count());
    }

    #[test]
    fn ranks() {
        assert_eq!(nearest_rank(0.0, 5), 1);
        assert_eq!(nearest_rank(0.5, 5), 3);
        assert_eq!(nearest_rank(0.95, 5), 5);
        assert_eq!(nearest_rank(1.0, 5), 5);
        assert_eq!(nearest_rank(0.99, 100), 99);
    }
}
