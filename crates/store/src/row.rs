//! One stored row in memory: the counters of a (series, period) and its two distributions as
//! exact accumulators ([`LatAcc`]) that merge many stored states without building a histogram
//! per row, and give back exactly the state one [`aggregate::Latency`] fed every sample holds.

use std::collections::BTreeMap;

use aggregate::latency::{EXACT_CAP, GROUPING_POWER, MAX_VALUE_POWER};
use aggregate::{Latency, LatencyState, StateError, Stats};

use crate::Error;
use crate::codec::{decode_errors, decode_latency, encode_errors, encode_latency};

/// The histogram bucket of a raw sample (the layout of [`Latency::bucket_counts`]).
fn bucket_of(ns: u64) -> usize {
    let ns = ns.min((1u64 << MAX_VALUE_POWER) - 1);
    let p = u32::from(GROUPING_POWER);
    if ns < 1u64 << (p + 1) {
        return ns as usize;
    }
    let s = (63 - ns.leading_zeros()) - p;
    (((s as u64) << p) + (ns >> s)) as usize
}

/// An exact, mergeable distribution under construction: raw samples while the total count is at
/// most [`EXACT_CAP`], dense bucket counts after (as [`Latency`] itself switches).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LatAcc {
    count: u64,
    sum: u128,
    min: Option<u64>,
    max: Option<u64>,
    decades: [u64; 8],
    exact: Vec<u64>,
    /// Bucket counts by index, once past the raw samples.
    dense: Option<Vec<u64>>,
}

impl LatAcc {
    pub fn of(s: &LatencyState) -> Result<LatAcc, Error> {
        let mut a = LatAcc::default();
        a.add(s)?;
        Ok(a)
    }

    fn bump(dense: &mut Vec<u64>, i: usize, c: u64) {
        if dense.len() <= i {
            dense.resize(i + 1, 0);
        }
        if let Some(slot) = dense.get_mut(i) {
            *slot = slot.wrapping_add(c);
        }
    }

    fn densify(&mut self) -> &mut Vec<u64> {
        let exact = std::mem::take(&mut self.exact);
        let dense = self.dense.get_or_insert_with(Vec::new);
        for x in exact {
            Self::bump(dense, bucket_of(x), 1);
        }
        dense
    }

    fn add_totals(
        &mut self,
        count: u64,
        sum: u128,
        min: Option<u64>,
        max: Option<u64>,
        decades: &[u64; 8],
    ) {
        self.count = self.count.saturating_add(count);
        self.sum = self.sum.saturating_add(sum);
        self.min = match (self.min, min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.max = self.max.max(max);
        for (a, b) in self.decades.iter_mut().zip(decades) {
            *a = a.saturating_add(*b);
        }
    }

    fn add_samples(&mut self, v: &[u64]) {
        if self.dense.is_none() && self.exact.len() + v.len() <= EXACT_CAP {
            self.exact.extend_from_slice(v);
        } else {
            let d = self.densify();
            v.iter().for_each(|&x| Self::bump(d, bucket_of(x), 1));
        }
    }

    /// Adds a stored state (checked against this build's histogram configuration).
    pub fn add(&mut self, s: &LatencyState) -> Result<(), Error> {
        if s.count == 0 {
            return Ok(());
        }
        if s.exact.is_none()
            && (s.grouping_power != GROUPING_POWER || s.max_value_power != MAX_VALUE_POWER)
        {
            return Err(Error::State(StateError::Config {
                grouping_power: s.grouping_power,
                max_value_power: s.max_value_power,
            }));
        }
        self.add_totals(s.count, s.sum_ns, s.min_ns, s.max_ns, &s.decades);
        match &s.exact {
            Some(v) => self.add_samples(v),
            None => {
                let d = self.densify();
                for &(i, c) in &s.buckets {
                    Self::bump(d, i as usize, c);
                }
            }
        }
        Ok(())
    }

    /// Adds another accumulator.
    pub fn merge(&mut self, o: &LatAcc) {
        if o.count == 0 {
            return;
        }
        self.add_totals(o.count, o.sum, o.min, o.max, &o.decades);
        match &o.dense {
            None => self.add_samples(&o.exact),
            Some(od) => {
                let d = self.densify();
                if d.len() < od.len() {
                    d.resize(od.len(), 0);
                }
                for (a, b) in d.iter_mut().zip(od) {
                    *a = a.wrapping_add(*b);
                }
            }
        }
    }

    /// Raw samples (while exact) or `(bucket index, count)` pairs.
    pub fn parts(&self) -> (&[u64], Option<&[u64]>) {
        (&self.exact, self.dense.as_deref())
    }

    pub fn sum_ns(&self) -> u128 {
        self.sum
    }

    pub fn min_ns(&self) -> Option<u64> {
        self.min
    }

    pub fn max_ns(&self) -> Option<u64> {
        self.max
    }

    /// The accumulated distribution as data.
    pub fn state(&self) -> LatencyState {
        let (exact, buckets) = match &self.dense {
            None => {
                let mut v = self.exact.clone();
                v.sort_unstable();
                (Some(v), Vec::new())
            }
            Some(d) => (
                None,
                d.iter()
                    .enumerate()
                    .filter(|(_, c)| **c > 0)
                    .map(|(i, &c)| (i as u32, c))
                    .collect(),
            ),
        };
        LatencyState {
            count: self.count,
            sum_ns: self.sum,
            min_ns: self.min,
            max_ns: self.max,
            decades: self.decades,
            exact,
            grouping_power: GROUPING_POWER,
            max_value_power: MAX_VALUE_POWER,
            buckets,
        }
    }

    /// The accumulated distribution (checked).
    pub fn latency(&self) -> Result<Latency, Error> {
        Ok(Latency::from_state(&self.state())?)
    }
}

fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The counters and distributions of one (series, period).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Row {
    pub count: u64,
    pub ok: u64,
    pub errors: u64,
    pub no_response: u64,
    pub incomplete: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub service: LatAcc,
    pub latency: LatAcc,
    /// Error code to count.
    pub errors_by_code: BTreeMap<u32, u64>,
}

impl Row {
    pub fn of(s: &Stats) -> Result<Row, Error> {
        let mut errors_by_code = BTreeMap::new();
        for e in s.errors_by_code.sorted() {
            *errors_by_code.entry(e.code).or_insert(0) += e.count;
        }
        Ok(Row {
            count: s.count,
            ok: s.ok,
            errors: s.errors,
            no_response: s.no_response,
            incomplete: s.incomplete,
            bytes_in: sat(s.bytes_in.sum),
            bytes_out: sat(s.bytes_out.sum),
            rows_sent: sat(s.rows_sent.sum),
            rows_affected: sat(s.rows_affected.sum),
            service: LatAcc::of(&s.service.state())?,
            latency: LatAcc::of(&s.latency.state())?,
            errors_by_code,
        })
    }

