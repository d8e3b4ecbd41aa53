//! The exact, mergeable state of a [`Latency`] as plain data: what the JSON digest carries
//! (`--mergeable`) so that `dbtap diff` and other readers rebuild the very same distribution.

use super::{
    EXACT_CAP, GROUPING_POWER, Latency, MAX_VALUE_POWER, Samples, bucket_index, decade_index,
    new_histogram,
};

/// A [`Latency`] as data. `exact` holds the raw samples while the distribution keeps them (at
/// most [`EXACT_CAP`]); otherwise `buckets` holds the non-empty histogram buckets as
/// `(index, count)` pairs in index order, for a histogram of `grouping_power` and
/// `max_value_power`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyState {
    pub count: u64,
    pub sum_ns: u128,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub decades: [u64; 8],
    pub exact: Option<Vec<u64>>,
    pub grouping_power: u8,
    pub max_value_power: u8,
    pub buckets: Vec<(u32, u64)>,
}

/// Why a [`LatencyState`] could not be rebuilt into a [`Latency`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    /// Another histogram configuration than this build's.
    Config {
        grouping_power: u8,
        max_value_power: u8,
    },
    /// A bucket index past the histogram.
    Bucket(u32),
    /// Counts that do not add up (samples or buckets vs `count`, decades vs `count`, min/max).
    Inconsistent(&'static str),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Config {
                grouping_power,
                max_value_power,
            } => write!(
                f,
                "histogram grouping power {grouping_power} / max value power {max_value_power} \
                 (this dbtap uses {GROUPING_POWER} / {MAX_VALUE_POWER})"
            ),
            StateError::Bucket(i) => write!(f, "histogram bucket index {i} out of range"),
            StateError::Inconsistent(what) => write!(f, "inconsistent latency state: {what}"),
        }
    }
}

impl std::error::Error for StateError {}

impl Latency {
    /// This distribution as data (see [`LatencyState`]).
    pub fn state(&self) -> LatencyState {
        let (exact, buckets) = match &self.samples {
            Samples::Exact(v) => {
                let mut v = v.clone();
                v.sort_unstable();
                (Some(v), Vec::new())
            }
            Samples::Hist(h) => {
                let b = h
                    .as_slice()
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, c)| (i as u32, *c))
                    .collect();
                (None, b)
            }
        };
        LatencyState {
            count: self.count,
            sum_ns: self.sum,
            min_ns: self.min_ns(),
            max_ns: self.max_ns(),
            decades: self.decades,
            exact,
            grouping_power: GROUPING_POWER,
            max_value_power: MAX_VALUE_POWER,
            buckets,
        }
    }

    /// Rebuilds the distribution [`Latency::state`] described: equal to the original (same
    /// percentiles, same merges). Checks that the parts agree; never panics on any input.
    pub fn from_state(s: &LatencyState) -> Result<Latency, StateError> {
        let decades_sum = s.decades.iter().try_fold(0u64, |a, &d| a.checked_add(d));
        if decades_sum != Some(s.count) {
            return Err(StateError::Inconsistent("decades do not add up to count"));
        }
        let (min, max) = match (s.count, s.min_ns, s.max_ns) {
            (0, _, _) => (u64::MAX, 0),
            (_, Some(a), Some(b)) if a <= b => (a, b),
            _ => return Err(StateError::Inconsistent("min/max")),
        };
        let samples = match &s.exact {
            Some(v) => {
                if v.len() as u64 != s.count || v.len() > EXACT_CAP {
                    return Err(StateError::Inconsistent("exact samples vs count"));
                }
                if s.count > 0 && (v.iter().min() != Some(&min) || v.iter().max() != Some(&max)) {
                    return Err(StateError::Inconsistent("exact samples vs min/max"));
                }
                let mut d = [0u64; 8];
                v.iter().for_each(|&x| d[decade_index(x)] += 1);
                if d != s.decades || v.iter().map(|&x| u128::from(x)).sum::<u128>() != s.sum_ns {
                    return Err(StateError::Inconsistent("exact samples vs decades/sum"));
                }
                Samples::Exact(v.clone())
            }
            None => Samples::Hist(histogram_of(s)?),
        };
        Ok(Latency {
            count: s.count,
            sum: s.sum_ns,
            min,
            max,
            decades: s.decades,
            samples,
        })
    }

    /// The histogram bucket counts of this distribution, `(index, count)` in index order; raw
    /// samples are binned the way the histogram would bin them. Two distributions' buckets are
    /// directly comparable (one layout): what two-sample tests on binned data need.
    pub fn bucket_counts(&self) -> Vec<(u32, u64)> {
        match &self.samples {
            Samples::Hist(_) => self.state().buckets,
            Samples::Exact(v) => {
                let mut idx: Vec<u32> = v
                    .iter()
                    .map(|&x| bucket_index(super::clamp_hist(x)) as u32)
                    .collect();
                idx.sort_unstable();
                let mut out: Vec<(u32, u64)> = Vec::new();
                for i in idx {
                    match out.last_mut() {
                        Some((j, c)) if *j == i => *c += 1,
                        _ => out.push((i, 1)),
                    }
                }
                out
            }
        }
    }

    /// The value range `[start, end]` (ns) of histogram bucket `index` (the inverse of the
    /// bucket layout [`bucket_index`] describes); `None` past the histogram's range.
    pub fn bucket_range(index: u32) -> Option<(u64, u64)> {
        let p = u32::from(GROUPING_POWER);
        let s = (index >> p).saturating_sub(1);
        if s + p + 1 > u32::from(MAX_VALUE_POWER) {
            return None;
        }
        let q = u64::from(index) - (u64::from(s) << p);
        Some((q << s, ((q + 1) << s) - 1))
    }
}

