//! The gateway node's session registry and local fanout.
//!
//! A [`Slot`] is a gateway session as the node knows it, attached to a
//! socket or not: its sequence counter, its replay buffer, and (while
//! attached) the bounded outbound channel of its socket task plus a separate
//! control channel. Dispatches go through the slot, which numbers them,
//! records them for RESUME, and queues them for the socket. A detached slot
//! keeps numbering and recording, so a RESUME replays exactly what was
//! missed; it expires after the resume window.
//!
//! Fanout: a guild owner sends one bus message per gateway node (the
//! node's `events` tasks turn it into a [`GuildEvent`], encoded once); the
//! hub looks up the node's sessions subscribed to that guild and hands each
//! the shared frame (a refcount increment and an enqueue).
//!
//! Two guild indexes: `wanted` holds the sessions that asked to follow a
//! guild, `by_guild` those whose GUILD_CREATE has arrived through the
//! guild's stream and which now receive its events. When the stream shows
//! a gap, the guild's live subscriptions are dropped and every wanted
//! session asks again (a fresh GUILD_CREATE each).
//! A full outbound queue makes the session a slow consumer: it is told to
//! close with a reconnectable code, and it resumes from the replay buffer.
//!
//! A socket's outbound queue is an [`Outlet`] (the producers' end, held by
//! the slot while attached and by the socket task) and an [`Inlet`] (the
//! socket's writer's end). It is bounded in messages and in bytes; bulk
//! producers that must not overflow it (op 8) wait for room
//! ([`Slot::dispatch_paced`]) instead of making the session a slow consumer.

use guildhall_proto::gateway::{CloseCode, EncodedDispatch};
use guildhall_proto::intents;
use guildhall_session::queue::Outbound;
use guildhall_session::replay::ReplayBuffer;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::{Notify, mpsc};

/// A control message for a socket task (separate from bulk dispatches, so a
/// backlog never delays a close or a drain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Close with this code.
    Close(CloseCode),
    /// Send op 7 RECONNECT and close (drain).
    Reconnect,
}

/// Capacity of a socket's control channel: a session needs at most one
/// close; the slack absorbs a drain racing a slow-consumer close.
pub const CONTROL_CHANNEL_CAPACITY: usize = 4;

/// An event from a guild owner, encoded once for every recipient.
#[derive(Debug)]
pub struct GuildEvent {
    /// The guild.
    pub guild_id: i64,
    /// The intent a session needs to receive it.
    pub required_intent: u64,
    /// The frame.
    pub full: EncodedDispatch,
    /// The frame for sessions without MESSAGE_CONTENT (messages only).
    pub blanked: Option<EncodedDispatch>,
    /// Users who receive `full` regardless (author, mentioned users).
    pub content_exempt: Vec<i64>,
    /// Users who may not view the event's channel, ascending: their
    /// sessions skip it.
    pub hidden_from: Vec<i64>,
}

/// The bytes half of a socket queue's bound, shared by its two ends.
#[derive(Debug)]
struct Gauge {
    /// Bytes queued and not yet written.
    bytes: AtomicUsize,
    bytes_max: usize,
    /// Woken each time the writer has written a batch: paced producers
    /// wait here for room.
    written: Notify,
}

/// The producers' end of one socket's outbound queue (see the module doc).
#[derive(Clone, Debug)]
pub struct Outlet {
    tx: mpsc::Sender<Outbound>,
    gauge: Arc<Gauge>,
}

/// The writer's end of one socket's outbound queue.
#[derive(Debug)]
pub struct Inlet {
    rx: mpsc::Receiver<Outbound>,
    gauge: Arc<Gauge>,
}

/// A socket's outbound queue of at most `messages_max` frames and
/// `bytes_max` bytes.
pub fn socket_queue(messages_max: usize, bytes_max: usize) -> (Outlet, Inlet) {
    let (tx, rx) = mpsc::channel(messages_max.max(1));
    let gauge = Arc::new(Gauge {
        bytes: AtomicUsize::new(0),
        bytes_max,
        written: Notify::new(),
    });
    (
        Outlet {
            tx,
            gauge: gauge.clone(),
        },
        Inlet { rx, gauge },
    )
}

impl Outlet {
    /// Queues `outbound` unless the queue is full in messages or bytes
    /// (which makes the session a slow consumer; the caller decides).
    pub fn try_push(&self, outbound: Outbound) -> bool {
        let bytes = outbound.len_bytes();
        if self.gauge.bytes.load(Ordering::Relaxed) + bytes > self.gauge.bytes_max {
            return false;
        }
        // Charged before the send, so the writer never releases bytes
        // that were not yet added.
        self.gauge.bytes.fetch_add(bytes, Ordering::Relaxed);
        if self.tx.try_send(outbound).is_ok() {
            return true;
        }
        self.gauge.bytes.fetch_sub(bytes, Ordering::Relaxed);
        false
    }

    /// Whether a paced producer may queue `bytes` now: the queue is empty,
    /// or stays at most half full, in messages and in bytes, with it. The
    /// other half is kept for live dispatches, so a bulk answer never makes
    /// its own session a slow consumer.
    fn has_room_paced(&self, bytes: usize) -> bool {
        let queued = self.tx.max_capacity() - self.tx.capacity();
        let queued_bytes = self.gauge.bytes.load(Ordering::Relaxed);
        queued == 0
            || ((queued + 1) * 2 <= self.tx.max_capacity()
                && (queued_bytes + bytes) * 2 <= self.gauge.bytes_max)
    }

