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

use crate::record::{self, Raw};
use crate::{Addr, Config, Error, Event, Stats, Target, procfs};

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

/// How often `poll` looks for new server processes and libssl files.
const RESCAN: Duration = Duration::from_secs(10);

/// Cap on sockets remembered in user space (owner pid, data seen: for closes at process exit
/// and gaps at the end).
const MAX_SOCKS: usize = 1 << 20;

/// What user space knows of a socket it announced.
#[derive(Clone, Copy, Debug, Default)]
struct SockSeen {
    /// The process that last used it (its exit closes the socket).
    pid: u32,
    /// The end of the last data seen, [outbound, inbound].
    next: [u64; 2],
    /// Whether the last data was TLS plaintext.
    tls: bool,
    /// The traced process is the client: its reads are server->client.
    outgoing: bool,
}

/// A running tracer. Not `Send`: build it on the thread that polls it.
pub struct Tracer {
    // Field order is drop order: the ring and the links go before the object owning the fds.
    ring: RingBuffer<'static>,
    links: Vec<Link>,
    obj: Object,
    queue: Rc<RefCell<Vec<u8>>>,
    targets: Vec<Target>,
    /// Probed (libssl, pid); pid -1: every process mapping it.
    libs: HashSet<(PathBuf, i32)>,
    mono_to_real: i128,
    socks: HashMap<u64, SockSeen, foldhash::fast::RandomState>,
    spare: SockSeen,
    stats: Stats,
    cfg: Config,
    next_scan: Instant,
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

fn load(ring_bytes: u32) -> Result<Object, Error> {
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
    open.load().map_err(|e| err("loading the BPF programs", e))
}

fn map<'o>(obj: &'o Object, name: &str) -> Result<libbpf_rs::Map<'o>, Error> {
    obj.maps()
        .find(|m| m.name() == name)
        .ok_or_else(|| Error(format!("the BPF object has no map {name}")))
}

