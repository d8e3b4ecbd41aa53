//! The parallel digest (`dbtap digest --threads N`): one reader thread reads and routes frames by
//! connection to N workers, each an [`Engine`] (flow table, reassembly, sessions); the calling
//! thread puts the workers' events back into the order one thread would have produced them and
//! hands them to the one consumer, so every output is the same byte for byte. What cannot be
//! shown to give the same result (IP fragments, socket-stream captures, a bound reached, two
//! workers closing idle connections at the same instant) is reported as a fallback, and the
//! caller runs on one thread.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use anyhow::Result;
use capture::Input;
use flow::FlowConfig;
use proto::{ConnMeta, QueryEvent};
use report::CaptureHealth;

use crate::pipeline::{self, Consumer, Engine, Settings};

mod route;
mod shard;

/// Frames read before every worker is sent its share (one epoch; pipelined requests make many
/// events per frame, and an epoch's events are held until every worker has done it)...
const EPOCH_FRAMES: usize = 1024;
/// ... or frame bytes: an epoch holds at most this much plus one frame.
const EPOCH_BYTES: usize = 4 << 20;
/// Epochs queued per worker, each way: with [`EPOCH_BYTES`], what bounds memory besides the
/// engines' own caps (about 6 epochs' frames in flight, 24 MiB).
const QUEUE: usize = 4;
/// An entry of a batch that is not a frame: expire idle connections at its time.
const EXPIRE: u32 = u32::MAX;
/// The key of the items a worker emits while closing every connection at the end.
const FINISH_KEY: u64 = u64::MAX;

/// How a parallel run ended.
#[allow(clippy::large_enum_variant)] // made once per run
pub(crate) enum Outcome<C> {
    Done(C, CaptureHealth),
    /// Not provably the same as one thread: why. The consumer saw part of the events.
    Fallback(String),
}

/// One worker's share of an epoch: frame bytes back to back, and per entry (sequence number,
/// link type or [`EXPIRE`], time, offset, length).
#[derive(Default)]
struct Batch {
    data: Vec<u8>,
    entries: Vec<(u64, u32, u64, usize, usize)>,
    name: Arc<str>,
}

/// What a worker's engine hands on, keyed by `2 * sequence` (the frame) or `2 * sequence + 1`
/// (the expiry after it).
#[allow(clippy::large_enum_variant)] // events are nearly all items: no allocation per event
enum Item {
    Open(u64),
    Event(QueryEvent),
    Close(u64, u64),
}

#[derive(Default)]
struct Fwd {
    key: u64,
    items: Vec<(u64, Item)>,
}

impl Consumer for Fwd {
    fn event(&mut self, ev: QueryEvent) {
        self.items.push((self.key, Item::Event(ev)));
    }
    fn conn_open(&mut self, meta: &ConnMeta) {
        self.items.push((self.key, Item::Open(meta.id)));
    }
    fn close(&mut self, conn: u64, ts_ns: u64) {
        self.items.push((self.key, Item::Close(conn, ts_ns)));
    }
}

/// A worker's end: its last items, its health, and what the merge checks.
struct WorkerEnd {
    items: Vec<(u64, Item)>,
    health: CaptureHealth,
    warnings: Vec<String>,
    unknown_protocol: u64,
    midstream_ports: BTreeMap<u16, u64>,
    untracked_ports: BTreeMap<u16, u64>,
    /// A reason the result may differ from one thread's.
    bound: Option<String>,
}

enum Out {
    Epoch(Vec<(u64, Item)>),
    End(Box<WorkerEnd>),
}

/// What the reader read besides frames.
#[derive(Default)]
struct ReadEnd {
    names: Vec<String>,
    truncated_frames: u64,
    read_warnings: Vec<String>,
    first_ts: Option<u64>,
    last_ts: Option<u64>,
    fallback: Option<String>,
}

