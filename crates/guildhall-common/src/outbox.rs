//! Guild events held for redelivery after their owner did not confirm the
//! fanout.
//!
//! A message is committed before its 200, then handed to the guild's owner
//! to fan out. The owner answers once it has published the dispatch to the
//! gateway nodes' streams (on the same bus connection, so the streams'
//! messages are on their way before the answer). When no answer comes (the
//! owner's process died or paused between the commit and the fanout, its
//! mailbox was full, its lease ended and the ring has not moved the guild
//! yet), the API node holds the event here and offers it again, to
//! whichever node owns the guild by then, until one confirms or the event
//! is too old. Without this, a `kill -9` of an owner under load left
//! messages answered 200 in history but never dispatched to anyone.
//!
//! Events of one guild leave in the order they were held, and a guild with
//! events held takes new ones behind them, so a MESSAGE_UPDATE never
//! overtakes its MESSAGE_CREATE. An event takes its place before its first
//! attempt ([`Outbox::reserve`]), so one published while it is in flight
//! queues behind it even if that attempt fails. (This order is one api
//! node's: events of one guild published through two api nodes are
//! ordered by the owner as they arrive, so a held event of one node can
//! still be overtaken by a later one of the other.) Each event carries a publish id: an owner
//! that fanned an event out but whose answer was lost confirms the retry
//! without a second fanout (it remembers each id for
//! `fanout_outbox_event_age_ms_max`, the age this outbox drops an event at,
//! so however many other api nodes' publishes came between; at most
//! `guild_publish_ids_remembered_max` per guild). A new owner after a crash does
//! not know the dead one's ids, so an event whose fanout happened but whose
//! confirmation died with the process is dispatched twice: at least once,
//! never lost.
//!
//! This is the pure part: time is an argument, no I/O. The driver, which
//! calls owners and sleeps between attempts, is `GuildDirectory`'s.

use std::collections::{HashMap, VecDeque};

/// One held event.
#[derive(Debug)]
pub struct Held<E> {
    /// The id the owner deduplicates retries by.
    pub publish_id: u64,
    /// The event.
    pub event: E,
    bytes: usize,
    held_at_ms: u64,
}

#[derive(Debug)]
struct Pending<E> {
    events: VecDeque<Held<E>>,
    /// Failed attempts at the head event in a row (backoff exponent).
    attempts: u32,
    next_try_ms: u64,
    /// A driver task is delivering this guild's events.
    busy: bool,
}

/// Where [`Outbox::reserve`] put an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reserved {
    /// First of its guild: its caller attempts it now.
    Head,
    /// Behind events of its guild held already: the driver delivers it.
    Behind,
}

/// Held events by guild, bounded in bytes and age.
#[derive(Debug)]
pub struct Outbox<E> {
    guilds: HashMap<i64, Pending<E>>,
    bytes: usize,
    bytes_max: usize,
    age_ms_max: u64,
}

impl<E> Outbox<E> {
    /// An empty outbox holding at most `bytes_max` bytes of events, each
    /// for at most `age_ms_max`.
    pub fn new(bytes_max: usize, age_ms_max: u64) -> Self {
        Self {
            guilds: HashMap::new(),
            bytes: 0,
            bytes_max,
            age_ms_max,
        }
    }

