//! A session's guild subscriptions, on the gateway side: which guilds each
//! session here follows (the hub records it first, so a stream resync can
//! ask again), the owner's `Subscribe`, `Move` and `Unsubscribe` casts, and
//! the retries of every subscription (READY's, a join's, a resync's, a
//! takeover's) whose GUILD_CREATE does not come (full-jitter backoff,
//! at most `guild_subscribe_attempts_max` attempts, within the node's
//! retry budget and `guild_subscribe_retry_tasks_max` watching tasks).
//!
//! It is the gateway's: the guilds role learns of a session only from
//! these casts (and from a new owner's question, `events::serve_follows`),
//! and never holds the hub.

use crate::hub::{Hub, Slot};
use guildhall_common::guilds::GuildsClient;
use guildhall_common::state::Shared;
use guildhall_control::retry::{RetryBudget, backoff_full_jitter_ms};
use guildhall_proto::guilds::{GuildCall, GuildError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters of READY subscriptions retried, read by `/metrics`.
#[derive(Debug, Default)]
pub struct SubscribeCounters {
    /// Subscriptions asked for again (GUILD_CREATE had not arrived).
    pub retries_total: AtomicU64,
    /// Retries the retry budget refused.
    pub retries_refused_total: AtomicU64,
    /// Subscriptions still without GUILD_CREATE after
    /// `guild_subscribe_attempts_max` attempts.
    pub gave_up_total: AtomicU64,
    /// Sessions not watched for retries at `guild_subscribe_retry_tasks_max`.
    pub tasks_refused_total: AtomicU64,
}

/// This node's sessions' subscriptions to their guilds.
pub struct Subscriptions {
    shared: Arc<Shared>,
    hub: Arc<Hub>,
    guilds: Arc<GuildsClient>,
    node_name: String,
    /// READY subscription retry counters.
    pub counters: SubscribeCounters,
    // Retries of READY subscriptions may add only a share of first attempts
    // (a guild node that is down must not be hit by every session again).
    budget: std::sync::Mutex<RetryBudget>,
    // Sessions being watched for retries (`guild_subscribe_retry_tasks_max`).
    tasks: Arc<tokio::sync::Semaphore>,
}

impl Subscriptions {
    /// The subscriptions of `hub`'s sessions, asked of the owners that
    /// `guilds` routes to, as node `node_name`.
    pub fn new(
        shared: Arc<Shared>,
        hub: Arc<Hub>,
        guilds: Arc<GuildsClient>,
        node_name: String,
    ) -> Self {
        let limits = &shared.limits;
        Self {
            budget: std::sync::Mutex::new(RetryBudget::new(
                limits.retry_budget_ratio_permille,
                limits.retry_budget_floor_per_s,
                limits.retry_budget_window_ms,
                guildhall_limits::RETRY_BUDGET_BUCKETS,
            )),
            tasks: Arc::new(tokio::sync::Semaphore::new(
                limits.guild_subscribe_retry_tasks_max,
            )),
            counters: SubscribeCounters::default(),
            hub,
            guilds,
            node_name,
            shared,
        }
    }

    /// Has this node's `slot` follow `guild_id`: recorded here first (so a
    /// stream resync can ask again), then asked of the guild's owner, whose
    /// GUILD_CREATE arrives in the guild's stream to this node. A guild of
    /// another shard than the session's is not asked for at all.
    pub async fn subscribe(&self, guild_id: i64, slot: &Arc<Slot>) -> Result<(), GuildError> {
        if !self.hub.want(guild_id, slot) {
            return Ok(());
        }
        self.guilds.cast(
            guild_id,
            GuildCall::Subscribe {
                node: self.node_name.clone(),
                session_id: slot.id.clone(),
                user_id: slot.user_id,
                intents: slot.intents,
                large_threshold: slot.large_threshold,
            },
        )
    }

    fn lock_budget(&self) -> std::sync::MutexGuard<'_, RetryBudget> {
        self.budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Subscribes `slot` to the guilds its READY listed as unavailable.
    /// Discord's model: each becomes available with its GUILD_CREATE. A
    /// subscription is a cast, so a lost or refused one (owner's node busy
    /// or unreachable, load failed) shows only as a GUILD_CREATE that never
    /// comes; a task watches for that and asks again, with full-jitter
    /// backoff, at most `guild_subscribe_attempts_max` attempts in all and
    /// within the node's retry budget. Returns without waiting for any of it.
    pub async fn subscribe_ready(self: &Arc<Self>, slot: &Arc<Slot>, guild_ids: Vec<i64>) {
        let pairs = guild_ids
            .into_iter()
            .map(|guild_id| (guild_id, slot.clone()))
            .collect();
        self.subscribe_watched(pairs).await;
    }

    /// Subscribes each (guild, session) of `pairs` and watches for their
    /// GUILD_CREATEs as [`Subscriptions::subscribe_ready`] does: every
    /// subscription a session needs (READY's, a join's, a resync's after a
    /// gap or an owner change, a takeover's) is asked again until its
    /// GUILD_CREATE comes, so a lost or refused cast (the owner's mailbox
    /// full, its node paused) does not leave a session silently deaf to a
    /// guild. One watching task per call, within
    /// `guild_subscribe_retry_tasks_max`.
    pub async fn subscribe_watched(self: &Arc<Self>, pairs: Vec<(i64, Arc<Slot>)>) {
        {
            let mut budget = self.lock_budget();
            let now = guildhall_common::state::now_ms();
            for _ in &pairs {
                budget.on_first_attempt(now);
            }
        }
        for (guild_id, slot) in &pairs {
            if let Err(error) = self.subscribe(*guild_id, slot).await {
                guildhall_common::throttled!(warn, "gateway.guild_unavailable", guild_id, %error, "guild unavailable for a subscription");
            }
        }
        if pairs.is_empty() || self.shared.limits.guild_subscribe_attempts_max <= 1 {
            return;
        }
        let Ok(permit) = self.tasks.clone().try_acquire_owned() else {
            self.counters
                .tasks_refused_total
                .fetch_add(1, Ordering::Relaxed);
            return;
        };
        let subscriptions = self.clone();
        tokio::spawn(async move {
            subscriptions.retry_subscriptions(pairs).await;
            drop(permit);
        });
    }

    /// Waits for the GUILD_CREATEs of `pending`, asking again for those
    /// that do not come. Each wait is `guild_reply_timeout_ms` (how long any
    /// guild request may take) plus a full-jitter backoff, so sessions that
    /// failed together do not retry together.
    async fn retry_subscriptions(&self, mut pending: Vec<(i64, Arc<Slot>)>) {
        let limits = &self.shared.limits;
        let mut attempts = 1;
        loop {
            let jitter_ms = backoff_full_jitter_ms(
                attempts - 1,
                limits.backoff_base_ms,
                limits.backoff_cap_ms,
                guildhall_common::auth::random_unit(),
            );
            tokio::time::sleep(Duration::from_millis(
                limits.guild_reply_timeout_ms.saturating_add(jitter_ms),
            ))
            .await;
            pending.retain(|(guild_id, slot)| {
                self.hub.awaiting(*guild_id, &slot.id) && self.hub.get(&slot.id).is_some()
            });
            if pending.is_empty() {
                return;
            }
            if attempts >= limits.guild_subscribe_attempts_max {
                self.counters
                    .gave_up_total
                    .fetch_add(pending.len() as u64, Ordering::Relaxed);
                return;
            }
            attempts += 1;
            for (guild_id, slot) in &pending {
                if !self
                    .lock_budget()
                    .try_retry(guildhall_common::state::now_ms())
                {
                    self.counters
                        .retries_refused_total
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                self.counters.retries_total.fetch_add(1, Ordering::Relaxed);
                let _ = self.subscribe(*guild_id, slot).await;
            }
        }
    }

    /// Asks the owner of `guild_id` to move `slot`'s subscription from this
    /// node to `to` (see `GuildCall::Move`).
    pub async fn move_session(
        &self,
        guild_id: i64,
        slot: &Slot,
        to: &str,
    ) -> Result<(), GuildError> {
        self.guilds.cast(
            guild_id,
            GuildCall::Move {
                from: self.node_name.clone(),
                to: to.to_owned(),
                session_id: slot.id.clone(),
                user_id: slot.user_id,
                intents: slot.intents,
                large_threshold: slot.large_threshold,
            },
        )
    }

    /// Tells the owner of `guild_id` that a session of this node is gone.
    pub async fn unsubscribe(&self, guild_id: i64, session_id: String) {
        let node = self.node_name.clone();
        let _ = self
            .guilds
            .cast(guild_id, GuildCall::Unsubscribe { node, session_id });
    }
}
