//! Envelopes the roles exchange over the bus, and the subjects they use.
//!
//! The guild → gateway direction is a *stream* per (guild, gateway node):
//! the guild's owner numbers each event it sends to a node, starting at 1,
//! under an epoch that identifies the owner's incarnation. A bus may drop a
//! message for a slow subscriber (NATS does, and so does the in-process
//! bus); an event dropped there never reaches any session's replay buffer,
//! so RESUME could not recover it. The gateway therefore checks that each
//! stream advances by exactly one, and on a gap re-subscribes the guild's
//! sessions (a fresh GUILD_CREATE each) instead of serving a silently
//! incomplete stream. [`StreamCheck`] is that rule, pure.
//!
//! Envelopes are JSON, with the dispatch data carried as raw JSON: the
//! owner encodes an event once, each gateway node copies it once into its
//! shared frame, and no one re-serialises it per session.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Version of every envelope here; a node refuses other versions.
pub const ENVELOPE_VERSION: u32 = 1;

/// Subject of one partition of a gateway node's event streams. A guild's
/// stream always uses the same partition, so its order is kept while
/// different guilds fan out in parallel.
pub fn gateway_events_subject(node: &str, partition: usize) -> String {
    format!("gw.{node}.events.{partition}")
}

/// The partition of `guild_id`'s stream among `partitions`.
pub fn partition_of(guild_id: i64, partitions: usize) -> usize {
    (guild_id.unsigned_abs() % partitions.max(1) as u64) as usize
}

/// A message to a gateway node.
#[derive(Debug, Serialize, Deserialize)]
pub struct NodeEvent {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// What it carries.
    pub body: NodeEventBody,
}

/// What a gateway node is told.
#[derive(Debug, Serialize, Deserialize)]
// Externally tagged: raw JSON data cannot pass through the buffering an
// internally tagged enum needs.
#[serde(rename_all = "snake_case")]
pub enum NodeEventBody {
    /// One numbered event of a guild's stream to this node.
    Stream(StreamEvent),
    /// A dispatch for every local session of some users (direct messages,
    /// USER_UPDATE): no guild owner, no stream.
    Users {
        /// The users.
        user_ids: Vec<i64>,
        /// The guild the event names (an interaction in a guild), which
        /// picks the shard of sharded sessions; none: shard 0 only.
        /// Optional, so envelopes of older nodes still decode.
        #[serde(default)]
        guild_id: Option<i64>,
        /// The intent a session needs (0: none).
        required_intent: u64,
        /// Event name.
        name: String,
        /// Event data.
        data: Box<RawValue>,
    },
    /// A dispatch for one session of this node (VOICE_SERVER_UPDATE when
    /// its call was re-placed on another SFU). A session that is not here
    /// (ended, moved) drops it: the client re-sends op 4 on reconnect.
    Session {
        /// The session id.
        session_id: String,
        /// The user the session must belong to (an id a client named:
        /// another user's session hears nothing). Absent in envelopes of
        /// older nodes and for ids the server chose.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user_id: Option<i64>,
        /// Event name.
        name: String,
        /// Event data.
        data: Box<RawValue>,
    },
    /// `user_id` joined `guild_id`: the node's sessions of that user ask
    /// the guild's owner to subscribe them.
    Joined {
        /// The guild.
        guild_id: i64,
        /// The user.
        user_id: i64,
    },
    /// The tail of a guild's stream to this node: the owner's epoch and the
    /// last sequence it sent, sent once the stream has been quiet for
    /// `guild_stream_tail_after_ms` (a few times, further apart). Numbered
    /// like nothing: a node whose position is behind it lost the stream's
    /// last messages in transit and resynchronises the guild now, instead
    /// of at the guild's next event (which may never come).
    StreamTail {
        /// The guild.
        guild_id: i64,
        /// The owner's incarnation.
        epoch: u64,
        /// The last sequence sent on this node's stream.
        seq: u64,
    },
    /// Every session of `user_id` ends for good: its socket is closed with
    /// 4004 (its token no longer authenticates) and it is not resumable
    /// (a bot that hit its session start limit, as Discord documents).
    Terminate {
        /// The user.
        user_id: i64,
    },
}

