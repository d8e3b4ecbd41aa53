//! The routes: the access token, the pages and assets, `/metrics` and `/api/digest` (handed to
//! `crates/metrics`' routes unchanged), and the JSON API over the store (`docs/api.md`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tiny_http::{Header, Method, Response};

use crate::params::{MAX_LIMIT, MAX_POINTS, Params, shown};
use crate::{App, assets};

pub use metrics::http::Reply;

fn header(name: &str, value: &str) -> Header {
    // Names and values are ASCII constants of this module.
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("ASCII header")
}

/// A JSON answer.
fn json(status: u16, body: Vec<u8>) -> Reply {
    Response::from_data(body)
        .with_status_code(status)
        .with_header(header("Content-Type", "application/json"))
        .with_header(header("Cache-Control", "no-store"))
}

/// `{"error": "..."}` with `status`.
pub fn json_error(status: u16, msg: &str) -> Reply {
    let one_line: String = msg
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let body = serde_json::json!({ "error": one_line }).to_string() + "\n";
    json(status, body.into_bytes())
}

fn serialized<T: Serialize>(v: &T) -> Reply {
    match serde_json::to_vec(v) {
        Ok(mut b) => {
            b.push(b'\n');
            json(200, b)
        }
        Err(e) => json_error(500, &format!("cannot render the answer: {e}")),
    }
}

fn now_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The answer to `method url` with the `Authorization` header `auth`.
pub fn route(app: &App, method: &Method, url: &str, auth: Option<&str>) -> Reply {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if let Some(name) = path.strip_prefix("/assets/") {
        return asset(method, name);
    }
    if let Some(token) = &app.token
        && !authorized(token, query, auth)
    {
        return json_error(
            401,
            "missing or wrong access token (Authorization: Bearer T, or ?token=T)",
        )
        .with_header(header("WWW-Authenticate", "Bearer"));
    }
    if matches!(path, "/metrics" | "/api/digest") {
        return match &app.metrics {
            Some(p) => metrics::http::route(method, url, p.as_ref()),
            None => json_error(
                404,
                &format!("not found: {path} (served by dbtap live only)"),
            ),
        };
    }
    if *method != Method::Get {
        return json_error(405, &format!("method {method} not allowed: use GET"))
            .with_header(header("Allow", "GET"));
    }
    if let Some(html) = assets::page(path) {
        return Response::from_data(html.to_vec())
            .with_header(header("Content-Type", "text/html; charset=utf-8"))
            .with_header(header("Cache-Control", "no-cache"));
    }
    let params = match Params::parse(query) {
        Ok(p) => p,
        Err(e) => return json_error(400, &e),
    };
    match catch_unwind(AssertUnwindSafe(|| api(app, path, &params))) {
        Ok(Ok(reply)) => reply,
        Ok(Err(ApiError::Bad(msg))) => json_error(400, &msg),
        Ok(Err(ApiError::NotFound(msg))) => json_error(404, &msg),
        Ok(Err(ApiError::Store(msg))) => json_error(500, &msg),
        Err(_) => json_error(500, "internal error"),
    }
}

/// A static file under `/assets/`, cached by the browser for a while.
fn asset(method: &Method, name: &str) -> Reply {
    if *method != Method::Get {
        return json_error(405, &format!("method {method} not allowed: use GET"))
            .with_header(header("Allow", "GET"));
    }
    match assets::get(name) {
        Some(b) => Response::from_data(b.to_vec())
            .with_header(header("Content-Type", assets::content_type(name)))
            .with_header(header("Cache-Control", "public, max-age=300")),
        None => json_error(404, &format!("no asset {}", shown(name))),
    }
}

