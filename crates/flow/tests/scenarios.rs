//! Byte-level scenarios: each feeds a hand-built packet sequence and checks the exact handler
//! events and counters.

mod common;

use common::*;
use flow::Dir::{ToClient, ToServer};
use flow::tcp_flags::{ACK, PSH, SYN};
use flow::{FlowConfig, FlowTable, PIECE_OVERHEAD};

const C: &str = "10.0.0.2:50000";
const S: &str = "10.0.0.1:3306";

fn data(id: u64, dir: flow::Dir, bytes: &[u8], ts: u64) -> Ev {
    Ev::Data {
        id,
        dir,
        bytes: bytes.to_vec(),
        ts,
    }
}

#[test]
fn in_order_conversation() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let p = vec![
        t.syn(),
        t.syn_ack(),
        t.c_ack(),
        t.c(b"SELECT 1"),
        t.s(b"one row"),
        t.c(b"QUIT"),
        t.c_fin(),
        t.s_fin(),
        t.c_ack(),
    ];
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert_eq!(
        rec.events,
        vec![
            Ev::Open {
                id: 1,
                client: addr(C),
                server: addr(S),
                saw_syn: true
            },
            data(1, ToServer, b"SELECT 1", p[3].ts),
            data(1, ToClient, b"one row", p[4].ts),
            data(1, ToServer, b"QUIT", p[5].ts),
            Ev::Close { id: 1 },
        ]
    );
    let st = tbl.stats();
    assert_eq!((st.segments, st.payload_bytes), (9, 19));
    assert_eq!((st.connections, st.closed_fin, st.late), (1, 1, 1));
    assert_eq!(
        (
            st.duplicates,
            st.gaps,
            st.out_of_order,
            st.retransmitted_bytes
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(tbl.buffered_bytes(), 0);
}

#[test]
fn reordering_is_released_in_order_with_each_pieces_ts() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let (a, b, c) = (t.c(b"aaa"), t.c(b"bbb"), t.c(b"ccc"));
    let (r1, r2, r3, r4) = (t.s(b"1"), t.s(b"22"), t.s(b"333"), t.s(b"4444"));
    let p = vec![
        syn,
        sa,
        c.clone(),
        a.clone(),
        b.clone(),
        r4.clone(),
        r3.clone(),
        r2.clone(),
        r1.clone(),
    ];
    let (rec, tbl) = run(mysql_cfg(), &p);
    let ev: Vec<_> = rec
        .events
        .iter()
        .filter(|e| matches!(e, Ev::Data { .. }))
        .cloned()
        .collect();
    assert_eq!(
        ev,
        vec![
            data(1, ToServer, b"aaa", a.ts),
            data(1, ToServer, b"bbb", b.ts),
            data(1, ToServer, b"ccc", c.ts),
            data(1, ToClient, b"1", r1.ts),
            data(1, ToClient, b"22", r2.ts),
            data(1, ToClient, b"333", r3.ts),
            data(1, ToClient, b"4444", r4.ts),
        ]
    );
    assert_eq!(tbl.stats().out_of_order, 4);
    assert_eq!(tbl.stats().gaps, 0);
    assert_eq!(tbl.buffered_bytes(), 0);
}

#[test]
fn every_segment_twice_gives_duplicates_not_doubled_bytes() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let once = [
        t.syn(),
        t.syn_ack(),
        t.c(b"hello"),
        t.s(b"world"),
        t.c(b"again"),
        t.s(b"done"),
        t.c_fin(),
        t.s_fin(),
    ];
    let twice: Vec<Pkt> = once.iter().flat_map(|p| [p.clone(), p.clone()]).collect();
    let (rec, tbl) = run(mysql_cfg(), &twice);
    assert_eq!(rec.opens(), vec![1]);
    assert_eq!(rec.closes(), vec![1]);
    assert_eq!(rec.text(1, ToServer), "helloagain");
    assert_eq!(rec.text(1, ToClient), "worlddone");
    let st = tbl.stats();
    assert_eq!(st.duplicates, 4);
    assert_eq!(st.retransmitted_bytes, 19);
    assert_eq!(st.gaps, 0);
    assert_eq!(st.late, 1); // the second copy of the last FIN
}

