//! The guilds role's client: how any role reaches a guild's owner without
//! the role's code. The owner is the node that bounded-load placement puts
//! the guild on ([`ClusterState::owner_of`]); a request is one
//! `GuildRequest` envelope on that node's subject, and an answer one
//! `GuildReply`.
//!
//! A request to a node whose lease has ended (still on the ring until
//! membership removes it) is refused at once with `Overloaded` and
//! counted: nobody would answer, and the caller should not wait
//! `guild_reply_timeout_ms` to learn it.
//!
//! The client also holds the node's outbox of guild events whose owner did
//! not confirm their fanout ([`GuildsClient::publish`] and the driver
//! [`GuildsClient::start_outbox`]): any role may publish a guild event
//! (REST, webhooks, interactions), so every node redelivers its own.

use crate::cluster::ClusterState;
use crate::outbox::{Outbox, Reserved};
use guildhall_cluster::Bus;
use guildhall_control::retry::backoff_full_jitter_ms;
use guildhall_limits::Limits;
use guildhall_proto::guilds::{
    Changed, GuildAnswer, GuildCall, GuildChange, GuildError, GuildReply, GuildRequest, MemberPage,
    Outgoing, SendGrant, guild_requests_subject,
};
use guildhall_proto::model::{self, Channel, Role};
use guildhall_proto::users::UserRecord;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The client's counters, read by `/metrics`.
#[derive(Debug, Default)]
pub struct GuildsClientCounters {
    /// Requests refused at once because their owner's node is still on the
    /// ring but no longer announced (its lease ended).
    pub owner_gone_total: AtomicU64,
    /// Status questions to the presence role that went unanswered (the
    /// members read as offline; asking cools off).
    pub presence_queries_failed_total: AtomicU64,
    /// Status questions not asked while cooling off after one went
    /// unanswered.
    pub presence_queries_skipped_total: AtomicU64,
}

/// The redelivery outbox's counters (a publishing node's), read by
/// `/metrics`.
#[derive(Debug, Default)]
pub struct OutboxCounters {
    /// Events held because their owner did not confirm the fanout.
    pub held_total: AtomicU64,
    /// Held events an owner later confirmed.
    pub delivered_total: AtomicU64,
    /// Attempts at a held event that failed again (backed off).
    pub retries_failed_total: AtomicU64,
    /// Events dropped: the outbox was full, the event grew older than
    /// `fanout_outbox_event_age_ms_max`, or its guild is gone. Their
    /// messages are in history; live sessions missed their dispatch.
    pub dropped_total: AtomicU64,
}

/// Reaches guild owners over the bus.
pub struct GuildsClient {
    bus: Arc<dyn Bus>,
    cluster: Arc<ClusterState>,
    node_name: String,
    reply_timeout: Duration,
    limits: Limits,
    /// Counters.
    pub counters: GuildsClientCounters,
    /// Redelivery counters.
    pub outbox_counters: OutboxCounters,
    // Events whose owner did not confirm their fanout, held until one does
    // (see `crate::outbox`). Held only for non-waiting steps.
    outbox: std::sync::Mutex<Outbox<bytes::Bytes>>,
    // Wakes the outbox driver when a guild gets its first held event.
    outbox_wake: tokio::sync::Notify,
    // Until when nobody here asks the presence role (ms since the epoch):
    // set `presence_query_cooloff_ms` ahead when a question goes
    // unanswered, so an outage of presence delays one load, not each.
    presence_quiet_until_ms: AtomicU64,
}

/// `call` for the owner of `guild_id`, encoded once (a publish is held and
/// resent as these same bytes).
pub fn request_bytes(guild_id: i64, call: GuildCall) -> Result<bytes::Bytes, GuildError> {
    let request = GuildRequest {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        guild_id,
        call,
        hops: 0,
    };
    serde_json::to_vec(&request)
        .map(Into::into)
        .map_err(|_| GuildError::Overloaded)
}

