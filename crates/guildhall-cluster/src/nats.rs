//! [`NatsBus`]: the [`Bus`] trait over a NATS server (async-nats), cluster
//! mode's transport. Same contract as [`LocalBus`](crate::bus::LocalBus),
//! with the differences a network forces, each stated where it arises:
//!
//! - `publish` never waits: it puts the message on the bus's own bounded
//!   queue (messages and bytes), drained in order by one publisher task.
//!   [`BusError::Full`] means *that queue* is full. A remote subscriber that
//!   is full loses the message in its own process, which counts it in its
//!   own [`BusStats::dropped_full_total`]; the publisher cannot be told
//!   (NATS has no acknowledgement for core publishes), so `publish` also
//!   never reports [`BusError::NoResponders`].
//! - While the connection is down, `publish`, `subscribe` and `request`
//!   fail fast with [`BusError::Disconnected`] (the trait's documented
//!   choice) rather than queueing: a message queued during an outage of
//!   unknown length is delivered late, into a cluster whose state moved on,
//!   and a queue that fills during the outage turns into `Full` anyway.
//!   Messages accepted before the outage was noticed are handed to
//!   async-nats, which buffers them (bounded by its command channel) and
//!   sends them after the reconnect. Subscriptions survive a reconnect:
//!   async-nats subscribes them again.
//! - The request deadline crosses processes as the time left in the
//!   [`DEADLINE_HEADER`] header; the receiver's [`Message::deadline`] is its
//!   receipt instant plus that time (later than the caller's by the one-way
//!   transit time, a millisecond on a LAN). The time left alone cannot see
//!   a pause: a process stopped (SIGSTOP, a soft lockup, seed 001) finds
//!   the requests of the whole pause in its socket buffer, each looking
//!   fresh. So the caller's wall-clock deadline travels too
//!   ([`DEADLINE_UNIX_HEADER`]), and the earlier of the two counts, with
//!   `deadline_clock_skew_ms` ([`NATS_DEADLINE_CLOCK_SKEW_MS`]) of slack for clocks that differ: the
//!   answers nobody waits for any more are not started.

use crate::bus::{Bus, BusError, BusStats, Message, Subscription, splitmix64};
use async_nats::connection::State;
use bytes::Bytes;
use futures_util::StreamExt;
use guildhall_control::log_throttle::{LogThrottle, Verdict};
use guildhall_control::retry::backoff_full_jitter_ms;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// Messages the publish queue holds. When hit: `publish` returns
/// [`BusError::Full`] (counted in [`NatsStats::publish_queue_full_total`]).
/// 8192 is a few hundred milliseconds of a node's peak event rate: enough
/// to ride out a scheduling hiccup, short enough that a stalled connection
/// is noticed by the publishers instead of hidden.
pub const NATS_PUBLISH_QUEUE_MESSAGES_MAX: usize = 8_192;

/// Payload bytes the publish queue holds. When hit: `publish` returns
/// [`BusError::Full`]. Bounds the queue's memory when the messages are
/// large (8192 × 1 MiB would be 8 GiB).
pub const NATS_PUBLISH_QUEUE_BYTES_MAX: usize = 64 << 20;

/// Largest payload the bus carries. When hit: [`BusError::TooLarge`].
/// nats-server's default `max_payload` is 1 MiB; the bus uses the smaller
/// of this and what the server announces minus
/// [`NATS_HEADER_RESERVE_BYTES`].
pub const NATS_PAYLOAD_BYTES_MAX: usize = 1 << 20;

/// Bytes kept free under the server's `max_payload` for the headers the
/// bus adds (the two deadline headers are about 90 bytes on the wire).
pub const NATS_HEADER_RESERVE_BYTES: usize = 256;

/// Messages async-nats holds per subscription before the bus's forwarding
/// task moves them into the [`Subscription`] (async-nats's
/// `subscription_capacity`). The forwarder never waits, so this only fills
/// when the forwarder is not scheduled; then async-nats drops and reports
/// a slow consumer ([`NatsStats::slow_consumer_events_total`]). 1024
/// covers a few socket reads' worth of small messages.
pub const NATS_SUBSCRIPTION_STAGING_MESSAGES_MAX: usize = 1_024;

/// Commands async-nats's client channel holds (its `client_capacity`):
/// publishes already taken from the publish queue wait here while the
/// connection is slow or reconnecting. When full, the publisher task
/// waits, and the publish queue fills behind it.
pub const NATS_CLIENT_COMMANDS_MAX: usize = 2_048;

/// Subscriptions (with their forwarding tasks) one bus holds. When hit:
/// `subscribe` returns [`BusError::SubjectsFull`]. Mirrors
/// [`LOCAL_BUS_SUBJECTS_MAX`](crate::bus::LOCAL_BUS_SUBJECTS_MAX).
pub const NATS_SUBSCRIPTIONS_MAX: usize = 65_536;

/// How long `connect` waits for the TCP connection and the handshake.
/// When hit: `connect` fails (the node does not start on a bus it cannot
/// reach; its supervisor retries).
pub const NATS_CONNECT_TIMEOUT_MS: u64 = 2_000;

