//! RESUME on any gateway node: a session held by another node is taken
//! over through the bus.
//!
//! Finding the holder: the session id names it. An id is 32 random hex
//! digits followed by the 16-hex-digit ring hash of the holding node's name
//! (`member_id_of`), 48 characters of `[0-9a-f]` (Discord's session_id is
//! an opaque string; libraries store and send it back unchanged). The taker
//! looks the hash up among the gateway nodes of its registry view: one
//! request to one node, instead of asking every gateway node for every
//! RESUME (during a drain that would be nodes × sessions requests, and "no
//! one answered" could not tell a dead holder from a slow one). A hash that
//! names no live gateway node means the holder is gone (its lease ended):
//! op 9 at once, without waiting for a timeout.
//!
//! The move, in two steps over `gw.<holder>.takeover`:
//! 1. `Prepare` (changes nothing): the holder checks the user (the token
//!    the taker verified) and that its replay buffer reaches back to the
//!    client's `seq`, and answers intents, shard and guilds. The taker
//!    registers an *adopting* slot: it holds whatever arrives for the
//!    session, unnumbered, until the numbering arrives.
//! 2. `Commit`: the holder detaches the session (it keeps recording) and
//!    asks each guild's owner to move it (`GuildCall::Move`). The owner's
//!    mailbox is the serialisation point: it puts `Moved` in the holder's
//!    stream and `Adopt` in the taker's, so every event of the guild is
//!    either before `Moved` (the holder records it) or after `Adopt` (the
//!    taker holds it). The holder waits for every `Moved` (at most
//!    `session_move_timeout_ms`), then answers its sequence number and the
//!    dispatches after the client's `seq`, and forgets the session. The
//!    taker numbers what it held after them, and the RESUME replays exactly
//!    what was missed. Nothing is forwarded between the nodes: the owner's
//!    switch already splits the stream at one point.
//!
//! A guild whose `Moved` does not come in time (owner unreachable, a gap
//! in the holder's stream during the move) is handed over as "subscribe
//! afresh": the taker asks for a GUILD_CREATE, the rule every stream gap
//! follows. Any failure (no answer within `session_takeover_timeout_ms`, a
//! refusal, missed dispatches larger than one bus message, a handoff that
//! does not line up) is op 9 INVALID_SESSION, never a silent gap. User
//! events (direct messages) are not numbered streams: one published while
//! the session is between the two nodes reaches neither (documented in
//! ARCHITECTURE.md as open).

use crate::hub::{Hub, Slot};
use crate::subscriptions::Subscriptions;
use guildhall_cluster::bus::Message;
use guildhall_cluster::{Bus, BusError};
use guildhall_proto::bus::{
    ENVELOPE_VERSION, HandoffFrame, SessionHandoff, TakeoverAnswer, TakeoverRefusal, TakeoverReply,
    TakeoverRequest, TakeoverStep, session_takeover_subject,
};
use guildhall_proto::gateway::EncodedDispatch;
use guildhall_session::replay::ReplayError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

// The session id format (the holder's tag in it) is shared: other roles
// read it to reach one session.
pub use guildhall_common::gateways::{holder_tag, new_session_id};

/// Counters of cross-node RESUMEs, read by `/metrics`.
#[derive(Debug, Default)]
pub struct TakeoverCounters {
    /// Sessions this node took from another node.
    pub taken_total: AtomicU64,
    /// Sessions this node handed to another node.
    pub given_total: AtomicU64,
    /// Takeovers this node asked for that failed (op 9 to the client).
    pub failed_total: AtomicU64,
    /// RESUMEs naming no live gateway node (dead holder, forged id).
    pub unknown_holder_total: AtomicU64,
    /// Takeover requests this node refused (unknown session, wrong user,
    /// gap, busy, too large, malformed).
    pub refused_total: AtomicU64,
    /// Guilds handed over unconfirmed (subscribed afresh on the taker).
    pub unconfirmed_guilds_total: AtomicU64,
}

/// Both sides of a takeover on this node.
pub struct Takeovers {
    hub: Arc<Hub>,
    subscriptions: Arc<Subscriptions>,
    bus: Arc<dyn Bus>,
    cluster: Arc<guildhall_common::cluster::ClusterState>,
    node_name: String,
    limits: guildhall_limits::Limits,
    in_flight: Arc<Semaphore>,
    /// Counters.
    pub counters: TakeoverCounters,
}