fn histogram_of(s: &LatencyState) -> Result<histogram::Histogram, StateError> {
    if s.grouping_power != GROUPING_POWER || s.max_value_power != MAX_VALUE_POWER {
        return Err(StateError::Config {
            grouping_power: s.grouping_power,
            max_value_power: s.max_value_power,
        });
    }
    let mut h = new_histogram().ok_or(StateError::Inconsistent("no histogram"))?;
    let slots = h.as_mut_slice();
    let mut total = 0u64;
    let mut last: Option<u32> = None;
    for &(i, c) in &s.buckets {
        if last.is_some_and(|l| l >= i) {
            return Err(StateError::Inconsistent("buckets not in index order"));
        }
        last = Some(i);
        let slot = slots.get_mut(i as usize).ok_or(StateError::Bucket(i))?;
        *slot = c;
        total = total
            .checked_add(c)
            .ok_or(StateError::Inconsistent("bucket counts overflow"))?;
    }
    if total != s.count || (s.count > 0 && (s.count as usize) <= EXACT_CAP) {
        return Err(StateError::Inconsistent("bucket counts vs count"));
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lat(values: impl IntoIterator<Item = u64>) -> Latency {
        let mut l = Latency::default();
        values.into_iter().for_each(|v| l.record(v));
        l
    }

    fn qs(l: &Latency) -> [Option<u64>; 5] {
        l.quantiles_ns([0.0, 0.5, 0.95, 0.99, 1.0])
    }

    #[test]
    fn round_trips_exact_and_bucketed() {
        let small = lat([5, 1_000, 20_000, 7]);
        let big = lat((0..5_000u64).map(|i| i * i % 9_999_991 + 300));
        let huge = lat([u64::MAX; 100]);
        for l in [Latency::default(), small, big, huge] {
            let back = Latency::from_state(&l.state()).unwrap();
            assert_eq!(back, l);
            assert_eq!(qs(&back), qs(&l));
            assert_eq!(back.is_exact(), l.is_exact());
            assert_eq!(back.bucket_counts(), l.bucket_counts());
        }
    }

    #[test]
    fn merges_of_rebuilt_states_equal_merges_of_originals() {
        let parts = [
            lat([10, 20, 30]),
            lat((0..50u64).map(|i| 1_000 + i * 37)),
            lat((0..400u64).map(|i| 50_000 + i * i)),
        ];
        for a in &parts {
            for b in &parts {
                let mut want = a.clone();
                want.merge(b);
                let mut got = Latency::from_state(&a.state()).unwrap();
                got.merge(&Latency::from_state(&b.state()).unwrap());
                assert_eq!(got, want);
                assert_eq!(qs(&got), qs(&want));
            }
        }
    }

    #[test]
    fn bucket_counts_of_exact_samples_match_the_histogram() {
        let values: Vec<u64> = (0..60u64).map(|i| 100 + i * i * 1_000).collect();
        let exact = lat(values.iter().copied());
        assert!(exact.is_exact());
        let mut forced = lat(values.iter().copied());
        forced.densify();
        assert!(!forced.is_exact());
        assert_eq!(exact.bucket_counts(), forced.bucket_counts());
        for (i, _) in exact.bucket_counts() {
            let (a, b) = Latency::bucket_range(i).unwrap();
            assert!(values.iter().any(|&v| v >= a && v <= b));
        }
    }

    #[test]
    fn bucket_ranges_match_the_histogram() {
        let h = new_histogram().unwrap();
        let mut n = 0;
        for (i, b) in h.iter().enumerate() {
            assert_eq!(
                Latency::bucket_range(i as u32),
                Some((b.start(), b.end())),
                "{i}"
            );
            n += 1;
        }
        assert_eq!(Latency::bucket_range(n), None);
        assert_eq!(Latency::bucket_range(u32::MAX), None);
    }

    #[test]
    fn rejects_inconsistent_states_without_panicking() {
        let l = lat((0..500u64).map(|i| i * 1_000 + 1));
        let good = l.state();
        let mut bad = good.clone();
        bad.count += 1;
        assert!(Latency::from_state(&bad).is_err());
        let mut bad = good.clone();
        bad.buckets.push((u32::MAX, 1));
        bad.decades[0] += 1;
        bad.count += 1;
        assert!(Latency::from_state(&bad).is_err());
        let mut bad = good.clone();
        bad.grouping_power = 3;
        assert!(matches!(
            Latency::from_state(&bad),
            Err(StateError::Config { .. })
        ));
        let mut bad = lat([1, 2, 3]).state();
        bad.exact = Some(vec![1, 2, 4]);
        assert!(Latency::from_state(&bad).is_err());
        let mut bad = good;
        bad.buckets.reverse();
        assert!(Latency::from_state(&bad).is_err());
    }
}