/// Longest wait a request may ask for. Longer timeouts are cut to this;
/// a deadline header above it is read as this. Bounds the time an inbox
/// and a caller stay parked on an answer that will never come.
pub const NATS_REQUEST_TIMEOUT_CAP_MS: u64 = 30_000;

/// First reconnect delay ceiling; the delay is drawn uniformly below a
/// ceiling that doubles per attempt (full jitter, so a cluster's nodes do
/// not reconnect to a restarted server in lockstep).
pub const NATS_RECONNECT_BACKOFF_BASE_MS: u64 = 50;

/// Highest reconnect delay ceiling: after an outage a node is back on the
/// bus at most this long after the server is.
pub const NATS_RECONNECT_BACKOFF_CAP_MS: u64 = 2_000;

/// Interval of the client's PINGs; two unanswered ones close the
/// connection. A server that stops answering (hung, partitioned) is noticed
/// within about three intervals, and the bus then reports `Disconnected`.
pub const NATS_PING_INTERVAL_MS: u64 = 5_000;

/// At most one log line per kind of event per interval (seed 000: a line
/// per slow-consumer event burned the CPU the node needed).
pub const NATS_LOG_INTERVAL_MS: u64 = 1_000;

/// The header carrying a request's time left, in whole milliseconds.
pub const DEADLINE_HEADER: &str = "Guildhall-Deadline-Ms";

/// The header carrying a request's deadline on the caller's wall clock, in
/// milliseconds since the Unix epoch.
pub const DEADLINE_UNIX_HEADER: &str = "Guildhall-Deadline-Unix-Ms";

/// How far the wall clocks of two nodes may differ before the wall-clock
/// deadline cuts a request short: a receiver whose clock runs ahead by
/// more than this sees requests expire early by the excess. NTP keeps
/// hosts within milliseconds; a pause long enough to matter is seconds.
pub const NATS_DEADLINE_CLOCK_SKEW_MS: u64 = 250;

/// The subject `subscribe` sends its synchronising request to: nobody
/// answers it, and the server's "no responders" status comes back after
/// the server processed the preceding SUB (one connection's protocol is
/// handled in order), so the subscription is live when `subscribe` returns.
const SYNC_SUBJECT: &str = "_GUILDHALL.SYNC";

/// The bounds of a [`NatsBus`]; [`Default`] is the `NATS_*` constants.
/// The binary reads them from its configuration's `[nats_client]` table
/// (or `GUILDHALL_NATS_CLIENT_<FIELD>`); the payload bound comes from
/// `Limits::bus_payload_bytes_max` instead, shared with the in-process bus.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsOptions {
    /// [`NATS_PUBLISH_QUEUE_MESSAGES_MAX`].
    pub publish_queue_messages_max: usize,
    /// [`NATS_PUBLISH_QUEUE_BYTES_MAX`].
    pub publish_queue_bytes_max: usize,
    /// [`NATS_PAYLOAD_BYTES_MAX`].
    #[serde(skip)]
    pub payload_bytes_max: usize,
    /// [`NATS_HEADER_RESERVE_BYTES`].
    pub header_reserve_bytes: usize,
    /// [`NATS_SUBSCRIPTION_STAGING_MESSAGES_MAX`].
    pub subscription_staging_messages_max: usize,
    /// [`NATS_CLIENT_COMMANDS_MAX`].
    pub client_commands_max: usize,
    /// [`NATS_SUBSCRIPTIONS_MAX`].
    pub subscriptions_max: usize,
    /// [`NATS_CONNECT_TIMEOUT_MS`].
    pub connect_timeout_ms: u64,
    /// [`NATS_REQUEST_TIMEOUT_CAP_MS`].
    pub request_timeout_cap_ms: u64,
    /// [`NATS_RECONNECT_BACKOFF_BASE_MS`].
    pub reconnect_backoff_base_ms: u64,
    /// [`NATS_RECONNECT_BACKOFF_CAP_MS`].
    pub reconnect_backoff_cap_ms: u64,
    /// [`NATS_PING_INTERVAL_MS`].
    pub ping_interval_ms: u64,
    /// [`NATS_LOG_INTERVAL_MS`].
    pub log_interval_ms: u64,
    /// [`NATS_DEADLINE_CLOCK_SKEW_MS`].
    pub deadline_clock_skew_ms: u64,
}

impl Default for NatsOptions {
    fn default() -> Self {
        Self {
            publish_queue_messages_max: NATS_PUBLISH_QUEUE_MESSAGES_MAX,
            publish_queue_bytes_max: NATS_PUBLISH_QUEUE_BYTES_MAX,
            payload_bytes_max: NATS_PAYLOAD_BYTES_MAX,
            header_reserve_bytes: NATS_HEADER_RESERVE_BYTES,
            subscription_staging_messages_max: NATS_SUBSCRIPTION_STAGING_MESSAGES_MAX,
            client_commands_max: NATS_CLIENT_COMMANDS_MAX,
            subscriptions_max: NATS_SUBSCRIPTIONS_MAX,
            connect_timeout_ms: NATS_CONNECT_TIMEOUT_MS,
            request_timeout_cap_ms: NATS_REQUEST_TIMEOUT_CAP_MS,
            reconnect_backoff_base_ms: NATS_RECONNECT_BACKOFF_BASE_MS,
            reconnect_backoff_cap_ms: NATS_RECONNECT_BACKOFF_CAP_MS,
            ping_interval_ms: NATS_PING_INTERVAL_MS,
            log_interval_ms: NATS_LOG_INTERVAL_MS,
            deadline_clock_skew_ms: NATS_DEADLINE_CLOCK_SKEW_MS,
        }
    }
}

