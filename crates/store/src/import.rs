//! Minutes from elsewhere: rows that are already per (minute, series) sums and distributions
//! (`dbtap ui --clickhouse` reads the ClickHouse sink's rows back) written like
//! [`Store::write_minute`]'s, merged per series, with their fingerprints; no examples.

use std::collections::BTreeMap;

use aggregate::LatencyState;
use rusqlite::params;

use crate::row::{LatAcc, Row};
use crate::write::{fp_hash, intern, write_rows};
use crate::{Error, SeriesKey, Store, WriteStats};

/// One (minute, series) row to import. Absent dimension values are "".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImportRow {
    pub protocol: String,
    pub command: String,
    pub qid: String,
    pub fingerprint: String,
    pub server: String,
    pub client: String,
    pub db: String,
    pub user: String,
    pub count: u64,
    pub ok: u64,
    pub errors: u64,
    pub no_response: u64,
    pub incomplete: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub service: LatencyState,
    pub latency: LatencyState,
    /// `(code, count)`.
    pub errors_by_code: Vec<(u32, u64)>,
}

impl ImportRow {
    fn row(&self) -> Result<Row, Error> {
        let mut errors_by_code = BTreeMap::new();
        for &(c, n) in &self.errors_by_code {
            let e = errors_by_code.entry(c).or_insert(0u64);
            *e = e.saturating_add(n);
        }
        Ok(Row {
            count: self.count,
            ok: self.ok,
            errors: self.errors,
            no_response: self.no_response,
            incomplete: self.incomplete,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
            rows_sent: self.rows_sent,
            rows_affected: self.rows_affected,
            service: LatAcc::of(&self.service)?,
            latency: LatAcc::of(&self.latency)?,
            errors_by_code,
        })
    }

    fn key(&self) -> SeriesKey {
        SeriesKey {
            protocol: self.protocol.clone(),
            command: self.command.clone(),
            qid: self.qid.clone(),
            fp_hash: fp_hash(&self.fingerprint),
            server: self.server.clone(),
            client: self.client.clone(),
            db: self.db.clone(),
            user: self.user.clone(),
        }
    }
}

impl Store {
    /// Writes minute `m` (unix seconds, a multiple of 60) of imported rows: one transaction,
    /// merged into what the minute holds, then rollups, retention and the size bound as
    /// [`Store::write_minute`] does.
    pub fn import_minute(&mut self, m: i64, rows: &[ImportRow]) -> Result<WriteStats, Error> {
        self.writable()?;
        if m.rem_euclid(60) != 0 || !(0..crate::plan::MAX_TS).contains(&m) {
            return Err(Error::Invalid(format!(
                "minute start {m} is not a multiple of 60 in [0, 2^40)"
            )));
        }
        let Store {
            conn, cfg, series, ..
        } = self;
        let tx = conn.transaction()?;
        let mut st = WriteStats::default();
        let mut merged: BTreeMap<i64, Row> = BTreeMap::new();
        for r in rows {
            let (id, new) = intern(series, &tx, &r.key())?;
            st.new_series += u64::from(new);
            let row = r.row()?;
            match merged.get_mut(&id) {
                Some(x) => x.merge(&row),
                None => {
                    merged.insert(id, row);
                }
            }
            tx.prepare_cached(
                "INSERT INTO fingerprints (protocol, command, id, fp_hash, text, first_seen, \
                 last_seen) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (protocol, command, id) DO UPDATE SET
                   first_seen = min(first_seen, excluded.first_seen),
                   last_seen = max(last_seen, excluded.last_seen)",
            )?
            .execute(params![
                r.protocol,
                r.command,
                r.qid,
                fp_hash(&r.fingerprint),
                r.fingerprint,
                m,
                m + 60
            ])?;
        }
        let r = write_rows(tx, cfg, m, &merged, st);
        if r.is_err() {
            series.clear();
        }
        r
    }
}
