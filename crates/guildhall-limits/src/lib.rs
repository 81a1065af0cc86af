//! Every bound in Guildhall lives here, once.
//!
//! Each bound is a constant named with its unit last (`_ms`, `_bytes`, `_max`,
//! `_permille`, `_per_s`), a doc comment saying why that value and what happens
//! when it is hit, and a field of [`Limits`] so a deployment can override it.
//! Relations between bounds are checked twice: at compile time for the defaults
//! (the `const _: () = assert!(..)` blocks) and at run time for overrides
//! ([`Limits::validate`]).
//!
//! Architecture invariant: this crate depends on nothing and does no I/O. Every
//! other crate may depend on it.

use std::fmt;

// ---------------------------------------------------------------------------
// Ring and placement (seed 003: the voice-syncer ring collapse)
// ---------------------------------------------------------------------------

/// Virtual nodes per member on the hash ring. 160 points per member keeps the
/// plain ring's max/avg load near 1.1-1.2 at 20 members and spreads a failed
/// member's keys over all survivors instead of its one clockwise neighbour.
/// When hit: not a limit on traffic; the ring simply has this many points.
pub const RING_VNODES_PER_MEMBER: u32 = 160;

/// Members a ring may hold. A registry offering more is refused at the
/// membership table (new members are rejected, existing ones keep their place).
pub const RING_MEMBERS_MAX: usize = 4096;

/// Bounded-load slack ε in permille: no member holds more than
/// ⌈(1 + ε) × average⌉ keys. 250 (ε = 0.25) is the value the bounded-load
/// literature and resilience.md use: low movement, and failover spreads.
/// When hit: the key goes to the next member of its preference walk.
pub const RING_LOAD_EPSILON_PERMILLE: u32 = 250;

/// Longest preference list (primary, secondary, tertiary, ...). Requests for
/// more distinct members are clamped to this.
pub const RING_PREFERENCE_LIST_LEN_MAX: usize = 8;

/// Ring generations kept so a lookup that started on generation g finishes on
/// g even while newer generations are built. When hit: the oldest is dropped
/// and a lookup on it answers "generation gone" so the caller re-resolves.
pub const RING_HISTORY_GENERATIONS_MAX: usize = 8;

// ---------------------------------------------------------------------------
// Membership and leases (seeds 002, 003, 004)
// ---------------------------------------------------------------------------

/// Lease time-to-live. Discord used 60 s in etcd v2; 15 s with renewals every
/// TTL/3 notices a dead member four times sooner while tolerating two lost
/// renewals in a row.
pub const LEASE_TTL_MS: u64 = 15_000;

/// How often a member renews its lease: TTL/3, so two renewals can be lost
/// before the lease expires (the keep-alive task is isolated from the work it
/// protects, seed 004).
pub const LEASE_RENEW_INTERVAL_MS: u64 = LEASE_TTL_MS / 3;

/// Hysteresis between "down" (lease expired: no new work placed on it) and
/// "permanently down" (removed from the ring: its keys move). A stall shorter
/// than this moves nothing.
pub const MEMBER_PERMANENT_DOWN_MS: u64 = 10_000;

/// Self-preservation window: removals are counted per window of this length.
pub const SELF_PRESERVATION_WINDOW_MS: u64 = 30_000;

/// Self-preservation threshold: if more than this fraction (permille) of the
/// members would be removed within one window, removals freeze and an alarm is
/// raised; they are released as renewals return (a mass expiry is far more
/// likely a registry or network fault than a mass death, seed 003).
pub const SELF_PRESERVATION_REMOVAL_PERMILLE: u32 = 150;

/// Ring rebuilds allowed per self-preservation window. Further membership
/// changes are coalesced into the next allowed rebuild, so a flapping member
/// cannot make every node recompute placements continuously.
pub const RING_REBUILDS_PER_WINDOW_MAX: u32 = 6;

// ---------------------------------------------------------------------------
// Admission and overload control (seeds 000, 001)
// ---------------------------------------------------------------------------

/// Adaptive concurrency limit: the floor it never goes below, so a burst of
/// errors cannot starve a dependency to zero.
pub const ADAPTIVE_LIMIT_FLOOR: u32 = 4;

/// Adaptive concurrency limit: where it starts. Discord's static limit was 64.
pub const ADAPTIVE_LIMIT_START: u32 = 64;

/// Adaptive concurrency limit: the ceiling it never exceeds, whatever latency
/// says (a memory bound: each in-flight request holds buffers).
pub const ADAPTIVE_LIMIT_CEILING: u32 = 1024;

/// Retry budget: retries may add at most this fraction (permille) of first
/// attempts (Finagle's default of 20 %).
pub const RETRY_BUDGET_RATIO_PERMILLE: u32 = 200;

/// Retry budget: retries always allowed per second regardless of traffic, so a
/// quiet client can still retry a lone failure.
pub const RETRY_BUDGET_FLOOR_PER_S: u32 = 10;

/// Retry budget: the sliding window over which attempts are counted.
pub const RETRY_BUDGET_WINDOW_MS: u64 = 10_000;

/// Buckets the retry budget's window is divided into (memory is fixed: this
/// many pairs of counters).
pub const RETRY_BUDGET_BUCKETS: usize = 10;

/// Backoff: first retry delay upper bound (full jitter draws in [0, this]).
pub const BACKOFF_BASE_MS: u64 = 100;

/// Backoff: the largest delay ever drawn.
pub const BACKOFF_CAP_MS: u64 = 30_000;

/// Single-flight: distinct keys in flight at once. When hit: a new key is
/// rejected with `Overloaded` (the caller may not fetch around it).
pub const SINGLEFLIGHT_KEYS_MAX: usize = 65_536;

/// Single-flight: waiters sharing one fetch. When hit: further callers for the
/// key are rejected with `Overloaded` instead of queueing without bound.
pub const SINGLEFLIGHT_WAITERS_PER_KEY_MAX: usize = 1024;

/// Token bucket rates are clamped to this, so a fat-fingered runtime change
/// cannot overflow the arithmetic or open the floodgates.
pub const TOKEN_BUCKET_RATE_PER_S_MAX: u32 = 10_000_000;

// ---------------------------------------------------------------------------
// DOWN notices (seed 004: millions of :DOWN messages)
// ---------------------------------------------------------------------------

/// Most DOWN notices one peer receives in one batch.
pub const DOWN_BATCH_MAX: usize = 5_000;

/// How often per-peer DOWN batches are flushed.
pub const DOWN_BATCH_INTERVAL_MS: u64 = 100;

/// Local deliveries of DOWN notices per second per node (the rate the local
/// watchers can absorb without starving other work).
pub const DOWN_DELIVER_PER_S: u32 = 10_000;

/// DOWN reasons are truncated to this many bytes: the reason is diagnostic,
/// and a million copies of a long reason is how mailboxes blow up.
pub const DOWN_REASON_BYTES_MAX: usize = 64;