    fn same_queue(&self, other: &Outlet) -> bool {
        self.tx.same_channel(&other.tx)
    }
}

impl Inlet {
    /// The next queued frame; `None` once every producer is gone.
    pub async fn recv(&mut self) -> Option<Outbound> {
        self.rx.recv().await
    }

    /// A queued frame, if one is waiting.
    pub fn try_recv(&mut self) -> Option<Outbound> {
        self.rx.try_recv().ok()
    }

    /// Frames of `bytes` received from this queue have been written: frees
    /// their bytes and wakes paced producers.
    pub fn written(&self, bytes: usize) {
        let _ = self
            .gauge
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(bytes))
            });
        self.gauge.written.notify_waiters();
    }
}

struct SlotState {
    seq: u64,
    replay: ReplayBuffer,
    out: Option<Outlet>,
    control: Option<mpsc::Sender<Control>>,
    detached_at_ms: Option<u64>,
    /// Set while the session moves to another node (this node gives it
    /// away): the guilds whose owners have not yet confirmed the move in
    /// their streams. The slot keeps recording until then.
    moving: Option<BTreeSet<i64>>,
    /// Set while the session moves here (this node takes it): events that
    /// arrived before the holder's state, numbered once it is here. At most
    /// the replay buffer's event bound; beyond it the move fails (op 9).
    adopting: Option<Vec<EncodedDispatch>>,
    adopt_overflow: bool,
}

impl SlotState {
    /// Numbers and records `event`; returns its sequence, or `None` while
    /// the session is being adopted (held until its numbering arrives).
    fn record(&mut self, event: &EncodedDispatch) -> Option<u64> {
        let events_max = self.replay.events_max();
        if let Some(pending) = &mut self.adopting {
            if pending.len() < events_max {
                pending.push(event.clone());
            } else {
                self.adopt_overflow = true;
            }
            return None;
        }
        self.seq += 1;
        self.replay.push(self.seq, event.clone());
        Some(self.seq)
    }

    /// The socket's queue is full: detach now (what it missed stays in the
    /// replay buffer) and ask the socket to close with a resumable code.
    fn slow_consumer(&mut self, counters: &HubCounters) {
        counters
            .slow_consumer_closes_total
            .fetch_add(1, Ordering::Relaxed);
        if let Some(control) = self.control.take() {
            let _ = control.try_send(Control::Close(CloseCode::UnknownError));
        }
        self.out = None;
        self.detached_at_ms = Some(guildhall_common::state::now_ms());
    }
}

/// What IDENTIFY chose for a session besides its intents, fixed for its
/// life and handed over with it when it moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionOptions {
    /// `shard: [id, count]`.
    pub shard: Option<[u32; 2]>,
    /// `large_threshold`, already read through
    /// `guildhall_proto::gateway::large_threshold`.
    pub large_threshold: u32,
}

impl SessionOptions {
    /// `shard` with Discord's default `large_threshold`.
    pub fn sharded(shard: Option<[u32; 2]>) -> Self {
        Self {
            shard,
            large_threshold: guildhall_proto::gateway::LARGE_THRESHOLD_DEFAULT,
        }
    }
}

/// One session.
pub struct Slot {
    /// Session id (for RESUME).
    pub id: String,
    /// The user.
    pub user_id: i64,
    /// Granted intents.
    pub intents: u64,
    /// IDENTIFY's shard (handed over with the session when it moves).
    pub shard: Option<[u32; 2]>,
    /// IDENTIFY's `large_threshold` as `guildhall_proto::gateway::
    /// large_threshold` reads it (handed over with the session).
    pub large_threshold: u32,
    state: Mutex<SlotState>,
    /// Woken as the owners confirm a move (see [`SlotState::moving`]).
    move_progress: Notify,
    /// The status this session last published (`None`: none, or ended):
    /// published again when its user's presence node changes.
    presence: Mutex<Option<String>>,
}

/// Counters the node exports.
#[derive(Debug, Default)]
pub struct HubCounters {
    /// Dispatches queued to sockets.
    pub dispatched_total: AtomicU64,
    /// Sessions closed as slow consumers.
    pub slow_consumer_closes_total: AtomicU64,
    /// Dispatches recorded for detached sessions.
    pub recorded_detached_total: AtomicU64,
    /// Guild dispatches a session skipped because its user may not view
    /// the event's channel.
    pub hidden_skipped_total: AtomicU64,
}

