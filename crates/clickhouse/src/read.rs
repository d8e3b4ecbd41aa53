//! Reading the sink's rows back (`dbtap ui --clickhouse`): the minute table's rows of a time
//! range and a set of hosts, fetched in RowBinary (checked decoding of the server's bytes), and
//! each distribution turned back into an `aggregate::LatencyState` (bucket midpoints stand for
//! the samples of a distribution of at most 64, as its exact samples are not sent).

use std::collections::BTreeMap;

use aggregate::latency::{EXACT_CAP, GROUPING_POWER, MAX_VALUE_POWER, decade_index};
use aggregate::{Latency, LatencyState};

use crate::http::{HttpError, Timeouts, Url, post, post_bytes};
use crate::row::{Dist, Row};
use crate::rowbinary::Reader;
use crate::schema::COLUMNS;

/// Most bytes of one reply (one day of rows).
pub const MAX_READ: usize = 512 << 20;

/// A host's first and last minute in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostSpan {
    pub host: String,
    pub first: i64,
    pub last: i64,
}

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

/// The hosts of `table` (those of `hosts`, or all) with their spans, by name.
pub fn host_spans(url: &Url, table: &str, hosts: &[String]) -> Result<Vec<HostSpan>, HttpError> {
    let q = format!(
        "SELECT host, toUInt32(min(ts)), toUInt32(max(ts)) FROM {table} WHERE {} \
         GROUP BY host ORDER BY host FORMAT TabSeparated",
        host_filter(hosts)
    );
    let out = post(url, &[("query", &q)], b"", Timeouts::default())?;
    let mut v = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [h, a, b] = f.as_slice()
            && let (Ok(a), Ok(b)) = (a.parse(), b.parse())
        {
            v.push(HostSpan {
                host: h.to_string(),
                first: a,
                last: b,
            });
        }
    }
    Ok(v)
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

/// The rows of `[from, to)` (unix seconds) of the hosts (or all), ordered by minute.
pub fn read_rows(
    url: &Url,
    table: &str,
    hosts: &[String],
    from: i64,
    to: i64,
) -> Result<Vec<Row>, ReadRowsError> {
    let cols: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    let q = format!(
        "SELECT {} FROM {table} WHERE {} AND ts >= toDateTime({from}) AND ts < toDateTime({to}) \
         ORDER BY ts FORMAT RowBinary",
        cols.join(", "),
        host_filter(hosts)
    );
    let t = Timeouts {
        io: std::time::Duration::from_secs(300),
        ..Timeouts::default()
    };
    let body = post_bytes(url, &[("query", &q)], b"", t, MAX_READ).map_err(ReadRowsError::Http)?;
    let mut r = Reader::new(&body);
    let mut rows = Vec::new();
    while !r.is_empty() {
        rows.push(Row::decode(&mut r).map_err(ReadRowsError::Decode)?);
    }
    Ok(rows)
}

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