/// One event of a (guild, gateway node) stream.
#[derive(Debug, Serialize, Deserialize)]
pub struct StreamEvent {
    /// The guild.
    pub guild_id: i64,
    /// The owner's incarnation; a new epoch restarts numbering at 1.
    pub epoch: u64,
    /// Position in this node's stream of this guild, from 1.
    pub seq: u64,
    /// What happened.
    pub body: StreamBody,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// What a guild stream carries.
#[derive(Clone, Debug, Serialize, Deserialize)]
// Externally tagged: raw JSON data cannot pass through the buffering an
// internally tagged enum needs.
#[serde(rename_all = "snake_case")]
pub enum StreamBody {
    /// A dispatch for the subscribed sessions holding `required_intent`.
    Dispatch {
        /// Event name.
        name: String,
        /// The intent a session needs.
        required_intent: u64,
        /// Event data.
        data: Box<RawValue>,
        /// The data for sessions without MESSAGE_CONTENT (messages only).
        blanked: Option<Box<RawValue>>,
        /// Users who get `data` regardless (author, mentioned users).
        content_exempt: Vec<i64>,
        /// Users with sessions on this node who may not view the event's
        /// channel, ascending: their sessions do not receive it (the owner
        /// decides who sees a channel; the gateway holds no guild state).
        /// Absent from an older owner: nobody is hidden.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        hidden_from: Vec<i64>,
        /// The publish this dispatch fans out (0: an event of the owner's
        /// own). A new owner after a crash may fan out again an event its
        /// dead predecessor had sent but not confirmed; the gateway drops
        /// a publish id it delivered lately for the guild. Absent from an
        /// older owner: 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        publish_id: u64,
    },
    /// Subscribe a session: its GUILD_CREATE first (when it holds GUILDS).
    Subscribe {
        /// The session.
        session_id: String,
        /// GUILD_CREATE's data.
        guild_create: Option<Box<RawValue>>,
    },
    /// A session of this node has moved to another node (a RESUME there):
    /// every event of the guild before this one in the stream was for this
    /// node to record; from here on the owner sends the session's events to
    /// the new node's stream (which gets [`StreamBody::Adopt`]).
    Moved {
        /// The session.
        session_id: String,
    },
    /// A session moving here from another node: deliver the guild's events
    /// to it from here on, with no GUILD_CREATE (it has the guild; what it
    /// missed travels in the handoff).
    Adopt {
        /// The session.
        session_id: String,
    },
    /// Users lost the guild (left, kicked; all of them when `user_ids` is
    /// empty: the guild was deleted): unsubscribe their sessions and send
    /// GUILD_DELETE to those holding GUILDS.
    Remove {
        /// The users (empty: everyone).
        user_ids: Vec<i64>,
    },
}

/// Subject on which gateway node `node` serves takeovers of its sessions
/// (a RESUME that reached another node).
pub fn session_takeover_subject(node: &str) -> String {
    format!("gw.{node}.takeover")
}

/// Longest session id a takeover request may name, in bytes (ours are 48).
pub const SESSION_ID_BYTES_MAX: usize = 64;

/// A gateway node asks the node holding a session for it (a client
/// RESUMEd there). Two steps: `Prepare` changes nothing and tells the
/// taker how to hold the session (intents, shard, guilds); `Commit` moves
/// it. The holder checks `user_id` (the token the taker verified) against
/// the session's user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeoverRequest {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// Which step.
    pub step: TakeoverStep,
    /// The session.
    pub session_id: String,
    /// The user the RESUME's token resolved to.
    pub user_id: i64,
    /// The client's last sequence (RESUME's `seq`).
    pub seq: Option<u64>,
    /// The taking node (owners send the session's events there).
    pub to_node: String,
}

/// The steps of a takeover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TakeoverStep {
    /// Check and describe; nothing moves.
    Prepare,
    /// Move the session and hand over its state.
    Commit,
}

/// The holder's answer.
#[derive(Debug, Serialize, Deserialize)]
pub struct TakeoverReply {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// What it says.
    pub body: TakeoverAnswer,
}

fn default_large_threshold() -> u32 {
    crate::gateway::LARGE_THRESHOLD_DEFAULT
}

