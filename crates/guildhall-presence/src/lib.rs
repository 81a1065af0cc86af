//! The presence role (a crate of its own: it depends on `guildhall-common`
//! and on no other role): each user's status, fed by their sessions, fanned out
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

use guildhall_common::cluster::ClusterState;
use guildhall_common::guilds::GuildsClient;
use guildhall_proto::guilds::GuildCall;
// The clients other roles call (publish, query) and the counters they
// share with the role live below the roles; the envelopes in proto.
use guildhall_cluster::{Bus, BusError};
pub use guildhall_common::presence::{PresenceCounters, publish, query};
use guildhall_proto::presence::{
    PresenceMessage, PresenceQuery, PresenceStatuses, query_subject, updates_subject,
};
use guildhall_store::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
    guilds: Arc<GuildsClient>,
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
                guildhall_common::throttled!(
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
            let closed = update.status.is_none() && known.is_some();
            if let Some(status) = update.status {
                if sessions >= sessions_max {
                    counters.refused_total.fetch_add(1, Ordering::Relaxed);
                } else {
                    entry.push((update.session_id, status));
                    sessions += 1;
                }
            }
            let after = visible(entry).to_owned();
            // The last session closed (not one set invisible): owners
            // remove temporary members then, whatever the status did.
            let disconnected = closed && entry.is_empty();
            if entry.is_empty() {
                users.remove(&update.user_id);
            }
            if after == before && !disconnected {
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
                    disconnected,
                };
                // Best effort: presence is the lowest criticality, and the
                // next change or a load's question mends a lost one.
                let _ = guilds.cast(guild_id, call);
            }
        }
    }))
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
        guildhall_common::throttled!(
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