impl NatsOptions {
    /// Every broken relation at once (empty when the options are usable).
    pub fn validate(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let positive = [
            (
                "publish_queue_messages_max",
                self.publish_queue_messages_max as u64,
            ),
            (
                "publish_queue_bytes_max",
                self.publish_queue_bytes_max as u64,
            ),
            ("payload_bytes_max", self.payload_bytes_max as u64),
            (
                "subscription_staging_messages_max",
                self.subscription_staging_messages_max as u64,
            ),
            ("client_commands_max", self.client_commands_max as u64),
            ("subscriptions_max", self.subscriptions_max as u64),
            ("connect_timeout_ms", self.connect_timeout_ms),
            ("request_timeout_cap_ms", self.request_timeout_cap_ms),
            ("reconnect_backoff_base_ms", self.reconnect_backoff_base_ms),
            ("ping_interval_ms", self.ping_interval_ms),
        ];
        for (name, value) in positive {
            if value == 0 {
                broken.push(format!("{name} must be positive"));
            }
        }
        if self.publish_queue_bytes_max < self.payload_bytes_max {
            broken.push(format!(
                "publish_queue_bytes_max ({}) must hold one payload_bytes_max ({})",
                self.publish_queue_bytes_max, self.payload_bytes_max
            ));
        }
        if self.reconnect_backoff_cap_ms < self.reconnect_backoff_base_ms {
            broken.push(format!(
                "reconnect_backoff_cap_ms ({}) below reconnect_backoff_base_ms ({})",
                self.reconnect_backoff_cap_ms, self.reconnect_backoff_base_ms
            ));
        }
        broken
    }
}

