//! The gateway side of guild fanout: this node's event streams on the bus.
//!
//! One task per partition (`gateway_event_partitions`) drains its bounded
//! subscription, checks each guild stream's numbering
//! ([`StreamPosition::check`]), encodes each dispatch once and hands it to
//! the hub. A gap means the bus dropped events on the way (a full
//! subscription, a lost message): the guild's sessions here stop receiving
//! it and subscribe again, each getting a fresh GUILD_CREATE, instead of
//! silently missing events that no replay buffer holds.
//!
//! The rule a client sees: after a lost event, the next thing it hears of
//! the guild is a GUILD_CREATE. Delivery stops at the gap itself; the
//! re-subscription is bounded: at most one per guild per
//! `stream_resync_interval_ms`. A gap inside that interval stops delivery at once
//! and re-subscribes at the interval's end, so a stream that keeps
//! overflowing cannot turn into a storm of GUILD_CREATEs that overflows it
//! further.
//!
//! Nothing here spawns without a bound. The partition task keeps its due
//! resyncs itself (one per guild) and wakes for the earliest; each runs in
//! a task holding one of `event_resync_tasks_max` node-wide permits, and a
//! resync that finds none is moved to the next interval (delivery of the
//! guild stays stopped meanwhile: later, never lossy). A `Joined` is
//! handled inline: subscribing is one non-waiting publish per session of
//! the user here, so it needs no task at all.
//!
//! Owner changes. A stream's epoch is the owner's fencing epoch (claimed in
//! the store, larger for every new owner of the guild). An event of an
//! older epoch than the newest seen here is refused and counted
//! (`stale_epoch_total`): a stale owner (one that lost its lease and does
//! not know it yet) cannot reach a session once the new owner has. The
//! first event of a newer epoch stops the guild's delivery here before it
//! is applied; the new owner's stream starts with a Subscribe (and its
//! GUILD_CREATE) for every session it learnt of by asking this node
//! ([`serve_follows`]), so each session hears the new owner only after its
//! fresh GUILD_CREATE, and never two owners' streams interleaved. Sessions
//! it did not learn of (the question timed out, or they came later) are
//! re-subscribed by the resync path, one interval later, within the same
//! task permits.

use crate::hub::{GuildEvent, Hub};
use crate::subscriptions::Subscriptions;
use guildhall_cluster::{Bus, BusError, Subscription};
use guildhall_proto::bus::{
    NodeEvent, NodeEventBody, StreamBody, StreamCheck, StreamEvent, StreamPosition,
    gateway_events_subject, partition_of,
};
use guildhall_proto::gateway::EncodedDispatch;
use guildhall_proto::guilds::{Follower, FollowsAsk, follows_subject};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

pub use guildhall_common::gateways::to_gateways;

/// Counters of this node's event streams, read by `/metrics`.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Stream events applied.
    pub applied_total: AtomicU64,
    /// Guild resyncs scheduled because this node's lease ended and it
    /// announced itself again.
    pub lease_regained_resyncs_total: AtomicU64,
    /// Gaps detected.
    pub gaps_total: AtomicU64,
    /// Events the gaps skipped over.
    pub missed_total: AtomicU64,
    /// Of the gaps, those a stream's tail revealed (the stream's last
    /// messages were lost and no later event came).
    pub tail_gaps_total: AtomicU64,
    /// Dispatches of a publish delivered here lately, dropped (a new
    /// owner fanned out again what a dead one had sent unconfirmed).
    pub publish_repeats_dropped_total: AtomicU64,
    /// Resyncs performed (each re-subscribes a guild's sessions here).
    pub resyncs_total: AtomicU64,
    /// Duplicates and stragglers skipped.
    pub stale_total: AtomicU64,
    /// Of those, events of an older owner epoch than the newest seen for
    /// the guild (a superseded owner's stream, refused).
    pub stale_epoch_total: AtomicU64,
    /// Streams whose epoch advanced (a new owner of the guild).
    pub owner_changes_total: AtomicU64,
    /// Questions of new owners answered (which sessions follow a guild).
    pub follows_answered_total: AtomicU64,
    /// Envelopes that did not decode.
    pub malformed_total: AtomicU64,
    /// Resyncs moved to the next interval because `event_resync_tasks_max`
    /// were running.
    pub resyncs_deferred_total: AtomicU64,
    /// Resync tasks running now.
    pub resync_tasks: AtomicUsize,
    /// Most resync tasks that ran at once.
    pub resync_tasks_peak: AtomicUsize,
    /// Sessions subscribed because their user joined a guild.
    pub joined_subscriptions_total: AtomicU64,
    /// Sessions ended for good on a `Terminate` (a bot past its session
    /// start limit).
    pub terminated_sessions_total: AtomicU64,
}

