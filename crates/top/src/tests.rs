//! Screen tests: synthetic events, rendered with ratatui's `TestBackend`, asserted on the text.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;

use aggregate::{AggConfig, Aggregator, GroupKey};
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use proptest::prelude::*;
use proto::{DbError, Outcome, Protocol, QueryEvent};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::{Frame, SortBy, View, draw, on_key};

/// One synthetic query: fingerprint, latency, error code, user, client host byte.
#[derive(Clone, Debug)]
struct Q {
    fp: String,
    lat_ns: u64,
    err: Option<u32>,
    user: &'static str,
    host: u8,
}

fn q(fp: &str, lat_ns: u64) -> Q {
    Q {
        fp: fp.to_string(),
        lat_ns,
        err: None,
        user: "app",
        host: 1,
    }
}

fn event(x: &Q, start_ns: u64) -> QueryEvent {
    QueryEvent {
        protocol: Protocol::Mysql,
        conn: 1,
        client: SocketAddr::from(([10, 0, 0, x.host], 40000)).into(),
        server: SocketAddr::from(([10, 0, 0, 9], 3306)).into(),
        start_ns,
        first_response_ns: Some(start_ns + x.lat_ns / 2),
        end_ns: Some(start_ns + x.lat_ns),
        service_start_ns: Some(start_ns),
        user: Some(Arc::from(x.user)),
        database: Some(Arc::from("shop")),
        command: "query",
        text: Some(Arc::from(x.fp.as_str())),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 10,
        bytes_out: 100,
        rows_sent: 1,
        rows_affected: 0,
        // The "report" user's queries warn (shown in the detail pane).
        warnings: if x.user == "report" { 3 } else { 0 },
        outcome: if x.err.is_some() {
            Outcome::Error
        } else {
            Outcome::Ok
        },
        error: x.err.map(|code| DbError {
            code,
            state: Some("42S02".into()),
            message: "Table 'shop.nope' doesn't exist".into(),
        }),
        timed: true,
        txn: None,
        index: Default::default(),
        params: None,
        peer: None,
    }
}

fn hash(s: &str) -> u64 {
    let mut h = DefaultHasher::new();
    s.hash(&mut h);
    h.finish()
}

fn id_of(fp: &str) -> String {
    format!("{:016X}", hash(fp))
}

fn agg_with(max_groups: usize, qs: &[Q]) -> Aggregator {
    let mut a = Aggregator::new(AggConfig {
        max_groups,
        keep_examples: true,
    });
    for (i, x) in qs.iter().enumerate() {
        let key = GroupKey {
            protocol: Protocol::Mysql,
            command: "query",
            fingerprint_hash: hash(&x.fp),
        };
        a.add(&event(x, 1_000_000_000 * i as u64), key, || {
            (x.fp.clone(), id_of(&x.fp))
        });
    }
    a
}

fn agg(qs: &[Q]) -> Aggregator {
    agg_with(10_000, qs)
}

fn frame(window: Aggregator, total: Aggregator) -> Frame {
    Frame {
        header: "dbtap top - lo - up 00:01:40".to_string(),
        status: "12,345 pkt/s  drops 0  conns 3".to_string(),
        window,
        window_secs: 1.0,
        total,
        total_secs: 100.0,
    }
}

fn view_of(window: Aggregator, total: Aggregator, sort: SortBy) -> View {
    let mut v = View::new(sort);
    v.set_frame(frame(window, total));
    v
}

fn screen(view: &View, w: u16, h: u16) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| draw(f, view)).expect("draw");
    let buf = t.backend().buffer();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
        .collect()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn line_of(lines: &[String], needle: &str) -> Option<usize> {
    lines.iter().position(|l| l.contains(needle))
}

fn has(lines: &[String], needle: &str) -> bool {
    line_of(lines, needle).is_some()
}

/// A: 10 x 1ms (total 10ms); B: 2 x 50ms (100ms, p99 50ms); C: 5 x 3ms, all errors (15ms).
fn abc() -> Vec<Q> {
    let mut v = Vec::new();
    for _ in 0..10 {
        v.push(q("SELECT alpha", 1_000_000));
    }
    for _ in 0..2 {
        v.push(q("SELECT bravo", 50_000_000));
    }
    for _ in 0..5 {
        v.push(Q {
            err: Some(1146),
            ..q("SELECT charlie", 3_000_000)
        });
    }
    v
}

