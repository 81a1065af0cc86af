//! The node's place in the cluster: it announces itself in the registry,
//! keeps its lease alive from a task of its own (seed 004: keep-alives
//! starved by busy work dropped instances out of the ring), and watches the
//! registry through a validated view feeding the membership table, which
//! publishes the ring that guild owners are placed on.
//!
//! In embedded mode the registry is in-process and the ring has one member.

use crate::state::now_ms;
use guildhall_cluster::{LeaseId, Registry, RegistryView, Watch, WatchEvent};
use guildhall_limits::Limits;
use guildhall_proto::cluster::{Announcement, INSTANCE_PREFIX, Role, instance_key};
use guildhall_ring::MemberId;
use guildhall_ring::Ring;
use guildhall_ring::hash::member_id_of;
use guildhall_ring::membership::{Membership, MembershipConfig, MembershipEffect};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// A gateway node as its announcement describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayInfo {
    /// Its name.
    pub node: String,
    /// Where clients reach it.
    pub url: Option<String>,
    /// Sessions it held at its last refresh.
    pub sessions: u64,
    /// Whether it is draining.
    pub draining: bool,
}

/// The gateway URL clients are sent to (`GET /gateway`, READY's
/// `resume_gateway_url`): the configured public URL; else the least loaded
/// live gateway node that is not draining (ties by name, so every api node
/// answers alike); else `fallback` (this node's own listener).
pub fn gateway_url_for(public: Option<&str>, gateways: &[GatewayInfo], fallback: &str) -> String {
    if let Some(public) = public {
        return public.to_owned();
    }
    gateways
        .iter()
        .filter(|g| !g.draining)
        .filter_map(|g| g.url.as_ref().map(|url| (g.sessions, &g.node, url)))
        .min()
        .map_or_else(|| fallback.to_owned(), |(_, _, url)| url.clone())
}

/// What the node knows of the cluster (read by /metrics and placement).
#[derive(Debug)]
pub struct ClusterState {
    /// Valid instances in the view.
    pub instances: AtomicUsize,
    /// Rejected registry entries, by reason.
    pub rejected: Mutex<BTreeMap<&'static str, u64>>,
    /// The guild-owner ring.
    pub ring: RwLock<Arc<Ring>>,
    /// Removals frozen by self-preservation.
    pub frozen: AtomicBool,
    /// This node's lease (0: none).
    pub lease: AtomicU64,
    /// Gateway nodes in the view (where guild owners announce joins).
    pub gateways: RwLock<Arc<Vec<String>>>,
    /// Names of the guilds nodes, by ring member id.
    pub guild_nodes: RwLock<Arc<BTreeMap<MemberId, String>>>,
    /// Full listings of the registry (the first, and one after each watch
    /// that ended).
    pub relists_total: AtomicU64,
    /// Registry calls of the watcher that failed (unreachable registry).
    pub registry_errors_total: AtomicU64,
    /// Registry keys ignored beyond `registry_entries_max`.
    pub overflow_total: AtomicU64,
    /// Gateway nodes of the view with what they announce.
    pub gateway_infos: RwLock<Arc<Vec<GatewayInfo>>>,
    /// This node drains: its announcement says so from now on.
    pub draining: AtomicBool,
    /// Wakes the announcement refresher at once (the drain starting).
    pub announce_now: tokio::sync::Notify,
    /// Set by [`leave`]: the keep-alive and refresh tasks stop, so a node
    /// that left never announces itself again.
    pub left: AtomicBool,
    /// Announcement refreshes written under the lease.
    pub announce_refreshes_total: AtomicU64,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            instances: AtomicUsize::new(0),
            rejected: Mutex::new(BTreeMap::new()),
            ring: RwLock::new(Arc::new(Ring::new(0, &[], 1))),
            frozen: AtomicBool::new(false),
            lease: AtomicU64::new(0),
            gateways: RwLock::new(Arc::new(Vec::new())),
            guild_nodes: RwLock::new(Arc::new(BTreeMap::new())),
            relists_total: AtomicU64::new(0),
            registry_errors_total: AtomicU64::new(0),
            overflow_total: AtomicU64::new(0),
            gateway_infos: RwLock::new(Arc::new(Vec::new())),
            draining: AtomicBool::new(false),
            announce_now: tokio::sync::Notify::new(),
            left: AtomicBool::new(false),
            announce_refreshes_total: AtomicU64::new(0),
        }
    }
}

