//! The session state machine.
//!
//! ```text
//!  HELLO ─► AwaitingIdentify ─IDENTIFY─► Authenticating ─ok─► Ready
//!               ▲   │                        │    ▲              │
//!               │   └─RESUME─────────────────┘    │              │
//!               └──── INVALID_SESSION (d=false) ◄─┘ (overloaded, │
//!                                                    gap)        ▼
//!                                      any close code ──────► Closed
//! ```
//!
//! Rules (Discord's, with the close codes the docs give):
//! - heartbeats are accepted in every open phase and answered at once;
//! - anything but HEARTBEAT, IDENTIFY and RESUME before READY: 4003;
//! - IDENTIFY or RESUME once authenticated (or authenticating): 4005;
//! - undefined intent bits: 4013 at once; privileged bits the application
//!   may not use: 4014 after authentication; a bad token: 4004;
//! - no heartbeat for `heartbeat_timeout_ms`: 4009;
//! - no IDENTIFY or RESUME within `identify_timeout_ms` of HELLO (or of an
//!   INVALID_SESSION inviting one): 4003;
//! - a `shard` with `shard_id >= num_shards`, `num_shards` of 0 or above
//!   `shards_max`: 4010;
//! - more than `inbound_per_minute_max` payloads in a minute: 4008;
//! - a payload that does not parse or is too large (text or binary frame
//!   alike), or a binary frame that is not UTF-8: 4002; an op clients may
//!   not send: 4001.

use guildhall_proto::Snowflake;
use guildhall_proto::gateway::{
    self, CloseCode, Identify, Inbound, PresenceUpdate, RequestGuildMembers, Resume,
    VoiceStateUpdate,
};
use guildhall_proto::intents;

/// Bounds; defaults from [`guildhall_limits`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionConfig {
    /// Announced in HELLO.
    pub heartbeat_interval_ms: u64,
    /// Silence before 4009.
    pub heartbeat_timeout_ms: u64,
    /// Largest client payload.
    pub payload_bytes_max: usize,
    /// Client payloads per minute before 4008.
    pub inbound_per_minute_max: u32,
    /// Time from HELLO (or INVALID_SESSION) to IDENTIFY or RESUME before
    /// 4003.
    pub identify_timeout_ms: u64,
    /// Largest `num_shards` before 4010.
    pub shards_max: u32,
}

impl Default for SessionConfig {
    fn default() -> Self {
        use guildhall_limits as l;
        Self {
            heartbeat_interval_ms: l::HEARTBEAT_INTERVAL_MS,
            heartbeat_timeout_ms: l::HEARTBEAT_TIMEOUT_MS,
            payload_bytes_max: l::GATEWAY_PAYLOAD_BYTES_MAX,
            inbound_per_minute_max: l::GATEWAY_INBOUND_PER_MINUTE_MAX,
            identify_timeout_ms: l::GATEWAY_IDENTIFY_TIMEOUT_MS,
            shards_max: l::GATEWAY_SHARDS_MAX,
        }
    }
}

/// Where the session is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// HELLO sent; waiting for IDENTIFY or RESUME.
    AwaitingIdentify,
    /// The token (or the session to resume) is being looked up.
    Authenticating,
    /// READY or RESUMED sent.
    Ready,
    /// A close code was sent; input is ignored.
    Closed,
}

/// Who the token belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The user (or bot user).
    pub user_id: Snowflake,
    /// Privileged intents the application may use.
    pub privileged_intents_allowed: u64,
}

/// Why authentication did not produce an identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// Unknown or revoked token: 4004.
    BadToken,
    /// The users service shed the request: INVALID_SESSION (d=false), the
    /// client identifies again ~5 s later. Never refuse a first connection
    /// that could succeed later (discord.py and discord.js exit on that).
    Overloaded,
    /// The bot's `max_concurrency` bucket admitted an IDENTIFY within the
    /// window: INVALID_SESSION (d=false), as Discord documents; the client
    /// identifies again a few seconds later.
    ConcurrencyExceeded,
}

