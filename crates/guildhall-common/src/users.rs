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