/// Why `connect` failed.
#[derive(Debug, thiserror::Error)]
pub enum NatsConnectError {
    /// The options break their own relations (every one listed).
    #[error("invalid NATS options: {}", .0.join("; "))]
    InvalidOptions(Vec<String>),
    /// The server could not be reached or refused the handshake.
    #[error("cannot connect to NATS: {0}")]
    Connect(#[from] async_nats::ConnectError),
    /// No connection within the connect timeout.
    #[error("cannot connect to NATS within {0} ms")]
    Timeout(u64),
    /// The server's `max_payload` leaves no room for a payload after the
    /// header reserve.
    #[error("server max_payload {server_bytes} leaves no room after {reserve_bytes} header bytes")]
    ServerPayloadTooSmall {
        /// What the server announced.
        server_bytes: usize,
        /// [`NatsOptions::header_reserve_bytes`].
        reserve_bytes: usize,
    },
}

/// NATS-specific counters, beside the [`BusStats`] every bus has.
#[derive(Debug, Default)]
pub struct NatsStats {
    /// Publishes refused because the publish queue was full.
    pub publish_queue_full_total: AtomicU64,
    /// Publishes, subscribes and requests refused while disconnected.
    pub disconnected_refusals_total: AtomicU64,
    /// Publishes async-nats refused after they left the queue.
    pub publish_errors_total: AtomicU64,
    /// Slow-consumer events async-nats reported (its per-subscription
    /// staging channel was full and it dropped a message). A lower bound:
    /// async-nats drops events when its own event channel is full.
    pub slow_consumer_events_total: AtomicU64,
    /// Connection losses.
    pub disconnects_total: AtomicU64,
    /// (Re)connections, the first one included.
    pub connects_total: AtomicU64,
    /// Received deadline headers that did not parse (the message is
    /// delivered without a deadline).
    pub deadline_header_invalid_total: AtomicU64,
    /// Requests that arrived already past their caller's wall-clock
    /// deadline while their time left said otherwise: a pause of this
    /// process, or this host's clock ahead of the caller's (NTP).
    pub deadline_clock_expired_total: AtomicU64,
}

/// A subscription's entry in the slow-consumer table.
#[derive(Debug)]
struct SlowEntry {
    subject: String,
    events: u64,
}

/// What the publisher task, the forwarding tasks and the event callback
/// share. Holds no client and no queue sender, so a task holding it does
/// not keep the connection or the publisher alive.
#[derive(Debug)]
struct Shared {
    stats: BusStats,
    nats: NatsStats,
    /// sid → subject and slow-consumer events, one entry per live
    /// subscription (so bounded by `subscriptions_max`); sid 0 is
    /// async-nats's request multiplexer.
    slow: Mutex<HashMap<u64, SlowEntry>>,
    throttle: Mutex<LogThrottle<&'static str>>,
    started: Instant,
    publish_queued_bytes: AtomicUsize,
    subscriptions: AtomicUsize,
    deadline_clock_skew_ms: u64,
}

impl Shared {
    fn slow(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SlowEntry>> {
        // Plain data, consistent between statements: a panic elsewhere
        // cannot leave it half-updated.
        self.slow
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a line of `kind` may be written now, and how many it stands
    /// for beyond itself.
    fn log_verdict(&self, kind: &'static str) -> Option<u64> {
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut throttle = self
            .throttle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match throttle.check(kind, now_ms) {
            Verdict::Emit { suppressed } => Some(suppressed),
            Verdict::Suppress => None,
        }
    }

    fn on_event(&self, event: async_nats::Event) {
        use async_nats::Event;
        match event {
            Event::Connected => {
                self.nats.connects_total.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = self.log_verdict("connected") {
                    tracing::info!(suppressed, "bus connected to NATS");
                }
            }
            Event::Disconnected => {
                self.nats.disconnects_total.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = self.log_verdict("disconnected") {
                    tracing::warn!(suppressed, "bus lost its NATS connection; reconnecting");
                }
            }
            Event::SlowConsumer(sid) => {
                self.nats
                    .slow_consumer_events_total
                    .fetch_add(1, Ordering::Relaxed);
                let subject = {
                    let mut slow = self.slow();
                    slow.get_mut(&sid).map(|entry| {
                        entry.events += 1;
                        entry.subject.clone()
                    })
                };
                if let Some(suppressed) = self.log_verdict("slow_consumer") {
                    tracing::warn!(
                        sid,
                        subject = subject.as_deref().unwrap_or("?"),
                        suppressed,
                        "NATS slow consumer: a subscription's staging queue was full, message dropped"
                    );
                }
            }
            Event::ServerError(error) => {
                if let Some(suppressed) = self.log_verdict("server_error") {
                    tracing::warn!(%error, suppressed, "NATS server error");
                }
            }
            Event::ClientError(error) => {
                if let Some(suppressed) = self.log_verdict("client_error") {
                    tracing::warn!(%error, suppressed, "NATS client error");
                }
            }
            other => {
                if let Some(suppressed) = self.log_verdict("other") {
                    tracing::info!(event = %other, suppressed, "NATS event");
                }
            }
        }
    }
}

/// A message on its way from `publish` to the publisher task.
struct Outbound {
    subject: String,
    reply: Option<String>,
    payload: Bytes,
    /// A passed-on request's caller deadline: sent as the two headers.
    deadline: Option<Instant>,
}

struct Inner {
    client: async_nats::Client,
    publish: mpsc::Sender<Outbound>,
    shared: Arc<Shared>,
    options: NatsOptions,
    /// The smaller of the configured maximum and the server's.
    payload_bytes_max: usize,
}

/// The bus over NATS. Cheap to clone (one connection, one publish queue);
/// the publisher task ends once every clone is dropped and the queue is
/// drained.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NatsBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsBus")
            .field("state", &self.inner.client.connection_state())
            .field(
                "subscriptions",
                &self.inner.shared.subscriptions.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

/// NATS's subject rule for subscribing (async-nats keeps its own check
/// private): no empty tokens, no whitespace. Checked before anything is
/// queued so an invalid subject fails at the call, not later in a task.
fn valid_subject(subject: &str) -> bool {
    async_nats::Subject::validated(subject).is_ok()
}

fn valid_queue_group(group: &str) -> bool {
    !group.is_empty() && !group.bytes().any(|b| b.is_ascii_whitespace())
}

/// async-nats keeps a subscriber's sid private but derives `Debug`
/// (`Subscriber { sid: 7, .. }`). The sid is what its slow-consumer events
/// name, so it is read from there; `None` if the format ever changes (the
/// events are then counted in the total but not per subscription, and the
/// test `slow_consumer_events_are_counted_per_subscription` fails).
fn sid_of(subscriber: &async_nats::Subscriber) -> Option<u64> {
    let text = format!("{subscriber:?}");
    let rest = text.split_once("sid: ")?.1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn duration_ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

impl NatsBus {
    /// Connects to `url` (`nats://host:port`) within the connect timeout and
    /// starts the publisher task. Reconnects forever afterwards, with
    /// full-jitter backoff.
    ///
    /// # Errors
    /// Invalid options, an unreachable server, or a server whose
    /// `max_payload` is below the header reserve.
    pub async fn connect(url: &str, options: NatsOptions) -> Result<Self, NatsConnectError> {
        let broken = options.validate();
        if !broken.is_empty() {
            return Err(NatsConnectError::InvalidOptions(broken));
        }
        let shared = Arc::new(Shared {
            stats: BusStats::default(),
            nats: NatsStats::default(),
            slow: Mutex::new(HashMap::new()),
            // Keys are the handful of event kinds: 16 is room to spare.
            throttle: Mutex::new(LogThrottle::new(options.log_interval_ms, 16)),
            started: Instant::now(),
            publish_queued_bytes: AtomicUsize::new(0),
            subscriptions: AtomicUsize::new(0),
            deadline_clock_skew_ms: options.deadline_clock_skew_ms,
        });
        // A per-process seed for the reconnect jitter, so the nodes of a
        // cluster draw different delays after the same outage.
        let seed = splitmix64(
            u64::from(std::process::id())
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64),
        );
        let (base_ms, cap_ms) = (
            options.reconnect_backoff_base_ms,
            options.reconnect_backoff_cap_ms,
        );
        let events = shared.clone();
        let connect = async_nats::ConnectOptions::new()
            .connection_timeout(duration_ms(options.connect_timeout_ms))
            .request_timeout(Some(duration_ms(options.request_timeout_cap_ms)))
            .subscription_capacity(options.subscription_staging_messages_max)
            .client_capacity(options.client_commands_max)
            .ping_interval(duration_ms(options.ping_interval_ms))
            .max_reconnects(None)
            .reconnect_delay_callback(move |attempts| {
                let attempt = u32::try_from(attempts).unwrap_or(u32::MAX);
                let draw = splitmix64(seed ^ u64::from(attempt));
                // 53 random bits → a unit in [0, 1).
                let unit = (draw >> 11) as f64 / (1u64 << 53) as f64;
                duration_ms(backoff_full_jitter_ms(attempt, base_ms, cap_ms, unit))
            })
            .event_callback(move |event| {
                let shared = events.clone();
                async move { shared.on_event(event) }
            })
            .connect(url);
        // The handshake has its own timeout; this one also bounds name
        // resolution and anything else before it.
        let client = tokio::time::timeout(duration_ms(options.connect_timeout_ms), connect)
            .await
            .map_err(|_| NatsConnectError::Timeout(options.connect_timeout_ms))??;
        let server_bytes = client.server_info().max_payload;
        let payload_bytes_max = options
            .payload_bytes_max
            .min(server_bytes.saturating_sub(options.header_reserve_bytes));
        if payload_bytes_max == 0 {
            return Err(NatsConnectError::ServerPayloadTooSmall {
                server_bytes,
                reserve_bytes: options.header_reserve_bytes,
            });
        }
        let (publish, queue) = mpsc::channel(options.publish_queue_messages_max);
        tokio::spawn(run_publisher(client.clone(), queue, shared.clone()));
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                publish,
                shared,
                options,
                payload_bytes_max,
            }),
        })
    }