struct Stream {
    position: StreamPosition,
    /// When the latest re-subscription runs (or ran).
    resync_at: Option<Instant>,
    /// The publish ids of the guild's latest dispatches here, oldest first
    /// (at most `gateway_publish_ids_remembered_max`).
    delivered: std::collections::VecDeque<u64>,
}

struct Partition {
    hub: Arc<Hub>,
    subscriptions: Arc<Subscriptions>,
    counters: Arc<EventCounters>,
    streams: HashMap<i64, Stream>,
    streams_max: usize,
    /// See `gateway_publish_ids_remembered_max`.
    publish_ids_max: usize,
    resync_interval: Duration,
    /// Resyncs still to run, by when (at most one per guild: `due_at`).
    due: BTreeSet<(Instant, i64)>,
    due_at: HashMap<i64, Instant>,
    /// Due resyncs that re-subscribe only the sessions without a
    /// GUILD_CREATE of the current stream (after an owner change); a gap
    /// makes one a full resync again.
    awaiting_only: std::collections::HashSet<i64>,
    /// Permits of the node's resync tasks (`event_resync_tasks_max`, shared
    /// by every partition).
    resync_tasks: Arc<Semaphore>,
    /// This partition's number, and how many there are.
    partition: usize,
    partitions: usize,
    /// Changes when this node announced itself again after its lease had
    /// ended (guild owners dropped its sessions then).
    regained: tokio::sync::watch::Receiver<u64>,
    /// Whether `regained` can still change (its sender lives).
    regained_open: bool,
}

