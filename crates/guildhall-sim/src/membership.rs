//! `sim membership`: seed 003's registry partition.
//!
//! `members` instances renew leases every TTL/3 (each with its own phase).
//! From `partition_at_s`, a `partition_fraction` of them cannot reach the
//! registry for `partition_s`; they keep running. Later one member really
//! dies (`kill_at_s`), to show that genuine failures are still removed.
//! Placement of `channels` keys uses bounded loads on the ring that the
//! membership table publishes; a key *double-moves* if its owner changes
//! more than once over the run (away and back, or on and on).
//!
//! Naive: removal at lease expiry, no hysteresis, no self-preservation, no
//! rebuild cap (etcd TTL expiry straight into the ring, as in the incident).

use crate::sim::{MS, Micros, Rng, S, round4};
use guildhall_ring::membership::RemovalReason;
use guildhall_ring::{
    BoundedLoads, MemberId, Membership, MembershipConfig, MembershipEffect, Ring,
};
use serde::Serialize;
use std::collections::BTreeMap;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Members.
    pub members: u32,
    /// Share of members cut from the registry.
    pub partition_fraction: f64,
    /// How long.
    pub partition_s: u64,
    /// When the partition starts.
    pub partition_at_s: u64,
    /// Self-preservation window.
    pub window_s: u64,
    /// Most removals per window, as a share of members.
    pub max_removal: f64,
    /// Keys placed on the ring.
    pub channels: u32,
    /// When one (non-partitioned) member dies for real; 0 for never.
    pub kill_at_s: u64,
    /// How long the run lasts.
    pub duration_s: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            members: 20,
            partition_fraction: 0.4,
            partition_s: 30,
            partition_at_s: 60,
            window_s: 30,
            max_removal: 0.15,
            channels: 20_000,
            kill_at_s: 180,
            duration_s: 300,
        }
    }
}

/// What `sim membership` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "membership".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Members.
    pub members: u32,
    /// Members cut from the registry.
    pub partitioned: u32,
    /// Largest share of members removed by expiry within one window.
    pub max_removed_fraction_per_window: f64,
    /// Seconds from the partition's start to the alarm; null if none.
    pub alarm_at_s: Option<f64>,
    /// Keys whose owner changed more than once.
    pub double_moves: u32,
    /// Keys whose owner changed at least once.
    pub moved_keys: u32,
    /// Members removed by expiry over the run.
    pub removed_total: u32,
    /// Whether the member that really died was removed.
    pub dead_member_removed: bool,
    /// Ring generations published.
    pub ring_rebuilds: u64,
}

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let limits = guildhall_limits::Limits::default();
    let config = if naive {
        MembershipConfig {
            window_ms: params.window_s * 1000,
            ..MembershipConfig::naive()
        }
    } else {
        MembershipConfig {
            window_ms: params.window_s * 1000,
            removal_permille: (params.max_removal * 1000.0).round() as u32,
            ..MembershipConfig::default()
        }
    };
    let renew_us = limits.lease_renew_interval_ms * MS;
    let members: Vec<MemberId> = (0..params.members)
        .map(|i| MemberId(u64::from(i) + 1))
        .collect();
    let phase: Vec<Micros> = members.iter().map(|_| rng.below(renew_us)).collect();
    let partitioned_count =
        (f64::from(params.members) * params.partition_fraction).round() as usize;
    let mut order: Vec<usize> = (0..members.len()).collect();
    for i in 0..order.len() {
        let j = i + rng.below((order.len() - i) as u64) as usize;
        order.swap(i, j);
    }
    let partitioned: Vec<bool> = {
        let mut v = vec![false; members.len()];
        for i in &order[..partitioned_count.min(members.len())] {
            v[*i] = true;
        }
        v
    };
    // The victim is a member outside the partition.
    let victim = order.get(partitioned_count).copied();
    let keys: Vec<u64> = (0..params.channels).map(|_| rng.next_u64()).collect();

    let mut table = Membership::new(config.clone(), 0);
    let mut fx = Vec::new();
    for m in &members {
        table.renew(0, *m, &mut fx);
    }
    let mut placement = BoundedLoads::new(
        Ring::new(
            table.generation(),
            &table.members(),
            limits.ring_vnodes_per_member,
        ),
        limits.ring_load_epsilon_permille,
        usize::MAX,
    );
    for k in &keys {
        let _ = placement.place(*k);
    }
    let mut owner: Vec<Option<MemberId>> = keys.iter().map(|k| placement.owner(*k)).collect();
    let mut moves = vec![0u8; keys.len()];
    let mut removed_per_window: BTreeMap<u64, u32> = BTreeMap::new();
    let (mut alarm_at, mut removed_total, mut rebuilds, mut dead_removed) =
        (None, 0u32, 0u64, false);
    let (p_start, p_end) = (
        params.partition_at_s * S,
        (params.partition_at_s + params.partition_s) * S,
    );
    let tick = 100 * MS;
    let mut now: Micros = 0;
    while now <= params.duration_s * S {
        fx.clear();
        for (i, m) in members.iter().enumerate() {
            let cut = partitioned[i] && now >= p_start && now < p_end;
            let dead = Some(i) == victim && params.kill_at_s > 0 && now >= params.kill_at_s * S;
            // Renew when this member's phase comes round in this tick.
            let due = (now + renew_us - phase[i]) % renew_us < tick;
            if due && !cut && !dead {
                table.renew(now / MS, *m, &mut fx);
            }
        }
        table.tick(now / MS, &mut fx);
        for effect in &fx {
            match effect {
                MembershipEffect::Alarm { .. } if alarm_at.is_none() => {
                    alarm_at = Some(round4(now.saturating_sub(p_start) as f64 / S as f64));
                }
                MembershipEffect::Removed {
                    member,
                    reason: RemovalReason::Expired,
                } => {
                    removed_total += 1;
                    *removed_per_window
                        .entry(now / (params.window_s * S))
                        .or_insert(0) += 1;
                    if victim.map(|v| members[v]) == Some(*member) {
                        dead_removed = true;
                    }
                }
                MembershipEffect::RingChanged {
                    generation,
                    members: ring_members,
                } => {
                    rebuilds += 1;
                    placement.set_ring(Ring::new(
                        *generation,
                        ring_members,
                        limits.ring_vnodes_per_member,
                    ));
                    for (i, k) in keys.iter().enumerate() {
                        let o = placement.owner(*k);
                        if o != owner[i] {
                            moves[i] = moves[i].saturating_add(1);
                            owner[i] = o;
                        }
                    }
                }
                _ => {}
            }
        }
        now += tick;
    }
    let max_removed = removed_per_window.values().copied().max().unwrap_or(0);
    Report {
        scenario: "membership",
        mode: if naive { "naive" } else { "hardened" },
        seed,
        members: params.members,
        partitioned: partitioned_count as u32,
        max_removed_fraction_per_window: round4(
            f64::from(max_removed) / f64::from(params.members.max(1)),
        ),
        alarm_at_s: alarm_at,
        double_moves: moves.iter().filter(|m| **m >= 2).count() as u32,
        moved_keys: moves.iter().filter(|m| **m >= 1).count() as u32,
        removed_total,
        dead_member_removed: dead_removed,
        ring_rebuilds: rebuilds,
    }
}
