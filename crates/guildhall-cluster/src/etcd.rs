//! [`EtcdRegistry`]: the [`Registry`] trait over etcd v3, cluster mode's
//! registry.
//!
//! - Every call runs under a timeout ([`EtcdOptions`]): a stopped or
//!   partitioned etcd answers nothing, and a caller that waits forever is
//!   the failure (the node's keep-alive task must get its answer, good or
//!   bad, before its next tick). A timeout or any transport error is
//!   [`RegistryError::Unavailable`]; a lease etcd no longer knows is
//!   [`RegistryError::UnknownLease`].
//! - Values pass through raw in both directions. Validation is the reader's
//!   ([`crate::RegistryView`]): a corrupt value written by anyone (seed 002)
//!   reaches the view, which rejects and counts it.
//! - A watch is etcd's prefix watch from the listing's revision + 1,
//!   drained by its own task into the caller's bounded buffer. It ends
//!   (the watcher lists again) on a compacted start revision or etcd's
//!   cancel, on any stream error (a reconnect, a connection the HTTP/2
//!   pings found dead), and when the buffer is full: etcd's stream is never
//!   held back by a slow consumer, and nothing is buffered without bound.
//! - Keep-alives run on their own etcd connection (seed 004): the watches
//!   and listings share the main connection, and a flood of them (a mass
//!   re-list after a compaction, a large listing) queues on that
//!   connection's HTTP/2 flow-control windows and etcd's handling of it, not
//!   in front of the renewals that keep this node in the cluster. The
//!   registry runs no background task for leases: each
//!   [`Registry::keep_alive`] call is one complete round trip, so the
//!   node's dedicated renewal task (every TTL/3) is all a lease needs.

use crate::registry::{Claim, LeaseId, Listing, Registry, RegistryError, Watch, WatchEvent};
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream,
    LeaseKeeper, PutOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};

/// Time to open both connections and hear etcd answer on each. When hit:
/// [`EtcdRegistry::connect`] fails with `Unavailable` and the caller retries
/// with backoff. A loopback or in-zone etcd answers in milliseconds; 3 s
/// leaves room for a busy one without stalling a node's start for long.
pub const ETCD_CONNECT_TIMEOUT_MS: u64 = 3_000;

/// Time for one call (grant, put, revoke, list, watch creation). When hit:
/// the call fails with `Unavailable` (the request is cancelled). Well above
/// a healthy etcd's latency (its fsync included), well below a lease TTL.
pub const ETCD_CALL_TIMEOUT_MS: u64 = 2_000;

/// Time for one keep-alive round trip. When hit: `Unavailable`, and the
/// lease's keep-alive stream is dropped and opened afresh on the next
/// call. Under the renewal interval (TTL/3, 5 s by default,
/// `guildhall_limits::LEASE_RENEW_INTERVAL_MS`) so a stalled renewal ends
/// before the next one is due, leaving a full renewal for a retry.
pub const ETCD_KEEP_ALIVE_TIMEOUT_MS: u64 = 2_000;

/// Largest buffer a watch may ask for, in events. When hit: the caller's
/// `capacity_events` is lowered to this; a watcher further behind has its
/// watch ended and lists again, which costs one listing, not memory.
pub const ETCD_WATCH_CAPACITY_EVENTS_MAX: usize = 65_536;

/// Watches open at once on one registry. When hit: a new watch is refused
/// with [`RegistryError::Full`] (its caller retries after a pause). A node
/// watches a handful of prefixes; more is a leak.
pub const ETCD_WATCHES_MAX: usize = 1_024;

/// Keys one listing reads. When hit (etcd reports more keys under the
/// prefix): the listing fails with [`RegistryError::Full`] rather than
/// returning part of the prefix, because a partial listing would make the
/// view drop live instances; the caller keeps its last view. Matches the
/// in-process registry's entry limit.
pub const ETCD_LIST_KEYS_MAX: usize = crate::registry::LOCAL_REGISTRY_ENTRIES_MAX;