fn order(lines: &[String]) -> Vec<&'static str> {
    let mut found: Vec<(usize, &'static str)> = ["alpha", "bravo", "charlie"]
        .into_iter()
        .filter_map(|n| line_of(lines, &format!("SELECT {n}")).map(|i| (i, n)))
        .collect();
    found.sort();
    found.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn rows_sorted_for_each_sort_and_marker_on_its_column() {
    let cases = [
        (
            SortBy::Total,
            ["bravo", "charlie", "alpha"],
            "Total▼",
            "total time",
        ),
        (
            SortBy::Count,
            ["alpha", "charlie", "bravo"],
            "Count▼",
            "count",
        ),
        (SortBy::P99, ["bravo", "charlie", "alpha"], "p99▼", "p99"),
        // alpha and bravo have no errors: the tie goes to the larger total time.
        (
            SortBy::Errors,
            ["charlie", "bravo", "alpha"],
            "Errs▼",
            "errors",
        ),
    ];
    for (w, h) in [(80, 24), (200, 50)] {
        for (sort, want, mark, words) in cases {
            let v = view_of(agg(&abc()), agg(&abc()), sort);
            let s = screen(&v, w, h);
            assert_eq!(order(&s), want, "{sort:?} at {w}x{h}:\n{}", s.join("\n"));
            let head = line_of(&s, "Fingerprint").expect("table header");
            assert!(s[head].contains(mark), "{sort:?}: {}", s[head]);
            assert_eq!(s[head].matches('▼').count(), 1, "{}", s[head]);
            assert!(has(&s, &format!("Sorted by: {words}")), "{}", s.join("\n"));
            assert!(has(&s, "Window: last 1s"));
        }
    }
}

#[test]
fn sort_keys_reorder_the_table() {
    let mut v = view_of(agg(&abc()), agg(&abc()), SortBy::Total);
    for (c, want) in [
        ('c', ["alpha", "charlie", "bravo"]),
        ('p', ["bravo", "charlie", "alpha"]),
        ('e', ["charlie", "bravo", "alpha"]),
        ('t', ["bravo", "charlie", "alpha"]),
    ] {
        assert!(!on_key(&mut v, key(KeyCode::Char(c))));
        assert_eq!(order(&screen(&v, 80, 24)), want, "after {c}");
    }
}

#[test]
fn header_status_totals_and_row_values() {
    let v = view_of(agg(&abc()), agg(&abc()), SortBy::Total);
    let s = screen(&v, 200, 50);
    assert!(s[0].starts_with("dbtap top - lo - up 00:01:40"));
    assert!(s[1].starts_with("12,345 pkt/s  drops 0  conns 3"));
    // 17 queries in 1s, 5 errors, 125ms / 17 = 7.35ms average, p99 = 50ms.
    assert!(
        s[2].starts_with("Queries/s 17  errors 5 (29.4%)  avg 7.35ms  p99 50.0ms  groups 3"),
        "{}",
        s[2]
    );
    for col in [
        "#",
        "QPS",
        "Count",
        "Errs",
        "Total▼",
        "Avg",
        "p50",
        "p95",
        "p99",
        "Max",
        "Cmd",
        "Fingerprint",
    ] {
        assert!(has(&s, col), "column {col} missing at 200 wide");
    }
    assert!(has(&s, "Resp"), "column Resp missing at 200 wide");
    assert!(
        has(&s, "times are service times; Resp: avg response time"),
        "{}",
        s.join("\n")
    );
    let b = line_of(&s, "SELECT bravo").expect("bravo row");
    // rank 1, 2 qps, count 2, 0 errors, 100ms = 80% of 125ms, avg/p50/p95/p99/max 50ms,
    // average response 50ms.
    let cells: Vec<&str> = s[b].split_whitespace().collect();
    assert_eq!(
        cells[..14],
        [
            "1",
            "2",
            "2",
            "0",
            "100ms",
            "80%",
            "50.0ms",
            "50.0ms",
            "50.0ms",
            "50.0ms",
            "50.0ms",
            "50.0ms",
            "mysql/query",
            "SELECT"
        ],
        "{}",
        s[b]
    );
}

#[test]
fn narrow_screens_drop_columns_not_the_sort_column() {
    let v = view_of(agg(&abc()), agg(&abc()), SortBy::Total);
    let s = screen(&v, 80, 24);
    let head = &s[line_of(&s, "Fingerprint").expect("header")];
    for col in ["#", "QPS", "Count", "Errs", "Total▼", "p99", "Cmd"] {
        assert!(head.contains(col), "{col} missing at 80: {head}");
    }
    for col in ["p50", "p95", "Max", "Avg"] {
        assert!(!head.contains(col), "{col} should be dropped at 80: {head}");
    }
    // At 40 columns, sorting by p99 keeps p99 (and the fingerprint, at least partly).
    let v = view_of(agg(&abc()), agg(&abc()), SortBy::P99);
    let s = screen(&v, 40, 24);
    let head = &s[line_of(&s, "p99▼").expect("p99 header")];
    assert!(head.starts_with(" #"), "{head}");
    assert!(has(&s, "SELECT"), "{}", s.join("\n"));
}

#[test]
fn window_toggle_switches_aggregator_and_label() {
    let window = agg(&[q("SELECT recent", 1_000_000)]);
    let mut all = abc();
    all.push(q("SELECT recent", 1_000_000));
    let mut v = view_of(window, agg(&all), SortBy::Count);
    let s = screen(&v, 80, 24);
    assert!(has(&s, "Window: last 1s"));
    assert!(has(&s, "SELECT recent"));
    assert!(!has(&s, "SELECT alpha"));
    assert!(!on_key(&mut v, key(KeyCode::Char('w'))));
    assert!(v.since_start);
    let s = screen(&v, 80, 24);
    assert!(has(&s, "Window: since start"), "{}", s.join("\n"));
    assert_eq!(order(&s), ["alpha", "charlie", "bravo"]);
    // 18 queries over 100 s.
    assert!(s[2].starts_with("Queries/s 0.18  errors 5"), "{}", s[2]);
    on_key(&mut v, key(KeyCode::Char('w')));
    assert!(has(&screen(&v, 80, 24), "Window: last 1s"));
}

#[test]
fn window_label_follows_interval_length() {
    let mut v = View::new(SortBy::Total);
    v.set_frame(Frame {
        window_secs: 2.0,
        ..frame(agg(&abc()), agg(&abc()))
    });
    assert!(has(&screen(&v, 80, 24), "Window: last 2s"));
}

#[test]
fn overflow_group_is_shown_as_other() {
    let qs = abc();
    let v = view_of(agg_with(2, &qs), agg_with(2, &qs), SortBy::Count);
    let s = screen(&v, 80, 24);
    // alpha and bravo are tracked; charlie's 5 events went to the overflow group.
    let o = line_of(&s, "other (groups past").expect("other row");
    assert!(s[o].contains(" other "), "{}", s[o]);
    assert!(!has(&s, "charlie"));
    assert!(s[2].contains("groups 2 + other"), "{}", s[2]);
    assert_eq!(order(&s), ["alpha", "bravo"]);
    assert!(o > line_of(&s, "SELECT alpha").unwrap() && o < line_of(&s, "SELECT bravo").unwrap());
}

#[test]
fn empty_window_and_no_frame_yet() {
    let v = view_of(agg(&[]), agg(&abc()), SortBy::Total);
    let s = screen(&v, 80, 24);
    assert!(has(&s, "no queries in this interval"), "{}", s.join("\n"));
    assert!(
        s[2].starts_with("Queries/s 0  errors 0  avg -  p99 -  groups 0"),
        "{}",
        s[2]
    );
    let mut v = v;
    on_key(&mut v, key(KeyCode::Char('w')));
    assert!(!has(&screen(&v, 80, 24), "no queries"));
    let s = screen(&View::new(SortBy::Count), 80, 24);
    assert!(has(&s, "waiting for the first interval"));
    assert!(has(&s, "Sorted by: count"));
}

#[test]
fn detail_pane_of_the_selected_group() {
    let long: String = (0..40)
        .map(|i| format!("c{i} = ?"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let long = format!("SELECT charlie FROM t WHERE {long}");
    let mut qs = abc();
    for x in &mut qs {
        if x.fp == "SELECT charlie" {
            x.fp = long.clone();
        }
    }
    qs.push(Q {
        user: "admin",
        host: 2,
        err: Some(1064),
        ..q(&long, 200_000)
    });
    qs.push(Q {
        user: "report",
        host: 3,
        ..q(&long, 20_000_000_000)
    });
    qs.push(Q {
        user: "ops",
        host: 3,
        ..q(&long, 20_000_000_000)
    });
    let a = agg(&qs);
    let mut v = view_of(a.clone(), a, SortBy::Total);
    // charlie (40s) first, bravo second.
    assert!(!on_key(&mut v, key(KeyCode::Down)));
    assert_eq!(v.selected(), 1);
    assert!(!on_key(&mut v, key(KeyCode::Up)));
    assert!(!on_key(&mut v, key(KeyCode::Enter)));
    assert!(v.detail);
    let s = screen(&v, 80, 24);
    let text = s.join("\n");
    assert!(has(&s, "Detail"), "{text}");
    assert!(has(&s, &format!("Id {}", id_of(&long))), "{text}");
    assert!(has(&s, "Users app 5, admin 1, ops 1, others 1"), "{text}");
    assert!(has(&s, "Databases shop 8"), "{text}");
    assert!(
        has(&s, "Clients 10.0.0.1 5, 10.0.0.3 2, 10.0.0.2 1"),
        "{text}"
    );
    assert!(has(&s, "Error codes 1146/42S02 x5"), "{text}");
    assert!(has(&s, "Warnings 3  Error codes 1146"), "{text}");
    assert!(has(&s, "1064/42S02 x1"), "{text}");
    assert!(has(&s, "Decades 1us 0  10us 0  100us 1  1ms 5"), "{text}");
    assert!(has(&s, "10s+ 2"), "{text}");
    // The whole fingerprint is there, wrapped over several lines.
    let start = line_of(&s, "Fingerprint SELECT charlie").expect("fingerprint in detail");
    let joined: String = s[start..]
        .iter()
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join(" ");
    let squashed = |t: &str| t.split_whitespace().collect::<String>();
    assert!(
        squashed(&joined).contains(&squashed(&long)),
        "{joined}\n---\n{long}"
    );
    // The table stays above, with the selected row on screen.
    assert!(line_of(&s, "Fingerprint").unwrap() < start);
    // At 200x50 too, and Enter closes it.
    assert!(has(&screen(&v, 200, 50), "Users app 5"));
    on_key(&mut v, key(KeyCode::Enter));
    assert!(!has(&screen(&v, 80, 24), "Users app"));
}

#[test]
fn quit_keys() {
    let mut v = View::new(SortBy::Total);
    assert!(on_key(&mut v, key(KeyCode::Char('q'))));
    assert!(on_key(&mut v, key(KeyCode::Esc)));
    assert!(on_key(
        &mut v,
        KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)
    ));
    assert_eq!(v.sort, SortBy::Total, "Ctrl-C is not the count key");
    assert!(!on_key(&mut v, key(KeyCode::Char('c'))));
    assert_eq!(v.sort, SortBy::Count);
    assert!(!on_key(&mut v, key(KeyCode::Char('x'))));
    let release = KeyEvent::new_with_kind(
        KeyCode::Char('q'),
        KeyModifiers::NONE,
        KeyEventKind::Release,
    );
    assert!(!on_key(&mut v, release));
    assert!(!on_key(&mut v, key(KeyCode::Char('?'))));
    assert!(v.help);
    let s = screen(&v, 80, 24);
    assert!(s[23].starts_with("t/c/p/e/r sort  w window"), "{}", s[23]);
}

fn many(n: usize) -> Aggregator {
    // Group i has i+1 queries: sorted by count, rank r holds group n-r.
    let mut qs = Vec::new();
    for i in 0..n {
        for _ in 0..=i {
            qs.push(q(&format!("SELECT g{i:03}"), 1_000));
        }
    }
    agg(&qs)
}

#[test]
fn selection_moves_scrolls_and_clamps() {
    let a = many(100);
    let mut v = view_of(a.clone(), a, SortBy::Count);
    let s = screen(&v, 80, 24);
    // 24 - header, status, totals, title, column header = 19 rows.
    assert_eq!(v.page.get(), 19);
    assert!(has(&s, "SELECT g099") && !has(&s, "SELECT g080"));
    on_key(&mut v, key(KeyCode::PageDown));
    assert_eq!(v.selected(), 19);
    let s = screen(&v, 80, 24);
    assert!(has(&s, "SELECT g080"), "{}", s.join("\n"));
    on_key(&mut v, key(KeyCode::End));
    assert_eq!(v.selected(), 99);
    let s = screen(&v, 80, 24);
    assert!(has(&s, "SELECT g000") && !has(&s, "SELECT g099"));
    assert!(s[23].trim_start().starts_with("100 "), "{}", s[23]);
    on_key(&mut v, key(KeyCode::Down));
    assert_eq!(v.selected(), 99);
    on_key(&mut v, key(KeyCode::PageUp));
    assert_eq!(v.selected(), 80);
    on_key(&mut v, key(KeyCode::Home));
    assert_eq!(v.selected(), 0);
    on_key(&mut v, key(KeyCode::Up));
    assert_eq!(v.selected(), 0);
    assert!(has(&screen(&v, 80, 24), "SELECT g099"));
}

#[test]
fn selection_follows_its_group() {
    let mut v = view_of(agg(&abc()), agg(&abc()), SortBy::Total);
    on_key(&mut v, key(KeyCode::Down)); // charlie
    on_key(&mut v, key(KeyCode::Char('c'))); // alpha, charlie, bravo
    assert_eq!(v.selected(), 1);
    on_key(&mut v, key(KeyCode::Char('e'))); // charlie, bravo, alpha
    assert_eq!(v.selected(), 0);
    // A new frame where charlie is gone: the position stays (clamped).
    on_key(&mut v, key(KeyCode::End));
    v.set_frame(frame(
        agg(&[q("SELECT alpha", 1_000)]),
        agg(&[q("SELECT alpha", 1_000)]),
    ));
    assert_eq!(v.selected(), 0);
    // Keys on an empty or missing frame do not panic.
    let mut e = View::new(SortBy::Total);
    for k in [
        KeyCode::Down,
        KeyCode::End,
        KeyCode::PageDown,
        KeyCode::Enter,
    ] {
        on_key(&mut e, key(k));
    }
    assert_eq!(e.selected(), 0);
    screen(&e, 80, 24);
}

#[test]
fn tiny_screens_do_not_panic() {
    let a = many(30);
    let mut v = view_of(a.clone(), a, SortBy::Total);
    for (w, h) in [(10, 3), (1, 1), (0, 0), (80, 1), (1, 24), (5, 5), (20, 8)] {
        for detail in [false, true] {
            v.detail = detail;
            v.help = detail;
            screen(&v, w, h);
        }
    }
}

fn arb_q() -> impl Strategy<Value = Q> {
    (
        0usize..12,
        0u64..40_000_000_000,
        prop::option::of(1000u32..1010),
        0u8..5,
    )
        .prop_map(|(g, lat, err, host)| Q {
            fp: format!("SELECT {} FROM t{g} WHERE x = ?", "é\t\x1b[31m".repeat(g)),
            lat_ns: lat,
            err,
            user: ["app", "root", "ops"][usize::from(host % 3)],
            host,
        })
}

fn arb_key() -> impl Strategy<Value = KeyCode> {
    prop::sample::select(vec![
        KeyCode::Char('t'),
        KeyCode::Char('c'),
        KeyCode::Char('p'),
        KeyCode::Char('e'),
        KeyCode::Char('w'),
        KeyCode::Char('?'),
        KeyCode::Enter,
        KeyCode::Up,
        KeyCode::Down,
        KeyCode::PageUp,
        KeyCode::PageDown,
        KeyCode::Home,
        KeyCode::End,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn any_size_any_events_any_keys(
        qs in prop::collection::vec(arb_q(), 0..60),
        max_groups in 1usize..8,
        keys in prop::collection::vec(arb_key(), 0..12),
        w in 0u16..220,
        h in 0u16..60,
        secs in prop::sample::select(vec![0.0, 0.3, 1.0, 2.5, f64::NAN]),
    ) {
        let split = qs.len() / 2;
        let mut v = View::new(SortBy::Total);
        v.set_frame(Frame {
            window_secs: secs,
            ..frame(agg_with(max_groups, &qs[split..]), agg_with(max_groups, &qs))
        });
        for k in keys {
            prop_assert!(!on_key(&mut v, key(k)));
            let s = screen(&v, w, h);
            prop_assert!(s.iter().all(|l| !l.contains('\x1b')));
            // Header, status and totals take three rows, the help line (after `?`) one more;
            // the table title needs the next.
            if h >= 4 + u16::from(v.help) && w >= 60 {
                let words = format!("Sorted by: {}", v.sort.label());
                prop_assert!(s.iter().any(|l| l.contains(&words)), "{}", s.join("\n"));
                let window = if v.since_start { "Window: since start" } else { "Window: last" };
                prop_assert!(s.iter().any(|l| l.contains(window)), "{}", s.join("\n"));
            }
        }
        screen(&v, w, h);
        let rows = v.rows().len();
        prop_assert!(v.selected() < rows.max(1));
        // Every row's rank is unique and the table is sorted.
        let sort = v.sort;
        let r = v.rows();
        for pair in r.windows(2) {
            prop_assert!(pair[0].cmp_by(&pair[1], sort).is_lt());
        }
    }
}

/// "queued": 4 x 40ms response of which 36ms queued (4ms service); "slow": 2 x 10ms, no queue.
fn queued_and_slow() -> Aggregator {
    let mut a = Aggregator::new(AggConfig::default());
    let mut add = |fp: &str, lat_ns: u64, queued_ns: u64, i: u64| {
        let mut ev = event(&q(fp, lat_ns), 1_000_000_000 * i);
        ev.service_start_ns = Some(ev.start_ns + queued_ns);
        let key = GroupKey {
            protocol: Protocol::Mysql,
            command: "query",
            fingerprint_hash: hash(fp),
        };
        a.add(&ev, key, || (fp.to_string(), id_of(fp)));
    };
    for i in 0..4 {
        add("SELECT queued", 40_000_000, 36_000_000, i);
    }
    for i in 4..6 {
        add("SELECT slow", 10_000_000, 0, i);
    }
    a
}

#[test]
fn service_time_ranks_and_response_time_is_shown_beside_it() {
    let mut v = view_of(queued_and_slow(), queued_and_slow(), SortBy::Total);
    let s = screen(&v, 200, 50);
    let at = |s: &[String], fp: &str| line_of(s, fp).unwrap_or(usize::MAX);
    assert!(
        at(&s, "SELECT slow") < at(&s, "SELECT queued"),
        "{}",
        s.join("\n")
    );
    // Service: 16ms total (44%), avg/p50/p95/p99/max 4ms; response avg 40ms.
    let row = &s[at(&s, "SELECT queued")];
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells[4..12],
        [
            "16.0ms", "44%", "4.00ms", "4.00ms", "4.00ms", "4.00ms", "4.00ms", "40.0ms"
        ],
        "{row}"
    );
    // Totals: service avg (16 + 20) / 6 = 6ms, response avg (160 + 20) / 6 = 30ms.
    assert!(s[2].contains("avg 6.00ms"), "{}", s[2]);
    assert!(s[2].contains("response avg 30.0ms"), "{}", s[2]);
    // `r` ranks by total response time, the marker on Resp.
    assert!(!on_key(&mut v, key(KeyCode::Char('r'))));
    assert_eq!(v.sort, SortBy::Response);
    let s = screen(&v, 200, 50);
    assert!(
        at(&s, "SELECT queued") < at(&s, "SELECT slow"),
        "{}",
        s.join("\n")
    );
    assert!(has(&s, "Resp▼"), "{}", s.join("\n"));
    assert!(has(&s, "Sorted by: total response time"));
    // The detail pane shows the response time in its title.
    on_key(&mut v, key(KeyCode::Home));
    on_key(&mut v, key(KeyCode::Enter));
    let s = screen(&v, 200, 50);
    assert!(has(&s, "Response: avg 40.0ms"), "{}", s.join("\n"));
    assert!(has(&s, "Service min 4.00ms"), "{}", s.join("\n"));
}
