//! The gateway role: WebSocket sessions.
//!
//! Admission happens before the 101: a node over its session cap, or over
//! its handshake rate for longer than a short hold, answers 503 with
//! `Retry-After` (client libraries back off after a refused upgrade but spin
//! after accept-then-close). Every open socket counts against the session
//! cap until it has a hub session (which then counts instead), so sockets
//! that never identify cannot fill a node. An admitted socket gets one task,
//! which drives the pure [`Session`] state machine and carries out its
//! commands, and a writer task of its own.
//!
//! Why a separate writer: a client that stops reading blocks writes for as
//! long as it likes, and a task blocked on a write sees neither its control
//! channel (the slow-consumer close) nor the clock (heartbeat timeout) nor
//! the client. So the socket task never awaits the socket's sink: it queues
//! frames (the bounded [`Outlet`]; full means slow consumer) and asks the
//! writer to finish. The writer coalesces (feeds up to
//! [`WRITE_BATCH_FRAMES_MAX`] queued frames, flushes once) and puts every
//! batch and the closing frame under `session_write_stall_ms_max`: past it
//! the socket is dropped without a close frame. The socket task waits for
//! the writer's close at most that long too, so a session told to close is
//! gone within the bound whatever the client does.
//!
//! Compression is the writer's last step ([`Encoder`]): the frame is
//! encoded once per event for all sessions, and a socket that asked for
//! `compress=zlib-stream` (or identified with `compress: true`) runs it
//! through its own compressor (`zstd-stream` too), at most `gateway_compressors_max`
//! of them per node.
//!
//! Op 8 runs in a task of its own per request (at most
//! `session_member_requests_max` per session; more are answered with
//! RATE_LIMITED), paced by the session's queue so its chunks never make the
//! session a slow consumer, while the writer keeps draining.
//!
//! The role's modules: [`hub`] (this node's sessions and local fanout),
//! [`takeover`] (RESUME on any gateway node), [`events`] (this node's guild
//! event streams on the bus: numbered, gap-checked, resynchronised),
//! [`subscriptions`] (which guilds each session here follows) and
//! [`compress`] (the URL's query, the writer's deflate and zstd) and
//! [`upgrade`] (the HTTP edge: admission before the 101).
//! It depends on `guildhall-common` and on no other role: tokens are
//! looked up through `guildhall_common::users::TokenLookups`, guild owners
//! called through `guildhall_common::guilds::GuildsClient`.

pub mod compress;
pub mod events;
pub mod hub;
pub mod subscriptions;
pub mod takeover;
pub mod upgrade;

use crate::compress::{Deflater, Stream, Transport, WireQuery};
use crate::hub::{CONTROL_CHANNEL_CAPACITY, Control, Hub, Inlet, Outlet, Slot};
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket};
use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use guildhall_common::guilds::GuildsClient;
use guildhall_common::state::{Shared, now_ms, sf};
use guildhall_common::wire::wire_user;
use guildhall_control::admission::{Decision, HandshakeAdmission, HandshakeBounds};
use guildhall_control::retry::{RetryBudget, backoff_full_jitter_ms};
use guildhall_proto::bus::TakeoverRefusal;
use guildhall_proto::gateway::{self, CloseCode, EncodedDispatch, OneOrMany, RequestGuildMembers};
use guildhall_proto::guilds::{GuildCall, MemberPage};
use guildhall_proto::intents::{self, app_flags};
use guildhall_proto::model::{self, PartialApplication, Ready, UnavailableGuild};
use guildhall_session::machine::{
    AuthFailure, Command, Identity, ResumeFailure, Session, SessionConfig,
};
use guildhall_session::queue::Outbound;
use guildhall_session::replay::ReplayError;
use guildhall_store::{IdentifyBucket, SessionStart, UserRow};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// Frames a socket's writer writes per wake-up before it flushes (bounds the
/// time one busy session holds its worker).
pub const WRITE_BATCH_FRAMES_MAX: usize = 64;

/// `retry_after` of the RATE_LIMITED answer to an op 8 over
/// `session_member_requests_max`: a hint, not a bound (the running request
/// may finish sooner or later). One second keeps a client that retries as
/// told from spinning without holding its member cache back for long.
const MEMBER_REQUEST_RETRY_AFTER_S: f64 = 1.0;

