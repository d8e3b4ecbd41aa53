//! Tests of the BSON walker: streamed in any pieces, walked whole in place, damaged.

use super::build::Doc;
use super::*;

/// Records everything, descending into every container.
#[derive(Default)]
struct Log(Vec<String>, u16);

impl Visitor for Log {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        self.0.push(format!(
            "{parent}:{}#{index}:{t:02x}",
            String::from_utf8_lossy(key)
        ));
        if ty::is_container(t) {
            self.1 += 1;
            Act::Descend(self.1)
        } else {
            Act::Read
        }
    }
    fn scalar(&mut self, _: Ctx, _: &[u8], v: Scalar<'_>) {
        self.0.push(format!("={v:?}"));
    }
    fn leave(&mut self, ctx: Ctx) {
        self.0.push(format!("<{ctx}"));
    }
}

fn walk(doc: &[u8], piece: usize) -> Result<Vec<String>, WireError> {
    let mut w = Walker::default();
    let mut log = Log::default();
    w.start(0, doc.len() as u64);
    let mut pos = 0;
    for c in doc.chunks(piece) {
        let n = w.push(c, &mut log)?;
        pos += n;
        if w.done() {
            break;
        }
    }
    assert!(w.done(), "not done after {pos} bytes");
    assert_eq!(w.pos(), doc.len() as u64);
    Ok(log.0)
}

#[test]
fn walks_every_type_in_any_pieces() {
    let d = Doc::new()
        .str("s", "hello")
        .i32("i", -3)
        .i64("l", 1 << 40)
        .f64("d", 2.5)
        .bool("b", true)
        .null("n")
        .oid("o", [7; 12])
        .regex("r", "a+", "i")
        .bin("bin", &[1, 2, 3])
        .doc("sub", Doc::new().i32("x", 1))
        .arr_i32("arr", &[4, 5])
        .bytes();
    let whole = walk(&d, d.len()).unwrap();
    for piece in [1, 2, 3, 7] {
        assert_eq!(walk(&d, piece).unwrap(), whole);
    }
    let text = whole.join(" ");
    assert!(
        text.contains("0:s#0:02 =Str { bytes: [104, 101, 108, 108, 111], complete: true }"),
        "{text}"
    );
    assert!(text.contains("=Int32(-3)") && text.contains("=Int64(1099511627776)"));
    assert!(
        text.contains("=Double(2.5)") && text.contains("=Bool(true)") && text.contains("=Null")
    );
    assert!(text.contains("=Other(7)") && text.contains("=Other(11)"));
    assert!(text.contains("0:sub#9:03 1:x#0:10 =Int32(1) <1"), "{text}");
    assert!(
        text.contains("2:0#0:10 =Int32(4) 2:1#1:10 =Int32(5) <2 <0"),
        "{text}"
    );
}

#[test]
fn skipping_never_descends() {
    struct SkipAll(u32);
    impl Visitor for SkipAll {
        fn element(&mut self, _: Ctx, _: &[u8], _: u8, _: u32) -> Act {
            self.0 += 1;
            Act::Skip
        }
        fn scalar(&mut self, _: Ctx, _: &[u8], _: Scalar<'_>) {
            panic!("not read")
        }
        fn leave(&mut self, _: Ctx) {}
    }
    let big = Doc::new().arr_i32("a", &(0..1000).collect::<Vec<_>>());
    let d = Doc::new().doc("x", big).str("y", &"z".repeat(5000)).bytes();
    let mut w = Walker::default();
    let mut v = SkipAll(0);
    w.start(0, d.len() as u64);
    for c in d.chunks(100) {
        w.push(c, &mut v).unwrap();
    }
    assert!(w.done());
    assert_eq!(v.0, 2);
    assert!(w.buffered_bytes() < 4096);
}

#[test]
fn long_strings_and_keys_are_cut() {
    let long = "k".repeat(600);
    let d = Doc::new().str(&long, &"v".repeat(3000)).bytes();
    let log = walk(&d, 13).unwrap();
    assert!(log[0].starts_with(&format!("0:{}#0", "k".repeat(256))));
    assert!(log[1].contains("complete: false"));
}

#[test]
fn malformed_documents_are_errors() {
    let good = Doc::new().str("a", "b").i32("c", 1).bytes();
    // Length past the limit, below 5, string past its document, no terminator, a
    // terminator too early, unknown type, key without NUL.
    let mut bad = vec![];
    let mut b = good.clone();
    b[0] = 200;
    bad.push(b);
    bad.push(vec![4, 0, 0, 0]);
    let mut b = good.clone();
    b[7] = 100;
    bad.push(b);
    let mut b = good.clone();
    let n = b.len();
    b[n - 1] = 1;
    bad.push(b);
    let mut b = good.clone();
    b[4] = 0;
    bad.push(b);
    let mut b = good.clone();
    b[4] = 0x42;
    bad.push(b);
    bad.push(vec![10, 0, 0, 0, 0x10, b'a', b'b', b'c', b'd', 0]);
    for (i, d) in bad.iter().enumerate() {
        for piece in [1, 3, 64] {
            let mut w = Walker::default();
            w.start(0, d.len() as u64);
            let mut log = Log::default();
            let mut err = false;
            for c in d.chunks(piece) {
                if w.push(c, &mut log).is_err() {
                    err = true;
                    break;
                }
            }
            assert!(err || !w.done(), "case {i} piece {piece}: {:?}", log.0);
        }
    }
}

