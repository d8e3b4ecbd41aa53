//! The sink: rows become batches (one day each, at most [`MAX_BATCH_ROWS`] rows, a random
//! batch id in every row), batches go to the spool, and one sender thread sends the spool's
//! oldest batch until the server confirms it, with exponential backoff between attempts.
//!
//! No duplicates after a retry: an insert of one batch is one block of one partition, which
//! a MergeTree writes as one part, atomically. Every insert carries `query_id=dbtap-<batch>`,
//! so a second attempt cannot run while the first still does. Before sending a batch again
//! after an attempt whose outcome is unknown (the request left but no 200 came back, or the
//! batch was found in the spool at start), the sender asks the server whether that query is
//! still running (then it waits) and how many rows of that batch it holds: all of them → the
//! batch is done; none → it is sent; some (cannot happen for one part) → counted as `partial`
//! and not sent again. See `docs/clickhouse.md`.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::http::{HttpError, Timeouts, Url, post};
use crate::row::Row;
use crate::rowbinary::Writer;
use crate::schema::insert_query;
use crate::spool::{Batch, Spool};

/// Most rows in one insert (far below the 1,048,576 of `max_insert_block_size`: one block).
pub const MAX_BATCH_ROWS: usize = 100_000;

/// How the sink sends.
#[derive(Clone, Debug)]
pub struct SinkConfig {
    pub url: Url,
    pub table: String,
    /// `None`: the spool is in memory.
    pub spool_dir: Option<std::path::PathBuf>,
    pub spool_max_bytes: u64,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    pub timeouts: Timeouts,
}

impl SinkConfig {
    pub fn new(url: Url) -> SinkConfig {
        SinkConfig {
            url,
            table: crate::schema::MINUTES.to_string(),
            spool_dir: None,
            spool_max_bytes: 256 << 20,
            backoff_min: Duration::from_millis(500),
            backoff_max: Duration::from_secs(15),
            timeouts: Timeouts::default(),
        }
    }
}

/// The sink's counters (the live health block and `/metrics`).
#[derive(Debug, Default)]
pub struct SinkStats {
    pub rows_sent: AtomicU64,
    pub batches_sent: AtomicU64,
    /// Attempts that failed (each followed by a backoff).
    pub retries: AtomicU64,
    /// Batches found already stored by the ledger check (not sent again).
    pub already_stored: AtomicU64,
    /// Batches of which the server held some rows but not all (not sent again).
    pub partial: AtomicU64,
    /// Batches (and their rows) dropped because the spool was full.
    pub dropped_batches: AtomicU64,
    pub dropped_rows: AtomicU64,
    /// Spool files that did not read back (removed).
    pub corrupt: AtomicU64,
    /// Batches and bytes in the spool now.
    pub spooled_batches: AtomicU64,
    pub spooled_bytes: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// A snapshot of [`SinkStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub rows_sent: u64,
    pub batches_sent: u64,
    pub retries: u64,
    pub already_stored: u64,
    pub partial: u64,
    pub dropped_batches: u64,
    pub dropped_rows: u64,
    pub corrupt: u64,
    pub spooled_batches: u64,
    pub spooled_bytes: u64,
    pub last_error: Option<String>,
}

impl SinkStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            rows_sent: g(&self.rows_sent),
            batches_sent: g(&self.batches_sent),
            retries: g(&self.retries),
            already_stored: g(&self.already_stored),
            partial: g(&self.partial),
            dropped_batches: g(&self.dropped_batches),
            dropped_rows: g(&self.dropped_rows),
            corrupt: g(&self.corrupt),
            spooled_batches: g(&self.spooled_batches),
            spooled_bytes: g(&self.spooled_bytes),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    fn error(&self, e: String) {
        if let Ok(mut l) = self.last_error.lock() {
            *l = Some(e);
        }
    }
}

