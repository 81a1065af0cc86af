//! The gateway role: WebSocket sessions.
//!
//! Admission happens before the 101: a node over its session cap, or over
//! its handshake rate for longer than a short hold, answers 503 with
//! `Retry-After` (client libraries back off after a refused upgrade but spin
//! after accept-then-close). An admitted socket gets one task, which drives
//! the pure [`Session`] state machine and carries out its commands.
//!
//! Writes are coalesced: the task feeds every queued frame to the socket and
//! flushes once per wake-up. Control messages (close, drain) arrive on their
//! own channel, checked first.

use crate::guilds::{GuildCall, GuildDirectory, MemberPage, wire_user};
use crate::hub::{CONTROL_CHANNEL_CAPACITY, Control, Hub, Slot};
use crate::state::{Shared, now_ms, sf};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::{SinkExt, StreamExt};
use guildhall_control::admission::{Decision, HandshakeAdmission, HandshakeBounds};
use guildhall_proto::gateway::{self, CloseCode, EncodedDispatch, OneOrMany, RequestGuildMembers};
use guildhall_proto::intents;
use guildhall_proto::model::{PartialApplication, Ready, UnavailableGuild};
use guildhall_session::machine::{
    AuthFailure, Command, Identity, ResumeFailure, Session, SessionConfig,
};
use guildhall_session::queue::Outbound;
use guildhall_session::replay::ReplayError;
use guildhall_store::UserRow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// Application flags that enable the privileged intents (the `_LIMITED`
/// variants, which Discord gives unverified applications).
pub mod app_flags {
    /// GATEWAY_PRESENCE_LIMITED.
    pub const PRESENCE: i64 = 1 << 13;
    /// GATEWAY_GUILD_MEMBERS_LIMITED.
    pub const GUILD_MEMBERS: i64 = 1 << 15;
    /// GATEWAY_MESSAGE_CONTENT_LIMITED.
    pub const MESSAGE_CONTENT: i64 = 1 << 19;
    /// New applications may use every privileged intent.
    pub const DEFAULT: i64 = PRESENCE | GUILD_MEMBERS | MESSAGE_CONTENT;
}

/// Frames a socket task writes per wake-up before it flushes (bounds the
/// time one busy session holds its worker).
pub const WRITE_BATCH_FRAMES_MAX: usize = 64;

/// Counters of the gateway role.
#[derive(Debug, Default)]
pub struct GatewayCounters {
    /// Upgrades refused by admission.
    pub refused_upgrades_total: AtomicU64,
    /// Sessions closed, by close code (index: code − 4000).
    pub closes_by_code: [AtomicU64; 16],
    /// Sockets currently open.
    pub sockets_open: AtomicUsize,
    /// READY sent.
    pub ready_total: AtomicU64,
    /// RESUMED sent.
    pub resumed_total: AtomicU64,
    /// IDENTIFY received → READY queued.
    pub identify_to_ready_seconds: crate::histogram::Histogram,
}

/// Handshake admission: the control crate's [`HandshakeAdmission`] decides
/// (admit, hold in a reserved slot, refuse with `Retry-After`); this only
/// carries out a hold. A client that leaves while held wastes its slot,
/// which only admits a little below the rate.
pub struct Admission {
    decide: std::sync::Mutex<HandshakeAdmission>,
}

impl Admission {
    /// Admission for these limits.
    pub fn new(limits: &guildhall_limits::Limits) -> Self {
        Self {
            decide: std::sync::Mutex::new(HandshakeAdmission::new(HandshakeBounds {
                rate_per_s: limits.handshake_rate_per_s,
                hold_ms_max: limits.handshake_hold_ms_max,
                sessions_max: limits.sessions_per_node_max,
                sessions_full_retry_after_s: limits.sessions_full_retry_after_s,
                retry_after_s_max: limits.handshake_retry_after_s_max,
            })),
        }
    }