impl ClusterState {
    /// The current ring.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The gateway nodes in the view.
    pub fn gateways(&self) -> Arc<Vec<String>> {
        self.gateways
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The gateway nodes of the view with what they announce.
    pub fn gateway_infos(&self) -> Arc<Vec<GatewayInfo>> {
        self.gateway_infos
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The live gateway node whose name hashes to `tag` (a session id's
    /// holder; see `takeover`).
    pub fn gateway_by_tag(&self, tag: u64) -> Option<String> {
        self.gateway_infos()
            .iter()
            .find(|g| member_id_of(&g.node).0 == tag)
            .map(|g| g.node.clone())
    }

    /// The node whose guilds role owns `guild_id` on the current ring;
    /// `None` before the ring has a member.
    pub fn owner_of(&self, guild_id: i64) -> Option<String> {
        let member = self.ring().primary(guild_id as u64)?;
        self.guild_nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&member)
            .cloned()
    }

    /// Registry keys beyond `registry_entries_max`, counted with the
    /// rejected entries.
    fn overflowed(&self, keys: u64) {
        self.overflow_total.fetch_add(keys, Ordering::Relaxed);
    }

    fn set_gateways(&self, nodes: Vec<String>) {
        *self
            .gateways
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(nodes);
    }
}

async fn announce(
    registry: &dyn Registry,
    announcement: &Announcement,
    ttl_ms: u64,
) -> Option<LeaseId> {
    let bytes = announcement.encode().ok()?;
    match registry
        .put_with_lease(&instance_key(&announcement.node), bytes, ttl_ms)
        .await
    {
        Ok(lease) => Some(lease),
        Err(error) => {
            crate::throttled!(
                warn,
                "cluster.announce_failed",
                %error,
                "announcing in the registry failed; retrying at the next renewal"
            );
            None
        }
    }
}

/// How many sessions the node holds now (for its announcement).
pub type SessionCount = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The announcement as it stands now: `base` with the session count and
/// the draining flag.
fn current(base: &Announcement, state: &ClusterState, sessions: &SessionCount) -> Announcement {
    Announcement {
        sessions: if base.roles.contains(&Role::Gateway) {
            sessions()
        } else {
            0
        },
        draining: state.draining.load(Ordering::Relaxed),
        ..base.clone()
    }
}

/// Announces this node and starts the keep-alive, refresh and watch tasks.
pub async fn start(
    registry: Arc<dyn Registry>,
    base: Announcement,
    limits: &Limits,
    state: Arc<ClusterState>,
    sessions: SessionCount,
) {
    let ttl_ms = limits.lease_ttl_ms;
    let renew_ms = limits.lease_renew_interval_ms.max(1);
    let announcement = current(&base, &state, &sessions);
    if let Some(lease) = announce(registry.as_ref(), &announcement, ttl_ms).await {
        state.lease.store(lease, Ordering::Relaxed);
    }
    // Refresh: the session count and the draining flag, rewritten under the
    // lease the keep-alive task renews, at most every
    // `gateway_announce_interval_ms` and only when they changed (a drain
    // starting is written at once). An ended lease is the keep-alive
    // task's to replace.
    {
        let (registry, state, base, sessions) = (
            registry.clone(),
            state.clone(),
            base.clone(),
            sessions.clone(),
        );
        let interval = Duration::from_millis(limits.gateway_announce_interval_ms.max(1));
        let mut written = announcement.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = state.announce_now.notified() => {}
                }
                if state.left.load(Ordering::Relaxed) {
                    return;
                }
                let lease = state.lease.load(Ordering::Relaxed);
                let now = current(&base, &state, &sessions);
                if lease == 0 || now == written {
                    continue;
                }
                let Ok(bytes) = now.encode() else { continue };
                match registry
                    .put_under_lease(&instance_key(&now.node), bytes, lease)
                    .await
                {
                    Ok(()) => {
                        state
                            .announce_refreshes_total
                            .fetch_add(1, Ordering::Relaxed);
                        written = now;
                    }
                    Err(error) => crate::throttled!(
                        warn,
                        "cluster.refresh_failed",
                        %error,
                        "refreshing the announcement failed; retrying at the next interval"
                    ),
                }
            }
        });
    }
    // This node knows itself before its first listing.
    if announcement.roles.contains(&Role::Gateway) {
        state.set_gateways(vec![announcement.node.clone()]);
    }
    // Keep-alive: its own task, doing nothing else, so no backlog elsewhere
    // can make this node miss its renewals (seed 004).
    {
        let (registry, state, base, sessions) = (
            registry.clone(),
            state.clone(),
            base.clone(),
            sessions.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(renew_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if state.left.load(Ordering::Relaxed) {
                    return;
                }
                let lease = state.lease.load(Ordering::Relaxed);
                let renewed = if lease == 0 {
                    Err(guildhall_cluster::RegistryError::UnknownLease)
                } else {
                    registry.keep_alive(lease).await
                };
                match renewed {
                    Ok(()) => {}
                    // The registry is unreachable: the lease may still be
                    // live; try again next tick rather than piling leases.
                    Err(guildhall_cluster::RegistryError::Unavailable) => {
                        crate::throttled!(
                            warn,
                            "cluster.keep_alive_unavailable",
                            lease,
                            "registry unavailable; keeping the lease on the next tick"
                        );
                    }
                    Err(_) => {
                        crate::throttled!(
                            warn,
                            "cluster.lease_lost",
                            lease,
                            "lease lost, announcing again"
                        );
                        let announcement = current(&base, &state, &sessions);
                        if let Some(lease) =
                            announce(registry.as_ref(), &announcement, ttl_ms).await
                        {
                            state.lease.store(lease, Ordering::Relaxed);
                        }
                    }
                }
            }
        });
    }
    let config = MembershipConfig {
        lease_ttl_ms: ttl_ms,
        permanent_down_ms: limits.member_permanent_down_ms,
        window_ms: limits.self_preservation_window_ms,
        removal_permille: limits.self_preservation_removal_permille,
        rebuilds_per_window_max: limits.ring_rebuilds_per_window_max,
        members_max: limits.ring_members_max,
        self_preservation: true,
    };
    let vnodes = limits.ring_vnodes_per_member;
    let ring_members_max = limits.ring_members_max;
    let entries_max = limits.registry_entries_max;
    let watch_events_max = limits.registry_watch_events_max;
    tokio::spawn(async move {
        let mut membership = Membership::new(config, now_ms());
        let mut view = RegistryView::default();
        // The raw entries under the prefix, kept current by the watch and
        // replaced by each full listing; the view validates them.
        let mut mirror: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut watch: Option<Watch> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(renew_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut effects = Vec::new();
        loop {
            if watch.is_none() {
                // (Re-)list, then watch from the listing's revision: after a
                // compaction, a reconnect or a burst the watcher could not
                // keep up with, nothing is missed. A registry that cannot be
                // reached leaves the last view in place until the next tick.
                match registry.list(INSTANCE_PREFIX).await {
                    Ok(listing) => {
                        state.relists_total.fetch_add(1, Ordering::Relaxed);
                        mirror = listing.entries;
                        let overflow = mirror.len().saturating_sub(entries_max);
                        if overflow > 0 {
                            let keep: Vec<String> =
                                mirror.keys().take(entries_max).cloned().collect();
                            mirror.retain(|k, _| keep.binary_search(k).is_ok());
                            state.overflowed(overflow as u64);
                        }
                        watch = registry
                            .watch(INSTANCE_PREFIX, listing.revision, watch_events_max)
                            .await
                            .ok();
                    }
                    Err(error) => {
                        state.registry_errors_total.fetch_add(1, Ordering::Relaxed);
                        crate::throttled!(
                            warn,
                            "cluster.list_failed",
                            %error,
                            "listing the registry failed; keeping the last view"
                        );
                    }
                }
            }
            tokio::select! {
                event = next_event(&mut watch) => match event {
                    Some(WatchEvent::Put { key, value }) => {
                        if mirror.contains_key(&key) || mirror.len() < entries_max {
                            mirror.insert(key, value);
                        } else {
                            state.overflowed(1);
                        }
                    }
                    Some(WatchEvent::Delete { key }) => {
                        mirror.remove(&key);
                    }
                    None => watch = None,
                },
                _ = tick.tick() => {}
            }
            let now = now_ms();
            for (key, reason) in view.apply(&mirror) {
                crate::throttled!(
                    warn,
                    "cluster.rejected_entry",
                    key,
                    reason = reason.label(),
                    "rejected registry entry; keeping its last good value"
                );
            }
            state
                .instances
                .store(view.instances().count(), Ordering::Relaxed);
            *state
                .rejected
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = {
                let mut rejected = view.rejected().clone();
                let overflow = state.overflow_total.load(Ordering::Relaxed);
                if overflow > 0 {
                    rejected.insert("registry_overflow", overflow);
                }
                rejected
            };
            let mut gateways: Vec<String> = view
                .instances()
                .filter(|a| a.roles.contains(&Role::Gateway))
                .map(|a| a.node.clone())
                .collect();
            gateways.sort_unstable();
            if !gateways.is_empty() {
                state.set_gateways(gateways);
            }
            let mut infos: Vec<GatewayInfo> = view
                .instances()
                .filter(|a| a.roles.contains(&Role::Gateway))
                .map(|a| GatewayInfo {
                    node: a.node.clone(),
                    url: a.gateway_url.clone(),
                    sessions: a.sessions,
                    draining: a.draining,
                })
                .collect();
            infos.sort_unstable_by(|a, b| a.node.cmp(&b.node));
            *state
                .gateway_infos
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(infos);
            let guild_nodes: BTreeMap<MemberId, String> = view
                .instances()
                .filter(|a| a.roles.contains(&Role::Guilds))
                .map(|a| (member_id_of(&a.node), a.node.clone()))
                .collect();
            // Names are only added between rings: a member that leaves the
            // view may still be on the ring until membership removes it.
            {
                let mut known = state
                    .guild_nodes
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if guild_nodes.iter().any(|(id, _)| !known.contains_key(id)) {
                    let mut merged = (**known).clone();
                    merged.extend(guild_nodes);
                    // Bounded by the ring's member bound.
                    if merged.len() <= ring_members_max {
                        *known = Arc::new(merged);
                    }
                }
            }
            effects.clear();
            for instance in view.instances().filter(|a| a.roles.contains(&Role::Guilds)) {
                membership.renew(now, member_id_of(&instance.node), &mut effects);
            }
            membership.tick(now, &mut effects);
            for effect in effects.drain(..) {
                match effect {
                    MembershipEffect::RingChanged {
                        generation,
                        members,
                    } => {
                        let ring = Arc::new(Ring::new(generation, &members, vnodes));
                        *state
                            .ring
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = ring;
                    }
                    MembershipEffect::Alarm { down, budget } => {
                        state.frozen.store(true, Ordering::Relaxed);
                        crate::throttled!(
                            error,
                            "cluster.self_preservation",
                            down,
                            budget,
                            "removals frozen: too many members down at once"
                        );
                    }
                    MembershipEffect::AlarmCleared => state.frozen.store(false, Ordering::Relaxed),
                    _ => {}
                }
            }
        }
    });
}

