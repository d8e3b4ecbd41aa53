//! `dbtap diff`: compares two sides (captures, JSON digests or time ranges, each reduced to
//! per-group counts and exact latency distributions) group by group, ranks the groups by their
//! contribution to the change in load, and gives each change a verdict from a statistical test
//! ([`stats`]) adjusted for the number of tests and held to a practical effect size.

#![forbid(unsafe_code)]

pub mod blocks;
pub mod compare;
pub mod render;
pub mod side;
pub mod stats;
pub mod summary;

pub use compare::{Diff, GroupDiff, Metric, Settings, Status, Verdict, compare};
pub use side::{Key, LoadError, Side};
