//! The voice role: where a voice join becomes an SFU call and a token.
//!
//! A voice node serves [`VoiceRequest`]s on
//! [`voice_requests_subject`]`(node)` for the guilds placement gives it.
//! Structure (seed 003's mechanisms):
//!
//! - one **coordinator** task per guild with anyone in voice, and one
//!   **syncer** task per active call (a child of the coordinator), both
//!   spawned under one [`SpawnBudget`] that counts children, with
//!   per-instance caps on both;
//! - each task has a **bounded mailbox for bulk work** (joins, leaves) and
//!   a **separate bounded control channel** (release, re-place, syncer
//!   ended) that it polls first, also while it waits on an SFU, so a
//!   backlog never delays control;
//! - a syncer allocates its call on an SFU chosen by announced capacity and
//!   load ([`placement`]), with allocations in flight capped per SFU, a
//!   circuit breaker per SFU and a deadline on every request; it mints a
//!   token per user ([`token`]), admits its SHA-256 and answers
//!   [`VoiceReply::Server`];
//! - when an SFU leaves the live list (or its breaker opens on a call), the
//!   syncers on it re-place their calls elsewhere, a bounded number at a
//!   time, re-admit every participant with a new token and send each
//!   session VOICE_SERVER_UPDATE through its gateway node.
//!
//! Tasks end when their call or guild has no participants: a syncer
//! releases its call; a coordinator ends with its last syncer. Whether a
//! task may end is decided under the lock its senders route through, with
//! its mailbox empty, so no request is stranded in a mailbox nobody reads.

pub mod placement;
pub mod token;

use bytes::Bytes;
use guildhall_cluster::{Bus, BusError, Subscription};
use guildhall_control::breaker::Breaker;
use guildhall_control::log_throttle::{LogThrottle, Verdict};
use guildhall_control::spawn::{SpawnBudget, SpawnConfig, SpawnKind, SpawnRefusal};
use guildhall_proto::bus::{NodeEvent, NodeEventBody, gateway_events_subject, partition_of};
use guildhall_proto::voice::{
    SfuEnvelope, SfuRefusal, SfuReply, SfuRequest, VoiceEnvelope, VoiceRefusal, VoiceReply,
    VoiceRequest, decode_reply, encode_reply, sfu_control_subject, sfu_requests_subject,
    voice_requests_subject,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;

/// The live SFUs the role places calls on: the discovery view's list,
/// defined in proto so the view needs no role crate.
pub use guildhall_proto::cluster::{SfuInstance, SfuList};

/// Names the gateway node holding a session (`None`: unknown, ended).
pub type GatewayOfSession = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// The voice role's configuration.
#[derive(Clone, Debug)]
pub struct VoiceConfig {
    /// This voice node's name (its requests subject is named after it).
    pub node: String,
    /// The bounds (`voice_*`, and `gateway_event_partitions` for
    /// re-placement notices).
    pub limits: guildhall_limits::Limits,
}

/// Counters of the voice role, read by `/metrics`.
#[derive(Debug, Default)]
pub struct VoiceStats {
    /// Coordinators spawned.
    pub coordinators_spawned_total: AtomicU64,
    /// Syncers spawned.
    pub syncers_spawned_total: AtomicU64,
    /// Coordinators running.
    pub coordinators_live: AtomicU64,
    /// Syncers running.
    pub syncers_live: AtomicU64,
    /// Refusals by reason, indexed by [`refusal_index`].
    pub refused_total: [AtomicU64; 6],
    /// Spawns the budget refused, by the budget's reason (global, guild,
    /// instance full, guilds full).
    pub spawn_refused_total: [AtomicU64; 4],
    /// Calls allocated on an SFU (re-placements included).
    pub allocations_total: AtomicU64,
    /// Allocations that failed (timeout, refusal, no responder).
    pub allocation_failures_total: AtomicU64,
    /// Users admitted (re-admissions included).
    pub admissions_total: AtomicU64,
    /// Evictions sent.
    pub evictions_total: AtomicU64,
    /// Releases sent.
    pub releases_total: AtomicU64,
    /// Calls re-placed on another SFU.
    pub replacements_total: AtomicU64,
    /// Re-placements that found no SFU or failed (retried later).
    pub replacement_failures_total: AtomicU64,
    /// VOICE_SERVER_UPDATE notices published to gateway nodes.
    pub server_updates_published_total: AtomicU64,
    /// Notices that could not be published (session unknown, bus refused).
    pub server_updates_dropped_total: AtomicU64,
    /// Deepest bulk mailbox seen (coordinators and syncers).
    pub mailbox_depth_max: AtomicU64,
    /// SFU breakers that opened.
    pub breakers_opened_total: AtomicU64,
    /// Requests that were not a valid envelope.
    pub malformed_total: AtomicU64,
    /// Control messages handled.
    pub control_handled_total: AtomicU64,
}

/// The index of `reason` in [`VoiceStats::refused_total`].
pub fn refusal_index(reason: VoiceRefusal) -> usize {
    match reason {
        VoiceRefusal::SpawnBudget => 0,
        VoiceRefusal::InstanceFull => 1,
        VoiceRefusal::NoSfu => 2,
        VoiceRefusal::SfuUnavailable => 3,
        VoiceRefusal::Expired => 4,
        VoiceRefusal::NotOwner => 5,
    }
}

fn spawn_refusal_index(reason: SpawnRefusal) -> usize {
    match reason {
        SpawnRefusal::Global => 0,
        SpawnRefusal::Guild => 1,
        SpawnRefusal::InstanceFull => 2,
        SpawnRefusal::GuildsFull => 3,
    }
}

/// One call as the role holds it (for the node's admin view and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallInfo {
    /// The guild.
    pub guild_id: i64,
    /// The channel.
    pub channel_id: i64,
    /// The SFU node hosting it (`None` while unplaced).
    pub sfu_node: Option<String>,
    /// The fencing epoch.
    pub epoch: u64,
    /// Participants.
    pub participants: usize,
}

