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

/// Registry entries (under the instance prefix, corrupt ones included) a node
/// mirrors from its watch. When hit: a new key is ignored and counted as
/// rejected (`registry_overflow`); keys already known keep updating, so a
/// flood of bogus keys cannot grow a node's memory or displace real members.
pub const REGISTRY_ENTRIES_MAX: usize = 16_384;

/// Registry changes buffered between the watch and the node's view. When
/// hit: the watch ends and the node lists the prefix again (nothing is lost,
/// a burst costs one re-list).
pub const REGISTRY_WATCH_EVENTS_MAX: usize = 1_024;

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
/// than this moves nothing. At least [`LEASE_RENEW_INTERVAL_MS`] (checked):
/// members cut off at once expire up to one renewal interval apart, and
/// self-preservation must see them down together.
pub const MEMBER_PERMANENT_DOWN_MS: u64 = 10_000;

/// Self-preservation window: removals are counted per window of this length.
pub const SELF_PRESERVATION_WINDOW_MS: u64 = 30_000;

/// Self-preservation threshold: if more than this fraction (permille) of the
/// members would be removed within one window, removals freeze and an alarm is
/// raised; they are released as renewals return (a mass expiry is far more
/// likely a registry or network fault than a mass death, seed 003).
pub const SELF_PRESERVATION_REMOVAL_PERMILLE: u32 = 150;

/// Removals always allowed per self-preservation window, whatever the share
/// above gives: 15 % of fewer than seven members is zero, so without a floor
/// one crashed guilds node of a three-node layout would freeze its guilds
/// until it came back. One member down among a few is a death, not a
/// partition; two or more at once still freeze. Never the last member. 0
/// leaves the share alone.
pub const SELF_PRESERVATION_REMOVALS_MIN: u32 = 1;

/// Longest self-preservation holds removals: members still down after a
/// freeze of this long are removed at the window's budget, longest down
/// first (`guildhall_membership_freeze_expired_total`, an error log line).
/// Without a bound two of three guilds nodes dying together would keep
/// their guilds unserved until an operator stepped in. Ten minutes outlasts
/// the registry and network blips the freeze is for; an operator can end a
/// freeze sooner with a release (the registry key
/// `guildhall_proto::cluster::RING_RELEASE_KEY`).
pub const SELF_PRESERVATION_FREEZE_MAX_MS: u64 = 600_000;

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

/// How often a gateway node reaps sessions disconnected for longer than
/// the resume window (their presence then goes offline, owners forget
/// them, temporary members leave). A session is thus gone between
/// `resume_window_ms` and that plus this after its socket closed; a
/// shorter interval costs one pass over the detached sessions more often.
pub const SESSION_REAP_INTERVAL_MS: u64 = 10_000;

/// How long a gateway node waits for the node holding a session to answer
/// each step of a cross-node RESUME (prepare, then commit). When hit: the
/// holder is taken for dead and the client gets op 9 INVALID_SESSION
/// (d: false) and re-identifies. Long enough for the commit's
/// `session_move_timeout_ms` plus a bus round trip, short enough that a
/// client's RESUME is never held near its heartbeat interval.
pub const SESSION_TAKEOVER_TIMEOUT_MS: u64 = 3_000;

/// How long the node giving a session away waits for the owners of its
/// guilds to confirm the move in their streams (each confirmation marks the
/// last event of that guild it records for the session). When hit: the
/// unconfirmed guilds are handed over as "subscribe afresh" (a new
/// GUILD_CREATE on the new node) instead of as a seamless stream.
pub const SESSION_MOVE_TIMEOUT_MS: u64 = 1_000;

/// Cross-node RESUME requests a gateway node serves at once (each a task
/// waiting for its guilds' move confirmations). When hit: the request is
/// refused and the client gets op 9. Above a drain's resume rate times
/// `session_move_timeout_ms`, so a paced drain never hits it.
pub const SESSION_TAKEOVERS_IN_FLIGHT_MAX: usize = 4_096;

/// How often a gateway node refreshes its announcement (session count,
/// draining flag) under its lease. Bounds how stale `GET /gateway`'s
/// least-loaded choice can be; every refresh is one registry write per
/// node, so not much faster than the lease renewals.
pub const GATEWAY_ANNOUNCE_INTERVAL_MS: u64 = 2_000;

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

