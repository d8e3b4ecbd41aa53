//! What feeds the history store (`--store`): query events binned by the minute their request
//! started (packet time), each minute an [`Aggregator`] keyed by [`store::STORE_DIMS`]
//! (fingerprint, server, client host, database, user; protocol and command are in every key).
//!
//! `dbtap digest --store` hands a minute out once the packet clock is [`DIGEST_LAG_NS`] past
//! its end (events arrive when their response completes, as for the timeline) and the rest at
//! the end; an event of a minute already handed out opens that minute again and is handed out
//! later (the store merges a minute written twice), so nothing is lost and the rows depend on
//! the capture only. `dbtap live --store` workers hand over every bin with each interval report
//! ([`MinuteBins::take_all`]); the main thread merges them and the writer thread writes a minute
//! once the wall clock is past its end ([`Pending`]).
//!
//! The store's groups carry the fingerprint's own Query ID (as `dbtap digest` shows it, not the
//! per-dimension ID of `--group-by`), so a group's series can be summed back to the digest's
//! group.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use aggregate::{AggConfig, Aggregator, GroupKey};
use proto::QueryEvent;

use crate::cli::FingerprintMode;
use crate::fp::Classified;

/// One minute in nanoseconds.
pub const MINUTE_NS: u64 = 60_000_000_000;
/// How long past a minute's end (packet time) `digest --store` waits for its requests to
/// complete before handing it out: the timeline's lag.
pub const DIGEST_LAG_NS: u64 = crate::timeline::LAG_NS;
/// Most minutes binned at once; beyond it the oldest is handed out early (a capture whose
/// request start times spread over more than a day of minutes at once). Bounds memory.
pub const MAX_OPEN_MINUTES: usize = 1_440;

/// The minute (unix seconds, a multiple of 60) a time in ns since the epoch falls in.
pub fn minute_of(ns: u64) -> i64 {
    i64::try_from(ns / MINUTE_NS * 60).unwrap_or(i64::MAX - 59)
}

/// Events binned per minute of their request start.
pub struct MinuteBins {
    cfg: AggConfig,
    bins: BTreeMap<i64, Aggregator>,
    /// The latest packet time seen.
    now_ns: u64,
    lag_ns: u64,
}

impl MinuteBins {
    /// Empty bins; `lag_ns`: how long past its end a minute is held ([`MinuteBins::ready`]).
    pub fn new(cfg: AggConfig, lag_ns: u64) -> Self {
        MinuteBins {
            cfg,
            bins: BTreeMap::new(),
            now_ns: 0,
            lag_ns,
        }
    }

    /// Counts `ev` in the minute its request started, given its group as the caller's
    /// fingerprinter classified it (after its `--where`): the store's key is made from the
    /// fingerprint's own hash and command and the store's dimensions, whatever the caller's
    /// `--group-by`, so the event is fingerprinted once.
    pub fn event_in(&mut self, ev: &QueryEvent, mode: FingerprintMode, c: &Classified<'_>) {
        add(&mut self.bins, &self.cfg, ev, mode, c);
    }

    /// The packet clock.
    pub fn packet(&mut self, ts_ns: u64) {
        self.now_ns = self.now_ns.max(ts_ns);
    }

    /// The minutes that ended [`lag`](MinuteBins::new) ago or earlier by the packet clock (and
    /// the oldest ones beyond [`MAX_OPEN_MINUTES`]), oldest first.
    pub fn ready(&mut self) -> Vec<(i64, Aggregator)> {
        let mut out = Vec::new();
        let done = self
            .now_ns
            .checked_sub(self.lag_ns.saturating_add(MINUTE_NS))
            .map(minute_of);
        loop {
            let over = self.bins.len() > MAX_OPEN_MINUTES;
            let Some(entry) = self.bins.first_entry() else {
                break;
            };
            if !over && done.is_none_or(|d| *entry.key() > d) {
                break;
            }
            out.push(entry.remove_entry());
        }
        out
    }

    /// Every minute binned, oldest first; the bins start empty.
    pub fn take_all(&mut self) -> Vec<(i64, Aggregator)> {
        std::mem::take(&mut self.bins).into_iter().collect()
    }

    /// True when nothing is binned.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.bins.is_empty()
    }
}

