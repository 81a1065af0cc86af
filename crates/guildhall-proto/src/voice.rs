//! The voice control plane's envelopes: what the gateway asks the voice
//! role, and what a voice syncer asks an SFU. (The voice *gateway* that
//! clients speak to an SFU is `voice_gateway`.)
//!
//! The path of a join (Discord's, seed 003's): op 4 reaches the guild's
//! owner, which checks and records the voice state (VOICE_STATE_UPDATE);
//! the gateway then asks the guild's voice coordinator
//! ([`voice_requests_subject`], placed with bounded loads over the live
//! voice nodes) for a [`VoiceRequest::Join`]. The coordinator spawns the
//! channel's syncer under one spawn budget that counts coordinators and
//! their children alike; the syncer allocates the call on an SFU chosen by
//! announced capacity and load ([`SfuRequest::Allocate`], on
//! [`sfu_requests_subject`]), admits the user with a freshly minted token
//! ([`SfuRequest::Admit`]; only the token's SHA-256 travels) and answers
//! [`VoiceReply::Server`], which the gateway sends as VOICE_SERVER_UPDATE.
//!
//! Release and eviction are control work and travel on their own subject
//! ([`sfu_control_subject`], its own bounded subscription), so a backlog
//! of allocations never delays them (seed 003: supervisors scanning
//! million-message mailboxes could not hand off or shut down).
//!
//! Every envelope is JSON under [`VOICE_ENVELOPE_VERSION`]; requests carry
//! the bus deadline, and work whose deadline passed is not started.

use serde::{Deserialize, Serialize};

/// Version of every envelope here; a node refuses other versions.
pub const VOICE_ENVELOPE_VERSION: u32 = 1;

/// Longest voice token, in bytes (ours are 32 hex digits).
pub const VOICE_TOKEN_BYTES_MAX: usize = 64;

/// Subject on which voice node `node` serves [`VoiceRequest`]s for the
/// guilds placement gives it.
pub fn voice_requests_subject(node: &str) -> String {
    format!("voice.{node}.requests")
}

/// Subject on which SFU node `node` serves allocations and admissions
/// (bulk work).
pub fn sfu_requests_subject(node: &str) -> String {
    format!("sfu.{node}.requests")
}

/// Subject on which SFU node `node` serves releases and evictions
/// (control work, never queued behind allocations).
pub fn sfu_control_subject(node: &str) -> String {
    format!("sfu.{node}.control")
}

/// A gateway asks a guild's voice coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VoiceEnvelope {
    /// [`VOICE_ENVELOPE_VERSION`].
    pub v: u32,
    /// The request.
    pub body: VoiceRequest,
}

/// What a gateway asks of the voice role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum VoiceRequest {
    /// The session's user is now in `channel_id` (joined or moved there;
    /// the guild's owner already checked and recorded it): allocate or
    /// reuse the channel's call and admit the user.
    Join {
        /// The guild.
        guild_id: i64,
        /// The voice channel.
        channel_id: i64,
        /// The user.
        user_id: i64,
        /// The gateway session that sent op 4 (the holder's node is named
        /// by the session id, so a re-placed call's new endpoint reaches
        /// it).
        session_id: String,
    },
    /// The user left voice in the guild (op 4 with `channel_id: null`, or
    /// their session ended): evict them; a call whose last participant
    /// left is released.
    Leave {
        /// The guild.
        guild_id: i64,
        /// The user.
        user_id: i64,
        /// The session.
        session_id: String,
    },
}

/// The voice role's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum VoiceReply {
    /// VOICE_SERVER_UPDATE's data: `endpoint` (`host:port[/path]`) and
    /// `token` (for this user and call only).
    Server {
        /// The SFU's voice gateway.
        endpoint: String,
        /// The voice token.
        token: String,
    },
    /// Left (or was not in voice).
    Left,
    /// Not now: the budget, the per-instance cap, no SFU with room, an
    /// open breaker or an expired deadline. The gateway tells the client
    /// nothing more (Discord's clients wait, then retry op 4) and logs it
    /// through the throttle.
    Refused {
        /// Why.
        reason: VoiceRefusal,
        /// When a retry may succeed, ms (jittered by the refuser).
        retry_after_ms: u64,
    },
}

/// Why a voice request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VoiceRefusal {
    /// The spawn budget (coordinators and syncers together) is spent.
    SpawnBudget,
    /// This voice node holds its maximum of syncers.
    InstanceFull,
    /// No live SFU has room (or every candidate's breaker is open).
    NoSfu,
    /// The SFU did not answer in time or refused.
    SfuUnavailable,
    /// The request's deadline passed before work started.
    Expired,
    /// The guild is not placed on this voice node.
    NotOwner,
}

impl VoiceRefusal {
    /// A stable label (metrics, logs).
    pub fn label(self) -> &'static str {
        match self {
            VoiceRefusal::SpawnBudget => "spawn_budget",
            VoiceRefusal::InstanceFull => "instance_full",
            VoiceRefusal::NoSfu => "no_sfu",
            VoiceRefusal::SfuUnavailable => "sfu_unavailable",
            VoiceRefusal::Expired => "expired",
            VoiceRefusal::NotOwner => "not_owner",
        }
    }
}

/// A voice syncer asks an SFU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SfuEnvelope {
    /// [`VOICE_ENVELOPE_VERSION`].
    pub v: u32,
    /// The request.
    pub body: SfuRequest,
}

