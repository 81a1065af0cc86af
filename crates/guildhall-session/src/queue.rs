//! What waits in a session's outbound queue.
//!
//! The queue itself is the socket's bounded queue (in messages and bytes),
//! drained by the socket's writer; the slow-consumer
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
    /// A RESUME's missed dispatches, in order: one entry, so the replay
    /// never competes with live dispatches for the queue's messages.
    Replay(Vec<(EncodedDispatch, u64)>),
}

impl Outbound {
    /// Bytes charged against the queue. A replay is not charged: the
    /// replay buffer already bounds it (it shares that buffer's frames),
    /// and charging it could make the RESUMED behind it overflow the queue.
    pub fn len_bytes(&self) -> usize {
        match self {
            Outbound::Dispatch(event, _) => event.len_bytes(),
            Outbound::Text(text) => text.len(),
            Outbound::Replay(_) => 0,
        }
    }

    /// The frames' texts, in order.
    pub fn into_frames(self) -> impl Iterator<Item = String> {
        let (one, many) = match self {
            Outbound::Dispatch(event, seq) => (Some(event.frame(seq)), Vec::new()),
            Outbound::Text(text) => (Some(text), Vec::new()),
            Outbound::Replay(events) => (None, events),
        };
        one.into_iter()
            .chain(many.into_iter().map(|(event, seq)| event.frame(seq)))
    }
}