impl Tracer {
    /// Finds the server processes, loads and attaches the programs.
    pub fn start(cfg: &Config) -> Result<Tracer, Error> {
        crate::available().map_err(Error)?;
        let targets = procfs::discover(cfg);
        if targets.is_empty() {
            return Err(Error("no server process found to trace (none listens on the given ports or sockets; try --pid or --process)".into()));
        }
        let ring_bytes = ring_size(cfg.ring_bytes);
        let obj = load(ring_bytes)?;
        let mut conf = Vec::with_capacity(16);
        conf.extend_from_slice(&u32::from(cfg.tcp_plaintext).to_le_bytes());
        // copy_twice: 0, data goes straight into the ring where the kernel can (6.16+).
        conf.extend_from_slice(&0u32.to_le_bytes());
        let wake = u64::from(ring_bytes / 4).min(256 << 10);
        conf.extend_from_slice(&wake.to_le_bytes());
        map(&obj, "cfg")?
            .update(&0u32.to_le_bytes(), &conf, MapFlags::ANY)
            .map_err(|e| err("configuring", e))?;
        let traced = map(&obj, "traced")?;
        for t in &targets {
            traced
                .update(&t.pid.to_le_bytes(), &1u32.to_le_bytes(), MapFlags::ANY)
                .map_err(|e| err("adding a traced pid", e))?;
        }
        let queue = Rc::new(RefCell::new(Vec::new()));
        let q = Rc::clone(&queue);
        let ring_map = map(&obj, "ring")?;
        let mut rb = RingBufferBuilder::new();
        rb.add(&ring_map, move |data: &[u8]| {
            let mut q = q.borrow_mut();
            q.extend_from_slice(&(data.len() as u32).to_le_bytes());
            q.extend_from_slice(data);
            0
        })
        .map_err(|e| err("the ring buffer", e))?;
        let ring = rb.build().map_err(|e| err("the ring buffer", e))?;
        let mut links = Vec::new();
        for p in obj.progs_mut() {
            if p.section()
                .to_str()
                .is_some_and(|s| s.starts_with("tp_btf/"))
            {
                links.push(
                    p.attach().map_err(|e| {
                        err(&format!("attaching {}", p.name().to_string_lossy()), e)
                    })?,
                );
            }
        }
        let mut t = Tracer {
            ring,
            links,
            obj,
            queue,
            targets,
            libs: HashSet::new(),
            mono_to_real: mono_to_real(),
            socks: HashMap::default(),
            spare: SockSeen::default(),
            stats: Stats::default(),
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
        if fresh.is_empty() {
            return Ok(0);
        }
        let traced = map(&self.obj, "traced")?;
        for t in &fresh {
            traced
                .update(&t.pid.to_le_bytes(), &1u32.to_le_bytes(), MapFlags::ANY)
                .map_err(|e| err("adding a traced pid", e))?;
        }
        let n = fresh.len();
        self.targets.extend(fresh);
        self.attach_ssl()?;
        Ok(n)
    }

    /// Waits up to `timeout` for records (the kernel wakes this side only when much is pending),
    /// then hands out everything pending; returns the number of events.
    pub fn poll(
        &mut self,
        timeout: Duration,
        f: &mut dyn FnMut(Event<'_>),
    ) -> Result<usize, Error> {
        if Instant::now() >= self.next_scan {
            self.rescan()?;
        }
        match self.ring.poll(timeout) {
            // A signal ended the wait early: read what is there.
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            r => r.map_err(|e| err("polling the ring", e))?,
        }
        self.ring
            .consume()
            .map_err(|e| err("reading the ring", e))?;
        let buf = std::mem::take(&mut *self.queue.borrow_mut());
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
            n += self.dispatch(rec, f);
        }
        n += self.drain_lost_closes(f);
        let mut back = self.queue.borrow_mut();
        if back.is_empty() && buf.capacity() <= 16 << 20 {
            let mut buf = buf;
            buf.clear();
            *back = buf;
        }
        Ok(n)
    }

    fn real(&self, mono: u64) -> u64 {
        u64::try_from(i128::from(mono) + self.mono_to_real).unwrap_or(0)
    }

    fn dispatch(&mut self, rec: &[u8], f: &mut dyn FnMut(Event<'_>)) -> usize {
        self.stats.records += 1;
        let Some(raw) = record::decode(rec) else {
            self.stats.bad_records += 1;
            return 0;
        };
        match raw {
            Raw::Open {
                sock,
                ts,
                pid,
                local,
                peer,
                peer_pid,
                accepted,
                outgoing,
            } => {
                if self.socks.contains_key(&sock) {
                    // Announced late (the ring had no room for the first Open): its data came
                    // first and an Open was made for it then.
                    self.stats.late_opens += 1;
                    return 0;
                }
                let outgoing =
                    outgoing || (!accepted && connected_to_server(&self.cfg.ports, &local, &peer));
                let s = self.seen(sock);
                s.pid = pid;
                s.outgoing = outgoing;
                let ts_ns = self.real(ts);
                f(Event::Open {
                    sock,
                    ts_ns,
                    pid,
                    local,
                    peer,
                    peer_pid,
                    accepted,
                    outgoing,
                });
                1
            }
            Raw::Data {
                sock,
                ts,
                pid,
                inbound,
                offset,
                len,
                bytes,
                tls,
            } => {
                let ts_ns = self.real(ts);
                let mut n = 1;
                if !self.socks.contains_key(&sock) {
                    self.stats.synthesized_opens += 1;
                    let unknown = Addr::Unix(String::new());
                    let peer = unknown.clone();
                    f(Event::Open {
                        sock,
                        ts_ns,
                        pid,
                        local: unknown,
                        peer,
                        peer_pid: None,
                        accepted: false,
                        outgoing: false,
                    });
                    n += 1;
                }
                let s = self.seen(sock);
                s.pid = pid;
                s.tls = tls;
                let d = &mut s.next[usize::from(inbound)];
                *d = (*d).max(offset.saturating_add(len));
                let inbound = inbound != s.outgoing;
                self.stats.data_records += 1;
                self.stats.bytes += bytes.len() as u64;
                f(Event::Data {
                    sock,
                    ts_ns,
                    pid,
                    inbound,
                    offset,
                    len,
                    bytes,
                    tls,
                });
                n
            }
            Raw::Close { sock, ts, ends, .. } => self.close(sock, ts, Some(ends), f),
            Raw::Exit { ts, pid } => self.exited(pid, ts, f),
        }
    }

    /// The user-space state of `sock` (not remembered beyond `MAX_SOCKS` sockets).
    fn seen(&mut self, sock: u64) -> &mut SockSeen {
        if self.socks.len() >= MAX_SOCKS && !self.socks.contains_key(&sock) {
            self.spare = SockSeen::default();
            return &mut self.spare;
        }
        self.socks.entry(sock).or_default()
    }

    /// Closes `sock`; bytes the kernel counted (`ends`) but no record brought (lost at the
    /// very end) become a gap first.
    fn close(
        &mut self,
        sock: u64,
        ts: u64,
        ends: Option<[u64; 2]>,
        f: &mut dyn FnMut(Event<'_>),
    ) -> usize {
        let ts_ns = self.real(ts);
        // One close per open: a socket closed already (its last user exited while a process
        // it was shared with still held it, then closed it) or never announced is not closed.
        let Some(s) = self.socks.remove(&sock) else {
            self.stats.unknown_closes += 1;
            return 0;
        };
        let mut n = 1;
        if let Some(ends) = ends {
            for (dir, &end) in ends.iter().enumerate() {
                let next = s.next[dir];
                if end > next {
                    // An empty record at the end offset: the bytes before it were lost (a
                    // gap), not cut by the copy limit.
                    let (pid, inbound, tls) = (s.pid, (dir == 1) != s.outgoing, s.tls);
                    f(Event::Data {
                        sock,
                        ts_ns,
                        pid,
                        inbound,
                        offset: end,
                        len: 0,
                        bytes: &[],
                        tls,
                    });
                    n += 1;
                }
            }
        }
        f(Event::Close { sock, ts_ns });
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
        let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        let ts = u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000
            + u64::try_from(now.tv_nsec).unwrap_or(0);
        let mut n = 0;
        for (sock, ends) in lost {
            self.stats.lost_closes += 1;
            n += self.close(sock, ts, Some(ends), f);
        }
        n
    }

    /// A traced process exited: the sockets it used last closed without close(2).
    fn exited(&mut self, pid: u32, ts: u64, f: &mut dyn FnMut(Event<'_>)) -> usize {
        let gone: Vec<u64> = self
            .socks
            .iter()
            .filter(|(_, s)| s.pid == pid)
            .map(|(&k, _)| k)
            .collect();
        let ends: Vec<(u64, Option<[u64; 2]>)> = match map(&self.obj, "socks") {
            Err(_) => gone.iter().map(|&s| (s, None)).collect(),
            Ok(m) => gone
                .iter()
                .map(|&sock| {
                    let key = sock.to_le_bytes();
                    let v = m.lookup(&key, MapFlags::ANY).ok().flatten();
                    let _ = m.delete(&key);
                    let ends = v.and_then(|v| {
                        let out = u64::from_le_bytes(v.get(..8)?.try_into().ok()?);
                        Some([out, u64::from_le_bytes(v.get(8..16)?.try_into().ok()?)])
                    });
                    (sock, ends)
                })
                .collect(),
        };
        let mut n = 0;
        for (sock, ends) in ends {
            self.stats.exit_closes += 1;
            n += self.close(sock, ts, ends, f);
        }
        n
    }

    /// Counters since start (kernel-side losses summed over CPUs).
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
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

/// A TCP connection first seen mid-stream whose local port is none of the configured server
/// ports and whose peer's is: the traced process connected out to a server (it is the client).
fn connected_to_server(ports: &[u16], local: &Addr, peer: &Addr) -> bool {
    match (local, peer) {
        (Addr::Ip(l), Addr::Ip(p)) => !ports.contains(&l.port()) && ports.contains(&p.port()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_connection_to_a_server_port_from_another_port_is_outgoing() {
        let ip = |s: &str| Addr::Ip(s.parse().unwrap());
        let ports = [6379];
        let out = |l: &str, p: &str| connected_to_server(&ports, &ip(l), &ip(p));
        assert!(out("127.0.0.1:40000", "127.0.0.1:6379"));
        assert!(!out("127.0.0.1:6379", "127.0.0.1:40000"));
        assert!(!out("127.0.0.1:6379", "127.0.0.1:6379"));
        assert!(!out("127.0.0.1:40000", "127.0.0.1:5432"));
        let unix = Addr::Unix("/run/redis.sock".into());
        assert!(!connected_to_server(&ports, &unix, &ip("127.0.0.1:6379")));
    }

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