impl Slot {
    /// The status this session last published.
    pub fn presence(&self) -> Option<String> {
        self.presence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records the status this session publishes.
    pub fn set_presence(&self, status: Option<&str>) {
        *self
            .presence
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = status.map(str::to_owned);
    }

    /// Whether this session hears events of `guild_id` (`None`: an event
    /// without a guild) under its IDENTIFY's shard.
    pub fn receives(&self, guild_id: Option<i64>) -> bool {
        guildhall_proto::shard::receives(self.shard, guild_id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        // A poisoned lock means a panic while holding it; the state is plain
        // data and stays consistent, so keep serving.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Numbers, records and queues `event`. Returns false when the session
    /// turned out to be a slow consumer (it has been told to close).
    pub fn dispatch(&self, event: &EncodedDispatch, counters: &HubCounters) -> bool {
        let mut state = self.lock();
        let Some(seq) = state.record(event) else {
            return true;
        };
        let Some(out) = &state.out else {
            counters
                .recorded_detached_total
                .fetch_add(1, Ordering::Relaxed);
            return true;
        };
        if out.try_push(Outbound::Dispatch(event.clone(), seq)) {
            counters.dispatched_total.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        state.slow_consumer(counters);
        false
    }

    /// Like [`Slot::dispatch`], for bulk answers (op 8): waits until the
    /// socket's queue has room for `event` (see [`Outlet`]) instead of
    /// overflowing it. Returns false, without recording `event`, once the
    /// session has no socket: the answer is abandoned with its socket.
    pub async fn dispatch_paced(&self, event: &EncodedDispatch, counters: &HubCounters) -> bool {
        loop {
            let gauge = match &self.lock().out {
                Some(out) => out.gauge.clone(),
                None => return false,
            };
            // Registered before the check, so a batch written between the
            // check and the wait still wakes this producer.
            let written = gauge.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            {
                let mut state = self.lock();
                let Some(out) = &state.out else { return false };
                if out.has_room_paced(event.len_bytes()) {
                    let out = out.clone();
                    let Some(seq) = state.record(event) else {
                        return false;
                    };
                    if out.try_push(Outbound::Dispatch(event.clone(), seq)) {
                        counters.dispatched_total.fetch_add(1, Ordering::Relaxed);
                        return true;
                    }
                    // The socket task's own frames filled the rest of the
                    // queue: that is a slow consumer like any other.
                    state.slow_consumer(counters);
                    return false;
                }
            }
            written.await;
        }
    }

    /// The socket whose queue is `out` went away at `now_ms`: keep
    /// recording for RESUME. A socket that lost the session to a newer one
    /// (a RESUME from another connection) leaves it alone.
    pub fn detach(&self, now_ms: u64, out: &Outlet) {
        let mut state = self.lock();
        if state.out.as_ref().is_some_and(|o| !o.same_queue(out)) {
            return;
        }
        state.out = None;
        state.control = None;
        state.detached_at_ms.get_or_insert(now_ms);
    }

    /// Ends the session for good: its socket (if any) is closed with 4004
    /// and it counts as detached since the epoch, so the next reap ends it
    /// (presence offline, guilds left) instead of keeping it through a
    /// resume window; a RESUME meanwhile fails on its revoked token.
    pub fn terminate(&self) {
        let mut state = self.lock();
        if let Some(control) = state.control.take() {
            let _ = control.try_send(Control::Close(CloseCode::AuthenticationFailed));
        }
        state.out = None;
        state.detached_at_ms = Some(0);
    }

    /// The last sequence sent.
    pub fn last_seq(&self) -> u64 {
        self.lock().seq
    }

    /// Reattaches a resuming socket: queues the dispatches after
    /// `client_seq` to it first (under the lock, so no new dispatch
    /// overtakes them), or says why it cannot.
    pub fn resume(
        &self,
        client_seq: Option<u64>,
        out: Outlet,
        control: mpsc::Sender<Control>,
    ) -> Result<(), guildhall_session::replay::ReplayError> {
        let mut state = self.lock();
        // Moving away, or not yet here: this node cannot serve it now.
        if state.moving.is_some() || state.adopting.is_some() {
            return Err(guildhall_session::replay::ReplayError::Gap);
        }
        let missed: Vec<(EncodedDispatch, u64)> = state
            .replay
            .since(client_seq)?
            .map(|(seq, event)| (event.clone(), seq))
            .collect();
        if !missed.is_empty() {
            // A fresh socket's queue holds at most its HELLO and a few
            // acks; if even that is full, the client re-identifies.
            if !out.try_push(Outbound::Replay(missed)) {
                return Err(guildhall_session::replay::ReplayError::Gap);
            }
        }
        state.out = Some(out);
        // A socket still attached (a client that resumed from a second
        // connection without closing the first) is told to close: its
        // session lives on the new socket now, and left alone its
        // heartbeats would keep it, and its task, alive with nothing to
        // deliver. Best effort: a full control channel is a socket that is
        // closing already.
        if let Some(previous) = state.control.replace(control) {
            let _ = previous.try_send(Control::Close(CloseCode::UnknownError));
        }
        state.detached_at_ms = None;
        Ok(())
    }

    /// Tells an attached socket to do something.
    pub fn control(&self, message: Control) -> bool {
        self.lock()
            .control
            .as_ref()
            .is_some_and(|c| c.try_send(message).is_ok())
    }

    fn detached_since(&self) -> Option<u64> {
        self.lock().detached_at_ms
    }

    /// Whether the session is moving to another node (a stream gap does
    /// not re-subscribe it here: its guild is handed over unconfirmed).
    pub fn is_moving(&self) -> bool {
        self.lock().moving.is_some()
    }

    /// Whether the replay buffer can serve a RESUME from `client_seq`.
    pub fn can_replay(
        &self,
        client_seq: Option<u64>,
    ) -> Result<(), guildhall_session::replay::ReplayError> {
        self.lock().replay.since(client_seq).map(|_| ())
    }

    /// Starts giving the session away: detaches its socket (told to close
    /// with a resumable code: the client is on another node now) and waits
    /// for `guilds` to confirm. The slot keeps recording meanwhile. `false`
    /// when it is moving already or being adopted.
    pub fn begin_move(&self, guilds: &[i64], now_ms: u64) -> bool {
        let mut state = self.lock();
        if state.moving.is_some() || state.adopting.is_some() {
            return false;
        }
        state.moving = Some(guilds.iter().copied().collect());
        if let Some(control) = state.control.take() {
            let _ = control.try_send(Control::Close(CloseCode::UnknownError));
        }
        state.out = None;
        state.detached_at_ms.get_or_insert(now_ms);
        true
    }

    /// An owner confirmed the move of `guild_id`'s stream.
    fn move_confirmed(&self, guild_id: i64) {
        if let Some(pending) = &mut self.lock().moving {
            pending.remove(&guild_id);
        }
        self.move_progress.notify_waiters();
    }

    /// Waits until every owner confirmed the move or `timeout` passed;
    /// returns the guilds still unconfirmed.
    pub async fn move_confirmations(&self, timeout: std::time::Duration) -> Vec<i64> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // Registered before the check, so a confirmation between the
            // check and the wait still wakes this.
            let progress = self.move_progress.notified();
            tokio::pin!(progress);
            progress.as_mut().enable();
            let pending: Vec<i64> = self
                .lock()
                .moving
                .as_ref()
                .map(|p| p.iter().copied().collect())
                .unwrap_or_default();
            if pending.is_empty() {
                return pending;
            }
            if tokio::time::timeout_at(deadline, progress).await.is_err() {
                return pending;
            }
        }
    }

    /// The session's numbering and the dispatches after `client_seq`, to
    /// hand over (the move is complete).
    pub fn handoff(
        &self,
        client_seq: Option<u64>,
    ) -> Result<(u64, Vec<(u64, EncodedDispatch)>), guildhall_session::replay::ReplayError> {
        let state = self.lock();
        let frames = state
            .replay
            .since(client_seq)?
            .map(|(seq, event)| (seq, event.clone()))
            .collect();
        Ok((state.seq, frames))
    }

    /// The holder's state arrived: continue the session's numbering after
    /// `seq`, with `frames` (the dispatches after `client_seq`, checked
    /// consecutive and ending at `seq`) in the replay buffer, then number
    /// what arrived here meanwhile. `false` when the frames do not line up
    /// or more arrived than the buffer holds: the move failed.
    pub fn adopt(
        &self,
        client_seq: Option<u64>,
        seq: u64,
        frames: Vec<(u64, EncodedDispatch)>,
        replay_bytes_max: usize,
    ) -> bool {
        let mut state = self.lock();
        let Some(pending) = state.adopting.take() else {
            return false;
        };
        let start = client_seq.unwrap_or(0);
        let consecutive = frames
            .iter()
            .enumerate()
            .all(|(i, (s, _))| *s == start + 1 + i as u64);
        if state.adopt_overflow || !consecutive || start + frames.len() as u64 != seq {
            return false;
        }
        let events_max = state.replay.events_max();
        state.replay = ReplayBuffer::after(events_max, replay_bytes_max, start);
        for (s, event) in frames {
            state.replay.push(s, event);
        }
        state.seq = seq;
        for event in pending {
            let _ = state.record(&event);
        }
        true
    }
}

/// The node's sessions.
pub struct Hub {
    sessions: RwLock<HashMap<String, Arc<Slot>>>,
    // The indexes hold the slots themselves, so fanout touches no session
    // id and allocates nothing per recipient.
    by_guild: RwLock<HashMap<i64, HashMap<String, Arc<Slot>>>>,
    by_user: RwLock<HashMap<i64, HashMap<String, Arc<Slot>>>>,
    wanted: RwLock<HashMap<i64, HashMap<String, Arc<Slot>>>>,
    replay_events_max: usize,
    replay_bytes_max: usize,
    /// Counters.
    pub counters: HubCounters,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Hub {
    /// An empty hub with the given bounds.
    pub fn new(limits: &guildhall_limits::Limits) -> Self {
        Self {
            sessions: RwLock::new(HashMap::new()),
            by_guild: RwLock::new(HashMap::new()),
            by_user: RwLock::new(HashMap::new()),
            wanted: RwLock::new(HashMap::new()),
            replay_events_max: limits.replay_buffer_events_max,
            replay_bytes_max: limits.replay_buffer_bytes_max,
            counters: HubCounters::default(),
        }
    }

    /// Registers a new, attached session.
    pub fn register(
        &self,
        id: String,
        user_id: i64,
        intents: u64,
        options: SessionOptions,
        out: Outlet,
        control: mpsc::Sender<Control>,
    ) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            id: id.clone(),
            user_id,
            intents,
            shard: options.shard,
            large_threshold: options.large_threshold,
            state: Mutex::new(SlotState {
                seq: 0,
                replay: ReplayBuffer::new(self.replay_events_max, self.replay_bytes_max),
                out: Some(out),
                control: Some(control),
                detached_at_ms: None,
                moving: None,
                adopting: None,
                adopt_overflow: false,
            }),
            move_progress: Notify::new(),
            presence: Mutex::new(None),
        });
        write(&self.sessions).insert(id.clone(), slot.clone());
        write(&self.by_user)
            .entry(user_id)
            .or_default()
            .insert(id, slot.clone());
        slot
    }

