//! `dbtap ui --clickhouse`: the fleet's rows followed into memory. A `clickhouse::follow::Follow`
//! reads the rows inserted since its last read (at start, every `--clickhouse-refresh`, and on
//! `GET /api/refresh`); they go into one in-memory store for every host merged and one per
//! host (the UI's `host` filter), each with the window as its retention. Implements
//! `web::FleetView` for the API.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clickhouse::follow::{Follow, FollowStats};

use crate::fleet::FleetUiArgs;

type Shared = Arc<Mutex<store::Store>>;

/// One agent host: its store and the minutes read of it.
struct Host {
    store: Shared,
    first: i64,
    last: i64,
}

/// What the follower last did.
#[derive(Default)]
struct Status {
    stats: FollowStats,
    last_error: Option<String>,
    /// Unix seconds of the last refresh that succeeded.
    last_ok: Option<i64>,
    failures: u64,
}

pub struct FleetUi {
    all: Shared,
    hosts: Mutex<BTreeMap<String, Host>>,
    follow: Mutex<Follow>,
    status: Mutex<Status>,
    cfg: store::StoreConfig,
    url: String,
    refresh: Duration,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl FleetUi {
    /// Reads the window once (an error if that fails or finds no row), then follows it on a
    /// thread every `--clickhouse-refresh`.
    pub fn start(url: clickhouse::Url, args: &FleetUiArgs) -> Result<Arc<FleetUi>> {
        let range = args.clickhouse_range.max(Duration::from_secs(60));
        let cfg = store::StoreConfig {
            retention: store::Retention {
                minutes: range,
                hours: range,
                days: range,
            },
            max_bytes: None,
            examples: false,
        };
        let follow = Follow::new(
            url.clone(),
            clickhouse::schema::MINUTES,
            args.clickhouse_host.clone(),
            range.as_secs() as i64,
            args.clickhouse_max_rows,
        );
        let ui = Arc::new(FleetUi {
            all: Arc::new(Mutex::new(store::Store::memory(cfg.clone())?)),
            hosts: Mutex::new(BTreeMap::new()),
            follow: Mutex::new(follow),
            status: Mutex::new(Status::default()),
            cfg,
            url: url.display(),
            refresh: args.clickhouse_refresh,
        });
        ui.refresh()
            .with_context(|| format!("ClickHouse {}", ui.url))?;
        if lock(&ui.status).stats.rows_in_window == 0 {
            anyhow::bail!(
                "ClickHouse {}: no rows in {} for those hosts",
                ui.url,
                clickhouse::schema::MINUTES
            );
        }
        if !ui.refresh.is_zero() {
            let f = Arc::clone(&ui);
            std::thread::Builder::new()
                .name("dbtap-fleet".into())
                .spawn(move || f.follow_loop())
                .context("starting the ClickHouse follower")?;
        }
        Ok(ui)
    }

    /// The store of every host merged (the API's default).
    pub fn store(&self) -> Shared {
        Arc::clone(&self.all)
    }

    fn follow_loop(&self) {
        loop {
            std::thread::sleep(self.refresh);
            // The outcome is in the status (and the first failure of a run on stderr).
            let _ = self.refresh();
        }
    }

    /// One refresh: the new rows into the stores. The status says how it went; the first
    /// failure of a run and the recovery after it are one line each on stderr.
    fn refresh(&self) -> Result<()> {
        let mut follow = lock(&self.follow);
        let r = follow.refresh().map_err(anyhow::Error::from);
        let r = r.and_then(|rows| self.import(&rows));
        let mut st = lock(&self.status);
        st.stats = follow.stats().clone();
        match &r {
            Ok(()) => {
                if st.failures > 0 {
                    eprintln!("dbtap: clickhouse {}: reading again", self.url);
                }
                st.last_ok = Some(now_s());
                st.last_error = None;
                st.failures = 0;
            }
            Err(e) => {
                st.last_error = Some(format!("{e:#}"));
                st.failures += 1;
                if st.failures == 1 && st.last_ok.is_some() {
                    eprintln!(
                        "dbtap: warning: clickhouse {}: {e:#}; serving what was read",
                        self.url
                    );
                }
            }
        }
        r
    }

    fn import(&self, rows: &[clickhouse::Row]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let all: Vec<&clickhouse::Row> = rows.iter().collect();
        crate::fleet::import(&mut lock(&self.all), &all)?;
        let mut by_host: BTreeMap<&str, Vec<&clickhouse::Row>> = BTreeMap::new();
        for r in rows {
            by_host.entry(r.host.as_str()).or_default().push(r);
        }
        let mut hosts = lock(&self.hosts);
        for (name, rows) in by_host {
            let (Some(a), Some(b)) = (rows.first(), rows.last()) else {
                continue;
            };
            let (a, b) = (i64::from(a.ts), i64::from(b.ts));
            let h = match hosts.get_mut(name) {
                Some(h) => h,
                None => {
                    let store = store::Store::memory(self.cfg.clone())?;
                    hosts.entry(name.to_string()).or_insert(Host {
                        store: Arc::new(Mutex::new(store)),
                        first: a,
                        last: b,
                    })
                }
            };
            h.first = h.first.min(a);
            h.last = h.last.max(b);
            crate::fleet::import(&mut lock(&h.store), &rows)?;
        }
        Ok(())
    }
}

impl web::FleetView for FleetUi {
    fn host_store(&self, host: &str) -> Option<Shared> {
        lock(&self.hosts).get(host).map(|h| Arc::clone(&h.store))
    }

    fn sources(&self) -> Vec<web::Source> {
        let from = lock(&self.status).stats.from;
        lock(&self.hosts)
            .iter()
            .filter(|(_, h)| h.last >= from)
            .map(|(name, h)| web::Source {
                label: name.clone(),
                from: h.first.max(from),
                to: h.last + 60,
                store: None,
            })
            .collect()
    }

    fn status(&self) -> serde_json::Value {
        let st = lock(&self.status);
        let s = &st.stats;
        serde_json::json!({
            "url": self.url,
            "from": s.from,
            "to": s.to,
            "rows_held": s.rows_held,
            "rows_in_window": s.rows_in_window,
            "rows_left_out": s.rows_left_out,
            "minutes_left_out": s.minutes_left_out,
            "refreshes": s.refreshes,
            "last_rows": s.last_rows,
            "last_ok": st.last_ok,
            "last_error": st.last_error,
            "refresh_s": self.refresh.as_secs_f64(),
        })
    }

    fn refresh_now(&self) {
        // The outcome is in the status.
        let _ = self.refresh();
    }
}