    /// Waits out a hold if there is one; `Err(retry_after_s)` to refuse the
    /// upgrade.
    pub async fn admit(&self, sessions: usize) -> Result<(), u64> {
        let decision = self
            .decide
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .decide(now_ms(), sessions, crate::auth::random_unit());
        match decision {
            Decision::Admit => Ok(()),
            Decision::Hold { wait_ms } => {
                tokio::time::sleep(Duration::from_millis(wait_ms)).await;
                Ok(())
            }
            Decision::Refuse { retry_after_s } => Err(retry_after_s),
        }
    }
}

/// What a socket task needs.
pub struct Gateway {
    /// Shared state.
    pub shared: Arc<Shared>,
    /// This node's sessions.
    pub hub: Arc<Hub>,
    /// Guild owners.
    pub guilds: Arc<GuildDirectory>,
    /// Token resolution.
    pub users: Arc<crate::users::Users>,
    /// Counters.
    pub counters: GatewayCounters,
    /// Admission.
    pub admission: Admission,
    /// The bus (presence messages).
    pub bus: Arc<dyn guildhall_cluster::Bus>,
    /// Presence counters.
    pub presence: Arc<crate::presence::PresenceCounters>,
}

async fn authenticate(
    shared: &Shared,
    users: &Arc<crate::users::Users>,
    token: &str,
) -> Result<(UserRow, Identity), AuthFailure> {
    let digest = crate::auth::token_digest(token);
    let user = match users.by_token(digest).await {
        Ok(Some(user)) => user,
        Ok(None) => return Err(AuthFailure::BadToken),
        Err(_) => return Err(AuthFailure::Overloaded),
    };
    let allowed = if user.bot {
        let flags = match shared.store.application_by_bot(user.id).await {
            Ok(app) => app.map_or(0, |a| a.flags),
            Err(_) => return Err(AuthFailure::Overloaded),
        };
        let mut allowed = 0;
        if flags & app_flags::PRESENCE != 0 {
            allowed |= intents::GUILD_PRESENCES;
        }
        if flags & app_flags::GUILD_MEMBERS != 0 {
            allowed |= intents::GUILD_MEMBERS;
        }
        if flags & app_flags::MESSAGE_CONTENT != 0 {
            allowed |= intents::MESSAGE_CONTENT;
        }
        allowed
    } else {
        intents::PRIVILEGED
    };
    let identity = Identity {
        user_id: sf(user.id),
        privileged_intents_allowed: allowed,
    };
    Ok((user, identity))
}

struct Socket {
    sink: futures_util::stream::SplitSink<WebSocket, Message>,
}

impl Socket {
    async fn send(&mut self, text: String) -> bool {
        self.sink
            .send(Message::Text(Utf8Bytes::from(text)))
            .await
            .is_ok()
    }

    async fn close(&mut self, code: CloseCode) {
        let frame = CloseFrame {
            code: code.code(),
            reason: Utf8Bytes::from_static(code.reason()),
        };
        let _ = self.sink.send(Message::Close(Some(frame))).await;
    }
}

impl Gateway {
    fn count_close(&self, code: CloseCode) {
        let index = usize::from(code.code() - 4000).min(15);
        self.counters.closes_by_code[index].fetch_add(1, Ordering::Relaxed);
    }