/// What the holder says.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TakeoverAnswer {
    /// The session can move: hold it like this.
    Prepared {
        /// Its intents.
        intents: u64,
        /// Its shard.
        shard: Option<[u32; 2]>,
        /// Its IDENTIFY's `large_threshold` (absent from a node that
        /// predates it: Discord's default).
        #[serde(default = "default_large_threshold")]
        large_threshold: u32,
        /// The guilds it follows.
        guilds: Vec<i64>,
    },
    /// The session has moved: its state.
    Committed(SessionHandoff),
    /// It cannot move.
    Refused(TakeoverRefusal),
}

/// Why a takeover was refused (each is op 9 for the client, but
/// `FromTheFuture`, which is close 4007 as on the holding node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TakeoverRefusal {
    /// No such session here (expired, forged, or already moved). A session
    /// of another user answers the same, so ids cannot be probed.
    Unknown,
    /// The replay buffer no longer reaches back to the client's `seq`.
    Gap,
    /// The client claims a sequence the session never sent.
    FromTheFuture,
    /// The session is moving already, or `session_takeovers_in_flight_max`
    /// takeovers are running.
    Busy,
    /// The missed dispatches do not fit one bus message
    /// (`bus_payload_bytes_max`); the client re-identifies.
    TooLarge,
}

/// A moved session's state: everything the new node needs to continue it
/// exactly.
#[derive(Debug, Serialize, Deserialize)]
pub struct SessionHandoff {
    /// The session's last sequence number.
    pub seq: u64,
    /// The dispatches after the client's `seq`, in order, with their
    /// original sequence numbers (consecutive, the last one `seq`).
    pub frames: Vec<HandoffFrame>,
    /// Guilds whose owners confirmed the move: their streams continue on
    /// the new node without a gap.
    pub guilds: Vec<i64>,
    /// Guilds whose move was not confirmed in time (an owner unreachable,
    /// a stream gap during the move): the new node subscribes afresh (a
    /// GUILD_CREATE each, the stream resync rule).
    pub resubscribe: Vec<i64>,
}

/// One dispatch of a handoff.
#[derive(Debug, Serialize, Deserialize)]
pub struct HandoffFrame {
    /// Its sequence number.
    pub seq: u64,
    /// Event name.
    pub name: String,
    /// Event data.
    pub data: Box<RawValue>,
}

impl TakeoverRequest {
    /// Parses and checks a request.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let request: Self = serde_json::from_slice(bytes)?;
        if request.v != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(request.v));
        }
        if request.session_id.is_empty() || request.session_id.len() > SESSION_ID_BYTES_MAX {
            return Err(EnvelopeError::Bounds("session_id"));
        }
        // A node name as announcements have them: the owners key a stream
        // by it.
        if !crate::cluster::node_name_ok(&request.to_node) {
            return Err(EnvelopeError::Bounds("to_node"));
        }
        Ok(request)
    }
}

impl TakeoverReply {
    /// Wraps `body` at the current version.
    pub fn new(body: TakeoverAnswer) -> Self {
        Self {
            v: ENVELOPE_VERSION,
            body,
        }
    }

    /// Parses and checks a reply.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let reply: Self = serde_json::from_slice(bytes)?;
        if reply.v != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(reply.v));
        }
        Ok(reply)
    }
}

/// Subject on which the api node whose name hashes to `tag` (the tag an
/// interaction token it issued ends with) serves the interaction requests
/// other api nodes pass on to it: a bot's callback or interaction-webhook
/// call that a load balancer sent elsewhere. The interactions live in the
/// creating node's table, so that node answers them.
pub fn interaction_forward_subject(tag: u64) -> String {
    format!("api.{tag:016x}.interactions")
}

/// Longest path (with its query) a passed-on request may carry, in bytes.
pub const FORWARD_PATH_BYTES_MAX: usize = 1_024;

/// Methods a passed-on request may have (those of the routes passed on).
const FORWARD_METHODS: [&str; 4] = ["GET", "POST", "PATCH", "DELETE"];

/// A request an api node passes on to the api node that created the
/// interaction it names. Only the interaction's routes are passed on
/// (`/interactions/{id}/{token}/callback` and
/// `/webhooks/{application_id}/{token}...`); the passing node has already
/// applied its edge (rate limits, body bound), so the receiver runs the
/// route alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedRequest {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// HTTP method.
    pub method: String,
    /// Path and query, from `/api/v{n}/`.
    pub path: String,
    /// The JSON body (the routes take only JSON).
    pub body: String,
}