#[test]
fn retransmission_with_overlap_is_trimmed() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let first = t.c(b"0123456789");
    // A retransmission that starts inside the first segment and extends past it.
    let mut over = first.clone();
    over.seq = first.seq.wrapping_add(5);
    over.payload = b"56789ABCDE".to_vec();
    t.c_off += 5;
    let last = t.c(b"F");
    let (rec, tbl) = run_finish(mysql_cfg(), &[syn, sa, first, over, last]);
    assert_eq!(rec.text(1, ToServer), "0123456789ABCDEF");
    assert_eq!(tbl.stats().retransmitted_bytes, 5);
    assert_eq!(tbl.stats().duplicates, 0);
}

#[test]
fn in_order_segment_overlapping_held_data() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let base = t.c_seq();
    let mut first = t.c(b"0123456789ABCDE");
    let mut held = first.clone();
    held.seq = base.wrapping_add(10);
    held.payload = b"ABCDEFGHIJ".to_vec();
    first.ts = held.ts + 1;
    let (rec, tbl) = run_finish(mysql_cfg(), &[syn, sa, held, first]);
    assert_eq!(rec.text(1, ToServer), "0123456789ABCDEFGHIJ");
    assert_eq!(tbl.stats().retransmitted_bytes, 5);
    assert_eq!(tbl.stats().out_of_order, 1);
}

#[test]
fn loss_gap_is_exact_and_later_bytes_still_delivered() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let (a, _lost, c) = (t.c(b"aaa"), t.c(b"bbbbb"), t.c(b"cc"));
    let (rec, tbl) = run_finish(mysql_cfg(), &[syn, sa, a, c]);
    assert_eq!(
        rec.chunks(1, ToServer),
        vec![
            Chunk::D(b"aaa".to_vec()),
            Chunk::G(5),
            Chunk::D(b"cc".to_vec())
        ]
    );
    assert_eq!((tbl.stats().gaps, tbl.stats().gap_bytes), (1, 5));
    assert_eq!(rec.closes(), vec![1]);
    assert_eq!(tbl.stats().closed_finish, 1);
}

#[test]
fn peer_ack_declares_the_hole_before_the_next_request() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let q1 = t.c(b"Q1");
    let (_lost, r1b) = (t.s(b"first-half"), t.s(b"second"));
    let q2 = t.c(b"Q2"); // acks the whole response
    let (rec, tbl) = run(mysql_cfg(), &[syn, sa, q1, r1b.clone(), q2.clone()]);
    let tail: Vec<_> = rec.events[2..].to_vec();
    assert_eq!(
        tail,
        vec![
            Ev::Gap {
                id: 1,
                dir: ToClient,
                len: 10
            },
            data(1, ToClient, b"second", r1b.ts),
            data(1, ToServer, b"Q2", q2.ts),
        ]
    );
    assert_eq!(tbl.buffered_bytes(), 0);
}

#[test]
fn peer_ack_declares_a_lost_tail() {
    // The last segment of a response is lost: nothing is held, but the client's next request
    // acknowledges it, so the gap comes before that request.
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let q1 = t.c(b"Q1");
    let (r1a, _lost) = (t.s(b"head"), t.s(b"tail!"));
    let q2 = t.c(b"Q2");
    let (rec, _) = run(mysql_cfg(), &[syn, sa, q1, r1a, q2]);
    let kinds: Vec<_> = rec.events[3..].to_vec();
    assert_eq!(
        kinds[0],
        Ev::Gap {
            id: 1,
            dir: ToClient,
            len: 5
        }
    );
    assert!(matches!(&kinds[1], Ev::Data { dir: ToServer, bytes, .. } if bytes == b"Q2"));
}

