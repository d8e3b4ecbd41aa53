//! Real captures on the loopback device (needs CAP_NET_RAW: skipped with a message otherwise).
//!
//! Each test listens on its own ephemeral port and filters on it, so tests running in parallel
//! (and unrelated traffic on the machine) do not disturb one another.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use live::bpf::{self, FilterSpec, Insn};
use live::{LiveError, Packet, Ring, RingConfig};

const DEADLINE: Duration = Duration::from_secs(30);

fn cfg(interface: &str) -> RingConfig {
    // Small rings: the tests move little data and run in parallel.
    RingConfig {
        block_size: 256 << 10,
        block_count: 8,
        ..RingConfig::new(interface)
    }
}

/// Opens a ring, or None (after printing why) when not privileged.
fn open(interface: &str, filter: &[Insn]) -> Option<Ring> {
    match Ring::open(&cfg(interface), filter) {
        Ok(r) => Some(r),
        Err(LiveError::NoPrivilege) => {
            eprintln!("skipped: live capture needs CAP_NET_RAW (run the tests as root)");
            None
        }
        Err(e) => panic!("opening a ring on {interface}: {e}"),
    }
}

struct Tcp {
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    flags: u8,
    payload: usize,
}

fn parse(data: &[u8]) -> Option<Tcp> {
    let (src, dst, l4, end) = match data.first()? >> 4 {
        4 => {
            let ihl = usize::from(data[0] & 0xf) * 4;
            let total = usize::from(u16::from_be_bytes([data[2], data[3]]));
            if data[9] != 6 {
                return None;
            }
            let s = Ipv4Addr::new(data[12], data[13], data[14], data[15]);
            let d = Ipv4Addr::new(data[16], data[17], data[18], data[19]);
            (IpAddr::V4(s), IpAddr::V4(d), ihl, total)
        }
        6 => {
            if *data.get(6)? != 6 {
                return None;
            }
            let plen = usize::from(u16::from_be_bytes([data[4], data[5]]));
            let s: [u8; 16] = data.get(8..24)?.try_into().ok()?;
            let d: [u8; 16] = data.get(24..40)?.try_into().ok()?;
            (
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                40,
                40 + plen,
            )
        }
        _ => return None,
    };
    let tcp = data.get(l4..l4 + 20)?;
    let sport = u16::from_be_bytes([tcp[0], tcp[1]]);
    let dport = u16::from_be_bytes([tcp[2], tcp[3]]);
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    let doff = usize::from(tcp[12] >> 4) * 4;
    Some(Tcp {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
        seq,
        flags: tcp[13],
        payload: end - l4 - doff,
    })
}

/// What a capture saw of the connections to one server port.
///
/// "Each packet once" is checked three ways: no packet is the outgoing loopback copy; the ring
/// handed exactly as many packets as the kernel's PACKET_STATISTICS counted into it; and a
/// byte-identical repeat of a packet (from the IP header on) must carry payload. The last
/// because TCP itself repeats segments: a loaded machine delays ACKs on lo, a tail loss probe
/// resends the last segment, and over IPv6 (no IP id) within the same millisecond (same TCP
/// timestamp) that resend is byte-identical to the original. Payload is counted as the
/// sequence space covered per direction, so a retransmission does not count twice.
#[derive(Default, Debug)]
struct Seen {
    packets: usize,
    /// Byte-identical repeats of an earlier packet.
    dups: usize,
    identical: HashSet<Vec<u8>>,
    dup_info: Vec<String>,
    /// Byte-identical repeats without payload (not a TCP retransmission).
    bare_dups: usize,
    /// Client ports of SYNs (without ACK).
    syns: BTreeSet<u16>,
    /// (client port, towards the server) → initial sequence number (from SYN / SYN-ACK).
    isn: HashMap<(u16, bool), u32>,
    /// (client port, towards the server) → payload ranges relative to the ISN.
    ranges: HashMap<(u16, bool), Vec<(u64, u64)>>,
    /// Payload bytes counting retransmissions.
    raw_payload: usize,
    /// Client port → packets.
    per_conn: BTreeMap<u16, usize>,
    /// Packets not to/from the server port, or not TCP.
    foreign: usize,
    outgoing_lo: usize,
}

