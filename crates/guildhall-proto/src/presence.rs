//! The presence role's bus envelopes and subjects: a session's status
//! ([`PresenceMessage`] on [`updates_subject`]) and a loading guild
//! owner's question ([`PresenceQuery`] on [`query_subject`]) with its
//! answer. Each user's statuses live on one presence node (the ring of the
//! presence nodes places the user), so both subjects name the node.

use serde::{Deserialize, Serialize};

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