/// Why the role could not start.
pub type StartError = BusError;

/// A request with where to answer it.
#[derive(Debug)]
struct Work {
    request: VoiceRequest,
    reply: Option<String>,
    deadline: Option<Instant>,
}

/// Control for a coordinator.
#[derive(Debug)]
enum CoordinatorControl {
    /// A syncer ended: the coordinator may end too.
    SyncerEnded,
}

/// Control for a syncer.
#[derive(Debug)]
enum SyncerControl {
    /// Release the call and end (operator, handoff, shutdown).
    Release,
}

#[derive(Clone)]
struct SyncerHandle {
    bulk: mpsc::Sender<Work>,
    control: mpsc::Sender<SyncerControl>,
    status: Arc<Mutex<(Option<String>, u64, usize)>>,
}

#[derive(Default)]
struct GuildState {
    syncers: HashMap<i64, SyncerHandle>,
    /// Which channel each participant is in (moves evict from the old one).
    users: HashMap<i64, i64>,
}

struct CoordinatorHandle {
    bulk: mpsc::Sender<Work>,
    state: Arc<Mutex<GuildState>>,
}

struct SfuState {
    breaker: Breaker,
    in_flight: usize,
}

struct Shared {
    node: String,
    limits: guildhall_limits::Limits,
    bus: Arc<dyn Bus>,
    sfus: watch::Receiver<SfuList>,
    gateway_of_session: GatewayOfSession,
    stats: Arc<VoiceStats>,
    budget: Mutex<SpawnBudget>,
    guilds: Mutex<HashMap<i64, CoordinatorHandle>>,
    sfu_state: Mutex<HashMap<String, SfuState>>,
    replacements: Semaphore,
    /// Bumped whenever an SFU's breaker opens: every syncer checks whether
    /// its call is on that SFU (not only the one whose request failed).
    breaker_opened: watch::Sender<u64>,
    throttle: Mutex<LogThrottle<&'static str>>,
    started: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every critical section is a few map operations with no await and no
    // panic path: a poisoned lock still holds consistent data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn note_depth<T>(stats: &VoiceStats, sender: &mpsc::Sender<T>) {
    let depth = sender.max_capacity().saturating_sub(sender.capacity()) as u64;
    stats.mailbox_depth_max.fetch_max(depth, Ordering::Relaxed);
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn log(&self, key: &'static str, detail: &str) {
        let verdict = lock(&self.throttle).check(key, self.now_ms());
        if let Verdict::Emit { suppressed } = verdict {
            tracing::warn!(node = %self.node, suppressed, "voice: {key}: {detail}");
        }
    }

    fn retry_after_ms(&self, base_ms: u64) -> u64 {
        // The refuser jitters: up to as much again, so refused callers
        // spread instead of coming back together.
        let base_ms = base_ms.max(1);
        base_ms + (base_ms as f64 * token::unit()) as u64
    }

    fn answer(&self, reply: Option<&str>, answer: &VoiceReply) {
        let Some(reply) = reply else { return };
        if let VoiceReply::Refused { reason, .. } = answer {
            self.stats.refused_total[refusal_index(*reason)].fetch_add(1, Ordering::Relaxed);
        }
        // A caller that is gone has nothing to hear.
        let _ = self
            .bus
            .publish(reply, None, Bytes::from(encode_reply(answer)));
    }

    fn refuse(&self, reply: Option<&str>, reason: VoiceRefusal, base_ms: u64) {
        let retry_after_ms = self.retry_after_ms(base_ms);
        self.answer(
            reply,
            &VoiceReply::Refused {
                reason,
                retry_after_ms,
            },
        );
    }

    fn try_spawn(&self, guild_id: i64, kind: SpawnKind) -> Result<(), (VoiceRefusal, u64)> {
        let now_ms = self.now_ms();
        lock(&self.budget)
            .try_spawn(now_ms, guild_id as u64, kind)
            .map_err(|refused| {
                self.stats.spawn_refused_total[spawn_refusal_index(refused.reason)]
                    .fetch_add(1, Ordering::Relaxed);
                let reason = match refused.reason {
                    SpawnRefusal::InstanceFull => VoiceRefusal::InstanceFull,
                    _ => VoiceRefusal::SpawnBudget,
                };
                (reason, refused.retry_after_ms)
            })
    }

    fn exited(&self, kind: SpawnKind) {
        lock(&self.budget).exited(kind);
        let gauge = match kind {
            SpawnKind::Coordinator => &self.stats.coordinators_live,
            SpawnKind::Child => &self.stats.syncers_live,
        };
        gauge.fetch_sub(1, Ordering::Relaxed);
    }

