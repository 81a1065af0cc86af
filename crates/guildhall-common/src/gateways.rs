//! "Send to these gateways": how any role reaches sessions without the
//! gateway's code. Guild events travel in the owner's numbered streams;
//! what has no guild stream (direct messages, user events, joins, an
//! interaction's events for the invoking session) is published here to
//! the gateway nodes' partitioned subjects, and each gateway node hands it
//! to its sessions.
//!
//! The session id format lives here too: the gateway mints ids that name
//! their holder (a ring tag), and other roles read the tag to reach one
//! session on its node.

use crate::cluster::ClusterState;
use guildhall_cluster::Bus;
use guildhall_proto::bus::{NodeEvent, NodeEventBody, gateway_events_subject};
use guildhall_ring::hash::member_id_of;

/// Hex digits of a session id's random part.
const SESSION_RANDOM_HEX: usize = 32;
/// Hex digits of a session id's holder tag.
const SESSION_TAG_HEX: usize = 16;

/// A new session id for a session held by `node`.
pub fn new_session_id(node: &str) -> Result<String, getrandom::Error> {
    Ok(format!(
        "{}{:016x}",
        crate::auth::random_hex()?,
        member_id_of(node).0
    ))
}

/// The holder tag of a session id of ours; `None` for anything else (a
/// forged or foreign id).
pub fn holder_tag(session_id: &str) -> Option<u64> {
    let lowercase_hex = session_id
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if session_id.len() != SESSION_RANDOM_HEX + SESSION_TAG_HEX || !lowercase_hex {
        return None;
    }
    u64::from_str_radix(&session_id[SESSION_RANDOM_HEX..], 16).ok()
}

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

/// The gateways as one role sees them: the bus, the cluster view, and
/// the partition count every gateway node subscribes with.
pub struct Gateways<'a> {
    /// The bus.
    pub bus: &'a dyn Bus,
    /// This node's view (which gateway nodes are live).
    pub cluster: &'a ClusterState,
    /// `gateway_event_partitions`.
    pub partitions: usize,
}

impl Gateways<'_> {
    /// Sends dispatch `name` to every session of `user_ids` holding
    /// `required_intent` (0: none), on whatever gateway node: direct
    /// messages and user events, which have no guild stream. What it sends
    /// is already durable; a refused publish is counted by the bus. With
    /// `guild_id` (an interaction, an ephemeral message) sharded sessions
    /// hear it on that guild's shard; without, on shard 0 only.
    pub fn to_users_in(
        &self,
        guild_id: Option<i64>,
        user_ids: Vec<i64>,
        required_intent: u64,
        name: &str,
        data: &impl serde::Serialize,
    ) {
        let Ok(data) = serde_json::value::to_raw_value(data) else {
            return;
        };
        let key = user_ids.first().copied().unwrap_or(0);
        let body = NodeEventBody::Users {
            user_ids,
            guild_id,
            required_intent,
            name: name.to_owned(),
            data,
        };
        self.to_all(key, body);
    }

    /// A dispatch for one session of `user_id` (the session a client named,
    /// as `POST /interactions`' `session_id`), on the gateway node its id
    /// names. False when the id names no live gateway node (malformed,
    /// forged, its node gone): the caller then tells every session of the
    /// user. A session of another user hears nothing.
    pub fn to_session(
        &self,
        user_id: i64,
        session_id: &str,
        name: &str,
        data: &impl serde::Serialize,
    ) -> bool {
        let Some(gateway) = holder_tag(session_id).and_then(|tag| self.cluster.gateway_by_tag(tag))
        else {
            return false;
        };
        let Ok(data) = serde_json::value::to_raw_value(data) else {
            return false;
        };
        let body = NodeEventBody::Session {
            session_id: session_id.to_owned(),
            user_id: Some(user_id),
            name: name.to_owned(),
            data,
        };
        // On the user's partition, in order with their other events.
        to_gateways(self.bus, &[gateway], self.partitions, user_id, body) == 0
    }

    /// Publishes `body` to every gateway node (refusals are counted by the
    /// bus).
    pub fn to_all(&self, key: i64, body: NodeEventBody) {
        to_gateways(
            self.bus,
            &self.cluster.gateways(),
            self.partitions,
            key,
            body,
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn session_ids_name_their_holder_and_forged_ones_nothing() {
        let id = new_session_id("gw-a").unwrap();
        assert_eq!(id.len(), 48);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
        );
        assert_eq!(holder_tag(&id), Some(member_id_of("gw-a").0));
        for forged in [
            "",
            "abc",
            &id[..47],
            &id.to_uppercase(),
            &format!("{}g", &id[..47]),
        ] {
            assert_eq!(holder_tag(forged), None, "{forged}");
        }
    }
}
