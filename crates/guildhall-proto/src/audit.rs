//! The audit log's contract: the action types Discord documents, the
//! entry as the owner records it, and the changes between an object's old
//! and new wire form. Pure: the owner builds entries from what a change
//! did; the store keeps them; the api pages them.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Server settings were updated.
pub const GUILD_UPDATE: u8 = 1;
/// Channel was created.
pub const CHANNEL_CREATE: u8 = 10;
/// Channel settings were updated.
pub const CHANNEL_UPDATE: u8 = 11;
/// Channel was deleted.
pub const CHANNEL_DELETE: u8 = 12;
/// Permission overwrite was added to a channel.
pub const CHANNEL_OVERWRITE_CREATE: u8 = 13;
/// Permission overwrite was updated for a channel.
pub const CHANNEL_OVERWRITE_UPDATE: u8 = 14;
/// Permission overwrite was deleted from a channel.
pub const CHANNEL_OVERWRITE_DELETE: u8 = 15;
/// Member was removed from server.
pub const MEMBER_KICK: u8 = 20;
/// Member was banned from server.
pub const MEMBER_BAN_ADD: u8 = 22;
/// Server ban was lifted for a member.
pub const MEMBER_BAN_REMOVE: u8 = 23;
/// Member was updated in server (nickname, timeout).
pub const MEMBER_UPDATE: u8 = 24;
/// Member was added or removed from a role.
pub const MEMBER_ROLE_UPDATE: u8 = 25;
/// Bot user was added to server.
pub const BOT_ADD: u8 = 28;
/// Role was created.
pub const ROLE_CREATE: u8 = 30;
/// Role was edited.
pub const ROLE_UPDATE: u8 = 31;
/// Role was deleted.
pub const ROLE_DELETE: u8 = 32;
/// An invite was created.
pub const INVITE_CREATE: u8 = 40;
/// An invite was deleted.
pub const INVITE_DELETE: u8 = 42;
/// A webhook was created.
pub const WEBHOOK_CREATE: u8 = 50;
/// A webhook was changed.
pub const WEBHOOK_UPDATE: u8 = 51;
/// A webhook was deleted.
pub const WEBHOOK_DELETE: u8 = 52;
/// A moderator deleted another's message (target: its author).
pub const MESSAGE_DELETE: u8 = 72;
/// Messages were bulk-deleted (target: the channel).
pub const MESSAGE_BULK_DELETE: u8 = 73;
/// A message was pinned (target: its author).
pub const MESSAGE_PIN: u8 = 74;
/// A message was unpinned (target: its author).
pub const MESSAGE_UNPIN: u8 = 75;
/// A thread was created (target: the thread).
pub const THREAD_CREATE: u8 = 110;
/// A thread was edited (target: the thread).
pub const THREAD_UPDATE: u8 = 111;
/// A thread was deleted (target: the thread).
pub const THREAD_DELETE: u8 = 112;

/// One entry as the guild's owner records it (the wire entry has the
/// same fields; `id` is a snowflake minted by the owner).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The entry's id (its time is in it).
    pub id: i64,
    /// The guild.
    pub guild_id: i64,
    /// Who acted.
    pub user_id: i64,
    /// What was acted on (a channel, role or user id), if anything.
    pub target_id: Option<i64>,
    /// One of the action types above.
    pub action_type: u8,
    /// `[{key, old_value?, new_value?}]`, empty when the action has none.
    pub changes: Vec<Value>,
    /// The documented optional info (`channel_id`, `count`, `id`, `type`,
    /// `role_name`), if any.
    pub options: Option<Value>,
    /// The moderator's `X-Audit-Log-Reason`.
    pub reason: Option<String>,
}

impl AuditEntry {
    /// The wire entry (ids as strings, absent fields left out).
    pub fn to_wire(&self) -> Value {
        let mut entry = json!({
            "id": self.id.to_string(),
            "user_id": self.user_id.to_string(),
            "target_id": self.target_id.map(|t| t.to_string()),
            "action_type": self.action_type,
        });
        if !self.changes.is_empty() {
            entry["changes"] = Value::Array(self.changes.clone());
        }
        if let Some(options) = &self.options {
            entry["options"] = options.clone();
        }
        if let Some(reason) = &self.reason {
            entry["reason"] = Value::String(reason.clone());
        }
        entry
    }
}

/// The changes between `old` and `new` (wire objects; `Value::Null` for
/// one that did not exist) for `keys`: one `{key, old_value, new_value}`
/// per key whose value differs, a null side left out as Discord does.
pub fn changes(old: &Value, new: &Value, keys: &[&str]) -> Vec<Value> {
    keys.iter()
        .filter_map(|key| {
            let before = old.get(*key).filter(|v| !v.is_null());
            let after = new.get(*key).filter(|v| !v.is_null());
            if before == after {
                return None;
            }
            let mut change = json!({ "key": key });
            if let Some(before) = before {
                change["old_value"] = before.clone();
            }
            if let Some(after) = after {
                change["new_value"] = after.clone();
            }
            Some(change)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_changed_keys_are_listed_and_nulls_are_left_out() {
        let old = json!({"name": "a", "topic": null, "position": 1});
        let new = json!({"name": "b", "topic": "t", "position": 1});
        let got = changes(&old, &new, &["name", "topic", "position"]);
        assert_eq!(
            got,
            vec![
                json!({"key": "name", "old_value": "a", "new_value": "b"}),
                json!({"key": "topic", "new_value": "t"}),
            ]
        );
        let created = changes(&Value::Null, &json!({"name": "c"}), &["name"]);
        assert_eq!(created, vec![json!({"key": "name", "new_value": "c"})]);
        let entry = AuditEntry {
            id: 5,
            guild_id: 1,
            user_id: 2,
            target_id: Some(3),
            action_type: MEMBER_KICK,
            changes: vec![],
            options: None,
            reason: Some("r".into()),
        };
        let wire = entry.to_wire();
        assert_eq!(wire["target_id"], "3");
        assert!(wire.get("changes").is_none() && wire.get("options").is_none());
        assert_eq!(wire["reason"], "r");
    }
}
