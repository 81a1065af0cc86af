//! Discord's voice gateway, version 8, as the voice-connections page
//! documents it: opcodes, close codes, bounded parsing of what clients send,
//! and the frames an SFU sends back.
//!
//! Version 8 numbers server messages: each carries a top-level `seq`, and
//! clients acknowledge the last one they saw as `seq_ack` in heartbeats
//! and resumes, so a resumed connection is sent what it missed. The DAVE
//! opcodes (21–31) are recognised so they can be ignored cleanly: this
//! server declines DAVE (`dave_protocol_version: 0`), which the docs allow.
//!
//! Ids travel as strings (snowflakes); clients send them as strings too,
//! but a number is accepted as well so an odd client is not cut off for it.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The only voice gateway version served (`?v=8`).
pub const VOICE_GATEWAY_VERSION: u32 = 8;

/// Length of a voice connection's transport key, bytes.
pub const SECRET_KEY_BYTES: usize = 32;

/// Transport encryption mode: AES-256-GCM, RTP-size AAD (Discord's
/// preferred mode, offered first).
pub const MODE_AES256_GCM_RTPSIZE: &str = "aead_aes256_gcm_rtpsize";
/// Transport encryption mode: XChaCha20-Poly1305, RTP-size AAD (the mode
/// every client must support).
pub const MODE_XCHACHA20_POLY1305_RTPSIZE: &str = "aead_xchacha20_poly1305_rtpsize";

/// Voice opcodes (both directions; the DAVE ones are only recognised).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    /// Client: begin a voice connection.
    Identify = 0,
    /// Client: select the media protocol (UDP) and encryption mode.
    SelectProtocol = 1,
    /// Server: ssrc, UDP address and modes.
    Ready = 2,
    /// Client: keep the connection alive.
    Heartbeat = 3,
    /// Server: mode and secret key.
    SessionDescription = 4,
    /// Both: speaking state.
    Speaking = 5,
    /// Server: heartbeat acknowledged.
    HeartbeatAck = 6,
    /// Client: resume a connection.
    Resume = 7,
    /// Server: heartbeat interval.
    Hello = 8,
    /// Server: resumed.
    Resumed = 9,
    /// Server: clients joined the call.
    ClientsConnect = 11,
    /// Server: a client left the call.
    ClientDisconnect = 13,
    /// DAVE: prepare transition (server).
    DavePrepareTransition = 21,
    /// DAVE: execute transition (server).
    DaveExecuteTransition = 22,
    /// DAVE: transition ready (client).
    DaveTransitionReady = 23,
    /// DAVE: prepare epoch (server).
    DavePrepareEpoch = 24,
    /// DAVE: MLS external sender (server, binary).
    DaveMlsExternalSender = 25,
    /// DAVE: MLS key package (client, binary).
    DaveMlsKeyPackage = 26,
    /// DAVE: MLS proposals (server, binary).
    DaveMlsProposals = 27,
    /// DAVE: MLS commit welcome (client, binary).
    DaveMlsCommitWelcome = 28,
    /// DAVE: MLS announce commit transition (server, binary).
    DaveMlsAnnounceCommitTransition = 29,
    /// DAVE: MLS welcome (server, binary).
    DaveMlsWelcome = 30,
    /// DAVE: MLS invalid commit welcome (client).
    DaveMlsInvalidCommitWelcome = 31,
}

impl Opcode {
    /// The opcode of a number, if documented.
    pub fn from_u8(op: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match op {
            0 => Identify,
            1 => SelectProtocol,
            2 => Ready,
            3 => Heartbeat,
            4 => SessionDescription,
            5 => Speaking,
            6 => HeartbeatAck,
            7 => Resume,
            8 => Hello,
            9 => Resumed,
            11 => ClientsConnect,
            13 => ClientDisconnect,
            21 => DavePrepareTransition,
            22 => DaveExecuteTransition,
            23 => DaveTransitionReady,
            24 => DavePrepareEpoch,
            25 => DaveMlsExternalSender,
            26 => DaveMlsKeyPackage,
            27 => DaveMlsProposals,
            28 => DaveMlsCommitWelcome,
            29 => DaveMlsAnnounceCommitTransition,
            30 => DaveMlsWelcome,
            31 => DaveMlsInvalidCommitWelcome,
            _ => return None,
        })
    }

    /// Whether this is a DAVE opcode (21–31).
    pub fn is_dave(self) -> bool {
        (self as u8) >= 21
    }
}

