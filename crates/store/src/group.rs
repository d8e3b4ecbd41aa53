//! `group`: one group over a range: its summary, a series of points with per-point merged
//! percentiles, a service-time heatmap and distribution on coarse log intervals, errors by
//! code, the kept examples and the group's split over the dimensions.

use std::collections::{BTreeMap, HashMap};

use aggregate::Latency;
use rusqlite::Connection;

use crate::answer::{
    DistBucket, ErrorRow, ExampleRow, GroupAnswer, GroupInfo, GroupPoint, GroupSummary, Heatmap,
};
use crate::plan::{max_period, plan, points, round_out, step_for};
use crate::read::{fingerprint, fold_dims, scan_rows, series_info, us};
use crate::row::LatAcc;
use crate::schema::Marks;
use crate::top::Sums;
use crate::{Error, GroupQuery, GroupRef, Store};

/// Interval edges of the heatmap and the distribution, µs: 0, then 1, 2, 5 per decade up to
/// 100 s. The last interval also holds everything slower.
pub fn bounds_us() -> Vec<f64> {
    let mut b = vec![0.0];
    let mut p = 1.0;
    for _ in 0..8 {
        b.extend([p, 2.0 * p, 5.0 * p]);
        p *= 10.0;
    }
    b.push(p);
    b
}

/// Counts of a distribution per interval of `bounds` (histogram buckets placed by their
/// midpoint, raw samples by their value).
fn coarse(acc: &LatAcc, bounds: &[f64]) -> Vec<u64> {
    let n = bounds.len().saturating_sub(1).max(1);
    let mut out = vec![0u64; n];
    let mut put = |v_us: f64, c: u64| {
        let i = bounds
            .partition_point(|&b| b <= v_us)
            .saturating_sub(1)
            .min(n - 1);
        if let Some(slot) = out.get_mut(i) {
            *slot += c;
        }
    };
    let (exact, dense) = acc.parts();
    exact.iter().for_each(|&x| put(x as f64 / 1e3, 1));
    for (i, &c) in dense.unwrap_or(&[]).iter().enumerate() {
        if c > 0
            && let Some((a, b)) = Latency::bucket_range(i as u32)
        {
            put((a as f64 + (b - a) as f64 / 2.0) / 1e3, c);
        }
    }
    out
}

fn point(ts: i64, s: &Sums) -> Result<GroupPoint, Error> {
    let [p50, p95, p99, _] = s.quantiles_us()?;
    Ok(GroupPoint {
        ts,
        count: s.count,
        errors: s.errors,
        p50_us: p50,
        p95_us: p95,
        p99_us: p99,
        bytes_in: s.bytes_in,
        bytes_out: s.bytes_out,
        rows: s.rows,
        service_sum_us: us(s.service.sum_ns()),
    })
}

fn distribution(acc: &LatAcc, bounds: &[f64]) -> Vec<DistBucket> {
    let c = coarse(acc, bounds);
    let (Some(a), Some(z)) = (
        c.iter().position(|&n| n > 0),
        c.iter().rposition(|&n| n > 0),
    ) else {
        return Vec::new();
    };
    (a..=z)
        .map(|i| DistBucket {
            lo_us: bounds.get(i).copied().unwrap_or(0.0),
            hi_us: bounds.get(i + 1).copied().unwrap_or(f64::INFINITY),
            count: c.get(i).copied().unwrap_or(0),
        })
        .collect()
}