    fn sfu_timeout(&self, deadline: Option<Instant>) -> Duration {
        let limit = Duration::from_millis(self.limits.voice_sfu_request_timeout_ms);
        deadline.map_or(limit, |d| {
            d.saturating_duration_since(Instant::now()).min(limit)
        })
    }

    /// Chooses an SFU for `channel_id`, not `avoid`, and takes one of its
    /// in-flight allocation slots. The list is reread each time, so a dead
    /// SFU is never chosen once the view dropped it.
    fn choose_sfu(&self, channel_id: i64, avoid: Option<&str>) -> Option<SfuInstance> {
        let list = self.sfus.borrow().clone();
        let now_ms = self.now_ms();
        let mut states = lock(&self.sfu_state);
        // Forget SFUs that left the list: the map stays as large as the list.
        states.retain(|node, _| list.iter().any(|s| &s.node == node));
        let candidates: Vec<placement::Candidate<'_>> = list
            .iter()
            .map(|s| {
                let state = states.get(&s.node);
                let usable = Some(s.node.as_str()) != avoid
                    && state.is_none_or(|st| {
                        !st.breaker.is_open(now_ms)
                            && st.in_flight < self.limits.voice_sfu_allocations_in_flight_max
                    });
                placement::Candidate {
                    node: &s.node,
                    sessions: s.info.sessions,
                    sessions_max: s.info.sessions_max,
                    usable,
                }
            })
            .collect();
        let index = placement::choose(
            &candidates,
            channel_id,
            self.limits.voice_sfu_load_slack_permille,
        )?;
        let chosen = list.get(index)?.clone();
        let state = states
            .entry(chosen.node.clone())
            .or_insert_with(|| self.new_sfu_state());
        // A half-open breaker lets exactly this probe through.
        if !state.breaker.allow(now_ms) {
            return None;
        }
        state.in_flight += 1;
        Some(chosen)
    }

    fn new_sfu_state(&self) -> SfuState {
        SfuState {
            breaker: Breaker::new(
                self.limits.voice_sfu_breaker_failures_max,
                self.limits.voice_sfu_breaker_cool_down_ms,
            ),
            in_flight: 0,
        }
    }

    fn allocation_done(&self, node: &str) {
        if let Some(state) = lock(&self.sfu_state).get_mut(node) {
            state.in_flight = state.in_flight.saturating_sub(1);
        }
    }

    /// Records an SFU's answer; returns whether its breaker is now open.
    fn sfu_outcome(&self, node: &str, ok: bool) -> bool {
        let now_ms = self.now_ms();
        let mut states = lock(&self.sfu_state);
        let state = states
            .entry(node.to_owned())
            .or_insert_with(|| self.new_sfu_state());
        if ok {
            state.breaker.on_success();
            return false;
        }
        if state.breaker.on_failure(now_ms) {
            self.stats
                .breakers_opened_total
                .fetch_add(1, Ordering::Relaxed);
            self.breaker_opened.send_modify(|n| *n += 1);
        }
        state.breaker.is_open(now_ms)
    }

    fn sfu_alive(&self, node: &str) -> bool {
        self.sfus.borrow().iter().any(|s| s.node == node)
            && !lock(&self.sfu_state)
                .get(node)
                .is_some_and(|s| s.breaker.is_open(self.now_ms()))
    }
}

/// A running voice role. Dropping it stops serving requests (running
/// calls end as their tasks notice the bus is gone).
pub struct VoiceRole {
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for VoiceRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VoiceRole")
            .field("node", &self.shared.node)
            .finish_non_exhaustive()
    }
}

impl Drop for VoiceRole {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl VoiceRole {
    /// Subscribes to `voice_requests_subject(config.node)` and serves it.
    pub async fn start(
        config: VoiceConfig,
        bus: Arc<dyn Bus>,
        sfus: watch::Receiver<SfuList>,
        gateway_of_session: GatewayOfSession,
    ) -> Result<VoiceRole, StartError> {
        let limits = config.limits;
        let overflow = VoiceReply::Refused {
            reason: VoiceRefusal::InstanceFull,
            retry_after_ms: limits.voice_retry_after_ms,
        };
        let subscription = bus
            .subscribe_shedding(
                &voice_requests_subject(&config.node),
                None,
                limits.voice_requests_queue_max,
                Bytes::from(encode_reply(&overflow)),
            )
            .await?;
        let started = Instant::now();
        let shared = Arc::new(Shared {
            node: config.node,
            budget: Mutex::new(SpawnBudget::new(SpawnConfig::from_limits(&limits), 0)),
            replacements: Semaphore::new(limits.voice_replacements_in_flight_max),
            breaker_opened: watch::channel(0).0,
            throttle: Mutex::new(LogThrottle::new(
                limits.log_throttle_interval_ms,
                limits.log_throttle_keys_max,
            )),
            limits,
            bus,
            sfus,
            gateway_of_session,
            stats: Arc::new(VoiceStats::default()),
            guilds: Mutex::new(HashMap::new()),
            sfu_state: Mutex::new(HashMap::new()),
            started,
        });
        let server = tokio::spawn(serve(shared.clone(), subscription));
        Ok(VoiceRole { shared, server })
    }

