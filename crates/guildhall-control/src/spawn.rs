//! A hierarchical spawn budget: a guild's voice coordinator and every child
//! syncer draw from the same allowance.
//!
//! Seed 003: "this rate limit in guilds was especially ineffective, as it
//! limits only the spawning of the coordinator voice syncer for each guild
//! while allowing an unbounded spawning of child syncers for each of the
//! guild's voice channels (each of which will select at least one SFU
//! endpoint they need to connect to)". Here every spawn, coordinator or
//! child, must pass three checks, cheapest refusal first:
//!
//! 1. the per-instance cap on *live* coordinators and syncers (a backstop
//!    that holds whatever the rates say);
//! 2. the guild's own bucket (a coordinator and its children share it, so
//!    one huge guild cannot take the whole budget);
//! 3. the instance's global bucket.
//!
//! Tokens are taken from both buckets only when both have one, so a refusal
//! costs nothing. A refusal is immediate and says when to come back
//! (`retry_after_ms`, unjittered: the caller adds jitter from its own random
//! numbers, see [`crate::retry::backoff_full_jitter_ms`]).
//!
//! [`SpawnBudget::naive`] is the incident's configuration for the
//! simulator: coordinators pay the global bucket, children pay nothing and
//! no cap applies to them.

use crate::token_bucket::TokenBucket;
use std::collections::BTreeMap;

/// What is being spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpawnKind {
    /// A guild's coordinator.
    Coordinator,
    /// A channel's syncer (a child of its guild's coordinator).
    Child,
}

/// Why a spawn was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpawnRefusal {
    /// The instance's spawn rate is spent.
    Global,
    /// The guild's share of the spawn rate is spent.
    Guild,
    /// The instance holds its maximum of live tasks of this kind.
    InstanceFull,
    /// Every tracked guild allowance is in use.
    GuildsFull,
}

impl SpawnRefusal {
    /// A stable label (metrics, logs).
    pub fn label(self) -> &'static str {
        match self {
            SpawnRefusal::Global => "global",
            SpawnRefusal::Guild => "guild",
            SpawnRefusal::InstanceFull => "instance_full",
            SpawnRefusal::GuildsFull => "guilds_full",
        }
    }
}

/// A refused spawn: why, and when a retry may succeed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnRefused {
    /// Why.
    pub reason: SpawnRefusal,
    /// When enough allowance will have accrued, ms (never 0; for a cap,
    /// `cap_retry_after_ms`).
    pub retry_after_ms: u64,
}

/// The budget's parameters (the `voice_spawn_*`, `voice_coordinators_max`
/// and `voice_syncers_max` limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpawnConfig {
    /// Spawns per second, coordinators and children together.
    pub rate_per_s: u32,
    /// Spawns at once above the rate.
    pub burst: u32,
    /// One guild's spawns per second.
    pub guild_rate_per_s: u32,
    /// One guild's spawns at once.
    pub guild_burst: u32,
    /// Live coordinators at most.
    pub coordinators_max: usize,
    /// Live children at most.
    pub children_max: usize,
    /// Guild allowances tracked at most.
    pub guilds_tracked_max: usize,
    /// `retry_after_ms` of a refusal by a cap (live tasks end at their own
    /// pace, so no rate says when).
    pub cap_retry_after_ms: u64,
}

impl SpawnConfig {
    /// The defaults of [`guildhall_limits`].
    pub fn from_limits(l: &guildhall_limits::Limits) -> Self {
        Self {
            rate_per_s: l.voice_spawn_rate_per_s,
            burst: l.voice_spawn_burst,
            guild_rate_per_s: l.voice_spawn_guild_rate_per_s,
            guild_burst: l.voice_spawn_guild_burst,
            coordinators_max: l.voice_coordinators_max,
            children_max: l.voice_syncers_max,
            guilds_tracked_max: l.voice_spawn_guilds_tracked_max,
            cap_retry_after_ms: l.voice_retry_after_ms,
        }
    }
}

