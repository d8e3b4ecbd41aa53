//! The dimension labels of group series: `server` (and `db`, `user`, `client`, `process` when grouped by
//! them). Cardinality stays bounded: only the `--metrics-top` exported groups get their own
//! series, each with the values of the one group it counts; the rest are summed per protocol
//! into one "other" series.

use aggregate::{Aggregator, Dim, Group};

use crate::prom::escape_label_value;

/// Appends `,server="…"` (and the other grouped dimensions) to a group's labels.
pub fn push_dim_labels(g: &Group, labels: &mut String) {
    let Some(values) = &g.dims else { return };
    for (dim, v) in values.fields() {
        if matches!(dim, Dim::Protocol | Dim::Command) {
            continue; // labels of every series already
        }
        labels.push(',');
        labels.push_str(dim.name());
        labels.push_str("=\"");
        escape_label_value(&v, labels);
        labels.push('"');
    }
}

/// True when groups are keyed by server (their series carry `server`).
pub fn by_server(total: &Aggregator) -> bool {
    total
        .groups()
        .any(|g| g.dims.as_ref().is_some_and(|d| d.set.contains(Dim::Server)))
}