    /// The counters.
    pub fn stats(&self) -> Arc<VoiceStats> {
        self.shared.stats.clone()
    }

    /// The calls held, ordered by guild and channel.
    pub fn calls(&self) -> Vec<CallInfo> {
        let guilds: Vec<(i64, Arc<Mutex<GuildState>>)> = lock(&self.shared.guilds)
            .iter()
            .map(|(g, h)| (*g, h.state.clone()))
            .collect();
        let mut calls = Vec::new();
        for (guild_id, state) in guilds {
            for (channel_id, syncer) in lock(&state).syncers.iter() {
                let (sfu_node, epoch, participants) = lock(&syncer.status).clone();
                calls.push(CallInfo {
                    guild_id,
                    channel_id: *channel_id,
                    sfu_node,
                    epoch,
                    participants,
                });
            }
        }
        calls.sort_by_key(|c| (c.guild_id, c.channel_id));
        calls
    }

    /// Releases every call (control, for a drain or shutdown): each syncer
    /// answers what waits in its mailbox, releases its call and ends.
    /// Returns how many syncers were told (a full control channel means the
    /// syncer is already being told something; call again).
    pub fn release_all(&self) -> usize {
        let guilds: Vec<Arc<Mutex<GuildState>>> = lock(&self.shared.guilds)
            .values()
            .map(|h| h.state.clone())
            .collect();
        let mut told = 0;
        for state in guilds {
            let controls: Vec<mpsc::Sender<SyncerControl>> = lock(&state)
                .syncers
                .values()
                .map(|s| s.control.clone())
                .collect();
            told += controls
                .iter()
                .filter(|c| c.try_send(SyncerControl::Release).is_ok())
                .count();
        }
        told
    }

    /// Releases the call of `channel_id` (control: handled before any bulk
    /// work queued for it). Returns whether the syncer was told.
    pub fn release_call(&self, guild_id: i64, channel_id: i64) -> bool {
        let state = match lock(&self.shared.guilds).get(&guild_id) {
            Some(h) => h.state.clone(),
            None => return false,
        };
        let control = match lock(&state).syncers.get(&channel_id) {
            Some(s) => s.control.clone(),
            None => return false,
        };
        control.try_send(SyncerControl::Release).is_ok()
    }
}

async fn serve(shared: Arc<Shared>, mut subscription: Subscription) {
    while let Some(message) = subscription.next().await {
        let reply = message.reply.clone();
        let Ok(envelope) = VoiceEnvelope::decode(&message.payload) else {
            shared.stats.malformed_total.fetch_add(1, Ordering::Relaxed);
            shared.log("malformed_request", "not a voice envelope");
            continue;
        };
        if message.expired() {
            shared.refuse(
                reply.as_deref(),
                VoiceRefusal::Expired,
                shared.limits.voice_retry_after_ms,
            );
            continue;
        }
        route(
            &shared,
            Work {
                request: envelope.body,
                reply,
                deadline: message.deadline,
            },
        );
    }
}

fn guild_of(request: &VoiceRequest) -> i64 {
    match request {
        VoiceRequest::Join { guild_id, .. } | VoiceRequest::Leave { guild_id, .. } => *guild_id,
    }
}

/// Hands `work` to its guild's coordinator, spawning one under the budget.
fn route(shared: &Arc<Shared>, mut work: Work) {
    let guild_id = guild_of(&work.request);
    let mut guilds = lock(&shared.guilds);
    if let Some(handle) = guilds.get(&guild_id) {
        match handle.bulk.try_send(work) {
            Ok(()) => {
                note_depth(&shared.stats, &handle.bulk);
                return;
            }
            Err(mpsc::error::TrySendError::Full(w)) => {
                drop(guilds);
                shared.refuse(
                    w.reply.as_deref(),
                    VoiceRefusal::InstanceFull,
                    shared.limits.voice_retry_after_ms,
                );
                return;
            }
            // It ended between our lookup and now: start another.
            Err(mpsc::error::TrySendError::Closed(w)) => {
                guilds.remove(&guild_id);
                work = w;
            }
        }
    }
    if matches!(work.request, VoiceRequest::Leave { .. }) {
        drop(guilds);
        shared.answer(work.reply.as_deref(), &VoiceReply::Left);
        return;
    }
    if let Err((reason, retry_after_ms)) = shared.try_spawn(guild_id, SpawnKind::Coordinator) {
        drop(guilds);
        shared.refuse(work.reply.as_deref(), reason, retry_after_ms);
        return;
    }
    let l = &shared.limits;
    let (bulk_tx, bulk_rx) = mpsc::channel(l.voice_mailbox_messages_max);
    let (control_tx, control_rx) = mpsc::channel(l.voice_control_messages_max);
    let state = Arc::new(Mutex::new(GuildState::default()));
    // A fresh mailbox has room for one.
    let _ = bulk_tx.try_send(work);
    guilds.insert(
        guild_id,
        CoordinatorHandle {
            bulk: bulk_tx,
            state: state.clone(),
        },
    );
    drop(guilds);
    shared
        .stats
        .coordinators_spawned_total
        .fetch_add(1, Ordering::Relaxed);
    shared
        .stats
        .coordinators_live
        .fetch_add(1, Ordering::Relaxed);
    let coordinator = Coordinator {
        shared: shared.clone(),
        guild_id,
        state,
        bulk: bulk_rx,
        control: control_rx,
        control_tx,
        linger_until: None,
    };
    tokio::spawn(coordinator.run());
}

struct Coordinator {
    shared: Arc<Shared>,
    guild_id: i64,
    state: Arc<Mutex<GuildState>>,
    bulk: mpsc::Receiver<Work>,
    control: mpsc::Receiver<CoordinatorControl>,
    /// Given to syncers so they can say they ended.
    control_tx: mpsc::Sender<CoordinatorControl>,
    /// After a refused child spawn, the coordinator stays until then (the
    /// caller will retry; a new coordinator would cost budget again).
    linger_until: Option<Instant>,
}

impl Coordinator {
    async fn run(mut self) {
        loop {
            tokio::select! {
                biased;
                control = self.control.recv() => {
                    self.shared.stats.control_handled_total.fetch_add(1, Ordering::Relaxed);
                    match control {
                        Some(CoordinatorControl::SyncerEnded) | None => {}
                    }
                }
                () = sleep_until(self.linger_until) => self.linger_until = None,
                work = self.bulk.recv() => match work {
                    Some(work) => self.handle(work),
                    None => break,
                },
            }
            if self.linger_until.is_none() && self.may_end() {
                break;
            }
        }
        self.shared.exited(SpawnKind::Coordinator);
    }

