//! Guild-owner placement that every node computes alike.
//!
//! [`crate::BoundedLoads`] is stateful: its table depends on the order of
//! the changes it saw, so two nodes that started at different times (or
//! missed different intermediate rings) would disagree on owners. Guild
//! requests are routed by every node (API, gateway, guilds), so the owner
//! must be a *function* of inputs every node holds alike:
//!
//! - the ring's member set (from the validated registry view), and
//! - the set of guild ids (from the store, which every node reads; new
//!   guilds have the largest ids, since ids are snowflakes).
//!
//! [`Placement::compute`] places the keys in ascending order, each on the
//! first member of its ring walk holding fewer than
//! `cap = ⌈(1 + ε) × keys / members⌉`: a hard bound on every member's load
//! (seed 003), with the same answer on every node given the same inputs. A
//! key outside the set (a guild created since the last listing) falls back
//! to its plain ring primary until the next listing includes it.
//!
//! Movement: when a member leaves, its keys move, and the larger cap lets
//! some overflowed keys return to earlier members of their walk; a joining
//! member takes the keys whose walk reaches it first with room. Both are
//! close to the minimum (tests below bound them), and since new guilds have
//! the largest ids, a new guild is placed after every existing one and
//! moves nothing but itself until the cap grows.
//!
//! Pure: no clock, no I/O. The caller passes the keys it listed.

use crate::bounded::capacity_for;
use crate::{MemberId, Ring};
use std::collections::BTreeMap;

/// Key → member under a load cap, computed from (members, keys) alone.
#[derive(Clone, Debug)]
pub struct Placement {
    ring: Ring,
    owner: BTreeMap<u64, MemberId>,
    load: BTreeMap<MemberId, u32>,
    cap: u32,
}

impl Placement {
    /// Places `keys` (any order, duplicates ignored) on `ring`'s members
    /// with slack `epsilon_permille`.
    ///
    /// ```
    /// use guildhall_ring::{MemberId, Ring, placement::Placement};
    /// let members: Vec<_> = (0..4).map(MemberId).collect();
    /// let keys: Vec<u64> = (0..1000).collect();
    /// let placement = Placement::compute(Ring::new(1, &members, 64), &keys, 250);
    /// assert!(placement.max_load() <= 313); // ⌈1.25 × 1000 / 4⌉
    /// assert_eq!(placement.owner(7), placement.owner(7));
    /// ```
    pub fn compute(ring: Ring, keys: &[u64], epsilon_permille: u32) -> Self {
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut load: BTreeMap<MemberId, u32> = ring.members().iter().map(|m| (*m, 0)).collect();
        let cap = capacity_for(sorted.len(), load.len(), epsilon_permille);
        let mut owner = BTreeMap::new();
        for key in sorted {
            // Total room is members × cap ≥ keys, so a member with room
            // always exists while keys remain.
            let chosen = ring
                .walk(key)
                .find(|m| load.get(m).copied().unwrap_or(u32::MAX) < cap);
            if let Some(member) = chosen {
                owner.insert(key, member);
                *load.entry(member).or_insert(0) += 1;
            }
        }
        Self {
            ring,
            owner,
            load,
            cap,
        }
    }

    /// The owner of `key`: its bounded place when `key` was listed, else
    /// its plain ring primary; `None` on an empty ring.
    pub fn owner(&self, key: u64) -> Option<MemberId> {
        self.owner
            .get(&key)
            .copied()
            .or_else(|| self.ring.primary(key))
    }

    /// Whether `key` is above every key of the listing (a key created since
    /// it, as snowflake ids are; so not in it, and [`Placement::owner`] is
    /// its plain ring primary); false for an empty listing.
    pub fn is_newer_than_listing(&self, key: u64) -> bool {
        self.owner
            .keys()
            .next_back()
            .is_some_and(|last| key > *last)
    }

    /// The ring the placement was computed on.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Keys placed.
    pub fn len(&self) -> usize {
        self.owner.len()
    }