struct Shared {
    spool: Mutex<Spool>,
    wake: Condvar,
    stats: Arc<SinkStats>,
    /// Finish: stop once the spool is empty.
    draining: AtomicBool,
    /// Stop now.
    abort: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Spool> {
        self.spool
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn gauges(&self, s: &Spool) {
        self.stats
            .spooled_batches
            .store(s.len() as u64, Ordering::Relaxed);
        self.stats.spooled_bytes.store(s.bytes(), Ordering::Relaxed);
    }
}

/// A running sink.
pub struct Sink {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    ids: std::collections::hash_map::RandomState,
    next: u64,
}

/// Random batch ids: a per-process random hasher over a counter, the time and the pid.
fn batch_id(ids: &std::collections::hash_map::RandomState, n: u64) -> u64 {
    let mut h = ids.build_hasher();
    h.write_u64(n);
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Splits rows (any order) into batches of one day and at most `max` rows each, encoded.
pub fn batches(mut rows: Vec<Row>, max: usize, mut id: impl FnMut() -> u64) -> Vec<Batch> {
    rows.sort_by_key(|r| r.ts);
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let day = rows.get(i).map_or(0, |r| r.ts / 86_400);
        let end = rows
            .iter()
            .skip(i)
            .take(max.max(1))
            .take_while(|r| r.ts / 86_400 == day)
            .count()
            + i;
        let b = id();
        let mut w = Writer::default();
        let (mut lo, mut hi) = (u32::MAX, 0);
        for r in rows.get_mut(i..end).into_iter().flatten() {
            r.batch = b;
            lo = lo.min(r.ts);
            hi = hi.max(r.ts);
            r.encode(&mut w);
        }
        out.push(Batch {
            id: b,
            rows: (end - i) as u64,
            min_ts: lo,
            max_ts: hi,
            body: w.buf,
        });
        i = end;
    }
    out
}

impl Sink {
    /// Opens the spool (sending what an earlier run left there) and starts the sender.
    /// Returns the sink and warnings (spool files that did not read).
    pub fn start(cfg: SinkConfig) -> std::io::Result<(Sink, Vec<String>)> {
        let (spool, warnings) = match &cfg.spool_dir {
            Some(d) => Spool::open(d, cfg.spool_max_bytes)?,
            None => (Spool::memory(cfg.spool_max_bytes), Vec::new()),
        };
        let stats = Arc::new(SinkStats::default());
        stats
            .corrupt
            .store(warnings.len() as u64, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            spool: Mutex::new(spool),
            wake: Condvar::new(),
            stats,
            draining: AtomicBool::new(false),
            abort: AtomicBool::new(false),
        });
        shared.gauges(&shared.lock());
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("dbtap-clickhouse".into())
            .spawn(move || sender(&s2, &cfg))?;
        Ok((
            Sink {
                shared,
                thread: Some(thread),
                ids: std::collections::hash_map::RandomState::new(),
                next: 0,
            },
            warnings,
        ))
    }

    pub fn stats(&self) -> Arc<SinkStats> {
        Arc::clone(&self.shared.stats)
    }

