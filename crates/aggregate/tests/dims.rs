//! Dimension tests: `--where` parsing and evaluation (never panics), grouping by dimensions
//! (merges exactly, partitions the fingerprint groups), and the per-dimension shares.

use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, Dim, DimSet, Filter, GroupKey, Host};
use proptest::prelude::*;
use proto::{Endpoint, Outcome, Protocol, QueryEvent};

fn event(server: &str, client: &str, db: Option<&str>, user: Option<&str>, lat: u64) -> QueryEvent {
    let addr = |s: &str| s.parse::<Endpoint>().expect("test address");
    QueryEvent {
        protocol: Protocol::Redis,
        conn: 1,
        client: addr(client),
        server: addr(server),
        start_ns: 1_000,
        first_response_ns: Some(1_000 + lat / 2),
        end_ns: Some(1_000 + lat),
        service_start_ns: Some(1_000),
        user: user.map(Arc::from),
        database: db.map(Arc::from),
        command: "config",
        text: Some(Arc::from("CONFIG GET maxmemory")),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 10,
        bytes_out: 100,
        rows_sent: 1,
        rows_affected: 0,
        warnings: 0,
        outcome: Outcome::Ok,
        error: None,
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

fn filter(exprs: &[&str]) -> Filter {
    Filter::parse(exprs).expect("valid filter")
}

fn admits(f: &[&str], ev: &QueryEvent, fp: &str) -> bool {
    filter(f).admits(ev, fingerprint_hash(fp), fp)
}

fn fingerprint_hash(fp: &str) -> u64 {
    fp.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn where_equality_and_negation() {
    let ev = event(
        "10.0.0.5:3306",
        "10.0.0.20:5000",
        Some("shop"),
        Some("app"),
        100,
    );
    assert!(admits(&["db=shop"], &ev, "select ?"));
    assert!(!admits(&["db=other"], &ev, "select ?"));
    assert!(admits(&["db!=other"], &ev, "select ?"));
    assert!(admits(&["user!=monitor", "db=shop"], &ev, "select ?"));
    assert!(!admits(&["user=monitor", "db=shop"], &ev, "select ?"));
    assert!(admits(&[" database = shop "], &ev, "select ?"));
    assert!(admits(&["command=config", "protocol=redis"], &ev, "x"));
    assert!(!admits(&["protocol=mysql"], &ev, "x"));
    assert!(admits(&["client=10.0.0.20"], &ev, "x"));
    assert!(!admits(&["client!=10.0.0.20"], &ev, "x"));
}

#[test]
fn where_server_forms() {
    let ev = event("10.0.0.5:3306", "10.0.0.20:5000", None, None, 100);
    for (e, want) in [
        ("server=10.0.0.5:3306", true),
        ("server=10.0.0.5:3307", false),
        ("server=10.0.0.5", true),
        ("server=10.0.0.6", false),
        ("server=:3306", true),
        ("server=:6379", false),
        ("server!=:6379", true),
        ("server~^10\\.0\\.0\\.5:", true),
        ("server!~:3306$", false),
    ] {
        assert_eq!(admits(&[e], &ev, "x"), want, "{e}");
    }
    // One filter over events of two servers and two clients (verdicts cached per address).
    let other = event("10.0.0.6:3306", "10.0.0.21:5000", None, None, 100);
    let mut f = filter(&["server~^10\\.0\\.0\\.5:", "client!~\\.21$"]);
    let verdicts: Vec<bool> = [&ev, &other, &ev, &other]
        .iter()
        .map(|e| f.admits(e, 1, "x"))
        .collect();
    assert_eq!(verdicts, [true, false, true, false]);
    let crossed = event("10.0.0.5:3306", "10.0.0.21:5000", None, None, 100);
    assert!(!f.admits(&crossed, 1, "x"));
    // IPv4-mapped IPv6 is the same host.
    let v6 = event("[::ffff:10.0.0.5]:3306", "[::1]:5000", None, None, 1);
    assert!(admits(&["server=10.0.0.5"], &v6, "x"));
}

#[test]
fn where_unknown_values() {
    let ev = event("10.0.0.5:3306", "10.0.0.20:5000", None, None, 100);
    assert!(!admits(&["db=shop"], &ev, "x"));
    assert!(admits(&["db!=shop"], &ev, "x"));
    assert!(admits(&["db="], &ev, "x"), "empty value: unknown database");
    assert!(
        !admits(&["db~."], &ev, "x"),
        "a regex never matches unknown"
    );
    assert!(admits(&["user!~."], &ev, "x"));
}

#[test]
fn where_fingerprint_regex_cached_per_hash() {
    let ev = event("10.0.0.5:3306", "10.0.0.20:5000", None, None, 100);
    let mut f = filter(&["fingerprint~^select"]);
    assert!(f.admits(&ev, 1, "select * from t"));
    assert!(!f.admits(&ev, 2, "update t set a = ?"));
    // The verdict of a hash is cached: the text is not looked at again.
    assert!(f.admits(&ev, 1, "update t set a = ?"));
    assert!(filter(&["fingerprint=select ?"]).admits(&ev, 3, "select ?"));
    assert!(filter(&["fingerprint!~(?i)^SELECT"]).admits(&ev, 4, "insert"));
    assert_eq!(
        filter(&["db=shop", "fingerprint~^select"]).describe(),
        "db=shop AND fingerprint~^select"
    );
}

#[test]
fn where_errors_are_one_line() {
    for bad in [
        "",
        "db",
        "=shop",
        "dbx=shop",
        "db>shop",
        "server=10.0.0.5:99999",
        "server=nohost",
        "client=10.0.0.300",
        "protocol=oracle",
        "fingerprint~(",
        "user~[",
        "db!shop",
    ] {
        let e = Filter::parse(&[bad]).expect_err(bad);
        assert!(!e.contains('\n'), "{bad}: {e}");
        assert!(e.starts_with("bad --where"), "{bad}: {e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Any string parses or errs on one line; a parsed filter evaluates without panicking.
    #[test]
    fn where_never_panics(s in ".{0,40}", t in "(server|db|user|client|protocol|command|fingerprint)(=|!=|~|!~)[ -~]{0,20}") {
        let ev = event("10.0.0.5:3306", "10.0.0.20:5000", Some("shop"), None, 7);
        for e in [s.as_str(), t.as_str()] {
            match Filter::parse(&[e]) {
                Ok(mut f) => {
                    let _ = f.admits(&ev, 9, &s);
                }
                Err(m) => prop_assert!(!m.contains('\n'), "{}", m),
            }
        }
    }
}

#[test]
fn group_by_lists() {
    assert_eq!(DimSet::parse_list("db,user").unwrap().names(), "db,user");
    assert!(
        DimSet::parse_list("server,fingerprint")
            .unwrap()
            .contains(Dim::Server)
    );
    assert!(DimSet::parse_list("nope").is_err());
}

fn add(agg: &mut Aggregator, dims: DimSet, ev: &QueryEvent) {
    let fp = 42;
    let key = GroupKey {
        protocol: ev.protocol,
        command: ev.command,
        fingerprint_hash: dims.group_hash(ev, fp),
    };
    agg.add_with_dims(ev, key, || {
        let v = dims.values(ev);
        let label = v.label();
        (label.clone(), label, dims.has_extra().then(|| Box::new(v)))
    });
}

fn arb_ev() -> impl Strategy<Value = QueryEvent> {
    (0usize..3, 0usize..3, 0usize..3, 0usize..2, 1u64..1_000_000).prop_map(|(s, c, d, u, lat)| {
        let servers = ["127.0.0.1:38110", "127.0.0.1:38111", "[::1]:38110"];
        let clients = ["127.0.0.1:50000", "127.0.0.2:50001", "127.0.0.1:50002"];
        let dbs = [Some("a"), Some("b"), None];
        let users = [Some("u"), None];
        event(servers[s], clients[c], dbs[d], users[u], lat)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Grouped by dimensions: merging two halves equals adding all; the groups partition the
    /// events of the single fingerprint group exactly; each group holds one value per
    /// dimension; the shares of each dimension add up to the totals.
    #[test]
    fn grouping_by_dims_merges_exactly(events in prop::collection::vec(arb_ev(), 0..200), split in 0usize..200, which in 0usize..4) {
        let dims = ["server,fingerprint", "db,user", "client", "server,db,user,client,fingerprint"][which];
        let dims = DimSet::parse_list(dims).unwrap();
        let split = split.min(events.len());
        let cfg = AggConfig { max_groups: 1000, keep_examples: true };
        let (mut all, mut a, mut b, mut plain) = (
            Aggregator::new(cfg.clone()), Aggregator::new(cfg.clone()),
            Aggregator::new(cfg.clone()), Aggregator::new(cfg.clone()));
        for (i, e) in events.iter().enumerate() {
            add(&mut all, dims, e);
            add(if i < split { &mut a } else { &mut b }, dims, e);
            add(&mut plain, DimSet::default(), e);
        }
        a.merge(&b);
        let snap = |x: &Aggregator| {
            let mut v: Vec<_> = x.groups().map(|g| (g.key, g.fingerprint.clone(), g.stats.count, g.stats.service.sum_ns(), g.dims.clone())).collect();
            v.sort_by_key(|t| t.0);
            v
        };
        prop_assert_eq!(snap(&a), snap(&all));
        prop_assert_eq!(a.totals(), all.totals());
        let counts: u64 = all.groups().map(|g| g.stats.count).sum();
        prop_assert_eq!(counts, plain.totals().stats.count);
        prop_assert_eq!(plain.groups().count(), usize::from(!events.is_empty()));
        for g in all.groups() {
            let v = g.dims.as_ref().expect("dims");
            if dims.contains(Dim::Server) {
                prop_assert_eq!(g.stats.count, events.iter().filter(|e| Some(&e.server) == v.server.as_ref() && (!dims.contains(Dim::Db) || e.database == v.database) && (!dims.contains(Dim::User) || e.user == v.user) && (!dims.contains(Dim::Client) || Some(Host::of(&e.client)) == v.client)).count() as u64);
            }
        }
        for d in [Dim::Server, Dim::Db, Dim::User, Dim::Client, Dim::Protocol] {
            let s = all.totals().dims.of(d).expect("panel dimension");
            let n: u64 = s.values.iter().map(|v| v.1.count).sum::<u64>() + s.other.count;
            prop_assert_eq!(n, events.len() as u64);
            let t: u128 = s.values.iter().map(|v| v.1.service_ns).sum::<u128>() + s.other.service_ns;
            prop_assert_eq!(t, all.totals().stats.service.sum_ns());
        }
    }
}

#[test]
fn two_servers_two_groups() {
    let dims = DimSet::parse_list("server,fingerprint").unwrap();
    let mut agg = Aggregator::new(AggConfig::default());
    for s in ["127.0.0.1:38110", "127.0.0.1:38111", "127.0.0.1:38110"] {
        add(&mut agg, dims, &event(s, "127.0.0.1:5000", None, None, 10));
    }
    let mut got: Vec<(String, u64)> = agg
        .groups()
        .map(|g| (g.dims.as_ref().unwrap().label(), g.stats.count))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("server=127.0.0.1:38110".to_string(), 2),
            ("server=127.0.0.1:38111".to_string(), 1)
        ]
    );
    let shares = agg.totals().dims.of(Dim::Server).unwrap();
    assert_eq!(shares.values[0].0, "127.0.0.1:38110");
    assert_eq!(shares.values[0].1.count, 2);
    // The default grouping keeps the fingerprint hash as it was.
    let ev = event("127.0.0.1:38110", "127.0.0.1:5000", None, None, 10);
    assert_eq!(DimSet::default().group_hash(&ev, 42), 42);
    assert_ne!(dims.group_hash(&ev, 42), 42);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    /// The load shares count each event under its own values, however the events of one
    /// combination are spread over connections and allocations (runs of one combination
    /// skip the lookup after comparing values; a change of any value must not).
    #[test]
    fn shares_count_each_event_under_its_values(
        events in prop::collection::vec((arb_ev(), 0u64..3, any::<bool>()), 0..120),
    ) {
        let mut shares = aggregate::DimShares::default();
        let mut prev: Option<QueryEvent> = None;
        let mut seen = Vec::new();
        for (e, conn, reuse) in events {
            let mut e = QueryEvent { conn, ..e };
            // Sometimes the previous event's very allocations, as one connection's events have.
            if let Some(p) = prev.as_ref().filter(|p| reuse && p.database == e.database && p.user == e.user) {
                e.database = p.database.clone();
                e.user = p.user.clone();
            }
            shares.record(&e);
            prev = Some(e.clone());
            seen.push(e);
        }
        let name = |v: &Option<Arc<str>>| v.as_deref().unwrap_or(aggregate::dims::UNKNOWN).to_string();
        for (dim, value) in [
            (Dim::Db, Box::new(|e: &QueryEvent| name(&e.database)) as Box<dyn Fn(&QueryEvent) -> String>),
            (Dim::User, Box::new(|e: &QueryEvent| name(&e.user))),
            (Dim::Server, Box::new(|e: &QueryEvent| e.server.to_string())),
            (Dim::Client, Box::new(|e: &QueryEvent| Host::of(&e.client).to_string())),
        ] {
            let s = shares.of(dim).expect("panel dimension");
            for (v, share) in &s.values {
                let n = seen.iter().filter(|e| value(e) == *v).count() as u64;
                prop_assert_eq!(share.count, n, "{:?} {}", dim, v);
            }
            let total: u64 = s.values.iter().map(|v| v.1.count).sum();
            prop_assert_eq!(total, seen.len() as u64);
        }
    }
}