    async fn ready(
        &self,
        identity: Identity,
        intents: u64,
        shard: Option<[u32; 2]>,
        user: &UserRow,
        out: &mpsc::Sender<Outbound>,
        control: &mpsc::Sender<Control>,
    ) -> Result<Arc<Slot>, CloseCode> {
        let guild_ids = self
            .shared
            .store
            .guild_ids_of(user.id, self.shared.limits.ready_guilds_max as i64 + 1)
            .await
            .map_err(|_| CloseCode::UnknownError)?;
        if guild_ids.len() > self.shared.limits.ready_guilds_max {
            return Err(CloseCode::ShardingRequired);
        }
        let session_id = crate::auth::random_hex().map_err(|_| CloseCode::UnknownError)?;
        let slot = self
            .hub
            .register(session_id, user.id, intents, out.clone(), control.clone());
        let application_id = if user.bot {
            user.id
        } else {
            identity.user_id.get() as i64
        };
        let ready = Ready {
            v: 10,
            user: wire_user(user),
            guilds: guild_ids
                .iter()
                .map(|id| UnavailableGuild {
                    id: sf(*id),
                    unavailable: true,
                })
                .collect(),
            session_id: slot.id.clone(),
            resume_gateway_url: self.shared.gateway_url.clone(),
            shard,
            application: PartialApplication {
                id: sf(application_id),
                flags: 0,
            },
            private_channels: vec![],
            relationships: vec![],
            presences: vec![],
            guild_join_requests: vec![],
            user_settings: Default::default(),
        };
        let event = EncodedDispatch::new("READY", &ready).map_err(|_| CloseCode::UnknownError)?;
        slot.dispatch(&event, &self.hub.counters);
        self.counters.ready_total.fetch_add(1, Ordering::Relaxed);
        self.presence(&slot, Some("online"));
        // Each guild's owner queues its GUILD_CREATE, then subscribes: no
        // event of the guild can overtake it. One that does not arrive is
        // asked for again off this path (the session is never held up).
        self.guilds.subscribe_ready(&slot, guild_ids).await;
        Ok(slot)
    }

    /// Op 8: GUILD_MEMBERS_CHUNK pages of at most `members_per_page_max`,
    /// fetched from the guild owner one page at a time (never the whole
    /// member list in memory), with `chunk_count` known from the first page.
    /// `limit: 0` with an empty query means every member, as Discord does.
    async fn request_members(&self, slot: &Arc<Slot>, request: RequestGuildMembers) {
        let guild_id = request.guild_id.get() as i64;
        let user_ids: Vec<i64> = match request.user_ids {
            None => vec![],
            Some(OneOrMany::One(id)) => vec![id.get() as i64],
            Some(OneOrMany::Many(ids)) => ids.iter().map(|id| id.get() as i64).collect(),
        };
        let page_max = self.shared.limits.members_per_page_max.max(1);
        let wanted = match (request.limit, user_ids.len()) {
            (_, n) if n > 0 => n,
            (0, _) => usize::MAX,
            (limit, _) => limit as usize,
        };
        let query = request.query.unwrap_or_default();
        let (mut after, mut index, mut sent) = (0i64, 0usize, 0usize);
        loop {
            let (user_id, query, ids) = (slot.user_id, query.clone(), user_ids.clone());
            let limit = page_max.min(wanted - sent);
            let page = self
                .guilds
                .members(guild_id, user_id, query, ids, after, limit)
                .await
                .unwrap_or(MemberPage {
                    members: vec![],
                    matching: 0,
                });
            let total = page.matching.min(wanted);
            let count = total.div_ceil(page_max).max(1);
            let returned: Vec<i64> = page
                .members
                .iter()
                .filter_map(|m| m.user.as_ref().map(|u| u.id.get() as i64))
                .collect();
            let mut chunk = serde_json::json!({
                "guild_id": request.guild_id,
                "members": page.members,
                "chunk_index": index,
                "chunk_count": count,
                "not_found": user_ids.iter().filter(|id| index + 1 == count && !returned.contains(id)).map(ToString::to_string).collect::<Vec<_>>(),
            });
            if let Some(nonce) = &request.nonce {
                chunk["nonce"] = serde_json::Value::String(nonce.clone());
            }
            if let Ok(event) = EncodedDispatch::new("GUILD_MEMBERS_CHUNK", &chunk) {
                slot.dispatch(&event, &self.hub.counters);
            }
            sent += returned.len();
            index += 1;
            match returned.last() {
                Some(last) if index < count && sent < total => after = *last,
                _ => break,
            }
        }
    }

