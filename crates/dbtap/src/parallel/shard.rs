//! The sharded parallel digest: every worker runs the whole one-thread digest (reassembly,
//! parsing, fingerprinting, aggregation) on its share of the connections, and the aggregates
//! are merged at the end. Nothing crosses threads per event; what one thread would decide by
//! arrival order (the order groups are first seen, connection ids) is rebuilt from a global
//! key, and what a merge cannot rebuild (a bound reached) is a fallback to one thread.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use aggregate::{Aggregator, GroupKey, Stats};
use anyhow::Result;
use capture::Input;
use flow::FlowConfig;
use proto::{ConnMeta, QueryEvent};

use super::route::Router;
use super::{Outcome, ReadEnd, WorkerEnd};
use crate::DigestConsumer;
use crate::pipeline::{self, Consumer, Engine, Settings};

/// Bytes per chunk: the reader reads this much at a time (a chunk is grown only for a record
/// larger than that). 1 MiB rather than 4: what the kernel copies in is still in the cache when
/// the workers read it (on a 1.27 GB MySQL capture, 2 threads took 15 % less CPU than with
/// 4 MiB, `perf stat` interleaved; 512 KiB about the same, 256 KiB and 2 MiB dearer). Read, not
/// mapped: the copy costs less than the parsers' cache misses on mapped pages (ARCHITECTURE).
const CHUNK_BYTES: usize = 1 << 20;
/// Chunks read and not yet taken by every worker, at most: with [`CHUNK_BYTES`], what bounds
/// memory besides the engines' own caps (every chunk is shared by all workers: about `QUEUE +
/// N` chunks live, plus their frame lists: at most 40 bytes per 16-byte record header).
const QUEUE: usize = 4;
/// How often one thread's engine closes idle connections, in packet time
/// (`pipeline::EXPIRE_EVERY_NS`).
const EXPIRE_EVERY_NS: u64 = 1_000_000_000;

/// Frames read in a row, shared by every worker: the buffer the reader read them into (whole
/// records as in the file, or as decompressed), where each frame is in it, and its worker.
#[derive(Default)]
struct Chunk {
    name: Arc<str>,
    /// Sequence number of the first frame (frames are numbered from 0 over all files).
    first_seq: u64,
    data: Vec<u8>,
    frames: Vec<capture::FrameAt>,
    owners: Vec<u32>,
}

/// Where an event stands in one thread's order: (frame, 0) for the events of a frame, (frame,
/// 1) for those of the idle expiry after it, (`u64::MAX`, connection) for those of the end.
type Key = (u64, u64);

/// A worker's consumer: the digest's, fed with connection ids as one thread will number them
/// once the merge knows every worker's (the frame each connection opened at, plus one), and
/// noting the key at which each group was first seen.
struct Shard {
    inner: DigestConsumer,
    key: Key,
    finishing: bool,
    /// This engine's connection id to the provisional one.
    ids: HashMap<u64, u64, foldhash::fast::RandomState>,
    last: (u64, u64),
    /// Provisional ids in the order opened (ascending).
    opens: Vec<u64>,
    firsts: Vec<(Key, GroupKey)>,
    /// Two connections opened at one frame: provisional ids would collide.
    clash: bool,
}

impl Shard {
    fn id(&mut self, local: u64) -> u64 {
        if self.last.0 == local {
            return self.last.1;
        }
        let g = self.ids.get(&local).copied().unwrap_or(0);
        self.last = (local, g);
        g
    }
}

impl Consumer for Shard {
    /// An event whose connection id is already one thread's ([`Consumer::conn_id`]).
    fn event(&mut self, ev: QueryEvent) {
        self.event_ref(&ev);
    }

    const BY_REF: bool = true;

    fn conn_id(&mut self, conn: u64) -> u64 {
        self.id(conn)
    }

    fn event_ref(&mut self, ev: &QueryEvent) {
        let key = if self.finishing {
            (u64::MAX, ev.conn)
        } else {
            self.key
        };
        let before = self.inner.agg.unique_groups();
        self.inner.event_ref(ev);
        if self.inner.agg.unique_groups() > before
            && let Some(g) = self.inner.agg.groups().nth(before as usize)
        {
            self.firsts.push((key, g.key));
        }
    }

