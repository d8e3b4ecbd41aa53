//! The statement texts a connection parsed into its unnamed statement lately. Drivers that do
//! not prepare (pgbench `-M extended`, most ORMs) send every execution's SQL in a Parse of the
//! unnamed statement, cycling through a handful of statements: a text seen lately is shared
//! (one allocation per statement, not per execution), so the grouping downstream recognizes
//! it by pointer instead of comparing its bytes.
//!
//! Bounded: [`RECENT`] texts of at most [`RECENT_MAX_LEN`] bytes each (short texts, which the
//! run's text budget never charges).

use std::sync::Arc;

/// Texts remembered per connection.
pub(super) const RECENT: usize = 8;
/// The longest text remembered.
pub(super) const RECENT_MAX_LEN: usize = 1024;

/// The last [`RECENT`] distinct unnamed-statement texts, the newest last.
#[derive(Debug, Default)]
pub(super) struct RecentTexts {
    texts: Vec<Arc<str>>,
    /// Where the next new text goes once full (the oldest).
    next: usize,
}

impl RecentTexts {
    /// The text whose bytes are `sql`, if seen lately.
    #[inline]
    pub fn find(&self, sql: &[u8]) -> Option<Arc<str>> {
        if sql.len() > RECENT_MAX_LEN {
            return None;
        }
        self.texts
            .iter()
            .find(|t| t.len() == sql.len() && t.as_bytes() == sql)
            .cloned()
    }

    /// Remembers `text` (whole, not cut) if it is short enough.
    pub fn add(&mut self, text: &Arc<str>) {
        if text.len() > RECENT_MAX_LEN {
            return;
        }
        if self.texts.len() < RECENT {
            self.texts.push(text.clone());
        } else if let Some(slot) = self.texts.get_mut(self.next) {
            *slot = text.clone();
            self.next = (self.next + 1) % RECENT;
        }
    }

    /// Heap bytes held (texts shared with the statement cache are counted here too).
    pub fn heap_bytes(&self) -> usize {
        self.texts.iter().map(|t| t.len() + 16).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_texts_and_shares_them() {
        let mut r = RecentTexts::default();
        let texts: Vec<Arc<str>> = (0..RECENT + 2)
            .map(|i| Arc::from(format!("q{i}")))
            .collect();
        for t in &texts {
            assert!(r.find(t.as_bytes()).is_none());
            r.add(t);
        }
        // The two oldest were replaced.
        assert!(r.find(b"q0").is_none() && r.find(b"q1").is_none());
        for t in &texts[2..] {
            let got = r.find(t.as_bytes()).unwrap();
            assert!(Arc::ptr_eq(&got, t));
        }
        let long: Arc<str> = Arc::from("x".repeat(RECENT_MAX_LEN + 1));
        r.add(&long);
        assert!(r.find(long.as_bytes()).is_none());
        assert!(r.heap_bytes() <= RECENT * (16 + 3));
    }
}