/// Adds `ev` of group `c` to the bin of the minute its request started, keyed by
/// [`store::STORE_DIMS`], with the fingerprint's own Query ID.
fn add(
    bins: &mut BTreeMap<i64, Aggregator>,
    cfg: &AggConfig,
    ev: &QueryEvent,
    mode: FingerprintMode,
    c: &Classified<'_>,
) {
    let key = GroupKey {
        protocol: ev.protocol,
        command: c.fp_command,
        fingerprint_hash: store::STORE_DIMS.group_hash(ev, c.fp_hash),
    };
    let agg = bins
        .entry(minute_of(ev.start_ns))
        .or_insert_with(|| Aggregator::new(cfg.clone()));
    agg.add_with_dims(ev, key, || {
        let id = crate::fp::query_id(mode, ev.protocol, c.fp_command, c.text, c.fp_hash);
        let values = store::STORE_DIMS.values(ev);
        (c.text.to_string(), id, Some(Box::new(values)))
    });
}

/// Minutes waiting to be written (the live writer): bins from several workers and intervals
/// merged per minute.
#[derive(Default)]
pub struct Pending {
    bins: BTreeMap<i64, Aggregator>,
}

impl Pending {
    /// Merges `minutes` in (a minute's groups from one worker's interval).
    pub fn add(&mut self, minutes: Vec<(i64, Aggregator)>) {
        for (m, agg) in minutes {
            match self.bins.get_mut(&m) {
                Some(a) => a.merge(&agg),
                None => {
                    self.bins.insert(m, agg);
                }
            }
        }
    }

    /// The oldest minute pending.
    pub fn oldest(&self) -> Option<i64> {
        self.bins.keys().next().copied()
    }

    /// Everything pending, oldest first.
    pub fn drain(&mut self) -> Vec<(i64, Aggregator)> {
        std::mem::take(&mut self.bins).into_iter().collect()
    }
}

/// The live feeders' loop (the history store's writer, the ClickHouse sink's feeder): receives
/// minute bins, merges them ([`Pending`]) and hands what it holds to `flush` as soon as it holds
/// a minute that has ended (wall clock), and every `every` otherwise; once the senders are gone,
/// hands over the rest and returns.
pub fn feed_minutes(
    rx: &Receiver<Vec<(i64, Aggregator)>>,
    every: Duration,
    mut flush: impl FnMut(Vec<(i64, Aggregator)>),
) {
    let mut pending = Pending::default();
    let mut flushed = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(m) => pending.add(m),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                flush(pending.drain());
                return;
            }
        }
        let ended = pending.oldest().is_some_and(|m| m + 60 <= now_s());
        if ended || flushed.elapsed() >= every {
            flush(pending.drain());
            flushed = Instant::now();
        }
    }
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `digest --store` (and `ui CAPTURE...`): the bins and the store they are written to. A
/// write error stops the writing; it is returned by [`StoreSink::finish`].
pub struct StoreSink {
    bins: MinuteBins,
    store: store::Store,
    error: Option<store::Error>,
    minutes: u64,
}

impl StoreSink {
    /// Bins written to `store` in packet time.
    pub fn new(keep_examples: bool, store: store::Store) -> Self {
        let cfg = AggConfig {
            keep_examples,
            ..AggConfig::default()
        };
        StoreSink {
            bins: MinuteBins::new(cfg, DIGEST_LAG_NS),
            store,
            error: None,
            minutes: 0,
        }
    }

    /// See [`MinuteBins::event_in`].
    pub fn event_in(&mut self, ev: &QueryEvent, mode: FingerprintMode, c: &Classified<'_>) {
        self.bins.event_in(ev, mode, c);
    }

    /// The packet clock: writes the minutes that are complete.
    pub fn packet(&mut self, ts_ns: u64) {
        self.bins.packet(ts_ns);
        let ready = self.bins.ready();
        self.write(ready);
    }

