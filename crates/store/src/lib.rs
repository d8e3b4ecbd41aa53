//! The embedded history store (issue 13): one SQLite row per (minute, series) of query-group
//! statistics with the exact latency distributions, rolled up exactly into hours and days,
//! bounded by retention per tier and by file size, and read back as the answers of the web UI's
//! API (top groups, one group over time, dimension shares, a side for `dbtap diff`).
//!
//! See `docs/store.md` for the schema, the codec, the rollups and the bounds.

#![forbid(unsafe_code)]

mod answer;
mod codec;
mod group;
mod import;
mod key;
mod plan;
mod read;
mod retain;
mod rollup;
mod row;
mod schema;
mod side;
mod top;
mod write;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use aggregate::{Dim, DimSet};
use rusqlite::{Connection, OpenFlags};

pub use answer::{
    DimsAnswer, DistBucket, ErrorRow, ExampleRow, GroupAnswer, GroupInfo, GroupPoint, GroupSummary,
    Heatmap, Share, TopAnswer, TopRow, Totals,
};
pub use codec::{CodecError, decode_errors, decode_latency, encode_errors, encode_latency};
pub use import::ImportRow;
pub use key::{DimText, fp_hash};

/// The dimensions the groups handed to [`Store::write_minute`] are keyed by (protocol and
/// command are part of every group key).
pub const STORE_DIMS: DimSet = DimSet::FINGERPRINT
    .with(Dim::Server)
    .with(Dim::Client)
    .with(Dim::Db)
    .with(Dim::User);

/// Most points a series or sparkline is cut into (more asked for are fewer, longer steps).
pub const MAX_POINTS: usize = 1_000;

/// How long each tier's rows are kept (relative to the newest minute written).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub minutes: Duration,
    pub hours: Duration,
    pub days: Duration,
}

impl Default for Retention {
    /// 7 days of minutes, 90 days of hours, 730 days of days.
    fn default() -> Self {
        const DAY: u64 = 86_400;
        Retention {
            minutes: Duration::from_secs(7 * DAY),
            hours: Duration::from_secs(90 * DAY),
            days: Duration::from_secs(730 * DAY),
        }
    }
}

/// How a writing store behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    pub retention: Retention,
    /// Bound on the database file (`None`: unbounded). Past it the oldest minute rows are
    /// deleted first, then the oldest hours, then the oldest days.
    pub max_bytes: Option<u64>,
    /// Keep one slowest and one error example per group and hour (query text, names).
    pub examples: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            retention: Retention::default(),
            max_bytes: Some(1 << 30),
            examples: true,
        }
    }
}

/// Why a store operation failed.
#[derive(Debug)]
pub enum Error {
    Sqlite(rusqlite::Error),
    /// The file is not a store of this version (or its histogram configuration differs).
    Schema(String),
    /// A stored blob that does not decode.
    Codec(CodecError),
    /// A stored distribution that does not rebuild.
    State(aggregate::StateError),
    /// A bad argument (a minute not on a minute boundary, a write to a read-only store...).
    Invalid(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Sqlite(e) => write!(f, "store: {}", one_line(&e.to_string())),
            Error::Schema(s) => write!(f, "store: {}", one_line(s)),
            Error::Codec(e) => write!(f, "store: bad stored data: {e}"),
            Error::State(e) => write!(f, "store: bad stored distribution: {e}"),
            Error::Invalid(s) => write!(f, "store: {}", one_line(s)),
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl std::error::Error for Error {}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Sqlite(e)
    }
}

impl From<CodecError> for Error {
    fn from(e: CodecError) -> Self {
        Error::Codec(e)
    }
}

impl From<aggregate::StateError> for Error {
    fn from(e: aggregate::StateError) -> Self {
        Error::State(e)
    }
}

