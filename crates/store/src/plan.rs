//! Which tier rows cover a time range: whole days (already rolled up), then whole hours, then
//! minutes; and the step of a series (a "nice" length whose tiers fit it exactly).

use crate::schema::Marks;

pub const MINUTE: i64 = 60;
pub const HOUR: i64 = 3_600;
pub const DAY: i64 = 86_400;

/// Rows of `table` with `ts` in `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    pub table: &'static str,
    pub period: i64,
    pub from: i64,
    pub to: i64,
}

fn floor(v: i64, p: i64) -> i64 {
    v.div_euclid(p) * p
}

fn ceil(v: i64, p: i64) -> i64 {
    floor(v.saturating_add(p - 1), p)
}

/// Latest time a range may reach (about the year 36,800): keeps every sum of times in range.
pub const MAX_TS: i64 = (1 << 40) / DAY * DAY;

/// The range rounded out to whole minutes (empty when `to <= from`), clamped to
/// `[0, 2^40]` seconds.
pub fn round_out(from: i64, to: i64) -> (i64, i64) {
    let (from, to) = (from.clamp(0, MAX_TS), to.clamp(0, MAX_TS));
    let a = floor(from, MINUTE);
    (a, ceil(to, MINUTE).max(a))
}

fn push(out: &mut Vec<Seg>, table: &'static str, period: i64, from: i64, to: i64) {
    if from < to {
        out.push(Seg {
            table,
            period,
            from,
            to,
        });
    }
}

fn cover_hours(out: &mut Vec<Seg>, a: i64, b: i64, marks: &Marks, max_period: i64) {
    if let Some(done) = marks.hours_done.filter(|_| max_period >= HOUR) {
        let (ha, hb) = (ceil(a, HOUR), floor(b, HOUR).min(done));
        if ha < hb {
            push(out, "m1", MINUTE, a, ha);
            push(out, "h1", HOUR, ha, hb);
            push(out, "m1", MINUTE, hb, b);
            return;
        }
    }
    push(out, "m1", MINUTE, a, b);
}

/// The segments covering `[from, to)` (whole minutes) with tiers of at most `max_period`.
pub fn plan(from: i64, to: i64, marks: &Marks, max_period: i64) -> Vec<Seg> {
    let mut out = Vec::new();
    if let Some(done) = marks.days_done.filter(|_| max_period >= DAY) {
        let (da, db) = (ceil(from, DAY), floor(to, DAY).min(done));
        if da < db {
            cover_hours(&mut out, from, da, marks, max_period);
            push(&mut out, "d1", DAY, da, db);
            cover_hours(&mut out, db, to, marks, max_period);
            return out;
        }
    }
    cover_hours(&mut out, from, to, marks, max_period);
    out
}

const NICE: [i64; 12] = [
    60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200, 86_400,
];

/// The step for about `points` points over `len` seconds: the first of 1, 2, 5, 10, 15, 30
/// minutes, 1, 2, 3, 6, 12 hours, or whole days, at least `len / points`.
pub fn step_for(len: i64, points: usize) -> i64 {
    let points = i64::try_from(points.max(1)).unwrap_or(i64::MAX);
    let raw = len.max(1).div_euclid(points) + i64::from(len.max(1) % points != 0);
    NICE.into_iter()
        .find(|&s| s >= raw)
        .unwrap_or_else(|| ceil(raw, DAY))
}

/// The longest tier period that fits a step exactly.
pub fn max_period(step: i64) -> i64 {
    if step % DAY == 0 {
        DAY
    } else if step % HOUR == 0 {
        HOUR
    } else {
        MINUTE
    }
}

/// Points of `step` covering `[from, to)`: the first point's start and how many.
pub fn points(from: i64, to: i64, step: i64) -> (i64, usize) {
    let first = floor(from, step);
    let n = (to - first).max(0).div_euclid(step) + i64::from((to - first).max(0) % step != 0);
    (first, usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_days_hours_minutes() {
        let marks = Marks {
            hours_done: Some(10 * DAY + 5 * HOUR),
            days_done: Some(10 * DAY),
            last_minute: Some(10 * DAY + 5 * HOUR + 30 * 60),
            first_minute: Some(DAY),
        };
        let from = 7 * DAY + 23 * HOUR + 30 * 60;
        let to = 10 * DAY + 6 * HOUR;
        let p = plan(from, to, &marks, DAY);
        let t: Vec<(&str, i64, i64)> = p.iter().map(|s| (s.table, s.from, s.to)).collect();
        assert_eq!(
            t,
            [
                ("m1", from, 8 * DAY),
                ("d1", 8 * DAY, 10 * DAY),
                ("h1", 10 * DAY, 10 * DAY + 5 * HOUR),
                ("m1", 10 * DAY + 5 * HOUR, to),
            ]
        );
        // Contiguous and complete at any max period.
        for mp in [MINUTE, HOUR, DAY] {
            let p = plan(from, to, &marks, mp);
            assert_eq!(p.first().unwrap().from, from);
            assert_eq!(p.last().unwrap().to, to);
            assert!(p.windows(2).all(|w| w[0].to == w[1].from));
            assert!(p.iter().all(|s| s.period <= mp));
        }
        assert!(plan(5, 5, &marks, DAY).is_empty());
    }

    #[test]
    fn steps() {
        assert_eq!(step_for(86_400, 300), 300);
        assert_eq!(step_for(7 * 86_400, 300), 3_600);
        assert_eq!(step_for(30 * 86_400, 10), 3 * 86_400);
        assert_eq!(step_for(0, 0), 60);
        assert_eq!(max_period(10_800), HOUR);
        assert_eq!(points(90, 400, 60), (60, 6));
        assert_eq!(round_out(61, 119), (60, 120));
        assert_eq!(round_out(i64::MIN, i64::MAX), (0, MAX_TS));
        assert_eq!(round_out(500, 10), (480, 480));
    }
}