/// Why a RESUME could not be served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeFailure {
    /// Unknown, expired or foreign session, or the replay window no longer
    /// covers the gap: INVALID_SESSION (d=false).
    Invalid,
    /// The client claims a sequence the session never sent: 4007.
    InvalidSeq,
}

/// What the I/O layer must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Send this (non-dispatch) frame.
    Send(String),
    /// Send the close frame with this code, then close the socket.
    Close(CloseCode),
    /// Look the token up; answer with [`Session::identified`].
    Authenticate(Identify),
    /// Look the session up and replay; answer with [`Session::resumed`].
    Resume(Resume),
    /// Authenticated: send READY, then one GUILD_CREATE per guild.
    SendReady {
        /// The identity.
        identity: Identity,
        /// Granted intents.
        intents: u64,
        /// Shard, echoed in READY.
        shard: Option<[u32; 2]>,
    },
    /// Op 8.
    RequestGuildMembers(RequestGuildMembers),
    /// Op 4.
    VoiceStateUpdate(VoiceStateUpdate),
    /// Op 3.
    PresenceUpdate(PresenceUpdate),
}

/// One gateway session's protocol state.
#[derive(Clone, Debug)]
pub struct Session {
    config: SessionConfig,
    phase: Phase,
    last_heartbeat_ms: u64,
    /// When the session last started waiting for IDENTIFY or RESUME.
    awaiting_since_ms: u64,
    window_start_ms: u64,
    window_count: u32,
    pending_identify: Option<Identify>,
    intents: u64,
}

impl Session {
    /// A new session at `now_ms`, and the HELLO to send.
    pub fn new(config: SessionConfig, now_ms: u64) -> (Self, Command) {
        let hello = Command::Send(gateway::hello_frame(config.heartbeat_interval_ms));
        let session = Self {
            config,
            phase: Phase::AwaitingIdentify,
            last_heartbeat_ms: now_ms,
            awaiting_since_ms: now_ms,
            window_start_ms: now_ms,
            window_count: 0,
            pending_identify: None,
            intents: 0,
        };
        (session, hello)
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Granted intents (0 before READY).
    pub fn intents(&self) -> u64 {
        self.intents
    }

    fn close(&mut self, code: CloseCode, out: &mut Vec<Command>) {
        self.phase = Phase::Closed;
        out.push(Command::Close(code));
    }

    /// A text frame from the client.
    pub fn on_text(&mut self, now_ms: u64, payload: &[u8], out: &mut Vec<Command>) {
        if self.phase == Phase::Closed {
            return;
        }
        if now_ms >= self.window_start_ms + 60_000 {
            self.window_start_ms = now_ms;
            self.window_count = 0;
        }
        self.window_count += 1;
        if self.window_count > self.config.inbound_per_minute_max {
            return self.close(CloseCode::RateLimited, out);
        }
        let inbound = match gateway::parse(payload, self.config.payload_bytes_max) {
            Ok(inbound) => inbound,
            Err(error) => return self.close(error.close_code(), out),
        };
        match (self.phase, inbound) {
            (_, Inbound::Heartbeat(_)) => {
                self.last_heartbeat_ms = now_ms;
                out.push(Command::Send(gateway::heartbeat_ack_frame().to_owned()));
            }
            (Phase::AwaitingIdentify, Inbound::Identify(identify)) => {
                if let Err(error) = intents::check(identify.intents, intents::PRIVILEGED) {
                    return self.close(error.into(), out);
                }
                if let Some([shard_id, shards]) = identify.shard
                    && (shards == 0 || shard_id >= shards || shards > self.config.shards_max)
                {
                    return self.close(CloseCode::InvalidShard, out);
                }
                self.phase = Phase::Authenticating;
                self.pending_identify = Some(identify.clone());
                out.push(Command::Authenticate(identify));
            }
            (Phase::AwaitingIdentify, Inbound::Resume(resume)) => {
                self.phase = Phase::Authenticating;
                out.push(Command::Resume(resume));
            }
            (_, Inbound::Identify(_) | Inbound::Resume(_)) => {
                self.close(CloseCode::AlreadyAuthenticated, out)
            }
            (Phase::Ready, Inbound::RequestGuildMembers(r)) => {
                out.push(Command::RequestGuildMembers(r))
            }
            (Phase::Ready, Inbound::VoiceStateUpdate(v)) => out.push(Command::VoiceStateUpdate(v)),
            (Phase::Ready, Inbound::PresenceUpdate(p)) => out.push(Command::PresenceUpdate(p)),
            (_, _) => self.close(CloseCode::NotAuthenticated, out),
        }
    }

    /// A binary frame: JSON like a text frame (hikari sends its payloads
    /// in binary frames), under the same size bound. Clients send plain
    /// JSON in Discord's protocol (ETF is not offered, and nothing a client
    /// sends is ever inflated), so bytes that are not UTF-8 are 4002.
    pub fn on_binary(&mut self, now_ms: u64, payload: &[u8], out: &mut Vec<Command>) {
        if self.phase == Phase::Closed {
            return;
        }
        if payload.len() > self.config.payload_bytes_max || std::str::from_utf8(payload).is_err() {
            return self.close(CloseCode::DecodeError, out);
        }
        self.on_text(now_ms, payload, out);
    }

    /// A frame that could not be decoded into a payload at all (an
    /// `encoding=etf` frame that is no term): 4002, as Discord closes.
    pub fn on_undecodable(&mut self, out: &mut Vec<Command>) {
        if self.phase == Phase::Closed {
            return;
        }
        self.close(CloseCode::DecodeError, out);
    }

    /// Time passes: closes a session whose heartbeats stopped, or that
    /// has not identified in time (heartbeats alone do not keep an
    /// unidentified socket open).
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<Command>) {
        if self.phase == Phase::Closed {
            return;
        }
        if now_ms > self.last_heartbeat_ms + self.config.heartbeat_timeout_ms {
            self.close(CloseCode::SessionTimedOut, out);
        } else if self.phase == Phase::AwaitingIdentify
            && now_ms
                > self
                    .awaiting_since_ms
                    .saturating_add(self.config.identify_timeout_ms)
        {
            self.close(CloseCode::NotAuthenticated, out);
        }
    }