impl Seen {
    fn add(&mut self, p: &Packet<'_>, port: u16) {
        self.packets += 1;
        if p.pkttype == libc::PACKET_OUTGOING && p.ifindex == live::loopback_index().unwrap() {
            self.outgoing_lo += 1;
        }
        if !self.identical.insert(p.data.to_vec()) {
            self.dups += 1;
            let t = parse(p.data);
            if t.as_ref().is_none_or(|t| t.payload == 0) {
                self.bare_dups += 1;
            }
            self.dup_info.push(format!(
                "IPv{} pkttype {} ifindex {} {} bytes, payload {:?} flags {:?}",
                p.data[0] >> 4,
                p.pkttype,
                p.ifindex,
                p.data.len(),
                t.as_ref().map(|t| t.payload),
                t.as_ref().map(|t| t.flags)
            ));
        }
        let Some(t) = parse(p.data) else {
            self.foreign += 1;
            return;
        };
        let (client, to_server) = if t.dst.port() == port {
            (t.src.port(), true)
        } else if t.src.port() == port {
            (t.dst.port(), false)
        } else {
            self.foreign += 1;
            return;
        };
        if t.flags & 0x02 != 0 {
            self.isn.insert((client, to_server), t.seq);
            if t.flags & 0x10 == 0 {
                self.syns.insert(client);
            }
        }
        if t.payload > 0 {
            self.raw_payload += t.payload;
            let key = (client, to_server);
            // Without the SYN seen first (the blocks are in order, so it is), base on this.
            let isn = *self.isn.entry(key).or_insert(t.seq.wrapping_sub(1));
            let start = u64::from(t.seq.wrapping_sub(isn));
            self.ranges
                .entry(key)
                .or_default()
                .push((start, start + t.payload as u64));
        }
        *self.per_conn.entry(client).or_default() += 1;
    }

    /// Payload bytes covered in one direction over all connections.
    fn covered(&self, to_server: bool) -> usize {
        let mut total = 0;
        for (_, ranges) in self.ranges.iter().filter(|((_, d), _)| *d == to_server) {
            let mut r = ranges.clone();
            r.sort_unstable();
            let mut end = 0u64;
            for (s, e) in r {
                let s = s.max(end);
                if e > s {
                    total += (e - s) as usize;
                    end = e;
                }
            }
        }
        total
    }
    fn to_server(&self) -> usize {
        self.covered(true)
    }
    fn to_client(&self) -> usize {
        self.covered(false)
    }
}

/// Serves `n` connections on `listener`: reads the request to EOF, answers `reply` bytes.
fn serve(listener: TcpListener, n: usize, reply: usize) -> thread::JoinHandle<usize> {
    thread::spawn(move || {
        let mut got = 0;
        for _ in 0..n {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).unwrap();
            got += buf.len();
            s.write_all(&vec![b's'; reply]).unwrap();
        }
        got
    })
}

/// Makes `n` connections to `addr`, each sending `req` bytes and reading the reply to EOF.
/// Returns the client ports.
fn clients(addr: SocketAddr, n: usize, req: usize, reply: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    for _ in 0..n {
        let mut c = TcpStream::connect(addr).unwrap();
        ports.push(c.local_addr().unwrap().port());
        c.write_all(&vec![b'c'; req]).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), reply);
    }
    ports
}

/// Runs `n` connections against a fresh listener on `ip` with `req`/`reply` bytes each.
fn traffic(listener: TcpListener, n: usize, req: usize, reply: usize) -> Vec<u16> {
    let addr = listener.local_addr().unwrap();
    let server = serve(listener, n, reply);
    let ports = clients(addr, n, req, reply);
    assert_eq!(server.join().unwrap(), n * req);
    ports
}

/// Polls `ring` into `seen` until `done(seen)` holds (then 300 ms more, to catch any extra
/// copy) or the deadline passes.
fn capture(ring: &mut Ring, port: u16, seen: &mut Seen, done: impl Fn(&Seen) -> bool) {
    let start = Instant::now();
    let mut settled: Option<Instant> = None;
    while start.elapsed() < DEADLINE {
        ring.poll(Duration::from_millis(50), |p| seen.add(p, port))
            .unwrap();
        if done(seen) {
            let t = *settled.get_or_insert_with(Instant::now);
            if t.elapsed() > Duration::from_millis(300) {
                return;
            }
        }
    }
}