    /// Queues rows (spooled before this returns). An error writing the spool is returned
    /// (those rows are lost and counted as dropped).
    pub fn submit(&mut self, rows: Vec<Row>) -> std::io::Result<()> {
        let (ids, next) = (&self.ids, &mut self.next);
        let bs = batches(rows, MAX_BATCH_ROWS, || {
            *next += 1;
            batch_id(ids, *next)
        });
        let st = &self.shared.stats;
        for b in bs {
            let rows = b.rows;
            let mut s = self.shared.lock();
            match s.push(b) {
                Ok(d) => {
                    st.dropped_batches.fetch_add(d.batches, Ordering::Relaxed);
                    st.dropped_rows.fetch_add(d.rows, Ordering::Relaxed);
                }
                Err(e) => {
                    st.dropped_batches.fetch_add(1, Ordering::Relaxed);
                    st.dropped_rows.fetch_add(rows, Ordering::Relaxed);
                    return Err(e);
                }
            }
            self.shared.gauges(&s);
        }
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Sends what is queued until the spool is empty or `deadline` passes, then stops the
    /// sender. Returns the batches left (on disk they are sent by the next run).
    pub fn finish(mut self, deadline: Instant) -> StatsSnapshot {
        self.shared.draining.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        while !self.shared.lock().is_empty() && Instant::now() < deadline {
            if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.shared.abort.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.stats.snapshot()
    }
}

fn query_id(id: u64) -> String {
    format!("dbtap-{id:016x}")
}

/// Does the server hold batch `b`? `Some(rows held)`, or an error (also when its insert still
/// runs: the answer would not be final).
fn ledger(cfg: &SinkConfig, b: &Batch) -> Result<u64, HttpError> {
    let q = format!(
        "SELECT count() FROM system.processes WHERE query_id = '{}'",
        query_id(b.id)
    );
    let running = post(&cfg.url, &[("query", &q)], b"", cfg.timeouts)?;
    if running.trim() != "0" {
        return Err(HttpError::Io(format!(
            "the earlier insert of batch {:016x} still runs",
            b.id
        )));
    }
    let q = format!(
        "SELECT count() FROM {} WHERE ts >= toDateTime({}) AND ts <= toDateTime({}) AND batch = {}",
        cfg.table, b.min_ts, b.max_ts, b.id
    );
    let n = post(&cfg.url, &[("query", &q)], b"", cfg.timeouts)?;
    n.trim()
        .parse::<u64>()
        .map_err(|_| HttpError::Io(format!("unexpected count reply {n:?}")))
}

fn insert(cfg: &SinkConfig, b: &Batch) -> Result<(), HttpError> {
    let q = insert_query(&cfg.table);
    let qid = query_id(b.id);
    post(
        &cfg.url,
        &[("query", &q), ("query_id", &qid)],
        &b.body,
        cfg.timeouts,
    )
    .map(|_| ())
}

/// What one attempt at the oldest batch came to.
enum Attempt {
    Delivered,
    /// Nothing to do now (empty spool, or a corrupt file removed).
    Idle,
    Failed,
}

fn attempt(sh: &Shared, cfg: &SinkConfig) -> Attempt {
    let st = &sh.stats;
    let front = sh.lock().front();
    let f = match front {
        None => return Attempt::Idle,
        Some(Err(e)) => {
            st.corrupt.fetch_add(1, Ordering::Relaxed);
            eprintln!("dbtap: warning: clickhouse: {e}");
            sh.gauges(&sh.lock());
            return Attempt::Idle;
        }
        Some(Ok(f)) => f,
    };
    let b = &f.batch;
    if f.maybe_sent {
        match ledger(cfg, b) {
            Ok(0) => {}
            Ok(n) => {
                let c = if n == b.rows {
                    &st.already_stored
                } else {
                    &st.partial
                };
                c.fetch_add(1, Ordering::Relaxed);
                if n != b.rows {
                    eprintln!(
                        "dbtap: warning: clickhouse: batch {:016x}: the server holds {n} of its {} rows; not sent again",
                        b.id, b.rows
                    );
                }
                finish_batch(sh, b.id);
                return Attempt::Delivered;
            }
            Err(e) => {
                st.error(e.to_string());
                return Attempt::Failed;
            }
        }
    }
    match insert(cfg, b) {
        Ok(()) => {
            st.rows_sent.fetch_add(b.rows, Ordering::Relaxed);
            st.batches_sent.fetch_add(1, Ordering::Relaxed);
            finish_batch(sh, b.id);
            Attempt::Delivered
        }
        Err(e) => {
            if !matches!(e, HttpError::Connect(_)) {
                sh.lock().mark_maybe_sent(b.id);
            }
            st.error(e.to_string());
            Attempt::Failed
        }
    }
}

fn finish_batch(sh: &Shared, id: u64) {
    let mut s = sh.lock();
    s.done(id);
    sh.gauges(&s);
}

/// The sender thread: the oldest batch until it is delivered, backing off after failures.
/// The first failure of a run of failures, and the recovery after it, are one line each on
/// stderr (the counters have the rest).
fn sender(sh: &Shared, cfg: &SinkConfig) {
    let mut backoff = cfg.backoff_min;
    let mut failing: u64 = 0;
    while !sh.abort.load(Ordering::Acquire) {
        let wait = match attempt(sh, cfg) {
            Attempt::Delivered => {
                if failing > 0 {
                    eprintln!(
                        "dbtap: clickhouse: delivering again after {failing} failed attempts"
                    );
                }
                (backoff, failing) = (cfg.backoff_min, 0);
                continue;
            }
            Attempt::Idle if sh.draining.load(Ordering::Acquire) && sh.lock().is_empty() => {
                return;
            }
            Attempt::Idle => {
                let s = sh.lock();
                if s.is_empty() && !sh.abort.load(Ordering::Acquire) {
                    let _ = sh.wake.wait_timeout(s, Duration::from_millis(500));
                }
                continue;
            }
            Attempt::Failed => {
                sh.stats.retries.fetch_add(1, Ordering::Relaxed);
                if failing == 0 {
                    let e = sh.stats.snapshot().last_error.unwrap_or_default();
                    eprintln!(
                        "dbtap: warning: clickhouse: {e}; retrying with backoff, batches wait in the spool"
                    );
                }
                failing += 1;
                let w = backoff;
                backoff = (backoff * 2).min(cfg.backoff_max);
                w
            }
        };
        pause(sh, wait);
    }
}

/// Waits `d` (a backoff: submits do not cut it short), or until the sink is aborted.
fn pause(sh: &Shared, d: Duration) {
    let until = Instant::now() + d;
    let mut s = sh.lock();
    loop {
        let now = Instant::now();
        if now >= until || sh.abort.load(Ordering::Acquire) {
            return;
        }
        s = match sh.wake.wait_timeout(s, until - now) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
    }
}
