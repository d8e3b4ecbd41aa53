//! The fine latency distribution (`--histogram fine`): rows of equal width on a log scale
//! between a group's min and max, made by merging adjacent buckets of the latency histogram, so
//! that a distribution with two modes shows two humps with empty rows between them.
//!
//! The histogram's layout (grouping power 7) splits every power of two into 128 equal
//! (linear) buckets, each at most 0.78% of its lower bound wide. Rows are runs of adjacent
//! buckets, each about `w` times its lower bound wide, with `w` the larger of
//! [`MIN_ROW_RATIO`] and what keeps the rows from the min's to the max's within `max_rows`. Rows
//! never split a bucket, so their counts are exact for the histogram (raw samples are placed in
//! the same buckets) and a row's bounds are within one bucket (0.78%) of the ideal ones.

use crate::Latency;
use crate::latency::{bucket_index, clamp_hist};

/// Rows the text and JSON fine distributions aim at, at most.
pub const FINE_ROWS: usize = 48;
/// Rows are never made narrower than this ratio of their bounds (2%): finer would mostly
/// show noise, and the buckets themselves are up to 0.78% wide.
pub const MIN_ROW_RATIO: f64 = 1.02;

/// One row: latencies in `[ge_ns, lt_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FineRow {
    pub ge_ns: u64,
    pub lt_ns: u64,
    pub count: u64,
}

/// The smallest value in the bucket of index `i` (the inverse of `bucket_index`).
fn bucket_lower(i: u64) -> u64 {
    let p = u64::from(crate::latency::GROUPING_POWER);
    if i < 1 << (p + 1) {
        return i;
    }
    let s = (i >> p) - 1;
    let m = i - (s << p);
    m.checked_shl(s as u32).unwrap_or(u64::MAX)
}

/// Row start indices (bucket indices) from `lo` to `hi` with rows about `w` wide; `None` when
/// that takes more than `max_rows` rows.
fn row_starts(lo: u64, hi: u64, w: f64, max_rows: usize) -> Option<Vec<u64>> {
    let mut starts = vec![lo];
    let mut s = lo;
    loop {
        let target = (bucket_lower(s).max(1) as f64 * w).ceil();
        // The first bucket starting at or above the target: rows at least `w` wide.
        let next = if target >= u64::MAX as f64 {
            u64::MAX
        } else {
            let t = target as u64;
            let i = bucket_index(t) as u64;
            if bucket_lower(i) < t { i + 1 } else { i }
        };
        s = next.max(s + 1);
        if s > hi {
            return Some(starts);
        }
        if starts.len() >= max_rows {
            return None;
        }
        starts.push(s);
    }
}

impl Latency {
    /// The fine distribution: at most `max_rows` rows (at least 1) from the row holding the
    /// min to the row holding the max, empty rows included; empty when nothing was recorded.
    pub fn fine_rows(&self, max_rows: usize) -> Vec<FineRow> {
        let (Some(min), Some(max)) = (self.min_ns(), self.max_ns()) else {
            return Vec::new();
        };
        let lo = bucket_index(clamp_hist(min)) as u64;
        let hi = bucket_index(clamp_hist(max)) as u64;
        let max_rows = max_rows.max(1);
        let span = bucket_lower(hi + 1) as f64 / bucket_lower(lo).max(1) as f64;
        let mut w = span.max(1.0).powf(1.0 / max_rows as f64).max(MIN_ROW_RATIO);
        let starts = loop {
            match row_starts(lo, hi, w, max_rows) {
                Some(v) => break v,
                None if w < 1e18 => w *= 1.01,
                None => break vec![lo],
            }
        };
        let mut counts = vec![0u64; starts.len()];
        self.for_each_bucket(|i, c| {
            let i = (i as u64).clamp(lo, hi);
            let r = starts.partition_point(|&s| s <= i).saturating_sub(1);
            if let Some(x) = counts.get_mut(r) {
                *x += c;
            }
        });
        let ends = starts.iter().skip(1).copied().chain([hi + 1]);
        starts
            .iter()
            .zip(ends)
            .zip(counts)
            .map(|((&s, e), count)| FineRow {
                ge_ns: bucket_lower(s),
                lt_ns: bucket_lower(e),
                count,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_bounds_invert_the_layout() {
        for v in [0u64, 1, 255, 256, 257, 1000, 4_300_000, 25_700_000, 1 << 40] {
            let i = bucket_index(v) as u64;
            assert!(bucket_lower(i) <= v && v < bucket_lower(i + 1), "{v}");
        }
    }

    #[test]
    fn two_modes_two_humps() {
        // 400 at about 4.3 ms, 100 at about 25.7 ms (the example), past the raw cap.
        let mut l = Latency::default();
        for i in 0..500u64 {
            let v = if i % 5 == 4 { 25_700_000 } else { 4_300_000 };
            l.record(v + (i % 7) * 10_000);
        }
        let rows = l.fine_rows(FINE_ROWS);
        assert!(
            rows.len() <= FINE_ROWS && rows.len() >= 20,
            "{}",
            rows.len()
        );
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 500);
        for w in rows.windows(2) {
            assert_eq!(w[0].lt_ns, w[1].ge_ns);
        }
        // Each row a few percent wide (6x over 48 rows: 3.8%, within a bucket's 0.78%); the
        // last one ends at the max's bucket and may be narrower.
        for r in &rows[..rows.len() - 1] {
            let width = (r.lt_ns - r.ge_ns) as f64 / r.ge_ns as f64;
            assert!((0.03..=0.047).contains(&width), "{r:?}");
        }
        let nonempty: Vec<&FineRow> = rows.iter().filter(|r| r.count > 0).collect();
        let fast: u64 = nonempty
            .iter()
            .filter(|r| r.lt_ns <= 5_000_000)
            .map(|r| r.count)
            .sum();
        let slow: u64 = nonempty
            .iter()
            .filter(|r| r.ge_ns >= 25_000_000)
            .map(|r| r.count)
            .sum();
        assert_eq!((fast, slow), (400, 100));
        // Empty rows between the humps.
        let between = rows
            .iter()
            .filter(|r| r.ge_ns >= 5_000_000 && r.lt_ns <= 25_000_000)
            .count();
        assert!(between >= 10, "{between}");
        assert!(
            rows.iter()
                .filter(|r| r.ge_ns >= 5_000_000 && r.lt_ns <= 25_000_000)
                .all(|r| r.count == 0)
        );
    }

    #[test]
    fn exact_and_degenerate() {
        assert!(Latency::default().fine_rows(48).is_empty());
        let mut l = Latency::default();
        l.record(1000);
        let rows = l.fine_rows(48);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].count, 1);
        assert!(rows[0].ge_ns <= 1000 && 1000 < rows[0].lt_ns);
        // A huge range still fits in the row bound.
        l.record(u64::MAX);
        let rows = l.fine_rows(48);
        assert!(rows.len() <= 48);
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 2);
    }
}
