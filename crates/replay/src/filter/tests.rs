//! Tests of the replay filters: classification and pairing of verdicts with requests.

use super::*;
use proptest::prelude::*;

fn redis_req(ts: u64, args: &[&str]) -> Request {
    let mut bytes = format!("*{}\r\n", args.len()).into_bytes();
    let mut ranges = Vec::new();
    for a in args {
        bytes.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        let s = bytes.len();
        bytes.extend_from_slice(a.as_bytes());
        ranges.push((s, bytes.len()));
        bytes.extend_from_slice(b"\r\n");
    }
    Request {
        ts_ns: ts,
        bytes,
        args: ranges,
        prepared_id: None,
    }
}

fn j(start_ns: u64, command: &'static str, verdict: Verdict) -> Judged {
    Judged {
        start_ns,
        command,
        verdict,
    }
}

fn names(b: &[Batch]) -> Vec<Vec<String>> {
    b.iter()
        .map(|b| {
            b.requests
                .iter()
                .map(|r| String::from_utf8_lossy(r.args().next().unwrap_or_default()).into_owned())
                .collect()
        })
        .collect()
}

#[test]
fn sql_reads_and_writes() {
    let w = |t: &str| writes(Protocol::Mysql, "query", Some(t));
    for r in [
        "SELECT 1",
        "  /* c */ select * from t for update",
        "(SELECT a FROM t) UNION (SELECT b FROM u)",
        "SHOW STATUS",
        "explain select 1",
        "-- x\nSELECT 1",
        "BEGIN",
        "START TRANSACTION",
        "COMMIT",
        "SET NAMES utf8mb4",
        "USE shop",
        "WITH a AS (SELECT 1) SELECT * FROM a",
    ] {
        assert!(!w(r), "{r} is a read");
    }
    for wr in [
        "INSERT INTO t VALUES (1)",
        "update t set a=1",
        "DELETE FROM t",
        "REPLACE INTO t VALUES (1)",
        "SELECT a INTO OUTFILE '/tmp/x' FROM t",
        "SELECT * INTO newtab FROM t",
        "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
        "SET GLOBAL max_connections = 10",
        "SET @@global.x = 1",
        "CREATE TABLE t (a int)",
        "TRUNCATE t",
        "START SLAVE",
        "LOCK TABLES t WRITE",
        "select nextval('s')",
        "EXPLAIN ANALYZE DELETE FROM t",
        "CALL p()",
        "",
    ] {
        assert!(w(wr), "{wr} is a write");
    }
    // An execute is judged by its prepared statement's SQL; unknown SQL is a write.
    assert!(!writes(Protocol::Postgres, "execute", Some("SELECT 1")));
    assert!(writes(Protocol::Postgres, "execute", None));
    assert!(!writes(
        Protocol::Postgres,
        "prepare",
        Some("INSERT INTO t VALUES ($1)")
    ));
    assert!(writes(Protocol::Postgres, "function_call", None));
    assert!(!writes(Protocol::Mysql, "prepare", Some("DELETE FROM t")));
    assert!(writes(Protocol::Mysql, "execute", Some("DELETE FROM t")));
    assert!(writes(Protocol::Mysql, "drop_db", None));
}

#[test]
fn redis_reads_and_writes() {
    let w = |c: &str, t: &str| writes(Protocol::Redis, c, Some(t));
    assert!(!w("get", "GET k"));
    assert!(!w("select", "SELECT"));
    assert!(!w("multi", "MULTI"));
    assert!(!w("config", "CONFIG GET"));
    assert!(!w("client", "CLIENT SETNAME"));
    assert!(w("config", "CONFIG SET"));
    assert!(w("client", "CLIENT KILL"));
    assert!(w("set", "SET k"));
    assert!(w("incr", "INCR k"));
    assert!(w("eval", "EVAL k"));
    assert!(w("publish", "PUBLISH"));
    assert!(w("unknown", "FOO"));
    assert!(!w("eval_ro", "EVAL_RO k"));
    let mut sorted = classify::REDIS_READS_FOR_TESTS.to_vec();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        classify::REDIS_READS_FOR_TESTS,
        "sorted for binary search"
    );
    // Every listed read is a command the pipeline knows.
    for c in classify::REDIS_READS_FOR_TESTS {
        assert!(
            proto::redis::commands::COMMANDS
                .iter()
                .any(|i| i.name == *c),
            "{c} is a Redis command"
        );
    }
}

