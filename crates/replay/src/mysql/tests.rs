//! Tests of the MySQL replay framing, rewriting and login pieces.

use super::*;

fn cmdpkt(payload: &[u8]) -> Vec<u8> {
    packet(0, payload)
}

fn frame(saw_open: bool, chunks: Vec<ChunkView<'_>>) -> Vec<Request> {
    let (mut b, mut s) = (BTreeMap::new(), BTreeMap::new());
    frame_conn(&saw_open, chunks.into_iter(), &mut b, &mut s)
        .into_iter()
        .flat_map(|b| b.requests)
        .collect()
}

#[test]
fn login_is_skipped_and_prepare_ids_taken() {
    let login = packet(1, b"\x00\x00\x00\x00login");
    let prep = cmdpkt(b"\x16SELECT ?");
    let ok = packet(1, b"\x00\x07\x00\x00\x00\x01\x00\x01\x00");
    let exec = cmdpkt(b"\x17\x07\x00\x00\x00\x00\x01\x00\x00\x00");
    let r = frame(
        true,
        vec![
            ChunkView::Client(1, &login),
            ChunkView::Reply(b"\x07\x00\x00\x02\x00"),
            ChunkView::Client(2, &prep),
            ChunkView::Reply(&ok),
            ChunkView::Client(3, &exec),
        ],
    );
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].prepared_id, Some(7));
    let mut st = Statements::default();
    assert_eq!(
        st.rewrite(&r[1]),
        Send::Skip("statement_prepared_before_capture")
    );
    st.prepared(r[0].prepared_id, 42);
    let Send::Bytes { bytes, reply } = st.rewrite(&r[1]) else {
        panic!("sent");
    };
    assert!(reply);
    assert_eq!(&bytes[5..9], &42u32.to_le_bytes());
}

#[test]
fn midstream_starts_at_a_whole_command_and_split_packets_are_skipped() {
    let q = cmdpkt(b"\x03SELECT 1");
    let mut tail = vec![0xAA, 0xBB];
    tail.extend_from_slice(b"xyz");
    let r = frame(
        false,
        vec![ChunkView::Client(1, &tail), ChunkView::Client(2, &q)],
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].bytes, q);
    let mut big = vec![0xFF, 0xFF, 0xFF, 0];
    big.extend(std::iter::repeat_n(b'a', MAX_PAYLOAD as usize));
    let rest = packet(1, b"end");
    let (mut b, mut s) = (BTreeMap::new(), BTreeMap::new());
    let got = frame_conn(
        &true,
        vec![
            ChunkView::Client(1, &big),
            ChunkView::Client(2, &rest),
            ChunkView::Client(3, &q),
        ]
        .into_iter(),
        &mut b,
        &mut s,
    );
    assert_eq!(got.len(), 1);
    assert_eq!(s.get("split_packet"), Some(&1));
}

#[test]
fn scramble_and_greeting() {
    // Known answer: scramble of "pw" with a 20-byte salt of 'a'.
    let s = native_scramble(b"pw", &[b'a'; 20]);
    assert_eq!(s.len(), 20);
    assert!(native_scramble(b"", b"x").is_empty());
    let mut g = vec![10];
    g.extend_from_slice(b"11.0.0-MariaDB\0");
    g.extend_from_slice(&[1, 0, 0, 0]);
    g.extend_from_slice(b"12345678\0");
    g.extend_from_slice(&[0xFF, 0xF7, 45, 2, 0, 0xFF, 0x81, 21]);
    g.extend_from_slice(&[0; 10]);
    g.extend_from_slice(b"abcdefghijkl\0mysql_native_password\0");
    let p = parse_greeting(&g).expect("greeting");
    assert_eq!(p.salt, b"12345678abcdefghijkl");
    assert_eq!(p.plugin, NATIVE);
    assert_eq!(p.charset, 45);
    assert_eq!(
        auth_reply(b"\xFEcaching_sha2_password\0salt\0"),
        AuthReply::Switch("caching_sha2_password".into(), b"salt".to_vec())
    );
}

