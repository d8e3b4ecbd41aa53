//! The no-index counts of a group: exact, mergeable, scaled like every count; and the example
//! keeps its event's bound values.

use std::sync::Arc;

use aggregate::Stats;
use proto::params::BoundParams;
use proto::postgres::params::RawParams;
use proto::{IndexUse, Outcome, Protocol, QueryEvent};

fn event(i: u64, index: IndexUse) -> QueryEvent {
    QueryEvent {
        protocol: Protocol::Mysql,
        conn: 1,
        client: "10.0.0.1:40000".parse().unwrap(),
        server: "10.0.0.9:3306".parse().unwrap(),
        start_ns: 1000 * i,
        first_response_ns: Some(1000 * i + 10),
        end_ns: Some(1000 * i + 10 + i),
        service_start_ns: Some(1000 * i),
        user: None,
        database: None,
        command: "execute",
        text: Some(Arc::from("SELECT $1")),
        text_truncated: false,
        text_partial: false,
        statement_id: None,
        bytes_in: 1,
        bytes_out: 1,
        rows_sent: 0,
        rows_affected: 0,
        warnings: 0,
        outcome: Outcome::Ok,
        error: None,
        timed: true,
        txn: None,
        index,
        params: Some(Arc::new(BoundParams::Postgres(RawParams {
            body: [0, 0, 0, 1, 0, 0, 0, 1, b'0' + (i % 10) as u8].into(),
            oids: None,
        }))),
        peer: None,
    }
}

fn flags(i: u64) -> IndexUse {
    IndexUse {
        no_index_used: i.is_multiple_of(3),
        no_good_index_used: i.is_multiple_of(5),
    }
}

#[test]
fn counts_are_exact_and_merge() {
    let (mut all, mut a, mut b) = (Stats::default(), Stats::default(), Stats::default());
    for i in 1..=30u64 {
        let ev = event(i, flags(i));
        all.record(&ev, true);
        if i.is_multiple_of(2) { &mut a } else { &mut b }.record(&ev, true);
    }
    assert_eq!((all.no_index_used, all.no_good_index_used), (10, 6));
    a.merge(&b);
    assert_eq!(a, all);
    // The slowest (i = 30) is the example, with its values.
    let ex = all.example.as_ref().unwrap();
    assert_eq!(ex.params.as_ref().unwrap().literals(), ["'0'"]);
    all.scale(4);
    assert_eq!((all.no_index_used, all.no_good_index_used), (40, 24));
}
