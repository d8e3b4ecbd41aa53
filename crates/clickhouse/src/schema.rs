//! The ClickHouse schema (`dbtap schema clickhouse`): the minute table the sink inserts into,
//! the hour rollup (an `AggregatingMergeTree` fed by a materialized view) and the insert
//! statement. Kept to what ClickHouse 18.16 (Debian's) and current versions both accept: no
//! `LowCardinality`, `Map`, `TTL` or codecs; `DateTime` in seconds; arrays for histograms.

/// The minute table's name.
pub const MINUTES: &str = "dbtap_minutes";
/// The hour rollup's table and its materialized view.
pub const HOURS: &str = "dbtap_hours";
pub const HOURS_MV: &str = "dbtap_hours_mv";

/// The minute table's columns and types, in the RowBinary order of `Row::encode`.
pub const COLUMNS: &[(&str, &str)] = &[
    ("ts", "DateTime"),
    ("host", "String"),
    ("protocol", "String"),
    ("command", "String"),
    ("query_id", "String"),
    ("fp_hash", "UInt64"),
    ("fingerprint", "String"),
    ("server", "String"),
    ("client", "String"),
    ("db", "String"),
    ("user", "String"),
    ("count", "UInt64"),
    ("ok", "UInt64"),
    ("errors", "UInt64"),
    ("no_response", "UInt64"),
    ("incomplete", "UInt64"),
    ("bytes_in", "UInt64"),
    ("bytes_out", "UInt64"),
    ("rows_sent", "UInt64"),
    ("rows_affected", "UInt64"),
    ("service_sum_ns", "UInt64"),
    ("service_min_ns", "UInt64"),
    ("service_max_ns", "UInt64"),
    ("service_buckets", "Array(UInt32)"),
    ("service_counts", "Array(UInt64)"),
    ("latency_sum_ns", "UInt64"),
    ("latency_min_ns", "UInt64"),
    ("latency_max_ns", "UInt64"),
    ("latency_buckets", "Array(UInt32)"),
    ("latency_counts", "Array(UInt64)"),
    ("error_codes", "Array(UInt32)"),
    ("error_counts", "Array(UInt64)"),
    ("batch", "UInt64"),
];

/// The dimension columns (the key of a series, with `ts` the key of a row).
const KEYS: &[&str] = &[
    "host", "protocol", "command", "query_id", "fp_hash", "server", "client", "db", "user",
];

/// Counters summed into the hour rollup.
const SUMS: &[&str] = &[
    "count",
    "ok",
    "errors",
    "no_response",
    "incomplete",
    "bytes_in",
    "bytes_out",
    "rows_sent",
    "rows_affected",
    "service_sum_ns",
    "latency_sum_ns",
];

/// `INSERT INTO <table> (<columns>) FORMAT RowBinary`.
pub fn insert_query(table: &str) -> String {
    let cols: Vec<&str> = COLUMNS.iter().map(|(n, _)| *n).collect();
    format!("INSERT INTO {table} ({}) FORMAT RowBinary", cols.join(", "))
}

/// The minute table.
pub fn minutes_ddl() -> String {
    let cols: Vec<String> = COLUMNS
        .iter()
        .map(|(n, t)| format!("    {n} {t}"))
        .collect();
    format!(
        "CREATE TABLE IF NOT EXISTS {MINUTES}\n(\n{}\n)\nENGINE = MergeTree()\n\
         PARTITION BY toDate(ts)\nORDER BY (query_id, server, ts)",
        cols.join(",\n")
    )
}

