//! The schema: tables, indexes, pragmas and the `meta` key/value table (schema version,
//! histogram configuration, retention, rollup marks, rows dropped by the size bound).

use aggregate::latency::{GROUPING_POWER, MAX_VALUE_POWER};
use rusqlite::{Connection, OptionalExtension, params};

use crate::{Error, StoreConfig};

/// Version of the schema and blob layout this build writes and reads.
pub const SCHEMA_VERSION: i64 = 1;

/// The three tiers: table name and period length in seconds.
pub const TIERS: [(&str, i64); 3] = [("m1", 60), ("h1", 3_600), ("d1", 86_400)];

fn tier_ddl(t: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (
            ts INTEGER NOT NULL, series INTEGER NOT NULL,
            count INTEGER NOT NULL, ok INTEGER NOT NULL, errors INTEGER NOT NULL,
            no_response INTEGER NOT NULL, incomplete INTEGER NOT NULL,
            service_sum_ns INTEGER NOT NULL, latency_sum_ns INTEGER NOT NULL,
            service_min_ns INTEGER NOT NULL, service_max_ns INTEGER NOT NULL,
            bytes_in INTEGER NOT NULL, bytes_out INTEGER NOT NULL,
            rows_sent INTEGER NOT NULL, rows_affected INTEGER NOT NULL,
            service BLOB NOT NULL, latency BLOB NOT NULL, errors_by_code BLOB NOT NULL,
            PRIMARY KEY (ts, series)) WITHOUT ROWID;
         CREATE INDEX IF NOT EXISTS {t}_series ON {t}(series, ts);"
    )
}

const DDL: &str = "
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    protocol TEXT NOT NULL, command TEXT NOT NULL, qid TEXT NOT NULL, fp_hash INTEGER NOT NULL,
    server TEXT NOT NULL, client TEXT NOT NULL, db TEXT NOT NULL, user TEXT NOT NULL,
    UNIQUE (protocol, command, qid, fp_hash, server, client, db, user));
CREATE TABLE IF NOT EXISTS fingerprints (
    protocol TEXT NOT NULL, command TEXT NOT NULL, id TEXT NOT NULL, fp_hash INTEGER NOT NULL,
    text TEXT NOT NULL, first_seen INTEGER NOT NULL, last_seen INTEGER NOT NULL,
    PRIMARY KEY (protocol, command, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS examples (
    protocol TEXT NOT NULL, command TEXT NOT NULL, id TEXT NOT NULL, ts INTEGER NOT NULL,
    kind TEXT NOT NULL, latency_ns INTEGER, text TEXT NOT NULL, database TEXT NOT NULL,
    user TEXT NOT NULL, client TEXT NOT NULL, code INTEGER, message TEXT NOT NULL,
    PRIMARY KEY (protocol, command, id, ts, kind)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS examples_ts ON examples(ts);
";

fn histogram_config() -> String {
    format!("grouping_power={GROUPING_POWER} max_value_power={MAX_VALUE_POWER}")
}

/// Sets the pragmas and creates the schema (or checks an existing one).
pub fn create(conn: &Connection, cfg: &StoreConfig) -> Result<(), Error> {
    let fresh: bool = conn.query_row(
        "SELECT count(*) = 0 FROM sqlite_master WHERE type = 'table'",
        [],
        |r| r.get(0),
    )?;
    if fresh {
        // Before the first table: freed pages can then be given back to the file system.
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    }
    let _mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "journal_size_limit", 8 << 20)?;
    cache(conn)?;
    let mut ddl = DDL.to_string();
    for (t, _) in TIERS {
        ddl.push_str(&tier_ddl(t));
    }
    conn.execute_batch(&ddl)?;
    if fresh {
        set(conn, "schema_version", &SCHEMA_VERSION.to_string())?;
        set(conn, "histogram", &histogram_config())?;
    }
    check(conn)?;
    let r = &cfg.retention;
    set(
        conn,
        "retention",
        &format!(
            "minutes={}s hours={}s days={}s max_bytes={}",
            r.minutes.as_secs(),
            r.hours.as_secs(),
            r.days.as_secs(),
            cfg.max_bytes.map_or("none".to_string(), |b| b.to_string())
        ),
    )?;
    Ok(())
}

/// A 16 MB page cache (SQLite's default is 2 MB): rollups and range reads touch more.
pub fn cache(conn: &Connection) -> Result<(), Error> {
    conn.pragma_update(None, "cache_size", -16_000)?;
    Ok(())
}

/// Checks that the file is a store of this version and histogram configuration.
pub fn check(conn: &Connection) -> Result<(), Error> {
    let v = get(conn, "schema_version").map_err(|_| not_a_store())?;
    match v.as_deref().map(str::parse::<i64>) {
        Some(Ok(SCHEMA_VERSION)) => {}
        Some(Ok(n)) => {
            return Err(Error::Schema(format!(
                "store schema version {n}, this dbtap reads version {SCHEMA_VERSION}"
            )));
        }
        _ => return Err(not_a_store()),
    }
    let h = get(conn, "histogram")?.unwrap_or_default();
    if h != histogram_config() {
        return Err(Error::Schema(format!(
            "store histogram {h:?}, this dbtap uses {:?}",
            histogram_config()
        )));
    }
    Ok(())
}

fn not_a_store() -> Error {
    Error::Schema("not a dbtap history store (no schema version)".into())
}

pub fn get(conn: &Connection, key: &str) -> Result<Option<String>, Error> {
    Ok(conn
        .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()?)
}

pub fn set(conn: &Connection, key: &str, value: &str) -> Result<(), Error> {
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?1, ?2)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

/// An integer in `meta` (`None` when absent or not a number).
pub fn get_i64(conn: &Connection, key: &str) -> Result<Option<i64>, Error> {
    Ok(get(conn, key)?.and_then(|v| v.parse().ok()))
}

pub fn set_i64(conn: &Connection, key: &str, v: i64) -> Result<(), Error> {
    set(conn, key, &v.to_string())
}

/// Rollup progress: every hour starting before `hours_done` has its hour rows (later minutes of
/// those hours merge into them as they come); likewise days.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    pub hours_done: Option<i64>,
    pub days_done: Option<i64>,
    /// Start of the newest minute written.
    pub last_minute: Option<i64>,
    /// Start of the oldest minute ever written.
    pub first_minute: Option<i64>,
}

impl Marks {
    pub fn load(conn: &Connection) -> Result<Marks, Error> {
        Ok(Marks {
            hours_done: get_i64(conn, "hours_done")?,
            days_done: get_i64(conn, "days_done")?,
            last_minute: get_i64(conn, "last_minute")?,
            first_minute: get_i64(conn, "first_minute")?,
        })
    }

    pub fn save(&self, conn: &Connection) -> Result<(), Error> {
        for (k, v) in [
            ("hours_done", self.hours_done),
            ("days_done", self.days_done),
            ("last_minute", self.last_minute),
            ("first_minute", self.first_minute),
        ] {
            if let Some(v) = v {
                set_i64(conn, k, v)?;
            }
        }
        Ok(())
    }
}