    fn conn_open(&mut self, meta: &ConnMeta) {
        let g = self.key.0.saturating_add(1);
        self.clash |= self.opens.last().is_some_and(|&l| l >= g) || self.key.1 != 0;
        self.opens.push(g);
        self.ids.insert(meta.id, g);
        self.last = (0, 0);
    }

    fn close(&mut self, conn: u64, ts_ns: u64) {
        let g = self.id(conn);
        self.ids.remove(&conn);
        self.last = (0, 0);
        self.inner.close(g, ts_ns);
    }
}

/// What a worker hands back.
struct Part {
    shard: Shard,
    end: WorkerEnd,
}

/// Runs `files` on `threads` workers, each with a consumer made by `fresh`, and merges them.
pub(super) fn run(
    files: &[PathBuf],
    settings: &Settings,
    threads: usize,
    fresh: &dyn Fn() -> DigestConsumer,
) -> Result<Outcome<DigestConsumer>> {
    capture::check_inputs(files)?;
    let mut inputs = Vec::with_capacity(files.len());
    for f in files {
        inputs.push(Input::check(f)?);
    }
    let per = super::worker_settings(settings, threads);
    let consumers: Vec<DigestConsumer> = (0..threads).map(|_| fresh()).collect();
    let total_len: u64 = inputs.iter().filter_map(Input::input_len).sum();
    let read = ReadSide {
        inputs: inputs.into(),
        cur: None,
        router: Router::new(threads, per.1.idle_timeout_ns),
        bar: pipeline::progress_bar(settings.progress, total_len),
        seq: 0,
        done_len: 0,
        end: ReadEnd::default(),
    };
    let shared = Shared {
        feed: Mutex::new(Feed {
            chunks: VecDeque::new(),
            base: 0,
            next: vec![0; threads],
            reading: false,
            done: false,
            spare: Vec::new(),
        }),
        ready: Condvar::new(),
        read: Mutex::new(read),
    };
    let (parts, fallback) = std::thread::scope(|s| {
        let shared = &shared;
        let handles: Vec<_> = consumers
            .into_iter()
            .enumerate()
            .map(|(w, c)| {
                let per = &per;
                s.spawn(move || worker((w, threads), per, c, shared))
            })
            .collect();
        let mut parts = Vec::new();
        let mut fallback = None;
        for h in handles {
            match h.join() {
                Ok(Ok(p)) => parts.push(p),
                Ok(Err(why)) => fallback = fallback.or(Some(why)),
                Err(_) => anyhow::bail!("a digest worker panicked"),
            }
        }
        Ok((parts, fallback))
    })?;
    let mut read = shared.read.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some(b) = read.bar.take() {
        b.finish_and_clear();
    }
    let read_end = read.end;
    if let Some(why) = read_end.fallback.clone().or(fallback) {
        return Ok(Outcome::Fallback(why));
    }
    Ok(finish(parts, read_end, settings))
}

/// The merge of the workers' parts, or why it would not be one thread's result.
fn finish(parts: Vec<Part>, read_end: ReadEnd, settings: &Settings) -> Outcome<DigestConsumer> {
    let mut ends = Vec::with_capacity(parts.len());
    let mut shards = Vec::with_capacity(parts.len());
    for p in parts {
        ends.push(p.end);
        shards.push(p.shard);
    }
    let consumer = match merge(shards) {
        Ok(c) => c,
        Err(why) => return Outcome::Fallback(why),
    };
    match super::health(ends, read_end, settings) {
        Ok(h) => Outcome::Done(consumer, h),
        Err(why) => Outcome::Fallback(why),
    }
}

/// What the workers share: the chunks read and not yet taken by all of them, and the reading,
/// which falls to whichever worker runs out of chunks first (no thread of its own: on as many
/// cores as workers, a reader thread would compete with them for the cores).
struct Shared {
    feed: Mutex<Feed>,
    /// A chunk was added or taken by every worker, or the reading ended.
    ready: Condvar,
    read: Mutex<ReadSide>,
}

/// The chunks in flight.
struct Feed {
    /// Chunks not yet taken by every worker; the first is chunk number `base`.
    chunks: VecDeque<Arc<Chunk>>,
    base: u64,
    /// The number of the chunk each worker takes next (`u64::MAX` once it stopped).
    next: Vec<u64>,
    /// A worker is reading the next chunk (outside this lock).
    reading: bool,
    /// No chunk will come any more.
    done: bool,
    /// Emptied read buffers, for the next reads.
    spare: Vec<Chunk>,
}

