use std::collections::BTreeMap;

use proptest::prelude::*;
use proto::mongodb::bson::build::Doc;
use proto::mongodb::wire::{msg_flag, op, put_message};

use super::rewrite::{Conv, Out, rewrite};
use super::*;
use crate::capture::ChunkView;

fn msg(rid: i32, rto: i32, flags: u32, d: &Doc) -> Vec<u8> {
    let mut body = flags.to_le_bytes().to_vec();
    body.push(0);
    body.extend(d.bytes());
    let mut out = Vec::new();
    put_message(&mut out, rid, rto, op::MSG, &body);
    out
}

fn body_doc(m: &[u8]) -> Vec<u8> {
    m[21..].to_vec()
}

const CONV: Conv = Conv {
    sessions: false,
    lsid_salt: 0x55,
};

#[test]
fn frames_messages_batches_and_midstream() {
    let a = msg(1, 0, 0, &Doc::new().i32("find", 1).str("$db", "d"));
    let b = msg(2, 0, 0, &Doc::new().i32("ping", 1).str("$db", "d"));
    let mut sk = BTreeMap::new();
    let chunks = vec![
        ChunkView::Client(1, &a[..10]),
        ChunkView::Client(2, &a[10..]),
        ChunkView::Reply(b"x"),
        ChunkView::Client(3, &b),
        ChunkView::Client(4, &a),
    ];
    let batches = frame_conn(true, chunks.into_iter(), &mut sk);
    let sizes: Vec<usize> = batches.iter().map(|b| b.requests.len()).collect();
    assert_eq!(sizes, [1, 2]);
    assert_eq!(batches[0].requests[0].bytes, a);
    assert_eq!(batches[0].ts_ns, 1);
    // Begun before the capture: the tail of a message is passed over.
    let mut mid = a[30..].to_vec();
    let chunks = vec![ChunkView::Client(1, &mid[..]), ChunkView::Client(2, &b)];
    let batches = frame_conn(false, chunks.into_iter(), &mut sk);
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].requests[0].bytes, b);
    assert!(sk.contains_key("midstream_prefix"));
    mid.clear();
}

#[test]
fn reply_scan_finds_cursors_in_pieces() {
    let r = msg(
        9,
        7,
        0,
        &Doc::new()
            .doc(
                "cursor",
                Doc::new()
                    .arr("firstBatch", vec![Doc::new().i32("_id", 1)])
                    .i64("id", 4242)
                    .str("ns", "d.c"),
            )
            .f64("ok", 1.0),
    );
    let none = msg(10, 8, 0, &Doc::new().f64("ok", 1.0));
    let mut s = ReplyScan::default();
    let mut all = r.clone();
    all.extend(&none);
    all.extend(&r);
    for piece in all.chunks(7) {
        s.feed(piece);
    }
    assert_eq!(s.cursors, [(7, 4242), (7, 4242)]);
    assert_eq!(reply_cursor(&none), None);
}