/// Bytes of queued DOWN notices a node holds before it stops expanding new
/// ones (they stay compressed as "peer down" markers, which cost O(1)).
pub const DOWN_QUEUE_BYTES_MAX: usize = 16 * 1024 * 1024;

// ---------------------------------------------------------------------------
// Drain (seed 004: a resize the handoff could not fit)
// ---------------------------------------------------------------------------

/// Grace period the orchestrator gives a node between SIGTERM and SIGKILL.
pub const DRAIN_GRACE_MS: u64 = 30_000;

/// Time kept free at the end of the grace period for the last clients to
/// resume and for the node to flush and exit.
pub const DRAIN_MARGIN_MS: u64 = 5_000;

/// Interval between RECONNECT batches.
pub const DRAIN_BATCH_INTERVAL_MS: u64 = 100;

/// Fraction (permille) of the receivers' resume cap the drain planner uses, so
/// receivers keep headroom for their own reconnects during a rolling restart.
pub const DRAIN_RECEIVER_UTILIZATION_PERMILLE: u32 = 800;

// ---------------------------------------------------------------------------
// Logging (seed 000: a warning per slow-consumer event burned the CPU)
// ---------------------------------------------------------------------------

/// A log line of one (kind, subject) key is emitted at most once per interval;
/// the rest are counted and the count is printed with the next line.
pub const LOG_THROTTLE_INTERVAL_MS: u64 = 1_000;

/// Distinct keys the log throttle tracks. When hit: new keys share one
/// overflow key, so a flood of distinct subjects still logs once per interval.
pub const LOG_THROTTLE_KEYS_MAX: usize = 1_024;

// ---------------------------------------------------------------------------
// Gateway sessions (seeds 001 and 004, and Discord's documented limits)
// ---------------------------------------------------------------------------

/// Largest payload a client may send, as Discord documents. When hit: close
/// 4002 (decode error), counted.
pub const GATEWAY_PAYLOAD_BYTES_MAX: usize = 4096;

/// Payloads a client may send per minute (Discord: 120 per 60 s). When hit:
/// close 4008 (rate limited), which is reconnectable.
pub const GATEWAY_INBOUND_PER_MINUTE_MAX: u32 = 120;

/// The heartbeat interval announced in HELLO. Kept at Discord's value:
/// discord.py treats 60 s of silence as a dead socket, so a longer interval
/// would make it reconnect for nothing.
pub const HEARTBEAT_INTERVAL_MS: u64 = 41_250;

/// A session that has not heartbeated for this long is closed with 4009
/// (session timed out). 1.5 intervals: one missed heartbeat is tolerated
/// (clients jitter their first one), two are not.
pub const HEARTBEAT_TIMEOUT_MS: u64 = HEARTBEAT_INTERVAL_MS * 3 / 2;

/// Messages a session's outbound queue holds. When hit: the session is a
/// slow consumer and is closed with 4000 (reconnectable); the client resumes
/// from the replay buffer. Never buffered without bound (seed 001).
pub const SESSION_QUEUE_MESSAGES_MAX: usize = 2_048;

/// Bytes a session's outbound queue holds; same behaviour as the count.
pub const SESSION_QUEUE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Dispatches kept per session for RESUME. When hit: the oldest is dropped;
/// a RESUME whose gap reaches past it gets INVALID_SESSION (re-identify).
pub const REPLAY_BUFFER_EVENTS_MAX: usize = 1_024;

/// Bytes kept per session for RESUME; oldest dropped first.
pub const REPLAY_BUFFER_BYTES_MAX: usize = 2 * 1024 * 1024;

/// How long a disconnected session stays resumable.
pub const RESUME_WINDOW_MS: u64 = 180_000;

/// Sessions one node holds. When hit: upgrades are refused with 503 and
/// `Retry-After` before the 101 (never accept-then-close).
pub const SESSIONS_PER_NODE_MAX: usize = 19_000;

/// IDENTIFY and RESUME handshakes admitted per second per node. When hit:
/// the upgrade is held up to [`HANDSHAKE_HOLD_MS_MAX`], then refused with
/// 503 and `Retry-After`.
pub const HANDSHAKE_RATE_PER_S: u32 = 2_000;

/// Longest a handshake waits for admission before it is refused.
pub const HANDSHAKE_HOLD_MS_MAX: u64 = 1_000;

// ---------------------------------------------------------------------------
// REST
// ---------------------------------------------------------------------------

/// Largest JSON request body. When hit: 413 with Discord's error body.
pub const REST_BODY_BYTES_MAX: usize = 64 * 1024;

/// Longest message content, in characters (Discord's 2,000). When hit: 400
/// with code 50035 (invalid form body).
pub const MESSAGE_CONTENT_CHARS_MAX: usize = 2_000;

/// Most messages one GET returns (Discord's `limit` cap).
pub const MESSAGES_PER_PAGE_MAX: usize = 100;

/// Most members one GET or one GUILD_MEMBERS_CHUNK carries.
pub const MEMBERS_PER_PAGE_MAX: usize = 1_000;

/// Requests per caller, route and major id (channel or guild) per window.
/// When hit: 429 with Discord's body, `Retry-After` and `Via`.
pub const REST_RATE_LIMIT_PER_WINDOW: u32 = 50;

/// Token → user entries the users role caches. When hit: the oldest entry
/// is evicted.
pub const USERS_CACHE_ENTRIES_MAX: usize = 100_000;

/// How long a cached token → user entry is trusted. Bounds how long a token
/// revoked by another process (the CLI) keeps working on this node; tokens
/// revoked through this node are evicted at once.
pub const USERS_CACHE_TTL_MS: u64 = 30_000;

/// The REST rate-limit window.
pub const REST_RATE_WINDOW_MS: u64 = 1_000;

/// Rate-limit buckets tracked at once. When hit: expired buckets are
/// forgotten; if none has expired, new callers share one overflow bucket
/// (they are limited together, never let through unlimited).
pub const REST_RATE_BUCKETS_MAX: usize = 100_000;

// ---------------------------------------------------------------------------
// Roles and the store
// ---------------------------------------------------------------------------

/// Largest bus payload, in bytes (NATS's default `max_payload`). When hit: the publish is refused and counted; a GUILD_CREATE that large is not sent (the session gets the guild through REST).
pub const BUS_PAYLOAD_BYTES_MAX: usize = 1_048_576;

/// Messages a bus subscription holds undelivered. When hit: the bus drops the message for that subscriber and counts it; guild streams detect the gap and resynchronise.
pub const BUS_SUBSCRIPTION_MESSAGES_MAX: usize = 8_192;

/// Partitions of a gateway node's event streams, each drained by its own task. A guild always maps to one partition (its order is kept); different guilds fan out in parallel.
pub const GATEWAY_EVENT_PARTITIONS: usize = 4;

/// Session subscriptions one guild owner tracks (across all gateway nodes). When hit: further subscriptions are refused and counted; the session gets no live events for that guild.
pub const GUILD_SUBSCRIPTIONS_MAX: usize = 1_000_000;

