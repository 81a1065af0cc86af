//! The presence role: each user's status, fed by their sessions, fanned out
//! to their guilds. Never on a session's critical path (seed 001: sessions
//! stalled and buffered without bound behind a stalled presence service).
//!
//! A session publishes one bus message per change (op 3, READY, the session
//! ending) and moves on: the publish never waits, and if the role is slow,
//! stalled or absent the message is dropped and counted, so a presence
//! outage degrades presence only.
//!
//! Each user's statuses live on one presence node: the one the ring of the
//! presence nodes announced now places the user on. Publishers and askers
//! send to that node's own subjects (`presence.{node}.updates`,
//! `presence.{node}.query`), so with any number of presence processes every
//! user's sessions meet in one place and a question gets the whole answer.
//! When the presence nodes change, the state moves the way it was built:
//! every gateway node publishes its sessions' statuses again (paced at
//! `presence_resync_per_s`), to their users' new nodes, and each presence
//! node forgets the users it no longer holds. One subject per node keeps
//! each user's updates in order. Before any presence node is known (a
//! node's first registry view) an update has nowhere to go and is dropped
//! and counted; the view's arrival is a change, so the resync publishes it
//! again.
//!
//! The role keeps the status of every session of a user, bounded by
//! `presence_sessions_max`, and when the user's status as others see it
//! changes, tells each of the user's guilds (at most `ready_guilds_max`)
//! through the guild owners, which publish PRESENCE_UPDATE to sessions
//! holding GUILD_PRESENCES. Those casts are dropped when an owner is busy:
//! presence is the lowest criticality but typing and member-list sync.

use crate::cluster::ClusterState;
use crate::guilds::{GuildCall, GuildDirectory};
use guildhall_cluster::{Bus, BusError};
use guildhall_store::Store;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A guild owner's question: the statuses of these users (at most
/// `presence_query_users_max`).
#[derive(Debug, Serialize, Deserialize)]
pub struct PresenceQuery {
    /// Envelope version.
    pub v: u32,
    /// The users.
    pub user_ids: Vec<i64>,
}

/// The presence role's answer: those of the asked users others see as
/// anything but offline, with that status.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct PresenceStatuses {
    /// Envelope version.
    pub v: u32,
    /// (user, status), offline users left out.
    pub statuses: Vec<(i64, String)>,
}

/// Subject of presence node `node`'s updates (the users it holds).
pub fn updates_subject(node: &str) -> String {
    format!("presence.{node}.updates")
}

/// Subject of presence node `node`'s questions ([`PresenceQuery`]: a
/// loading guild owner asks for its members' statuses).
pub fn query_subject(node: &str) -> String {
    format!("presence.{node}.query")
}

/// Asks the presence role for the statuses of `user_ids`: each user of the
/// presence node that holds them, in questions of at most `users_max` ids,
/// at most `queries_max` questions in all, all at once, within `timeout`.
/// `None` when any went unanswered (role slow, absent, or its answer
/// malformed): the caller goes on without statuses.
pub async fn query(
    bus: &dyn Bus,
    cluster: &ClusterState,
    user_ids: &[i64],
    users_max: usize,
    queries_max: usize,
    timeout: std::time::Duration,
) -> Option<Vec<(i64, String)>> {
    // Grouped by the node that holds them (none known yet: nobody holds
    // a status, nothing to ask).
    let mut by_node: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for id in user_ids {
        if let Some(node) = cluster.presence_node_of(*id) {
            by_node.entry(node).or_default().push(*id);
        }
    }
    let questions = by_node
        .iter()
        .flat_map(|(node, ids)| ids.chunks(users_max.max(1)).map(move |c| (node, c)))
        .take(queries_max)
        .map(|(node, chunk)| {
            let question = PresenceQuery {
                v: guildhall_proto::bus::ENVELOPE_VERSION,
                user_ids: chunk.to_vec(),
            };
            let bytes = serde_json::to_vec(&question).unwrap_or_default();
            let subject = query_subject(node);
            async move { bus.request(&subject, bytes.into(), timeout).await }
        });
    let mut statuses = Vec::new();
    for answer in futures_util::future::join_all(questions).await {
        let answer = answer.ok()?;
        let answer: PresenceStatuses = serde_json::from_slice(&answer.payload).ok()?;
        statuses.extend(answer.statuses);
    }
    Some(statuses)
}