    /// Whether events of `guild_id` are held (a new one must queue behind
    /// them to keep the guild's order).
    pub fn holds(&self, guild_id: i64) -> bool {
        self.guilds.contains_key(&guild_id)
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Events held.
    pub fn events(&self) -> usize {
        self.guilds.values().map(|p| p.events.len()).sum()
    }

    /// Holds `event` (`bytes` long) behind `guild_id`'s others, due at
    /// once if it is the guild's first. `Err(event)` when it would pass
    /// `bytes_max`: nothing is held.
    pub fn hold(
        &mut self,
        guild_id: i64,
        publish_id: u64,
        event: E,
        bytes: usize,
        now_ms: u64,
    ) -> Result<(), E> {
        if self.bytes.saturating_add(bytes) > self.bytes_max {
            return Err(event);
        }
        self.bytes += bytes;
        self.guilds
            .entry(guild_id)
            .or_insert_with(|| Pending {
                events: VecDeque::new(),
                attempts: 0,
                next_try_ms: now_ms,
                busy: false,
            })
            .events
            .push_back(Held {
                publish_id,
                event,
                bytes,
                held_at_ms: now_ms,
            });
        Ok(())
    }

    /// Takes `event`'s place in `guild_id`'s order before its first
    /// attempt, so an event published while it is in flight queues behind
    /// it even when that attempt fails (before, an event was held only
    /// once its call had failed, and one published meanwhile could be
    /// delivered ahead of it). [`Reserved::Head`]: the guild had nothing
    /// held, and its caller makes the attempt (the guild is busy until it
    /// reports with [`Outbox::confirmed`], [`Outbox::refused`] or
    /// [`Outbox::release`]); [`Reserved::Behind`]: held behind the others
    /// for the driver. `Err(event)` at `bytes_max`: nothing is held.
    pub fn reserve(
        &mut self,
        guild_id: i64,
        publish_id: u64,
        event: E,
        bytes: usize,
        now_ms: u64,
    ) -> Result<Reserved, E> {
        let behind = self.holds(guild_id);
        self.hold(guild_id, publish_id, event, bytes, now_ms)?;
        if behind {
            return Ok(Reserved::Behind);
        }
        if let Some(pending) = self.guilds.get_mut(&guild_id) {
            pending.busy = true;
        }
        Ok(Reserved::Head)
    }

    /// Up to `n` guilds due for an attempt at `now_ms`, marked busy (their
    /// driver reports back with [`Outbox::confirmed`], [`Outbox::refused`],
    /// [`Outbox::failed`] or [`Outbox::release`]).
    pub fn take_due(&mut self, now_ms: u64, n: usize) -> Vec<i64> {
        let mut due: Vec<i64> = self
            .guilds
            .iter()
            .filter(|(_, p)| !p.busy && p.next_try_ms <= now_ms)
            .map(|(g, _)| *g)
            .collect();
        // Lowest id first: which guilds wait when more are due than `n` is
        // then the same on every run (tests replay it).
        due.sort_unstable();
        due.truncate(n);
        for guild_id in &due {
            if let Some(p) = self.guilds.get_mut(guild_id) {
                p.busy = true;
            }
        }
        due
    }

    /// When the next guild that is not busy becomes due.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.guilds
            .values()
            .filter(|p| !p.busy)
            .map(|p| p.next_try_ms)
            .min()
    }

    /// The head event of `guild_id` to deliver now, after dropping the
    /// heads older than `age_ms_max` (their count is the second value).
    /// `None` once the guild has nothing left: it is forgotten.
    pub fn head(&mut self, guild_id: i64, now_ms: u64) -> (Option<&Held<E>>, usize) {
        let mut expired = 0;
        let Some(pending) = self.guilds.get_mut(&guild_id) else {
            return (None, 0);
        };
        while let Some(head) = pending.events.front() {
            if now_ms.saturating_sub(head.held_at_ms) <= self.age_ms_max {
                break;
            }
            self.bytes = self.bytes.saturating_sub(head.bytes);
            pending.events.pop_front();
            expired += 1;
        }
        if pending.events.is_empty() {
            self.guilds.remove(&guild_id);
            return (None, expired);
        }
        (
            self.guilds.get(&guild_id).and_then(|p| p.events.front()),
            expired,
        )
    }

    fn pop(&mut self, guild_id: i64) {
        if let Some(pending) = self.guilds.get_mut(&guild_id) {
            if let Some(head) = pending.events.pop_front() {
                self.bytes = self.bytes.saturating_sub(head.bytes);
            }
            pending.attempts = 0;
            if pending.events.is_empty() {
                self.guilds.remove(&guild_id);
            }
        }
    }

    /// The owner confirmed the head event: it leaves.
    pub fn confirmed(&mut self, guild_id: i64) {
        self.pop(guild_id);
    }