    /// Ends when no syncer runs and nothing waits, deciding under the lock
    /// the dispatcher routes through.
    fn may_end(&mut self) -> bool {
        let mut guilds = lock(&self.shared.guilds);
        let state = lock(&self.state);
        if !state.syncers.is_empty() || !self.bulk.is_empty() {
            return false;
        }
        drop(state);
        guilds.remove(&self.guild_id);
        self.bulk.close();
        true
    }

    fn handle(&mut self, work: Work) {
        let shared = self.shared.clone();
        let (channel_id, user_id) = match &work.request {
            VoiceRequest::Join {
                channel_id,
                user_id,
                ..
            } => (Some(*channel_id), *user_id),
            VoiceRequest::Leave { user_id, .. } => (None, *user_id),
        };
        let mut state = lock(&self.state);
        let current = state.users.get(&user_id).copied();
        // A move: the old call evicts the user first.
        if let (Some(old), Some(new)) = (current, channel_id)
            && old != new
            && let Some(syncer) = state.syncers.get(&old)
            && let VoiceRequest::Join {
                guild_id,
                session_id,
                ..
            } = &work.request
        {
            let leave = Work {
                request: VoiceRequest::Leave {
                    guild_id: *guild_id,
                    user_id,
                    session_id: session_id.clone(),
                },
                reply: None,
                deadline: None,
            };
            if syncer.bulk.try_send(leave).is_ok() {
                state.users.remove(&user_id);
            }
        }
        let Some(target) = channel_id.or(current) else {
            drop(state);
            shared.answer(work.reply.as_deref(), &VoiceReply::Left);
            return;
        };
        let mut work = work;
        if let Some(syncer) = state.syncers.get(&target) {
            match syncer.bulk.try_send(work) {
                Ok(()) => {
                    note_depth(&shared.stats, &syncer.bulk);
                    return;
                }
                Err(mpsc::error::TrySendError::Full(w)) => {
                    drop(state);
                    shared.refuse(
                        w.reply.as_deref(),
                        VoiceRefusal::InstanceFull,
                        shared.limits.voice_retry_after_ms,
                    );
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(w)) => {
                    state.syncers.remove(&target);
                    work = w;
                }
            }
        }
        if matches!(work.request, VoiceRequest::Leave { .. }) {
            state.users.remove(&user_id);
            drop(state);
            shared.answer(work.reply.as_deref(), &VoiceReply::Left);
            return;
        }
        if let Err((reason, retry_after_ms)) = shared.try_spawn(self.guild_id, SpawnKind::Child) {
            drop(state);
            self.linger_until = Some(
                Instant::now() + Duration::from_millis(shared.limits.voice_coordinator_linger_ms),
            );
            shared.refuse(work.reply.as_deref(), reason, retry_after_ms);
            return;
        }
        let l = &shared.limits;
        let (bulk_tx, bulk_rx) = mpsc::channel(l.voice_mailbox_messages_max);
        let (control_tx, control_rx) = mpsc::channel(l.voice_control_messages_max);
        let status = Arc::new(Mutex::new((None, 0, 0)));
        let _ = bulk_tx.try_send(work);
        state.syncers.insert(
            target,
            SyncerHandle {
                bulk: bulk_tx,
                control: control_tx,
                status: status.clone(),
            },
        );
        drop(state);
        shared
            .stats
            .syncers_spawned_total
            .fetch_add(1, Ordering::Relaxed);
        shared.stats.syncers_live.fetch_add(1, Ordering::Relaxed);
        let syncer = Syncer {
            sfus: shared.sfus.clone(),
            breakers: shared.breaker_opened.subscribe(),
            shared,
            guild_id: self.guild_id,
            channel_id: target,
            guild: self.state.clone(),
            bulk: bulk_rx,
            control: control_rx,
            coordinator: self.control_tx.clone(),
            status,
            placed: None,
            epoch: token::next_epoch(),
            participants: BTreeMap::new(),
            pending_control: None,
            replace_at: None,
        };
        tokio::spawn(syncer.run());
    }
}

/// Where a call is.
#[derive(Clone, Debug)]
struct Placed {
    node: String,
    endpoint: String,
}

/// A request to an SFU could not complete.
#[derive(Debug)]
enum SfuFailure {
    /// Control arrived while waiting (it is in `pending_control`).
    Interrupted,
    /// Timeout, no responder, bus refusal or a bad answer.
    Unavailable,
    /// The SFU answered with a refusal.
    Refused(SfuRefusal),
}

struct Syncer {
    shared: Arc<Shared>,
    sfus: watch::Receiver<SfuList>,
    breakers: watch::Receiver<u64>,
    guild_id: i64,
    channel_id: i64,
    guild: Arc<Mutex<GuildState>>,
    bulk: mpsc::Receiver<Work>,
    control: mpsc::Receiver<SyncerControl>,
    coordinator: mpsc::Sender<CoordinatorControl>,
    status: Arc<Mutex<(Option<String>, u64, usize)>>,
    placed: Option<Placed>,
    epoch: u64,
    /// user id → session id.
    participants: BTreeMap<i64, String>,
    pending_control: Option<SyncerControl>,
    /// When a failed re-placement is tried again.
    replace_at: Option<Instant>,
}

impl Syncer {
    async fn run(mut self) {
        loop {
            if let Some(control) = self.pending_control.take() {
                self.shared
                    .stats
                    .control_handled_total
                    .fetch_add(1, Ordering::Relaxed);
                match control {
                    SyncerControl::Release => {
                        self.end_now();
                        break;
                    }
                }
            }
            let replace_at = self.replace_at;
            tokio::select! {
                biased;
                control = self.control.recv() => match control {
                    Some(c) => self.pending_control = Some(c),
                    None => {
                        self.end_now();
                        break;
                    }
                },
                changed = self.sfus.changed() => {
                    if changed.is_err() {
                        // The view is gone (the node is stopping).
                        self.end_now();
                        break;
                    }
                    self.check_placement().await;
                }
                // The sender lives in `shared`, which this task holds.
                Ok(()) = self.breakers.changed() => self.check_placement().await,
                () = sleep_until(replace_at) => {
                    self.replace_at = None;
                    self.check_placement().await;
                }
                work = self.bulk.recv() => match work {
                    Some(work) => self.handle(work).await,
                    None => break,
                },
            }
            if self.pending_control.is_none() && self.may_end() {
                self.release_call();
                break;
            }
        }
        self.shared.exited(SpawnKind::Child);
        // Best effort: the coordinator also checks after its own work.
        let _ = self.coordinator.try_send(CoordinatorControl::SyncerEnded);
    }

