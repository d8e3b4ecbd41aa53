//! The history store of a live run (`--store PATH`, or in memory under `--listen`): the writer
//! thread. The main thread sends it every interval's minute bins (the workers bin events by the
//! minute their request started, packet clock); it merges them per minute and writes what it
//! holds as soon as it holds a minute that has ended (so a minute is on disk one `--interval`
//! after its end), and every [`FLUSH`] otherwise, the current minute included; one transaction
//! per minute. The store merges a minute written again (rows are sums and exact histograms),
//! so writing a minute in parts gives the same rows as writing it once. A SIGKILL loses what is
//! not written: events of the current minute's last [`FLUSH`], and of the last `--interval`.

use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use aggregate::Aggregator;
use anyhow::{Context, Result};

use crate::storefeed::feed_minutes;

/// How often what the writer holds is written.
pub const FLUSH: Duration = Duration::from_secs(5);

/// Most bytes of the in-memory store of `--listen` without `--store` (it lives in the agent's
/// memory): past it the oldest minutes go first.
const MEMORY_MAX: u64 = 256 << 20;

/// Where the merger sends each interval's minute bins.
pub(super) type MinutesTx = Sender<Vec<(i64, Aggregator)>>;

/// The store a live run writes to, shared with the web server.
pub(super) type SharedStore = Arc<Mutex<store::Store>>;

/// Opens the store of a live run: the `--store` file, else an in-memory one (at most
/// [`MEMORY_MAX`] bytes) when the web UI is served (`--listen`), else none.
pub(super) fn open(
    args: Option<&crate::uicmd::StoreArgs>,
    listen: bool,
    examples: bool,
) -> Result<Option<SharedStore>> {
    let file = match args {
        Some(a) => a.open(examples)?,
        None => None,
    };
    let store = match file {
        Some(s) => Some(s),
        None if listen => {
            let mut cfg = args.map_or_else(
                || crate::uicmd::StoreArgs::default().config(examples),
                |a| a.config(examples),
            );
            cfg.max_bytes = Some(cfg.max_bytes.unwrap_or(MEMORY_MAX).min(MEMORY_MAX));
            Some(store::Store::memory(cfg).context("the in-memory history store")?)
        }
        None => None,
    };
    Ok(store.map(|s| Arc::new(Mutex::new(s))))
}

/// Starts the writer thread; it ends (writing everything pending) when every sender is gone.
/// `sample`: counts are scaled by it (estimates for all connections).
pub(super) fn spawn(store: SharedStore, sample: u64) -> Result<(MinutesTx, JoinHandle<()>)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("dbtap-store".into())
        .spawn(move || writer(&rx, &store, sample))
        .context("starting the history store writer")?;
    Ok((tx, handle))
}

fn writer(rx: &Receiver<Vec<(i64, Aggregator)>>, store: &SharedStore, sample: u64) {
    let mut failed = false;
    feed_minutes(rx, FLUSH, |minutes| {
        write(store, minutes, sample, &mut failed)
    });
    if !failed && let Err(e) = lock(store).finish() {
        eprintln!("dbtap: error: {e}");
    }
}

/// Writes `minutes`; the first error is printed and stops the writing for the rest of the run.
fn write(store: &SharedStore, minutes: Vec<(i64, Aggregator)>, sample: u64, failed: &mut bool) {
    for (m, mut agg) in minutes {
        if *failed {
            return;
        }
        agg.scale(sample);
        if let Err(e) = lock(store).write_minute(m, &agg) {
            eprintln!("dbtap: error: {e}; no further minutes are written to the history store");
            *failed = true;
        }
    }
}

fn lock(store: &SharedStore) -> std::sync::MutexGuard<'_, store::Store> {
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
