//! What waits in a session's outbound queue.
//!
//! The queue itself is the socket task's bounded channel; the slow-consumer
//! policy (full in messages or bytes → close with a reconnectable code, the
//! client resumes from the bounded replay buffer; seed 001) is applied where
//! frames are queued, in the node's hub.

use guildhall_proto::gateway::EncodedDispatch;

/// One frame waiting for the socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outbound {
    /// A dispatch: shared head, this session's sequence.
    Dispatch(EncodedDispatch, u64),
    /// Any other frame (HELLO, HEARTBEAT_ACK, INVALID_SESSION, ...).
    Text(String),
}

impl Outbound {
    /// Bytes charged against the queue.
    pub fn len_bytes(&self) -> usize {
        match self {
            Outbound::Dispatch(event, _) => event.len_bytes(),
            Outbound::Text(text) => text.len(),
        }
    }

    /// The frame's text.
    pub fn into_text(self) -> String {
        match self {
            Outbound::Dispatch(event, seq) => event.frame(seq),
            Outbound::Text(text) => text,
        }
    }
}