    fn publish_status(&self) {
        *lock(&self.status) = (
            self.placed.as_ref().map(|p| p.node.clone()),
            self.epoch,
            self.participants.len(),
        );
    }

    /// Ends when the call is empty and nothing waits, deciding under the
    /// lock the coordinator routes through.
    fn may_end(&mut self) -> bool {
        let mut guild = lock(&self.guild);
        if !self.participants.is_empty() || !self.bulk.is_empty() {
            return false;
        }
        if guild.syncers.remove(&self.channel_id).is_some() {
            self.bulk.close();
        }
        true
    }

    /// Control said end: leave the guild's table, answer what waits, release.
    fn end_now(&mut self) {
        {
            let mut guild = lock(&self.guild);
            guild.syncers.remove(&self.channel_id);
            for user in self.participants.keys() {
                if guild.users.get(user) == Some(&self.channel_id) {
                    guild.users.remove(user);
                }
            }
        }
        self.bulk.close();
        while let Ok(work) = self.bulk.try_recv() {
            match work.request {
                VoiceRequest::Leave { .. } => {
                    self.shared.answer(work.reply.as_deref(), &VoiceReply::Left);
                }
                VoiceRequest::Join { .. } => self.shared.refuse(
                    work.reply.as_deref(),
                    VoiceRefusal::SfuUnavailable,
                    self.shared.limits.voice_retry_after_ms,
                ),
            }
        }
        self.participants.clear();
        self.release_call();
    }

    fn release_call(&mut self) {
        let Some(placed) = self.placed.take() else {
            return;
        };
        self.send_control(
            &placed.node,
            SfuRequest::Release {
                channel_id: self.channel_id,
                epoch: self.epoch,
            },
        );
        self.shared
            .stats
            .releases_total
            .fetch_add(1, Ordering::Relaxed);
        self.publish_status();
    }

    /// Control work to an SFU is published, not awaited: it is idempotent,
    /// and a syncer must not wait on an SFU that may be dying.
    fn send_control(&self, node: &str, request: SfuRequest) {
        let payload = Bytes::from(SfuEnvelope::new(request).encode());
        if self
            .shared
            .bus
            .publish(&sfu_control_subject(node), None, payload)
            .is_err()
        {
            self.shared.log("sfu_control_dropped", node);
        }
    }

