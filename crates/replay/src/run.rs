//! The replay itself: one thread per replayed session (bounded by `max_connections`), each
//! with its own target connection, sending its batches on schedule and waiting for its own
//! replies (closed loop). What it sends and receives is fed to a protocol session of the
//! target, whose events go to the caller's sink on one collector thread.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proto::{ConnMeta, Direction, Health, QueryEvent, Session, SessionConfig, Sink};

use crate::capture::Plan;
use crate::fidelity::{Fidelity, Tally};
use crate::redis::{self, Credentials};
use crate::resp::{self, Frame};
use crate::schedule::{self, Timing};

/// Where the replay goes.
#[derive(Clone, Debug)]
pub enum Target {
    Tcp(String),
    Unix(PathBuf),
}

/// How the replay runs.
#[derive(Clone, Debug)]
pub struct Options {
    pub timing: Timing,
    pub skip_idle_ns: Option<u64>,
    pub scale: u32,
    pub sessions_pct: f64,
    pub max_connections: usize,
    pub creds: Credentials,
    /// Longest wait for the replies of a batch (then the session goes on, counted).
    pub reply_timeout: Duration,
    /// Longest wait for a blocking command's reply (then the connection is replaced).
    pub block_wait: Duration,
    pub session: SessionConfig,
    /// `--target-tls`: TLS to the target.
    pub tls: Option<crate::tls::Tls>,
}

/// Receives the target's events (on the collector thread).
pub trait EventSink: std::marker::Send + 'static {
    fn event(&mut self, ev: QueryEvent);
    fn close(&mut self, conn: u64, ts_ns: u64);
}

/// Target events queued for the collector at most (a session waits when it is full).
const EVENT_QUEUE: usize = 1 << 16;

/// Events a session thread hands to the collector at once: one channel message (and at most
/// one wake-up of the collector) per this many events, not per event.
pub(crate) const EVENT_BATCH: usize = 64;

enum Msg {
    Events(Vec<QueryEvent>),
    Close(u64, u64),
}

thread_local! {
    /// This thread's session events not yet sent to the collector.
    static PENDING: std::cell::RefCell<Vec<QueryEvent>> = const {
        std::cell::RefCell::new(Vec::new())
    };
}

/// Queues a target event for the collector (sent with the next [`EVENT_BATCH`]).
fn send_event(tx: &mpsc::SyncSender<Msg>, ev: QueryEvent) {
    PENDING.with_borrow_mut(|p| {
        if p.capacity() == 0 {
            // Sized once per batch: no reallocation while it fills.
            p.reserve_exact(EVENT_BATCH);
        }
        p.push(ev);
        if p.len() >= EVENT_BATCH {
            let _ = tx.send(Msg::Events(std::mem::take(p)));
        }
    });
}

/// Sends this thread's queued events.
fn flush_events(tx: &mpsc::SyncSender<Msg>) {
    PENDING.with_borrow_mut(|p| {
        if !p.is_empty() {
            let _ = tx.send(Msg::Events(std::mem::take(p)));
        }
    });
}

/// Tells the collector that connection `id` ended, after its queued events.
fn send_close(tx: &mpsc::SyncSender<Msg>, id: u64, ts: u64) {
    flush_events(tx);
    let _ = tx.send(Msg::Close(id, ts));
}

/// What every session thread shares.
struct Ctx {
    target: Target,
    opts: Options,
    start: Instant,
    epoch_ns: u64,
    ids: AtomicU64,
    tx: mpsc::SyncSender<Msg>,
    slots: (Mutex<usize>, Condvar),
    /// MongoDB: the cursor map the sessions share.
    mongo: mongo::Shared,
}

impl Ctx {
    /// Sleeps until `off` ns after the start; returns how late it is then (0 at `--max`,
    /// where nothing is scheduled).
    fn wait_until(&self, off: u64) -> u64 {
        let now = self.start.elapsed().as_nanos() as u64;
        if off > now {
            std::thread::sleep(Duration::from_nanos(off - now));
        }
        (self.start.elapsed().as_nanos() as u64).saturating_sub(off)
    }