/// The answer to a [`ForwardedRequest`]: what the route answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardedResponse {
    /// [`ENVELOPE_VERSION`].
    pub v: u32,
    /// HTTP status.
    pub status: u16,
    /// Its `Retry-After`, when it has one (a 429 or a 503).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    /// The body (JSON, or empty).
    pub body: String,
}

impl ForwardedRequest {
    /// Parses and checks a request: a known method, an interaction route's
    /// path within [`FORWARD_PATH_BYTES_MAX`], a body within
    /// `body_bytes_max`.
    pub fn decode(bytes: &[u8], body_bytes_max: usize) -> Result<Self, EnvelopeError> {
        let request: Self = serde_json::from_slice(bytes)?;
        if request.v != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(request.v));
        }
        if !FORWARD_METHODS.contains(&request.method.as_str()) {
            return Err(EnvelopeError::Bounds("method"));
        }
        let route = request
            .path
            .strip_prefix("/api/v10/")
            .or_else(|| request.path.strip_prefix("/api/v9/"));
        let route_ok =
            route.is_some_and(|r| r.starts_with("interactions/") || r.starts_with("webhooks/"));
        if request.path.len() > FORWARD_PATH_BYTES_MAX || !route_ok {
            return Err(EnvelopeError::Bounds("path"));
        }
        if request.body.len() > body_bytes_max {
            return Err(EnvelopeError::Bounds("body"));
        }
        Ok(request)
    }
}

impl ForwardedResponse {
    /// Parses and checks an answer.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let response: Self = serde_json::from_slice(bytes)?;
        if response.v != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(response.v));
        }
        if !(100..=599).contains(&response.status) {
            return Err(EnvelopeError::Bounds("status"));
        }
        Ok(response)
    }
}

/// Why an envelope was refused.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Not an envelope of ours.
    #[error("malformed envelope: {0}")]
    Malformed(#[from] serde_json::Error),
    /// Another version.
    #[error("envelope version {0}")]
    Version(u32),
    /// A field outside its bound.
    #[error("field {0} out of bounds")]
    Bounds(&'static str),
}

impl NodeEvent {
    /// Wraps `body` at the current version.
    pub fn new(body: NodeEventBody) -> Self {
        Self {
            v: ENVELOPE_VERSION,
            body,
        }
    }

    /// The bytes to publish.
    pub fn encode(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }

    /// Parses and checks an envelope.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let event: Self = serde_json::from_slice(bytes)?;
        if event.v != ENVELOPE_VERSION {
            return Err(EnvelopeError::Version(event.v));
        }
        Ok(event)
    }
}

/// Where a stream stands at the receiving gateway node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamPosition {
    /// The owner incarnation last seen.
    pub epoch: u64,
    /// The last sequence applied.
    pub seq: u64,
}

/// What to do with an arriving stream event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamCheck {
    /// The next one: apply it.
    Next,
    /// Already applied (a duplicate or an old epoch's straggler): skip.
    Stale,
    /// Events were lost before this one: resynchronise the guild.
    Gap {
        /// How many were lost (within the epoch; 0 if unknown).
        missing: u64,
    },
}

impl StreamPosition {
    /// Classifies an event at (`epoch`, `seq`) and advances past it unless
    /// it is stale. Epochs only grow, so an older one is a straggler; a
    /// newer one must start at 1.
    ///
    /// ```
    /// use guildhall_proto::bus::{StreamCheck, StreamPosition};
    /// let mut at = StreamPosition::default();
    /// assert_eq!(at.check(5, 1), StreamCheck::Next);
    /// assert_eq!(at.check(5, 2), StreamCheck::Next);
    /// assert_eq!(at.check(5, 2), StreamCheck::Stale);
    /// assert_eq!(at.check(5, 5), StreamCheck::Gap { missing: 2 });
    /// assert_eq!(at.check(5, 6), StreamCheck::Next);
    /// assert_eq!(at.check(9, 1), StreamCheck::Next);
    /// assert_eq!(at.check(5, 7), StreamCheck::Stale);
    /// ```
    pub fn check(&mut self, epoch: u64, seq: u64) -> StreamCheck {
        let verdict = if epoch < self.epoch || (epoch == self.epoch && seq <= self.seq) {
            return StreamCheck::Stale;
        } else if epoch > self.epoch {
            if seq == 1 {
                StreamCheck::Next
            } else {
                StreamCheck::Gap {
                    missing: seq.saturating_sub(1),
                }
            }
        } else if seq == self.seq + 1 {
            StreamCheck::Next
        } else {
            StreamCheck::Gap {
                missing: seq - self.seq - 1,
            }
        };
        *self = Self { epoch, seq };
        verdict
    }

