//! What `dbtap live` serves over HTTP: Prometheus metrics of the query groups, capture health
//! and the agent itself ([`prom`]), and the small endpoint that serves them with the JSON digests
//! ([`http`]).
//!
//! Why the exposition is written by hand rather than with the `prometheus-client` crate: it is
//! string formatting of statistics the aggregator already keeps (counters and latency
//! histograms). A metrics library would want every sample recorded a second time into its own
//! counter and histogram types, on the hot path, and would still need the bounded, monotonic
//! choice of which groups get their own series that [`prom::Exporter`] makes. The 0.0.4 text
//! format is a few lines of rules (HELP/TYPE once per family, escaped label values, cumulative
//! buckets ending in `+Inf`), and the tests check our output against them with a strict parser.
//!
//! Why `tiny_http`: two routes answered a few times a minute need no async runtime. `tiny_http`
//! is synchronous and small (a handful of dependencies), and two handler threads serve it;
//! reading requests happens on its own connection threads, so a slow client does not hold a
//! handler while it sends.

#![deny(unsafe_code)]

pub mod codes;
pub mod dims;
pub mod http;
pub mod pause;
pub mod process;
pub mod prom;

pub use http::{Provider, Server, Window, serve};
pub use pause::{ReaderPause, write_reader_pause};
pub use prom::{AgentInfo, Exporter, KernelStats};
