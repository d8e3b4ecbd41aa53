//! Unix-socket endpoints and the client process as dimensions: grouping by process and by a
//! server that is a socket path, the shares panel, `--where process=`/`server=/path`/
//! `client=local`, and what a group's statistics keep of them.

use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, Dim, DimSet, Filter, GroupKey, Host, Stats};
use proto::{Endpoint, Process, Protocol, QueryEvent};

const SOCK: &str = "/run/mysqld/mysqld.sock";

fn ev(server: Endpoint, client: Endpoint, comm: Option<&str>, pid: u32) -> QueryEvent {
    QueryEvent {
        conn: u64::from(pid),
        client,
        server,
        peer: comm.map(|c| {
            Arc::new(Process {
                pid,
                comm: Arc::from(c),
            })
        }),
        ..proto::testing::event(Protocol::Mysql, "query", 1_000, Some(2_000))
    }
}

/// A Unix-socket connection (the client end unbound) from process `comm`.
fn unix(comm: Option<&str>, pid: u32) -> QueryEvent {
    ev(Endpoint::unix(SOCK), Endpoint::unix(""), comm, pid)
}

/// A TCP connection from 10.0.0.20 to 10.0.0.5:3306.
fn tcp(comm: Option<&str>, pid: u32) -> QueryEvent {
    let server = "10.0.0.5:3306".parse().expect("addr");
    ev(server, "10.0.0.20:5000".parse().expect("addr"), comm, pid)
}

fn add(agg: &mut Aggregator, dims: DimSet, ev: &QueryEvent) {
    let key = GroupKey {
        protocol: ev.protocol,
        command: ev.command,
        fingerprint_hash: dims.group_hash(ev, 42),
    };
    agg.add_with_dims(ev, key, || {
        let v = dims.values(ev);
        let label = v.label();
        (label.clone(), label, dims.has_extra().then(|| Box::new(v)))
    });
}

fn groups(agg: &Aggregator) -> Vec<(String, u64)> {
    let mut got: Vec<(String, u64)> = agg
        .groups()
        .map(|g| (g.dims.as_ref().expect("dims").label(), g.stats.count))
        .collect();
    got.sort();
    got
}

fn share_values(agg: &Aggregator, d: Dim) -> Vec<(String, u64)> {
    let s = agg.totals().dims.of(d).expect("a panel dimension");
    s.values.iter().map(|(v, s)| (v.clone(), s.count)).collect()
}

#[test]
fn process_dimension_names() {
    for n in ["process", "proc", "COMM", " Process "] {
        assert_eq!(Dim::parse(n), Some(Dim::Process), "{n}");
    }
    assert_eq!(Dim::Process.name(), "process");
    // Canonical order: after the client host, before protocol and command.
    let s = DimSet::parse_list("command,process,client,fingerprint").unwrap();
    assert_eq!(s.names(), "fingerprint,client,process,command");
    assert!(s.has_extra() && s.contains(Dim::Process));
    assert!(DimSet::parse_list("procs").unwrap_err().contains("process"));
}

#[test]
fn group_by_process_is_the_command_name() {
    let dims = DimSet::parse_list("process").unwrap();
    let mut agg = Aggregator::new(AggConfig::default());
    // Two psql processes (two pids: one group), php-fpm, and a client whose process is unknown.
    for e in [
        unix(Some("psql"), 1),
        unix(Some("psql"), 2),
        tcp(Some("php-fpm"), 3),
        tcp(None, 4),
    ] {
        add(&mut agg, dims, &e);
    }
    assert_eq!(
        groups(&agg),
        vec![
            ("process=(unknown)".to_string(), 1),
            ("process=php-fpm".to_string(), 1),
            ("process=psql".to_string(), 2),
        ]
    );
    // Equal service times: by count, then by value.
    assert_eq!(
        share_values(&agg, Dim::Process),
        vec![
            ("psql".to_string(), 2),
            ("(unknown)".to_string(), 1),
            ("php-fpm".to_string(), 1)
        ]
    );
    // The process is hashed by its name only: another pid, the same group.
    assert_eq!(
        dims.group_hash(&unix(Some("psql"), 1), 7),
        dims.group_hash(&unix(Some("psql"), 9), 7)
    );
    assert_ne!(
        dims.group_hash(&unix(Some("psql"), 1), 7),
        dims.group_hash(&unix(None, 1), 7)
    );
}

