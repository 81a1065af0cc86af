//! The bus: subjects, bounded subscriptions, queue groups, request/reply.
//!
//! Roles never call each other's functions: they publish bytes on a subject
//! and whoever subscribed receives them. [`LocalBus`] is the in-process
//! implementation embedded mode runs on; cluster mode puts NATS behind the
//! same trait (subjects, queue groups and reply inboxes are NATS's model, so
//! the mapping is one to one).
//!
//! Every subscription is bounded twice, in messages and in bytes. A publish
//! that finds a subscriber full drops the message *for that subscriber*,
//! counts it and reports [`BusError::Full`]; it never waits. That is the
//! NATS slow-consumer rule, and it means a stream that must not lose
//! messages silently needs its own sequence numbers (the guild → gateway
//! event streams carry them and resynchronise on a gap).
//!
//! ```
//! use guildhall_cluster::bus::{Bus, LocalBus};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let bus = LocalBus::new(1 << 20);
//! let mut service = bus.subscribe("echo", None, 16).await.unwrap();
//! tokio::spawn({
//!     let bus = bus.clone();
//!     async move {
//!         while let Some(message) = service.next().await {
//!             let reply = message.reply.unwrap();
//!             bus.publish(&reply, None, message.payload).unwrap();
//!         }
//!     }
//! });
//! let answer = bus.request("echo", "hi".into(), std::time::Duration::from_secs(5)).await.unwrap();
//! assert_eq!(&answer.payload[..], b"hi");
//! # });
//! ```

use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

/// Subjects (with at least one subscriber) an in-process bus holds, reply
/// inboxes included. When hit: new subscriptions are refused
/// ([`BusError::SubjectsFull`]); existing ones keep working.
pub const LOCAL_BUS_SUBJECTS_MAX: usize = 262_144;

/// A message as a subscriber receives it.
#[derive(Clone, Debug)]
pub struct Message {
    /// Where it was published.
    pub subject: String,
    /// Where to answer, for a request.
    pub reply: Option<String>,
    /// The body (an envelope of `guildhall_proto::bus`).
    pub payload: Bytes,
    /// For a request: when its caller stops waiting. The deadline travels
    /// with the request (across processes as the time left, in a header),
    /// so a server never starts work whose answer nobody will read.
    pub deadline: Option<tokio::time::Instant>,
}

impl Message {
    /// Whether the caller has already given up on this request.
    pub fn expired(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| deadline <= tokio::time::Instant::now())
    }
}

/// What can go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    /// Nobody subscribes to the subject (NATS's "no responders").
    #[error("no responders")]
    NoResponders,
    /// A subscriber's queue was full: the message was dropped for it.
    #[error("subscriber full")]
    Full,
    /// The payload exceeds the bus's maximum.
    #[error("payload too large")]
    TooLarge,
    /// No answer within the deadline.
    #[error("timeout")]
    Timeout,
    /// The bus holds its maximum of subjects.
    #[error("too many subjects")]
    SubjectsFull,
    /// The connection to the bus is down (the client reconnects on its
    /// own; meanwhile callers fail fast instead of queuing).
    #[error("bus disconnected")]
    Disconnected,
    /// The subject or queue group is not one the transport can carry
    /// (NATS: empty, whitespace, empty tokens). `LocalBus` takes any string.
    #[error("invalid subject")]
    InvalidSubject,
}

/// Counters of a bus, read by `/metrics`.
#[derive(Debug, Default)]
pub struct BusStats {
    /// Messages published.
    pub published_total: AtomicU64,
    /// Deliveries dropped because a subscriber was full.
    pub dropped_full_total: AtomicU64,
    /// Publishes that found no subscriber.
    pub no_responders_total: AtomicU64,
    /// Publishes refused as too large.
    pub too_large_total: AtomicU64,
    /// Requests that timed out.
    pub request_timeouts_total: AtomicU64,
    /// Requests a full shedding subscription answered at once with its
    /// overflow reply instead of dropping them.
    pub shed_replies_total: AtomicU64,
}

