//! The snapshot served to `crates/metrics`: Prometheus exposition and the JSON digests of
//! `/api/digest` (since start, or the last window), scaled when sampling.

use std::sync::{Arc, Mutex};

use aggregate::Aggregator;
use anyhow::Result;
use report::CaptureHealth;

use super::merge::Snapshot;
use super::setup::{LiveSetup, Plan};
use super::unix_ns;
use crate::cli::CaptureArgs;

/// What this binary was built from (crates/dbtap/build.rs), for `dbtap_build_info`.
const BUILD: metrics::prom::BuildInfo = metrics::prom::BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    revision: option_env!("DBTAP_GIT_REVISION"),
    rustc: option_env!("DBTAP_RUSTC_VERSION"),
};

/// The HTTP endpoint's view of the snapshot.
struct HttpProvider {
    snap: Arc<Mutex<Snapshot>>,
    exporter: Mutex<metrics::prom::Exporter>,
    setup: Arc<LiveSetup>,
    /// `--clickhouse`: the sink's counters, appended to `/metrics`.
    fleet: Option<Arc<clickhouse::SinkStats>>,
}

/// Starts the endpoint when `--listen` asks for it: the web UI and its API over the run's
/// history store (`crates/web`), with `/metrics` and `/api/digest` served from the snapshot.
pub(super) fn serve(
    c: &CaptureArgs,
    snap: &Arc<Mutex<Snapshot>>,
    plan: &Plan,
) -> Result<Option<web::Server>> {
    let (Some(addr), Some(store)) = (c.listen, plan.store.clone()) else {
        return Ok(None);
    };
    let provider = Arc::new(HttpProvider {
        snap: Arc::clone(snap),
        exporter: Mutex::new(metrics::prom::Exporter::new(c.metrics_top)),
        setup: Arc::clone(&plan.setup),
        fleet: plan.fleet.clone(),
    });
    let app = web::App {
        store,
        store_b: None,
        mode: web::Mode::Live,
        sources: Vec::new(),
        examples: plan.agg_cfg.keep_examples,
        live: plan.live_view.clone().map(|v| v as Arc<dyn web::LiveView>),
        metrics: Some(provider),
        token: plan.token.clone(),
        fleet: None,
    };
    Ok(Some(web::serve(addr, app)?))
}

impl HttpProvider {
    fn json(&self, agg: &Aggregator, health: &CaptureHealth) -> Vec<u8> {
        let mut out = Vec::new();
        let sample = u64::from(self.setup.sample.max(1));
        let res = if sample > 1 {
            let mut scaled = agg.clone();
            scaled.scale(sample);
            report::json::render(&scaled, health, &self.setup.report_opts, &mut out)
        } else {
            report::json::render(agg, health, &self.setup.report_opts, &mut out)
        };
        if let Err(e) = res {
            out = format!("{{\"error\":\"{e}\"}}\n").into_bytes();
        }
        out
    }
}

impl metrics::http::Provider for HttpProvider {
    fn metrics(&self) -> String {
        let mut out = String::new();
        let agent_start = unix_ns(self.setup.started) as f64 / 1e9;
        let agent = metrics::prom::AgentInfo::read_self(agent_start, BUILD);
        if let (Ok(snap), Ok(mut exp)) = (self.snap.lock(), self.exporter.lock()) {
            let kernel = metrics::prom::KernelStats {
                packets: snap.kernel.packets,
                drops: snap.kernel.drops,
            };
            exp.render(
                &snap.total,
                &snap.health,
                kernel,
                &agent,
                self.setup.sample.max(1),
                &mut out,
            );
            if snap.kernel.ring_bytes > 0 {
                let pause = metrics::ReaderPause {
                    interval_ns: snap.pause_ns,
                    max_ns: snap.kernel.pause_max_ns,
                    long_pauses: snap.kernel.long_pauses,
                    ring_bytes: snap.kernel.ring_bytes,
                    ring_growths: snap.kernel.growths,
                };
                metrics::write_reader_pause(pause, &mut out);
            }
        }
        if let Some(f) = &self.fleet {
            super::fleet::metrics(f, &mut out);
        }
        out
    }

    fn digest_json(&self, window: metrics::http::Window) -> Vec<u8> {
        let Ok(snap) = self.snap.lock() else {
            return b"{\"error\":\"snapshot unavailable\"}\n".to_vec();
        };
        match window {
            metrics::http::Window::Total => self.json(&snap.total, &snap.health),
            metrics::http::Window::Current => {
                // The window's own span, so rates are per second of that window.
                let mut h = snap.health.clone();
                let secs = (snap.window_secs * 1e9) as u64;
                h.first_ts_ns = Some(snap.window_end_ns.saturating_sub(secs));
                h.last_ts_ns = Some(snap.window_end_ns);
                self.json(&snap.window, &h)
            }
        }
    }
}
