//! Reading: one SQL over the segments of a range (filters joined in), the series table, the
//! store's span and statistics, and the dimension shares (`dims`).

use std::collections::{BTreeMap, HashMap};

use rusqlite::{Connection, ToSql};

use crate::answer::{DimsAnswer, Share};
use crate::plan::{DAY, Seg, plan, round_out};
use crate::row::{COLUMNS, Row};
use crate::schema::{Marks, get_i64};
use crate::{Error, Filter, GroupRef, RangeQuery, SeriesKey, Store, StoreStats};

/// Values past this many per dimension are summed as "other".
pub const DIM_SHOW: usize = 20;
/// The dimensions of `dims`, by their API names.
pub const DIMS: [&str; 5] = ["server", "database", "user", "client", "protocol"];

/// The shown form of a stored dimension value ("" is unknown: "-").
pub fn shown(v: &str) -> &str {
    if v.is_empty() { "-" } else { v }
}

/// A filter value as stored ("-" asks for the unknown value, stored as "").
fn stored(v: &str) -> String {
    if v == "-" {
        String::new()
    } else {
        v.to_string()
    }
}

pub fn us(ns: u128) -> f64 {
    ns as f64 / 1_000.0
}

/// The SQL of `select` (columns over `r`, the tier row, and `s`, its series) for every segment,
/// joined by UNION ALL, with the filter's conditions and their named parameters.
pub fn union_sql(
    segs: &[Seg],
    select: &str,
    f: &Filter,
    group: Option<&GroupRef>,
) -> (String, Vec<(&'static str, String)>) {
    let mut conds = String::new();
    let mut params: Vec<(&'static str, String)> = Vec::new();
    let fields = [
        (":server", "s.server", &f.server),
        (":db", "s.db", &f.database),
        (":user", "s.user", &f.user),
        (":client", "s.client", &f.client),
        (":protocol", "s.protocol", &f.protocol),
    ];
    for (name, col, v) in fields {
        if let Some(v) = v {
            conds.push_str(&format!(" AND {col} = {name}"));
            params.push((name, stored(v)));
        }
    }
    let search = f.search.as_deref().filter(|s| !s.is_empty());
    if let Some(q) = search {
        conds.push_str(" AND instr(lower(fp.text), lower(:search)) > 0");
        params.push((":search", q.to_string()));
    }
    if let Some(g) = group {
        conds.push_str(" AND s.protocol = :gp AND s.command = :gc AND s.qid = :gi");
        params.push((":gp", g.protocol.clone()));
        params.push((":gc", g.command.clone()));
        params.push((":gi", g.id.clone()));
    }
    let join_fp = if search.is_some() {
        " JOIN fingerprints fp ON fp.protocol = s.protocol AND fp.command = s.command \
         AND fp.id = s.qid"
    } else {
        ""
    };
    // Without a condition on it the series table is not needed (series ids map in Rust).
    let join = if conds.is_empty() {
        ""
    } else {
        " JOIN series s ON s.id = r.series"
    };
    let parts: Vec<String> = segs
        .iter()
        .map(|g| {
            format!(
                "SELECT {select} FROM {t} r{join}{join_fp} \
                 WHERE r.ts >= {a} AND r.ts < {b}{conds}",
                t = g.table,
                a = g.from,
                b = g.to
            )
        })
        .collect();
    (parts.join(" UNION ALL "), params)
}

/// Runs `sql` with named `params`, calling `f` for each result row.
pub fn each(
    conn: &Connection,
    sql: &str,
    params: &[(&'static str, String)],
    mut f: impl FnMut(&rusqlite::Row) -> Result<(), Error>,
) -> Result<(), Error> {
    if sql.is_empty() {
        return Ok(());
    }
    let mut st = conn.prepare(sql)?;
    let named: Vec<(&str, &dyn ToSql)> =
        params.iter().map(|(k, v)| (*k, v as &dyn ToSql)).collect();
    let mut q = st.query(named.as_slice())?;
    while let Some(r) = q.next()? {
        f(r)?;
    }
    Ok(())
}

/// Calls `f(series, ts, row)` for every full row of the segments passing the filter.
pub fn scan_rows(
    conn: &Connection,
    segs: &[Seg],
    f: &Filter,
    group: Option<&GroupRef>,
    mut each_row: impl FnMut(i64, i64, Row) -> Result<(), Error>,
) -> Result<(), Error> {
    let cols: String = COLUMNS
        .split(", ")
        .map(|c| format!("r.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let (sql, params) = union_sql(segs, &format!("r.series, r.ts, {cols}"), f, group);
    each(conn, &sql, &params, |r| {
        each_row(r.get(0)?, r.get(1)?, Row::read(r, 2)?)
    })
}

/// Every series by id.
pub fn series_info(conn: &Connection) -> Result<HashMap<i64, SeriesKey>, Error> {
    let mut st = conn.prepare(
        "SELECT id, protocol, command, qid, fp_hash, server, client, db, user FROM series",
    )?;
    let rows = st.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            SeriesKey {
                protocol: r.get(1)?,
                command: r.get(2)?,
                qid: r.get(3)?,
                fp_hash: r.get(4)?,
                server: r.get(5)?,
                client: r.get(6)?,
                db: r.get(7)?,
                user: r.get(8)?,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl SeriesKey {
    pub fn group(&self) -> GroupRef {
        GroupRef {
            protocol: self.protocol.clone(),
            command: self.command.clone(),
            id: self.qid.clone(),
        }
    }

    /// The value of a dimension of [`DIMS`].
    pub fn dim(&self, d: &str) -> &str {
        match d {
            "server" => &self.server,
            "database" => &self.db,
            "user" => &self.user,
            "client" => &self.client,
            _ => &self.protocol,
        }
    }
}

/// A group's fingerprint text, first and last seen.
pub fn fingerprint(conn: &Connection, g: &GroupRef) -> Result<Option<(String, i64, i64)>, Error> {
    use rusqlite::OptionalExtension;
    Ok(conn
        .prepare_cached(
            "SELECT text, first_seen, last_seen FROM fingerprints \
             WHERE protocol = ?1 AND command = ?2 AND id = ?3",
        )?
        .query_row([&g.protocol, &g.command, &g.id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?)
}

/// Folds per-series `(count, service ns)` into the shares of each dimension of [`DIMS`].
pub fn fold_dims(
    per_series: &HashMap<i64, (u64, u128)>,
    info: &HashMap<i64, SeriesKey>,
) -> BTreeMap<String, Vec<Share>> {
    let total: u128 = per_series.values().map(|v| v.1).sum();
    let share = |ns: u128| {
        if total > 0 {
            ns as f64 / total as f64
        } else {
            0.0
        }
    };
    let mut out = BTreeMap::new();
    for d in DIMS {
        let mut sums: HashMap<&str, (u64, u128)> = HashMap::new();
        for (id, (c, ns)) in per_series {
            let Some(k) = info.get(id) else { continue };
            let e = sums.entry(shown(k.dim(d))).or_default();
            e.0 += c;
            e.1 += ns;
        }
        let mut v: Vec<(&str, (u64, u128))> = sums.into_iter().collect();
        v.sort_by(|a, b| b.1.1.cmp(&a.1.1).then(b.1.0.cmp(&a.1.0)).then(a.0.cmp(b.0)));
        let rest: (u64, u128) = v
            .iter()
            .skip(DIM_SHOW)
            .fold((0, 0), |a, (_, x)| (a.0 + x.0, a.1 + x.1));
        let extra = v.len() > DIM_SHOW;
        v.truncate(DIM_SHOW);
        let mut shares: Vec<Share> = v
            .into_iter()
            .map(|(value, (count, ns))| Share {
                value: value.to_string(),
                count,
                service_sum_us: us(ns),
                share: share(ns),
            })
            .collect();
        if extra {
            shares.push(Share {
                value: "other".into(),
                count: rest.0,
                service_sum_us: us(rest.1),
                share: share(rest.1),
            });
        }
        out.insert(d.to_string(), shares);
    }
    out
}

/// Per-series `(count, service ns)` over the segments (summed in SQL, no blob decoded).
pub fn series_sums(
    conn: &Connection,
    segs: &[Seg],
    f: &Filter,
    group: Option<&GroupRef>,
) -> Result<HashMap<i64, (u64, u128)>, Error> {
    let (sql, params) = union_sql(
        segs,
        "r.series AS series, r.count AS c, r.service_sum_ns AS ns",
        f,
        group,
    );
    let mut out = HashMap::new();
    if sql.is_empty() {
        return Ok(out);
    }
    let sql = format!("SELECT series, sum(c), sum(ns) FROM ({sql}) GROUP BY series");
    each(conn, &sql, &params, |r| {
        let c: i64 = r.get(1)?;
        let ns: i64 = r.get(2)?;
        out.insert(r.get(0)?, (c.max(0) as u64, ns.max(0) as u128));
        Ok(())
    })?;
    Ok(out)
}

/// The store's span (see [`Store::span`]).
pub fn span_in(conn: &Connection) -> Result<Option<(i64, i64)>, Error> {
    let marks = Marks::load(conn)?;
    let first: Option<i64> = conn.query_row(
        "SELECT min(t) FROM (SELECT min(ts) AS t FROM m1 UNION ALL SELECT min(ts) FROM h1 \
         UNION ALL SELECT min(ts) FROM d1)",
        [],
        |r| r.get(0),
    )?;
    // Rolled-up rows start at their period; the data no earlier than the first minute written.
    let first = first.map(|f| f.max(marks.first_minute.unwrap_or(f)));
    Ok(first.zip(marks.last_minute.map(|l| l + 60)))
}

impl Store {
    /// First minute start and last minute end (unix seconds) of the data, over all tiers.
    pub fn span(&self) -> Result<Option<(i64, i64)>, Error> {
        let tx = self.conn.unchecked_transaction()?;
        span_in(&tx)
    }

    /// Rows per tier, series, bytes, span and the rows dropped by the size bound.
    pub fn stats(&self) -> Result<StoreStats, Error> {
        let tx = self.conn.unchecked_transaction()?;
        let count = |t: &str| -> Result<u64, Error> {
            let n: i64 = tx.query_row(&format!("SELECT count(*) FROM {t}"), [], |r| r.get(0))?;
            Ok(n.max(0) as u64)
        };
        let dropped = |t: &str| -> Result<u64, Error> {
            Ok(get_i64(&tx, &format!("dropped_{t}"))?.unwrap_or(0).max(0) as u64)
        };
        let span = span_in(&tx)?;
        Ok(StoreStats {
            minute_rows: count("m1")?,
            hour_rows: count("h1")?,
            day_rows: count("d1")?,
            series: count("series")?,
            bytes: crate::retain::file_bytes(&tx)?,
            first_ts: span.map(|s| s.0),
            last_ts: span.map(|s| s.1),
            dropped_minute_rows: dropped("m1")?,
            dropped_hour_rows: dropped("h1")?,
            dropped_day_rows: dropped("d1")?,
        })
    }

    /// How the load of a range splits over servers, databases, users, client hosts and
    /// protocols.
    pub fn dims(&self, q: &RangeQuery) -> Result<DimsAnswer, Error> {
        let tx = self.conn.unchecked_transaction()?;
        let marks = Marks::load(&tx)?;
        let (from, to) = round_out(q.from_s, q.to_s);
        let segs = plan(from, to, &marks, DAY);
        let sums = series_sums(&tx, &segs, &q.filter, None)?;
        let info = series_info(&tx)?;
        Ok(DimsAnswer {
            from,
            to,
            dims: fold_dims(&sums, &info),
        })
    }
}