    /// An SFU request with a deadline, abandoned when control arrives.
    async fn request(
        &mut self,
        node: &str,
        request: SfuRequest,
        deadline: Option<Instant>,
    ) -> Result<SfuReply, SfuFailure> {
        let timeout = self.shared.sfu_timeout(deadline);
        if timeout.is_zero() {
            return Err(SfuFailure::Unavailable);
        }
        let bus = self.shared.bus.clone();
        let subject = sfu_requests_subject(node);
        let payload = Bytes::from(SfuEnvelope::new(request).encode());
        let answer = tokio::select! {
            biased;
            control = self.control.recv() => {
                // `None`: the handle was dropped; treat as release.
                self.pending_control = Some(control.unwrap_or(SyncerControl::Release));
                return Err(SfuFailure::Interrupted);
            }
            answer = bus.request(&subject, payload, timeout) => answer,
        };
        let ok = match &answer {
            Ok(message) => decode_reply::<SfuReply>(&message.payload).ok(),
            Err(_) => None,
        };
        match ok {
            Some(SfuReply::Refused { reason }) => {
                // A refusal is an answer: the SFU is alive.
                self.shared.sfu_outcome(node, true);
                Err(SfuFailure::Refused(reason))
            }
            Some(reply) => {
                self.shared.sfu_outcome(node, true);
                Ok(reply)
            }
            None => {
                self.shared.sfu_outcome(node, false);
                Err(SfuFailure::Unavailable)
            }
        }
    }

    /// Allocates the call on an SFU other than `avoid`.
    async fn allocate(
        &mut self,
        avoid: Option<&str>,
        deadline: Option<Instant>,
    ) -> Result<Placed, Result<VoiceRefusal, SfuFailure>> {
        let Some(sfu) = self.shared.choose_sfu(self.channel_id, avoid) else {
            return Err(Ok(VoiceRefusal::NoSfu));
        };
        let result = self
            .request(
                &sfu.node,
                SfuRequest::Allocate {
                    guild_id: self.guild_id,
                    channel_id: self.channel_id,
                    epoch: self.epoch,
                },
                deadline,
            )
            .await;
        self.shared.allocation_done(&sfu.node);
        match result {
            Ok(SfuReply::Allocated { endpoint }) => {
                self.shared
                    .stats
                    .allocations_total
                    .fetch_add(1, Ordering::Relaxed);
                Ok(Placed {
                    node: sfu.node,
                    endpoint,
                })
            }
            Err(SfuFailure::Interrupted) => Err(Err(SfuFailure::Interrupted)),
            Err(SfuFailure::Refused(SfuRefusal::Full | SfuRefusal::Draining)) => {
                // Alive but without room: the announcement lagged.
                Err(Ok(VoiceRefusal::NoSfu))
            }
            Ok(_) | Err(_) => {
                self.shared
                    .stats
                    .allocation_failures_total
                    .fetch_add(1, Ordering::Relaxed);
                Err(Ok(VoiceRefusal::SfuUnavailable))
            }
        }
    }

    /// Admits `user_id` with a fresh token on the call's SFU.
    async fn admit(
        &mut self,
        placed: &Placed,
        user_id: i64,
        session_id: &str,
        deadline: Option<Instant>,
    ) -> Result<String, SfuFailure> {
        let Some(token) = token::mint() else {
            self.shared.log("token_mint_failed", "getrandom");
            return Err(SfuFailure::Unavailable);
        };
        let reply = self
            .request(
                &placed.node,
                SfuRequest::Admit {
                    guild_id: self.guild_id,
                    channel_id: self.channel_id,
                    user_id,
                    session_id: session_id.to_owned(),
                    token_sha256: token::digest(&token),
                    epoch: self.epoch,
                },
                deadline,
            )
            .await?;
        match reply {
            SfuReply::Admitted => {
                self.shared
                    .stats
                    .admissions_total
                    .fetch_add(1, Ordering::Relaxed);
                Ok(token)
            }
            _ => Err(SfuFailure::Unavailable),
        }
    }

