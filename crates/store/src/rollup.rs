//! Exact rollups: hour rows are the merge of their minute rows, written once a minute of a
//! later hour arrives; day rows the merge of their hour rows, once an hour of a later day is
//! rolled up. A minute written for an hour (or day) already rolled up is merged into that hour
//! (and day) row as well, so every tier always holds the merge of all minutes written.

use std::collections::BTreeMap;

use rusqlite::{Transaction, params};

use crate::Error;
use crate::row::{COLUMNS, Row};
use crate::schema::Marks;
use crate::write::merge_into;

const HOUR: i64 = 3_600;
const DAY: i64 = 86_400;

/// Merges a late minute's rows (`rows` by series) into the hour and day rows already rolled up.
/// Rows written.
pub fn late(
    tx: &Transaction,
    marks: &Marks,
    minute: i64,
    rows: &BTreeMap<i64, Row>,
) -> Result<u64, Error> {
    let mut n = 0;
    for (table, period, done) in [("h1", HOUR, marks.hours_done), ("d1", DAY, marks.days_done)] {
        if done.is_some_and(|d| minute < d) {
            let ts = minute.div_euclid(period) * period;
            for (&series, row) in rows {
                merge_into(tx, table, series, ts, row)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Rolls up every hour before `upto` (an hour start) not yet rolled up, then the days those
/// complete. The first call only sets the marks. Rows written.
pub fn advance(tx: &Transaction, marks: &mut Marks, upto: i64) -> Result<u64, Error> {
    let Some(done) = marks.hours_done else {
        marks.hours_done = Some(upto);
        marks.days_done = Some(upto.div_euclid(DAY) * DAY);
        return Ok(0);
    };
    let mut n = 0;
    if upto > done {
        n += roll(tx, "m1", "h1", HOUR, done, upto)?;
        marks.hours_done = Some(upto);
    }
    n += advance_days(tx, marks, upto.div_euclid(DAY) * DAY)?;
    Ok(n)
}

/// Rolls up every day before `upto` (a day start, at most the hours rolled up) not yet rolled
/// up. Rows written.
pub fn advance_days(tx: &Transaction, marks: &mut Marks, upto: i64) -> Result<u64, Error> {
    let upto = upto.min(marks.hours_done.unwrap_or(i64::MIN));
    let Some(done) = marks.days_done else {
        return Ok(0);
    };
    if upto <= done {
        return Ok(0);
    }
    let n = roll(tx, "h1", "d1", DAY, done, upto)?;
    marks.days_done = Some(upto);
    Ok(n)
}

/// Merges the rows of `from` with ts in `[a, b)` into `to` rows of `period`, one series at a
/// time (rows come ordered by series, then time: one row is held in memory). Rows written.
fn roll(tx: &Transaction, from: &str, to: &str, period: i64, a: i64, b: i64) -> Result<u64, Error> {
    let mut cur: Option<((i64, i64), Row)> = None;
    let mut n = 0;
    let mut st = tx.prepare_cached(&format!(
        "SELECT series, ts, {COLUMNS} FROM {from} WHERE ts >= ?1 AND ts < ?2 \
         ORDER BY series, ts"
    ))?;
    let mut q = st.query(params![a, b])?;
    while let Some(r) = q.next()? {
        let key = (
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?.div_euclid(period) * period,
        );
        let row = Row::read(r, 2)?;
        match &mut cur {
            Some((k, acc)) if *k == key => acc.merge(&row),
            _ => {
                if let Some(((series, ts), acc)) = cur.replace((key, row)) {
                    merge_into(tx, to, series, ts, &acc)?;
                    n += 1;
                }
            }
        }
    }
    if let Some(((series, ts), acc)) = cur {
        merge_into(tx, to, series, ts, &acc)?;
        n += 1;
    }
    Ok(n)
}
