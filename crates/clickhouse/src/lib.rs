//! The ClickHouse sink (issue 15): dbtap's per-minute query-group rows (the history store's
//! rows, plus the agent's host and the fingerprint text) sent to a ClickHouse server over its
//! HTTP interface in RowBinary batches, with the histograms as arrays that merge with
//! `sumMap`; a bounded spool (disk or memory) and retries with backoff so an outage loses
//! nothing, and a ledger check so a retry stores nothing twice; and the rows read back for
//! `dbtap ui --clickhouse`.
//!
//! See `docs/clickhouse.md` for the schema, the queries and the guarantees.

#![forbid(unsafe_code)]

pub mod follow;
pub mod http;
pub mod read;
pub mod row;
pub mod rowbinary;
pub mod schema;
pub mod sink;
pub mod spool;
pub mod tls;

pub use http::{HttpError, Timeouts, Url};
pub use row::{Dist, Identity, Row, rows_of};
pub use sink::{Sink, SinkConfig, SinkStats, StatsSnapshot};
pub use spool::{Batch, Spool};
