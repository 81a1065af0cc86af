//! The users role's envelopes on the bus (`users.requests`, queue group
//! `users`): token lookups and batch loads of users. What travels is a
//! [`UserRecord`], never a store row: the password hash has no field here
//! at all, so no serializer can leak it.

use crate::bus::ENVELOPE_VERSION;

/// Subject of the users role's requests (queue group [`USERS_QUEUE_GROUP`]).
pub const USERS_SUBJECT: &str = "users.requests";

/// Queue group of the users role: one member answers each request.
pub const USERS_QUEUE_GROUP: &str = "users";

/// Subject every node listens on, without a queue group, for users whose
/// cached rows and tokens must be forgotten at once (a token reset, a
/// rename): any node may hold them, whatever its roles.
pub const USERS_INVALIDATE_SUBJECT: &str = "users.invalidate";

/// One user whose cached tokens and rows every node forgets.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UserInvalidation {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// The user.
    pub user_id: i64,
}

/// What the users role is asked.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UsersCall {
    /// The users among `ids` (at most `users_batch_ids_max`).
    Load {
        /// The users.
        ids: Vec<i64>,
    },
    /// The user a token digest (SHA-256, 32 bytes) belongs to: none or one.
    Token {
        /// The digest; the token itself never travels.
        digest: Vec<u8>,
    },
}

/// A request to the users role.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsersRequest {
    /// Envelope version ([`ENVELOPE_VERSION`]).
    pub v: u32,
    /// What is asked.
    pub call: UsersCall,
}

impl UsersRequest {
    /// The call at the current envelope version.
    pub fn new(call: UsersCall) -> Self {
        Self {
            v: ENVELOPE_VERSION,
            call,
        }
    }
}

/// A user as the users role answers it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UserRecord {
    /// Id.
    pub id: i64,
    /// Unique name.
    pub username: String,
    /// A bot user.
    pub bot: bool,
    /// Display name.
    pub global_name: Option<String>,
    /// Created at, Unix ms.
    pub created_ms: i64,
}

/// The users role's answer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UsersReply {
    /// Envelope version ([`ENVELOPE_VERSION`]).
    pub v: u32,
    /// The users found.
    pub result: Result<Vec<UserRecord>, UsersError>,
}

/// Why the users role did not answer with users.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
pub enum UsersError {
    /// Shed, refused or not answered in time: retry later.
    #[error("users overloaded")]
    Overloaded,
    /// The store failed.
    #[error("store")]
    Store,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The shapes on the wire, so a node of the next version still reads them.
    #[test]
    fn envelopes_keep_their_wire_shape() {
        let request = UsersRequest::new(UsersCall::Load { ids: vec![1, 2] });
        assert_eq!(
            serde_json::to_string(&request).unwrap(),
            r#"{"v":1,"call":{"Load":{"ids":[1,2]}}}"#
        );
        let reply = UsersReply {
            v: ENVELOPE_VERSION,
            result: Ok(vec![UserRecord {
                id: 7,
                username: "u".into(),
                bot: true,
                global_name: None,
                created_ms: 5,
            }]),
        };
        let text = serde_json::to_string(&reply).unwrap();
        assert_eq!(
            text,
            r#"{"v":1,"result":{"Ok":[{"id":7,"username":"u","bot":true,"global_name":null,"created_ms":5}]}}"#
        );
        assert_eq!(serde_json::from_str::<UsersReply>(&text).unwrap(), reply);
        let refused = UsersReply {
            v: ENVELOPE_VERSION,
            result: Err(UsersError::Overloaded),
        };
        assert_eq!(
            serde_json::to_string(&refused).unwrap(),
            r#"{"v":1,"result":{"Err":"Overloaded"}}"#
        );
    }
}