    /// Records a batch's lateness, except at `--max` (nothing is scheduled: no lag).
    fn record_lag(&self, t: &mut Tally, late: u64) {
        if self.opts.timing != Timing::Max {
            t.lag.record(late);
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch_ns
            .saturating_add(self.start.elapsed().as_nanos() as u64)
    }
}

/// Replays `plans` onto `target`; returns the sink and the replay's counts.
pub fn replay<S: EventSink>(
    plans: Vec<Plan>,
    opts: &Options,
    target: &Target,
    sink: S,
) -> (S, Fidelity) {
    let mut fid = Fidelity {
        sessions_captured: plans.len() as u64,
        requests_framed: plans.iter().map(requests).sum(),
        ..Fidelity::default()
    };
    let mut tally = Tally::default();
    let chosen: Vec<Plan> = plans
        .into_iter()
        .filter(|p| {
            let keep = schedule::sampled(p.conn, opts.sessions_pct);
            if !keep {
                tally.skip("session_not_sampled", requests(p));
            }
            keep
        })
        .collect();
    let shape = chosen
        .iter()
        .map(|p| {
            // The connection's end is scheduled as an empty batch after the last.
            p.batches
                .iter()
                .map(|b| (b.ts_ns, b.requests.len()))
                .chain([(p.end_ns, 0)])
                .collect()
        })
        .collect();
    // --rate is over all copies: each of the `scale` copies runs at its share.
    let timing = match opts.timing {
        Timing::Rate(r) => Timing::Rate(r / f64::from(opts.scale.max(1))),
        t => t,
    };
    let offsets = schedule::offsets(&shape, timing, opts.skip_idle_ns);
    let first = chosen
        .iter()
        .filter_map(|p| p.batches.first())
        .map(|b| b.ts_ns)
        .min();
    let last = chosen
        .iter()
        .filter_map(|p| p.batches.last())
        .map(|b| b.ts_ns)
        .max();
    fid.capture_span_s = last.unwrap_or(0).saturating_sub(first.unwrap_or(0)) as f64 / 1e9;
    fid.sessions_replayed = chosen.len() as u64 * u64::from(opts.scale);
    fid.requests_planned = chosen.iter().map(requests).sum::<u64>() * u64::from(opts.scale);
    let (ctx, collector) = start(target, opts, sink, mongo::Shared::new(&chosen));
    launch(&ctx, chosen, offsets, &mut tally);
    fid.wall_s = ctx.start.elapsed().as_secs_f64();
    drop(ctx);
    let sink = collector
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e));
    fid.take(&tally);
    (sink, fid)
}

/// The shared context of a replay, and the collector thread handing the target's events to
/// `sink`.
fn start<S: EventSink>(
    target: &Target,
    opts: &Options,
    mut sink: S,
    mongo: mongo::Shared,
) -> (Arc<Ctx>, std::thread::JoinHandle<S>) {
    let (tx, rx) = mpsc::sync_channel(EVENT_QUEUE / EVENT_BATCH);
    let collector = std::thread::spawn(move || {
        for m in rx {
            match m {
                Msg::Events(evs) => evs.into_iter().for_each(|ev| sink.event(ev)),
                Msg::Close(c, ts) => sink.close(c, ts),
            }
        }
        sink
    });
    let epoch_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let ctx = Arc::new(Ctx {
        target: target.clone(),
        opts: opts.clone(),
        start: Instant::now(),
        epoch_ns,
        ids: AtomicU64::new(1),
        tx,
        slots: (Mutex::new(0), Condvar::new()),
        mongo,
    });
    (ctx, collector)
}

fn requests(p: &Plan) -> u64 {
    p.batches.iter().map(|b| b.requests.len() as u64).sum()
}