fn refused(reason: TakeoverRefusal) -> TakeoverAnswer {
    TakeoverAnswer::Refused(reason)
}

impl Takeovers {
    /// Takeovers for this node.
    pub fn new(
        hub: Arc<Hub>,
        subscriptions: Arc<Subscriptions>,
        bus: Arc<dyn Bus>,
        cluster: Arc<guildhall_common::cluster::ClusterState>,
        node_name: String,
        limits: &guildhall_limits::Limits,
    ) -> Self {
        Self {
            hub,
            subscriptions,
            bus,
            cluster,
            node_name,
            limits: limits.clone(),
            in_flight: Arc::new(Semaphore::new(limits.session_takeovers_in_flight_max)),
            counters: TakeoverCounters::default(),
        }
    }

    /// This node's name.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    fn refuse(&self, why: &'static str) {
        self.counters.refused_total.fetch_add(1, Ordering::Relaxed);
        guildhall_common::throttled!(info, "takeover.refused", why, "session takeover refused");
    }

    /// Serves takeovers of this node's sessions. A `Prepare` is answered
    /// inline (no waiting); a `Commit` waits for its guilds' owners, so it
    /// runs in a task holding one of `session_takeovers_in_flight_max`
    /// permits (none free: `Busy`).
    pub async fn serve(self: &Arc<Self>) -> Result<tokio::task::JoinHandle<()>, BusError> {
        let mut requests = self
            .bus
            .subscribe(
                &session_takeover_subject(&self.node_name),
                None,
                self.limits.bus_subscription_messages_max,
            )
            .await?;
        let this = self.clone();
        Ok(tokio::spawn(async move {
            while let Some(message) = requests.next().await {
                let Some(reply) = message.reply.clone() else {
                    continue;
                };
                if message.expired() {
                    continue;
                }
                let request = match TakeoverRequest::decode(&message.payload) {
                    Ok(request) => request,
                    Err(_) => {
                        this.refuse("malformed");
                        continue;
                    }
                };
                match request.step {
                    TakeoverStep::Prepare => {
                        let answer = this.prepare(&request);
                        this.answer(&reply, answer);
                    }
                    TakeoverStep::Commit => {
                        let Ok(permit) = this.in_flight.clone().try_acquire_owned() else {
                            this.refuse("busy");
                            this.answer(&reply, refused(TakeoverRefusal::Busy));
                            continue;
                        };
                        let this = this.clone();
                        tokio::spawn(async move {
                            let answer = this.commit(&request, &message).await;
                            this.answer(&reply, answer);
                            drop(permit);
                        });
                    }
                }
            }
        }))
    }

    fn answer(&self, reply: &str, answer: TakeoverAnswer) {
        let bytes = match serde_json::to_vec(&TakeoverReply::new(answer)) {
            Ok(bytes) => bytes,
            Err(_) => return,
        };
        // Checked here, not left to the bus: a handoff too large for one
        // message is refused in so many words, and the taker's op 9 comes
        // at once instead of after its timeout.
        let bytes = if bytes.len() > self.limits.bus_payload_bytes_max {
            self.refuse("too_large");
            match serde_json::to_vec(&TakeoverReply::new(refused(TakeoverRefusal::TooLarge))) {
                Ok(bytes) => bytes,
                Err(_) => return,
            }
        } else {
            bytes
        };
        let _ = self.bus.publish(reply, None, bytes.into());
    }

    /// The session named by `request`, if it is here and its user's.
    fn session(&self, request: &TakeoverRequest) -> Result<Arc<Slot>, TakeoverRefusal> {
        match self.hub.get(&request.session_id) {
            // Another user's session answers like an unknown one.
            Some(slot) if slot.user_id == request.user_id => Ok(slot),
            _ => Err(TakeoverRefusal::Unknown),
        }
    }

    fn replayable(slot: &Slot, seq: Option<u64>) -> Result<(), TakeoverRefusal> {
        slot.can_replay(seq).map_err(|e| match e {
            ReplayError::Gap => TakeoverRefusal::Gap,
            ReplayError::FromTheFuture => TakeoverRefusal::FromTheFuture,
        })
    }

    fn prepare(&self, request: &TakeoverRequest) -> TakeoverAnswer {
        let checked = self.session(request).and_then(|slot| {
            Self::replayable(&slot, request.seq)?;
            if slot.is_moving() {
                return Err(TakeoverRefusal::Busy);
            }
            Ok(slot)
        });
        match checked {
            Ok(slot) => TakeoverAnswer::Prepared {
                intents: slot.intents,
                shard: slot.shard,
                large_threshold: slot.large_threshold,
                guilds: self.hub.guilds_of(&slot.id),
            },
            Err(reason) => {
                self.refuse("prepare");
                refused(reason)
            }
        }
    }

    async fn commit(&self, request: &TakeoverRequest, message: &Message) -> TakeoverAnswer {
        let slot = match self.session(request) {
            Ok(slot) => slot,
            Err(reason) => {
                self.refuse("commit_unknown");
                return refused(reason);
            }
        };
        if let Err(reason) = Self::replayable(&slot, request.seq) {
            self.refuse("commit_replay");
            return refused(reason);
        }
        let guilds = self.hub.guilds_of(&slot.id);
        if !slot.begin_move(&guilds, guildhall_common::state::now_ms()) {
            self.refuse("moving");
            return refused(TakeoverRefusal::Busy);
        }
        for guild_id in &guilds {
            if self
                .subscriptions
                .move_session(*guild_id, &slot, &request.to_node)
                .await
                .is_err()
            {
                // The owner could not take the request: nothing will
                // confirm it; it is handed over unconfirmed below.
                guildhall_common::throttled!(
                    warn,
                    "takeover.move_refused",
                    guild_id,
                    "guild owner could not take a session move"
                );
            }
        }
        // Never past the taker's own deadline for this answer.
        let mut wait = Duration::from_millis(self.limits.session_move_timeout_ms);
        if let Some(deadline) = message.deadline {
            wait = wait.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        }
        let unconfirmed = slot.move_confirmations(wait).await;
        // Whatever the owners still send this node for the session finds
        // no slot: the taker has it from here on.
        self.hub.forget(&slot.id);
        for guild_id in &unconfirmed {
            self.subscriptions
                .unsubscribe(*guild_id, slot.id.clone())
                .await;
        }
        self.counters
            .unconfirmed_guilds_total
            .fetch_add(unconfirmed.len() as u64, Ordering::Relaxed);
        let (seq, frames) = match slot.handoff(request.seq) {
            Ok(handoff) => handoff,
            // The buffer overflowed while the move ran.
            Err(_) => {
                self.refuse("commit_gap");
                return refused(TakeoverRefusal::Gap);
            }
        };
        let frames = frames
            .into_iter()
            .filter_map(|(seq, event)| {
                let (name, data) = event.parts()?;
                let data = serde_json::value::RawValue::from_string(data.to_owned()).ok()?;
                Some(HandoffFrame {
                    seq,
                    name: name.to_owned(),
                    data,
                })
            })
            .collect();
        self.counters.given_total.fetch_add(1, Ordering::Relaxed);
        let confirmed = guilds
            .iter()
            .copied()
            .filter(|g| !unconfirmed.contains(g))
            .collect();
        TakeoverAnswer::Committed(SessionHandoff {
            seq,
            frames,
            guilds: confirmed,
            resubscribe: unconfirmed,
        })
    }

    async fn ask(
        &self,
        holder: &str,
        request: &TakeoverRequest,
    ) -> Result<TakeoverAnswer, TakeoverRefusal> {
        let bytes = serde_json::to_vec(request).map_err(|_| TakeoverRefusal::Unknown)?;
        let timeout = Duration::from_millis(self.limits.session_takeover_timeout_ms);
        let message = self
            .bus
            .request(&session_takeover_subject(holder), bytes.into(), timeout)
            .await
            // No answer in time (or nobody listening): the holder is
            // taken for dead.
            .map_err(|_| TakeoverRefusal::Unknown)?;
        TakeoverReply::decode(&message.payload)
            .map(|reply| reply.body)
            .map_err(|_| TakeoverRefusal::Unknown)
    }

    /// A RESUME here of a session this node does not hold: takes it from
    /// the node that does. `Ok` is an attached-ready slot (adopted, with
    /// the missed dispatches in its replay buffer); the caller resumes it
    /// like a local one.
    pub async fn take(
        &self,
        session_id: &str,
        user_id: i64,
        seq: Option<u64>,
    ) -> Result<Arc<Slot>, TakeoverRefusal> {
        let holder = holder_tag(session_id).and_then(|tag| self.cluster.gateway_by_tag(tag));
        let Some(holder) = holder.filter(|h| *h != self.node_name) else {
            self.counters
                .unknown_holder_total
                .fetch_add(1, Ordering::Relaxed);
            guildhall_common::throttled!(
                info,
                "takeover.unknown_holder",
                "RESUME of a session no live gateway node holds"
            );
            return Err(TakeoverRefusal::Unknown);
        };
        let result = self.take_from(&holder, session_id, user_id, seq).await;
        match &result {
            Ok(_) => self.counters.taken_total.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counters.failed_total.fetch_add(1, Ordering::Relaxed),
        };
        result
    }

    async fn take_from(
        &self,
        holder: &str,
        session_id: &str,
        user_id: i64,
        seq: Option<u64>,
    ) -> Result<Arc<Slot>, TakeoverRefusal> {
        let mut request = TakeoverRequest {
            v: ENVELOPE_VERSION,
            step: TakeoverStep::Prepare,
            session_id: session_id.to_owned(),
            user_id,
            seq,
            to_node: self.node_name.clone(),
        };
        let (intents, shard, large_threshold, guilds) = match self.ask(holder, &request).await? {
            TakeoverAnswer::Prepared {
                intents,
                shard,
                large_threshold,
                guilds,
            } => (intents, shard, large_threshold, guilds),
            TakeoverAnswer::Refused(reason) => return Err(reason),
            TakeoverAnswer::Committed(_) => return Err(TakeoverRefusal::Unknown),
        };
        if guilds.len() > self.limits.ready_guilds_max {
            return Err(TakeoverRefusal::Unknown);
        }
        let slot = self
            .hub
            .register_adopting(
                session_id.to_owned(),
                user_id,
                intents,
                crate::hub::SessionOptions {
                    shard,
                    // The holder's value was read through the same rule; a
                    // forged one is brought back within Discord's bounds.
                    large_threshold: guildhall_proto::gateway::large_threshold(Some(
                        large_threshold.into(),
                    )),
                },
                guildhall_common::state::now_ms(),
            )
            .ok_or(TakeoverRefusal::Busy)?;
        // The session's guilds are not recorded here as wanted before the
        // commit: until an owner moves the session here (`Adopt` in the
        // guild's stream) or the handoff names a guild to subscribe
        // afresh, the holder alone speaks for it. A new owner that asks
        // every gateway node which sessions follow its guild meanwhile
        // then hears of it once; had both nodes answered, it would
        // subscribe the session on both, the holder would record the
        // guild's events and this node hold them too, and the RESUME would
        // replay each twice.
        request.step = TakeoverStep::Commit;
        let answer = self.ask(holder, &request).await;
        let adopted = match answer {
            Ok(TakeoverAnswer::Committed(handoff)) => self.adopt(&slot, seq, handoff).await,
            Ok(TakeoverAnswer::Refused(reason)) => Err(reason),
            _ => Err(TakeoverRefusal::Unknown),
        };
        if adopted.is_err() {
            // The owners may already send the session here (an `Adopt`
            // came): tell them it is gone, and forget it.
            let mut gone = self.hub.forget(session_id);
            gone.extend(
                guilds
                    .iter()
                    .filter(|g| !gone.contains(g))
                    .collect::<Vec<_>>(),
            );
            for guild_id in gone {
                self.subscriptions
                    .unsubscribe(guild_id, session_id.to_owned())
                    .await;
            }
        }
        adopted.map(|()| slot)
    }

    async fn adopt(
        &self,
        slot: &Arc<Slot>,
        client_seq: Option<u64>,
        handoff: SessionHandoff,
    ) -> Result<(), TakeoverRefusal> {
        let bounded = handoff.frames.len() <= self.limits.replay_buffer_events_max
            && handoff.guilds.len() + handoff.resubscribe.len() <= self.limits.ready_guilds_max;
        let frames = handoff
            .frames
            .iter()
            .map(|f| (f.seq, EncodedDispatch::from_json(&f.name, f.data.get())))
            .collect();
        if !bounded
            || !slot.adopt(
                client_seq,
                handoff.seq,
                frames,
                self.limits.replay_buffer_bytes_max,
            )
        {
            guildhall_common::throttled!(
                warn,
                "takeover.bad_handoff",
                "session handoff did not line up; client re-identifies"
            );
            return Err(TakeoverRefusal::Gap);
        }
        self.hub.adopted(slot);
        let pairs = handoff
            .resubscribe
            .into_iter()
            .map(|guild_id| (guild_id, slot.clone()))
            .collect();
        self.subscriptions.subscribe_watched(pairs).await;
        Ok(())
    }
}