/// Voice close codes, as documented.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum VoiceCloseCode {
    /// An invalid opcode.
    UnknownOpcode = 4001,
    /// A payload that could not be decoded.
    DecodeError = 4002,
    /// A payload before identify.
    NotAuthenticated = 4003,
    /// The token (or the ids with it) is wrong.
    AuthenticationFailed = 4004,
    /// A second identify.
    AlreadyAuthenticated = 4005,
    /// The session is no longer valid.
    SessionNoLongerValid = 4006,
    /// Heartbeats stopped (or identify never came).
    SessionTimeout = 4009,
    /// The server (guild/call) is not hosted here.
    ServerNotFound = 4011,
    /// A protocol other than UDP.
    UnknownProtocol = 4012,
    /// This client was disconnected (kicked, moved, its session ended).
    /// Should not reconnect.
    Disconnected = 4014,
    /// The voice server crashed; the client may resume.
    VoiceServerCrashed = 4015,
    /// An encryption mode not offered.
    UnknownEncryptionMode = 4016,
    /// The channel requires DAVE.
    DaveRequired = 4017,
    /// A malformed request.
    BadRequest = 4020,
    /// Disconnected for exceeding a rate limit. Should not reconnect.
    RateLimited = 4021,
    /// The call ended (channel deleted, voice server changed). Should not
    /// reconnect.
    CallTerminated = 4022,
}

impl VoiceCloseCode {
    /// The numeric code.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The documented description (sent as the close reason).
    pub fn reason(self) -> &'static str {
        use VoiceCloseCode::*;
        match self {
            UnknownOpcode => "Unknown opcode",
            DecodeError => "Failed to decode payload",
            NotAuthenticated => "Not authenticated",
            AuthenticationFailed => "Authentication failed",
            AlreadyAuthenticated => "Already authenticated",
            SessionNoLongerValid => "Session no longer valid",
            SessionTimeout => "Session timeout",
            ServerNotFound => "Server not found",
            UnknownProtocol => "Unknown protocol",
            Disconnected => "Disconnected",
            VoiceServerCrashed => "Voice server crashed",
            UnknownEncryptionMode => "Unknown encryption mode",
            DaveRequired => "E2EE/DAVE protocol required",
            BadRequest => "Bad request",
            RateLimited => "Disconnected: Rate Limited",
            CallTerminated => "Disconnected: Call Terminated",
        }
    }

    /// The close code of a number, if documented.
    pub fn from_code(code: u16) -> Option<VoiceCloseCode> {
        use VoiceCloseCode::*;
        Some(match code {
            4001 => UnknownOpcode,
            4002 => DecodeError,
            4003 => NotAuthenticated,
            4004 => AuthenticationFailed,
            4005 => AlreadyAuthenticated,
            4006 => SessionNoLongerValid,
            4009 => SessionTimeout,
            4011 => ServerNotFound,
            4012 => UnknownProtocol,
            4014 => Disconnected,
            4015 => VoiceServerCrashed,
            4016 => UnknownEncryptionMode,
            4017 => DaveRequired,
            4020 => BadRequest,
            4021 => RateLimited,
            4022 => CallTerminated,
            _ => return None,
        })
    }
}

/// An id as clients send it: a snowflake string (or, leniently, a number).
#[derive(Deserialize)]
#[serde(untagged)]
enum WireId {
    Text(String),
    Number(i64),
}

fn de_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
    match WireId::deserialize(d)? {
        WireId::Number(n) => Ok(n),
        WireId::Text(s) => s
            .parse::<i64>()
            .map_err(|_| serde::de::Error::custom("not a snowflake")),
    }
}

/// Op 0 Identify.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct VoiceIdentify {
    /// The guild.
    #[serde(deserialize_with = "de_id")]
    pub server_id: i64,
    /// The user.
    #[serde(deserialize_with = "de_id")]
    pub user_id: i64,
    /// The main gateway session.
    pub session_id: String,
    /// The voice token from VOICE_SERVER_UPDATE.
    pub token: String,
    /// Highest DAVE version the client supports (0 or absent: none).
    #[serde(default)]
    pub max_dave_protocol_version: Option<u32>,
    /// video (sent by some clients; ignored).
    #[serde(default)]
    pub video: Option<bool>,
}

