//! Root-only: traces real server processes (python3 children) over a Unix socket and over TLS
//! and checks the events byte for byte. Skips with a message where BPF cannot load, unless
//! DBTAP_REQUIRE_CAPTURE=1 (then it fails).

use std::cell::RefCell;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use ebpf::{Addr, Config, Event, Tracer};

fn can_run() -> bool {
    match ebpf::available() {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var("DBTAP_REQUIRE_CAPTURE").as_deref() != Ok("1"),
                "eBPF capture required but: {why}"
            );
            eprintln!("SKIPPED: eBPF capture not available here: {why}");
            false
        }
    }
}

fn out_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/out/ebpf")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
    d
}

/// Starts a python3 child running `script`; returns it once it printed "ready".
fn python(script: &str, args: &[&str]) -> Child {
    let mut c = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    let mut line = String::new();
    let out = c.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    BufReader::new(out)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(line.trim(), "ready", "server did not start");
    c
}

/// The port a test server wrote to `file` (servers bind port 0: tests run at once).
fn read_port(file: &std::path::Path) -> u16 {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no port in {}", file.display()))
}

#[derive(Debug, Default)]
struct Seen {
    opens: Vec<(u64, Addr, Addr, Option<u32>, bool)>,
    /// (sock, inbound, offset, len, bytes, tls)
    data: Vec<(u64, bool, u64, u64, Vec<u8>, bool)>,
    closes: Vec<u64>,
}

impl Seen {
    fn add(&mut self, e: Event<'_>) {
        match e {
            Event::Open {
                sock,
                local,
                peer,
                peer_pid,
                accepted,
                ..
            } => self.opens.push((sock, local, peer, peer_pid, accepted)),
            Event::Data {
                sock,
                inbound,
                offset,
                len,
                bytes,
                tls,
                ..
            } => self
                .data
                .push((sock, inbound, offset, len, bytes.to_vec(), tls)),
            Event::Close { sock, .. } => self.closes.push(sock),
        }
    }
}

fn collect(t: &mut Tracer, seen: &mut Seen, until: impl Fn(&Seen) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !until(seen) && Instant::now() < end {
        t.poll(Duration::from_millis(50), &mut |e| seen.add(e))
            .unwrap_or_else(|e| panic!("poll: {e}"));
    }
}

/// `collect` for a tracer with a sink: the sink fills `seen`, `poll`'s callback gets nothing.
fn collect_sunk(t: &mut Tracer, seen: &Rc<RefCell<Seen>>, until: impl Fn(&Seen) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !until(&seen.borrow()) && Instant::now() < end {
        t.poll(Duration::from_millis(50), &mut |e| {
            panic!("a tracer with a sink hands no event to poll's callback: {e:?}")
        })
        .unwrap_or_else(|e| panic!("poll: {e}"));
    }
}

/// Checks one direction: contiguous offsets from 0, total length, bytes equal to `want`.
fn check_stream(seen: &Seen, sock: u64, inbound: bool, want: &[u8]) -> usize {
    let mut at = 0u64;
    let mut truncated = 0;
    for (s, i, off, len, bytes, _) in &seen.data {
        if *s != sock || *i != inbound {
            continue;
        }
        assert_eq!(*off, at, "offsets must be contiguous");
        let start = usize::try_from(*off).unwrap_or(usize::MAX);
        assert_eq!(
            &want[start..start + bytes.len()],
            &bytes[..],
            "bytes at offset {off}"
        );
        if *len > bytes.len() as u64 {
            truncated += 1;
        }
        at += len;
    }
    assert_eq!(at, want.len() as u64, "stream length (inbound={inbound})");
    truncated
}

const UNIX_SERVER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
a, b = socket.socketpair()  # unbound Unix sockets: not traffic to trace
a.sendall(b"noise"); b.recv(5)
def take(n):
    b = b""
    while len(b) < n:
        time.sleep(0.2)
        b += c.recv(1 << 20)
    return b
assert take(4) == b"ping"
c.sendall(b"pong!")
big = take(100000)
c.sendall(bytes(i % 251 for i in range(70000)))
c.recv(1)
c.close()
"#;

#[test]
fn unix_socket_stream_is_exact() {
    unix_socket_stream(false, false);
}

/// The same with the events handed to a sink straight from the ring.
#[test]
fn unix_socket_stream_is_exact_through_a_sink() {
    unix_socket_stream(true, false);
}

/// Both on the syscall tracepoints (the path of kernels without the socket tracepoints).
#[test]
fn unix_socket_stream_is_exact_on_syscall_tracepoints() {
    unix_socket_stream(false, true);
    unix_socket_stream(true, true);
}

