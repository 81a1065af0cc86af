//! `sim ring`: seed 003's ring collapse.
//!
//! `nodes` instances hold `keys` voice channels; `remove` of them leave at
//! once. We compare the plain consistent-hash ring (each key goes to the first
//! member clockwise) with bounded-load placement (no member above
//! ⌈(1 + ε) × average⌉), both on the same ring. Loads are counted in keys
//! among the survivors; a key *moved* if its owner changed.
//!
//! Naive: one point per member (a ring without virtual nodes), so a removed
//! member's keys all land on its one clockwise neighbour: the secondary and
//! tertiary pile-up of the incident.

use crate::sim::{Rng, round4};
use guildhall_ring::{BoundedLoads, MemberId, Ring, bounded::capacity_for, hash::member_id_of};
use serde::Serialize;
use std::collections::BTreeMap;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Members before the removal.
    pub nodes: u32,
    /// Keys placed.
    pub keys: u32,
    /// Members removed at once.
    pub remove: u32,
    /// Bounded-load slack ε.
    pub epsilon: f64,
    /// Virtual nodes per member (1 in the naive configuration).
    pub vnodes: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            nodes: 20,
            keys: 20_000,
            remove: 5,
            epsilon: 0.25,
            vnodes: guildhall_limits::RING_VNODES_PER_MEMBER,
        }
    }
}

/// Figures for one placement policy.
#[derive(Clone, Debug, Serialize)]
pub struct Placement {
    /// Largest survivor load over the survivors' average.
    pub max_over_avg: f64,
    /// Keys whose owner changed, over all keys.
    pub moved_fraction: f64,
    /// Largest survivor load, in keys.
    pub max_load: u32,
}

/// What `sim ring` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "ring".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Members before.
    pub nodes: u32,
    /// Members removed.
    pub removed: u32,
    /// Keys.
    pub keys: u32,
    /// Virtual nodes per member.
    pub vnodes_per_node: u32,
    /// The removed members' share of the keys before removal.
    pub removed_share: f64,
    /// ⌈(1 + ε) × keys / survivors⌉.
    pub cap: u32,
    /// Plain consistent hashing.
    pub plain: Placement,
    /// Bounded loads.
    pub bounded: Placement,
    /// Whether bounded placement kept every survivor at or under the cap.
    pub bounded_cap_respected: bool,
}

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let vnodes = if naive { 1 } else { params.vnodes.max(1) };
    let members: Vec<MemberId> = (0..params.nodes)
        .map(|i| member_id_of(&format!("voice-syncer-{i}")))
        .collect();
    let keys: Vec<u64> = (0..params.keys).map(|_| rng.next_u64()).collect();
    // Remove a random subset (partial Fisher-Yates over the member list).
    let mut shuffled = members.clone();
    let remove = params.remove.min(params.nodes.saturating_sub(1)) as usize;
    for i in 0..remove {
        let j = i + rng.below((shuffled.len() - i) as u64) as usize;
        shuffled.swap(i, j);
    }
    let removed: Vec<MemberId> = shuffled[..remove].to_vec();
    let survivors: Vec<MemberId> = members
        .iter()
        .copied()
        .filter(|m| !removed.contains(m))
        .collect();
    let before = Ring::new(1, &members, vnodes);
    let after = Ring::new(2, &survivors, vnodes);
    let avg = f64::from(params.keys) / survivors.len().max(1) as f64;
    let epsilon_permille = (params.epsilon * 1000.0).round() as u32;
    let cap = capacity_for(params.keys as usize, survivors.len(), epsilon_permille);

    // Plain ring.
    let mut plain_load: BTreeMap<MemberId, u32> = BTreeMap::new();
    let (mut plain_moved, mut removed_keys) = (0u32, 0u32);
    for key in &keys {
        let (b, a) = (before.primary(*key), after.primary(*key));
        if b != a {
            plain_moved += 1;
        }
        if b.is_some_and(|m| removed.contains(&m)) {
            removed_keys += 1;
        }
        if let Some(a) = a {
            *plain_load.entry(a).or_insert(0) += 1;
        }
    }
    let plain_max = plain_load.values().copied().max().unwrap_or(0);

    // Bounded loads on the same ring.
    let mut table = BoundedLoads::new(before, epsilon_permille, usize::MAX);
    for key in &keys {
        let _ = table.place(*key);
    }
    let owners_before: Vec<_> = keys.iter().map(|k| table.owner(*k)).collect();
    table.set_ring(after);
    let bounded_moved = keys
        .iter()
        .zip(&owners_before)
        .filter(|(k, o)| table.owner(**k) != **o)
        .count();
    let bounded_max = table.max_load();
    let n = f64::from(params.keys.max(1));
    Report {
        scenario: "ring",
        mode: if naive { "naive" } else { "hardened" },
        seed,
        nodes: params.nodes,
        removed: remove as u32,
        keys: params.keys,
        vnodes_per_node: vnodes,
        removed_share: round4(f64::from(removed_keys) / n),
        cap,
        plain: Placement {
            max_over_avg: round4(f64::from(plain_max) / avg),
            moved_fraction: round4(f64::from(plain_moved) / n),
            max_load: plain_max,
        },
        bounded: Placement {
            max_over_avg: round4(f64::from(bounded_max) / avg),
            moved_fraction: round4(bounded_moved as f64 / n),
            max_load: bounded_max,
        },
        bounded_cap_respected: bounded_max <= cap && table.check_invariants().is_ok(),
    }
}