/// A session's presence, as it travels on the bus.
#[derive(Debug, Serialize, Deserialize)]
pub struct PresenceMessage {
    /// Envelope version.
    pub v: u32,
    /// The user.
    pub user_id: i64,
    /// The session.
    pub session_id: String,
    /// online, idle, dnd, invisible; `None`: the session ended.
    pub status: Option<String>,
}

/// Counters of the presence role and its publishers.
#[derive(Debug, Default)]
pub struct PresenceCounters {
    /// Presence messages published by this node's sessions.
    pub published_total: AtomicU64,
    /// Presence messages the bus refused (role slow or absent).
    pub dropped_total: AtomicU64,
    /// Status changes fanned out to guilds.
    pub changes_total: AtomicU64,
    /// Sessions refused at `presence_sessions_max`.
    pub refused_total: AtomicU64,
    /// Guild owners' status questions answered.
    pub queries_answered_total: AtomicU64,
    /// Status questions dropped (malformed, oversized, no inbox).
    pub queries_refused_total: AtomicU64,
    /// Sessions' statuses published again after the presence nodes
    /// changed.
    pub resynced_total: AtomicU64,
    /// Users a presence node forgot because another now holds them.
    pub handed_off_total: AtomicU64,
}

/// Publishes a session's presence to the presence node that holds its
/// user. Never waits; a refusal is counted.
pub fn publish(
    bus: &dyn Bus,
    cluster: &ClusterState,
    counters: &PresenceCounters,
    user_id: i64,
    session_id: &str,
    status: Option<&str>,
) {
    let message = PresenceMessage {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        user_id,
        session_id: session_id.to_owned(),
        status: status.map(str::to_owned),
    };
    let Ok(bytes) = serde_json::to_vec(&message) else {
        return;
    };
    let Some(node) = cluster.presence_node_of(user_id) else {
        counters.dropped_total.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let counter = match bus.publish(&updates_subject(&node), None, bytes.into()) {
        Ok(()) => &counters.published_total,
        Err(_) => &counters.dropped_total,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The status others see: that of the most recently updated session;
/// invisible and no session at all read as offline.
fn visible(sessions: &[(String, String)]) -> &str {
    match sessions.last().map(|(_, s)| s.as_str()) {
        None | Some("invisible") => "offline",
        Some(status) => status,
    }
}

/// Runs this node's presence role (`node`: its name, whose subjects it
/// serves).
pub async fn serve(
    bus: Arc<dyn Bus>,
    store: Store,
    guilds: Arc<GuildDirectory>,
    counters: Arc<PresenceCounters>,
    (cluster, node): (Arc<ClusterState>, String),
    limits: &guildhall_limits::Limits,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let capacity = limits.bus_subscription_messages_max;
    let mut updates = bus
        .subscribe(&updates_subject(&node), None, capacity)
        .await?;
    let mut queries = bus.subscribe(&query_subject(&node), None, capacity).await?;
    let mut changes = cluster.presence_changes.subscribe();
    let sessions_max = limits.presence_sessions_max;
    let guilds_max = limits.ready_guilds_max as i64;
    let query_users_max = limits.presence_query_users_max;
    Ok(tokio::spawn(async move {
        // Sessions of each user in update order (a user has few sessions).
        let mut users: HashMap<i64, Vec<(String, String)>> = HashMap::new();
        let mut sessions = 0usize;
        loop {
            // Questions are answered from the same state, in the same task,
            // between updates (each answer is one map probe per asked id).
            let message = tokio::select! {
                update = updates.next() => match update {
                    Some(message) => message,
                    None => break,
                },
                question = queries.next() => {
                    let Some(question) = question else { break };
                    answer(bus.as_ref(), &users, &question, query_users_max, &counters);
                    continue;
                }
                changed = changes.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    // Users another node holds now: their gateways publish
                    // them there again; kept here they would answer stale.
                    let before = users.len();
                    users.retain(|user_id, entries| {
                        let kept = cluster
                            .presence_node_of(*user_id)
                            .is_none_or(|owner| owner == node);
                        if !kept {
                            sessions -= entries.len();
                        }
                        kept
                    });
                    counters
                        .handed_off_total
                        .fetch_add((before - users.len()) as u64, Ordering::Relaxed);
                    continue;
                }
            };
            let Ok(update) = serde_json::from_slice::<PresenceMessage>(&message.payload) else {
                crate::throttled!(
                    warn,
                    "presence.malformed",
                    "malformed presence message dropped"
                );
                continue;
            };
            let entry = users.entry(update.user_id).or_default();
            let before = visible(entry).to_owned();
            let known = entry.iter().position(|(s, _)| *s == update.session_id);
            if let Some(index) = known {
                entry.remove(index);
                sessions -= 1;
            }
            if let Some(status) = update.status {
                if sessions >= sessions_max {
                    counters.refused_total.fetch_add(1, Ordering::Relaxed);
                } else {
                    entry.push((update.session_id, status));
                    sessions += 1;
                }
            }
            let after = visible(entry).to_owned();
            if entry.is_empty() {
                users.remove(&update.user_id);
            }
            if after == before {
                continue;
            }
            counters.changes_total.fetch_add(1, Ordering::Relaxed);
            let guild_ids = store
                .guild_ids_of(update.user_id, guilds_max)
                .await
                .unwrap_or_default();
            for guild_id in guild_ids {
                let call = GuildCall::Presence {
                    user_id: update.user_id,
                    status: after.clone(),
                };
                let _ = guilds.cast(guild_id, call).await;
            }
        }
    }))
}

/// On every gateway node: when the presence nodes change, publishes the
/// status of every session here again, to its user's presence node now,
/// at most `presence_resync_per_s` a second (a new presence node is not
/// flooded, and a bus under load is not either). A change during a resync
/// starts it over, since every status then has a newer home.
pub fn start_resync(
    bus: Arc<dyn Bus>,
    hub: Arc<crate::hub::Hub>,
    cluster: Arc<ClusterState>,
    counters: Arc<PresenceCounters>,
    limits: &guildhall_limits::Limits,
) -> tokio::task::JoinHandle<()> {
    // Batches of at most this many, spaced to the rate.
    const BATCH_MAX: u64 = 100;
    let per_s = limits.presence_resync_per_s.max(1);
    let batch = BATCH_MAX.min(per_s);
    let pause = std::time::Duration::from_micros(batch * 1_000_000 / per_s);
    // Subscribed before the node serves: its first view (and every later
    // change) is a change here, so what sessions published before it is
    // published again.
    let mut changes = cluster.presence_changes.subscribe();
    tokio::spawn(async move {
        'changes: while changes.changed().await.is_ok() {
            let slots = hub.slots();
            for chunk in slots.chunks(batch as usize) {
                for slot in chunk {
                    if let Some(status) = slot.presence() {
                        publish(
                            bus.as_ref(),
                            &cluster,
                            &counters,
                            slot.user_id,
                            &slot.id,
                            Some(&status),
                        );
                        counters.resynced_total.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(pause).await;
                if changes.has_changed().unwrap_or(false) {
                    continue 'changes;
                }
            }
        }
    })
}

/// Answers one [`PresenceQuery`]: the asked users others see online, idle
/// or dnd. A question that does not decode, asks for more than
/// `users_max` users or has no inbox is dropped and counted (its asker
/// times out and goes on without statuses).
fn answer(
    bus: &dyn Bus,
    users: &HashMap<i64, Vec<(String, String)>>,
    question: &guildhall_cluster::bus::Message,
    users_max: usize,
    counters: &PresenceCounters,
) {
    let decoded = serde_json::from_slice::<PresenceQuery>(&question.payload)
        .ok()
        .filter(|q| q.user_ids.len() <= users_max);
    let (Some(reply), Some(query)) = (question.reply.as_deref(), decoded) else {
        counters
            .queries_refused_total
            .fetch_add(1, Ordering::Relaxed);
        crate::throttled!(
            warn,
            "presence.query_refused",
            "malformed or oversized presence query dropped"
        );
        return;
    };
    let statuses = query
        .user_ids
        .iter()
        .filter_map(|id| {
            let status = visible(users.get(id)?);
            (status != "offline").then(|| (*id, status.to_owned()))
        })
        .collect();
    let answer = PresenceStatuses {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        statuses,
    };
    if let Ok(bytes) = serde_json::to_vec(&answer) {
        // Best effort: an asker that gave up has no inbox any more.
        let _ = bus.publish(reply, None, bytes.into());
        counters
            .queries_answered_total
            .fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::visible;

    #[test]
    fn the_latest_session_decides_and_invisible_reads_offline() {
        let s = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        assert_eq!(visible(&[]), "offline");
        assert_eq!(visible(&s(&[("a", "online")])), "online");
        assert_eq!(visible(&s(&[("a", "online"), ("b", "idle")])), "idle");
        assert_eq!(visible(&s(&[("a", "invisible")])), "offline");
    }
}