#[test]
fn snaplen_missing_bytes_become_a_gap() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let mut cut = t.c(b"0123456789");
    cut.payload.truncate(4);
    cut.missing = 6;
    let next = t.c(b"next");
    let want = vec![
        Chunk::D(b"0123".to_vec()),
        Chunk::G(6),
        Chunk::D(b"next".to_vec()),
    ];
    let (rec, _) = run_finish(
        mysql_cfg(),
        &[syn.clone(), sa.clone(), cut.clone(), next.clone()],
    );
    assert_eq!(rec.chunks(1, ToServer), want);
    // Same when the cut segment arrives after the one following it.
    let (rec, tbl) = run_finish(
        mysql_cfg(),
        &[syn.clone(), sa.clone(), next.clone(), cut.clone()],
    );
    assert_eq!(rec.chunks(1, ToServer), want);
    assert_eq!(tbl.stats().gap_bytes, 6);
    // A segment of which nothing was captured.
    let mut none = cut.clone();
    none.payload.clear();
    none.missing = 10;
    let (rec, _) = run_finish(mysql_cfg(), &[syn, sa, none, next]);
    assert_eq!(
        rec.chunks(1, ToServer),
        vec![Chunk::G(10), Chunk::D(b"next".to_vec())]
    );
}

#[test]
fn sequence_wraps_around_2_pow_32() {
    let mut t = Tcp::new(C, S, u32::MAX - 5, u32::MAX);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let segs: Vec<Pkt> = ["abcd", "efgh", "ijkl", "mnop"]
        .iter()
        .map(|s| t.c(s.as_bytes()))
        .collect();
    let resp: Vec<Pkt> = ["01", "23", "45"]
        .iter()
        .map(|s| t.s(s.as_bytes()))
        .collect();
    let p = vec![
        syn,
        sa,
        segs[2].clone(),
        segs[0].clone(),
        segs[3].clone(),
        segs[1].clone(),
        resp[1].clone(),
        resp[0].clone(),
        resp[2].clone(),
    ];
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert_eq!(rec.text(1, ToServer), "abcdefghijklmnop");
    assert_eq!(rec.text(1, ToClient), "012345");
    assert_eq!(tbl.stats().gaps, 0);
    assert!(segs[0].seq > segs[3].seq, "the test must cross the wrap");
}

#[test]
fn mid_stream_pickup_by_port() {
    let mut t = Tcp::new(C, S, 7, 9);
    let _ = (t.syn(), t.syn_ack(), t.c(b"before capture"));
    let r = t.s(b"response");
    let q = t.c(b"query");
    let (rec, tbl) = run(mysql_cfg(), &[r, q]);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr(C),
            server: addr(S),
            saw_syn: false
        }
    );
    assert_eq!(rec.text(1, ToClient), "response");
    assert_eq!(rec.text(1, ToServer), "query");
    assert_eq!(tbl.stats().gaps, 0);
}

#[test]
fn pure_acks_do_not_open_connections() {
    let mut t = Tcp::new(C, S, 7, 9);
    let (rec, tbl) = run(mysql_cfg(), &[t.c_ack(), t.s_fin(), t.c_rst()]);
    assert!(rec.events.is_empty());
    assert_eq!(tbl.stats().not_tracked, 3);
    // Empty: nothing in them was lost.
    assert_eq!(tbl.stats().not_tracked_empty, 3);
    assert!(tbl.is_empty());
}

#[test]
fn syn_decides_orientation_over_ports() {
    // Both ports are server ports; the SYN says 3308 is the server, the port rule would say 3307.
    let cfg = || FlowConfig {
        server_ports: vec![3307, 3308],
        ..FlowConfig::default()
    };
    let mut t = Tcp::new("10.0.0.2:3307", "10.0.0.1:3308", 1, 2);
    let p = vec![t.syn(), t.syn_ack(), t.c(b"x")];
    let (rec, _) = run(cfg(), &p);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr("10.0.0.2:3307"),
            server: addr("10.0.0.1:3308"),
            saw_syn: true
        }
    );
    // Without the handshake, the lower port is the server.
    let (rec, _) = run(cfg(), &p[2..]);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr("10.0.0.1:3308"),
            server: addr("10.0.0.2:3307"),
            saw_syn: false
        }
    );
    // An explicit server wins over a port.
    let cfg = FlowConfig {
        servers: vec![addr("10.0.0.1:3308")],
        ..cfg()
    };
    let (rec, _) = run(cfg, &p[2..]);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr("10.0.0.2:3307"),
            server: addr("10.0.0.1:3308"),
            saw_syn: false
        }
    );
}

