//! The eBPF source of `dbtap live` and `dbtap top`: one thread owns the tracer (the server
//! processes' sockets traced in the kernel: Unix sockets, TLS plaintext from the libssl they
//! map, and plaintext TCP under `--source ebpf`), turns its events into stream records
//! ([`stream::Record`]), writes them to the `--write` files, and feeds them to its own engine,
//! handing its window over every interval like a packet worker.
//!
//! The tracer is built on its thread (its kernel objects stay there); the start result comes
//! back on a channel, so `auto` can fall back to packets with the reason.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use proto::{Direction, Endpoint, Process};
use stream::{Record, StreamOpen};

use super::Control;
use super::setup::{Plan, write_limits};
use super::worker::{LiveConsumer, WorkerReport, consumer};
use crate::cli::CaptureArgs;
use crate::pipeline::Engine;
use crate::rotate::{Rotator, SharedFiles};

/// How long the tracer waits for records before it looks at the epoch and the stop flag.
const POLL: Duration = Duration::from_millis(50);
/// How long loading and attaching may take before the run gives up on eBPF.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Peer processes whose command name is remembered.
const MAX_PROCS: usize = 4096;

/// A running tracer thread.
pub(super) struct Started {
    pub(super) handle: JoinHandle<()>,
    /// For the start line: what is traced.
    pub(super) summary: String,
}

/// Whether eBPF can run here; the reason when not.
pub(super) fn available() -> std::result::Result<(), String> {
    ebpf::available()
}

