//! Properties of the sink's pure parts: RowBinary rows round-trip and arbitrary bytes never
//! panic; spool files round-trip and corrupt ones are errors; the spool's bound and order;
//! batches split by day and size; the documented percentile SQL's arithmetic equals the
//! histogram layout of `aggregate::Latency`.

use aggregate::Latency;
use clickhouse::rowbinary::{Reader, Writer};
use clickhouse::sink::batches;
use clickhouse::spool::{Batch, Spool};
use clickhouse::{Dist, Row};
use proptest::prelude::*;

fn arb_dist() -> impl Strategy<Value = Dist> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec((any::<u32>(), any::<u64>()), 0..20),
    )
        .prop_map(|(sum_ns, min_ns, max_ns, b)| {
            let (buckets, counts) = b.into_iter().unzip();
            Dist {
                sum_ns,
                min_ns,
                max_ns,
                buckets,
                counts,
            }
        })
}

fn arb_row() -> impl Strategy<Value = Row> {
    let text = "\\PC{0,40}";
    (
        (any::<u32>(), text, text, text, text, any::<u64>(), text),
        (text, text, text, text),
        prop::array::uniform9(any::<u64>()),
        (arb_dist(), arb_dist()),
        prop::collection::vec((any::<u32>(), any::<u64>()), 0..5),
        any::<u64>(),
    )
        .prop_map(|(a, b, c, (service, latency), e, batch)| {
            let (error_codes, error_counts) = e.into_iter().unzip();
            Row {
                ts: a.0,
                host: a.1,
                protocol: a.2,
                command: a.3,
                query_id: a.4,
                fp_hash: a.5,
                fingerprint: a.6,
                server: b.0,
                client: b.1,
                db: b.2,
                user: b.3,
                count: c[0],
                ok: c[1],
                errors: c[2],
                no_response: c[3],
                incomplete: c[4],
                bytes_in: c[5],
                bytes_out: c[6],
                rows_sent: c[7],
                rows_affected: c[8],
                service,
                latency,
                error_codes,
                error_counts,
                batch,
            }
        })
}

proptest! {
    #[test]
    fn rows_round_trip(rows in prop::collection::vec(arb_row(), 0..6)) {
        let mut w = Writer::default();
        rows.iter().for_each(|r| r.encode(&mut w));
        let mut r = Reader::new(&w.buf);
        let mut back = Vec::new();
        while !r.is_empty() {
            back.push(Row::decode(&mut r).unwrap());
        }
        prop_assert_eq!(back, rows);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut r = Reader::new(&b);
        while !r.is_empty() {
            if Row::decode(&mut r).is_err() {
                break;
            }
        }
        let _ = Batch::from_file_bytes(&b);
    }

    #[test]
    fn spool_files_round_trip_and_damage_is_an_error(
        rows in prop::collection::vec(arb_row(), 1..4),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let b = batches(rows, 100, || 7).remove(0);
        let bytes = b.to_file_bytes();
        prop_assert_eq!(Batch::from_file_bytes(&bytes).unwrap(), b);
        let mut bad = bytes.clone();
        let i = at.index(bad.len());
        bad[i] ^= flip;
        // Any single damaged byte is caught (magic, lengths, or the body's checksum) unless it
        // is in a header field no check covers: id, rows, min/max ts.
        if !(8..32).contains(&i) {
            prop_assert!(Batch::from_file_bytes(&bad).is_err());
        }
        let n = cut.index(bytes.len());
        prop_assert!(Batch::from_file_bytes(&bytes[..n]).is_err());
    }

    #[test]
    fn batches_hold_one_day_each_and_every_row_once(
        ts in prop::collection::vec(0u32..400_000, 0..300),
        max in 1usize..50,
    ) {
        let rows: Vec<Row> = ts.iter().map(|&t| Row { ts: t / 60 * 60, ..Row::default() }).collect();
        let mut n = 0;
        let bs = batches(rows, max, || { n += 1; n });
        let mut seen = Vec::new();
        for b in &bs {
            prop_assert!(b.rows as usize <= max && b.rows > 0);
            prop_assert_eq!(b.min_ts / 86_400, b.max_ts / 86_400);
            let mut r = Reader::new(&b.body);
            let mut k = 0;
            while !r.is_empty() {
                let row = Row::decode(&mut r).unwrap();
                prop_assert_eq!(row.batch, b.id);
                prop_assert!(row.ts >= b.min_ts && row.ts <= b.max_ts);
                seen.push(row.ts);
                k += 1;
            }
            prop_assert_eq!(k, b.rows);
        }
        let mut want: Vec<u32> = ts.iter().map(|t| t / 60 * 60).collect();
        want.sort_unstable();
        prop_assert_eq!(seen, want);
        let ids: std::collections::HashSet<u64> = bs.iter().map(|b| b.id).collect();
        prop_assert_eq!(ids.len(), bs.len());
    }
}

/// The arithmetic of `schema::quantiles_sql` (and docs/clickhouse.md), in Rust.
fn sql_midpoint(i: u64) -> u64 {
    let s: u64 = if i < 256 { 0 } else { i / 128 - 1 };
    ((i - (s << 7)) << s) + ((1u64 << s) - 1) / 2
}

/// The nearest-rank bucket of merged `(bucket, count)` pairs, as the SQL finds it.
fn sql_quantile(pairs: &[(u32, u64)], q: f64) -> u64 {
    let n: u64 = pairs.iter().map(|p| p.1).sum();
    let rank = (q * n as f64).ceil().max(1.0);
    let mut cum = 0;
    for &(b, c) in pairs {
        cum += c;
        if cum as f64 >= rank {
            return sql_midpoint(u64::from(b));
        }
    }
    0
}

