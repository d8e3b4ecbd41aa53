//! Following the minute table (`dbtap ui --clickhouse`): the rows of a moving window (the last
//! `range` before the newest row of the chosen hosts), read again incrementally. Each refresh
//! asks for the row count of every minute in the window (one small grouped query), compares it
//! with the rows already read, and fetches only the minutes whose count grew, without the
//! `(minute, batch)` pairs already read. A batch is one atomic insert (`docs/clickhouse.md`), so
//! it is seen whole or not at all. Bounded: at most `max_rows` rows held; past it, the oldest
//! minutes that grew are left out, counted, and never read later.

use std::collections::{BTreeMap, BTreeSet};

use crate::http::{Timeouts, Url, post_bytes};
use crate::read::{MAX_READ, ReadRowsError, host_filter};
use crate::row::Row;
use crate::rowbinary::Reader;
use crate::schema::COLUMNS;

/// Most `(minute, batch)` pairs excluded in one query (bounds its text).
const MAX_PAIRS: usize = 20_000;
/// Most minutes read in one query.
const MAX_MINUTES: usize = 1_440;

/// What one minute of the window holds on our side.
#[derive(Clone, Debug, Default)]
struct Seen {
    rows: u64,
    batches: BTreeSet<u64>,
    /// Left out (the row cap): never read, its growth counted as left out.
    left_out: bool,
}

/// The follower's counters, for the UI's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// The window: unix seconds, `from` inclusive, `to` exclusive (0, 0 before any row).
    pub from: i64,
    pub to: i64,
    /// Rows read and held (within the window), and rows left out by the row cap.
    pub rows_held: u64,
    pub rows_left_out: u64,
    pub minutes_left_out: u64,
    /// Rows the server holds in the window (as of the last refresh).
    pub rows_in_window: u64,
    /// Refreshes done, and the rows the last one read.
    pub refreshes: u64,
    pub last_rows: u64,
}

/// The moving window over one table and set of hosts.
pub struct Follow {
    url: Url,
    table: String,
    hosts: Vec<String>,
    range_s: i64,
    max_rows: u64,
    minutes: BTreeMap<i64, Seen>,
    stats: FollowStats,
}

impl Follow {
    pub fn new(url: Url, table: &str, hosts: Vec<String>, range_s: i64, max_rows: u64) -> Self {
        Follow {
            url,
            table: table.to_string(),
            hosts,
            range_s: range_s.max(60),
            max_rows: max_rows.max(1),
            minutes: BTreeMap::new(),
            stats: FollowStats::default(),
        }
    }

    pub fn stats(&self) -> &FollowStats {
        &self.stats
    }

    /// Rows per minute in the window on the server, ordered by minute.
    fn counts(&self) -> Result<Vec<(i64, u64)>, ReadRowsError> {
        let hf = host_filter(&self.hosts);
        let q = format!(
            "SELECT toUInt32(ts), count() FROM {t} WHERE {hf} AND ts >= \
             (SELECT max(ts) FROM {t} WHERE {hf}) - {r} GROUP BY ts ORDER BY ts \
             FORMAT TabSeparated",
            t = self.table,
            r = self.range_s - 60,
        );
        let body = post_bytes(&self.url, &[], q.as_bytes(), Timeouts::default(), 64 << 20)
            .map_err(ReadRowsError::Http)?;
        Ok(parse_counts(&body))
    }

    /// One refresh: the new rows of the window (ordered by minute). On an error nothing is
    /// marked read, so the next refresh asks again.
    pub fn refresh(&mut self) -> Result<Vec<Row>, ReadRowsError> {
        let counts = self.counts()?;
        let Some(&(newest, _)) = counts.last() else {
            return Ok(Vec::new());
        };
        let from = newest + 60 - self.range_s;
        self.forget_before(from);
        let grown = self.grown(&counts);
        let mut rows = Vec::new();
        for chunk in chunks(&grown, &self.minutes) {
            let got = self.read(&chunk)?;
            rows.extend(got);
        }
        rows.sort_by_key(|r| r.ts);
        for r in &rows {
            let s = self.minutes.entry(i64::from(r.ts)).or_default();
            s.rows += 1;
            s.batches.insert(r.batch);
        }
        self.stats.rows_held = self.held();
        self.stats.rows_in_window = counts.iter().map(|c| c.1).sum();
        self.stats.from = from;
        self.stats.to = newest + 60;
        self.stats.refreshes += 1;
        self.stats.last_rows = rows.len() as u64;
        Ok(rows)
    }