/// The examples kept for the group in `[from, to)` (by the hour they were kept for).
fn examples(conn: &Connection, g: &GroupRef, from: i64, to: i64) -> Result<Vec<ExampleRow>, Error> {
    let mut st = conn.prepare_cached(
        "SELECT kind, ts, latency_ns, text, database, user, client, code, message FROM examples \
         WHERE protocol = ?1 AND command = ?2 AND id = ?3 AND ts >= ?4 AND ts < ?5 \
         ORDER BY ts, kind",
    )?;
    let rows = st.query_map(
        rusqlite::params![
            g.protocol,
            g.command,
            g.id,
            from.div_euclid(3600) * 3600,
            to
        ],
        |r| {
            Ok(ExampleRow {
                kind: r.get(0)?,
                ts: r.get(1)?,
                latency_us: r.get::<_, Option<i64>>(2)?.map(|n| n as f64 / 1e3),
                text: r.get(3)?,
                database: r.get(4)?,
                user: r.get(5)?,
                client: r.get(6)?,
                code: r
                    .get::<_, Option<i64>>(7)?
                    .and_then(|c| u32::try_from(c).ok()),
                message: r.get(8)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn summary(s: &Sums) -> Result<GroupSummary, Error> {
    let [p50, p95, p99, max] = s.quantiles_us()?;
    Ok(GroupSummary {
        count: s.count,
        errors: s.errors,
        service_sum_us: us(s.service.sum_ns()),
        p50_us: p50,
        p95_us: p95,
        p99_us: p99,
        max_us: max,
        bytes_in: s.bytes_in,
        bytes_out: s.bytes_out,
        rows: s.rows,
    })
}

impl Store {
    /// One group over a range (see [`GroupQuery`]). Every number comes from the same rows: the
    /// tiers used are at most as long as the step, so each row falls in one point.
    pub fn group(&self, q: &GroupQuery) -> Result<GroupAnswer, Error> {
        let tx = self.conn.unchecked_transaction()?;
        let marks = Marks::load(&tx)?;
        let (from, to) = round_out(q.range.from_s, q.range.to_s);
        let step = step_for(to - from, q.points.clamp(1, crate::MAX_POINTS));
        let (first, n) = points(from, to, step);
        let segs = plan(from, to, &marks, max_period(step));
        let mut pts: Vec<Sums> = vec![Sums::default(); n];
        let mut per_series: HashMap<i64, (u64, u128)> = HashMap::new();
        let mut errors: BTreeMap<u32, u64> = BTreeMap::new();
        scan_rows(
            &tx,
            &segs,
            &q.range.filter,
            Some(&q.group),
            |series, ts, row| {
                let i = usize::try_from((ts - first).div_euclid(step)).unwrap_or(usize::MAX);
                if let Some(p) = pts.get_mut(i) {
                    p.add(&row);
                }
                let e = per_series.entry(series).or_default();
                e.0 += row.count;
                e.1 += row.service.sum_ns();
                for (c, k) in &row.errors_by_code {
                    *errors.entry(*c).or_default() += k;
                }
                Ok(())
            },
        )?;
        let mut all = Sums::default();
        pts.iter().for_each(|p| all.merge(p));
        let bounds = bounds_us();
        let ex = examples(&tx, &q.group, from, to)?;
        let fp = fingerprint(&tx, &q.group)?;
        let series = (0..n)
            .zip(&pts)
            .map(|(i, p)| point(first + i as i64 * step, p))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GroupAnswer {
            from,
            to,
            step_s: step,
            group: GroupInfo {
                protocol: q.group.protocol.clone(),
                command: q.group.command.clone(),
                id: q.group.id.clone(),
                fingerprint: fp.as_ref().map(|f| f.0.clone()).unwrap_or_default(),
                first_seen: fp.as_ref().map(|f| f.1),
                last_seen: fp.as_ref().map(|f| f.2),
            },
            summary: summary(&all)?,
            series,
            heatmap: Heatmap {
                cells: pts.iter().map(|p| coarse(&p.service, &bounds)).collect(),
                bounds_us: bounds.clone(),
            },
            distribution: distribution(&all.service, &bounds),
            errors: errors
                .into_iter()
                .map(|(code, count)| ErrorRow {
                    code,
                    count,
                    message: ex
                        .iter()
                        .find(|e| e.kind == "error" && e.code == Some(code))
                        .map(|e| e.message.clone())
                        .unwrap_or_default(),
                })
                .collect(),
            examples: ex,
            dims: fold_dims(&per_series, &series_info(&tx)?),
        })
    }
}