/// Counters of the gateway role.
#[derive(Debug, Default)]
pub struct GatewayCounters {
    /// Upgrades refused by admission.
    pub refused_upgrades_total: AtomicU64,
    /// Sessions closed, by close code (index: code − 4000).
    pub closes_by_code: [AtomicU64; 16],
    /// Sockets currently open.
    pub sockets_open: AtomicUsize,
    /// Open sockets without a hub session yet (counted by admission).
    pub sockets_unattached: AtomicUsize,
    /// Sockets dropped because a write waited past
    /// `session_write_stall_ms_max`.
    pub write_stalls_total: AtomicU64,
    /// Op 8 requests answered with RATE_LIMITED.
    pub member_requests_refused_total: AtomicU64,
    /// Sockets closed with 1002, 1007 or 1009 for a frame the WebSocket
    /// layer refused.
    pub protocol_error_closes_total: AtomicU64,
    /// READY sent.
    pub ready_total: AtomicU64,
    /// RESUMED sent.
    pub resumed_total: AtomicU64,
    /// Live deflate compressors (`gateway_compressors_max`).
    pub compressors: Arc<crate::compress::Compressors>,
    /// Transport-compressed upgrades refused: no compressor free.
    pub compressed_upgrades_refused_total: AtomicU64,
    /// IDENTIFYs with `compress: true` served plain: no compressor free.
    pub payload_compression_declined_total: AtomicU64,
    /// `encoding=etf` frames that were no payload (closed with 4002).
    pub etf_undecodable_total: AtomicU64,
    /// Upgrades refused with 400 for their `encoding` or `compress`.
    pub query_refused_total: AtomicU64,
    /// IDENTIFY received → READY queued.
    pub identify_to_ready_seconds: guildhall_common::histogram::Histogram,
    /// VOICE_SERVER_UPDATEs sent with an SFU's endpoint.
    pub voice_servers_total: AtomicU64,
    /// Op 4 received → VOICE_SERVER_UPDATE queued (the voice role's and
    /// the SFU's part of a join).
    pub voice_server_seconds: guildhall_common::histogram::Histogram,
    /// Voice joins the voice role refused (budget, capacity, SFUs).
    pub voice_refused_total: AtomicU64,
    /// Voice requests the voice role did not answer in time.
    pub voice_unanswered_total: AtomicU64,
    /// Op 4s dropped: the session's voice worker had
    /// `session_voice_requests_max` waiting.
    pub voice_dropped_total: AtomicU64,
    /// Op 4s the guild owner did not take (each attempt): busy, gone, too
    /// slow, or refused (no access, no channel, no CONNECT).
    pub voice_owner_failures_total: AtomicU64,
    /// Op 4 steps tried again (`voice_attempts_max`).
    pub voice_retries_total: AtomicU64,
    /// Op 4s left without their answer: attempts or retry budget spent.
    pub voice_gave_up_total: AtomicU64,
    /// Bot IDENTIFYs admitted uncounted: the store tracked
    /// `session_start_bots_max` bots already.
    pub session_starts_untracked_total: AtomicU64,
    /// Bots past their session start limit: token reset, sessions ended.
    pub session_limit_resets_total: AtomicU64,
    /// Bot IDENTIFYs answered with INVALID_SESSION: their
    /// `max_concurrency` bucket admitted one within the window.
    pub identify_concurrency_refused_total: AtomicU64,
    /// Bot IDENTIFYs admitted outside `max_concurrency`: the store tracked
    /// `session_start_bots_max` buckets already.
    pub identify_buckets_untracked_total: AtomicU64,
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
            .decide(now_ms(), sessions, guildhall_common::auth::random_unit());
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
    pub guilds: Arc<GuildsClient>,
    /// This node's sessions' guild subscriptions.
    pub subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// Token resolution.
    pub users: Arc<dyn guildhall_common::users::TokenLookups>,
    /// Counters.
    pub counters: GatewayCounters,
    /// Admission.
    pub admission: Admission,
    /// The bus (presence messages).
    pub bus: Arc<dyn guildhall_cluster::Bus>,
    /// Presence counters.
    pub presence: Arc<guildhall_common::presence::PresenceCounters>,
    /// What the node knows of the cluster (READY's `resume_gateway_url`).
    pub cluster: Arc<guildhall_common::cluster::ClusterState>,
    /// Cross-node RESUME.
    pub takeovers: Arc<crate::takeover::Takeovers>,
    /// Bounds op 4 retries across the node's sessions (`retry_budget_*`),
    /// so an owner or voice role in trouble is not met with a retry storm.
    pub voice_budget: std::sync::Mutex<RetryBudget>,
}