impl GuildsClient {
    /// A client for node `node_name` (the owner of every guild until the
    /// first registry view arrives), waiting at most
    /// `guild_reply_timeout_ms` for an answer and holding at most
    /// `fanout_outbox_bytes_max` of unconfirmed events.
    pub fn new(
        bus: Arc<dyn Bus>,
        cluster: Arc<ClusterState>,
        node_name: String,
        limits: &Limits,
    ) -> Self {
        Self {
            bus,
            cluster,
            node_name,
            reply_timeout: Duration::from_millis(limits.guild_reply_timeout_ms),
            counters: GuildsClientCounters::default(),
            outbox_counters: OutboxCounters::default(),
            outbox: std::sync::Mutex::new(Outbox::new(
                limits.fanout_outbox_bytes_max,
                limits.fanout_outbox_event_age_ms_max,
            )),
            outbox_wake: tokio::sync::Notify::new(),
            presence_quiet_until_ms: AtomicU64::new(0),
            limits: limits.clone(),
        }
    }

    /// The node whose guilds role owns `guild_id`: its place on the ring
    /// (this node until the first view of the registry arrives).
    pub fn owner_node(&self, guild_id: i64) -> String {
        self.cluster
            .owner_of(guild_id)
            .unwrap_or_else(|| self.node_name.clone())
    }

    /// [`GuildsClient::owner_node`], refused at once (`Overloaded`) when
    /// that node's lease has ended but membership has not removed it yet.
    fn live_owner_node(&self, guild_id: i64) -> Result<String, GuildError> {
        let node = self.owner_node(guild_id);
        if self.cluster.guild_node_live(&node) {
            Ok(node)
        } else {
            self.counters
                .owner_gone_total
                .fetch_add(1, Ordering::Relaxed);
            Err(GuildError::Overloaded)
        }
    }

    /// Sends `call` to the owner of `guild_id` without waiting for an
    /// answer; refused at once when the owner's node cannot take it.
    pub fn cast(&self, guild_id: i64, call: GuildCall) -> Result<(), GuildError> {
        let subject = guild_requests_subject(&self.live_owner_node(guild_id)?);
        let bytes = request_bytes(guild_id, call)?;
        self.bus
            .publish(&subject, None, bytes)
            .map_err(|_| GuildError::Overloaded)
    }

    /// Sends `call` to the owner of `guild_id` and waits at most
    /// `guild_reply_timeout_ms` for its answer.
    pub async fn call(&self, guild_id: i64, call: GuildCall) -> Result<GuildAnswer, GuildError> {
        let bytes = request_bytes(guild_id, call)?;
        self.call_bytes(guild_id, bytes).await
    }

    /// [`GuildsClient::call`] with the request encoded already.
    pub async fn call_bytes(
        &self,
        guild_id: i64,
        bytes: bytes::Bytes,
    ) -> Result<GuildAnswer, GuildError> {
        let subject = guild_requests_subject(&self.live_owner_node(guild_id)?);
        let message = self
            .bus
            .request(&subject, bytes, self.reply_timeout)
            .await
            .map_err(|_| GuildError::Overloaded)?;
        match serde_json::from_slice::<GuildReply>(&message.payload) {
            Ok(reply) if reply.v == guildhall_proto::bus::ENVELOPE_VERSION => reply.result,
            _ => {
                crate::throttled!(
                    warn,
                    "guilds.bad_reply",
                    guild_id,
                    "undecodable guild reply"
                );
                Err(GuildError::Overloaded)
            }
        }
    }

