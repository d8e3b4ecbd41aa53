//! The eBPF source: traces database server processes with the kernel's socket tracepoints
//! (syscall tracepoints on kernels before 6.3) and OpenSSL uprobes and hands out their socket
//! streams (Unix sockets, TLS plaintext, optionally plain TCP) as `Event`s: opens, data with
//! exact per-direction stream offsets, closes.
#![forbid(unsafe_code)]

mod dispatch;
mod procfs;
mod record;
mod sockdiag;
mod tracefs;
mod tracer;

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

pub use tracer::{RunTime, Tracer};

/// What to trace.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Servers listening on these TCP ports are traced.
    pub ports: Vec<u16>,
    /// Servers listening on these Unix socket paths are traced.
    pub unix_paths: Vec<PathBuf>,
    /// These processes are traced.
    pub pids: Vec<u32>,
    /// Processes with these command names (/proc/PID/comm) are traced.
    pub processes: Vec<String>,
    /// Also emit plain (non-TLS) TCP data; Unix sockets and TLS plaintext are always emitted.
    pub tcp_plaintext: bool,
    /// Ring buffer size in bytes (rounded up to a power of two, at least 64 KiB); 0: 8 MiB.
    pub ring_bytes: usize,
    /// Trace the system calls even where the kernel has the socket tracepoints (the path of
    /// kernels before 6.3: for comparison, tests, and a kernel where the new path misbehaves).
    pub syscall_tracepoints: bool,
}

/// An endpoint of a traced socket.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Addr {
    Ip(SocketAddr),
    /// A Unix socket path, "@name" for an abstract name, "" when unbound.
    Unix(String),
}

/// One thing the tracer saw. `ts_ns` is realtime (ns since the epoch).
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A traced socket: at accept or connect (`accepted`: seen from its start), or first seen
    /// mid-connection. `outgoing`: the traced process is the client (it connected; `local` is
    /// then the client's end and `peer` the server's): known at connect, or for one first seen
    /// mid-connection (outgoing when its local end is an unbound Unix socket, or a TCP port
    /// other than the configured ones connected to one of them).
    Open {
        sock: u64,
        ts_ns: u64,
        pid: u32,
        local: Addr,
        peer: Addr,
        peer_pid: Option<u32>,
        accepted: bool,
        outgoing: bool,
    },
    /// `inbound`: client->server (read by a traced server, written by a traced client). `bytes` are the first
    /// bytes of `len` (the rest is a gap); `offset` is the first byte's position in the stream.
    Data {
        sock: u64,
        ts_ns: u64,
        pid: u32,
        inbound: bool,
        offset: u64,
        len: u64,
        bytes: &'a [u8],
        tls: bool,
    },
    Close {
        sock: u64,
        ts_ns: u64,
    },
}

/// Why a process is traced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Why {
    Port(u16),
    Socket(PathBuf),
    Pid,
    Process(String),
    /// A child (same command) of a traced process.
    Child(u32),
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Port(p) => write!(f, "listens on port {p}"),
            Why::Socket(p) => write!(f, "listens on {}", p.display()),
            Why::Pid => f.write_str("--pid"),
            Why::Process(n) => write!(f, "--process {n}"),
            Why::Child(p) => write!(f, "child of {p}"),
        }
    }
}

/// A traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub pid: u32,
    pub comm: String,
    pub why: Why,
}

/// Counters of the tracer since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Ring records read (all kinds).
    pub records: u64,
    /// Data records read and the bytes they carried.
    pub data_records: u64,
    pub bytes: u64,
    /// Data records the ring had no room for, and the stream bytes they stood for (exact gaps).
    pub lost_records: u64,
    pub lost_bytes: u64,
    /// Data records whose bytes did not all fit the copy limit, and the bytes not copied.
    pub truncated_records: u64,
    pub truncated_bytes: u64,
    /// Open records the ring had no room for (the socket is announced again with its next data).
    pub lost_opens: u64,
    /// Records that did not decode (should stay 0).
    pub bad_records: u64,
    /// Opens synthesized in user space for data of a socket never announced (its addresses
    /// unknown: `Addr::Unix("")`), and Opens that came after such data (dropped).
    pub synthesized_opens: u64,
    pub late_opens: u64,
    /// Closes made in user space for sockets of a traced process that exited.
    pub exit_closes: u64,
    /// Closes made in user space for sockets their process no longer held in two sweeps of its
    /// descriptors a second apart (the socket tracepoints: Unix sockets' closes are not traced).
    pub swept_closes: u64,
    /// Close records the ring had no room for (delivered from a kernel map instead).
    pub lost_closes: u64,
    /// Closes of sockets not open in user space (closed at their process's exit already, or
    /// never announced): dropped, so every Open gets exactly one Close.
    pub unknown_closes: u64,
}

/// The error of the tracer; Display is one line.
#[derive(Debug)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Whether the effective capabilities (the CapEff hex mask of /proc/self/status) allow loading
/// tracing programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON.
pub fn caps_allow(status: &str) -> bool {
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |c: u32| eff & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// Whether the eBPF source can run here; the error is one line naming what is missing.
pub fn available() -> Result<(), String> {
    if !cfg!(target_arch = "x86_64") {
        return Err("the eBPF source supports x86_64 only".into());
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !caps_allow(&status) {
        return Err("the eBPF source needs root or CAP_BPF+CAP_PERFMON".into());
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Err("the eBPF source needs kernel BTF (/sys/kernel/btf/vmlinux is missing)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities() {
        assert!(caps_allow("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(caps_allow("CapEff:\t000000c000000000\n"));
        assert!(!caps_allow("CapEff:\t0000008000000000\n"));
        assert!(caps_allow("CapEff:\t0000000000200000\n"));
        assert!(!caps_allow("CapEff:\t0000000000000000\n"));
        assert!(!caps_allow(""));
    }
}