/// Runs `files` on `threads` workers into `consumer`. The consumer must read only events and
/// connection closes (the digest without timeline, store or sink): packets, segments and bytes
/// are not handed to it.
pub(crate) fn run<C: Consumer>(
    files: &[PathBuf],
    settings: &Settings,
    threads: usize,
    mut consumer: C,
) -> Result<Outcome<C>> {
    capture::check_inputs(files)?;
    let mut inputs = Vec::with_capacity(files.len());
    for f in files {
        inputs.push(Input::check(f)?);
    }
    let stop = AtomicBool::new(false);
    let per = worker_settings(settings, threads);
    std::thread::scope(|s| {
        let mut to_workers = Vec::new();
        // Emptied batches come back to the reader: their buffers are reused, not reallocated.
        let (back_tx, back_rx) = sync_channel::<Batch>(threads * (QUEUE + 2));
        let mut from_workers = Vec::new();
        for w in 0..threads {
            let (tx, rx) = sync_channel::<Batch>(QUEUE);
            let (otx, orx) = sync_channel::<Out>(QUEUE);
            let per = &per;
            let back = back_tx.clone();
            s.spawn(move || worker(w, per, rx, otx, back));
            to_workers.push(tx);
            from_workers.push(orx);
        }
        let stop = &stop;
        let total_len: u64 = inputs.iter().filter_map(Input::input_len).sum();
        let bar = pipeline::progress_bar(settings.progress, total_len);
        drop(back_tx);
        let router = route::Router::new(threads, per.1.idle_timeout_ns);
        let to = (to_workers, back_rx);
        let reader = s.spawn(move || read(inputs, to, (router, stop), bar));
        let merged = merge(&from_workers, &mut consumer, stop);
        let read_end = reader
            .join()
            .map_err(|_| anyhow::anyhow!("the reader thread panicked"))?;
        let (ends, fallback) = merged?;
        if let Some(why) = read_end.fallback.clone().or(fallback) {
            return Ok(Outcome::Fallback(why));
        }
        match health(ends, read_end, settings) {
            Ok(h) => Ok(Outcome::Done(consumer, h)),
            Err(why) => Ok(Outcome::Fallback(why)),
        }
    })
}

/// Each worker's share of the bounds, so that no worker reaching its share means one thread
/// would not have reached the whole.
fn worker_settings(settings: &Settings, threads: usize) -> (Settings, FlowConfig) {
    let mut per = settings.clone();
    let n = threads.max(1);
    per.max_connections = (settings.max_connections / n).max(1);
    per.session.text_budget = proto::kit::TextBudget::new(settings.session.text_budget.limit() / n);
    let d = FlowConfig::default();
    let flow = FlowConfig {
        max_flows: per.max_connections,
        max_buffer_total: d.max_buffer_total / n,
        ..d
    };
    (per, flow)
}

/// The reader: frames in order, each TCP segment to the worker of its connection (`router`'s),
/// everything else to worker 0, and every second of packet time an
/// expiry to all, where one thread's engine would expire.
fn read(
    inputs: Vec<Input>,
    (to, back): (Vec<SyncSender<Batch>>, Receiver<Batch>),
    (mut router, stop): (route::Router, &AtomicBool),
    bar: Option<indicatif::ProgressBar>,
) -> ReadEnd {
    let mut done_len = 0u64;
    let n = to.len();
    let mut end = ReadEnd::default();
    let mut batches: Vec<Batch> = (0..n).map(|_| Batch::default()).collect();
    let (mut seq, mut in_epoch, mut epoch_bytes, mut last_expire) = (0u64, 0usize, 0usize, 0u64);
    'files: for input in inputs {
        let mut reader = match input.open() {
            Ok(r) => r,
            Err(e) => {
                end.fallback = Some(format!("{e}"));
                break;
            }
        };
        let name: Arc<str> = reader.name().into();
        for b in &mut batches {
            b.name = name.clone();
        }
        loop {
            let frame = match reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    let w = format!("{e}; the report covers what was read before it");
                    end.read_warnings.push(w);
                    break;
                }
            };
            let (lt, ts, data) = (frame.linktype, frame.ts_ns, frame.data);
            if lt == stream::LINKTYPE {
                end.fallback = Some("a socket-stream capture".into());
                break 'files;
            }
            let Some(w) = router.route(lt, data, ts) else {
                end.fallback = Some("IP fragments".into());
                break 'files;
            };
            let w = w as usize;
            end.first_ts.get_or_insert(ts);
            end.last_ts = Some(end.last_ts.map_or(ts, |l| l.max(ts)));
            let b = &mut batches[w];
            b.entries.push((seq, lt, ts, b.data.len(), data.len()));
            b.data.extend_from_slice(data);
            if ts >= last_expire.saturating_add(1_000_000_000) {
                for b in &mut batches {
                    b.entries.push((seq, EXPIRE, ts, 0, 0));
                }
                last_expire = ts;
            }
            seq += 1;
            in_epoch += 1;
            epoch_bytes += data.len();
            if in_epoch >= EPOCH_FRAMES || epoch_bytes >= EPOCH_BYTES {
                (in_epoch, epoch_bytes) = (0, 0);
                if let Some(b) = &bar {
                    b.set_position(done_len + reader.input_position());
                }
                if !send_all(&mut batches, (&to, &back), &name) || stop.load(Ordering::Relaxed) {
                    break 'files;
                }
            }
        }
        end.truncated_frames += reader.stats().truncated_frames;
        end.names.push(name.to_string());
        done_len += reader.input_len().unwrap_or(0);
        if !send_all(&mut batches, (&to, &back), &name) {
            break;
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    end
}