/// Shortest time between two re-subscriptions of one guild's sessions on one gateway node after gaps in its stream. When hit: delivery of the guild stops at the gap and the sessions re-subscribe when the interval ends, so a stream that keeps overflowing cannot become a storm of GUILD_CREATEs.
pub const STREAM_RESYNC_INTERVAL_MS: u64 = 500;

/// Guilds a node loads at once (each load is one store read and a few user batches; one load per guild however many requests wait for it). When hit: a request for another guild that is not loaded is answered `Overloaded` (503 for REST) at once.
pub const GUILD_REQUESTS_IN_FLIGHT_MAX: usize = 1_024;

/// Messages a guild owner's mailbox holds. When hit: callers get `Overloaded` (503 for REST) at once; nobody queues behind a busy guild.
pub const GUILD_MAILBOX_MESSAGES_MAX: usize = 1_024;

/// User ids in one batch load from the users role (a guild owner loading its members asks in batches of this size). When hit: the caller splits the load into more batches.
pub const USERS_BATCH_IDS_MAX: usize = 500;

/// Sessions whose presence the presence role tracks. When hit: further sessions are not tracked (counted); their users show the status of their tracked sessions, or offline.
pub const PRESENCE_SESSIONS_MAX: usize = 1_000_000;

/// Shards of the users role on a node: each owns the users whose id falls in its slice (id mod shards), with its own cache and mailbox.
pub const USERS_SHARDS: usize = 4;

/// Loads a users shard's mailbox holds. When hit: the batch that needed it is refused with `Overloaded` at once.
pub const USERS_SHARD_MAILBOX_MAX: usize = 256;

/// User rows one users shard caches (oldest evicted first; entries also expire after `users_cache_ttl_ms`).
pub const USERS_SHARD_CACHE_ENTRIES_MAX: usize = 50_000;

/// Longest a caller waits for a guild owner's answer; then `Overloaded`.
pub const GUILD_REPLY_TIMEOUT_MS: u64 = 5_000;

/// Guild owners a node keeps loaded. When hit: requests for a guild not yet loaded are refused with `Overloaded` rather than loading without bound.
pub const GUILD_OWNERS_MAX: usize = 100_000;

/// Guilds one session may hold (Discord's sharding threshold). When hit: close 4011 (sharding required).
pub const READY_GUILDS_MAX: usize = 2_500;

/// Database connections. SQLite serialises writers; readers run in parallel under WAL. When all are busy past the acquire timeout: `Busy` (503).
pub const STORE_POOL_CONNECTIONS_MAX: u32 = 8;

/// Message writes waiting for the group-commit writer. When hit: `Busy` at once (503), never an unbounded queue in front of the disk.
pub const MESSAGE_WRITE_QUEUE_MAX: usize = 4_096;

/// Message writes committed in one transaction (one fsync).
pub const MESSAGE_WRITE_BATCH_MAX: usize = 256;

/// Longest a token lookup waits for its flight; then `Overloaded`.
pub const USERS_LOOKUP_TIMEOUT_MS: u64 = 5_000;

// ---------------------------------------------------------------------------
// Guild loading, event-stream tasks and READY subscriptions
// ---------------------------------------------------------------------------

/// Requests that wait behind one guild's load (they are handed to the new
/// owner in arrival order). Below the owner's mailbox so a load's queue
/// always fits in it. When hit: further requests for that guild are answered
/// `Overloaded` (503 for REST) at once until the load ends.
pub const GUILD_LOAD_WAITERS_MAX: usize = 1_000;

/// Stream resyncs (re-subscriptions of one guild's sessions after a gap)
/// running at once on a gateway node. Each is a burst of non-waiting
/// publishes, so a few hundred keep every core busy after a bus hiccup that
/// hit many guilds at once. When hit: that guild's resync runs at the next
/// `stream_resync_interval_ms` tick instead (its delivery stays stopped, so
/// nothing is lost, only later); counted.
pub const EVENT_RESYNC_TASKS_MAX: usize = 256;

/// Attempts to subscribe a session to a guild listed `unavailable` in its
/// READY (the first included). Each retry waits `guild_reply_timeout_ms`
/// plus a full-jitter backoff (`backoff_base_ms` .. `backoff_cap_ms`) and is
/// allowed by the node's retry budget. When hit: the guild stays unavailable
/// for that session until it reconnects; counted.
pub const GUILD_SUBSCRIBE_ATTEMPTS_MAX: u32 = 5;

/// Sessions whose READY subscriptions are being watched for retries at
/// once: one small sleeping task each, and a herd's worth of READYs is a
/// node's whole session cap. When hit: that session's subscriptions are sent
/// once and not retried; counted.
pub const GUILD_SUBSCRIBE_RETRY_TASKS_MAX: usize = SESSIONS_PER_NODE_MAX;

/// Longest `Retry-After` a refused upgrade is given. The spread over the
/// refused grows with the herd; past a minute a client is better served by
/// trying another node. When hit: the value is capped (the client may come
/// back early and be refused again).
pub const HANDSHAKE_RETRY_AFTER_S_MAX: u64 = 60;

/// `Retry-After` of an upgrade refused because the node holds
/// `sessions_per_node_max` sessions: sessions leave at their own pace, so
/// a short fixed delay, and the load balancer may pick another node.
pub const SESSIONS_FULL_RETRY_AFTER_S: u64 = 5;

// Relations between the defaults, checked when this crate compiles.
const _: () = assert!(LEASE_RENEW_INTERVAL_MS * 2 < LEASE_TTL_MS);
const _: () = assert!(ADAPTIVE_LIMIT_FLOOR <= ADAPTIVE_LIMIT_START);
const _: () = assert!(ADAPTIVE_LIMIT_START <= ADAPTIVE_LIMIT_CEILING);
const _: () = assert!(DRAIN_MARGIN_MS < DRAIN_GRACE_MS);
const _: () = assert!(SELF_PRESERVATION_REMOVAL_PERMILLE < 1000);
const _: () = assert!(DRAIN_RECEIVER_UTILIZATION_PERMILLE <= 1000);
const _: () = assert!(RETRY_BUDGET_WINDOW_MS.is_multiple_of(RETRY_BUDGET_BUCKETS as u64));
const _: () = assert!(RING_HISTORY_GENERATIONS_MAX >= 2);
const _: () = assert!(HEARTBEAT_TIMEOUT_MS > HEARTBEAT_INTERVAL_MS);
const _: () = assert!(REPLAY_BUFFER_EVENTS_MAX >= 1 && SESSION_QUEUE_MESSAGES_MAX >= 1);
const _: () = assert!(GUILD_LOAD_WAITERS_MAX < GUILD_MAILBOX_MESSAGES_MAX);
const _: () = assert!(
    SESSIONS_FULL_RETRY_AFTER_S >= 1 && SESSIONS_FULL_RETRY_AFTER_S <= HANDSHAKE_RETRY_AFTER_S_MAX
);