    /// Registers a session moving here from another node: detached,
    /// holding what arrives until [`Slot::adopt`]. Not yet among its user's
    /// sessions (user events reach it once adopted; the holder records them
    /// until then). `None` when the id is taken here.
    pub fn register_adopting(
        &self,
        id: String,
        user_id: i64,
        intents: u64,
        options: SessionOptions,
        now_ms: u64,
    ) -> Option<Arc<Slot>> {
        let mut sessions = write(&self.sessions);
        if sessions.contains_key(&id) {
            return None;
        }
        let slot = Arc::new(Slot {
            id: id.clone(),
            user_id,
            intents,
            shard: options.shard,
            large_threshold: options.large_threshold,
            state: Mutex::new(SlotState {
                seq: 0,
                replay: ReplayBuffer::new(self.replay_events_max, self.replay_bytes_max),
                out: None,
                control: None,
                // Reaped like any detached session should the move stall.
                detached_at_ms: Some(now_ms),
                moving: None,
                adopting: Some(Vec::new()),
                adopt_overflow: false,
            }),
            move_progress: Notify::new(),
            presence: Mutex::new(None),
        });
        sessions.insert(id, slot.clone());
        Some(slot)
    }

    /// An adopted session joins its user's sessions (user events).
    pub fn adopted(&self, slot: &Arc<Slot>) {
        write(&self.by_user)
            .entry(slot.user_id)
            .or_default()
            .insert(slot.id.clone(), slot.clone());
    }