/// A listener on `ip` whose port is also held in the other family (the port number alone is
/// what the filters match, and tests run in parallel: without this, another test's IPv6
/// listener could get the number of this test's IPv4 one). The holder lives as long as the
/// process (tests are short).
fn listener(ip: IpAddr) -> TcpListener {
    loop {
        let l = TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
        let other = if ip.is_ipv4() { V6 } else { V4 };
        if let Ok(hold) = TcpListener::bind(SocketAddr::new(other, l.local_addr().unwrap().port()))
        {
            std::mem::forget(hold);
            return l;
        }
    }
}

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

fn spec(port: u16) -> FilterSpec {
    FilterSpec {
        ports: vec![port],
        servers: vec![],
        sample: 1,
        loopback_ifindex: live::loopback_index(),
    }
}

/// The common check: `n` connections on each of IPv4 and IPv6, bytes both ways, once each.
fn check_once_each(interface: &str, filter: impl Fn(u16) -> Vec<Insn>) {
    let (l4, l6) = (listener(V4), listener(V6));
    let port4 = l4.local_addr().unwrap().port();
    let port6 = l6.local_addr().unwrap().port();
    // Two rings, one per listener port (each an independent filter).
    let Some(mut r4) = open(interface, &filter(port4)) else {
        return;
    };
    let Some(mut r6) = open(interface, &filter(port6)) else {
        return;
    };
    // Unrelated traffic on another port must not be seen.
    let other = listener(V4);
    // (Checked by `foreign == 0`: every packet seen has this test's server port.)
    traffic(other, 3, 1000, 1000);
    let (n, req, reply) = (5, 3000, 200_000);
    let p4 = traffic(l4, n, req, reply);
    let p6 = traffic(l6, n, req, reply);
    for (ring, port, ports) in [(&mut r4, port4, &p4), (&mut r6, port6, &p6)] {
        let mut seen = Seen::default();
        capture(ring, port, &mut seen, |s| {
            s.syns.len() >= n && s.to_server() >= n * req && s.to_client() >= n * reply
        });
        let st = ring.stats().unwrap();
        eprintln!(
            "{interface} port {port}: {} packets, {} SYNs, {} bytes to server, {} to client, {} retransmitted; kernel stats {st:?}",
            seen.packets,
            seen.syns.len(),
            seen.to_server(),
            seen.to_client(),
            seen.raw_payload - seen.to_server() - seen.to_client()
        );
        assert_eq!(seen.foreign, 0, "packets of other ports or not TCP");
        assert_eq!(seen.outgoing_lo, 0, "outgoing loopback copies");
        assert_eq!(seen.bare_dups, 0, "packets seen twice: {:?}", seen.dup_info);
        if seen.dups > 0 {
            eprintln!("  identical TCP retransmissions: {:?}", seen.dup_info);
        }
        assert_eq!(seen.syns.len(), n, "one SYN per connection");
        assert_eq!(
            seen.syns.iter().copied().collect::<BTreeSet<_>>(),
            ports.iter().copied().collect()
        );
        assert_eq!(seen.to_server(), n * req);
        assert_eq!(seen.to_client(), n * reply);
        assert_eq!(st.drops, 0);
        assert_eq!(st.packets as usize, seen.packets);
    }
}

#[test]
fn lo_each_packet_once_v4_and_v6() {
    check_once_each("lo", |port| bpf::servers_filter(&spec(port)));
}

#[test]
fn any_sees_lo_traffic_once() {
    check_once_each("any", |port| bpf::servers_filter(&spec(port)));
}

#[test]
fn lo_servers_by_address() {
    check_once_each("lo", |port| {
        let servers = vec![SocketAddr::new(V4, port), SocketAddr::new(V6, port)];
        bpf::servers_filter(&FilterSpec {
            ports: vec![],
            servers,
            ..spec(port)
        })
    });
}

#[test]
fn lo_libpcap_expression_and_loopback_rule() {
    let probe = match bpf::compile_expr("tcp") {
        Ok(p) => p,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    assert!(!probe.is_empty());
    check_once_each("lo", |port| {
        let expr = bpf::compile_expr(&format!("tcp port {port}")).unwrap();
        bpf::and(&expr, &bpf::drop_outgoing(live::loopback_index().unwrap())).unwrap()
    });
}

/// Connects from a chosen local port (Linux gives `connect` even ports, so sampling by
/// client port needs odd ones made on purpose).
fn connect_from(addr: SocketAddr, local_port: u16) -> Option<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, None).ok()?;
    s.set_reuse_address(true).ok()?;
    s.bind(&SocketAddr::new(addr.ip(), local_port).into())
        .ok()?;
    s.connect(&addr.into()).ok()?;
    Some(s.into())
}