    /// Op 3 (and READY, and the session's end): one message to the
    /// presence role, which fans the user's status out to their guilds.
    /// Never awaited: presence is off the session's critical path.
    fn presence(&self, slot: &Slot, status: Option<&str>) {
        crate::presence::publish(
            self.bus.as_ref(),
            &self.presence,
            slot.user_id,
            &slot.id,
            status,
        );
    }

    /// A reaped session's presence ends.
    pub fn presence_gone(&self, slot: &Slot) {
        self.presence(slot, None);
    }

    /// Op 4: the guild owner records and publishes the voice state; the
    /// session gets VOICE_SERVER_UPDATE. `endpoint` is null: no SFU is
    /// allocated by this node (the voice role is not built yet), which
    /// Discord's documentation allows and libraries wait on.
    async fn voice(&self, slot: &Arc<Slot>, voice: gateway::VoiceStateUpdate) {
        let guild_id = voice.guild_id.get() as i64;
        let channel_id = voice.channel_id.map(|c| c.get() as i64);
        let (user_id, session_id) = (slot.user_id, slot.id.clone());
        let result = self
            .guilds
            .voice(
                guild_id,
                GuildCall::Voice {
                    user_id,
                    session_id,
                    channel_id,
                    self_mute: voice.self_mute,
                    self_deaf: voice.self_deaf,
                },
            )
            .await;
        if result.is_ok()
            && channel_id.is_some()
            && let Ok(token) = crate::auth::random_hex()
        {
            let data = serde_json::json!({"token": token, "guild_id": guild_id.to_string(), "endpoint": null});
            if let Ok(event) = EncodedDispatch::new("VOICE_SERVER_UPDATE", &data) {
                slot.dispatch(&event, &self.hub.counters);
            }
        }
    }

