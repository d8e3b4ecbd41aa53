//! `top`: the groups of a range ranked by load, count, p99 or errors, each with its exact merged
//! percentiles and a sparkline of its load; the sparklines of all rows come from one query
//! grouped by series and step.

use std::collections::HashMap;

use crate::answer::{TopAnswer, TopRow, Totals};
use crate::plan::{DAY, max_period, plan, points, round_out, step_for};
use crate::read::{each, fingerprint, scan_rows, series_info, union_sql, us};
use crate::row::{LatAcc, Row};
use crate::schema::Marks;
use crate::{Error, GroupRef, SortBy, Store, TopQuery};

/// The sums of a group (or a series point) over a range.
#[derive(Clone, Debug, Default)]
pub(crate) struct Sums {
    pub count: u64,
    pub errors: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows: u64,
    pub service: LatAcc,
}

impl Sums {
    pub fn add(&mut self, r: &Row) {
        self.count += r.count;
        self.errors += r.errors;
        self.bytes_in = self.bytes_in.saturating_add(r.bytes_in);
        self.bytes_out = self.bytes_out.saturating_add(r.bytes_out);
        self.rows = self
            .rows
            .saturating_add(r.rows_sent)
            .saturating_add(r.rows_affected);
        self.service.merge(&r.service);
    }

    pub fn merge(&mut self, o: &Sums) {
        self.count += o.count;
        self.errors += o.errors;
        self.bytes_in = self.bytes_in.saturating_add(o.bytes_in);
        self.bytes_out = self.bytes_out.saturating_add(o.bytes_out);
        self.rows = self.rows.saturating_add(o.rows);
        self.service.merge(&o.service);
    }

    /// p50, p95, p99 and max of service time, µs.
    pub fn quantiles_us(&self) -> Result<[Option<f64>; 4], Error> {
        let l = self.service.latency()?;
        let [a, b, c] = l.quantiles_ns([0.5, 0.95, 0.99]);
        let f = |v: Option<u64>| v.map(|n| n as f64 / 1_000.0);
        Ok([f(a), f(b), f(c), f(l.max_ns())])
    }
}

fn rank(sort: SortBy, r: &TopRow) -> f64 {
    match sort {
        SortBy::Load => r.service_sum_us,
        SortBy::Count => r.count as f64,
        SortBy::P99 => r.p99_us.unwrap_or(-1.0),
        SortBy::Errors => r.errors as f64,
    }
}

impl Store {
    /// The groups of a range, ranked (see [`TopQuery`]).
    pub fn top(&self, q: &TopQuery) -> Result<TopAnswer, Error> {
        let tx = self.conn.unchecked_transaction()?;
        let marks = Marks::load(&tx)?;
        let (from, to) = round_out(q.range.from_s, q.range.to_s);
        let secs = (to - from).max(1) as f64;
        let info = series_info(&tx)?;
        let mut groups: HashMap<GroupRef, Sums> = HashMap::new();
        let (mut count, mut errors, mut service_ns) = (0u64, 0u64, 0u128);
        let segs = plan(from, to, &marks, DAY);
        scan_rows(&tx, &segs, &q.range.filter, None, |series, _, row| {
            if let Some(k) = info.get(&series) {
                groups.entry(k.group()).or_default().add(&row);
            }
            count += row.count;
            errors += row.errors;
            service_ns += row.service.sum_ns();
            Ok(())
        })?;
        let step = step_for(to - from, q.spark_points.clamp(1, crate::MAX_POINTS));
        let (first, n) = points(from, to, step);
        let sparks = self.sparks(&tx, &marks, q, step, first, n, &info)?;
        let total_us = us(service_ns);
        let mut rows = Vec::with_capacity(groups.len());
        for (g, s) in groups {
            let [p50, p95, p99, max] = s.quantiles_us()?;
            let service_sum_us = us(s.service.sum_ns());
            rows.push(TopRow {
                spark: sparks.get(&g).cloned().unwrap_or_else(|| vec![0.0; n]),
                protocol: g.protocol,
                command: g.command,
                id: g.id,
                fingerprint: String::new(),
                count: s.count,
                errors: s.errors,
                service_sum_us,
                load: service_sum_us / 1e6 / secs,
                share: if total_us > 0.0 {
                    service_sum_us / total_us
                } else {
                    0.0
                },
                p50_us: p50,
                p95_us: p95,
                p99_us: p99,
                max_us: max,
                bytes_in: s.bytes_in,
                bytes_out: s.bytes_out,
                rows: s.rows,
            });
        }
        rows.sort_by(|a, b| {
            rank(q.sort, b)
                .total_cmp(&rank(q.sort, a))
                .then(b.service_sum_us.total_cmp(&a.service_sum_us))
                .then_with(|| {
                    (&a.protocol, &a.command, &a.id).cmp(&(&b.protocol, &b.command, &b.id))
                })
        });
        let limit = if q.limit == 0 { rows.len() } else { q.limit };
        let omitted = rows.len().saturating_sub(limit) as u64;
        rows.truncate(limit);
        for r in &mut rows {
            let g = GroupRef {
                protocol: r.protocol.clone(),
                command: r.command.clone(),
                id: r.id.clone(),
            };
            r.fingerprint = fingerprint(&tx, &g)?.map(|f| f.0).unwrap_or_default();
        }
        Ok(TopAnswer {
            from,
            to,
            step_s: step,
            totals: Totals {
                count,
                errors,
                service_sum_us: total_us,
                load: total_us / 1e6 / secs,
            },
            groups: rows,
            omitted,
        })
    }

    /// Load per step of every group: one query summing service time by series and step.
    #[allow(clippy::too_many_arguments)]
    fn sparks(
        &self,
        tx: &rusqlite::Connection,
        marks: &Marks,
        q: &TopQuery,
        step: i64,
        first: i64,
        n: usize,
        info: &HashMap<i64, crate::SeriesKey>,
    ) -> Result<HashMap<GroupRef, Vec<f64>>, Error> {
        let (from, to) = round_out(q.range.from_s, q.range.to_s);
        let segs = plan(from, to, marks, max_period(step));
        let (sql, params) = union_sql(
            &segs,
            &format!("r.series AS series, (r.ts - {first}) / {step} AS b, r.service_sum_ns AS v"),
            &q.range.filter,
            None,
        );
        let mut out: HashMap<GroupRef, Vec<f64>> = HashMap::new();
        if sql.is_empty() {
            return Ok(out);
        }
        let sql = format!("SELECT series, b, sum(v) FROM ({sql}) GROUP BY series, b");
        each(tx, &sql, &params, |r| {
            let (series, b, v): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let Some(k) = info.get(&series) else {
                return Ok(());
            };
            let spark = out.entry(k.group()).or_insert_with(|| vec![0.0; n]);
            if let Some(p) = usize::try_from(b).ok().and_then(|b| spark.get_mut(b)) {
                *p += v.max(0) as f64 / 1e9 / step as f64;
            }
            Ok(())
        })?;
        Ok(out)
    }
}
