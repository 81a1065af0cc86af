//! The Gateway v10 protocol: opcodes, close codes, what clients send (parsed
//! with a size bound into typed payloads, every failure mapped to the exact
//! close code), and what the server sends.
//!
//! Dispatches are encoded once per event and shared by every recipient: the
//! frame is `{"op":0,"t":NAME,"d":DATA,"s":` followed by the session's own
//! sequence number and `}`. [`EncodedDispatch`] holds the shared head; a
//! session adds only its tail.

use crate::Snowflake;
use crate::intents;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::sync::Arc;

/// Gateway opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum OpCode {
    /// Server → client: an event.
    Dispatch = 0,
    /// Both ways: keep-alive.
    Heartbeat = 1,
    /// Client: start a session.
    Identify = 2,
    /// Client: update presence.
    PresenceUpdate = 3,
    /// Client: join, move or leave voice.
    VoiceStateUpdate = 4,
    /// Client: resume a session.
    Resume = 6,
    /// Server: reconnect and resume.
    Reconnect = 7,
    /// Client: request guild members.
    RequestGuildMembers = 8,
    /// Server: the session is invalid (`d`: resumable).
    InvalidSession = 9,
    /// Server: first frame, with the heartbeat interval.
    Hello = 10,
    /// Server: heartbeat received.
    HeartbeatAck = 11,
}

/// Close codes the server sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CloseCode {
    /// Something went wrong on our side; reconnect.
    UnknownError = 4000,
    /// An opcode the server does not know.
    UnknownOpcode = 4001,
    /// A payload that is not valid JSON, not the right shape, or too large.
    DecodeError = 4002,
    /// A payload before IDENTIFY.
    NotAuthenticated = 4003,
    /// A bad token.
    AuthenticationFailed = 4004,
    /// A second IDENTIFY.
    AlreadyAuthenticated = 4005,
    /// RESUME with a sequence the session never sent.
    InvalidSeq = 4007,
    /// Payloads too fast.
    RateLimited = 4008,
    /// Heartbeats stopped.
    SessionTimedOut = 4009,
    /// A shard that does not exist.
    InvalidShard = 4010,
    /// Too many guilds for one shard.
    ShardingRequired = 4011,
    /// A gateway version other than 10.
    InvalidApiVersion = 4012,
    /// Undefined intent bits.
    InvalidIntents = 4013,
    /// Privileged intents the application may not use.
    DisallowedIntents = 4014,
}

impl CloseCode {
    /// The numeric code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// Whether Discord documents that the client may reconnect (and the
    /// libraries do): 4004 and 4010–4014 are final.
    pub fn reconnectable(self) -> bool {
        !matches!(
            self,
            CloseCode::AuthenticationFailed
                | CloseCode::InvalidShard
                | CloseCode::ShardingRequired
                | CloseCode::InvalidApiVersion
                | CloseCode::InvalidIntents
                | CloseCode::DisallowedIntents
        )
    }

    /// The reason text sent in the close frame.
    pub fn reason(self) -> &'static str {
        match self {
            CloseCode::UnknownError => "Unknown error.",
            CloseCode::UnknownOpcode => "Unknown opcode.",
            CloseCode::DecodeError => "Error while decoding payload.",
            CloseCode::NotAuthenticated => "Not authenticated.",
            CloseCode::AuthenticationFailed => "Authentication failed.",
            CloseCode::AlreadyAuthenticated => "Already authenticated.",
            CloseCode::InvalidSeq => "Invalid seq.",
            CloseCode::RateLimited => "Rate limited.",
            CloseCode::SessionTimedOut => "Session timed out.",
            CloseCode::InvalidShard => "Invalid shard.",
            CloseCode::ShardingRequired => "Sharding required.",
            CloseCode::InvalidApiVersion => "Invalid API version.",
            CloseCode::InvalidIntents => "Invalid intent(s).",
            CloseCode::DisallowedIntents => "Disallowed intent(s).",
        }
    }
}

impl From<intents::IntentsError> for CloseCode {
    fn from(error: intents::IntentsError) -> Self {
        match error {
            intents::IntentsError::Invalid => CloseCode::InvalidIntents,
            intents::IntentsError::Disallowed => CloseCode::DisallowedIntents,
        }
    }
}