/// The effective value of every bound. `Limits::default()` holds the constants
/// above; a deployment overrides fields (the `[limits]` table of the config
/// file, or `GUILDHALL_<FIELD>` in the environment) and must pass
/// [`Limits::validate`]. Unknown fields are an error, so a misspelt bound is
/// never silently ignored.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// See [`RING_VNODES_PER_MEMBER`].
    pub ring_vnodes_per_member: u32,
    /// See [`RING_MEMBERS_MAX`].
    pub ring_members_max: usize,
    /// See [`RING_LOAD_EPSILON_PERMILLE`].
    pub ring_load_epsilon_permille: u32,
    /// See [`RING_HISTORY_GENERATIONS_MAX`].
    pub ring_history_generations_max: usize,
    /// See [`LEASE_TTL_MS`].
    pub lease_ttl_ms: u64,
    /// See [`LEASE_RENEW_INTERVAL_MS`].
    pub lease_renew_interval_ms: u64,
    /// See [`MEMBER_PERMANENT_DOWN_MS`].
    pub member_permanent_down_ms: u64,
    /// See [`SELF_PRESERVATION_WINDOW_MS`].
    pub self_preservation_window_ms: u64,
    /// See [`SELF_PRESERVATION_REMOVAL_PERMILLE`].
    pub self_preservation_removal_permille: u32,
    /// See [`RING_REBUILDS_PER_WINDOW_MAX`].
    pub ring_rebuilds_per_window_max: u32,
    /// See [`ADAPTIVE_LIMIT_FLOOR`].
    pub adaptive_limit_floor: u32,
    /// See [`ADAPTIVE_LIMIT_START`].
    pub adaptive_limit_start: u32,
    /// See [`ADAPTIVE_LIMIT_CEILING`].
    pub adaptive_limit_ceiling: u32,
    /// See [`RETRY_BUDGET_RATIO_PERMILLE`].
    pub retry_budget_ratio_permille: u32,
    /// See [`RETRY_BUDGET_FLOOR_PER_S`].
    pub retry_budget_floor_per_s: u32,
    /// See [`RETRY_BUDGET_WINDOW_MS`].
    pub retry_budget_window_ms: u64,
    /// See [`BACKOFF_BASE_MS`].
    pub backoff_base_ms: u64,
    /// See [`BACKOFF_CAP_MS`].
    pub backoff_cap_ms: u64,
    /// See [`SINGLEFLIGHT_KEYS_MAX`].
    pub singleflight_keys_max: usize,
    /// See [`SINGLEFLIGHT_WAITERS_PER_KEY_MAX`].
    pub singleflight_waiters_per_key_max: usize,
    /// See [`DOWN_BATCH_MAX`].
    pub down_batch_max: usize,
    /// See [`DOWN_BATCH_INTERVAL_MS`].
    pub down_batch_interval_ms: u64,
    /// See [`DOWN_DELIVER_PER_S`].
    pub down_deliver_per_s: u32,
    /// See [`DOWN_REASON_BYTES_MAX`].
    pub down_reason_bytes_max: usize,
    /// See [`DOWN_QUEUE_BYTES_MAX`].
    pub down_queue_bytes_max: usize,
    /// See [`DRAIN_GRACE_MS`].
    pub drain_grace_ms: u64,
    /// See [`DRAIN_MARGIN_MS`].
    pub drain_margin_ms: u64,
    /// See [`DRAIN_BATCH_INTERVAL_MS`].
    pub drain_batch_interval_ms: u64,
    /// See [`DRAIN_RECEIVER_UTILIZATION_PERMILLE`].
    pub drain_receiver_utilization_permille: u32,
    /// See [`LOG_THROTTLE_INTERVAL_MS`].
    pub log_throttle_interval_ms: u64,
    /// See [`LOG_THROTTLE_KEYS_MAX`].
    pub log_throttle_keys_max: usize,
    /// See [`GATEWAY_PAYLOAD_BYTES_MAX`].
    pub gateway_payload_bytes_max: usize,
    /// See [`GATEWAY_INBOUND_PER_MINUTE_MAX`].
    pub gateway_inbound_per_minute_max: u32,
    /// See [`HEARTBEAT_INTERVAL_MS`].
    pub heartbeat_interval_ms: u64,
    /// See [`HEARTBEAT_TIMEOUT_MS`].
    pub heartbeat_timeout_ms: u64,
    /// See [`SESSION_QUEUE_MESSAGES_MAX`].
    pub session_queue_messages_max: usize,
    /// See [`SESSION_QUEUE_BYTES_MAX`].
    pub session_queue_bytes_max: usize,
    /// See [`REPLAY_BUFFER_EVENTS_MAX`].
    pub replay_buffer_events_max: usize,
    /// See [`REPLAY_BUFFER_BYTES_MAX`].
    pub replay_buffer_bytes_max: usize,
    /// See [`RESUME_WINDOW_MS`].
    pub resume_window_ms: u64,
    /// See [`SESSIONS_PER_NODE_MAX`].
    pub sessions_per_node_max: usize,
    /// See [`HANDSHAKE_RATE_PER_S`].
    pub handshake_rate_per_s: u32,
    /// See [`HANDSHAKE_HOLD_MS_MAX`].
    pub handshake_hold_ms_max: u64,
    /// See [`REST_BODY_BYTES_MAX`].
    pub rest_body_bytes_max: usize,
    /// See [`MESSAGE_CONTENT_CHARS_MAX`].
    pub message_content_chars_max: usize,
    /// See [`MESSAGES_PER_PAGE_MAX`].
    pub messages_per_page_max: usize,
    /// See [`MEMBERS_PER_PAGE_MAX`].
    pub members_per_page_max: usize,
    /// See [`GUILD_MAILBOX_MESSAGES_MAX`].
    pub guild_mailbox_messages_max: usize,
    /// See [`BUS_PAYLOAD_BYTES_MAX`].
    pub bus_payload_bytes_max: usize,
    /// See [`BUS_SUBSCRIPTION_MESSAGES_MAX`].
    pub bus_subscription_messages_max: usize,
    /// See [`GATEWAY_EVENT_PARTITIONS`].
    pub gateway_event_partitions: usize,
    /// See [`GUILD_SUBSCRIPTIONS_MAX`].
    pub guild_subscriptions_max: usize,
    /// See [`GUILD_REQUESTS_IN_FLIGHT_MAX`].
    pub guild_requests_in_flight_max: usize,
    /// See [`STREAM_RESYNC_INTERVAL_MS`].
    pub stream_resync_interval_ms: u64,
    /// See [`GUILD_REPLY_TIMEOUT_MS`].
    pub guild_reply_timeout_ms: u64,
    /// See [`GUILD_OWNERS_MAX`].
    pub guild_owners_max: usize,
    /// See [`READY_GUILDS_MAX`].
    pub ready_guilds_max: usize,
    /// See [`STORE_POOL_CONNECTIONS_MAX`].
    pub store_pool_connections_max: u32,
    /// See [`MESSAGE_WRITE_QUEUE_MAX`].
    pub message_write_queue_max: usize,
    /// See [`MESSAGE_WRITE_BATCH_MAX`].
    pub message_write_batch_max: usize,
    /// See [`PRESENCE_SESSIONS_MAX`].
    pub presence_sessions_max: usize,
    /// See [`USERS_SHARDS`].
    pub users_shards: usize,
    /// See [`USERS_SHARD_MAILBOX_MAX`].
    pub users_shard_mailbox_max: usize,
    /// See [`USERS_SHARD_CACHE_ENTRIES_MAX`].
    pub users_shard_cache_entries_max: usize,
    /// See [`USERS_BATCH_IDS_MAX`].
    pub users_batch_ids_max: usize,
    /// See [`USERS_LOOKUP_TIMEOUT_MS`].
    pub users_lookup_timeout_ms: u64,
    /// See [`USERS_CACHE_ENTRIES_MAX`].
    pub users_cache_entries_max: usize,
    /// See [`USERS_CACHE_TTL_MS`].
    pub users_cache_ttl_ms: u64,
    /// See [`REST_RATE_LIMIT_PER_WINDOW`].
    pub rest_rate_limit_per_window: u32,
    /// See [`REST_RATE_WINDOW_MS`].
    pub rest_rate_window_ms: u64,
    /// See [`REST_RATE_BUCKETS_MAX`].
    pub rest_rate_buckets_max: usize,
    /// See [`GUILD_LOAD_WAITERS_MAX`].
    pub guild_load_waiters_max: usize,
    /// See [`EVENT_RESYNC_TASKS_MAX`].
    pub event_resync_tasks_max: usize,
    /// See [`GUILD_SUBSCRIBE_ATTEMPTS_MAX`].
    pub guild_subscribe_attempts_max: u32,
    /// See [`GUILD_SUBSCRIBE_RETRY_TASKS_MAX`].
    pub guild_subscribe_retry_tasks_max: usize,
    /// See [`HANDSHAKE_RETRY_AFTER_S_MAX`].
    pub handshake_retry_after_s_max: u64,
    /// See [`SESSIONS_FULL_RETRY_AFTER_S`].
    pub sessions_full_retry_after_s: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            ring_vnodes_per_member: RING_VNODES_PER_MEMBER,
            ring_members_max: RING_MEMBERS_MAX,
            ring_load_epsilon_permille: RING_LOAD_EPSILON_PERMILLE,
            ring_history_generations_max: RING_HISTORY_GENERATIONS_MAX,
            lease_ttl_ms: LEASE_TTL_MS,
            lease_renew_interval_ms: LEASE_RENEW_INTERVAL_MS,
            member_permanent_down_ms: MEMBER_PERMANENT_DOWN_MS,
            self_preservation_window_ms: SELF_PRESERVATION_WINDOW_MS,
            self_preservation_removal_permille: SELF_PRESERVATION_REMOVAL_PERMILLE,
            ring_rebuilds_per_window_max: RING_REBUILDS_PER_WINDOW_MAX,
            adaptive_limit_floor: ADAPTIVE_LIMIT_FLOOR,
            adaptive_limit_start: ADAPTIVE_LIMIT_START,
            adaptive_limit_ceiling: ADAPTIVE_LIMIT_CEILING,
            retry_budget_ratio_permille: RETRY_BUDGET_RATIO_PERMILLE,
            retry_budget_floor_per_s: RETRY_BUDGET_FLOOR_PER_S,
            retry_budget_window_ms: RETRY_BUDGET_WINDOW_MS,
            backoff_base_ms: BACKOFF_BASE_MS,
            backoff_cap_ms: BACKOFF_CAP_MS,
            singleflight_keys_max: SINGLEFLIGHT_KEYS_MAX,
            singleflight_waiters_per_key_max: SINGLEFLIGHT_WAITERS_PER_KEY_MAX,
            down_batch_max: DOWN_BATCH_MAX,
            down_batch_interval_ms: DOWN_BATCH_INTERVAL_MS,
            down_deliver_per_s: DOWN_DELIVER_PER_S,
            down_reason_bytes_max: DOWN_REASON_BYTES_MAX,
            down_queue_bytes_max: DOWN_QUEUE_BYTES_MAX,
            drain_grace_ms: DRAIN_GRACE_MS,
            drain_margin_ms: DRAIN_MARGIN_MS,
            drain_batch_interval_ms: DRAIN_BATCH_INTERVAL_MS,
            drain_receiver_utilization_permille: DRAIN_RECEIVER_UTILIZATION_PERMILLE,
            log_throttle_interval_ms: LOG_THROTTLE_INTERVAL_MS,
            log_throttle_keys_max: LOG_THROTTLE_KEYS_MAX,
            gateway_payload_bytes_max: GATEWAY_PAYLOAD_BYTES_MAX,
            gateway_inbound_per_minute_max: GATEWAY_INBOUND_PER_MINUTE_MAX,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS,
            heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS,
            session_queue_messages_max: SESSION_QUEUE_MESSAGES_MAX,
            session_queue_bytes_max: SESSION_QUEUE_BYTES_MAX,
            replay_buffer_events_max: REPLAY_BUFFER_EVENTS_MAX,
            replay_buffer_bytes_max: REPLAY_BUFFER_BYTES_MAX,
            resume_window_ms: RESUME_WINDOW_MS,
            sessions_per_node_max: SESSIONS_PER_NODE_MAX,
            handshake_rate_per_s: HANDSHAKE_RATE_PER_S,
            handshake_hold_ms_max: HANDSHAKE_HOLD_MS_MAX,
            rest_body_bytes_max: REST_BODY_BYTES_MAX,
            message_content_chars_max: MESSAGE_CONTENT_CHARS_MAX,
            messages_per_page_max: MESSAGES_PER_PAGE_MAX,
            members_per_page_max: MEMBERS_PER_PAGE_MAX,
            guild_mailbox_messages_max: GUILD_MAILBOX_MESSAGES_MAX,
            bus_payload_bytes_max: BUS_PAYLOAD_BYTES_MAX,
            bus_subscription_messages_max: BUS_SUBSCRIPTION_MESSAGES_MAX,
            gateway_event_partitions: GATEWAY_EVENT_PARTITIONS,
            guild_subscriptions_max: GUILD_SUBSCRIPTIONS_MAX,
            guild_requests_in_flight_max: GUILD_REQUESTS_IN_FLIGHT_MAX,
            stream_resync_interval_ms: STREAM_RESYNC_INTERVAL_MS,
            guild_reply_timeout_ms: GUILD_REPLY_TIMEOUT_MS,
            guild_owners_max: GUILD_OWNERS_MAX,
            ready_guilds_max: READY_GUILDS_MAX,
            store_pool_connections_max: STORE_POOL_CONNECTIONS_MAX,
            message_write_queue_max: MESSAGE_WRITE_QUEUE_MAX,
            message_write_batch_max: MESSAGE_WRITE_BATCH_MAX,
            users_lookup_timeout_ms: USERS_LOOKUP_TIMEOUT_MS,
            users_batch_ids_max: USERS_BATCH_IDS_MAX,
            users_shards: USERS_SHARDS,
            users_shard_mailbox_max: USERS_SHARD_MAILBOX_MAX,
            users_shard_cache_entries_max: USERS_SHARD_CACHE_ENTRIES_MAX,
            presence_sessions_max: PRESENCE_SESSIONS_MAX,
            users_cache_entries_max: USERS_CACHE_ENTRIES_MAX,
            users_cache_ttl_ms: USERS_CACHE_TTL_MS,
            rest_rate_limit_per_window: REST_RATE_LIMIT_PER_WINDOW,
            rest_rate_window_ms: REST_RATE_WINDOW_MS,
            rest_rate_buckets_max: REST_RATE_BUCKETS_MAX,
            guild_load_waiters_max: GUILD_LOAD_WAITERS_MAX,
            event_resync_tasks_max: EVENT_RESYNC_TASKS_MAX,
            guild_subscribe_attempts_max: GUILD_SUBSCRIBE_ATTEMPTS_MAX,
            guild_subscribe_retry_tasks_max: GUILD_SUBSCRIBE_RETRY_TASKS_MAX,
            handshake_retry_after_s_max: HANDSHAKE_RETRY_AFTER_S_MAX,
            sessions_full_retry_after_s: SESSIONS_FULL_RETRY_AFTER_S,
        }
    }
}