#[test]
fn the_sql_midpoint_is_the_histograms() {
    let mut i = 0u32;
    while let Some((lo, hi)) = Latency::bucket_range(i) {
        assert_eq!(sql_midpoint(u64::from(i)), lo + (hi - lo) / 2, "bucket {i}");
        i += 1;
    }
    assert!(i > 4_000, "{i}");
}

proptest! {
    #[test]
    fn sql_percentiles_of_split_rows_match_the_distribution(
        v in prop::collection::vec(1u64..10_000_000_000, 1..400),
        split in any::<prop::sample::Index>(),
    ) {
        // Two rows (two hosts, two minutes) of one group, merged as sumMap merges them.
        let k = split.index(v.len());
        let (mut a, mut b, mut all) = (Latency::default(), Latency::default(), Latency::default());
        v[..k].iter().for_each(|&x| a.record(x));
        v[k..].iter().for_each(|&x| b.record(x));
        v.iter().for_each(|&x| all.record(x));
        let mut merged = std::collections::BTreeMap::<u32, u64>::new();
        for d in [Dist::of(&a), Dist::of(&b)] {
            for (bk, c) in d.buckets.iter().zip(&d.counts) {
                *merged.entry(*bk).or_insert(0) += c;
            }
        }
        let pairs: Vec<(u32, u64)> = merged.into_iter().collect();
        let (lo, hi) = (all.min_ns().unwrap(), all.max_ns().unwrap());
        for q in [0.5, 0.95, 0.99] {
            let got = sql_quantile(&pairs, q).clamp(lo, hi);
            let want = all.quantile_ns(q).unwrap();
            let tol = want / 256 + 1;
            prop_assert!(got.abs_diff(want) <= tol, "q {} got {} want {}", q, got, want);
        }
    }
}

fn batch(id: u64, bytes: usize) -> Batch {
    Batch {
        id,
        rows: 1,
        min_ts: 60,
        max_ts: 60,
        body: vec![7; bytes],
    }
}

#[test]
fn the_spool_is_bounded_ordered_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (mut s, w) = Spool::open(dir.path(), 3_000).unwrap();
    assert!(w.is_empty() && s.is_empty());
    let mut dropped = 0;
    for id in 1..=5 {
        dropped += s.push(batch(id, 900)).unwrap().batches;
    }
    // 948 bytes each with the header: three fit in 3,000.
    assert_eq!((s.len(), dropped), (3, 2));
    assert!(s.bytes() <= 3_000);
    let f = s.front().unwrap().unwrap();
    assert_eq!((f.batch.id, f.maybe_sent), (3, false));
    s.done(3);
    drop(s);
    // A torn file and a stranger: the first is reported and removed, the second ignored.
    std::fs::write(
        dir.path().join("00000000000000000000-0000000000000009.chb"),
        b"DBTAPCH1xx",
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    let (mut s, w) = Spool::open(dir.path(), 3_000).unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("removed"));
    assert_eq!(s.len(), 2);
    let f = s.front().unwrap().unwrap();
    assert_eq!(
        (f.batch.id, f.maybe_sent),
        (4, true),
        "found on disk: maybe sent"
    );
    s.done(4);
    // A file damaged after the start is an error at its turn, not a panic.
    let only = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "chb"))
        .unwrap();
    std::fs::write(&only, b"garbage").unwrap();
    assert!(s.front().unwrap().is_err());
    assert!(s.is_empty());
}

#[test]
fn a_memory_spool_keeps_the_newest_batch_even_past_its_bound() {
    let mut s = Spool::memory(100);
    assert_eq!(s.push(batch(1, 500)).unwrap().batches, 0);
    assert_eq!(s.push(batch(2, 500)).unwrap().batches, 1);
    assert_eq!(s.front().unwrap().unwrap().batch.id, 2);
}

proptest! {
    #[test]
    fn states_read_back_rebuild_within_the_histograms_error(
        v in prop::collection::vec(1u64..10_000_000_000, 0..300),
    ) {
        let mut l = Latency::default();
        v.iter().for_each(|&x| l.record(x));
        let back = Latency::from_state(&Dist::of(&l).state()).unwrap();
        prop_assert_eq!(back.count(), l.count());
        if l.count() > 64 {
            prop_assert_eq!(back.sum_ns(), l.sum_ns());
            prop_assert_eq!((back.min_ns(), back.max_ns()), (l.min_ns(), l.max_ns()));
        }
        for q in [0.0, 0.5, 0.95, 0.99, 1.0] {
            if let (Some(a), Some(b)) = (l.quantile_ns(q), back.quantile_ns(q)) {
                prop_assert!(a.abs_diff(b) <= a / 256 + 1, "q {} {} {}", q, a, b);
            }
        }
    }

    #[test]
    fn states_of_arbitrary_arrays_never_panic(
        d in arb_dist(),
        b in prop::collection::vec((0u32..5_000, 0u64..1_000_000), 0..100),
        c in prop::collection::vec(any::<u64>(), 0..3),
    ) {
        let _ = d.state();
        let (buckets, counts): (Vec<u32>, Vec<u64>) = b.into_iter().unzip();
        // Arrays of unequal length, repeated buckets, buckets past the histogram.
        let d = Dist { buckets, counts: counts.into_iter().chain(c).collect(), ..d };
        let s = d.state();
        prop_assert_eq!(s.decades.iter().sum::<u64>(), s.count);
        let _ = Latency::from_state(&s);
    }
}
