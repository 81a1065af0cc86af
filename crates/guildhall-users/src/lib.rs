//! The users role: who a token belongs to, and batch loads of users for
//! the guild owners.
//!
//! Batch loads arrive over the bus on `users.requests` in the queue group
//! `users` (any node running the role serves them; in embedded mode, this
//! one). The role is a router in front of `users_shards` shards: a batch
//! (at most `users_batch_ids_max` ids) takes one of
//! `users_loads_in_flight_max` slots, then is split by shard (id mod
//! shards). Each shard is a task with a bounded mailbox that owns its slice
//! of users: a bounded, expiring cache of their rows in front of one store
//! query for the misses, one query at a time. No free slot or a full shard
//! mailbox refuses the batch at once; nothing queues without bound (seed
//! 000's router handled one request at a time and let a flood of misses
//! queue behind it). Loads do not pass the adaptive limit of token lookups:
//! most are cache hits, and a latency signal mixing hits with store reads
//! took a healthy burst for overload and refused nearly all of it.
//!
//! Seed 000's users service fell over when a flood of cache misses met a
//! router that handled one request at a time. Here every lookup goes
//! through the mechanisms of `guildhall-control`:
//! - an L1 cache (bounded, TTL, oldest evicted first);
//! - single-flight per token: N concurrent lookups of one token cost one
//!   store read;
//! - the read runs under a fail-fast permit pool sized by a Vegas adaptive
//!   limit: when the store is saturated the lookup fails at once with
//!   [`UsersError::Overloaded`] (503 for REST, INVALID_SESSION for IDENTIFY)
//!   instead of queueing;
//! - the read runs in its own task, so a caller that gives up never strands
//!   the others waiting on the same flight.

use guildhall_control::Criticality;
use guildhall_control::adaptive::{AdaptiveLimit, LimitBounds, Outcome, Vegas};
use guildhall_control::log_throttle::{LogThrottle, Verdict};
use guildhall_control::permit::PermitPool;
use guildhall_control::singleflight::{Join, SingleFlight};
use guildhall_store::{Store, UserRow};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub use guildhall_proto::users::{
    USERS_INVALIDATE_SUBJECT, USERS_QUEUE_GROUP, USERS_SUBJECT, UserInvalidation, UserRecord,
    UsersCall, UsersError, UsersReply, UsersRequest,
};

/// The wall clock in Unix ms, read at this edge and passed down.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Answers `reply` (best effort: a caller that gave up has no inbox left).
fn answer(bus: &dyn guildhall_cluster::Bus, reply: &str, result: Result<Vec<UserRow>, UsersError>) {
    let envelope = UsersReply {
        v: guildhall_proto::bus::ENVELOPE_VERSION,
        // A record has no password hash field: the store's conversion leaves it.
        result: result.map(|rows| rows.iter().map(UserRecord::from).collect()),
    };
    if let Ok(bytes) = serde_json::to_vec(&envelope) {
        let _ = bus.publish(reply, None, bytes.into());
    }
}

// The role's client, below the roles: this front asks the role through it
// when a token misses its caches, as other roles do for batch loads.
use guildhall_common::users::ask;

type Answer = Result<Option<UserRow>, UsersError>;
type Digest = [u8; 32];

/// Counters of the users role.
#[derive(Debug, Default)]
pub struct UsersCounters {
    /// Lookups answered from the cache.
    pub cache_hits_total: AtomicU64,
    /// Lookups answered from the cache of known-invalid tokens.
    pub negative_hits_total: AtomicU64,
    /// Reads from the store.
    pub store_reads_total: AtomicU64,
    /// Lookups that joined a read already in flight.
    pub coalesced_total: AtomicU64,
    /// Lookups shed.
    pub shed_total: AtomicU64,
    /// Requests whose caller's deadline had passed when they were read:
    /// not started (seed 000: work nobody waits for is what drowned it).
    pub expired_total: AtomicU64,
    /// Batch loads served.
    pub batch_loads_total: AtomicU64,
    /// Batch loads refused (pool full, malformed, over the batch bound).
    pub batch_refused_total: AtomicU64,
    /// Invalidations this node could not publish to the others (bus down
    /// or full): their caches keep the rows until `users_cache_ttl_ms`.
    pub invalidations_unsent_total: AtomicU64,
    /// Invalidations heard from the bus (every node's, this one's too).
    pub invalidations_heard_total: AtomicU64,
}