#[test]
fn state_setters() {
    assert!(sets_state(Protocol::Mysql, "init_db", None));
    assert!(sets_state(Protocol::Mysql, "query", Some("use shop")));
    assert!(sets_state(
        Protocol::Mysql,
        "query",
        Some("SET autocommit=0")
    ));
    assert!(!sets_state(
        Protocol::Mysql,
        "query",
        Some("SET GLOBAL x=1")
    ));
    assert!(!sets_state(Protocol::Mysql, "query", Some("SELECT 1")));
    assert!(sets_state(
        Protocol::Postgres,
        "query",
        Some("SET search_path TO a")
    ));
    assert!(sets_state(Protocol::Redis, "select", Some("SELECT")));
    assert!(!sets_state(Protocol::Redis, "get", Some("GET k")));
}

#[test]
fn redis_pipeline_pairs_one_to_one() {
    // MULTI, SET, GET, EXEC in one packet; then GET alone.
    let b = vec![
        Batch {
            ts_ns: 10,
            requests: vec![
                redis_req(10, &["MULTI"]),
                redis_req(10, &["SET", "k", "v"]),
                redis_req(10, &["GET", "k"]),
                redis_req(10, &["EXEC"]),
            ],
        },
        Batch {
            ts_ns: 20,
            requests: vec![redis_req(20, &["INCR", "n"])],
        },
    ];
    let v = [
        j(10, "multi", Verdict::Keep),
        j(10, "set", Verdict::Drop(Why::ReadOnly)),
        j(10, "get", Verdict::Keep),
        j(10, "exec", Verdict::Keep),
        j(20, "incr", Verdict::Drop(Why::ReadOnly)),
    ];
    let mut sk = Skips::new();
    let out = apply(Protocol::Redis, b, &v, &mut sk);
    assert_eq!(names(&out), vec![vec!["MULTI", "GET", "EXEC"]]);
    assert_eq!(sk.get("read_only"), Some(&2));
}

#[test]
fn unpaired_events_drop_the_whole_packet() {
    // The events name other commands than the requests: any drop drops all.
    let b = vec![Batch {
        ts_ns: 10,
        requests: vec![
            redis_req(10, &["GET", "a"]),
            redis_req(10, &["SET", "b", "1"]),
        ],
    }];
    let v = [
        j(10, "set", Verdict::Drop(Why::ReadOnly)),
        j(10, "get", Verdict::Keep),
    ];
    let mut sk = Skips::new();
    let out = apply(Protocol::Redis, b, &v, &mut sk);
    assert!(out.is_empty());
    assert_eq!(sk.get("read_only"), Some(&2));
}

#[test]
fn state_is_kept_only_with_kept_requests() {
    let sel = |ts| Batch {
        ts_ns: ts,
        requests: vec![redis_req(ts, &["SELECT", "2"])],
    };
    let get = |ts| Batch {
        ts_ns: ts,
        requests: vec![redis_req(ts, &["GET", "k"])],
    };
    // Time range: SELECT before the window moves to the first kept request; a GET after the
    // window and a SELECT after the last kept request are left out.
    let b = vec![sel(1), get(2), get(5), sel(6), get(9)];
    let v = [
        j(1, "select", Verdict::State(Why::TimeRange)),
        j(2, "get", Verdict::Drop(Why::TimeRange)),
        j(5, "get", Verdict::Keep),
        j(6, "select", Verdict::State(Why::TimeRange)),
        j(9, "get", Verdict::Drop(Why::TimeRange)),
    ];
    let mut sk = Skips::new();
    let out = apply(Protocol::Redis, b.clone(), &v, &mut sk);
    assert_eq!(names(&out), vec![vec!["SELECT"], vec!["GET"]]);
    assert_eq!(out.first().map(|b| b.ts_ns), Some(5));
    assert_eq!(sk.get("time_range"), Some(&3));
    // --where: a session with nothing kept is left out whole, its SELECT too.
    let v: Vec<Judged> = v
        .iter()
        .map(|x| Judged {
            verdict: match x.verdict {
                Verdict::Keep | Verdict::Drop(_) | Verdict::End => Verdict::Drop(Why::Where),
                Verdict::State(_) => Verdict::State(Why::Where),
            },
            ..*x
        })
        .collect();
    let mut sk = Skips::new();
    assert!(apply(Protocol::Redis, b, &v, &mut sk).is_empty());
    assert_eq!(sk.get("where"), Some(&5));
}

#[test]
fn postgres_batches_go_whole() {
    let msg = |ts, t: u8| Request {
        ts_ns: ts,
        bytes: vec![t, 0, 0, 0, 4],
        args: Vec::new(),
        prepared_id: None,
    };
    let batch = |ts| Batch {
        ts_ns: ts,
        requests: vec![msg(ts, b'P'), msg(ts, b'B'), msg(ts, b'E'), msg(ts, b'S')],
    };
    let b = vec![batch(1), batch(2)];
    let v = [
        j(1, "prepare", Verdict::Keep),
        j(1, "execute", Verdict::Keep),
        j(2, "prepare", Verdict::Keep),
        j(2, "execute", Verdict::Drop(Why::ReadOnly)),
    ];
    let mut sk = Skips::new();
    let out = apply(Protocol::Postgres, b, &v, &mut sk);
    assert_eq!(out.len(), 1);
    assert_eq!(out.first().map(|b| b.requests.len()), Some(4));
    assert_eq!(sk.get("read_only"), Some(&4));
}