#[test]
fn unknown_ports_need_track_unknown_with_syn() {
    let mut t = Tcp::new(C, "10.0.0.1:5000", 1, 2);
    let p = vec![t.syn(), t.syn_ack(), t.c(b"hi"), t.s(b"yo")];
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert!(rec.events.is_empty());
    assert_eq!(tbl.stats().not_tracked, 4);
    let cfg = FlowConfig {
        track_unknown_with_syn: true,
        ..mysql_cfg()
    };
    let (rec, _) = run(cfg.clone(), &p);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr(C),
            server: addr("10.0.0.1:5000"),
            saw_syn: true
        }
    );
    assert_eq!(rec.text(1, ToServer), "hi");
    // Mid-stream, an unknown port is still unknown.
    let (rec, _) = run(cfg, &p[2..]);
    assert!(rec.events.is_empty());
    // An explicit server with port 0 covers every port of the host.
    let cfg = FlowConfig {
        servers: vec![addr("10.0.0.1:0")],
        ..FlowConfig::default()
    };
    let (rec, _) = run(cfg, &p[2..]);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr(C),
            server: addr("10.0.0.1:5000"),
            saw_syn: false
        }
    );
}

#[test]
fn syn_ack_without_syn_orients_and_starts_client_stream() {
    let mut t = Tcp::new(C, S, 100, 200);
    let _syn = t.syn();
    let p = vec![t.syn_ack(), t.c(b"abc"), t.s(b"def")];
    let (rec, _) = run(mysql_cfg(), &p);
    assert_eq!(
        rec.events[0],
        Ev::Open {
            id: 1,
            client: addr(C),
            server: addr(S),
            saw_syn: true
        }
    );
    assert_eq!(rec.text(1, ToServer), "abc");
    assert_eq!(rec.text(1, ToClient), "def");
}

#[test]
fn ipv6_connection() {
    let mut t = Tcp::new("[2001:db8::2]:40000", "[2001:db8::1]:3306", 1, 2);
    let p = vec![
        t.syn(),
        t.syn_ack(),
        t.c(b"v6"),
        t.s(b"ok"),
        t.c_fin(),
        t.s_fin(),
    ];
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert_eq!(rec.text(1, ToServer), "v6");
    assert_eq!(rec.text(1, ToClient), "ok");
    assert_eq!(tbl.stats().closed_fin, 1);
}

#[test]
fn rst_flushes_holes_and_closes() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let (a, _lost, c) = (t.c(b"aa"), t.c(b"bb"), t.c(b"cc"));
    let mut rst = t.c_rst();
    rst.flags &= !ACK; // no ACK, so only the RST declares the hole
    let late = t.s(b"late");
    let (rec, tbl) = run(mysql_cfg(), &[syn, sa, a, c, rst, late]);
    assert_eq!(rec.text(1, ToServer), "aa__cc");
    assert_eq!(rec.events.last(), Some(&Ev::Close { id: 1 }));
    let st = tbl.stats();
    assert_eq!((st.closed_rst, st.late, st.gap_bytes), (1, 1, 2));
    assert_eq!(tbl.buffered_bytes(), 0);
}

#[test]
fn fin_both_ways_waits_for_holes() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let (a, _lost, c) = (t.c(b"aa"), t.c(b"bb"), t.c(b"cc"));
    let mut cfin = t.c_fin();
    cfin.flags &= !ACK;
    let mut sfin = t.s_fin(); // acks the client's FIN: the hole is declared, then both FINs are in
    let (rec, tbl) = run(
        mysql_cfg(),
        &[syn.clone(), sa.clone(), a.clone(), c.clone(), cfin.clone()],
    );
    assert!(rec.closes().is_empty(), "a hole is still open");
    assert_eq!(tbl.buffered_bytes(), PIECE_OVERHEAD + 2);
    let (rec, tbl) = run(
        mysql_cfg(),
        &[
            syn.clone(),
            sa.clone(),
            a.clone(),
            c.clone(),
            cfin.clone(),
            sfin.clone(),
        ],
    );
    assert_eq!(rec.text(1, ToServer), "aa__cc");
    assert_eq!(rec.closes(), vec![1]);
    assert_eq!(tbl.stats().closed_fin, 1);
    // Without the ACK, the server's FIN alone does not close: the hole is flushed at finish().
    sfin.flags &= !ACK;
    let (rec, tbl) = run_finish(mysql_cfg(), &[syn, sa, a, c, cfin, sfin]);
    assert_eq!(rec.text(1, ToServer), "aa__cc");
    assert_eq!((tbl.stats().closed_fin, tbl.stats().closed_finish), (0, 1));
}