    /// Hands `event` to the owner of `guild_id` for fanout and waits for
    /// its confirmation. An event the owner does not confirm (gone, paused,
    /// busy) is held and offered again until an owner does (see
    /// [`crate::outbox`]), and so is one for a guild with events held
    /// already, behind them. `Err` only for a guild that cannot take
    /// events (unknown) or when the outbox is full; either way the event's
    /// data is durable already, and a refusal is counted.
    pub async fn publish(&self, guild_id: i64, mut event: Outgoing) -> Result<(), GuildError> {
        // 0 means "no id"; a draw of 0 (one in 2^64) just loses the dedupe.
        event.publish_id = crate::auth::random_u64();
        let id = event.publish_id;
        // Encoded once: what is sent is what is held and sent again (the
        // bytes are shared, not copied).
        let request = request_bytes(guild_id, GuildCall::Publish(event))?;
        let reserved = self.lock_outbox().reserve(
            guild_id,
            id,
            request.clone(),
            request.len(),
            crate::state::now_ms(),
        );
        match reserved {
            Ok(Reserved::Behind) => {
                self.outbox_counters
                    .held_total
                    .fetch_add(1, Ordering::Relaxed);
                self.outbox_wake.notify_one();
                Ok(())
            }
            Ok(Reserved::Head) => {
                // The caller's future can be dropped mid-call (a handler
                // timeout, a client gone): the guard then hands the
                // reserved head to the driver, or the guild's events would
                // wait behind a head nobody attempts, for good.
                let mut guard = HeadGuard {
                    client: self,
                    guild_id,
                    armed: true,
                };
                let outcome = self.call_bytes(guild_id, request).await;
                guard.armed = false;
                let mut outbox = self.lock_outbox();
                // Whatever the outcome, the guild stops being this
                // caller's: events held behind the head go to the driver.
                let result = match outcome {
                    Ok(GuildAnswer::Published) => {
                        outbox.confirmed(guild_id);
                        outbox.release(guild_id);
                        Ok(())
                    }
                    Err(error) if !retryable(error) => {
                        outbox.refused(guild_id);
                        outbox.release(guild_id);
                        Err(error)
                    }
                    _ => {
                        // Held where it was reserved: the driver offers it
                        // again, ahead of anything published meanwhile.
                        outbox.release(guild_id);
                        self.outbox_counters
                            .held_total
                            .fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    }
                };
                let more = outbox.holds(guild_id);
                drop(outbox);
                if more {
                    self.outbox_wake.notify_one();
                }
                result
            }
            // The outbox is full: no place to keep. A guild with events
            // held is refused at once (counted), as sending this one
            // ahead of them would break its order; another is tried once,
            // and refused (counted) when that fails.
            Err(request) if self.lock_outbox().holds(guild_id) => self.hold(guild_id, id, request),
            Err(request) => match self.call_bytes(guild_id, request.clone()).await {
                Ok(GuildAnswer::Published) => Ok(()),
                Err(error) if !retryable(error) => Err(error),
                _ => self.hold(guild_id, id, request),
            },
        }
    }

    fn lock_outbox(&self) -> std::sync::MutexGuard<'_, Outbox<bytes::Bytes>> {
        self.outbox
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds `request` (a Publish, encoded) for redelivery.
    fn hold(&self, guild_id: i64, id: u64, request: bytes::Bytes) -> Result<(), GuildError> {
        let bytes = request.len();
        let held = self
            .lock_outbox()
            .hold(guild_id, id, request, bytes, crate::state::now_ms());
        if held.is_err() {
            self.outbox_counters
                .dropped_total
                .fetch_add(1, Ordering::Relaxed);
            crate::throttled!(
                warn,
                "guilds.outbox_full",
                guild_id,
                "fanout outbox full: an event was not held for redelivery"
            );
            return Err(GuildError::Overloaded);
        }
        self.outbox_counters
            .held_total
            .fetch_add(1, Ordering::Relaxed);
        self.outbox_wake.notify_one();
        Ok(())
    }

    /// Events held for redelivery (gauge).
    pub fn outbox_events(&self) -> usize {
        self.lock_outbox().events()
    }

    /// Starts the outbox driver: it offers each guild's held events to the
    /// guild's current owner in order, at most
    /// `fanout_outbox_calls_in_flight_max` guilds at once, backing a guild
    /// off with full jitter (`backoff_base_ms` up to the smaller of
    /// `backoff_cap_ms` and `lease_ttl_ms`) after each failed attempt.
    pub fn start_outbox(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let client = self.clone();
        tokio::spawn(async move {
            let mut running = tokio::task::JoinSet::new();
            loop {
                let room = client
                    .limits
                    .fanout_outbox_calls_in_flight_max
                    .saturating_sub(running.len());
                let now = crate::state::now_ms();
                let (due, next) = {
                    let mut outbox = client.lock_outbox();
                    (outbox.take_due(now, room), outbox.next_due_ms())
                };
                for guild_id in due {
                    let client = client.clone();
                    running.spawn(async move { client.redeliver(guild_id).await });
                }
                // Nothing held: sleep until woken (a bound, not a poll).
                let wait_ms = next.map_or(OUTBOX_IDLE_WAIT_MS, |at| at.saturating_sub(now).max(1));
                tokio::select! {
                    () = client.outbox_wake.notified() => {}
                    Some(_) = running.join_next(), if !running.is_empty() => {}
                    () = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
                }
            }
        })
    }

