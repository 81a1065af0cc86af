//! The lease table that decides who is on the ring.
//!
//! A member is `Alive` while it renews its lease. When the lease expires it
//! becomes `Down`: nothing new should be placed on it, but its keys stay put,
//! because most expiries are short stalls (seed 001's soft lockups, seed 004's
//! starved keep-alives). Only after `permanent_down_ms` more does it become a
//! removal candidate, and removal is what moves its keys.
//!
//! **Self-preservation** (Eureka's idea, seed 003's lesson): if more members
//! are down at once than `removal_permille` of the members allows within one
//! window (and more than `removals_min`, so one death among a few members
//! is still removed), that is far more likely a fault between the members
//! and the registry than a mass death. Removals freeze, [`MembershipEffect::Alarm`]
//! fires, and nothing moves; as renewals return, the few members still down
//! fit the budget again and are removed normally. An operator can still remove
//! a member explicitly ([`Membership::force_remove`]) or release the freeze
//! ([`Membership::release`]: every down member goes at once).
//!
//! **A freeze is bounded** (`freeze_max_ms`): members that stay down that long
//! are not a blip between members and the registry, and their keys have had
//! no owner the whole time (two of three guilds nodes dying together would
//! otherwise leave their guilds unserved for good). Past the bound, down
//! members past the hysteresis are removed at the window's budget, longest
//! down first ([`MembershipEffect::FreezeExpired`] says so once): paced, so a
//! partition that outlasts the bound still does not move every key at once.
//!
//! **Graceful leaves** are honoured at once: the member said it is going.
//!
//! **Rebuild cap**: at most `rebuilds_per_window_max` ring changes per window;
//! further changes are coalesced into one rebuild at the next window, so a
//! flapping member cannot make every node recompute placements nonstop.
//!
//! Pure: every method takes `now_ms` and returns effects for the caller to
//! carry out (publish the ring, raise the alarm, log).

use crate::MemberId;
use std::collections::BTreeMap;

/// Configuration; defaults come from [`guildhall_limits`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipConfig {
    /// Lease time-to-live.
    pub lease_ttl_ms: u64,
    /// Down → removal candidate hysteresis.
    pub permanent_down_ms: u64,
    /// Window over which removals and rebuilds are counted.
    pub window_ms: u64,
    /// Most members (permille of those at window start) removed per window
    /// before removals freeze.
    pub removal_permille: u32,
    /// Removals allowed per window whatever `removal_permille` gives (never
    /// the last member): one member down among a few is a death.
    pub removals_min: u32,
    /// Ring rebuilds allowed per window.
    pub rebuilds_per_window_max: u32,
    /// Members the table holds; further joins are refused.
    pub members_max: usize,
    /// Longest a freeze holds removals before they resume at the budget.
    pub freeze_max_ms: u64,
    /// Off only in the naive configuration that reproduces seed 003.
    pub self_preservation: bool,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        use guildhall_limits as l;
        Self {
            lease_ttl_ms: l::LEASE_TTL_MS,
            permanent_down_ms: l::MEMBER_PERMANENT_DOWN_MS,
            window_ms: l::SELF_PRESERVATION_WINDOW_MS,
            removal_permille: l::SELF_PRESERVATION_REMOVAL_PERMILLE,
            removals_min: l::SELF_PRESERVATION_REMOVALS_MIN,
            rebuilds_per_window_max: l::RING_REBUILDS_PER_WINDOW_MAX,
            members_max: l::RING_MEMBERS_MAX,
            freeze_max_ms: l::SELF_PRESERVATION_FREEZE_MAX_MS,
            self_preservation: true,
        }
    }
}

impl MembershipConfig {
    /// The configuration that reproduces seed 003: removal at lease expiry, no
    /// freeze, no rebuild cap.
    pub fn naive() -> Self {
        Self {
            permanent_down_ms: 0,
            removal_permille: 1000,
            rebuilds_per_window_max: u32::MAX,
            self_preservation: false,
            ..Self::default()
        }
    }
}

/// State of one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// Renewing its lease.
    Alive,
    /// Lease expired at `since_ms`; keys stay, no new placements.
    Down {
        /// When the lease expired.
        since_ms: u64,
    },
}