    /// Back to waiting for IDENTIFY after INVALID_SESSION: a fresh window.
    fn invalid_session(&mut self, now_ms: u64, out: &mut Vec<Command>) {
        self.phase = Phase::AwaitingIdentify;
        self.awaiting_since_ms = now_ms;
        out.push(Command::Send(
            gateway::invalid_session_frame(false).to_owned(),
        ));
    }

    /// The answer to [`Command::Authenticate`], at `now_ms`.
    pub fn identified(
        &mut self,
        now_ms: u64,
        result: Result<Identity, AuthFailure>,
        out: &mut Vec<Command>,
    ) {
        if self.phase != Phase::Authenticating {
            return;
        }
        let Some(identify) = self.pending_identify.take() else {
            return;
        };
        match result {
            Err(AuthFailure::BadToken) => self.close(CloseCode::AuthenticationFailed, out),
            Err(AuthFailure::Overloaded | AuthFailure::ConcurrencyExceeded) => {
                self.invalid_session(now_ms, out)
            }
            Ok(identity) => {
                match intents::check(identify.intents, identity.privileged_intents_allowed) {
                    Err(error) => self.close(error.into(), out),
                    Ok(()) => {
                        self.phase = Phase::Ready;
                        self.intents = identify.intents;
                        out.push(Command::SendReady {
                            identity,
                            intents: identify.intents,
                            shard: identify.shard,
                        });
                    }
                }
            }
        }
    }

