//! The users role's client: what any role calls to load users, wherever
//! the users role runs.

use guildhall_proto::users::{USERS_SUBJECT, UsersCall, UsersError, UsersReply, UsersRequest};
use guildhall_store::UserRow;
use std::time::Duration;

/// Asks the users role, wherever it runs, and waits at most `timeout`.
pub async fn ask(
    bus: &dyn guildhall_cluster::Bus,
    call: UsersCall,
    timeout: Duration,
) -> Result<Vec<UserRow>, UsersError> {
    let bytes = serde_json::to_vec(&UsersRequest::new(call)).map_err(|_| UsersError::Overloaded)?;
    let message = bus
        .request(USERS_SUBJECT, bytes.into(), timeout)
        .await
        .map_err(|_| UsersError::Overloaded)?;
    match serde_json::from_slice::<UsersReply>(&message.payload) {
        Ok(reply) if reply.v == guildhall_proto::bus::ENVELOPE_VERSION => reply
            .result
            .map(|records| records.into_iter().map(UserRow::from).collect()),
        _ => Err(UsersError::Overloaded),
    }
}

/// A token lookup's answer: the user, `None` for a token nobody holds, or
/// the role's refusal (overloaded, store down).
pub type TokenAnswer = Result<Option<UserRow>, UsersError>;

/// What a front door (a session's IDENTIFY or RESUME, a REST call) asks of
/// the users role about tokens. The users role implements it with its
/// cache and single-flight in front of the store; the gateway and the api
/// hold it as a trait object, so neither depends on the users role's
/// crate and the node's wiring decides which implementation they get.
pub trait TokenLookups: Send + Sync {
    /// What this node's caches know of a token digest without asking the
    /// role: `Some(Some(user))`, `Some(None)` (known invalid) or `None`
    /// (unknown: [`TokenLookups::by_token`] would ask).
    fn cached(&self, digest: &[u8; 32]) -> Option<Option<UserRow>>;

    /// The user a token digest (SHA-256 of the token) belongs to.
    fn by_token(&self, digest: [u8; 32]) -> futures_util::future::BoxFuture<'_, TokenAnswer>;

    /// Forgets every cached token and row of `user_id`, here and on every
    /// node (their tokens were revoked, or the user changed).
    fn invalidate_user(&self, user_id: i64);
}
