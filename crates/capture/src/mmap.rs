//! Mapping a regular, uncompressed capture file into memory, so that a reader can hand other
//! threads slices of the file itself (no read(2), no copy into read buffers).
//!
//! One of the two places of the crate with `unsafe` (the other: `sigbus.rs`): the map call.
//! The risk is documented in the README: if the file is truncated or rewritten while mapped,
//! reading the missing pages raises SIGBUS (`crate::sigbus` turns it into a one-line error and
//! exit status 1) or the frames change under the reader. Only used where a caller asks for it
//! ([`crate::Input::open_mapped`]).

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::ops::Deref;
use std::sync::Arc;

use memmap2::{Advice, Mmap, UncheckedAdvice};

/// A read-only mapping of a whole capture file, cheap to clone and share between threads.
#[derive(Clone, Debug)]
pub struct Mapping(Arc<Mapped>);

/// The map, and the watch that turns a SIGBUS in it into a clear error (dropped first).
#[derive(Debug)]
struct Mapped {
    _watch: crate::sigbus::Watch,
    map: Mmap,
}

impl Deref for Mapping {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0.map
    }
}

impl Mapping {
    /// Maps `file` (named `name` in errors) read-only, advised for sequential reading. If the
    /// file shrinks while mapped, reading past its new end exits with a one-line error
    /// ([`crate::sigbus`]).
    pub(crate) fn map(file: &File, name: &str) -> io::Result<Mapping> {
        // SAFETY: the mapping is read-only (nothing writes through it); memmap2 checks the
        // length and alignment. What Rust cannot guarantee is that the file does not change
        // while mapped: another process truncating it makes a read of the lost pages raise
        // SIGBUS, and writing it changes bytes already checked. Callers only map regular files
        // opened for a digest (documented in the README, with DBTAP_NO_MMAP=1 to avoid it).
        let map = unsafe { Mmap::map(file) }?;
        // Advice only: the read-ahead is larger and pages behind are dropped first.
        let _ = map.advise(Advice::Sequential);
        // Advice only: pages not yet in the page cache are read ahead into large folios (up
        // to 2 MiB where the file system has them, as ext4 on Linux 6.18), mapped with fewer
        // faults: on a 1.08 GB capture read cold, 2,070 faults with this advice and `release`
        // in whole 2 MiB, 2,630 before both (a file just written, cached in small folios,
        // takes 17,800 either way).
        #[cfg(target_os = "linux")]
        let _ = map.advise(Advice::HugePage);
        let _watch = crate::sigbus::Watch::new(&map, name);
        Ok(Mapping(Arc::new(Mapped { _watch, map })))
    }

    /// Drops this process's page-table entries for the bytes `from..to` (whole pages inside
    /// it): they stay in the page cache, and reading them again faults them back in from the
    /// file. Keeps the resident set of a long mapped read bounded (advice only: errors are
    /// ignored). Returns where what was released ends (`to` rounded down to 2 MiB): the
    /// `from` of the next call.
    pub fn release(&self, from: usize, to: usize) -> usize {
        // 2 MiB: a multiple of every usual page size, and whole huge-page mappings (see
        // `map`): releasing part of one would split it into small pages first.
        const ALIGN: usize = 2 << 20;
        let from = from.next_multiple_of(ALIGN);
        let to = (to.min(self.0.map.len()) / ALIGN) * ALIGN;
        if to > from {
            // SAFETY: MADV_DONTNEED on a read-only mapping of a file (nothing is ever written
            // through it) only drops page-table entries: the next read of those bytes maps
            // the file's pages again, so even a thread still reading them reads the same
            // bytes; the only risk is the documented one of a file changed while mapped.
            let _ = unsafe {
                self.0
                    .map
                    .unchecked_advise_range(UncheckedAdvice::DontNeed, from, to - from)
            };
        }
        to.max(from)
    }
}

/// A reader's buffer: its own read buffer, or the mapping of the whole file.
pub(crate) enum Buf {
    Owned(Vec<u8>),
    Mapped(Mapping),
}

impl Default for Buf {
    fn default() -> Buf {
        Buf::Owned(Vec::new())
    }
}

impl Deref for Buf {
    type Target = [u8];

    #[inline(always)]
    fn deref(&self) -> &[u8] {
        match self {
            Buf::Owned(v) => v,
            Buf::Mapped(m) => m,
        }
    }
}

impl Buf {
    /// The read buffer, or an empty one for a mapping.
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Buf::Owned(v) => v,
            Buf::Mapped(_) => Vec::new(),
        }
    }
}
