//! The presence role's clients, which sessions and guild owners call
//! without the role's code: [`publish`] (a session's status, never
//! waiting: seed 001 put presence off the critical path) and [`query`] (a
//! loading owner's question), both to the presence node that holds the
//! user; and the counters the role and its publishers share.

use crate::cluster::ClusterState;
use guildhall_cluster::Bus;
use guildhall_proto::presence::{
    PresenceMessage, PresenceQuery, PresenceStatuses, query_subject, updates_subject,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

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