struct Cache {
    entries: HashMap<Digest, (UserRow, u64)>,
    order: VecDeque<Digest>,
    entries_max: usize,
    ttl_ms: u64,
}

/// Digests known to be no token, so a repeated bad token costs no store
/// read. Every entry lives `ttl_ms`, so insertion order is expiry order and
/// the oldest is dropped first. A stale entry cannot hide a new token: the
/// server makes tokens from 27 random bytes, so a new token's digest has
/// never been looked up before.
struct Negative {
    expires: HashMap<Digest, u64>,
    order: VecDeque<(Digest, u64)>,
    entries_max: usize,
    ttl_ms: u64,
}

impl Negative {
    fn contains(&mut self, digest: &Digest, now: u64) -> bool {
        while let Some(&(oldest, expires)) = self.order.front() {
            if expires > now {
                break;
            }
            self.order.pop_front();
            if self.expires.get(&oldest) == Some(&expires) {
                self.expires.remove(&oldest);
            }
        }
        self.expires.get(digest).is_some_and(|e| *e > now)
    }

    fn insert(&mut self, digest: Digest, now: u64) {
        let expires = now + self.ttl_ms;
        self.expires.insert(digest, expires);
        self.order.push_back((digest, expires));
        while self.expires.len() > self.entries_max || self.order.len() > 2 * self.entries_max {
            let Some((oldest, at)) = self.order.pop_front() else {
                break;
            };
            if self.expires.get(&oldest) == Some(&at) {
                self.expires.remove(&oldest);
            }
        }
    }
}

struct Flights {
    flights: SingleFlight<Digest, u64>,
    waiters: HashMap<u64, oneshot::Sender<Answer>>,
    next_waiter: u64,
}

/// A request to a users shard.
enum ShardMessage {
    /// Rows of these users (all in the shard's slice), and how many came
    /// from the cache.
    Load {
        ids: Vec<i64>,
        reply: oneshot::Sender<Result<(Vec<UserRow>, usize), UsersError>>,
    },
    /// A user changed: drop the cached row.
    Forget { user_id: i64 },
}

/// One shard: its slice of users' rows, cached, and its store reads.
struct Shard {
    store: Store,
    rows: HashMap<i64, (UserRow, u64)>,
    order: VecDeque<i64>,
    entries_max: usize,
    ttl_ms: u64,
    /// Most ids in one store read (`users_batch_ids_max`).
    read_ids_max: usize,
}

impl Shard {
    fn remember(&mut self, row: UserRow, now: u64) {
        let id = row.id;
        if self.rows.insert(id, (row, now + self.ttl_ms)).is_none() {
            self.order.push_back(id);
        }
        while self.rows.len() > self.entries_max {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.rows.remove(&oldest);
        }
        // Forgotten ids linger in `order` until popped; keep it bounded.
        if self.order.len() > self.entries_max.saturating_mul(2) {
            let rows = &self.rows;
            self.order.retain(|id| rows.contains_key(id));
        }
    }