/// A message bus.
///
/// `publish` never waits (a real transport queues it on a bounded
/// outbound buffer and refuses with [`BusError::Full`] when that is full);
/// `subscribe` and `request` are asynchronous because on a real transport
/// they are round trips: a subscription is live once `subscribe` returns.
#[async_trait::async_trait]
pub trait Bus: Send + Sync + std::fmt::Debug + 'static {
    /// Delivers `payload` to every plain subscriber of `subject` and to one
    /// member of each queue group. Never waits.
    fn publish(&self, subject: &str, reply: Option<&str>, payload: Bytes) -> Result<(), BusError>;
    /// As [`Bus::publish`], for a request passed on to another server
    /// (forwarded, handed over) with its caller's `deadline`, so the next
    /// server sees it as [`Message::deadline`] and does not start what
    /// nobody waits for. Without a transport of its own for it, the
    /// deadline is dropped (the request then looks as if sent without one).
    fn publish_request(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), BusError> {
        let _ = deadline;
        self.publish(subject, reply, payload)
    }
    /// Subscribes to `subject` (exact match), alone or in `queue_group`,
    /// holding at most `capacity_messages` undelivered messages. Dropping
    /// the subscription unsubscribes.
    async fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError>;
    /// As [`Bus::subscribe`], for a server of requests: a request that
    /// finds the subscription full is answered at once with
    /// `overflow_reply` (the role's "overloaded, retry later" answer)
    /// instead of being dropped to time out. Seed 000: callers of an
    /// overloaded users service waited out their deadlines, then retried
    /// into the same overload; a fast refusal lets them back off instead.
    async fn subscribe_shedding(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Bytes,
    ) -> Result<Subscription, BusError>;
    /// Publishes `payload` to `subject` and waits at most `timeout` for one
    /// answer. The server sees the deadline ([`Message::deadline`]).
    async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Message, BusError>;
    /// Counters.
    fn stats(&self) -> &BusStats;
    /// The transport's own counters beyond [`BusStats`], as
    /// (metric name, help, counter) for `/metrics`: NATS's reconnects,
    /// slow consumers, refusals while disconnected. None in process.
    fn transport_counters(&self) -> Vec<(&'static str, &'static str, &AtomicU64)> {
        Vec::new()
    }
}

