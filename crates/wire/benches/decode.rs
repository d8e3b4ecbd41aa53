//! Decode cost per packet: dbtap's hand path vs etherparse's SlicedPacket on the same frames.
//!
//! `cargo bench -p dbtap-wire --bench decode`; the "time" of each single-packet bench is ns/packet,
//! the "mixed" benches report packets/s over a batch of varied frames.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use etherparse::{PacketBuilder, SlicedPacket, TransportSlice, VlanId};
use wire::{Decoded, decode, linktype};

fn eth_v4(payload_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    PacketBuilder::ethernet2([1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12])
        .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        .tcp(50000, 3306, 12345, 65535)
        .ack(999)
        .psh()
        .write(&mut out, &vec![b'x'; payload_len])
        .unwrap();
    out
}

fn mixed() -> Vec<(u32, Vec<u8>)> {
    let mut v = Vec::new();
    for i in 0..256usize {
        let pl = vec![b'q'; (i * 37) % 1400];
        let mut out = Vec::new();
        let b = PacketBuilder::ethernet2([1; 6], [2; 6]);
        match i % 4 {
            0 => b
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(1, 2, 3, 4)
                .write(&mut out, &pl),
            1 => b
                .single_vlan(VlanId::try_new(10).unwrap())
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .tcp(1, 2, 3, 4)
                .write(&mut out, &pl),
            2 => b
                .ipv6([1; 16], [2; 16], 64)
                .tcp(1, 2, 3, 4)
                .write(&mut out, &pl),
            _ => b
                .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
                .udp(53, 53)
                .write(&mut out, &pl),
        }
        .unwrap();
        v.push((linktype::ETHERNET, out));
    }
    v
}

fn dbtap_len(lt: u32, f: &[u8]) -> usize {
    match decode(lt, f) {
        Decoded::Tcp(t) => t.payload.len() + usize::from(t.sport),
        _ => 0,
    }
}

fn etherparse_len(f: &[u8]) -> usize {
    match SlicedPacket::from_ethernet(f) {
        Ok(p) => match p.transport {
            Some(TransportSlice::Tcp(t)) => t.payload().len() + usize::from(t.source_port()),
            _ => 0,
        },
        Err(_) => 0,
    }
}

fn bench(c: &mut Criterion) {
    let one = eth_v4(100);
    let mut g = c.benchmark_group("eth_ipv4_tcp_1pkt");
    g.throughput(Throughput::Elements(1));
    g.bench_function("dbtap", |b| {
        b.iter(|| dbtap_len(linktype::ETHERNET, black_box(&one)))
    });
    g.bench_function("etherparse_sliced", |b| {
        b.iter(|| etherparse_len(black_box(&one)))
    });
    g.finish();

    let frames = mixed();
    let mut g = c.benchmark_group("mixed_256pkts");
    g.throughput(Throughput::Elements(frames.len() as u64));
    g.bench_function("dbtap", |b| {
        b.iter(|| {
            frames
                .iter()
                .map(|(lt, f)| dbtap_len(*lt, black_box(f)))
                .sum::<usize>()
        })
    });
    g.bench_function("etherparse_sliced", |b| {
        b.iter(|| {
            frames
                .iter()
                .map(|(_, f)| etherparse_len(black_box(f)))
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