#[test]
fn idle_expiry_then_pickup_as_a_new_connection() {
    let cfg = FlowConfig {
        idle_timeout_ns: 1_000_000_000,
        ..mysql_cfg()
    };
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let (a, _lost, c) = (t.c(b"aa"), t.c(b"bb"), t.c(b"cc"));
    let mut tbl = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for p in [&syn, &sa, &a, &c] {
        tbl.process(&p.seg(), &mut rec);
    }
    tbl.expire(c.ts + 1_000_000_000, &mut rec);
    assert!(rec.closes().is_empty());
    tbl.expire(c.ts + 1_000_000_001, &mut rec);
    assert_eq!(rec.closes(), vec![1]);
    assert_eq!(rec.text(1, ToServer), "aa__cc");
    assert_eq!(tbl.stats().closed_idle, 1);
    assert!(tbl.is_empty());
    let mut later = t.c(b"later");
    later.ts = c.ts + 2_000_000_000;
    tbl.process(&later.seg(), &mut rec);
    assert_eq!(rec.opens(), vec![1, 2]);
    assert_eq!(rec.text(2, ToServer), "later");
    assert!(matches!(
        rec.events.iter().rev().nth(1),
        Some(Ev::Open {
            id: 2,
            saw_syn: false,
            ..
        })
    ));
}

#[test]
fn activity_postpones_expiry() {
    let cfg = FlowConfig {
        idle_timeout_ns: 10_000,
        ..mysql_cfg()
    };
    let mut t = Tcp::new(C, S, 1000, 5000);
    let mut tbl = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for _ in 0..50 {
        let p = t.c(b"x"); // 1 µs apart
        tbl.process(&p.seg(), &mut rec);
        tbl.expire(p.ts, &mut rec);
    }
    assert!(rec.closes().is_empty());
    tbl.expire(t.ts + 10_001, &mut rec);
    assert_eq!(rec.closes(), vec![1]);
}

#[test]
fn reuse_of_a_4_tuple() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let mut p = vec![
        t.syn(),
        t.syn_ack(),
        t.c(b"one"),
        t.c_fin(),
        t.s_fin(),
        t.c_ack(),
    ];
    let mut t2 = Tcp::new(C, S, 90_000, 70_000);
    t2.ts = t.ts;
    p.extend([t2.syn(), t2.syn_ack(), t2.c(b"two")]);
    // A SYN with a new ISN while the second is still open: it was over, we missed its end.
    let mut t3 = Tcp::new(C, S, 12_345, 54_321);
    t3.ts = t2.ts;
    p.extend([t3.syn(), t3.syn(), t3.syn_ack(), t3.c(b"three")]);
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert_eq!(rec.opens(), vec![1, 2, 3]);
    assert_eq!(rec.closes(), vec![1, 2]);
    assert_eq!(rec.text(1, ToServer), "one");
    assert_eq!(rec.text(2, ToServer), "two");
    assert_eq!(rec.text(3, ToServer), "three");
    let st = tbl.stats();
    assert_eq!((st.closed_fin, st.closed_reused, st.connections), (1, 1, 3));
}

#[test]
fn late_segments_after_close_do_not_reopen() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let mut p = vec![t.syn(), t.syn_ack(), t.c(b"q")];
    let r = t.s(b"r");
    p.extend([r.clone(), t.c_fin(), t.s_fin(), r]);
    let (rec, tbl) = run(mysql_cfg(), &p);
    assert_eq!(rec.opens(), vec![1]);
    assert_eq!(tbl.stats().late, 1);
}