/// A subscription: a bounded queue of messages.
pub struct Subscription {
    receiver: mpsc::Receiver<Message>,
    queued_bytes: Arc<AtomicUsize>,
    _unsubscribe: Box<dyn Send + Sync>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("queued_bytes", &self.queued_bytes.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Subscription {
    /// Builds a subscription from its queue, the byte count its publishers
    /// add to, and a guard whose drop unsubscribes (for implementations).
    pub fn new(
        receiver: mpsc::Receiver<Message>,
        queued_bytes: Arc<AtomicUsize>,
        unsubscribe: Box<dyn Send + Sync>,
    ) -> Self {
        Self {
            receiver,
            queued_bytes,
            _unsubscribe: unsubscribe,
        }
    }

    /// The next message; `None` once the bus is gone.
    pub async fn next(&mut self) -> Option<Message> {
        let message = self.receiver.recv().await?;
        self.queued_bytes
            .fetch_sub(message.payload.len(), Ordering::Relaxed);
        Some(message)
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.receiver.len()
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> bool {
        self.receiver.is_empty()
    }
}

struct Subscriber {
    id: u64,
    queue_group: Option<String>,
    overflow_reply: Option<Bytes>,
    sender: mpsc::Sender<Message>,
    queued_bytes: Arc<AtomicUsize>,
    queued_bytes_max: usize,
}

impl Subscriber {
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

#[derive(Default)]
struct Table {
    subjects: HashMap<String, Vec<Subscriber>>,
}

struct Inner {
    table: RwLock<Table>,
    next_id: AtomicU64,
    round_robin: AtomicUsize,
    payload_bytes_max: usize,
    stats: BusStats,
}

impl Inner {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table> {
        // The table is plain data, consistent between statements: a panic
        // elsewhere cannot leave it half-updated.
        self.table
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table> {
        self.table
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The in-process bus: a subject table of bounded channels.
#[derive(Clone)]
pub struct LocalBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBus")
            .field("subjects", &self.inner.read().subjects.len())
            .finish_non_exhaustive()
    }
}

struct Unsubscribe {
    inner: Weak<Inner>,
    subject: String,
    id: u64,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let mut table = inner.write();
        if let Some(subscribers) = table.subjects.get_mut(&self.subject) {
            subscribers.retain(|s| s.id != self.id);
            if subscribers.is_empty() {
                table.subjects.remove(&self.subject);
            }
        }
    }
}

impl LocalBus {
    /// An empty bus refusing payloads over `payload_bytes_max`.
    pub fn new(payload_bytes_max: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                table: RwLock::new(Table::default()),
                next_id: AtomicU64::new(1),
                round_robin: AtomicUsize::new(0),
                payload_bytes_max,
                stats: BusStats::default(),
            }),
        }
    }
}

impl LocalBus {
    fn deliver(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), BusError> {
        let stats = &self.inner.stats;
        if payload.len() > self.inner.payload_bytes_max {
            stats.too_large_total.fetch_add(1, Ordering::Relaxed);
            return Err(BusError::TooLarge);
        }
        stats.published_total.fetch_add(1, Ordering::Relaxed);
        let table = self.inner.read();
        let Some(subscribers) = table.subjects.get(subject) else {
            stats.no_responders_total.fetch_add(1, Ordering::Relaxed);
            return Err(BusError::NoResponders);
        };
        let message = Message {
            subject: subject.to_owned(),
            reply: reply.map(str::to_owned),
            payload,
            deadline,
        };
        let mut dropped = 0u64;
        // A full shedding subscriber answers the request it cannot take.
        let mut shed: Vec<Bytes> = Vec::new();
        let mut refused = |subscriber: &Subscriber| {
            if reply.is_some()
                && let Some(overflow) = &subscriber.overflow_reply
            {
                shed.push(overflow.clone());
            }
        };
        // Plain subscribers each get a copy (a refcount on the payload).
        for subscriber in subscribers.iter().filter(|s| s.queue_group.is_none()) {
            if !subscriber.offer(message.clone()) {
                dropped += 1;
                refused(subscriber);
            }
        }
        // Each queue group gets one copy: the members in turn, skipping full
        // ones, so one slow member does not stall its group.
        let mut groups: Vec<&str> = subscribers
            .iter()
            .filter_map(|s| s.queue_group.as_deref())
            .collect();
        groups.sort_unstable();
        groups.dedup();
        for group in groups {
            let members: Vec<&Subscriber> = subscribers
                .iter()
                .filter(|s| s.queue_group.as_deref() == Some(group))
                .collect();
            let start = self.inner.round_robin.fetch_add(1, Ordering::Relaxed);
            let delivered = (0..members.len())
                .any(|i| members[(start + i) % members.len()].offer(message.clone()));
            if !delivered {
                dropped += 1;
                refused(members[start % members.len()]);
            }
        }
        drop(table);
        // A drop that was answered is not a loss: the caller has its
        // (refusing) answer. (`shed` only holds answers to requests.)
        let answered = shed.len() as u64;
        if let Some(reply) = reply {
            for overflow in shed {
                stats.shed_replies_total.fetch_add(1, Ordering::Relaxed);
                // Best effort: a caller that is gone has nothing to hear.
                let _ = self.deliver(reply, None, overflow, None);
            }
        }
        if dropped > 0 {
            stats
                .dropped_full_total
                .fetch_add(dropped, Ordering::Relaxed);
            if dropped > answered {
                return Err(BusError::Full);
            }
        }
        Ok(())
    }

    fn subscribe_now(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError> {
        self.subscribe_with(subject, queue_group, capacity_messages, None)
    }

    fn subscribe_with(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Option<Bytes>,
    ) -> Result<Subscription, BusError> {
        let (sender, receiver) = mpsc::channel(capacity_messages.max(1));
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let queued_bytes = Arc::new(AtomicUsize::new(0));
        let mut table = self.inner.write();
        if !table.subjects.contains_key(subject) && table.subjects.len() >= LOCAL_BUS_SUBJECTS_MAX {
            return Err(BusError::SubjectsFull);
        }
        table
            .subjects
            .entry(subject.to_owned())
            .or_default()
            .push(Subscriber {
                id,
                queue_group: queue_group.map(str::to_owned),
                overflow_reply,
                sender,
                queued_bytes: queued_bytes.clone(),
                // A subscription may hold its message bound's worth of the
                // largest payloads, capped so that the bound means something.
                queued_bytes_max: self
                    .inner
                    .payload_bytes_max
                    .saturating_mul(capacity_messages.clamp(1, 64)),
            });
        Ok(Subscription::new(
            receiver,
            queued_bytes,
            Box::new(Unsubscribe {
                inner: Arc::downgrade(&self.inner),
                subject: subject.to_owned(),
                id,
            }),
        ))
    }

    fn new_inbox(&self) -> String {
        format!(
            "_INBOX.{}",
            self.inner.next_id.fetch_add(1, Ordering::Relaxed)
        )
    }
}

#[async_trait::async_trait]
impl Bus for LocalBus {
    fn publish(&self, subject: &str, reply: Option<&str>, payload: Bytes) -> Result<(), BusError> {
        self.deliver(subject, reply, payload, None)
    }

