//! Placement of work on nodes: who owns a guild, a voice channel, a user shard.
//!
//! - [`hash`]: the stable hash every process agrees on.
//! - [`ring`]: a consistent hash ring with virtual nodes and preference lists.
//! - [`bounded`]: placement with bounded loads and minimal movement.
//! - [`history`]: ring generations, so a lookup during a change is stable.
//! - [`placement`]: bounded-load guild placement every node computes alike.
//! - [`membership`]: the lease table that decides who is on the ring, with
//!   down/permanently-down hysteresis, self-preservation and a rebuild cap.
//!
//! Architecture invariant: this crate is pure. It reads no clock (time is the
//! `now_ms` argument), does no I/O, spawns nothing and depends on no runtime,
//! so the simulator can drive it at Discord scale and tests can be exhaustive.

pub mod bounded;
pub mod hash;
pub mod history;
pub mod membership;
pub mod placement;
pub mod ring;

pub use bounded::BoundedLoads;
pub use history::RingHistory;
pub use membership::{MemberState, Membership, MembershipConfig, MembershipEffect};
pub use ring::Ring;

/// Identity of a ring member (a node announcing a role). Stable across
/// restarts of that node: the registry derives it from the node's name with
/// [`hash::member_id_of`], so every observer computes the same ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(pub u64);

impl std::fmt::Display for MemberId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "m{:016x}", self.0)
    }
}