    /// Runs one socket until it closes.
    pub async fn run(self: Arc<Self>, socket: WebSocket) {
        self.counters.sockets_open.fetch_add(1, Ordering::Relaxed);
        let limits = &self.shared.limits;
        let config = SessionConfig {
            heartbeat_interval_ms: limits.heartbeat_interval_ms,
            heartbeat_timeout_ms: limits.heartbeat_timeout_ms,
            payload_bytes_max: limits.gateway_payload_bytes_max,
            inbound_per_minute_max: limits.gateway_inbound_per_minute_max,
        };
        let (out_tx, mut out_rx) = mpsc::channel::<Outbound>(limits.session_queue_messages_max);
        let (control_tx, mut control_rx) = mpsc::channel::<Control>(CONTROL_CHANNEL_CAPACITY);
        let (sink, mut stream) = socket.split();
        let mut socket = Socket { sink };
        let (mut session, hello) = Session::new(config, now_ms());
        let mut slot: Option<Arc<Slot>> = None;
        let mut pending: VecDeque<Command> = VecDeque::from([hello]);
        let mut scratch = Vec::new();
        let mut user: Option<UserRow> = None;
        let mut identify_started: Option<std::time::Instant> = None;
        let mut tick = tokio::time::interval(Duration::from_millis(
            (limits.heartbeat_interval_ms / 4).max(250),
        ));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        'socket: loop {
            while let Some(command) = pending.pop_front() {
                match command {
                    Command::Send(text) => {
                        if !socket.send(text).await {
                            break 'socket;
                        }
                    }
                    Command::Close(code) => {
                        self.count_close(code);
                        socket.close(code).await;
                        break 'socket;
                    }
                    Command::Authenticate(identify) => {
                        identify_started = Some(std::time::Instant::now());
                        let result = authenticate(&self.shared, &self.users, &identify.token).await;
                        let result = result.map(|(row, identity)| {
                            user = Some(row);
                            identity
                        });
                        session.identified(result, &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Command::SendReady {
                        identity,
                        intents,
                        shard,
                    } => {
                        let Some(row) = user.clone() else { continue };
                        match self
                            .ready(identity, intents, shard, &row, &out_tx, &control_tx)
                            .await
                        {
                            Ok(s) => {
                                if let Some(started) = identify_started.take() {
                                    let us = started.elapsed().as_micros() as u64;
                                    self.counters.identify_to_ready_seconds.record_us(us);
                                }
                                slot = Some(s);
                            }
                            Err(code) => pending.push_front(Command::Close(code)),
                        }
                    }
                    Command::Resume(resume) => {
                        let result = match (
                            authenticate(&self.shared, &self.users, &resume.token).await,
                            self.hub.get(&resume.session_id),
                        ) {
                            (Ok((_, identity)), Some(s))
                                if s.user_id == identity.user_id.get() as i64 =>
                            {
                                match s.resume(resume.seq, out_tx.clone(), control_tx.clone()) {
                                    Ok(missed) => {
                                        for (seq, event) in missed {
                                            if !socket.send(event.frame(seq)).await {
                                                break 'socket;
                                            }
                                        }
                                        if let Ok(resumed) =
                                            EncodedDispatch::new("RESUMED", &serde_json::json!({}))
                                        {
                                            s.dispatch(&resumed, &self.hub.counters);
                                        }
                                        self.counters.resumed_total.fetch_add(1, Ordering::Relaxed);
                                        let intents = s.intents;
                                        slot = Some(s);
                                        Ok(intents)
                                    }
                                    Err(ReplayError::Gap) => Err(ResumeFailure::Invalid),
                                    Err(ReplayError::FromTheFuture) => {
                                        Err(ResumeFailure::InvalidSeq)
                                    }
                                }
                            }
                            (Err(AuthFailure::BadToken), _) => {
                                pending.push_front(Command::Close(CloseCode::AuthenticationFailed));
                                continue;
                            }
                            _ => Err(ResumeFailure::Invalid),
                        };
                        session.resumed(result, &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Command::RequestGuildMembers(request) => {
                        if let Some(s) = &slot {
                            self.request_members(s, request).await;
                        }
                    }
                    Command::PresenceUpdate(presence) => {
                        if let Some(s) = &slot {
                            self.presence(s, Some(&presence.status));
                        }
                    }
                    Command::VoiceStateUpdate(voice) => {
                        if let Some(s) = &slot {
                            self.voice(s, voice).await;
                        }
                    }
                }
            }
            tokio::select! {
                biased;
                control = control_rx.recv() => match control {
                    Some(Control::Close(code)) => pending.push_back(Command::Close(code)),
                    Some(Control::Reconnect) => {
                        pending.push_back(Command::Send(gateway::reconnect_frame().to_owned()));
                        pending.push_back(Command::Close(CloseCode::UnknownError));
                    }
                    None => {}
                },
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        session.on_text(now_ms(), text.as_bytes(), &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Some(Ok(Message::Binary(_))) => {
                        session.on_binary(&mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break 'socket,
                },
                first = out_rx.recv() => {
                    let Some(first) = first else { continue };
                    let (mut written, mut frames) = (0usize, 0usize);
                    let mut frame = Some(first);
                    while let Some(outbound) = frame.take() {
                        written += outbound.len_bytes();
                        frames += 1;
                        if socket.sink.feed(Message::Text(Utf8Bytes::from(outbound.into_text()))).await.is_err() {
                            break 'socket;
                        }
                        if frames < WRITE_BATCH_FRAMES_MAX {
                            frame = out_rx.try_recv().ok();
                        }
                    }
                    if let Some(s) = &slot {
                        let _ = s.queued_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_sub(written)));
                    }
                    if socket.sink.flush().await.is_err() {
                        break 'socket;
                    }
                },
                _ = tick.tick() => {
                    session.on_tick(now_ms(), &mut scratch);
                    pending.extend(scratch.drain(..));
                },
            }
        }
        if let Some(s) = slot {
            s.detach(now_ms());
        }
        self.counters.sockets_open.fetch_sub(1, Ordering::Relaxed);
    }
}