    /// Forgets a session at once, from every index (it moved away, or a
    /// move here failed); returns the guilds it wanted.
    pub fn forget(&self, id: &str) -> Vec<i64> {
        let Some(slot) = write(&self.sessions).remove(id) else {
            return Vec::new();
        };
        {
            let mut by_user = write(&self.by_user);
            if let Some(ids) = by_user.get_mut(&slot.user_id) {
                ids.remove(id);
                if ids.is_empty() {
                    by_user.remove(&slot.user_id);
                }
            }
        }
        write(&self.by_guild).retain(|_, slots| {
            slots.remove(id);
            !slots.is_empty()
        });
        let mut guilds = Vec::new();
        write(&self.wanted).retain(|guild_id, slots| {
            if slots.remove(id).is_some() {
                guilds.push(*guild_id);
            }
            !slots.is_empty()
        });
        guilds
    }

    /// The guilds a session asked to follow.
    pub fn guilds_of(&self, id: &str) -> Vec<i64> {
        read(&self.wanted)
            .iter()
            .filter(|(_, slots)| slots.contains_key(id))
            .map(|(guild_id, _)| *guild_id)
            .collect()
    }

    /// The owner moved the session's subscription to `guild_id` away (a
    /// `Moved` in the guild's stream): this node stops delivering the guild
    /// to it, and the move counts the guild as confirmed.
    pub fn moved(&self, guild_id: i64, session_id: &str) {
        let mut slot = None;
        for index in [&self.by_guild, &self.wanted] {
            let mut index = write(index);
            if let Some(slots) = index.get_mut(&guild_id) {
                slot = slots.remove(session_id).or(slot);
                if slots.is_empty() {
                    index.remove(&guild_id);
                }
            }
        }
        if let Some(slot) = slot.or_else(|| self.get(session_id)) {
            slot.move_confirmed(guild_id);
        }
    }

    /// The owner moved a session's subscription here (an `Adopt` in the
    /// guild's stream): deliver the guild's events to it from now on.
    pub fn adopt_guild(&self, guild_id: i64, session_id: &str) -> bool {
        // A guild of another shard stays out, as in `want`.
        let Some(slot) = self
            .get(session_id)
            .filter(|slot| slot.receives(Some(guild_id)))
        else {
            return false;
        };
        write(&self.wanted)
            .entry(guild_id)
            .or_default()
            .insert(slot.id.clone(), slot.clone());
        write(&self.by_guild)
            .entry(guild_id)
            .or_default()
            .insert(slot.id.clone(), slot);
        true
    }

    /// Every guild some session here asked to follow.
    pub fn wanted_guilds(&self) -> Vec<i64> {
        read(&self.wanted).keys().copied().collect()
    }

    /// Whether the session asked to follow the guild already.
    pub fn wants(&self, guild_id: i64, session_id: &str) -> bool {
        read(&self.wanted)
            .get(&guild_id)
            .is_some_and(|slots| slots.contains_key(session_id))
    }

    /// A session by id.
    pub fn get(&self, id: &str) -> Option<Arc<Slot>> {
        read(&self.sessions).get(id).cloned()
    }

    /// Every session on this node (at most `sessions_per_node_max`).
    pub fn slots(&self) -> Vec<Arc<Slot>> {
        read(&self.sessions).values().cloned().collect()
    }