    fn publish_request(
        &self,
        subject: &str,
        reply: Option<&str>,
        payload: Bytes,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), BusError> {
        self.deliver(subject, reply, payload, deadline)
    }

    async fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError> {
        self.subscribe_now(subject, queue_group, capacity_messages)
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
    }

    async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        let inbox = self.new_inbox();
        let mut answers = self.subscribe_now(&inbox, None, 1)?;
        let deadline = tokio::time::Instant::now() + timeout;
        self.deliver(subject, Some(&inbox), payload, Some(deadline))?;
        match tokio::time::timeout_at(deadline, answers.next()).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(BusError::NoResponders),
            Err(_) => {
                self.inner
                    .stats
                    .request_timeouts_total
                    .fetch_add(1, Ordering::Relaxed);
                Err(BusError::Timeout)
            }
        }
    }

    fn stats(&self) -> &BusStats {
        &self.inner.stats
    }
}

/// A bus that drops a seeded, reproducible share of the messages published
/// on subjects starting with a prefix: the fault-injecting transport that
/// tests use to prove a stream recovers from loss.
#[derive(Debug)]
pub struct DroppingBus {
    inner: Arc<dyn Bus>,
    prefix: String,
    drop_per_million: AtomicU64,
    seed: u64,
    counter: AtomicU64,
    /// Whether requests to the prefix are lost too (see
    /// [`DroppingBus::set_drop_requests`]).
    drop_requests: std::sync::atomic::AtomicBool,
    /// Whether publishes to the prefix are refused (see
    /// [`DroppingBus::set_refuse`]).
    refuse: std::sync::atomic::AtomicBool,
    /// Messages this wrapper dropped.
    pub dropped_total: AtomicU64,
    /// Publishes this wrapper refused.
    pub refused_total: AtomicU64,
    /// Requests whose answers are lost (see
    /// [`DroppingBus::set_lose_answers`]).
    lose_answers: std::sync::Mutex<Option<Vec<u8>>>,
    /// Answers this wrapper lost.
    pub answers_lost_total: AtomicU64,
    /// Requests that are lost before delivery (see
    /// [`DroppingBus::set_lose_requests`]).
    lose_requests: std::sync::Mutex<Option<Vec<u8>>>,
    /// Requests this wrapper lost.
    pub requests_lost_total: AtomicU64,
    /// Publishes that are lost in transit (see
    /// [`DroppingBus::set_lose_publishes`]).
    lose_publishes: std::sync::Mutex<Option<Vec<u8>>>,
    /// Publishes this wrapper lost by their content.
    pub publishes_lost_total: AtomicU64,
    /// Requests that wait before delivery until the hold is lifted (see
    /// [`DroppingBus::set_hold_requests`]).
    hold_requests: std::sync::Mutex<Option<Vec<u8>>>,
    /// Woken when the hold changes.
    hold_lifted: tokio::sync::Notify,
    /// Requests this wrapper held (counted as each starts waiting).
    pub requests_held_total: AtomicU64,
}

impl DroppingBus {
    /// Wraps `inner`, dropping `drop_per_million` of the messages whose
    /// subject starts with `prefix`, decided by `seed`.
    pub fn new(inner: Arc<dyn Bus>, prefix: &str, drop_per_million: u64, seed: u64) -> Self {
        Self {
            inner,
            prefix: prefix.to_owned(),
            drop_per_million: AtomicU64::new(drop_per_million),
            seed,
            counter: AtomicU64::new(0),
            drop_requests: std::sync::atomic::AtomicBool::new(false),
            refuse: std::sync::atomic::AtomicBool::new(false),
            dropped_total: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
            lose_answers: std::sync::Mutex::new(None),
            answers_lost_total: AtomicU64::new(0),
            lose_requests: std::sync::Mutex::new(None),
            requests_lost_total: AtomicU64::new(0),
            lose_publishes: std::sync::Mutex::new(None),
            publishes_lost_total: AtomicU64::new(0),
            hold_requests: std::sync::Mutex::new(None),
            hold_lifted: tokio::sync::Notify::new(),
            requests_held_total: AtomicU64::new(0),
        }
    }