    /// The answer to [`Command::Resume`], with the resumed session's
    /// intents: on success the I/O layer has replayed the missed dispatches
    /// and sends RESUMED.
    pub fn resumed(
        &mut self,
        now_ms: u64,
        result: Result<u64, ResumeFailure>,
        out: &mut Vec<Command>,
    ) {
        if self.phase != Phase::Authenticating {
            return;
        }
        match result {
            Ok(intents) => {
                self.phase = Phase::Ready;
                self.intents = intents;
            }
            Err(ResumeFailure::Invalid) => self.invalid_session(now_ms, out),
            Err(ResumeFailure::InvalidSeq) => self.close(CloseCode::InvalidSeq, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guildhall_limits as l;

    const IDENTIFY: &str = r#"{"op":2,"d":{"token":"Bot t","intents":513,"properties":{}}}"#;

    fn identity() -> Identity {
        Identity {
            user_id: Snowflake::new(1).unwrap(),
            privileged_intents_allowed: intents::PRIVILEGED,
        }
    }

    fn ready_session() -> Session {
        let (mut s, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        s.on_text(1, IDENTIFY.as_bytes(), &mut out);
        s.identified(1, Ok(identity()), &mut out);
        assert_eq!(s.phase(), Phase::Ready);
        s
    }

    fn closed_with(out: &[Command]) -> Option<u16> {
        out.iter().find_map(|c| match c {
            Command::Close(code) => Some(code.code()),
            _ => None,
        })
    }

    #[test]
    fn happy_path_hello_identify_ready() {
        let (mut s, hello) = Session::new(SessionConfig::default(), 0);
        assert!(
            matches!(hello, Command::Send(ref f) if f.contains("\"heartbeat_interval\":41250"))
        );
        let mut out = Vec::new();
        s.on_text(5, br#"{"op":1,"d":null}"#, &mut out);
        s.on_text(6, IDENTIFY.as_bytes(), &mut out);
        assert!(matches!(out[0], Command::Send(ref f) if f.contains("\"op\":11")));
        assert!(matches!(out[1], Command::Authenticate(ref i) if i.token == "t"));
        out.clear();
        s.identified(1, Ok(identity()), &mut out);
        assert!(matches!(out[0], Command::SendReady { intents: 513, .. }));
    }

    /// The bad-input list of the issue, each with its close code.
    #[test]
    fn bad_inputs_close_with_the_documented_codes() {
        let fresh = || Session::new(SessionConfig::default(), 0).0;
        let cases: Vec<(&str, Session, Vec<u8>, u16)> = vec![
            ("invalid JSON", fresh(), b"{".to_vec(), 4002),
            (
                "unknown opcode",
                fresh(),
                br#"{"op":42,"d":null}"#.to_vec(),
                4001,
            ),
            (
                "oversized payload",
                fresh(),
                format!(r#"{{"op":1,"d":"{}"}}"#, "x".repeat(5000)).into_bytes(),
                4002,
            ),
            (
                "payload before IDENTIFY",
                fresh(),
                br#"{"op":8,"d":{"guild_id":"1"}}"#.to_vec(),
                4003,
            ),
            (
                "second IDENTIFY",
                ready_session(),
                IDENTIFY.as_bytes().to_vec(),
                4005,
            ),
            (
                "RESUME when ready",
                ready_session(),
                br#"{"op":6,"d":{"token":"t","session_id":"s","seq":1}}"#.to_vec(),
                4005,
            ),
            (
                "invalid intents",
                fresh(),
                br#"{"op":2,"d":{"token":"t","intents":1099511627776}}"#.to_vec(),
                4013,
            ),
        ];
        for (name, mut session, payload, code) in cases {
            let mut out = Vec::new();
            session.on_text(10, &payload, &mut out);
            assert_eq!(closed_with(&out), Some(code), "{name}: {out:?}");
            assert_eq!(session.phase(), Phase::Closed, "{name}");
            out.clear();
            session.on_text(11, br#"{"op":1,"d":null}"#, &mut out);
            assert!(out.is_empty(), "{name}: a closed session ignores input");
        }
    }

    #[test]
    fn bad_token_and_disallowed_intents_close_after_authentication() {
        let (mut s, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        s.on_text(1, IDENTIFY.as_bytes(), &mut out);
        s.identified(1, Err(AuthFailure::BadToken), &mut out);
        assert_eq!(closed_with(&out), Some(4004));

        let (mut s, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        let content = format!(
            r#"{{"op":2,"d":{{"token":"t","intents":{}}}}}"#,
            intents::MESSAGE_CONTENT
        );
        s.on_text(1, content.as_bytes(), &mut out);
        let no_privileges = Identity {
            privileged_intents_allowed: 0,
            ..identity()
        };
        s.identified(1, Ok(no_privileges), &mut out);
        assert_eq!(closed_with(&out), Some(4014));
    }

    #[test]
    fn overloaded_or_over_concurrency_identify_is_invalid_session_not_a_refusal() {
        for failure in [AuthFailure::Overloaded, AuthFailure::ConcurrencyExceeded] {
            let (mut s, _) = Session::new(SessionConfig::default(), 0);
            let mut out = Vec::new();
            s.on_text(1, IDENTIFY.as_bytes(), &mut out);
            out.clear();
            s.identified(1, Err(failure), &mut out);
            assert_eq!(
                out,
                [Command::Send(
                    gateway::invalid_session_frame(false).to_owned()
                )],
                "{failure:?}"
            );
            assert_eq!(
                s.phase(),
                Phase::AwaitingIdentify,
                "the client may IDENTIFY again"
            );
            // And it does, into a READY.
            s.on_text(2, IDENTIFY.as_bytes(), &mut out);
            s.identified(2, Ok(identity()), &mut out);
            assert_eq!(s.phase(), Phase::Ready, "{failure:?}");
        }
    }

    #[test]
    fn heartbeat_timeout_closes_with_4009() {
        let config = SessionConfig {
            identify_timeout_ms: 10 * l::HEARTBEAT_TIMEOUT_MS,
            ..SessionConfig::default()
        };
        let timeout = config.heartbeat_timeout_ms;
        let (mut s, _) = Session::new(config, 0);
        let mut out = Vec::new();
        s.on_tick(timeout, &mut out);
        assert!(out.is_empty());
        s.on_text(timeout, br#"{"op":1,"d":null}"#, &mut out);
        out.clear();
        s.on_tick(2 * timeout, &mut out);
        assert!(out.is_empty(), "the heartbeat reset the clock");
        s.on_tick(2 * timeout + 1, &mut out);
        assert_eq!(closed_with(&out), Some(4009));
    }

    #[test]
    fn inbound_flood_closes_with_4008() {
        let config = SessionConfig {
            inbound_per_minute_max: 5,
            ..SessionConfig::default()
        };
        let (mut s, _) = Session::new(config, 0);
        let mut out = Vec::new();
        for i in 0..5 {
            s.on_text(i, br#"{"op":1,"d":null}"#, &mut out);
        }
        assert_eq!(closed_with(&out), None);
        s.on_text(6, br#"{"op":1,"d":null}"#, &mut out);
        assert_eq!(closed_with(&out), Some(4008));
        let (mut s, _) = Session::new(
            SessionConfig {
                inbound_per_minute_max: 5,
                ..SessionConfig::default()
            },
            0,
        );
        for i in 0..20 {
            s.on_text(i * 20_000, br#"{"op":1,"d":null}"#, &mut out);
        }
        assert_eq!(s.phase(), Phase::AwaitingIdentify, "a steady pace is fine");
    }

    #[test]
    fn resume_flow() {
        let (mut s, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        s.on_text(
            1,
            br#"{"op":6,"d":{"token":"Bot t","session_id":"abc","seq":7}}"#,
            &mut out,
        );
        assert!(matches!(out[0], Command::Resume(ref r) if r.token == "t" && r.seq == Some(7)));
        s.resumed(1, Ok(513), &mut out);
        assert_eq!(s.phase(), Phase::Ready);
        assert_eq!(s.intents(), 513);

        let (mut s, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        s.on_text(
            1,
            br#"{"op":6,"d":{"token":"t","session_id":"abc","seq":7}}"#,
            &mut out,
        );
        out.clear();
        s.resumed(1, Err(ResumeFailure::Invalid), &mut out);
        assert_eq!(
            out,
            [Command::Send(
                gateway::invalid_session_frame(false).to_owned()
            )]
        );
        s.on_text(2, IDENTIFY.as_bytes(), &mut out);
        assert!(
            matches!(out.last(), Some(Command::Authenticate(_))),
            "may IDENTIFY after op 9"
        );
    }

    /// Shards: `[shard_id, num_shards]` with `shard_id < num_shards` and
    /// `1 <= num_shards <= shards_max`; anything else is 4010.
    #[test]
    fn invalid_shards_close_with_4010() {
        let config = SessionConfig {
            shards_max: 16,
            ..SessionConfig::default()
        };
        let cases: [(&str, Option<u16>); 7] = [
            ("[0,1]", None),
            ("[15,16]", None),
            ("[5,2]", Some(4010)),
            ("[0,0]", Some(4010)),
            ("[1,1]", Some(4010)),
            ("[0,17]", Some(4010)),
            ("[4294967295,1]", Some(4010)),
        ];
        for (shard, code) in cases {
            let (mut s, _) = Session::new(config.clone(), 0);
            let mut out = Vec::new();
            let identify =
                format!(r#"{{"op":2,"d":{{"token":"t","intents":513,"shard":{shard}}}}}"#);
            s.on_text(1, identify.as_bytes(), &mut out);
            assert_eq!(closed_with(&out), code, "shard {shard}: {out:?}");
        }
    }

    #[test]
    fn no_identify_within_the_bound_closes_with_4003_even_while_heartbeating() {
        let config = SessionConfig {
            identify_timeout_ms: 1_000,
            ..SessionConfig::default()
        };
        let (mut s, _) = Session::new(config.clone(), 0);
        let mut out = Vec::new();
        for now in (0..=1_000).step_by(250) {
            s.on_text(now, br#"{"op":1,"d":null}"#, &mut out);
            s.on_tick(now, &mut out);
        }
        assert_eq!(closed_with(&out), None, "within the bound");
        s.on_tick(1_001, &mut out);
        assert_eq!(closed_with(&out), Some(4003));

        // INVALID_SESSION opens a fresh window for the next IDENTIFY.
        let (mut s, _) = Session::new(config.clone(), 0);
        let mut out = Vec::new();
        s.on_text(900, IDENTIFY.as_bytes(), &mut out);
        s.identified(950, Err(AuthFailure::Overloaded), &mut out);
        s.on_tick(1_900, &mut out);
        assert_eq!(closed_with(&out), None);
        s.on_tick(1_951, &mut out);
        assert_eq!(closed_with(&out), Some(4003));

        // An identified session is not held to it.
        let (mut s, _) = Session::new(config, 0);
        let mut out = Vec::new();
        s.on_text(10, IDENTIFY.as_bytes(), &mut out);
        s.identified(20, Ok(identity()), &mut out);
        s.on_text(5_000, br#"{"op":1,"d":null}"#, &mut out);
        s.on_tick(5_000, &mut out);
        assert_eq!(closed_with(&out), None);
    }

    #[test]
    fn binary_frames_are_json_and_close_with_4002_when_not_utf8_or_too_large() {
        let mut s = ready_session();
        let mut out = Vec::new();
        s.on_binary(2, br#"{"op":1,"d":null}"#, &mut out);
        assert_eq!(closed_with(&out), None);
        assert!(matches!(out.as_slice(), [Command::Send(_)]));
        let mut s = ready_session();
        let mut out = Vec::new();
        s.on_binary(2, &[0x78, 0x9c, 0xff, 0xfe], &mut out);
        assert_eq!(closed_with(&out), Some(4002));
        let mut s = ready_session();
        let mut out = Vec::new();
        let large = format!(r#"{{"op":1,"d":null,"x":"{}"}}"#, "a".repeat(5000));
        s.on_binary(2, large.as_bytes(), &mut out);
        assert_eq!(closed_with(&out), Some(4002));
        let (mut fresh, _) = Session::new(SessionConfig::default(), 0);
        let mut out = Vec::new();
        fresh.on_binary(1, IDENTIFY.as_bytes(), &mut out);
        assert!(matches!(out.as_slice(), [Command::Authenticate(_)]));
    }
}