    /// Serves the mailbox. Loads waiting together are answered by one
    /// store read of all their misses (at most `read_ids_max` ids): the
    /// shard reads one query at a time, so under a burst each query
    /// carries the burst's misses instead of the burst queueing one query
    /// per load.
    async fn run(mut self, mut mailbox: tokio::sync::mpsc::Receiver<ShardMessage>) {
        let mut next = None;
        loop {
            let first = match next.take() {
                Some(message) => message,
                None => match mailbox.recv().await {
                    Some(message) => message,
                    None => return,
                },
            };
            let (ids, reply) = match first {
                ShardMessage::Forget { user_id } => {
                    self.rows.remove(&user_id);
                    continue;
                }
                ShardMessage::Load { ids, reply } => (ids, reply),
            };
            let now = now_ms();
            let mut loads = vec![self.split_cached(ids, reply, now)];
            let mut missing: usize = loads[0].missing.len();
            // Take what else waits, while the read stays within its bound.
            while missing < self.read_ids_max {
                match mailbox.try_recv() {
                    Ok(ShardMessage::Forget { user_id }) => {
                        self.rows.remove(&user_id);
                    }
                    Ok(ShardMessage::Load { ids, reply }) => {
                        let load = self.split_cached(ids, reply, now);
                        if missing + load.missing.len() > self.read_ids_max {
                            // Too big to ride along: it leads the next read.
                            next = Some(ShardMessage::Load {
                                ids: load.ids,
                                reply: load.reply,
                            });
                            break;
                        }
                        missing += load.missing.len();
                        loads.push(load);
                    }
                    Err(_) => break,
                }
            }
            let wanted: Vec<i64> = {
                let mut all: Vec<i64> = loads
                    .iter()
                    .flat_map(|l| l.missing.iter().copied())
                    .collect();
                all.sort_unstable();
                all.dedup();
                all
            };
            let mut read: HashMap<i64, UserRow> = HashMap::new();
            if !wanted.is_empty() {
                match self.store.users_by_ids(&wanted).await {
                    Ok(loaded) => {
                        for row in loaded {
                            self.remember(row.clone(), now);
                            read.insert(row.id, row);
                        }
                    }
                    Err(error) => {
                        let error = match error {
                            guildhall_store::StoreError::Busy => UsersError::Overloaded,
                            _ => UsersError::Store,
                        };
                        for load in loads {
                            let _ = load.reply.send(Err(error));
                        }
                        continue;
                    }
                }
            }
            for load in loads {
                let hits = load.found.len();
                let mut found = load.found;
                found.extend(load.missing.iter().filter_map(|id| read.get(id).cloned()));
                let _ = load.reply.send(Ok((found, hits)));
            }
        }
    }

    /// Splits a load into what the cache holds and what must be read.
    fn split_cached(
        &self,
        ids: Vec<i64>,
        reply: oneshot::Sender<Result<(Vec<UserRow>, usize), UsersError>>,
        now: u64,
    ) -> PendingLoad {
        let mut found = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        for id in &ids {
            match self.rows.get(id) {
                Some((row, expires)) if *expires > now => found.push(row.clone()),
                _ => missing.push(*id),
            }
        }
        PendingLoad {
            ids,
            found,
            missing,
            reply,
        }
    }
}

/// A load waiting for its shard's next store read.
struct PendingLoad {
    ids: Vec<i64>,
    found: Vec<UserRow>,
    missing: Vec<i64>,
    reply: oneshot::Sender<Result<(Vec<UserRow>, usize), UsersError>>,
}

/// The users role, and the token-lookup front (L1 cache, single-flight)
/// every caller of this node goes through.
pub struct Users {
    bus: Arc<dyn guildhall_cluster::Bus>,
    shards: Vec<tokio::sync::mpsc::Sender<ShardMessage>>,
    store: Store,
    cache: Mutex<Cache>,
    negative: Mutex<Negative>,
    flights: Mutex<Flights>,
    permits: Mutex<(PermitPool, AdaptiveLimit)>,
    // Batch loads being answered (`users_loads_in_flight_max`).
    loads: Arc<tokio::sync::Semaphore>,
    lookup_timeout_ms: u64,
    /// At most one line per kind per interval (seed 000).
    throttle: Mutex<LogThrottle<&'static str>>,
    /// Counters.
    pub counters: UsersCounters,
}

/// What a request was admitted with, returned when it is answered.
enum Admitted {
    /// A permit of the adaptive pool (a token lookup's store read).
    Read,
    /// A batch load's slot.
    Load(tokio::sync::OwnedSemaphorePermit),
}