    pub fn merge(&mut self, o: &Row) {
        self.count = self.count.saturating_add(o.count);
        self.ok = self.ok.saturating_add(o.ok);
        self.errors = self.errors.saturating_add(o.errors);
        self.no_response = self.no_response.saturating_add(o.no_response);
        self.incomplete = self.incomplete.saturating_add(o.incomplete);
        self.bytes_in = self.bytes_in.saturating_add(o.bytes_in);
        self.bytes_out = self.bytes_out.saturating_add(o.bytes_out);
        self.rows_sent = self.rows_sent.saturating_add(o.rows_sent);
        self.rows_affected = self.rows_affected.saturating_add(o.rows_affected);
        self.service.merge(&o.service);
        self.latency.merge(&o.latency);
        for (&c, &n) in &o.errors_by_code {
            let e = self.errors_by_code.entry(c).or_insert(0);
            *e = e.saturating_add(n);
        }
    }
}

/// The columns of a tier table after `ts, series`, in order.
pub(crate) const COLUMNS: &str = "count, ok, errors, no_response, incomplete, service_sum_ns, \
     latency_sum_ns, service_min_ns, service_max_ns, bytes_in, bytes_out, rows_sent, \
     rows_affected, service, latency, errors_by_code";

fn i(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Row {
    /// The row's values for [`COLUMNS`].
    pub fn values(&self) -> ([i64; 13], [Vec<u8>; 3]) {
        let errs: Vec<(u32, u64)> = self.errors_by_code.iter().map(|(&c, &n)| (c, n)).collect();
        (
            [
                i(self.count),
                i(self.ok),
                i(self.errors),
                i(self.no_response),
                i(self.incomplete),
                i(sat(self.service.sum_ns())),
                i(sat(self.latency.sum_ns())),
                i(self.service.min_ns().unwrap_or(0)),
                i(self.service.max_ns().unwrap_or(0)),
                i(self.bytes_in),
                i(self.bytes_out),
                i(self.rows_sent),
                i(self.rows_affected),
            ],
            [
                encode_latency(&self.service.state()),
                encode_latency(&self.latency.state()),
                encode_errors(&errs),
            ],
        )
    }

    /// A row read from [`COLUMNS`] starting at column `at` of `r`.
    pub fn read(r: &rusqlite::Row, at: usize) -> Result<Row, Error> {
        let g = |k: usize| -> Result<u64, Error> { Ok(u(r.get::<_, i64>(at + k)?)) };
        let blob = |k: usize| -> Result<Vec<u8>, Error> { Ok(r.get::<_, Vec<u8>>(at + k)?) };
        Ok(Row {
            count: g(0)?,
            ok: g(1)?,
            errors: g(2)?,
            no_response: g(3)?,
            incomplete: g(4)?,
            bytes_in: g(9)?,
            bytes_out: g(10)?,
            rows_sent: g(11)?,
            rows_affected: g(12)?,
            service: LatAcc::of(&decode_latency(&blob(13)?)?)?,
            latency: LatAcc::of(&decode_latency(&blob(14)?)?)?,
            errors_by_code: decode_errors(&blob(15)?)?.into_iter().collect(),
        })
    }
}
