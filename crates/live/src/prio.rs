//! The ring reader's scheduling priority: a reader that waits for a CPU while the database and
//! its clients keep every core busy lets the ring fill, and the kernel drops what does not fit.

use crate::LiveError;
use crate::sys;

/// How the reader thread is scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReaderPriority {
    /// As the process was started (no change).
    Normal,
    /// The thread at this nice value (CFS; with scheduler autogroups it counts only against
    /// the other threads of dbtap's own session).
    Nice(i32),
    /// The real-time FIFO class at this priority (1 = the lowest): the thread runs as soon as
    /// it wakes, before every normal thread; the kernel's RT throttling
    /// (`kernel.sched_rt_runtime_us`) still leaves the others 5 % of each CPU.
    Fifo(i32),
}

/// Gives the calling thread `p`. Fails (changing nothing) without CAP_SYS_NICE for a negative
/// nice or FIFO.
pub fn set_reader_priority(p: ReaderPriority) -> Result<(), LiveError> {
    let r = match p {
        ReaderPriority::Normal => Ok(()),
        ReaderPriority::Nice(n) => sys::set_thread_nice(n),
        ReaderPriority::Fifo(prio) => sys::set_thread_fifo(prio),
    };
    r.map_err(|source| LiveError::Io {
        what: "setting the capture thread's priority",
        source,
    })
}

/// The share of one CPU past which a capture thread in the FIFO class goes back to normal
/// priority (the limit `live`'s workers and `replay --live`'s capture thread give
/// [`FifoGuard::new`]): a capture thread reads the ring and parses, about 0.02 CPU per 10k
/// queries, so this is about 250k queries per second on one thread, far beyond what the
/// priority is for.
pub const FIFO_CPU_LIMIT: f64 = 0.5;

/// A real-time reader that does too much work would take its CPU from the database: past
/// `limit` of one CPU over a second of wall time, [`FifoGuard::check`] puts the thread back in
/// the normal class, once, and says how busy it was.
#[derive(Debug)]
pub struct FifoGuard {
    limit: f64,
    active: bool,
    since: std::time::Instant,
    cpu_ns: u64,
}

impl FifoGuard {
    /// A guard for the calling thread; `active` when it runs in the FIFO class.
    pub fn new(active: bool, limit: f64) -> Self {
        Self {
            limit,
            active,
            since: std::time::Instant::now(),
            cpu_ns: sys::thread_cpu_ns(),
        }
    }

    /// Called often from the guarded thread (cheap: one clock read per call, one more per
    /// second). Returns the share of a CPU that the thread used when it has just been put back
    /// in the normal class.
    pub fn check(&mut self) -> Option<f64> {
        if !self.active {
            return None;
        }
        let wall = self.since.elapsed();
        if wall < std::time::Duration::from_secs(1) {
            return None;
        }
        let cpu = sys::thread_cpu_ns();
        let share = cpu.saturating_sub(self.cpu_ns) as f64 / wall.as_nanos().max(1) as f64;
        (self.since, self.cpu_ns) = (std::time::Instant::now(), cpu);
        if share <= self.limit {
            return None;
        }
        self.active = false;
        sys::set_thread_normal().ok().map(|()| share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> i32 {
        sys::thread_policy()
    }

    #[test]
    fn an_inactive_guard_never_acts() {
        let mut g = FifoGuard::new(false, 0.0);
        let end = std::time::Instant::now() + std::time::Duration::from_millis(1100);
        while std::time::Instant::now() < end {}
        assert_eq!(g.check(), None);
    }

    #[test]
    fn a_busy_fifo_thread_goes_back_to_normal_once() {
        // On a thread of its own: the test harness's thread must not stay real-time.
        let r = std::thread::spawn(|| {
            if set_reader_priority(ReaderPriority::Fifo(1)).is_err() {
                eprintln!("skipped: SCHED_FIFO not permitted (needs CAP_SYS_NICE)");
                return None;
            }
            assert_eq!(policy(), libc::SCHED_FIFO);
            let mut g = FifoGuard::new(true, 0.5);
            // Not busy for a second: stays real-time.
            std::thread::sleep(std::time::Duration::from_millis(1100));
            assert_eq!(g.check(), None);
            assert_eq!(policy(), libc::SCHED_FIFO);
            // Busy for a second: back to normal, once.
            let end = std::time::Instant::now() + std::time::Duration::from_millis(1100);
            while std::time::Instant::now() < end {}
            // A thread it starts is not real-time (SCHED_RESET_ON_FORK).
            let child = std::thread::spawn(policy).join().unwrap();
            assert_eq!(child, libc::SCHED_OTHER);
            let share = g.check();
            let after = policy();
            let end = std::time::Instant::now() + std::time::Duration::from_millis(1100);
            while std::time::Instant::now() < end {}
            Some((share, after, g.check()))
        })
        .join()
        .unwrap();
        if let Some((share, after, again)) = r {
            assert!(share.is_some_and(|s| s > 0.5), "{share:?}");
            assert_eq!(after, libc::SCHED_OTHER);
            assert_eq!(again, None);
        }
    }
}