/// Sends every worker its batch of the epoch (empty ones too: the merge takes one per worker).
fn send_all(
    batches: &mut [Batch],
    (to, back): (&[SyncSender<Batch>], &Receiver<Batch>),
    name: &Arc<str>,
) -> bool {
    for (b, tx) in batches.iter_mut().zip(to) {
        let mut fresh = back.try_recv().unwrap_or_default();
        fresh.data.clear();
        fresh.entries.clear();
        fresh.name = name.clone();
        if tx.send(std::mem::replace(b, fresh)).is_err() {
            return false;
        }
    }
    true
}

/// A worker: its engine over its batches; one output per batch, then its end.
fn worker(
    w: usize,
    (settings, flow): &(Settings, FlowConfig),
    rx: Receiver<Batch>,
    tx: SyncSender<Out>,
    back: SyncSender<Batch>,
) {
    let mut engine = Engine::new(settings, flow.clone(), Fwd::default());
    engine.external_expire();
    let mut peak = 0usize;
    for b in rx {
        for &(seq, lt, ts, off, len) in &b.entries {
            if lt == EXPIRE {
                engine.consumer_mut().key = 2 * seq + 1;
                engine.expire(ts);
            } else {
                engine.consumer_mut().key = 2 * seq;
                let data = b.data.get(off..off + len).unwrap_or_default();
                engine.frame(lt, data, ts, &b.name);
                peak = peak.max(engine.parts().table_len);
            }
        }
        let items = std::mem::take(&mut engine.consumer_mut().items);
        engine.consumer_mut().items.reserve(items.len());
        if tx.send(Out::Epoch(items)).is_err() {
            return;
        }
        let _ = back.try_send(b);
    }
    engine.consumer_mut().key = FINISH_KEY;
    let (fwd, mut end) = finish_worker(w, engine, peak, flow);
    end.items = fwd.items;
    let _ = tx.send(Out::End(Box::new(end)));
}

/// Closes a worker's engine (every connection; what it hands on goes to its consumer, which the
/// caller has set up for that): its consumer, and its end without items: health, warnings,
/// ports, and the bound it reached that a merge could not reproduce, if any.
fn finish_worker<C: Consumer>(
    w: usize,
    engine: Engine<C>,
    peak: usize,
    flow: &FlowConfig,
) -> (C, WorkerEnd) {
    let p = engine.parts();
    let bound = if peak >= flow.max_flows {
        Some(format!("worker {w} reached its share of --max-connections"))
    } else if p.flow.buffer_overflows > 0 {
        Some("a reassembly buffer cap was reached".into())
    } else {
        None
    };
    let (warnings, unknown_protocol) = (p.warnings.to_vec(), p.unknown_protocol);
    let midstream_ports = p.midstream_ports.clone();
    let untracked_ports = p.flow.untracked_ports.clone();
    let (c, health) = engine.finish(Vec::new(), 0);
    let bound = bound.or_else(|| {
        (health.protocol.text_cut_by_budget > 0)
            .then(|| "its share of --max-text-total was reached".to_string())
    });
    let end = WorkerEnd {
        items: Vec::new(),
        health,
        warnings,
        unknown_protocol,
        midstream_ports,
        untracked_ports,
        bound,
    };
    (c, end)
}