/// What one [`Store::write_minute`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteStats {
    /// Minute rows written (one per series of the minute).
    pub rows: u64,
    /// Of those, rows that existed and were merged into.
    pub merged: u64,
    /// Series seen for the first time.
    pub new_series: u64,
    /// Hour and day rows written by rollups (including late merges).
    pub rolled_rows: u64,
    /// Rows deleted by retention or by the size bound.
    pub deleted_rows: u64,
}

/// What the store holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub minute_rows: u64,
    pub hour_rows: u64,
    pub day_rows: u64,
    pub series: u64,
    /// Bytes of the database (pages in use times the page size).
    pub bytes: u64,
    /// First minute start and last minute end (unix seconds), of the minute tier.
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Rows deleted because the file passed `max_bytes`, per tier (retention not counted).
    pub dropped_minute_rows: u64,
    pub dropped_hour_rows: u64,
    pub dropped_day_rows: u64,
}

/// Exact-value filters and a fingerprint search (`None`: no filter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub server: Option<String>,
    pub database: Option<String>,
    pub user: Option<String>,
    pub client: Option<String>,
    pub protocol: Option<String>,
    /// Case-insensitive substring of the fingerprint text.
    pub search: Option<String>,
}

/// A time range `[from_s, to_s)` in unix seconds, rounded out to whole minutes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeQuery {
    pub from_s: i64,
    pub to_s: i64,
    pub filter: Filter,
}

/// How `top` ranks groups.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortBy {
    /// Service time (average active sessions).
    #[default]
    Load,
    Count,
    /// 99th percentile of service time.
    P99,
    Errors,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopQuery {
    pub range: RangeQuery,
    pub sort: SortBy,
    /// Most rows returned (0: all).
    pub limit: usize,
    /// Sparkline points wanted (at most [`MAX_POINTS`]; the step is rounded up to a whole
    /// tier-friendly length, so there may be fewer).
    pub spark_points: usize,
}

/// A group as every output names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupRef {
    pub protocol: String,
    pub command: String,
    pub id: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupQuery {
    pub range: RangeQuery,
    pub group: GroupRef,
    /// Series points wanted (at most [`MAX_POINTS`]; the step is rounded up to a whole
    /// tier-friendly length, so there may be fewer).
    pub points: usize,
}

/// The identity of a series: a group plus its dimension values (absent values are "").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SeriesKey {
    pub protocol: String,
    pub command: String,
    pub qid: String,
    pub fp_hash: i64,
    pub server: String,
    pub client: String,
    pub db: String,
    pub user: String,
}

/// The history store. `Send`, not `Sync`: one thread writes (or reads) through it.
pub struct Store {
    conn: Connection,
    cfg: StoreConfig,
    read_only: bool,
    /// Interned series ids of this connection's writes.
    series: HashMap<SeriesKey, i64>,
}

impl Store {
    /// Opens (creating if needed) a store file for writing; checks its schema version.
    pub fn open(path: &Path, cfg: StoreConfig) -> Result<Store, Error> {
        let conn = Connection::open(path)?;
        Store::init(conn, cfg)
    }

    /// Opens an existing store for reading only (another process may be writing it: WAL).
    pub fn open_read_only(path: &Path) -> Result<Store, Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        schema::check(&conn)?;
        schema::cache(&conn)?;
        Ok(Store {
            conn,
            cfg: StoreConfig::default(),
            read_only: true,
            series: HashMap::new(),
        })
    }

    /// A store in memory (gone when dropped).
    pub fn memory(cfg: StoreConfig) -> Result<Store, Error> {
        Store::init(Connection::open_in_memory()?, cfg)
    }

    fn init(conn: Connection, cfg: StoreConfig) -> Result<Store, Error> {
        conn.busy_timeout(Duration::from_secs(5))?;
        schema::create(&conn, &cfg)?;
        Ok(Store {
            conn,
            cfg,
            read_only: false,
            series: HashMap::new(),
        })
    }

    /// The configuration this store writes with.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    fn writable(&self) -> Result<(), Error> {
        if self.read_only {
            return Err(Error::Invalid("the store was opened read-only".into()));
        }
        Ok(())
    }
}