/// Descends, reads or skips by a hash of what it is told, recording every call.
#[derive(Default)]
struct Mixed(Vec<String>, u64);

impl Visitor for Mixed {
    fn element(&mut self, parent: Ctx, key: &[u8], t: u8, index: u32) -> Act {
        let h = key
            .iter()
            .fold(self.1 ^ u64::from(t) ^ u64::from(index), |h, &b| {
                h.wrapping_mul(31).wrapping_add(u64::from(b))
            });
        let act = match h % 4 {
            0 => Act::Skip,
            1 => Act::Read,
            _ => Act::Descend(parent.wrapping_add(1)),
        };
        self.0
            .push(format!("{parent}:{key:?}#{index}:{t:02x} {act:?}"));
        act
    }
    fn scalar(&mut self, parent: Ctx, key: &[u8], v: Scalar<'_>) {
        self.0.push(format!("{parent}:{key:?}={v:?}"));
    }
    fn leave(&mut self, ctx: Ctx) {
        self.0.push(format!("<{ctx}"));
    }
}

/// A random document of every type, nested up to `depth`.
fn random_doc(rng: &mut crate::testing::Rng, depth: u32) -> Doc {
    let mut d = Doc::new();
    for i in 0..rng.below(8) {
        let k = ["a", "filter", "$in", "", "k\u{e9}y", "0"][rng.below(6) as usize];
        let k = format!("{k}{i}");
        d = match rng.below(15) {
            0 | 14 => {
                // Strings around the cap, where a read one is cut.
                let len = [0, 1, 7, 1023, 1024, 1025, 1100][rng.below(7) as usize];
                d.str(&k, &"s".repeat(len))
            }
            1 => d.i32(&k, rng.next_u64() as i32),
            2 => d.i64(&k, rng.next_u64() as i64),
            3 => d.f64(&k, rng.below(1000) as f64 / 8.0),
            4 => d.bool(&k, rng.below(2) == 0),
            5 => d.null(&k),
            6 => d.oid(&k, [rng.next_u64() as u8; 12]),
            7 => d.regex(&k, "^a.*", "i"),
            8 => d.bin(&k, &[1, 2, 3][..rng.below(4) as usize]),
            9 => d.arr_i32(&k, &[1, 2, 3]),
            10 => d.arr_str(&k, &["x", "yy"]),
            11 if depth < 4 => d.doc(&k, random_doc(rng, depth + 1)),
            12 if depth < 4 => d.arr(&k, vec![random_doc(rng, depth + 1), Doc::new()]),
            _ => d.el(ty::JAVASCRIPT, &k, &[3, 0, 0, 0, b'f', b'(', 0]),
        };
    }
    d
}

/// Walks `doc` in pieces of `piece` bytes (0: in one push, which walks a whole document
/// in place): the visitor's calls and the verdict (with the bytes consumed, when done).
fn walk_mixed(doc: &[u8], limit: u64, piece: usize, salt: u64) -> (Vec<String>, String) {
    let mut w = Walker::default();
    let mut v = Mixed(Vec::new(), salt);
    w.start(3, limit);
    let mut used = 0;
    let chunks: Vec<&[u8]> = if piece == 0 {
        vec![doc]
    } else {
        doc.chunks(piece).collect()
    };
    for c in chunks {
        let mut c = c;
        while !c.is_empty() && !w.done() {
            match w.push(c, &mut v) {
                Ok(n) => {
                    used += n;
                    c = &c[n..];
                }
                // The bytes taken before an error depend on the pieces, not the verdict.
                Err(e) => return (v.0, format!("error {e:?}")),
            }
        }
    }
    (v.0, format!("done {} at {used}/{}", w.done(), w.pos()))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, .. proptest::prelude::ProptestConfig::default() })]

    /// The in-place walk of a whole document and the streaming walk of its pieces agree:
    /// the same calls, the same bytes consumed, the same verdict, on sound and damaged
    /// documents alike.
    #[test]
    fn whole_and_streamed_walks_agree(
        seed in proptest::prelude::any::<u64>(),
        flips in proptest::collection::vec((proptest::prelude::any::<u16>(), proptest::prelude::any::<u8>()), 0..4),
        cut in proptest::prelude::any::<u16>(),
        slack in proptest::sample::select(vec![0u64, 0, 1, 2]),
    ) {
        let mut rng = crate::testing::Rng::new(seed);
        let mut doc = random_doc(&mut rng, 0).bytes();
        for (at, b) in flips {
            let n = doc.len();
            doc[usize::from(at) % n] = b;
        }
        if cut % 5 == 0 {
            doc.truncate(usize::from(cut) % (doc.len() + 1));
        }
        // Trailing bytes that are not the document's, and a limit that may cut it.
        doc.extend_from_slice(&[0x10, b'z', 0]);
        let limit = (doc.len() as u64).saturating_sub(3 + slack * 7);
        let whole = walk_mixed(&doc, limit, 0, seed);
        for piece in [1, 2, 5, 64] {
            let streamed = walk_mixed(&doc, limit, piece, seed);
            proptest::prop_assert_eq!(&whole, &streamed, "piece {}", piece);
        }
    }
}

#[test]
fn deep_nesting_is_skipped_not_followed() {
    let mut d = Doc::new().i32("x", 1);
    for _ in 0..100 {
        d = Doc::new().doc("a", d);
    }
    let bytes = d.bytes();
    let log = walk(&bytes, 5).unwrap();
    let depth = log.iter().filter(|l| l.starts_with('<')).count();
    assert_eq!(depth, MAX_DEPTH, "containers entered");
}