/// Connection ids as one thread numbers them: in the order connections open.
#[derive(Default)]
struct Ids {
    map: HashMap<(usize, u64), u64, foldhash::fast::RandomState>,
    next: u64,
}

impl Ids {
    fn open(&mut self, w: usize, local: u64) {
        self.next += 1;
        self.map.insert((w, local), self.next);
    }
    fn get(&self, w: usize, local: u64) -> u64 {
        self.map.get(&(w, local)).copied().unwrap_or(0)
    }
}

/// Hands one item to the consumer, its connection renumbered.
fn deliver<C: Consumer>(c: &mut C, ids: &mut Ids, w: usize, item: Item) {
    match item {
        Item::Open(id) => ids.open(w, id),
        Item::Event(mut ev) => {
            ev.conn = ids.get(w, ev.conn);
            c.event(ev);
        }
        Item::Close(id, ts) => {
            let g = ids.get(w, id);
            ids.map.remove(&(w, id));
            c.close(g, ts);
        }
    }
}

type Merged = Result<(Vec<WorkerEnd>, Option<String>)>;

/// Takes one output per worker per epoch and delivers its items in sequence order; then the
/// workers' last closes in the order one thread would close them (by connection id).
fn merge<C: Consumer>(from: &[Receiver<Out>], c: &mut C, stop: &AtomicBool) -> Merged {
    let mut ids = Ids::default();
    let mut fallback = None;
    let mut ends: Vec<Option<WorkerEnd>> = from.iter().map(|_| None).collect();
    loop {
        let mut lists = Vec::with_capacity(from.len());
        for (w, rx) in from.iter().enumerate() {
            match rx.recv() {
                Ok(Out::Epoch(items)) => lists.push(items.into_iter().peekable()),
                Ok(Out::End(e)) => ends[w] = Some(*e),
                Err(_) => anyhow::bail!("a digest worker stopped"),
            }
        }
        if ends.iter().any(Option::is_some) {
            break;
        }
        if fallback.is_none() && !deliver_epoch(&mut lists, c, &mut ids) {
            fallback = Some("two workers closed idle connections at the same time".into());
            stop.store(true, Ordering::Relaxed);
        }
    }
    let mut ends: Vec<WorkerEnd> = ends
        .into_iter()
        .map(|e| e.ok_or_else(|| anyhow::anyhow!("a digest worker stopped")))
        .collect::<Result<_>>()?;
    if fallback.is_none() {
        finish_order(&mut ends, c, &mut ids);
    }
    Ok((ends, fallback))
}

type Items = std::iter::Peekable<std::vec::IntoIter<(u64, Item)>>;

/// Delivers one epoch: the workers' items (each list in key order) merged by key, a key's items
/// from one worker. False when two workers have items of one key (an expiry that closed
/// connections in both): one thread's order among them is not known.
fn deliver_epoch<C: Consumer>(lists: &mut [Items], c: &mut C, ids: &mut Ids) -> bool {
    loop {
        let mut best: Option<(u64, usize)> = None;
        for (w, l) in lists.iter_mut().enumerate() {
            if let Some(&(k, _)) = l.peek() {
                match best {
                    Some((b, _)) if b == k => return false,
                    Some((b, _)) if b < k => {}
                    _ => best = Some((k, w)),
                }
            }
        }
        let Some((k, w)) = best else { return true };
        while let Some((_, item)) = lists[w].next_if(|(k2, _)| *k2 == k) {
            deliver(c, ids, w, item);
        }
    }
}