impl Feed {
    /// Drops the chunks every worker has taken; true if any.
    fn trim(&mut self) -> bool {
        let low = self.next.iter().copied().min().unwrap_or(u64::MAX);
        let mut any = false;
        while self.base < low
            && let Some(c) = self.chunks.pop_front()
        {
            self.base += 1;
            any = true;
            self.keep(c);
        }
        any
    }

    /// No worker is reading, the reading has not ended, and the queue has room.
    fn may_read(&self) -> bool {
        !self.reading && !self.done && self.chunks.len() < QUEUE
    }

    /// Keeps `c`'s buffers for a later read if no worker holds it any more.
    fn keep(&mut self, c: Arc<Chunk>) {
        if let Some(c) = Arc::into_inner(c) {
            self.spare(c);
        }
    }

    /// Keeps an emptied chunk's buffers for a later read (a few at most).
    fn spare(&mut self, c: Chunk) {
        if self.spare.len() <= QUEUE {
            self.spare.push(c);
        }
    }
}

/// Worker `w`'s next chunk, read by `w` itself when no worker has read it yet; `None` at the
/// end. A worker that takes the newest chunk read so far reads the one after it first, while
/// there is room: the others then find their next chunk read rather than wait for its reading.
fn next_for(shared: &Shared, w: usize) -> Option<Arc<Chunk>> {
    let mut f = lock(&shared.feed);
    loop {
        let n = f.next.get(w).copied().unwrap_or(u64::MAX);
        let at = n.checked_sub(f.base).and_then(|k| usize::try_from(k).ok());
        if let Some(c) = at.and_then(|k| f.chunks.get(k)).cloned() {
            let newest = at == f.chunks.len().checked_sub(1);
            if let Some(x) = f.next.get_mut(w) {
                *x += 1;
            }
            if f.trim() {
                shared.ready.notify_all();
            }
            if newest && f.may_read() {
                drop(read_one(shared, f));
            }
            return Some(c);
        }
        if f.done {
            return None;
        }
        if f.may_read() {
            f = read_one(shared, f);
            continue;
        }
        f = shared.ready.wait(f).unwrap_or_else(|e| e.into_inner());
    }
}

/// Reads the next chunk into the queue, outside the queue's lock `f` (taken again after).
fn read_one<'a>(shared: &'a Shared, mut f: MutexGuard<'a, Feed>) -> MutexGuard<'a, Feed> {
    f.reading = true;
    let spare = f.spare.pop().unwrap_or_default();
    drop(f);
    let got = lock(&shared.read).next(spare);
    let mut f = lock(&shared.feed);
    f.reading = false;
    match got {
        Some(c) => f.chunks.push_back(Arc::new(c)),
        None => f.done = true,
    }
    shared.ready.notify_all();
    f
}

/// The lock, also after a worker panicked holding it (what it guards stays consistent: every
/// change under it is a few assignments).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Worker `w` takes no more chunks (also when it panics): the others stop waiting for it.
struct Leave<'a>(&'a Shared, usize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut f = lock(&self.0.feed);
        if let Some(x) = f.next.get_mut(self.1) {
            *x = u64::MAX;
        }
        f.trim();
        if std::thread::panicking() {
            f.done = true;
        }
        self.0.ready.notify_all();
    }
}

/// The reading: frames in order, in the buffers they were read into (no copy), each with its
/// worker (`router`'s).
struct ReadSide {
    inputs: VecDeque<Input>,
    /// The file being read, and its name.
    cur: Option<(capture::Reader, Arc<str>)>,
    router: Router,
    bar: Option<indicatif::ProgressBar>,
    seq: u64,
    done_len: u64,
    end: ReadEnd,
}

impl ReadSide {
    /// The next chunk, read into `c`'s buffers; `None` at the end of the last file, or when
    /// the workers cannot go on (`end.fallback` says why).
    fn next(&mut self, mut c: Chunk) -> Option<Chunk> {
        loop {
            if self.end.fallback.is_some() {
                return None;
            }
            let Some((reader, name)) = self.cur.as_mut() else {
                let input = self.inputs.pop_front()?;
                self.open(input);
                continue;
            };
            match next_chunk(reader, &mut c) {
                Ok(true) => {}
                Ok(false) => {
                    self.close_file();
                    continue;
                }
                Err(e) => {
                    let w = format!("{e}; the report covers what was read before it");
                    self.end.read_warnings.push(w);
                    self.close_file();
                    continue;
                }
            }
            if let Err(why) = place(&mut c, &mut self.router, &mut self.end) {
                self.end.fallback = Some(why.into());
                return None;
            }
            c.name = name.clone();
            c.first_seq = self.seq;
            self.seq += c.frames.len() as u64;
            if let Some(b) = &self.bar {
                b.set_position(self.done_len + reader.input_position());
            }
            return Some(c);
        }
    }