/// Starts the tracer thread as worker `idx`. `Err` with a one-line reason when the tracer
/// cannot start (the caller decides: an error under `--source ebpf`, packets only in `auto`).
pub(super) fn spawn(
    c: &CaptureArgs,
    plan: &Plan,
    idx: usize,
    tcp_plaintext: bool,
    ctl: &Arc<Control>,
    tx: Sender<WorkerReport>,
    files: &SharedFiles,
) -> Result<std::result::Result<Started, String>> {
    let cfg = ebpf::Config {
        ports: plan.settings.ports.iter().map(|(p, _)| *p).collect(),
        unix_paths: c.sockets.clone(),
        pids: c.pids.clone(),
        processes: c.processes.clone(),
        tcp_plaintext,
        ring_bytes: (c.ebpf_ring_mb.max(1) as usize).next_power_of_two() << 20,
        // The syscall tracepoints even where the kernel has the socket tracepoints.
        syscall_tracepoints: std::env::var_os("DBTAP_EBPF_SYSCALLS").is_some_and(|v| v == "1"),
    };
    let writer = match &c.write {
        Some(dir) => Some(
            Rotator::new(
                dir,
                idx,
                super::unix_ns(plan.started) / 1_000_000_000,
                write_limits(c),
                Arc::clone(files),
            )?
            .with_linktype(stream::LINKTYPE),
        ),
        None => None,
    };
    let (settings, flow_cfg) = (plan.settings.clone(), plan.flow_cfg.clone());
    let live = consumer(c, plan);
    let ctl = Arc::clone(ctl);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("dbtap-ebpf".into())
        .spawn(move || {
            let state = Rc::new(RefCell::new(State {
                engine: Some(Engine::new(&settings, flow_cfg, live)),
                w: Writer {
                    rotator: writer,
                    buf: Vec::with_capacity(1 << 16),
                    error: None,
                },
                procs: Procs::default(),
            }));
            let tracer = match ebpf::Tracer::start_with_sink(&cfg, sink(&state)) {
                Ok(t) => t,
                Err(e) => {
                    let _ = started_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = started_tx.send(Ok(summary(&tracer)));
            run(idx, tracer, &state, &ctl, &tx);
        })
        .context("starting the eBPF thread")?;
    Ok(match started_rx.recv_timeout(START_TIMEOUT) {
        Ok(Ok(summary)) => Ok(Started { handle, summary }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err("the eBPF tracer did not start in time".to_string()),
    })
}

/// What the tracer traces, for the start line: `mariadbd 812, postgres 901; socket
/// tracepoints` (or `syscall tracepoints`: a kernel before 6.3, or `DBTAP_EBPF_SYSCALLS=1`).
fn summary(t: &ebpf::Tracer) -> String {
    let how = if t.socket_tracepoints() {
        "socket tracepoints"
    } else {
        "syscall tracepoints"
    };
    format!("{}; {how}", traced(t))
}

/// The traced processes, for `summary`.
fn traced(t: &ebpf::Tracer) -> String {
    let targets = t.targets();
    if targets.is_empty() {
        return "no server process found yet".to_string();
    }
    let mut names: Vec<String> = targets
        .iter()
        .take(6)
        .map(|t| format!("{} {}", t.comm, t.pid))
        .collect();
    if targets.len() > 6 {
        names.push(format!("+{} more", targets.len() - 6));
    }
    names.join(", ")
}

/// The peer processes' command names, read from /proc once per process (bounded).
#[derive(Default)]
struct Procs {
    known: HashMap<u32, Arc<Process>>,
}

impl Procs {
    fn get(&mut self, pid: u32) -> Arc<Process> {
        if let Some(p) = self.known.get(&pid) {
            return Arc::clone(p);
        }
        if self.known.len() >= MAX_PROCS {
            self.known.clear();
        }
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim_end().to_string())
            .unwrap_or_else(|_| "?".to_string());
        let p = Arc::new(Process {
            pid,
            comm: Arc::from(comm.as_str()),
        });
        self.known.insert(pid, Arc::clone(&p));
        p
    }
}

fn endpoint(a: &ebpf::Addr) -> Endpoint {
    match a {
        ebpf::Addr::Ip(s) => Endpoint::Ip(*s),
        ebpf::Addr::Unix(p) => Endpoint::Unix(Arc::from(p.as_str())),
    }
}

/// One tracer event as a stream record, handed to `f`.
fn record(ev: ebpf::Event<'_>, procs: &mut Procs, f: &mut dyn FnMut(&Record<'_>)) {
    match ev {
        ebpf::Event::Open {
            sock,
            ts_ns,
            pid,
            local,
            peer,
            peer_pid,
            accepted,
            outgoing,
        } => f(&Record::Open(if outgoing {
            // The traced process connected out: it is the client (and the client process).
            StreamOpen {
                conn: sock,
                ts_ns,
                client: endpoint(&local),
                server: endpoint(&peer),
                peer: Some(procs.get(pid)),
                saw_open: accepted,
            }
        } else {
            StreamOpen {
                conn: sock,
                ts_ns,
                client: endpoint(&peer),
                server: endpoint(&local),
                peer: peer_pid.filter(|p| *p > 0).map(|p| procs.get(p)),
                saw_open: accepted,
            }
        })),
        ebpf::Event::Data {
            sock,
            ts_ns,
            inbound,
            offset,
            len,
            bytes,
            tls,
            ..
        } => f(&Record::Data {
            conn: sock,
            dir: if inbound {
                Direction::ToServer
            } else {
                Direction::ToClient
            },
            ts_ns,
            offset,
            len,
            bytes,
            tls,
        }),
        ebpf::Event::Close { sock, ts_ns } => f(&Record::Close { conn: sock, ts_ns }),
    }
}

/// The `--write` files of the tracer: every record, encoded, one per pcap packet. Stops
/// writing (and says why, once) at the first error rather than failing the run.
struct Writer {
    rotator: Option<Rotator>,
    buf: Vec<u8>,
    error: Option<String>,
}

impl Writer {
    fn write(&mut self, r: &Record<'_>) {
        let Some(w) = &mut self.rotator else {
            return;
        };
        self.buf.clear();
        stream::encode(r, &mut self.buf);
        if let Err(e) = w.write(r.ts_ns(), &self.buf, self.buf.len() as u32) {
            self.error = Some(format!("--write stopped: {e}"));
            self.rotator = None;
        }
    }
}

/// The tracer's own counters in the stream section of the health.
fn tracer_counts(h: &mut report::CaptureHealth, tracer: &ebpf::Tracer) {
    let s = h.stream.get_or_insert_with(Default::default);
    s.ebpf_lost_records = tracer.stats().lost_records;
    let run = tracer.run_time();
    s.ebpf_runs = run.run_cnt;
    s.ebpf_run_ns = run.run_time_ns;
}

/// The health of the tracer's engine, with the kernel's lost records and the writer's state.
fn health(
    engine: &Engine<LiveConsumer>,
    tracer: &ebpf::Tracer,
    w: &mut Writer,
) -> report::CaptureHealth {
    let mut h = engine.health(vec!["ebpf".to_string()], 0);
    tracer_counts(&mut h, tracer);
    if let Some(r) = &mut w.rotator {
        let _ = r.flush();
    }
    if let Some(e) = &w.error {
        h.warnings.push(e.clone());
    }
    h
}

/// What the tracer's events feed, shared by its sink (during polls) and the thread's loop
/// (between them); the engine is taken out at the end.
struct State {
    engine: Option<Engine<LiveConsumer>>,
    w: Writer,
    procs: Procs,
}

/// The tracer's sink: each event, straight from the ring, as records to the files and engine.
fn sink(state: &Rc<RefCell<State>>) -> Box<dyn FnMut(ebpf::Event<'_>)> {
    let state = Rc::clone(state);
    Box::new(move |ev| {
        let mut s = state.borrow_mut();
        let State { engine, w, procs } = &mut *s;
        let Some(engine) = engine else {
            return;
        };
        record(ev, procs, &mut |r| {
            w.write(r);
            engine.stream_record(r);
        });
    })
}

/// The window report of one interval.
fn interval_report(idx: usize, s: &mut State, tracer: &ebpf::Tracer) -> Option<WorkerReport> {
    let engine = s.engine.as_mut()?;
    let (window, servers) = engine.consumer_mut().take_window();
    let minutes = engine.consumer_mut().take_minutes();
    Some(WorkerReport {
        worker: idx,
        window,
        servers,
        minutes,
        health: health(engine, tracer, &mut s.w),
        ring: live::RingStats::default(),
        pause_ns: 0,
        open_connections: engine.open_streams(),
        error: None,
        last: false,
    })
}

/// The tracer thread: events → records → files and engine → window, until stopped.
fn run(
    idx: usize,
    mut tracer: ebpf::Tracer,
    state: &Rc<RefCell<State>>,
    ctl: &Control,
    tx: &Sender<WorkerReport>,
) {
    let mut seen_epoch = ctl.epoch.load(Ordering::Acquire);
    let error = loop {
        let stop = ctl.stop.load(Ordering::Acquire);
        // The events go to the sink; the callback gets none.
        let polled = tracer.poll(POLL, &mut |_| {});
        let error = polled.err().map(|e| e.to_string());
        if stop || error.is_some() {
            break error;
        }
        if !ctl.interval_ended(&mut seen_epoch) {
            continue;
        }
        let Some(report) = interval_report(idx, &mut state.borrow_mut(), &tracer) else {
            break None;
        };
        if tx.send(report).is_err() {
            return;
        }
    };
    // Drain what the ring still holds, then close every stream.
    let _ = tracer.poll(Duration::ZERO, &mut |_| {});
    let (engine, rotator, werror) = {
        let mut s = state.borrow_mut();
        (s.engine.take(), s.w.rotator.take(), s.w.error.take())
    };
    let Some(engine) = engine else {
        return;
    };
    let (mut consumer, mut h) = engine.finish(vec!["ebpf".to_string()], 0);
    tracer_counts(&mut h, &tracer);
    if let Some(e) = werror {
        h.warnings.push(e);
    }
    if let Some(r) = rotator {
        let _ = r.close();
    }
    let (window, servers) = consumer.take_window();
    let minutes = consumer.take_minutes();
    let _ = tx.send(WorkerReport {
        worker: idx,
        window,
        servers,
        minutes,
        health: h,
        ring: live::RingStats::default(),
        pause_ns: 0,
        open_connections: 0,
        error,
        last: true,
    });
}
