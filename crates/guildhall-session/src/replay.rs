//! The replay buffer: dispatches a session was sent, kept so a RESUME can
//! replay exactly the ones the client missed, in order, with their original
//! sequence numbers. Bounded in events and bytes; the oldest go first, and a
//! RESUME reaching past them gets INVALID_SESSION instead of a silent gap.

use guildhall_proto::gateway::EncodedDispatch;
use std::collections::VecDeque;

/// Why a RESUME cannot be served from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// The client's sequence is older than the oldest kept dispatch:
    /// INVALID_SESSION, re-identify.
    Gap,
    /// The client claims a sequence the session never sent: close 4007.
    FromTheFuture,
}

/// Sent dispatches, oldest first.
#[derive(Clone, Debug)]
pub struct ReplayBuffer {
    events: VecDeque<(u64, EncodedDispatch)>,
    bytes: usize,
    events_max: usize,
    bytes_max: usize,
    /// Sequence of the newest dispatch ever sent (0: none).
    last_seq: u64,
}

impl ReplayBuffer {
    /// A buffer of at most `events_max` dispatches and `bytes_max` bytes.
    pub fn new(events_max: usize, bytes_max: usize) -> Self {
        Self {
            events: VecDeque::new(),
            bytes: 0,
            events_max: events_max.max(1),
            bytes_max,
            last_seq: 0,
        }
    }

    /// An empty buffer continuing a session whose last dispatch was
    /// `last_seq` (a session moved from another node: its numbering goes
    /// on, and a RESUME from `last_seq` replays nothing).
    pub fn after(events_max: usize, bytes_max: usize, last_seq: u64) -> Self {
        Self {
            last_seq,
            ..Self::new(events_max, bytes_max)
        }
    }

    /// Records dispatch `seq` (sequences must increase by one).
    pub fn push(&mut self, seq: u64, event: EncodedDispatch) {
        debug_assert!(
            seq == self.last_seq + 1,
            "sequence {seq} after {}",
            self.last_seq
        );
        self.last_seq = seq;
        self.bytes += event.len_bytes();
        self.events.push_back((seq, event));
        while self.events.len() > self.events_max
            || (self.bytes > self.bytes_max && self.events.len() > 1)
        {
            if let Some((_, old)) = self.events.pop_front() {
                self.bytes -= old.len_bytes();
            }
        }
    }

    /// The dispatches after `client_seq` (the client's last received).
    ///
    /// ```
    /// use guildhall_proto::gateway::EncodedDispatch;
    /// use guildhall_session::replay::{ReplayBuffer, ReplayError};
    /// let mut buffer = ReplayBuffer::new(2, 1 << 20);
    /// for seq in 1..=3 {
    ///     buffer.push(seq, EncodedDispatch::from_json("X", "{}"));
    /// }
    /// let seqs: Vec<u64> = buffer.since(Some(2)).unwrap().map(|(s, _)| s).collect();
    /// assert_eq!(seqs, [3]);
    /// assert_eq!(buffer.since(Some(0)).err(), Some(ReplayError::Gap)); // 1 was dropped
    /// assert_eq!(buffer.since(Some(9)).err(), Some(ReplayError::FromTheFuture));
    /// ```
    pub fn since(
        &self,
        client_seq: Option<u64>,
    ) -> Result<impl Iterator<Item = (u64, &EncodedDispatch)> + '_, ReplayError> {
        let client_seq = client_seq.unwrap_or(0);
        if client_seq > self.last_seq {
            return Err(ReplayError::FromTheFuture);
        }
        let oldest = self.events.front().map_or(self.last_seq + 1, |(s, _)| *s);
        if client_seq + 1 < oldest {
            return Err(ReplayError::Gap);
        }
        Ok(self
            .events
            .iter()
            .filter(move |(s, _)| *s > client_seq)
            .map(|(s, e)| (*s, e)))
    }

    /// The bound in events.
    pub fn events_max(&self) -> usize {
        self.events_max
    }

    /// The newest sequence sent.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever was pushed and whatever the client saw, a replay is
        /// either exactly the missed suffix in order, or an error.
        #[test]
        fn replay_is_exactly_the_missed_suffix(n in 0u64..300, seen in 0u64..320, cap in 1usize..64) {
            let mut buffer = ReplayBuffer::new(cap, 1 << 30);
            for seq in 1..=n {
                buffer.push(seq, EncodedDispatch::from_json("X", &seq.to_string()));
            }
            match buffer.since(Some(seen)) {
                Ok(it) => {
                    let got: Vec<u64> = it.map(|(s, _)| s).collect();
                    let want: Vec<u64> = (seen + 1..=n).collect();
                    prop_assert_eq!(got, want);
                }
                Err(ReplayError::FromTheFuture) => prop_assert!(seen > n),
                Err(ReplayError::Gap) => prop_assert!(seen <= n && n - seen > cap as u64),
            }
        }
    }

    #[test]
    fn bytes_bound_drops_the_oldest() {
        let event = EncodedDispatch::from_json("X", &"1".repeat(100));
        let mut buffer = ReplayBuffer::new(1000, event.len_bytes() * 3);
        for seq in 1..=10 {
            buffer.push(seq, event.clone());
        }
        assert!(buffer.bytes() <= event.len_bytes() * 3);
        assert_eq!(buffer.since(Some(7)).unwrap().count(), 3);
    }
}
