//! Writing a minute: series interning, merging into an existing minute, fingerprints,
//! examples, then late merges into rolled-up hours and days, rollups, retention and the size
//! bound, all in one transaction.

use std::collections::{BTreeMap, HashMap};

use aggregate::{Aggregator, Group};
use rusqlite::{OptionalExtension, Transaction, params};

use crate::row::{COLUMNS, Row};
use crate::schema::Marks;
use crate::{DimText, Error, SeriesKey, Store, StoreConfig, WriteStats, retain, rollup};

/// The stored fingerprint hash: [`crate::fp_hash`] as SQLite's signed integer.
pub(crate) fn fp_hash(text: &str) -> i64 {
    crate::key::fp_hash(text) as i64
}

pub(crate) fn series_key(g: &Group) -> SeriesKey {
    let DimText {
        server,
        client,
        db,
        user,
    } = DimText::of(g);
    SeriesKey {
        protocol: g.key.protocol.name().to_string(),
        command: g.key.command.to_string(),
        qid: g.id.clone(),
        fp_hash: fp_hash(&g.fingerprint),
        server,
        client,
        db,
        user,
    }
}

/// Merges `row` into the row `(series, ts)` of tier `table` (creating it). True when it existed.
pub(crate) fn merge_into(
    tx: &Transaction,
    table: &str,
    series: i64,
    ts: i64,
    row: &Row,
) -> Result<bool, Error> {
    let mut sel = tx.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM {table} WHERE series = ?1 AND ts = ?2"
    ))?;
    let old = sel
        .query_row(params![series, ts], |r| Ok(Row::read(r, 0)))
        .optional()?
        .transpose()?;
    let existed = old.is_some();
    let merged;
    let row = match old {
        Some(mut o) => {
            o.merge(row);
            merged = o;
            &merged
        }
        None => row,
    };
    let (n, b) = row.values();
    let mut ins = tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {table} (ts, series, {COLUMNS}) VALUES \
         (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
    ))?;
    ins.execute(params![
        ts, series, n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9], n[10], n[11],
        n[12], b[0], b[1], b[2]
    ])?;
    Ok(existed)
}