/// Largest gRPC response decoded (a listing, one watch response). When hit:
/// the call (or the watch) fails as `Unavailable`. tonic's default is
/// 4 MiB; etcd accepts values up to 1.5 MiB each, so a few corrupt
/// oversized values under a prefix would make it unlistable at 4 MiB.
pub const ETCD_RESPONSE_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Leases with an open keep-alive stream. When hit: the least recently
/// renewed lease's stream is closed (a lease renewed again reopens one). A
/// node holds one lease per announcement; the bound only stops streams of
/// leases nobody renews any more from piling up.
pub const ETCD_KEEPERS_MAX: usize = 64;

/// HTTP/2 ping interval on both connections, so a dead connection under an
/// otherwise silent watch is noticed (the watch ends; the watcher lists
/// again). Not under 5 s: etcd answers pings more frequent than its
/// `--grpc-keepalive-min-time` (5 s by default) with GOAWAY.
pub const ETCD_PING_INTERVAL_MS: u64 = 10_000;

/// Time for a ping's answer. When hit: the connection is closed, its
/// streams fail (watches end, keep-alive streams are reopened).
pub const ETCD_PING_TIMEOUT_MS: u64 = 5_000;

/// The registry's bounds; [`Default`] is the constants above. The binary
/// reads them from its configuration's `[etcd_client]` table (or
/// `GUILDHALL_ETCD_CLIENT_<FIELD>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EtcdOptions {
    /// See [`ETCD_CONNECT_TIMEOUT_MS`].
    pub connect_timeout_ms: u64,
    /// See [`ETCD_CALL_TIMEOUT_MS`].
    pub call_timeout_ms: u64,
    /// See [`ETCD_KEEP_ALIVE_TIMEOUT_MS`].
    pub keep_alive_timeout_ms: u64,
    /// See [`ETCD_WATCH_CAPACITY_EVENTS_MAX`].
    pub watch_capacity_events_max: usize,
    /// See [`ETCD_WATCHES_MAX`].
    pub watches_max: usize,
    /// See [`ETCD_LIST_KEYS_MAX`].
    pub list_keys_max: usize,
    /// See [`ETCD_RESPONSE_BYTES_MAX`].
    pub response_bytes_max: usize,
    /// See [`ETCD_KEEPERS_MAX`].
    pub keepers_max: usize,
    /// See [`ETCD_PING_INTERVAL_MS`].
    pub ping_interval_ms: u64,
    /// See [`ETCD_PING_TIMEOUT_MS`].
    pub ping_timeout_ms: u64,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            connect_timeout_ms: ETCD_CONNECT_TIMEOUT_MS,
            call_timeout_ms: ETCD_CALL_TIMEOUT_MS,
            keep_alive_timeout_ms: ETCD_KEEP_ALIVE_TIMEOUT_MS,
            watch_capacity_events_max: ETCD_WATCH_CAPACITY_EVENTS_MAX,
            watches_max: ETCD_WATCHES_MAX,
            list_keys_max: ETCD_LIST_KEYS_MAX,
            response_bytes_max: ETCD_RESPONSE_BYTES_MAX,
            keepers_max: ETCD_KEEPERS_MAX,
            ping_interval_ms: ETCD_PING_INTERVAL_MS,
            ping_timeout_ms: ETCD_PING_TIMEOUT_MS,
        }
    }
}

impl EtcdOptions {
    /// Every broken bound at once (empty when the options are usable):
    /// each is a count or a duration, and 0 would refuse everything or
    /// wait for ever.
    pub fn validate(&self) -> Vec<String> {
        [
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("call_timeout_ms", self.call_timeout_ms),
            ("keep_alive_timeout_ms", self.keep_alive_timeout_ms),
            (
                "watch_capacity_events_max",
                self.watch_capacity_events_max as u64,
            ),
            ("watches_max", self.watches_max as u64),
            ("list_keys_max", self.list_keys_max as u64),
            ("response_bytes_max", self.response_bytes_max as u64),
            ("keepers_max", self.keepers_max as u64),
            ("ping_interval_ms", self.ping_interval_ms),
            ("ping_timeout_ms", self.ping_timeout_ms),
        ]
        .into_iter()
        .filter(|(_, value)| *value == 0)
        .map(|(name, _)| format!("{name} must be positive"))
        .collect()
    }
}