    fn open(&mut self, input: Input) {
        match input.open() {
            Ok(r) => {
                let name: Arc<str> = r.name().into();
                self.cur = Some((r, name));
            }
            Err(e) => self.end.fallback = Some(format!("{e}")),
        }
    }

    fn close_file(&mut self) {
        if let Some((reader, name)) = self.cur.take() {
            self.end.truncated_frames += reader.stats().truncated_frames;
            self.end.names.push(name.to_string());
            self.done_len += reader.input_len().unwrap_or(0);
        }
    }
}

/// The next run of frames into `c`: the read buffer they were read into, and where each is in
/// it; false at the end.
fn next_chunk(reader: &mut capture::Reader, c: &mut Chunk) -> Result<bool, capture::CaptureError> {
    // A buffer grown for a larger record goes back to the usual size.
    if c.data.len() != CHUNK_BYTES {
        c.data.resize(CHUNK_BYTES, 0);
        c.data.shrink_to_fit();
    }
    let spare = std::mem::take(&mut c.data);
    Ok(match reader.next_bulk(spare, &mut c.frames)? {
        Some(d) => {
            c.data = d;
            true
        }
        None => false,
    })
}

/// Each frame's worker, and the capture's first and last times; an error for what the
/// workers cannot split (a socket-stream capture, IP fragments).
fn place(c: &mut Chunk, router: &mut Router, end: &mut ReadEnd) -> Result<(), &'static str> {
    c.owners.clear();
    for f in &c.frames {
        let (lt, ts) = (f.linktype, f.ts_ns);
        if lt == stream::LINKTYPE {
            return Err("a socket-stream capture");
        }
        let data = c.data.get(f.start..f.end).unwrap_or_default();
        let Some(w) = router.route(lt, data, ts) else {
            return Err("IP fragments");
        };
        c.owners.push(w);
        end.first_ts.get_or_insert(ts);
        end.last_ts = Some(end.last_ts.map_or(ts, |l| l.max(ts)));
    }
    Ok(())
}

/// A worker: its own frames (the reading found their worker) through its
/// engine and consumer, every idle expiry one thread would run; then its part.
fn worker(
    (w, n): (usize, usize),
    (settings, flow): &(Settings, FlowConfig),
    mut inner: DigestConsumer,
    shared: &Shared,
) -> Result<Part, String> {
    let _leave = Leave(shared, w);
    // Each worker's share of the transaction tracker's connections: past it, one thread might
    // have tracked what a worker could not (a fallback).
    let d = aggregate::txn::TxnConfig::default();
    let max_conns = (d.max_conns / n).max(1);
    inner
        .agg
        .track_transactions(aggregate::txn::TxnConfig { max_conns, ..d });
    let shard = Shard {
        inner,
        key: (0, 0),
        finishing: false,
        ids: HashMap::default(),
        last: (0, 0),
        opens: Vec::new(),
        firsts: Vec::new(),
        clash: false,
    };
    let mut engine = Engine::new(settings, flow.clone(), shard);
    engine.external_expire();
    let (mut peak, mut last_expire) = (0usize, 0u64);
    while let Some(chunk) = next_for(shared, w) {
        for (i, (f, &o)) in chunk.frames.iter().zip(&chunk.owners).enumerate() {
            let (lt, ts) = (f.linktype, f.ts_ns);
            let seq = chunk.first_seq + i as u64;
            if o as usize == w {
                let data = chunk.data.get(f.start..f.end).unwrap_or_default();
                engine.consumer_mut().key = (seq, 0);
                engine.frame(lt, data, ts, &chunk.name);
                peak = peak.max(engine.parts().table_len);
            }
            if ts >= last_expire.saturating_add(EXPIRE_EVERY_NS) {
                engine.consumer_mut().key = (seq, 1);
                engine.expire(ts);
                last_expire = ts;
            }
        }
        if let Some(c) = Arc::into_inner(chunk) {
            lock(&shared.feed).spare(c);
        }
    }
    worker_end(w, engine, peak, flow)
}