/// Bytes of an oversized request body read and discarded before its 413 is
/// sent, so the connection is not reset with the answer unread (a client
/// would see a broken connection instead of the error body). A body that
/// overruns its limit by more than this is refused at once (its client may
/// then see the reset). 4 MiB covers the bodies clients really send.
pub const REST_BODY_DRAIN_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Largest file attached to a message, in bytes (Discord's 10 MiB for an
/// unboosted guild). When hit: 413 with code 40005, nothing stored.
pub const ATTACHMENT_BYTES_MAX: usize = 10 * 1024 * 1024;

/// Largest `multipart/form-data` request (files, `payload_json` and the
/// multipart framing together). When hit: 413 with code 40005, the
/// overrun drained as a JSON body's is (`rest_body_drain_bytes_max`).
pub const UPLOAD_REQUEST_BYTES_MAX: usize = 25 * 1024 * 1024;

/// Most files on one message (Discord's 10). When hit: 400 with code
/// 50035 at `attachments`.
pub const MESSAGE_ATTACHMENTS_MAX: usize = 10;

/// Longest stored file name, in bytes after sanitising; a longer one is
/// shortened from the end of its stem, keeping its extension.
pub const ATTACHMENT_FILENAME_BYTES_MAX: usize = 256;

/// Longest alt text (`description`) and `title` of an attachment, in
/// characters (Discord's 1,024). When hit: 50035 at the field.
pub const ATTACHMENT_TEXT_CHARS_MAX: usize = 1_024;

/// How long an attachment URL is valid (its signed `ex`, as Discord's CDN
/// URLs carry `ex`, `is` and `hm`). URLs are issued at multiples of half
/// this (so a message shows the same URL for that long and caches keep
/// working) and each is valid for half to all of it after it was shown.
/// When hit: the CDN answers 404; `POST /attachments/refresh-urls` or any
/// read of the message gives a fresh URL. At least 2 s.
pub const ATTACHMENT_URL_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// Most URLs one `POST /attachments/refresh-urls` renews (Discord's 50).
/// When hit: 400 with code 50035 at `attachment_urls`.
pub const ATTACHMENT_REFRESH_URLS_MAX: usize = 50;

/// Files waiting to be deleted from the blob store after the message that
/// named them was deleted or edited (one background task deletes them).
/// When hit: the file is left in the blob store and counted in
/// `guildhall_blob_deletes_dropped_total` (an unreferenced file costs
/// disk, never correctness).
pub const BLOB_DELETE_QUEUE_MAX: usize = 10_000;

/// Upload bytes this api node holds in memory at once, over every request
/// in flight: each request takes its share as its body arrives and gives
/// it back when it is answered. When hit: the request that would pass it
/// is answered 503 with `Retry-After` (nothing stored) and counted in
/// `guildhall_uploads_refused_total`, so many concurrent uploads cannot
/// exhaust the node's memory.
pub const UPLOAD_MEMORY_BYTES_MAX: usize = 256 * 1024 * 1024;

/// Longest message content, in characters (Discord's 2,000). When hit: 400
/// with code 50035 (invalid form body).
pub const MESSAGE_CONTENT_CHARS_MAX: usize = 2_000;

/// Most messages one GET returns (Discord's `limit` cap).
pub const MESSAGES_PER_PAGE_MAX: usize = 100;

/// Most members one GET or one GUILD_MEMBERS_CHUNK carries.
pub const MEMBERS_PER_PAGE_MAX: usize = 1_000;

/// Most members an op 8 by `query` prefix or by `user_ids` returns
/// (Discord's 100; only the whole list, `query: ""` with `limit: 0`,
/// returns more). When hit: the first this many, by user id.
pub const MEMBER_REQUEST_MATCHES_MAX: usize = 100;

/// Most users one `GET .../reactions/{emoji}` returns (Discord's `limit`
/// cap, 1-100). When hit: a larger `limit` is read as this one, as history
/// reads its own cap; the caller pages on with `after`.
pub const REACTION_USERS_PER_PAGE_MAX: usize = 100;

/// Distinct emoji one message may carry as reactions: Discord's 20 (error
/// 30010 names it). Every rendered message carries its reactions, so the
/// bound keeps what one page of history reads from the reactions table to
/// `messages_per_page_max` times this. When hit: a reaction with a new
/// emoji answers 400 with code 30010 ("Maximum number of reactions reached
/// (20)") and nothing changes; another user adding an emoji already there
/// is not refused.
pub const REACTIONS_PER_MESSAGE_MAX: usize = 20;

/// Messages a channel may have pinned at once: Discord's 250 (error 30003
/// names it). Pins are read in pages, but every pin shows in its message's
/// `pinned`, so the bound keeps what a channel can ask of each read small.
/// When hit: a pin answers 400 with code 30003 and nothing changes.
pub const PINS_PER_CHANNEL_MAX: usize = 250;

/// Most pins one `GET /channels/{id}/messages/pins` returns (Discord's
/// `limit` cap, 1-50), and all the deprecated `GET /channels/{id}/pins`
/// returns (Discord's "first 50"). When hit: a larger `limit` is read as
/// this one and `has_more` tells the caller to page on with `before`.
pub const PINS_PER_PAGE_MAX: usize = 50;

/// Slash commands an application may have in one scope (global, or one
/// guild): Discord's 100. When hit: a create answers 400 with code 30032
/// (maximum number of application commands), a bulk overwrite 50035.
pub const APPLICATION_COMMANDS_CHAT_INPUT_MAX: usize = 100;

/// User commands, and separately message commands, an application may
/// have in one scope: Discord's 15 each. When hit: as above.
pub const APPLICATION_COMMANDS_CONTEXT_MENU_MAX: usize = 15;

/// Largest body of an application-command route. Larger than
/// [`REST_BODY_BYTES_MAX`] because a bulk overwrite carries every command
/// of a scope (up to 131 of up to 8,000 characters each); only an
/// authenticated application's own routes read it. When hit: 413.
pub const APPLICATION_COMMANDS_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Requests per caller, route and major id (channel or guild) per window.
/// Requests per caller (the checked token's user, else the client
/// address), route and major id (channel or guild) per window.
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
/// forgotten; if none has expired, the oldest window is forgotten (that
/// caller starts afresh early). Never one overflow bucket shared by every
/// newcomer: whoever filled the map could exhaust it for everyone.
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

/// Guild ids a node lists from the store as the input of guild-owner placement (`guildhall_ring::placement`; about 40 bytes each in the table). When hit: guilds beyond the first this many ids are placed on their plain ring primary (no load bound for them), and each listing that left some out is counted on /metrics (`guildhall_placement_truncated_total`).
pub const PLACEMENT_GUILDS_MAX: usize = 262_144;

/// Guild ids read per store query while listing placement's input, so a listing never holds a connection for one huge result. When hit: the listing continues with the next page.
pub const PLACEMENT_LIST_PAGE_MAX: usize = 10_000;

/// How often a node lists the guild ids again and recomputes placement (it also lists and recomputes at once when the ring changes; a ring of one member needs no listing). A guild created since the last listing is on its plain ring primary until then, and may move once after (the move path re-subscribes its sessions). When hit: nothing; it is a period.
pub const PLACEMENT_REFRESH_INTERVAL_MS: u64 = 5_000;

/// Times a guild request is forwarded between guilds nodes whose views of placement disagree (a request reaching a node that gave the guild up goes to the owner in that node's view). When hit: the request is answered `Overloaded` (503), never dropped; two nodes that disagree cannot bounce it forever.
pub const GUILD_FORWARD_HOPS_MAX: u32 = 2;

/// Sessions one gateway node reports in one answer when a new owner of a guild asks who follows it (about 100 bytes each, well under the bus payload). When hit: the rest are re-subscribed by the gateway's own resync (paced by `stream_resync_interval_ms`) when the new owner's stream starts.
pub const GUILD_PULL_SESSIONS_MAX: usize = 4_096;

/// How long a new guild owner waits for each gateway node's list of sessions following the guild before it serves requests (all gateways are asked at once; never longer than half of `guild_reply_timeout_ms`, since the load it delays is inside a caller's wait). When hit: that node's sessions are re-subscribed by the node itself when the new owner's stream reaches it (paced by `stream_resync_interval_ms`); the load goes on without them.
pub const GUILD_PULL_TIMEOUT_MS: u64 = 1_000;

/// Times a new guild owner asks a gateway node again that did not answer
/// its question in time (full-jitter backoff from `backoff_base_ms`, capped
/// at the smaller of `backoff_cap_ms` and `lease_ttl_ms`), while the node is
/// live and the owner runs; the sessions it then names are subscribed.
/// When hit: its sessions wait for the node's own resync (a later event of
/// the guild there).
pub const GUILD_PULL_RETRIES_MAX: u32 = 8;

/// Late-pull tasks (one per guild load that a gateway node did not answer)
/// running at once on a node. When hit: that load's unanswered nodes are
/// not asked again (counted in `guildhall_guild_late_pulls_refused_total`).
pub const GUILD_LATE_PULL_TASKS_MAX: usize = 256;

/// Guilds a node loads at once (each load is one store read and a few user batches; one load per guild however many requests wait for it). When hit: a request for another guild that is not loaded is answered `Overloaded` (503 for REST) at once.
pub const GUILD_REQUESTS_IN_FLIGHT_MAX: usize = 1_024;

/// Messages a guild owner's mailbox holds. When hit: callers get `Overloaded` (503 for REST) at once; nobody queues behind a busy guild.
pub const GUILD_MAILBOX_MESSAGES_MAX: usize = 1_024;

/// User ids in one batch load from the users role (a guild owner loading its members asks in batches of this size). When hit: the caller splits the load into more batches.
pub const USERS_BATCH_IDS_MAX: usize = 500;

/// Sessions whose presence the presence role tracks. When hit: further sessions are not tracked (counted); their users show the status of their tracked sessions, or offline.
pub const PRESENCE_SESSIONS_MAX: usize = 1_000_000;

/// User ids in one question a guild owner asks the presence role as it
/// loads (the statuses its GUILD_CREATEs and member chunks carry; about
/// 20 bytes each, well under the bus payload). When hit: the owner asks
/// in several questions, at most `PRESENCE_QUERIES_PER_LOAD_MAX` of them;
/// members beyond those read as offline until their next change.
pub const PRESENCE_QUERY_USERS_MAX: usize = 1_000;

/// Questions to the presence role one guild load asks at most (all at
/// once). When hit: the remaining members read as offline until their next
/// change.
pub const PRESENCE_QUERIES_PER_LOAD_MAX: usize = 16;

/// How long a loading guild owner waits for the presence role's statuses
/// (alongside the gateways' follower lists, which it waits for anyway).
/// When hit: the owner goes on with the statuses it has (offline for the
/// rest, corrected by the next change of each), and the node asks the
/// presence role nothing for `presence_query_cooloff_ms`, so a presence
/// outage slows no load twice (seed 001: presence degrades, nothing else).
pub const PRESENCE_QUERY_TIMEOUT_MS: u64 = 250;

/// How long a node asks the presence role nothing after a question went
/// unanswered. When hit (the time passes): loads ask again.
pub const PRESENCE_QUERY_COOLOFF_MS: u64 = 5_000;

/// Sessions' statuses a gateway node publishes again per second after the
/// presence nodes changed (each user's statuses moved to the node the new
/// ring places them on). A new presence node then fans each resynced user
/// out to their guilds, a store read and a cast per user: 2,000 a second
/// keeps that within one node's stride, and 10,000 sessions move in five
/// seconds. When hit: the rest wait their turn (paced, never dropped by the
/// pacing).
pub const PRESENCE_RESYNC_PER_S: u64 = 2_000;

/// Shards of the users role on a node: each owns the users whose id falls in its slice (id mod shards), with its own cache and mailbox.
pub const USERS_SHARDS: usize = 4;

/// Loads a users shard's mailbox holds. When hit: the batch that needed it is refused with `Overloaded` at once.
pub const USERS_SHARD_MAILBOX_MAX: usize = 256;

/// Batch loads a users process answers at once (a small task each, waiting
/// on its shards). Loads are not admitted by the adaptive token-lookup
/// limit: most are answered from the shards' caches, and the store reads
/// behind the misses are already one at a time per shard, so a latency
/// signal mixing the two read a healthy burst as overload (P10 in
/// docs/benchmarks.md refused 92–98 % of one). When hit: the load is
/// refused with `Overloaded` at once, counted as shed; so is one whose
/// shard's mailbox is full.
pub const USERS_LOADS_IN_FLIGHT_MAX: usize = 1_024;

/// User rows one users shard caches (oldest evicted first; entries also expire after `users_cache_ttl_ms`).
pub const USERS_SHARD_CACHE_ENTRIES_MAX: usize = 50_000;

/// Longest a caller waits for a guild owner's answer; then `Overloaded`.
pub const GUILD_REPLY_TIMEOUT_MS: u64 = 5_000;

/// Guild owners a node keeps loaded. When hit: requests for a guild not yet loaded are refused with `Overloaded` rather than loading without bound.
pub const GUILD_OWNERS_MAX: usize = 100_000;

/// Guilds one session may hold (Discord's sharding threshold). When hit: close 4011 (sharding required).
pub const READY_GUILDS_MAX: usize = 2_500;

/// IDENTIFYs that start a session one bot may make per
/// `session_start_window_ms`: Discord's documented daily limit, reported
/// as `session_start_limit.total` by `GET /gateway/bot`. RESUMEs are not
/// counted. When hit: the IDENTIFY is closed with 4004 (authentication
/// failed: Discord resets the token of a bot that hits the limit, so its
/// IDENTIFY fails authentication; 4004 is a code libraries do not
/// reconnect on), counted, until the window resets.
pub const SESSION_STARTS_PER_WINDOW_MAX: u32 = 1_000;

/// The window `session_starts_per_window_max` counts over (Discord's
/// 24 h). It starts at a bot's first counted IDENTIFY after the previous
/// window ended; `session_start_limit.reset_after` is the time left in it.
pub const SESSION_START_WINDOW_MS: u64 = 86_400_000;

/// Bots whose session starts the store tracks at once (one small row each,
/// shared by every gateway node). A row whose window has ended counts as
/// free and is reused or deleted to make room. When hit (that many bots
/// identified within one window): a further bot's IDENTIFY is admitted
/// uncounted, counted as `session_starts_untracked_total`, rather than
/// refusing a bot because of others; its `GET /gateway/bot` reports the
/// full total.
pub const SESSION_START_BOTS_MAX: usize = 100_000;

/// `session_start_limit.max_concurrency`: a bot's IDENTIFYs are put in
/// buckets by `shard_id % identify_concurrency_max` (no `shard`: bucket
/// 0), and each bucket admits one IDENTIFY per
/// `identify_concurrency_window_ms`, counted in the store so every gateway
/// node shares the buckets. When hit: INVALID_SESSION (`d: false`), as
/// Discord documents; the library identifies again a few seconds later.
/// Counted as `identify_concurrency_refused_total`. RESUMEs and users'
/// IDENTIFYs are not bucketed.
pub const IDENTIFY_CONCURRENCY_MAX: u32 = 1;

/// The window of one `identify_concurrency_max` bucket (Discord's 5 s).
pub const IDENTIFY_CONCURRENCY_WINDOW_MS: u64 = 5_000;

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

/// Bytes of guild events an API node holds for redelivery after their
/// owner did not confirm the fanout (the owner's process died or paused
/// between a message's commit and its fanout, or its mailbox was full).
/// Each event is a message's encoded data, twice at most (with and without
/// content); 64 MiB holds tens of thousands while the ring replaces a lost
/// owner. When hit: the event is not held (its message is in history, and
/// live sessions miss its dispatch); counted as
/// `guildhall_fanout_outbox_dropped_total`.
pub const FANOUT_OUTBOX_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Longest an event waits in the redelivery outbox. It must outlast a lost
/// owner's replacement (its lease expiring, then the permanent-down delay,
/// then the new owner's load), which validation checks against
/// `lease_ttl_ms + member_permanent_down_ms`. When hit: the event is
/// dropped (its message stays in history); counted.
pub const FANOUT_OUTBOX_EVENT_AGE_MS_MAX: u64 = 120_000;

/// Guilds whose held events are being redelivered at once (one owner call
/// each, in order within a guild). A dead owner's calls fail fast and a
/// paused one's wait `guild_reply_timeout_ms`, so this bounds what one
/// stuck owner can hold up. When hit: other guilds wait their turn.
pub const FANOUT_OUTBOX_CALLS_IN_FLIGHT_MAX: usize = 16;

/// Publish ids a guild owner remembers at most, so a publish retried after
/// its confirmation was lost (a reply timeout, a dropped answer) is
/// confirmed again without a second fanout. An id is remembered for
/// `fanout_outbox_event_age_ms_max` (no caller offers an event older than
/// that), so this bounds only a guild publishing faster than 1,024 events
/// per that age (16 bytes each: 16 KiB per owner at most). A window of a
/// count alone was too short: other api nodes' publishes to the guild
/// came between an event and its retry. When hit: the oldest id is
/// forgotten early, counted in
/// `guildhall_guild_publish_ids_forgotten_early_total` (a retry of it
/// would be fanned out twice).
pub const GUILD_PUBLISH_IDS_REMEMBERED_MAX: usize = 1_024;

/// Stream messages a guild owner keeps per gateway node while the bus
/// refuses them (a NATS reconnect: disconnected, buffer full), to publish
/// again in order before anything later on that stream. A publish with
/// any of its messages waiting is not confirmed. When hit: the oldest is
/// given up (`guildhall_guild_stream_unsent_dropped_total`, a log line);
/// its node sees the gap and resynchronises the guild (a fresh
/// GUILD_CREATE). 1,024 events cover about a minute of a busy guild.
pub const GUILD_STREAM_UNSENT_MAX: usize = 1_024;

/// How often a guild owner with unsent stream messages tries the bus
/// again when no request arrives (the stream may be idle from then on).
pub const GUILD_STREAM_RETRY_MS: u64 = 100;

/// How long a guild owner waits before trying again to archive a thread
/// whose auto-archive write failed (the store was unreachable). When hit:
/// the thread stays active until the write succeeds, one try per this
/// interval; a log line per failure, rate-limited.
pub const THREAD_ARCHIVE_RETRY_MS: u64 = 60_000;

/// How long after a gateway node's stream of a guild falls quiet its owner
/// sends the stream's tail (epoch and last sequence), so a node that lost
/// the last messages in transit finds the gap without waiting for the
/// guild's next event, and resynchronises it. Each further tail of the same
/// quiet spell waits twice as long. Smaller finds a lost tail sooner for
/// more bus messages.
pub const GUILD_STREAM_TAIL_AFTER_MS: u64 = 1_000;

/// Tails sent per quiet spell of a stream (see
/// [`GUILD_STREAM_TAIL_AFTER_MS`]): an idle guild costs nothing once they
/// are sent, so the bus carries at most this many extra messages per burst
/// of events. When hit: the stream sends no more tails until its next
/// event (a lost message and every tail after it lost too stays unnoticed
/// until then).
pub const GUILD_STREAM_TAILS_MAX: u32 = 3;

/// Publish ids a gateway node remembers per guild stream (its latest
/// dispatches), 8 bytes each: a new owner after a crash fans out again the
/// events its predecessor sent but had not confirmed, which the api nodes'
/// outboxes offer it first, so the repeats come within a few events of
/// the originals. When hit: the oldest is forgotten; a repeat of it would
/// be delivered twice (the campaign's history checker reports it).
pub const GATEWAY_PUBLISH_IDS_REMEMBERED_MAX: usize = 64;

/// Sessions whose READY subscriptions are being watched for retries at
/// once: one small sleeping task each, and a herd's worth of READYs is a
/// node's whole session cap. When hit: that session's subscriptions are sent
/// once and not retried; counted.
pub const GUILD_SUBSCRIBE_RETRY_TASKS_MAX: usize = SESSIONS_PER_NODE_MAX;
// Gateway socket task (hardening: stalled writers, unidentified sockets,
// shards, op 8)
// ---------------------------------------------------------------------------

/// Longest one write batch (at most the gateway's write batch of frames and
/// one flush) or the closing frame may wait for the client to take its
/// bytes. A batch is a few hundred KiB at most, which a live link takes in
/// well under a second; ten seconds with the TCP window shut means the
/// client stopped reading (seed 001). When hit: the socket is dropped
/// without waiting for a close frame to be written, the session detaches
/// and stays resumable, and its queued frames are freed (counted).
pub const SESSION_WRITE_STALL_MS_MAX: u64 = 10_000;

/// How long a socket whose close frame was sent keeps reading (and
/// discarding) what the client still sends, waiting for its close frame.
/// Dropping a TCP socket with unread input makes the kernel answer with a
/// reset, and a client that sees the reset first never reads the close
/// code (measured: in about 1 run in 3 of the adversarial suite, one of
/// its 150 fuzzed connections got ECONNRESET instead of the code). When
/// hit: the socket is dropped.
pub const GATEWAY_CLOSE_LINGER_MS: u64 = 1_000;

/// Longest a socket may stay open without IDENTIFY or RESUME after HELLO
/// (restarted when an INVALID_SESSION invites a new IDENTIFY). Libraries
/// identify at once, or after waiting for their identify bucket (5 s per
/// `max_concurrency` window); 20 s leaves room for a few such waits, while
/// a socket that only heartbeats holds an admission slot at most this long.
/// When hit: close 4003 (not authenticated), counted.
pub const GATEWAY_IDENTIFY_TIMEOUT_MS: u64 = 20_000;

/// Largest `num_shards` an IDENTIFY may claim. The largest bots run tens of
/// thousands of shards (2,500 guilds each); 65,536 is above any real
/// deployment and keeps shard arithmetic small. When hit (or when
/// `shard_id >= num_shards`, or `num_shards` is 0): close 4010 (invalid
/// shard), counted.
pub const GATEWAY_SHARDS_MAX: u32 = 65_536;

/// Op 8 requests one session runs at once. Each runs in a task of its own,
/// paced by the session's queue (it waits while the queue is half full),
/// so many at once cost waiting tasks, not memory. Libraries do send
/// several together: discord.py asks for every guild's members at READY
/// before it awaits any, and gives each five seconds. 120 is the inbound
/// budget of a minute, so a session cannot hold more than it could send.
/// When hit: the request is answered with a RATE_LIMITED dispatch (opcode
/// 8, with its guild and nonce), counted.
pub const SESSION_MEMBER_REQUESTS_MAX: usize = GATEWAY_INBOUND_PER_MINUTE_MAX as usize;
/// Op 4s a session's voice worker holds waiting (one is handled at a time,
/// in order, so a join and the leave after it cannot swap). 4 covers a
/// join, a move and a leave in flight with room to spare; a client that
/// sends more faster than an SFU allocates is ahead of itself. When hit:
/// the op 4 is dropped and counted (`guildhall_voice_dropped_total`); the
/// client's next op 4 states what it wants again.
pub const SESSION_VOICE_REQUESTS_MAX: usize = 4;
/// How long the gateway waits for the voice role's answer to a join (the
/// spawn budget, the SFU's allocation and admission all inside). 5 s is
/// under discord.py's and discord.js's own wait for VOICE_SERVER_UPDATE
/// (30 s and 15 s), so a refusal or a lost request leaves the client time
/// to retry. The deadline travels with the request, so the voice role
/// does not start work nobody waits for. When hit: no VOICE_SERVER_UPDATE;
/// counted (`guildhall_voice_unanswered_total`), logged through the
/// throttle.
pub const VOICE_REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Attempts the gateway makes at one op 4 (the first included) when the
/// guild owner or the voice role cannot answer it now: the owner busy,
/// gone or not answering within `guild_reply_timeout_ms`, the voice role
/// not answering within `voice_request_timeout_ms` or refusing with a
/// `retry_after_ms`. discord.py and discord.js send op 4 once and wait
/// (30 s, 15 s) for VOICE_STATE_UPDATE and VOICE_SERVER_UPDATE, so a
/// transient failure the server does not retry is a failed join. Each
/// retry waits a full-jitter backoff (`backoff_base_ms` .. `backoff_cap_ms`)
/// or the refusal's `retry_after_ms`, whichever is longer, is allowed by
/// the node's voice retry budget (`retry_budget_*`), and is abandoned when
/// the session has sent a newer op 4 (which states what it wants now).
/// A refusal that retrying cannot change (no access, no such channel, no
/// CONNECT) is not retried. When hit: no answer for that op 4; counted
/// (`guildhall_voice_gave_up_total`), logged through the throttle.
pub const VOICE_ATTEMPTS_MAX: u32 = 3;
/// Gateway sockets that compress at once (`compress=zlib-stream` or
/// `zstd-stream` in the URL, or IDENTIFY's `compress: true`). Each holds a
/// compressor for its lifetime. Deflate's window is fixed by the rust
/// backend at zlib's largest (32 KiB, 15 bits, which every client inflater
/// accepts), and with its hash chains, match buffer and output buffer a
/// deflate compressor is about 320 KiB, some twenty idle sessions' worth;
/// zstd's is held to the same 32 KiB window (under 512 KiB with its
/// buffers, where its default window alone is 512 KiB). Compressing clients are bots
/// (hikari and discord.py ask for zlib-stream by default; discord.js and
/// twilight do not), so 2,048 (about 640 MiB at most) is far above a
/// node's bots while keeping a node of compressing clients within memory. When hit: a
/// `compress=zlib-stream` upgrade is refused with 503 and `Retry-After`
/// before the 101, and an IDENTIFY's `compress: true` is served plain
/// (Discord: "not all payloads will be compressed"); both counted.
pub const GATEWAY_COMPRESSORS_MAX: usize = 2_048;
// HTTP edge, password hashing and REST callers (hardening: the HTTP edge)
// ---------------------------------------------------------------------------

/// Longest a client may take to send a request's head (request line and
/// headers), and so also how long an idle keep-alive connection is kept
/// (the server reads the next head from the moment the last response is
/// written). 20 s outlasts the keep-alive of the clients we serve
/// (aiohttp keeps idle connections 15 s, undici 4 s), so a client never
/// races the server's close, while a client trickling one byte at a time
/// holds its connection 20 s, not forever. When hit: the connection is
/// closed without a response (counted).
pub const HTTP_HEADER_READ_TIMEOUT_MS: u64 = 20_000;

/// Largest request head (request line and headers), in bytes. 16 KiB is
/// Node.js's own limit, so discord.js never sends more, and it bounds what
/// a connection still in its head can pin. When hit: 431 Request Header
/// Fields Too Large, then the connection is closed (counted).
pub const HTTP_HEADER_BYTES_MAX: usize = 16 * 1024;

/// Longest a request body may take to arrive, from the end of its head. A
/// REST body is at most `rest_body_bytes_max` (64 KiB): 10 s is 6.5 KB/s,
/// slower than any link a client can use the gateway over. When hit: the
/// request is answered 408 Request Timeout with `Connection: close` and the
/// connection is closed (counted).
pub const HTTP_BODY_READ_TIMEOUT_MS: u64 = 10_000;

/// TCP connections a node holds at once: HTTP connections and the gateway
/// sockets upgraded from them (each is a file descriptor). The sessions cap
/// plus 5,000 for REST clients. Lowered at start to the file-descriptor
/// limit minus [`HTTP_FD_RESERVE_MIN`] when that is smaller (logged). When
/// hit: a new connection is accepted, sent a fixed 503 with `Retry-After`
/// and closed at once, without a task: refusing costs one accept and one
/// write, so the node keeps refusing fast under any number of attempts.
pub const HTTP_CONNECTIONS_MAX: usize = SESSIONS_PER_NODE_MAX + 5_000;

/// HTTP connections one client address holds at once (IPv6: one /64).
/// Counts connections still speaking HTTP: a gateway socket leaves the
/// count at its 101, so the users behind one NAT can each hold a session
/// (sessions are bounded by `sessions_per_node_max`). 256 is far above what
/// a client's connection pool opens. When hit: refused like
/// [`HTTP_CONNECTIONS_MAX`] (503, closed), counted.
pub const HTTP_CONNECTIONS_PER_IP_MAX: usize = 256;

/// File descriptors kept free beyond the connection cap, for the store's
/// files, the accept of a connection that is about to be refused, and
/// logs. When the process's limit cannot hold `http_connections_max` plus
/// this, the cap is lowered to fit.
pub const HTTP_FD_RESERVE_MIN: usize = 512;

/// Pause of the accept loop after an accept error other than a reset
/// connection (EMFILE, ENFILE, ENOBUFS): retrying at once would spin on
/// the same error. 100 ms: long enough for connections to close, short
/// enough that the backlog does not overflow. Counted and logged (throttled).
pub const HTTP_ACCEPT_BACKOFF_MS: u64 = 100;

/// Password hashes (Argon2id, 19 MiB and about a core each) computed at
/// once. Each permit owns one preallocated block of Argon2 memory, reused
/// by every hash that takes it, so hashing pins at most this × 19 MiB. 4:
/// about one per core of a typical node; more only queue on the CPU. When
/// hit: register and login answer 429 with `Retry-After` at once
/// (`X-RateLimit-Scope: shared`: the node, not the caller, is busy).
pub const PASSWORD_HASH_CONCURRENCY_MAX: usize = 4;

/// Requests to `/auth/*` per client address, route and window
/// (`rest_rate_window_ms`): each costs a password hash, so one address may
/// not take the hashing permits from everybody else. 10 a second is more
/// than a person types. When hit: 429 with Discord's body.
pub const REST_AUTH_RATE_LIMIT_PER_WINDOW: u32 = 10;

/// Invalid requests (answered 401, 403 or 429, except shared 429s) one
/// client address may make per [`REST_INVALID_WINDOW_MS`], Discord's
/// "Cloudflare ban" limit of 10,000 per 10 minutes. When hit: every
/// request of that address is answered 429 (`global`, scope `global`)
/// before any token lookup or handler until the window ends (counted).
pub const REST_INVALID_REQUESTS_MAX: u32 = 10_000;

/// The window of [`REST_INVALID_REQUESTS_MAX`] (Discord's 10 minutes).
pub const REST_INVALID_WINDOW_MS: u64 = 600_000;

/// Client addresses whose invalid requests are counted at once. When hit:
/// expired windows are forgotten; if none has expired, the oldest is (an
/// address with many others behind it may escape its ban early; a shared
/// overflow window would let one attacker with many addresses ban every
/// newcomer).
pub const REST_INVALID_ADDRESSES_MAX: usize = 100_000;

/// Token digests remembered as invalid, so a repeated bad token costs no
/// store read. A stale entry can never hide a valid token: tokens are 27
/// random bytes the server makes, so a new token's digest was never seen
/// before. When hit: the oldest entry is forgotten.
pub const USERS_NEGATIVE_CACHE_ENTRIES_MAX: usize = 100_000;

/// How long a token digest is remembered as invalid. When it expires the
/// next use of that token reads the store again.
pub const USERS_NEGATIVE_CACHE_TTL_MS: u64 = 60_000;
// Guild contents: Discord's documented field and count bounds, and what a
// guild's GUILD_CREATE may carry
// ---------------------------------------------------------------------------

/// Longest guild name, in characters (Discord: 2-100). When hit: 400 with
/// 50035 on `name`, nothing stored.
pub const GUILD_NAME_CHARS_MAX: usize = 100;

/// Longest role name, in characters (Discord: at most 100). When hit: 400
/// with 50035 on `name`, nothing stored.
pub const ROLE_NAME_CHARS_MAX: usize = 100;

/// Longest channel name, in characters (Discord: 1-100). When hit: 400 with
/// 50035 on `name`, nothing stored.
pub const CHANNEL_NAME_CHARS_MAX: usize = 100;

/// Longest channel topic, in characters (Discord: 0-1,024 for text and
/// voice channels). When hit: 400 with 50035 on `topic`, nothing stored.
pub const CHANNEL_TOPIC_CHARS_MAX: usize = 1_024;

/// Longest member nickname, in characters (Discord: 1-32). When hit: 400
/// with 50035 on `nick`, nothing stored.
pub const NICK_CHARS_MAX: usize = 32;

/// Longest application name, in characters (Discord's 32; the bot user is
/// named after it). When hit: 400 with 50035 on `name`.
pub const APPLICATION_NAME_CHARS_MAX: usize = 32;

/// Longest application description, in characters (Discord's 400). When
/// hit: 400 with 50035 on `description`, nothing stored.
pub const APPLICATION_DESCRIPTION_CHARS_MAX: usize = 400;

/// Most guilds one GET /users/@me/guilds returns (Discord's 200, also its
/// default). When hit: a larger `limit` is 400 with 50035 on `limit`.
pub const USER_GUILDS_PER_PAGE_MAX: usize = 200;

/// Longest string nonce of a message, in characters (Discord: up to 25).
/// The nonce is echoed in every MESSAGE_CREATE, so an unbounded one would
/// multiply by the guild's fanout. When hit: 400 with 50035 on `nonce`.
pub const MESSAGE_NONCE_CHARS_MAX: usize = 25;

/// Embeds one message may carry (Discord: up to 10). When hit: 400 with
/// 50035 on `embeds`.
pub const MESSAGE_EMBEDS_MAX: usize = 10;

/// Top-level components one message may carry (Discord's 40, the most a
/// components-v2 message holds). Components are stored (as sent) only on
/// an application's interaction responses and followups, where component
/// interactions are matched against them; the bound keeps what is
/// validated and stored small. When hit: 400 with 50035 on `components`.
pub const MESSAGE_COMPONENTS_MAX: usize = 40;

/// Longest webhook name, and longest `username` override of an executed
/// webhook message, in characters (Discord's 80). When hit: 400 with 50035
/// on `name` (or `username`), nothing stored.
pub const WEBHOOK_NAME_CHARS_MAX: usize = 80;

/// Longest `avatar_url` override of an executed webhook message, in
/// characters (Discord's URL fields take up to 2048). The URL is never
/// fetched; the bound keeps what is validated small. When hit: 400 with
/// 50035 on `avatar_url`.
pub const WEBHOOK_AVATAR_URL_CHARS_MAX: usize = 2_048;

/// Webhooks one channel holds (Discord's 15). When hit: 400 with 30007
/// (maximum number of webhooks reached), nothing stored.
pub const WEBHOOKS_PER_CHANNEL_MAX: usize = 15;

/// Webhooks one guild holds (Discord's 1000). When hit: 400 with 30058
/// (maximum number of webhooks per guild reached), nothing stored.
pub const WEBHOOKS_PER_GUILD_MAX: usize = 1_000;

/// Requests per webhook and token per REST window on the token routes
/// (execute, and reading or changing the webhook or its messages by
/// token), which need no account: Discord buckets them per webhook id
/// (5 per 2 s). Keyed on the token as well as the id, so a caller without
/// the token cannot spend the owner's bucket (each wrong token is a 401
/// counted against its address). When hit: 429 with Discord's body.
pub const WEBHOOK_RATE_LIMIT_PER_WINDOW: u32 = 5;

/// Time an application has for its initial response to an interaction, in
/// milliseconds (Discord's 3 s). When hit: the invoking user's sessions get
/// INTERACTION_FAILURE, and a callback after it is 404 with 10062 (unknown
/// interaction); the token then serves nothing.
pub const INTERACTION_RESPONSE_DEADLINE_MS: u64 = 3_000;

/// How long an acknowledged interaction's token serves @original and
/// followups, in milliseconds (Discord's 15 minutes). When hit: the
/// interaction is forgotten and its token is 401 with 50027 (invalid
/// webhook token) on the webhook routes, 10062 on the callback.
pub const INTERACTION_TOKEN_TTL_MS: u64 = 15 * 60 * 1_000;

/// Interactions one node holds (pending or acknowledged, until their token
/// expires). Each is about 1 KiB (ids, token, the command's options as
/// delivered, a shown modal): 100,000 is about 100 MiB at most, and at
/// Discord's 15-minute lifetime it is over 100 interactions a second
/// sustained. When hit: POST /interactions is 429 (scope `shared`) until
/// the sweep frees room.
pub const INTERACTIONS_MAX: usize = 100_000;

/// How long an api node waits for the api node that created an
/// interaction to answer a callback or an interaction-webhook request
/// passed on to it over the bus (a cluster whose load balancer sent the
/// bot to another api node). When hit: the caller gets 503 with
/// Retry-After (the creating node may be alive but slow; the bot retries
/// within the interaction's deadline). Above a callback's own work (a
/// store write and a publish) with room for a loaded node.
pub const INTERACTION_FORWARD_TIMEOUT_MS: u64 = 2_500;

/// Passed-on interaction requests an api node serves at once (each a task
/// running the route). When hit: the request is answered 503 with
/// Retry-After at once, never queued behind the others.
pub const INTERACTION_FORWARDS_IN_FLIGHT_MAX: usize = 256;

/// Interactions of one application awaiting their initial response at
/// once. A bot that stops answering would otherwise fill the node's table
/// with 3-second entries that only ever fail. When hit: POST /interactions
/// is 429 (scope `shared`) for that application's interactions.
pub const INTERACTIONS_PENDING_PER_APPLICATION_MAX: usize = 1_000;

/// Interactions one user may create per minute (a person clicks at most a
/// few times a second; this is far above that and far below what fills
/// the table). When hit: POST /interactions is 429 with the seconds until
/// the minute's window ends.
pub const INTERACTIONS_PER_USER_PER_MINUTE_MAX: u32 = 120;

/// Users whose interaction windows one node tracks (each a few bytes). When
/// hit: a user not already tracked is refused with 429 (scope `shared`)
/// until the sweep drops windows that ended.
pub const INTERACTION_USERS_MAX: usize = 100_000;

/// Entries one sweep of the interaction table visits (expired
/// interactions forgotten, missed deadlines turned into
/// INTERACTION_FAILURE). A sweep runs on every create and every
/// `interaction_sweep_interval_ms`; bounded so one pass never stalls the
/// table's lock. When hit: the rest waits for the next sweep (an expired
/// entry answers as expired all the same: expiry is checked on every use).
pub const INTERACTION_SWEEP_BATCH_MAX: usize = 512;

/// Interval of the interaction sweep, in milliseconds: how late after its
/// deadline INTERACTION_FAILURE can reach the invoking user. Must not
/// exceed `interaction_response_deadline_ms`.
pub const INTERACTION_SWEEP_INTERVAL_MS: u64 = 250;

/// Longest `custom_id` of a component or modal, in characters (Discord's
/// 100). When hit: 400 with 50035 on the field.
pub const COMPONENT_CUSTOM_ID_CHARS_MAX: usize = 100;

/// Longest modal title, in characters (Discord's 45). When hit: 400 with
/// 50035 on `data.title`.
pub const INTERACTION_MODAL_TITLE_CHARS_MAX: usize = 45;

/// Top-level components of a modal (Discord's 1 to 5). When hit: 400 with
/// 50035 on `data.components`.
pub const INTERACTION_MODAL_COMPONENTS_MAX: usize = 5;

/// Choices of an autocomplete result (Discord's 25). When hit: 400 with
/// 50035 on `data.choices`.
pub const INTERACTION_AUTOCOMPLETE_CHOICES_MAX: usize = 25;

/// Roles one guild holds, `@everyone` included (Discord's 250). When hit:
/// 400 with 30005 (maximum number of guild roles reached).
pub const GUILD_ROLES_MAX: usize = 250;

/// Channels one guild holds (Discord's 500). When hit: 400 with 30013
/// (maximum number of guild channels reached).
pub const GUILD_CHANNELS_MAX: usize = 500;

/// Permission overwrites one channel holds (one per role or member it
/// names). When hit: 400 with 50035 on `permission_overwrites`, nothing
/// stored. A channel's overwrites travel whole in every channel object
/// (GUILD_CREATE, CHANNEL_UPDATE), so the bound keeps one channel from
/// filling a guild's GUILD_CREATE.
pub const CHANNEL_OVERWRITES_MAX: usize = 100;

/// Messages one ban deletes at most (`delete_message_seconds`), newest
/// first. When hit: the older ones in the window stay (a moderator
/// removes them with bulk delete); the bound keeps one ban from holding
/// the guild's owner for a flood's worth of deletes.
pub const BAN_DELETE_MESSAGES_MAX: usize = 10_000;

/// Bans one `GET /guilds/{id}/bans` page holds at most, and its default
/// `limit` (Discord's 1,000). A larger `limit`: 400 with 50035.
pub const BANS_PAGE_MAX: usize = 1_000;

/// Users one bulk ban names at most (Discord's 200). More: 400 with
/// 50035 on `user_ids`, nobody banned.
pub const BULK_BAN_USERS_MAX: usize = 200;

/// Invites one guild holds at most (Discord's 1,000). Creating one more:
/// expired invites are pruned, and if the guild is still full, 400 with
/// 30016 and nothing created. Also the most one invite list answers.
pub const GUILD_INVITES_MAX: usize = 1_000;

/// Characters of an `X-Audit-Log-Reason` kept (Discord's 512). Longer:
/// cut to this many.
pub const AUDIT_REASON_CHARS_MAX: usize = 512;

/// Channels whose audience (the members who may not view them) one guild
/// owner keeps computed. When hit: all are dropped and recomputed on
/// demand (one pass over the members per channel); a change to roles,
/// overwrites or members drops them too. Bounds the owner's memory at this
/// many member lists per guild.
pub const GUILD_VIEW_CACHE_CHANNELS_MAX: usize = 64;

/// (channel, member) slowmode clocks one guild owner keeps: who sent in a
/// slowmode channel and until when they wait. When hit: the clocks that
/// ran out are dropped; if none has, the send passes unrecorded (counted
/// in `guildhall_slowmode_unrecorded_total`) rather than refused, so a
/// flood of members cannot grow the owner's memory.
pub const GUILD_SLOWMODE_CLOCKS_MAX: usize = 100_000;

/// Active (unarchived) threads one guild holds, Discord's cap. Its owner
/// keeps them in memory with their members. When hit: starting another
/// is refused with 160006 (maximum number of active threads reached).
pub const GUILD_ACTIVE_THREADS_MAX: usize = 1_000;

/// Thread members one `GET /channels/{id}/thread-members` answers (its
/// `limit`'s bound and default, Discord's 100). When hit: the caller pages
/// on with `after`; a larger `limit` is 50035.
pub const THREAD_MEMBERS_PAGE_MAX: usize = 100;

/// Archived threads one archived-threads list answers (the bound of its
/// `limit`, Discord's 100; the default is 50 or this, if lower). When hit:
/// the answer says `has_more` and the caller pages on with `before`; a
/// larger `limit` is 50035.
pub const ARCHIVED_THREADS_PAGE_MAX: usize = 100;

/// Audit log entries one guild keeps. When hit: the oldest are forgotten
/// as new ones are written (one delete in the same transaction).
pub const AUDIT_LOG_ENTRIES_MAX: usize = 10_000;

/// How long an audit log entry is kept (Discord's 45 days), in ms. Older
/// entries are forgotten as new ones are written.
pub const AUDIT_LOG_RETENTION_MS: u64 = 45 * 86_400 * 1_000;

/// Entries one `GET /guilds/{id}/audit-logs` page holds at most
/// (Discord's 100; the default `limit` is 50). More: 400 with 50035.
pub const AUDIT_LOG_PAGE_MAX: usize = 100;

/// Members a GUILD_CREATE carries at most (Discord's largest
/// `large_threshold`): a guild with more is `large`, and clients ask for
/// the rest with op 8. The session's own member always comes first; fewer
/// are sent when they do not fit the bus payload (the guild is then marked
/// `large` too).
pub const GUILD_CREATE_MEMBERS_MAX: usize = 250;

/// Bytes of `bus_payload_bytes_max` kept free around a guild's roles and
/// channels: the envelopes of the stream event and of a guild reply, and
/// the `guild_id` each channel carries in a channel list (500 channels ×
/// 32 bytes). A guild's roles and channels, encoded as GUILD_CREATE carries
/// them, never exceed `bus_payload_bytes_max` minus this: Discord's
/// per-field and count bounds alone allow 3.5 MB (500 channels with 1,024-
/// character topics of 6-byte JSON escapes), so a change that would pass
/// it is refused (30005 or 30013 for a new role or channel, 50035 on the
/// grown field for an edit). A guild filled to every count bound with
/// ASCII names and topics of the longest lengths takes about 0.8 MB and
/// fits; GUILD_CREATE and every guild answer therefore always fit the bus.
pub const GUILD_ENVELOPE_RESERVE_BYTES: usize = 32 * 1024;

/// Longest `Retry-After` a refused upgrade is given. The spread over the
/// refused grows with the herd; past a minute a client is better served by
/// trying another node. When hit: the value is capped (the client may come
/// back early and be refused again).
pub const HANDSHAKE_RETRY_AFTER_S_MAX: u64 = 60;

/// `Retry-After` of an upgrade refused because the node holds
/// `sessions_per_node_max` sessions: sessions leave at their own pace, so
/// a short fixed delay, and the load balancer may pick another node.
pub const SESSIONS_FULL_RETRY_AFTER_S: u64 = 5;

// ---------------------------------------------------------------------------
// The SFU (voice gateway v8 and UDP media)
// ---------------------------------------------------------------------------

/// Voice sessions (admitted or connected) one SFU holds. Each costs a few
/// kB of state and, once live, its share of forwarding (a call of n costs
/// n × (n − 1) sends per packet interval). When hit: Admit is answered
/// `Refused { Full }` and the voice role picks another SFU; the figure is
/// announced as `sessions_max` so placement sees it first.
pub const SFU_SESSIONS_MAX: usize = 1_000;

/// Calls (channels) one SFU hosts. When hit: Allocate is answered
/// `Refused { Full }`; calls already here keep working.
pub const SFU_CALLS_MAX: usize = 500;

/// Participants of one call. 99 is Discord's largest voice channel user
/// limit; forwarding work grows with its square. When hit: Admit is
/// answered `Refused { Full }`.
pub const SFU_PARTICIPANTS_PER_CALL_MAX: usize = 99;

/// RTP packets per second one sender may send (token bucket per SSRC).
/// Opus at 20 ms frames is 50 packets/s; twice that leaves room for
/// 10 ms frames. When hit: the packet is dropped and counted
/// (`dropped_rate`), nothing is forwarded for it.
pub const SFU_PACKETS_PER_S_PER_SSRC: u32 = 100;

/// Burst of the per-SSRC packet bucket: one second of 20 ms frames, so a
/// sender catching up after jitter is not cut. When hit: as
/// [`SFU_PACKETS_PER_S_PER_SSRC`].
pub const SFU_PACKETS_BURST: u32 = 50;

/// Largest UDP datagram accepted, bytes: one Ethernet MTU. An Opus frame
/// is at most 1275 bytes plus headers. When hit: dropped and counted
/// (`dropped_oversized`).
pub const SFU_UDP_DATAGRAM_BYTES_MAX: usize = 1_500;

/// The SFU socket's kernel send buffer, bytes: the bound on media in flight
/// toward receivers. The SFU keeps no send queue of its own (sends never
/// wait), so this is all the backlog there is: 1 MiB holds about 50 ms of
/// 20,000 forwarded packets/s. The kernel caps it at `net.core.wmem_max`
/// (the size granted is logged at start). When hit: the newest packet is
/// dropped and counted (`dropped_send_full`), a receiver's audio gaps
/// instead of lagging.
pub const SFU_UDP_SEND_BUFFER_BYTES: usize = 1_048_576;

/// The SFU socket's kernel receive buffer, bytes: what arrives while every
/// worker is busy. 1 MiB is about 50 ms of senders at 20,000 packets/s.
/// Capped by the kernel at `net.core.rmem_max`. When hit: the kernel drops
/// datagrams (senders' audio gaps; nothing is queued without bound).
pub const SFU_UDP_RECV_BUFFER_BYTES: usize = 1_048_576;

/// Tasks receiving (and forwarding) on the SFU's one UDP socket: a task
/// per core keeps decrypt/re-encrypt off a single core. When hit: not a
/// traffic limit; this many tasks share the socket.
pub const SFU_UDP_WORKERS: usize = 2;

/// Largest voice gateway message a client may send, bytes: identify and
/// select protocol are a few hundred. When hit: closed with 4002.
pub const SFU_WS_PAYLOAD_BYTES_MAX: usize = 4_096;

/// Voice gateway messages per client per minute. Heartbeats every 5 s
/// (discord.py) plus speaking changes stay far below. When hit: closed
/// with 4021 (rate limited).
pub const SFU_WS_INBOUND_PER_MINUTE_MAX: u32 = 120;

/// Server messages queued for one voice connection's writer. When hit:
/// the connection is dropped (its session stays resumable; a resume
/// replays what it missed from the replay buffer). Larger than
/// [`SFU_REPLAY_MESSAGES_MAX`] so a full replay fits a fresh queue.
pub const SFU_CONNECTION_QUEUE_MESSAGES_MAX: usize = 128;

/// Numbered server messages kept per voice session for a v8 resume
/// (`seq_ack`). When hit: the oldest is dropped; a resume that needs it
/// is closed with 4006 and the client connects anew.
pub const SFU_REPLAY_MESSAGES_MAX: usize = 64;

/// How long a voice session whose connection dropped stays resumable, ms.
/// When hit: the session ends, its peers get op 13.
pub const SFU_RESUME_WINDOW_MS: u64 = 60_000;

/// Voice heartbeat interval sent in Hello, ms (Discord's value).
/// discord.py heartbeats at most every 5 s anyway.
pub const SFU_HEARTBEAT_INTERVAL_MS: u64 = 13_750;

/// Silence after which a voice connection is closed with 4009, ms: two
/// intervals and slack.
pub const SFU_HEARTBEAT_TIMEOUT_MS: u64 = 30_000;

/// Time a voice connection has to identify or resume after Hello, ms.
/// When hit: closed with 4009.
pub const SFU_IDENTIFY_TIMEOUT_MS: u64 = 10_000;

/// How long an Admit waits for its identify, ms. When hit: the admission
/// lapses (its slot is freed) and its token no longer works (4004).
pub const SFU_ADMISSION_TTL_MS: u64 = 60_000;

/// Voice gateway connections one SFU holds (WebSocket upgrades, and
/// separately TLS connections on its own listener). Above
/// [`SFU_SESSIONS_MAX`] so resumes and handshakes fit. When hit: an
/// upgrade is answered 503, a TLS connection is closed at once; both are
/// counted.
pub const SFU_CONNECTIONS_MAX: usize = 2_048;

/// Time a TLS handshake on the voice gateway may take, ms. When hit: the
/// connection is closed and counted.
pub const SFU_TLS_HANDSHAKE_TIMEOUT_MS: u64 = 10_000;

// ---------------------------------------------------------------------------
// Voice role (seed 003: the voice-syncer spawn storm)
// ---------------------------------------------------------------------------

/// Guild voice coordinators one voice node runs at once (one per guild with
/// anyone in voice). 4,096 guilds at a few KiB each is small; the bound is a
/// backstop behind the spawn budget (seed 003). When hit: a join for a new
/// guild is refused with `instance_full` and a `retry_after_ms`.
pub const VOICE_COORDINATORS_MAX: usize = 4_096;

/// How long a guild's coordinator stays after a child spawn was refused,
/// with no syncer running. Without it, a refused child leaves an empty
/// coordinator that ends at once, and every retry pays for a new
/// coordinator out of the same budget: children starve behind their own
/// coordinators. A few retry intervals. When hit: the coordinator ends.
pub const VOICE_COORDINATOR_LINGER_MS: u64 = 5_000;

/// Channel syncers (one per active call) one voice node runs at once, all
/// guilds together: the per-instance admission cap behind the spawn budget
/// (seed 003's instances took secondary and tertiary placements until they
/// drowned). When hit: a join that needs a new syncer is refused with
/// `instance_full`.
pub const VOICE_SYNCERS_MAX: usize = 16_384;

/// Voice requests queued on a voice node's bus subscription. When hit: the
/// bus answers `refused` (`instance_full`) at once, so gateways back off
/// instead of waiting out their deadline.
pub const VOICE_REQUESTS_QUEUE_MAX: usize = 1_024;

/// Bulk work (joins, leaves) queued in one coordinator's or syncer's mailbox.
/// Seed 003: unbounded mailboxes grew until supervisors could not keep up.
/// When hit: the request is refused with `instance_full` at once.
pub const VOICE_MAILBOX_MESSAGES_MAX: usize = 256;

/// Control messages (release, re-place, shutdown) queued for one coordinator
/// or syncer, on a channel of their own that the task polls first, so a
/// bulk backlog never delays them. Control is rare (a few per call's life).
/// When hit: the sender retries on the next event (re-placement) or the
/// message is counted as dropped.
pub const VOICE_CONTROL_MESSAGES_MAX: usize = 16;

/// Participants the voice role tracks in one call. Discord caps voice channels
/// at 99 users (stage channels go higher); 1,000 bounds the per-call maps.
/// When hit: the join is refused with `instance_full`.
pub const VOICE_CALL_PARTICIPANTS_MAX: usize = 1_000;

/// Allocations one voice node has in flight to one SFU. Seed 003: syncers
/// opened unbounded RPCs to SFUs during the cold start. When hit: that SFU
/// is skipped for the next choice (another SFU, or `no_sfu`).
pub const VOICE_SFU_ALLOCATIONS_IN_FLIGHT_MAX: usize = 32;

/// Consecutive failed requests to one SFU that open its circuit breaker (no
/// more work sent to it for the cool-down, its calls re-placed). Five rules
/// out a lone lost reply.
pub const VOICE_SFU_BREAKER_FAILURES_MAX: u32 = 5;

/// How long an open SFU breaker stays open before one probe is let through.
/// A few lease renewals' time: a dead SFU leaves the registry within it.
pub const VOICE_SFU_BREAKER_COOL_DOWN_MS: u64 = 5_000;

/// Deadline of one request to an SFU (allocate, admit, evict, release). An
/// SFU answers in well under a millisecond when healthy; two seconds is
/// below Discord clients' patience for VOICE_SERVER_UPDATE. When hit: a
/// breaker failure, and the join is refused with `sfu_unavailable`.
pub const VOICE_SFU_REQUEST_TIMEOUT_MS: u64 = 2_000;

/// Coordinators and syncers together one voice node may spawn per second:
/// each syncer allocates on an SFU, so this is also the RPC rate a cold
/// restart puts on the SFUs (seed 003's limit counted coordinators only).
/// When hit: refused with `spawn_budget` and when to come back.
pub const VOICE_SPAWN_RATE_PER_S: u32 = 200;

/// Spawns the budget allows at once above its rate.
pub const VOICE_SPAWN_BURST: u32 = 50;

/// Spawns one guild (its coordinator and its syncers) may take per second, so
/// one huge guild cannot take a node's whole budget. When hit: refused with
/// `spawn_budget`.
pub const VOICE_SPAWN_GUILD_RATE_PER_S: u32 = 20;

/// Spawns one guild may take at once above its rate.
pub const VOICE_SPAWN_GUILD_BURST: u32 = 10;

/// Per-guild spawn allowances a node tracks. A full allowance is the same as
/// none, so full ones are forgotten first. When hit with every one in use:
/// refused with `spawn_budget`.
pub const VOICE_SPAWN_GUILDS_TRACKED_MAX: usize = 8_192;

/// Calls one voice node re-places on another SFU at once after an SFU died.
/// Re-placement is an allocation plus one admission per participant: this
/// keeps an SFU loss from becoming seed 003's herd. When hit: the others
/// wait their turn.
pub const VOICE_REPLACEMENTS_IN_FLIGHT_MAX: usize = 16;

/// `retry_after_ms` of a refusal that is not the budget's (instance full, no
/// SFU, SFU unavailable); the refuser adds up to as much again as jitter.
pub const VOICE_RETRY_AFTER_MS: u64 = 1_000;

/// SFUs whose load (sessions / sessions_max) is within this of the least
/// loaded one are equally good; among them a channel's SFU is chosen by a
/// hash of the channel id, so two syncers for one channel agree. When hit:
/// not a limit on traffic.
pub const VOICE_SFU_LOAD_SLACK_PERMILLE: u32 = 100;

const _: () = assert!(VOICE_SPAWN_GUILD_RATE_PER_S <= VOICE_SPAWN_RATE_PER_S);
const _: () = assert!(VOICE_SPAWN_GUILD_BURST <= VOICE_SPAWN_BURST);
const _: () = assert!(VOICE_SPAWN_GUILDS_TRACKED_MAX >= VOICE_COORDINATORS_MAX);

// Relations between the defaults, checked when this crate compiles.
const _: () = assert!(SFU_HEARTBEAT_TIMEOUT_MS > SFU_HEARTBEAT_INTERVAL_MS);
const _: () =
    assert!(SFU_PARTICIPANTS_PER_CALL_MAX <= SFU_SESSIONS_MAX && SFU_CALLS_MAX <= SFU_SESSIONS_MAX);
const _: () = assert!(SFU_CONNECTIONS_MAX >= SFU_SESSIONS_MAX);
const _: () = assert!(SFU_CONNECTION_QUEUE_MESSAGES_MAX > SFU_REPLAY_MESSAGES_MAX);
const _: () = assert!(LEASE_RENEW_INTERVAL_MS * 2 < LEASE_TTL_MS);
const _: () = assert!(MEMBER_PERMANENT_DOWN_MS >= LEASE_RENEW_INTERVAL_MS);
const _: () = assert!(ADAPTIVE_LIMIT_FLOOR <= ADAPTIVE_LIMIT_START);
const _: () = assert!(ADAPTIVE_LIMIT_START <= ADAPTIVE_LIMIT_CEILING);
const _: () = assert!(DRAIN_MARGIN_MS < DRAIN_GRACE_MS);
const _: () = assert!(SESSION_MOVE_TIMEOUT_MS < SESSION_TAKEOVER_TIMEOUT_MS);
const _: () = assert!(SELF_PRESERVATION_REMOVAL_PERMILLE < 1000);
const _: () = assert!(DRAIN_RECEIVER_UTILIZATION_PERMILLE <= 1000);
const _: () = assert!(RETRY_BUDGET_WINDOW_MS.is_multiple_of(RETRY_BUDGET_BUCKETS as u64));
const _: () = assert!(RING_HISTORY_GENERATIONS_MAX >= 2);
const _: () = assert!(HEARTBEAT_TIMEOUT_MS > HEARTBEAT_INTERVAL_MS);
const _: () = assert!(REPLAY_BUFFER_EVENTS_MAX >= 1 && SESSION_QUEUE_MESSAGES_MAX >= 1);
const _: () = assert!(GUILD_LOAD_WAITERS_MAX < GUILD_MAILBOX_MESSAGES_MAX);
const _: () = assert!(HTTP_CONNECTIONS_MAX > SESSIONS_PER_NODE_MAX);
const _: () = assert!(HTTP_HEADER_BYTES_MAX >= 8_192);
const _: () = assert!(REST_AUTH_RATE_LIMIT_PER_WINDOW <= REST_RATE_LIMIT_PER_WINDOW);
const _: () = assert!(WEBHOOKS_PER_CHANNEL_MAX <= WEBHOOKS_PER_GUILD_MAX);
const _: () = assert!(INTERACTION_SWEEP_INTERVAL_MS <= INTERACTION_RESPONSE_DEADLINE_MS);
const _: () = assert!(INTERACTION_RESPONSE_DEADLINE_MS < INTERACTION_TOKEN_TTL_MS);
const _: () = assert!(INTERACTIONS_PENDING_PER_APPLICATION_MAX <= INTERACTIONS_MAX);
const _: () = assert!(GUILD_ENVELOPE_RESERVE_BYTES <= BUS_PAYLOAD_BYTES_MAX / 2);
const _: () = assert!(GUILD_CREATE_MEMBERS_MAX <= MEMBERS_PER_PAGE_MAX);
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
    /// See [`REGISTRY_ENTRIES_MAX`].
    pub registry_entries_max: usize,
    /// See [`REGISTRY_WATCH_EVENTS_MAX`].
    pub registry_watch_events_max: usize,
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
    /// See [`SELF_PRESERVATION_REMOVALS_MIN`].
    pub self_preservation_removals_min: u32,
    /// See [`SELF_PRESERVATION_FREEZE_MAX_MS`].
    pub self_preservation_freeze_max_ms: u64,
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
    /// See [`SESSION_REAP_INTERVAL_MS`].
    pub session_reap_interval_ms: u64,
    /// See [`SESSION_TAKEOVER_TIMEOUT_MS`].
    pub session_takeover_timeout_ms: u64,
    /// See [`SESSION_MOVE_TIMEOUT_MS`].
    pub session_move_timeout_ms: u64,
    /// See [`SESSION_TAKEOVERS_IN_FLIGHT_MAX`].
    pub session_takeovers_in_flight_max: usize,
    /// See [`GATEWAY_ANNOUNCE_INTERVAL_MS`].
    pub gateway_announce_interval_ms: u64,
    /// See [`SESSIONS_PER_NODE_MAX`].
    pub sessions_per_node_max: usize,
    /// See [`HANDSHAKE_RATE_PER_S`].
    pub handshake_rate_per_s: u32,
    /// See [`HANDSHAKE_HOLD_MS_MAX`].
    pub handshake_hold_ms_max: u64,
    /// See [`REST_BODY_BYTES_MAX`].
    pub rest_body_bytes_max: usize,
    /// See [`REST_BODY_DRAIN_BYTES_MAX`].
    pub rest_body_drain_bytes_max: usize,
    /// See [`ATTACHMENT_BYTES_MAX`].
    pub attachment_bytes_max: usize,
    /// See [`UPLOAD_REQUEST_BYTES_MAX`].
    pub upload_request_bytes_max: usize,
    /// See [`MESSAGE_ATTACHMENTS_MAX`].
    pub message_attachments_max: usize,
    /// See [`ATTACHMENT_FILENAME_BYTES_MAX`].
    pub attachment_filename_bytes_max: usize,
    /// See [`ATTACHMENT_TEXT_CHARS_MAX`].
    pub attachment_text_chars_max: usize,
    /// See [`UPLOAD_MEMORY_BYTES_MAX`].
    pub upload_memory_bytes_max: usize,
    /// See [`BLOB_DELETE_QUEUE_MAX`].
    pub blob_delete_queue_max: usize,
    /// See [`ATTACHMENT_URL_TTL_MS`].
    pub attachment_url_ttl_ms: u64,
    /// See [`ATTACHMENT_REFRESH_URLS_MAX`].
    pub attachment_refresh_urls_max: usize,
    /// See [`MESSAGE_CONTENT_CHARS_MAX`].
    pub message_content_chars_max: usize,
    /// See [`MESSAGES_PER_PAGE_MAX`].
    pub messages_per_page_max: usize,
    /// See [`MEMBERS_PER_PAGE_MAX`].
    pub members_per_page_max: usize,
    /// See [`MEMBER_REQUEST_MATCHES_MAX`].
    pub member_request_matches_max: usize,
    /// See [`REACTION_USERS_PER_PAGE_MAX`].
    pub reaction_users_per_page_max: usize,
    /// See [`REACTIONS_PER_MESSAGE_MAX`].
    pub reactions_per_message_max: usize,
    /// See [`PINS_PER_CHANNEL_MAX`].
    pub pins_per_channel_max: usize,
    /// See [`PINS_PER_PAGE_MAX`].
    pub pins_per_page_max: usize,
    /// See [`APPLICATION_COMMANDS_CHAT_INPUT_MAX`].
    pub application_commands_chat_input_max: usize,
    /// See [`APPLICATION_COMMANDS_CONTEXT_MENU_MAX`].
    pub application_commands_context_menu_max: usize,
    /// See [`APPLICATION_COMMANDS_BODY_BYTES_MAX`].
    pub application_commands_body_bytes_max: usize,
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
    /// See [`PLACEMENT_GUILDS_MAX`].
    pub placement_guilds_max: usize,
    /// See [`PLACEMENT_LIST_PAGE_MAX`].
    pub placement_list_page_max: usize,
    /// See [`PLACEMENT_REFRESH_INTERVAL_MS`].
    pub placement_refresh_interval_ms: u64,
    /// See [`GUILD_FORWARD_HOPS_MAX`].
    pub guild_forward_hops_max: u32,
    /// See [`GUILD_PULL_TIMEOUT_MS`].
    pub guild_pull_timeout_ms: u64,
    /// See [`GUILD_PULL_RETRIES_MAX`].
    pub guild_pull_retries_max: u32,
    /// See [`GUILD_LATE_PULL_TASKS_MAX`].
    pub guild_late_pull_tasks_max: usize,
    /// See [`GUILD_PULL_SESSIONS_MAX`].
    pub guild_pull_sessions_max: usize,
    /// See [`GUILD_REPLY_TIMEOUT_MS`].
    pub guild_reply_timeout_ms: u64,
    /// See [`GUILD_OWNERS_MAX`].
    pub guild_owners_max: usize,
    /// See [`READY_GUILDS_MAX`].
    pub ready_guilds_max: usize,
    /// See [`SESSION_STARTS_PER_WINDOW_MAX`].
    pub session_starts_per_window_max: u32,
    /// See [`SESSION_START_WINDOW_MS`].
    pub session_start_window_ms: u64,
    /// See [`SESSION_START_BOTS_MAX`].
    pub session_start_bots_max: usize,
    /// See [`IDENTIFY_CONCURRENCY_MAX`].
    pub identify_concurrency_max: u32,
    /// See [`IDENTIFY_CONCURRENCY_WINDOW_MS`].
    pub identify_concurrency_window_ms: u64,
    /// See [`STORE_POOL_CONNECTIONS_MAX`].
    pub store_pool_connections_max: u32,
    /// See [`MESSAGE_WRITE_QUEUE_MAX`].
    pub message_write_queue_max: usize,
    /// See [`MESSAGE_WRITE_BATCH_MAX`].
    pub message_write_batch_max: usize,
    /// See [`PRESENCE_SESSIONS_MAX`].
    pub presence_sessions_max: usize,
    /// See [`PRESENCE_QUERY_USERS_MAX`].
    pub presence_query_users_max: usize,
    /// See [`PRESENCE_QUERIES_PER_LOAD_MAX`].
    pub presence_queries_per_load_max: usize,
    /// See [`PRESENCE_QUERY_TIMEOUT_MS`].
    pub presence_query_timeout_ms: u64,
    /// See [`PRESENCE_QUERY_COOLOFF_MS`].
    pub presence_query_cooloff_ms: u64,
    /// See [`PRESENCE_RESYNC_PER_S`].
    pub presence_resync_per_s: u64,
    /// See [`USERS_LOADS_IN_FLIGHT_MAX`].
    pub users_loads_in_flight_max: usize,
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
    /// See [`GUILD_NAME_CHARS_MAX`].
    pub guild_name_chars_max: usize,
    /// See [`ROLE_NAME_CHARS_MAX`].
    pub role_name_chars_max: usize,
    /// See [`CHANNEL_NAME_CHARS_MAX`].
    pub channel_name_chars_max: usize,
    /// See [`CHANNEL_TOPIC_CHARS_MAX`].
    pub channel_topic_chars_max: usize,
    /// See [`NICK_CHARS_MAX`].
    pub nick_chars_max: usize,
    /// See [`APPLICATION_NAME_CHARS_MAX`].
    pub application_name_chars_max: usize,
    /// See [`APPLICATION_DESCRIPTION_CHARS_MAX`].
    pub application_description_chars_max: usize,
    /// See [`USER_GUILDS_PER_PAGE_MAX`].
    pub user_guilds_per_page_max: usize,
    /// See [`MESSAGE_NONCE_CHARS_MAX`].
    pub message_nonce_chars_max: usize,
    /// See [`MESSAGE_EMBEDS_MAX`].
    pub message_embeds_max: usize,
    /// See [`MESSAGE_COMPONENTS_MAX`].
    pub message_components_max: usize,
    /// See [`WEBHOOK_NAME_CHARS_MAX`].
    pub webhook_name_chars_max: usize,
    /// See [`WEBHOOK_AVATAR_URL_CHARS_MAX`].
    pub webhook_avatar_url_chars_max: usize,
    /// See [`WEBHOOKS_PER_CHANNEL_MAX`].
    pub webhooks_per_channel_max: usize,
    /// See [`WEBHOOKS_PER_GUILD_MAX`].
    pub webhooks_per_guild_max: usize,
    /// See [`WEBHOOK_RATE_LIMIT_PER_WINDOW`].
    pub webhook_rate_limit_per_window: u32,
    /// See [`INTERACTION_RESPONSE_DEADLINE_MS`].
    pub interaction_response_deadline_ms: u64,
    /// See [`INTERACTION_TOKEN_TTL_MS`].
    pub interaction_token_ttl_ms: u64,
    /// See [`INTERACTIONS_MAX`].
    pub interactions_max: usize,
    /// See [`INTERACTION_FORWARD_TIMEOUT_MS`].
    pub interaction_forward_timeout_ms: u64,
    /// See [`INTERACTION_FORWARDS_IN_FLIGHT_MAX`].
    pub interaction_forwards_in_flight_max: usize,
    /// See [`INTERACTIONS_PENDING_PER_APPLICATION_MAX`].
    pub interactions_pending_per_application_max: usize,
    /// See [`INTERACTIONS_PER_USER_PER_MINUTE_MAX`].
    pub interactions_per_user_per_minute_max: u32,
    /// See [`INTERACTION_USERS_MAX`].
    pub interaction_users_max: usize,
    /// See [`INTERACTION_SWEEP_BATCH_MAX`].
    pub interaction_sweep_batch_max: usize,
    /// See [`INTERACTION_SWEEP_INTERVAL_MS`].
    pub interaction_sweep_interval_ms: u64,
    /// See [`COMPONENT_CUSTOM_ID_CHARS_MAX`].
    pub component_custom_id_chars_max: usize,
    /// See [`INTERACTION_MODAL_TITLE_CHARS_MAX`].
    pub interaction_modal_title_chars_max: usize,
    /// See [`INTERACTION_MODAL_COMPONENTS_MAX`].
    pub interaction_modal_components_max: usize,
    /// See [`INTERACTION_AUTOCOMPLETE_CHOICES_MAX`].
    pub interaction_autocomplete_choices_max: usize,
    /// See [`GUILD_ROLES_MAX`].
    pub guild_roles_max: usize,
    /// See [`GUILD_CHANNELS_MAX`].
    pub guild_channels_max: usize,
    /// See [`GUILD_SLOWMODE_CLOCKS_MAX`].
    pub guild_slowmode_clocks_max: usize,
    /// See [`GUILD_ACTIVE_THREADS_MAX`].
    pub guild_active_threads_max: usize,
    /// See [`THREAD_MEMBERS_PAGE_MAX`].
    pub thread_members_page_max: usize,
    /// See [`ARCHIVED_THREADS_PAGE_MAX`].
    pub archived_threads_page_max: usize,
    /// See [`CHANNEL_OVERWRITES_MAX`].
    pub channel_overwrites_max: usize,
    /// See [`GUILD_VIEW_CACHE_CHANNELS_MAX`].
    pub guild_view_cache_channels_max: usize,
    /// See [`AUDIT_LOG_ENTRIES_MAX`].
    pub audit_log_entries_max: usize,
    /// See [`AUDIT_LOG_RETENTION_MS`].
    pub audit_log_retention_ms: u64,
    /// See [`AUDIT_LOG_PAGE_MAX`].
    pub audit_log_page_max: usize,
    /// See [`BAN_DELETE_MESSAGES_MAX`].
    pub ban_delete_messages_max: usize,
    /// See [`BANS_PAGE_MAX`].
    pub bans_page_max: usize,
    /// See [`BULK_BAN_USERS_MAX`].
    pub bulk_ban_users_max: usize,
    /// See [`GUILD_INVITES_MAX`].
    pub guild_invites_max: usize,
    /// See [`AUDIT_REASON_CHARS_MAX`].
    pub audit_reason_chars_max: usize,
    /// See [`GUILD_CREATE_MEMBERS_MAX`].
    pub guild_create_members_max: usize,
    /// See [`GUILD_ENVELOPE_RESERVE_BYTES`].
    pub guild_envelope_reserve_bytes: usize,
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
    /// See [`FANOUT_OUTBOX_BYTES_MAX`].
    pub fanout_outbox_bytes_max: usize,
    /// See [`FANOUT_OUTBOX_EVENT_AGE_MS_MAX`].
    pub fanout_outbox_event_age_ms_max: u64,
    /// See [`FANOUT_OUTBOX_CALLS_IN_FLIGHT_MAX`].
    pub fanout_outbox_calls_in_flight_max: usize,
    /// See [`GUILD_PUBLISH_IDS_REMEMBERED_MAX`].
    pub guild_publish_ids_remembered_max: usize,
    /// See [`GUILD_STREAM_UNSENT_MAX`].
    pub guild_stream_unsent_max: usize,
    /// See [`GUILD_STREAM_RETRY_MS`].
    pub guild_stream_retry_ms: u64,
    /// See [`THREAD_ARCHIVE_RETRY_MS`].
    pub thread_archive_retry_ms: u64,
    /// See [`GUILD_STREAM_TAIL_AFTER_MS`].
    pub guild_stream_tail_after_ms: u64,
    /// See [`GUILD_STREAM_TAILS_MAX`].
    pub guild_stream_tails_max: u32,
    /// See [`GATEWAY_PUBLISH_IDS_REMEMBERED_MAX`].
    pub gateway_publish_ids_remembered_max: usize,
    /// See [`SESSION_WRITE_STALL_MS_MAX`].
    pub session_write_stall_ms_max: u64,
    /// See [`GATEWAY_CLOSE_LINGER_MS`].
    pub gateway_close_linger_ms: u64,
    /// See [`GATEWAY_IDENTIFY_TIMEOUT_MS`].
    pub gateway_identify_timeout_ms: u64,
    /// See [`GATEWAY_SHARDS_MAX`].
    pub gateway_shards_max: u32,
    /// See [`SESSION_MEMBER_REQUESTS_MAX`].
    pub session_member_requests_max: usize,
    /// See [`SESSION_VOICE_REQUESTS_MAX`].
    pub session_voice_requests_max: usize,
    /// See [`VOICE_REQUEST_TIMEOUT_MS`].
    pub voice_request_timeout_ms: u64,
    /// See [`VOICE_ATTEMPTS_MAX`].
    pub voice_attempts_max: u32,
    /// See [`GATEWAY_COMPRESSORS_MAX`].
    pub gateway_compressors_max: usize,
    /// See [`HTTP_HEADER_READ_TIMEOUT_MS`].
    pub http_header_read_timeout_ms: u64,
    /// See [`HTTP_HEADER_BYTES_MAX`].
    pub http_header_bytes_max: usize,
    /// See [`HTTP_BODY_READ_TIMEOUT_MS`].
    pub http_body_read_timeout_ms: u64,
    /// See [`HTTP_CONNECTIONS_MAX`].
    pub http_connections_max: usize,
    /// See [`HTTP_CONNECTIONS_PER_IP_MAX`].
    pub http_connections_per_ip_max: usize,
    /// See [`HTTP_FD_RESERVE_MIN`].
    pub http_fd_reserve_min: usize,
    /// See [`HTTP_ACCEPT_BACKOFF_MS`].
    pub http_accept_backoff_ms: u64,
    /// See [`PASSWORD_HASH_CONCURRENCY_MAX`].
    pub password_hash_concurrency_max: usize,
    /// See [`REST_AUTH_RATE_LIMIT_PER_WINDOW`].
    pub rest_auth_rate_limit_per_window: u32,
    /// See [`REST_INVALID_REQUESTS_MAX`].
    pub rest_invalid_requests_max: u32,
    /// See [`REST_INVALID_WINDOW_MS`].
    pub rest_invalid_window_ms: u64,
    /// See [`REST_INVALID_ADDRESSES_MAX`].
    pub rest_invalid_addresses_max: usize,
    /// See [`USERS_NEGATIVE_CACHE_ENTRIES_MAX`].
    pub users_negative_cache_entries_max: usize,
    /// See [`USERS_NEGATIVE_CACHE_TTL_MS`].
    pub users_negative_cache_ttl_ms: u64,
    /// See [`HANDSHAKE_RETRY_AFTER_S_MAX`].
    pub handshake_retry_after_s_max: u64,
    /// See [`SESSIONS_FULL_RETRY_AFTER_S`].
    pub sessions_full_retry_after_s: u64,
    /// See [`SFU_SESSIONS_MAX`].
    pub sfu_sessions_max: usize,
    /// See [`SFU_CALLS_MAX`].
    pub sfu_calls_max: usize,
    /// See [`SFU_PARTICIPANTS_PER_CALL_MAX`].
    pub sfu_participants_per_call_max: usize,
    /// See [`SFU_PACKETS_PER_S_PER_SSRC`].
    pub sfu_packets_per_s_per_ssrc: u32,
    /// See [`SFU_PACKETS_BURST`].
    pub sfu_packets_burst: u32,
    /// See [`SFU_UDP_DATAGRAM_BYTES_MAX`].
    pub sfu_udp_datagram_bytes_max: usize,
    /// See [`SFU_UDP_SEND_BUFFER_BYTES`].
    pub sfu_udp_send_buffer_bytes: usize,
    /// See [`SFU_UDP_RECV_BUFFER_BYTES`].
    pub sfu_udp_recv_buffer_bytes: usize,
    /// See [`SFU_UDP_WORKERS`].
    pub sfu_udp_workers: usize,
    /// See [`SFU_WS_PAYLOAD_BYTES_MAX`].
    pub sfu_ws_payload_bytes_max: usize,
    /// See [`SFU_WS_INBOUND_PER_MINUTE_MAX`].
    pub sfu_ws_inbound_per_minute_max: u32,
    /// See [`SFU_CONNECTION_QUEUE_MESSAGES_MAX`].
    pub sfu_connection_queue_messages_max: usize,
    /// See [`SFU_REPLAY_MESSAGES_MAX`].
    pub sfu_replay_messages_max: usize,
    /// See [`SFU_RESUME_WINDOW_MS`].
    pub sfu_resume_window_ms: u64,
    /// See [`SFU_HEARTBEAT_INTERVAL_MS`].
    pub sfu_heartbeat_interval_ms: u64,
    /// See [`SFU_HEARTBEAT_TIMEOUT_MS`].
    pub sfu_heartbeat_timeout_ms: u64,
    /// See [`SFU_IDENTIFY_TIMEOUT_MS`].
    pub sfu_identify_timeout_ms: u64,
    /// See [`SFU_ADMISSION_TTL_MS`].
    pub sfu_admission_ttl_ms: u64,
    /// See [`SFU_CONNECTIONS_MAX`].
    pub sfu_connections_max: usize,
    /// See [`SFU_TLS_HANDSHAKE_TIMEOUT_MS`].
    pub sfu_tls_handshake_timeout_ms: u64,
    /// See [`VOICE_COORDINATORS_MAX`].
    pub voice_coordinators_max: usize,
    /// See [`VOICE_COORDINATOR_LINGER_MS`].
    pub voice_coordinator_linger_ms: u64,
    /// See [`VOICE_SYNCERS_MAX`].
    pub voice_syncers_max: usize,
    /// See [`VOICE_REQUESTS_QUEUE_MAX`].
    pub voice_requests_queue_max: usize,
    /// See [`VOICE_MAILBOX_MESSAGES_MAX`].
    pub voice_mailbox_messages_max: usize,
    /// See [`VOICE_CONTROL_MESSAGES_MAX`].
    pub voice_control_messages_max: usize,
    /// See [`VOICE_CALL_PARTICIPANTS_MAX`].
    pub voice_call_participants_max: usize,
    /// See [`VOICE_SFU_ALLOCATIONS_IN_FLIGHT_MAX`].
    pub voice_sfu_allocations_in_flight_max: usize,
    /// See [`VOICE_SFU_BREAKER_FAILURES_MAX`].
    pub voice_sfu_breaker_failures_max: u32,
    /// See [`VOICE_SFU_BREAKER_COOL_DOWN_MS`].
    pub voice_sfu_breaker_cool_down_ms: u64,
    /// See [`VOICE_SFU_REQUEST_TIMEOUT_MS`].
    pub voice_sfu_request_timeout_ms: u64,
    /// See [`VOICE_SPAWN_RATE_PER_S`].
    pub voice_spawn_rate_per_s: u32,
    /// See [`VOICE_SPAWN_BURST`].
    pub voice_spawn_burst: u32,
    /// See [`VOICE_SPAWN_GUILD_RATE_PER_S`].
    pub voice_spawn_guild_rate_per_s: u32,
    /// See [`VOICE_SPAWN_GUILD_BURST`].
    pub voice_spawn_guild_burst: u32,
    /// See [`VOICE_SPAWN_GUILDS_TRACKED_MAX`].
    pub voice_spawn_guilds_tracked_max: usize,
    /// See [`VOICE_REPLACEMENTS_IN_FLIGHT_MAX`].
    pub voice_replacements_in_flight_max: usize,
    /// See [`VOICE_RETRY_AFTER_MS`].
    pub voice_retry_after_ms: u64,
    /// See [`VOICE_SFU_LOAD_SLACK_PERMILLE`].
    pub voice_sfu_load_slack_permille: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            ring_vnodes_per_member: RING_VNODES_PER_MEMBER,
            ring_members_max: RING_MEMBERS_MAX,
            registry_entries_max: REGISTRY_ENTRIES_MAX,
            registry_watch_events_max: REGISTRY_WATCH_EVENTS_MAX,
            ring_load_epsilon_permille: RING_LOAD_EPSILON_PERMILLE,
            ring_history_generations_max: RING_HISTORY_GENERATIONS_MAX,
            lease_ttl_ms: LEASE_TTL_MS,
            lease_renew_interval_ms: LEASE_RENEW_INTERVAL_MS,
            member_permanent_down_ms: MEMBER_PERMANENT_DOWN_MS,
            self_preservation_window_ms: SELF_PRESERVATION_WINDOW_MS,
            self_preservation_removal_permille: SELF_PRESERVATION_REMOVAL_PERMILLE,
            self_preservation_removals_min: SELF_PRESERVATION_REMOVALS_MIN,
            self_preservation_freeze_max_ms: SELF_PRESERVATION_FREEZE_MAX_MS,
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
            session_reap_interval_ms: SESSION_REAP_INTERVAL_MS,
            session_takeover_timeout_ms: SESSION_TAKEOVER_TIMEOUT_MS,
            session_move_timeout_ms: SESSION_MOVE_TIMEOUT_MS,
            session_takeovers_in_flight_max: SESSION_TAKEOVERS_IN_FLIGHT_MAX,
            gateway_announce_interval_ms: GATEWAY_ANNOUNCE_INTERVAL_MS,
            sessions_per_node_max: SESSIONS_PER_NODE_MAX,
            handshake_rate_per_s: HANDSHAKE_RATE_PER_S,
            handshake_hold_ms_max: HANDSHAKE_HOLD_MS_MAX,
            rest_body_bytes_max: REST_BODY_BYTES_MAX,
            rest_body_drain_bytes_max: REST_BODY_DRAIN_BYTES_MAX,
            attachment_bytes_max: ATTACHMENT_BYTES_MAX,
            upload_request_bytes_max: UPLOAD_REQUEST_BYTES_MAX,
            message_attachments_max: MESSAGE_ATTACHMENTS_MAX,
            attachment_filename_bytes_max: ATTACHMENT_FILENAME_BYTES_MAX,
            attachment_text_chars_max: ATTACHMENT_TEXT_CHARS_MAX,
            upload_memory_bytes_max: UPLOAD_MEMORY_BYTES_MAX,
            blob_delete_queue_max: BLOB_DELETE_QUEUE_MAX,
            attachment_url_ttl_ms: ATTACHMENT_URL_TTL_MS,
            attachment_refresh_urls_max: ATTACHMENT_REFRESH_URLS_MAX,
            message_content_chars_max: MESSAGE_CONTENT_CHARS_MAX,
            messages_per_page_max: MESSAGES_PER_PAGE_MAX,
            members_per_page_max: MEMBERS_PER_PAGE_MAX,
            member_request_matches_max: MEMBER_REQUEST_MATCHES_MAX,
            reaction_users_per_page_max: REACTION_USERS_PER_PAGE_MAX,
            reactions_per_message_max: REACTIONS_PER_MESSAGE_MAX,
            pins_per_channel_max: PINS_PER_CHANNEL_MAX,
            pins_per_page_max: PINS_PER_PAGE_MAX,
            application_commands_chat_input_max: APPLICATION_COMMANDS_CHAT_INPUT_MAX,
            application_commands_context_menu_max: APPLICATION_COMMANDS_CONTEXT_MENU_MAX,
            application_commands_body_bytes_max: APPLICATION_COMMANDS_BODY_BYTES_MAX,
            guild_mailbox_messages_max: GUILD_MAILBOX_MESSAGES_MAX,
            bus_payload_bytes_max: BUS_PAYLOAD_BYTES_MAX,
            bus_subscription_messages_max: BUS_SUBSCRIPTION_MESSAGES_MAX,
            gateway_event_partitions: GATEWAY_EVENT_PARTITIONS,
            guild_subscriptions_max: GUILD_SUBSCRIPTIONS_MAX,
            guild_requests_in_flight_max: GUILD_REQUESTS_IN_FLIGHT_MAX,
            stream_resync_interval_ms: STREAM_RESYNC_INTERVAL_MS,
            placement_guilds_max: PLACEMENT_GUILDS_MAX,
            placement_list_page_max: PLACEMENT_LIST_PAGE_MAX,
            placement_refresh_interval_ms: PLACEMENT_REFRESH_INTERVAL_MS,
            guild_forward_hops_max: GUILD_FORWARD_HOPS_MAX,
            guild_pull_timeout_ms: GUILD_PULL_TIMEOUT_MS,
            guild_pull_retries_max: GUILD_PULL_RETRIES_MAX,
            guild_late_pull_tasks_max: GUILD_LATE_PULL_TASKS_MAX,
            guild_pull_sessions_max: GUILD_PULL_SESSIONS_MAX,
            guild_reply_timeout_ms: GUILD_REPLY_TIMEOUT_MS,
            guild_owners_max: GUILD_OWNERS_MAX,
            ready_guilds_max: READY_GUILDS_MAX,
            session_starts_per_window_max: SESSION_STARTS_PER_WINDOW_MAX,
            session_start_window_ms: SESSION_START_WINDOW_MS,
            session_start_bots_max: SESSION_START_BOTS_MAX,
            identify_concurrency_max: IDENTIFY_CONCURRENCY_MAX,
            identify_concurrency_window_ms: IDENTIFY_CONCURRENCY_WINDOW_MS,
            store_pool_connections_max: STORE_POOL_CONNECTIONS_MAX,
            message_write_queue_max: MESSAGE_WRITE_QUEUE_MAX,
            message_write_batch_max: MESSAGE_WRITE_BATCH_MAX,
            users_lookup_timeout_ms: USERS_LOOKUP_TIMEOUT_MS,
            guild_name_chars_max: GUILD_NAME_CHARS_MAX,
            role_name_chars_max: ROLE_NAME_CHARS_MAX,
            channel_name_chars_max: CHANNEL_NAME_CHARS_MAX,
            channel_topic_chars_max: CHANNEL_TOPIC_CHARS_MAX,
            nick_chars_max: NICK_CHARS_MAX,
            application_name_chars_max: APPLICATION_NAME_CHARS_MAX,
            application_description_chars_max: APPLICATION_DESCRIPTION_CHARS_MAX,
            user_guilds_per_page_max: USER_GUILDS_PER_PAGE_MAX,
            message_nonce_chars_max: MESSAGE_NONCE_CHARS_MAX,
            message_embeds_max: MESSAGE_EMBEDS_MAX,
            message_components_max: MESSAGE_COMPONENTS_MAX,
            webhook_name_chars_max: WEBHOOK_NAME_CHARS_MAX,
            webhook_avatar_url_chars_max: WEBHOOK_AVATAR_URL_CHARS_MAX,
            webhooks_per_channel_max: WEBHOOKS_PER_CHANNEL_MAX,
            webhooks_per_guild_max: WEBHOOKS_PER_GUILD_MAX,
            webhook_rate_limit_per_window: WEBHOOK_RATE_LIMIT_PER_WINDOW,
            interaction_response_deadline_ms: INTERACTION_RESPONSE_DEADLINE_MS,
            interaction_token_ttl_ms: INTERACTION_TOKEN_TTL_MS,
            interactions_max: INTERACTIONS_MAX,
            interaction_forward_timeout_ms: INTERACTION_FORWARD_TIMEOUT_MS,
            interaction_forwards_in_flight_max: INTERACTION_FORWARDS_IN_FLIGHT_MAX,
            interactions_pending_per_application_max: INTERACTIONS_PENDING_PER_APPLICATION_MAX,
            interactions_per_user_per_minute_max: INTERACTIONS_PER_USER_PER_MINUTE_MAX,
            interaction_users_max: INTERACTION_USERS_MAX,
            interaction_sweep_batch_max: INTERACTION_SWEEP_BATCH_MAX,
            interaction_sweep_interval_ms: INTERACTION_SWEEP_INTERVAL_MS,
            component_custom_id_chars_max: COMPONENT_CUSTOM_ID_CHARS_MAX,
            interaction_modal_title_chars_max: INTERACTION_MODAL_TITLE_CHARS_MAX,
            interaction_modal_components_max: INTERACTION_MODAL_COMPONENTS_MAX,
            interaction_autocomplete_choices_max: INTERACTION_AUTOCOMPLETE_CHOICES_MAX,
            guild_roles_max: GUILD_ROLES_MAX,
            guild_slowmode_clocks_max: GUILD_SLOWMODE_CLOCKS_MAX,
            guild_active_threads_max: GUILD_ACTIVE_THREADS_MAX,
            thread_members_page_max: THREAD_MEMBERS_PAGE_MAX,
            archived_threads_page_max: ARCHIVED_THREADS_PAGE_MAX,
            guild_channels_max: GUILD_CHANNELS_MAX,
            channel_overwrites_max: CHANNEL_OVERWRITES_MAX,
            ban_delete_messages_max: BAN_DELETE_MESSAGES_MAX,
            audit_log_entries_max: AUDIT_LOG_ENTRIES_MAX,
            audit_log_retention_ms: AUDIT_LOG_RETENTION_MS,
            audit_log_page_max: AUDIT_LOG_PAGE_MAX,
            guild_view_cache_channels_max: GUILD_VIEW_CACHE_CHANNELS_MAX,
            bans_page_max: BANS_PAGE_MAX,
            bulk_ban_users_max: BULK_BAN_USERS_MAX,
            guild_invites_max: GUILD_INVITES_MAX,
            audit_reason_chars_max: AUDIT_REASON_CHARS_MAX,
            guild_create_members_max: GUILD_CREATE_MEMBERS_MAX,
            guild_envelope_reserve_bytes: GUILD_ENVELOPE_RESERVE_BYTES,
            users_batch_ids_max: USERS_BATCH_IDS_MAX,
            users_shards: USERS_SHARDS,
            users_shard_mailbox_max: USERS_SHARD_MAILBOX_MAX,
            users_shard_cache_entries_max: USERS_SHARD_CACHE_ENTRIES_MAX,
            presence_sessions_max: PRESENCE_SESSIONS_MAX,
            presence_query_users_max: PRESENCE_QUERY_USERS_MAX,
            presence_queries_per_load_max: PRESENCE_QUERIES_PER_LOAD_MAX,
            presence_query_timeout_ms: PRESENCE_QUERY_TIMEOUT_MS,
            presence_query_cooloff_ms: PRESENCE_QUERY_COOLOFF_MS,
            presence_resync_per_s: PRESENCE_RESYNC_PER_S,
            users_cache_entries_max: USERS_CACHE_ENTRIES_MAX,
            users_cache_ttl_ms: USERS_CACHE_TTL_MS,
            rest_rate_limit_per_window: REST_RATE_LIMIT_PER_WINDOW,
            rest_rate_window_ms: REST_RATE_WINDOW_MS,
            rest_rate_buckets_max: REST_RATE_BUCKETS_MAX,
            guild_load_waiters_max: GUILD_LOAD_WAITERS_MAX,
            event_resync_tasks_max: EVENT_RESYNC_TASKS_MAX,
            guild_subscribe_attempts_max: GUILD_SUBSCRIBE_ATTEMPTS_MAX,
            guild_subscribe_retry_tasks_max: GUILD_SUBSCRIBE_RETRY_TASKS_MAX,
            fanout_outbox_bytes_max: FANOUT_OUTBOX_BYTES_MAX,
            users_loads_in_flight_max: USERS_LOADS_IN_FLIGHT_MAX,
            fanout_outbox_event_age_ms_max: FANOUT_OUTBOX_EVENT_AGE_MS_MAX,
            fanout_outbox_calls_in_flight_max: FANOUT_OUTBOX_CALLS_IN_FLIGHT_MAX,
            guild_publish_ids_remembered_max: GUILD_PUBLISH_IDS_REMEMBERED_MAX,
            guild_stream_unsent_max: GUILD_STREAM_UNSENT_MAX,
            guild_stream_retry_ms: GUILD_STREAM_RETRY_MS,
            thread_archive_retry_ms: THREAD_ARCHIVE_RETRY_MS,
            guild_stream_tail_after_ms: GUILD_STREAM_TAIL_AFTER_MS,
            guild_stream_tails_max: GUILD_STREAM_TAILS_MAX,
            gateway_publish_ids_remembered_max: GATEWAY_PUBLISH_IDS_REMEMBERED_MAX,
            session_write_stall_ms_max: SESSION_WRITE_STALL_MS_MAX,
            gateway_close_linger_ms: GATEWAY_CLOSE_LINGER_MS,
            gateway_identify_timeout_ms: GATEWAY_IDENTIFY_TIMEOUT_MS,
            gateway_shards_max: GATEWAY_SHARDS_MAX,
            session_member_requests_max: SESSION_MEMBER_REQUESTS_MAX,
            session_voice_requests_max: SESSION_VOICE_REQUESTS_MAX,
            voice_request_timeout_ms: VOICE_REQUEST_TIMEOUT_MS,
            voice_attempts_max: VOICE_ATTEMPTS_MAX,
            gateway_compressors_max: GATEWAY_COMPRESSORS_MAX,
            http_header_read_timeout_ms: HTTP_HEADER_READ_TIMEOUT_MS,
            http_header_bytes_max: HTTP_HEADER_BYTES_MAX,
            http_body_read_timeout_ms: HTTP_BODY_READ_TIMEOUT_MS,
            http_connections_max: HTTP_CONNECTIONS_MAX,
            http_connections_per_ip_max: HTTP_CONNECTIONS_PER_IP_MAX,
            http_fd_reserve_min: HTTP_FD_RESERVE_MIN,
            http_accept_backoff_ms: HTTP_ACCEPT_BACKOFF_MS,
            password_hash_concurrency_max: PASSWORD_HASH_CONCURRENCY_MAX,
            rest_auth_rate_limit_per_window: REST_AUTH_RATE_LIMIT_PER_WINDOW,
            rest_invalid_requests_max: REST_INVALID_REQUESTS_MAX,
            rest_invalid_window_ms: REST_INVALID_WINDOW_MS,
            rest_invalid_addresses_max: REST_INVALID_ADDRESSES_MAX,
            users_negative_cache_entries_max: USERS_NEGATIVE_CACHE_ENTRIES_MAX,
            users_negative_cache_ttl_ms: USERS_NEGATIVE_CACHE_TTL_MS,
            handshake_retry_after_s_max: HANDSHAKE_RETRY_AFTER_S_MAX,
            sessions_full_retry_after_s: SESSIONS_FULL_RETRY_AFTER_S,
            sfu_sessions_max: SFU_SESSIONS_MAX,
            sfu_calls_max: SFU_CALLS_MAX,
            sfu_participants_per_call_max: SFU_PARTICIPANTS_PER_CALL_MAX,
            sfu_packets_per_s_per_ssrc: SFU_PACKETS_PER_S_PER_SSRC,
            sfu_packets_burst: SFU_PACKETS_BURST,
            sfu_udp_datagram_bytes_max: SFU_UDP_DATAGRAM_BYTES_MAX,
            sfu_udp_send_buffer_bytes: SFU_UDP_SEND_BUFFER_BYTES,
            sfu_udp_recv_buffer_bytes: SFU_UDP_RECV_BUFFER_BYTES,
            sfu_udp_workers: SFU_UDP_WORKERS,
            sfu_ws_payload_bytes_max: SFU_WS_PAYLOAD_BYTES_MAX,
            sfu_ws_inbound_per_minute_max: SFU_WS_INBOUND_PER_MINUTE_MAX,
            sfu_connection_queue_messages_max: SFU_CONNECTION_QUEUE_MESSAGES_MAX,
            sfu_replay_messages_max: SFU_REPLAY_MESSAGES_MAX,
            sfu_resume_window_ms: SFU_RESUME_WINDOW_MS,
            sfu_heartbeat_interval_ms: SFU_HEARTBEAT_INTERVAL_MS,
            sfu_heartbeat_timeout_ms: SFU_HEARTBEAT_TIMEOUT_MS,
            sfu_identify_timeout_ms: SFU_IDENTIFY_TIMEOUT_MS,
            sfu_admission_ttl_ms: SFU_ADMISSION_TTL_MS,
            sfu_connections_max: SFU_CONNECTIONS_MAX,
            sfu_tls_handshake_timeout_ms: SFU_TLS_HANDSHAKE_TIMEOUT_MS,
            voice_coordinators_max: VOICE_COORDINATORS_MAX,
            voice_coordinator_linger_ms: VOICE_COORDINATOR_LINGER_MS,
            voice_syncers_max: VOICE_SYNCERS_MAX,
            voice_requests_queue_max: VOICE_REQUESTS_QUEUE_MAX,
            voice_mailbox_messages_max: VOICE_MAILBOX_MESSAGES_MAX,
            voice_control_messages_max: VOICE_CONTROL_MESSAGES_MAX,
            voice_call_participants_max: VOICE_CALL_PARTICIPANTS_MAX,
            voice_sfu_allocations_in_flight_max: VOICE_SFU_ALLOCATIONS_IN_FLIGHT_MAX,
            voice_sfu_breaker_failures_max: VOICE_SFU_BREAKER_FAILURES_MAX,
            voice_sfu_breaker_cool_down_ms: VOICE_SFU_BREAKER_COOL_DOWN_MS,
            voice_sfu_request_timeout_ms: VOICE_SFU_REQUEST_TIMEOUT_MS,
            voice_spawn_rate_per_s: VOICE_SPAWN_RATE_PER_S,
            voice_spawn_burst: VOICE_SPAWN_BURST,
            voice_spawn_guild_rate_per_s: VOICE_SPAWN_GUILD_RATE_PER_S,
            voice_spawn_guild_burst: VOICE_SPAWN_GUILD_BURST,
            voice_spawn_guilds_tracked_max: VOICE_SPAWN_GUILDS_TRACKED_MAX,
            voice_replacements_in_flight_max: VOICE_REPLACEMENTS_IN_FLIGHT_MAX,
            voice_retry_after_ms: VOICE_RETRY_AFTER_MS,
            voice_sfu_load_slack_permille: VOICE_SFU_LOAD_SLACK_PERMILLE,
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
            self.registry_entries_max >= 1,
            "registry_entries_max",
            "must be at least 1",
        );
        check(
            self.registry_watch_events_max >= 1,
            "registry_watch_events_max",
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
            self.member_permanent_down_ms >= self.lease_renew_interval_ms,
            "member_permanent_down_ms",
            "must be at least lease_renew_interval_ms: members cut off together expire \
             within one renewal interval of each other, and a shorter hysteresis removes \
             the first before self-preservation sees the rest",
        );
        check(
            self.self_preservation_window_ms >= 1,
            "self_preservation_window_ms",
            "must be at least 1",
        );
        check(
            self.self_preservation_freeze_max_ms >= self.member_permanent_down_ms,
            "self_preservation_freeze_max_ms",
            "must be at least member_permanent_down_ms: a freeze shorter than the \
             hysteresis would remove members a short stall keeps",
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
            self.session_reap_interval_ms >= 1,
            "session_reap_interval_ms",
            "must be at least 1",
        );
        check(
            self.session_takeover_timeout_ms >= 1,
            "session_takeover_timeout_ms",
            "must be at least 1",
        );
        // The giver's wait for confirmations must end before the taker
        // stops waiting for the commit's answer, or every slow move would
        // be an INVALID_SESSION.
        check(
            self.session_move_timeout_ms >= 1
                && self.session_move_timeout_ms < self.session_takeover_timeout_ms,
            "session_move_timeout_ms",
            "must be at least 1 and below session_takeover_timeout_ms",
        );
        check(
            self.session_takeovers_in_flight_max >= 1,
            "session_takeovers_in_flight_max",
            "must be at least 1",
        );
        check(
            self.gateway_announce_interval_ms >= 1,
            "gateway_announce_interval_ms",
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
        for (value, field) in [
            (self.attachment_bytes_max, "attachment_bytes_max"),
            (self.upload_request_bytes_max, "upload_request_bytes_max"),
            (self.message_attachments_max, "message_attachments_max"),
            (
                self.attachment_filename_bytes_max,
                "attachment_filename_bytes_max",
            ),
            (self.attachment_text_chars_max, "attachment_text_chars_max"),
            (self.upload_memory_bytes_max, "upload_memory_bytes_max"),
            (self.blob_delete_queue_max, "blob_delete_queue_max"),
            (
                self.attachment_refresh_urls_max,
                "attachment_refresh_urls_max",
            ),
        ] {
            check(value >= 1, field, "must be at least 1");
        }
        check(
            self.attachment_url_ttl_ms >= 2_000,
            "attachment_url_ttl_ms",
            "must be at least 2000",
        );
        check(
            self.upload_request_bytes_max >= self.attachment_bytes_max,
            "upload_request_bytes_max",
            "must be at least attachment_bytes_max",
        );
        check(
            self.upload_memory_bytes_max >= self.upload_request_bytes_max,
            "upload_memory_bytes_max",
            "must be at least upload_request_bytes_max",
        );
        // A file name needs room for "unknown" and an extension.
        check(
            self.attachment_filename_bytes_max >= 16,
            "attachment_filename_bytes_max",
            "must be at least 16",
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
            self.member_request_matches_max >= 1,
            "member_request_matches_max",
            "must be at least 1",
        );
        check(
            self.reaction_users_per_page_max >= 1,
            "reaction_users_per_page_max",
            "must be at least 1",
        );
        check(
            self.reactions_per_message_max >= 1,
            "reactions_per_message_max",
            "must be at least 1",
        );
        check(
            self.pins_per_channel_max >= 1,
            "pins_per_channel_max",
            "must be at least 1",
        );
        check(
            self.pins_per_page_max >= 1,
            "pins_per_page_max",
            "must be at least 1",
        );
        check(
            self.application_commands_chat_input_max >= 1,
            "application_commands_chat_input_max",
            "must be at least 1",
        );
        check(
            self.application_commands_context_menu_max >= 1,
            "application_commands_context_menu_max",
            "must be at least 1",
        );
        check(
            self.application_commands_body_bytes_max >= self.rest_body_bytes_max,
            "application_commands_body_bytes_max",
            "must be at least rest_body_bytes_max",
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
        for (value, name) in [
            (
                self.presence_query_users_max as u64,
                "presence_query_users_max",
            ),
            (
                self.presence_queries_per_load_max as u64,
                "presence_queries_per_load_max",
            ),
            (self.presence_query_timeout_ms, "presence_query_timeout_ms"),
            (self.presence_query_cooloff_ms, "presence_query_cooloff_ms"),
            (self.presence_resync_per_s, "presence_resync_per_s"),
        ] {
            check(value >= 1, name, "must be at least 1");
        }
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
            self.placement_guilds_max >= 1,
            "placement_guilds_max",
            "must be at least 1",
        );
        check(
            (1..=100_000).contains(&self.placement_list_page_max),
            "placement_list_page_max",
            "must be 1 to 100000",
        );
        check(
            self.placement_refresh_interval_ms >= 100,
            "placement_refresh_interval_ms",
            "must be at least 100 (a store listing per node per interval)",
        );
        check(
            (1..=8).contains(&self.guild_forward_hops_max),
            "guild_forward_hops_max",
            "must be 1 to 8",
        );
        check(
            self.guild_pull_timeout_ms >= 1,
            "guild_pull_timeout_ms",
            "must be at least 1",
        );
        check(
            (1..=8_192).contains(&self.guild_pull_sessions_max),
            "guild_pull_sessions_max",
            "must be 1 to 8192 (one bus payload)",
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
            self.session_starts_per_window_max >= 1,
            "session_starts_per_window_max",
            "must be at least 1",
        );
        check(
            self.session_start_window_ms >= 1,
            "session_start_window_ms",
            "must be at least 1",
        );
        // The store adds the window to Unix ms in signed 64 bits
        // (PostgreSQL refuses an overflow, SQLite turns it into a float).
        check(
            self.session_start_window_ms <= 366 * SESSION_START_WINDOW_MS,
            "session_start_window_ms",
            "must be at most 366 days",
        );
        check(
            self.session_start_bots_max >= 1,
            "session_start_bots_max",
            "must be at least 1",
        );
        check(
            self.identify_concurrency_max >= 1,
            "identify_concurrency_max",
            "must be at least 1",
        );
        // A bucket per shard at most: more would never be used, and each
        // is a row per bot in the store.
        check(
            self.identify_concurrency_max <= self.gateway_shards_max,
            "identify_concurrency_max",
            "must be at most gateway_shards_max",
        );
        check(
            (1..=60_000).contains(&self.identify_concurrency_window_ms),
            "identify_concurrency_window_ms",
            "must be between 1 and 60000",
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
        // Guild contents: a minimum of Discord's own lower bounds, so every
        // name Discord accepts at its shortest is still accepted.
        for (value, field) in [
            (self.guild_name_chars_max, "guild_name_chars_max"),
            (self.role_name_chars_max, "role_name_chars_max"),
            (self.channel_name_chars_max, "channel_name_chars_max"),
            (self.nick_chars_max, "nick_chars_max"),
            (
                self.application_name_chars_max,
                "application_name_chars_max",
            ),
            (self.guild_channels_max, "guild_channels_max"),
            (self.guild_slowmode_clocks_max, "guild_slowmode_clocks_max"),
            (self.guild_active_threads_max, "guild_active_threads_max"),
            (self.thread_members_page_max, "thread_members_page_max"),
            (self.archived_threads_page_max, "archived_threads_page_max"),
            (self.guild_create_members_max, "guild_create_members_max"),
        ] {
            check(value >= 2, field, "must be at least 2");
        }
        check(
            self.application_description_chars_max >= 1,
            "application_description_chars_max",
            "must be at least 1",
        );
        check(
            self.user_guilds_per_page_max >= 1,
            "user_guilds_per_page_max",
            "must be at least 1",
        );
        for (value, field) in [
            (self.channel_topic_chars_max, "channel_topic_chars_max"),
            (self.message_nonce_chars_max, "message_nonce_chars_max"),
            (self.message_embeds_max, "message_embeds_max"),
            (self.message_components_max, "message_components_max"),
            (self.webhook_name_chars_max, "webhook_name_chars_max"),
            (
                self.webhook_avatar_url_chars_max,
                "webhook_avatar_url_chars_max",
            ),
            (self.webhooks_per_channel_max, "webhooks_per_channel_max"),
        ] {
            check(value >= 1, field, "must be at least 1");
        }
        check(
            self.webhooks_per_guild_max >= self.webhooks_per_channel_max,
            "webhooks_per_guild_max",
            "must be at least webhooks_per_channel_max",
        );
        check(
            self.webhook_rate_limit_per_window >= 1,
            "webhook_rate_limit_per_window",
            "must be at least 1",
        );
        check(
            self.interaction_forward_timeout_ms >= 1,
            "interaction_forward_timeout_ms",
            "must be at least 1",
        );
        for (value, field) in [
            (self.interactions_max, "interactions_max"),
            (
                self.interaction_forwards_in_flight_max,
                "interaction_forwards_in_flight_max",
            ),
            (
                self.interactions_pending_per_application_max,
                "interactions_pending_per_application_max",
            ),
            (self.interaction_users_max, "interaction_users_max"),
            (
                self.interaction_sweep_batch_max,
                "interaction_sweep_batch_max",
            ),
            (
                self.component_custom_id_chars_max,
                "component_custom_id_chars_max",
            ),
            (
                self.interaction_modal_title_chars_max,
                "interaction_modal_title_chars_max",
            ),
            (
                self.interaction_modal_components_max,
                "interaction_modal_components_max",
            ),
            (
                self.interaction_autocomplete_choices_max,
                "interaction_autocomplete_choices_max",
            ),
        ] {
            check(value >= 1, field, "must be at least 1");
        }
        check(
            self.interactions_per_user_per_minute_max >= 1,
            "interactions_per_user_per_minute_max",
            "must be at least 1",
        );
        check(
            self.interaction_sweep_interval_ms >= 1
                && self.interaction_sweep_interval_ms <= self.interaction_response_deadline_ms,
            "interaction_sweep_interval_ms",
            "must be between 1 and interaction_response_deadline_ms",
        );
        check(
            self.interaction_response_deadline_ms >= 1,
            "interaction_response_deadline_ms",
            "must be at least 1",
        );
        check(
            self.interaction_token_ttl_ms > self.interaction_response_deadline_ms,
            "interaction_token_ttl_ms",
            "must exceed interaction_response_deadline_ms",
        );
        check(
            self.interactions_pending_per_application_max <= self.interactions_max,
            "interactions_pending_per_application_max",
            "must be at most interactions_max",
        );
        for (value, field) in [
            (self.channel_overwrites_max, "channel_overwrites_max"),
            (self.ban_delete_messages_max, "ban_delete_messages_max"),
            (self.audit_log_entries_max, "audit_log_entries_max"),
            (
                self.audit_log_retention_ms as usize,
                "audit_log_retention_ms",
            ),
            (self.audit_log_page_max, "audit_log_page_max"),
            (
                self.guild_view_cache_channels_max,
                "guild_view_cache_channels_max",
            ),
            (self.bans_page_max, "bans_page_max"),
            (self.bulk_ban_users_max, "bulk_ban_users_max"),
            (self.guild_invites_max, "guild_invites_max"),
            (self.audit_reason_chars_max, "audit_reason_chars_max"),
        ] {
            check(value >= 1, field, "must be at least 1");
        }
        check(
            self.guild_roles_max >= 2,
            "guild_roles_max",
            "must be at least 2 (@everyone and one more)",
        );
        check(
            self.guild_envelope_reserve_bytes >= 1024
                && self.guild_envelope_reserve_bytes <= self.bus_payload_bytes_max / 2,
            "guild_envelope_reserve_bytes",
            "must be at least 1024 and at most half of bus_payload_bytes_max",
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
            self.session_write_stall_ms_max >= 1,
            "session_write_stall_ms_max",
            "must be at least 1",
        );
        check(
            self.gateway_close_linger_ms >= 1,
            "gateway_close_linger_ms",
            "must be at least 1",
        );
        check(
            self.gateway_identify_timeout_ms >= 1,
            "gateway_identify_timeout_ms",
            "must be at least 1",
        );
        check(
            self.gateway_shards_max >= 1,
            "gateway_shards_max",
            "must be at least 1",
        );
        check(
            self.voice_request_timeout_ms >= 1,
            "voice_request_timeout_ms",
            "must be at least 1",
        );
        check(
            self.voice_attempts_max >= 1,
            "voice_attempts_max",
            "must be at least 1",
        );
        check(
            self.session_voice_requests_max >= 1,
            "session_voice_requests_max",
            "must be at least 1",
        );
        check(
            self.session_member_requests_max >= 1,
            "session_member_requests_max",
            "must be at least 1 (or op 8 could never be served)",
        );
        check(
            self.gateway_compressors_max >= 1,
            "gateway_compressors_max",
            "must be at least 1 (or a client that only speaks zlib-stream could never connect)",
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
            self.fanout_outbox_bytes_max >= self.bus_payload_bytes_max,
            "fanout_outbox_bytes_max",
            "must be at least bus_payload_bytes_max (the largest event must fit)",
        );
        check(
            self.fanout_outbox_event_age_ms_max
                > self
                    .lease_ttl_ms
                    .saturating_add(self.member_permanent_down_ms),
            "fanout_outbox_event_age_ms_max",
            "must exceed lease_ttl_ms + member_permanent_down_ms (a lost owner's replacement)",
        );
        check(
            self.users_loads_in_flight_max >= 1,
            "users_loads_in_flight_max",
            "must be at least 1",
        );
        check(
            self.fanout_outbox_calls_in_flight_max >= 1,
            "fanout_outbox_calls_in_flight_max",
            "must be at least 1",
        );
        check(
            self.guild_publish_ids_remembered_max >= 1,
            "guild_publish_ids_remembered_max",
            "must be at least 1",
        );
        check(
            self.guild_stream_unsent_max >= 1,
            "guild_stream_unsent_max",
            "must be at least 1",
        );
        check(
            self.guild_stream_retry_ms >= 1,
            "guild_stream_retry_ms",
            "must be at least 1",
        );
        check(
            self.thread_archive_retry_ms >= 1,
            "thread_archive_retry_ms",
            "must be at least 1",
        );
        check(
            self.guild_stream_tail_after_ms >= 1,
            "guild_stream_tail_after_ms",
            "must be at least 1",
        );
        check(
            self.guild_stream_tails_max >= 1,
            "guild_stream_tails_max",
            "must be at least 1",
        );
        check(
            self.gateway_publish_ids_remembered_max >= 1,
            "gateway_publish_ids_remembered_max",
            "must be at least 1",
        );
        // HTTP edge, password hashing and REST callers.
        for (value, field) in [
            (
                self.http_header_read_timeout_ms,
                "http_header_read_timeout_ms",
            ),
            (self.http_body_read_timeout_ms, "http_body_read_timeout_ms"),
            (self.http_accept_backoff_ms, "http_accept_backoff_ms"),
            (self.rest_invalid_window_ms, "rest_invalid_window_ms"),
            (
                self.users_negative_cache_ttl_ms,
                "users_negative_cache_ttl_ms",
            ),
            (self.http_connections_max as u64, "http_connections_max"),
            (
                self.http_connections_per_ip_max as u64,
                "http_connections_per_ip_max",
            ),
            (self.http_fd_reserve_min as u64, "http_fd_reserve_min"),
            (
                self.password_hash_concurrency_max as u64,
                "password_hash_concurrency_max",
            ),
            (
                u64::from(self.rest_auth_rate_limit_per_window),
                "rest_auth_rate_limit_per_window",
            ),
            (
                u64::from(self.rest_invalid_requests_max),
                "rest_invalid_requests_max",
            ),
            (
                self.rest_invalid_addresses_max as u64,
                "rest_invalid_addresses_max",
            ),
            (
                self.users_negative_cache_entries_max as u64,
                "users_negative_cache_entries_max",
            ),
        ] {
            check(value >= 1, field, "must be at least 1");
        }
        check(
            self.http_header_bytes_max >= 8_192,
            "http_header_bytes_max",
            "must be at least 8192 (the HTTP parser's smallest buffer)",
        );
        check(
            self.http_connections_per_ip_max <= self.http_connections_max,
            "http_connections_per_ip_max",
            "must be at most http_connections_max",
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
        check(
            self.sfu_sessions_max >= 1,
            "sfu_sessions_max",
            "must be at least 1",
        );
        check(
            self.sfu_calls_max >= 1,
            "sfu_calls_max",
            "must be at least 1",
        );
        check(
            self.sfu_participants_per_call_max >= 1,
            "sfu_participants_per_call_max",
            "must be at least 1",
        );
        check(
            self.sfu_packets_per_s_per_ssrc >= 1,
            "sfu_packets_per_s_per_ssrc",
            "must be at least 1",
        );
        check(
            self.sfu_packets_burst >= 1,
            "sfu_packets_burst",
            "must be at least 1",
        );
        check(
            self.sfu_udp_recv_buffer_bytes >= 1,
            "sfu_udp_recv_buffer_bytes",
            "must be at least 1",
        );
        check(
            self.sfu_udp_send_buffer_bytes >= 1,
            "sfu_udp_send_buffer_bytes",
            "must be at least 1",
        );
        check(
            self.sfu_udp_datagram_bytes_max >= 1,
            "sfu_udp_datagram_bytes_max",
            "must be at least 1",
        );
        check(
            self.sfu_udp_workers >= 1,
            "sfu_udp_workers",
            "must be at least 1",
        );
        check(
            self.sfu_ws_payload_bytes_max >= 1,
            "sfu_ws_payload_bytes_max",
            "must be at least 1",
        );
        check(
            self.sfu_ws_inbound_per_minute_max >= 1,
            "sfu_ws_inbound_per_minute_max",
            "must be at least 1",
        );
        check(
            self.sfu_connection_queue_messages_max >= 1,
            "sfu_connection_queue_messages_max",
            "must be at least 1",
        );
        check(
            self.sfu_replay_messages_max >= 1,
            "sfu_replay_messages_max",
            "must be at least 1",
        );
        check(
            self.sfu_resume_window_ms >= 1,
            "sfu_resume_window_ms",
            "must be at least 1",
        );
        check(
            self.sfu_heartbeat_interval_ms >= 1,
            "sfu_heartbeat_interval_ms",
            "must be at least 1",
        );
        check(
            self.sfu_heartbeat_timeout_ms >= 1,
            "sfu_heartbeat_timeout_ms",
            "must be at least 1",
        );
        check(
            self.sfu_identify_timeout_ms >= 1,
            "sfu_identify_timeout_ms",
            "must be at least 1",
        );
        check(
            self.sfu_admission_ttl_ms >= 1,
            "sfu_admission_ttl_ms",
            "must be at least 1",
        );
        check(
            self.sfu_connections_max >= 1,
            "sfu_connections_max",
            "must be at least 1",
        );
        check(
            self.sfu_tls_handshake_timeout_ms >= 1,
            "sfu_tls_handshake_timeout_ms",
            "must be at least 1",
        );
        check(
            self.sfu_heartbeat_timeout_ms > self.sfu_heartbeat_interval_ms,
            "sfu_heartbeat_timeout_ms",
            "must exceed sfu_heartbeat_interval_ms",
        );
        check(
            self.sfu_participants_per_call_max <= self.sfu_sessions_max,
            "sfu_participants_per_call_max",
            "must be at most sfu_sessions_max",
        );
        check(
            self.sfu_calls_max <= self.sfu_sessions_max,
            "sfu_calls_max",
            "must be at most sfu_sessions_max",
        );
        check(
            self.sfu_connections_max >= self.sfu_sessions_max,
            "sfu_connections_max",
            "must be at least sfu_sessions_max",
        );
        check(
            self.sfu_connection_queue_messages_max > self.sfu_replay_messages_max,
            "sfu_connection_queue_messages_max",
            "must exceed sfu_replay_messages_max (a replay fits a fresh queue)",
        );
        check(
            self.voice_coordinators_max >= 1,
            "voice_coordinators_max",
            "must be at least 1",
        );
        check(
            self.voice_coordinator_linger_ms >= 1,
            "voice_coordinator_linger_ms",
            "must be at least 1",
        );
        check(
            self.voice_syncers_max >= 1,
            "voice_syncers_max",
            "must be at least 1",
        );
        check(
            self.voice_requests_queue_max >= 1,
            "voice_requests_queue_max",
            "must be at least 1",
        );
        check(
            self.voice_mailbox_messages_max >= 1,
            "voice_mailbox_messages_max",
            "must be at least 1",
        );
        check(
            self.voice_control_messages_max >= 1,
            "voice_control_messages_max",
            "must be at least 1",
        );
        check(
            self.voice_call_participants_max >= 1,
            "voice_call_participants_max",
            "must be at least 1",
        );
        check(
            self.voice_sfu_allocations_in_flight_max >= 1,
            "voice_sfu_allocations_in_flight_max",
            "must be at least 1",
        );
        check(
            self.voice_sfu_breaker_failures_max >= 1,
            "voice_sfu_breaker_failures_max",
            "must be at least 1",
        );
        check(
            self.voice_sfu_breaker_cool_down_ms >= 1,
            "voice_sfu_breaker_cool_down_ms",
            "must be at least 1",
        );
        check(
            self.voice_sfu_request_timeout_ms >= 1,
            "voice_sfu_request_timeout_ms",
            "must be at least 1",
        );
        check(
            self.voice_spawn_rate_per_s >= 1,
            "voice_spawn_rate_per_s",
            "must be at least 1",
        );
        check(
            self.voice_spawn_burst >= 1,
            "voice_spawn_burst",
            "must be at least 1",
        );
        check(
            self.voice_spawn_guild_rate_per_s >= 1,
            "voice_spawn_guild_rate_per_s",
            "must be at least 1",
        );
        check(
            self.voice_spawn_guild_rate_per_s <= self.voice_spawn_rate_per_s,
            "voice_spawn_guild_rate_per_s",
            "must be at most voice_spawn_rate_per_s",
        );
        check(
            self.voice_spawn_guild_burst >= 1,
            "voice_spawn_guild_burst",
            "must be at least 1",
        );
        check(
            self.voice_spawn_guild_burst <= self.voice_spawn_burst,
            "voice_spawn_guild_burst",
            "must be at most voice_spawn_burst",
        );
        check(
            self.voice_spawn_guilds_tracked_max >= 1,
            "voice_spawn_guilds_tracked_max",
            "must be at least 1",
        );
        check(
            self.voice_spawn_guilds_tracked_max >= self.voice_coordinators_max,
            "voice_spawn_guilds_tracked_max",
            "must be at least voice_coordinators_max (each live guild needs an allowance)",
        );
        check(
            self.voice_replacements_in_flight_max >= 1,
            "voice_replacements_in_flight_max",
            "must be at least 1",
        );
        check(
            self.voice_retry_after_ms >= 1,
            "voice_retry_after_ms",
            "must be at least 1",
        );
        check(
            self.voice_sfu_load_slack_permille >= 1,
            "voice_sfu_load_slack_permille",
            "must be at least 1",
        );
        check(
            self.voice_sfu_load_slack_permille <= 1000,
            "voice_sfu_load_slack_permille",
            "must be at most 1000",
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

    #[test]
    fn a_session_start_window_must_fit_the_store_arithmetic() {
        let limits = Limits {
            session_start_window_ms: u64::MAX,
            ..Limits::default()
        };
        let errors = limits.validate().unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| format!("{e:?}").contains("session_start_window_ms")),
            "{errors:?}"
        );
    }

    /// Every field has a guard: zeroing any one of them fails validation.
    #[test]
    fn every_field_is_checked() {
        let defaults = Limits::default();
        let fields = [
            "ring_vnodes_per_member",
            "ring_members_max",
            "registry_entries_max",
            "registry_watch_events_max",
            "ring_load_epsilon_permille",
            "ring_history_generations_max",
            "lease_ttl_ms",
            "self_preservation_window_ms",
            "self_preservation_freeze_max_ms",
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
            "session_reap_interval_ms",
            "session_takeover_timeout_ms",
            "session_move_timeout_ms",
            "session_takeovers_in_flight_max",
            "gateway_announce_interval_ms",
            "sessions_per_node_max",
            "handshake_rate_per_s",
            "handshake_hold_ms_max",
            "attachment_bytes_max",
            "upload_request_bytes_max",
            "message_attachments_max",
            "attachment_filename_bytes_max",
            "attachment_text_chars_max",
            "upload_memory_bytes_max",
            "blob_delete_queue_max",
            "attachment_url_ttl_ms",
            "attachment_refresh_urls_max",
            "rest_body_bytes_max",
            "message_content_chars_max",
            "messages_per_page_max",
            "members_per_page_max",
            "member_request_matches_max",
            "reaction_users_per_page_max",
            "reactions_per_message_max",
            "pins_per_channel_max",
            "pins_per_page_max",
            "application_commands_chat_input_max",
            "application_commands_context_menu_max",
            "application_commands_body_bytes_max",
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
            "placement_guilds_max",
            "placement_list_page_max",
            "placement_refresh_interval_ms",
            "guild_forward_hops_max",
            "guild_pull_timeout_ms",
            "guild_pull_sessions_max",
            "users_batch_ids_max",
            "presence_sessions_max",
            "presence_query_users_max",
            "presence_queries_per_load_max",
            "presence_query_timeout_ms",
            "presence_query_cooloff_ms",
            "presence_resync_per_s",
            "users_shards",
            "users_shard_mailbox_max",
            "users_shard_cache_entries_max",
            "guild_reply_timeout_ms",
            "guild_owners_max",
            "ready_guilds_max",
            "session_starts_per_window_max",
            "session_start_window_ms",
            "session_start_bots_max",
            "identify_concurrency_max",
            "identify_concurrency_window_ms",
            "store_pool_connections_max",
            "message_write_queue_max",
            "message_write_batch_max",
            "users_lookup_timeout_ms",
            "guild_load_waiters_max",
            "event_resync_tasks_max",
            "guild_subscribe_attempts_max",
            "guild_subscribe_retry_tasks_max",
            "fanout_outbox_bytes_max",
            "users_loads_in_flight_max",
            "fanout_outbox_event_age_ms_max",
            "fanout_outbox_calls_in_flight_max",
            "guild_publish_ids_remembered_max",
            "guild_stream_unsent_max",
            "guild_stream_retry_ms",
            "thread_archive_retry_ms",
            "guild_stream_tail_after_ms",
            "guild_stream_tails_max",
            "gateway_publish_ids_remembered_max",
            "session_write_stall_ms_max",
            "gateway_close_linger_ms",
            "gateway_identify_timeout_ms",
            "gateway_shards_max",
            "session_member_requests_max",
            "session_voice_requests_max",
            "voice_request_timeout_ms",
            "voice_attempts_max",
            "gateway_compressors_max",
            "http_header_read_timeout_ms",
            "http_header_bytes_max",
            "http_body_read_timeout_ms",
            "http_connections_max",
            "http_connections_per_ip_max",
            "http_fd_reserve_min",
            "http_accept_backoff_ms",
            "password_hash_concurrency_max",
            "rest_auth_rate_limit_per_window",
            "rest_invalid_requests_max",
            "rest_invalid_window_ms",
            "rest_invalid_addresses_max",
            "users_negative_cache_entries_max",
            "users_negative_cache_ttl_ms",
            "guild_name_chars_max",
            "role_name_chars_max",
            "channel_name_chars_max",
            "channel_topic_chars_max",
            "nick_chars_max",
            "application_name_chars_max",
            "application_description_chars_max",
            "user_guilds_per_page_max",
            "message_nonce_chars_max",
            "message_embeds_max",
            "message_components_max",
            "webhook_name_chars_max",
            "webhook_avatar_url_chars_max",
            "webhooks_per_channel_max",
            "webhooks_per_guild_max",
            "webhook_rate_limit_per_window",
            "interaction_response_deadline_ms",
            "interaction_token_ttl_ms",
            "interactions_max",
            "interaction_forward_timeout_ms",
            "interaction_forwards_in_flight_max",
            "interactions_pending_per_application_max",
            "interactions_per_user_per_minute_max",
            "interaction_users_max",
            "interaction_sweep_batch_max",
            "interaction_sweep_interval_ms",
            "component_custom_id_chars_max",
            "interaction_modal_title_chars_max",
            "interaction_modal_components_max",
            "interaction_autocomplete_choices_max",
            "guild_roles_max",
            "guild_channels_max",
            "guild_slowmode_clocks_max",
            "guild_active_threads_max",
            "thread_members_page_max",
            "archived_threads_page_max",
            "channel_overwrites_max",
            "ban_delete_messages_max",
            "audit_log_entries_max",
            "audit_log_retention_ms",
            "audit_log_page_max",
            "guild_view_cache_channels_max",
            "bans_page_max",
            "bulk_ban_users_max",
            "guild_invites_max",
            "audit_reason_chars_max",
            "guild_create_members_max",
            "guild_envelope_reserve_bytes",
            "handshake_retry_after_s_max",
            "sessions_full_retry_after_s",
            "sfu_sessions_max",
            "sfu_calls_max",
            "sfu_participants_per_call_max",
            "sfu_packets_per_s_per_ssrc",
            "sfu_packets_burst",
            "sfu_udp_datagram_bytes_max",
            "sfu_udp_send_buffer_bytes",
            "sfu_udp_recv_buffer_bytes",
            "sfu_udp_workers",
            "sfu_ws_payload_bytes_max",
            "sfu_ws_inbound_per_minute_max",
            "sfu_connection_queue_messages_max",
            "sfu_replay_messages_max",
            "sfu_resume_window_ms",
            "sfu_heartbeat_interval_ms",
            "sfu_heartbeat_timeout_ms",
            "sfu_identify_timeout_ms",
            "sfu_admission_ttl_ms",
            "sfu_connections_max",
            "sfu_tls_handshake_timeout_ms",
            "voice_coordinators_max",
            "voice_coordinator_linger_ms",
            "voice_syncers_max",
            "voice_requests_queue_max",
            "voice_mailbox_messages_max",
            "voice_control_messages_max",
            "voice_call_participants_max",
            "voice_sfu_allocations_in_flight_max",
            "voice_sfu_breaker_failures_max",
            "voice_sfu_breaker_cool_down_ms",
            "voice_sfu_request_timeout_ms",
            "voice_spawn_rate_per_s",
            "voice_spawn_burst",
            "voice_spawn_guild_rate_per_s",
            "voice_spawn_guild_burst",
            "voice_spawn_guilds_tracked_max",
            "voice_replacements_in_flight_max",
            "voice_retry_after_ms",
            "voice_sfu_load_slack_permille",
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
            "registry_entries_max" => l.registry_entries_max = 0,
            "registry_watch_events_max" => l.registry_watch_events_max = 0,
            "ring_load_epsilon_permille" => l.ring_load_epsilon_permille = 0,
            "ring_history_generations_max" => l.ring_history_generations_max = 0,
            "lease_ttl_ms" => l.lease_ttl_ms = 0,
            "self_preservation_window_ms" => l.self_preservation_window_ms = 0,
            "self_preservation_freeze_max_ms" => l.self_preservation_freeze_max_ms = 0,
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
            "session_reap_interval_ms" => l.session_reap_interval_ms = 0,
            "session_takeover_timeout_ms" => l.session_takeover_timeout_ms = 0,
            "session_move_timeout_ms" => l.session_move_timeout_ms = 0,
            "session_takeovers_in_flight_max" => l.session_takeovers_in_flight_max = 0,
            "gateway_announce_interval_ms" => l.gateway_announce_interval_ms = 0,
            "sessions_per_node_max" => l.sessions_per_node_max = 0,
            "handshake_rate_per_s" => l.handshake_rate_per_s = 0,
            "handshake_hold_ms_max" => l.handshake_hold_ms_max = 0,
            "attachment_bytes_max" => l.attachment_bytes_max = 0,
            "upload_request_bytes_max" => l.upload_request_bytes_max = 0,
            "message_attachments_max" => l.message_attachments_max = 0,
            "attachment_filename_bytes_max" => l.attachment_filename_bytes_max = 0,
            "attachment_text_chars_max" => l.attachment_text_chars_max = 0,
            "upload_memory_bytes_max" => l.upload_memory_bytes_max = 0,
            "blob_delete_queue_max" => l.blob_delete_queue_max = 0,
            "attachment_url_ttl_ms" => l.attachment_url_ttl_ms = 0,
            "attachment_refresh_urls_max" => l.attachment_refresh_urls_max = 0,
            "rest_body_bytes_max" => l.rest_body_bytes_max = 0,
            "message_content_chars_max" => l.message_content_chars_max = 0,
            "messages_per_page_max" => l.messages_per_page_max = 0,
            "members_per_page_max" => l.members_per_page_max = 0,
            "member_request_matches_max" => l.member_request_matches_max = 0,
            "reaction_users_per_page_max" => l.reaction_users_per_page_max = 0,
            "reactions_per_message_max" => l.reactions_per_message_max = 0,
            "pins_per_channel_max" => l.pins_per_channel_max = 0,
            "pins_per_page_max" => l.pins_per_page_max = 0,
            "application_commands_chat_input_max" => l.application_commands_chat_input_max = 0,
            "application_commands_context_menu_max" => l.application_commands_context_menu_max = 0,
            "application_commands_body_bytes_max" => l.application_commands_body_bytes_max = 0,
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
            "placement_guilds_max" => l.placement_guilds_max = 0,
            "placement_list_page_max" => l.placement_list_page_max = 0,
            "placement_refresh_interval_ms" => l.placement_refresh_interval_ms = 0,
            "guild_forward_hops_max" => l.guild_forward_hops_max = 0,
            "guild_pull_timeout_ms" => l.guild_pull_timeout_ms = 0,
            "guild_pull_sessions_max" => l.guild_pull_sessions_max = 0,
            "users_batch_ids_max" => l.users_batch_ids_max = 0,
            "presence_sessions_max" => l.presence_sessions_max = 0,
            "presence_query_users_max" => l.presence_query_users_max = 0,
            "presence_queries_per_load_max" => l.presence_queries_per_load_max = 0,
            "presence_query_timeout_ms" => l.presence_query_timeout_ms = 0,
            "presence_query_cooloff_ms" => l.presence_query_cooloff_ms = 0,
            "presence_resync_per_s" => l.presence_resync_per_s = 0,
            "users_shards" => l.users_shards = 0,
            "users_shard_mailbox_max" => l.users_shard_mailbox_max = 0,
            "users_shard_cache_entries_max" => l.users_shard_cache_entries_max = 0,
            "guild_reply_timeout_ms" => l.guild_reply_timeout_ms = 0,
            "guild_owners_max" => l.guild_owners_max = 0,
            "ready_guilds_max" => l.ready_guilds_max = 0,
            "session_starts_per_window_max" => l.session_starts_per_window_max = 0,
            "session_start_window_ms" => l.session_start_window_ms = 0,
            "session_start_bots_max" => l.session_start_bots_max = 0,
            "identify_concurrency_max" => l.identify_concurrency_max = 0,
            "identify_concurrency_window_ms" => l.identify_concurrency_window_ms = 0,
            "store_pool_connections_max" => l.store_pool_connections_max = 0,
            "message_write_queue_max" => l.message_write_queue_max = 0,
            "message_write_batch_max" => l.message_write_batch_max = 0,
            "users_lookup_timeout_ms" => l.users_lookup_timeout_ms = 0,
            "guild_load_waiters_max" => l.guild_load_waiters_max = 0,
            "event_resync_tasks_max" => l.event_resync_tasks_max = 0,
            "guild_subscribe_attempts_max" => l.guild_subscribe_attempts_max = 0,
            "guild_subscribe_retry_tasks_max" => l.guild_subscribe_retry_tasks_max = 0,
            "fanout_outbox_bytes_max" => l.fanout_outbox_bytes_max = 0,
            "users_loads_in_flight_max" => l.users_loads_in_flight_max = 0,
            "fanout_outbox_event_age_ms_max" => l.fanout_outbox_event_age_ms_max = 0,
            "fanout_outbox_calls_in_flight_max" => l.fanout_outbox_calls_in_flight_max = 0,
            "guild_publish_ids_remembered_max" => l.guild_publish_ids_remembered_max = 0,
            "guild_stream_unsent_max" => l.guild_stream_unsent_max = 0,
            "guild_stream_retry_ms" => l.guild_stream_retry_ms = 0,
            "thread_archive_retry_ms" => l.thread_archive_retry_ms = 0,
            "guild_stream_tail_after_ms" => l.guild_stream_tail_after_ms = 0,
            "guild_stream_tails_max" => l.guild_stream_tails_max = 0,
            "gateway_publish_ids_remembered_max" => l.gateway_publish_ids_remembered_max = 0,
            "session_write_stall_ms_max" => l.session_write_stall_ms_max = 0,
            "gateway_close_linger_ms" => l.gateway_close_linger_ms = 0,
            "gateway_identify_timeout_ms" => l.gateway_identify_timeout_ms = 0,
            "gateway_shards_max" => l.gateway_shards_max = 0,
            "session_member_requests_max" => l.session_member_requests_max = 0,
            "session_voice_requests_max" => l.session_voice_requests_max = 0,
            "voice_request_timeout_ms" => l.voice_request_timeout_ms = 0,
            "voice_attempts_max" => l.voice_attempts_max = 0,
            "gateway_compressors_max" => l.gateway_compressors_max = 0,
            "http_header_read_timeout_ms" => l.http_header_read_timeout_ms = 0,
            "http_header_bytes_max" => l.http_header_bytes_max = 0,
            "http_body_read_timeout_ms" => l.http_body_read_timeout_ms = 0,
            "http_connections_max" => l.http_connections_max = 0,
            "http_connections_per_ip_max" => l.http_connections_per_ip_max = 0,
            "http_fd_reserve_min" => l.http_fd_reserve_min = 0,
            "http_accept_backoff_ms" => l.http_accept_backoff_ms = 0,
            "password_hash_concurrency_max" => l.password_hash_concurrency_max = 0,
            "rest_auth_rate_limit_per_window" => l.rest_auth_rate_limit_per_window = 0,
            "rest_invalid_requests_max" => l.rest_invalid_requests_max = 0,
            "rest_invalid_window_ms" => l.rest_invalid_window_ms = 0,
            "rest_invalid_addresses_max" => l.rest_invalid_addresses_max = 0,
            "users_negative_cache_entries_max" => l.users_negative_cache_entries_max = 0,
            "users_negative_cache_ttl_ms" => l.users_negative_cache_ttl_ms = 0,
            "guild_name_chars_max" => l.guild_name_chars_max = 0,
            "role_name_chars_max" => l.role_name_chars_max = 0,
            "channel_name_chars_max" => l.channel_name_chars_max = 0,
            "channel_topic_chars_max" => l.channel_topic_chars_max = 0,
            "nick_chars_max" => l.nick_chars_max = 0,
            "application_name_chars_max" => l.application_name_chars_max = 0,
            "application_description_chars_max" => l.application_description_chars_max = 0,
            "user_guilds_per_page_max" => l.user_guilds_per_page_max = 0,
            "message_nonce_chars_max" => l.message_nonce_chars_max = 0,
            "message_embeds_max" => l.message_embeds_max = 0,
            "message_components_max" => l.message_components_max = 0,
            "webhook_name_chars_max" => l.webhook_name_chars_max = 0,
            "webhook_avatar_url_chars_max" => l.webhook_avatar_url_chars_max = 0,
            "webhooks_per_channel_max" => l.webhooks_per_channel_max = 0,
            "webhooks_per_guild_max" => l.webhooks_per_guild_max = 0,
            "webhook_rate_limit_per_window" => l.webhook_rate_limit_per_window = 0,
            "interaction_response_deadline_ms" => l.interaction_response_deadline_ms = 0,
            "interaction_token_ttl_ms" => l.interaction_token_ttl_ms = 0,
            "interactions_max" => l.interactions_max = 0,
            "interaction_forward_timeout_ms" => l.interaction_forward_timeout_ms = 0,
            "interaction_forwards_in_flight_max" => l.interaction_forwards_in_flight_max = 0,
            "interactions_pending_per_application_max" => {
                l.interactions_pending_per_application_max = 0
            }
            "interactions_per_user_per_minute_max" => l.interactions_per_user_per_minute_max = 0,
            "interaction_users_max" => l.interaction_users_max = 0,
            "interaction_sweep_batch_max" => l.interaction_sweep_batch_max = 0,
            "interaction_sweep_interval_ms" => l.interaction_sweep_interval_ms = 0,
            "component_custom_id_chars_max" => l.component_custom_id_chars_max = 0,
            "interaction_modal_title_chars_max" => l.interaction_modal_title_chars_max = 0,
            "interaction_modal_components_max" => l.interaction_modal_components_max = 0,
            "interaction_autocomplete_choices_max" => l.interaction_autocomplete_choices_max = 0,
            "guild_roles_max" => l.guild_roles_max = 0,
            "guild_channels_max" => l.guild_channels_max = 0,
            "guild_slowmode_clocks_max" => l.guild_slowmode_clocks_max = 0,
            "guild_active_threads_max" => l.guild_active_threads_max = 0,
            "thread_members_page_max" => l.thread_members_page_max = 0,
            "archived_threads_page_max" => l.archived_threads_page_max = 0,
            "channel_overwrites_max" => l.channel_overwrites_max = 0,
            "ban_delete_messages_max" => l.ban_delete_messages_max = 0,
            "audit_log_entries_max" => l.audit_log_entries_max = 0,
            "audit_log_retention_ms" => l.audit_log_retention_ms = 0,
            "audit_log_page_max" => l.audit_log_page_max = 0,
            "guild_view_cache_channels_max" => l.guild_view_cache_channels_max = 0,
            "bans_page_max" => l.bans_page_max = 0,
            "bulk_ban_users_max" => l.bulk_ban_users_max = 0,
            "guild_invites_max" => l.guild_invites_max = 0,
            "audit_reason_chars_max" => l.audit_reason_chars_max = 0,
            "guild_create_members_max" => l.guild_create_members_max = 0,
            "guild_envelope_reserve_bytes" => l.guild_envelope_reserve_bytes = 0,
            "handshake_retry_after_s_max" => l.handshake_retry_after_s_max = 0,
            "sessions_full_retry_after_s" => l.sessions_full_retry_after_s = 0,
            "sfu_sessions_max" => l.sfu_sessions_max = 0,
            "sfu_calls_max" => l.sfu_calls_max = 0,
            "sfu_participants_per_call_max" => l.sfu_participants_per_call_max = 0,
            "sfu_packets_per_s_per_ssrc" => l.sfu_packets_per_s_per_ssrc = 0,
            "sfu_packets_burst" => l.sfu_packets_burst = 0,
            "sfu_udp_datagram_bytes_max" => l.sfu_udp_datagram_bytes_max = 0,
            "sfu_udp_send_buffer_bytes" => l.sfu_udp_send_buffer_bytes = 0,
            "sfu_udp_recv_buffer_bytes" => l.sfu_udp_recv_buffer_bytes = 0,
            "sfu_udp_workers" => l.sfu_udp_workers = 0,
            "sfu_ws_payload_bytes_max" => l.sfu_ws_payload_bytes_max = 0,
            "sfu_ws_inbound_per_minute_max" => l.sfu_ws_inbound_per_minute_max = 0,
            "sfu_connection_queue_messages_max" => l.sfu_connection_queue_messages_max = 0,
            "sfu_replay_messages_max" => l.sfu_replay_messages_max = 0,
            "sfu_resume_window_ms" => l.sfu_resume_window_ms = 0,
            "sfu_heartbeat_interval_ms" => l.sfu_heartbeat_interval_ms = 0,
            "sfu_heartbeat_timeout_ms" => l.sfu_heartbeat_timeout_ms = 0,
            "sfu_identify_timeout_ms" => l.sfu_identify_timeout_ms = 0,
            "sfu_admission_ttl_ms" => l.sfu_admission_ttl_ms = 0,
            "sfu_connections_max" => l.sfu_connections_max = 0,
            "sfu_tls_handshake_timeout_ms" => l.sfu_tls_handshake_timeout_ms = 0,
            "voice_coordinators_max" => l.voice_coordinators_max = 0,
            "voice_coordinator_linger_ms" => l.voice_coordinator_linger_ms = 0,
            "voice_syncers_max" => l.voice_syncers_max = 0,
            "voice_requests_queue_max" => l.voice_requests_queue_max = 0,
            "voice_mailbox_messages_max" => l.voice_mailbox_messages_max = 0,
            "voice_control_messages_max" => l.voice_control_messages_max = 0,
            "voice_call_participants_max" => l.voice_call_participants_max = 0,
            "voice_sfu_allocations_in_flight_max" => l.voice_sfu_allocations_in_flight_max = 0,
            "voice_sfu_breaker_failures_max" => l.voice_sfu_breaker_failures_max = 0,
            "voice_sfu_breaker_cool_down_ms" => l.voice_sfu_breaker_cool_down_ms = 0,
            "voice_sfu_request_timeout_ms" => l.voice_sfu_request_timeout_ms = 0,
            "voice_spawn_rate_per_s" => l.voice_spawn_rate_per_s = 0,
            "voice_spawn_burst" => l.voice_spawn_burst = 0,
            "voice_spawn_guild_rate_per_s" => l.voice_spawn_guild_rate_per_s = 0,
            "voice_spawn_guild_burst" => l.voice_spawn_guild_burst = 0,
            "voice_spawn_guilds_tracked_max" => l.voice_spawn_guilds_tracked_max = 0,
            "voice_replacements_in_flight_max" => l.voice_replacements_in_flight_max = 0,
            "voice_retry_after_ms" => l.voice_retry_after_ms = 0,
            "voice_sfu_load_slack_permille" => l.voice_sfu_load_slack_permille = 0,
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
            member_permanent_down_ms: 1_000,
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
                "member_permanent_down_ms",
                "adaptive_limit_start",
                "drain_margin_ms"
            ]
        );
    }
}