/// Client properties in IDENTIFY (informational).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ConnectionProperties {
    /// Operating system.
    #[serde(default)]
    pub os: String,
    /// Library name.
    #[serde(default)]
    pub browser: String,
    /// Library name.
    #[serde(default)]
    pub device: String,
}

/// Op 2 IDENTIFY.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Identify {
    /// The token, with any `Bot ` prefix already stripped (see [`parse`]).
    pub token: String,
    /// Requested intents.
    pub intents: u64,
    /// Client properties.
    #[serde(default)]
    pub properties: ConnectionProperties,
    /// Payload compression: `true` asks for dispatches as zlib streams of
    /// their own in binary frames; ignored on a socket with transport
    /// compression (the URL's `compress`), as Discord does.
    #[serde(default)]
    pub compress: Option<bool>,
    /// Members above which a guild is "large" (read through
    /// [`large_threshold`]).
    #[serde(default)]
    pub large_threshold: Option<i64>,
    /// `[shard_id, num_shards]`.
    #[serde(default)]
    pub shard: Option<[u32; 2]>,
}

/// Op 6 RESUME.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Resume {
    /// The token, `Bot ` prefix stripped.
    pub token: String,
    /// The session to resume.
    pub session_id: String,
    /// The last sequence number the client received (null if none).
    pub seq: Option<u64>,
}

/// Op 4 VOICE_STATE_UPDATE.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct VoiceStateUpdate {
    /// The guild.
    pub guild_id: Snowflake,
    /// The channel to join, or null to leave.
    pub channel_id: Option<Snowflake>,
    /// Muted by self.
    #[serde(default)]
    pub self_mute: bool,
    /// Deafened by self.
    #[serde(default)]
    pub self_deaf: bool,
}

/// One id or several (op 8 accepts both for `user_ids`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single id.
    One(Snowflake),
    /// Several ids.
    Many(Vec<Snowflake>),
}

/// Op 8 REQUEST_GUILD_MEMBERS.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RequestGuildMembers {
    /// The guild.
    pub guild_id: Snowflake,
    /// Username prefix ("" for all).
    #[serde(default)]
    pub query: Option<String>,
    /// Most members to send (0: no limit with an empty query).
    #[serde(default)]
    pub limit: u32,
    /// Include presences.
    #[serde(default)]
    pub presences: bool,
    /// Specific members.
    #[serde(default)]
    pub user_ids: Option<OneOrMany>,
    /// Echoed in the chunks.
    #[serde(default)]
    pub nonce: Option<String>,
}

/// Op 3 PRESENCE_UPDATE.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct PresenceUpdate {
    /// online, dnd, idle, invisible, offline.
    pub status: String,
    /// Whether the client is AFK.
    #[serde(default)]
    pub afk: bool,
}

/// A parsed client payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inbound {
    /// Op 1, with the client's last sequence.
    Heartbeat(Option<u64>),
    /// Op 2.
    Identify(Identify),
    /// Op 3.
    PresenceUpdate(PresenceUpdate),
    /// Op 4.
    VoiceStateUpdate(VoiceStateUpdate),
    /// Op 6.
    Resume(Resume),
    /// Op 8.
    RequestGuildMembers(RequestGuildMembers),
}

impl Inbound {
    /// The opcode.
    pub fn op(&self) -> OpCode {
        match self {
            Inbound::Heartbeat(_) => OpCode::Heartbeat,
            Inbound::Identify(_) => OpCode::Identify,
            Inbound::PresenceUpdate(_) => OpCode::PresenceUpdate,
            Inbound::VoiceStateUpdate(_) => OpCode::VoiceStateUpdate,
            Inbound::Resume(_) => OpCode::Resume,
            Inbound::RequestGuildMembers(_) => OpCode::RequestGuildMembers,
        }
    }
}

#[derive(Deserialize)]
struct RawFrame<'a> {
    op: u8,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

/// Why a client payload was refused, and the close code it earns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InboundError {
    /// Larger than [`guildhall_limits::GATEWAY_PAYLOAD_BYTES_MAX`].
    TooLarge,
    /// Not JSON, no `op`, or `d` of the wrong shape for its op.
    Decode,
    /// An op clients may not send.
    UnknownOpcode,
}