#[test]
fn compressed_connections_are_not_framed() {
    let login = packet(1, b"\x2f\x00\x00\x00login");
    let q = cmdpkt(b"\x03SELECT 1");
    let (mut b, mut s) = (BTreeMap::new(), BTreeMap::new());
    let got = frame_conn(
        &true,
        vec![ChunkView::Client(1, &login), ChunkView::Client(2, &q)].into_iter(),
        &mut b,
        &mut s,
    );
    assert!(got.is_empty());
    assert_eq!(s.get("compressed_protocol"), Some(&1));
}

#[test]
fn ed25519_signature_verifies() {
    use sha2::{Digest, Sha512};
    let nonce = [7u8; 32];
    let sig = ed25519_signature(b"secret", &nonce);
    assert_eq!(sig.len(), 64);
    // The public key MariaDB stores for the password: the base point times the clamped
    // first half of SHA-512(password).
    let az: [u8; 64] = Sha512::digest(b"secret").into();
    let esk = ed25519_dalek::hazmat::ExpandedSecretKey::from_bytes(&az);
    let vk = ed25519_dalek::VerifyingKey::from(&esk);
    let s = ed25519_dalek::Signature::from_slice(&sig).unwrap();
    assert!(vk.verify_strict(&nonce, &s).is_ok());
    assert!(vk.verify_strict(&[8u8; 32], &s).is_err());
    assert_ne!(ed25519_signature(b"other", &nonce), sig);
}

/// `caching_sha2_password`'s scramble against an independent implementation: vectors computed
/// with PyMySQL 1.0.2 (`pymysql._auth.scramble_caching_sha2`). Untested against a MySQL 8
/// server (none installs here; MariaDB has no such plugin).
#[test]
fn caching_sha2_scramble_matches_pymysql() {
    let nonce: Vec<u8> = (1..=20).collect();
    let hex = |v: Vec<u8>| v.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(
        hex(caching_sha2_scramble(b"secret", &nonce)),
        "746ebe205d56a0707acb3e796e834e0dd7b1d61743b26bd5202c7a623230c7c9"
    );
    assert_eq!(
        hex(caching_sha2_scramble(
            b"my-secret-pw",
            b"abcdefghijklmnopqrst"
        )),
        "0fb6a4e36d251a85b81e511e96a77e564e8076644031bb6e019b611b7ee3ef41"
    );
    assert!(caching_sha2_scramble(b"", &nonce).is_empty());
}

/// A COM_CHANGE_USER as libmariadb sends it is read back, and dbtap's own carries the user,
/// the native scramble for the target's salt, the database, the character set and the plugin.
#[test]
fn change_user_is_read_and_rebuilt() {
    let mut cap = vec![0x11];
    cap.extend_from_slice(b"bob\0");
    cap.push(20);
    cap.extend_from_slice(&[7; 20]);
    cap.extend_from_slice(b"shop\0");
    cap.extend_from_slice(&[0x2d, 0]);
    cap.extend_from_slice(b"mysql_native_password\0");
    let cu = parse_change_user(&cap).unwrap();
    let want = ChangeUser {
        user: "bob".into(),
        db: Some(b"shop".to_vec()),
        charset: Some([0x2d, 0]),
    };
    assert_eq!(cu, want);
    let salt = b"abcdefghijklmnopqrst";
    let p = change_user_payload(&cu, "pw", salt, 8);
    let mut expect = b"\x11bob\0\x14".to_vec();
    expect.extend_from_slice(&native_scramble(b"pw", salt));
    expect.extend_from_slice(b"shop\0\x2d\0mysql_native_password\0");
    assert_eq!(p, expect);
    // Without a database or a character set (an old client): the connection's charset.
    let old = [b"\x11al\0\x00\0".as_slice()].concat();
    let cu = parse_change_user(&old).unwrap();
    assert_eq!((cu.db.as_deref(), cu.charset), (None, None));
    assert!(change_user_payload(&cu, "", salt, 8).ends_with(b"\0\x08\0mysql_native_password\0"));
    assert_eq!(parse_change_user(b"\x11bob\0\x14short"), None);
    assert_eq!(parse_change_user(b"\x03select 1"), None);
}

proptest::proptest! {
    #[test]
    fn change_user_parse_never_panics(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
        let _ = parse_change_user(&[&[0x11], b.as_slice()].concat());
    }
}
