//! A session's outbound queue, bounded in messages and bytes.
//!
//! Seed 001: sessions buffered events for stalled clients without bound until
//! the nodes ran out of memory. Here a full queue means the client is a slow
//! consumer: the push fails, the session is closed with a reconnectable code,
//! and the client resumes from the replay buffer (which is bounded too).

use guildhall_proto::gateway::EncodedDispatch;
use std::collections::VecDeque;

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

/// The queue is full: the client is not reading fast enough.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowConsumer;

/// Bounded FIFO of outbound frames.
#[derive(Clone, Debug)]
pub struct OutboundQueue {
    frames: VecDeque<Outbound>,
    bytes: usize,
    messages_max: usize,
    bytes_max: usize,
}

impl OutboundQueue {
    /// A queue of at most `messages_max` frames and `bytes_max` bytes.
    pub fn new(messages_max: usize, bytes_max: usize) -> Self {
        Self {
            frames: VecDeque::new(),
            bytes: 0,
            messages_max: messages_max.max(1),
            bytes_max,
        }
    }

    /// Adds a frame, or reports a slow consumer (the frame is not queued).
    ///
    /// ```
    /// use guildhall_session::queue::{Outbound, OutboundQueue, SlowConsumer};
    /// let mut queue = OutboundQueue::new(1, 1 << 20);
    /// assert!(queue.push(Outbound::Text("a".into())).is_ok());
    /// assert_eq!(queue.push(Outbound::Text("b".into())), Err(SlowConsumer));
    /// ```
    pub fn push(&mut self, frame: Outbound) -> Result<(), SlowConsumer> {
        let bytes = frame.len_bytes();
        if self.frames.len() >= self.messages_max || self.bytes + bytes > self.bytes_max {
            return Err(SlowConsumer);
        }
        self.bytes += bytes;
        self.frames.push_back(frame);
        Ok(())
    }

    /// Takes the oldest frame.
    pub fn pop(&mut self) -> Option<Outbound> {
        let frame = self.frames.pop_front()?;
        self.bytes -= frame.len_bytes();
        Some(frame)
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}