/// The watch's next change; never, while there is no watch (the loop
/// lists again at its next tick).
async fn next_event(watch: &mut Option<Watch>) -> Option<WatchEvent> {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// Graceful leave: the lease ends now, so peers move work at once.
pub async fn leave(registry: &dyn Registry, state: &ClusterState) {
    state.left.store(true, Ordering::Relaxed);
    let lease = state.lease.swap(0, Ordering::Relaxed);
    if lease != 0
        && let Err(error) = registry.revoke(lease).await
    {
        // The lease will expire on its own within its TTL.
        tracing::warn!(%error, lease, "revoking the lease failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_url_wins_then_the_least_loaded_live_node() {
        let node = |name: &str, sessions, draining| GatewayInfo {
            node: name.into(),
            url: Some(format!("ws://{name}")),
            sessions,
            draining,
        };
        let nodes = [
            node("a", 5, false),
            node("b", 1, true),
            node("c", 2, false),
            node("d", 2, false),
        ];
        assert_eq!(
            gateway_url_for(Some("wss://lb"), &nodes, "ws://me"),
            "wss://lb"
        );
        assert_eq!(gateway_url_for(None, &nodes, "ws://me"), "ws://c");
        assert_eq!(gateway_url_for(None, &nodes[1..2], "ws://me"), "ws://me");
        assert_eq!(gateway_url_for(None, &[], "ws://me"), "ws://me");
    }
}