    /// Delivers `guild_id`'s held events in order until one fails (the
    /// guild is backed off) or none is left.
    async fn redeliver(&self, guild_id: i64) {
        loop {
            let head = {
                let mut outbox = self.lock_outbox();
                let (head, expired) = outbox.head(guild_id, crate::state::now_ms());
                if expired > 0 {
                    self.outbox_counters
                        .dropped_total
                        .fetch_add(expired as u64, Ordering::Relaxed);
                    crate::throttled!(
                        warn,
                        "guilds.outbox_expired",
                        guild_id,
                        expired,
                        "held events expired before an owner confirmed them"
                    );
                }
                head.map(|h| h.event.clone())
            };
            let Some(request) = head else {
                return;
            };
            match self.call_bytes(guild_id, request).await {
                Ok(GuildAnswer::Published) => {
                    self.outbox_counters
                        .delivered_total
                        .fetch_add(1, Ordering::Relaxed);
                    self.lock_outbox().confirmed(guild_id);
                }
                Err(error) if !retryable(error) => {
                    self.outbox_counters
                        .dropped_total
                        .fetch_add(1, Ordering::Relaxed);
                    self.lock_outbox().refused(guild_id);
                }
                _ => {
                    self.outbox_counters
                        .retries_failed_total
                        .fetch_add(1, Ordering::Relaxed);
                    let limits = &self.limits;
                    let mut outbox = self.lock_outbox();
                    // Capped at the lease TTL: a lost owner is replaced
                    // about a TTL after it stops renewing, and waiting
                    // longer than that between tries only delays the
                    // delivery once its guild is served again.
                    let backoff_ms = backoff_full_jitter_ms(
                        outbox.attempts(guild_id),
                        limits.backoff_base_ms,
                        limits.backoff_cap_ms.min(limits.lease_ttl_ms),
                        crate::auth::random_unit(),
                    );
                    outbox.failed(guild_id, crate::state::now_ms(), backoff_ms);
                    return;
                }
            }
        }
    }

    /// Authorizes `user_id` for `channel_id` with `need`.
    pub async fn authorize(
        &self,
        guild_id: i64,
        user_id: i64,
        channel_id: i64,
        need: u64,
    ) -> Result<SendGrant, GuildError> {
        self.authorize_with(guild_id, user_id, channel_id, need, false)
            .await
    }

    /// [`Self::authorize`] for sending a message: the channel's slowmode
    /// applies and starts.
    pub async fn authorize_send(
        &self,
        guild_id: i64,
        user_id: i64,
        channel_id: i64,
        need: u64,
    ) -> Result<SendGrant, GuildError> {
        self.authorize_with(guild_id, user_id, channel_id, need, true)
            .await
    }

    async fn authorize_with(
        &self,
        guild_id: i64,
        user_id: i64,
        channel_id: i64,
        need: u64,
        slowmode: bool,
    ) -> Result<SendGrant, GuildError> {
        let call = GuildCall::Authorize {
            user_id,
            channel_id,
            need,
            slowmode,
        };
        match self.call(guild_id, call).await? {
            GuildAnswer::Granted(grant) => Ok(grant),
            other => unexpected(guild_id, &other),
        }
    }

