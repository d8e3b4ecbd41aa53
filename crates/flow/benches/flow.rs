//! Flow table throughput on in-order traffic over many connections (segments/s and MB/s), plus
//! bulk traffic with 1% of segments swapped with their successor (the out-of-order path).

use std::hint::black_box;
use std::net::{Ipv4Addr, SocketAddr};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flow::tcp_flags::{ACK, FIN, PSH, SYN};
use flow::{Dir, FlowConfig, FlowTable, Handler, Segment};

#[derive(Clone, Copy)]
struct Pkt {
    ts: u64,
    src: SocketAddr,
    dst: SocketAddr,
    seq: u32,
    ack: u32,
    flags: u8,
    len: usize,
}

/// Counts what it is given, like a session that looks at every byte would at the least.
#[derive(Default)]
struct Sink {
    bytes: u64,
    events: u64,
}

impl Handler for Sink {
    fn open(&mut self, _: u64, _: SocketAddr, _: SocketAddr, _: bool, _: u64) -> bool {
        self.events += 1;
        true
    }
    fn data(&mut self, _: u64, _: Dir, data: &[u8], _: u64) -> bool {
        self.bytes += data.len() as u64 + u64::from(data[0]);
        true
    }
    fn gap(&mut self, _: u64, _: Dir, _: u64, _: u64) {
        self.events += 1;
    }
    fn close(&mut self, _: u64, _: u64) {
        self.events += 1;
    }
}

/// `conns` connections, each: handshake, `rounds` request/response exchanges of `req`/`resp`
/// bytes (responses cut at `mss`), FINs. Connections are interleaved round-robin.
fn workload(
    conns: u32,
    rounds: u32,
    req: usize,
    resp: usize,
    mss: usize,
    ooo_every: u32,
) -> Vec<Pkt> {
    let server = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 1), 3306));
    let mut per_conn: Vec<Vec<Pkt>> = Vec::new();
    for c in 0..conns {
        let client =
            SocketAddr::from((Ipv4Addr::from(0x0a01_0000 + c), 40000 + (c % 20000) as u16));
        let (ci, si) = (c.wrapping_mul(2_654_435_761), c.wrapping_mul(40_503));
        let (mut co, mut so) = (1u32, 1u32);
        let mut v = Vec::new();
        let pk = |src, dst, seq, ack, flags, len| Pkt {
            ts: 0,
            src,
            dst,
            seq,
            ack,
            flags,
            len,
        };
        v.push(pk(client, server, ci, 0, SYN, 0));
        v.push(pk(server, client, si, ci.wrapping_add(1), SYN | ACK, 0));
        for _ in 0..rounds {
            v.push(pk(
                client,
                server,
                ci.wrapping_add(co),
                si.wrapping_add(so),
                ACK | PSH,
                req,
            ));
            co += req as u32;
            let mut left = resp;
            while left > 0 {
                let n = left.min(mss);
                v.push(pk(
                    server,
                    client,
                    si.wrapping_add(so),
                    ci.wrapping_add(co),
                    ACK | PSH,
                    n,
                ));
                so += n as u32;
                left -= n;
            }
        }
        v.push(pk(
            client,
            server,
            ci.wrapping_add(co),
            si.wrapping_add(so),
            ACK | FIN,
            0,
        ));
        v.push(pk(
            server,
            client,
            si.wrapping_add(so),
            ci.wrapping_add(co + 1),
            ACK | FIN,
            0,
        ));
        per_conn.push(v);
    }
    if ooo_every > 0 {
        reorder(&mut per_conn, ooo_every);
    }
    let mut out = Vec::new();
    let longest = per_conn.iter().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        for v in &per_conn {
            if let Some(p) = v.get(i) {
                out.push(Pkt {
                    ts: out.len() as u64 * 1000,
                    ..*p
                });
            }
        }
    }
    out
}

/// Swaps every `every`-th data segment with its successor when both go the same way (within one
/// connection, before interleaving), as a capture sees a reordering on the path.
fn reorder(per_conn: &mut [Vec<Pkt>], every: u32) {
    let mut n = 0u32;
    for v in per_conn {
        for i in 0..v.len().saturating_sub(1) {
            if v[i].len > 0 && v[i].src == v[i + 1].src && v[i + 1].len > 0 {
                n += 1;
                if n.is_multiple_of(every) {
                    v.swap(i, i + 1);
                }
            }
        }
    }
}

fn run(pkts: &[Pkt], payload: &[u8], ooo_expected: bool) -> Sink {
    let cfg = FlowConfig {
        server_ports: vec![3306],
        ..FlowConfig::default()
    };
    let mut tbl = FlowTable::new(cfg);
    let mut sink = Sink::default();
    for p in pkts {
        let seg = Segment {
            ts_ns: p.ts,
            src: p.src,
            dst: p.dst,
            seq: p.seq,
            ack: p.ack,
            flags: p.flags,
            payload: &payload[..p.len],
            missing: 0,
        };
        tbl.process(&seg, &mut sink);
    }
    tbl.finish(&mut sink);
    assert_eq!(tbl.stats().gaps, 0);
    assert!(ooo_expected == (tbl.stats().out_of_order > 0));
    sink
}

fn bench(c: &mut Criterion) {
    let payload = vec![7u8; 65536];
    let cases = [
        // Query-sized traffic: 120-byte requests, 400-byte responses, 10 000 connections.
        ("small_10k_conns", workload(10_000, 10, 120, 400, 1448, 0)),
        // Bulk responses: 200-byte requests, 16 KiB responses in 1448-byte segments.
        ("mtu_1k_conns", workload(1_000, 10, 200, 16 << 10, 1448, 0)),
        // The same with 1% of data segments swapped with their successor.
        (
            "mtu_1k_conns_1pct_ooo",
            workload(1_000, 10, 200, 16 << 10, 1448, 100),
        ),
    ];
    for (name, pkts) in &cases {
        let bytes: u64 = pkts.iter().map(|p| p.len as u64).sum();
        let mut g = c.benchmark_group("segments");
        g.throughput(Throughput::Elements(pkts.len() as u64));
        g.bench_function(*name, |b| {
            b.iter(|| black_box(run(black_box(pkts), &payload, name.ends_with("ooo"))))
        });
        g.finish();
        let mut g = c.benchmark_group("bytes");
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(*name, |b| {
            b.iter(|| black_box(run(black_box(pkts), &payload, name.ends_with("ooo"))))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