/// The hour rollup table: one row per (hour, series) after merges, every column an
/// aggregate state (read with `sumMerge`, `minIfMerge`, `sumMapMerge`...).
pub fn hours_ddl() -> String {
    let mut cols = vec!["    ts DateTime".to_string()];
    for k in KEYS {
        let t = if *k == "fp_hash" { "UInt64" } else { "String" };
        cols.push(format!("    {k} {t}"));
    }
    cols.push("    fingerprint AggregateFunction(any, String)".into());
    cols.extend(
        SUMS.iter()
            .map(|s| format!("    {s} AggregateFunction(sum, UInt64)")),
    );
    for d in ["service", "latency"] {
        cols.push(format!(
            "    {d}_min_ns AggregateFunction(minIf, UInt64, UInt8)"
        ));
        cols.push(format!("    {d}_max_ns AggregateFunction(max, UInt64)"));
        cols.push(format!(
            "    {d}_hist AggregateFunction(sumMap, Array(UInt32), Array(UInt64))"
        ));
    }
    cols.push("    errors_by_code AggregateFunction(sumMap, Array(UInt32), Array(UInt64))".into());
    format!(
        "CREATE TABLE IF NOT EXISTS {HOURS}\n(\n{}\n)\nENGINE = AggregatingMergeTree()\n\
         PARTITION BY toYYYYMM(ts)\nORDER BY (query_id, server, ts, {})",
        cols.join(",\n"),
        KEYS.iter()
            .filter(|k| !matches!(**k, "query_id" | "server"))
            .copied()
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The materialized view that feeds [`hours_ddl`] from every insert into the minute table.
pub fn hours_mv_ddl() -> String {
    let mut sel = vec!["    toStartOfHour(ts) AS ts".to_string()];
    sel.extend(KEYS.iter().map(|k| format!("    {k}")));
    sel.push("    anyState(fingerprint) AS fingerprint".into());
    sel.extend(SUMS.iter().map(|s| format!("    sumState({s}) AS {s}")));
    for d in ["service", "latency"] {
        sel.push(format!(
            "    minIfState({d}_min_ns, toUInt8(notEmpty({d}_counts))) AS {d}_min_ns"
        ));
        sel.push(format!("    maxState({d}_max_ns) AS {d}_max_ns"));
        sel.push(format!(
            "    sumMapState({d}_buckets, {d}_counts) AS {d}_hist"
        ));
    }
    sel.push("    sumMapState(error_codes, error_counts) AS errors_by_code".into());
    format!(
        "CREATE MATERIALIZED VIEW IF NOT EXISTS {HOURS_MV} TO {HOURS}\nAS SELECT\n{}\n\
         FROM {MINUTES}\nGROUP BY ts, {}",
        sel.join(",\n"),
        KEYS.join(", ")
    )
}

/// Every statement, in order, as `dbtap schema clickhouse` prints them (each ends with `;`).
pub fn ddl() -> Vec<String> {
    vec![minutes_ddl(), hours_ddl(), hours_mv_ddl()]
}

/// The SQL expression of quantiles `qs` (e.g. `[0.5, 0.95, 0.99]`) of the merged histogram
/// `buckets`/`counts` arrays (an aggregate: use it in a `GROUP BY` query), as an array of
/// nanoseconds: the nearest rank's bucket midpoint, as dbtap reports percentiles (not clamped
/// to the exact min and max, which dbtap does). Works on ClickHouse 18.16 and current.
pub fn quantiles_sql(hist: &str, qs: &[f64]) -> String {
    let qs: Vec<String> = qs.iter().map(|q| format!("{q}")).collect();
    format!(
        "arrayMap(i -> bitShiftLeft(i - bitShiftLeft(if(i < 256, 0, intDiv(i, 128) - 1), 7), \
         if(i < 256, 0, intDiv(i, 128) - 1)) + intDiv(bitShiftLeft(toUInt64(1), \
         if(i < 256, 0, intDiv(i, 128) - 1)) - 1, 2), \
         arrayMap(q -> toUInt64(arrayElement(({hist}).1, arrayFirstIndex(c -> c >= greatest(1, \
         ceil(q * arraySum(({hist}).2))), arrayCumSum(({hist}).2)))), [{}]))",
        qs.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_column_is_in_the_insert_and_the_table() {
        let ins = insert_query(MINUTES);
        let ddl = minutes_ddl();
        for (n, t) in COLUMNS {
            assert!(ins.contains(n));
            assert!(ddl.contains(&format!("    {n} {t}")), "{n}");
        }
        assert_eq!(ddl.matches(',').count(), COLUMNS.len() - 1 + 2);
    }
}