/// The output directory's suffix of a test on the syscall tracepoints.
/// A test on both kernel paths: the first name runs `$body(false)` on the socket tracepoints
/// (this kernel's default), the second `$body(true)` on the syscall tracepoints (the path of
/// kernels without them).
macro_rules! on_both_paths {
    ($(#[$doc:meta])* $sock:ident, $sys:ident, $body:ident) => {
        $(#[$doc])*
        #[test]
        fn $sock() {
            $body(false);
        }

        $(#[$doc])*
        ///
        /// On the syscall tracepoints.
        #[test]
        fn $sys() {
            $body(true);
        }
    };
}

/// The output directory of test `name` on the path `syscalls` chooses, once `can_run()`; `None`
/// (the test returns) when eBPF cannot run here.
fn test_dir(name: &str, syscalls: bool) -> Option<PathBuf> {
    let suffix = if syscalls { "-syscalls" } else { "" };
    can_run().then(|| out_dir(&format!("{name}{suffix}")))
}

fn kernel_has_tracefs() -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\ttracefs"))
}

/// Whether the kernel's BTF names the socket tracepoints (sock:sock_recv_length, 6.3+).
fn kernel_has_sock_tracepoints() -> bool {
    let btf = std::fs::read("/sys/kernel/btf/vmlinux").unwrap_or_default();
    let name = b"btf_trace_sock_recv_length\0";
    btf.windows(name.len()).any(|w| w == name)
}

/// The tracefs mounts this thread sees.
fn tracefs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/thread-self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - tracefs "))
        .map(str::to_string)
        .collect()
}

fn unix_socket_stream(sink: bool, syscalls: bool) {
    let Some(dir) = test_dir(if sink { "unix-sink" } else { "unix" }, syscalls) else {
        return;
    };
    let path = dir.join("srv.sock");
    let mut server = python(UNIX_SERVER, &[path.to_str().unwrap_or("")]);
    let cfg = Config {
        pids: vec![server.id()],
        syscall_tracepoints: syscalls,
        ..Config::default()
    };
    let sunk = Rc::new(RefCell::new(Seen::default()));
    let mounts = tracefs_mounts();
    let mut t = if sink {
        let s = Rc::clone(&sunk);
        Tracer::start_with_sink(&cfg, Box::new(move |e| s.borrow_mut().add(e)))
    } else {
        Tracer::start(&cfg)
    }
    .unwrap_or_else(|e| panic!("start: {e}"));
    // The socket tracepoints wherever the kernel has them, else the per-syscall tracepoints
    // wherever it has tracefs, mounted or not; a tracefs mounted for the attach is not left in
    // this thread's mounts.
    assert_eq!(
        t.socket_tracepoints(),
        !syscalls && kernel_has_sock_tracepoints()
    );
    assert!(t.per_syscall_tracepoints() || !kernel_has_tracefs());
    assert_eq!(tracefs_mounts(), mounts);
    let mut c = UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect: {e}"));
    let big_in: Vec<u8> = (0..100000u32).map(|i| (i % 241) as u8).collect();
    c.write_all(b"ping").unwrap_or_else(|e| panic!("{e}"));
    let mut pong = [0u8; 5];
    c.read_exact(&mut pong).unwrap_or_else(|e| panic!("{e}"));
    c.write_all(&big_in).unwrap_or_else(|e| panic!("{e}"));
    let mut big_out = vec![0u8; 70000];
    c.read_exact(&mut big_out).unwrap_or_else(|e| panic!("{e}"));
    c.write_all(b"x").unwrap_or_else(|e| panic!("{e}"));
    let _ = server.wait();
    let mut seen = Seen::default();
    if sink {
        collect_sunk(&mut t, &sunk, |s| !s.closes.is_empty());
        seen = sunk.take();
    } else {
        collect(&mut t, &mut seen, |s| !s.closes.is_empty());
    }
    assert_eq!(seen.opens.len(), 1, "{seen:?}");
    let (sock, local, peer, peer_pid, accepted) = seen.opens[0].clone();
    assert_eq!(local, Addr::Unix(path.display().to_string()));
    assert_eq!(peer, Addr::Unix(String::new()));
    assert_eq!(peer_pid, Some(std::process::id()));
    assert!(accepted);
    let mut inbound = b"ping".to_vec();
    inbound.extend_from_slice(&big_in);
    inbound.push(b'x');
    let mut outbound = pong.to_vec();
    outbound.extend_from_slice(&big_out);
    let trunc_in = check_stream(&seen, sock, true, &inbound);
    let trunc_out = check_stream(&seen, sock, false, &outbound);
    assert!(trunc_out >= 1, "the 70000-byte send exceeds the copy limit");
    assert!(trunc_in + trunc_out >= 1);
    assert!(seen.data.iter().all(|d| !d.5), "no TLS here");
    assert_eq!(seen.closes, vec![sock]);
    let st = t.stats();
    assert_eq!(
        (st.lost_records, st.bad_records, st.synthesized_opens),
        (0, 0, 0),
        "{st:?}"
    );
    assert!(
        st.truncated_records >= 1 && st.truncated_bytes > 0,
        "{st:?}"
    );
}

const TLS_SERVER: &str = r#"
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[2], sys.argv[3])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
print("ready", flush=True)
c, _ = s.accept()
t = ctx.wrap_socket(c, server_side=True)
got = b""
while len(got) < 8:
    got += t.recv(100)
