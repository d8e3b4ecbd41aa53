//! Details a DBA acts on, per group: the share of executions the server flagged as using no
//! (good) index (MySQL/MariaDB), and the slowest example with its bound values substituted
//! so that `EXPLAIN <example>` runs.

use std::io::{self, Write};

use aggregate::{Example, Stats};
use proto::params::Placeholders;

use crate::fmt::sanitize;

/// `# Index use: no index 40% (12 of 30), no good index 0% (0)`, when any execution of
/// the group was flagged.
pub fn index_line(s: &Stats) -> Option<String> {
    if s.no_index_used == 0 && s.no_good_index_used == 0 {
        return None;
    }
    let pct = |n: u64| n as f64 * 100.0 / s.count.max(1) as f64;
    Some(format!(
        "# Index use: no index used {:.0}% ({} of {}), no good index used {:.0}% ({})",
        pct(s.no_index_used),
        s.no_index_used,
        s.count,
        pct(s.no_good_index_used),
        s.no_good_index_used
    ))
}

/// The example's statement with its bound values in place of its placeholders: `None` when
/// the example has no values, its text was cut, or the placeholders do not match the values.
pub fn with_values(ex: &Example) -> Option<String> {
    let params = ex.params.as_ref()?;
    let text = ex.text.as_deref().filter(|_| !ex.text_truncated)?;
    let literals = params.literals();
    match params.placeholders() {
        Placeholders::Question => fingerprint::values::substitute_mysql(text, &literals),
        Placeholders::Dollar => fingerprint::values::substitute_postgres(text, &literals),
    }
}

/// The index-use line of a group's details.
pub fn write_index_line(out: &mut impl Write, s: &Stats) -> io::Result<()> {
    match index_line(s) {
        Some(l) => writeln!(out, "{l}"),
        None => Ok(()),
    }
}

/// `# With bound values:` and the example's statement with them, when there are values.
pub fn write_with_values(out: &mut impl Write, ex: &Example) -> io::Result<()> {
    let Some(sql) = with_values(ex) else {
        return Ok(());
    };
    writeln!(out, "# With bound values (EXPLAIN-ready):")?;
    writeln!(out, "{}", sanitize(&sql, true).trim_end_matches('\n'))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use proto::params::BoundParams;
    use proto::postgres::params::RawParams;

    use super::*;

    fn example(text: &str, truncated: bool, params: bool) -> Example {
        Example {
            text: Some(Arc::from(text)),
            text_truncated: truncated,
            start_ns: 0,
            latency_ns: Some(1),
            service_ns: Some(1),
            client: "10.0.0.1:1".parse().unwrap(),
            server: "10.0.0.2:5432".parse().unwrap(),
            peer: None,
            database: None,
            user: None,
            statement_id: None,
            params: params.then(|| {
                Arc::new(BoundParams::Postgres(RawParams {
                    body: [0, 0, 0, 1, 0, 0, 0, 3, b'a', b'\'', b'b'].into(),
                    oids: Some(Arc::from(&[25u32][..])),
                }))
            }),
        }
    }

    #[test]
    fn values_go_into_the_example() {
        let q = "SELECT '$1', $1 -- $1";
        assert_eq!(
            with_values(&example(q, false, true)).as_deref(),
            Some("SELECT '$1', 'a''b'::text -- $1")
        );
        assert_eq!(with_values(&example(q, true, true)), None);
        assert_eq!(with_values(&example(q, false, false)), None);
        assert_eq!(with_values(&example("SELECT $2", false, true)), None);
    }

    #[test]
    fn index_line_only_when_flagged() {
        let mut s = Stats {
            count: 4,
            ..Stats::default()
        };
        assert_eq!(index_line(&s), None);
        s.no_index_used = 1;
        assert_eq!(
            index_line(&s).as_deref(),
            Some("# Index use: no index used 25% (1 of 4), no good index used 0% (0)")
        );
    }
}
