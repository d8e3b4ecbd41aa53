//! The fleet behind `dbtap ui --clickhouse`: what the API asks of it (a store per agent host
//! for the `host` filter, the hosts as sources, the follower's status, a refresh on demand).

use std::sync::{Arc, Mutex};

/// A fleet view kept up to date by its owner (`dbtap ui --clickhouse`'s follower).
pub trait FleetView: Send + Sync + 'static {
    /// The store of one agent host (the `host` filter), `None` when no such host was read.
    fn host_store(&self, host: &str) -> Option<Arc<Mutex<store::Store>>>;
    /// The hosts read so far, with their spans (`/api/meta`'s `sources`).
    fn sources(&self) -> Vec<crate::Source>;
    /// The follower's status (`/api/meta`'s `fleet`, `/api/refresh`): window, rows held and
    /// left out, refreshes, last error.
    fn status(&self) -> serde_json::Value;
    /// Reads what is new now and returns when done.
    fn refresh_now(&self);
}