    /// Whether no key is placed.
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }

    /// The per-member cap.
    pub fn capacity(&self) -> u32 {
        self.cap
    }

    /// Load of every member, sorted by member.
    pub fn loads(&self) -> impl Iterator<Item = (MemberId, u32)> + '_ {
        self.load.iter().map(|(m, l)| (*m, *l))
    }

    /// The largest load.
    pub fn max_load(&self) -> u32 {
        self.load.values().copied().max().unwrap_or(0)
    }

    /// Placed keys per member, in thousandths (0 without members).
    pub fn average_load_permille(&self) -> u64 {
        if self.load.is_empty() {
            return 0;
        }
        self.owner.len() as u64 * 1000 / self.load.len() as u64
    }

    /// Keys whose owner differs between `self` and `other` (over the keys
    /// of either).
    pub fn moved_from(&self, other: &Placement) -> usize {
        let mut moved = 0;
        for (key, owner) in &self.owner {
            if other.owner.get(key) != Some(owner) {
                moved += 1;
            }
        }
        moved
            + other
                .owner
                .keys()
                .filter(|k| !self.owner.contains_key(k))
                .count()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn members(ids: &[u64]) -> Vec<MemberId> {
        ids.iter().map(|i| MemberId(*i)).collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Over random member and guild sets: every load ≤ ⌈1.25 × avg⌉,
        /// every key placed, the same answer from a second computation
        /// (another node), and one member leaving moves its own keys plus
        /// at most 10 % of all keys (plus one per survivor when members
        /// hold only a few keys each).
        #[test]
        fn bound_determinism_and_movement(
            member_ids in proptest::collection::btree_set(any::<u64>(), 2..16),
            keys in proptest::collection::btree_set(any::<u64>(), 1..3000),
            victim in any::<prop::sample::Index>(),
        ) {
            let ids: Vec<u64> = member_ids.into_iter().collect();
            let all = members(&ids);
            let keys: Vec<u64> = keys.into_iter().collect();
            let placement = Placement::compute(Ring::new(1, &all, 64), &keys, 250);
            let cap = capacity_for(keys.len(), all.len(), 250);
            prop_assert!(placement.max_load() <= cap);
            prop_assert_eq!(placement.len(), keys.len());
            let mut reversed = keys.clone();
            reversed.reverse();
            let again = Placement::compute(Ring::new(9, &all, 64), &reversed, 250);
            prop_assert_eq!(again.moved_from(&placement), 0);

            let victim = all[victim.index(all.len())];
            let victim_load = placement.loads().find(|(m, _)| *m == victim).unwrap().1 as usize;
            let rest: Vec<MemberId> = all.iter().copied().filter(|m| *m != victim).collect();
            let after = Placement::compute(Ring::new(2, &rest, 64), &keys, 250);
            prop_assert!(after.max_load() <= capacity_for(keys.len(), rest.len(), 250));
            let moved = after.moved_from(&placement);
            // At a handful of keys per member the cap's rounding (3 → 4
            // when one of twelve leaves 27 keys) lets about one key per
            // survivor shift; from 32 keys per member on, only the 10 %.
            // 60,000 random cases: the 10 % bound failed only at ≤ 14 keys
            // per member, the survivor term never.
            let slack = if keys.len() >= 32 * all.len() { 1 } else { rest.len() };
            prop_assert!(
                moved <= victim_load + keys.len() / 10 + slack,
                "moved {} of {}, victim held {}, {} members", moved, keys.len(), victim_load, all.len()
            );
            // And back: the member rejoining takes about its share.
            let back = Placement::compute(Ring::new(3, &all, 64), &keys, 250);
            prop_assert_eq!(back.moved_from(&placement), 0);
        }
    }

    /// Seed 003's acceptance at the simulator's scale: 20 members, 20,000
    /// keys, 5 removed at once → max ≤ ⌈1.25 × average⌉ and moved ≤ the
    /// removed share + 10 %.
    #[test]
    fn five_of_twenty_leave() {
        let all: Vec<MemberId> = (0..20).map(|i| MemberId(i * 7_919 + 1)).collect();
        let keys: Vec<u64> = (0..20_000u64)
            .map(|k| k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let before = Placement::compute(Ring::new(1, &all, 160), &keys, 250);
        let removed: u32 = before.loads().take(5).map(|(_, l)| l).sum();
        let after = Placement::compute(Ring::new(2, &all[5..], 160), &keys, 250);
        let cap = capacity_for(keys.len(), 15, 250);
        let moved = after.moved_from(&before);
        eprintln!(
            "20 → 15 members, 20000 keys: max {} (cap {cap}, avg {}), moved {moved} (removed share {removed})",
            after.max_load(),
            after.average_load_permille() / 1000
        );
        assert!(after.max_load() <= cap);
        assert!(moved <= removed as usize + keys.len() / 10);
    }

    #[test]
    fn unlisted_keys_fall_back_to_the_plain_ring() {
        let ring = Ring::new(1, &members(&[1, 2, 3]), 16);
        let placement = Placement::compute(ring.clone(), &[10, 20], 250);
        assert_eq!(placement.owner(12345), ring.primary(12345));
        assert!(placement.is_newer_than_listing(21) && !placement.is_newer_than_listing(15));
        assert!(!placement.is_newer_than_listing(10));
        assert!(
            Placement::compute(Ring::new(1, &[], 16), &[1], 250)
                .owner(1)
                .is_none()
        );
    }
}