    /// While `Some(needle)`: a publish to the prefix whose payload contains
    /// `needle` is lost in transit (the publisher is told it went out).
    pub fn set_lose_publishes(&self, needle: Option<Vec<u8>>) {
        *self
            .lose_publishes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = needle;
    }

    /// While `Some(needle)`: a request to the prefix whose payload contains
    /// `needle` waits before it is delivered, until the hold is lifted
    /// (`None`, or another needle) or its own timeout passes: a request
    /// slow in transit, so a test can act between two protocol steps.
    pub fn set_hold_requests(&self, needle: Option<Vec<u8>>) {
        *self
            .hold_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = needle;
        self.hold_lifted.notify_waiters();
    }

    /// While `Some(needle)`: a request to the prefix whose payload contains
    /// `needle` is lost before it is delivered (nobody handles it; its
    /// caller waits out its timeout).
    pub fn set_lose_requests(&self, needle: Option<Vec<u8>>) {
        *self
            .lose_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = needle;
    }

    /// While `Some(needle)`: a request to the prefix whose payload contains
    /// `needle` is delivered and handled, but its answer is lost on the way
    /// back (the caller waits out its timeout): the handler acted and the
    /// caller cannot know.
    pub fn set_lose_answers(&self, needle: Option<Vec<u8>>) {
        *self
            .lose_answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = needle;
    }

    fn matches(
        &self,
        needle: &std::sync::Mutex<Option<Vec<u8>>>,
        subject: &str,
        payload: &[u8],
    ) -> bool {
        if !subject.starts_with(&self.prefix) {
            return false;
        }
        let needle = needle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        needle.as_ref().is_some_and(|needle| {
            !needle.is_empty()
                && payload
                    .windows(needle.len())
                    .any(|w| w == needle.as_slice())
        })
    }

    /// Refuses every publish to the prefix with
    /// [`BusError::Disconnected`] while set: what a NATS client answers
    /// while it reconnects (its buffer full), so the publisher knows,
    /// unlike a loss in transit.
    pub fn set_refuse(&self, refuse: bool) {
        self.refuse.store(refuse, Ordering::Relaxed);
    }

    /// Loses requests to the prefix as well, by the same seeded share: a
    /// lost request is answered by nobody, so its caller waits out its
    /// timeout (a role that is down, not one that refuses).
    pub fn set_drop_requests(&self, drop_requests: bool) {
        self.drop_requests.store(drop_requests, Ordering::Relaxed);
    }

