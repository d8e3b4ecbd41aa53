//! A bounded cache of named texts: prepared statements (by MySQL id or PostgreSQL name) and
//! portals. Bounded by count and by text bytes; when full, the entry inserted longest ago is
//! evicted first.
//!
//! The unnamed name (PostgreSQL's unnamed statement and portal, re-set by nearly every
//! extended-protocol request) lives in a slot of its own beside the map: the same count, bytes
//! and age order, without hashing or comparing the empty key (comparing two empty byte strings
//! through `memcmp` with a dangling pointer costs a masked load that faults, slowly, in the
//! hardware). Its age is kept in the slot, not in the age index: re-setting it (once per
//! request) costs no tree update; eviction compares its age with the index's oldest.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use super::Charge;

/// A statement's text and whether it was cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub text: Arc<str>,
    pub truncated: bool,
}

#[derive(Debug)]
struct Entry {
    text: Arc<str>,
    truncated: bool,
    age: u64,
    /// The share of the run's text budget the text holds, given back when it leaves.
    _charge: Charge,
}

/// A name that may be the unnamed one (kept in the cache's slot).
pub trait Unnamed {
    /// Whether this is the unnamed name.
    fn is_unnamed(&self) -> bool;
}

impl Unnamed for [u8] {
    #[inline]
    fn is_unnamed(&self) -> bool {
        self.is_empty()
    }
}

impl Unnamed for Box<[u8]> {
    #[inline]
    fn is_unnamed(&self) -> bool {
        self.is_empty()
    }
}

/// MySQL statement ids: every id goes to the map.
impl Unnamed for u32 {
    #[inline]
    fn is_unnamed(&self) -> bool {
        false
    }
}

/// Texts by name, at most `max_count` of them holding at most `max_bytes` text bytes.
#[derive(Debug)]
pub struct NameCache<K> {
    map: HashMap<K, Entry, foldhash::fast::RandomState>,
    /// The unnamed name's entry (counted with the map's).
    unnamed: Option<Entry>,
    /// Insertion age to key of the named entries (the unnamed one's age is in its slot): the
    /// oldest is first.
    order: BTreeMap<u64, K>,
    age: u64,
    bytes: usize,
    max_count: usize,
    max_bytes: usize,
}

impl<K: Hash + Eq + Clone + Unnamed> NameCache<K> {
    pub fn new(max_count: usize, max_bytes: usize) -> Self {
        NameCache {
            map: HashMap::default(),
            unnamed: None,
            order: BTreeMap::new(),
            age: 0,
            bytes: 0,
            max_count,
            max_bytes,
        }
    }

    pub fn len(&self) -> usize {
        self.map.len() + usize::from(self.unnamed.is_some())
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.unnamed.is_none()
    }

    /// The entry of `name`.
    #[inline]
    fn entry<Q>(&self, name: &Q) -> Option<&Entry>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + Unnamed + ?Sized,
    {
        if name.is_unnamed() {
            self.unnamed.as_ref()
        } else {
            self.map.get(name)
        }
    }
    /// Text bytes held.
    pub fn text_bytes(&self) -> usize {
        self.bytes
    }

    pub fn get<Q>(&self, name: &Q) -> Option<Named>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + Unnamed + ?Sized,
    {
        self.entry(name).map(|e| Named {
            text: e.text.clone(),
            truncated: e.truncated,
        })
    }

    /// Whether `name` holds this very text (the same allocation).
    pub fn holds<Q>(&self, name: &Q, text: &Arc<str>) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + Unnamed + ?Sized,
    {
        self.entry(name).is_some_and(|e| Arc::ptr_eq(&e.text, text))
    }

    /// Sets `name` to `text`, evicting the oldest entries while the cache is full (by count, or
    /// by bytes with the new text). Returns what `name` held before.
    pub fn insert(&mut self, name: K, text: Arc<str>, truncated: bool) -> Option<Named> {
        self.insert_charged(name, text, truncated, Charge::default())
    }

    /// [`NameCache::insert`], the entry holding `charge` (its text's share of the run's text
    /// budget) until it is replaced, removed or evicted.
    pub fn insert_charged(
        &mut self,
        name: K,
        text: Arc<str>,
        truncated: bool,
        charge: Charge,
    ) -> Option<Named> {
        let prev = self.remove(&name);
        while !self.is_empty()
            && (self.len() >= self.max_count || self.bytes + text.len() > self.max_bytes)
        {
            let e = match (self.unnamed.as_ref(), self.order.first_key_value()) {
                (Some(u), Some((&age, _))) if u.age < age => self.unnamed.take(),
                (Some(_), None) => self.unnamed.take(),
                (_, Some(_)) => self
                    .order
                    .pop_first()
                    .and_then(|(_, oldest)| self.map.remove(&oldest)),
                (None, None) => break,
            };
            if let Some(e) = e {
                self.bytes -= e.text.len();
            }
        }
        self.age += 1;
        self.bytes += text.len();
        let e = Entry {
            text,
            truncated,
            age: self.age,
            _charge: charge,
        };
        if name.is_unnamed() {
            self.unnamed = Some(e);
        } else {
            self.order.insert(self.age, name.clone());
            self.map.insert(name, e);
        }
        prev
    }