t.sendall(b"pong-tls" + got)
t.recv(1)
t.close()
"#;

const TLS_CLIENT: &str = r#"
import socket, ssl, sys
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))))
t.sendall(b"ping-tls")
got = b""
while len(got) < 16:
    got += t.recv(100)
assert got == b"pong-tlsping-tls", got
t.sendall(b"x")
t.close()
"#;

on_both_paths!(
    tls_plaintext_without_ciphertext,
    tls_plaintext_without_ciphertext_on_syscall_tracepoints,
    tls_plaintext_without_ciphertext_with
);

fn tls_plaintext_without_ciphertext_with(syscalls: bool) {
    let Some(dir) = test_dir("tls", syscalls) else {
        return;
    };
    let (key, cert) = (dir.join("key.pem"), dir.join("cert.pem"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("openssl: {e}"));
    assert!(ok.success(), "openssl req failed");
    // An ephemeral port: both paths' tests run at once.
    let port_file = dir.join("port");
    let mut server = python(
        TLS_SERVER,
        &[
            port_file.to_str().unwrap_or(""),
            cert.to_str().unwrap_or(""),
            key.to_str().unwrap_or(""),
        ],
    );
    let port = read_port(&port_file);
    // Plain TCP tracing on too: the ciphertext must still not show up as data.
    let cfg = Config {
        ports: vec![port],
        tcp_plaintext: true,
        syscall_tracepoints: syscalls,
        ..Config::default()
    };
    let mut t = Tracer::start(&cfg).unwrap_or_else(|e| panic!("start: {e}"));
    assert_eq!(
        t.targets().iter().map(|t| t.pid).collect::<Vec<_>>(),
        vec![server.id()]
    );
    assert!(!t.ssl_libs().is_empty(), "no libssl found in the server");
    let client = Command::new("python3")
        .arg("-c")
        .arg(TLS_CLIENT)
        .arg(port.to_string())
        .status();
    assert!(client.is_ok_and(|s| s.success()), "TLS client failed");
    let _ = server.wait();
    let mut seen = Seen::default();
    collect(&mut t, &mut seen, |s| !s.closes.is_empty());
    assert_eq!(seen.opens.len(), 1, "{seen:?}");
    let (sock, local, _, _, accepted) = seen.opens[0].clone();
    assert_eq!(
        local,
        Addr::Ip(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    );
    assert!(accepted);
    assert!(
        seen.data.iter().all(|d| d.5),
        "ciphertext emitted as data: {seen:?}"
    );
    check_stream(&seen, sock, true, b"ping-tlsx");
    check_stream(&seen, sock, false, b"pong-tlsping-tls");
    assert_eq!(seen.closes, vec![sock]);
}

const FORKING_SERVER: &str = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(4)
print("ready", flush=True)
for _ in range(2):
    c, _ = s.accept()
    if os.fork() == 0:
        got = b""
        while len(got) < 5:
            got += c.recv(100)
        c.sendall(b"re:" + got)
        os._exit(0)  # no close(2): the kernel closes the socket at exit
    c.close()  # the parent's copy: the connection stays open in the child
    os.wait()
"#;

on_both_paths!(
    /// PostgreSQL's model: the parent accepts, a forked child serves the connection and exits.
    forked_children_are_traced_and_their_exit_closes,
    forked_children_are_traced_and_their_exit_closes_on_syscall_tracepoints,
    forked_children_are_traced_and_their_exit_closes_with
);

fn forked_children_are_traced_and_their_exit_closes_with(syscalls: bool) {
    let Some(dir) = test_dir("fork", syscalls) else {
        return;
    };
    let path = dir.join("srv.sock");
    let mut server = python(FORKING_SERVER, &[path.to_str().unwrap_or("")]);
    let cfg = Config {
        unix_paths: vec![path.clone()],
        syscall_tracepoints: syscalls,
        ..Config::default()
    };
    let mut t = Tracer::start(&cfg).unwrap_or_else(|e| panic!("start: {e}"));
    for msg in [b"first", b"secnd"] {
        let mut c = UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect: {e}"));
        c.write_all(msg).unwrap_or_else(|e| panic!("{e}"));
        let mut back = [0u8; 8];
        c.read_exact(&mut back).unwrap_or_else(|e| panic!("{e}"));
    }
    let _ = server.wait();
    let mut seen = Seen::default();
    collect(&mut t, &mut seen, |s| s.closes.len() >= 2);
    assert_eq!(seen.opens.len(), 2, "{seen:?}");
    for (i, msg) in [b"first", b"secnd"].iter().enumerate() {
        let sock = seen.opens[i].0;
        assert_eq!(seen.opens[i].3, Some(std::process::id()));
        check_stream(&seen, sock, true, &msg[..]);
        check_stream(&seen, sock, false, &[&b"re:"[..], &msg[..]].concat());
    }
    let mut closes = seen.closes.clone();
    closes.sort_unstable();
    let mut socks: Vec<u64> = seen.opens.iter().map(|o| o.0).collect();
    socks.sort_unstable();
    assert_eq!(
        closes, socks,
        "one close per connection, none for the parent's copy"
    );
    assert_eq!(t.stats().exit_closes, 2, "{:?}", t.stats());
}

const SINK_SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(1)
print("ready", flush=True)
c, _ = s.accept()
n = 0
while n < int(sys.argv[2]):
    b = c.recv(4096)
    if not b:
        break
    n += len(b)
c.sendall(b"done")
c.close()
"#;

on_both_paths!(
    /// A ring far too small for the burst: every lost byte is an exact gap, the stream length
    /// exact.
    lost_records_are_exact_gaps,
    lost_records_are_exact_gaps_on_syscall_tracepoints,
    lost_records_are_exact_gaps_with
);

fn lost_records_are_exact_gaps_with(syscalls: bool) {
    let Some(dir) = test_dir("loss", syscalls) else {
        return;
    };
    let path = dir.join("srv.sock");
    let total = 4 << 20;
    let mut server = python(
        SINK_SERVER,
        &[path.to_str().unwrap_or(""), &total.to_string()],
    );
    let cfg = Config {
        pids: vec![server.id()],
        ring_bytes: 64 << 10,
        syscall_tracepoints: syscalls,
        ..Config::default()
    };
    let mut t = Tracer::start(&cfg).unwrap_or_else(|e| panic!("start: {e}"));
    let data: Vec<u8> = (0..total).map(|i| (i % 253) as u8).collect();
    let mut c = UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect: {e}"));
    c.write_all(&data).unwrap_or_else(|e| panic!("{e}"));
    let mut done = [0u8; 4];
    c.read_exact(&mut done).unwrap_or_else(|e| panic!("{e}"));
    let _ = server.wait();
    let mut seen = Seen::default();
    collect(&mut t, &mut seen, |s| !s.closes.is_empty());
    let sock = seen
        .opens
        .first()
        .map(|o| o.0)
        .unwrap_or_else(|| panic!("no open"));
    // Per direction (outbound: the server's "done"): the end reached and the bytes missing.
    let (mut at, mut missing) = ([0u64; 2], 0u64);
    for (s, inbound, off, len, bytes, _) in &seen.data {
        if *s != sock {
            continue;
        }
        let (d, want) = if *inbound {
            (1, &data[..])
        } else {
            (0, &b"done"[..])
        };
        assert!(*off >= at[d], "offsets go forward");
        missing += off - at[d] + (len - bytes.len() as u64);
        let start = usize::try_from(*off).unwrap_or(usize::MAX);
        assert_eq!(
            &want[start..start + bytes.len()],
            &bytes[..],
            "bytes at offset {off}"
        );
        at[d] = off + len;
    }
    assert_eq!(at, [4, total as u64], "the streams' lengths are exact");
    let st = t.stats();
    assert!(
        st.lost_records > 0,
        "a 64 KiB ring must overflow here: {st:?}"
    );
    assert_eq!(missing, st.lost_bytes + st.truncated_bytes, "{st:?}");
    assert_eq!(seen.closes, vec![sock]);
}

const CLOSING_SERVER: &str = r#"
import socket, sys, threading
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.bind(sys.argv[1]); u.listen(4)
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", 0)); t.listen(4)
open(sys.argv[2], "w").write(str(t.getsockname()[1]))
def serve(c):
    while True:
        d = c.recv(100)
        if not d:
            break
        c.sendall(b"re:" + d)
        if d == b"bye":
            break  # the server closes first
    c.close()
def accept(l):
    while True:
        threading.Thread(target=serve, args=(l.accept()[0],), daemon=True).start()
threading.Thread(target=accept, args=(t,), daemon=True).start()
print("ready", flush=True)
accept(u)
"#;

/// Sends `msg` and reads the server's "re:" answer.
fn round_trip(s: &mut (impl Read + Write), msg: &[u8]) {
    s.write_all(msg).unwrap_or_else(|e| panic!("{e}"));
    let mut back = vec![0u8; msg.len() + 3];
    s.read_exact(&mut back).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&back[3..], msg);
}

on_both_paths!(
    /// Closes come while the server runs on: one the server makes, one its client makes (Unix
    /// sockets), and a TCP one; a connection open before tracing began is seen mid-stream, the
    /// ones opened after from their start.
    closes_while_the_server_runs_and_older_connections_mid_stream,
    closes_while_the_server_runs_and_older_connections_mid_stream_on_syscall_tracepoints,
    closes_while_the_server_runs_and_older_connections_mid_stream_with
);

fn closes_while_the_server_runs_and_older_connections_mid_stream_with(syscalls: bool) {
    let Some(dir) = test_dir("closes", syscalls) else {
        return;
    };
    let path = dir.join("srv.sock");
    let port_file = dir.join("port");
    let mut server = python(
        CLOSING_SERVER,
        &[
            path.to_str().unwrap_or(""),
            port_file.to_str().unwrap_or(""),
        ],
    );
    let port = read_port(&port_file);
    let mut older = UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect: {e}"));
    round_trip(&mut older, b"hello");
    let cfg = Config {
        pids: vec![server.id()],
        tcp_plaintext: true,
        syscall_tracepoints: syscalls,
        ..Config::default()
    };
    let mut t = Tracer::start(&cfg).unwrap_or_else(|e| panic!("start: {e}"));
    let mut newer = UnixStream::connect(&path).unwrap_or_else(|e| panic!("connect: {e}"));
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port))
        .unwrap_or_else(|e| panic!("connect: {e}"));
    round_trip(&mut older, b"bye");
    round_trip(&mut newer, b"hi");
    round_trip(&mut tcp, b"tcp");
    drop(newer);
    drop(tcp);
    let mut seen = Seen::default();
    collect(&mut t, &mut seen, |s| s.closes.len() >= 3);
    assert!(
        server.try_wait().ok().flatten().is_none(),
        "the server runs on"
    );
    let _ = server.kill();
    let _ = server.wait();
    drop(older);
    // Each socket by what its client sent first after tracing began.
    let first_in = |sock: u64| {
        seen.data
            .iter()
            .find(|d| d.0 == sock && d.1)
            .map(|d| d.4.clone())
            .unwrap_or_default()
    };
    let mut by_msg = std::collections::BTreeMap::new();
    for (sock, local, _, _, accepted) in &seen.opens {
        by_msg.insert(first_in(*sock), (*sock, local.clone(), *accepted));
    }
    let get = |m: &[u8]| {
        by_msg
            .get(m)
            .cloned()
            .unwrap_or_else(|| panic!("no stream for {m:?}: {seen:?}"))
    };
    let (old_sock, _, old_accepted) = get(b"bye");
    let (new_sock, new_local, new_accepted) = get(b"hi");
    let (tcp_sock, tcp_local, tcp_accepted) = get(b"tcp");
    assert!(!old_accepted, "open before tracing began: mid-stream");
    assert!(new_accepted && tcp_accepted, "opened since: from the start");
    assert_eq!(new_local, Addr::Unix(path.display().to_string()));
    assert_eq!(
        tcp_local,
        Addr::Ip(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
    );
    let mut closes = seen.closes.clone();
    closes.sort_unstable();
    let mut want = vec![old_sock, new_sock, tcp_sock];
    want.sort_unstable();
    assert_eq!(closes, want, "{seen:?}");
    let st = t.stats();
    assert_eq!(st.exit_closes, 0, "{st:?}");
    if t.socket_tracepoints() {
        // The two Unix sockets' closes by the descriptor sweep, TCP's by the kernel.
        assert_eq!(st.swept_closes, 2, "{st:?}");
    } else {
        // close(2) is traced.
        assert_eq!(st.swept_closes, 0, "{st:?}");
    }
}