#[test]
fn lo_sampling_keeps_the_hashed_client_ports() {
    let l = listener(V4);
    let addr = l.local_addr().unwrap();
    let port = addr.port();
    let Some(mut ring) = open(
        "lo",
        &bpf::servers_filter(&FilterSpec {
            sample: 2,
            ..spec(port)
        }),
    ) else {
        return;
    };
    let (n, req, reply) = (16, 100, 5000);
    let server = serve(l, n, reply);
    // Client ports base, base+1, ...: of both parities, about half of them kept (ports that are
    // busy are skipped).
    // Below the ephemeral range (32768-60999), so no other test's server port.
    let base = 20_000 + (std::process::id() % 10_000) as u16;
    let mut ports = Vec::new();
    let mut candidate = base;
    while ports.len() < n {
        candidate += 1;
        let Some(mut c) = connect_from(addr, candidate) else {
            continue;
        };
        ports.push(candidate);
        c.write_all(&vec![b'c'; req]).unwrap();
        c.shutdown(std::net::Shutdown::Write).unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert_eq!(buf.len(), reply);
    }
    assert_eq!(server.join().unwrap(), n * req);
    let kept: BTreeSet<u16> = ports
        .iter()
        .copied()
        .filter(|p| bpf::sample_keeps(*p, 2))
        .collect();
    assert!(!kept.is_empty() && kept.len() < n);
    let mut seen = Seen::default();
    let k = kept.len();
    capture(&mut ring, port, &mut seen, |s| {
        s.syns.len() >= k && s.to_server() >= k * req && s.to_client() >= k * reply
    });
    eprintln!(
        "sample=2: {n} connections, {k} with kept client ports; saw {} SYNs, {} connections, {} packets",
        seen.syns.len(),
        seen.per_conn.len(),
        seen.packets
    );
    assert_eq!((seen.foreign, seen.bare_dups), (0, 0));
    assert_eq!(ring.stats().unwrap().packets as usize, seen.packets);
    assert_eq!(seen.syns.iter().copied().collect::<BTreeSet<_>>(), kept);
    assert_eq!(seen.per_conn.keys().copied().collect::<BTreeSet<_>>(), kept);
    assert_eq!(seen.syns.len(), k);
    assert_eq!(seen.to_server(), k * req);
    assert_eq!(seen.to_client(), k * reply);
}

#[test]
fn lo_without_the_loopback_rule_sees_each_packet_twice() {
    // The kernel behaviour the loopback rule exists for.
    let l = listener(V4);
    let port = l.local_addr().unwrap().port();
    let Some(mut ring) = open(
        "lo",
        &bpf::servers_filter(&FilterSpec {
            loopback_ifindex: None,
            ..spec(port)
        }),
    ) else {
        return;
    };
    let (n, req, reply) = (3, 1000, 1000);
    traffic(l, n, req, reply);
    let mut seen = Seen::default();
    capture(&mut ring, port, &mut seen, |s| {
        s.syns.len() >= n
            && s.to_server() >= n * req
            && s.to_client() >= n * reply
            && s.dups * 2 >= s.packets
    });
    eprintln!(
        "no loopback rule: {} packets, {} outgoing, {} identical repeats",
        seen.packets, seen.outgoing_lo, seen.dups
    );
    assert_eq!(seen.syns.len(), n);
    assert_eq!(seen.outgoing_lo * 2, seen.packets);
    assert!(seen.dups * 2 >= seen.packets);
    assert_eq!(ring.stats().unwrap().packets as usize, seen.packets);
    assert_eq!(seen.to_server(), n * req);
}