/// One lease's keep-alive stream: requests go out through the keeper, the
/// answers come back on the stream, one at a time.
type Keeper = (LeaseKeeper, LeaseKeepAliveStream);
type KeeperSlot = Arc<tokio::sync::Mutex<Option<Keeper>>>;

#[derive(Default)]
struct Keepers {
    /// Lease → (last use, its stream). The async mutex serialises round
    /// trips on one stream so an answer is never read by the wrong call.
    slots: HashMap<LeaseId, (u64, KeeperSlot)>,
    uses: u64,
}

/// The etcd registry. Cloning shares the connections.
#[derive(Clone)]
pub struct EtcdRegistry {
    /// Listings, watches, grants, puts, revokes.
    main: Client,
    /// Keep-alives only (seed 004).
    keep_alive: Client,
    options: EtcdOptions,
    keepers: Arc<Mutex<Keepers>>,
    watches: Arc<Semaphore>,
}

impl std::fmt::Debug for EtcdRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRegistry")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl EtcdRegistry {
    /// A new lease of at least `ttl_ms`: etcd's id and ours. etcd leases
    /// are whole seconds: rounded up so a lease never lives shorter than
    /// asked (etcd may raise it further to its minimum TTL).
    async fn grant(&self, ttl_ms: u64) -> Result<(i64, LeaseId), RegistryError> {
        let ttl_s = i64::try_from(ttl_ms.div_ceil(1_000).max(1)).unwrap_or(i64::MAX);
        let granted = within(
            self.options.call_timeout_ms,
            self.main.lease_client().grant(ttl_s, None),
        )
        .await?;
        let id = granted.id();
        let lease = LeaseId::try_from(id).map_err(|_| RegistryError::Unavailable)?;
        Ok((id, lease))
    }

    /// Connects to `endpoints` (`http://host:port`): two connections, the
    /// main one and the keep-alive one, each checked with a status call.
    ///
    /// # Errors
    /// `Unavailable` when etcd does not answer on both within
    /// `connect_timeout_ms`, or the endpoints cannot be parsed.
    pub async fn connect<E: AsRef<str>>(
        endpoints: &[E],
        options: EtcdOptions,
    ) -> Result<Self, RegistryError> {
        let endpoints: Vec<String> = endpoints.iter().map(|e| e.as_ref().to_owned()).collect();
        let connect_options = ConnectOptions::new()
            .with_connect_timeout(ms(options.connect_timeout_ms))
            .with_keep_alive(ms(options.ping_interval_ms), ms(options.ping_timeout_ms))
            // Pings only while a stream is open: etcd refuses pings on an
            // idle connection (GOAWAY), and an idle one has nothing to lose.
            .with_keep_alive_while_idle(false)
            // Without a leader etcd would hold requests and watches
            // silently; with this it answers with an error at once.
            .with_require_leader(true);
        let connect = async {
            let mut main = Client::connect(&endpoints, Some(connect_options.clone())).await?;
            let mut keep_alive = Client::connect(&endpoints, Some(connect_options)).await?;
            // Channels connect lazily: a status call proves each answers.
            main.status().await?;
            keep_alive.status().await?;
            Ok::<_, etcd_client::Error>((main, keep_alive))
        };
        let (main, keep_alive) = within(options.connect_timeout_ms, connect).await?;
        Ok(Self {
            main,
            keep_alive,
            options,
            keepers: Arc::new(Mutex::new(Keepers::default())),
            watches: Arc::new(Semaphore::new(options.watches_max)),
        })
    }

    /// The main connection's client (tests and operators' tools: raw puts,
    /// compaction). Values written through it bypass nothing: readers
    /// validate whatever they read.
    pub fn client(&self) -> Client {
        self.main.clone()
    }

    fn lock_keepers(&self) -> std::sync::MutexGuard<'_, Keepers> {
        // A map of handles, consistent between statements: a panic
        // elsewhere cannot leave it half-updated.
        self.keepers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The lease's keep-alive slot, made if missing; the least recently
    /// used slot is dropped to stay within `keepers_max`.
    fn keeper_slot(&self, lease: LeaseId) -> KeeperSlot {
        let mut keepers = self.lock_keepers();
        keepers.uses += 1;
        let now = keepers.uses;
        if let Some((used, slot)) = keepers.slots.get_mut(&lease) {
            *used = now;
            return slot.clone();
        }
        while keepers.slots.len() >= self.options.keepers_max.max(1) {
            let oldest = keepers
                .slots
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => keepers.slots.remove(&id),
                None => break,
            };
        }
        let slot = KeeperSlot::default();
        keepers.slots.insert(lease, (now, slot.clone()));
        slot
    }

    /// Forgets the lease's stream if it is still `slot` (a newer one made
    /// by a later call is kept).
    fn drop_keeper(&self, lease: LeaseId, slot: &KeeperSlot) {
        let mut keepers = self.lock_keepers();
        if keepers
            .slots
            .get(&lease)
            .is_some_and(|(_, s)| Arc::ptr_eq(s, slot))
        {
            keepers.slots.remove(&lease);
        }
    }

    async fn renew(&self, id: i64, slot: &KeeperSlot) -> Result<(), RegistryError> {
        let mut keeper = slot.lock().await;
        if let Some((sender, answers)) = keeper.as_mut() {
            match round_trip(id, sender, answers).await {
                Ok(()) => return Ok(()),
                Err(RegistryError::UnknownLease) => return Err(RegistryError::UnknownLease),
                // The stream broke (a reconnect, an etcd restart): open a
                // new one below, within the same deadline.
                Err(_) => *keeper = None,
            }
        }
        // Opening the stream is itself a keep-alive round trip: etcd-client
        // sends the first request and reads its answer (TTL 0: "lease not
        // found").
        let opened = self
            .keep_alive
            .lease_client()
            .keep_alive(id)
            .await
            .map_err(|e| classify(&e))?;
        *keeper = Some(opened);
        Ok(())
    }
}

