//! A clear one-line error instead of a crash when a mapped capture file shrinks under dbtap.
//!
//! Reading a page of a mapping that lies past the end of a file truncated since it was mapped
//! raises SIGBUS, whose default action kills the process without a word. While a [`Watch`] is
//! alive, a SIGBUS whose faulting address lies in its range prints the watch's message to
//! standard error and exits with status 1; any other SIGBUS gets the default action back and
//! kills the process as before. The handler only reads atomics and calls `write(2)` and
//! `_exit(2)`, both async-signal-safe.

#![allow(unsafe_code)]

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

/// Mappings watched at once; a mapping that finds every slot taken is not watched (it keeps
/// the default action). One digest maps one file at a time.
const SLOTS: usize = 16;

struct Slot {
    used: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
    msg: AtomicPtr<u8>,
    msg_len: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    used: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    msg: AtomicPtr::new(std::ptr::null_mut()),
    msg_len: AtomicUsize::new(0),
};

static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static INSTALL: Once = Once::new();

/// Watches `bytes` (a mapping of the file `name`) until dropped.
#[derive(Debug)]
pub(crate) struct Watch {
    slot: Option<usize>,
    /// Owned here, read by the handler through the slot's pointer while the slot is set.
    _msg: Box<[u8]>,
}

impl Watch {
    pub(crate) fn new(bytes: &[u8], name: &str) -> Watch {
        let mut msg = format!(
            "dbtap: error: {name}: the file shrank while dbtap read it (it is mapped into \
             memory): it was truncated or rewritten by another process; DBTAP_NO_MMAP=1 reads \
             files without mapping them\n"
        )
        .into_bytes()
        .into_boxed_slice();
        INSTALL.call_once(install);
        let slot = TABLE.iter().position(|s| {
            s.used
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        });
        if let Some(i) = slot {
            let s = &TABLE[i];
            s.msg.store(msg.as_mut_ptr(), Ordering::Release);
            s.msg_len.store(msg.len(), Ordering::Release);
            s.len.store(bytes.len(), Ordering::Release);
            // Set last: the handler takes a slot whose start is not 0 as complete.
            s.start.store(bytes.as_ptr() as usize, Ordering::Release);
        }
        Watch { slot, _msg: msg }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            let s = &TABLE[i];
            s.start.store(0, Ordering::Release);
            s.used.store(false, Ordering::Release);
        }
    }
}

type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

fn install() {
    // SAFETY: a zeroed sigaction is a valid value to fill in; the handler has the
    // SA_SIGINFO signature, and sigaction only reads the struct.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        let handler: Handler = on_sigbus;
        act.sa_sigaction = handler as libc::sighandler_t;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
    }
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler; si_addr is the
    // faulting address for SIGBUS.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &TABLE {
        let start = s.start.load(Ordering::Acquire);
        if start != 0 && addr >= start && addr - start < s.len.load(Ordering::Acquire) {
            let (p, n) = (
                s.msg.load(Ordering::Acquire),
                s.msg_len.load(Ordering::Acquire),
            );
            // SAFETY: the slot is set, so its Watch (owning the message) is alive; write and
            // _exit are async-signal-safe.
            unsafe {
                libc::write(2, p.cast(), n);
                libc::_exit(1);
            }
        }
    }
    // Not a watched mapping: the default action, which the faulting access raises again
    // when this handler returns.
    // SAFETY: signal() with SIG_DFL is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGBUS, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::process::Command;

    /// Set in the child process of [`a_truncated_mapping_exits_with_one_line`].
    const CHILD: &str = "DBTAP_SIGBUS_TEST_CHILD";

    /// The child: maps a capture, truncates the file, reads past the new end.
    #[test]
    fn sigbus_child() {
        let Some(dir) = std::env::var_os(CHILD) else {
            return;
        };
        let path = std::path::Path::new(&dir).join("shrinks.pcap");
        let mut f = std::fs::File::create(&path).unwrap();
        let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        pcap.extend_from_slice(&[0; 8]);
        pcap.extend_from_slice(&[0xff, 0xff, 0, 0, 1, 0, 0, 0]);
        pcap.resize(1 << 20, 0);
        f.write_all(&pcap).unwrap();
        drop(f);
        let r = crate::Reader::open_mapped(&path, 1).unwrap();
        let map = r.mapping().expect("mapped");
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        let sum: u64 = map.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        println!("read {sum} without a fault");
    }

    #[test]
    fn a_truncated_mapping_exits_with_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "sigbus::tests::sigbus_child", "--nocapture"])
            .env(CHILD, dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let line = err
            .lines()
            .find(|l| l.starts_with("dbtap: error:"))
            .unwrap_or_else(|| panic!("no error line; status {:?}, stderr {err}", out.status));
        assert_eq!(out.status.code(), Some(1), "stderr: {err}");
        assert!(
            line.contains("shrinks.pcap: the file shrank while dbtap read it"),
            "{line}"
        );
    }
}
