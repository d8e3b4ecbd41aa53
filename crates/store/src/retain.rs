//! Retention per tier (relative to the newest minute written) and the bound on the file size:
//! past `max_bytes` the oldest minute rows go first (an hour at a time), then the oldest hours
//! (a day at a time), then the oldest days. Only rows already rolled up into the next tier are
//! deleted, so the coarser tiers keep what the finer ones lose.

use rusqlite::{Transaction, params};

use crate::schema::{Marks, get_i64, set_i64};
use crate::{Error, StoreConfig};

fn secs(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Deletes rows past retention. Rows deleted.
pub fn apply(tx: &Transaction, cfg: &StoreConfig, marks: &Marks) -> Result<u64, Error> {
    let Some(last) = marks.last_minute else {
        return Ok(0);
    };
    let r = &cfg.retention;
    let cut_m = last
        .saturating_sub(secs(r.minutes))
        .min(marks.hours_done.unwrap_or(i64::MIN));
    let cut_h = last
        .saturating_sub(secs(r.hours))
        .min(marks.days_done.unwrap_or(i64::MIN));
    let cut_d = last.saturating_sub(secs(r.days));
    let mut n = 0;
    for (t, cut) in [("m1", cut_m), ("h1", cut_h), ("d1", cut_d)] {
        n += tx
            .prepare_cached(&format!("DELETE FROM {t} WHERE ts < ?1"))?
            .execute([cut])? as u64;
    }
    tx.prepare_cached("DELETE FROM examples WHERE ts < ?1")?
        .execute([cut_h.min(cut_m)])?;
    Ok(n)
}

/// Bytes of the database file: its pages (free ones included) times the page size.
pub fn file_bytes(conn: &rusqlite::Connection) -> Result<u64, Error> {
    let pages: i64 = conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
    let size: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
    Ok(u64::try_from(pages.max(0) * size).unwrap_or(0))
}

/// The oldest deletable chunk: `(table, rows before this ts)`.
fn oldest_chunk(tx: &Transaction, marks: &Marks) -> Result<Option<(&'static str, i64)>, Error> {
    for (t, period, done) in [
        ("m1", 3_600, marks.hours_done),
        ("h1", 86_400, marks.days_done),
        ("d1", 86_400, None),
    ] {
        let min: Option<i64> =
            tx.query_row(&format!("SELECT min(ts) FROM {t}"), [], |r| r.get(0))?;
        let Some(min) = min else { continue };
        let bound = (min.div_euclid(period) * period + period).min(done.unwrap_or(i64::MAX));
        if bound > min {
            return Ok(Some((t, bound)));
        }
    }
    Ok(None)
}

/// Deletes the oldest rows while the database is larger than `max_bytes`. Rows deleted.
pub fn bound_size(tx: &Transaction, cfg: &StoreConfig, marks: &Marks) -> Result<u64, Error> {
    let Some(max) = cfg.max_bytes else {
        return Ok(0);
    };
    let mut n = 0;
    if file_bytes(tx)? > max {
        tx.execute_batch("PRAGMA incremental_vacuum;")?;
    }
    while file_bytes(tx)? > max {
        let Some((t, bound)) = oldest_chunk(tx, marks)? else {
            break;
        };
        let k = tx
            .prepare_cached(&format!("DELETE FROM {t} WHERE ts < ?1"))?
            .execute(params![bound])? as u64;
        let key = format!("dropped_{t}");
        let before = get_i64(tx, &key)?.unwrap_or(0);
        set_i64(tx, &key, before.saturating_add(k as i64))?;
        n += k;
        tx.execute_batch("PRAGMA incremental_vacuum;")?;
    }
    Ok(n)
}