/// The budget. One per voice instance.
#[derive(Clone, Debug)]
pub struct SpawnBudget {
    config: SpawnConfig,
    naive: bool,
    global: TokenBucket,
    guilds: BTreeMap<u64, TokenBucket>,
    live_coordinators: usize,
    live_children: usize,
}

impl SpawnBudget {
    /// The hardened budget: children counted, per-guild shares, live caps.
    ///
    /// ```
    /// use guildhall_control::spawn::{SpawnBudget, SpawnConfig, SpawnKind, SpawnRefusal};
    /// let config = SpawnConfig {
    ///     rate_per_s: 10, burst: 2, guild_rate_per_s: 10, guild_burst: 2,
    ///     coordinators_max: 100, children_max: 100, guilds_tracked_max: 100,
    ///     cap_retry_after_ms: 1_000,
    /// };
    /// let mut budget = SpawnBudget::new(config, 0);
    /// assert!(budget.try_spawn(0, 7, SpawnKind::Coordinator).is_ok());
    /// assert!(budget.try_spawn(0, 7, SpawnKind::Child).is_ok());
    /// // The child counted: the third spawn waits for the rate.
    /// let refused = budget.try_spawn(0, 7, SpawnKind::Child).unwrap_err();
    /// assert_eq!(refused.retry_after_ms, 100);
    /// ```
    pub fn new(config: SpawnConfig, now_ms: u64) -> Self {
        Self {
            config,
            naive: false,
            global: TokenBucket::new(now_ms, config.rate_per_s, config.burst),
            guilds: BTreeMap::new(),
            live_coordinators: 0,
            live_children: 0,
        }
    }

    /// Seed 003's budget, for the simulator: coordinators pay the global
    /// bucket and their cap; children are spawned without any check.
    pub fn naive(config: SpawnConfig, now_ms: u64) -> Self {
        Self {
            naive: true,
            ..Self::new(config, now_ms)
        }
    }

    /// Whether this is the naive budget.
    pub fn is_naive(&self) -> bool {
        self.naive
    }

    /// The configuration.
    pub fn config(&self) -> &SpawnConfig {
        &self.config
    }

    /// Live coordinators (spawned and not yet [`SpawnBudget::exited`]).
    pub fn live_coordinators(&self) -> usize {
        self.live_coordinators
    }

    /// Live children.
    pub fn live_children(&self) -> usize {
        self.live_children
    }

    /// Guild allowances tracked.
    pub fn guilds_tracked(&self) -> usize {
        self.guilds.len()
    }

    /// Asks to spawn a `kind` for `guild_id` at `now_ms`. On success the
    /// task counts as live until [`SpawnBudget::exited`].
    pub fn try_spawn(
        &mut self,
        now_ms: u64,
        guild_id: u64,
        kind: SpawnKind,
    ) -> Result<(), SpawnRefused> {
        let config = self.config;
        let cap_refusal = SpawnRefused {
            reason: SpawnRefusal::InstanceFull,
            retry_after_ms: config.cap_retry_after_ms.max(1),
        };
        match kind {
            SpawnKind::Coordinator if self.live_coordinators >= config.coordinators_max => {
                return Err(cap_refusal);
            }
            SpawnKind::Child if self.naive => {
                // The incident: children are not counted at all.
                self.live_children += 1;
                return Ok(());
            }
            SpawnKind::Child if self.live_children >= config.children_max => {
                return Err(cap_refusal);
            }
            _ => {}
        }
        if self.naive {
            self.global.try_take(now_ms, 1).map_err(|e| SpawnRefused {
                reason: SpawnRefusal::Global,
                retry_after_ms: e.retry_after_ms,
            })?;
            self.live_coordinators += 1;
            return Ok(());
        }
        if !self.guilds.contains_key(&guild_id) && self.guilds.len() >= config.guilds_tracked_max {
            self.forget_full_guilds(now_ms);
            if self.guilds.len() >= config.guilds_tracked_max {
                return Err(SpawnRefused {
                    reason: SpawnRefusal::GuildsFull,
                    retry_after_ms: config.cap_retry_after_ms.max(1),
                });
            }
        }
        let guild = self.guilds.entry(guild_id).or_insert_with(|| {
            TokenBucket::new(now_ms, config.guild_rate_per_s, config.guild_burst)
        });
        if guild.available(now_ms) == 0 {
            // A failed take takes nothing and says when.
            let retry_after_ms = guild
                .try_take(now_ms, 1)
                .err()
                .map_or(1, |e| e.retry_after_ms);
            return Err(SpawnRefused {
                reason: SpawnRefusal::Guild,
                retry_after_ms,
            });
        }
        self.global.try_take(now_ms, 1).map_err(|e| SpawnRefused {
            reason: SpawnRefusal::Global,
            retry_after_ms: e.retry_after_ms,
        })?;
        // Checked above: the guild has a token.
        let _ = guild.try_take(now_ms, 1);
        match kind {
            SpawnKind::Coordinator => self.live_coordinators += 1,
            SpawnKind::Child => self.live_children += 1,
        }
        Ok(())
    }