#[test]
fn group_by_server_and_client_with_a_unix_socket() {
    let dims = DimSet::parse_list("server,client").unwrap();
    let mut agg = Aggregator::new(AggConfig::default());
    for e in [
        unix(None, 1),
        unix(Some("psql"), 2),
        tcp(None, 3),
        unix(None, 4),
    ] {
        add(&mut agg, dims, &e);
    }
    assert_eq!(
        groups(&agg),
        vec![
            ("server=/run/mysqld/mysqld.sock client=local".to_string(), 3),
            ("server=10.0.0.5:3306 client=10.0.0.20".to_string(), 1),
        ]
    );
    let g = agg
        .groups()
        .find(|g| g.stats.count == 3)
        .and_then(|g| g.dims.as_ref())
        .expect("the socket's group");
    assert_eq!(g.server, Some(Endpoint::unix(SOCK)));
    assert_eq!(g.client, Some(Host::Local));
    assert_eq!(g.process, None, "not grouped by process");
    assert_eq!(
        share_values(&agg, Dim::Server),
        vec![(SOCK.to_string(), 3), ("10.0.0.5:3306".to_string(), 1)]
    );
    assert_eq!(
        share_values(&agg, Dim::Client),
        vec![("local".to_string(), 3), ("10.0.0.20".to_string(), 1)]
    );
    assert_eq!(
        share_values(&agg, Dim::Process),
        vec![("(unknown)".to_string(), 3), ("psql".to_string(), 1)]
    );
}

#[test]
fn shares_follow_the_process_within_one_connection() {
    // The last-hit cache must not put a second process's events on the first one's
    // combination (same connection number and endpoints, another peer).
    let mut agg = Aggregator::new(AggConfig::default());
    for comm in ["a", "a", "b", "b", "a"] {
        let mut e = unix(Some(comm), 1);
        e.conn = 1;
        add(&mut agg, DimSet::default(), &e);
    }
    assert_eq!(
        share_values(&agg, Dim::Process),
        vec![("a".to_string(), 3), ("b".to_string(), 2)]
    );
}

fn admits(exprs: &[&str], e: &QueryEvent) -> bool {
    Filter::parse(exprs).expect("valid").admits(e, 1, "x")
}

#[test]
fn where_process() {
    let (psql, php, unknown) = (unix(Some("psql"), 1), tcp(Some("php-fpm"), 2), tcp(None, 3));
    assert!(admits(&["process=psql"], &psql));
    assert!(!admits(&["process=psql"], &php));
    assert!(!admits(&["process=psql"], &unknown));
    assert!(admits(&["process!=psql"], &php) && admits(&["process!=psql"], &unknown));
    assert!(admits(&["comm="], &unknown), "empty: process not known");
    assert!(!admits(&["comm="], &psql));
    assert!(admits(&["proc~^php"], &php));
    assert!(
        !admits(&["proc~."], &unknown),
        "a regex never matches unknown"
    );
}

#[test]
fn where_unix_server_and_local_client() {
    let (u, t) = (unix(None, 1), tcp(None, 2));
    for (e, on_unix, on_tcp) in [
        ("server=/run/mysqld/mysqld.sock", true, false),
        ("server!=/run/mysqld/mysqld.sock", false, true),
        ("server=/run/mysqld/other.sock", false, false),
        ("server=10.0.0.5", false, true),
        ("server=:3306", false, true),
        ("server~mysqld\\.sock$", true, false),
        ("client=local", true, false),
        ("client=LOCAL", true, false),
        ("client!=local", false, true),
        ("client=10.0.0.20", false, true),
        ("client~^local$", true, false),
    ] {
        assert_eq!(admits(&[e], &u), on_unix, "{e} on the socket");
        assert_eq!(admits(&[e], &t), on_tcp, "{e} on TCP");
    }
    // One filter over both (its verdicts cached per address).
    let mut f = Filter::parse(&["client~^l", "server~sock"]).unwrap();
    let got: Vec<bool> = [&u, &t, &u, &t]
        .iter()
        .map(|e| f.admits(e, 1, "x"))
        .collect();
    assert_eq!(got, [true, false, true, false]);
    for bad in ["server=run/mysqld.sock", "client=somehost"] {
        let err = Filter::parse(&[bad]).unwrap_err();
        assert!(!err.contains('\n') && err.contains(bad), "{err}");
    }
}

#[test]
fn stats_keep_the_local_host_and_the_example_process() {
    let mut s = Stats::default();
    s.record(&unix(Some("psql"), 4242), true);
    s.record(&tcp(None, 2), true);
    let hosts: Vec<String> = s
        .clients
        .sorted()
        .iter()
        .map(|(h, _)| h.to_string())
        .collect();
    assert_eq!(hosts, ["10.0.0.20", "local"]);
    let ex = s.example.expect("an example");
    // Equal latencies and starts: the lower client endpoint wins (IP before a socket).
    assert_eq!(ex.client.to_string(), "10.0.0.20:5000");
    let mut s = Stats::default();
    s.record(&unix(Some("psql"), 4242), true);
    let ex = s.example.expect("an example");
    assert_eq!(
        (ex.client.to_string(), ex.server.to_string()),
        ("unix".into(), SOCK.into())
    );
    assert_eq!(
        ex.peer.as_deref().map(|p| (p.pid, &*p.comm)),
        Some((4242, "psql"))
    );
}