/// The users role as the front doors (gateway, api) see it: their token
/// lookups through this node's cache and single-flight.
struct Lookups(Arc<Users>);

impl guildhall_common::users::TokenLookups for Lookups {
    fn by_token(
        &self,
        digest: Digest,
    ) -> futures_util::future::BoxFuture<'_, guildhall_common::users::TokenAnswer> {
        Box::pin(self.0.by_token(digest))
    }

    fn invalidate_user(&self, user_id: i64) {
        self.0.invalidate_user(user_id);
    }

    fn cached(&self, digest: &Digest) -> Option<Option<UserRow>> {
        self.0.cached(digest)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Users {
    /// The users role over `store`.
    pub fn new(
        store: Store,
        limits: &guildhall_limits::Limits,
        bus: Arc<dyn guildhall_cluster::Bus>,
    ) -> Arc<Self> {
        let bounds = LimitBounds {
            floor: limits.adaptive_limit_floor,
            start: limits.adaptive_limit_start,
            ceiling: limits.adaptive_limit_ceiling,
        };
        let shards = (0..limits.users_shards.max(1))
            .map(|_| {
                let (sender, mailbox) = tokio::sync::mpsc::channel(limits.users_shard_mailbox_max);
                let shard = Shard {
                    store: store.clone(),
                    rows: HashMap::new(),
                    order: VecDeque::new(),
                    entries_max: limits.users_shard_cache_entries_max,
                    ttl_ms: limits.users_cache_ttl_ms,
                    read_ids_max: limits.users_batch_ids_max.max(1),
                };
                tokio::spawn(shard.run(mailbox));
                sender
            })
            .collect();
        Arc::new(Self {
            bus,
            shards,
            store,
            cache: Mutex::new(Cache {
                entries: HashMap::new(),
                order: VecDeque::new(),
                entries_max: limits.users_cache_entries_max,
                ttl_ms: limits.users_cache_ttl_ms,
            }),
            negative: Mutex::new(Negative {
                expires: HashMap::new(),
                order: VecDeque::new(),
                entries_max: limits.users_negative_cache_entries_max,
                ttl_ms: limits.users_negative_cache_ttl_ms,
            }),
            flights: Mutex::new(Flights {
                flights: SingleFlight::new(
                    limits.singleflight_keys_max,
                    limits.singleflight_waiters_per_key_max,
                ),
                waiters: HashMap::new(),
                next_waiter: 0,
            }),
            permits: Mutex::new((
                PermitPool::new(bounds.start),
                AdaptiveLimit::Vegas(Vegas::new(bounds)),
            )),
            loads: Arc::new(tokio::sync::Semaphore::new(
                limits.users_loads_in_flight_max,
            )),
            lookup_timeout_ms: limits.users_lookup_timeout_ms,
            throttle: Mutex::new(LogThrottle::new(
                limits.log_throttle_interval_ms,
                limits.log_throttle_keys_max,
            )),
            counters: UsersCounters::default(),
        })
    }

    /// What the caches know of a token digest without asking the role:
    /// `Some(Some(user))`, `Some(None)` (known invalid) or `None` (unknown:
    /// [`Users::by_token`] would read the store).
    pub fn cached(&self, digest: &Digest) -> Option<Option<UserRow>> {
        let now = now_ms();
        {
            let cache = lock(&self.cache);
            if let Some((user, expires)) = cache.entries.get(digest)
                && *expires > now
            {
                self.counters
                    .cache_hits_total
                    .fetch_add(1, Ordering::Relaxed);
                return Some(Some(user.clone()));
            }
        }
        if lock(&self.negative).contains(digest, now) {
            self.counters
                .negative_hits_total
                .fetch_add(1, Ordering::Relaxed);
            return Some(None);
        }
        None
    }

    /// This front as the gateway and the api hold it.
    pub fn lookups(self: &Arc<Self>) -> Arc<dyn guildhall_common::users::TokenLookups> {
        Arc::new(Lookups(self.clone()))
    }

    /// The user a token digest belongs to.
    pub async fn by_token(self: &Arc<Self>, digest: Digest) -> Answer {
        if let Some(known) = self.cached(&digest) {
            return Ok(known);
        }
        let (reply, answer) = oneshot::channel();
        let lead = {
            let mut f = lock(&self.flights);
            f.next_waiter += 1;
            let id = f.next_waiter;
            match f.flights.join(digest, id) {
                Join::Lead => {
                    f.waiters.insert(id, reply);
                    Some(id)
                }
                Join::Follow => {
                    self.counters
                        .coalesced_total
                        .fetch_add(1, Ordering::Relaxed);
                    f.waiters.insert(id, reply);
                    None
                }
                Join::Rejected(_) => {
                    self.counters.shed_total.fetch_add(1, Ordering::Relaxed);
                    return Err(UsersError::Overloaded);
                }
            }
        };
        if let Some(leader) = lead {
            let users = self.clone();
            tokio::spawn(async move { users.fetch(digest, leader).await });
        }
        match tokio::time::timeout(Duration::from_millis(self.lookup_timeout_ms), answer).await {
            Ok(Ok(answer)) => answer,
            _ => Err(UsersError::Overloaded),
        }
    }

    /// Serves the role's requests from the bus until the bus goes away:
    /// token lookups (the callers' L1 cache and single-flight sit in front)
    /// and batch loads.
    pub async fn serve(
        self: &Arc<Self>,
        limits: &guildhall_limits::Limits,
    ) -> Result<tokio::task::JoinHandle<()>, guildhall_cluster::BusError> {
        let bus = self.bus.clone();
        // A request the full subscription cannot take is refused at once
        // (seed 000: callers answered fast, not left to their deadlines).
        let overloaded = serde_json::to_vec(&UsersReply {
            v: guildhall_proto::bus::ENVELOPE_VERSION,
            result: Err(UsersError::Overloaded),
        })
        .unwrap_or_default();
        let mut requests = bus
            .subscribe_shedding(
                USERS_SUBJECT,
                Some(USERS_QUEUE_GROUP),
                limits.bus_subscription_messages_max,
                overloaded.into(),
            )
            .await?;
        let users = self.clone();
        let batch_max = limits.users_batch_ids_max;
        Ok(tokio::spawn(async move {
            while let Some(message) = requests.next().await {
                if message.expired() {
                    users.counters.expired_total.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Some(reply) = message.reply else {
                    continue;
                };
                let call = match serde_json::from_slice::<UsersRequest>(&message.payload) {
                    Ok(r) if r.v == guildhall_proto::bus::ENVELOPE_VERSION => r.call,
                    _ => {
                        users.refuse(bus.as_ref(), &reply);
                        continue;
                    }
                };
                // Admitted here, before any task exists: a refused request
                // costs no task and no wait. A token lookup is a store read
                // and takes a permit of the adaptive pool; a batch load
                // takes a load slot (its misses are read by the shards, one
                // query at a time each).
                let admitted = match &call {
                    UsersCall::Token { digest } if digest.len() == 32 => {
                        users.admit(Criticality::Critical).then_some(Admitted::Read)
                    }
                    UsersCall::Load { ids } if ids.len() <= batch_max => users
                        .loads
                        .clone()
                        .try_acquire_owned()
                        .ok()
                        .map(Admitted::Load),
                    _ => {
                        users.refuse(bus.as_ref(), &reply);
                        continue;
                    }
                };
                let Some(admitted) = admitted else {
                    users.counters.shed_total.fetch_add(1, Ordering::Relaxed);
                    answer(bus.as_ref(), &reply, Err(UsersError::Overloaded));
                    continue;
                };
                let (users, bus) = (users.clone(), bus.clone());
                tokio::spawn(async move {
                    let started = Instant::now();
                    let result = match call {
                        UsersCall::Token { digest } => {
                            users
                                .counters
                                .store_reads_total
                                .fetch_add(1, Ordering::Relaxed);
                            users
                                .store
                                .user_by_token(&digest)
                                .await
                                .map(|user| user.into_iter().collect())
                                .map_err(|e| match e {
                                    guildhall_store::StoreError::Busy => UsersError::Overloaded,
                                    _ => UsersError::Store,
                                })
                        }
                        UsersCall::Load { ids } => {
                            users
                                .counters
                                .batch_loads_total
                                .fetch_add(1, Ordering::Relaxed);
                            users.load_sharded(ids).await
                        }
                    };
                    match admitted {
                        Admitted::Read => users.finish(started, result.is_ok()),
                        Admitted::Load(slot) => drop(slot),
                    }
                    answer(bus.as_ref(), &reply, result);
                });
            }
        }))
    }

    fn refuse(&self, bus: &dyn guildhall_cluster::Bus, reply: &str) {
        self.counters
            .batch_refused_total
            .fetch_add(1, Ordering::Relaxed);
        if let Verdict::Emit { suppressed } =
            lock(&self.throttle).check("users.bad_request", now_ms())
        {
            tracing::warn!(suppressed, "malformed or oversized users request refused");
        }
        answer(bus, reply, Err(UsersError::Overloaded));
    }

    /// Splits a batch by shard, asks each shard its part (refused at once
    /// when a shard's mailbox is full) and merges the answers.
    async fn load_sharded(&self, ids: Vec<i64>) -> Result<Vec<UserRow>, UsersError> {
        let shards = self.shards.len() as i64;
        let mut parts: Vec<Vec<i64>> = vec![Vec::new(); self.shards.len()];
        for id in ids {
            parts[id.rem_euclid(shards) as usize].push(id);
        }
        let mut answers = Vec::new();
        for (shard, part) in self.shards.iter().zip(parts) {
            if part.is_empty() {
                continue;
            }
            let (reply, answer) = oneshot::channel();
            shard
                .try_send(ShardMessage::Load { ids: part, reply })
                .map_err(|_| UsersError::Overloaded)?;
            answers.push(answer);
        }
        let timeout = Duration::from_millis(self.lookup_timeout_ms);
        let mut rows = Vec::new();
        for answer in answers {
            let (part, hits) = match tokio::time::timeout(timeout, answer).await {
                Ok(Ok(result)) => result?,
                _ => return Err(UsersError::Overloaded),
            };
            self.counters
                .cache_hits_total
                .fetch_add(hits as u64, Ordering::Relaxed);
            rows.extend(part);
        }
        Ok(rows)
    }

    /// Takes a permit of the adaptive pool at `criticality`, or refuses.
    fn admit(&self, criticality: Criticality) -> bool {
        let mut p = lock(&self.permits);
        let limit = p.1.limit();
        p.0.set_size(limit);
        p.0.try_acquire(criticality).is_ok()
    }

    /// Returns a permit and feeds the adaptive limit its sample.
    fn finish(&self, started: Instant, ok: bool) {
        let rtt_us = started.elapsed().as_micros() as u64;
        let mut p = lock(&self.permits);
        let inflight = p.0.in_use();
        p.0.release();
        let outcome = if ok {
            Outcome::Success
        } else {
            Outcome::Dropped
        };
        p.1.on_sample(rtt_us, inflight, outcome);
    }

    async fn fetch(self: Arc<Self>, digest: Digest, leader: u64) {
        let timeout = Duration::from_millis(self.lookup_timeout_ms);
        let call = UsersCall::Token {
            digest: digest.to_vec(),
        };
        let answer = ask(self.bus.as_ref(), call, timeout)
            .await
            .map(|users| users.into_iter().next());
        if let Ok(None) = &answer {
            lock(&self.negative).insert(digest, now_ms());
        }
        if let Ok(Some(user)) = &answer {
            let mut cache = lock(&self.cache);
            let expires = now_ms() + cache.ttl_ms;
            if cache
                .entries
                .insert(digest, (user.clone(), expires))
                .is_none()
            {
                cache.order.push_back(digest);
                while cache.order.len() > cache.entries_max {
                    if let Some(old) = cache.order.pop_front() {
                        cache.entries.remove(&old);
                    }
                }
            }
        }
        let mut f = lock(&self.flights);
        let followers = f.flights.complete(&digest);
        for id in std::iter::once(leader).chain(followers) {
            if let Some(reply) = f.waiters.remove(&id) {
                let _ = reply.send(answer.clone());
            }
        }
    }

    /// Forgets every cached token and row of `user_id` (its tokens were
    /// revoked, or it changed) here and, over the bus, on every node: a
    /// revoked token stops working everywhere at once, not a cache TTL
    /// later. Best effort: an invalidation the bus refuses is counted, and
    /// the other nodes' entries expire after `users_cache_ttl_ms`.
    pub fn invalidate_user(&self, user_id: i64) {
        self.forget(user_id);
        let message = UserInvalidation {
            v: guildhall_proto::bus::ENVELOPE_VERSION,
            user_id,
        };
        let sent = serde_json::to_vec(&message).ok().is_some_and(|bytes| {
            self.bus
                .publish(USERS_INVALIDATE_SUBJECT, None, bytes.into())
                .is_ok()
        });
        if !sent {
            self.counters
                .invalidations_unsent_total
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Listens for every node's invalidations (this node runs it whatever
    /// its roles: any node may cache a token). A subscription that falls
    /// `capacity_messages` behind loses the rest, which then expire after
    /// `users_cache_ttl_ms`; a message that does not decode is skipped.
    pub async fn listen_invalidations(
        self: &Arc<Self>,
        capacity_messages: usize,
    ) -> Result<tokio::task::JoinHandle<()>, guildhall_cluster::BusError> {
        let mut heard = self
            .bus
            .subscribe(USERS_INVALIDATE_SUBJECT, None, capacity_messages)
            .await?;
        let users = self.clone();
        Ok(tokio::spawn(async move {
            while let Some(message) = heard.next().await {
                if let Ok(invalidation) =
                    serde_json::from_slice::<UserInvalidation>(&message.payload)
                {
                    users
                        .counters
                        .invalidations_heard_total
                        .fetch_add(1, Ordering::Relaxed);
                    users.forget(invalidation.user_id);
                }
            }
        }))
    }

    /// Forgets `user_id`'s cached tokens and rows on this node.
    fn forget(&self, user_id: i64) {
        // Best effort: a full shard mailbox leaves the row to expire after
        // `users_cache_ttl_ms`.
        let shard = user_id.rem_euclid(self.shards.len() as i64) as usize;
        let _ = self.shards[shard].try_send(ShardMessage::Forget { user_id });
        let mut cache = lock(&self.cache);
        cache.entries.retain(|_, (user, _)| user.id != user_id);
        let Cache { entries, order, .. } = &mut *cache;
        order.retain(|d| entries.contains_key(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn shards_cache_their_slice_and_forget_changed_users() {
        let store = Store::open_in_memory().await.unwrap();
        for id in 1..=10 {
            let user = UserRow {
                id,
                username: format!("u{id}"),
                password_hash: None,
                bot: false,
                global_name: None,
                created_ms: 0,
            };
            store.create_user(&user).await.unwrap();
        }
        let limits = guildhall_limits::Limits::default();
        let bus = Arc::new(guildhall_cluster::LocalBus::new(
            limits.bus_payload_bytes_max,
        ));
        let users = Users::new(store, &limits, bus);
        let _role = users.serve(&limits).await.unwrap();
        let hits = || users.counters.cache_hits_total.load(Ordering::Relaxed);
        let ids: Vec<i64> = (1..=12).collect();
        let mut first: Vec<i64> = users
            .load_sharded(ids.clone())
            .await
            .unwrap()
            .iter()
            .map(|u| u.id)
            .collect();
        first.sort_unstable();
        assert_eq!(
            first,
            (1..=10).collect::<Vec<_>>(),
            "unknown ids are absent"
        );
        assert_eq!(hits(), 0);
        assert_eq!(users.load_sharded(ids.clone()).await.unwrap().len(), 10);
        assert_eq!(hits(), 10, "the second load is served by the shards");
        users.invalidate_user(3);
        users.load_sharded(ids).await.unwrap();
        assert_eq!(hits(), 19, "a changed user is read again");
    }

    /// Loads that wait together share one store read: each still gets
    /// exactly its own users (none of another load's, unknown ids absent),
    /// and the next load of the same ids is served from the cache.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loads_waiting_together_each_get_their_own_rows() {
        let store = Store::open_in_memory().await.unwrap();
        for id in 1..=400 {
            let user = UserRow {
                id,
                username: format!("u{id}"),
                password_hash: None,
                bot: false,
                global_name: None,
                created_ms: 0,
            };
            store.create_user(&user).await.unwrap();
        }
        let limits = guildhall_limits::Limits {
            users_shards: 1,
            ..guildhall_limits::Limits::default()
        };
        let bus = Arc::new(guildhall_cluster::LocalBus::new(
            limits.bus_payload_bytes_max,
        ));
        let users = Users::new(store, &limits, bus);
        // Loads of 5 ids each (one of them unknown), 100 at once.
        let want =
            |i: i64| -> Vec<i64> { (0..4).map(|k| i * 4 + k + 1).chain([10_000 + i]).collect() };
        let loads: Vec<_> = (0..100)
            .map(|i| {
                let users = users.clone();
                tokio::spawn(async move { (i, users.load_sharded(want(i)).await) })
            })
            .collect();
        for load in loads {
            let (i, rows) = load.await.unwrap();
            let mut got: Vec<i64> = rows.unwrap().iter().map(|u| u.id).collect();
            got.sort_unstable();
            assert_eq!(got, want(i)[..4].to_vec(), "load {i}");
        }
        let before = users.counters.cache_hits_total.load(Ordering::Relaxed);
        assert_eq!(users.load_sharded(want(7)).await.unwrap().len(), 4);
        assert_eq!(
            users.counters.cache_hits_total.load(Ordering::Relaxed),
            before + 4,
            "rows read for a coalesced load are cached"
        );
    }

    #[tokio::test]
    async fn concurrent_lookups_of_one_token_cost_one_read() {
        let store = Store::open_in_memory().await.unwrap();
        let user = UserRow {
            id: 7,
            username: "u".into(),
            password_hash: None,
            bot: false,
            global_name: None,
            created_ms: 0,
        };
        store.create_user(&user).await.unwrap();
        store.add_token(&[1; 32], 7, 0).await.unwrap();
        let limits = guildhall_limits::Limits::default();
        let bus = Arc::new(guildhall_cluster::LocalBus::new(
            limits.bus_payload_bytes_max,
        ));
        let users = Users::new(store, &limits, bus);
        let _role = users.serve(&limits).await.unwrap();
        let lookups: Vec<_> = (0..200)
            .map(|_| {
                let users = users.clone();
                tokio::spawn(async move { users.by_token([1; 32]).await })
            })
            .collect();
        for lookup in lookups {
            assert_eq!(lookup.await.unwrap().unwrap().map(|u| u.id), Some(7));
        }
        let reads = users.counters.store_reads_total.load(Ordering::Relaxed);
        assert!(reads <= 2, "{reads} store reads for one token");
        users.invalidate_user(7);
        assert_eq!(users.by_token([2; 32]).await, Ok(None));
        assert_eq!(
            users.by_token([2; 32]).await,
            Ok(None),
            "a known-invalid token is answered without a read"
        );
        assert_eq!(
            users.counters.negative_hits_total.load(Ordering::Relaxed),
            1
        );
        assert_eq!(
            users.by_token([1; 32]).await.unwrap().map(|u| u.id),
            Some(7)
        );
        assert_eq!(
            users.counters.store_reads_total.load(Ordering::Relaxed),
            reads + 2,
            "invalidated entry was re-read"
        );
    }
}