impl InboundError {
    /// The close code (one mapping, here).
    pub fn close_code(self) -> CloseCode {
        match self {
            InboundError::TooLarge | InboundError::Decode => CloseCode::DecodeError,
            InboundError::UnknownOpcode => CloseCode::UnknownOpcode,
        }
    }
}

fn strip_bot(token: String) -> String {
    match token.strip_prefix("Bot ") {
        Some(rest) => rest.to_owned(),
        None => token,
    }
}

/// Parses one client text frame of at most `payload_bytes_max` bytes.
///
/// ```
/// use guildhall_proto::gateway::{parse, Inbound, InboundError};
/// assert_eq!(parse(br#"{"op":1,"d":42}"#, 4096), Ok(Inbound::Heartbeat(Some(42))));
/// assert_eq!(parse(b"{nope", 4096), Err(InboundError::Decode));
/// assert_eq!(parse(br#"{"op":99,"d":null}"#, 4096), Err(InboundError::UnknownOpcode));
/// ```
pub fn parse(payload: &[u8], payload_bytes_max: usize) -> Result<Inbound, InboundError> {
    if payload.len() > payload_bytes_max {
        return Err(InboundError::TooLarge);
    }
    let frame: RawFrame<'_> = serde_json::from_slice(payload).map_err(|_| InboundError::Decode)?;
    let d = frame.d.map_or("null", RawValue::get);
    fn de<'a, T: Deserialize<'a>>(d: &'a str) -> Result<T, InboundError> {
        serde_json::from_str(d).map_err(|_| InboundError::Decode)
    }
    Ok(match frame.op {
        1 => Inbound::Heartbeat(de(d)?),
        2 => {
            let mut identify: Identify = de(d)?;
            identify.token = strip_bot(identify.token);
            Inbound::Identify(identify)
        }
        3 => Inbound::PresenceUpdate(de(d)?),
        4 => Inbound::VoiceStateUpdate(de(d)?),
        6 => {
            let mut resume: Resume = de(d)?;
            resume.token = strip_bot(resume.token);
            Inbound::Resume(resume)
        }
        8 => Inbound::RequestGuildMembers(de(d)?),
        _ => return Err(InboundError::UnknownOpcode),
    })
}

/// Bytes of an op 8 `nonce` Discord keeps; a longer one is ignored (the
/// chunks carry none).
pub const MEMBER_REQUEST_NONCE_BYTES_MAX: usize = 32;

/// IDENTIFY's `large_threshold` when absent (Discord's default).
pub const LARGE_THRESHOLD_DEFAULT: u32 = 50;
/// The smallest `large_threshold` Discord takes.
pub const LARGE_THRESHOLD_MIN: u32 = 50;
/// The largest `large_threshold` Discord takes.
pub const LARGE_THRESHOLD_MAX: u32 = 250;

/// The session's `large_threshold`: the member count above which its
/// GUILD_CREATEs are `large` and carry at most that many members (the rest
/// come with op 8). Discord documents "value between 50 and 250, default
/// 50"; a value outside is taken at the nearer end rather than refused,
/// since libraries pass their users' setting through unchecked and a
/// closed session for a tuning knob would be worse than a clamped one.
pub fn large_threshold(requested: Option<i64>) -> u32 {
    let clamped = requested
        .unwrap_or(LARGE_THRESHOLD_DEFAULT.into())
        .clamp(LARGE_THRESHOLD_MIN.into(), LARGE_THRESHOLD_MAX.into());
    // Within 50..=250 after the clamp.
    u32::try_from(clamped).unwrap_or(LARGE_THRESHOLD_DEFAULT)
}

/// Op 10 HELLO.
pub fn hello_frame(heartbeat_interval_ms: u64) -> String {
    format!(r#"{{"op":10,"d":{{"heartbeat_interval":{heartbeat_interval_ms}}},"s":null,"t":null}}"#)
}

/// Op 11 HEARTBEAT_ACK.
pub fn heartbeat_ack_frame() -> &'static str {
    r#"{"op":11,"d":null,"s":null,"t":null}"#
}