    /// NATS-specific counters.
    pub fn nats_stats(&self) -> &NatsStats {
        &self.inner.shared.nats
    }

    /// Live subscriptions that async-nats reported as slow consumers, with
    /// their subject and event count.
    pub fn slow_consumers(&self) -> Vec<(String, u64)> {
        self.inner
            .shared
            .slow()
            .values()
            .filter(|entry| entry.events > 0)
            .map(|entry| (entry.subject.clone(), entry.events))
            .collect()
    }

    /// The largest payload this bus carries (the configured maximum, or
    /// less if the server's is smaller).
    pub fn payload_bytes_max(&self) -> usize {
        self.inner.payload_bytes_max
    }

    /// Whether the connection is up now.
    pub fn is_connected(&self) -> bool {
        self.inner.client.connection_state() == State::Connected
    }

    fn refuse_disconnected(&self) -> Result<(), BusError> {
        if self.is_connected() {
            return Ok(());
        }
        self.inner
            .shared
            .nats
            .disconnected_refusals_total
            .fetch_add(1, Ordering::Relaxed);
        Err(BusError::Disconnected)
    }

    fn refuse_too_large(&self, payload: &Bytes) -> Result<(), BusError> {
        if payload.len() <= self.inner.payload_bytes_max {
            return Ok(());
        }
        self.inner
            .shared
            .stats
            .too_large_total
            .fetch_add(1, Ordering::Relaxed);
        Err(BusError::TooLarge)
    }

    fn request_timeout_cap(&self) -> Duration {
        duration_ms(self.inner.options.request_timeout_cap_ms)
    }

    /// Round trip through the server after a SUB: see [`SYNC_SUBJECT`].
    async fn sync(&self, deadline: Instant) -> Result<(), BusError> {
        let request = async_nats::Request::new()
            .payload(Bytes::new())
            .timeout(Some(deadline.saturating_duration_since(Instant::now())));
        match tokio::time::timeout_at(
            deadline,
            self.inner.client.send_request(SYNC_SUBJECT, request),
        )
        .await
        {
            // "No responders" is the expected answer; any answer proves the
            // round trip.
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => Ok(()),
            Ok(Err(_)) | Err(_) => Err(BusError::Disconnected),
        }
    }
}

/// Drains the publish queue in order, one message at a time: one task and
/// one FIFO keep the order per subject (and across subjects) that
/// `publish` calls had.
async fn run_publisher(
    client: async_nats::Client,
    mut queue: mpsc::Receiver<Outbound>,
    shared: Arc<Shared>,
) {
    while let Some(outbound) = queue.recv().await {
        let len = outbound.payload.len();
        let headers = outbound
            .deadline
            .map(|deadline| deadline_headers(deadline.saturating_duration_since(Instant::now())));
        let result = match (outbound.reply, headers) {
            (Some(reply), Some(headers)) => {
                client
                    .publish_with_reply_and_headers(
                        outbound.subject,
                        reply,
                        headers,
                        outbound.payload,
                    )
                    .await
            }
            (Some(reply), None) => {
                client
                    .publish_with_reply(outbound.subject, reply, outbound.payload)
                    .await
            }
            (None, Some(headers)) => {
                client
                    .publish_with_headers(outbound.subject, headers, outbound.payload)
                    .await
            }
            (None, None) => client.publish(outbound.subject, outbound.payload).await,
        };
        shared
            .publish_queued_bytes
            .fetch_sub(len, Ordering::Relaxed);
        if let Err(error) = result {
            shared
                .nats
                .publish_errors_total
                .fetch_add(1, Ordering::Relaxed);
            if let Some(suppressed) = shared.log_verdict("publish_error") {
                tracing::warn!(%error, suppressed, "NATS publish failed after it was queued");
            }
        }
    }
}

