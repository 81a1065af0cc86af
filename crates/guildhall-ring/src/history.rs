//! Ring generations.
//!
//! A request that resolved its owner on generation g must be able to finish on
//! g (and be fenced by g's token) while generation g+1 is being adopted; a
//! lookup on a generation that has been dropped answers `None`, telling the
//! caller to re-resolve on the current ring. The history is bounded by
//! [`guildhall_limits::RING_HISTORY_GENERATIONS_MAX`]; the oldest goes first.

use crate::Ring;
use std::collections::VecDeque;
use std::sync::Arc;

/// The last few rings, newest last.
#[derive(Debug)]
pub struct RingHistory {
    rings: VecDeque<Arc<Ring>>,
    generations_max: usize,
}

impl RingHistory {
    /// A history holding `initial` and at most `generations_max` (at least 2)
    /// generations.
    ///
    /// ```
    /// use guildhall_ring::{MemberId, Ring, RingHistory};
    /// let mut history = RingHistory::new(Ring::new(1, &[MemberId(1), MemberId(2)], 16), 4);
    /// let owner = history.current().primary(42);
    /// history.push(Ring::new(2, &[MemberId(3)], 16));
    /// // A request resolved on generation 1 still finds its owner there.
    /// assert_eq!(history.get(1).unwrap().primary(42), owner);
    /// ```
    pub fn new(initial: Ring, generations_max: usize) -> Self {
        let generations_max = generations_max.max(2);
        let mut rings = VecDeque::with_capacity(generations_max);
        rings.push_back(Arc::new(initial));
        Self {
            rings,
            generations_max,
        }
    }

    /// The newest ring.
    pub fn current(&self) -> Arc<Ring> {
        // Never empty: constructed with one ring, and push drops only when
        // full (so at least one remains).
        self.rings
            .back()
            .cloned()
            .unwrap_or_else(|| Arc::new(Ring::new(0, &[], 1)))
    }

    /// Adds a ring. Its generation must be newer than the current one;
    /// otherwise it is refused (returns false) so a reordered update cannot
    /// roll placement back.
    pub fn push(&mut self, ring: Ring) -> bool {
        if ring.generation() <= self.current().generation() {
            return false;
        }
        if self.rings.len() == self.generations_max {
            self.rings.pop_front();
        }
        self.rings.push_back(Arc::new(ring));
        true
    }

    /// The ring of `generation`, if still held.
    pub fn get(&self, generation: u64) -> Option<Arc<Ring>> {
        self.rings
            .iter()
            .find(|r| r.generation() == generation)
            .cloned()
    }

    /// Generations held, oldest first.
    pub fn generations(&self) -> Vec<u64> {
        self.rings.iter().map(|r| r.generation()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemberId;

    #[test]
    fn lookups_on_an_old_generation_stay_stable_until_it_is_dropped() {
        let mut history = RingHistory::new(Ring::new(1, &[MemberId(1), MemberId(2)], 16), 3);
        let owner_g1 = history.get(1).unwrap().primary(99);
        assert!(history.push(Ring::new(2, &[MemberId(3)], 16)));
        assert_eq!(history.get(1).unwrap().primary(99), owner_g1);
        assert_eq!(history.current().primary(99), Some(MemberId(3)));
        assert!(history.push(Ring::new(3, &[MemberId(4)], 16)));
        assert!(history.push(Ring::new(4, &[MemberId(5)], 16)));
        assert!(
            history.get(1).is_none(),
            "oldest generation is dropped when full"
        );
        assert_eq!(history.generations(), [2, 3, 4]);
    }

    #[test]
    fn stale_generation_is_refused() {
        let mut history = RingHistory::new(Ring::new(5, &[MemberId(1)], 16), 4);
        assert!(!history.push(Ring::new(5, &[MemberId(2)], 16)));
        assert!(!history.push(Ring::new(3, &[MemberId(2)], 16)));
        assert_eq!(history.current().generation(), 5);
    }
}