    async fn handle(&mut self, work: Work) {
        let reply = work.reply.as_deref();
        match work.request {
            VoiceRequest::Join {
                user_id,
                ref session_id,
                ..
            } => {
                if work.deadline.is_some_and(|d| d <= Instant::now()) {
                    self.shared.refuse(
                        reply,
                        VoiceRefusal::Expired,
                        self.shared.limits.voice_retry_after_ms,
                    );
                    return;
                }
                if !self.participants.contains_key(&user_id)
                    && self.participants.len() >= self.shared.limits.voice_call_participants_max
                {
                    self.shared.refuse(
                        reply,
                        VoiceRefusal::InstanceFull,
                        self.shared.limits.voice_retry_after_ms,
                    );
                    return;
                }
                let retry = self.shared.limits.voice_retry_after_ms;
                let placed = match self.placed.clone() {
                    Some(placed) => placed,
                    None => match self.allocate(None, work.deadline).await {
                        Ok(placed) => {
                            self.placed = Some(placed.clone());
                            self.publish_status();
                            placed
                        }
                        Err(Ok(reason)) => {
                            self.shared.refuse(reply, reason, retry);
                            return;
                        }
                        Err(Err(_)) => {
                            self.shared
                                .refuse(reply, VoiceRefusal::SfuUnavailable, retry);
                            return;
                        }
                    },
                };
                match self
                    .admit(&placed, user_id, session_id, work.deadline)
                    .await
                {
                    Ok(token) => {
                        self.participants.insert(user_id, session_id.clone());
                        lock(&self.guild).users.insert(user_id, self.channel_id);
                        self.publish_status();
                        self.shared.answer(
                            reply,
                            &VoiceReply::Server {
                                endpoint: placed.endpoint.clone(),
                                token,
                            },
                        );
                    }
                    Err(failure) => {
                        self.shared
                            .refuse(reply, VoiceRefusal::SfuUnavailable, retry);
                        if !matches!(failure, SfuFailure::Interrupted) {
                            // Its breaker may have opened: move the call.
                            self.check_placement().await;
                        }
                    }
                }
            }
            VoiceRequest::Leave { user_id, .. } => {
                if self.participants.remove(&user_id).is_some() {
                    {
                        let mut guild = lock(&self.guild);
                        if guild.users.get(&user_id) == Some(&self.channel_id) {
                            guild.users.remove(&user_id);
                        }
                    }
                    if let Some(placed) = &self.placed {
                        self.send_control(
                            &placed.node,
                            SfuRequest::Evict {
                                channel_id: self.channel_id,
                                user_id,
                            },
                        );
                        self.shared
                            .stats
                            .evictions_total
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    self.publish_status();
                }
                self.shared.answer(reply, &VoiceReply::Left);
            }
        }
    }

    /// If the call's SFU is gone from the live list (or its breaker is
    /// open), moves the call: a new epoch, a new allocation elsewhere, a
    /// new token for every participant, VOICE_SERVER_UPDATE to each.
    async fn check_placement(&mut self) {
        let Some(old) = self.placed.clone() else {
            return;
        };
        if self.shared.sfu_alive(&old.node) {
            return;
        }
        // No syncer keeps pointing at a dead SFU, even while it waits.
        self.placed = None;
        self.publish_status();
        // The old SFU may only be draining or partitioned: tell it, once.
        self.send_control(
            &old.node,
            SfuRequest::Release {
                channel_id: self.channel_id,
                epoch: self.epoch,
            },
        );
        if self.participants.is_empty() {
            return;
        }
        let shared = self.shared.clone();
        let permit = tokio::select! {
            biased;
            control = self.control.recv() => {
                self.pending_control = Some(control.unwrap_or(SyncerControl::Release));
                return;
            }
            permit = shared.replacements.acquire() => permit,
        };
        let Ok(_permit) = permit else { return };
        self.epoch = token::next_epoch();
        let placed = match self.allocate(Some(&old.node), None).await {
            Ok(placed) => placed,
            Err(Err(SfuFailure::Interrupted)) => return,
            Err(_) => {
                self.shared
                    .stats
                    .replacement_failures_total
                    .fetch_add(1, Ordering::Relaxed);
                // Try again later: a new SFU may come, a breaker may close.
                let delay_ms = self
                    .shared
                    .retry_after_ms(self.shared.limits.voice_retry_after_ms);
                self.replace_at = Some(Instant::now() + Duration::from_millis(delay_ms));
                return;
            }
        };
        self.placed = Some(placed.clone());
        self.publish_status();
        self.shared
            .stats
            .replacements_total
            .fetch_add(1, Ordering::Relaxed);
        let participants: Vec<(i64, String)> = self
            .participants
            .iter()
            .map(|(u, s)| (*u, s.clone()))
            .collect();
        for (user_id, session_id) in participants {
            match self.admit(&placed, user_id, &session_id, None).await {
                Ok(token) => self.notify(&session_id, &placed.endpoint, &token),
                Err(SfuFailure::Interrupted) => return,
                Err(_) => {
                    // The client re-sends op 4 when its voice connection
                    // fails; drop the participant rather than point it at
                    // nothing.
                    self.participants.remove(&user_id);
                    self.shared
                        .stats
                        .server_updates_dropped_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.publish_status();
    }

    /// VOICE_SERVER_UPDATE for one session, through its gateway node.
    fn notify(&self, session_id: &str, endpoint: &str, token: &str) {
        let stats = &self.shared.stats;
        let Some(gateway) = (self.shared.gateway_of_session)(session_id) else {
            stats
                .server_updates_dropped_total
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Discord's exact payload: guild_id as a string.
        let data = serde_json::json!({
            "token": token,
            "guild_id": self.guild_id.to_string(),
            "endpoint": endpoint,
        });
        let Ok(data) = serde_json::value::to_raw_value(&data) else {
            return;
        };
        let event = NodeEvent::new(NodeEventBody::Session {
            session_id: session_id.to_owned(),
            user_id: None,
            name: "VOICE_SERVER_UPDATE".to_owned(),
            data,
        });
        let Ok(bytes) = event.encode() else { return };
        let subject = gateway_events_subject(
            &gateway,
            partition_of(self.guild_id, self.shared.limits.gateway_event_partitions),
        );
        match self.shared.bus.publish(&subject, None, Bytes::from(bytes)) {
            Ok(()) => stats
                .server_updates_published_total
                .fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                self.shared.log("server_update_dropped", &gateway);
                stats
                    .server_updates_dropped_total
                    .fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