#[test]
fn getmore_and_killcursors_get_the_targets_ids() {
    let gm = msg(
        3,
        0,
        msg_flag::CHECKSUM_PRESENT,
        &Doc::new()
            .i64("getMore", 4242)
            .str("collection", "c")
            .doc("$clusterTime", Doc::new().i32("t", 1))
            .doc("lsid", Doc::new().bin("id", &[1; 16]))
            .i64("txnNumber", 3)
            .str("$db", "d"),
    );
    let mut gm = gm;
    gm.extend([0, 0, 0, 0]); // the checksum
    let len = gm.len() as u32;
    gm[..4].copy_from_slice(&len.to_le_bytes());
    let mut map = |c: i64| if c == 4242 { Ok(17) } else { Err("x") };
    let Out::Send {
        bytes,
        reply,
        getmore,
    } = rewrite(&gm, &CONV, &mut map)
    else {
        panic!("sent");
    };
    assert!(reply);
    assert_eq!(getmore, Some(4242));
    let want = Doc::new()
        .i64("getMore", 17)
        .str("collection", "c")
        .str("$db", "d")
        .bytes();
    assert_eq!(body_doc(&bytes), want);
    assert_eq!(&bytes[16..20], &[0, 0, 0, 0], "checksum flag cleared");
    // With sessions, lsid is kept with the replay's own id.
    let conv = Conv {
        sessions: true,
        lsid_salt: 1,
    };
    let Out::Send { bytes, .. } = rewrite(&gm, &conv, &mut map) else {
        panic!("sent");
    };
    let d = body_doc(&bytes);
    let lsid = doc::get(&d, b"lsid").expect("lsid kept");
    let sub = doc::sub(&d, &lsid).expect("doc");
    let id = doc::get(sub, b"id").expect("id");
    assert_eq!(sub[id.value + 5], 0, "1 ^ salt 1");
    assert!(doc::get(&d, b"txnNumber").is_some());
    let kc = msg(
        4,
        0,
        0,
        &Doc::new()
            .str("killCursors", "c")
            .arr_i64("cursors", &[4242, 5])
            .str("$db", "d"),
    );
    let Out::Send { bytes, .. } = rewrite(&kc, &CONV, &mut map) else {
        panic!("sent");
    };
    let want = Doc::new()
        .str("killCursors", "c")
        .arr_i64("cursors", &[17])
        .str("$db", "d")
        .bytes();
    assert_eq!(body_doc(&bytes), want);
    let unknown = msg(5, 0, 0, &Doc::new().i64("getMore", 5).str("$db", "d"));
    assert_eq!(rewrite(&unknown, &CONV, &mut map), Out::Skip("x"));
    let auth = msg(6, 0, 0, &Doc::new().i32("saslStart", 1).str("$db", "admin"));
    assert_eq!(
        rewrite(&auth, &CONV, &mut map),
        Out::Skip("mongodb_auth_skipped")
    );
    let w0 = msg(
        7,
        0,
        msg_flag::MORE_TO_COME,
        &Doc::new().str("insert", "c").str("$db", "d"),
    );
    assert!(matches!(
        rewrite(&w0, &CONV, &mut map),
        Out::Send { reply: false, .. }
    ));
}

proptest! {
    #[test]
    fn framer_and_scanner_never_panic(
        pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..80), 0..8),
        open in any::<bool>(),
    ) {
        let mut sk = BTreeMap::new();
        let chunks: Vec<ChunkView<'_>> = pieces.iter().enumerate().map(|(i, p)| match i % 4 {
            3 => ChunkView::Reply(p),
            2 if p.is_empty() => ChunkView::Gap,
            _ => ChunkView::Client(i as u64, p),
        }).collect();
        let batches = frame_conn(open, chunks.into_iter(), &mut sk);
        let mut map = |c: i64| Ok(c ^ 1);
        for b in &batches {
            for r in &b.requests {
                let _ = rewrite(&r.bytes, &CONV, &mut map);
            }
        }
        let mut s = ReplyScan::default();
        for p in &pieces {
            s.feed(p);
            let _ = reply_cursor(p);
            let _ = rewrite(p, &CONV, &mut map);
        }
    }

    #[test]
    fn well_formed_messages_frame_whole(n in 1usize..6, split in 1usize..64) {
        let msgs: Vec<Vec<u8>> = (0..n)
            .map(|i| msg(i as i32 + 1, 0, 0, &Doc::new().i32("find", i as i32).str("$db", "d")))
            .collect();
        let all: Vec<u8> = msgs.concat();
        let mut sk = BTreeMap::new();
        let chunks = all.chunks(split).map(|c| ChunkView::Client(0, c));
        let batches = frame_conn(true, chunks, &mut sk);
        let got: Vec<Vec<u8>> = batches.iter().flat_map(|b| b.requests.iter().map(|r| r.bytes.clone())).collect();
        prop_assert_eq!(got, msgs);
        prop_assert!(sk.is_empty());
    }
}

#[test]
fn only_opening_replies_make_known_cursors() {
    let find = msg(1, 0, 0, &Doc::new().str("find", "c").str("$db", "d"));
    let gm = msg(2, 0, 0, &Doc::new().i64("getMore", 9).str("$db", "d"));
    let mut sk = BTreeMap::new();
    let b = frame_conn(
        true,
        [ChunkView::Client(1, &find), ChunkView::Client(2, &gm)].into_iter(),
        &mut sk,
    );
    // The getMore's reply names cursor 9 (opened before the capture): not an opening.
    assert_eq!(opened(&b, vec![(1, 5), (2, 9)]), [(1, 5)]);
}