    /// Rows read and held (left-out minutes are not).
    fn held(&self) -> u64 {
        self.minutes
            .values()
            .filter(|s| !s.left_out)
            .map(|s| s.rows)
            .sum()
    }

    fn forget_before(&mut self, from: i64) {
        self.minutes = self.minutes.split_off(&from);
    }

    /// The minutes whose count grew, newest kept first when the row cap is reached (the
    /// older ones are marked left out and counted).
    fn grown(&mut self, counts: &[(i64, u64)]) -> Vec<i64> {
        let mut held = self.held();
        let mut grown = Vec::new();
        for &(m, n) in counts.iter().rev() {
            let s = self.minutes.entry(m).or_default();
            if n <= s.rows {
                continue;
            }
            let more = n - s.rows;
            if s.left_out {
                self.stats.rows_left_out += more;
                s.rows = n;
                continue;
            }
            if held.saturating_add(more) > self.max_rows {
                s.left_out = true;
                self.stats.rows_left_out += more;
                self.stats.minutes_left_out += 1;
                // Later growth is measured from here (`held` leaves it out).
                s.rows = n;
                continue;
            }
            held += more;
            grown.push(m);
        }
        grown.reverse();
        grown
    }

    /// The rows of these minutes not yet read.
    fn read(&self, minutes: &[i64]) -> Result<Vec<Row>, ReadRowsError> {
        let (Some(&lo), Some(&hi)) = (minutes.first(), minutes.last()) else {
            return Ok(Vec::new());
        };
        let cols: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
        let list: Vec<String> = minutes.iter().map(|m| m.to_string()).collect();
        let mut pairs = Vec::new();
        for m in minutes {
            if let Some(s) = self.minutes.get(m) {
                pairs.extend(s.batches.iter().map(|b| format!("({m}, {b})")));
            }
        }
        let not_read = if pairs.is_empty() {
            String::new()
        } else {
            format!(" AND (toUInt32(ts), batch) NOT IN ({})", pairs.join(", "))
        };
        let q = format!(
            "SELECT {} FROM {} WHERE {} AND ts >= toDateTime({lo}) AND ts <= toDateTime({hi}) \
             AND toUInt32(ts) IN ({}){not_read} FORMAT RowBinary",
            cols.join(", "),
            self.table,
            host_filter(&self.hosts),
            list.join(", "),
        );
        let t = Timeouts {
            io: std::time::Duration::from_secs(300),
            ..Timeouts::default()
        };
        // The excluded pairs can pass the default 256 KiB bound on a query's text; only then
        // is the bound raised (a `readonly=1` user may not change settings).
        let big: &[(&str, &str)] = &[("max_query_size", "33554432")];
        let params = if q.len() > 250_000 { big } else { &[] };
        let body = post_bytes(&self.url, params, q.as_bytes(), t, MAX_READ)
            .map_err(ReadRowsError::Http)?;
        let mut r = Reader::new(&body);
        let mut rows = Vec::new();
        while !r.is_empty() {
            let row = Row::decode(&mut r).map_err(ReadRowsError::Decode)?;
            // Belt and braces: a pair already read is never imported twice.
            let seen = self
                .minutes
                .get(&i64::from(row.ts))
                .is_some_and(|s| s.batches.contains(&row.batch));
            if !seen {
                rows.push(row);
            }
        }
        Ok(rows)
    }
}

/// `minute<TAB>count` lines (the server's TabSeparated); lines that do not parse are skipped.
fn parse_counts(body: &[u8]) -> Vec<(i64, u64)> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| {
            let (a, b) = l.split_once('\t')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect()
}

