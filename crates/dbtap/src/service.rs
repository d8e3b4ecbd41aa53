//! Service time: when the server could start on each request, per connection, for every
//! protocol. The pipeline stamps each event as it leaves a session ([`ServiceClock::stamp`]).
//!
//! A connection's server works on one request at a time as the client sees it: a request that
//! arrives while an earlier response is still being sent waits. Its service starts at the later
//! of its own first byte (`start_ns`) and the end of the previous response on the connection
//! (the latest `end_ns` of that connection's events emitted before it), and ends at its own last
//! response byte. The service intervals of one connection are disjoint and each lies inside its
//! request's `[start_ns, end_ns]`, so their sum never exceeds the time the connection was busy
//! (the union of those intervals), and concurrency computed from them never exceeds the number
//! of connections.

use std::collections::HashMap;

use proto::QueryEvent;

/// The end of the latest response per open connection. State is dropped at close.
///
/// Events come in runs per connection (a pipeline's replies), so the connection stamped last
/// and its slot are remembered: a repeat costs a comparison instead of a lookup.
#[derive(Default)]
pub(crate) struct ServiceClock {
    /// Each open connection's slot in `ends`.
    slots: HashMap<u64, usize, foldhash::fast::RandomState>,
    ends: Vec<u64>,
    /// Slots of closed connections, reused first.
    free: Vec<usize>,
    /// The connection stamped last and its slot.
    last: Option<(u64, usize)>,
}

impl ServiceClock {
    /// Sets `ev.service_start_ns` (timed events with a response only) and advances the
    /// connection's clock to the end of its response. A count-only event (a PostgreSQL Parse in
    /// the flight of its execution, `timed` false) neither gets a service time nor moves the
    /// clock: its time belongs to the execution it travelled with.
    pub(crate) fn stamp(&mut self, ev: &mut QueryEvent) {
        let Some(end) = ev.end_ns.filter(|_| ev.timed) else {
            ev.service_start_ns = None;
            return;
        };
        let slot = match self.last {
            Some((conn, slot)) if conn == ev.conn => slot,
            _ => self.slot(ev.conn),
        };
        let Some(last) = self.ends.get_mut(slot) else {
            return;
        };
        ev.service_start_ns = Some(ev.start_ns.max(*last));
        *last = (*last).max(end);
    }

    /// The slot of `conn`, made (at 0) when it has none; remembered as the last one.
    fn slot(&mut self, conn: u64) -> usize {
        let (ends, free) = (&mut self.ends, &mut self.free);
        let slot = *self.slots.entry(conn).or_insert_with(|| match free.pop() {
            Some(i) => {
                if let Some(e) = ends.get_mut(i) {
                    *e = 0;
                }
                i
            }
            None => {
                ends.push(0);
                ends.len() - 1
            }
        });
        self.last = Some((conn, slot));
        slot
    }

    /// Forgets connection `conn` (closed).
    pub(crate) fn close(&mut self, conn: u64) {
        if let Some(i) = self.slots.remove(&conn) {
            self.free.push(i);
        }
        if self.last.is_some_and(|(c, _)| c == conn) {
            self.last = None;
        }
    }

    /// Connections with a clock (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::Protocol;

    fn ev(conn: u64, start: u64, end: Option<u64>) -> QueryEvent {
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        QueryEvent {
            conn,
            client: addr.into(),
            server: addr.into(),
            service_start_ns: None,
            ..proto::testing::event(Protocol::Redis, "get", start, end)
        }
    }

    /// Stamps the events in order and returns (response, service) times.
    fn run(events: &[(u64, u64, Option<u64>)]) -> Vec<(Option<u64>, Option<u64>)> {
        let mut clock = ServiceClock::default();
        events
            .iter()
            .map(|&(c, s, e)| {
                let mut ev = ev(c, s, e);
                clock.stamp(&mut ev);
                (ev.latency_ns(), ev.service_ns())
            })
            .collect()
    }

    #[test]
    fn sequential_requests_keep_their_response_time() {
        let got = run(&[
            (1, 100, Some(150)),
            (1, 200, Some(260)),
            (1, 300, Some(301)),
        ]);
        assert_eq!(
            got,
            vec![
                (Some(50), Some(50)),
                (Some(60), Some(60)),
                (Some(1), Some(1))
            ]
        );
    }

    #[test]
    fn pipelined_requests_exclude_queueing() {
        // Three requests sent at once, answered one after another: each waits for the
        // previous reply, so its service is only its own share.
        let got = run(&[
            (1, 100, Some(110)),
            (1, 100, Some(115)),
            (1, 101, Some(130)),
        ]);
        assert_eq!(
            got,
            vec![
                (Some(10), Some(10)),
                (Some(15), Some(5)),
                (Some(29), Some(15))
            ]
        );
    }

    #[test]
    fn overlapping_request_starts_after_previous_end() {
        // The second request arrives while the first response is being sent.
        let got = run(&[(1, 0, Some(100)), (1, 50, Some(160))]);
        assert_eq!(got[1], (Some(110), Some(60)));
    }