/// A relation between two bounds that an override broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitError {
    /// The field at fault.
    pub field: &'static str,
    /// What must hold, in words.
    pub rule: &'static str,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

impl std::error::Error for LimitError {}

impl Limits {
    /// Checks every relation between bounds; returns all violations, not just
    /// the first, so an operator fixes a config file in one pass.
    pub fn validate(&self) -> Result<(), Vec<LimitError>> {
        let mut errors = Vec::new();
        let mut check = |ok: bool, field: &'static str, rule: &'static str| {
            if !ok {
                errors.push(LimitError { field, rule });
            }
        };
        check(
            self.ring_vnodes_per_member >= 1,
            "ring_vnodes_per_member",
            "must be at least 1",
        );
        check(
            self.ring_vnodes_per_member <= 4096,
            "ring_vnodes_per_member",
            "must be at most 4096",
        );
        check(
            self.ring_members_max >= 1,
            "ring_members_max",
            "must be at least 1",
        );
        check(
            self.ring_load_epsilon_permille >= 1,
            "ring_load_epsilon_permille",
            "must be at least 1 (a cap of exactly the average cannot always be met)",
        );
        check(
            self.ring_history_generations_max >= 2,
            "ring_history_generations_max",
            "must be at least 2 (the current and the previous generation)",
        );
        check(self.lease_ttl_ms >= 1, "lease_ttl_ms", "must be at least 1");
        check(
            self.lease_renew_interval_ms.saturating_mul(2) < self.lease_ttl_ms,
            "lease_renew_interval_ms",
            "two renewals must fit in one lease TTL",
        );
        check(
            self.self_preservation_window_ms >= 1,
            "self_preservation_window_ms",
            "must be at least 1",
        );
        check(
            self.self_preservation_removal_permille < 1000,
            "self_preservation_removal_permille",
            "must be below 1000",
        );
        check(
            self.ring_rebuilds_per_window_max >= 1,
            "ring_rebuilds_per_window_max",
            "must be at least 1",
        );
        check(
            self.adaptive_limit_floor >= 1,
            "adaptive_limit_floor",
            "must be at least 1",
        );
        check(
            self.adaptive_limit_floor <= self.adaptive_limit_start
                && self.adaptive_limit_start <= self.adaptive_limit_ceiling,
            "adaptive_limit_start",
            "must satisfy floor <= start <= ceiling",
        );
        check(
            self.retry_budget_ratio_permille <= 1000,
            "retry_budget_ratio_permille",
            "must be at most 1000 (one retry per first attempt)",
        );
        check(
            self.retry_budget_window_ms >= 1,
            "retry_budget_window_ms",
            "must be at least 1",
        );
        check(
            self.backoff_base_ms >= 1,
            "backoff_base_ms",
            "must be at least 1",
        );
        check(
            self.backoff_base_ms <= self.backoff_cap_ms,
            "backoff_cap_ms",
            "must be at least backoff_base_ms",
        );
        check(
            self.singleflight_keys_max >= 1,
            "singleflight_keys_max",
            "must be at least 1",
        );
        check(
            self.singleflight_waiters_per_key_max >= 1,
            "singleflight_waiters_per_key_max",
            "must be at least 1",
        );
        check(
            self.down_batch_max >= 1,
            "down_batch_max",
            "must be at least 1",
        );
        check(
            self.down_batch_interval_ms >= 1,
            "down_batch_interval_ms",
            "must be at least 1",
        );
        check(
            self.down_deliver_per_s >= 1,
            "down_deliver_per_s",
            "must be at least 1",
        );
        check(
            self.drain_margin_ms < self.drain_grace_ms,
            "drain_margin_ms",
            "must be below drain_grace_ms",
        );
        check(
            self.drain_batch_interval_ms >= 1,
            "drain_batch_interval_ms",
            "must be at least 1",
        );
        check(
            (1..=1000).contains(&self.drain_receiver_utilization_permille),
            "drain_receiver_utilization_permille",
            "must be in 1..=1000",
        );
        check(
            self.log_throttle_interval_ms >= 1,
            "log_throttle_interval_ms",
            "must be at least 1",
        );
        check(
            self.log_throttle_keys_max >= 1,
            "log_throttle_keys_max",
            "must be at least 1",
        );
        check(
            self.gateway_payload_bytes_max >= 1,
            "gateway_payload_bytes_max",
            "must be at least 1",
        );
        check(
            self.gateway_inbound_per_minute_max >= 1,
            "gateway_inbound_per_minute_max",
            "must be at least 1",
        );
        check(
            self.heartbeat_interval_ms >= 1,
            "heartbeat_interval_ms",
            "must be at least 1",
        );
        check(
            self.heartbeat_timeout_ms >= 1,
            "heartbeat_timeout_ms",
            "must be at least 1",
        );
        check(
            self.session_queue_messages_max >= 1,
            "session_queue_messages_max",
            "must be at least 1",
        );
        check(
            self.session_queue_bytes_max >= 1,
            "session_queue_bytes_max",
            "must be at least 1",
        );
        check(
            self.replay_buffer_events_max >= 1,
            "replay_buffer_events_max",
            "must be at least 1",
        );
        check(
            self.replay_buffer_bytes_max >= 1,
            "replay_buffer_bytes_max",
            "must be at least 1",
        );
        check(
            self.resume_window_ms >= 1,
            "resume_window_ms",
            "must be at least 1",
        );
        check(
            self.sessions_per_node_max >= 1,
            "sessions_per_node_max",
            "must be at least 1",
        );
        check(
            self.handshake_rate_per_s >= 1,
            "handshake_rate_per_s",
            "must be at least 1",
        );
        check(
            self.handshake_hold_ms_max >= 1,
            "handshake_hold_ms_max",
            "must be at least 1",
        );
        check(
            self.rest_body_bytes_max >= 1,
            "rest_body_bytes_max",
            "must be at least 1",
        );
        check(
            self.message_content_chars_max >= 1,
            "message_content_chars_max",
            "must be at least 1",
        );
        check(
            self.messages_per_page_max >= 1,
            "messages_per_page_max",
            "must be at least 1",
        );
        check(
            self.members_per_page_max >= 1,
            "members_per_page_max",
            "must be at least 1",
        );
        check(
            self.rest_rate_limit_per_window >= 1,
            "rest_rate_limit_per_window",
            "must be at least 1",
        );
        check(
            self.rest_rate_window_ms >= 1,
            "rest_rate_window_ms",
            "must be at least 1",
        );
        check(
            self.rest_rate_buckets_max >= 1,
            "rest_rate_buckets_max",
            "must be at least 1",
        );
        check(
            self.guild_mailbox_messages_max >= 1,
            "guild_mailbox_messages_max",
            "must be at least 1",
        );
        check(
            self.bus_payload_bytes_max >= 64 * 1024,
            "bus_payload_bytes_max",
            "must be at least 65536 (a GUILD_CREATE must fit)",
        );
        check(
            self.bus_subscription_messages_max >= 16,
            "bus_subscription_messages_max",
            "must be at least 16",
        );
        check(
            (1..=256).contains(&self.gateway_event_partitions),
            "gateway_event_partitions",
            "must be 1 to 256",
        );
        check(
            self.guild_subscriptions_max >= 1,
            "guild_subscriptions_max",
            "must be at least 1",
        );
        check(
            (1..=256).contains(&self.users_shards),
            "users_shards",
            "must be 1 to 256",
        );
        check(
            self.users_shard_mailbox_max >= 1,
            "users_shard_mailbox_max",
            "must be at least 1",
        );
        check(
            self.users_shard_cache_entries_max >= 1,
            "users_shard_cache_entries_max",
            "must be at least 1",
        );
        check(
            self.presence_sessions_max >= 1,
            "presence_sessions_max",
            "must be at least 1",
        );
        check(
            (1..=10_000).contains(&self.users_batch_ids_max),
            "users_batch_ids_max",
            "must be 1 to 10000 (one SQL statement binds them all)",
        );
        check(
            self.stream_resync_interval_ms >= 1,
            "stream_resync_interval_ms",
            "must be at least 1",
        );
        check(
            self.guild_requests_in_flight_max >= 1,
            "guild_requests_in_flight_max",
            "must be at least 1",
        );
        check(
            self.guild_reply_timeout_ms >= 1,
            "guild_reply_timeout_ms",
            "must be at least 1",
        );
        check(
            self.guild_owners_max >= 1,
            "guild_owners_max",
            "must be at least 1",
        );
        check(
            self.ready_guilds_max >= 1,
            "ready_guilds_max",
            "must be at least 1",
        );
        check(
            self.store_pool_connections_max >= 1,
            "store_pool_connections_max",
            "must be at least 1",
        );
        check(
            self.message_write_queue_max >= 1,
            "message_write_queue_max",
            "must be at least 1",
        );
        check(
            self.message_write_batch_max >= 1,
            "message_write_batch_max",
            "must be at least 1",
        );
        check(
            self.users_lookup_timeout_ms >= 1,
            "users_lookup_timeout_ms",
            "must be at least 1",
        );
        check(
            self.users_cache_entries_max >= 1,
            "users_cache_entries_max",
            "must be at least 1",
        );
        check(
            self.users_cache_ttl_ms >= 1,
            "users_cache_ttl_ms",
            "must be at least 1",
        );
        check(
            self.heartbeat_timeout_ms > self.heartbeat_interval_ms,
            "heartbeat_timeout_ms",
            "must exceed heartbeat_interval_ms (or every session times out)",
        );
        check(
            self.gateway_payload_bytes_max >= 512,
            "gateway_payload_bytes_max",
            "must be at least 512 (an IDENTIFY does not fit in less)",
        );
        check(
            self.session_queue_bytes_max >= self.gateway_payload_bytes_max,
            "session_queue_bytes_max",
            "must hold at least one payload",
        );
        check(
            self.guild_load_waiters_max >= 1,
            "guild_load_waiters_max",
            "must be at least 1",
        );
        check(
            self.guild_load_waiters_max < self.guild_mailbox_messages_max,
            "guild_load_waiters_max",
            "must be below guild_mailbox_messages_max (a load's queue must fit the new owner's mailbox)",
        );
        check(
            self.event_resync_tasks_max >= 1,
            "event_resync_tasks_max",
            "must be at least 1",
        );
        check(
            self.guild_subscribe_attempts_max >= 1,
            "guild_subscribe_attempts_max",
            "must be at least 1 (the first attempt)",
        );
        check(
            self.guild_subscribe_retry_tasks_max >= 1,
            "guild_subscribe_retry_tasks_max",
            "must be at least 1",
        );
        check(
            self.handshake_retry_after_s_max >= 1,
            "handshake_retry_after_s_max",
            "must be at least 1",
        );
        check(
            (1..=self.handshake_retry_after_s_max).contains(&self.sessions_full_retry_after_s),
            "sessions_full_retry_after_s",
            "must be 1 to handshake_retry_after_s_max",
        );
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(Limits::default().validate(), Ok(()));
    }