    /// The head event can never be delivered (the guild is gone): it
    /// leaves.
    pub fn refused(&mut self, guild_id: i64) {
        self.pop(guild_id);
    }

    /// Failed attempts at `guild_id`'s head so far (0 for a guild not
    /// held).
    pub fn attempts(&self, guild_id: i64) -> u32 {
        self.guilds.get(&guild_id).map_or(0, |p| p.attempts)
    }

    /// The attempt at the head failed: the guild is due again
    /// `backoff_ms` after `now_ms`, and no longer busy.
    pub fn failed(&mut self, guild_id: i64, now_ms: u64, backoff_ms: u64) {
        if let Some(pending) = self.guilds.get_mut(&guild_id) {
            pending.attempts = pending.attempts.saturating_add(1);
            pending.next_try_ms = now_ms.saturating_add(backoff_ms);
            pending.busy = false;
        }
    }

    /// The driver stops for `guild_id` without an outcome (its task
    /// ended): due again at once.
    pub fn release(&mut self, guild_id: i64) {
        if let Some(pending) = self.guilds.get_mut(&guild_id) {
            pending.busy = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_guild_delivers_in_order_and_is_forgotten_when_empty() {
        let mut outbox = Outbox::new(100, 1_000);
        outbox.hold(7, 1, "create", 10, 0).unwrap();
        outbox.hold(7, 2, "update", 10, 0).unwrap();
        assert!(outbox.holds(7));
        assert_eq!(outbox.take_due(0, 4), vec![7]);
        assert!(outbox.take_due(0, 4).is_empty(), "busy guilds are not due");
        assert_eq!(outbox.head(7, 0).0.unwrap().event, "create");
        outbox.confirmed(7);
        assert_eq!(outbox.head(7, 0).0.unwrap().event, "update");
        outbox.confirmed(7);
        assert_eq!(outbox.head(7, 0).0.map(|h| h.publish_id), None);
        assert!(!outbox.holds(7));
        assert_eq!((outbox.bytes(), outbox.events()), (0, 0));
    }

    /// An event in flight keeps its place: one published meanwhile queues
    /// behind it, the driver leaves the guild alone until the caller
    /// reports, and after a failure the driver delivers both in order.
    #[test]
    fn a_reserved_head_keeps_its_place_while_in_flight() {
        let mut outbox = Outbox::new(100, 10_000);
        assert_eq!(outbox.reserve(3, 1, "create", 10, 0), Ok(Reserved::Head));
        assert_eq!(outbox.reserve(3, 2, "delete", 10, 0), Ok(Reserved::Behind));
        assert!(outbox.take_due(0, 4).is_empty(), "in flight: not due");
        // The first attempt failed: the driver takes over, in order.
        outbox.release(3);
        assert_eq!(outbox.take_due(0, 4), vec![3]);
        assert_eq!(outbox.head(3, 0).0.unwrap().event, "create");
        outbox.confirmed(3);
        assert_eq!(outbox.head(3, 0).0.unwrap().event, "delete");
        outbox.confirmed(3);
        assert!(!outbox.holds(3));
        // Confirmed with an event behind it: released, the driver takes
        // the guild for the rest.
        assert_eq!(outbox.reserve(6, 5, "first", 10, 0), Ok(Reserved::Head));
        assert_eq!(outbox.reserve(6, 6, "second", 10, 0), Ok(Reserved::Behind));
        outbox.confirmed(6);
        outbox.release(6);
        assert_eq!(outbox.take_due(0, 4), vec![6]);
        assert_eq!(outbox.head(6, 0).0.unwrap().event, "second");
        outbox.confirmed(6);
        assert!(!outbox.holds(6));
        // A confirmed first attempt leaves nothing behind.
        assert_eq!(outbox.reserve(4, 3, "only", 10, 0), Ok(Reserved::Head));
        outbox.confirmed(4);
        assert!(!outbox.holds(4));
        assert_eq!((outbox.bytes(), outbox.events()), (0, 0));
        // Full: nothing reserved.
        let mut small = Outbox::new(5, 10_000);
        assert_eq!(small.reserve(5, 4, "big", 10, 0), Err("big"));
        assert!(!small.holds(5));
    }

    #[test]
    fn a_failure_backs_the_guild_off_and_keeps_its_head() {
        let mut outbox = Outbox::new(100, 10_000);
        outbox.hold(1, 1, "a", 10, 0).unwrap();
        outbox.take_due(0, 1);
        outbox.failed(1, 0, 250);
        assert_eq!(outbox.attempts(1), 1);
        assert_eq!(outbox.next_due_ms(), Some(250));
        assert!(outbox.take_due(249, 1).is_empty());
        assert_eq!(outbox.take_due(250, 1), vec![1]);
        assert_eq!(outbox.head(1, 250).0.unwrap().publish_id, 1);
        outbox.confirmed(1);
        assert_eq!(outbox.attempts(1), 0);
    }

    #[test]
    fn bytes_bound_refuses_without_holding() {
        let mut outbox = Outbox::new(25, 1_000);
        outbox.hold(1, 1, "a", 10, 0).unwrap();
        outbox.hold(2, 2, "b", 10, 0).unwrap();
        assert_eq!(outbox.hold(1, 3, "c", 10, 0), Err("c"));
        assert_eq!((outbox.bytes(), outbox.events()), (20, 2));
    }

    #[test]
    fn old_heads_expire() {
        let mut outbox = Outbox::new(100, 1_000);
        outbox.hold(1, 1, "old", 10, 0).unwrap();
        outbox.hold(1, 2, "new", 10, 600).unwrap();
        let (head, expired) = outbox.head(1, 1_500);
        assert_eq!((head.unwrap().event, expired), ("new", 1));
        let (head, expired) = outbox.head(1, 5_000);
        assert_eq!((head.map(|h| h.event), expired), (None, 1));
        assert_eq!(outbox.bytes(), 0);
        assert!(!outbox.holds(1));
    }

    #[test]
    fn at_most_n_guilds_are_taken_lowest_first() {
        let mut outbox = Outbox::new(1_000, 1_000);
        for g in [5, 3, 9, 1] {
            outbox.hold(g, g as u64, (), 1, 0).unwrap();
        }
        assert_eq!(outbox.take_due(0, 2), vec![1, 3]);
        assert_eq!(outbox.take_due(0, 2), vec![5, 9]);
        outbox.release(3);
        assert_eq!(outbox.take_due(0, 2), vec![3]);
    }

    proptest! {
        /// Whatever happens, the bytes counted equal the bytes held, never
        /// pass the bound, and each guild's events leave in hold order.
        #[test]
        fn accounting_and_order_hold(ops in proptest::collection::vec((0u8..5, 0i64..3, 1usize..40), 1..200)) {
            let mut outbox = Outbox::new(200, 50);
            let mut now = 0u64;
            let mut next_id = 0u64;
            let mut last_out: HashMap<i64, u64> = HashMap::new();
            for (op, guild, size) in ops {
                now += 3;
                match op {
                    0 | 1 => {
                        next_id += 1;
                        let _ = outbox.hold(guild, next_id, (), size, now);
                    }
                    2 => {
                        for g in outbox.take_due(now, 2) {
                            let id = outbox.head(g, now).0.map(|h| h.publish_id);
                            if let Some(id) = id {
                                let before = last_out.insert(g, id).unwrap_or(0);
                                prop_assert!(id > before);
                                outbox.confirmed(g);
                            }
                            outbox.release(g);
                        }
                    }
                    3 => {
                        for g in outbox.take_due(now, 3) {
                            outbox.failed(g, now, size as u64);
                        }
                    }
                    _ => now += size as u64,
                }
                let held: usize = outbox
                    .guilds
                    .values()
                    .flat_map(|p| p.events.iter().map(|h| h.bytes))
                    .sum();
                prop_assert_eq!(held, outbox.bytes());
                prop_assert!(outbox.bytes() <= 200);
            }
        }
    }
}
