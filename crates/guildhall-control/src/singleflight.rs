//! Single-flight: concurrent requests for one key share one fetch.
//!
//! Seed 000's flood was thousands of cache misses for the same users after a
//! guilds node restarted. With single-flight, N callers asking for k keys cost
//! k backend fetches. The first caller for a key becomes its *leader* and
//! fetches; later callers *follow* and are handed the leader's result.
//!
//! Bounded twice: at most `keys_max` keys in flight and `waiters_per_key_max`
//! followers per key; beyond either, [`Join::Rejected`] (never a hidden
//! queue). If a leader is cancelled, its first follower is promoted so the
//! others are not stranded; if there is none, the key is forgotten.

use crate::Overloaded;
use std::collections::HashMap;
use std::hash::Hash;

/// What a caller must do after [`SingleFlight::join`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Join {
    /// Fetch, then call [`SingleFlight::complete`].
    Lead,
    /// Wait; the leader's completion returns this waiter.
    Follow,
    /// Too many keys or waiters: fail fast.
    Rejected(Overloaded),
}

/// In-flight fetches by key, each with its followers.
#[derive(Debug)]
pub struct SingleFlight<K, W> {
    keys_max: usize,
    waiters_per_key_max: usize,
    flights: HashMap<K, Vec<W>>,
    /// Joins refused so far.
    pub rejected_total: u64,
}

impl<K: Hash + Eq + Clone, W: PartialEq> SingleFlight<K, W> {
    /// An empty map with the given bounds.
    pub fn new(keys_max: usize, waiters_per_key_max: usize) -> Self {
        Self {
            keys_max,
            waiters_per_key_max,
            flights: HashMap::new(),
            rejected_total: 0,
        }
    }

    /// Joins the flight for `key` as `waiter`.
    ///
    /// ```
    /// use guildhall_control::singleflight::{Join, SingleFlight};
    /// let mut flights: SingleFlight<u64, u32> = SingleFlight::new(16, 16);
    /// assert_eq!(flights.join(7, 1), Join::Lead);
    /// assert_eq!(flights.join(7, 2), Join::Follow);
    /// assert_eq!(flights.complete(&7), vec![2]); // hand the result to waiter 2
    /// assert_eq!(flights.join(7, 3), Join::Lead); // a new flight
    /// ```
    pub fn join(&mut self, key: K, waiter: W) -> Join {
        let full = self.flights.len() >= self.keys_max;
        match self.flights.get_mut(&key) {
            Some(waiters) if waiters.len() >= self.waiters_per_key_max => {
                self.rejected_total += 1;
                Join::Rejected(Overloaded)
            }
            Some(waiters) => {
                waiters.push(waiter);
                Join::Follow
            }
            None if full => {
                self.rejected_total += 1;
                Join::Rejected(Overloaded)
            }
            None => {
                self.flights.insert(key, Vec::new());
                Join::Lead
            }
        }
    }

    /// The leader finished (with a result or an error): returns the followers
    /// to hand it to, and forgets the key.
    pub fn complete(&mut self, key: &K) -> Vec<W> {
        self.flights.remove(key).unwrap_or_default()
    }

    /// A follower gave up; it will not be returned by `complete`.
    pub fn cancel_follower(&mut self, key: &K, waiter: &W) {
        if let Some(waiters) = self.flights.get_mut(key) {
            waiters.retain(|w| w != waiter);
        }
    }

    /// The leader gave up: promotes the first follower to leader (it must now
    /// fetch), or forgets the key when nobody waits.
    pub fn cancel_leader(&mut self, key: &K) -> Option<W> {
        let waiters = self.flights.get_mut(key)?;
        if waiters.is_empty() {
            self.flights.remove(key);
            None
        } else {
            Some(waiters.remove(0))
        }
    }

    /// Whether a fetch for `key` is in flight.
    pub fn in_flight(&self, key: &K) -> bool {
        self.flights.contains_key(key)
    }

    /// Keys in flight.
    pub fn len(&self) -> usize {
        self.flights.len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.flights.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bounds_reject_instead_of_queueing() {
        let mut flights: SingleFlight<u8, u8> = SingleFlight::new(1, 1);
        assert_eq!(flights.join(1, 0), Join::Lead);
        assert_eq!(flights.join(1, 1), Join::Follow);
        assert_eq!(flights.join(1, 2), Join::Rejected(Overloaded));
        assert_eq!(flights.join(2, 3), Join::Rejected(Overloaded));
        assert_eq!(flights.rejected_total, 2);
    }

    #[test]
    fn cancelled_leader_hands_over_to_a_follower() {
        let mut flights: SingleFlight<u8, u8> = SingleFlight::new(4, 4);
        flights.join(1, 10);
        flights.join(1, 11);
        flights.join(1, 12);
        flights.cancel_follower(&1, &12);
        assert_eq!(flights.cancel_leader(&1), Some(11));
        assert_eq!(flights.complete(&1), Vec::<u8>::new());
        assert!(!flights.in_flight(&1));
    }

    proptest! {
        /// Never two fetches in flight for one key; every follower is handed
        /// a result exactly once (or was cancelled).
        #[test]
        fn one_fetch_per_key(ops in proptest::collection::vec((0u8..4, 0u8..5), 0..400)) {
            let mut flights: SingleFlight<u8, u32> = SingleFlight::new(3, 4);
            let mut fetching = std::collections::HashSet::new();
            let mut waiting: std::collections::HashMap<u8, Vec<u32>> = Default::default();
            let mut next = 0u32;
            for (op, key) in ops {
                next += 1;
                match op {
                    0 | 1 => match flights.join(key, next) {
                        Join::Lead => prop_assert!(fetching.insert(key), "second fetch for {key}"),
                        Join::Follow => waiting.entry(key).or_default().push(next),
                        Join::Rejected(_) => {}
                    },
                    2 => {
                        let handed = flights.complete(&key);
                        prop_assert_eq!(handed, waiting.remove(&key).unwrap_or_default());
                        fetching.remove(&key);
                    }
                    _ => match flights.cancel_leader(&key) {
                        Some(w) => { let list = waiting.get_mut(&key).unwrap(); prop_assert_eq!(list.remove(0), w); }
                        None => { fetching.remove(&key); }
                    },
                }
                prop_assert!(flights.len() <= 3);
            }
        }
    }
}