#[derive(Clone, Debug)]
struct Member {
    state: MemberState,
    lease_expires_ms: u64,
}

/// What the caller must do after a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipEffect {
    /// A new member joined the table.
    Joined(MemberId),
    /// A member's lease expired (stop placing new work on it).
    Down(MemberId),
    /// A down member renewed before removal (nothing moved).
    Up(MemberId),
    /// A member was removed: gracefully, expired past the hysteresis, or by
    /// an operator.
    Removed {
        /// Who.
        member: MemberId,
        /// Why.
        reason: RemovalReason,
    },
    /// Removals froze: `down` members are down, more than the window's budget
    /// of `budget` removals allows.
    Alarm {
        /// Members down right now.
        down: usize,
        /// Removals still allowed in this window.
        budget: usize,
    },
    /// The freeze ended: the members still down fit the budget again, or an
    /// operator released it.
    AlarmCleared,
    /// The freeze has held `held_ms`, its bound: `down` members are still
    /// down, and from now on they are removed at the window's budget.
    FreezeExpired {
        /// How long removals were held.
        held_ms: u64,
        /// Members down right now.
        down: usize,
    },
    /// Publish a new ring of these members (sorted) with this generation.
    RingChanged {
        /// Strictly increasing.
        generation: u64,
        /// Every member that is not removed (alive or down).
        members: Vec<MemberId>,
    },
    /// A join was refused because the table is full.
    Refused(MemberId),
}

/// Why a member left the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalReason {
    /// It announced its departure.
    Graceful,
    /// Down longer than the hysteresis, within the removal budget.
    Expired,
    /// An operator removed it, or released a freeze while it was down.
    Forced,
    /// Down past a freeze's bound, removed at the window's budget.
    FreezeExpired,
}

/// The lease table.
#[derive(Clone, Debug)]
pub struct Membership {
    config: MembershipConfig,
    members: BTreeMap<MemberId, Member>,
    window_start_ms: u64,
    members_at_window_start: usize,
    removed_in_window: usize,
    rebuilds_in_window: u32,
    frozen: bool,
    /// When the current freeze began.
    frozen_since_ms: u64,
    /// Whether the current freeze has outlasted `freeze_max_ms`.
    freeze_expired: bool,
    rebuild_pending: bool,
    generation: u64,
}

impl Membership {
    /// An empty table; `now_ms` starts the first window.
    ///
    /// ```
    /// use guildhall_ring::{MemberId, Membership, MembershipConfig, MembershipEffect};
    /// let mut table = Membership::new(MembershipConfig::default(), 0);
    /// let mut effects = Vec::new();
    /// for id in 0..10 {
    ///     table.renew(0, MemberId(id), &mut effects);
    /// }
    /// // Eight of ten go silent at once: that is a partition, not eight deaths.
    /// for t in (1_000..=60_000).step_by(1_000) {
    ///     table.renew(t, MemberId(8), &mut effects);
    ///     table.renew(t, MemberId(9), &mut effects);
    ///     table.tick(t, &mut effects);
    /// }
    /// assert!(table.is_frozen());
    /// assert!(!effects.iter().any(|e| matches!(e, MembershipEffect::Removed { .. })));
    /// ```
    pub fn new(config: MembershipConfig, now_ms: u64) -> Self {
        Self {
            config,
            members: BTreeMap::new(),
            window_start_ms: now_ms,
            members_at_window_start: 0,
            removed_in_window: 0,
            rebuilds_in_window: 0,
            frozen: false,
            frozen_since_ms: now_ms,
            freeze_expired: false,
            rebuild_pending: false,
            generation: 0,
        }
    }

    /// Whether removals are frozen (the alarm is raised).
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// How long the current freeze has held removals (0 when not frozen).
    pub fn frozen_for_ms(&self, now_ms: u64) -> u64 {
        if self.frozen {
            now_ms.saturating_sub(self.frozen_since_ms)
        } else {
            0
        }
    }