#[test]
fn per_direction_cap_overflow_declares_the_hole() {
    let cap = 2 * (PIECE_OVERHEAD + 10);
    let cfg = FlowConfig {
        max_buffer_per_direction: cap,
        ..mysql_cfg()
    };
    let mut t = Tcp::new(C, S, 1000, 5000);
    let mut p = vec![t.syn(), t.syn_ack()];
    let _lost = t.c(b"0000000000");
    let mut want = "_".repeat(10);
    for i in 1..10u8 {
        let s = [b'0' + i; 10];
        want.push_str(std::str::from_utf8(&s).unwrap());
        let mut seg = t.c(&s);
        seg.flags = PSH; // no ACKs: only the cap can declare the hole
        p.push(seg);
    }
    let mut tbl = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for x in &p {
        tbl.process(&x.seg(), &mut rec);
        assert!(tbl.buffered_bytes() <= cap);
    }
    assert_eq!(rec.text(1, ToServer), want);
    assert_eq!(rec.gaps(1, ToServer), vec![10]);
    assert_eq!(tbl.stats().buffer_overflows, 1);
    assert_eq!(tbl.stats().buffered_bytes_peak as usize, cap);
    assert_eq!(tbl.buffered_bytes(), 0);
}

#[test]
fn global_cap_bounds_all_connections() {
    let total = 5 * (PIECE_OVERHEAD + 100);
    let cfg = FlowConfig {
        max_buffer_total: total,
        ..mysql_cfg()
    };
    let mut tbl = FlowTable::new(cfg);
    let mut rec = Rec::default();
    for c in 0..20u16 {
        let mut t = Tcp::new(&format!("10.0.1.{}:{}", c + 1, 40000 + c), S, 1, 2);
        tbl.process(&t.syn().seg(), &mut rec);
        let _lost = t.c(&[b'x'; 100]);
        for _ in 0..5 {
            let mut seg = t.c(&[b'y'; 100]);
            seg.flags = PSH;
            tbl.process(&seg.seg(), &mut rec);
            assert!(tbl.buffered_bytes() <= total);
        }
    }
    assert!(tbl.stats().buffer_overflows > 0);
    tbl.finish(&mut rec);
    // Every connection's stream is still exact: 100 lost, then 500 delivered.
    for id in 1..=20 {
        assert_eq!(
            rec.chunks(id, ToServer),
            vec![Chunk::G(100), Chunk::D(vec![b'y'; 500])]
        );
    }
}

#[test]
fn handler_stop_keeps_recognizing_until_fin() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let p = vec![
        t.syn(),
        t.syn_ack(),
        t.c(b"\x16\x03\x01 tls hello"),
        t.s(b"more"),
        t.c(b"more"),
        t.c_fin(),
        t.s_fin(),
    ];
    let mut tbl = FlowTable::new(mysql_cfg());
    let mut rec = Rec {
        stop_after: Some(1),
        ..Rec::default()
    };
    for x in &p {
        tbl.process(&x.seg(), &mut rec);
    }
    assert_eq!(rec.text(1, ToServer), "\x16\x03\x01 tls hello");
    assert_eq!(rec.text(1, ToClient), "");
    assert_eq!(rec.closes(), vec![1]);
    let st = tbl.stats();
    assert_eq!((st.stopped, st.closed_fin, st.not_tracked), (1, 1, 4));
    // All four after the stop, whatever their payload: the handler knows why it stopped.
    assert_eq!((st.not_tracked_stopped, st.not_tracked_empty), (4, 0));
}

#[test]
fn rejected_connection_gets_no_calls() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let syn = t.syn();
    let p = vec![
        syn.clone(),
        syn,
        t.syn_ack(),
        t.c(b"abc"),
        t.s(b"def"),
        t.c_fin(),
        t.s_fin(),
    ];
    let mut tbl = FlowTable::new(mysql_cfg());
    let mut rec = Rec {
        reject: true,
        ..Rec::default()
    };
    for x in &p {
        tbl.process(&x.seg(), &mut rec);
    }
    tbl.finish(&mut rec);
    assert_eq!(rec.events.len(), 1);
    let st = tbl.stats();
    assert_eq!((st.rejected, st.connections, st.not_tracked), (1, 0, 7));
    // Rejected, not stopped: the SYNs and FINs are empty, the two data segments are not.
    assert_eq!((st.not_tracked_stopped, st.not_tracked_empty), (0, 5));
}