/// The `data` of op 1 Select Protocol.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SelectProtocolData {
    /// The client's address as IP discovery told it.
    pub address: String,
    /// The client's UDP port.
    pub port: u16,
    /// The chosen encryption mode.
    pub mode: String,
}

/// Op 1 Select Protocol.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SelectProtocol {
    /// `"udp"` (anything else is closed with 4012).
    pub protocol: String,
    /// Address, port, mode.
    pub data: SelectProtocolData,
}

/// Op 3 Heartbeat: `{t, seq_ack}` since v8 (a bare nonce below).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoiceHeartbeat {
    /// The client's nonce, echoed in the ACK.
    pub t: u64,
    /// Last `seq` received (`None` for none, or -1).
    pub seq_ack: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawHeartbeat {
    V8 {
        t: u64,
        #[serde(default)]
        seq_ack: Option<i64>,
    },
    Nonce(u64),
}

/// Op 7 Resume.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct VoiceResume {
    /// The guild.
    #[serde(deserialize_with = "de_id")]
    pub server_id: i64,
    /// The main gateway session.
    pub session_id: String,
    /// The voice token.
    pub token: String,
    /// Last `seq` received (absent or -1: none).
    #[serde(default)]
    pub seq_ack: Option<i64>,
}

impl VoiceResume {
    /// `seq_ack` with -1 (and other negatives) read as none.
    pub fn acked(&self) -> Option<u64> {
        self.seq_ack.and_then(|s| u64::try_from(s).ok())
    }
}

/// Op 5 Speaking, as a client sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub struct ClientSpeaking {
    /// Bitmask: 1 microphone, 2 soundshare, 4 priority.
    pub speaking: u32,
    /// 0 for bots.
    #[serde(default)]
    pub delay: u32,
    /// The sender's SSRC (must be the one READY gave).
    pub ssrc: u32,
}

/// One parsed client message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientMessage {
    /// Op 0.
    Identify(VoiceIdentify),
    /// Op 1.
    SelectProtocol(SelectProtocol),
    /// Op 3.
    Heartbeat(VoiceHeartbeat),
    /// Op 5.
    Speaking(ClientSpeaking),
    /// Op 7.
    Resume(VoiceResume),
    /// A DAVE opcode a client may send (23, 26, 28, 31): ignored, since
    /// DAVE was declined.
    Dave(Opcode),
}

/// Why a client message was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientMessageError {
    /// Over the payload limit.
    TooLarge,
    /// Not JSON, or not the shape of its opcode.
    Decode,
    /// An opcode a client may not send.
    UnknownOpcode,
}

impl ClientMessageError {
    /// The close code (one mapping, here).
    pub fn close_code(self) -> VoiceCloseCode {
        match self {
            ClientMessageError::TooLarge | ClientMessageError::Decode => {
                VoiceCloseCode::DecodeError
            }
            ClientMessageError::UnknownOpcode => VoiceCloseCode::UnknownOpcode,
        }
    }
}

#[derive(Deserialize)]
struct RawFrame<'a> {
    op: u64,
    #[serde(borrow, default)]
    d: Option<&'a RawValue>,
}