/// The token as a bearer header or a `token` parameter, compared in constant time.
fn authorized(token: &str, query: &str, auth: Option<&str>) -> bool {
    let eq = |given: &str| {
        let (a, b) = (given.as_bytes(), token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    };
    let bearer = auth
        .and_then(|h| h.trim().strip_prefix("Bearer "))
        .is_some_and(|t| eq(t.trim()));
    bearer
        || Params::parse(query)
            .ok()
            .and_then(|p| p.get("token").map(eq))
            .unwrap_or(false)
}

enum ApiError {
    Bad(String),
    NotFound(String),
    Store(String),
}

impl From<store::Error> for ApiError {
    fn from(e: store::Error) -> Self {
        ApiError::Store(e.to_string())
    }
}

type ApiResult = Result<Reply, ApiError>;

fn api(app: &App, path: &str, p: &Params) -> ApiResult {
    match path {
        "/api/meta" => meta(app),
        "/api/top" => top(app, p),
        "/api/dims" => dims(app, p),
        "/api/group" => group(app, p),
        "/api/compare" => compare(app, p),
        "/api/refresh" => match &app.fleet {
            Some(f) => {
                f.refresh_now();
                Ok(serialized(&f.status()))
            }
            None => Err(ApiError::NotFound(
                "not a fleet (dbtap ui --clickhouse)".into(),
            )),
        },
        "/api/live" => match &app.live {
            Some(l) => Ok(serialized(&l.live_json())),
            None => Err(ApiError::NotFound("not live".into())),
        },
        _ => Err(ApiError::NotFound(format!(
            "not found: {} (see docs/api.md for the routes)",
            shown(path)
        ))),
    }
}

/// The store a request reads: with `host=H` under `dbtap ui --clickhouse`, that agent host's;
/// otherwise the one store (a `host` elsewhere is a 400).
fn pick(app: &App, p: &Params) -> Result<Arc<Mutex<store::Store>>, ApiError> {
    match (p.get("host"), &app.fleet) {
        (None, _) => Ok(Arc::clone(&app.store)),
        (Some(h), Some(f)) => f
            .host_store(h)
            .ok_or_else(|| ApiError::NotFound(format!("no host {} in the fleet", shown(h)))),
        (Some(_), None) => Err(ApiError::Bad(
            "the host filter is for dbtap ui --clickhouse".into(),
        )),
    }
}

fn lock(m: &Mutex<store::Store>) -> std::sync::MutexGuard<'_, store::Store> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn range(app: &App, p: &Params, from: &str, to: &str) -> Result<store::RangeQuery, ApiError> {
    let span = lock(pick(app, p)?.as_ref()).span()?;
    p.range(from, to, span, now_s()).map_err(ApiError::Bad)
}

#[derive(Serialize)]
struct Meta<'a> {
    version: &'static str,
    mode: crate::Mode,
    span: Option<Span>,
    examples: bool,
    sources: &'a [crate::Source],
    live: Option<LiveMeta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fleet: Option<serde_json::Value>,
}

#[derive(Serialize)]
struct Span {
    from: i64,
    to: i64,
}

#[derive(Serialize)]
struct LiveMeta {
    interval_s: f64,
}

fn meta(app: &App) -> ApiResult {
    let span = lock(&app.store).span()?.map(|(from, to)| Span { from, to });
    let sources = app.fleet.as_ref().map(|f| f.sources());
    Ok(serialized(&Meta {
        version: env!("CARGO_PKG_VERSION"),
        mode: app.mode,
        span,
        examples: app.examples,
        sources: sources.as_deref().unwrap_or(&app.sources),
        live: app.live.as_ref().map(|l| LiveMeta {
            interval_s: l.interval_s(),
        }),
        fleet: app.fleet.as_ref().map(|f| f.status()),
    }))
}

fn top(app: &App, p: &Params) -> ApiResult {
    let sort = match p.get("sort").unwrap_or("load") {
        "load" => store::SortBy::Load,
        "count" => store::SortBy::Count,
        "p99" => store::SortBy::P99,
        "errors" => store::SortBy::Errors,
        other => {
            return Err(ApiError::Bad(format!(
                "bad sort {}: expected load, count, p99 or errors",
                shown(other)
            )));
        }
    };
    let q = store::TopQuery {
        range: range(app, p, "from", "to")?,
        sort,
        limit: p.count("limit", 50, MAX_LIMIT).map_err(ApiError::Bad)?,
        spark_points: p.count("points", 60, MAX_POINTS).map_err(ApiError::Bad)?,
    };
    Ok(serialized(&lock(pick(app, p)?.as_ref()).top(&q)?))
}