    /// Adds `user` to the guild; whether they were new.
    ///
    /// A newcomer already online has no status at the owner yet (the
    /// presence role tells owners of changes, and this is none): it is
    /// asked for and cast to the owner, which announces it as any change.
    pub async fn add_member(
        &self,
        guild_id: i64,
        user: UserRecord,
        temporary: bool,
    ) -> Result<bool, GuildError> {
        let user_id = user.id;
        let call = GuildCall::AddMember { user, temporary };
        let added = match self.call(guild_id, call).await? {
            GuildAnswer::Added(new) => new,
            other => return unexpected(guild_id, &other),
        };
        if added {
            for (user_id, status) in self.ask_presence(guild_id, &[user_id]).await {
                // Best effort, as every presence cast.
                let call = GuildCall::Presence {
                    user_id,
                    status,
                    disconnected: false,
                };
                let _ = self.cast(guild_id, call);
            }
        }
        Ok(added)
    }

    /// The REST guild object as `user_id` sees it (GET /guilds/{id}).
    pub async fn guild(
        &self,
        guild_id: i64,
        user_id: i64,
    ) -> Result<serde_json::Value, GuildError> {
        match self.call(guild_id, GuildCall::Guild { user_id }).await? {
            GuildAnswer::RestGuild(guild) => Ok(guild),
            other => unexpected(guild_id, &other),
        }
    }

    /// The guild as `user_id`'s GUILD_CREATE shows it.
    pub async fn snapshot(&self, guild_id: i64, user_id: i64) -> Result<model::Guild, GuildError> {
        match self.call(guild_id, GuildCall::Snapshot { user_id }).await? {
            GuildAnswer::Guild(guild) => Ok(*guild),
            other => unexpected(guild_id, &other),
        }
    }

    /// One page of members.
    pub async fn members(
        &self,
        guild_id: i64,
        user_id: i64,
        query: String,
        user_ids: Vec<i64>,
        after: i64,
        limit: usize,
    ) -> Result<MemberPage, GuildError> {
        let call = GuildCall::Members {
            user_id,
            query,
            user_ids,
            after,
            limit,
            nicknames: false,
        };
        match self.call(guild_id, call).await? {
            GuildAnswer::Members(page) => Ok(page),
            other => unexpected(guild_id, &other),
        }
    }

    /// Members whose username or nickname starts with `query` (case
    /// insensitive), at most `limit`, in user id order: the REST search.
    pub async fn search_members(
        &self,
        guild_id: i64,
        user_id: i64,
        query: String,
        limit: usize,
    ) -> Result<MemberPage, GuildError> {
        let call = GuildCall::Members {
            user_id,
            query,
            user_ids: vec![],
            after: 0,
            limit,
            nicknames: true,
        };
        match self.call(guild_id, call).await? {
            GuildAnswer::Members(page) => Ok(page),
            other => unexpected(guild_id, &other),
        }
    }

    /// Records an audit log entry for an action taken outside the owner
    /// (see [`GuildCall::Audit`]).
    pub async fn audit(&self, guild_id: i64, call: GuildCall) -> Result<(), GuildError> {
        match self.call(guild_id, call).await? {
            GuildAnswer::Changed(_) => Ok(()),
            other => unexpected(guild_id, &other),
        }
    }

    /// A change by `actor`.
    pub async fn change(
        &self,
        guild_id: i64,
        actor: i64,
        change: GuildChange,
        reason: Option<String>,
    ) -> Result<Changed, GuildError> {
        match self
            .call(
                guild_id,
                GuildCall::Change {
                    actor,
                    change: Box::new(change),
                    reason,
                },
            )
            .await?
        {
            GuildAnswer::Changed(changed) => Ok(changed),
            other => unexpected(guild_id, &other),
        }
    }

    /// Op 4 through the owner; the voice state.
    pub async fn voice(
        &self,
        guild_id: i64,
        call: GuildCall,
    ) -> Result<serde_json::Value, GuildError> {
        match self.call(guild_id, call).await? {
            GuildAnswer::Voice(state) => Ok(state),
            other => unexpected(guild_id, &other),
        }
    }

    /// The guild's roles.
    pub async fn roles(&self, guild_id: i64, user_id: i64) -> Result<Vec<Role>, GuildError> {
        match self.call(guild_id, GuildCall::Roles { user_id }).await? {
            GuildAnswer::Roles(roles) => Ok(roles),
            other => unexpected(guild_id, &other),
        }
    }