/// Starts every session copy when its first batch is due (a slot free), and waits for all.
fn launch(ctx: &Arc<Ctx>, plans: Vec<Plan>, offsets: Vec<Vec<u64>>, tally: &mut Tally) {
    let mut order: Vec<(u64, usize)> = offsets
        .iter()
        .enumerate()
        .map(|(i, o)| (o.first().copied().unwrap_or(0), i))
        .collect();
    order.sort_unstable();
    let plans: Vec<Arc<Plan>> = plans.into_iter().map(Arc::new).collect();
    let offsets: Vec<Arc<Vec<u64>>> = offsets.into_iter().map(Arc::new).collect();
    let mut handles = Vec::new();
    for (first, i) in order {
        let (Some(plan), Some(off)) = (plans.get(i), offsets.get(i)) else {
            continue;
        };
        for _ in 0..ctx.opts.scale {
            sleep_until(ctx, first.saturating_sub(20_000_000));
            acquire(ctx);
            let (ctx2, plan2, off2) = (Arc::clone(ctx), Arc::clone(plan), Arc::clone(off));
            let h = std::thread::Builder::new()
                .stack_size(512 << 10)
                .spawn(move || {
                    let t = run_session(&ctx2, &plan2, &off2);
                    release(&ctx2);
                    t
                });
            match h {
                Ok(h) => handles.push(h),
                Err(_) => {
                    release(ctx);
                    tally.skip("thread_not_started", requests(plan));
                }
            }
        }
    }
    for h in handles {
        match h.join() {
            Ok(t) => tally.merge(&t),
            Err(_) => tally.skip("session_failed", 1),
        }
    }
}

fn sleep_until(ctx: &Ctx, off_ns: u64) {
    let due = Duration::from_nanos(off_ns);
    let now = ctx.start.elapsed();
    if due > now {
        std::thread::sleep(due - now);
    }
}

fn acquire(ctx: &Ctx) {
    let (m, cv) = &ctx.slots;
    let mut n = m.lock().unwrap_or_else(|e| e.into_inner());
    while *n >= ctx.opts.max_connections {
        n = cv.wait(n).unwrap_or_else(|e| e.into_inner());
    }
    *n += 1;
}

fn release(ctx: &Ctx) {
    let (m, cv) = &ctx.slots;
    let mut n = m.lock().unwrap_or_else(|e| e.into_inner());
    *n = n.saturating_sub(1);
    cv.notify_one();
}

/// The events of a target session, sent to the collector.
struct ChanSink<'a> {
    tx: &'a mpsc::SyncSender<Msg>,
    health: Health,
}

impl Sink for ChanSink<'_> {
    fn event(&mut self, ev: QueryEvent) {
        send_event(self.tx, ev);
    }
    fn health(&mut self) -> &mut Health {
        &mut self.health
    }
}

mod conn;
mod gate;
mod stream;
use stream::Stream;
pub mod live;
mod mongo;
mod my;
mod pg;
mod pglight;
mod readbuf;
use conn::TargetConn;

/// The session's connection, opened by `open` when there is none (counted in `t`); when it
/// cannot be opened, the error is printed once per run (`what`: the protocol) and the batch's
/// `n` requests are skipped as `connect_failed`. `opened` is true for a fresh connection.
fn connected<'a, C>(
    conn: &'a mut Option<C>,
    t: &mut Tally,
    n: usize,
    what: &str,
    open: impl FnOnce() -> Result<C, String>,
) -> Option<(&'a mut C, bool)> {
    let opened = conn.is_none();
    if opened {
        match open() {
            Ok(c) => {
                t.connections += 1;
                *conn = Some(c);
            }
            Err(e) => {
                warn_once(&format!("dbtap: replay: {what}: {e}"));
                t.skip("connect_failed", n as u64);
                return None;
            }
        }
    }
    conn.as_mut().map(|c| (c, opened))
}

/// Prints a message once per replay run (a login error repeats for every session).
fn warn_once(msg: &str) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.iter().any(|m| m == msg) && said.len() < 16 {
        eprintln!("{msg}");
        said.push(msg.to_string());
    }
}

/// A live session's batches as the capture frames them (see [`live`]).
pub type LiveFeed = Arc<live::Feed>;

