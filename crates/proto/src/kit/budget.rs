//! The request-text budget shared by every session of a run: one global bound on the bytes of
//! request text that sessions hold or buffer, across all connections and capture threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The default global budget: 64 MiB of request text across all connections.
pub const DEFAULT_TEXT_BUDGET: usize = 64 << 20;
/// What a request keeps of its text when the budget is exhausted: enough to fingerprint.
/// Text up to this length is never charged.
pub const TEXT_PREFIX: usize = 4096;

#[derive(Debug)]
struct Inner {
    limit: usize,
    used: AtomicUsize,
}

/// A cheap clonable handle over one budget; every clone shares it (`Send + Sync`), and the
/// count of requests it cut (see [`TextBudget::counting_apart`]).
#[derive(Clone, Debug)]
pub struct TextBudget(Arc<Inner>, Arc<AtomicU64>);

impl Default for TextBudget {
    fn default() -> Self {
        TextBudget::new(DEFAULT_TEXT_BUDGET)
    }
}

impl TextBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: usize) -> Self {
        TextBudget(
            Arc::new(Inner {
                limit,
                used: AtomicUsize::new(0),
            }),
            Arc::new(AtomicU64::new(0)),
        )
    }

    /// A handle on the same budget that counts its cuts apart from this one's (one per
    /// capture thread, so that per-thread health counters add up).
    pub fn counting_apart(&self) -> Self {
        TextBudget(self.0.clone(), Arc::new(AtomicU64::new(0)))
    }

    /// The configured bound in bytes.
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// Bytes currently charged.
    pub fn used(&self) -> usize {
        self.0.used.load(Ordering::Relaxed)
    }

    /// Takes up to `n` bytes; returns how many were granted (fewer when the budget is short).
    /// The caller gives them back with [`TextBudget::release`].
    pub fn try_take(&self, n: usize) -> usize {
        let mut used = self.0.used.load(Ordering::Relaxed);
        loop {
            let grant = n.min(self.0.limit.saturating_sub(used));
            if grant == 0 {
                return 0;
            }
            match self.0.used.compare_exchange_weak(
                used,
                used + grant,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => used = now,
            }
        }
    }

    /// Gives back `n` bytes taken with [`TextBudget::try_take`].
    pub fn release(&self, n: usize) {
        if n > 0 {
            self.0.used.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Takes up to `n` bytes as a [`Charge`] that gives them back when dropped.
    pub fn charge(&self, n: usize) -> Charge {
        let granted = self.try_take(n);
        Charge {
            budget: (granted > 0).then(|| self.clone()),
            granted,
        }
    }

    /// Records that a request's text was cut to a prefix because the budget was exhausted.
    pub fn note_cut(&self) {
        self.1.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests whose text was cut by the budget so far.
    pub fn cut(&self) -> u64 {
        self.1.load(Ordering::Relaxed)
    }

    /// How many bytes of a text `need` bytes long to keep: all of it when short or when the
    /// budget grants it (the grant is returned as a [`Charge`] to hold as long as the text is
    /// held), else at least [`TEXT_PREFIX`] and whatever was granted; the cut is counted.
    pub fn keep(&self, need: usize) -> (usize, Charge) {
        if need <= TEXT_PREFIX {
            return (need, Charge::default());
        }
        let charge = self.charge(need);
        if charge.granted() < need {
            self.note_cut();
            return (charge.granted().max(TEXT_PREFIX), charge);
        }
        (need, charge)
    }
}

/// Bytes taken from a [`TextBudget`], given back on drop.
#[derive(Debug, Default)]
pub struct Charge {
    budget: Option<TextBudget>,
    granted: usize,
}

impl Charge {
    /// Bytes held.
    pub fn granted(&self) -> usize {
        self.granted
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.release(self.granted);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_release() {
        let b = TextBudget::new(100);
        assert_eq!(b.try_take(60), 60);
        assert_eq!(b.try_take(60), 40);
        assert_eq!(b.try_take(1), 0);
        assert_eq!(b.used(), 100);
        b.release(40);
        assert_eq!(b.used(), 60);
        {
            let c = b.clone().charge(50);
            assert_eq!(c.granted(), 40);
            assert_eq!(b.used(), 100);
        }
        assert_eq!(b.used(), 60);
        b.release(60);
        assert_eq!(b.used(), 0);
        assert_eq!(b.limit(), 100);
    }

    #[test]
    fn keep_cuts_to_a_prefix_and_counts() {
        let b = TextBudget::new(10_000);
        let (k, c) = b.keep(100);
        assert_eq!((k, c.granted(), b.cut()), (100, 0, 0));
        let (k, c1) = b.keep(8_000);
        assert_eq!((k, c1.granted(), b.cut()), (8_000, 8_000, 0));
        let (k, c2) = b.keep(8_000);
        assert_eq!((k, c2.granted(), b.cut()), (TEXT_PREFIX, 2_000, 1));
        let (k, c3) = b.keep(5_000);
        assert_eq!((k, c3.granted(), b.cut()), (TEXT_PREFIX, 0, 2));
        drop((c1, c2, c3));
        assert_eq!(b.used(), 0);
        let (k, c4) = b.keep(8_000);
        assert_eq!(k, 8_000);
        let apart = b.counting_apart();
        let (k, c5) = apart.keep(8_000);
        assert_eq!(
            (k, c5.granted(), apart.cut(), b.cut()),
            (TEXT_PREFIX, 2_000, 1, 2)
        );
        drop(c4);
        assert_eq!(b.used(), 2_000);
        drop(c5);
        assert_eq!(apart.used(), 0);
    }

    #[test]
    fn shared_across_threads() {
        let b = TextBudget::new(1_000);
        let granted: usize = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let b = b.clone();
                    s.spawn(move || {
                        let mut got = 0;
                        for _ in 0..1_000 {
                            let g = b.try_take(3);
                            got += g;
                            if g > 0 && got % 2 == 0 {
                                b.release(g);
                                got -= g;
                            }
                        }
                        got
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert!(granted <= 1_000);
        assert_eq!(b.used(), granted);
    }
}
