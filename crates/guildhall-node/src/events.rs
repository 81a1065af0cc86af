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

use crate::guilds::GuildDirectory;
use crate::hub::{GuildEvent, Hub};
use guildhall_cluster::{Bus, BusError, Subscription};
use guildhall_proto::bus::{
    NodeEvent, NodeEventBody, StreamBody, StreamCheck, StreamEvent, StreamPosition,
    gateway_events_subject,
};
use guildhall_proto::gateway::EncodedDispatch;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Publishes `body` to every gateway node in the view, on the partition of
/// `key`; returns how many publishes the bus refused. For what has no
/// guild stream: user events, and joins (whose sessions are wherever the
/// user's sessions are).
pub fn to_gateways(
    bus: &dyn Bus,
    gateways: &[String],
    partitions: usize,
    key: i64,
    body: NodeEventBody,
) -> u64 {
    let Ok(bytes) = NodeEvent::new(body).encode() else {
        return 1;
    };
    let bytes = bytes::Bytes::from(bytes);
    let partition = guildhall_proto::bus::partition_of(key, partitions);
    gateways
        .iter()
        .filter(|node| {
            bus.publish(
                &gateway_events_subject(node, partition),
                None,
                bytes.clone(),
            )
            .is_err()
        })
        .count() as u64
}

/// Counters of this node's event streams, read by `/metrics`.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Stream events applied.
    pub applied_total: AtomicU64,
    /// Gaps detected.
    pub gaps_total: AtomicU64,
    /// Events the gaps skipped over.
    pub missed_total: AtomicU64,
    /// Resyncs performed (each re-subscribes a guild's sessions here).
    pub resyncs_total: AtomicU64,
    /// Duplicates and stragglers skipped.
    pub stale_total: AtomicU64,
    /// Envelopes that did not decode.
    pub malformed_total: AtomicU64,
}

struct Stream {
    position: StreamPosition,
    /// When the latest re-subscription runs (or ran).
    resync_at: Option<Instant>,
}

struct Partition {
    hub: Arc<Hub>,
    guilds: Arc<GuildDirectory>,
    counters: Arc<EventCounters>,
    streams: HashMap<i64, Stream>,
    streams_max: usize,
    resync_interval: Duration,
}

/// Subscribes this node's partitions and starts their tasks.
pub fn start(
    bus: &dyn Bus,
    node_name: &str,
    limits: &guildhall_limits::Limits,
    hub: Arc<Hub>,
    guilds: Arc<GuildDirectory>,
    counters: Arc<EventCounters>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, BusError> {
    let mut tasks = Vec::new();
    for partition in 0..limits.gateway_event_partitions {
        let subscription = bus.subscribe(
            &gateway_events_subject(node_name, partition),
            None,
            limits.bus_subscription_messages_max,
        )?;
        let partition = Partition {
            hub: hub.clone(),
            guilds: guilds.clone(),
            counters: counters.clone(),
            streams: HashMap::new(),
            streams_max: limits.guild_owners_max,
            resync_interval: Duration::from_millis(limits.stream_resync_interval_ms),
        };
        tasks.push(tokio::spawn(partition.run(subscription)));
    }
    Ok(tasks)
}

impl Partition {
    async fn run(mut self, mut subscription: Subscription) {
        while let Some(message) = subscription.next().await {
            match NodeEvent::decode(&message.payload) {
                Ok(event) => self.apply(event.body),
                Err(error) => {
                    self.counters
                        .malformed_total
                        .fetch_add(1, Ordering::Relaxed);
                    crate::throttled!(warn, "events.malformed", %error, "malformed bus envelope dropped");
                }
            }
        }
    }

    fn apply(&mut self, body: NodeEventBody) {
        match body {
            NodeEventBody::Stream(event) => self.stream(event),
            NodeEventBody::Users {
                user_ids,
                required_intent,
                name,
                data,
            } => {
                let event = EncodedDispatch::from_json(&name, data.get());
                self.hub
                    .dispatch_to_users(&user_ids, required_intent, &event);
            }
            NodeEventBody::Joined { guild_id, user_id } => {
                let slots = self.hub.sessions_of(user_id);
                if !slots.is_empty() {
                    let guilds = self.guilds.clone();
                    tokio::spawn(async move {
                        for slot in slots {
                            let _ = guilds.subscribe(guild_id, &slot).await;
                        }
                    });
                }
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
        });
        match stream.position.check(event.epoch, event.seq) {
            StreamCheck::Next => {}
            StreamCheck::Stale => {
                self.counters.stale_total.fetch_add(1, Ordering::Relaxed);
                return;
            }
            StreamCheck::Gap { missing } => {
                self.counters.gaps_total.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .missed_total
                    .fetch_add(missing, Ordering::Relaxed);
                crate::throttled!(
                    warn,
                    "events.gap",
                    guild_id,
                    missing,
                    "guild stream gap; resynchronising"
                );
                // Nobody here hears more of this guild until it is
                // re-subscribed.
                self.hub.stop(guild_id);
                let now = Instant::now();
                let interval = self.resync_interval;
                match stream.resync_at {
                    // One is still to come: it re-subscribes everyone.
                    Some(at) if now < at => {}
                    Some(at) if now < at + interval => {
                        stream.resync_at = Some(at + interval);
                        self.resync_at(guild_id, at + interval);
                    }
                    _ => {
                        stream.resync_at = Some(now);
                        self.resync_at(guild_id, now);
                    }
                }
            }
        }
        self.counters.applied_total.fetch_add(1, Ordering::Relaxed);
        match event.body {
            StreamBody::Dispatch {
                name,
                required_intent,
                data,
                blanked,
                content_exempt,
            } => self.hub.dispatch_guild_event(&GuildEvent {
                guild_id,
                required_intent,
                full: EncodedDispatch::from_json(&name, data.get()),
                blanked: blanked.map(|b| EncodedDispatch::from_json(&name, b.get())),
                content_exempt,
            }),
            StreamBody::Subscribe {
                session_id,
                guild_create,
            } => {
                let event =
                    guild_create.map(|g| EncodedDispatch::from_json("GUILD_CREATE", g.get()));
                self.hub.subscribed(guild_id, &session_id, event.as_ref());
            }
            StreamBody::Remove { user_ids } => {
                let data = serde_json::json!({"id": guild_id.to_string()});
                let event = EncodedDispatch::new("GUILD_DELETE", &data).ok();
                self.hub.removed(guild_id, &user_ids, event.as_ref());
            }
        }
    }

    /// At `when`, has every session here that wants the guild subscribe
    /// again (each gets a fresh GUILD_CREATE through the stream).
    fn resync_at(&self, guild_id: i64, when: Instant) {
        let (hub, guilds, counters) =
            (self.hub.clone(), self.guilds.clone(), self.counters.clone());
        tokio::spawn(async move {
            tokio::time::sleep_until(when).await;
            // Whatever re-subscribed meanwhile is dropped too: everyone
            // starts again from one GUILD_CREATE.
            let slots = hub.resync(guild_id);
            counters.resyncs_total.fetch_add(1, Ordering::Relaxed);
            for slot in slots {
                let _ = guilds.subscribe(guild_id, &slot).await;
            }
        });
    }
}