/// A worker's last step: its engine finished, what the merge checks.
fn worker_end(
    w: usize,
    mut engine: Engine<Shard>,
    peak: usize,
    flow: &FlowConfig,
) -> Result<Part, String> {
    engine.consumer_mut().finishing = true;
    let (shard, end) = super::finish_worker(w, engine, peak, flow);
    if shard.clash {
        return Err("two connections opened at one frame".into());
    }
    Ok(Part { shard, end })
}

/// One consumer from the workers': aggregates merged, groups in the order one thread first saw
/// them, connections numbered as one thread numbers them.
fn merge(mut shards: Vec<Shard>) -> Result<DigestConsumer, String> {
    let (rank, seen_by) = group_order(&shards)?;
    let mut opens: Vec<u64> = shards
        .iter()
        .flat_map(|s| s.opens.iter().copied())
        .collect();
    opens.sort_unstable();
    let mut it = shards.drain(..);
    let Some(first) = it.next() else {
        return Err("no worker".into());
    };
    let mut base = first.inner;
    for (w, s) in it.enumerate() {
        let mut o = s.inner;
        base.agg.merge(&o.agg);
        base.agg
            .adopt_names(&o.agg, |k| seen_by.get(k) == Some(&(w + 1)));
        let txns = o.agg.transactions_mut().map(std::mem::take);
        if let (Some(t), Some(ot)) = (base.agg.transactions_mut(), txns) {
            t.merge(ot);
        }
    }
    base.agg
        .order_groups(|k| rank.get(k).copied().unwrap_or(usize::MAX));
    if let Some(why) = bound_reached(&base.agg) {
        return Err(why.into());
    }
    if let Some(t) = base.agg.transactions_mut() {
        t.renumber(|p| opens.partition_point(|&x| x < p) as u64 + 1);
    }
    Ok(base)
}

/// Each group's place in the order one thread first saw them: by the key of its first event
/// over all workers; and the worker that saw it first. An error when two workers saw new
/// groups at one key (connections of both closed idle at one expiry): one thread's order
/// among them is not known.
fn group_order(shards: &[Shard]) -> Result<(Ranks, Ranks), String> {
    let mut first: HashMap<GroupKey, (Key, usize, usize)> = HashMap::new();
    for (w, s) in shards.iter().enumerate() {
        for (i, &(k, g)) in s.firsts.iter().enumerate() {
            let e = first.entry(g).or_insert((k, w, i));
            if (k, w, i) < *e {
                *e = (k, w, i);
            }
        }
    }
    let mut order: Vec<(Key, usize, usize, GroupKey)> = first
        .into_iter()
        .map(|(g, (k, w, i))| (k, w, i, g))
        .collect();
    order.sort_unstable();
    for pair in order.windows(2) {
        if let [a, b] = pair
            && a.0 == b.0
            && a.1 != b.1
        {
            return Err("two workers saw new groups at the same idle expiry".into());
        }
    }
    let seen_by = order.iter().map(|&(_, w, _, g)| (g, w)).collect();
    let rank = order
        .into_iter()
        .enumerate()
        .map(|(r, (.., g))| (g, r))
        .collect();
    Ok((rank, seen_by))
}

/// A number per group: its rank, or the worker that saw it first.
type Ranks = HashMap<GroupKey, usize>;

/// A bound whose cut depends on the order events came in, reached in the merged aggregate.
fn bound_reached(agg: &Aggregator) -> Option<&'static str> {
    if agg.overflow().is_some() {
        return Some("the cap on groups was reached");
    }
    let capped = |s: &Stats| {
        s.databases.other() > 0
            || s.users.other() > 0
            || s.clients.other() > 0
            || s.errors_by_code.other() > 0
    };
    if capped(&agg.totals().stats) || agg.groups().any(|g| capped(&g.stats)) {
        return Some("a group's cap on distinct values was reached");
    }
    if agg.totals().dims.other().count > 0 {
        return Some("the cap on load shares was reached");
    }
    if agg.transactions().is_some_and(|t| t.totals().untracked > 0) {
        return Some("a worker's share of the transaction tracker was reached");
    }
    None
}
