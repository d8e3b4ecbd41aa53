//! Reading the sink's rows back (`dbtap ui --clickhouse`, fetched by `crate::follow` in
//! RowBinary, decoded with checks): the host filter, the read errors, and each distribution
//! turned back into an `aggregate::LatencyState` (bucket midpoints stand for the samples of a
//! distribution of at most 64, as its exact samples are not sent).

use std::collections::BTreeMap;

use aggregate::latency::{EXACT_CAP, GROUPING_POWER, MAX_VALUE_POWER, decade_index};
use aggregate::{Latency, LatencyState};

use crate::http::HttpError;
use crate::row::Dist;

/// Most bytes of one reply (one day of rows).
pub const MAX_READ: usize = 512 << 20;

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `host IN (...)`, or true for every host.
pub fn host_filter(hosts: &[String]) -> String {
    if hosts.is_empty() {
        return "1".into();
    }
    let q: Vec<String> = hosts.iter().map(|h| quote(h)).collect();
    format!("host IN ({})", q.join(", "))
}

/// Why rows did not read.
#[derive(Debug)]
pub enum ReadRowsError {
    Http(HttpError),
    Decode(crate::rowbinary::ReadError),
}

impl std::fmt::Display for ReadRowsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadRowsError::Http(e) => write!(f, "{e}"),
            ReadRowsError::Decode(e) => write!(f, "bad RowBinary from the server: {e}"),
        }
    }
}

impl std::error::Error for ReadRowsError {}

fn midpoint(i: u32) -> Option<u64> {
    Latency::bucket_range(i).map(|(lo, hi)| lo + (hi - lo) / 2)
}

impl Dist {
    /// The distribution as an `aggregate` state: its histogram buckets (buckets past the
    /// histogram are left out), or, for at most 64 samples, their buckets' midpoints as the
    /// samples (within 1/256 of each; the sum is then theirs). Decade counts are the
    /// midpoints'. Never panics on any arrays.
    pub fn state(&self) -> LatencyState {
        let mut pairs: BTreeMap<u32, u64> = BTreeMap::new();
        for (&b, &c) in self.buckets.iter().zip(&self.counts) {
            if c > 0 && midpoint(b).is_some() {
                let e = pairs.entry(b).or_insert(0);
                *e = e.saturating_add(c);
            }
        }
        let count = pairs.values().fold(0u64, |a, &c| a.saturating_add(c));
        let mut s = LatencyState {
            grouping_power: GROUPING_POWER,
            max_value_power: MAX_VALUE_POWER,
            ..LatencyState::default()
        };
        if count == 0 {
            return s;
        }
        s.count = count;
        for (&b, &c) in &pairs {
            let slot = &mut s.decades[decade_index(midpoint(b).unwrap_or(0))];
            *slot = slot.saturating_add(c);
        }
        if count as usize <= EXACT_CAP {
            let v: Vec<u64> = pairs
                .iter()
                .flat_map(|(&b, &c)| std::iter::repeat_n(midpoint(b).unwrap_or(0), c as usize))
                .collect();
            s.sum_ns = v.iter().map(|&x| u128::from(x)).sum();
            s.min_ns = v.first().copied();
            s.max_ns = v.last().copied();
            s.exact = Some(v);
        } else {
            let lo = pairs.keys().next().and_then(|&b| midpoint(b));
            let hi = pairs.keys().next_back().and_then(|&b| midpoint(b));
            let exact = self.min_ns <= self.max_ns && self.max_ns > 0;
            s.sum_ns = u128::from(self.sum_ns);
            s.min_ns = if exact { Some(self.min_ns) } else { lo };
            s.max_ns = if exact { Some(self.max_ns) } else { hi };
            s.buckets = pairs.into_iter().collect();
        }
        s
    }
}
