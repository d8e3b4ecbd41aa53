//! dbtap's web server: the JSON API under `/api/` over the history store ([`store::Store`]),
//! the live view of a running agent, the agent's `/metrics` and `/api/digest` (served by
//! `crates/metrics`' routes, unchanged), and the pages and their assets embedded in the binary.
//! The routes are documented in `docs/api.md`.
//!
//! Why `tiny_http` again: a few requests a second from one browser need no async runtime; a
//! small pool of handler threads answers them, and the store sits behind one mutex (SQLite
//! answers the page queries in milliseconds).

#![forbid(unsafe_code)]

mod api;
mod assets;
mod fleet;
mod params;
mod server;

use std::sync::{Arc, Mutex};

use serde::Serialize;

pub use fleet::FleetView;
pub use params::{parse_relative, resolve_range};
pub use server::{Server, serve};

/// What the server shows: a running agent, a store file, or captures digested at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Live,
    Store,
    Captures,
}

/// One capture of `dbtap ui CAPTURE...`, or one store of `dbtap ui --store A --compare-store B`:
/// its name and the minutes it covers (unix seconds); `store` (`"a"` or `"b"`) for stores.
#[derive(Clone, Debug, Serialize)]
pub struct Source {
    pub label: String,
    pub from: i64,
    pub to: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub store: Option<&'static str>,
}

/// The running agent's current interval, for `/api/live` (live mode only).
pub trait LiveView: Send + Sync + 'static {
    /// The interval length in seconds.
    fn interval_s(&self) -> f64;
    /// The JSON of `/api/live`: `ts`, `interval_s`, `header`, `lines`, `top`.
    fn live_json(&self) -> serde_json::Value;
}

/// Everything the server answers from.
pub struct App {
    pub store: Arc<Mutex<store::Store>>,
    /// `dbtap ui --compare-store B`: a second store only `/api/compare` reads (its own mutex).
    pub store_b: Option<Arc<Mutex<store::Store>>>,
    pub mode: Mode,
    /// `dbtap ui CAPTURE...`: one per capture; otherwise empty.
    pub sources: Vec<Source>,
    /// Whether query examples were kept (as for the other outputs).
    pub examples: bool,
    pub live: Option<Arc<dyn LiveView>>,
    /// `/metrics` and `/api/digest` of a live agent.
    pub metrics: Option<Arc<dyn metrics::Provider>>,
    /// When set, every route but `/assets/` needs `Authorization: Bearer T` or `?token=T`.
    pub token: Option<String>,
    /// `dbtap ui --clickhouse`: the hosts' stores (the `host` filter) and the follower.
    pub fleet: Option<Arc<dyn FleetView>>,
}

/// The access token from `--token-file FILE` (its first line, trimmed), else the environment
/// variable `DBTAP_UI_TOKEN`; `None` when neither is set. An empty token is an error.
pub fn load_token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    let raw = match file {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(|e| format!("--token-file {}: {e}", p.display()))?,
        ),
        None => std::env::var("DBTAP_UI_TOKEN").ok(),
    };
    match raw {
        None => Ok(None),
        Some(t) => {
            let t = t.lines().next().unwrap_or("").trim().to_string();
            if t.is_empty() {
                Err("the UI access token is empty".to_string())
            } else {
                Ok(Some(t))
            }
        }
    }
}