    /// Every field has a guard: zeroing any one of them fails validation.
    #[test]
    fn every_field_is_checked() {
        let defaults = Limits::default();
        let fields = [
            "ring_vnodes_per_member",
            "ring_members_max",
            "ring_load_epsilon_permille",
            "ring_history_generations_max",
            "lease_ttl_ms",
            "self_preservation_window_ms",
            "ring_rebuilds_per_window_max",
            "adaptive_limit_floor",
            "retry_budget_window_ms",
            "backoff_base_ms",
            "singleflight_keys_max",
            "singleflight_waiters_per_key_max",
            "down_batch_max",
            "down_batch_interval_ms",
            "down_deliver_per_s",
            "drain_grace_ms",
            "drain_batch_interval_ms",
            "drain_receiver_utilization_permille",
            "log_throttle_interval_ms",
            "log_throttle_keys_max",
            "gateway_payload_bytes_max",
            "gateway_inbound_per_minute_max",
            "heartbeat_interval_ms",
            "heartbeat_timeout_ms",
            "session_queue_messages_max",
            "session_queue_bytes_max",
            "replay_buffer_events_max",
            "replay_buffer_bytes_max",
            "resume_window_ms",
            "sessions_per_node_max",
            "handshake_rate_per_s",
            "handshake_hold_ms_max",
            "rest_body_bytes_max",
            "message_content_chars_max",
            "messages_per_page_max",
            "members_per_page_max",
            "rest_rate_limit_per_window",
            "rest_rate_window_ms",
            "rest_rate_buckets_max",
            "users_cache_entries_max",
            "users_cache_ttl_ms",
            "guild_mailbox_messages_max",
            "bus_payload_bytes_max",
            "bus_subscription_messages_max",
            "gateway_event_partitions",
            "guild_subscriptions_max",
            "guild_requests_in_flight_max",
            "stream_resync_interval_ms",
            "users_batch_ids_max",
            "presence_sessions_max",
            "users_shards",
            "users_shard_mailbox_max",
            "users_shard_cache_entries_max",
            "guild_reply_timeout_ms",
            "guild_owners_max",
            "ready_guilds_max",
            "store_pool_connections_max",
            "message_write_queue_max",
            "message_write_batch_max",
            "users_lookup_timeout_ms",
            "guild_load_waiters_max",
            "event_resync_tasks_max",
            "guild_subscribe_attempts_max",
            "guild_subscribe_retry_tasks_max",
            "handshake_retry_after_s_max",
            "sessions_full_retry_after_s",
        ];
        for field in fields {
            let limits = zero(defaults.clone(), field);
            assert!(limits.validate().is_err(), "{field} = 0 was accepted");
        }
    }