/// Op 1 from the server: "heartbeat now".
pub fn heartbeat_request_frame(last_seq: Option<u64>) -> String {
    match last_seq {
        Some(s) => format!(r#"{{"op":1,"d":{s},"s":null,"t":null}}"#),
        None => r#"{"op":1,"d":null,"s":null,"t":null}"#.to_owned(),
    }
}

/// Op 7 RECONNECT.
pub fn reconnect_frame() -> &'static str {
    r#"{"op":7,"d":null,"s":null,"t":null}"#
}

/// Op 9 INVALID_SESSION.
pub fn invalid_session_frame(resumable: bool) -> &'static str {
    if resumable {
        r#"{"op":9,"d":true,"s":null,"t":null}"#
    } else {
        r#"{"op":9,"d":false,"s":null,"t":null}"#
    }
}

/// A dispatch encoded once: everything but the session's sequence number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedDispatch {
    /// `{"op":0,"t":"NAME","d":DATA,"s":`, shared by every recipient.
    pub head: Arc<str>,
}

impl EncodedDispatch {
    /// Encodes `data` as dispatch `name` (an upper-case event name).
    ///
    /// ```
    /// use guildhall_proto::gateway::EncodedDispatch;
    /// let event = EncodedDispatch::new("RESUMED", &serde_json::json!({})).unwrap();
    /// assert_eq!(event.frame(7), r#"{"op":0,"t":"RESUMED","d":{},"s":7}"#);
    /// ```
    pub fn new<T: Serialize + ?Sized>(name: &str, data: &T) -> Result<Self, serde_json::Error> {
        let data = serde_json::to_string(data)?;
        Ok(Self::from_json(name, &data))
    }