    fn write(&mut self, minutes: Vec<(i64, Aggregator)>) {
        for (m, agg) in minutes {
            if self.error.is_some() {
                return;
            }
            match self.store.write_minute(m, &agg) {
                Ok(_) => self.minutes += 1,
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// Writes the minutes still binned, rolls up, and returns the store with the number of
    /// minute writes.
    pub fn finish(mut self) -> Result<(store::Store, u64), store::Error> {
        let rest = self.bins.take_all();
        self.write(rest);
        if let Some(e) = self.error {
            return Err(e);
        }
        self.store.finish()?;
        Ok((self.store, self.minutes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::GroupingArgs;
    use crate::fp::Fingerprinter;
    use proto::{Endpoint, Protocol};
    use std::net::SocketAddr;

    fn fingerprinter(group_by: Option<&str>) -> Fingerprinter {
        Fingerprinter::from_args(&GroupingArgs {
            fingerprint: FingerprintMode::Dbtap,
            key_patterns: false,
            keep_key_order: false,
            group_by: group_by.map(str::to_string),
            where_: Vec::new(),
        })
    }

    fn ev(start_s: f64, dur_ms: u64, client: &str) -> QueryEvent {
        let start = (start_s * 1e9) as u64;
        let client: SocketAddr = client.parse().expect("addr");
        let mut e = QueryEvent {
            client: Endpoint::Ip(client),
            server: Endpoint::Ip("10.0.0.2:6379".parse().expect("addr")),
            ..proto::testing::event(
                Protocol::Redis,
                "get",
                start,
                Some(start + dur_ms * 1_000_000),
            )
        };
        e.text = Some("GET k".into());
        e
    }

    fn feed(b: &mut MinuteBins, fp: &mut Fingerprinter, e: &QueryEvent) {
        let mode = fp.mode();
        let c = fp.classify(e).expect("admitted");
        b.event_in(e, mode, &c);
    }

    #[test]
    fn events_go_to_the_minute_their_request_started() {
        let mut fp = fingerprinter(None);
        let mut b = MinuteBins::new(AggConfig::default(), DIGEST_LAG_NS);
        feed(&mut b, &mut fp, &ev(119.9, 500, "10.0.0.1:5000")); // ends in minute 120: counted in 60
        feed(&mut b, &mut fp, &ev(120.0, 1, "10.0.0.1:5000"));
        feed(&mut b, &mut fp, &ev(130.0, 1, "10.0.0.3:5000")); // another client: another group
        b.packet(175_000_000_000);
        assert!(b.ready().is_empty(), "60 s of lag not yet passed");
        b.packet(180_000_000_000);
        let r = b.ready();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].0, r[0].1.totals().stats.count), (60, 1));
        let rest = b.take_all();
        assert_eq!(rest.len(), 1);
        let (m, agg) = &rest[0];
        assert_eq!((*m, agg.totals().stats.count), (120, 2));
        assert_eq!(agg.groups().count(), 2);
        let g = agg.groups().next().expect("group");
        assert!(g.dims.is_some());
        // The fingerprint's own ID (as `dbtap digest` shows it), the same for both clients.
        let ids: Vec<&str> = agg.groups().map(|g| g.id.as_str()).collect();
        assert_eq!(ids[0], ids[1]);
        let e = ev(120.0, 1, "10.0.0.1:5000");
        let dims = fp.dims();
        let c = fp.classify(&e).expect("admitted");
        let (text, digest_id, _) = crate::fp::describe(FingerprintMode::Dbtap, dims, &e, &c);
        assert_eq!(
            (ids[0], g.fingerprint.as_str()),
            (digest_id.as_str(), text.as_str())
        );
        assert!(b.is_empty());
    }

    #[test]
    fn the_store_key_does_not_depend_on_the_callers_group_by() {
        let keys = |group_by: Option<&str>| {
            let mut fp = fingerprinter(group_by);
            let mut b = MinuteBins::new(AggConfig::default(), 0);
            feed(&mut b, &mut fp, &ev(61.0, 1, "10.0.0.1:5000"));
            feed(&mut b, &mut fp, &ev(62.0, 1, "10.0.0.3:5000"));
            let all = b.take_all();
            all[0]
                .1
                .groups()
                .map(|g| (g.key, g.id.clone(), g.fingerprint.clone()))
                .collect::<Vec<_>>()
        };
        let plain = keys(None);
        assert_eq!(plain.len(), 2);
        assert_eq!(keys(Some("db,user")), plain);
        assert_eq!(keys(Some("server,fingerprint")), plain);
    }

    #[test]
    fn pending_merges_per_minute() {
        let mut fp = fingerprinter(None);
        let mut b = MinuteBins::new(AggConfig::default(), 0);
        feed(&mut b, &mut fp, &ev(61.0, 1, "10.0.0.1:5000"));
        let mut p = Pending::default();
        p.add(b.take_all());
        feed(&mut b, &mut fp, &ev(62.0, 1, "10.0.0.1:5000"));
        p.add(b.take_all());
        feed(&mut b, &mut fp, &ev(125.0, 1, "10.0.0.1:5000"));
        p.add(b.take_all());
        assert_eq!(p.oldest(), Some(60));
        let d = p.drain();
        assert_eq!(d.iter().map(|(m, _)| *m).collect::<Vec<_>>(), [60, 120]);
        assert_eq!(d[0].1.totals().stats.count, 2);
        assert!(p.drain().is_empty());
    }
}