/// An OP_COMPRESSED message wrapping `m` with the noop compressor.
fn compressed(m: &[u8]) -> Vec<u8> {
    let h = proto::mongodb::wire::Header::parse(m).expect("header");
    let mut body = h.opcode.to_le_bytes().to_vec();
    body.extend(((m.len() - 16) as u32).to_le_bytes());
    body.push(proto::mongodb::wire::compressor::NOOP);
    body.extend_from_slice(&m[16..]);
    let mut out = Vec::new();
    put_message(&mut out, h.request_id, h.response_to, op::COMPRESSED, &body);
    out
}

#[test]
fn compressed_messages_are_sent_decompressed_and_scanned() {
    let gm = msg(3, 0, 0, &Doc::new().i64("getMore", 4242).str("$db", "d"));
    let mut map = |c: i64| if c == 4242 { Ok(17) } else { Err("x") };
    let Out::Send { bytes, getmore, .. } = rewrite(&compressed(&gm), &CONV, &mut map) else {
        panic!("sent");
    };
    assert_eq!(getmore, Some(4242));
    assert_eq!(&bytes[12..16], &op::MSG.to_le_bytes());
    assert_eq!(
        body_doc(&bytes),
        Doc::new().i64("getMore", 17).str("$db", "d").bytes()
    );
    let r = msg(
        9,
        3,
        0,
        &Doc::new().doc("cursor", Doc::new().arr("firstBatch", vec![]).i64("id", 5)),
    );
    assert_eq!(reply_cursor_opening(&compressed(&r)), Some((5, true)));
    // A declared size the data does not have.
    let mut bad = compressed(&gm);
    bad[20] ^= 1;
    assert_eq!(decompress(&bad), None);
    assert_eq!(
        rewrite(&bad, &CONV, &mut map),
        Out::Skip("mongodb_compressed")
    );
}

#[test]
fn legacy_get_more_and_kill_cursors_are_remapped() {
    // OP_GET_MORE: ZERO, "d.c", numberToReturn, cursorID.
    let mut body = 0i32.to_le_bytes().to_vec();
    body.extend(b"d.c\0");
    body.extend(10i32.to_le_bytes());
    body.extend(4242i64.to_le_bytes());
    let mut gm = Vec::new();
    put_message(&mut gm, 5, 0, op::GET_MORE, &body);
    let mut map = |c: i64| if c == 4242 { Ok(17) } else { Err("x") };
    let Out::Send {
        bytes,
        reply,
        getmore,
    } = rewrite(&gm, &CONV, &mut map)
    else {
        panic!("sent");
    };
    assert!(reply);
    assert_eq!(getmore, Some(4242));
    assert_eq!(&bytes[bytes.len() - 8..], &17i64.to_le_bytes());
    // OP_KILL_CURSORS: ZERO, count, ids; the unknown id is left out, no reply.
    let mut body = 0i32.to_le_bytes().to_vec();
    body.extend(2i32.to_le_bytes());
    body.extend(4242i64.to_le_bytes());
    body.extend(9i64.to_le_bytes());
    let mut kc = Vec::new();
    put_message(&mut kc, 6, 0, op::KILL_CURSORS, &body);
    let Out::Send { bytes, reply, .. } = rewrite(&kc, &CONV, &mut map) else {
        panic!("sent");
    };
    assert!(!reply);
    let mut want_body = 0i32.to_le_bytes().to_vec();
    want_body.extend(1i32.to_le_bytes());
    want_body.extend(17i64.to_le_bytes());
    let mut want = Vec::new();
    put_message(&mut want, 6, 0, op::KILL_CURSORS, &want_body);
    assert_eq!(bytes, want);
    // A legacy OP_REPLY names its cursor in its header fields.
    let mut rb = 0i32.to_le_bytes().to_vec();
    rb.extend(77i64.to_le_bytes());
    rb.extend(0i32.to_le_bytes());
    rb.extend(0i32.to_le_bytes());
    let mut r = Vec::new();
    put_message(&mut r, 7, 5, op::REPLY, &rb);
    assert_eq!(reply_cursor(&r), Some(77));
}
