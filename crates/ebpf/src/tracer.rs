//! Loading the BPF object (libbpf-rs, no skeleton: the object is embedded and opened from
//! memory), attaching it to the discovered processes, and turning ring records into `Event`s.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use libbpf_rs::{
    Link, MapCore, MapFlags, Object, ObjectBuilder, RingBuffer, RingBufferBuilder, UprobeOpts,
};

use crate::dispatch::{Core, Sink};
use crate::{Config, Error, Event, Stats, Target, procfs};

static BPF_OBJ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/dbtap.bpf.o"));

/// BPF run time of the tracer's programs (needs `sysctl kernel.bpf_stats_enabled=1`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTime {
    pub run_time_ns: u64,
    pub run_cnt: u64,
}

/// SSL functions probed: (symbol, entry program); every one also gets the return probe.
const SSL_FUNCS: &[(&str, &str)] = &[
    ("SSL_read", "ssl_read_enter"),
    ("SSL_write", "ssl_write_enter"),
    ("SSL_read_ex", "ssl_read_ex_enter"),
    ("SSL_write_ex", "ssl_write_ex_enter"),
    ("SSL_do_handshake", "ssl_other_enter"),
    ("SSL_accept", "ssl_other_enter"),
    ("SSL_connect", "ssl_other_enter"),
    ("SSL_shutdown", "ssl_other_enter"),
];

/// The kernel wakes the reader once per this many bytes of records that become pending (at most a
/// quarter of the ring); between wake-ups `poll`'s timeout bounds the wait.
const WAKE_BYTES: u64 = 1 << 20;

/// How often `poll` looks for new server processes and libssl files.
const RESCAN: Duration = Duration::from_secs(10);

/// How often `poll` sweeps the traced processes' descriptors for closed sockets (with the socket
/// tracepoints, which see no close(2)).
const SWEEP: Duration = Duration::from_secs(1);

/// A running tracer. Not `Send`: build it on the thread that polls it.
pub struct Tracer {
    // Field order is drop order: the ring and the links go before the object owning the fds.
    ring: RingBuffer<'static>,
    /// An edge-triggered epoll set on the ring: `poll` waits on it (see `ring_waiter`).
    waiter: rustix::fd::OwnedFd,
    links: Vec<Link>,
    obj: Object,
    /// Records copied out of the ring for `poll`'s callback (a tracer without a sink).
    queue: Rc<RefCell<Vec<u8>>>,
    core: Rc<RefCell<Core>>,
    targets: Vec<Target>,
    /// Probed (libssl, pid); pid -1: every process mapping it.
    libs: HashSet<(PathBuf, i32)>,
    cfg: Config,
    next_scan: Instant,
    /// The syscall programs sit on the classic per-syscall tracepoints (not the raw pair).
    per_syscall: bool,
    /// The data comes from the socket tracepoints; no system call is traced.
    sock_tps: bool,
    next_sweep: Instant,
}

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    let msg = e.to_string();
    Error(format!("{what}: {}", msg.lines().next().unwrap_or("")))
}

fn ring_size(bytes: usize) -> u32 {
    let b = if bytes == 0 { 8 << 20 } else { bytes };
    let b = b.clamp(64 << 10, 1 << 30).next_power_of_two();
    u32::try_from(b).unwrap_or(1 << 30)
}

/// The monotonic clock now, in ns (the clock of the records' timestamps).
fn mono_now() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

/// realtime - monotonic, in ns, measured now.
fn mono_to_real() -> i128 {
    use rustix::time::{ClockId, clock_gettime};
    let ns =
        |t: rustix::time::Timespec| i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec);
    let m1 = ns(clock_gettime(ClockId::Monotonic));
    let r = ns(clock_gettime(ClockId::Realtime));
    let m2 = ns(clock_gettime(ClockId::Monotonic));
    r - (m1 + m2) / 2
}

/// The programs on the socket tracepoints (sock:sock_recv_length and sock:sock_send_length,
/// Linux 6.3 and later), which take the data where the kernel has them.
const SOCK_PROGS: &[&str] = &["on_sock_recv", "on_sock_send", "on_tcp_state"];