/// Parses one client text frame of at most `payload_bytes_max` bytes.
///
/// ```
/// use guildhall_proto::voice_gateway::{parse_client, ClientMessage, ClientMessageError};
/// assert!(matches!(parse_client(br#"{"op":3,"d":{"t":5,"seq_ack":-1}}"#, 4096), Ok(ClientMessage::Heartbeat(_))));
/// assert_eq!(parse_client(b"{nope", 4096), Err(ClientMessageError::Decode));
/// assert_eq!(parse_client(br#"{"op":2,"d":null}"#, 4096), Err(ClientMessageError::UnknownOpcode));
/// ```
pub fn parse_client(
    payload: &[u8],
    payload_bytes_max: usize,
) -> Result<ClientMessage, ClientMessageError> {
    if payload.len() > payload_bytes_max {
        return Err(ClientMessageError::TooLarge);
    }
    let frame: RawFrame<'_> =
        serde_json::from_slice(payload).map_err(|_| ClientMessageError::Decode)?;
    let d = frame.d.map_or("null", RawValue::get);
    fn de<'a, T: Deserialize<'a>>(d: &'a str) -> Result<T, ClientMessageError> {
        serde_json::from_str(d).map_err(|_| ClientMessageError::Decode)
    }
    let op = u8::try_from(frame.op)
        .ok()
        .and_then(Opcode::from_u8)
        .ok_or(ClientMessageError::UnknownOpcode)?;
    Ok(match op {
        Opcode::Identify => ClientMessage::Identify(de(d)?),
        Opcode::SelectProtocol => ClientMessage::SelectProtocol(de(d)?),
        Opcode::Heartbeat => ClientMessage::Heartbeat(match de::<RawHeartbeat>(d)? {
            RawHeartbeat::V8 { t, seq_ack } => VoiceHeartbeat {
                t,
                seq_ack: seq_ack.and_then(|s| u64::try_from(s).ok()),
            },
            RawHeartbeat::Nonce(t) => VoiceHeartbeat { t, seq_ack: None },
        }),
        Opcode::Speaking => ClientMessage::Speaking(de(d)?),
        Opcode::Resume => ClientMessage::Resume(de(d)?),
        Opcode::DaveTransitionReady
        | Opcode::DaveMlsKeyPackage
        | Opcode::DaveMlsCommitWelcome
        | Opcode::DaveMlsInvalidCommitWelcome => ClientMessage::Dave(op),
        // Server-only opcodes are not a client's to send.
        _ => return Err(ClientMessageError::UnknownOpcode),
    })
}

/// Classifies a binary client frame (DAVE's binary opcodes: one opcode
/// byte, then the payload): a client DAVE opcode is ignored, anything
/// else cannot be decoded.
pub fn parse_client_binary(
    payload: &[u8],
    payload_bytes_max: usize,
) -> Result<ClientMessage, ClientMessageError> {
    if payload.len() > payload_bytes_max {
        return Err(ClientMessageError::TooLarge);
    }
    match payload.first().copied().and_then(Opcode::from_u8) {
        Some(op @ (Opcode::DaveMlsKeyPackage | Opcode::DaveMlsCommitWelcome)) => {
            Ok(ClientMessage::Dave(op))
        }
        _ => Err(ClientMessageError::Decode),
    }
}

/// A server message, before numbering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerMessage {
    /// Op 8.
    Hello {
        /// How often the client heartbeats, ms.
        heartbeat_interval_ms: u64,
    },
    /// Op 2.
    Ready {
        /// The client's SSRC.
        ssrc: u32,
        /// The SFU's public IP.
        ip: String,
        /// The SFU's UDP port.
        port: u16,
        /// Modes offered, preferred first.
        modes: Vec<String>,
    },
    /// Op 4.
    SessionDescription {
        /// The selected mode.
        mode: String,
        /// The transport key.
        secret_key: [u8; SECRET_KEY_BYTES],
    },
    /// Op 6.
    HeartbeatAck {
        /// The client's nonce.
        t: u64,
    },
    /// Op 9.
    Resumed,
    /// Op 5, relayed to the other participants.
    Speaking {
        /// Who.
        user_id: i64,
        /// Their SSRC.
        ssrc: u32,
        /// Their speaking bitmask.
        speaking: u32,
    },
    /// Op 11.
    ClientsConnect {
        /// Who joined (or, to a newcomer, who is already there).
        user_ids: Vec<i64>,
    },
    /// Op 13.
    ClientDisconnect {
        /// Who left.
        user_id: i64,
    },
}

#[derive(Serialize)]
struct Frame<T: Serialize> {
    op: u8,
    d: T,
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
}

#[derive(Serialize)]
struct HelloD {
    heartbeat_interval: u64,
}

#[derive(Serialize)]
struct ReadyD<'a> {
    ssrc: u32,
    ip: &'a str,
    port: u16,
    modes: &'a [String],
}

#[derive(Serialize)]
struct SessionDescriptionD<'a> {
    mode: &'a str,
    secret_key: &'a [u8; SECRET_KEY_BYTES],
    dave_protocol_version: u32,
}

#[derive(Serialize)]
struct AckD {
    t: u64,
}

#[derive(Serialize)]
struct SpeakingD {
    user_id: String,
    ssrc: u32,
    speaking: u32,
}