#[test]
fn max_flows_evicts_the_least_recently_active() {
    let cfg = FlowConfig {
        max_flows: 2,
        ..mysql_cfg()
    };
    let mut a = Tcp::new("10.0.0.2:1001", S, 1, 1);
    let mut b = Tcp::new("10.0.0.2:1002", S, 1, 1);
    let mut c = Tcp::new("10.0.0.2:1003", S, 1, 1);
    b.ts = 10_000;
    c.ts = 20_000;
    let mut a2 = a.c(b"a");
    let a3 = {
        let mut x = a.c(b"A");
        x.ts = 15_000;
        x
    };
    a2.ts = 5_000;
    let p = vec![a2, b.c(b"b"), a3, c.c(b"c")];
    let (rec, tbl) = run(cfg, &p);
    assert_eq!(rec.opens(), vec![1, 2, 3]);
    assert_eq!(rec.closes(), vec![2]);
    assert_eq!(tbl.stats().evicted, 1);
    assert_eq!(tbl.len(), 2);
}

#[test]
fn floods_stay_bounded() {
    // Unrelated traffic creates no state.
    let mut tbl = FlowTable::new(FlowConfig {
        max_flows: 100,
        ..mysql_cfg()
    });
    let mut rec = Rec::default();
    for i in 0..10_000u32 {
        let mut t = Tcp::new(
            &format!("10.1.{}.{}:{}", i >> 8 & 255, i & 255, 40000 + i % 20000),
            "10.0.0.1:80",
            i,
            i,
        );
        tbl.process(&t.c(b"GET /").seg(), &mut rec);
    }
    assert!(tbl.is_empty());
    assert_eq!(tbl.stats().not_tracked, 10_000);
    assert_eq!(tbl.stats().not_tracked_empty, 0);
    // Matching mid-stream flows are evicted beyond max_flows.
    for i in 0..10_000u32 {
        let mut t = Tcp::new(
            &format!("10.1.{}.{}:{}", i >> 8 & 255, i & 255, 40000 + i % 20000),
            S,
            i,
            i,
        );
        t.ts = u64::from(i) * 1000;
        tbl.process(&t.c(b"SELECT").seg(), &mut rec);
        assert!(tbl.len() <= 100);
    }
    assert_eq!(tbl.stats().evicted, 9_900);
    tbl.finish(&mut rec);
    assert_eq!(rec.closes().len(), 10_000);
}

#[test]
fn never_closed_connections_beyond_the_cap_are_evicted_idlest_first() {
    // 1,000 connections that never close, each a request, its answer and a request never
    // answered, one after another; at most 100 tracked.
    let mut tbl = FlowTable::new(FlowConfig {
        max_flows: 100,
        ..mysql_cfg()
    });
    let mut rec = Rec::default();
    for i in 0..1_000u32 {
        let mut t = Tcp::new(&format!("10.0.{}.{}:40000", i >> 8, i & 255), S, i, i);
        t.ts = u64::from(i) * 10_000;
        for p in [t.c(b"SELECT 1"), t.s(b"one"), t.c(b"SELECT 2")] {
            tbl.process(&p.seg(), &mut rec);
            assert!(tbl.len() <= 100, "{} entries", tbl.len());
        }
    }
    let st = tbl.stats().clone();
    assert_eq!((st.connections, st.evicted), (1_000, 900));
    // The idlest first: connections 1..=900 in the order they were opened, each closed after
    // all its bytes were delivered.
    assert_eq!(rec.closes(), (1..=900).collect::<Vec<u64>>());
    tbl.finish(&mut rec);
    assert_eq!(rec.closes().len(), 1_000);
    for id in 1..=1_000 {
        assert_eq!(
            rec.text(id, ToServer),
            "SELECT 1SELECT 2",
            "connection {id}"
        );
        assert_eq!(rec.text(id, ToClient), "one", "connection {id}");
    }
    assert_eq!((st.not_tracked, st.gaps), (0, 0));
}