    fn zero(mut l: Limits, field: &str) -> Limits {
        match field {
            "ring_vnodes_per_member" => l.ring_vnodes_per_member = 0,
            "ring_members_max" => l.ring_members_max = 0,
            "ring_load_epsilon_permille" => l.ring_load_epsilon_permille = 0,
            "ring_history_generations_max" => l.ring_history_generations_max = 0,
            "lease_ttl_ms" => l.lease_ttl_ms = 0,
            "self_preservation_window_ms" => l.self_preservation_window_ms = 0,
            "ring_rebuilds_per_window_max" => l.ring_rebuilds_per_window_max = 0,
            "adaptive_limit_floor" => l.adaptive_limit_floor = 0,
            "retry_budget_window_ms" => l.retry_budget_window_ms = 0,
            "backoff_base_ms" => l.backoff_base_ms = 0,
            "singleflight_keys_max" => l.singleflight_keys_max = 0,
            "singleflight_waiters_per_key_max" => l.singleflight_waiters_per_key_max = 0,
            "down_batch_max" => l.down_batch_max = 0,
            "down_batch_interval_ms" => l.down_batch_interval_ms = 0,
            "down_deliver_per_s" => l.down_deliver_per_s = 0,
            "drain_grace_ms" => l.drain_grace_ms = 0,
            "drain_batch_interval_ms" => l.drain_batch_interval_ms = 0,
            "drain_receiver_utilization_permille" => l.drain_receiver_utilization_permille = 0,
            "log_throttle_interval_ms" => l.log_throttle_interval_ms = 0,
            "log_throttle_keys_max" => l.log_throttle_keys_max = 0,
            "gateway_payload_bytes_max" => l.gateway_payload_bytes_max = 0,
            "gateway_inbound_per_minute_max" => l.gateway_inbound_per_minute_max = 0,
            "heartbeat_interval_ms" => l.heartbeat_interval_ms = 0,
            "heartbeat_timeout_ms" => l.heartbeat_timeout_ms = 0,
            "session_queue_messages_max" => l.session_queue_messages_max = 0,
            "session_queue_bytes_max" => l.session_queue_bytes_max = 0,
            "replay_buffer_events_max" => l.replay_buffer_events_max = 0,
            "replay_buffer_bytes_max" => l.replay_buffer_bytes_max = 0,
            "resume_window_ms" => l.resume_window_ms = 0,
            "sessions_per_node_max" => l.sessions_per_node_max = 0,
            "handshake_rate_per_s" => l.handshake_rate_per_s = 0,
            "handshake_hold_ms_max" => l.handshake_hold_ms_max = 0,
            "rest_body_bytes_max" => l.rest_body_bytes_max = 0,
            "message_content_chars_max" => l.message_content_chars_max = 0,
            "messages_per_page_max" => l.messages_per_page_max = 0,
            "members_per_page_max" => l.members_per_page_max = 0,
            "rest_rate_limit_per_window" => l.rest_rate_limit_per_window = 0,
            "rest_rate_window_ms" => l.rest_rate_window_ms = 0,
            "rest_rate_buckets_max" => l.rest_rate_buckets_max = 0,
            "users_cache_entries_max" => l.users_cache_entries_max = 0,
            "users_cache_ttl_ms" => l.users_cache_ttl_ms = 0,
            "guild_mailbox_messages_max" => l.guild_mailbox_messages_max = 0,
            "bus_payload_bytes_max" => l.bus_payload_bytes_max = 0,
            "bus_subscription_messages_max" => l.bus_subscription_messages_max = 0,
            "gateway_event_partitions" => l.gateway_event_partitions = 0,
            "guild_subscriptions_max" => l.guild_subscriptions_max = 0,
            "guild_requests_in_flight_max" => l.guild_requests_in_flight_max = 0,
            "stream_resync_interval_ms" => l.stream_resync_interval_ms = 0,
            "users_batch_ids_max" => l.users_batch_ids_max = 0,
            "presence_sessions_max" => l.presence_sessions_max = 0,
            "users_shards" => l.users_shards = 0,
            "users_shard_mailbox_max" => l.users_shard_mailbox_max = 0,
            "users_shard_cache_entries_max" => l.users_shard_cache_entries_max = 0,
            "guild_reply_timeout_ms" => l.guild_reply_timeout_ms = 0,
            "guild_owners_max" => l.guild_owners_max = 0,
            "ready_guilds_max" => l.ready_guilds_max = 0,
            "store_pool_connections_max" => l.store_pool_connections_max = 0,
            "message_write_queue_max" => l.message_write_queue_max = 0,
            "message_write_batch_max" => l.message_write_batch_max = 0,
            "users_lookup_timeout_ms" => l.users_lookup_timeout_ms = 0,
            "guild_load_waiters_max" => l.guild_load_waiters_max = 0,
            "event_resync_tasks_max" => l.event_resync_tasks_max = 0,
            "guild_subscribe_attempts_max" => l.guild_subscribe_attempts_max = 0,
            "guild_subscribe_retry_tasks_max" => l.guild_subscribe_retry_tasks_max = 0,
            "handshake_retry_after_s_max" => l.handshake_retry_after_s_max = 0,
            "sessions_full_retry_after_s" => l.sessions_full_retry_after_s = 0,
            other => panic!("unknown field {other}"),
        }
        l
    }

    #[test]
    fn every_broken_relation_is_reported_at_once() {
        let limits = Limits {
            adaptive_limit_floor: 100,
            adaptive_limit_start: 10,
            drain_margin_ms: 40_000,
            lease_renew_interval_ms: 10_000,
            ..Limits::default()
        };
        let fields: Vec<_> = limits
            .validate()
            .unwrap_err()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "lease_renew_interval_ms",
                "adaptive_limit_start",
                "drain_margin_ms"
            ]
        );
    }
}
