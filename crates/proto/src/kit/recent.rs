//! [`RecentTexts`]: the texts a connection built lately, so that a request repeating one shares
//! its allocation instead of a new one (one allocation per statement or shape, not per
//! request), and the grouping downstream recognizes it by pointer instead of comparing bytes.
//!
//! PostgreSQL keeps the last 8 texts parsed into the unnamed statement (drivers that do not
//! prepare cycle through a handful of statements), MongoDB the last request text and the last
//! cursor text. Bounded: a fixed number of texts, each at most a given length.

use std::sync::Arc;

/// The last `slots` distinct texts of at most `max_len` bytes each; once full, a new text
/// replaces the oldest.
#[derive(Debug)]
pub struct RecentTexts {
    texts: Vec<Arc<str>>,
    slots: usize,
    max_len: usize,
    /// Where the next new text goes once full (the oldest).
    next: usize,
}

impl RecentTexts {
    /// Remembers up to `slots` texts (at least 1) of at most `max_len` bytes.
    pub fn new(slots: usize, max_len: usize) -> Self {
        RecentTexts {
            texts: Vec::new(),
            slots: slots.max(1),
            max_len,
            next: 0,
        }
    }

    /// The text whose bytes are `text`, if seen lately.
    #[inline]
    pub fn find(&self, text: &[u8]) -> Option<Arc<str>> {
        if text.len() > self.max_len {
            return None;
        }
        self.texts
            .iter()
            .find(|t| t.len() == text.len() && t.as_bytes() == text)
            .cloned()
    }

    /// Remembers `text` (whole, not cut) if it is short enough.
    pub fn add(&mut self, text: &Arc<str>) {
        if text.len() > self.max_len {
            return;
        }
        if self.texts.len() < self.slots {
            self.texts.push(text.clone());
        } else if let Some(slot) = self.texts.get_mut(self.next) {
            *slot = text.clone();
            self.next = (self.next + 1) % self.slots;
        }
    }

    /// `text` as an `Arc`: the one seen lately with the same bytes, else a new one, then
    /// remembered.
    pub fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(t) = self.find(text.as_bytes()) {
            return t;
        }
        let t: Arc<str> = Arc::from(text);
        self.add(&t);
        t
    }

    /// Heap bytes held (texts shared elsewhere are counted here too).
    pub fn heap_bytes(&self) -> usize {
        self.texts.iter().map(|t| t.len() + 16).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn keeps_the_last_texts_and_shares_them() {
        const N: usize = 8;
        const MAX: usize = 1024;
        let mut r = RecentTexts::new(N, MAX);
        let texts: Vec<Arc<str>> = (0..N + 2).map(|i| Arc::from(format!("q{i}"))).collect();
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
        let long: Arc<str> = Arc::from("x".repeat(MAX + 1));
        r.add(&long);
        assert!(r.find(long.as_bytes()).is_none());
        assert!(r.heap_bytes() <= N * (16 + 3));
    }

    #[test]
    fn one_slot_shares_a_repeat_of_the_last_text_only() {
        let mut r = RecentTexts::new(1, usize::MAX);
        let a = r.share("find db.c {a}");
        let a2 = r.share("find db.c {a}");
        assert!(Arc::ptr_eq(&a, &a2));
        let b = r.share("find db.c {b}");
        assert_eq!(&*b, "find db.c {b}");
        let a3 = r.share("find db.c {a}");
        assert!(!Arc::ptr_eq(&a, &a3), "only the last text is remembered");
        assert_eq!(a, a3);
        // Zero slots means one.
        let mut z = RecentTexts::new(0, 16);
        let x = z.share("x");
        assert!(Arc::ptr_eq(&x, &z.share("x")));
    }

    proptest! {
        /// Against a model: `share` always returns the text asked for, shares exactly when
        /// the text is one of the last `slots` distinct remembered texts, and holds at most
        /// `slots` texts of at most `max_len` bytes.
        #[test]
        fn share_matches_a_model(
            slots in 1usize..5,
            max_len in 0usize..6,
            texts in proptest::collection::vec("[a-c]{0,5}", 0..40),
        ) {
            let mut r = RecentTexts::new(slots, max_len);
            let mut model: Vec<Arc<str>> = Vec::new();
            let mut next = 0;
            for s in &texts {
                let known = model.iter().find(|t| ***t == **s).cloned();
                let got = r.share(s);
                prop_assert_eq!(&*got, s.as_str());
                match known {
                    Some(k) => prop_assert!(Arc::ptr_eq(&k, &got)),
                    None if s.len() <= max_len => {
                        if model.len() < slots {
                            model.push(got.clone());
                        } else {
                            model[next] = got.clone();
                            next = (next + 1) % slots;
                        }
                    }
                    None => {}
                }
                prop_assert!(r.heap_bytes() <= slots * (16 + max_len));
            }
        }
    }
}
