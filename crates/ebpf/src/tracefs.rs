//! tracefs for attaching the classic syscall tracepoints on a host that has not mounted it.
//!
//! libbpf finds a tracepoint's id under `/sys/kernel/tracing/events/` (or debugfs's
//! `tracing/`). Without tracefs there, the tracer falls back to the raw `sys_enter`/`sys_exit`
//! pair, which runs a program for every system call of every process on the host (measured in
//! sysbench oltp_read_only at 600 tx/s: 19-21 program runs per query against 7-8 with the
//! per-syscall tracepoints). When neither path has tracefs, [`with_tracefs`] mounts it for the
//! attach only, in a mount namespace of the calling thread's own: the host's mounts are never
//! touched, and the thread goes back to its namespace afterwards (the private one, and its
//! mount, end with it; the attached perf events do not need the mount).

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use rustix::mount::{MountFlags, MountPropagationFlags, mount, mount_change};
use rustix::thread::{LinkNameSpaceType, UnshareFlags, move_into_link_name_space};

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Whether libbpf can find the syscall tracepoints now (its path choice: debugfs's `tracing`
/// when that exists, else tracefs's mount point).
fn tracepoints_visible() -> bool {
    let base = if Path::new(DEBUGFS_TRACING).exists() {
        DEBUGFS_TRACING
    } else {
        TRACEFS
    };
    Path::new(base).join("events/syscalls").exists()
}

/// Runs `f` (the attach) where the tracepoints are visible: as is when they are, else inside a
/// private mount namespace of this thread with tracefs mounted at `/sys/kernel/tracing`. Any
/// step that fails leaves `f` to run as is (it then falls back to the raw tracepoints).
pub(crate) fn with_tracefs<R>(f: impl FnOnce() -> R) -> R {
    if tracepoints_visible() || Path::new(DEBUGFS_TRACING).exists() {
        return f();
    }
    let Ok(home) = File::open("/proc/thread-self/ns/mnt") else {
        return f();
    };
    // Only NEWNS (it implies FS: this thread's root and cwd become its own copy, same values);
    // never FILES, the flag that makes rustix call `unshare` unsafe.
    #[allow(deprecated)]
    if rustix::thread::unshare(UnshareFlags::NEWNS).is_err() {
        return f();
    }
    // The copied mounts may be peers of the host's (shared propagation): made private first,
    // so the tracefs mount below stays in this namespace.
    let private = mount_change(
        "/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .is_ok();
    if private {
        let _ = mount("nodev", TRACEFS, "tracefs", MountFlags::empty(), None);
    }
    let r = f();
    // Back to the process's mount namespace; the private one (and its mount) goes with it. If
    // that fails, this thread keeps a copy of the host's mounts taken now (plus tracefs).
    let _ = move_into_link_name_space(home.as_fd(), Some(LinkNameSpaceType::Mount));
    r
}