/// Minutes cut into queries: one day at most, and few enough excluded pairs.
fn chunks(minutes: &[i64], seen: &BTreeMap<i64, Seen>) -> Vec<Vec<i64>> {
    let mut out: Vec<Vec<i64>> = Vec::new();
    let mut cur: Vec<i64> = Vec::new();
    let mut pairs = 0usize;
    for &m in minutes {
        let n = seen.get(&m).map_or(0, |s| s.batches.len());
        let day_changed = cur.first().is_some_and(|&f| f / 86_400 != m / 86_400);
        if !cur.is_empty() && (day_changed || cur.len() >= MAX_MINUTES || pairs + n > MAX_PAIRS) {
            out.push(std::mem::take(&mut cur));
            pairs = 0;
        }
        cur.push(m);
        pairs += n;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow(max_rows: u64) -> Follow {
        let url = Url::parse("http://127.0.0.1:1/").expect("url");
        Follow::new(url, "t", Vec::new(), 3_600, max_rows)
    }

    #[test]
    fn only_grown_minutes_are_read_and_the_cap_leaves_the_oldest_out() {
        let mut f = follow(10);
        let g = f.grown(&[(60, 3), (120, 4), (180, 5)]);
        // Newest first under the cap: 180 (5) and 120 (4) fit, 60 (3) does not.
        assert_eq!(g, vec![120, 180]);
        assert_eq!((f.stats.rows_left_out, f.stats.minutes_left_out), (3, 1));
        f.minutes.entry(120).or_default().rows = 4;
        f.minutes.entry(180).or_default().rows = 5;
        // 180 grew by 1 (fits: 9 + 1), the left-out minute grew by 2 (counted, not read).
        let g = f.grown(&[(60, 5), (120, 4), (180, 6)]);
        assert_eq!(g, vec![180]);
        assert_eq!((f.stats.rows_left_out, f.stats.minutes_left_out), (5, 1));
    }

    #[test]
    fn chunks_split_by_day_and_pairs() {
        let mut seen = BTreeMap::new();
        let s = Seen {
            rows: 1,
            batches: (0..MAX_PAIRS as u64 - 1).collect(),
            left_out: false,
        };
        seen.insert(120, s);
        let two = Seen {
            rows: 2,
            batches: [1, 2].into(),
            left_out: false,
        };
        seen.insert(180, two);
        let c = chunks(&[60, 120, 180, 86_400, 86_460], &seen);
        assert_eq!(c, vec![vec![60, 120], vec![180], vec![86_400, 86_460]]);
        assert!(chunks(&[], &seen).is_empty());
    }

    #[test]
    fn counts_parse() {
        let got = parse_counts(b"60\t3\n120\t4\nbad\n180\tx\n-1\t2\n");
        assert_eq!(got, vec![(60, 3), (120, 4), (-1, 2)]);
    }

    proptest::proptest! {
        #[test]
        fn counts_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_counts(&body);
        }

        #[test]
        fn the_cap_is_kept(counts in proptest::collection::vec(0u64..50, 1..40), cap in 1u64..400) {
            let mut f = follow(cap);
            let c: Vec<(i64, u64)> = counts.iter().enumerate().map(|(i, &n)| (i as i64 * 60, n)).collect();
            let grown = f.grown(&c);
            let read: u64 = grown.iter().map(|m| c[(*m / 60) as usize].1).sum();
            proptest::prop_assert!(read <= cap);
            let total: u64 = counts.iter().sum();
            proptest::prop_assert_eq!(read + f.stats.rows_left_out, total);
        }
    }

    #[test]
    fn forgetting_keeps_the_window() {
        let mut f = follow(100);
        for m in [60, 120, 180] {
            f.minutes.entry(m).or_default().rows = 1;
        }
        f.forget_before(120);
        assert_eq!(
            f.minutes.keys().copied().collect::<Vec<_>>(),
            vec![120, 180]
        );
    }
}