#[derive(Serialize)]
struct ClientsConnectD {
    user_ids: Vec<String>,
}

#[derive(Serialize)]
struct ClientDisconnectD {
    user_id: String,
}

impl ServerMessage {
    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            ServerMessage::Hello { .. } => Opcode::Hello,
            ServerMessage::Ready { .. } => Opcode::Ready,
            ServerMessage::SessionDescription { .. } => Opcode::SessionDescription,
            ServerMessage::HeartbeatAck { .. } => Opcode::HeartbeatAck,
            ServerMessage::Resumed => Opcode::Resumed,
            ServerMessage::Speaking { .. } => Opcode::Speaking,
            ServerMessage::ClientsConnect { .. } => Opcode::ClientsConnect,
            ServerMessage::ClientDisconnect { .. } => Opcode::ClientDisconnect,
        }
    }

    /// The JSON text frame, numbered `seq` (v8's top-level field) or, for
    /// connection-level messages (Hello, heartbeat ACK), not numbered.
    pub fn encode(&self, seq: Option<u64>) -> String {
        let op = self.opcode() as u8;
        fn frame<T: Serialize>(op: u8, d: T, seq: Option<u64>) -> String {
            // Structs of strings and integers always serialise.
            serde_json::to_string(&Frame { op, d, seq }).unwrap_or_default()
        }
        match self {
            ServerMessage::Hello {
                heartbeat_interval_ms,
            } => frame(
                op,
                HelloD {
                    heartbeat_interval: *heartbeat_interval_ms,
                },
                seq,
            ),
            ServerMessage::Ready {
                ssrc,
                ip,
                port,
                modes,
            } => frame(
                op,
                ReadyD {
                    ssrc: *ssrc,
                    ip,
                    port: *port,
                    modes,
                },
                seq,
            ),
            ServerMessage::SessionDescription { mode, secret_key } => frame(
                op,
                SessionDescriptionD {
                    mode,
                    secret_key,
                    // DAVE declined, as the docs allow.
                    dave_protocol_version: 0,
                },
                seq,
            ),
            ServerMessage::HeartbeatAck { t } => frame(op, AckD { t: *t }, seq),
            ServerMessage::Resumed => frame(op, (), seq),
            ServerMessage::Speaking {
                user_id,
                ssrc,
                speaking,
            } => frame(
                op,
                SpeakingD {
                    user_id: user_id.to_string(),
                    ssrc: *ssrc,
                    speaking: *speaking,
                },
                seq,
            ),
            ServerMessage::ClientsConnect { user_ids } => frame(
                op,
                ClientsConnectD {
                    user_ids: user_ids.iter().map(i64::to_string).collect(),
                },
                seq,
            ),
            ServerMessage::ClientDisconnect { user_id } => frame(
                op,
                ClientDisconnectD {
                    user_id: user_id.to_string(),
                },
                seq,
            ),
        }
    }
}

/// IP discovery packet length, bytes (type, length, ssrc, address, port).
pub const IP_DISCOVERY_BYTES: usize = 74;
/// IP discovery: request type.
pub const IP_DISCOVERY_REQUEST: u16 = 0x1;
/// IP discovery: response type.
pub const IP_DISCOVERY_RESPONSE: u16 = 0x2;
/// IP discovery: the length field (bytes after type and length).
pub const IP_DISCOVERY_LENGTH: u16 = 70;

/// The SSRC of an IP discovery request, if `packet` is one.
pub fn parse_ip_discovery_request(packet: &[u8]) -> Option<u32> {
    if packet.len() != IP_DISCOVERY_BYTES {
        return None;
    }
    let kind = u16::from_be_bytes([packet[0], packet[1]]);
    let length = u16::from_be_bytes([packet[2], packet[3]]);
    if kind != IP_DISCOVERY_REQUEST || length != IP_DISCOVERY_LENGTH {
        return None;
    }
    Some(u32::from_be_bytes([
        packet[4], packet[5], packet[6], packet[7],
    ]))
}