/// What a syncer asks of an SFU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SfuRequest {
    /// Host the call of `channel_id` (idempotent: an allocated call
    /// answers its endpoint again). `epoch` fences syncers: a request
    /// with an older epoch than the call's is refused, a newer one takes
    /// the call over (the syncer moved).
    Allocate {
        /// The guild (VOICE identify's `server_id`).
        guild_id: i64,
        /// The channel: the call's key.
        channel_id: i64,
        /// The syncer's fencing epoch.
        epoch: u64,
    },
    /// Admit `user_id` of `session_id` into the call with the token whose
    /// SHA-256 is `token_sha256` (hex); a user admitted again (a new
    /// token) replaces the previous admission and closes their old
    /// connection. An admission not used within the SFU's admission TTL
    /// lapses.
    Admit {
        /// The guild.
        guild_id: i64,
        /// The call.
        channel_id: i64,
        /// The user.
        user_id: i64,
        /// The gateway session (VOICE identify's `session_id`).
        session_id: String,
        /// SHA-256 of the voice token, 64 hex digits.
        token_sha256: String,
        /// The syncer's fencing epoch.
        epoch: u64,
    },
    /// Control: disconnect `user_id` from the call (they left or moved).
    Evict {
        /// The call.
        channel_id: i64,
        /// The user.
        user_id: i64,
    },
    /// Control: end the call (its last participant left, or its syncer
    /// moves it elsewhere); its connections are closed with 4022.
    Release {
        /// The call.
        channel_id: i64,
        /// The syncer's fencing epoch (an older one is ignored).
        epoch: u64,
    },
}

impl SfuRequest {
    /// Whether this is control work (its own subject).
    pub fn is_control(&self) -> bool {
        matches!(self, SfuRequest::Evict { .. } | SfuRequest::Release { .. })
    }
}

/// An SFU's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SfuReply {
    /// Allocated (or already was): where clients connect.
    Allocated {
        /// `host:port[/path]`.
        endpoint: String,
    },
    /// Admitted.
    Admitted,
    /// Done (eviction or release; also when there was nothing to do).
    Done,
    /// Refused.
    Refused {
        /// Why.
        reason: SfuRefusal,
    },
}

/// Why an SFU refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SfuRefusal {
    /// Its session or call capacity is reached.
    Full,
    /// The call has a newer syncer epoch.
    StaleEpoch,
    /// Admit for a call that is not allocated here.
    UnknownCall,
    /// Malformed request (bad digest, ids).
    BadRequest,
    /// The SFU is draining.
    Draining,
}

/// Why an envelope could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VoiceEnvelopeError {
    /// Not JSON of the right shape.
    Malformed,
    /// Another version.
    Version,
}

macro_rules! envelope_codec {
    ($t:ty, $body:ty) => {
        impl $t {
            /// Wraps `body` at the current version.
            pub fn new(body: $body) -> Self {
                Self {
                    v: VOICE_ENVELOPE_VERSION,
                    body,
                }
            }

            /// JSON bytes.
            pub fn encode(&self) -> Vec<u8> {
                // A struct of strings and integers always serialises.
                serde_json::to_vec(self).unwrap_or_default()
            }

            /// Decodes and checks the version.
            pub fn decode(bytes: &[u8]) -> Result<Self, VoiceEnvelopeError> {
                let e: Self =
                    serde_json::from_slice(bytes).map_err(|_| VoiceEnvelopeError::Malformed)?;
                if e.v != VOICE_ENVELOPE_VERSION {
                    return Err(VoiceEnvelopeError::Version);
                }
                Ok(e)
            }
        }
    };
}

envelope_codec!(VoiceEnvelope, VoiceRequest);
envelope_codec!(SfuEnvelope, SfuRequest);

/// A reply, decoded (replies carry no version of their own: they answer
/// a request of a known version).
pub fn decode_reply<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, VoiceEnvelopeError> {
    serde_json::from_slice(bytes).map_err(|_| VoiceEnvelopeError::Malformed)
}

/// A reply, encoded.
pub fn encode_reply<T: Serialize>(reply: &T) -> Vec<u8> {
    serde_json::to_vec(reply).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_refuse_other_versions() {
        let join = VoiceEnvelope::new(VoiceRequest::Join {
            guild_id: 1,
            channel_id: 2,
            user_id: 3,
            session_id: "s".into(),
        });
        assert_eq!(VoiceEnvelope::decode(&join.encode()), Ok(join.clone()));
        let mut other = join.clone();
        other.v = 2;
        assert_eq!(
            VoiceEnvelope::decode(&other.encode()),
            Err(VoiceEnvelopeError::Version)
        );
        assert_eq!(
            VoiceEnvelope::decode(b"{"),
            Err(VoiceEnvelopeError::Malformed)
        );
        let release = SfuEnvelope::new(SfuRequest::Release {
            channel_id: 2,
            epoch: 1,
        });
        assert!(release.body.is_control());
        assert_eq!(SfuEnvelope::decode(&release.encode()), Ok(release));
        let reply = VoiceReply::Refused {
            reason: VoiceRefusal::SpawnBudget,
            retry_after_ms: 250,
        };
        assert_eq!(decode_reply::<VoiceReply>(&encode_reply(&reply)), Ok(reply));
    }
}