    /// Forgets `name`; returns what it held.
    pub fn remove<Q>(&mut self, name: &Q) -> Option<Named>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + Unnamed + ?Sized,
    {
        let e = if name.is_unnamed() {
            self.unnamed.take()?
        } else {
            let e = self.map.remove(name)?;
            self.order.remove(&e.age);
            e
        };
        self.bytes -= e.text.len();
        Some(Named {
            text: e.text,
            truncated: e.truncated,
        })
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.unnamed = None;
        self.order.clear();
        self.bytes = 0;
    }

    /// Heap bytes held, roughly: the texts and 64 bytes per entry.
    pub fn heap_bytes(&self) -> usize {
        self.bytes + self.len() * 64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_holds_its_charge_until_it_leaves() {
        let b = super::super::TextBudget::new(1000);
        let mut c: NameCache<u32> = NameCache::new(2, 1000);
        c.insert_charged(1, t("a"), false, b.charge(100));
        c.insert_charged(2, t("b"), false, b.charge(200));
        assert_eq!(b.used(), 300);
        // Replaced: the old share goes back.
        c.insert_charged(2, t("c"), false, b.charge(50));
        assert_eq!(b.used(), 150);
        // Evicted (count bound): the oldest's share goes back.
        c.insert(3, t("d"), false);
        assert_eq!(b.used(), 50);
        c.remove(&2);
        assert_eq!(b.used(), 0);
    }

    fn t(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn get_insert_remove() {
        let mut c: NameCache<Box<[u8]>> = NameCache::new(10, 100);
        assert!(c.is_empty());
        assert_eq!(c.insert(b"s1"[..].into(), t("select 1"), false), None);
        let prev = c.insert(b"s1"[..].into(), t("select 22"), true);
        assert_eq!(
            prev,
            Some(Named {
                text: t("select 1"),
                truncated: false
            })
        );
        let got = c.get(&b"s1"[..]).unwrap();
        assert_eq!(&*got.text, "select 22");
        assert!(got.truncated);
        assert!(c.holds(&b"s1"[..], &got.text));
        assert!(!c.holds(&b"s1"[..], &t("select 22")));
        assert_eq!(c.text_bytes(), 9);
        assert_eq!(c.heap_bytes(), 9 + 64);
        assert!(c.remove(&b"s1"[..]).is_some());
        assert!(c.remove(&b"s1"[..]).is_none());
        assert_eq!((c.len(), c.text_bytes()), (0, 0));
    }

    #[test]
    fn evicts_oldest_by_count() {
        let mut c: NameCache<u32> = NameCache::new(3, 1000);
        for i in 0..3 {
            c.insert(i, t("x"), false);
        }
        // Re-inserting makes 0 the youngest.
        c.insert(0, t("y"), false);
        c.insert(3, t("z"), false);
        assert_eq!(c.len(), 3);
        assert!(c.get(&1).is_none());
        assert!(c.get(&0).is_some() && c.get(&2).is_some() && c.get(&3).is_some());
        c.insert(4, t("w"), false);
        assert!(c.get(&2).is_none());
    }

    #[test]
    fn evicts_oldest_by_bytes() {
        let mut c: NameCache<u32> = NameCache::new(100, 10);
        c.insert(1, t("aaaa"), false);
        c.insert(2, t("bbbb"), false);
        c.insert(3, t("cccc"), false);
        assert!(c.get(&1).is_none());
        assert_eq!(c.text_bytes(), 8);
        // A text bigger than the bound empties the cache but is kept.
        c.insert(4, t("dddddddddddd"), false);
        assert_eq!(c.len(), 1);
        assert_eq!(c.text_bytes(), 12);
        c.clear();
        assert!(c.is_empty());
        c.insert(5, t("e"), false);
        assert_eq!(c.text_bytes(), 1);
    }
    #[test]
    fn the_unnamed_name_counts_and_ages_like_any_other() {
        let mut c: NameCache<Box<[u8]>> = NameCache::new(2, 1000);
        c.insert(b""[..].into(), t("unnamed 1"), false);
        c.insert(b"a"[..].into(), t("a"), false);
        assert_eq!((c.len(), c.text_bytes()), (2, 10));
        // Full by count: the unnamed entry is the oldest and goes.
        c.insert(b"b"[..].into(), t("b"), false);
        assert!(c.get(&b""[..]).is_none());
        assert_eq!(c.len(), 2);
        // Re-set: replaces, then evicts "a" (the oldest).
        c.insert(b""[..].into(), t("unnamed 2"), true);
        assert!(c.get(&b"a"[..]).is_none());
        let got = c.get(&b""[..]).unwrap();
        assert_eq!((&*got.text, got.truncated), ("unnamed 2", true));
        assert!(c.holds(&b""[..], &got.text));
        c.insert(b""[..].into(), t("u3"), false);
        c.insert(b"c"[..].into(), t("c"), false);
        // "b" was older than the re-set unnamed entry.
        assert!(c.get(&b"b"[..]).is_none() && c.get(&b""[..]).is_some());
        assert_eq!(c.remove(&b""[..]).map(|n| n.text), Some(t("u3")));
        assert_eq!((c.len(), c.text_bytes(), c.heap_bytes()), (1, 1, 65));
        c.insert(b""[..].into(), t("x"), false);
        c.clear();
        assert!(c.is_empty() && c.get(&b""[..]).is_none());
    }
}
