//! The rows sent to ClickHouse: the history store's per-minute rows (one per minute and
//! series: a group plus the store's dimensions) with the agent's host name, the fingerprint
//! text, and each distribution as parallel arrays (histogram bucket index, count) that merge
//! with `sumMap`. [`rows_of`] makes them from a minute's aggregator; [`Row::encode`] writes
//! one in RowBinary in the column order of [`crate::schema::COLUMNS`].

use aggregate::{Aggregator, Group, Latency};
use store::DimText;

use crate::rowbinary::{ReadError, Reader, Writer};

/// Who sends the rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The agent's host (its host name, or `--host-name`).
    pub host: String,
}

/// One (minute, host, series) row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Row {
    /// Minute start, unix seconds.
    pub ts: u32,
    pub host: String,
    pub protocol: String,
    pub command: String,
    /// The fingerprint's Query ID, as `dbtap digest` shows it.
    pub query_id: String,
    /// FNV-1a of the fingerprint text (as the history store keeps it).
    pub fp_hash: u64,
    pub fingerprint: String,
    /// The server endpoint, client host, database and user ("" when unknown).
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
    pub service: Dist,
    pub latency: Dist,
    /// Error codes (ascending) and their counts.
    pub error_codes: Vec<u32>,
    pub error_counts: Vec<u64>,
    /// The batch the row was sent in (the sink's idempotence key; see `docs/clickhouse.md`).
    pub batch: u64,
}

/// A distribution as sums and histogram buckets (raw samples binned the way the histogram
/// bins them), so that any set of rows merges exactly with `sum`, `min`, `max`, `sumMap`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dist {
    pub sum_ns: u64,
    /// 0 when the distribution is empty.
    pub min_ns: u64,
    pub max_ns: u64,
    /// Bucket indexes (ascending) of the histogram layout of `aggregate::latency`
    /// (grouping power 7, max value power 44) and their counts.
    pub buckets: Vec<u32>,
    pub counts: Vec<u64>,
}

impl Dist {
    pub fn of(l: &Latency) -> Dist {
        let (buckets, counts) = l.bucket_counts().into_iter().unzip();
        Dist {
            sum_ns: u64::try_from(l.sum_ns()).unwrap_or(u64::MAX),
            min_ns: l.min_ns().unwrap_or(0),
            max_ns: l.max_ns().unwrap_or(0),
            buckets,
            counts,
        }
    }

    fn encode(&self, w: &mut Writer) {
        w.u64(self.sum_ns);
        w.u64(self.min_ns);
        w.u64(self.max_ns);
        w.array_u32(&self.buckets);
        w.array_u64(&self.counts);
    }

    fn decode(r: &mut Reader<'_>) -> Result<Dist, ReadError> {
        Ok(Dist {
            sum_ns: r.u64()?,
            min_ns: r.u64()?,
            max_ns: r.u64()?,
            buckets: r.array_u32()?,
            counts: r.array_u64()?,
        })
    }
}

/// FNV-1a of the fingerprint text: the history store's fingerprint hash (stable across builds).
pub use store::fp_hash;

fn sat(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

impl Row {
    /// The row of one group of a minute (`ts`: its start, unix seconds).
    pub fn of(ts: u32, id: &Identity, g: &Group) -> Row {
        let DimText {
            server,
            client,
            db,
            user,
        } = DimText::of(g);
        let s = &g.stats;
        let (error_codes, error_counts) = error_pairs(g);
        Row {
            ts,
            host: id.host.clone(),
            protocol: g.key.protocol.name().to_string(),
            command: g.key.command.to_string(),
            query_id: g.id.clone(),
            fp_hash: fp_hash(&g.fingerprint),
            fingerprint: g.fingerprint.clone(),
            server,
            client,
            db,
            user,
            count: s.count,
            ok: s.ok,
            errors: s.errors,
            no_response: s.no_response,
            incomplete: s.incomplete,
            bytes_in: sat(s.bytes_in.sum),
            bytes_out: sat(s.bytes_out.sum),
            rows_sent: sat(s.rows_sent.sum),
            rows_affected: sat(s.rows_affected.sum),
            service: Dist::of(&s.service),
            latency: Dist::of(&s.latency),
            error_codes,
            error_counts,
            batch: 0,
        }
    }

    /// Appends the row in RowBinary, columns in [`crate::schema::COLUMNS`] order.
    pub fn encode(&self, w: &mut Writer) {
        w.u32(self.ts);
        for s in [&self.host, &self.protocol, &self.command, &self.query_id] {
            w.str(s);
        }
        w.u64(self.fp_hash);
        for s in [
            &self.fingerprint,
            &self.server,
            &self.client,
            &self.db,
            &self.user,
        ] {
            w.str(s);
        }
        for v in self.counters() {
            w.u64(v);
        }
        self.service.encode(w);
        self.latency.encode(w);
        w.array_u32(&self.error_codes);
        w.array_u64(&self.error_counts);
        w.u64(self.batch);
    }

    fn counters(&self) -> [u64; 9] {
        [
            self.count,
            self.ok,
            self.errors,
            self.no_response,
            self.incomplete,
            self.bytes_in,
            self.bytes_out,
            self.rows_sent,
            self.rows_affected,
        ]
    }

    /// Reads one row [`Row::encode`] wrote (checked: never panics).
    pub fn decode(r: &mut Reader<'_>) -> Result<Row, ReadError> {
        let ts = r.u32()?;
        let mut s = || -> Result<String, ReadError> { Ok(r.str()?.to_string()) };
        let (host, protocol, command, query_id) = (s()?, s()?, s()?, s()?);
        let fp_hash = r.u64()?;
        let mut s = || -> Result<String, ReadError> { Ok(r.str()?.to_string()) };
        let (fingerprint, server, client, db, user) = (s()?, s()?, s()?, s()?, s()?);
        let mut c = [0u64; 9];
        for v in &mut c {
            *v = r.u64()?;
        }
        let [
            count,
            ok,
            errors,
            no_response,
            incomplete,
            bytes_in,
            bytes_out,
            rows_sent,
            rows_affected,
        ] = c;
        Ok(Row {
            ts,
            host,
            protocol,
            command,
            query_id,
            fp_hash,
            fingerprint,
            server,
            client,
            db,
            user,
            count,
            ok,
            errors,
            no_response,
            incomplete,
            bytes_in,
            bytes_out,
            rows_sent,
            rows_affected,
            service: Dist::decode(r)?,
            latency: Dist::decode(r)?,
            error_codes: r.array_u32()?,
            error_counts: r.array_u64()?,
            batch: r.u64()?,
        })
    }
}

fn error_pairs(g: &Group) -> (Vec<u32>, Vec<u64>) {
    let mut m = std::collections::BTreeMap::<u32, u64>::new();
    for e in g.stats.errors_by_code.sorted() {
        let c = m.entry(e.code).or_insert(0);
        *c = c.saturating_add(e.count);
    }
    m.into_iter().unzip()
}

/// The rows of one minute (`minute_s`: its start, unix seconds) of groups keyed by the history
/// store's dimensions. Minutes before 1970 or past 2106 (not a `DateTime`) give no rows.
pub fn rows_of(minute_s: i64, agg: &Aggregator, id: &Identity) -> Vec<Row> {
    let Ok(ts) = u32::try_from(minute_s) else {
        return Vec::new();
    };
    agg.groups().map(|g| Row::of(ts, id, g)).collect()
}
