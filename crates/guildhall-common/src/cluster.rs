//! The node's place in the cluster: it announces itself in the registry,
//! keeps its lease alive from a task of its own (seed 004: keep-alives
//! starved by busy work dropped instances out of the ring), and watches the
//! registry through a validated view feeding the membership table, which
//! publishes the ring that guild owners are placed on.
//!
//! Guild owners are placed with bounded loads over the ring's members and
//! the guild ids listed from the store (`guildhall_ring::placement`): a
//! function of inputs every node reads alike, so every node computes the
//! same owner (see [`start_placement`] for why this input and not another).
//!
//! In embedded mode the registry is in-process and the ring has one member.

use crate::state::now_ms;
use guildhall_cluster::{LeaseId, Registry, RegistryView, Watch, WatchEvent};
use guildhall_limits::Limits;
use guildhall_proto::cluster::{
    Announcement, INSTANCE_PREFIX, RING_RELEASE_KEY, Role, instance_key,
};
use guildhall_ring::MemberId;
use guildhall_ring::Ring;
use guildhall_ring::hash::member_id_of;
use guildhall_ring::membership::{Membership, MembershipConfig, MembershipEffect, RemovalReason};
use guildhall_ring::placement::Placement;
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
    /// Bumped whenever the set of live gateway nodes changes: guild owners
    /// compare it on their next event and drop the sessions of gateway
    /// nodes whose lease ended.
    pub gateways_generation: AtomicU64,
    /// Bumped when this node announced itself again after its lease had
    /// ended: its gateway re-subscribes every session here (owners dropped
    /// them when the lease ended).
    pub lease_regained: tokio::sync::watch::Sender<u64>,
    /// How long the current freeze has held removals, as of the
    /// membership loop's last pass (0 when not frozen).
    pub frozen_for_ms: AtomicU64,
    /// Freezes that outlasted `self_preservation_freeze_max_ms` (their down
    /// members then went at the window's budget).
    pub freeze_expired_total: AtomicU64,
    /// Operator releases applied (each removed every member down then).
    pub releases_total: AtomicU64,
    /// Members removed by a release or past a freeze's bound.
    pub released_members_total: AtomicU64,
    /// This node's lease (0: none).
    pub lease: AtomicU64,
    /// Gateway nodes in the view (where guild owners announce joins).
    pub gateways: RwLock<Arc<Vec<String>>>,
    /// Names of the guilds nodes, by ring member id.
    pub guild_nodes: RwLock<Arc<BTreeMap<MemberId, String>>>,
    /// Guilds nodes announced in the registry view now (a member can stay
    /// on the ring after its lease ended, until membership removes it;
    /// requests for it fail fast instead of waiting for no answer). Empty
    /// before the first listing: nothing is known to be gone.
    pub live_guild_nodes: RwLock<Arc<std::collections::BTreeSet<String>>>,
    /// Full listings of the registry (the first, and one after each watch
    /// that ended).
    pub relists_total: AtomicU64,
    /// Registry calls of the watcher that failed (unreachable registry).
    pub registry_errors_total: AtomicU64,
    /// Registry keys ignored beyond `registry_entries_max`.
    pub overflow_total: AtomicU64,
    /// Gateway nodes of the view with what they announce.
    pub gateway_infos: RwLock<Arc<Vec<GatewayInfo>>>,
    /// Live nodes running each role in the registry view, by role label
    /// (every role listed; 0: the role runs nowhere and its work waits).
    pub role_nodes: Mutex<BTreeMap<&'static str, u64>>,
    /// This node drains: its announcement says so from now on.
    pub draining: AtomicBool,
    /// Wakes the announcement refresher at once (the drain starting).
    pub announce_now: tokio::sync::Notify,
    /// The announcement last written (so a leave can write it once more,
    /// draining, before it revokes the lease).
    pub announced: Mutex<Option<Announcement>>,
    /// Our key holds a value we did not write (seed 002: a poisoned or
    /// half-written value; an operator's put, which also detaches the key
    /// from our lease): the refresher writes the announcement again, under
    /// the lease, at its next pass.
    pub announcement_stale: AtomicBool,
    /// Announcements written again because our key held something else.
    pub announce_repairs_total: AtomicU64,
    /// Announcement refreshes written under the lease.
    pub announce_refreshes_total: AtomicU64,
    /// Where guild owners go: bounded loads over the ring and the listed
    /// guild ids.
    pub placement: RwLock<Arc<Placement>>,
    /// Bumped whenever a recomputed placement differs from the last one
    /// (the guilds role stops the owners that moved away).
    pub placement_changes: tokio::sync::watch::Sender<u64>,
    /// Bumped whenever the ring changes (placement recomputes at once).
    ring_changes: tokio::sync::watch::Sender<u64>,
    /// The guild ids of the last listing (placement's input).
    guild_ids: Mutex<Arc<Vec<u64>>>,
    /// Guild ids left out of placement at `placement_guilds_max`.
    pub placement_truncated_total: AtomicU64,
    /// Placements computed.
    pub placement_recomputes_total: AtomicU64,
    /// When this node's lease was last renewed (or granted), on
    /// [`crate::state::monotonic_ms`]; 0 before. Past `lease_ttl_ms` the registry may have ended it, so the
    /// node claims no guild and stops its owners (self-fencing).
    pub lease_renewed_ms: AtomicU64,
    /// The lease's time to live, ms (set at start).
    pub lease_ttl_ms: AtomicU64,
    /// Until when ([`crate::state::monotonic_ms`]) this node claims no guild: a write of one of
    /// its owners was refused as stale, so the registry moved on without
    /// this node's view; it waits for its view (or its lease) to settle
    /// instead of claiming the guild back.
    pub claims_held_until_ms: AtomicU64,
    /// Set by [`leave`]: the keep-alive, refresh and watch tasks stop, so
    /// a node that left never announces itself again.
    pub left: AtomicBool,
    /// Test seam: the node behaves as if cut off from the registry (no
    /// renewals, no view updates) while it keeps running, to reproduce a
    /// stale owner.
    pub partitioned: AtomicBool,
    /// The ring of the voice nodes announced now.
    voice_ring: RwLock<Arc<Ring>>,
    /// Where guilds' voice coordinators go: bounded loads over the voice
    /// nodes announced now and the same guild ids as owners (seed 003: a
    /// plain ring let the few healthy syncer instances take everyone's
    /// secondary and tertiary placements).
    pub voice_placement: RwLock<Arc<Placement>>,
    /// Names of the voice nodes, by ring member id.
    pub voice_nodes: RwLock<Arc<BTreeMap<MemberId, String>>>,
    /// The live SFU nodes and what they announce (the voice role chooses
    /// among them by capacity and load).
    pub sfus: tokio::sync::watch::Sender<guildhall_proto::cluster::SfuList>,
    /// The slack of voice placement, permille (set at start).
    voice_epsilon_permille: AtomicU64,
    /// Names of the presence nodes, by ring member id.
    presence_nodes: RwLock<Arc<BTreeMap<MemberId, String>>>,
    /// The ring of the presence nodes announced now: each user's statuses
    /// live on one of them.
    presence_ring: RwLock<Arc<Ring>>,
    /// Bumped whenever the presence nodes change: gateway nodes publish
    /// their sessions' statuses again (to their users' new presence
    /// nodes) and presence nodes forget the users they no longer hold.
    pub presence_changes: tokio::sync::watch::Sender<u64>,
}