/// A session's batches with their offsets from the replay's start: the plan's, or those of
/// its live feed as they come, each due at its captured time (so its lag is how far behind
/// the capture the mirror runs).
fn batches<'a>(
    ctx: &'a Ctx,
    plan: &'a Plan,
    offsets: &'a [u64],
) -> Box<dyn Iterator<Item = (std::borrow::Cow<'a, crate::capture::Batch>, u64)> + 'a> {
    match &plan.live {
        None => Box::new(
            plan.batches
                .iter()
                .zip(offsets)
                .map(|(b, &o)| (std::borrow::Cow::Borrowed(b), o)),
        ),
        Some(feed) => Box::new(std::iter::from_fn(move || {
            let b = feed.recv()?;
            let off = b.ts_ns.saturating_sub(ctx.epoch_ns);
            Some((std::borrow::Cow::Owned(b), off))
        })),
    }
}

/// Replays one session copy (its events all sent to the collector when it returns).
fn run_session(ctx: &Ctx, plan: &Plan, offsets: &[u64]) -> Tally {
    let t = match plan.protocol {
        proto::Protocol::Mysql => my::run_session(ctx, plan, offsets),
        proto::Protocol::Postgres => pg::run_session(ctx, plan, offsets),
        proto::Protocol::Mongodb => mongo::run_session(ctx, plan, offsets),
        _ => redis_session(ctx, plan, offsets),
    };
    flush_events(&ctx.tx);
    t
}

/// Replays one Redis session copy.
fn redis_session(ctx: &Ctx, plan: &Plan, offsets: &[u64]) -> Tally {
    let mut t = Tally::default();
    let mut conn: Option<TargetConn> = None;
    let creds = ctx.opts.creds.for_user(plan.user.as_deref());
    let mut db: Option<Vec<u8>> = plan
        .database
        .as_ref()
        .filter(|_| !plan.saw_open)
        .map(|d| d.as_bytes().to_vec());
    let mut out = Vec::new();
    let mut mode = redis::Replies::default();
    for (batch, off) in batches(ctx, plan, offsets) {
        let late = ctx.wait_until(off);
        if conn.is_none() {
            conn = TargetConn::open(ctx, &creds, db.as_deref(), &mut t);
            mode = redis::Replies::default();
        }
        let Some(c) = conn.as_mut() else {
            t.skip("connect_failed", batch.requests.len() as u64);
            continue;
        };
        ctx.record_lag(&mut t, late);
        out.clear();
        let (mut expect, mut blocking) = (0usize, false);
        for r in &batch.requests {
            match redis::append(r, &creds, &mut out) {
                Ok(n) => {
                    expect += mode.of(r, n);
                    t.sent += 1;
                    blocking |= redis::blocks(r);
                    if let Some(d) = redis::selects(r) {
                        db = Some(d);
                    }
                }
                Err(why) => t.skip(why, 1),
            }
        }
        if out.is_empty() {
            continue;
        }
        t.batches += 1;
        if !c.exchange(ctx, &out, expect, blocking, &mut t)
            && let Some(c) = conn.take()
        {
            c.close(ctx);
        }
    }
    if let Some(mut c) = conn {
        if ctx.opts.timing != Timing::Max
            && let Some(&end) = offsets.get(plan.batches.len())
        {
            c.hold_until(ctx, end);
        }
        c.close(ctx);
    }
    t
}

/// Frames whole replies at the start of `buf`: returns (replies, pushes, bytes used, valid).
fn count_replies(buf: &[u8]) -> (usize, usize, usize, bool) {
    let (mut n, mut pushes, mut at) = (0, 0, 0);
    loop {
        match resp::reply(buf.get(at..).unwrap_or_default()) {
            Frame::Whole(len, push) => {
                at += len;
                if push {
                    pushes += 1;
                } else {
                    n += 1;
                }
            }
            Frame::More => return (n, pushes, at, true),
            Frame::Invalid => return (n, pushes, at, false),
        }
    }
}

fn meta(id: u64, s: &Stream) -> ConnMeta {
    let (client, server) = s.endpoints();
    ConnMeta {
        id,
        client,
        server,
        saw_open: true,
        peer: None,
        after_tls: false,
    }
}

fn new_session(
    id: u64,
    s: &Stream,
    cfg: &SessionConfig,
    protocol: proto::Protocol,
) -> Option<Box<dyn Session>> {
    proto::registry::spec(protocol).map(|spec| (spec.new_session)(meta(id, s), cfg.clone()))
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn feed(s: &mut dyn Session, dir: Direction, b: &[u8], ts: u64, tx: &mpsc::SyncSender<Msg>) {
    let mut sink = ChanSink {
        tx,
        health: Health::default(),
    };
    s.feed(dir, b, ts, &mut sink);
}

/// Closes a target session (its unanswered requests become events) and tells the collector
/// that connection `id` ended.
fn close_session(s: &mut dyn Session, id: u64, ctx: &Ctx) {
    let ts = ctx.now_ns();
    let mut sink = ChanSink {
        tx: &ctx.tx,
        health: Health::default(),
    };
    s.close(ts, &mut sink);
    send_close(&ctx.tx, id, ts);
}