/// The IP discovery answer: the client's address as seen (NUL-padded,
/// at most 63 bytes so it stays NUL-terminated) and port.
pub fn ip_discovery_response(ssrc: u32, address: &str, port: u16) -> [u8; IP_DISCOVERY_BYTES] {
    let mut out = [0u8; IP_DISCOVERY_BYTES];
    out[0..2].copy_from_slice(&IP_DISCOVERY_RESPONSE.to_be_bytes());
    out[2..4].copy_from_slice(&IP_DISCOVERY_LENGTH.to_be_bytes());
    out[4..8].copy_from_slice(&ssrc.to_be_bytes());
    let bytes = address.as_bytes();
    let n = bytes.len().min(63);
    out[8..8 + n].copy_from_slice(&bytes[..n]);
    out[72..74].copy_from_slice(&port.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_frames_are_the_documented_json() {
        let cases = [
            (
                ServerMessage::Hello {
                    heartbeat_interval_ms: 41_250,
                },
                r#"{"op":8,"d":{"heartbeat_interval":41250},"seq":1}"#,
            ),
            (
                ServerMessage::Ready {
                    ssrc: 1,
                    ip: "127.0.0.1".into(),
                    port: 1234,
                    modes: vec![
                        MODE_AES256_GCM_RTPSIZE.into(),
                        MODE_XCHACHA20_POLY1305_RTPSIZE.into(),
                    ],
                },
                r#"{"op":2,"d":{"ssrc":1,"ip":"127.0.0.1","port":1234,"modes":["aead_aes256_gcm_rtpsize","aead_xchacha20_poly1305_rtpsize"]},"seq":1}"#,
            ),
            (
                ServerMessage::HeartbeatAck {
                    t: 1_501_184_119_561,
                },
                r#"{"op":6,"d":{"t":1501184119561},"seq":1}"#,
            ),
            (ServerMessage::Resumed, r#"{"op":9,"d":null,"seq":1}"#),
            (
                ServerMessage::Speaking {
                    user_id: 104_694_319_306_248_192,
                    ssrc: 110,
                    speaking: 1,
                },
                r#"{"op":5,"d":{"user_id":"104694319306248192","ssrc":110,"speaking":1},"seq":1}"#,
            ),
            (
                ServerMessage::ClientsConnect {
                    user_ids: vec![1, 2],
                },
                r#"{"op":11,"d":{"user_ids":["1","2"]},"seq":1}"#,
            ),
            (
                ServerMessage::ClientDisconnect { user_id: 7 },
                r#"{"op":13,"d":{"user_id":"7"},"seq":1}"#,
            ),
        ];
        for (message, json) in cases {
            assert_eq!(message.encode(Some(1)), json);
        }
        let mut key = [0u8; SECRET_KEY_BYTES];
        key[0] = 251;
        key[31] = 11;
        let description = ServerMessage::SessionDescription {
            mode: MODE_AES256_GCM_RTPSIZE.into(),
            secret_key: key,
        }
        .encode(Some(10));
        assert_eq!(
            ServerMessage::HeartbeatAck { t: 5 }.encode(None),
            r#"{"op":6,"d":{"t":5}}"#
        );
        assert_eq!(
            description,
            r#"{"op":4,"d":{"mode":"aead_aes256_gcm_rtpsize","secret_key":[251,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,11],"dave_protocol_version":0},"seq":10}"#
        );
    }

    #[test]
    fn client_payloads_of_the_docs_parse() {
        let identify = br#"{"op":0,"d":{"server_id":"41771983423143937","user_id":"104694319306248192","session_id":"my_session_id","token":"my_token","max_dave_protocol_version":1}}"#;
        assert_eq!(
            parse_client(identify, 4096),
            Ok(ClientMessage::Identify(VoiceIdentify {
                server_id: 41_771_983_423_143_937,
                user_id: 104_694_319_306_248_192,
                session_id: "my_session_id".into(),
                token: "my_token".into(),
                max_dave_protocol_version: Some(1),
                video: None,
            }))
        );
        let select = br#"{"op":1,"d":{"protocol":"udp","data":{"address":"127.0.0.1","port":1337,"mode":"aead_aes256_gcm_rtpsize"}}}"#;
        assert_eq!(
            parse_client(select, 4096),
            Ok(ClientMessage::SelectProtocol(SelectProtocol {
                protocol: "udp".into(),
                data: SelectProtocolData {
                    address: "127.0.0.1".into(),
                    port: 1337,
                    mode: MODE_AES256_GCM_RTPSIZE.into(),
                },
            }))
        );
        assert_eq!(
            parse_client(br#"{"op":3,"d":{"t":1501184119561,"seq_ack":10}}"#, 4096),
            Ok(ClientMessage::Heartbeat(VoiceHeartbeat {
                t: 1_501_184_119_561,
                seq_ack: Some(10)
            }))
        );
        assert_eq!(
            parse_client(br#"{"op":3,"d":1501184119561}"#, 4096),
            Ok(ClientMessage::Heartbeat(VoiceHeartbeat {
                t: 1_501_184_119_561,
                seq_ack: None
            }))
        );
        assert_eq!(
            parse_client(br#"{"op":3,"d":{"t":1,"seq_ack":-1}}"#, 4096),
            Ok(ClientMessage::Heartbeat(VoiceHeartbeat {
                t: 1,
                seq_ack: None
            }))
        );
        let resume = br#"{"op":7,"d":{"server_id":"41771983423143937","session_id":"my_session_id","token":"my_token","seq_ack":10}}"#;
        let Ok(ClientMessage::Resume(resume)) = parse_client(resume, 4096) else {
            panic!("resume did not parse");
        };
        assert_eq!(resume.acked(), Some(10));
        assert_eq!(
            parse_client(br#"{"op":5,"d":{"speaking":5,"delay":0,"ssrc":1}}"#, 4096),
            Ok(ClientMessage::Speaking(ClientSpeaking {
                speaking: 5,
                delay: 0,
                ssrc: 1
            }))
        );
        assert_eq!(
            parse_client(br#"{"op":23,"d":{"transition_id":1}}"#, 4096),
            Ok(ClientMessage::Dave(Opcode::DaveTransitionReady))
        );
        assert_eq!(
            parse_client_binary(&[26, 1, 2], 4096),
            Ok(ClientMessage::Dave(Opcode::DaveMlsKeyPackage))
        );
        assert_eq!(
            parse_client_binary(&[2, 1, 2], 4096),
            Err(ClientMessageError::Decode)
        );
    }

    #[test]
    fn bad_client_payloads_map_to_their_close_codes() {
        let cases: [(&[u8], ClientMessageError); 6] = [
            (b"{", ClientMessageError::Decode),
            (
                br#"{"op":0,"d":{"server_id":"x"}}"#,
                ClientMessageError::Decode,
            ),
            (br#"{"op":12,"d":null}"#, ClientMessageError::UnknownOpcode),
            (br#"{"op":4,"d":null}"#, ClientMessageError::UnknownOpcode),
            (br#"{"op":300,"d":null}"#, ClientMessageError::UnknownOpcode),
            (
                br#"{"op":1,"d":{"protocol":"udp"}}"#,
                ClientMessageError::Decode,
            ),
        ];
        for (payload, error) in cases {
            assert_eq!(parse_client(payload, 4096), Err(error));
        }
        assert_eq!(
            parse_client(&[b' '; 100], 10),
            Err(ClientMessageError::TooLarge)
        );
        assert_eq!(ClientMessageError::UnknownOpcode.close_code().code(), 4001);
        assert_eq!(ClientMessageError::TooLarge.close_code().code(), 4002);
        for code in 4001..=4022 {
            if let Some(c) = VoiceCloseCode::from_code(code) {
                assert_eq!(c.code(), code);
                assert!(!c.reason().is_empty());
            }
        }
    }

    #[test]
    fn ip_discovery_is_74_bytes_each_way() {
        let mut request = [0u8; IP_DISCOVERY_BYTES];
        request[0..2].copy_from_slice(&1u16.to_be_bytes());
        request[2..4].copy_from_slice(&70u16.to_be_bytes());
        request[4..8].copy_from_slice(&42u32.to_be_bytes());
        assert_eq!(parse_ip_discovery_request(&request), Some(42));
        assert_eq!(parse_ip_discovery_request(&request[..73]), None);
        let answer = ip_discovery_response(42, "203.0.113.9", 50_000);
        assert_eq!(answer.len(), 74);
        // discord.py's check.
        assert_eq!(answer[1], 0x02);
        assert_eq!(&answer[8..19], b"203.0.113.9");
        assert_eq!(answer[19], 0);
        assert_eq!(u16::from_be_bytes([answer[72], answer[73]]), 50_000);
    }
}