impl Default for ClusterState {
    fn default() -> Self {
        Self {
            instances: AtomicUsize::new(0),
            rejected: Mutex::new(BTreeMap::new()),
            role_nodes: Mutex::new(BTreeMap::new()),
            ring: RwLock::new(Arc::new(Ring::new(0, &[], 1))),
            frozen: AtomicBool::new(false),
            gateways_generation: AtomicU64::new(0),
            lease_regained: tokio::sync::watch::Sender::new(0),
            frozen_for_ms: AtomicU64::new(0),
            freeze_expired_total: AtomicU64::new(0),
            releases_total: AtomicU64::new(0),
            released_members_total: AtomicU64::new(0),
            lease: AtomicU64::new(0),
            gateways: RwLock::new(Arc::new(Vec::new())),
            guild_nodes: RwLock::new(Arc::new(BTreeMap::new())),
            live_guild_nodes: RwLock::new(Arc::new(std::collections::BTreeSet::new())),
            relists_total: AtomicU64::new(0),
            registry_errors_total: AtomicU64::new(0),
            overflow_total: AtomicU64::new(0),
            gateway_infos: RwLock::new(Arc::new(Vec::new())),
            draining: AtomicBool::new(false),
            announce_now: tokio::sync::Notify::new(),
            announced: Mutex::new(None),
            announcement_stale: AtomicBool::new(false),
            announce_repairs_total: AtomicU64::new(0),
            announce_refreshes_total: AtomicU64::new(0),
            placement: RwLock::new(Arc::new(Placement::compute(Ring::new(0, &[], 1), &[], 0))),
            placement_changes: tokio::sync::watch::Sender::new(0),
            ring_changes: tokio::sync::watch::Sender::new(0),
            guild_ids: Mutex::new(Arc::new(Vec::new())),
            placement_truncated_total: AtomicU64::new(0),
            placement_recomputes_total: AtomicU64::new(0),
            lease_renewed_ms: AtomicU64::new(0),
            lease_ttl_ms: AtomicU64::new(u64::MAX),
            claims_held_until_ms: AtomicU64::new(0),
            left: AtomicBool::new(false),
            partitioned: AtomicBool::new(false),
            voice_placement: RwLock::new(Arc::new(Placement::compute(
                Ring::new(0, &[], 1),
                &[],
                0,
            ))),
            voice_nodes: RwLock::new(Arc::new(BTreeMap::new())),
            voice_ring: RwLock::new(Arc::new(Ring::new(0, &[], 1))),
            sfus: tokio::sync::watch::Sender::new(Arc::new(Vec::new())),
            presence_nodes: RwLock::new(Arc::new(BTreeMap::new())),
            presence_ring: RwLock::new(Arc::new(Ring::new(0, &[], 1))),
            presence_changes: tokio::sync::watch::Sender::new(0),
            voice_epsilon_permille: AtomicU64::new(u64::from(
                guildhall_limits::RING_LOAD_EPSILON_PERMILLE,
            )),
        }
    }
}