/// Whether the running kernel has the socket tracepoints (their BTF types, which a tp_btf
/// program needs to load).
fn kernel_has_sock_tracepoints() -> bool {
    use libbpf_rs::btf::{Btf, types::Typedef};
    Btf::from_vmlinux().is_ok_and(|b| {
        ["btf_trace_sock_recv_length", "btf_trace_sock_send_length"]
            .iter()
            .all(|n| b.type_by_name::<Typedef<'_>>(n).is_some())
    })
}

/// Whether program `name` belongs to the path not chosen: the syscall tracepoints' with the
/// socket tracepoints (`sock_tps`), else the socket tracepoints'. It is neither loaded nor
/// attached.
fn on_other_path(name: &str, sock_tps: bool) -> bool {
    if sock_tps {
        RAW_SYSCALL_PROGS.contains(&name) || CLASSIC_SYSCALL_PROGS.contains(&name)
    } else {
        SOCK_PROGS.contains(&name)
    }
}

/// Loads the object; `sock_tps`: with the socket tracepoints' programs (else they are left out).
fn load(ring_bytes: u32, sock_tps: bool) -> Result<Object, Error> {
    // libbpf would print its logs (verifier output) on stderr; errors come back as one line.
    libbpf_rs::set_print(None);
    let mut open = ObjectBuilder::default()
        .open_memory(BPF_OBJ)
        .map_err(|e| err("opening the BPF object", e))?;
    for mut m in open.maps_mut() {
        if m.name() == "ring" {
            m.set_max_entries(ring_bytes)
                .map_err(|e| err("sizing the ring", e))?;
        }
    }
    // Only the programs of the chosen path are loaded (verified): the socket tracepoints' or
    // the syscall tracepoints'.
    for mut p in open.progs_mut() {
        if on_other_path(&p.name().to_string_lossy(), sock_tps) {
            p.set_autoload(false);
        }
    }
    open.load().map_err(|e| err("loading the BPF programs", e))
}

/// System calls traced at their exit (classic tracepoints syscalls:sys_exit_NAME) where the
/// kernel has no socket tracepoints.
const EXIT_CALLS: &[&str] = &[
    "read", "write", "readv", "writev", "connect", "accept", "accept4", "sendto", "recvfrom",
    "sendmsg", "recvmsg",
];

/// The raw syscall programs that the classic tracepoints replace where tracefs has them.
const RAW_SYSCALL_PROGS: &[&str] = &["on_sys_enter", "on_sys_exit"];

/// The programs on the classic syscall tracepoints.
const CLASSIC_SYSCALL_PROGS: &[&str] = &["tp_enter_close", "tp_sys_exit"];

/// Attaches program `name` to syscalls:`tps`; `None` if it is missing or one attach fails.
fn attach_syscall_prog(obj: &mut Object, name: &str, tps: &[String]) -> Option<Vec<Link>> {
    let p = obj.progs_mut().find(|p| p.name() == name)?;
    tps.iter()
        .map(|tp| {
            p.attach_tracepoint(libbpf_rs::TracepointCategory::Syscalls, tp)
                .ok()
        })
        .collect()
}

/// close(2) at its entry and the traced calls at their exit on the classic per-syscall
/// tracepoints: the kernel then runs no program for the other system calls (the raw
/// sys_enter/sys_exit tracepoints run one for every call of every process). `None` when they
/// cannot be attached (no tracefs, or an object without them).
fn attach_syscall_tracepoints(obj: &mut Object) -> Option<Vec<Link>> {
    let mut links = attach_syscall_prog(obj, "tp_enter_close", &["sys_enter_close".into()])?;
    let exits: Vec<String> = EXIT_CALLS.iter().map(|c| format!("sys_exit_{c}")).collect();
    links.extend(attach_syscall_prog(obj, "tp_sys_exit", &exits)?);
    Some(links)
}

/// Attaches the kernel-side programs: the socket tracepoints' (`sock_tps`) or else the syscall
/// ones (classic tracepoints, else the raw sys_enter/sys_exit ones), and the process fork/exit
/// ones; whether the classic syscall tracepoints are used.
fn attach_tracepoints(obj: &mut Object, sock_tps: bool) -> Result<(Vec<Link>, bool), Error> {
    // With the socket tracepoints no system call is traced (each syscall tracepoint puts every
    // call of every process on the kernel's tracing slow path), so tracefs is not needed either.
    let mut links = if sock_tps {
        Vec::new()
    } else {
        crate::tracefs::with_tracefs(|| attach_syscall_tracepoints(obj)).unwrap_or_default()
    };
    let classic = !links.is_empty();
    for p in obj.progs_mut() {
        let name = p.name().to_string_lossy().into_owned();
        let tp_btf = p
            .section()
            .to_str()
            .is_some_and(|s| s.starts_with("tp_btf/"));
        if !tp_btf
            || on_other_path(&name, sock_tps)
            || (classic && RAW_SYSCALL_PROGS.contains(&name.as_str()))
        {
            continue;
        }
        links.push(
            p.attach()
                .map_err(|e| err(&format!("attaching {name}"), e))?,
        );
    }
    Ok((links, classic))
}

/// An epoll set that reports the ring only when the kernel wakes it (edge-triggered): libbpf's
/// own set is level-triggered, and a ring buffer polls readable whenever any record is pending,
/// so waiting on it returned at once after every batch while records trickled in (the programs
/// submit without a wake-up until `WAKE_BYTES` are pending): at 10k queries/s the tracer went
/// round its loop ~300 times a second, two system calls and a few records each. With the edge,
/// it waits for the kernel's wake-up (`WAKE_BYTES` pending) or the poll timeout.
fn ring_waiter(ring: &libbpf_rs::Map<'_>) -> Result<rustix::fd::OwnedFd, Error> {
    use rustix::event::epoll;
    use std::os::fd::AsFd;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(|e| err("epoll_create", e))?;
    epoll::add(
        &ep,
        ring.as_fd(),
        epoll::EventData::new_u64(0),
        epoll::EventFlags::IN | epoll::EventFlags::ET,
    )
    .map_err(|e| err("epoll_ctl on the ring", e))?;
    Ok(ep)
}

fn map<'o>(obj: &'o Object, name: &str) -> Result<libbpf_rs::Map<'o>, Error> {
    obj.maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| Error(format!("the BPF object has no map {name}")))
}