    /// Sessions of a user on this node.
    pub fn sessions_of(&self, user_id: i64) -> Vec<Arc<Slot>> {
        read(&self.by_user)
            .get(&user_id)
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Records that a session asked to follow a guild (before asking its
    /// owner, so a resync can ask again). A guild of another shard is
    /// refused (false): every subscription passes here, so a sharded
    /// session never gets that guild's GUILD_CREATE or events, and a new
    /// owner asking which sessions follow it never learns of this one.
    pub fn want(&self, guild_id: i64, slot: &Arc<Slot>) -> bool {
        if !slot.receives(Some(guild_id)) {
            return false;
        }
        write(&self.wanted)
            .entry(guild_id)
            .or_default()
            .insert(slot.id.clone(), slot.clone());
        true
    }

    /// The owner's Subscribe arrived in the guild's stream: queue the
    /// session's GUILD_CREATE, then deliver the guild's events to it.
    /// Returns false when the session is gone or no longer wants the guild.
    pub fn subscribed(
        &self,
        guild_id: i64,
        session_id: &str,
        guild_create: Option<&EncodedDispatch>,
    ) -> bool {
        let Some(slot) = read(&self.wanted)
            .get(&guild_id)
            .and_then(|s| s.get(session_id))
            .cloned()
        else {
            return false;
        };
        if let Some(event) = guild_create {
            slot.dispatch(event, &self.counters);
        }
        write(&self.by_guild)
            .entry(guild_id)
            .or_default()
            .insert(slot.id.clone(), slot);
        true
    }

    /// Users lost a guild (all of them when `user_ids` is empty): their
    /// sessions stop following it and those holding GUILDS get `event`
    /// (GUILD_DELETE).
    pub fn removed(&self, guild_id: i64, user_ids: &[i64], event: Option<&EncodedDispatch>) {
        let gone: Vec<Arc<Slot>> = {
            let mut wanted = write(&self.wanted);
            let Some(slots) = wanted.get_mut(&guild_id) else {
                return;
            };
            let gone: Vec<Arc<Slot>> = slots
                .values()
                .filter(|s| user_ids.is_empty() || user_ids.contains(&s.user_id))
                .cloned()
                .collect();
            for slot in &gone {
                slots.remove(&slot.id);
            }
            if slots.is_empty() {
                wanted.remove(&guild_id);
            }
            gone
        };
        {
            let mut by_guild = write(&self.by_guild);
            if let Some(slots) = by_guild.get_mut(&guild_id) {
                for slot in &gone {
                    slots.remove(&slot.id);
                }
                if slots.is_empty() {
                    by_guild.remove(&guild_id);
                }
            }
        }
        if let Some(event) = event {
            for slot in gone.iter().filter(|s| s.intents & intents::GUILDS != 0) {
                slot.dispatch(event, &self.counters);
            }
        }
    }

    /// A gap in the guild's stream: stop delivering its events here.
    pub fn stop(&self, guild_id: i64) {
        write(&self.by_guild).remove(&guild_id);
    }

    /// Stops the guild (see [`Hub::stop`]) and returns the sessions that
    /// must subscribe again.
    pub fn resync(&self, guild_id: i64) -> Vec<Arc<Slot>> {
        self.stop(guild_id);
        read(&self.wanted)
            .get(&guild_id)
            .map(|s| s.values().filter(|s| !s.is_moving()).cloned().collect())
            .unwrap_or_default()
    }

    /// The sessions that asked to follow `guild_id` and have no
    /// GUILD_CREATE of its current stream (after an owner change: the ones
    /// the new owner did not subscribe itself).
    pub fn awaiting_slots(&self, guild_id: i64) -> Vec<Arc<Slot>> {
        let following = read(&self.by_guild);
        let following = following.get(&guild_id);
        read(&self.wanted)
            .get(&guild_id)
            .map(|s| {
                s.values()
                    .filter(|slot| !following.is_some_and(|f| f.contains_key(&slot.id)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Up to `max` sessions that follow or want `guild_id`: (session, user,
    /// intents), for a new owner that asks.
    pub fn followers(&self, guild_id: i64, max: usize) -> Vec<(String, i64, u64, u32)> {
        read(&self.wanted)
            .get(&guild_id)
            .map(|s| {
                s.values()
                    .take(max)
                    .map(|slot| {
                        (
                            slot.id.clone(),
                            slot.user_id,
                            slot.intents,
                            slot.large_threshold,
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the session asked to follow `guild_id` and its GUILD_CREATE
    /// has not arrived yet (a subscription to retry).
    pub fn awaiting(&self, guild_id: i64, session_id: &str) -> bool {
        read(&self.wanted)
            .get(&guild_id)
            .is_some_and(|s| s.contains_key(session_id))
            && !read(&self.by_guild)
                .get(&guild_id)
                .is_some_and(|s| s.contains_key(session_id))
    }

    /// Whether any session here follows or wants `guild_id`.
    pub fn follows(&self, guild_id: i64) -> bool {
        read(&self.wanted).contains_key(&guild_id)
    }

    /// Delivers an event to every session of `user_ids` holding `intent`
    /// (0: no intent needed, as for USER_UPDATE) — direct messages and user
    /// events, which have no guild owner. Sharded sessions hear it on the
    /// shard of `guild_id` (an interaction in a guild), or on shard 0 when
    /// it names no guild (a DM, USER_UPDATE).
    pub fn dispatch_to_users(
        &self,
        user_ids: &[i64],
        guild_id: Option<i64>,
        intent: u64,
        event: &EncodedDispatch,
    ) {
        for user_id in user_ids {
            for slot in self.sessions_of(*user_id) {
                if (intent == 0 || slot.intents & intent != 0) && slot.receives(guild_id) {
                    slot.dispatch(event, &self.counters);
                }
            }
        }
    }

    /// Delivers a guild event to this node's subscribed sessions.
    pub fn dispatch_guild_event(&self, event: &GuildEvent) {
        // Held for the loop: each step is a non-blocking enqueue, and
        // subscription changes wait at most one fanout.
        let by_guild = read(&self.by_guild);
        let Some(slots) = by_guild.get(&event.guild_id) else {
            return;
        };
        for slot in slots.values() {
            if slot.intents & event.required_intent == 0 {
                continue;
            }
            if !event.hidden_from.is_empty()
                && event.hidden_from.binary_search(&slot.user_id).is_ok()
            {
                self.counters
                    .hidden_skipped_total
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let frame = match &event.blanked {
                Some(blanked)
                    if slot.intents & intents::MESSAGE_CONTENT == 0
                        && !event.content_exempt.contains(&slot.user_id) =>
                {
                    blanked
                }
                _ => &event.full,
            };
            slot.dispatch(frame, &self.counters);
        }
    }

    /// Forgets sessions detached for longer than `window_ms`; returns each
    /// one with the guilds it followed (their owners are told).
    pub fn reap(&self, now_ms: u64, window_ms: u64) -> Vec<(Arc<Slot>, Vec<i64>)> {
        let expired: Vec<Arc<Slot>> = read(&self.sessions)
            .values()
            .filter(|s| s.detached_since().is_some_and(|t| now_ms >= t + window_ms))
            .cloned()
            .collect();
        if expired.is_empty() {
            return Vec::new();
        }
        // One pass over each index, whatever the number of expired
        // sessions (a herd's worth can expire at once).
        let index: HashMap<&str, usize> = expired
            .iter()
            .enumerate()
            .map(|(i, slot)| (slot.id.as_str(), i))
            .collect();
        {
            let mut sessions = write(&self.sessions);
            let mut by_user = write(&self.by_user);
            for slot in &expired {
                sessions.remove(&slot.id);
                if let Some(ids) = by_user.get_mut(&slot.user_id) {
                    ids.remove(&slot.id);
                    if ids.is_empty() {
                        by_user.remove(&slot.user_id);
                    }
                }
            }
        }
        write(&self.by_guild).retain(|_, slots| {
            slots.retain(|id, _| !index.contains_key(id.as_str()));
            !slots.is_empty()
        });
        let mut guilds: Vec<Vec<i64>> = vec![Vec::new(); expired.len()];
        write(&self.wanted).retain(|guild_id, slots| {
            slots.retain(|id, _| match index.get(id.as_str()) {
                Some(&i) => {
                    guilds[i].push(*guild_id);
                    false
                }
                None => true,
            });
            !slots.is_empty()
        });
        expired.into_iter().zip(guilds).collect()
    }

    /// Sessions held (attached or detached).
    pub fn len(&self) -> usize {
        read(&self.sessions).len()
    }

    /// Whether the hub holds no session.
    pub fn is_empty(&self) -> bool {
        read(&self.sessions).is_empty()
    }

    /// Every attached session's id (for a drain).
    pub fn attached(&self) -> Vec<Arc<Slot>> {
        read(&self.sessions)
            .values()
            .filter(|s| s.detached_since().is_none())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A sharded session follows only its shard's guilds and hears user
    /// events on shard 0, or on the shard of the guild they name.
    #[test]
    fn sessions_follow_and_hear_by_their_shard() {
        let hub = Hub::new(&guildhall_limits::Limits::default());
        let (mut inlets, mut slots) = (Vec::new(), Vec::new());
        for (id, shard) in [("s0", Some([0, 2])), ("s1", Some([1, 2])), ("all", None)] {
            let (out, inlet) = socket_queue(16, 1 << 20);
            let (control, _) = mpsc::channel(4);
            slots.push(hub.register(
                id.to_owned(),
                7,
                intents::GUILDS,
                SessionOptions::sharded(shard),
                out,
                control,
            ));
            inlets.push(inlet);
        }
        let (even, odd) = (4 << 22, 5 << 22);
        let wants = |guild| slots.iter().map(|s| hub.want(guild, s)).collect::<Vec<_>>();
        assert_eq!(wants(even), [true, false, true]);
        assert_eq!(wants(odd), [false, true, true]);
        let mut heard = |guild_id| {
            hub.dispatch_to_users(&[7], guild_id, 0, &EncodedDispatch::from_json("X", "1"));
            inlets
                .iter_mut()
                .map(|inlet| inlet.try_recv().is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(heard(None), [true, false, true]);
        assert_eq!(heard(Some(odd)), [false, true, true]);
    }

    #[test]
    fn reaping_clears_every_index_and_reports_the_guilds_followed() {
        let hub = Hub::new(&guildhall_limits::Limits::default());
        let session = |id: &str, user: i64| {
            let (out, _) = socket_queue(4, 1 << 20);
            let (control, _) = mpsc::channel(4);
            hub.register(
                id.to_owned(),
                user,
                intents::GUILDS,
                SessionOptions::sharded(None),
                out,
                control,
            )
        };
        let (gone, kept) = (session("gone", 1), session("kept", 2));
        for guild in [10, 20] {
            assert!(hub.want(guild, &gone));
            assert!(hub.subscribed(guild, "gone", None));
        }
        assert!(hub.want(20, &kept));
        assert!(hub.subscribed(20, "kept", None));
        let out = gone.lock().out.clone().unwrap();
        gone.detach(1_000, &out);
        assert!(hub.reap(1_500, 1_000).is_empty(), "still in its window");
        let reaped = hub.reap(2_000, 1_000);
        assert_eq!(reaped.len(), 1);
        let (slot, mut guilds) = (&reaped[0].0, reaped[0].1.clone());
        guilds.sort_unstable();
        assert_eq!((slot.id.as_str(), guilds), ("gone", vec![10, 20]));
        assert!(hub.get("gone").is_none() && hub.sessions_of(1).is_empty());
        assert!(read(&hub.by_user).get(&1).is_none());
        assert!(!hub.follows(10) && hub.follows(20));
        assert_eq!(hub.resync(20).len(), 1, "the other session is untouched");
    }

    #[test]
    fn a_socket_that_lost_its_session_to_a_resume_does_not_detach_it() {
        let hub = Hub::new(&guildhall_limits::Limits::default());
        let (old, _old_inlet) = socket_queue(4, 1 << 20);
        let (control, _) = mpsc::channel(4);
        let slot = hub.register(
            "s".to_owned(),
            1,
            intents::GUILDS,
            SessionOptions::sharded(None),
            old.clone(),
            control,
        );
        let (new, mut new_inlet) = socket_queue(4, 1 << 20);
        let (control, _) = mpsc::channel(4);
        assert!(slot.resume(Some(0), new.clone(), control).is_ok());
        slot.detach(1_000, &old);
        assert!(slot.detached_since().is_none(), "the new socket keeps it");
        slot.dispatch(&EncodedDispatch::from_json("X", "{}"), &hub.counters);
        assert!(new_inlet.try_recv().is_some());
        slot.detach(2_000, &new);
        assert_eq!(slot.detached_since(), Some(2_000));
    }

    #[tokio::test]
    async fn a_moving_session_records_until_confirmed_and_the_taker_numbers_after_it() {
        let limits = guildhall_limits::Limits::default();
        let (giver, taker) = (Hub::new(&limits), Hub::new(&limits));
        let (out, _inlet) = socket_queue(16, 1 << 20);
        let (control, _) = mpsc::channel(4);
        let slot = giver.register(
            "s".into(),
            1,
            intents::GUILDS,
            SessionOptions::sharded(None),
            out,
            control,
        );
        assert!(giver.want(10, &slot));
        assert!(giver.subscribed(10, "s", None));
        let event = |n: u32| EncodedDispatch::from_json("X", &n.to_string());
        for n in 1..=3 {
            slot.dispatch(&event(n), &giver.counters);
        }
        // The client saw 1; the move starts.
        let adopting = taker
            .register_adopting(
                "s".into(),
                1,
                intents::GUILDS,
                SessionOptions::sharded(None),
                0,
            )
            .unwrap();
        assert!(
            taker
                .register_adopting("s".into(), 1, 0, SessionOptions::sharded(None), 0)
                .is_none()
        );
        assert!(slot.begin_move(&giver.guilds_of("s"), 0));
        assert!(!slot.begin_move(&[10], 0), "one move at a time");
        // In flight to the giver before the owner switched: recorded there.
        giver.dispatch_guild_event(&GuildEvent {
            guild_id: 10,
            required_intent: intents::GUILDS,
            full: event(4),
            blanked: None,
            content_exempt: vec![],
            hidden_from: vec![],
        });
        // After the switch: held by the taker.
        assert!(taker.adopt_guild(10, "s"));
        adopting.dispatch(&event(5), &taker.counters);
        giver.moved(10, "s");
        assert!(
            slot.move_confirmations(std::time::Duration::from_secs(1))
                .await
                .is_empty()
        );
        let (seq, frames) = slot.handoff(Some(1)).unwrap();
        assert_eq!((seq, frames.len()), (4, 3));
        giver.forget("s");
        assert!(giver.get("s").is_none() && !giver.follows(10));
        assert!(
            !adopting.adopt(Some(1), 5, frames.clone(), 1 << 20),
            "must line up"
        );
        let adopting = taker
            .register_adopting(
                "t".into(),
                1,
                intents::GUILDS,
                SessionOptions::sharded(None),
                0,
            )
            .unwrap();
        adopting.dispatch(&event(5), &taker.counters);
        assert!(adopting.adopt(Some(1), 4, frames, 1 << 20));
        let (out, mut inlet) = socket_queue(16, 1 << 20);
        let (control, _) = mpsc::channel(4);
        adopting.resume(Some(1), out, control).unwrap();
        let Some(Outbound::Replay(missed)) = inlet.try_recv() else {
            panic!("no replay");
        };
        let seqs: Vec<u64> = missed.iter().map(|(_, s)| *s).collect();
        assert_eq!(seqs, [2, 3, 4, 5], "original numbers, then the held one");
        assert_eq!(missed[3].0, event(5));
    }

    #[tokio::test]
    async fn paced_dispatches_wait_for_room_instead_of_overflowing() {
        let hub = Hub::new(&guildhall_limits::Limits::default());
        let (out, mut inlet) = socket_queue(4, 1 << 20);
        let (control, _) = mpsc::channel(4);
        let slot = hub.register(
            "s".to_owned(),
            1,
            intents::GUILDS,
            SessionOptions::sharded(None),
            out,
            control,
        );
        let event = EncodedDispatch::from_json("X", "{}");
        // Half of four: two paced frames fit, the third waits.
        for _ in 0..2 {
            assert!(slot.dispatch_paced(&event, &hub.counters).await);
        }
        let third = {
            let slot = slot.clone();
            tokio::spawn(async move {
                let counters = HubCounters::default();
                slot.dispatch_paced(&EncodedDispatch::from_json("X", "{}"), &counters)
                    .await
            })
        };
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "waits for room");
        let written: usize = [inlet.try_recv(), inlet.try_recv()]
            .into_iter()
            .flatten()
            .map(|o| o.len_bytes())
            .sum();
        inlet.written(written);
        assert!(third.await.unwrap(), "queued once the writer made room");
        assert_eq!(
            hub.counters
                .slow_consumer_closes_total
                .load(Ordering::Relaxed),
            0
        );
        assert_eq!(slot.last_seq(), 3);
    }
}