#[test]
fn far_jump_resynchronizes() {
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa, a) = (t.syn(), t.syn_ack(), t.c(b"aa"));
    t.c_off = t.c_off.wrapping_add(3 << 29); // 1.5 GiB later: beyond any window
    let mut b = t.c(b"bb");
    b.flags = PSH;
    let (rec, tbl) = run_finish(mysql_cfg(), &[syn, sa, a, b]);
    assert_eq!(
        rec.chunks(1, ToServer),
        vec![
            Chunk::D(b"aa".to_vec()),
            Chunk::G(3 << 29),
            Chunk::D(b"bb".to_vec())
        ]
    );
    assert_eq!(tbl.stats().gaps, 1);
    // 2.5 GiB later looks 1.5 GiB behind: also beyond any window, taken as a forward jump.
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa, a) = (t.syn(), t.syn_ack(), t.c(b"aa"));
    t.c_off = t.c_off.wrapping_add(5 << 29);
    let mut b = t.c(b"bb");
    b.flags = PSH;
    let (rec, _) = run_finish(mysql_cfg(), &[syn, sa, a, b]);
    assert_eq!(
        rec.chunks(1, ToServer),
        vec![
            Chunk::D(b"aa".to_vec()),
            Chunk::G(5 << 29),
            Chunk::D(b"bb".to_vec())
        ]
    );
}

#[test]
fn syn_flags_on_existing_flow() {
    // A retransmitted SYN does not reopen; a SYN+ACK retransmission neither.
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, sa) = (t.syn(), t.syn_ack());
    let p = vec![syn.clone(), syn, sa.clone(), sa, t.c(b"x")];
    let (rec, _) = run(mysql_cfg(), &p);
    assert_eq!(rec.opens(), vec![1]);
    assert_eq!(rec.text(1, ToServer), "x");
    let _ = SYN;
}

#[test]
fn reordered_beyond_the_buffer_is_too_late_not_a_duplicate() {
    // "ab" is overtaken by "cd" and "ef"; the buffer holds one piece, so the hole of "ab" is
    // declared a gap when "ef" comes. "ab" then arrives: too late, not a duplicate. A genuine
    // retransmission of "cd" afterwards is a duplicate.
    let mut t = Tcp::new(C, S, 1000, 5000);
    let (syn, syn_ack) = (t.syn(), t.syn_ack());
    let (ab, cd, ef) = (t.c(b"ab"), t.c(b"cd"), t.c(b"ef"));
    let cfg = FlowConfig {
        max_buffer_per_direction: PIECE_OVERHEAD + 2,
        ..mysql_cfg()
    };
    let (rec, tbl) = run_finish(cfg, &[syn, syn_ack, cd.clone(), ef, ab, cd]);
    assert_eq!(rec.text(1, ToServer), "__cdef");
    let st = tbl.stats();
    assert_eq!((st.gaps, st.gap_bytes), (1, 2));
    assert_eq!(st.out_of_order_too_late, 1);
    assert_eq!((st.duplicates, st.retransmitted_bytes), (1, 2));
}

#[test]
fn empty_segments_of_unknown_flows_are_told_apart() {
    // A mid-stream connection: its pure ACK comes before the first command (it cannot open a
    // connection), then the command; later the FIN of an idle connection long forgotten.
    let mut t = Tcp::new(C, S, 1000, 5000);
    let _ = (t.syn(), t.syn_ack());
    let ack = t.c_ack();
    let q = t.c(b"query");
    let mut idle = Tcp::new("10.0.0.3:40000", S, 7, 9);
    let fin = idle.s_fin();
    let (rec, tbl) = run(mysql_cfg(), &[ack, q, fin]);
    assert_eq!(rec.text(1, ToServer), "query");
    let st = tbl.stats();
    assert_eq!((st.not_tracked, st.not_tracked_empty), (2, 2));
}