    /// The stream's owner says its last event is (`epoch`, `seq`): how
    /// many events this position missed (a newer epoch: all of its `seq`),
    /// advancing to that tail, or `None` when nothing is missing (a tail
    /// already reached, or an older epoch's).
    ///
    /// ```
    /// use guildhall_proto::bus::{StreamCheck, StreamPosition};
    /// let mut at = StreamPosition::default();
    /// assert_eq!(at.check(5, 1), StreamCheck::Next);
    /// assert_eq!(at.behind_tail(5, 1), None);
    /// assert_eq!(at.behind_tail(4, 9), None);
    /// assert_eq!(at.behind_tail(5, 3), Some(2));
    /// assert_eq!(at.check(5, 4), StreamCheck::Next);
    /// assert_eq!(at.behind_tail(6, 2), Some(2));
    /// assert_eq!(at.check(6, 3), StreamCheck::Next);
    /// ```
    pub fn behind_tail(&mut self, epoch: u64, seq: u64) -> Option<u64> {
        let missing = if epoch < self.epoch || (epoch == self.epoch && seq <= self.seq) {
            return None;
        } else if epoch > self.epoch {
            seq
        } else {
            seq - self.seq
        };
        *self = Self { epoch, seq };
        Some(missing)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    /// A holder that predates `large_threshold` sends none: the session
    /// keeps Discord's default; one that sends it keeps its own.
    #[test]
    fn prepared_without_a_large_threshold_reads_as_the_default() {
        let old: TakeoverAnswer =
            serde_json::from_str(r#"{"prepared":{"intents":1,"shard":null,"guilds":[5]}}"#)
                .unwrap();
        let TakeoverAnswer::Prepared {
            large_threshold, ..
        } = old
        else {
            panic!("not prepared");
        };
        assert_eq!(large_threshold, crate::gateway::LARGE_THRESHOLD_DEFAULT);
        let new = TakeoverAnswer::Prepared {
            intents: 1,
            shard: None,
            large_threshold: 120,
            guilds: vec![],
        };
        let back: TakeoverAnswer =
            serde_json::from_slice(&serde_json::to_vec(&new).unwrap()).unwrap();
        assert!(matches!(
            back,
            TakeoverAnswer::Prepared {
                large_threshold: 120,
                ..
            }
        ));
    }

    #[test]
    fn envelopes_round_trip_and_carry_raw_data_verbatim() {
        let data = RawValue::from_string(r#"{"content":"hé \"x\"","id":"1"}"#.into()).unwrap();
        let event = NodeEvent::new(NodeEventBody::Stream(StreamEvent {
            guild_id: 7,
            epoch: 3,
            seq: 1,
            body: StreamBody::Dispatch {
                hidden_from: vec![],
                publish_id: 9,
                name: "MESSAGE_CREATE".into(),
                required_intent: 1 << 9,
                data,
                blanked: None,
                content_exempt: vec![2],
            },
        }));
        let bytes = event.encode().unwrap();
        let NodeEventBody::Stream(back) = NodeEvent::decode(&bytes).unwrap().body else {
            panic!("not a stream event");
        };
        let StreamBody::Dispatch { data, .. } = back.body else {
            panic!("not a dispatch");
        };
        assert_eq!(data.get(), r#"{"content":"hé \"x\"","id":"1"}"#);
    }

    #[test]
    fn forwarded_requests_carry_only_interaction_routes() {
        let ok = |path: &str, method: &str| {
            let bytes = serde_json::to_vec(&ForwardedRequest {
                v: ENVELOPE_VERSION,
                method: method.into(),
                path: path.into(),
                body: "{}".into(),
            })
            .unwrap();
            ForwardedRequest::decode(&bytes, 16).is_ok()
        };
        assert!(ok("/api/v10/interactions/1/t/callback", "POST"));
        assert!(ok("/api/v9/webhooks/1/t/messages/@original", "PATCH"));
        assert!(!ok("/api/v10/users/@me", "GET"));
        assert!(!ok("/metrics", "GET"));
        assert!(!ok("/api/v10/webhooks/1/t", "PUT"));
        assert!(!ok(
            &format!("/api/v10/webhooks/{}", "x".repeat(2_000)),
            "POST"
        ));
        let big = serde_json::to_vec(&ForwardedRequest {
            v: ENVELOPE_VERSION,
            method: "POST".into(),
            path: "/api/v10/webhooks/1/t".into(),
            body: "x".repeat(17),
        })
        .unwrap();
        assert!(ForwardedRequest::decode(&big, 16).is_err());
        let answer = serde_json::to_vec(&ForwardedResponse {
            v: ENVELOPE_VERSION,
            status: 700,
            retry_after: None,
            body: String::new(),
        })
        .unwrap();
        assert!(ForwardedResponse::decode(&answer).is_err());
    }

    #[test]
    fn bad_envelopes_are_refused_not_panicked_on() {
        for bytes in [
            &b""[..],
            b"{",
            b"null",
            br#"{"v":2,"body":{"joined":{"guild_id":1,"user_id":2}}}"#,
            br#"{"v":1,"body":{"nope":{}}}"#,
        ] {
            assert!(NodeEvent::decode(bytes).is_err());
        }
    }

    #[test]
    fn takeover_envelopes_round_trip_and_bad_ones_are_refused() {
        let request = TakeoverRequest {
            v: ENVELOPE_VERSION,
            step: TakeoverStep::Commit,
            session_id: "ab12".into(),
            user_id: 7,
            seq: Some(3),
            to_node: "gw-b".into(),
        };
        let bytes = serde_json::to_vec(&request).unwrap();
        assert_eq!(TakeoverRequest::decode(&bytes).unwrap(), request);
        let long = TakeoverRequest {
            session_id: "a".repeat(SESSION_ID_BYTES_MAX + 1),
            ..request.clone()
        };
        assert!(TakeoverRequest::decode(&serde_json::to_vec(&long).unwrap()).is_err());
        let bad_node = TakeoverRequest {
            to_node: "Not A Node".into(),
            ..request.clone()
        };
        assert!(TakeoverRequest::decode(&serde_json::to_vec(&bad_node).unwrap()).is_err());
        let old = TakeoverRequest { v: 2, ..request };
        assert!(TakeoverRequest::decode(&serde_json::to_vec(&old).unwrap()).is_err());
        let reply = TakeoverReply::new(TakeoverAnswer::Committed(SessionHandoff {
            seq: 4,
            frames: vec![HandoffFrame {
                seq: 4,
                name: "MESSAGE_CREATE".into(),
                data: RawValue::from_string(r#"{"x":1}"#.into()).unwrap(),
            }],
            guilds: vec![1],
            resubscribe: vec![],
        }));
        let bytes = serde_json::to_vec(&reply).unwrap();
        let TakeoverAnswer::Committed(back) = TakeoverReply::decode(&bytes).unwrap().body else {
            panic!("not committed");
        };
        assert_eq!(back.frames[0].data.get(), r#"{"x":1}"#);
        for bad in [&b""[..], b"{}", br#"{"v":1,"body":{"nope":1}}"#] {
            assert!(TakeoverReply::decode(bad).is_err());
        }
    }

    proptest! {
        /// Whatever subset of a stream arrives, in order: every lost event
        /// before a delivered one is reported as a gap, exactly once.
        #[test]
        fn every_loss_is_reported(delivered in proptest::collection::vec(any::<bool>(), 1..200)) {
            let mut at = StreamPosition::default();
            let mut lost_pending = 0u64;
            let mut reported = 0u64;
            let mut lost_total = 0u64;
            for (i, arrives) in delivered.iter().enumerate() {
                if !arrives {
                    lost_pending += 1;
                    continue;
                }
                match at.check(1, i as u64 + 1) {
                    StreamCheck::Next => prop_assert_eq!(lost_pending, 0),
                    StreamCheck::Gap { missing } => {
                        prop_assert_eq!(missing, lost_pending);
                        reported += missing;
                    }
                    StreamCheck::Stale => prop_assert!(false, "nothing repeats"),
                }
                lost_total += lost_pending;
                lost_pending = 0;
            }
            prop_assert_eq!(reported, lost_total);
        }
    }
}