/// A task aborted when its handle is dropped (a socket's voice worker
/// ends with the socket).
pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who a token is, with the privileged intents they may use and their
/// application's flags (0 for a user; READY's `application.flags`, read
/// here once with the intents they decide).
async fn authenticate(
    shared: &Shared,
    users: &Arc<dyn guildhall_common::users::TokenLookups>,
    token: &str,
) -> Result<(UserRow, Identity, i64), AuthFailure> {
    let digest = guildhall_common::auth::token_digest(token);
    let user = match users.by_token(digest).await {
        Ok(Some(user)) => user,
        Ok(None) => return Err(AuthFailure::BadToken),
        Err(_) => return Err(AuthFailure::Overloaded),
    };
    let mut app_flags = 0;
    let allowed = if user.bot {
        let flags = match shared.store.application_by_bot(user.id).await {
            Ok(app) => app.map_or(0, |a| a.flags),
            Err(_) => return Err(AuthFailure::Overloaded),
        };
        app_flags = flags;
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
    Ok((user, identity, app_flags))
}

/// A socket counted against admission while it has no hub session
/// (unidentified, identifying or resuming); once attached, its session
/// counts in the hub instead. Released at most once: on attach, or on drop.
pub struct Unattached {
    gateway: Arc<Gateway>,
    counted: bool,
}

impl Unattached {
    fn attached(&mut self) {
        if std::mem::take(&mut self.counted) {
            self.gateway
                .counters
                .sockets_unattached
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Unattached {
    fn drop(&mut self) {
        self.attached();
    }
}

/// How the socket task asks its writer to finish: an optional last frame
/// (op 7 for a drain), then the close frame.
struct Finish {
    last: Option<&'static str>,
    close: CloseFrame,
}

/// The WebSocket close (RFC 6455 section 7.4.1) for a frame the WebSocket
/// layer refused, or `None` when the peer is simply gone. Discord's 4000
/// range is for payloads; these are about the frames carrying them.
fn protocol_close(error: axum::Error) -> Option<CloseFrame> {
    use tungstenite::error::{Error, ProtocolError};
    let (code, reason) = match *error.into_inner().downcast::<Error>().ok()? {
        Error::Utf8(_) => (1007, "Invalid UTF-8 in a text frame."),
        Error::Capacity(_) => (1009, "Message too big."),
        Error::Protocol(ProtocolError::ResetWithoutClosingHandshake) => return None,
        Error::Protocol(_) => (1002, "Protocol error."),
        _ => return None,
    };
    Some(CloseFrame {
        code,
        reason: Utf8Bytes::from_static(reason),
    })
}

/// Why a socket's writer stopped.
#[derive(Debug, PartialEq, Eq)]
enum WriterEnd {
    /// As asked: the close frame was written, or the socket task is gone.
    Finished,
    /// The socket refused a write (the peer went away).
    Failed,
    /// A batch or the close frame waited past `session_write_stall_ms_max`.
    Stalled,
}

/// How a socket's writer turns a frame's text into a WebSocket message.
struct Encoder {
    /// `compress=zlib-stream` or `zstd-stream`: every frame, on the
    /// connection's one stream.
    transport: Option<Stream>,
    /// IDENTIFY's `compress: true`: each dispatch a zlib stream of its own.
    payload: Option<Deflater>,
    /// Where the socket task hands over the payload compressor. It does so
    /// before it queues READY, so the writer has it by the first dispatch.
    payload_handover: Option<oneshot::Receiver<Deflater>>,
    /// `encoding=etf`: each frame's JSON is carried over into an Erlang
    /// term, in a binary frame. The frames are encoded as JSON once for
    /// every session; the few ETF sessions pay for their own conversion.
    etf: bool,
}

impl Encoder {
    fn message(&mut self, text: String, dispatch: bool) -> Result<Message, axum::Error> {
        let term = if self.etf {
            // The server's own frames are always JSON.
            Some(
                guildhall_proto::etf::from_json(text.as_bytes()).ok_or_else(|| {
                    axum::Error::new(std::io::Error::other("a frame that is not JSON"))
                })?,
            )
        } else {
            None
        };
        let raw: &[u8] = term.as_deref().unwrap_or(text.as_bytes());
        if let Some(stream) = &mut self.transport {
            let bytes = stream.message(raw).map_err(axum::Error::new)?;
            return Ok(Message::Binary(bytes.into()));
        }
        if !dispatch {
            return Ok(match term {
                Some(term) => Message::Binary(term.into()),
                None => Message::Text(Utf8Bytes::from(text)),
            });
        }
        if self.payload.is_none()
            && let Some(handover) = &mut self.payload_handover
        {
            match handover.try_recv() {
                Ok(deflater) => {
                    self.payload = Some(deflater);
                    self.payload_handover = None;
                }
                Err(oneshot::error::TryRecvError::Closed) => self.payload_handover = None,
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
        }
        match (&mut self.payload, term) {
            (Some(deflater), term) => {
                let bytes = deflater
                    .whole(term.as_deref().unwrap_or(text.as_bytes()))
                    .map_err(axum::Error::new)?;
                Ok(Message::Binary(bytes.into()))
            }
            (None, Some(term)) => Ok(Message::Binary(term.into())),
            (None, None) => Ok(Message::Text(Utf8Bytes::from(text))),
        }
    }
}

/// A socket's writer: drains the socket's queue in batches until told to
/// finish, with every batch and the close frame under `stall`. Frames go
/// through `encoder` (plain, zlib-stream or payload-compressed).
async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut inlet: Inlet,
    mut finish: oneshot::Receiver<Finish>,
    stall: Duration,
    mut encoder: Encoder,
) -> WriterEnd {
    loop {
        tokio::select! {
            biased;
            finish = &mut finish => {
                let Ok(Finish { last, close }) = finish else {
                    return WriterEnd::Finished;
                };
                let closing = async {
                    if let Some(text) = last {
                        sink.feed(encoder.message(text.to_owned(), false)?).await?;
                    }
                    sink.send(Message::Close(Some(close))).await
                };
                return match tokio::time::timeout(stall, closing).await {
                    Ok(Ok(())) => WriterEnd::Finished,
                    Ok(Err(_)) => WriterEnd::Failed,
                    Err(_) => WriterEnd::Stalled,
                };
            }
            first = inlet.recv() => {
                let Some(first) = first else { return WriterEnd::Finished };
                let batch = async {
                    let (mut written, mut entries) = (0usize, 0usize);
                    let mut next = Some(first);
                    while let Some(outbound) = next.take() {
                        written += outbound.len_bytes();
                        entries += 1;
                        let dispatch = !matches!(outbound, Outbound::Text(_));
                        for text in outbound.into_frames() {
                            sink.feed(encoder.message(text, dispatch)?).await?;
                        }
                        if entries < WRITE_BATCH_FRAMES_MAX {
                            next = inlet.try_recv();
                        }
                    }
                    sink.flush().await?;
                    Ok::<usize, axum::Error>(written)
                };
                match tokio::time::timeout(stall, batch).await {
                    Ok(Ok(written)) => inlet.written(written),
                    Ok(Err(_)) => return WriterEnd::Failed,
                    Err(_) => return WriterEnd::Stalled,
                }
            }
        }
    }
}

impl Gateway {
    fn count_close(&self, code: CloseCode) {
        let index = usize::from(code.code() - 4000).min(15);
        self.counters.closes_by_code[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the close and words the request to the writer.
    fn closing(&self, last: Option<&'static str>, code: CloseCode) -> Finish {
        self.count_close(code);
        Finish {
            last,
            close: CloseFrame {
                code: code.code(),
                reason: Utf8Bytes::from_static(code.reason()),
            },
        }
    }

    /// Counts a new socket against admission until it has a hub session;
    /// taken before admission runs, so concurrent upgrades see each other.
    pub fn reserve(self: &Arc<Self>) -> Unattached {
        self.counters
            .sockets_unattached
            .fetch_add(1, Ordering::Relaxed);
        Unattached {
            gateway: self.clone(),
            counted: true,
        }
    }

    /// What admission counts against `sessions_per_node_max`: the hub's
    /// sessions (attached or resumable) and every open socket without one,
    /// less the upgrade being decided (already reserved).
    pub fn sessions_counted(&self) -> usize {
        (self.hub.len() + self.counters.sockets_unattached.load(Ordering::Relaxed))
            .saturating_sub(1)
    }

    fn writer_ended(&self, end: WriterEnd) {
        if end == WriterEnd::Stalled {
            self.counters
                .write_stalls_total
                .fetch_add(1, Ordering::Relaxed);
            guildhall_common::throttled!(
                warn,
                "gateway.write_stall",
                stall_ms = self.shared.limits.session_write_stall_ms_max,
                "a client stopped reading; its socket was dropped"
            );
        }
    }

    // Each argument is a different part of what READY says or where it
    // goes; a struct for one caller would only rename them.
    #[allow(clippy::too_many_arguments)]
    async fn ready(
        &self,
        identity: Identity,
        app_flags: i64,
        (intents, large_threshold): (u64, u32),
        (shard, version): (Option<[u32; 2]>, u8),
        user: &UserRow,
        out: &Outlet,
        control: &mpsc::Sender<Control>,
    ) -> Result<Arc<Slot>, CloseCode> {
        let store = &self.shared.store;
        let listed_max = self.shared.limits.ready_guilds_max as i64 + 1;
        let mut guild_ids = match shard {
            // Only this shard's guilds are read: a bot sharded because it
            // has many guilds does not read them all on every shard.
            Some([shard_id, num_shards]) => {
                store
                    .shard_guild_ids_of(user.id, shard_id.into(), num_shards.into(), listed_max)
                    .await
            }
            None => store.guild_ids_of(user.id, listed_max).await,
        }
        .map_err(|_| CloseCode::UnknownError)?;
        // The rule is the proto crate's; the database's filter only spares
        // reading the other shards' guilds.
        guild_ids.retain(|guild_id| guildhall_proto::shard::receives(shard, Some(*guild_id)));
        // Discord's 4011 counts the guilds this session would handle: a
        // bot that shards enough is accepted.
        if guild_ids.len() > self.shared.limits.ready_guilds_max {
            return Err(CloseCode::ShardingRequired);
        }
        if user.bot {
            self.count_session_start(user.id).await?;
        }
        // The id names this node, so a RESUME on any gateway node finds it.
        let session_id = crate::takeover::new_session_id(self.takeovers.node_name())
            .map_err(|_| CloseCode::UnknownError)?;
        let slot = self.hub.register(
            session_id,
            user.id,
            intents,
            crate::hub::SessionOptions {
                shard,
                large_threshold,
            },
            out.clone(),
            control.clone(),
        );
        let application_id = if user.bot {
            user.id
        } else {
            identity.user_id.get() as i64
        };
        let ready = Ready {
            // The version the URL asked for (9 or 10), as Discord answers.
            v: version,
            user: wire_user(user),
            guilds: guild_ids
                .iter()
                .map(|id| UnavailableGuild {
                    id: sf(*id),
                    unavailable: true,
                })
                .collect(),
            session_id: slot.id.clone(),
            resume_gateway_url: self.shared.client_gateway_url(&self.cluster),
            shard,
            application: PartialApplication {
                id: sf(application_id),
                // Flags are bits; a negative stored value is no set of them.
                flags: u64::try_from(app_flags).unwrap_or(0),
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
        self.subscriptions.subscribe_ready(&slot, guild_ids).await;
        Ok(slot)
    }

    /// A bot's IDENTIFY against its `max_concurrency` bucket
    /// (`shard_id % identify_concurrency_max`, one IDENTIFY per
    /// `identify_concurrency_window_ms`, in the store so every gateway node
    /// shares it): over it, INVALID_SESSION, as Discord documents. A store
    /// that cannot answer is the same as an overloaded users service (op 9,
    /// the client tries again); a bucket the store cannot track
    /// (`session_start_bots_max` rows) is admitted, counted.
    async fn admit_identify(
        &self,
        bot_id: i64,
        shard: Option<[u32; 2]>,
    ) -> Result<(), AuthFailure> {
        let limits = &self.shared.limits;
        let bucket = shard.map_or(0, |[shard_id, _]| {
            shard_id % limits.identify_concurrency_max.max(1)
        });
        let admitted = self
            .shared
            .store
            .identify_in_bucket(
                bot_id,
                bucket.into(),
                i64::try_from(now_ms()).unwrap_or(i64::MAX),
                i64::try_from(limits.identify_concurrency_window_ms).unwrap_or(i64::MAX),
                i64::try_from(limits.session_start_bots_max).unwrap_or(i64::MAX),
            )
            .await
            .map_err(|_| AuthFailure::Overloaded)?;
        match admitted {
            IdentifyBucket::Admitted => Ok(()),
            IdentifyBucket::Refused => {
                self.counters
                    .identify_concurrency_refused_total
                    .fetch_add(1, Ordering::Relaxed);
                Err(AuthFailure::ConcurrencyExceeded)
            }
            IdentifyBucket::Untracked => {
                self.counters
                    .identify_buckets_untracked_total
                    .fetch_add(1, Ordering::Relaxed);
                guildhall_common::throttled!(
                    warn,
                    "gateway.identify_buckets_untracked",
                    rows_max = limits.session_start_bots_max,
                    "an IDENTIFY admitted outside max_concurrency: the store tracks its maximum of buckets"
                );
                Ok(())
            }
        }
    }

    /// A bot past its session start limit: tokens revoked and forgotten on
    /// every node, sessions terminated on every gateway node. A revocation
    /// the store refuses leaves the token working (logged); the sessions
    /// are terminated either way.
    async fn session_limit_hit(&self, bot_id: i64) {
        self.counters
            .session_limit_resets_total
            .fetch_add(1, Ordering::Relaxed);
        if let Err(error) = self.shared.store.revoke_tokens(bot_id).await {
            guildhall_common::throttled!(error, "gateway.session_limit_revoke_failed", bot_id, %error, "session start limit hit: token not revoked");
        }
        self.users.invalidate_user(bot_id);
        crate::events::to_gateways(
            self.bus.as_ref(),
            &self.cluster.gateways(),
            self.shared.limits.gateway_event_partitions,
            bot_id,
            guildhall_proto::bus::NodeEventBody::Terminate { user_id: bot_id },
        );
        guildhall_common::throttled!(
            warn,
            "gateway.session_limit_hit",
            bot_id,
            "session start limit hit: token reset and sessions terminated, as Discord does"
        );
    }

    /// Counts a bot's IDENTIFY against its session start limit
    /// (`session_starts_per_window_max` per `session_start_window_ms`,
    /// kept in the store so every gateway node counts against one total;
    /// one small write). Over the limit, what Discord documents: "all
    /// active sessions for the app will be terminated, the bot token will
    /// be reset" — the bot's tokens are revoked (on every node at once;
    /// its owner gets a new one with a token reset), every session of it
    /// on every gateway node is closed with 4004 and not resumable, and
    /// this IDENTIFY is closed with 4004, the code libraries stop
    /// reconnecting on. A bot the store cannot track
    /// (`session_start_bots_max`) is admitted uncounted.
    async fn count_session_start(&self, bot_id: i64) -> Result<(), CloseCode> {
        let limits = &self.shared.limits;
        let started = self
            .shared
            .store
            .start_session(
                bot_id,
                i64::try_from(now_ms()).unwrap_or(i64::MAX),
                i64::try_from(limits.session_start_window_ms).unwrap_or(i64::MAX),
                limits.session_starts_per_window_max.into(),
                i64::try_from(limits.session_start_bots_max).unwrap_or(i64::MAX),
            )
            .await
            .map_err(|_| CloseCode::UnknownError)?;
        match started {
            SessionStart::Started(_) => Ok(()),
            SessionStart::Refused(_) => {
                self.session_limit_hit(bot_id).await;
                Err(CloseCode::AuthenticationFailed)
            }
            SessionStart::Untracked => {
                self.counters
                    .session_starts_untracked_total
                    .fetch_add(1, Ordering::Relaxed);
                guildhall_common::throttled!(
                    warn,
                    "gateway.session_starts_untracked",
                    bots_max = limits.session_start_bots_max,
                    "session starts of a bot not counted: the store tracks its maximum of bots"
                );
                Ok(())
            }
        }
    }

    /// Op 8: GUILD_MEMBERS_CHUNK pages of at most `members_per_page_max`,
    /// fetched from the guild owner one page at a time (never the whole
    /// member list in memory), with `chunk_count` known from the first page.
    /// `limit: 0` with an empty query means every member, as Discord does.
    ///
    /// Runs in a task of its own, paced by the session's queue
    /// ([`Slot::dispatch_paced`]); it ends with its socket.
    async fn request_members(self: Arc<Self>, slot: Arc<Slot>, request: RequestGuildMembers) {
        let guild_id = request.guild_id.get() as i64;
        let user_ids: Vec<i64> = match request.user_ids {
            None => vec![],
            Some(OneOrMany::One(id)) => vec![id.get() as i64],
            Some(OneOrMany::Many(ids)) => ids.iter().map(|id| id.get() as i64).collect(),
        };
        let page_max = self.shared.limits.members_per_page_max.max(1);
        let query = request.query.unwrap_or_default();
        // Discord: a prefix or a list of ids returns at most 100 members;
        // only the whole list (`query: ""`, `limit: 0`) returns more.
        let matches_max = self.shared.limits.member_request_matches_max;
        let wanted = match (request.limit, user_ids.len()) {
            (_, n) if n > 0 => n.min(matches_max),
            (0, _) if query.is_empty() => usize::MAX,
            (0, _) => matches_max,
            (limit, _) if query.is_empty() => limit as usize,
            (limit, _) => (limit as usize).min(matches_max),
        };
        // Discord: "Nonce can only be up to 32 bytes. If you send an
        // invalid nonce it will be ignored".
        let nonce = request
            .nonce
            .filter(|n| n.len() <= guildhall_proto::gateway::MEMBER_REQUEST_NONCE_BYTES_MAX);
        let with_presences = request.presences && slot.intents & intents::GUILD_PRESENCES != 0;
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
                    statuses: vec![],
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
            if let Some(nonce) = &nonce {
                chunk["nonce"] = serde_json::Value::String(nonce.clone());
            }
            // Discord: `presences: true` counts only with GUILD_PRESENCES
            // ("otherwise, it will always be false"); offline members have
            // none.
            if with_presences {
                let presences: Vec<model::Presence> = page
                    .statuses
                    .iter()
                    .map(|(id, status)| model::Presence::of(sf(*id), None, status))
                    .collect();
                chunk["presences"] = serde_json::to_value(presences).unwrap_or_default();
            }
            if let Ok(event) = EncodedDispatch::new("GUILD_MEMBERS_CHUNK", &chunk)
                && !slot.dispatch_paced(&event, &self.hub.counters).await
            {
                return;
            }
            sent += returned.len();
            index += 1;
            match returned.last() {
                Some(last) if index < count && sent < total => after = *last,
                _ => break,
            }
        }
    }

    /// Op 8: starts [`Gateway::request_members`] unless the session already
    /// runs `session_member_requests_max` of them; then the request is
    /// answered with RATE_LIMITED (Discord's answer to an op 8 too many).
    fn spawn_member_request(
        self: &Arc<Self>,
        running: &mut JoinSet<()>,
        slot: &Arc<Slot>,
        request: RequestGuildMembers,
    ) {
        while running.try_join_next().is_some() {}
        if running.len() < self.shared.limits.session_member_requests_max {
            running.spawn(self.clone().request_members(slot.clone(), request));
            return;
        }
        self.counters
            .member_requests_refused_total
            .fetch_add(1, Ordering::Relaxed);
        let mut meta = serde_json::json!({"guild_id": request.guild_id});
        if let Some(nonce) = request
            .nonce
            .filter(|n| n.len() <= guildhall_proto::gateway::MEMBER_REQUEST_NONCE_BYTES_MAX)
        {
            meta["nonce"] = serde_json::Value::String(nonce);
        }
        let data = serde_json::json!({
            "opcode": 8,
            "retry_after": MEMBER_REQUEST_RETRY_AFTER_S,
            "meta": meta,
        });
        if let Ok(event) = EncodedDispatch::new("RATE_LIMITED", &data) {
            slot.dispatch(&event, &self.hub.counters);
        }
    }

    /// IDENTIFY's `compress: true` on a socket without transport
    /// compression: hands the writer a compressor for its dispatches, or
    /// (none free) leaves them plain, which Discord allows ("not all
    /// payloads will be compressed").
    fn payload_compression(&self, handover: Option<oneshot::Sender<Deflater>>) {
        let Some(handover) = handover else { return };
        let max = self.shared.limits.gateway_compressors_max;
        match self.counters.compressors.acquire(max) {
            Some(permit) => {
                let _ = handover.send(Deflater::new(permit));
            }
            None => {
                self.counters
                    .payload_compression_declined_total
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Op 3 (and READY, and the session's end): one message to the
    /// presence role, which fans the user's status out to their guilds.
    /// Never awaited: presence is off the session's critical path.
    fn presence(&self, slot: &Slot, status: Option<&str>) {
        slot.set_presence(status);
        guildhall_common::presence::publish(
            self.bus.as_ref(),
            &self.cluster,
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

    /// Op 4: the guild owner checks, records and publishes the voice state
    /// (VOICE_STATE_UPDATE); then the guild's voice coordinator (placed on
    /// the voice nodes) allocates or reuses the channel's call on an SFU
    /// and admits the user, and the session gets VOICE_SERVER_UPDATE with
    /// the SFU's endpoint and the user's token. A leave (`channel_id:
    /// null`) tells the coordinator, which evicts the user and releases a
    /// call left empty. With no voice node in the cluster, `endpoint` is
    /// null, as Discord's documentation allows ("no server allocated").
    ///
    /// Libraries send op 4 once and wait for both answers, so a step that
    /// fails for a reason that may pass (an owner busy, gone or slow; a
    /// voice role that does not answer, or refuses with a `retry_after_ms`)
    /// is tried again here, at most `voice_attempts_max` times in all,
    /// within the voice retry budget, and not once `newer` holds a later
    /// op 4 of the session (which says what it wants now). Every failure
    /// is counted and logged through the throttle; none is silent.
    async fn voice(
        &self,
        slot: &Arc<Slot>,
        voice: gateway::VoiceStateUpdate,
        newer: &mpsc::Receiver<gateway::VoiceStateUpdate>,
    ) {
        use guildhall_proto::voice::{
            VoiceEnvelope, VoiceReply, VoiceRequest, decode_reply, voice_requests_subject,
        };
        let guild_id = voice.guild_id.get() as i64;
        let channel_id = voice.channel_id.map(|c| c.get() as i64);
        let (user_id, session_id) = (slot.user_id, slot.id.clone());
        self.lock_voice_budget().on_first_attempt(now_ms());
        let started = std::time::Instant::now();
        let mut attempt = 1;
        loop {
            let result = self
                .guilds
                .voice(
                    guild_id,
                    GuildCall::Voice {
                        user_id,
                        session_id: session_id.clone(),
                        channel_id,
                        self_mute: voice.self_mute,
                        self_deaf: voice.self_deaf,
                    },
                )
                .await;
            let Err(error) = result else { break };
            self.counters
                .voice_owner_failures_total
                .fetch_add(1, Ordering::Relaxed);
            guildhall_common::throttled!(
                info,
                "gateway.voice_owner_failed",
                guild_id,
                %error,
                attempt,
                "op 4 not taken by the guild owner"
            );
            if !error.is_retryable() || !self.voice_retry(&mut attempt, 0, newer).await {
                return;
            }
        }
        let body = match channel_id {
            Some(channel_id) => VoiceRequest::Join {
                guild_id,
                channel_id,
                user_id,
                session_id,
            },
            None => VoiceRequest::Leave {
                guild_id,
                user_id,
                session_id,
            },
        };
        // Encoded once: a retry sends the same request.
        let request: bytes::Bytes = VoiceEnvelope::new(body).encode().into();
        let timeout = Duration::from_millis(self.shared.limits.voice_request_timeout_ms);
        loop {
            // Placed again on every attempt: a voice node that stopped
            // answering may have left the view since.
            let Some(voice_node) = self.cluster.voice_node_of(guild_id) else {
                if channel_id.is_some()
                    && let Ok(token) = guildhall_common::auth::random_hex()
                {
                    let data = serde_json::json!({"token": token, "guild_id": guild_id.to_string(), "endpoint": null});
                    if let Ok(event) = EncodedDispatch::new("VOICE_SERVER_UPDATE", &data) {
                        slot.dispatch(&event, &self.hub.counters);
                    }
                }
                return;
            };
            let reply = self
                .bus
                .request(
                    &voice_requests_subject(&voice_node),
                    request.clone(),
                    timeout,
                )
                .await;
            let reply = match reply {
                Ok(message) => decode_reply::<VoiceReply>(&message.payload).ok(),
                Err(_) => None,
            };
            let wait_ms = match reply {
                Some(VoiceReply::Server { endpoint, token }) => {
                    self.counters
                        .voice_servers_total
                        .fetch_add(1, Ordering::Relaxed);
                    self.counters
                        .voice_server_seconds
                        .record_us(started.elapsed().as_micros() as u64);
                    let data = serde_json::json!({"token": token, "guild_id": guild_id.to_string(), "endpoint": endpoint});
                    if let Ok(event) = EncodedDispatch::new("VOICE_SERVER_UPDATE", &data) {
                        slot.dispatch(&event, &self.hub.counters);
                    }
                    return;
                }
                Some(VoiceReply::Left) => return,
                Some(VoiceReply::Refused {
                    reason,
                    retry_after_ms,
                }) => {
                    self.counters
                        .voice_refused_total
                        .fetch_add(1, Ordering::Relaxed);
                    guildhall_common::throttled!(
                        info,
                        "gateway.voice_refused",
                        guild_id,
                        reason = reason.label(),
                        retry_after_ms,
                        attempt,
                        "voice join refused"
                    );
                    retry_after_ms
                }
                None => {
                    self.counters
                        .voice_unanswered_total
                        .fetch_add(1, Ordering::Relaxed);
                    guildhall_common::throttled!(
                        warn,
                        "gateway.voice_unanswered",
                        guild_id,
                        voice_node,
                        attempt,
                        "voice node did not answer in time"
                    );
                    0
                }
            };
            if !self.voice_retry(&mut attempt, wait_ms, newer).await {
                return;
            }
        }
    }

    /// Whether to try a failed op 4 step again (see [`Gateway::voice`]);
    /// if so, waits first: a full-jitter backoff, or `wait_ms` (a
    /// refusal's `retry_after_ms`, at most `backoff_cap_ms`) if longer.
    /// An op 4 queued meanwhile supersedes this one, before the wait or
    /// after it. Counts what it decides.
    async fn voice_retry(
        &self,
        attempt: &mut u32,
        wait_ms: u64,
        newer: &mpsc::Receiver<gateway::VoiceStateUpdate>,
    ) -> bool {
        let limits = &self.shared.limits;
        if !newer.is_empty() {
            // Superseded: the next op 4 is handled next, by this worker.
            return false;
        }
        if *attempt >= limits.voice_attempts_max || !self.lock_voice_budget().try_retry(now_ms()) {
            self.counters
                .voice_gave_up_total
                .fetch_add(1, Ordering::Relaxed);
            guildhall_common::throttled!(
                warn,
                "gateway.voice_gave_up",
                attempt = *attempt,
                "op 4 left unanswered: attempts or retry budget spent"
            );
            return false;
        }
        let backoff_ms = backoff_full_jitter_ms(
            *attempt - 1,
            limits.backoff_base_ms,
            limits.backoff_cap_ms,
            guildhall_common::auth::random_unit(),
        );
        *attempt += 1;
        self.counters
            .voice_retries_total
            .fetch_add(1, Ordering::Relaxed);
        // A refusal's hint is the voice role's to give, not to stretch
        // without bound: capped like every backoff here.
        let wait_ms = backoff_ms.max(wait_ms.min(limits.backoff_cap_ms));
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        // An op 4 that arrived during the wait is the user's latest word.
        newer.is_empty()
    }

    fn lock_voice_budget(&self) -> std::sync::MutexGuard<'_, RetryBudget> {
        self.voice_budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Op 4 goes to the socket's voice worker (started on the first op 4,
    /// ended with the socket), which handles them one at a time in order,
    /// so a join and the leave after it cannot swap and the socket task
    /// never waits on an SFU. At most `session_voice_requests_max` wait;
    /// beyond, the op 4 is dropped and counted (the client's retry, or
    /// its next op 4, states what it wants again). The worker is a task of
    /// its own, not one of the socket's op 8 slots.
    fn queue_voice(
        self: &Arc<Self>,
        worker: &mut Option<(mpsc::Sender<gateway::VoiceStateUpdate>, AbortOnDrop)>,
        slot: &Arc<Slot>,
        voice: gateway::VoiceStateUpdate,
    ) {
        let (sender, _) = worker.get_or_insert_with(|| {
            let (tx, mut rx) = mpsc::channel(self.shared.limits.session_voice_requests_max.max(1));
            let (gateway, slot) = (self.clone(), slot.clone());
            let task = tokio::spawn(async move {
                while let Some(voice) = rx.recv().await {
                    gateway.voice(&slot, voice, &rx).await;
                }
            });
            (tx, AbortOnDrop(task))
        });
        if sender.try_send(voice).is_err() {
            self.counters
                .voice_dropped_total
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Runs one socket until it closes. `unattached` is the socket's
    /// admission reservation, released once it has a hub session; `wire`
    /// is what its URL asked for, and `transport` its zlib-stream or
    /// zstd-stream compressor when it asked for one (taken before the upgrade, so a
    /// node without a free compressor refuses it with 503).
    pub async fn run(
        self: Arc<Self>,
        socket: WebSocket,
        mut unattached: Unattached,
        wire: WireQuery,
        transport: Option<Stream>,
    ) {
        self.counters.sockets_open.fetch_add(1, Ordering::Relaxed);
        let limits = &self.shared.limits;
        let config = SessionConfig {
            heartbeat_interval_ms: limits.heartbeat_interval_ms,
            heartbeat_timeout_ms: limits.heartbeat_timeout_ms,
            payload_bytes_max: limits.gateway_payload_bytes_max,
            inbound_per_minute_max: limits.gateway_inbound_per_minute_max,
            identify_timeout_ms: limits.gateway_identify_timeout_ms,
            shards_max: limits.gateway_shards_max,
        };
        let stall = Duration::from_millis(limits.session_write_stall_ms_max);
        let (outlet, inlet) = crate::hub::socket_queue(
            limits.session_queue_messages_max,
            limits.session_queue_bytes_max,
        );
        let (control_tx, mut control_rx) = mpsc::channel::<Control>(CONTROL_CHANNEL_CAPACITY);
        let (sink, mut stream) = socket.split();
        let (finish_tx, finish_rx) = oneshot::channel::<Finish>();
        // Payload compression is never used with transport compression
        // (Discord: "Payload compression will be disabled if you use
        // transport compression"), so there is nothing to hand over then.
        let (payload_tx, payload_rx) = oneshot::channel::<Deflater>();
        let mut payload_tx = (wire.transport == Transport::None).then_some(payload_tx);
        let encoder = Encoder {
            transport,
            payload: None,
            payload_handover: Some(payload_rx),
            etf: wire.etf,
        };
        let mut writer = tokio::spawn(write(sink, inlet, finish_rx, stall, encoder));
        let mut writer_done = false;
        // Op 8 tasks of this socket, and its voice worker (started on the
        // first op 4): both dropped (aborted) with it.
        let mut member_requests = JoinSet::new();
        let mut voice_worker = None;
        let (mut session, hello) = Session::new(config, now_ms());
        let mut slot: Option<Arc<Slot>> = None;
        // A version this gateway does not speak is closed at once, before
        // HELLO: the client could not rely on anything that follows.
        let first = if wire.version.is_some() {
            hello
        } else {
            Command::Close(CloseCode::InvalidApiVersion)
        };
        let mut pending: VecDeque<Command> = VecDeque::from([first]);
        let mut scratch = Vec::new();
        let mut user: Option<UserRow> = None;
        let mut app_flags = 0i64;
        let mut large_threshold = guildhall_proto::gateway::LARGE_THRESHOLD_DEFAULT;
        let mut identify_started: Option<std::time::Instant> = None;
        // A quarter of the shorter deadline, so either is noticed within a
        // quarter of its length.
        let deadline_ms = limits
            .heartbeat_interval_ms
            .min(limits.gateway_identify_timeout_ms);
        let mut tick = tokio::time::interval(Duration::from_millis((deadline_ms / 4).max(250)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Once a session is attached the identify deadline is over: back to
        // a quarter of the heartbeat interval, half the wake-ups per socket
        // for the rest of its life.
        let mut tick_relaxed = false;
        // Nothing below awaits the socket's sink: frames are queued, and a
        // full queue is a slow consumer like a full dispatch queue.
        let finish: Option<Finish> = 'socket: loop {
            while let Some(command) = pending.pop_front() {
                match command {
                    Command::Send(text) => {
                        if !outlet.try_push(Outbound::Text(text)) {
                            self.hub
                                .counters
                                .slow_consumer_closes_total
                                .fetch_add(1, Ordering::Relaxed);
                            break 'socket Some(self.closing(None, CloseCode::UnknownError));
                        }
                    }
                    Command::Close(code) => break 'socket Some(self.closing(None, code)),
                    Command::Authenticate(identify) => {
                        identify_started = Some(std::time::Instant::now());
                        let mut result =
                            authenticate(&self.shared, &self.users, &identify.token).await;
                        if let Ok((row, _, _)) = &result
                            && row.bot
                            && let Err(failure) = self.admit_identify(row.id, identify.shard).await
                        {
                            result = Err(failure);
                        }
                        let result = result.map(|(row, identity, flags)| {
                            user = Some(row);
                            app_flags = flags;
                            identity
                        });
                        large_threshold =
                            guildhall_proto::gateway::large_threshold(identify.large_threshold);
                        if result.is_ok() && identify.compress == Some(true) {
                            self.payload_compression(payload_tx.take());
                        }
                        session.identified(now_ms(), result, &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Command::SendReady {
                        identity,
                        intents,
                        shard,
                    } => {
                        let Some(row) = user.clone() else { continue };
                        match self
                            .ready(
                                identity,
                                app_flags,
                                (intents, large_threshold),
                                (shard, wire.version.unwrap_or(10)),
                                &row,
                                &outlet,
                                &control_tx,
                            )
                            .await
                        {
                            Ok(s) => {
                                unattached.attached();
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
                        let user_id = match authenticate(&self.shared, &self.users, &resume.token)
                            .await
                        {
                            Ok((_, identity, _)) => Some(identity.user_id.get() as i64),
                            Err(AuthFailure::BadToken) => {
                                pending.push_front(Command::Close(CloseCode::AuthenticationFailed));
                                continue;
                            }
                            Err(_) => None,
                        };
                        let found = match (user_id, self.hub.get(&resume.session_id)) {
                            (Some(user_id), Some(s)) if s.user_id == user_id => Ok(s),
                            // Not here: held by another gateway node, which
                            // hands it over (or it is gone: op 9).
                            (Some(user_id), None) => self
                                .takeovers
                                .take(&resume.session_id, user_id, resume.seq)
                                .await
                                .map_err(|reason| match reason {
                                    TakeoverRefusal::FromTheFuture => ResumeFailure::InvalidSeq,
                                    _ => ResumeFailure::Invalid,
                                }),
                            _ => Err(ResumeFailure::Invalid),
                        };
                        let result = found.and_then(|s| {
                            match s.resume(resume.seq, outlet.clone(), control_tx.clone()) {
                                Ok(()) => {
                                    unattached.attached();
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
                                Err(ReplayError::FromTheFuture) => Err(ResumeFailure::InvalidSeq),
                            }
                        });
                        session.resumed(now_ms(), result, &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Command::RequestGuildMembers(request) => {
                        if let Some(s) = &slot {
                            self.spawn_member_request(&mut member_requests, s, request);
                        }
                    }
                    Command::PresenceUpdate(presence) => {
                        if let Some(s) = &slot {
                            self.presence(s, Some(&presence.status));
                        }
                    }
                    Command::VoiceStateUpdate(voice) => {
                        if let Some(s) = &slot {
                            self.queue_voice(&mut voice_worker, s, voice);
                        }
                    }
                }
            }
            if !tick_relaxed && slot.is_some() {
                tick_relaxed = true;
                let quarter_ms = (limits.heartbeat_interval_ms / 4).max(250);
                tick = tokio::time::interval_at(
                    tokio::time::Instant::now() + Duration::from_millis(quarter_ms),
                    Duration::from_millis(quarter_ms),
                );
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            }
            tokio::select! {
                biased;
                control = control_rx.recv() => match control {
                    Some(Control::Close(code)) => break 'socket Some(self.closing(None, code)),
                    Some(Control::Reconnect) => {
                        let last = Some(gateway::reconnect_frame());
                        break 'socket Some(self.closing(last, CloseCode::UnknownError));
                    }
                    None => {}
                },
                end = &mut writer => {
                    writer_done = true;
                    if let Ok(end) = end {
                        self.writer_ended(end);
                    }
                    break 'socket None;
                },
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        session.on_text(now_ms(), text.as_bytes(), &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Some(Ok(Message::Binary(bytes))) if wire.etf => {
                        // An oversized frame is refused by its size before
                        // any decoding; a term that is no payload is 4002.
                        if bytes.len() > self.shared.limits.gateway_payload_bytes_max {
                            session.on_binary(now_ms(), &bytes, &mut scratch);
                        } else {
                            match guildhall_proto::etf::to_json(&bytes) {
                                Ok(json) => session.on_text(now_ms(), &json, &mut scratch),
                                Err(_) => {
                                    self.counters.etf_undecodable_total.fetch_add(1, Ordering::Relaxed);
                                    session.on_undecodable(&mut scratch);
                                }
                            }
                        }
                        pending.extend(scratch.drain(..));
                    }
                    Some(Ok(Message::Binary(bytes))) => {
                        session.on_binary(now_ms(), &bytes, &mut scratch);
                        pending.extend(scratch.drain(..));
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Ok(Message::Close(_))) | None => break 'socket None,
                    // The frame is refused, but the socket still writes:
                    // say why before dropping it.
                    Some(Err(error)) => break 'socket protocol_close(error).map(|close| {
                        self.counters.protocol_error_closes_total.fetch_add(1, Ordering::Relaxed);
                        Finish { last: None, close }
                    }),
                },
                _ = tick.tick() => {
                    session.on_tick(now_ms(), &mut scratch);
                    pending.extend(scratch.drain(..));
                },
            }
        };
        // Detach first, so nothing more is queued to this socket; what it
        // did not get stays in the replay buffer for a RESUME.
        if let Some(s) = &slot {
            s.detach(now_ms(), &outlet);
        }
        drop(member_requests);
        drop(voice_worker);
        let closing = finish.is_some();
        match finish {
            Some(finish) => {
                let _ = finish_tx.send(finish);
            }
            None => drop(finish_tx),
        }
        let mut close_sent = false;
        if !writer_done {
            // The writer finishes its batch and the close frame within the
            // stall bound, or is dropped with them.
            match tokio::time::timeout(stall, &mut writer).await {
                Ok(Ok(end)) => {
                    close_sent = closing && matches!(end, WriterEnd::Finished);
                    self.writer_ended(end);
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    writer.abort();
                    self.writer_ended(WriterEnd::Stalled);
                }
            }
        }
        if close_sent {
            // The close handshake: read (and discard) until the client's
            // close frame, for a bounded time. Dropping the socket with
            // its input unread would make the kernel send a reset, which
            // clients may see before the close code.
            let linger = Duration::from_millis(limits.gateway_close_linger_ms);
            let _ = tokio::time::timeout(linger, async {
                while let Some(Ok(frame)) = stream.next().await {
                    if matches!(frame, Message::Close(_)) {
                        break;
                    }
                }
            })
            .await;
        }
        self.counters.sockets_open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The gateway side of presence, on every gateway node: when the presence nodes change, publishes the
/// status of every session here again, to its user's presence node now,
/// at most `presence_resync_per_s` a second (a new presence node is not
/// flooded, and a bus under load is not either). A change during a resync
/// starts it over, since every status then has a newer home.
pub fn start_presence_resync(
    bus: Arc<dyn guildhall_cluster::Bus>,
    hub: Arc<Hub>,
    cluster: Arc<guildhall_common::cluster::ClusterState>,
    counters: Arc<guildhall_common::presence::PresenceCounters>,
    limits: &guildhall_limits::Limits,
) -> tokio::task::JoinHandle<()> {
    // Batches of at most this many, spaced to the rate.
    const BATCH_MAX: u64 = 100;
    let per_s = limits.presence_resync_per_s.max(1);
    let batch = BATCH_MAX.min(per_s);
    let pause = std::time::Duration::from_micros(batch * 1_000_000 / per_s);
    // Subscribed before the node serves: its first view (and every later
    // change) is a change here, so what sessions published before it is
    // published again.
    let mut changes = cluster.presence_changes.subscribe();
    tokio::spawn(async move {
        'changes: while changes.changed().await.is_ok() {
            let slots = hub.slots();
            for chunk in slots.chunks(batch as usize) {
                for slot in chunk {
                    if let Some(status) = slot.presence() {
                        guildhall_common::presence::publish(
                            bus.as_ref(),
                            &cluster,
                            &counters,
                            slot.user_id,
                            &slot.id,
                            Some(&status),
                        );
                        counters.resynced_total.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::time::sleep(pause).await;
                if changes.has_changed().unwrap_or(false) {
                    continue 'changes;
                }
            }
        }
    })
}