    fn drops(&self, subject: &str) -> bool {
        if !subject.starts_with(&self.prefix) {
            return false;
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let dropped = splitmix64(self.seed ^ n.wrapping_mul(0x2545_F491_4F6C_DD1D)) % 1_000_000
            < self.drop_per_million.load(Ordering::Relaxed);
        if dropped {
            self.dropped_total.fetch_add(1, Ordering::Relaxed);
        }
        dropped
    }

    /// Changes the share dropped from now on (0 heals the transport).
    pub fn set_drop_per_million(&self, drop_per_million: u64) {
        self.drop_per_million
            .store(drop_per_million, Ordering::Relaxed);
    }
}

/// SplitMix64: a stateless mix of the seed and a counter, so each decision
/// is reproducible from the seed alone without a generator behind a lock
/// (a dozen lines do not justify a dependency in this crate).
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[async_trait::async_trait]
impl Bus for DroppingBus {
    fn publish(&self, subject: &str, reply: Option<&str>, payload: Bytes) -> Result<(), BusError> {
        if self.refuse.load(Ordering::Relaxed) && subject.starts_with(&self.prefix) {
            self.refused_total.fetch_add(1, Ordering::Relaxed);
            return Err(BusError::Disconnected);
        }
        if self.matches(&self.lose_publishes, subject, &payload) {
            self.publishes_lost_total.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        if self.drops(subject) {
            // Lost in transit: the publisher cannot tell.
            return Ok(());
        }
        self.inner.publish(subject, reply, payload)
    }

    async fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError> {
        self.inner
            .subscribe(subject, queue_group, capacity_messages)
            .await
    }

    async fn subscribe_shedding(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Bytes,
    ) -> Result<Subscription, BusError> {
        self.inner
            .subscribe_shedding(subject, queue_group, capacity_messages, overflow_reply)
            .await
    }

    /// Requests are not dropped unless [`DroppingBus::set_drop_requests`]
    /// says so: the wrapper targets the numbered streams.
    async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        if self.drop_requests.load(Ordering::Relaxed) && self.drops(subject) {
            tokio::time::sleep(timeout).await;
            return Err(BusError::Timeout);
        }
        if self.matches(&self.lose_requests, subject, &payload) {
            self.requests_lost_total.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(timeout).await;
            return Err(BusError::Timeout);
        }
        if self.matches(&self.hold_requests, subject, &payload) {
            self.requests_held_total.fetch_add(1, Ordering::Relaxed);
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                // Created before the check: a lift between the two wakes it.
                let lifted = self.hold_lifted.notified();
                if !self.matches(&self.hold_requests, subject, &payload) {
                    break;
                }
                if tokio::time::timeout_at(deadline, lifted).await.is_err() {
                    return Err(BusError::Timeout);
                }
            }
            let timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
            return self.inner.request(subject, payload, timeout).await;
        }
        if self.matches(&self.lose_answers, subject, &payload) {
            let deadline = tokio::time::Instant::now() + timeout;
            let _lost = self.inner.request(subject, payload, timeout).await;
            self.answers_lost_total.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep_until(deadline).await;
            return Err(BusError::Timeout);
        }
        self.inner.request(subject, payload, timeout).await
    }

    fn stats(&self) -> &BusStats {
        self.inner.stats()
    }

    fn transport_counters(&self) -> Vec<(&'static str, &'static str, &AtomicU64)> {
        self.inner.transport_counters()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn plain_subscribers_each_get_a_copy_and_groups_one() {
        rt().block_on(async {
            let bus = LocalBus::new(1024);
            let mut a = bus.subscribe_now("s", None, 8).unwrap();
            let mut b = bus.subscribe_now("s", None, 8).unwrap();
            let mut g1 = bus.subscribe_now("s", Some("workers"), 8).unwrap();
            let mut g2 = bus.subscribe_now("s", Some("workers"), 8).unwrap();
            for i in 0..4u8 {
                bus.publish("s", None, Bytes::from(vec![i])).unwrap();
            }
            for sub in [&mut a, &mut b] {
                for i in 0..4u8 {
                    assert_eq!(sub.next().await.unwrap().payload[0], i);
                }
            }
            // The group's members share the four messages between them.
            assert_eq!(g1.len() + g2.len(), 4);
            assert!(g1.next().await.is_some() && g2.next().await.is_some());
        });
    }

    #[test]
    fn a_full_subscriber_drops_and_counts_without_blocking_others() {
        rt().block_on(async {
            let bus = LocalBus::new(1024);
            let slow = bus.subscribe_now("s", None, 2).unwrap();
            let mut fast = bus.subscribe_now("s", None, 16).unwrap();
            let results: Vec<_> = (0..5)
                .map(|_| bus.publish("s", None, Bytes::from_static(b"x")))
                .collect();
            assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 2);
            assert_eq!(
                results
                    .iter()
                    .filter(|r| **r == Err(BusError::Full))
                    .count(),
                3
            );
            assert_eq!(bus.stats().dropped_full_total.load(Ordering::Relaxed), 3);
            assert_eq!(slow.len(), 2);
            for _ in 0..5 {
                assert!(fast.next().await.is_some());
            }
        });
    }

    #[test]
    fn bytes_are_bounded_as_well_as_messages() {
        let bus = LocalBus::new(100);
        let sub = bus.subscribe_now("s", None, 1000).unwrap();
        // 64 × 100 bytes at most, however many messages the bound allows.
        let accepted = (0..200)
            .filter(|_| bus.publish("s", None, Bytes::from(vec![0u8; 100])).is_ok())
            .count();
        assert_eq!(accepted, 64);
        assert_eq!(sub.len(), 64);
        assert_eq!(
            bus.publish("s", None, Bytes::from(vec![0u8; 101])),
            Err(BusError::TooLarge)
        );
    }

