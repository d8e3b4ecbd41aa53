//! Every `unsafe` of the crate: the packet socket, the mmapped ring and the dlopened libpcap.
//!
//! Everything here is a thin wrapper that turns a system call into an `io::Result`; the
//! decisions (order of calls, what an error means) live in `ring.rs` and `bpf.rs`.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::bpf::Insn;

fn cvt(ret: c_int) -> io::Result<c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// An AF_PACKET socket.
pub(crate) struct Socket(OwnedFd);

impl Socket {
    /// `socket(AF_PACKET, SOCK_RAW, 0)`: protocol 0 means the socket receives nothing until
    /// `bind` names a protocol, so no packet reaches it before the ring and filter are set.
    pub(crate) fn packet() -> io::Result<Socket> {
        // SAFETY: plain system call with constant arguments; a non-negative result is a
        // fresh file descriptor that nothing else owns.
        let fd =
            cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })?;
        // SAFETY: `fd` is a valid descriptor owned by nobody else (just created).
        Ok(Socket(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn setsockopt<T>(&self, level: c_int, name: c_int, val: &T) -> io::Result<()> {
        // SAFETY: `val` points to a live `T` of `size_of::<T>()` bytes for the duration of
        // the call; the kernel copies it and keeps no pointer.
        cvt(unsafe {
            libc::setsockopt(
                self.0.as_raw_fd(),
                level,
                name,
                (val as *const T).cast::<c_void>(),
                size_of::<T>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    fn getsockopt<T: Copy>(&self, level: c_int, name: c_int, init: T) -> io::Result<T> {
        let mut val = init;
        let mut len = size_of::<T>() as libc::socklen_t;
        // SAFETY: `val` is a live, writable `T` and `len` tells the kernel its size; the
        // kernel writes at most `len` bytes. `T: Copy` plain-old-data types only.
        cvt(unsafe {
            libc::getsockopt(
                self.0.as_raw_fd(),
                level,
                name,
                (&mut val as *mut T).cast::<c_void>(),
                &mut len,
            )
        })?;
        Ok(val)
    }

    pub(crate) fn set_int(&self, level: c_int, name: c_int, v: c_int) -> io::Result<()> {
        self.setsockopt(level, name, &v)
    }

    /// SO_ATTACH_FILTER: replaces any filter atomically.
    pub(crate) fn attach_filter(&self, prog: &[Insn]) -> io::Result<()> {
        let len =
            u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // `Insn` is repr(C) with the layout of `struct sock_filter`. The kernel copies the
        // instructions during the call; `prog` outlives it.
        let fprog = libc::sock_fprog {
            len,
            filter: prog.as_ptr().cast::<libc::sock_filter>().cast_mut(),
        };
        self.setsockopt(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
    }

    pub(crate) fn detach_filter(&self) -> io::Result<()> {
        self.set_int(libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)
    }

    pub(crate) fn set_rx_ring(&self, req: &libc::tpacket_req3) -> io::Result<()> {
        self.setsockopt(libc::SOL_PACKET, libc::PACKET_RX_RING, req)
    }

    pub(crate) fn bind_all(&self, ifindex: i32) -> io::Result<()> {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a live sockaddr_ll and the length passed is its size.
        cvt(unsafe {
            libc::bind(
                self.0.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    pub(crate) fn fanout(&self) -> io::Result<u32> {
        self.getsockopt(libc::SOL_PACKET, libc::PACKET_FANOUT, 0u32)
    }

    /// PACKET_STATISTICS (the kernel resets its counters on each read).
    pub(crate) fn stats(&self) -> io::Result<libc::tpacket_stats_v3> {
        let zero = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        self.getsockopt(libc::SOL_PACKET, libc::PACKET_STATISTICS, zero)
    }

    pub(crate) fn so_error(&self) -> io::Result<c_int> {
        self.getsockopt(libc::SOL_SOCKET, libc::SO_ERROR, 0 as c_int)
    }

    /// Waits up to `timeout` for POLLIN/POLLERR. Returns the revents (0 on timeout or EINTR).
    pub(crate) fn wait(&self, timeout: Duration) -> io::Result<i16> {
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN | libc::POLLERR,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: one valid pollfd, a valid timespec, no signal mask.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(if r == 0 { 0 } else { pfd.revents })
    }

    pub(crate) fn map(&self, len: usize) -> io::Result<Mapping> {
        // SAFETY: asks the kernel for a fresh shared mapping of the socket's RX ring; no
        // existing memory is affected. The result is checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.0.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Mapping { ptr, len })
    }
}

/// The mmapped TPACKET_V3 ring: `len` bytes shared with the kernel.
///
/// Ownership of each block alternates between kernel and user space through its
/// `block_status` word (at byte 8 of the block): the kernel writes the block, then sets
/// TP_STATUS_USER (after a write barrier); user space reads it and hands it back by storing
/// TP_STATUS_KERNEL. Only blocks in user ownership are ever turned into slices.
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value (unmapped on drop); moving it to
// another thread is fine. It is not Sync (no &-sharing across threads is offered).
unsafe impl Send for Mapping {}

/// Offset of `hdr.bh1.block_status` in `tpacket_block_desc`.
pub(crate) const BLOCK_STATUS_OFF: usize = 8;

impl Mapping {
    fn status_word(&self, block_off: usize) -> &AtomicU32 {
        assert!(block_off.is_multiple_of(8) && block_off + BLOCK_STATUS_OFF + 4 <= self.len);
        // SAFETY: in bounds (asserted), 4-byte aligned (the mapping is page aligned and the
        // offset a multiple of 8), and the word is only accessed atomically by user space.
        unsafe {
            AtomicU32::from_ptr(
                self.ptr
                    .as_ptr()
                    .add(block_off + BLOCK_STATUS_OFF)
                    .cast::<u32>(),
            )
        }
    }

    /// The block's status, with acquire ordering: if it says TP_STATUS_USER, everything the
    /// kernel wrote to the block before setting it is visible.
    pub(crate) fn block_status(&self, block_off: usize) -> u32 {
        self.status_word(block_off).load(Ordering::Acquire)
    }

    /// The bytes of a block. Call only after `block_status` returned TP_STATUS_USER for it:
    /// the kernel does not touch a user-owned block, so the slice is not written under us.
    /// `&self` here and `&mut self` in `release` make the borrow checker end every slice
    /// before the block is handed back.
    pub(crate) fn block(&self, block_off: usize, block_len: usize) -> &[u8] {
        assert!(
            block_off
                .checked_add(block_len)
                .is_some_and(|end| end <= self.len)
        );
        // SAFETY: in bounds (asserted); the block is user-owned (caller contract above), so no
        // one writes it while the slice lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(block_off), block_len) }
    }

    /// Hands a block back to the kernel (release ordering: our reads happen before).
    pub(crate) fn release(&mut self, block_off: usize) {
        self.status_word(block_off)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly what mmap returned; no slice outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len) };
    }
}

/// `if_nametoindex`; 0 when there is no such interface.
pub(crate) fn if_nametoindex(name: &str) -> u32 {
    let Ok(c) = CString::new(name) else { return 0 };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::if_nametoindex(c.as_ptr()) }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

// ---------------------------------------------------------------- libpcap, loaded at run time

pub(crate) enum PcapError {
    /// libpcap could not be loaded (the dlerror text).
    Missing(String),
    /// pcap_compile refused the expression (pcap_geterr's text).
    Compile(String),
}

#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *mut Insn,
}

type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type GetErr = unsafe extern "C" fn(*mut c_void) -> *mut c_char;
type Close = unsafe extern "C" fn(*mut c_void);

const LIBPCAP_NAMES: [&str; 3] = ["libpcap.so.0.8", "libpcap.so.1", "libpcap.so"];

fn libpcap() -> Result<&'static libloading::Library, String> {
    static LIB: OnceLock<Result<libloading::Library, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let mut last = String::new();
        for name in LIBPCAP_NAMES {
            // SAFETY: loading libpcap runs its initializers, which have no preconditions.
            match unsafe { libloading::Library::new(name) } {
                Ok(lib) => return Ok(lib),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Compiles `expr` for DLT_RAW with libpcap. Returns the instructions as libpcap made them.
pub(crate) fn pcap_compile(
    expr: &str,
    linktype: c_int,
    snaplen: c_int,
) -> Result<Vec<Insn>, PcapError> {
    // Old libpcaps' compiler is not reentrant; one compile at a time.
    static LOCK: Mutex<()> = Mutex::new(());
    let lib = libpcap().map_err(PcapError::Missing)?;
    let cexpr = CString::new(expr)
        .map_err(|_| PcapError::Compile("expression contains a NUL byte".into()))?;
    let sym = |e: libloading::Error| PcapError::Missing(e.to_string());
    // SAFETY: the symbol types match libpcap's documented C prototypes (pcap/pcap.h).
    let (open_dead, compile, freecode, geterr, close) = unsafe {
        (
            *lib.get::<OpenDead>(b"pcap_open_dead\0").map_err(sym)?,
            *lib.get::<Compile>(b"pcap_compile\0").map_err(sym)?,
            *lib.get::<FreeCode>(b"pcap_freecode\0").map_err(sym)?,
            *lib.get::<GetErr>(b"pcap_geterr\0").map_err(sym)?,
            *lib.get::<Close>(b"pcap_close\0").map_err(sym)?,
        )
    };
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: calls follow libpcap's contract: a handle from pcap_open_dead is used for
    // pcap_compile/pcap_geterr and closed once; the program is read (bf_len instructions at
    // bf_insns, as libpcap filled them) and then freed once with pcap_freecode; the error
    // string is copied before pcap_close frees it.
    unsafe {
        let p = open_dead(linktype, snaplen);
        if p.is_null() {
            return Err(PcapError::Compile("pcap_open_dead failed".into()));
        }
        let mut prog = BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null_mut(),
        };
        let rc = compile(p, &mut prog, cexpr.as_ptr(), 1, 0xffff_ffff);
        let out = if rc != 0 {
            let msg = geterr(p);
            let msg = if msg.is_null() {
                "pcap_compile failed".to_string()
            } else {
                CStr::from_ptr(msg).to_string_lossy().into_owned()
            };
            Err(PcapError::Compile(msg))
        } else {
            let insns = if prog.bf_insns.is_null() || prog.bf_len == 0 {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize).to_vec()
            };
            freecode(&mut prog);
            Ok(insns)
        };
        close(p);
        out
    }
}

/// `setpriority(PRIO_PROCESS, gettid(), nice)`: the calling thread's nice value (Linux
/// schedules threads on their own; a negative value needs CAP_SYS_NICE).
pub(crate) fn set_thread_nice(nice: c_int) -> io::Result<()> {
    // SAFETY: gettid has no preconditions and cannot fail.
    let tid = unsafe { libc::gettid() };
    // SAFETY: a system call on the calling thread's own id; no memory is passed.
    cvt(unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) }).map(drop)
}

/// `sched_setscheduler(0, SCHED_FIFO | SCHED_RESET_ON_FORK, prio)`: the calling thread (pid 0
/// is the caller's own thread on Linux) in the real-time FIFO class at `prio` (needs
/// CAP_SYS_NICE or RLIMIT_RTPRIO); threads it starts begin in the normal class.
pub(crate) fn set_thread_fifo(prio: c_int) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SCHED_RESET_ON_FORK: threads this one starts (a replay's sessions) are normal again.
    let policy = libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK;
    // SAFETY: `param` is a valid sched_param that outlives the call, which only reads it.
    cvt(unsafe { libc::sched_setscheduler(0, policy, &param) }).map(drop)
}

/// `sched_setscheduler(0, SCHED_OTHER, 0)`: the calling thread back in the normal class.
pub(crate) fn set_thread_normal() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call, which only reads it.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) }).map(drop)
}

/// The calling thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`; 0 if it fails).
pub(crate) fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// The calling thread's scheduling policy (`sched_getscheduler(0)`; -1 if it fails).
#[cfg(test)]
pub(crate) fn thread_policy() -> c_int {
    // SAFETY: no memory is passed; pid 0 is the calling thread.
    unsafe { libc::sched_getscheduler(0) & !libc::SCHED_RESET_ON_FORK }
}