    /// Wraps already-encoded JSON `data`.
    pub fn from_json(name: &str, data: &str) -> Self {
        let mut head = String::with_capacity(data.len() + name.len() + 32);
        head.push_str(r#"{"op":0,"t":""#);
        head.push_str(name);
        head.push_str(r#"","d":"#);
        head.push_str(data);
        head.push_str(r#","s":"#);
        Self { head: head.into() }
    }

    /// The per-session tail: `SEQ}`.
    pub fn tail(seq: u64) -> String {
        format!("{seq}}}")
    }

    /// The whole frame for sequence `seq`.
    pub fn frame(&self, seq: u64) -> String {
        let mut frame = String::with_capacity(self.head.len() + 21);
        frame.push_str(&self.head);
        frame.push_str(&Self::tail(seq));
        frame
    }

    /// The event's name and data JSON, split out of the head (a session
    /// moving to another node carries its replay buffer as these). `None`
    /// for a head not built by [`EncodedDispatch::from_json`].
    ///
    /// ```
    /// use guildhall_proto::gateway::EncodedDispatch;
    /// let event = EncodedDispatch::from_json("MESSAGE_CREATE", r#"{"a":"\",\"d\":1"}"#);
    /// assert_eq!(event.parts(), Some(("MESSAGE_CREATE", r#"{"a":"\",\"d\":1"}"#)));
    /// ```
    pub fn parts(&self) -> Option<(&str, &str)> {
        let rest = self.head.strip_prefix(r#"{"op":0,"t":""#)?;
        // Event names are upper-case ASCII, so the first `","d":` ends it.
        let (name, rest) = rest.split_once(r#"","d":"#)?;
        let data = rest.strip_suffix(r#","s":"#)?;
        Some((name, data))
    }

    /// Bytes of the frame (for queue accounting).
    pub fn len_bytes(&self) -> usize {
        self.head.len() + 21
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn large_threshold_defaults_to_50_and_stays_within_50_to_250() {
        assert_eq!(super::large_threshold(None), 50);
        assert_eq!(super::large_threshold(Some(100)), 100);
        assert_eq!(super::large_threshold(Some(250)), 250);
        assert_eq!(super::large_threshold(Some(0)), 50);
        assert_eq!(super::large_threshold(Some(10_000)), 250);
        assert_eq!(super::large_threshold(Some(-1)), 50);
        assert_eq!(super::large_threshold(Some(i64::MAX)), 250);
    }

    use super::*;

    const MAX: usize = guildhall_limits::GATEWAY_PAYLOAD_BYTES_MAX;

    #[test]
    fn identify_strips_bot_prefix_and_accepts_library_shapes() {
        // discord.py shape: integer intents, properties, compress, shard.
        let raw = br#"{"op":2,"d":{"token":"Bot abc.def","intents":33281,
            "properties":{"os":"linux","browser":"discord.py","device":"discord.py"},
            "compress":true,"large_threshold":250,"shard":[0,1]}}"#;
        let Ok(Inbound::Identify(identify)) = parse(raw, MAX) else {
            panic!("identify")
        };
        assert_eq!(identify.token, "abc.def");
        assert_eq!(identify.intents, 33281);
        assert_eq!(identify.shard, Some([0, 1]));
    }

    /// Each bad input, the error, and its close code.
    #[test]
    fn bad_inputs_map_to_the_documented_close_codes() {
        let big = format!(r#"{{"op":1,"d":null,"pad":"{}"}}"#, "x".repeat(MAX));
        let cases: &[(&[u8], InboundError, u16)] = &[
            (b"not json", InboundError::Decode, 4002),
            (b"", InboundError::Decode, 4002),
            (br#"{"d":null}"#, InboundError::Decode, 4002),
            (br#"{"op":"1"}"#, InboundError::Decode, 4002),
            (br#"{"op":2,"d":{"intents":1}}"#, InboundError::Decode, 4002),
            (br#"{"op":6,"d":{"token":"t"}}"#, InboundError::Decode, 4002),
            (br#"{"op":5,"d":null}"#, InboundError::UnknownOpcode, 4001),
            (br#"{"op":0,"d":{}}"#, InboundError::UnknownOpcode, 4001),
            (br#"{"op":11,"d":null}"#, InboundError::UnknownOpcode, 4001),
            (big.as_bytes(), InboundError::TooLarge, 4002),
        ];
        for (raw, error, code) in cases {
            let got = parse(raw, MAX);
            assert_eq!(got, Err(*error), "{}", String::from_utf8_lossy(raw));
            assert_eq!(error.close_code().code(), *code);
        }
    }

    #[test]
    fn op8_and_op4_accept_integer_snowflakes() {
        let raw = br#"{"op":8,"d":{"guild_id":2000000000000000001,"query":"","limit":0,"user_ids":[1,"2"]}}"#;
        let Ok(Inbound::RequestGuildMembers(r)) = parse(raw, MAX) else {
            panic!("op 8")
        };
        assert_eq!(r.guild_id.get(), 2_000_000_000_000_000_001);
        assert!(matches!(r.user_ids, Some(OneOrMany::Many(ref ids)) if ids.len() == 2));
        let raw =
            br#"{"op":4,"d":{"guild_id":5,"channel_id":null,"self_mute":false,"self_deaf":true}}"#;
        assert!(
            matches!(parse(raw, MAX), Ok(Inbound::VoiceStateUpdate(v)) if v.channel_id.is_none() && v.self_deaf)
        );
    }

    #[test]
    fn server_frames_are_valid_json_with_every_field() {
        for frame in [
            hello_frame(41_250),
            heartbeat_ack_frame().to_owned(),
            heartbeat_request_frame(Some(3)),
            reconnect_frame().to_owned(),
            invalid_session_frame(false).to_owned(),
            EncodedDispatch::new("READY", &serde_json::json!({"v": 10}))
                .unwrap()
                .frame(1),
        ] {
            let v: serde_json::Value = serde_json::from_str(&frame).unwrap();
            for key in ["op", "d", "s", "t"] {
                assert!(v.get(key).is_some(), "{frame} lacks {key}");
            }
        }
        let hello: serde_json::Value = serde_json::from_str(&hello_frame(41_250)).unwrap();
        assert_eq!(hello["d"]["heartbeat_interval"], 41_250);
    }

    #[test]
    fn close_codes_reconnectability_follows_the_docs() {
        assert!(!CloseCode::AuthenticationFailed.reconnectable());
        assert!(!CloseCode::InvalidIntents.reconnectable());
        assert!(CloseCode::SessionTimedOut.reconnectable());
        assert!(CloseCode::DecodeError.reconnectable());
    }
}