/// Subscribes this node's partitions and starts their tasks.
pub async fn start(
    bus: &Arc<dyn Bus>,
    node_name: &str,
    limits: &guildhall_limits::Limits,
    hub: Arc<Hub>,
    subscriptions: Arc<Subscriptions>,
    counters: Arc<EventCounters>,
    regained: tokio::sync::watch::Receiver<u64>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, BusError> {
    let mut tasks = Vec::new();
    let resync_tasks = Arc::new(Semaphore::new(limits.event_resync_tasks_max));
    for partition in 0..limits.gateway_event_partitions {
        let subscription = bus
            .subscribe(
                &gateway_events_subject(node_name, partition),
                None,
                limits.bus_subscription_messages_max,
            )
            .await?;
        let partition = Partition {
            hub: hub.clone(),
            subscriptions: subscriptions.clone(),
            counters: counters.clone(),
            streams: HashMap::new(),
            streams_max: limits.guild_owners_max,
            publish_ids_max: limits.gateway_publish_ids_remembered_max,
            resync_interval: Duration::from_millis(limits.stream_resync_interval_ms),
            due: BTreeSet::new(),
            due_at: HashMap::new(),
            awaiting_only: std::collections::HashSet::new(),
            resync_tasks: resync_tasks.clone(),
            partition,
            partitions: limits.gateway_event_partitions,
            regained: regained.clone(),
            regained_open: true,
        };
        tasks.push(tokio::spawn(partition.run(subscription)));
    }
    tasks.push(serve_follows(bus.clone(), node_name, limits, hub, counters).await?);
    Ok(tasks)
}

/// Answers new owners: which sessions here follow (or want) a guild, at
/// most `guild_pull_sessions_max` of them. Inline and non-waiting (a map
/// read and one publish), so the task never falls behind its subscription
/// for long; a question that finds it full is dropped by the bus and the
/// owner goes on without this node's list (the resync path covers it).
async fn serve_follows(
    bus: Arc<dyn Bus>,
    node_name: &str,
    limits: &guildhall_limits::Limits,
    hub: Arc<Hub>,
    counters: Arc<EventCounters>,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let mut questions = bus
        .subscribe(
            &follows_subject(node_name),
            None,
            limits.bus_subscription_messages_max,
        )
        .await?;
    let max = limits.guild_pull_sessions_max;
    Ok(tokio::spawn(async move {
        while let Some(message) = questions.next().await {
            let (Some(reply), Ok(ask)) = (
                message.reply.as_deref(),
                serde_json::from_slice::<FollowsAsk>(&message.payload),
            ) else {
                counters.malformed_total.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let followers: Vec<Follower> = hub
                .followers(ask.guild_id, max)
                .into_iter()
                .map(|(session_id, user_id, intents, large_threshold)| Follower {
                    session_id,
                    user_id,
                    intents,
                    large_threshold,
                })
                .collect();
            if let Ok(bytes) = serde_json::to_vec(&followers) {
                // Best effort: an owner that gave up waiting has no inbox.
                let _ = bus.publish(reply, None, bytes.into());
                counters
                    .follows_answered_total
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }))
}

impl Partition {
    async fn run(mut self, mut subscription: Subscription) {
        loop {
            let next_due = self.due.first().map(|(at, _)| *at);
            tokio::select! {
                message = subscription.next() => {
                    let Some(message) = message else { break };
                    match NodeEvent::decode(&message.payload) {
                        Ok(event) => self.apply(event.body).await,
                        Err(error) => {
                            self.counters
                                .malformed_total
                                .fetch_add(1, Ordering::Relaxed);
                            guildhall_common::throttled!(warn, "events.malformed", %error, "malformed bus envelope dropped");
                        }
                    }
                }
                () = tokio::time::sleep_until(next_due.unwrap_or_else(Instant::now)), if next_due.is_some() => {
                    self.run_due(Instant::now());
                }
                changed = self.regained.changed(), if self.regained_open => {
                    if changed.is_ok() {
                        self.resync_everything();
                    } else {
                        self.regained_open = false;
                    }
                }
            }
        }
    }

    async fn apply(&mut self, body: NodeEventBody) {
        match body {
            NodeEventBody::Stream(event) => self.stream(event),
            NodeEventBody::StreamTail {
                guild_id,
                epoch,
                seq,
            } => self.tail(guild_id, epoch, seq),
            NodeEventBody::Users {
                user_ids,
                guild_id,
                required_intent,
                name,
                data,
            } => {
                let event = EncodedDispatch::from_json(&name, data.get());
                self.hub
                    .dispatch_to_users(&user_ids, guild_id, required_intent, &event);
            }
            NodeEventBody::Session {
                session_id,
                user_id,
                name,
                data,
            } => {
                if let Some(slot) = self
                    .hub
                    .get(&session_id)
                    .filter(|slot| user_id.is_none_or(|user| slot.user_id == user))
                {
                    let event = EncodedDispatch::from_json(&name, data.get());
                    slot.dispatch(&event, &self.hub.counters);
                }
            }
            NodeEventBody::Terminate { user_id } => {
                for slot in self.hub.sessions_of(user_id) {
                    slot.terminate();
                    self.counters
                        .terminated_sessions_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            NodeEventBody::Joined { guild_id, user_id } => {
                // Inline: one non-waiting publish per session of the user.
                // A session that follows the guild already is left alone:
                // an owner announces a join again when a retried AddMember
                // finds the member present (its first owner may have died
                // between the commit and the announcement), and a session
                // must not get a second GUILD_CREATE for it.
                let mut pairs = Vec::new();
                for slot in self.hub.sessions_of(user_id) {
                    if !slot.receives(Some(guild_id)) || self.hub.wants(guild_id, &slot.id) {
                        continue;
                    }
                    self.counters
                        .joined_subscriptions_total
                        .fetch_add(1, Ordering::Relaxed);
                    pairs.push((guild_id, slot));
                }
                self.subscriptions.subscribe_watched(pairs).await;
            }
        }
    }

    fn stream(&mut self, event: StreamEvent) {
        let guild_id = event.guild_id;
        if self.streams.len() >= self.streams_max && !self.streams.contains_key(&guild_id) {
            // Forget positions of guilds nobody here follows any more.
            let hub = &self.hub;
            self.streams.retain(|guild, _| hub.follows(*guild));
        }
        let stream = self.streams.entry(guild_id).or_insert(Stream {
            position: StreamPosition::default(),
            resync_at: None,
            delivered: std::collections::VecDeque::new(),
        });
        let newest_epoch = stream.position.epoch;
        match stream.position.check(event.epoch, event.seq) {
            StreamCheck::Next => {
                if newest_epoch != 0 && event.epoch > newest_epoch {
                    self.owner_changed(guild_id);
                }
            }
            StreamCheck::Stale => {
                self.counters.stale_total.fetch_add(1, Ordering::Relaxed);
                if event.epoch < newest_epoch {
                    self.counters
                        .stale_epoch_total
                        .fetch_add(1, Ordering::Relaxed);
                    guildhall_common::throttled!(
                        warn,
                        "events.stale_epoch",
                        guild_id,
                        epoch = event.epoch,
                        newest_epoch,
                        "event of a superseded guild owner refused"
                    );
                }
                return;
            }
            StreamCheck::Gap { missing } => self.gap(guild_id, missing),
        }
        self.counters.applied_total.fetch_add(1, Ordering::Relaxed);
        match event.body {
            StreamBody::Dispatch {
                name,
                required_intent,
                data,
                blanked,
                content_exempt,
                hidden_from,
                publish_id,
            } => {
                if !self.first_delivery(guild_id, publish_id) {
                    return;
                }
                self.hub.dispatch_guild_event(&GuildEvent {
                    guild_id,
                    required_intent,
                    full: EncodedDispatch::from_json(&name, data.get()),
                    blanked: blanked.map(|b| EncodedDispatch::from_json(&name, b.get())),
                    content_exempt,
                    hidden_from,
                });
            }
            StreamBody::Subscribe {
                session_id,
                guild_create,
            } => {
                let event =
                    guild_create.map(|g| EncodedDispatch::from_json("GUILD_CREATE", g.get()));
                self.hub.subscribed(guild_id, &session_id, event.as_ref());
            }
            StreamBody::Moved { session_id } => self.hub.moved(guild_id, &session_id),
            StreamBody::Adopt { session_id } => {
                self.hub.adopt_guild(guild_id, &session_id);
            }
            StreamBody::Remove { user_ids } => {
                let data = serde_json::json!({"id": guild_id.to_string()});
                let event = EncodedDispatch::new("GUILD_DELETE", &data).ok();
                self.hub.removed(guild_id, &user_ids, event.as_ref());
            }
        }
    }

    /// Whether the dispatch of `publish_id` is the first here among the
    /// guild's latest `gateway_publish_ids_remembered_max` (0: an owner's
    /// own event, always). An owner that died after fanning out a publish
    /// and before confirming it leaves it in its api node's outbox, which
    /// offers it to the next owner: without this, the guild's sessions here
    /// would hear it twice, under two sequence numbers.
    fn first_delivery(&mut self, guild_id: i64, publish_id: u64) -> bool {
        if publish_id == 0 {
            return true;
        }
        let Some(stream) = self.streams.get_mut(&guild_id) else {
            return true;
        };
        if stream.delivered.contains(&publish_id) {
            self.counters
                .publish_repeats_dropped_total
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if stream.delivered.len() >= self.publish_ids_max {
            stream.delivered.pop_front();
        }
        stream.delivered.push_back(publish_id);
        true
    }

    /// Events of `guild_id`'s stream were lost: nobody here hears more of
    /// the guild until its sessions are re-subscribed (a fresh
    /// GUILD_CREATE each), at once unless a resync is due within an
    /// interval.
    fn gap(&mut self, guild_id: i64, missing: u64) {
        self.counters.gaps_total.fetch_add(1, Ordering::Relaxed);
        self.counters
            .missed_total
            .fetch_add(missing, Ordering::Relaxed);
        guildhall_common::throttled!(
            warn,
            "events.gap",
            guild_id,
            missing,
            "guild stream gap; resynchronising"
        );
        self.hub.stop(guild_id);
        let now = Instant::now();
        let interval = self.resync_interval;
        let Some(stream) = self.streams.get_mut(&guild_id) else {
            return;
        };
        let when = match stream.resync_at {
            // One is still to come: it re-subscribes everyone.
            Some(at) if now < at => None,
            Some(at) if now < at + interval => Some(at + interval),
            _ => Some(now),
        };
        if let Some(when) = when {
            stream.resync_at = Some(when);
            self.resync_at(guild_id, when);
        }
        // Whatever was due, everyone re-subscribes now.
        self.awaiting_only.remove(&guild_id);
    }

    /// The owner's tail of `guild_id`'s stream: if this node's position is
    /// behind it, the stream's last messages were lost in transit (the bus
    /// is at most once) and the guild is resynchronised now rather than at
    /// its next event. A guild nobody here follows is left alone (no
    /// position is kept for it).
    fn tail(&mut self, guild_id: i64, epoch: u64, seq: u64) {
        if !self.hub.follows(guild_id) {
            return;
        }
        let Some(stream) = self.streams.get_mut(&guild_id) else {
            // Followed, but no event of the guild ever reached this
            // partition: everything so far was lost.
            if self.streams.len() >= self.streams_max {
                return;
            }
            self.streams.insert(
                guild_id,
                Stream {
                    position: StreamPosition { epoch, seq },
                    resync_at: None,
                    delivered: std::collections::VecDeque::new(),
                },
            );
            self.counters
                .tail_gaps_total
                .fetch_add(1, Ordering::Relaxed);
            self.gap(guild_id, seq);
            return;
        };
        if let Some(missing) = stream.position.behind_tail(epoch, seq) {
            self.counters
                .tail_gaps_total
                .fetch_add(1, Ordering::Relaxed);
            self.gap(guild_id, missing);
        }
    }

    /// A new owner's stream begins: nobody here hears it before the
    /// Subscribe (and GUILD_CREATE) it sends for them; the sessions it
    /// sends none for are re-subscribed one interval later (unless a
    /// resync is due anyway).
    fn owner_changed(&mut self, guild_id: i64) {
        self.counters
            .owner_changes_total
            .fetch_add(1, Ordering::Relaxed);
        self.hub.stop(guild_id);
        if !self.due_at.contains_key(&guild_id) {
            let when = Instant::now() + self.resync_interval;
            if let Some(stream) = self.streams.get_mut(&guild_id) {
                stream.resync_at = Some(when);
            }
            self.resync_at(guild_id, when);
            self.awaiting_only.insert(guild_id);
        }
    }

    /// This node's lease ended and it announced itself again: owners
    /// dropped its sessions when the lease ended, so every guild followed
    /// here (of this partition) is re-subscribed from a fresh GUILD_CREATE,
    /// through the paced resync path (`event_resync_tasks_max`).
    fn resync_everything(&mut self) {
        let now = Instant::now();
        let guilds: Vec<i64> = self
            .hub
            .wanted_guilds()
            .into_iter()
            .filter(|guild_id| partition_of(*guild_id, self.partitions) == self.partition)
            .collect();
        self.counters
            .lease_regained_resyncs_total
            .fetch_add(guilds.len() as u64, Ordering::Relaxed);
        for guild_id in guilds {
            self.awaiting_only.remove(&guild_id);
            self.resync_at(guild_id, now);
        }
    }

    /// Schedules the guild's resync for `when` (replacing one scheduled
    /// earlier: one per guild).
    fn resync_at(&mut self, guild_id: i64, when: Instant) {
        if let Some(previous) = self.due_at.insert(guild_id, when) {
            self.due.remove(&(previous, guild_id));
        }
        self.due.insert((when, guild_id));
    }

    /// Starts the resyncs due at `now`, each in a task holding a permit; one
    /// that finds no permit moves to the next interval.
    fn run_due(&mut self, now: Instant) {
        while let Some(&(at, guild_id)) = self.due.first() {
            if at > now {
                break;
            }
            self.due.remove(&(at, guild_id));
            self.due_at.remove(&guild_id);
            let Ok(permit) = self.resync_tasks.clone().try_acquire_owned() else {
                // Stays awaiting-only if it was: `awaiting_only` is kept.
                self.counters
                    .resyncs_deferred_total
                    .fetch_add(1, Ordering::Relaxed);
                let later = now + self.resync_interval;
                if let Some(stream) = self.streams.get_mut(&guild_id) {
                    stream.resync_at = Some(later);
                }
                self.resync_at(guild_id, later);
                continue;
            };
            // Counted up here and down where the task ends, never stored:
            // partitions on other workers share the gauge, and a store
            // racing a task's end would let it drift or wrap.
            let running = self.counters.resync_tasks.fetch_add(1, Ordering::Relaxed) + 1;
            self.counters
                .resync_tasks_peak
                .fetch_max(running, Ordering::Relaxed);
            let (hub, subscriptions, counters) = (
                self.hub.clone(),
                self.subscriptions.clone(),
                self.counters.clone(),
            );
            let awaiting_only = self.awaiting_only.remove(&guild_id);
            tokio::spawn(async move {
                // After a gap, whatever re-subscribed meanwhile is dropped
                // too: everyone starts again from one GUILD_CREATE. After an
                // owner change, only those the new owner did not subscribe.
                let slots = if awaiting_only {
                    hub.awaiting_slots(guild_id)
                } else {
                    hub.resync(guild_id)
                };
                counters.resyncs_total.fetch_add(1, Ordering::Relaxed);
                let pairs = slots.into_iter().map(|slot| (guild_id, slot)).collect();
                subscriptions.subscribe_watched(pairs).await;
                counters.resync_tasks.fetch_sub(1, Ordering::Relaxed);
                drop(permit);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    async fn partition(permits: usize) -> Partition {
        let limits = guildhall_limits::Limits::default();
        let store = guildhall_store::Store::open_in_memory().await.unwrap();
        let shared = Arc::new(guildhall_common::state::Shared::new(
            store,
            limits.clone(),
            String::new(),
            1,
        ));
        let hub = Arc::new(Hub::new(&limits));
        let bus: Arc<dyn Bus> = Arc::new(guildhall_cluster::LocalBus::new(1 << 20));
        let cluster = Arc::new(guildhall_common::cluster::ClusterState::default());
        let guilds = Arc::new(guildhall_common::guilds::GuildsClient::new(
            bus,
            cluster,
            "n".into(),
            &limits,
        ));
        let subscriptions = Arc::new(Subscriptions::new(shared, hub.clone(), guilds, "n".into()));
        Partition {
            hub,
            subscriptions,
            counters: Arc::new(EventCounters::default()),
            streams: HashMap::new(),
            streams_max: 16,
            publish_ids_max: 4,
            resync_interval: Duration::from_millis(500),
            due: BTreeSet::new(),
            due_at: HashMap::new(),
            awaiting_only: std::collections::HashSet::new(),
            resync_tasks: Arc::new(Semaphore::new(permits)),
            partition: 0,
            partitions: 1,
            regained: tokio::sync::watch::channel(0).1,
            regained_open: false,
        }
    }

    /// A new owner fans out again what a dead one sent unconfirmed: the
    /// repeat is dropped while the guild's latest dispatches here hold its
    /// publish id (4 in this partition), and an owner's own events (0)
    /// always pass.
    #[tokio::test]
    async fn a_publish_fanned_out_again_is_dropped_within_the_window() {
        let mut partition = partition(1).await;
        partition.streams.insert(
            7,
            Stream {
                position: StreamPosition::default(),
                resync_at: None,
                delivered: std::collections::VecDeque::new(),
            },
        );
        assert!(partition.first_delivery(7, 11));
        assert!(!partition.first_delivery(7, 11));
        assert!(partition.first_delivery(7, 0) && partition.first_delivery(7, 0));
        for id in 12..16 {
            assert!(partition.first_delivery(7, id));
        }
        assert!(partition.first_delivery(7, 11), "forgotten past the window");
        assert_eq!(
            partition
                .counters
                .publish_repeats_dropped_total
                .load(Ordering::Relaxed),
            1
        );
    }

    #[tokio::test]
    async fn a_resync_without_a_permit_moves_to_the_next_interval() {
        let mut partition = partition(0).await;
        let t0 = Instant::now();
        partition.resync_at(7, t0);
        partition.resync_at(7, t0); // one per guild
        assert_eq!(partition.due.len(), 1);
        partition.run_due(t0);
        let counters = partition.counters.clone();
        assert_eq!(counters.resyncs_deferred_total.load(Ordering::Relaxed), 1);
        let later = t0 + partition.resync_interval;
        assert_eq!(partition.due.first(), Some(&(later, 7)));
        partition.run_due(t0);
        assert_eq!(partition.due.len(), 1, "not due before the next interval");

        partition.resync_tasks.add_permits(1);
        partition.run_due(later);
        assert!(partition.due.is_empty());
        assert_eq!(counters.resync_tasks_peak.load(Ordering::Relaxed), 1);
        while counters.resyncs_total.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(counters.resyncs_deferred_total.load(Ordering::Relaxed), 1);
    }
}