    #[test]
    fn out_of_order_replies_saturate_at_zero() {
        // A reply emitted after one that ended later (MongoDB may answer out of order): its
        // service lies entirely inside time already counted, so it is 0, never negative.
        let got = run(&[(1, 0, Some(100)), (1, 10, Some(80)), (1, 20, Some(120))]);
        assert_eq!(
            got,
            vec![
                (Some(100), Some(100)),
                (Some(70), Some(0)),
                (Some(100), Some(20))
            ]
        );
    }

    #[test]
    fn idle_gaps_are_not_service() {
        let got = run(&[(1, 0, Some(10)), (1, 1_000, Some(1_010))]);
        assert_eq!(got[1], (Some(10), Some(10)));
    }

    #[test]
    fn unanswered_requests_have_no_service_and_do_not_move_the_clock() {
        let got = run(&[(1, 0, Some(10)), (1, 5, None), (1, 8, Some(30))]);
        assert_eq!(
            got,
            vec![(Some(10), Some(10)), (None, None), (Some(22), Some(20))]
        );
    }

    #[test]
    fn count_only_events_have_no_service_and_do_not_move_the_clock() {
        // A Parse answered in the same flight as its Execute: the execution keeps the whole
        // round trip.
        let mut clock = ServiceClock::default();
        let mut parse = ev(1, 0, Some(100));
        parse.timed = false;
        clock.stamp(&mut parse);
        assert_eq!((parse.latency_ns(), parse.service_ns()), (None, None));
        let mut exec = ev(1, 0, Some(100));
        clock.stamp(&mut exec);
        assert_eq!(
            (exec.latency_ns(), exec.service_ns()),
            (Some(100), Some(100))
        );
    }

    #[test]
    fn negative_latency_saturates() {
        let got = run(&[(1, 100, Some(90))]);
        assert_eq!(got, vec![(Some(0), Some(0))]);
    }

    #[test]
    fn connections_are_independent_and_forgotten_at_close() {
        let mut clock = ServiceClock::default();
        let mut a = ev(1, 0, Some(100));
        let mut b = ev(2, 10, Some(20));
        clock.stamp(&mut a);
        clock.stamp(&mut b);
        assert_eq!(b.service_ns(), Some(10));
        assert_eq!(clock.len(), 2);
        clock.close(1);
        clock.close(2);
        assert_eq!(clock.len(), 0);
        // A new connection with the same id (never in practice) starts afresh.
        let mut c = ev(1, 10, Some(30));
        clock.stamp(&mut c);
        assert_eq!(c.service_ns(), Some(20));
    }

    #[test]
    fn a_reused_slot_starts_afresh_and_runs_stay_per_connection() {
        let mut clock = ServiceClock::default();
        // Runs of one connection, interleaved with another (the remembered slot changes).
        let got: Vec<_> = [
            (1, 0, 100),
            (1, 10, 150),
            (2, 20, 40),
            (1, 30, 160),
            (2, 50, 60),
        ]
        .iter()
        .map(|&(c, s, e)| {
            let mut x = ev(c, s, Some(e));
            clock.stamp(&mut x);
            x.service_ns()
        })
        .collect();
        assert_eq!(got, [Some(100), Some(50), Some(20), Some(10), Some(10)]);
        clock.close(1);
        // Connection 3 takes connection 1's slot: it does not inherit its clock (160).
        let mut c = ev(3, 100, Some(130));
        clock.stamp(&mut c);
        assert_eq!(c.service_ns(), Some(30));
        assert_eq!(clock.len(), 2);
        // Connection 2's clock (60) is still its own.
        let mut d = ev(2, 55, Some(70));
        clock.stamp(&mut d);
        assert_eq!(d.service_ns(), Some(10));
    }

    /// Length of the union of closed intervals.
    fn union_len(mut iv: Vec<(u64, u64)>) -> u64 {
        iv.sort_unstable();
        let mut total = 0;
        let mut cur: Option<(u64, u64)> = None;
        for (s, e) in iv {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    total += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        total + cur.map_or(0, |(s, e)| e - s)
    }

    proptest::proptest! {
        #[test]
        fn service_sum_never_exceeds_busy_time(
            reqs in proptest::collection::vec(
                (
                    0u64..3,
                    0u64..1_000,
                    proptest::option::weighted(0.9, 0u64..500),
                    proptest::bool::weighted(0.9),
                ),
                0..64,
            )
        ) {
            let mut clock = ServiceClock::default();
            let mut by_conn: HashMap<u64, (u64, Vec<(u64, u64)>)> = HashMap::new();
            for (conn, start, dur, timed) in reqs {
                let mut e = ev(conn, start, dur.map(|d| start + d));
                e.timed = timed;
                clock.stamp(&mut e);
                let entry = by_conn.entry(conn).or_default();
                if let (Some(s), Some(end)) = (e.service_ns(), e.end_ns) {
                    proptest::prop_assert!(s <= e.latency_ns().unwrap_or(0));
                    entry.0 += s;
                    entry.1.push((e.start_ns, end));
                } else {
                    proptest::prop_assert!(e.service_ns().is_none());
                }
            }
            for (sum, iv) in by_conn.into_values() {
                let busy = union_len(iv);
                proptest::prop_assert!(sum <= busy, "service {sum} > busy {busy}");
            }
        }
    }
}
