//! The blob codec: encode then decode is the identity for every distribution the aggregator can
//! hold (raw samples and histograms) and for error-code pairs; any bytes decode to a value or an
//! error, never a panic, and a decoded value either rebuilds or is refused by `from_state`.

use aggregate::{Latency, LatencyState};
use proptest::prelude::*;
use store::{decode_errors, decode_latency, encode_errors, encode_latency};

fn latency_of(values: &[u64]) -> Latency {
    let mut l = Latency::default();
    values.iter().for_each(|&v| l.record(v));
    l
}

fn values() -> impl Strategy<Value = Vec<u64>> {
    prop_oneof![
        prop::collection::vec(any::<u64>(), 0..80),
        prop::collection::vec(0u64..10_000_000, 0..400),
        prop::collection::vec(1_000u64..2_000, 60..70),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn latency_round_trips(v in values()) {
        let l = latency_of(&v);
        let s = l.state();
        let b = encode_latency(&s);
        let back: LatencyState = decode_latency(&b).unwrap();
        prop_assert_eq!(&back, &s);
        let rebuilt = Latency::from_state(&back).unwrap();
        prop_assert_eq!(&rebuilt, &l);
        prop_assert_eq!(rebuilt.quantiles_ns([0.5, 0.99]), l.quantiles_ns([0.5, 0.99]));
    }

    #[test]
    fn errors_round_trip(m in prop::collection::btree_map(any::<u32>(), any::<u64>(), 0..40)) {
        let pairs: Vec<(u32, u64)> = m.into_iter().collect();
        prop_assert_eq!(decode_errors(&encode_errors(&pairs)).unwrap(), pairs);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(s) = decode_latency(&b) {
            let _ = Latency::from_state(&s);
        }
        let _ = decode_errors(&b);
        // Valid version byte and kind: exercises the deeper paths.
        let mut v = vec![1u8, b.first().copied().unwrap_or(0) & 1];
        v.extend_from_slice(&b);
        if let Ok(s) = decode_latency(&v) {
            let _ = Latency::from_state(&s);
        }
        let mut e = vec![1u8];
        e.extend_from_slice(&b);
        let _ = decode_errors(&e);
    }

    #[test]
    fn mutated_blobs_never_panic(v in values(), at in any::<usize>(), byte in any::<u8>()) {
        let mut b = encode_latency(&latency_of(&v).state());
        let i = at % b.len();
        b[i] = byte;
        if let Ok(s) = decode_latency(&b) {
            let _ = Latency::from_state(&s);
        }
        b.truncate(i);
        prop_assert!(decode_latency(&b).is_err());
    }
}

#[test]
fn rejects_bad_versions_trailing_bytes_and_huge_counts() {
    let mut b = encode_latency(&latency_of(&[5, 6, 7]).state());
    b.push(0);
    assert!(decode_latency(&b).is_err());
    assert!(decode_latency(&[2, 1, 0]).is_err());
    assert!(decode_latency(&[]).is_err());
    // 10^6 exact samples claimed: refused before allocating.
    assert!(decode_latency(&[1, 1, 0xc0, 0x84, 0x3d]).is_err());
    assert!(decode_errors(&[1, 0xff, 0xff, 0xff, 0x0f]).is_err());
    // Overlong varint.
    assert!(
        decode_errors(&[
            1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
        ])
        .is_err()
    );
}

#[test]
fn blobs_are_compact() {
    let small = encode_latency(&latency_of(&[120_000, 130_000, 150_000]).state());
    assert!(small.len() <= 12, "{}", small.len());
    let v: Vec<u64> = (0..1_000u64)
        .map(|i| 100_000 + (i * 7_919) % 200_000)
        .collect();
    let big = encode_latency(&latency_of(&v).state());
    // Buckets over 100-300 µs: a few hundred, about 2-3 bytes each.
    assert!(big.len() < 1_500, "{}", big.len());
}
