//! The shared session kit: the pieces every protocol session is built from, written once.
//!
//! - [`Cursor`] and [`WireError`]: the checked byte reader over untrusted bytes, in either byte
//!   order, and the one read error.
//! - [`RequestCore`]: what a request in flight records (timestamps, bytes, rows, warnings,
//!   error, text), embedded in each protocol's own record, and the event builder
//!   ([`RequestCore::into_event`] with [`Origin`] and [`Tags`]).
//! - [`Framing`]: one direction's sync state ([`Sync`]: synced, or lost with a candidate flag)
//!   and its resynchronization [`Probe`] (bytes with the timestamps of their packets).
//! - [`NameCache`]: prepared statements and portals by name, bounded by count and bytes.
//! - [`TextBudget`]: the global bound on request text kept across all connections.
//! - [`RecentTexts`]: the texts a connection built lately, shared by the requests that repeat
//!   them.
//! - [`PerDir`]: per-direction state indexed by [`Direction`].
//!
//! Resynchronization logic stays with each protocol (what a plausible message start is); the
//! kit only keeps its state.

use std::ops::{Index, IndexMut};

use crate::Direction;

mod budget;
mod framing;
mod names;
mod reader;
mod recent;
mod request;

pub use budget::{Charge, DEFAULT_TEXT_BUDGET, TEXT_PREFIX, TextBudget};
pub use framing::{Framing, Probe, Sync, timestamp_runs};
pub use names::{NameCache, Named, Unnamed};
pub use reader::{Be, ByteOrder, Cursor, Le, ReadResult, WireError};
pub use recent::RecentTexts;
pub use request::{Origin, RequestCore, Tags, cut_text, lossy_arc};

/// One `T` per direction of a connection, indexed by [`Direction`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PerDir<T> {
    /// Client to server ([`Direction::ToServer`]).
    pub client: T,
    /// Server to client ([`Direction::ToClient`]).
    pub server: T,
}

impl<T> PerDir<T> {
    pub fn new(client: T, server: T) -> Self {
        PerDir { client, server }
    }
    /// Both, client first.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        [&self.client, &self.server].into_iter()
    }
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        [&mut self.client, &mut self.server].into_iter()
    }
}

impl<T> Index<Direction> for PerDir<T> {
    type Output = T;
    fn index(&self, d: Direction) -> &T {
        match d {
            Direction::ToServer => &self.client,
            Direction::ToClient => &self.server,
        }
    }
}

impl<T> IndexMut<Direction> for PerDir<T> {
    fn index_mut(&mut self, d: Direction) -> &mut T {
        match d {
            Direction::ToServer => &mut self.client,
            Direction::ToClient => &mut self.server,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_dir_indexes_by_direction() {
        let mut p = PerDir::new(1, 2);
        assert_eq!(p[Direction::ToServer], 1);
        assert_eq!(p[Direction::ToClient], 2);
        p[Direction::ToClient] += 10;
        assert_eq!(p.server, 12);
        for x in p.iter_mut() {
            *x += 1;
        }
        assert_eq!(p.iter().copied().collect::<Vec<_>>(), vec![2, 13]);
        assert_eq!(PerDir::<u8>::default(), PerDir::new(0, 0));
    }
}
