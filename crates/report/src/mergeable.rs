//! The `mergeable` block of the JSON digest (`dbtap digest --format json --mergeable`): each
//! group's and the totals' latency distributions in their exact, mergeable form, so that
//! `dbtap diff` (or any reader) rebuilds the very same [`Latency`] from a saved digest.

use aggregate::{Aggregator, Latency, LatencyState, StateError};
use serde::{Deserialize, Serialize};

use crate::json::Report;
use crate::{ReportOptions, ranked};

/// Response and service time distributions of one group (or of all events).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mergeable {
    /// Response time (first request byte to last response byte).
    pub response: LatencyJson,
    /// Service time (what the digest ranks by).
    pub service: LatencyJson,
    /// Totals only: the capture's requests in time blocks (how alike the requests of one
    /// moment are), which `dbtap diff` turns into a design effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<TimeBlocks>,
}

/// Consecutive blocks of `len_ns` from `start_ns`: per block `[count, sum of ln(service ns),
/// sum of its squares]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeBlocks {
    pub start_ns: u64,
    pub len_ns: u64,
    pub blocks: Vec<[f64; 3]>,
}

/// One distribution, in nanoseconds: exact counters, the log10 decade counts, and either the
/// raw samples (`exact`, while the distribution keeps them) or the non-empty histogram buckets
/// (`buckets`, `[index, count]` pairs in index order, for `grouping_power` and
/// `max_value_power`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyJson {
    pub count: u64,
    /// Sum of the values, ns, as a decimal string (it may exceed 2^64).
    pub sum_ns: String,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub decades: [u64; 8],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exact: Option<Vec<u64>>,
    pub grouping_power: u8,
    pub max_value_power: u8,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<(u32, u64)>,
}

impl From<&Latency> for LatencyJson {
    fn from(l: &Latency) -> Self {
        let s = l.state();
        LatencyJson {
            count: s.count,
            sum_ns: s.sum_ns.to_string(),
            min_ns: s.min_ns,
            max_ns: s.max_ns,
            decades: s.decades,
            exact: s.exact,
            grouping_power: s.grouping_power,
            max_value_power: s.max_value_power,
            buckets: s.buckets,
        }
    }
}

impl LatencyJson {
    /// Rebuilds the distribution exactly.
    pub fn to_latency(&self) -> Result<Latency, StateError> {
        let sum_ns = self
            .sum_ns
            .parse::<u128>()
            .map_err(|_| StateError::Inconsistent("sum_ns is not a whole number"))?;
        Latency::from_state(&LatencyState {
            count: self.count,
            sum_ns,
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            decades: self.decades,
            exact: self.exact.clone(),
            grouping_power: self.grouping_power,
            max_value_power: self.max_value_power,
            buckets: self.buckets.clone(),
        })
    }
}

impl Mergeable {
    pub fn of(s: &aggregate::Stats) -> Mergeable {
        Mergeable {
            response: (&s.latency).into(),
            service: (&s.service).into(),
            blocks: None,
        }
    }
}

/// Fills the `mergeable` block of the totals (with `blocks`) and of every group listed in
/// `report` (built by [`crate::json::build`] from the same `agg` and `opts`).
pub fn attach(
    report: &mut Report,
    agg: &Aggregator,
    opts: &ReportOptions,
    blocks: Option<TimeBlocks>,
) {
    report.totals.stats.mergeable = Some(Mergeable {
        blocks,
        ..Mergeable::of(&agg.totals().stats)
    });
    for (q, g) in report.queries.iter_mut().zip(ranked(agg, opts.order_by)) {
        q.stats.mergeable = Some(Mergeable::of(&g.stats));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_rebuilds_the_same_distribution() {
        let mut big = Latency::default();
        (0..3_000u64).for_each(|i| big.record(i * 7_919 % 1_000_003 + 250));
        big.record(u64::MAX);
        big.record(u64::MAX);
        let mut small = Latency::default();
        [3, 9_000, 12].iter().for_each(|&v| small.record(v));
        for l in [big, small, Latency::default()] {
            let text = serde_json::to_string(&LatencyJson::from(&l)).unwrap();
            let back: LatencyJson = serde_json::from_str(&text).unwrap();
            let r = back.to_latency().unwrap();
            assert_eq!(r, l);
            let q = [0.5, 0.95, 0.99, 1.0];
            assert_eq!(r.quantiles_ns(q), l.quantiles_ns(q));
        }
    }
}
