//! A consistent hash ring with virtual nodes.
//!
//! Each member owns `vnodes_per_member` points; a key belongs to the first
//! point clockwise from the key's point. Many points per member mean that when
//! a member leaves, its keys spread over all survivors instead of piling onto
//! one neighbour (the secondary/tertiary pile-up of seed 003).
//!
//! A `Ring` is immutable: membership changes build a new ring with the next
//! generation number (see [`crate::history`]).

use crate::{MemberId, hash};

/// An immutable ring of one generation.
#[derive(Clone, Debug)]
pub struct Ring {
    generation: u64,
    /// Sorted, deduplicated members; `points` refer to them by index.
    members: Vec<MemberId>,
    /// (point, index into `members`), sorted by point then index.
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// Builds generation `generation` of a ring over `members` (duplicates are
    /// ignored, order does not matter) with `vnodes_per_member` points each.
    /// Members beyond [`guildhall_limits::RING_MEMBERS_MAX`] are not placed:
    /// the membership table refuses them before they get here.
    pub fn new(generation: u64, members: &[MemberId], vnodes_per_member: u32) -> Self {
        let mut members = members.to_vec();
        members.sort_unstable();
        members.dedup();
        members.truncate(guildhall_limits::RING_MEMBERS_MAX);
        let vnodes = vnodes_per_member.max(1);
        let mut points = Vec::with_capacity(members.len() * vnodes as usize);
        for (index, member) in members.iter().enumerate() {
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            for vnode in 0..vnodes {
                points.push((hash::vnode_point(*member, vnode), index));
            }
        }
        points.sort_unstable();
        Self {
            generation,
            members,
            points,
        }
    }

    /// The generation this ring was built for.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Members of this ring, sorted.
    pub fn members(&self) -> &[MemberId] {
        &self.members
    }

    /// Whether the ring has no members (every lookup answers `None`).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Index into `points` of the first point at or after `point`, wrapping.
    fn start(&self, point: u64) -> usize {
        let index = self.points.partition_point(|&(p, _)| p < point);
        if index == self.points.len() { 0 } else { index }
    }

    /// The member owning `key` on the plain ring.
    pub fn primary(&self, key: u64) -> Option<MemberId> {
        if self.points.is_empty() {
            return None;
        }
        let (_, index) = self.points[self.start(hash::key_point(key))];
        Some(self.members[index as usize])
    }

    /// Every point's member clockwise from `key`, once around the ring (a
    /// member appears once per virtual node). Bounded by the point count.
    pub fn walk(&self, key: u64) -> impl Iterator<Item = MemberId> + '_ {
        let start = if self.points.is_empty() {
            0
        } else {
            self.start(hash::key_point(key))
        };
        let len = self.points.len();
        (0..len).map(move |offset| self.members[self.points[(start + offset) % len].1 as usize])
    }

    /// The first `n` distinct members clockwise from `key`: primary,
    /// secondary, tertiary, ... `n` is clamped to
    /// [`guildhall_limits::RING_PREFERENCE_LIST_LEN_MAX`] and to the member
    /// count.
    ///
    /// ```
    /// use guildhall_ring::{MemberId, Ring};
    /// let ring = Ring::new(1, &[MemberId(1), MemberId(2), MemberId(3)], 64);
    /// let list = ring.preference_list(42, 3);
    /// assert_eq!(list.len(), 3);
    /// assert_eq!(Some(list[0]), ring.primary(42));
    /// ```
    pub fn preference_list(&self, key: u64, n: usize) -> Vec<MemberId> {
        let want = n
            .min(guildhall_limits::RING_PREFERENCE_LIST_LEN_MAX)
            .min(self.members.len());
        let mut list = Vec::with_capacity(want);
        for member in self.walk(key) {
            if list.len() == want {
                break;
            }
            if !list.contains(&member) {
                list.push(member);
            }
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(n: u64) -> Vec<MemberId> {
        (1..=n).map(MemberId).collect()
    }

    #[test]
    fn empty_ring_answers_none() {
        let ring = Ring::new(0, &[], 16);
        assert_eq!(ring.primary(1), None);
        assert!(ring.preference_list(1, 3).is_empty());
    }

    #[test]
    fn order_of_members_does_not_matter() {
        let a = Ring::new(1, &[MemberId(3), MemberId(1), MemberId(2)], 32);
        let b = Ring::new(1, &[MemberId(1), MemberId(2), MemberId(3), MemberId(2)], 32);
        for key in 0..1000 {
            assert_eq!(a.primary(key), b.primary(key));
        }
    }

    #[test]
    fn plain_ring_load_is_reasonably_even_with_vnodes() {
        let ring = Ring::new(1, &members(20), guildhall_limits::RING_VNODES_PER_MEMBER);
        let mut load = std::collections::HashMap::new();
        for key in 0..20_000u64 {
            *load.entry(ring.primary(key).unwrap()).or_insert(0u32) += 1;
        }
        let max = *load.values().max().unwrap();
        // 160 vnodes: max/avg stays well below 1.5 (measured ≈ 1.15).
        assert!(max < 1500, "max load {max} of average 1000");
    }

    proptest! {
        #[test]
        fn preference_list_is_distinct_and_starts_with_primary(
            n in 1u64..30, key in any::<u64>(), len in 1usize..10
        ) {
            let ring = Ring::new(1, &members(n), 16);
            let list = ring.preference_list(key, len);
            prop_assert_eq!(list.len(), len.min(8).min(n as usize));
            prop_assert_eq!(Some(list[0]), ring.primary(key));
            let mut dedup = list.clone();
            dedup.sort_unstable();
            dedup.dedup();
            prop_assert_eq!(dedup.len(), list.len());
        }

        /// Removing one member moves only that member's keys; adding one
        /// moves only keys to it (the consistent-hashing property).
        #[test]
        fn single_leave_moves_only_its_keys(n in 2u64..25, victim in 0u64..25) {
            let all = members(n);
            let victim = MemberId(victim % n + 1);
            let before = Ring::new(1, &all, 32);
            let rest: Vec<_> = all.iter().copied().filter(|m| *m != victim).collect();
            let after = Ring::new(2, &rest, 32);
            for key in 0..2000u64 {
                let (b, a) = (before.primary(key).unwrap(), after.primary(key).unwrap());
                if b != victim {
                    prop_assert_eq!(a, b);
                }
            }
        }
    }
}