#[test]
fn fanout_group_keeps_connections_whole() {
    let l = listener(V4);
    let port = l.local_addr().unwrap().port();
    let filter = bpf::servers_filter(&spec(port));
    let rings = match live::open_group(&cfg("lo"), &filter, 2) {
        Ok(r) => r,
        Err(LiveError::NoPrivilege) => {
            eprintln!("skipped: live capture needs CAP_NET_RAW (run the tests as root)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(rings.len(), 2);
    let g0 = rings[0].fanout_group().unwrap();
    assert!(g0.is_some());
    assert_eq!(g0, rings[1].fanout_group().unwrap());
    let (n, req, reply) = (24, 500, 20_000);
    let ports = traffic(l, n, req, reply);
    // Each ring polled on its own thread (as dbtap would), until together they saw everything.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handles: Vec<_> = rings
        .into_iter()
        .map(|mut ring| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut seen = Seen::default();
                let start = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && start.elapsed() < DEADLINE
                {
                    ring.poll(Duration::from_millis(50), |p| seen.add(p, port))
                        .unwrap();
                }
                seen
            })
        })
        .collect();
    // The rings fill within a few retire timeouts; give them time, then stop.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(2) {
        thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen: Vec<Seen> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let a: BTreeSet<u16> = seen[0].per_conn.keys().copied().collect();
    let b: BTreeSet<u16> = seen[1].per_conn.keys().copied().collect();
    eprintln!(
        "fanout: ring 0 saw {} connections ({} packets), ring 1 saw {} ({} packets)",
        a.len(),
        seen[0].packets,
        b.len(),
        seen[1].packets
    );
    assert!(
        a.is_disjoint(&b),
        "a connection split across rings: {:?}",
        a.intersection(&b).collect::<Vec<_>>()
    );
    assert_eq!(
        a.union(&b).copied().collect::<BTreeSet<_>>(),
        ports.iter().copied().collect()
    );
    assert_eq!(seen.iter().map(|s| s.syns.len()).sum::<usize>(), n);
    assert_eq!(seen.iter().map(|s| s.to_server()).sum::<usize>(), n * req);
    assert_eq!(seen.iter().map(|s| s.to_client()).sum::<usize>(), n * reply);
    assert!(
        seen.iter()
            .all(|s| s.foreign == 0 && s.outgoing_lo == 0 && s.bare_dups == 0)
    );
}

#[test]
fn poll_returns_within_timeout_when_idle() {
    // A filter that accepts nothing: poll must come back after the timeout with 0.
    let Some(mut ring) = open("lo", &[Insn::stmt(bpf::BPF_RET | bpf::BPF_K, 0)]) else {
        return;
    };
    let t = Instant::now();
    let n = ring
        .poll(Duration::from_millis(100), |_| panic!("no packet expected"))
        .unwrap();
    let took = t.elapsed();
    assert_eq!(n, 0);
    assert!(
        took >= Duration::from_millis(95) && took < Duration::from_millis(1000),
        "{took:?}"
    );
    let t = Instant::now();
    assert_eq!(ring.poll(Duration::ZERO, |_| ()).unwrap(), 0);
    assert!(t.elapsed() < Duration::from_millis(50));
}

#[test]
fn errors_are_one_line() {
    let e = Ring::open(&cfg("no-such-if0"), &[]).err().unwrap();
    assert!(matches!(e, LiveError::NoSuchInterface(_)), "{e}");
    assert_eq!(e.to_string(), "no such network interface: no-such-if0");
    let e = Ring::open(
        &RingConfig {
            block_size: 4096,
            ..cfg("lo")
        },
        &[],
    )
    .err()
    .unwrap();
    assert!(matches!(e, LiveError::Config(_)), "{e}");
    assert!(!e.to_string().contains('\n'));
    let p = LiveError::NoPrivilege.to_string();
    assert!(p.starts_with("live capture needs the CAP_NET_RAW capability") && !p.contains('\n'));
    assert_eq!(live::interface_index("any").unwrap(), 0);
    assert_eq!(
        live::interface_index("lo").unwrap(),
        live::loopback_index().unwrap()
    );
}

#[test]
fn lo_long_port_list_with_far_jumps_and_sampling() {
    // 400 ports: conditional jumps past 255 instructions, which the assembler widens; the
    // kernel's checker must accept the result. sample=1 keeps every connection.
    check_once_each("lo", |port| {
        let mut ports: Vec<u16> = (2000..2400).collect();
        ports.push(port);
        let f = bpf::servers_filter(&FilterSpec {
            ports,
            ..spec(port)
        });
        assert!(f.len() > 800);
        f
    });
}