impl ClusterState {
    /// Counts the view's nodes per role into `role_nodes`, and says in
    /// the log when a role comes to run nowhere (its requests fail or wait
    /// until a node runs it) and when it runs again. Not a readiness
    /// matter: failing every pod's readiness over a missing role would
    /// take the whole cluster out at once.
    fn count_roles(&self, view: &RegistryView) {
        let counts: BTreeMap<&'static str, u64> = Role::ALL
            .iter()
            .map(|role| {
                let nodes = view.instances().filter(|a| a.roles.contains(role)).count();
                (role.label(), nodes as u64)
            })
            .collect();
        let mut known = self
            .role_nodes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (role, nodes) in &counts {
            match (known.get(role).copied(), *nodes) {
                (None | Some(1..), 0) => tracing::warn!(
                    role = *role,
                    "no node runs this role: its work waits until one does"
                ),
                (Some(0), 1..) => {
                    tracing::info!(role = *role, nodes, "a node runs this role again")
                }
                _ => {}
            }
        }
        *known = counts;
    }

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

    /// The current placement.
    pub fn placement(&self) -> Arc<Placement> {
        self.placement
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

    /// Whether `guild_id` was created since this node's last listing: not
    /// in it, and above every id in it.
    pub fn guild_newer_than_listing(&self, guild_id: i64) -> bool {
        self.placement().is_newer_than_listing(guild_id as u64)
    }

    /// The node whose guilds role owns `guild_id` under the current
    /// placement; `None` before the ring has a member.
    pub fn owner_of(&self, guild_id: i64) -> Option<String> {
        let member = self.placement().owner(guild_id as u64)?;
        self.guild_nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&member)
            .cloned()
    }

