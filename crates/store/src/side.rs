//! `side`: a range of the store as one side of `dbtap diff`, its groups keyed as diff keys them
//! (protocol, command, id) with their exact merged service and response distributions.
//!
//! Time blocks: the side's requests are cut into blocks of one "step" (the first of 1, 2, 5,
//! 10, 15, 30 minutes, 1, 2, 3, 6, 12 hours or whole days giving at most 16 blocks over the
//! range), each the merge of the stored rows starting in it (the tiers read are never longer
//! than the step, so every row falls in one block). A block's `[count, Σ ln, Σ ln²]` of service
//! times is exact for rows that keep raw samples (up to 64 per row) and uses each histogram
//! bucket's midpoint otherwise (within 0.4% of every sample, so each ln within 0.004). The
//! design effect and count dispersion `diff` derives from them are those of minutes-to-hours
//! blocks instead of the millisecond blocks of a capture: they catch slow spells and bursts
//! that last at least a block; shorter clustering is not seen.

use std::collections::BTreeMap;

use aggregate::Latency;
use diff::blocks::{Blocks, MAX_BLOCKS};
use diff::side::GroupData;
use diff::{Key, Side};

use crate::plan::{max_period, plan, points, round_out, step_for};
use crate::read::{fingerprint, scan_rows, series_info, span_in};
use crate::row::{LatAcc, Row};
use crate::schema::Marks;
use crate::{Error, GroupRef, RangeQuery, Store};

/// Blocks wanted over a side's range at most (each is one step).
const BLOCKS: usize = 16;

#[derive(Default)]
struct Acc {
    count: u64,
    errors: u64,
    service: LatAcc,
    response: LatAcc,
}

impl Acc {
    fn add(&mut self, r: &Row) {
        self.count += r.count;
        self.errors += r.errors;
        self.service.merge(&r.service);
        self.response.merge(&r.latency);
    }

    fn data(&self, fingerprint: String) -> Result<GroupData, Error> {
        Ok(GroupData {
            fingerprint,
            count: self.count,
            errors: self.errors,
            service: self.service.latency()?,
            response: self.response.latency()?,
        })
    }
}

/// `[count, Σ ln, Σ ln²]` of a block's service times (see the module doc).
fn block_sums(acc: &LatAcc) -> [f64; 3] {
    let mut s = [0.0; 3];
    let mut add = |ns: f64, c: f64| {
        let l = ns.max(1.0).ln();
        s[0] += c;
        s[1] += c * l;
        s[2] += c * l * l;
    };
    let (exact, dense) = acc.parts();
    exact.iter().for_each(|&x| add(x as f64, 1.0));
    for (i, &c) in dense.unwrap_or(&[]).iter().enumerate() {
        if c > 0
            && let Some((a, b)) = Latency::bucket_range(i as u32)
        {
            add(a as f64 + (b - a) as f64 / 2.0, c as f64);
        }
    }
    s
}

impl Store {
    /// A range as one side of `dbtap diff` (`diff::compare` of two of them is what `/api/compare`
    /// answers). The side's span is the range clipped to the store's data.
    pub fn side(&self, q: &RangeQuery, label: &str) -> Result<Side, Error> {
        let tx = self.conn.unchecked_transaction()?;
        let marks = Marks::load(&tx)?;
        let (mut from, mut to) = round_out(q.from_s, q.to_s);
        if let Some((a, b)) = span_in(&tx)? {
            from = from.max(a);
            to = to.min(b).max(from);
        }
        let step = step_for(to - from, BLOCKS);
        let (first, n) = points(from, to, step);
        let segs = plan(from, to, &marks, max_period(step));
        let info = series_info(&tx)?;
        let mut groups: BTreeMap<GroupRef, Acc> = BTreeMap::new();
        let mut totals = Acc::default();
        let mut blocks = vec![LatAcc::default(); n];
        scan_rows(&tx, &segs, &q.filter, None, |series, ts, row| {
            if let Some(k) = info.get(&series) {
                groups.entry(k.group()).or_default().add(&row);
            }
            totals.add(&row);
            let i = usize::try_from((ts - first).div_euclid(step)).unwrap_or(usize::MAX);
            if let Some(b) = blocks.get_mut(i) {
                b.merge(&row.service);
            }
            Ok(())
        })?;
        let mut out = BTreeMap::new();
        for (g, acc) in &groups {
            let fp = fingerprint(&tx, g)?.map(|f| f.0).unwrap_or_default();
            let key = Key {
                protocol: g.protocol.clone(),
                command: g.command.clone(),
                id: g.id.clone(),
            };
            out.insert(key, acc.data(fp)?);
        }
        let blocks = if totals.count > 0 && n > 0 && n <= MAX_BLOCKS {
            Blocks {
                start_ns: u64::try_from(first)
                    .unwrap_or(0)
                    .saturating_mul(1_000_000_000),
                len_ns: u64::try_from(step)
                    .unwrap_or(60)
                    .saturating_mul(1_000_000_000),
                blocks: blocks.iter().map(block_sums).collect(),
            }
        } else {
            Blocks::default()
        };
        Ok(Side {
            label: label.to_string(),
            span_ns: Some(
                u64::try_from(to - from)
                    .unwrap_or(0)
                    .saturating_mul(1_000_000_000),
            ),
            complete: true,
            groups: out,
            totals: totals.data(String::new())?,
            blocks,
        })
    }
}