fn dims(app: &App, p: &Params) -> ApiResult {
    let q = range(app, p, "from", "to")?;
    let mut answer = lock(pick(app, p)?.as_ref()).dims(&q)?;
    if let Some(f) = &app.fleet {
        answer
            .dims
            .insert("host".into(), host_shares(f.as_ref(), &q)?);
    }
    Ok(serialized(&answer))
}

/// `/api/dims`'s `host` line under `dbtap ui --clickhouse`: each host's queries and service
/// time in the range (the other filters applied), from its own store.
fn host_shares(
    f: &dyn crate::FleetView,
    q: &store::RangeQuery,
) -> Result<Vec<store::Share>, ApiError> {
    let mut v = Vec::new();
    for s in f.sources() {
        let Some(st) = f.host_store(&s.label) else {
            continue;
        };
        let d = lock(&st).dims(q)?;
        let (count, us) = d.dims.get("protocol").map_or((0, 0.0), |p| {
            p.iter()
                .fold((0, 0.0), |(c, u), x| (c + x.count, u + x.service_sum_us))
        });
        if count > 0 {
            v.push(store::Share {
                value: s.label,
                count,
                service_sum_us: us,
                share: 0.0,
            });
        }
    }
    let total: f64 = v.iter().map(|s| s.service_sum_us).sum();
    for s in &mut v {
        s.share = if total > 0.0 {
            s.service_sum_us / total
        } else {
            0.0
        };
    }
    v.sort_by(|a, b| b.service_sum_us.total_cmp(&a.service_sum_us));
    Ok(v)
}

fn group(app: &App, p: &Params) -> ApiResult {
    let need = |n: &str| p.need(n).map(str::to_string).map_err(ApiError::Bad);
    let q = store::GroupQuery {
        range: range(app, p, "from", "to")?,
        group: store::GroupRef {
            protocol: need("protocol")?,
            command: need("command")?,
            id: need("id")?,
        },
        points: p.count("points", 120, MAX_POINTS).map_err(ApiError::Bad)?,
    };
    let answer = lock(pick(app, p)?.as_ref()).group(&q)?;
    if answer.group.first_seen.is_none() {
        return Err(ApiError::NotFound(format!(
            "no group {}/{}/{} in the store",
            shown(&q.group.protocol),
            shown(&q.group.command),
            shown(&q.group.id)
        )));
    }
    Ok(serialized(&answer))
}

/// Two ranges through `dbtap diff`'s engine, each read from store A (default) or B
/// (`a_store`, `b_store`). Both on A: B is the default range (the last hour of data), A the
/// range of the same length just before B. Otherwise a side without a range is its store's
/// whole span.
fn compare(app: &App, p: &Params) -> ApiResult {
    let (store_a, a_is_b) = side_store(app, p, "a_store")?;
    let (store_b, b_is_b) = side_store(app, p, "b_store")?;
    let two = a_is_b || b_is_b;
    let (a, b) = if two {
        (
            store_range(&store_a, p, "a_from", "a_to")?,
            store_range(&store_b, p, "b_from", "b_to")?,
        )
    } else {
        let b = range(app, p, "b_from", "b_to")?;
        let len = b.to_s - b.from_s;
        let a = if p.get("a_from").is_none() && p.get("a_to").is_none() {
            store::RangeQuery {
                from_s: b.from_s - len,
                to_s: b.from_s,
                filter: p.filter(),
            }
        } else {
            range(app, p, "a_from", "a_to")?
        };
        (a, b)
    };
    let label = |r: &store::RangeQuery, on_b: bool| match (two, on_b) {
        (false, _) => format!("{}..{}", r.from_s, r.to_s),
        (true, on_b) => format!("{}:{}..{}", if on_b { "b" } else { "a" }, r.from_s, r.to_s),
    };
    let side_a = lock(&store_a).side(&a, &label(&a, a_is_b))?;
    let side_b = lock(&store_b).side(&b, &label(&b, b_is_b))?;
    let d = diff::compare(&side_a, &side_b, &diff::Settings::default());
    let mut out = Vec::new();
    diff::render::json(&d, &mut out)
        .map_err(|e| ApiError::Store(format!("cannot render the comparison: {e}")))?;
    Ok(json(200, out))
}

