//! The fine latency distribution of a group (`--histogram fine`), text and JSON: the rows of
//! [`aggregate::fine`], log-linear and a few percent wide between the group's min and max,
//! each with its count and (text) a bar, empty rows shown, so two modes read as two humps.

use std::io::{self, Write};

use aggregate::Latency;
use aggregate::fine::FINE_ROWS;
use serde::{Deserialize, Serialize};

use crate::fmt::{duration, thousands, us};

const BAR_WIDTH: u64 = 64;

/// One row of the fine distribution: latencies in `[ge_us, lt_us)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FineRowJson {
    pub ge_us: f64,
    pub lt_us: f64,
    pub count: u64,
}

/// The JSON rows of a histogram.
pub fn json(l: &Latency) -> Vec<FineRowJson> {
    l.fine_rows(FINE_ROWS)
        .into_iter()
        .map(|r| FineRowJson {
            ge_us: us(r.ge_ns as f64),
            lt_us: us(r.lt_ns as f64),
            count: r.count,
        })
        .collect()
}

/// `# Exec time distribution (fine ...)`: a row per merged bucket, a bar per row.
pub fn text(out: &mut impl Write, l: &Latency) -> io::Result<()> {
    let rows = l.fine_rows(FINE_ROWS);
    writeln!(
        out,
        "# Exec time distribution (fine: {} rows from min to max, [from, to) count)",
        rows.len()
    )?;
    let max = rows.iter().map(|r| r.count).max().unwrap_or(0);
    let cw = rows
        .iter()
        .map(|r| thousands(r.count).len())
        .max()
        .unwrap_or(1);
    for r in &rows {
        let bar = if r.count == 0 || max == 0 {
            0
        } else {
            (r.count * BAR_WIDTH).div_ceil(max)
        };
        let line = format!(
            "# {:>7} {:>7} {:>cw$} {}",
            duration(r.ge_ns as f64),
            duration(r.lt_ns as f64),
            thousands(r.count),
            "#".repeat(bar as usize)
        );
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_humps_in_text_and_json() {
        let mut l = Latency::default();
        for i in 0..200u64 {
            l.record(if i % 5 == 0 { 20_100_000 } else { 120_000 } + i);
        }
        let mut out = Vec::new();
        text(&mut out, &l).unwrap();
        let s = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = s.lines().skip(1).collect();
        // Bars: a run of rows with bars, rows without, another run with bars.
        let has_bar: Vec<bool> = lines.iter().map(|x| x.ends_with('#')).collect();
        let runs = has_bar.windows(2).filter(|w| !w[0] && w[1]).count() + usize::from(has_bar[0]);
        assert_eq!(runs, 2, "{s}");
        assert!(lines.len() <= FINE_ROWS);
        let j = json(&l);
        assert_eq!(j.len(), lines.len());
        assert_eq!(j.iter().map(|r| r.count).sum::<u64>(), 200);
        // 120 us to 20.1 ms over 48 rows: rows about 11% wide, so the slow hump's row starts
        // above 20.1 ms / 1.12.
        let slow: Vec<&FineRowJson> = j
            .iter()
            .filter(|r| r.count > 0 && r.ge_us > 1000.0)
            .collect();
        assert_eq!(slow.len(), 1);
        assert_eq!(slow[0].count, 40);
        assert!(slow[0].ge_us >= 20_100.0 / 1.12 && slow[0].lt_us > 20_100.0);
        assert!(j[0].ge_us <= 120.0 && j.last().unwrap().lt_us > 20_100.0);
    }
}
