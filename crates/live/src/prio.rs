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