#[test]
fn a_session_with_only_its_end_kept_is_left_out() {
    let b = vec![
        Batch {
            ts_ns: 1,
            requests: vec![redis_req(1, &["SET", "k", "v"])],
        },
        Batch {
            ts_ns: 2,
            requests: vec![redis_req(2, &["QUIT"])],
        },
    ];
    let v = [
        j(1, "set", Verdict::Drop(Why::ReadOnly)),
        j(2, "quit", Verdict::End),
    ];
    let mut sk = Skips::new();
    assert!(apply(Protocol::Redis, b.clone(), &v, &mut sk).is_empty());
    assert_eq!(sk.get("read_only"), Some(&2));
    let v = [j(1, "set", Verdict::Keep), j(2, "quit", Verdict::End)];
    let mut sk = Skips::new();
    assert_eq!(apply(Protocol::Redis, b, &v, &mut sk).len(), 2);
}

#[test]
fn copy_data_goes_with_its_copy() {
    let msg = |ts, t: u8| Request {
        ts_ns: ts,
        bytes: vec![t, 0, 0, 0, 4],
        args: Vec::new(),
        prepared_id: None,
    };
    let one = |ts, ts2| {
        vec![
            Batch {
                ts_ns: ts,
                requests: vec![msg(ts, b'Q')],
            },
            Batch {
                ts_ns: ts2,
                requests: vec![msg(ts2, b'd'), msg(ts2, b'c')],
            },
        ]
    };
    let b = [one(1, 2), one(3, 4)].concat();
    let v = [
        j(1, "query", Verdict::Drop(Why::ReadOnly)),
        j(3, "query", Verdict::Keep),
    ];
    let mut sk = Skips::new();
    let out = apply(Protocol::Postgres, b, &v, &mut sk);
    assert_eq!(out.iter().map(|b| b.ts_ns).collect::<Vec<_>>(), vec![3, 4]);
    assert_eq!(sk.get("read_only"), Some(&3));
}

proptest! {
    #[test]
    fn classification_never_panics(t in "\\PC{0,60}", c in "[a-z_]{0,12}") {
        for p in [Protocol::Mysql, Protocol::Postgres, Protocol::Redis, Protocol::Mongodb] {
            let _ = writes(p, &c, Some(&t));
            let _ = sets_state(p, &c, Some(&t));
        }
        let _ = classify::first_word(&t);
    }

    /// Whatever the verdicts, a dropped request is never sent, every request is either kept
    /// or counted, and the order of what is kept is the captured order.
    #[test]
    fn apply_keeps_or_counts(
        reqs in proptest::collection::vec((0u64..6, 0usize..3), 0..20),
        vs in proptest::collection::vec((0u64..6, 0usize..3, 0u8..3), 0..20),
    ) {
        const CMDS: [&str; 3] = ["get", "set", "select"];
        let mut ts_sorted = reqs.clone();
        ts_sorted.sort_by_key(|r| r.0);
        let batches: Vec<Batch> = ts_sorted
            .iter()
            .enumerate()
            .map(|(i, (ts, c))| Batch {
                ts_ns: *ts,
                requests: vec![redis_req(*ts, &[CMDS[*c], &i.to_string()])],
            })
            .collect();
        let judged: Vec<Judged> = vs
            .iter()
            .map(|(ts, c, v)| j(*ts, CMDS[*c], match v {
                0 => Verdict::Keep,
                1 => Verdict::State(Why::Where),
                _ => Verdict::Drop(Why::ReadOnly),
            }))
            .collect();
        let mut sk = Skips::new();
        let out = apply(Protocol::Redis, batches, &judged, &mut sk);
        let kept: Vec<usize> = out
            .iter()
            .flat_map(|b| b.requests.iter())
            .map(|r| String::from_utf8_lossy(r.args().nth(1).unwrap_or_default()).parse().unwrap_or(0))
            .collect();
        let counted: u64 = sk.values().sum();
        prop_assert_eq!(kept.len() as u64 + counted, reqs.len() as u64);
        prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
        // A request at a time with a drop verdict and no one-to-one pairing is never kept.
        for i in &kept {
            let ts = ts_sorted[*i].0;
            let at: Vec<&Judged> = judged.iter().filter(|x| x.start_ns == ts).collect();
            let n = ts_sorted.iter().filter(|r| r.0 == ts).count();
            if at.len() != n {
                prop_assert!(at.iter().all(|x| !matches!(x.verdict, Verdict::Drop(_))));
            }
        }
    }
}