    /// The current ring generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// State of `member`, if on the table.
    pub fn state(&self, member: MemberId) -> Option<MemberState> {
        self.members.get(&member).map(|m| m.state)
    }

    /// Members on the table (alive or down), sorted.
    pub fn members(&self) -> Vec<MemberId> {
        self.members.keys().copied().collect()
    }

    /// Members whose lease is current.
    pub fn alive(&self) -> impl Iterator<Item = MemberId> + '_ {
        self.members
            .iter()
            .filter(|(_, m)| m.state == MemberState::Alive)
            .map(|(id, _)| *id)
    }

    /// A member announces itself or renews its lease.
    pub fn renew(&mut self, now_ms: u64, member: MemberId, effects: &mut Vec<MembershipEffect>) {
        self.roll_window(now_ms, effects);
        let lease_expires_ms = now_ms.saturating_add(self.config.lease_ttl_ms);
        let full = self.members.len() >= self.config.members_max;
        match self.members.get_mut(&member) {
            Some(m) => {
                m.lease_expires_ms = lease_expires_ms;
                if m.state != MemberState::Alive {
                    m.state = MemberState::Alive;
                    effects.push(MembershipEffect::Up(member));
                }
            }
            None if full => {
                effects.push(MembershipEffect::Refused(member));
            }
            None => {
                self.members.insert(
                    member,
                    Member {
                        state: MemberState::Alive,
                        lease_expires_ms,
                    },
                );
                effects.push(MembershipEffect::Joined(member));
                self.request_rebuild(false, effects);
            }
        }
        self.evaluate(now_ms, effects);
    }

    /// A member leaves gracefully: removed at once, ring rebuilt at once.
    pub fn leave(&mut self, now_ms: u64, member: MemberId, effects: &mut Vec<MembershipEffect>) {
        self.roll_window(now_ms, effects);
        if self.members.remove(&member).is_some() {
            effects.push(MembershipEffect::Removed {
                member,
                reason: RemovalReason::Graceful,
            });
            self.request_rebuild(true, effects);
        }
        self.evaluate(now_ms, effects);
    }

    /// The registry says the member's lease expired (its key is gone, and
    /// it did not leave gracefully): it is down from now on, and a removal
    /// candidate `permanent_down_ms` later. The table's own lease clock is
    /// for members the registry can no longer tell us about; counting a
    /// second TTL from the last renewal seen, after the registry already
    /// counted the first, made a dead member wait two TTLs (plus the
    /// hysteresis) before its keys moved. A member already down keeps its
    /// earlier start.
    pub fn expire(&mut self, now_ms: u64, member: MemberId, effects: &mut Vec<MembershipEffect>) {
        self.roll_window(now_ms, effects);
        if let Some(m) = self.members.get_mut(&member)
            && m.state == MemberState::Alive
        {
            m.lease_expires_ms = now_ms;
            m.state = MemberState::Down { since_ms: now_ms };
            effects.push(MembershipEffect::Down(member));
        }
        self.evaluate(now_ms, effects);
    }

    /// An operator removes a member, even during a freeze.
    pub fn force_remove(
        &mut self,
        now_ms: u64,
        member: MemberId,
        effects: &mut Vec<MembershipEffect>,
    ) {
        self.roll_window(now_ms, effects);
        if self.members.remove(&member).is_some() {
            effects.push(MembershipEffect::Removed {
                member,
                reason: RemovalReason::Forced,
            });
            self.request_rebuild(true, effects);
        }
        self.evaluate(now_ms, effects);
    }

    /// An operator releases a freeze: every member that is down now is
    /// removed (as [`RemovalReason::Forced`]) in one rebuild, whatever the
    /// budget. Returns how many went. Nothing happens unless removals are
    /// frozen: a release is for a freeze, not a way to remove members that
    /// the hysteresis would still keep through a short stall.
    pub fn release(&mut self, now_ms: u64, effects: &mut Vec<MembershipEffect>) -> usize {
        self.roll_window(now_ms, effects);
        if !self.frozen {
            return 0;
        }
        let down: Vec<MemberId> = self
            .members
            .iter()
            .filter(|(_, m)| m.state != MemberState::Alive)
            .map(|(id, _)| *id)
            .collect();
        for member in &down {
            self.members.remove(member);
            effects.push(MembershipEffect::Removed {
                member: *member,
                reason: RemovalReason::Forced,
            });
        }
        if !down.is_empty() {
            self.request_rebuild(true, effects);
        }
        self.evaluate(now_ms, effects);
        down.len()
    }

    /// The earliest time after `now_ms` at which [`Membership::tick`] may
    /// change something on its own: a lease running out, a down member's
    /// hysteresis ending, the next window (a pending rebuild, a fresh
    /// removal budget) or a freeze reaching its bound. `None` when nothing
    /// is pending. A caller that ticks only at its renewal interval removes
    /// a dead member up to one interval late (5 s at the default limits);
    /// it should also wake at this time. Times already past are left out:
    /// what they allowed happened at the last tick, or waits for one of
    /// the others (a frozen removal waits for its window or bound).
    pub fn next_due_ms(&self, now_ms: u64) -> Option<u64> {
        let members = self.members.values().map(|m| match m.state {
            MemberState::Alive => m.lease_expires_ms,
            MemberState::Down { since_ms } => {
                since_ms.saturating_add(self.config.permanent_down_ms)
            }
        });
        let any_down = self.members.values().any(|m| m.state != MemberState::Alive);
        let window = (self.rebuild_pending || any_down)
            .then(|| self.window_start_ms.saturating_add(self.config.window_ms));
        let freeze = (self.frozen && !self.freeze_expired).then(|| {
            self.frozen_since_ms
                .saturating_add(self.config.freeze_max_ms)
        });
        members
            .chain(window)
            .chain(freeze)
            .filter(|&at| at > now_ms)
            .min()
    }

    /// Advances time: expires leases, removes what the budget allows, applies
    /// pending rebuilds. Call at least once per lease renewal interval.
    pub fn tick(&mut self, now_ms: u64, effects: &mut Vec<MembershipEffect>) {
        self.roll_window(now_ms, effects);
        for (id, m) in &mut self.members {
            if m.state == MemberState::Alive && m.lease_expires_ms <= now_ms {
                m.state = MemberState::Down {
                    since_ms: m.lease_expires_ms,
                };
                effects.push(MembershipEffect::Down(*id));
            }
        }
        self.evaluate(now_ms, effects);
    }

    fn roll_window(&mut self, now_ms: u64, effects: &mut Vec<MembershipEffect>) {
        if now_ms >= self.window_start_ms.saturating_add(self.config.window_ms) {
            // Align windows so every observer counts the same windows.
            let elapsed = now_ms - self.window_start_ms;
            self.window_start_ms += elapsed - elapsed % self.config.window_ms.max(1);
            self.members_at_window_start = self.members.len();
            self.removed_in_window = 0;
            self.rebuilds_in_window = 0;
            if self.rebuild_pending {
                self.rebuild_pending = false;
                self.publish(effects);
            }
        }
    }

    fn budget(&self) -> usize {
        // Members that joined during the window count too: the budget of a
        // cluster that is still forming must not be zero.
        let base = self.members_at_window_start.max(self.members.len());
        let share = base * self.config.removal_permille as usize / 1000;
        // The floor: below seven members 15 % is zero removals, and a
        // single crash would freeze its keys until the member came back.
        // Never the last member: an empty ring serves nothing.
        let allowed = share
            .max(self.config.removals_min as usize)
            .min(base.saturating_sub(1));
        allowed.saturating_sub(self.removed_in_window)
    }

    fn evaluate(&mut self, now_ms: u64, effects: &mut Vec<MembershipEffect>) {
        let down = self
            .members
            .values()
            .filter(|m| m.state != MemberState::Alive)
            .count();
        let budget = self.budget();
        if self.config.self_preservation && down > budget {
            if !self.frozen {
                self.frozen = true;
                self.frozen_since_ms = now_ms;
                effects.push(MembershipEffect::Alarm { down, budget });
            }
            let held_ms = now_ms.saturating_sub(self.frozen_since_ms);
            if held_ms < self.config.freeze_max_ms {
                return;
            }
            if !self.freeze_expired {
                self.freeze_expired = true;
                effects.push(MembershipEffect::FreezeExpired { held_ms, down });
            }
            self.remove_longest_down(now_ms, budget, effects);
            return;
        }
        if self.frozen {
            self.frozen = false;
            let expired = std::mem::replace(&mut self.freeze_expired, false);
            effects.push(MembershipEffect::AlarmCleared);
            if !expired {
                // Renewals of a healed partition trickle in over one
                // renewal interval; members still down get a fresh
                // hysteresis period instead of being removed a moment
                // before their renewal lands. (After an expired freeze
                // they have been down past the bound: no fresh period.)
                for m in self.members.values_mut() {
                    if let MemberState::Down { since_ms } = &mut m.state {
                        *since_ms = now_ms;
                    }
                }
                return;
            }
        }
        let candidates = self.past_hysteresis(now_ms);
        self.remove_expired(candidates, RemovalReason::Expired, effects);
    }

    /// Past a freeze's bound: removes at most `budget` members down past the
    /// hysteresis, those down longest first.
    fn remove_longest_down(
        &mut self,
        now_ms: u64,
        budget: usize,
        effects: &mut Vec<MembershipEffect>,
    ) {
        let mut candidates = self.past_hysteresis(now_ms);
        candidates.truncate(budget);
        self.remove_expired(candidates, RemovalReason::FreezeExpired, effects);
    }

    /// Members down longer than `permanent_down_ms`, as (down since, id),
    /// longest down first (ties by id, so every node sees the same order).
    fn past_hysteresis(&self, now_ms: u64) -> Vec<(u64, MemberId)> {
        let mut candidates: Vec<(u64, MemberId)> = self
            .members
            .iter()
            .filter_map(|(id, m)| match m.state {
                MemberState::Down { since_ms }
                    if now_ms.saturating_sub(since_ms) >= self.config.permanent_down_ms =>
                {
                    Some((since_ms, *id))
                }
                _ => None,
            })
            .collect();
        candidates.sort_unstable();
        candidates
    }

    /// Removes `candidates` for `reason`, each counted against the window's
    /// budget, in one rebuild.
    fn remove_expired(
        &mut self,
        candidates: Vec<(u64, MemberId)>,
        reason: RemovalReason,
        effects: &mut Vec<MembershipEffect>,
    ) {
        if candidates.is_empty() {
            return;
        }
        for (_, member) in candidates {
            self.members.remove(&member);
            self.removed_in_window += 1;
            effects.push(MembershipEffect::Removed { member, reason });
        }
        self.request_rebuild(false, effects);
    }

    fn request_rebuild(&mut self, urgent: bool, effects: &mut Vec<MembershipEffect>) {
        if urgent || self.rebuilds_in_window < self.config.rebuilds_per_window_max {
            self.rebuilds_in_window = self.rebuilds_in_window.saturating_add(1);
            self.rebuild_pending = false;
            self.publish(effects);
        } else {
            self.rebuild_pending = true;
        }
    }

    fn publish(&mut self, effects: &mut Vec<MembershipEffect>) {
        self.generation += 1;
        effects.push(MembershipEffect::RingChanged {
            generation: self.generation,
            members: self.members.keys().copied().collect(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MembershipEffect as E;
    use proptest::prelude::*;

    fn cluster(n: u64, config: MembershipConfig) -> Membership {
        let mut table = Membership::new(config, 0);
        let mut fx = Vec::new();
        for id in 0..n {
            table.renew(0, MemberId(id), &mut fx);
        }
        table
    }

    fn removed(fx: &[E]) -> usize {
        fx.iter().filter(|e| matches!(e, E::Removed { .. })).count()
    }

    #[test]
    fn a_short_stall_moves_nothing() {
        let config = MembershipConfig::default();
        let mut table = cluster(20, config.clone());
        let mut fx = Vec::new();
        // Member 0 stalls: misses renewals past its TTL, then comes back
        // before the permanent-down hysteresis ends.
        for t in (5_000..=20_000).step_by(5_000) {
            for id in 1..20 {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
        }
        assert!(fx.contains(&E::Down(MemberId(0))));
        table.renew(21_000, MemberId(0), &mut fx);
        assert!(fx.contains(&E::Up(MemberId(0))));
        assert_eq!(removed(&fx), 0);
        assert!(!fx.iter().any(|e| matches!(e, E::RingChanged { .. })));
    }

    #[test]
    fn a_dead_member_is_removed_after_the_hysteresis() {
        let mut table = cluster(20, MembershipConfig::default());
        let mut fx = Vec::new();
        for t in (1_000..=40_000).step_by(1_000) {
            for id in 1..20 {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
        }
        assert_eq!(removed(&fx), 1);
        assert!(fx.contains(&E::Removed {
            member: MemberId(0),
            reason: RemovalReason::Expired
        }));
        assert!(!table.is_frozen());
    }

    #[test]
    fn an_expiry_the_registry_reports_starts_the_hysteresis_at_once() {
        let config = MembershipConfig::default();
        let mut table = cluster(3, config.clone());
        let mut fx = Vec::new();
        // The registry deletes member 0's key at 12 s (its lease ran out);
        // the others keep renewing.
        for t in (1_000..=12_000).step_by(1_000) {
            for id in 0..3 {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
        }
        table.expire(12_000, MemberId(0), &mut fx);
        assert!(fx.contains(&E::Down(MemberId(0))));
        // The caller is told when to look again: the hysteresis's end (the
        // others' leases run out later).
        assert_eq!(
            table.next_due_ms(12_000),
            Some(12_000 + config.permanent_down_ms)
        );
        let mut removed_at = None;
        for t in (12_100..=40_000).step_by(100) {
            for id in 1..3 {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
            if removed_at.is_none() && removed(&fx) == 1 {
                removed_at = Some(t);
            }
        }
        // Removed once the hysteresis is over, not a second TTL later.
        assert_eq!(removed_at, Some(12_000 + config.permanent_down_ms));
        // It comes back: alive again, and expiring a member twice or one
        // that is unknown changes nothing.
        table.renew(41_000, MemberId(0), &mut fx);
        fx.clear();
        table.expire(41_000, MemberId(7), &mut fx);
        assert!(fx.iter().all(|e| !matches!(e, E::Down(_))));
    }

    #[test]
    fn a_partition_of_forty_percent_freezes_and_releases_without_removals() {
        let mut table = cluster(20, MembershipConfig::default());
        let mut fx = Vec::new();
        // Members 0..8 cannot reach the registry from t=1s to t=61s.
        for t in (1_000..=120_000).step_by(1_000) {
            for id in 0..20 {
                if id >= 8 || !(1_000..61_000).contains(&t) {
                    table.renew(t, MemberId(id), &mut fx);
                }
            }
            table.tick(t, &mut fx);
        }
        assert_eq!(removed(&fx), 0, "{fx:?}");
        assert!(fx.iter().any(|e| matches!(e, E::Alarm { .. })));
        assert!(fx.contains(&E::AlarmCleared));
        assert!(!table.is_frozen());
    }

    /// The default layout's three guilds members: one crash is removed
    /// (the 15 % share alone is zero below seven members), two at once
    /// freeze, and the last member is never removed.
    #[test]
    fn one_death_among_a_few_is_removed_two_freeze_the_last_stays() {
        let silent = |n: u64, down: &[u64]| {
            let mut table = cluster(n, MembershipConfig::default());
            let mut fx = Vec::new();
            for t in (1_000..=40_000).step_by(1_000) {
                for id in (0..n).filter(|id| !down.contains(id)) {
                    table.renew(t, MemberId(id), &mut fx);
                }
                table.tick(t, &mut fx);
            }
            (removed(&fx), table.is_frozen())
        };
        assert_eq!(silent(3, &[2]), (1, false));
        assert_eq!(silent(5, &[1]), (1, false));
        assert_eq!(silent(5, &[1, 3]), (0, true));
        assert_eq!(silent(2, &[1]), (1, false));
        assert_eq!(silent(1, &[0]), (0, true));
        // 0 restores the share alone.
        let strict = MembershipConfig {
            removals_min: 0,
            ..MembershipConfig::default()
        };
        let mut table = cluster(3, strict);
        let mut fx = Vec::new();
        for t in (1_000..=40_000).step_by(1_000) {
            table.renew(t, MemberId(0), &mut fx);
            table.renew(t, MemberId(1), &mut fx);
            table.tick(t, &mut fx);
        }
        assert_eq!((removed(&fx), table.is_frozen()), (0, true));
    }

    /// Two of three members die together and never return: the freeze
    /// holds for its bound, says so once, and then removes them at the
    /// window's budget, one per window, longest down first, until the
    /// freeze clears and only the survivor is left.
    #[test]
    fn a_freeze_that_outlasts_its_bound_removes_at_the_budget() {
        let config = MembershipConfig {
            freeze_max_ms: 60_000,
            ..MembershipConfig::default()
        };
        let mut table = cluster(3, config.clone());
        let mut fx = Vec::new();
        let mut removed_at = Vec::new();
        for t in (1_000..=200_000).step_by(1_000) {
            let before = fx.len();
            // Member 2 goes silent a second before member 1.
            table.renew(t, MemberId(0), &mut fx);
            if t < 2_000 {
                table.renew(t, MemberId(1), &mut fx);
            }
            table.tick(t, &mut fx);
            for e in &fx[before..] {
                if let E::Removed { member, reason } = e {
                    removed_at.push((t, *member, *reason));
                }
            }
            // Leases of 15 s: both are down from 16 s, frozen until the
            // bound (60 s later).
            if (16_000..76_000).contains(&t) {
                assert!(table.is_frozen(), "at {t}");
            }
        }
        let expired: Vec<_> = fx
            .iter()
            .filter(|e| matches!(e, E::FreezeExpired { .. }))
            .collect();
        assert_eq!(expired.len(), 1, "{fx:?}");
        assert!(matches!(expired[0], E::FreezeExpired { held_ms, down: 2 } if *held_ms >= 60_000));
        assert_eq!(removed_at.len(), 2, "{removed_at:?}");
        // Longest down first, as a bounded-freeze removal; the second in a
        // later window, once the freeze cleared.
        assert_eq!(removed_at[0].1, MemberId(2));
        assert_eq!(removed_at[0].2, RemovalReason::FreezeExpired);
        assert!(removed_at[0].0 >= 76_000);
        assert_eq!(removed_at[1].1, MemberId(1));
        assert!(removed_at[1].0 / config.window_ms > removed_at[0].0 / config.window_ms);
        assert_eq!(table.members(), [MemberId(0)]);
        assert!(!table.is_frozen());
        assert!(fx.contains(&E::AlarmCleared));
    }

    /// An operator's release ends a freeze at once: every member down goes
    /// in one rebuild, whatever the budget; without a freeze it does
    /// nothing (a short stall keeps its keys).
    #[test]
    fn a_release_removes_every_down_member_in_one_rebuild() {
        let mut table = cluster(5, MembershipConfig::default());
        let mut fx = Vec::new();
        for t in (1_000..=20_000).step_by(1_000) {
            for id in [0, 1, 2] {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
        }
        assert!(table.is_frozen());
        assert!(table.frozen_for_ms(20_000) > 0);
        fx.clear();
        assert_eq!(table.release(20_500, &mut fx), 2);
        let forced: Vec<_> = fx
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    E::Removed {
                        reason: RemovalReason::Forced,
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(forced.len(), 2, "{fx:?}");
        let rebuilds: Vec<_> = fx
            .iter()
            .filter(|e| matches!(e, E::RingChanged { .. }))
            .collect();
        assert_eq!(rebuilds.len(), 1, "{fx:?}");
        assert!(fx.contains(&E::AlarmCleared));
        assert!(!table.is_frozen());
        assert_eq!(table.frozen_for_ms(20_500), 0);
        assert_eq!(table.members(), [MemberId(0), MemberId(1), MemberId(2)]);

        // Member 2 stalls past its TTL (15 s), not past the hysteresis
        // (10 s more): no freeze, and a release removes nothing.
        fx.clear();
        for t in (21_000..=40_000).step_by(1_000) {
            table.renew(t, MemberId(0), &mut fx);
            table.renew(t, MemberId(1), &mut fx);
            table.tick(t, &mut fx);
        }
        assert!(fx.contains(&E::Down(MemberId(2))));
        assert_eq!(table.release(40_500, &mut fx), 0);
        assert_eq!(removed(&fx), 0);
    }

    #[test]
    fn naive_config_removes_the_partitioned_members() {
        let mut table = cluster(20, MembershipConfig::naive());
        let mut fx = Vec::new();
        for t in (1_000..=40_000).step_by(1_000) {
            for id in 8..20 {
                table.renew(t, MemberId(id), &mut fx);
            }
            table.tick(t, &mut fx);
        }
        assert_eq!(removed(&fx), 8);
    }

    #[test]
    fn graceful_leave_is_immediate_and_forced_removal_works_while_frozen() {
        let mut table = cluster(10, MembershipConfig::default());
        let mut fx = Vec::new();
        table.leave(1, MemberId(9), &mut fx);
        assert!(fx.contains(&E::Removed {
            member: MemberId(9),
            reason: RemovalReason::Graceful
        }));
        assert!(matches!(fx.last(), Some(E::RingChanged { .. })));
        fx.clear();
        // Everybody but 0 goes silent: freeze.
        for t in (1_000..=40_000).step_by(1_000) {
            table.renew(t, MemberId(0), &mut fx);
            table.tick(t, &mut fx);
        }
        assert!(table.is_frozen());
        table.force_remove(41_000, MemberId(5), &mut fx);
        assert!(fx.contains(&E::Removed {
            member: MemberId(5),
            reason: RemovalReason::Forced
        }));
    }

    #[test]
    fn table_is_bounded() {
        let config = MembershipConfig {
            members_max: 3,
            ..MembershipConfig::default()
        };
        let mut table = cluster(3, config);
        let mut fx = Vec::new();
        table.renew(1, MemberId(99), &mut fx);
        assert_eq!(fx, [E::Refused(MemberId(99))]);
    }

    #[test]
    fn rebuilds_are_capped_and_coalesced() {
        let config = MembershipConfig {
            rebuilds_per_window_max: 2,
            ..MembershipConfig::default()
        };
        let mut table = Membership::new(config, 0);
        let mut fx = Vec::new();
        for id in 0..10 {
            table.renew(10 * id, MemberId(id), &mut fx);
        }
        let rebuilds = fx
            .iter()
            .filter(|e| matches!(e, E::RingChanged { .. }))
            .count();
        assert_eq!(rebuilds, 2);
        fx.clear();
        table.tick(30_000, &mut fx);
        match fx.first() {
            Some(E::RingChanged { members, .. }) => assert_eq!(members.len(), 10),
            other => panic!("expected the coalesced rebuild, got {other:?}"),
        }
    }

    proptest! {
        /// Whatever renewals arrive, expiry removals never exceed the
        /// per-window budget, and generations only grow.
        #[test]
        fn removals_stay_within_budget(
            silent in proptest::collection::vec(proptest::bool::ANY, 20),
            heal_s in 0u64..200,
        ) {
            let config = MembershipConfig::default();
            let mut table = cluster(20, config.clone());
            let mut per_window: BTreeMap<u64, usize> = BTreeMap::new();
            let mut last_generation = 0;
            for t in (1_000..=200_000).step_by(1_000) {
                let mut fx = Vec::new();
                for id in 0..20u64 {
                    if !silent[id as usize] || t >= heal_s * 1000 {
                        table.renew(t, MemberId(id), &mut fx);
                    }
                }
                table.tick(t, &mut fx);
                for e in &fx {
                    match e {
                        E::Removed { reason: RemovalReason::Expired, .. } => {
                            *per_window.entry(t / config.window_ms).or_default() += 1;
                        }
                        E::RingChanged { generation, .. } => {
                            prop_assert!(*generation > last_generation);
                            last_generation = *generation;
                        }
                        _ => {}
                    }
                }
            }
            for count in per_window.values() {
                prop_assert!(*count <= 3, "{per_window:?}");
            }
        }
    }
}