/// One request and its answer on an open keep-alive stream.
async fn round_trip(
    id: i64,
    sender: &mut LeaseKeeper,
    answers: &mut LeaseKeepAliveStream,
) -> Result<(), RegistryError> {
    sender.keep_alive().await.map_err(|e| classify(&e))?;
    match answers.message().await {
        // TTL 0 is etcd's "no such lease": it expired or was revoked.
        Ok(Some(answer)) if answer.id() == id && answer.ttl() <= 0 => {
            Err(RegistryError::UnknownLease)
        }
        Ok(Some(answer)) if answer.id() == id => Ok(()),
        // Another lease's answer cannot come on this stream; treat the
        // stream as broken rather than guess.
        Ok(Some(_) | None) => Err(RegistryError::Unavailable),
        Err(e) => Err(classify(&e)),
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms.max(1))
}

/// `call` under a timeout of `timeout_ms`, its error classified.
async fn within<T>(
    timeout_ms: u64,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, RegistryError> {
    match tokio::time::timeout(ms(timeout_ms), call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(classify(&e)),
        Err(_elapsed) => Err(RegistryError::Unavailable),
    }
}

/// etcd says a lease is gone in two ways: a gRPC NotFound "etcdserver:
/// requested lease not found" (grant, put, revoke), and a keep-alive answer
/// with TTL 0 (which etcd-client reports as "lease not found"). Everything
/// else (transport, timeouts, no leader, too large) is `Unavailable`.
fn classify(error: &etcd_client::Error) -> RegistryError {
    match error {
        etcd_client::Error::GRpcStatus(status) if status.message().contains("lease not found") => {
            RegistryError::UnknownLease
        }
        etcd_client::Error::LeaseKeepAliveError(message) if message.contains("lease not found") => {
            RegistryError::UnknownLease
        }
        _ => RegistryError::Unavailable,
    }
}

/// etcd lease IDs are positive i64s; anything else was never one of its
/// leases.
fn lease_id(lease: LeaseId) -> Result<i64, RegistryError> {
    i64::try_from(lease)
        .ok()
        .filter(|id| *id > 0)
        .ok_or(RegistryError::UnknownLease)
}

/// Keys are UTF-8 by our convention only: a foreign key is passed on
/// lossily, and the view rejects it (its key matches no announcement).
fn key_string(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

#[async_trait::async_trait]
impl Registry for EtcdRegistry {
    async fn claim(&self, key: &str, value: Vec<u8>, ttl_ms: u64) -> Result<Claim, RegistryError> {
        let timeout_ms = self.options.call_timeout_ms;
        let (id, lease) = self.grant(ttl_ms).await?;
        // A key that was never created (or was deleted) has create
        // revision 0: the put happens only then, in the same transaction
        // as the check, and otherwise the holder is read back.
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(id)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = within(timeout_ms, self.main.kv_client().txn(txn)).await;
        let held = match answer {
            Ok(answer) if answer.succeeded() => return Ok(Claim::Won(lease)),
            Ok(answer) => answer
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                })
                .unwrap_or_default(),
            Err(e) => {
                // As in put_with_lease: no orphan lease.
                let _ = within(timeout_ms, self.main.lease_client().revoke(id)).await;
                return Err(e);
            }
        };
        // Lost: the lease holds nothing and is not kept.
        let _ = within(timeout_ms, self.main.lease_client().revoke(id)).await;
        Ok(Claim::Held(held))
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<LeaseId, RegistryError> {
        let timeout_ms = self.options.call_timeout_ms;
        let (id, lease) = self.grant(ttl_ms).await?;
        // One transaction carries the whole value with its lease: etcd
        // applies it entirely or not at all, so no reader can see a key
        // half-written or without its lease (seed 002).
        let txn = Txn::new().and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(id)),
        )]);
        match within(timeout_ms, self.main.kv_client().txn(txn)).await {
            Ok(_) => Ok(lease),
            Err(e) => {
                // No orphan lease: revoke what was granted. Should the txn
                // have been applied after all (it timed out in flight), the
                // revoke removes its key too, which matches the error the
                // caller sees. Should the revoke fail as well, the lease
                // holds no key and expires within its TTL.
                let _ = within(timeout_ms, self.main.lease_client().revoke(id)).await;
                Err(e)
            }
        }
    }

    async fn put_under_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        let id = lease_id(lease)?;
        // A put naming a lease etcd no longer has fails with "requested
        // lease not found" and writes nothing (classified UnknownLease).
        let txn = Txn::new().and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(id)),
        )]);
        within(self.options.call_timeout_ms, self.main.kv_client().txn(txn))
            .await
            .map(|_| ())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), RegistryError> {
        let id = lease_id(lease)?;
        let slot = self.keeper_slot(lease);
        let result = match tokio::time::timeout(
            ms(self.options.keep_alive_timeout_ms),
            self.renew(id, &slot),
        )
        .await
        {
            Ok(result) => result,
            Err(_elapsed) => Err(RegistryError::Unavailable),
        };
        if result.is_err() {
            // A stream that failed or timed out may still deliver a late
            // answer: never reuse it. An unknown lease needs no stream.
            if let Ok(mut keeper) = slot.try_lock() {
                *keeper = None;
            }
            self.drop_keeper(lease, &slot);
        }
        result
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), RegistryError> {
        let Ok(id) = lease_id(lease) else {
            return Ok(());
        };
        {
            let mut keepers = self.lock_keepers();
            keepers.slots.remove(&lease);
        }
        match within(
            self.options.call_timeout_ms,
            self.main.lease_client().revoke(id),
        )
        .await
        {
            // Revoking a lease that already ended has done its job (its
            // keys are gone), as in the in-process registry: leaving twice
            // is not an error.
            Ok(_) | Err(RegistryError::UnknownLease) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Listing, RegistryError> {
        let keys_max = self.options.list_keys_max.max(1);
        let limit = i64::try_from(keys_max).unwrap_or(i64::MAX);
        let mut kv = self
            .main
            .kv_client()
            .max_decoding_message_size(self.options.response_bytes_max);
        let response = within(
            self.options.call_timeout_ms,
            kv.get(
                prefix,
                Some(GetOptions::new().with_prefix().with_limit(limit)),
            ),
        )
        .await?;
        if response.more() {
            return Err(RegistryError::Full);
        }
        let revision = response
            .header()
            .map(|h| h.revision())
            .and_then(|r| u64::try_from(r).ok())
            .ok_or(RegistryError::Unavailable)?;
        let entries: BTreeMap<String, Vec<u8>> = response
            .kvs()
            .iter()
            .map(|kv| (key_string(kv.key()), kv.value().to_vec()))
            .collect();
        Ok(Listing { revision, entries })
    }

    async fn watch(
        &self,
        prefix: &str,
        after_revision: u64,
        capacity_events: usize,
    ) -> Result<Watch, RegistryError> {
        let permit = self
            .watches
            .clone()
            .try_acquire_owned()
            .map_err(|_| RegistryError::Full)?;
        let capacity = capacity_events.clamp(1, self.options.watch_capacity_events_max.max(1));
        let start = after_revision
            .checked_add(1)
            .and_then(|r| i64::try_from(r).ok())
            .ok_or(RegistryError::Unavailable)?;
        let options = WatchOptions::new().with_prefix().with_start_revision(start);
        let mut client = self
            .main
            .watch_client()
            .max_decoding_message_size(self.options.response_bytes_max);
        // The stream and its first answer (the watch's creation) under one
        // deadline: a stopped etcd fails the call, not the first `next`.
        let open = async {
            let mut stream = client.watch(prefix, Some(options)).await?;
            let created = stream.message().await?;
            Ok::<_, etcd_client::Error>((stream, created))
        };
        let (mut stream, created) = within(self.options.call_timeout_ms, open).await?;
        let (sender, receiver) = mpsc::channel(capacity);
        if created.is_some_and(|c| c.created() && !c.canceled()) {
            // One task per watch drains etcd's stream into the bounded
            // buffer at once, so a slow consumer never holds etcd's stream
            // back, and its buffer never grows past `capacity`.
            tokio::spawn(async move {
                let _permit = permit;
                loop {
                    let answer = tokio::select! {
                        // The consumer dropped its watch: cancel etcd's.
                        () = sender.closed() => return,
                        answer = stream.message() => answer,
                    };
                    // A stream error or end (a reconnect) ends the watch;
                    // so does etcd's cancel, a compacted start revision
                    // among the reasons: events would be missing.
                    let Ok(Some(answer)) = answer else { return };
                    if answer.canceled() || answer.compact_revision() > 0 {
                        return;
                    }
                    for event in answer.events() {
                        let Some(kv) = event.kv() else { continue };
                        let key = key_string(kv.key());
                        let event = match event.event_type() {
                            EventType::Put => WatchEvent::Put {
                                key,
                                value: kv.value().to_vec(),
                            },
                            EventType::Delete => WatchEvent::Delete { key },
                        };
                        // Full: the watcher fell behind; it keeps what is
                        // buffered, then its watch ends and it lists again.
                        if sender.try_send(event).is_err() {
                            return;
                        }
                    }
                }
            });
        }
        // Not created (refused, or cancelled at once): the sender is gone,
        // so the watch ends at once and the watcher lists again.
        let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|event| (event, receiver))
        });
        Ok(Watch::new(events.boxed()))
    }
}