    /// The guild's channels.
    pub async fn channels(&self, guild_id: i64, user_id: i64) -> Result<Vec<Channel>, GuildError> {
        match self.call(guild_id, GuildCall::Channels { user_id }).await? {
            GuildAnswer::Channels(channels) => Ok(channels),
            other => unexpected(guild_id, &other),
        }
    }

    /// The guild's active threads `user_id` can view, each with their
    /// thread member where they joined.
    pub async fn active_threads(
        &self,
        guild_id: i64,
        user_id: i64,
    ) -> Result<Vec<Channel>, GuildError> {
        match self
            .call(guild_id, GuildCall::ActiveThreads { user_id })
            .await?
        {
            GuildAnswer::Channels(threads) => Ok(threads),
            other => unexpected(guild_id, &other),
        }
    }

    /// The statuses of `user_ids` (of `guild_id`) that are not offline, as
    /// the presence role knows them; nothing while it cools off after a
    /// question it left unanswered.
    pub async fn ask_presence(&self, guild_id: i64, user_ids: &[i64]) -> Vec<(i64, String)> {
        let limits = &self.limits;
        let now = crate::state::now_ms();
        if now < self.presence_quiet_until_ms.load(Ordering::Relaxed) {
            self.counters
                .presence_queries_skipped_total
                .fetch_add(1, Ordering::Relaxed);
            return vec![];
        }
        // A load asks inside its caller's wait, beside the pull: never
        // longer than the pull may take.
        let timeout_ms = limits
            .presence_query_timeout_ms
            .min(limits.guild_reply_timeout_ms / 2)
            .max(1);
        let answer = crate::presence::query(
            self.bus.as_ref(),
            &self.cluster,
            user_ids,
            limits.presence_query_users_max,
            limits.presence_queries_per_load_max,
            Duration::from_millis(timeout_ms),
        )
        .await;
        match answer {
            Some(statuses) => statuses,
            None => {
                self.counters
                    .presence_queries_failed_total
                    .fetch_add(1, Ordering::Relaxed);
                self.presence_quiet_until_ms.store(
                    now.saturating_add(limits.presence_query_cooloff_ms),
                    Ordering::Relaxed,
                );
                crate::throttled!(
                    warn,
                    "guilds.presence_query_failed",
                    guild_id,
                    "presence role did not answer: members read as offline"
                );
                vec![]
            }
        }
    }
}

/// Longest the outbox driver sleeps with nothing held before it looks
/// again (it is woken at once when something is held; this only bounds a
/// missed wake-up).
const OUTBOX_IDLE_WAIT_MS: u64 = 60_000;

/// Whether a failed publish may succeed later at the same or a new owner.
fn retryable(error: GuildError) -> bool {
    error.is_retryable()
}

/// An answer of the wrong kind: a version skew between nodes, never a
/// panic.
fn unexpected<T>(guild_id: i64, answer: &GuildAnswer) -> Result<T, GuildError> {
    let kind = match answer {
        GuildAnswer::Granted(_) => "granted",
        GuildAnswer::Added(_) => "added",
        GuildAnswer::Guild(_) => "guild",
        GuildAnswer::RestGuild(_) => "rest_guild",
        GuildAnswer::Members(_) => "members",
        GuildAnswer::Changed(_) => "changed",
        GuildAnswer::Voice(_) => "voice",
        GuildAnswer::Roles(_) => "roles",
        GuildAnswer::Channels(_) => "channels",
        GuildAnswer::Published => "published",
    };
    crate::throttled!(
        warn,
        "guilds.unexpected_answer",
        guild_id,
        kind,
        "unexpected guild answer"
    );
    Err(GuildError::Overloaded)
}

/// Releases a reserved outbox head whose first attempt was abandoned (the
/// publishing future dropped before the owner answered): the driver then
/// offers it again, ahead of what the guild holds behind it.
struct HeadGuard<'a> {
    client: &'a GuildsClient,
    guild_id: i64,
    armed: bool,
}

impl Drop for HeadGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.client.lock_outbox().release(self.guild_id);
            self.client
                .outbox_counters
                .held_total
                .fetch_add(1, Ordering::Relaxed);
            self.client.outbox_wake.notify_one();
        }
    }
}