    /// The node whose voice role coordinates `guild_id`'s calls; `None`
    /// while no voice node is announced.
    pub fn voice_node_of(&self, guild_id: i64) -> Option<String> {
        let placement = self
            .voice_placement
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let member = placement.owner(guild_id as u64)?;
        self.voice_nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&member)
            .cloned()
    }

    /// The presence node that holds `user_id`'s statuses; `None` while no
    /// presence node is announced (publishers then use the shared subject
    /// every presence node also serves).
    pub fn presence_node_of(&self, user_id: i64) -> Option<String> {
        let ring = self
            .presence_ring
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let member = ring.primary(user_id as u64)?;
        self.presence_nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&member)
            .cloned()
    }

    /// The presence nodes announced now: a new set rebuilds their ring and
    /// bumps [`ClusterState::presence_changes`].
    pub fn set_presence_nodes(&self, nodes: BTreeMap<MemberId, String>, vnodes: u32) {
        {
            let known = self
                .presence_nodes
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if **known == nodes {
                return;
            }
        }
        let members: Vec<MemberId> = nodes.keys().copied().collect();
        let generation = self.presence_changes.borrow().wrapping_add(1);
        *self
            .presence_ring
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Ring::new(generation, &members, vnodes));
        *self
            .presence_nodes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(nodes);
        self.presence_changes.send_modify(|n| *n += 1);
    }

    /// The voice nodes announced now: a new set recomputes voice placement.
    fn set_voice_nodes(&self, nodes: BTreeMap<MemberId, String>, vnodes: u32) {
        {
            let known = self
                .voice_nodes
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if **known == nodes {
                return;
            }
        }
        let members: Vec<MemberId> = nodes.keys().copied().collect();
        *self
            .voice_nodes
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(nodes);
        let generation = self.placement_recomputes_total.load(Ordering::Relaxed);
        *self
            .voice_ring
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Ring::new(generation, &members, vnodes));
        self.recompute_voice();
    }

    /// Recomputes voice placement from the voice ring and the guild ids.
    fn recompute_voice(&self) {
        let ring = (**self
            .voice_ring
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
        .clone();
        let ids = self
            .guild_ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let epsilon = self.voice_epsilon_permille.load(Ordering::Relaxed) as u32;
        *self
            .voice_placement
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Arc::new(Placement::compute(ring, &ids, epsilon));
    }

    /// The live SFUs announced now (changed only when they differ, so the
    /// voice role wakes for real changes).
    fn set_sfus(&self, sfus: Vec<(String, guildhall_proto::cluster::SfuInfo)>) {
        let mut sfus: Vec<guildhall_proto::cluster::SfuInstance> = sfus
            .into_iter()
            .map(|(node, info)| guildhall_proto::cluster::SfuInstance { node, info })
            .collect();
        sfus.sort_unstable_by(|a, b| a.node.cmp(&b.node));
        self.sfus.send_if_modified(|current| {
            if **current == sfus {
                false
            } else {
                *current = Arc::new(sfus);
                true
            }
        });
    }

    /// Whether `node`'s guilds role may answer: announced in the view now
    /// (or no view yet).
    pub fn guild_node_live(&self, node: &str) -> bool {
        let live = self
            .live_guild_nodes
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.is_empty() || live.contains(node)
    }

    /// Whether this node may claim a guild now: its lease is live as far
    /// as it knows (renewed within its TTL) and no stale write told it the
    /// cluster moved on. A node that never had a view (no ring yet) serves
    /// as embedded mode always did.
    pub fn may_claim(&self, now_ms: u64) -> bool {
        if self.ring().is_empty() {
            return true;
        }
        self.lease_live(now_ms) && now_ms >= self.claims_held_until_ms.load(Ordering::Relaxed)
    }

    /// Whether this node's lease was renewed within its TTL.
    pub fn lease_live(&self, now_ms: u64) -> bool {
        let renewed = self.lease_renewed_ms.load(Ordering::Relaxed);
        let ttl = self.lease_ttl_ms.load(Ordering::Relaxed);
        renewed != 0 && now_ms < renewed.saturating_add(ttl)
    }

    /// One of this node's owners was fenced: claim nothing for a lease
    /// TTL (by then the view has caught up, or the lease has ended and
    /// [`ClusterState::lease_live`] keeps the node out).
    pub fn hold_claims(&self, now_ms: u64) {
        let ttl = self.lease_ttl_ms.load(Ordering::Relaxed);
        self.claims_held_until_ms
            .fetch_max(now_ms.saturating_add(ttl), Ordering::Relaxed);
    }

    /// Recomputes placement from the current ring and guild ids; tells the
    /// guilds role when anything moved.
    fn recompute(&self, epsilon_permille: u32) {
        let ring = (*self.ring()).clone();
        let ids = self
            .guild_ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let placement = Arc::new(Placement::compute(ring, &ids, epsilon_permille));
        self.placement_recomputes_total
            .fetch_add(1, Ordering::Relaxed);
        let previous = std::mem::replace(
            &mut *self
                .placement
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            placement.clone(),
        );
        if previous.ring().members() != placement.ring().members()
            || placement.moved_from(&previous) > 0
        {
            self.placement_changes.send_modify(|n| *n += 1);
        }
        self.recompute_voice();
    }

    /// Registry keys beyond `registry_entries_max`, counted with the
    /// rejected entries.
    fn overflowed(&self, keys: u64) {
        self.overflow_total.fetch_add(keys, Ordering::Relaxed);
    }

    fn set_gateways(&self, nodes: Vec<String>) {
        let mut gateways = self
            .gateways
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if **gateways != nodes {
            *gateways = Arc::new(nodes);
            self.gateways_generation.fetch_add(1, Ordering::Relaxed);
        }
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

/// What the node's SFU announces now (`None`: no SFU role here).
pub type SfuLoad = Arc<dyn Fn() -> Option<guildhall_proto::cluster::SfuInfo> + Send + Sync>;

/// The announcement as it stands now: `base` with the session count and
/// the draining flag.
fn current(
    base: &Announcement,
    state: &ClusterState,
    sessions: &SessionCount,
    sfu: &SfuLoad,
) -> Announcement {
    Announcement {
        sfu: if base.roles.contains(&Role::Sfu) {
            sfu()
        } else {
            None
        },
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
    sfu: SfuLoad,
) {
    let ttl_ms = limits.lease_ttl_ms;
    let renew_ms = limits.lease_renew_interval_ms.max(1);
    let announcement = current(&base, &state, &sessions, &sfu);
    state.lease_ttl_ms.store(ttl_ms, Ordering::Relaxed);
    state.voice_epsilon_permille.store(
        u64::from(limits.ring_load_epsilon_permille),
        Ordering::Relaxed,
    );
    let asked = crate::state::monotonic_ms();
    *state
        .announced
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(announcement.clone());
    if let Some(lease) = announce(registry.as_ref(), &announcement, ttl_ms).await {
        state.lease.store(lease, Ordering::Relaxed);
        state.lease_renewed_ms.store(asked, Ordering::Relaxed);
    }
    // Refresh: the session count and the draining flag, rewritten under the
    // lease the keep-alive task renews, at most every
    // `gateway_announce_interval_ms` and only when they changed (a drain
    // starting is written at once). An ended lease is the keep-alive
    // task's to replace.
    {
        let (registry, state, base, sessions, sfu) = (
            registry.clone(),
            state.clone(),
            base.clone(),
            sessions.clone(),
            sfu.clone(),
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
                let now = current(&base, &state, &sessions, &sfu);
                let stale = lease != 0 && state.announcement_stale.swap(false, Ordering::Relaxed);
                if lease == 0 || (now == written && !stale) {
                    continue;
                }
                if stale {
                    state.announce_repairs_total.fetch_add(1, Ordering::Relaxed);
                    crate::throttled!(
                        warn,
                        "cluster.announcement_repaired",
                        node = %now.node,
                        "our registry key held a value we did not write; writing our announcement again"
                    );
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
                        *state
                            .announced
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now.clone());
                        written = now;
                    }
                    Err(error) => {
                        if stale {
                            state.announcement_stale.store(true, Ordering::Relaxed);
                        }
                        crate::throttled!(
                            warn,
                            "cluster.refresh_failed",
                            %error,
                            "refreshing the announcement failed; retrying at the next interval"
                        );
                    }
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
        let (registry, state, base, sessions, sfu) = (
            registry.clone(),
            state.clone(),
            base.clone(),
            sessions.clone(),
            sfu.clone(),
        );
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(renew_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if state.left.load(Ordering::Relaxed) {
                    // Gracefully gone: announcing again would bring the
                    // node back onto the ring.
                    break;
                }
                if state.partitioned.load(Ordering::Relaxed) {
                    continue;
                }
                // The time the renewal was asked: the registry's expiry is
                // at least this plus the TTL.
                let asked = crate::state::monotonic_ms();
                let lease = state.lease.load(Ordering::Relaxed);
                let renewed = if lease == 0 {
                    Err(guildhall_cluster::RegistryError::UnknownLease)
                } else {
                    registry.keep_alive(lease).await
                };
                match renewed {
                    Ok(()) => state.lease_renewed_ms.store(asked, Ordering::Relaxed),
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
                        let announcement = current(&base, &state, &sessions, &sfu);
                        *state
                            .announced
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(announcement.clone());
                        if let Some(lease) =
                            announce(registry.as_ref(), &announcement, ttl_ms).await
                        {
                            state.lease.store(lease, Ordering::Relaxed);
                            state.lease_renewed_ms.store(asked, Ordering::Relaxed);
                            state.lease_regained.send_modify(|n| *n += 1);
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
        removals_min: limits.self_preservation_removals_min,
        rebuilds_per_window_max: limits.ring_rebuilds_per_window_max,
        members_max: limits.ring_members_max,
        freeze_max_ms: limits.self_preservation_freeze_max_ms,
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
        // The release last applied (its value, an operator's unique id): a
        // release key lives for its lease's TTL, and one release ends one
        // freeze, not every freeze while the key lives.
        let mut release_applied: Option<Vec<u8>> = None;
        // Role coverage is judged from the first full listing on.
        let mut listed_once = false;
        // The guilds members of the last view, and whether each was
        // draining (bounded by the registry's entry bound).
        let mut guild_members_seen: BTreeMap<MemberId, bool> = BTreeMap::new();
        loop {
            if state.left.load(Ordering::Relaxed) {
                break;
            }
            if state.partitioned.load(Ordering::Relaxed) {
                // Cut off: the last view stays, as it would.
                watch = None;
                tick.tick().await;
                continue;
            }
            // Whether the mirror is still what the view last applied.
            let mut listed = false;
            if watch.is_none() {
                // (Re-)list, then watch from the listing's revision: after a
                // compaction, a reconnect or a burst the watcher could not
                // keep up with, nothing is missed. A registry that cannot be
                // reached leaves the last view in place until the next tick.
                match registry.list(INSTANCE_PREFIX).await {
                    Ok(listing) => {
                        state.relists_total.fetch_add(1, Ordering::Relaxed);
                        mirror = listing.entries;
                        listed = true;
                        let overflow = mirror.len().saturating_sub(entries_max);
                        if let Some(first_over) = mirror.keys().nth(entries_max).cloned() {
                            // Keys sort, so every listing keeps the same ones.
                            mirror.split_off(&first_over);
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
            // Also wake when membership is due (a hysteresis ending): the
            // renewal tick alone removed a dead member up to one interval
            // late.
            let woke_ms = now_ms();
            let due = Duration::from_millis(
                membership
                    .next_due_ms(woke_ms)
                    .map_or(renew_ms, |at| (at - woke_ms).min(renew_ms)),
            );
            let event = tokio::select! {
                event = next_event(&mut watch) => Some(event),
                _ = tick.tick() => None,
                () = tokio::time::sleep(due) => None,
            };
            let now = now_ms();
            effects.clear();
            if !listed && matches!(event, Some(Some(_))) {
                // The view held until this change arrived: its guilds
                // members are renewed now, before it applies. Otherwise a
                // member whose key is deleted keeps the renewal of the
                // loop's previous pass, up to a renewal interval earlier
                // when nothing else changed, so members cut off at once
                // would go down up to twice their renewal phases apart in
                // the table, more than `member_permanent_down_ms` covers
                // (at least one interval), and self-preservation could
                // remove the first before it saw the next one down.
                for instance in view.instances().filter(|a| a.roles.contains(&Role::Guilds)) {
                    membership.renew(now, member_id_of(&instance.node), &mut effects);
                }
            }
            let ticked = event.is_none();
            match event {
                Some(Some(WatchEvent::Put { key, value })) => {
                    if mirror.contains_key(&key) || mirror.len() < entries_max {
                        mirror.insert(key, value);
                    } else {
                        state.overflowed(1);
                    }
                }
                Some(Some(WatchEvent::Delete { key })) => {
                    mirror.remove(&key);
                }
                Some(None) => watch = None,
                None => {}
            }
            for (key, reason) in view.apply(&mirror) {
                crate::throttled!(
                    warn,
                    "cluster.rejected_entry",
                    key,
                    reason = reason.label(),
                    "rejected registry entry; keeping its last good value"
                );
            }
            // Our own key as the registry holds it: anything but what we
            // last wrote is repaired by the refresher (a peer that starts
            // now would otherwise never see us: it has no last good value).
            let own = state
                .announced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .as_ref()
                .map(|a| (instance_key(&a.node), a.encode().ok()));
            if let Some((key, Some(ours))) = own
                && mirror.get(&key) != Some(&ours)
            {
                state.announcement_stale.store(true, Ordering::Relaxed);
            }
            state
                .instances
                .store(view.instances().count(), Ordering::Relaxed);
            if listed_once || listed {
                listed_once = true;
                state.count_roles(&view);
            }
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
            *state
                .live_guild_nodes
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Arc::new(guild_nodes.values().cloned().collect());
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
            state.set_voice_nodes(
                view.instances()
                    .filter(|a| a.roles.contains(&Role::Voice))
                    .map(|a| (member_id_of(&a.node), a.node.clone()))
                    .collect(),
                vnodes,
            );
            state.set_presence_nodes(
                view.instances()
                    .filter(|a| a.roles.contains(&Role::Presence))
                    .map(|a| (member_id_of(&a.node), a.node.clone()))
                    .collect(),
                vnodes,
            );
            state.set_sfus(
                view.instances()
                    .filter(|a| a.roles.contains(&Role::Sfu))
                    .filter_map(|a| a.sfu.clone().map(|info| (a.node.clone(), info)))
                    .collect(),
            );
            // A guilds member whose key left the view: the registry ended
            // its lease. Announced as draining just before, it left
            // gracefully and its guilds move at once; otherwise it is down
            // from now (the registry already counted its TTL) and removed
            // after the hysteresis, within self-preservation's budget.
            let present: BTreeMap<MemberId, bool> = view
                .instances()
                .filter(|a| a.roles.contains(&Role::Guilds))
                .map(|a| (member_id_of(&a.node), a.draining))
                .collect();
            for (&member, &was_draining) in &guild_members_seen {
                if !present.contains_key(&member) {
                    if was_draining {
                        membership.leave(now, member, &mut effects);
                    } else {
                        membership.expire(now, member, &mut effects);
                    }
                }
            }
            guild_members_seen = present;
            for instance in view.instances().filter(|a| a.roles.contains(&Role::Guilds)) {
                membership.renew(now, member_id_of(&instance.node), &mut effects);
            }
            membership.tick(now, &mut effects);
            if membership.is_frozen() && ticked {
                // During a freeze only, once per renewal tick: one registry
                // read per node per interval, and none in normal running.
                if let Some(release) = read_release(registry.as_ref()).await
                    && release_applied.as_ref() != Some(&release)
                {
                    let removed = membership.release(now, &mut effects);
                    release_applied = Some(release);
                    state.releases_total.fetch_add(1, Ordering::Relaxed);
                    state
                        .released_members_total
                        .fetch_add(removed as u64, Ordering::Relaxed);
                    tracing::error!(
                        removed,
                        "self-preservation released by an operator: every member down was removed"
                    );
                }
            }
            state
                .frozen_for_ms
                .store(membership.frozen_for_ms(now), Ordering::Relaxed);
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
                        state.ring_changes.send_modify(|n| *n += 1);
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
                    MembershipEffect::FreezeExpired { held_ms, down } => {
                        state.freeze_expired_total.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(
                            held_ms,
                            down,
                            "self-preservation held removals for its bound \
                             (self_preservation_freeze_max_ms); members still down \
                             now go at the window's budget"
                        );
                    }
                    MembershipEffect::Removed {
                        reason: RemovalReason::FreezeExpired,
                        ..
                    } => {
                        state.released_members_total.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
            }
        }
    });
}

/// The operator's release, if one is posted: the value under
/// [`RING_RELEASE_KEY`]. An unreachable registry reads as none (the freeze
/// holds until the next tick).
async fn read_release(registry: &dyn Registry) -> Option<Vec<u8>> {
    let listing = registry.list(RING_RELEASE_KEY).await.ok()?;
    listing.entries.get(RING_RELEASE_KEY).cloned()
}

/// The watch's next change; never, while there is no watch (the loop
/// lists again at its next tick).
async fn next_event(watch: &mut Option<Watch>) -> Option<WatchEvent> {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// Keeps placement current: recomputed at once when the ring changes
/// (from the last listing), and the guild ids listed again from the store
/// every `placement_refresh_interval_ms`.
///
/// Why this input: bounded loads need the set of keys, and every node must
/// compute the same owner for a guild. The guilds *loaded* somewhere are
/// known to no node in full; an assignment table written by a leader
/// needs an election and a registry write per move; a variant that needs
/// only the member set cannot bound loads (a plain ring's max/avg grows
/// with fewer guilds per node). The guild ids in the store are one list
/// every node reads alike, so (members, ids) → owner is a function, and
/// nodes that listed at different moments differ only on guilds created
/// in between (those fall back to their plain ring primary until listed;
/// a request meeting such a disagreement is forwarded, at most
/// `guild_forward_hops_max` times).
pub fn start_placement(store: guildhall_store::Store, limits: &Limits, state: Arc<ClusterState>) {
    let epsilon = limits.ring_load_epsilon_permille;
    let page = limits.placement_list_page_max;
    let guilds_max = limits.placement_guilds_max;
    let refresh = Duration::from_millis(limits.placement_refresh_interval_ms);
    tokio::spawn(async move {
        let mut ring_changes = state.ring_changes.subscribe();
        let mut tick = tokio::time::interval(refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                changed = ring_changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
            }
            if state.left.load(Ordering::Relaxed) {
                break;
            }
            // One member (embedded mode) owns every guild whatever the
            // listing says: no store reads for it. With more, list on every
            // tick and at each ring change, so a second member's arrival
            // is placed over current ids.
            if state.ring().members().len() > 1
                && let Some(ids) = list_guild_ids(&store, page, guilds_max, &state).await
            {
                *state
                    .guild_ids
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(ids);
            }
            // Off the runtime's workers: a large listing takes a while to
            // place, and one computation runs at a time (this loop awaits it).
            let task_state = state.clone();
            let _ = tokio::task::spawn_blocking(move || task_state.recompute(epsilon)).await;
        }
    });
}

/// Every guild id, ascending, in pages; `None` when the store fails (the
/// last listing stays).
async fn list_guild_ids(
    store: &guildhall_store::Store,
    page: usize,
    guilds_max: usize,
    state: &ClusterState,
) -> Option<Vec<u64>> {
    let mut ids: Vec<u64> = Vec::new();
    let mut after = i64::MIN;
    loop {
        let want = page.min(guilds_max.saturating_sub(ids.len()) + 1);
        match store.guild_ids_after(after, want as i64).await {
            Ok(batch) => {
                let done = batch.len() < want;
                for id in batch {
                    if ids.len() >= guilds_max {
                        state
                            .placement_truncated_total
                            .fetch_add(1, Ordering::Relaxed);
                        return Some(ids);
                    }
                    after = id;
                    ids.push(id as u64);
                }
                if done {
                    return Some(ids);
                }
            }
            Err(error) => {
                crate::throttled!(
                    warn,
                    "cluster.placement_list_failed",
                    %error,
                    "listing guild ids failed; placement keeps the last listing"
                );
                return None;
            }
        }
    }
}

/// Graceful leave: the announcement says draining (written now, before
/// the lease ends: a drain with no sessions to move reaches here before
/// the refresher writes it, and a key that vanishes without saying so
/// looks like a crash, which waits out the hysteresis and counts against
/// self-preservation's budget), then the lease ends, so peers move work
/// at once.
pub async fn leave(registry: &dyn Registry, state: &ClusterState) {
    state.left.store(true, Ordering::Relaxed);
    let lease = state.lease.load(Ordering::Relaxed);
    let last = state
        .announced
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    if lease != 0
        && let Some(mut announcement) = last
        && !announcement.draining
    {
        announcement.draining = true;
        if let Ok(bytes) = announcement.encode()
            && let Err(error) = registry
                .put_under_lease(&instance_key(&announcement.node), bytes, lease)
                .await
        {
            tracing::warn!(%error, lease, "announcing the leave failed; peers will see a crash");
        }
    }
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