    #[test]
    fn a_full_shedding_subscription_answers_requests_at_once() {
        rt().block_on(async {
            let bus = LocalBus::new(1024);
            let _server = bus
                .subscribe_shedding("svc", Some("g"), 1, Bytes::from_static(b"busy"))
                .await
                .unwrap();
            // The first request fills the server's queue; the second is
            // refused at once, long before its deadline.
            let first = {
                let bus = bus.clone();
                tokio::spawn(async move {
                    bus.request("svc", Bytes::new(), Duration::from_millis(200))
                        .await
                })
            };
            tokio::task::yield_now().await;
            let started = tokio::time::Instant::now();
            let refused = bus
                .request("svc", Bytes::new(), Duration::from_secs(60))
                .await
                .unwrap();
            assert_eq!(&refused.payload[..], b"busy");
            assert!(started.elapsed() < Duration::from_secs(60));
            assert_eq!(bus.stats().shed_replies_total.load(Ordering::Relaxed), 1);
            assert_eq!(first.await.unwrap().unwrap_err(), BusError::Timeout);
            // A plain publish to the full subscription is still just lost.
            assert_eq!(bus.publish("svc", None, Bytes::new()), Err(BusError::Full));
            assert_eq!(bus.stats().shed_replies_total.load(Ordering::Relaxed), 1);
        });
    }

    #[test]
    fn dropping_a_subscription_unsubscribes() {
        let bus = LocalBus::new(1024);
        let sub = bus.subscribe_now("s", None, 1).unwrap();
        assert!(bus.publish("s", None, Bytes::new()).is_ok());
        drop(sub);
        assert_eq!(
            bus.publish("s", None, Bytes::new()),
            Err(BusError::NoResponders)
        );
        assert_eq!(bus.inner.read().subjects.len(), 0);
    }

    #[test]
    fn a_request_without_an_answer_times_out_and_leaves_no_inbox() {
        rt().block_on(async {
            let bus = LocalBus::new(1024);
            let _silent = bus.subscribe_now("svc", None, 4).unwrap();
            let error = bus
                .request("svc", Bytes::new(), Duration::from_millis(1))
                .await
                .unwrap_err();
            assert_eq!(error, BusError::Timeout);
            assert_eq!(
                bus.request("nobody", Bytes::new(), Duration::from_secs(1))
                    .await
                    .unwrap_err(),
                BusError::NoResponders
            );
            // Only the service's subject remains.
            assert_eq!(bus.inner.read().subjects.len(), 1);
        });
    }

    #[test]
    fn a_request_carries_its_deadline_to_the_server() {
        rt().block_on(async {
            let bus = LocalBus::new(1024);
            let mut server = bus.subscribe_now("svc", None, 4).unwrap();
            let caller = {
                let bus = bus.clone();
                tokio::spawn(async move {
                    bus.request("svc", Bytes::new(), Duration::from_secs(30))
                        .await
                })
            };
            let request = server.next().await.unwrap();
            let left = request.deadline.unwrap() - tokio::time::Instant::now();
            assert!(left <= Duration::from_secs(30) && !request.expired());
            bus.publish(request.reply.as_deref().unwrap(), None, Bytes::new())
                .unwrap();
            assert!(caller.await.unwrap().is_ok());
        });
    }

    #[test]
    fn the_dropping_bus_is_reproducible_from_its_seed() {
        let run = |seed| {
            let local = LocalBus::new(1024);
            let sub = local.subscribe_now("ev.1", None, 10_000).unwrap();
            let _other = local.subscribe_now("other", None, 10_000).unwrap();
            let bus = DroppingBus::new(Arc::new(local), "ev.", 100_000, seed);
            for _ in 0..1000 {
                bus.publish("ev.1", None, Bytes::new()).unwrap();
                bus.publish("other", None, Bytes::new()).unwrap();
            }
            (sub.len(), bus.dropped_total.load(Ordering::Relaxed))
        };
        let (kept, dropped) = run(7);
        assert_eq!(kept as u64 + dropped, 1000);
        // About 10 % dropped, and the same again with the same seed.
        assert!((50..150).contains(&dropped), "dropped {dropped}");
        assert_eq!(run(7), (kept, dropped));
    }
}