/// Marks process `pid` traced: its bit in the programs' bitmap, set by the `set_traced` program
/// (BPF_PROG_RUN) with an atomic OR, since the programs set and clear bits of the same words
/// at forks and exits while this runs.
fn set_traced(obj: &mut Object, pid: u32) -> Result<(), Error> {
    let prog = obj
        .progs_mut()
        .find(|p| p.name() == "set_traced")
        .ok_or_else(|| Error("the BPF object has no program set_traced".into()))?;
    let mut arg = [0u8; 8];
    arg[..4].copy_from_slice(&pid.to_le_bytes());
    arg[4..].copy_from_slice(&1u32.to_le_bytes());
    let out = prog
        .test_run(libbpf_rs::ProgramInput {
            context_in: Some(&mut arg),
            ..Default::default()
        })
        .map_err(|e| err("adding a traced pid", e))?;
    if out.return_value != 0 {
        return Err(Error(format!("adding a traced pid: {pid} is out of range")));
    }
    Ok(())
}

impl Tracer {
    /// Finds the server processes, loads and attaches the programs; `poll` hands the events
    /// to its callback (the records copied out of the ring first).
    pub fn start(cfg: &Config) -> Result<Tracer, Error> {
        Tracer::start_with(cfg, None)
    }

    /// The same, the events going to `sink` straight from the ring (no copy of the records)
    /// during `poll`, whose callback then gets none.
    pub fn start_with_sink(cfg: &Config, sink: Box<dyn FnMut(Event<'_>)>) -> Result<Tracer, Error> {
        Tracer::start_with(cfg, Some(sink))
    }

    fn start_with(cfg: &Config, sink: Option<Sink>) -> Result<Tracer, Error> {
        crate::available().map_err(Error)?;
        let targets = procfs::discover(cfg);
        if targets.is_empty() {
            return Err(Error("no server process found to trace (none listens on the given ports or sockets; try --pid or --process)".into()));
        }
        let ring_bytes = ring_size(cfg.ring_bytes);
        let sock_tps = !cfg.syscall_tracepoints && kernel_has_sock_tracepoints();
        let mut obj = load(ring_bytes, sock_tps)?;
        let mut conf = Vec::with_capacity(16);
        conf.extend_from_slice(&u32::from(cfg.tcp_plaintext).to_le_bytes());
        // copy_twice: 0, data goes straight into a ring reservation.
        conf.extend_from_slice(&0u32.to_le_bytes());
        let wake = u64::from(ring_bytes / 4).min(WAKE_BYTES);
        conf.extend_from_slice(&wake.to_le_bytes());
        map(&obj, "cfg")?
            .update(&0u32.to_le_bytes(), &conf, MapFlags::ANY)
            .map_err(|e| err("configuring", e))?;
        for t in &targets {
            set_traced(&mut obj, t.pid)?;
        }
        let queue = Rc::new(RefCell::new(Vec::new()));
        let q = Rc::clone(&queue);
        let socks_map = map(&obj, "socks")
            .ok()
            .and_then(|m| libbpf_rs::MapHandle::try_from(&m).ok());
        let sinking = sink.is_some();
        let core = Rc::new(RefCell::new(Core::new(
            mono_to_real(),
            cfg.ports.clone(),
            socks_map,
            sink,
        )));
        let c = Rc::clone(&core);
        let ring_map = map(&obj, "ring")?;
        let mut rb = RingBufferBuilder::new();
        rb.add(&ring_map, move |data: &[u8]| {
            if sinking {
                c.borrow_mut().sink_record(data);
            } else {
                let mut q = q.borrow_mut();
                q.extend_from_slice(&(data.len() as u32).to_le_bytes());
                q.extend_from_slice(data);
            }
            0
        })
        .map_err(|e| err("the ring buffer", e))?;
        let ring = rb.build().map_err(|e| err("the ring buffer", e))?;
        let waiter = ring_waiter(&ring_map)?;
        let (links, per_syscall) = attach_tracepoints(&mut obj, sock_tps)?;
        if sock_tps {
            // Attached first, then read: a socket opened in between counts as one that was
            // there before (seen mid-stream), never the other way round.
            let mut c = core.borrow_mut();
            c.preexisting = Some(HashSet::new());
            c.add_preexisting(targets.iter().map(|t| t.pid));
            c.add_ports(procfs::listening_ports(targets.iter().map(|t| t.pid)));
        }
        let mut t = Tracer {
            ring,
            waiter,
            links,
            per_syscall,
            sock_tps,
            next_sweep: Instant::now() + SWEEP,
            obj,
            queue,
            core,
            targets,
            libs: HashSet::new(),
            cfg: cfg.clone(),
            next_scan: Instant::now() + RESCAN,
        };
        t.attach_ssl()?;
        Ok(t)
    }

    /// Attaches the OpenSSL probes to the libssl files the targets map: per process (threads
    /// included: uprobe filters go by address space), or for every process mapping the file
    /// when a target forks servers (PostgreSQL: a new backend must be probed from its first
    /// instruction). Per process spares other libssl users on the host the probes' cost.
    fn attach_ssl(&mut self) -> Result<(), Error> {
        let forking = self
            .targets
            .iter()
            .any(|t| matches!(t.why, crate::Why::Child(_)));
        for (pid, lib) in procfs::target_ssl_libs(&self.targets) {
            let scope = if forking {
                -1
            } else {
                i32::try_from(pid).unwrap_or(-1)
            };
            if self.libs.insert((lib.clone(), scope)) {
                self.attach_ssl_lib(&lib, scope)?;
            }
        }
        Ok(())
    }

    fn attach_ssl_lib(&mut self, lib: &std::path::Path, pid: i32) -> Result<(), Error> {
        let mut first_err = None;
        let before = self.links.len();
        for (func, entry) in SSL_FUNCS {
            for (prog, ret) in [(*entry, false), ("ssl_exit_ret", true)] {
                let Some(p) = self.obj.progs_mut().find(|p| p.name() == prog) else {
                    return Err(Error(format!("the BPF object has no program {prog}")));
                };
                let opts = UprobeOpts {
                    retprobe: ret,
                    func_name: Some((*func).into()),
                    ..Default::default()
                };
                // A libssl without the _ex variants (OpenSSL 1.1.0) just lacks those probes.
                match p.attach_uprobe_with_opts(pid, lib, 0, opts) {
                    Ok(l) => self.links.push(l),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) if self.links.len() == before => {
                Err(err(&format!("probing {}", lib.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// The traced processes found at start (children forked later are traced too).
    pub fn targets(&self) -> Vec<Target> {
        self.targets.clone()
    }

    /// Whether no program runs for every system call on the host: the data comes from the
    /// socket tracepoints, or the syscall programs are on the classic per-syscall tracepoints
    /// (false: on the raw `sys_enter`/`sys_exit` pair, which runs them for every call).
    pub fn per_syscall_tracepoints(&self) -> bool {
        self.per_syscall || self.sock_tps
    }

    /// Whether the data comes from the socket tracepoints (sock:sock_recv_length and
    /// sock:sock_send_length), no system call being traced.
    pub fn socket_tracepoints(&self) -> bool {
        self.sock_tps
    }

    /// The libssl files probed.
    pub fn ssl_libs(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.libs.iter().map(|(l, _)| l.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Looks for server processes started since (a restarted server, a new `--process`) and
    /// probes the libssl files they map; `poll` calls it every 10 s. Returns how many were added.
    pub fn rescan(&mut self) -> Result<usize, Error> {
        self.next_scan = Instant::now() + RESCAN;
        self.targets
            .retain(|t| std::path::Path::new(&format!("/proc/{}", t.pid)).exists());
        let fresh: Vec<Target> = procfs::discover(&self.cfg)
            .into_iter()
            .filter(|t| {
                !self
                    .targets
                    .iter()
                    .any(|o| o.pid == t.pid && o.comm == t.comm)
            })
            .collect();
        for t in &fresh {
            set_traced(&mut self.obj, t.pid)?;
        }
        if self.sock_tps && !fresh.is_empty() {
            // A server found now (a restart, a new `--process`) and its children: their
            // connections began before they were traced. Children of processes traced before
            // were traced from their fork.
            let new_pids: HashSet<u32> = fresh.iter().map(|t| t.pid).collect();
            let untraced_before = |t: &&Target| match t.why {
                crate::Why::Child(ppid) => new_pids.contains(&ppid),
                _ => true,
            };
            self.core
                .borrow_mut()
                .add_preexisting(fresh.iter().filter(untraced_before).map(|t| t.pid));
        }
        let n = fresh.len();
        self.targets.extend(fresh);
        if self.sock_tps {
            // Listeners opened since, here and in the namespaces of the traced processes (those
            // found now included): the direction of TCP connections (see dispatch.rs).
            self.core
                .borrow_mut()
                .add_ports(procfs::listening_ports(self.targets.iter().map(|t| t.pid)));
        }
        if n > 0 {
            self.attach_ssl()?;
        }
        Ok(n)
    }

    /// Waits up to `timeout` for records (the kernel wakes this side only when much is pending),
    /// then hands out everything pending (to the sink of a tracer that has one, else to `f`);
    /// returns the number of events.
    pub fn poll(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, Error> {
        if Instant::now() >= self.next_scan {
            self.rescan()?;
        }
        let mut ready = [rustix::event::epoll::Event {
            flags: rustix::event::epoll::EventFlags::empty(),
            data: rustix::event::epoll::EventData::new_u64(0),
        }];
        let t = rustix::time::Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        match rustix::event::epoll::wait(&self.waiter, &mut ready[..], Some(&t)) {
            // A signal ended the wait early: read what is there.
            Err(rustix::io::Errno::INTR) => {}
            r => {
                r.map_err(|e| err("polling the ring", e))?;
            }
        }
        self.ring
            .consume()
            .map_err(|e| err("reading the ring", e))?;
        let mut n = self.core.borrow_mut().take_delivered();
        if !self.core.borrow().has_sink() {
            n += self.dispatch_queue(f);
        }
        n += self.drain_lost_closes(f);
        if self.sock_tps && Instant::now() >= self.next_sweep {
            n += self.sweep(f);
        }
        Ok(n)
    }

    /// Closes the sockets their processes no longer hold (see `Core::sweep`): with the socket
    /// tracepoints the kernel side sees TCP closes but not Unix sockets' (no tracepoint there).
    fn sweep(&mut self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        self.next_sweep = Instant::now() + SWEEP;
        let users = self.core.borrow().socket_users();
        // A process gone holds nothing: its exit record closes its streams, and if the ring had
        // no room for that record, the sweeps do.
        let held: HashMap<u32, HashSet<u64>> = users
            .into_iter()
            .map(|pid| (pid, procfs::socket_inodes(pid).unwrap_or_default()))
            .collect();
        let ts = mono_now();
        self.core
            .borrow_mut()
            .with_out(f, |core, f| core.sweep(&held, ts, f))
    }

    /// The records copied out of the ring, to `f`.
    fn dispatch_queue(&mut self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let buf = std::mem::take(&mut *self.queue.borrow_mut());
        let mut core = self.core.borrow_mut();
        let mut n = 0;
        let mut at = 0;
        while let Some(len) = buf
            .get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
        {
            let Some(rec) = buf.get(at + 4..at + 4 + len as usize) else {
                break;
            };
            at += 4 + len as usize;
            n += core.dispatch(rec, f);
        }
        let mut back = self.queue.borrow_mut();
        if back.is_empty() && buf.capacity() <= 16 << 20 {
            let mut buf = buf;
            buf.clear();
            *back = buf;
        }
        n
    }

    /// Closes whose record the ring had no room for (the kernel kept them in a map).
    fn drain_lost_closes(&mut self, f: &mut dyn FnMut(Event<'_>)) -> usize {
        // Cleared before the walk: an entry added during it sets the flag again.
        let zero = 0u32.to_le_bytes();
        let Ok(pending) = map(&self.obj, "lost_closes_pending") else {
            return 0;
        };
        match pending.lookup(&zero, MapFlags::ANY) {
            Ok(Some(v)) if v.iter().any(|&b| b != 0) => {
                let _ = pending.update(&zero, &0u64.to_le_bytes(), MapFlags::ANY);
            }
            _ => return 0,
        }
        let Ok(m) = map(&self.obj, "lost_closes") else {
            return 0;
        };
        let lost: Vec<(u64, [u64; 2])> = m
            .keys()
            .filter_map(|k| {
                let v = m.lookup(&k, MapFlags::ANY).ok().flatten()?;
                let _ = m.delete(&k);
                let sock = u64::from_le_bytes(k.get(..8)?.try_into().ok()?);
                let out = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
                let inb = u64::from_le_bytes(v.get(8..16)?.try_into().ok()?);
                Some((sock, [out, inb]))
            })
            .collect();
        let ts = mono_now();
        self.core.borrow_mut().with_out(f, |core, f| {
            let mut n = 0;
            for (sock, ends) in lost {
                core.stats.lost_closes += 1;
                n += core.close(sock, ts, Some(ends), f);
            }
            n
        })
    }

    /// Counters since start (kernel-side losses summed over CPUs).
    pub fn stats(&self) -> Stats {
        let mut s = self.core.borrow().stats;
        let k = map(&self.obj, "counters")
            .ok()
            .and_then(|m| {
                m.lookup_percpu(&0u32.to_le_bytes(), MapFlags::ANY)
                    .ok()
                    .flatten()
            })
            .unwrap_or_default();
        let field = |cpu: &Vec<u8>, i: usize| {
            cpu.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_le_bytes)
        };
        for cpu in &k {
            s.lost_records += field(cpu, 0);
            s.lost_bytes += field(cpu, 1);
            s.truncated_records += field(cpu, 2);
            s.truncated_bytes += field(cpu, 3);
            s.lost_opens += field(cpu, 4);
        }
        s
    }

    /// Total BPF run time and run count of the tracer's programs (zero unless the kernel's BPF
    /// statistics are on: `sysctl kernel.bpf_stats_enabled=1`).
    pub fn run_time(&self) -> RunTime {
        use std::os::fd::AsFd;
        let ids: HashSet<u32> = self
            .obj
            .progs()
            .filter_map(|p| libbpf_rs::Program::id_from_fd(p.as_fd()).ok())
            .collect();
        let mut r = RunTime::default();
        for info in libbpf_rs::query::ProgInfoIter::default() {
            if ids.contains(&info.id) {
                r.run_time_ns += info.run_time_ns;
                r.run_cnt += info.run_cnt;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes() {
        assert_eq!(ring_size(0), 8 << 20);
        assert_eq!(ring_size(1), 64 << 10);
        assert_eq!(ring_size(3 << 20), 4 << 20);
        assert_eq!(ring_size(usize::MAX), 1 << 30);
    }

    #[test]
    fn clock_offset_is_near_the_epoch_difference() {
        let off = mono_to_real();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128;
        assert!(off > 0 && off < now);
    }
}