pub(crate) fn intern(
    cache: &mut HashMap<SeriesKey, i64>,
    tx: &Transaction,
    k: &SeriesKey,
) -> Result<(i64, bool), Error> {
    if let Some(&id) = cache.get(k) {
        return Ok((id, false));
    }
    let p = params![
        k.protocol, k.command, k.qid, k.fp_hash, k.server, k.client, k.db, k.user
    ];
    let found: Option<i64> = tx
        .prepare_cached(
            "SELECT id FROM series WHERE protocol = ?1 AND command = ?2 AND qid = ?3 \
             AND fp_hash = ?4 AND server = ?5 AND client = ?6 AND db = ?7 AND user = ?8",
        )?
        .query_row(p, |r| r.get(0))
        .optional()?;
    let (id, new) = match found {
        Some(id) => (id, false),
        None => {
            tx.prepare_cached(
                "INSERT INTO series (protocol, command, qid, fp_hash, server, client, db, \
                 user) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(p)?;
            (tx.last_insert_rowid(), true)
        }
    };
    cache.insert(k.clone(), id);
    Ok((id, new))
}

impl Store {
    /// One minute (`minute_start_s`: unix seconds, a multiple of 60) of groups keyed by
    /// [`crate::STORE_DIMS`]. One transaction; merges into an existing minute; then late merges
    /// into rolled-up hours and days, rollups of completed hours and days, retention and the
    /// size bound.
    pub fn write_minute(
        &mut self,
        minute_start_s: i64,
        agg: &Aggregator,
    ) -> Result<WriteStats, Error> {
        self.writable()?;
        if minute_start_s.rem_euclid(60) != 0 || !(0..crate::plan::MAX_TS).contains(&minute_start_s)
        {
            return Err(Error::Invalid(format!(
                "minute start {minute_start_s} is not a multiple of 60 in [0, 2^40)"
            )));
        }
        let Store {
            conn, cfg, series, ..
        } = self;
        let r = write_in(conn, series, cfg, minute_start_s, agg);
        if r.is_err() {
            // The transaction rolled back: forget series ids it may have interned.
            series.clear();
        }
        r
    }

    /// Rolls up every hour and day written so far (the last hour and day count as complete):
    /// the end of a digest. Minutes written afterwards merge into the rolled-up rows.
    pub fn finish(&mut self) -> Result<(), Error> {
        self.writable()?;
        let tx = self.conn.transaction()?;
        let mut marks = Marks::load(&tx)?;
        if let Some(last) = marks.last_minute {
            let hour_end = last.div_euclid(3600) * 3600 + 3600;
            rollup::advance(&tx, &mut marks, hour_end)?;
            rollup::advance_days(
                &tx,
                &mut marks,
                hour_end.div_euclid(86_400) * 86_400 + 86_400,
            )?;
            marks.save(&tx)?;
        }
        tx.commit()?;
        Ok(())
    }
}

fn write_in(
    conn: &mut rusqlite::Connection,
    cache: &mut HashMap<SeriesKey, i64>,
    cfg: &StoreConfig,
    m: i64,
    agg: &Aggregator,
) -> Result<WriteStats, Error> {
    let tx = conn.transaction()?;
    let mut st = WriteStats::default();
    let mut rows: BTreeMap<i64, Row> = BTreeMap::new();
    for g in agg.groups() {
        let (id, new) = intern(cache, &tx, &series_key(g))?;
        st.new_series += u64::from(new);
        let row = Row::of(&g.stats)?;
        match rows.get_mut(&id) {
            Some(r) => r.merge(&row),
            None => {
                rows.insert(id, row);
            }
        }
        upsert_fingerprint(&tx, g, m)?;
        if cfg.examples {
            upsert_examples(&tx, g, m)?;
        }
    }
    write_rows(tx, cfg, m, &rows, st)
}

/// The rows of minute `m` by series id into `m1`, then late merges, rollups, the marks,
/// retention and the size bound; commits.
pub(crate) fn write_rows(
    tx: Transaction,
    cfg: &StoreConfig,
    m: i64,
    rows: &BTreeMap<i64, Row>,
    mut st: WriteStats,
) -> Result<WriteStats, Error> {
    for (&id, row) in rows {
        st.rows += 1;
        st.merged += u64::from(merge_into(&tx, "m1", id, m, row)?);
    }
    let mut marks = Marks::load(&tx)?;
    st.rolled_rows += rollup::late(&tx, &marks, m, rows)?;
    st.rolled_rows += rollup::advance(&tx, &mut marks, m.div_euclid(3600) * 3600)?;
    marks.last_minute = Some(marks.last_minute.map_or(m, |l| l.max(m)));
    marks.first_minute = Some(marks.first_minute.map_or(m, |l| l.min(m)));
    marks.save(&tx)?;
    st.deleted_rows += retain::apply(&tx, cfg, &marks)?;
    st.deleted_rows += retain::bound_size(&tx, cfg, &marks)?;
    tx.commit()?;
    Ok(st)
}

fn secs(ns: Option<u64>, dflt: i64) -> i64 {
    ns.map_or(dflt, |n| (n / 1_000_000_000) as i64)
}

fn upsert_fingerprint(tx: &Transaction, g: &Group, m: i64) -> Result<(), Error> {
    tx.prepare_cached(
        "INSERT INTO fingerprints (protocol, command, id, fp_hash, text, first_seen, last_seen)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (protocol, command, id) DO UPDATE SET
           first_seen = min(first_seen, excluded.first_seen),
           last_seen = max(last_seen, excluded.last_seen)",
    )?
    .execute(params![
        g.key.protocol.name(),
        g.key.command,
        g.id,
        fp_hash(&g.fingerprint),
        g.fingerprint,
        secs(g.stats.first_seen_ns, m),
        secs(g.stats.last_seen_ns, m + 60),
    ])?;
    Ok(())
}

/// Keeps the slowest event of the group per hour, and the first error (code and message) of
/// the group per hour.
fn upsert_examples(tx: &Transaction, g: &Group, m: i64) -> Result<(), Error> {
    let hour = m.div_euclid(3600) * 3600;
    let (p, c) = (g.key.protocol.name(), g.key.command);
    if let Some(ex) = &g.stats.example {
        let lat = ex.latency_ns.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        tx.prepare_cached(
            "INSERT INTO examples (protocol, command, id, ts, kind, latency_ns, text, database,
               user, client, code, message)
             VALUES (?1, ?2, ?3, ?4, 'slowest', ?5, ?6, ?7, ?8, ?9, NULL, '')
             ON CONFLICT (protocol, command, id, ts, kind) DO UPDATE SET
               latency_ns = excluded.latency_ns, text = excluded.text,
               database = excluded.database, user = excluded.user, client = excluded.client
             WHERE coalesce(excluded.latency_ns, -1) > coalesce(examples.latency_ns, -1)",
        )?
        .execute(params![
            p,
            c,
            g.id,
            hour,
            lat,
            ex.text.as_deref().unwrap_or(""),
            ex.database.as_deref().unwrap_or(""),
            ex.user.as_deref().unwrap_or(""),
            aggregate::Host::of(&ex.client).to_string(),
        ])?;
    }
    if let Some(e) = g.stats.errors_by_code.sorted().first() {
        tx.prepare_cached(
            "INSERT INTO examples (protocol, command, id, ts, kind, latency_ns, text, database,
               user, client, code, message)
             VALUES (?1, ?2, ?3, ?4, 'error', NULL, '', '', '', '', ?5, ?6)
             ON CONFLICT (protocol, command, id, ts, kind) DO NOTHING",
        )?
        .execute(params![p, c, g.id, hour, e.code, &*e.message])?;
    }
    Ok(())
}