    /// A task spawned under this budget ended.
    pub fn exited(&mut self, kind: SpawnKind) {
        match kind {
            SpawnKind::Coordinator => {
                self.live_coordinators = self.live_coordinators.saturating_sub(1);
            }
            SpawnKind::Child => self.live_children = self.live_children.saturating_sub(1),
        }
    }

    /// Forgets guild allowances that are full again: a full bucket is the
    /// same as a new one, so nothing is lost.
    fn forget_full_guilds(&mut self, now_ms: u64) {
        let burst = u64::from(self.config.guild_burst.max(1));
        self.guilds
            .retain(|_, bucket| bucket.available(now_ms) < burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config(rate: u32, burst: u32, guild_rate: u32, guild_burst: u32) -> SpawnConfig {
        SpawnConfig {
            rate_per_s: rate,
            burst,
            guild_rate_per_s: guild_rate,
            guild_burst,
            coordinators_max: 1_000,
            children_max: 1_000,
            guilds_tracked_max: 1_000,
            cap_retry_after_ms: 500,
        }
    }

    #[test]
    fn children_draw_from_the_guild_and_global_allowance() {
        let mut budget = SpawnBudget::new(config(100, 4, 100, 2), 0);
        assert!(budget.try_spawn(0, 1, SpawnKind::Coordinator).is_ok());
        assert!(budget.try_spawn(0, 1, SpawnKind::Child).is_ok());
        let refused = budget.try_spawn(0, 1, SpawnKind::Child).unwrap_err();
        assert_eq!(refused.reason, SpawnRefusal::Guild);
        assert_eq!(refused.retry_after_ms, 10);
        // Another guild still has its share of the global bucket.
        assert!(budget.try_spawn(0, 2, SpawnKind::Coordinator).is_ok());
        assert!(budget.try_spawn(0, 2, SpawnKind::Child).is_ok());
        let refused = budget.try_spawn(0, 3, SpawnKind::Coordinator).unwrap_err();
        assert_eq!(refused.reason, SpawnRefusal::Global);
        // A refusal by the global bucket took nothing from guild 3.
        assert!(budget.try_spawn(10, 3, SpawnKind::Coordinator).is_ok());
        assert_eq!((budget.live_coordinators(), budget.live_children()), (3, 2));
    }

    #[test]
    fn live_caps_hold_and_exits_free_them() {
        let mut c = config(1_000, 100, 1_000, 100);
        c.children_max = 2;
        let mut budget = SpawnBudget::new(c, 0);
        assert!(budget.try_spawn(0, 1, SpawnKind::Child).is_ok());
        assert!(budget.try_spawn(0, 1, SpawnKind::Child).is_ok());
        let refused = budget.try_spawn(0, 1, SpawnKind::Child).unwrap_err();
        assert_eq!(
            refused,
            SpawnRefused {
                reason: SpawnRefusal::InstanceFull,
                retry_after_ms: 500
            }
        );
        budget.exited(SpawnKind::Child);
        assert!(budget.try_spawn(0, 1, SpawnKind::Child).is_ok());
    }

    #[test]
    fn guild_allowances_are_bounded_and_full_ones_forgotten() {
        let mut c = config(1_000, 100, 10, 1);
        c.guilds_tracked_max = 2;
        let mut budget = SpawnBudget::new(c, 0);
        assert!(budget.try_spawn(0, 1, SpawnKind::Coordinator).is_ok());
        assert!(budget.try_spawn(0, 2, SpawnKind::Coordinator).is_ok());
        let refused = budget.try_spawn(0, 3, SpawnKind::Coordinator).unwrap_err();
        assert_eq!(refused.reason, SpawnRefusal::GuildsFull);
        // After 100 ms guild 1's and 2's allowances are full again.
        assert!(budget.try_spawn(100, 3, SpawnKind::Coordinator).is_ok());
        assert!(budget.guilds_tracked() <= 2);
    }

    #[test]
    fn naive_counts_coordinators_only() {
        let mut budget = SpawnBudget::naive(config(1, 1, 1, 1), 0);
        assert!(budget.try_spawn(0, 1, SpawnKind::Coordinator).is_ok());
        assert!(budget.try_spawn(0, 2, SpawnKind::Coordinator).is_err());
        for _ in 0..10_000 {
            assert!(budget.try_spawn(0, 1, SpawnKind::Child).is_ok());
        }
        assert_eq!(budget.live_children(), 10_000);
    }

    proptest! {
        /// Over any sequence of requests, admitted spawns (children counted)
        /// in any window never exceed rate × window + burst, globally and
        /// per guild; live tasks never exceed their caps.
        #[test]
        fn admitted_spawns_never_exceed_the_budget_in_any_window(
            rate in 1u32..500, burst in 1u32..50,
            guild_rate_share in 1u32..=4, guild_burst in 1u32..10,
            caps in (1usize..50, 1usize..200),
            steps in proptest::collection::vec(
                (0u64..30, 0u64..6, any::<bool>(), 0u8..4), 1..600),
        ) {
            let guild_rate = (rate / guild_rate_share).max(1);
            let mut c = config(rate, burst, guild_rate, guild_burst.min(burst));
            c.coordinators_max = caps.0;
            c.children_max = caps.1;
            let mut budget = SpawnBudget::new(c, 0);
            let mut now = 0u64;
            let mut admitted: Vec<(u64, u64)> = Vec::new();
            let mut live: Vec<SpawnKind> = Vec::new();
            for (dt, guild, child, exit) in steps {
                now += dt;
                if exit == 0 && let Some(kind) = live.pop() {
                    budget.exited(kind);
                }
                let kind = if child { SpawnKind::Child } else { SpawnKind::Coordinator };
                match budget.try_spawn(now, guild, kind) {
                    Ok(()) => {
                        admitted.push((now, guild));
                        live.push(kind);
                    }
                    Err(refused) => prop_assert!(refused.retry_after_ms >= 1),
                }
                prop_assert!(budget.live_coordinators() <= caps.0);
                prop_assert!(budget.live_children() <= caps.1);
            }
            // Every window [admitted[i].0, admitted[j].0].
            for i in 0..admitted.len() {
                let mut per_guild: BTreeMap<u64, u64> = BTreeMap::new();
                for (j, (t, g)) in admitted.iter().enumerate().skip(i) {
                    let window_ms = t - admitted[i].0;
                    let count = (j - i + 1) as u64;
                    let allowed = u64::from(burst) + u64::from(rate) * window_ms / 1000;
                    prop_assert!(count <= allowed, "{count} spawns in {window_ms} ms > {allowed}");
                    let n = per_guild.entry(*g).or_insert(0);
                    *n += 1;
                    let guild_allowed = u64::from(c.guild_burst)
                        + u64::from(guild_rate) * window_ms / 1000;
                    prop_assert!(*n <= guild_allowed, "guild {g}: {n} > {guild_allowed}");
                }
            }
        }
    }
}
