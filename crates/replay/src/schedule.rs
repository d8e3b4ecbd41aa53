//! The schedule: when each batch is sent, as an offset from the start of the replay, from
//! the captured times scaled by `--speed`, or spread at `--rate` requests per second, or at
//! once (`--max`); `--skip-idle` first shortens every idle stretch of the whole capture.

/// How the replay is timed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Timing {
    /// The captured offsets divided by this factor (2.0: twice as fast).
    Speed(f64),
    /// Requests per second over all sessions, in captured order.
    Rate(f64),
    /// As fast as each session's replies allow.
    Max,
}

/// Per session, per batch: (captured time of its first request, its request count).
pub type Shape = Vec<Vec<(u64, usize)>>;

/// The offset (ns from the replay's start) of every batch of every session.
pub fn offsets(shape: &Shape, timing: Timing, skip_idle_ns: Option<u64>) -> Vec<Vec<u64>> {
    let mut all: Vec<(u64, usize, usize)> = Vec::new();
    for (s, batches) in shape.iter().enumerate() {
        for (b, &(ts, _)) in batches.iter().enumerate() {
            all.push((ts, s, b));
        }
    }
    all.sort_unstable();
    let mut out: Vec<Vec<u64>> = shape.iter().map(|b| vec![0; b.len()]).collect();
    let start = all.first().map_or(0, |a| a.0);
    match timing {
        Timing::Max => {}
        Timing::Speed(speed) => {
            let mut cut = 0u64; // idle time removed so far
            let mut prev = start;
            for &(ts, s, b) in &all {
                let gap = ts.saturating_sub(prev);
                if let Some(d) = skip_idle_ns
                    && gap > d
                {
                    cut += gap - d;
                }
                prev = ts;
                let off = ts.saturating_sub(start).saturating_sub(cut);
                set(&mut out, s, b, scale(off, speed));
            }
        }
        Timing::Rate(rate) => {
            let mut sent = 0u64;
            for &(_, s, b) in &all {
                set(
                    &mut out,
                    s,
                    b,
                    scale(sent.saturating_mul(1_000_000_000), rate),
                );
                let n = shape.get(s).and_then(|x| x.get(b)).map_or(0, |x| x.1);
                sent += n as u64;
            }
        }
    }
    out
}

fn set(out: &mut [Vec<u64>], s: usize, b: usize, v: u64) {
    if let Some(x) = out.get_mut(s).and_then(|x| x.get_mut(b)) {
        *x = v;
    }
}

/// `ns / factor`, rounded, saturating (a factor that is not a positive number leaves `ns`).
pub fn scale(ns: u64, factor: f64) -> u64 {
    if !(factor.is_finite() && factor > 0.0) {
        return ns;
    }
    let v = (ns as f64 / factor).round();
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v as u64
    }
}

/// Deterministic session sampling: true when the session `conn` is among `pct` percent.
pub fn sampled(conn: u64, pct: f64) -> bool {
    if pct >= 100.0 {
        return true;
    }
    // splitmix64: a fixed mix, so the same sessions are chosen on every run.
    let mut z = conn.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    ((z % 1_000_000) as f64) < pct * 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn speed_scales_offsets() {
        let shape: Shape = vec![vec![(10 * S, 1), (12 * S, 1)], vec![(11 * S, 3)]];
        assert_eq!(
            offsets(&shape, Timing::Speed(1.0), None),
            [vec![0, 2 * S], vec![S]]
        );
        assert_eq!(
            offsets(&shape, Timing::Speed(2.5), None),
            [vec![0, 800_000_000], vec![400_000_000]]
        );
        assert_eq!(offsets(&shape, Timing::Max, None), [vec![0, 0], vec![0]]);
    }

    #[test]
    fn skip_idle_shortens_long_gaps_only() {
        let shape: Shape = vec![vec![(0, 1), (S / 2, 1), (60 * S, 1), (61 * S, 1)]];
        assert_eq!(
            offsets(&shape, Timing::Speed(1.0), Some(S)),
            [vec![0, S / 2, 3 * S / 2, 5 * S / 2]]
        );
    }

    #[test]
    fn rate_counts_requests_not_batches() {
        let shape: Shape = vec![vec![(0, 1), (5, 4)], vec![(3, 1)]];
        // Order: (0,1), (3,1), (5,4); at 2.5 requests/s: 0, 0.4 s, 0.8 s.
        assert_eq!(
            offsets(&shape, Timing::Rate(2.5), None),
            [vec![0, 800_000_000], vec![400_000_000]]
        );
    }

    #[test]
    fn sampling_is_deterministic_and_proportional() {
        let n = (0..10_000).filter(|&c| sampled(c, 25.0)).count();
        assert!((2300..2700).contains(&n), "{n}");
        assert!((0..100).all(|c| sampled(c, 100.0)));
        assert!(!(0..100).any(|c| sampled(c, 0.0)));
    }

    proptest! {
        #[test]
        fn offsets_keep_each_sessions_order(ts in proptest::collection::vec(0u64..1u64 << 40, 1..30),
                                            speed in 0.01f64..100.0, idle in 1u64..1u64 << 35) {
            let mut sorted = ts.clone();
            sorted.sort_unstable();
            let shape: Shape = vec![sorted.iter().map(|&t| (t, 1)).collect()];
            let o = &offsets(&shape, Timing::Speed(speed), Some(idle))[0];
            prop_assert!(o.windows(2).all(|w| w[0] <= w[1]));
            let plain = &offsets(&shape, Timing::Speed(speed), None)[0];
            prop_assert!(o.iter().zip(plain).all(|(a, b)| a <= b));
        }
    }
}