/// The store the parameter `name` (`a` or `b`, default `a`) names, and whether it is B.
fn side_store(
    app: &App,
    p: &Params,
    name: &str,
) -> Result<(Arc<Mutex<store::Store>>, bool), ApiError> {
    match (p.get(name).unwrap_or("a"), &app.store_b) {
        ("a", _) => Ok((pick(app, p)?, false)),
        ("b", Some(b)) => Ok((Arc::clone(b), true)),
        ("b", None) => Err(ApiError::Bad(format!(
            "{name}=b: no second store (dbtap ui --store A --compare-store B)"
        ))),
        (other, _) => Err(ApiError::Bad(format!(
            "bad {name} {}: expected a or b",
            shown(other)
        ))),
    }
}

/// The range `from`..`to` of one store: its whole span when neither is given.
fn store_range(
    m: &Mutex<store::Store>,
    p: &Params,
    from: &str,
    to: &str,
) -> Result<store::RangeQuery, ApiError> {
    let span = lock(m).span()?;
    match span {
        Some((from_s, to_s)) if p.get(from).is_none() && p.get(to).is_none() => {
            Ok(store::RangeQuery {
                from_s,
                to_s,
                filter: p.filter(),
            })
        }
        _ => p.range(from, to, span, now_s()).map_err(ApiError::Bad),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn app(token: Option<&str>) -> App {
        let store = store::Store::memory(store::StoreConfig::default()).expect("memory store");
        App {
            store: Arc::new(Mutex::new(store)),
            store_b: None,
            mode: crate::Mode::Store,
            sources: Vec::new(),
            examples: false,
            live: None,
            metrics: None,
            token: token.map(str::to_string),
            fleet: None,
        }
    }

    fn body(r: Reply) -> (u16, String) {
        let status = r.status_code().0;
        let mut out = Vec::new();
        let mut data = r.into_reader();
        std::io::Read::read_to_end(&mut data, &mut out).expect("read");
        (status, String::from_utf8(out).expect("utf-8"))
    }

    fn get(app: &App, url: &str, auth: Option<&str>) -> (u16, String) {
        body(route(app, &Method::Get, url, auth))
    }

    #[test]
    fn meta_and_empty_answers() {
        let a = app(None);
        let (s, b) = get(&a, "/api/meta", None);
        assert_eq!(s, 200);
        let v: serde_json::Value = serde_json::from_str(&b).expect("json");
        assert_eq!(v["mode"], "store");
        assert_eq!(v["span"], serde_json::Value::Null);
        assert_eq!(v["live"], serde_json::Value::Null);
        let (s, b) = get(&a, "/api/top?from=-1h", None);
        assert_eq!(s, 200, "{b}");
        let (s, _) = get(&a, "/api/dims", None);
        assert_eq!(s, 200);
    }

    #[test]
    fn bad_requests_are_one_line_json() {
        let a = app(None);
        for url in [
            "/api/top?sort=nope",
            "/api/top?limit=0",
            "/api/top?points=99999",
            "/api/top?from=abc",
            "/api/top?from=100&to=50",
            "/api/group?protocol=redis&command=get",
            "/api/top?q=%zz",
            "/api/compare?a_store=b",
            "/api/compare?b_store=c",
        ] {
            let (s, b) = get(&a, url, None);
            assert_eq!(s, 400, "{url}: {b}");
            assert_eq!(b.matches('\n').count(), 1, "{b}");
            let v: serde_json::Value = serde_json::from_str(&b).expect("json");
            assert!(v["error"].is_string(), "{b}");
        }
        assert_eq!(
            get(&a, "/api/live", None),
            (404, "{\"error\":\"not live\"}\n".into())
        );
        assert_eq!(get(&a, "/api/nope", None).0, 404);
        assert_eq!(
            get(&a, "/api/group?protocol=redis&command=get&id=X", None).0,
            404
        );
        assert_eq!(get(&a, "/metrics", None).0, 404);
        assert_eq!(body(route(&a, &Method::Post, "/api/meta", None)).0, 405);
    }

    #[test]
    fn compare_reads_the_store_each_side_names() {
        let mut a = app(None);
        let b = store::Store::memory(store::StoreConfig::default()).expect("memory store");
        a.store_b = Some(Arc::new(Mutex::new(b)));
        for url in [
            "/api/compare?a_store=a&b_store=b",
            "/api/compare?a_store=b&b_store=b&b_from=-1h",
            "/api/compare",
        ] {
            let (s, body) = get(&a, url, None);
            assert_eq!(s, 200, "{url}: {body}");
            let v: serde_json::Value = serde_json::from_str(&body).expect("json");
            assert_eq!(v["after"]["queries"], 0, "{body}");
        }
        assert_eq!(get(&a, "/api/compare?b_store=ab", None).0, 400);
    }

    /// One host, `h1`, with an empty store.
    struct OneHost(Arc<Mutex<store::Store>>);

    impl crate::FleetView for OneHost {
        fn host_store(&self, host: &str) -> Option<Arc<Mutex<store::Store>>> {
            (host == "h1").then(|| Arc::clone(&self.0))
        }
        fn sources(&self) -> Vec<crate::Source> {
            vec![crate::Source {
                label: "h1".into(),
                from: 0,
                to: 60,
                store: None,
            }]
        }
        fn status(&self) -> serde_json::Value {
            serde_json::json!({"rows_held": 0})
        }
        fn refresh_now(&self) {}
    }

    #[test]
    fn the_host_filter_reads_the_fleet_hosts_store() {
        let plain = app(None);
        assert_eq!(get(&plain, "/api/top?host=h1", None).0, 400);
        assert_eq!(get(&plain, "/api/refresh", None).0, 404);
        let mut a = app(None);
        let st = store::Store::memory(store::StoreConfig::default()).expect("memory store");
        a.fleet = Some(Arc::new(OneHost(Arc::new(Mutex::new(st)))));
        for url in [
            "/api/top?host=h1",
            "/api/dims?host=h1",
            "/api/compare?host=h1",
        ] {
            assert_eq!(get(&a, url, None).0, 200, "{url}");
        }
        assert_eq!(get(&a, "/api/top?host=h2", None).0, 404);
        let (s, b) = get(&a, "/api/meta", None);
        assert_eq!(s, 200);
        let v: serde_json::Value = serde_json::from_str(&b).expect("json");
        assert_eq!(v["fleet"]["rows_held"], 0, "{b}");
        assert_eq!(v["sources"][0]["label"], "h1", "{b}");
        let (s, b) = get(&a, "/api/refresh", None);
        assert_eq!((s, b.as_str()), (200, "{\"rows_held\":0}\n"));
        let (_, b) = get(&a, "/api/dims", None);
        let v: serde_json::Value = serde_json::from_str(&b).expect("json");
        assert!(v["dims"]["host"].is_array(), "{b}");
    }

    #[test]
    fn the_token_guards_everything_but_assets() {
        let a = app(Some("t0k"));
        assert_eq!(get(&a, "/api/meta", None).0, 401);
        assert_eq!(get(&a, "/", None).0, 401);
        assert_eq!(get(&a, "/api/meta", Some("Bearer nope")).0, 401);
        assert_eq!(get(&a, "/api/meta?token=t0", None).0, 401);
        assert_eq!(get(&a, "/api/meta", Some("Bearer t0k")).0, 200);
        assert_eq!(get(&a, "/api/meta?token=t0k", None).0, 200);
        assert_eq!(get(&a, "/?token=t0k", None).0, 200);
        assert_eq!(get(&a, "/assets/index.html", None).0, 200);
    }
}