/// The closes at the end: each worker closes its connections in id order; one thread closes
/// all of them in (global) id order.
fn finish_order<C: Consumer>(ends: &mut [WorkerEnd], c: &mut C, ids: &mut Ids) {
    let mut runs: Vec<(u64, usize, Vec<Item>)> = Vec::new();
    for (w, e) in ends.iter_mut().enumerate() {
        let mut run = Vec::new();
        for (_, item) in std::mem::take(&mut e.items) {
            let closes = match &item {
                Item::Close(id, _) => Some(ids.get(w, *id)),
                _ => None,
            };
            run.push(item);
            if let Some(g) = closes {
                runs.push((g, w, std::mem::take(&mut run)));
            }
        }
        if !run.is_empty() {
            runs.push((u64::MAX, w, run));
        }
    }
    runs.sort_by_key(|&(g, w, _)| (g, w));
    for (_, w, run) in runs {
        for item in run {
            deliver(c, ids, w, item);
        }
    }
}

/// The health of the whole run from the workers' and the reader's.
fn health(ends: Vec<WorkerEnd>, r: ReadEnd, settings: &Settings) -> Result<CaptureHealth, String> {
    let mut h = CaptureHealth {
        files: r.names,
        ..CaptureHealth::default()
    };
    let mut unknown_protocol = 0;
    let mut midstream = BTreeMap::new();
    let mut untracked: BTreeMap<u16, u64> = BTreeMap::new();
    let mut warnings = Vec::new();
    for e in ends {
        if let Some(why) = e.bound {
            return Err(why);
        }
        let mut wh = e.health;
        wh.warnings.clear();
        h.add(&wh);
        unknown_protocol += e.unknown_protocol;
        for (p, n) in e.midstream_ports {
            *midstream.entry(p).or_insert(0) += n;
        }
        for (p, n) in e.untracked_ports {
            *untracked.entry(p).or_insert(0) += n;
        }
        warnings.extend(e.warnings);
    }
    if untracked.len() >= flow::MAX_UNTRACKED_PORTS {
        return Err("payload on many untracked ports".into());
    }
    h.frames.truncated_packets += r.truncated_frames;
    h.first_ts_ns = r.first_ts;
    h.last_ts_ns = r.last_ts;
    h.warnings = pipeline::health_warnings(warnings, unknown_protocol, &midstream, &untracked);
    Ok(pipeline::close_health(h, r.read_warnings, settings))
}

/// `dbtap digest`'s run: on `--threads` workers when the options and the capture allow the
/// same report as one thread, else on one (with a note when `--threads` was asked for).
pub(crate) fn digest(
    args: &crate::cli::DigestArgs,
    settings: &Settings,
    consumer: crate::DigestConsumer,
    fresh: impl Fn() -> crate::DigestConsumer,
) -> Result<(crate::DigestConsumer, CaptureHealth)> {
    let files = &args.input.files;
    let threads = args.threads.map_or_else(default_threads, |n| n as usize);
    let plain = consumer.timeline.is_none() && consumer.store.is_none() && consumer.fleet.is_none();
    let stdin = files.iter().any(|f| f.as_os_str() == "-");
    if threads <= 1 || !plain || stdin {
        if threads > 1 && args.threads.is_some() {
            eprintln!(
                "dbtap: note: --threads: one thread reads {}",
                why_one(plain)
            );
        }
        return pipeline::run(files, settings, consumer);
    }
    // --mergeable's time blocks add floating-point sums in event order: the events go to one
    // consumer (`run`). Otherwise every worker digests its connections (`shard`).
    let outcome = if consumer.recorder.is_some() {
        run(files, settings, threads, consumer)?
    } else {
        shard::run(files, settings, threads, &fresh)?
    };
    match outcome {
        Outcome::Done(c, h) => Ok((c, h)),
        Outcome::Fallback(why) => {
            if args.threads.is_some() {
                eprintln!("dbtap: note: --threads: {why}; read again on one thread");
            }
            pipeline::run(files, settings, fresh())
        }
    }
}

/// Most workers `--threads` starts by default: one reader feeds them, and past this many it is
/// the serial part on every capture measured (README, Speed); more can be asked for.
const MAX_DEFAULT_THREADS: usize = 16;

/// `--threads` when not given: the cores this process may run on (its CPU affinity and cgroup
/// quota, as the standard library reads them), at most [`MAX_DEFAULT_THREADS`].
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_DEFAULT_THREADS))
}

fn why_one(plain: bool) -> &'static str {
    if plain {
        "standard input"
    } else {
        "with --timeline, --store or --clickhouse"
    }
}