/// The [`Subscription`]'s guard: dropping it closes `stop`, which ends the
/// forwarding task, which drops the async-nats subscriber, whose own
/// `Drop` sends UNSUB to the server.
struct Unsubscribe {
    _stop: oneshot::Sender<()>,
}

/// Releases a subscription's slot and its slow-consumer entry, on every
/// path out of the forwarder (and if `subscribe` fails after reserving).
struct Slot {
    shared: Arc<Shared>,
    sid: Option<u64>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(sid) = self.sid {
            self.shared.slow().remove(&sid);
        }
        self.shared.subscriptions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where the forwarder puts messages: the [`Subscription`]'s queue, bounded
/// in messages (the channel) and bytes, exactly as `LocalBus` bounds it.
struct Sink {
    sender: mpsc::Sender<Message>,
    queued_bytes: Arc<AtomicUsize>,
    queued_bytes_max: usize,
}

impl Sink {
    /// Never waits: a full subscription loses the message (NATS's
    /// slow-consumer rule, applied on the client side).
    fn offer(&self, message: Message) -> bool {
        let len = message.payload.len();
        if self.queued_bytes.load(Ordering::Relaxed) + len > self.queued_bytes_max {
            return false;
        }
        if self.sender.try_send(message).is_err() {
            return false;
        }
        self.queued_bytes.fetch_add(len, Ordering::Relaxed);
        true
    }
}

/// Milliseconds since the Unix epoch on this host's wall clock (0 if the
/// clock is before 1970).
fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The two deadline headers of a request with `left` to go.
fn deadline_headers(left: Duration) -> async_nats::HeaderMap {
    let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(DEADLINE_HEADER, left_ms.to_string().as_str());
    headers.insert(
        DEADLINE_UNIX_HEADER,
        unix_now_ms().saturating_add(left_ms).to_string().as_str(),
    );
    headers
}

/// Reads the deadline headers into an instant after `received`: the time
/// left, cut to what the caller's wall-clock deadline still allows (plus
/// the skew slack) when that header is present.
fn deadline_of(
    headers: Option<&async_nats::HeaderMap>,
    received: Instant,
    cap: Duration,
    shared: &Shared,
) -> Option<Instant> {
    let headers = headers?;
    let value = headers.get(DEADLINE_HEADER)?;
    let invalid = || {
        shared
            .nats
            .deadline_header_invalid_total
            .fetch_add(1, Ordering::Relaxed);
    };
    let Ok(left_ms) = value.as_str().trim().parse::<u64>() else {
        invalid();
        return None;
    };
    let mut left = duration_ms(left_ms).min(cap);
    if let Some(unix) = headers.get(DEADLINE_UNIX_HEADER) {
        match unix.as_str().trim().parse::<u64>() {
            Ok(deadline_unix_ms) => {
                let now = unix_now_ms();
                let by_clock = deadline_unix_ms
                    .saturating_add(shared.deadline_clock_skew_ms)
                    .saturating_sub(now);
                if by_clock == 0 && !left.is_zero() {
                    // Said, because one host whose clock runs ahead would
                    // otherwise see every request expire without a word.
                    shared
                        .nats
                        .deadline_clock_expired_total
                        .fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = shared.log_verdict("deadline_clock_expired") {
                        tracing::warn!(
                            late_ms = now.saturating_sub(deadline_unix_ms),
                            suppressed,
                            "a request arrived past its caller's wall-clock deadline: this \
                             process was paused, or its clock is ahead of the caller's"
                        );
                    }
                }
                left = left.min(duration_ms(by_clock));
            }
            // The time left still holds.
            Err(_) => invalid(),
        }
    }
    Some(received + left)
}

/// One task per subscription moves messages from async-nats's subscriber
/// into the bounded [`Subscription`]. A task is needed because the
/// `Subscription` is a channel of the bus's own `Message` (subject, reply,
/// deadline read from the header) and async-nats has no hook on its
/// delivery path; the number of tasks is bounded by `subscriptions_max`,
/// and each one sleeps until a message arrives. It never waits on the
/// `Subscription`: a full one loses the message.
async fn forward(
    mut subscriber: async_nats::Subscriber,
    subject: String,
    sink: Sink,
    mut stop: oneshot::Receiver<()>,
    cap: Duration,
    slot: Slot,
    shed: Option<(Bytes, std::sync::Weak<Inner>)>,
) {
    let shared = slot.shared.clone();
    loop {
        let nats_message = tokio::select! {
            biased;
            _ = &mut stop => break,
            next = subscriber.next() => match next {
                Some(message) => message,
                None => break,
            },
        };
        // The trait's subscriptions match exactly; NATS would also match
        // wildcard tokens (`*`, `>`) in the subscribed subject.
        if nats_message.subject.as_str() != subject {
            continue;
        }
        let received = Instant::now();
        let deadline = deadline_of(nats_message.headers.as_ref(), received, cap, &shared);
        let message = Message {
            subject: nats_message.subject.to_string(),
            reply: nats_message.reply.map(|reply| reply.to_string()),
            payload: nats_message.payload,
            deadline,
        };
        let reply = message.reply.clone();
        if !sink.offer(message) {
            shared
                .stats
                .dropped_full_total
                .fetch_add(1, Ordering::Relaxed);
            // A shedding server answers the request it cannot take.
            if let (Some(reply), Some((overflow, bus))) = (reply, &shed)
                && let Some(inner) = bus.upgrade()
            {
                let bus = NatsBus { inner };
                if bus.publish(&reply, None, overflow.clone()).is_ok() {
                    shared
                        .stats
                        .shed_replies_total
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            if let Some(suppressed) = shared.log_verdict("subscription_full") {
                tracing::warn!(
                    subject = %subject,
                    suppressed,
                    "bus subscription full: message dropped"
                );
            }
        }
    }
    // Dropping `subscriber` here sends UNSUB; dropping `slot` frees the
    // subscription's slot and slow-consumer entry.
    drop(subscriber);
    drop(slot);
}

impl NatsBus {
    async fn subscribe_with(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Option<Bytes>,
    ) -> Result<Subscription, BusError> {
        if !valid_subject(subject) || queue_group.is_some_and(|g| !valid_queue_group(g)) {
            return Err(BusError::InvalidSubject);
        }
        self.refuse_disconnected()?;
        let shared = &self.inner.shared;
        let taken = shared.subscriptions.fetch_add(1, Ordering::Relaxed);
        let mut slot = Slot {
            shared: shared.clone(),
            sid: None,
        };
        if taken >= self.inner.options.subscriptions_max {
            return Err(BusError::SubjectsFull);
        }
        let deadline = Instant::now() + duration_ms(self.inner.options.connect_timeout_ms);
        let client = &self.inner.client;
        let subscribing = async {
            match queue_group {
                Some(group) => {
                    client
                        .queue_subscribe(subject.to_owned(), group.to_owned())
                        .await
                }
                None => client.subscribe(subject.to_owned()).await,
            }
        };
        let subscriber = match tokio::time::timeout_at(deadline, subscribing).await {
            Ok(Ok(subscriber)) => subscriber,
            Ok(Err(_)) | Err(_) => return Err(BusError::Disconnected),
        };
        if let Some(sid) = sid_of(&subscriber) {
            shared.slow().insert(
                sid,
                SlowEntry {
                    subject: subject.to_owned(),
                    events: 0,
                },
            );
            slot.sid = Some(sid);
        }
        // Dropping `subscriber` on failure unsubscribes again.
        self.sync(deadline).await?;
        let capacity_messages = capacity_messages.max(1);
        let (sender, receiver) = mpsc::channel(capacity_messages);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let sink = Sink {
            sender,
            queued_bytes: queued_bytes.clone(),
            // As LocalBus: the message bound's worth of the largest
            // payloads, capped so that the bound means something.
            queued_bytes_max: self
                .inner
                .payload_bytes_max
                .saturating_mul(capacity_messages.clamp(1, 64)),
        };
        let (stop_sender, stop) = oneshot::channel();
        tokio::spawn(forward(
            subscriber,
            subject.to_owned(),
            sink,
            stop,
            self.request_timeout_cap(),
            slot,
            overflow_reply.map(|reply| (reply, Arc::downgrade(&self.inner))),
        ));
        Ok(Subscription::new(
            receiver,
            queued_bytes,
            Box::new(Unsubscribe { _stop: stop_sender }),
        ))
    }
}

#[async_trait::async_trait]
impl Bus for NatsBus {
    fn publish(&self, subject: &str, reply: Option<&str>, payload: Bytes) -> Result<(), BusError> {
        self.publish_request(subject, reply, payload, None)
    }

    fn publish_request(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: Bytes,
        deadline: Option<Instant>,
    ) -> Result<(), BusError> {
        let shared = &self.inner.shared;
        if !valid_subject(subject) || reply.is_some_and(|r| !valid_subject(r)) {
            return Err(BusError::InvalidSubject);
        }
        self.refuse_too_large(&payload)?;
        self.refuse_disconnected()?;
        let len = payload.len();
        let queued = shared
            .publish_queued_bytes
            .fetch_add(len, Ordering::Relaxed);
        let full_bytes = queued + len > self.inner.options.publish_queue_bytes_max;
        let sent = !full_bytes
            && self
                .inner
                .publish
                .try_send(Outbound {
                    subject: subject.to_owned(),
                    reply: reply.map(str::to_owned),
                    payload,
                    deadline,
                })
                .is_ok();
        if !sent {
            // Full, or (only while the bus is being dropped) closed: either
            // way the message is not queued.
            shared
                .publish_queued_bytes
                .fetch_sub(len, Ordering::Relaxed);
            shared
                .nats
                .publish_queue_full_total
                .fetch_add(1, Ordering::Relaxed);
            if let Some(suppressed) = shared.log_verdict("publish_queue_full") {
                tracing::warn!(suppressed, "bus publish queue full: message refused");
            }
            return Err(BusError::Full);
        }
        shared.stats.published_total.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError> {
        self.subscribe_with(subject, queue_group, capacity_messages, None)
            .await
    }

    async fn subscribe_shedding(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Bytes,
    ) -> Result<Subscription, BusError> {
        self.subscribe_with(
            subject,
            queue_group,
            capacity_messages,
            Some(overflow_reply),
        )
        .await
    }

    async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        use async_nats::client::RequestErrorKind;
        let shared = &self.inner.shared;
        if !valid_subject(subject) {
            return Err(BusError::InvalidSubject);
        }
        self.refuse_too_large(&payload)?;
        self.refuse_disconnected()?;
        let timeout = timeout.min(self.request_timeout_cap());
        let deadline = Instant::now() + timeout;
        let headers = deadline_headers(timeout);
        let request = async_nats::Request::new()
            .payload(payload)
            .headers(headers)
            .timeout(Some(timeout));
        shared.stats.published_total.fetch_add(1, Ordering::Relaxed);
        // The outer timeout also covers the wait for room in async-nats's
        // command channel, which its own timeout does not.
        let result = tokio::time::timeout_at(
            deadline,
            self.inner.client.send_request(subject.to_owned(), request),
        )
        .await;
        let error = match result {
            Ok(Ok(answer)) => {
                let received = Instant::now();
                return Ok(Message {
                    subject: answer.subject.to_string(),
                    reply: answer.reply.map(|reply| reply.to_string()),
                    payload: answer.payload,
                    deadline: deadline_of(
                        answer.headers.as_ref(),
                        received,
                        self.request_timeout_cap(),
                        shared,
                    ),
                });
            }
            Err(_) => BusError::Timeout,
            Ok(Err(error)) => match error.kind() {
                RequestErrorKind::TimedOut => BusError::Timeout,
                RequestErrorKind::NoResponders => BusError::NoResponders,
                RequestErrorKind::MaxPayloadExceeded => BusError::TooLarge,
                RequestErrorKind::InvalidSubject => BusError::InvalidSubject,
                // The client's channels closed: the connection is gone.
                _ => BusError::Disconnected,
            },
        };
        let counter = match error {
            BusError::Timeout => Some(&shared.stats.request_timeouts_total),
            BusError::NoResponders => Some(&shared.stats.no_responders_total),
            BusError::TooLarge => Some(&shared.stats.too_large_total),
            BusError::Disconnected => Some(&shared.nats.disconnected_refusals_total),
            _ => None,
        };
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Err(error)
    }

    fn stats(&self) -> &BusStats {
        &self.inner.shared.stats
    }

    fn transport_counters(&self) -> Vec<(&'static str, &'static str, &AtomicU64)> {
        let n = &self.inner.shared.nats;
        vec![
            (
                "guildhall_nats_publish_queue_full_total",
                "NATS publishes refused because the publish queue was full.",
                &n.publish_queue_full_total,
            ),
            (
                "guildhall_nats_disconnected_refusals_total",
                "NATS publishes, subscribes and requests refused while disconnected.",
                &n.disconnected_refusals_total,
            ),
            (
                "guildhall_nats_publish_errors_total",
                "NATS publishes the client refused after they left the queue.",
                &n.publish_errors_total,
            ),
            (
                "guildhall_nats_slow_consumer_events_total",
                "Slow-consumer events the NATS client reported (a message dropped).",
                &n.slow_consumer_events_total,
            ),
            (
                "guildhall_nats_disconnects_total",
                "NATS connection losses.",
                &n.disconnects_total,
            ),
            (
                "guildhall_nats_connects_total",
                "NATS (re)connections, the first one included.",
                &n.connects_total,
            ),
            (
                "guildhall_nats_deadline_header_invalid_total",
                "Received NATS deadline headers that did not parse.",
                &n.deadline_header_invalid_total,
            ),
            (
                "guildhall_nats_deadline_clock_expired_total",
                "Requests that arrived past their caller's wall-clock deadline (a pause, or clock skew).",
                &n.deadline_clock_expired_total,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_broken_options_are_all_reported() {
        assert!(NatsOptions::default().validate().is_empty());
        let broken = NatsOptions {
            publish_queue_messages_max: 0,
            publish_queue_bytes_max: 10,
            payload_bytes_max: 100,
            reconnect_backoff_cap_ms: 1,
            ..NatsOptions::default()
        }
        .validate();
        assert_eq!(broken.len(), 3, "{broken:?}");
    }

    #[test]
    fn subjects_follow_the_nats_rules() {
        assert!(valid_subject("guild.1.events"));
        assert!(!valid_subject(""));
        assert!(!valid_subject("a..b"));
        assert!(!valid_subject("a b"));
        assert!(valid_queue_group("workers"));
        assert!(!valid_queue_group("two words"));
    }
}
