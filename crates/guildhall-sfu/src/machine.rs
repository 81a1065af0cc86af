//! The voice gateway session as pure state machines: which opcode is
//! allowed when, the identify and heartbeat deadlines, the inbound rate
//! limit, and the numbered outbox whose replay buffer serves v8 resumes.
//!
//! Time is an argument (`now_ms`), nothing here does I/O: the edge (the
//! WebSocket task) feeds parsed client messages in and carries the
//! [`Action`]s out, consulting the SFU's call table where an action asks
//! for it (identify, resume, select protocol) and reporting the answer
//! back ([`Machine::authenticated`], [`Machine::resumed`]).
//!
//! Phases: Hello is sent at construction, then `AwaitingIdentify` →
//! (identify or resume) `Authenticating` → `Identified` → (select
//! protocol) `Live`. Hello and heartbeat ACKs are not numbered: they
//! belong to one connection, and a resumed connection's Hello must not
//! move the client's `seq_ack` off the session's numbering.

use std::collections::VecDeque;

use guildhall_proto::voice_gateway::{
    ClientMessage, ClientMessageError, ServerMessage, VoiceCloseCode, VoiceIdentify, VoiceResume,
};

use crate::crypto::Mode;

/// The bounds a machine enforces (copied from `Limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineConfig {
    /// Sent in Hello.
    pub heartbeat_interval_ms: u64,
    /// Silence after which the connection is closed with 4009.
    pub heartbeat_timeout_ms: u64,
    /// Time to identify or resume after Hello (else 4009).
    pub identify_timeout_ms: u64,
    /// Client messages per minute (else 4021).
    pub inbound_per_minute_max: u32,
}

/// Where a connection is in its handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Hello sent; identify or resume expected.
    AwaitingIdentify,
    /// Identify or resume handed to the edge; its answer pending.
    Authenticating,
    /// Ready sent; select protocol expected.
    Identified,
    /// Session description sent; media flows.
    Live,
    /// Closed (nothing more is accepted).
    Closed,
}

/// What the edge must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this connection-level (un-numbered) message.
    Send(ServerMessage),
    /// Check this identify against the admissions; answer with
    /// [`Machine::authenticated`].
    Authenticate(VoiceIdentify),
    /// Check this resume against the resumable sessions; answer with
    /// [`Machine::resumed`].
    Resume(VoiceResume),
    /// The client selected UDP with this mode and address: describe the
    /// session (op 4) and let its media flow.
    SelectProtocol {
        /// The encryption mode.
        mode: Mode,
        /// The address the client reported.
        address: String,
        /// Its port.
        port: u16,
    },
    /// The client's speaking state: relay it to the others.
    Speaking {
        /// Bitmask.
        speaking: u32,
    },
    /// The client acknowledged numbered messages up to this `seq`.
    Ack(u64),
    /// Close the connection with this code.
    Close(VoiceCloseCode),
}

/// One connection's handshake and liveness.
#[derive(Clone, Debug)]
pub struct Machine {
    config: MachineConfig,
    phase: Phase,
    opened_ms: u64,
    last_heartbeat_ms: u64,
    window_start_ms: u64,
    window_count: u32,
    ssrc: Option<u32>,
}

const MINUTE_MS: u64 = 60_000;

impl Machine {
    /// A connection opened at `now_ms`, and the Hello to send.
    pub fn new(now_ms: u64, config: MachineConfig) -> (Machine, ServerMessage) {
        let hello = ServerMessage::Hello {
            heartbeat_interval_ms: config.heartbeat_interval_ms,
        };
        (
            Machine {
                config,
                phase: Phase::AwaitingIdentify,
                opened_ms: now_ms,
                last_heartbeat_ms: now_ms,
                window_start_ms: now_ms,
                window_count: 0,
                ssrc: None,
            },
            hello,
        )
    }

    /// The phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// When [`Machine::on_tick`] must next be called, ms.
    pub fn deadline_ms(&self) -> u64 {
        let heartbeat = self
            .last_heartbeat_ms
            .saturating_add(self.config.heartbeat_timeout_ms);
        match self.phase {
            Phase::AwaitingIdentify | Phase::Authenticating => heartbeat.min(
                self.opened_ms
                    .saturating_add(self.config.identify_timeout_ms),
            ),
            Phase::Closed => u64::MAX,
            _ => heartbeat,
        }
    }

    /// Time passed: closes with 4009 when a deadline is reached.
    pub fn on_tick(&mut self, now_ms: u64) -> Option<Action> {
        if self.phase != Phase::Closed && now_ms >= self.deadline_ms() {
            return Some(self.close(VoiceCloseCode::SessionTimeout));
        }
        None
    }

    fn close(&mut self, code: VoiceCloseCode) -> Action {
        self.phase = Phase::Closed;
        Action::Close(code)
    }

    /// One client message (or why it could not be parsed).
    pub fn on_message(
        &mut self,
        now_ms: u64,
        message: Result<ClientMessage, ClientMessageError>,
    ) -> Vec<Action> {
        if self.phase == Phase::Closed {
            return Vec::new();
        }
        if now_ms.saturating_sub(self.window_start_ms) >= MINUTE_MS {
            self.window_start_ms = now_ms;
            self.window_count = 0;
        }
        self.window_count = self.window_count.saturating_add(1);
        if self.window_count > self.config.inbound_per_minute_max {
            return vec![self.close(VoiceCloseCode::RateLimited)];
        }
        let message = match message {
            Ok(m) => m,
            Err(e) => return vec![self.close(e.close_code())],
        };
        let authenticated = matches!(self.phase, Phase::Identified | Phase::Live);
        match message {
            ClientMessage::Heartbeat(beat) => {
                // Allowed in every phase: libraries heartbeat from Hello on.
                self.last_heartbeat_ms = now_ms;
                let mut actions = vec![Action::Send(ServerMessage::HeartbeatAck { t: beat.t })];
                if let (true, Some(seq)) = (authenticated, beat.seq_ack) {
                    actions.push(Action::Ack(seq));
                }
                actions
            }
            ClientMessage::Identify(identify) => match self.phase {
                Phase::AwaitingIdentify => {
                    self.phase = Phase::Authenticating;
                    vec![Action::Authenticate(identify)]
                }
                _ => vec![self.close(VoiceCloseCode::AlreadyAuthenticated)],
            },
            ClientMessage::Resume(resume) => match self.phase {
                Phase::AwaitingIdentify => {
                    self.phase = Phase::Authenticating;
                    vec![Action::Resume(resume)]
                }
                _ => vec![self.close(VoiceCloseCode::AlreadyAuthenticated)],
            },
            ClientMessage::SelectProtocol(select) => match self.phase {
                Phase::Identified => {
                    if select.protocol != "udp" {
                        return vec![self.close(VoiceCloseCode::UnknownProtocol)];
                    }
                    let Some(mode) = Mode::from_name(&select.data.mode) else {
                        return vec![self.close(VoiceCloseCode::UnknownEncryptionMode)];
                    };
                    self.phase = Phase::Live;
                    vec![Action::SelectProtocol {
                        mode,
                        address: select.data.address,
                        port: select.data.port,
                    }]
                }
                // The key was already described: a second selection would
                // race the media already flowing under it.
                Phase::Live => vec![self.close(VoiceCloseCode::BadRequest)],
                _ => vec![self.close(VoiceCloseCode::NotAuthenticated)],
            },
            ClientMessage::Speaking(speaking) => {
                if !authenticated {
                    return vec![self.close(VoiceCloseCode::NotAuthenticated)];
                }
                if Some(speaking.ssrc) != self.ssrc {
                    // Discord disconnects a speaking update for an SSRC that
                    // is not the connection's.
                    return vec![self.close(VoiceCloseCode::BadRequest)];
                }
                vec![Action::Speaking {
                    speaking: speaking.speaking,
                }]
            }
            ClientMessage::Dave(_) => {
                if !authenticated {
                    return vec![self.close(VoiceCloseCode::NotAuthenticated)];
                }
                // DAVE was declined (version 0): nothing to do.
                Vec::new()
            }
        }
    }

    /// The edge's answer to [`Action::Authenticate`]: the session's SSRC,
    /// or the close code (4004, 4011, ...).
    pub fn authenticated(&mut self, answer: Result<u32, VoiceCloseCode>) -> Option<Action> {
        if self.phase != Phase::Authenticating {
            return None;
        }
        match answer {
            Ok(ssrc) => {
                self.ssrc = Some(ssrc);
                self.phase = Phase::Identified;
                None
            }
            Err(code) => Some(self.close(code)),
        }
    }

    /// The edge's answer to [`Action::Resume`]: the session's SSRC and
    /// whether its protocol was already selected, or the close code.
    pub fn resumed(&mut self, answer: Result<(u32, bool), VoiceCloseCode>) -> Option<Action> {
        if self.phase != Phase::Authenticating {
            return None;
        }
        match answer {
            Ok((ssrc, live)) => {
                self.ssrc = Some(ssrc);
                self.phase = if live { Phase::Live } else { Phase::Identified };
                None
            }
            Err(code) => Some(self.close(code)),
        }
    }

    /// The edge closed the connection for its own reasons (eviction,
    /// release, a full queue).
    pub fn closed(&mut self) {
        self.phase = Phase::Closed;
    }
}

/// A session's numbered server messages: the `seq` counter and the
/// bounded replay buffer a v8 resume reads.
#[derive(Clone, Debug)]
pub struct Outbox {
    next_seq: u64,
    buffer: VecDeque<(u64, String)>,
    capacity: usize,
    /// Messages dropped from the buffer at capacity (not yet acked).
    pub evicted_total: u64,
}

/// Why a resume cannot replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// A message the client missed is no longer buffered (4006).
    Gone,
    /// The client acknowledged a `seq` never sent (4006).
    Future,
}

impl Outbox {
    /// An empty outbox holding at most `capacity` unacknowledged messages.
    pub fn new(capacity: usize) -> Outbox {
        Outbox {
            next_seq: 1,
            buffer: VecDeque::new(),
            capacity: capacity.max(1),
            evicted_total: 0,
        }
    }

    /// The last `seq` given (0: none).
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Numbers `message`, buffers it and returns its frame.
    pub fn push(&mut self, message: &ServerMessage) -> String {
        let seq = self.next_seq;
        self.next_seq += 1;
        let text = message.encode(Some(seq));
        if self.buffer.len() >= self.capacity {
            self.buffer.pop_front();
            self.evicted_total += 1;
        }
        self.buffer.push_back((seq, text.clone()));
        text
    }

    /// The client has everything up to `seq`: drop it from the buffer.
    pub fn ack(&mut self, seq: u64) {
        while self.buffer.front().is_some_and(|(s, _)| *s <= seq) {
            self.buffer.pop_front();
        }
    }

    /// The frames after `seq_ack` (`None`: the client saw none), in
    /// order, for a resume.
    pub fn replay(&mut self, seq_ack: Option<u64>) -> Result<Vec<String>, ReplayError> {
        let acked = seq_ack.unwrap_or(0);
        if acked > self.last_seq() {
            return Err(ReplayError::Future);
        }
        self.ack(acked);
        let first_missing = acked + 1;
        match self.buffer.front() {
            Some((first, _)) if *first > first_missing => Err(ReplayError::Gone),
            None if first_missing < self.next_seq => Err(ReplayError::Gone),
            _ => Ok(self.buffer.iter().map(|(_, t)| t.clone()).collect()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use guildhall_proto::voice_gateway::{
        ClientSpeaking, SelectProtocol, SelectProtocolData, VoiceHeartbeat, parse_client,
    };

    const CONFIG: MachineConfig = MachineConfig {
        heartbeat_interval_ms: 1_000,
        heartbeat_timeout_ms: 3_000,
        identify_timeout_ms: 2_000,
        inbound_per_minute_max: 10,
    };

    fn identify() -> ClientMessage {
        ClientMessage::Identify(VoiceIdentify {
            server_id: 1,
            user_id: 2,
            session_id: "s".into(),
            token: "t".into(),
            max_dave_protocol_version: Some(1),
            video: None,
        })
    }

    fn resume() -> ClientMessage {
        ClientMessage::Resume(VoiceResume {
            server_id: 1,
            session_id: "s".into(),
            token: "t".into(),
            seq_ack: Some(3),
        })
    }

    fn select(protocol: &str, mode: &str) -> ClientMessage {
        ClientMessage::SelectProtocol(SelectProtocol {
            protocol: protocol.into(),
            data: SelectProtocolData {
                address: "127.0.0.1".into(),
                port: 5,
                mode: mode.into(),
            },
        })
    }

    fn speaking(ssrc: u32) -> ClientMessage {
        ClientMessage::Speaking(ClientSpeaking {
            speaking: 1,
            delay: 0,
            ssrc,
        })
    }

    fn heartbeat(seq_ack: Option<u64>) -> ClientMessage {
        ClientMessage::Heartbeat(VoiceHeartbeat { t: 9, seq_ack })
    }

    fn live() -> Machine {
        let (mut m, _) = Machine::new(0, CONFIG);
        assert_eq!(
            m.on_message(0, Ok(identify())),
            vec![Action::Authenticate(match identify() {
                ClientMessage::Identify(i) => i,
                _ => unreachable!(),
            })]
        );
        assert_eq!(m.authenticated(Ok(7)), None);
        let actions = m.on_message(1, Ok(select("udp", "aead_xchacha20_poly1305_rtpsize")));
        assert_eq!(
            actions,
            vec![Action::SelectProtocol {
                mode: Mode::XChaCha20Poly1305Rtpsize,
                address: "127.0.0.1".into(),
                port: 5
            }]
        );
        assert_eq!(m.phase(), Phase::Live);
        m
    }

    #[test]
    fn hello_first_then_the_documented_order() {
        let (m, hello) = Machine::new(0, CONFIG);
        assert_eq!(
            hello,
            ServerMessage::Hello {
                heartbeat_interval_ms: 1_000
            }
        );
        assert_eq!(m.phase(), Phase::AwaitingIdentify);
        let mut m = live();
        assert_eq!(
            m.on_message(2, Ok(speaking(7))),
            vec![Action::Speaking { speaking: 1 }]
        );
        assert_eq!(
            m.on_message(3, Ok(heartbeat(Some(4)))),
            vec![
                Action::Send(ServerMessage::HeartbeatAck { t: 9 }),
                Action::Ack(4)
            ]
        );
        assert_eq!(
            m.on_message(
                4,
                Ok(ClientMessage::Dave(
                    guildhall_proto::voice_gateway::Opcode::DaveTransitionReady
                ))
            ),
            vec![]
        );
    }

    /// Every client opcode in every phase: allowed, or its close code.
    #[test]
    fn each_opcode_in_each_phase() {
        use VoiceCloseCode::*;
        let awaiting = || Machine::new(0, CONFIG).0;
        let identified = || {
            let mut m = awaiting();
            m.on_message(0, Ok(identify()));
            m.authenticated(Ok(7));
            m
        };
        // Before identify.
        assert_eq!(
            awaiting().on_message(0, Ok(select("udp", "aead_aes256_gcm_rtpsize"))),
            vec![Action::Close(NotAuthenticated)]
        );
        assert_eq!(
            awaiting().on_message(0, Ok(speaking(7))),
            vec![Action::Close(NotAuthenticated)]
        );
        assert!(matches!(
            awaiting().on_message(0, Ok(resume()))[..],
            [Action::Resume(_)]
        ));
        assert_eq!(
            awaiting().on_message(0, Ok(heartbeat(Some(1)))),
            vec![Action::Send(ServerMessage::HeartbeatAck { t: 9 })]
        );
        // After identify.
        assert_eq!(
            identified().on_message(1, Ok(identify())),
            vec![Action::Close(AlreadyAuthenticated)]
        );
        assert_eq!(
            identified().on_message(1, Ok(resume())),
            vec![Action::Close(AlreadyAuthenticated)]
        );
        assert_eq!(
            identified().on_message(1, Ok(select("tcp", "aead_aes256_gcm_rtpsize"))),
            vec![Action::Close(UnknownProtocol)]
        );
        assert_eq!(
            identified().on_message(1, Ok(select("udp", "xsalsa20_poly1305"))),
            vec![Action::Close(UnknownEncryptionMode)]
        );
        assert_eq!(
            identified().on_message(1, Ok(speaking(8))),
            vec![Action::Close(BadRequest)]
        );
        // Live.
        assert_eq!(
            live().on_message(2, Ok(select("udp", "aead_aes256_gcm_rtpsize"))),
            vec![Action::Close(BadRequest)]
        );
        assert_eq!(
            live().on_message(2, Ok(identify())),
            vec![Action::Close(AlreadyAuthenticated)]
        );
        // Parse errors, whatever the phase.
        for mut m in [awaiting(), identified(), live()] {
            assert_eq!(
                m.on_message(2, parse_client(b"{", 100)),
                vec![Action::Close(DecodeError)]
            );
            assert_eq!(m.phase(), Phase::Closed);
            assert_eq!(m.on_message(3, Ok(heartbeat(None))), vec![]);
        }
        assert_eq!(
            awaiting().on_message(0, parse_client(br#"{"op":99}"#, 100)),
            vec![Action::Close(UnknownOpcode)]
        );
        assert_eq!(
            awaiting().on_message(0, parse_client(&[b' '; 200], 100)),
            vec![Action::Close(DecodeError)]
        );
    }

    #[test]
    fn failed_authentication_closes_with_its_code() {
        for code in [
            VoiceCloseCode::AuthenticationFailed,
            VoiceCloseCode::ServerNotFound,
            VoiceCloseCode::SessionNoLongerValid,
        ] {
            let (mut m, _) = Machine::new(0, CONFIG);
            m.on_message(0, Ok(identify()));
            assert_eq!(m.authenticated(Err(code)), Some(Action::Close(code)));
            assert_eq!(m.phase(), Phase::Closed);
            let (mut m, _) = Machine::new(0, CONFIG);
            m.on_message(0, Ok(resume()));
            assert_eq!(m.resumed(Err(code)), Some(Action::Close(code)));
        }
        // An answer nobody asked for is ignored.
        let (mut m, _) = Machine::new(0, CONFIG);
        assert_eq!(m.authenticated(Ok(1)), None);
        assert_eq!(m.phase(), Phase::AwaitingIdentify);
    }

    #[test]
    fn resume_lands_in_the_sessions_phase() {
        let (mut m, _) = Machine::new(0, CONFIG);
        m.on_message(0, Ok(resume()));
        assert_eq!(m.resumed(Ok((7, true))), None);
        assert_eq!(m.phase(), Phase::Live);
        assert_eq!(
            m.on_message(1, Ok(speaking(7))),
            vec![Action::Speaking { speaking: 1 }]
        );
        let (mut m, _) = Machine::new(0, CONFIG);
        m.on_message(0, Ok(resume()));
        m.resumed(Ok((7, false)));
        assert_eq!(m.phase(), Phase::Identified);
    }

    #[test]
    fn identify_deadline_then_heartbeat_deadline() {
        let (mut m, _) = Machine::new(0, CONFIG);
        assert_eq!(m.deadline_ms(), 2_000);
        assert_eq!(m.on_tick(1_999), None);
        assert_eq!(
            m.on_tick(2_000),
            Some(Action::Close(VoiceCloseCode::SessionTimeout))
        );
        assert_eq!(m.deadline_ms(), u64::MAX);
        // Identified: only the heartbeat deadline counts.
        let mut m = live();
        assert_eq!(m.deadline_ms(), 3_000);
        m.on_message(2_500, Ok(heartbeat(None)));
        assert_eq!(m.deadline_ms(), 5_500);
        assert_eq!(m.on_tick(5_499), None);
        assert_eq!(
            m.on_tick(5_500),
            Some(Action::Close(VoiceCloseCode::SessionTimeout))
        );
    }

    #[test]
    fn inbound_rate_limit_closes_with_4021_and_resets_each_minute() {
        let mut m = live(); // 2 messages used
        for i in 0..8 {
            assert!(!matches!(
                m.on_message(10 + i, Ok(heartbeat(None)))[..],
                [Action::Close(_)]
            ));
        }
        assert_eq!(
            m.on_message(20, Ok(heartbeat(None))),
            vec![Action::Close(VoiceCloseCode::RateLimited)]
        );
        let mut m = live();
        for i in 0..8 {
            m.on_message(i, Ok(heartbeat(None)));
        }
        // A new minute: allowed again.
        assert_eq!(m.on_message(60_000, Ok(heartbeat(None))).len(), 1);
    }

    #[test]
    fn outbox_numbers_buffers_and_replays() {
        let mut o = Outbox::new(3);
        let msg = |id| ServerMessage::ClientDisconnect { user_id: id };
        assert_eq!(o.push(&msg(1)), r#"{"op":13,"d":{"user_id":"1"},"seq":1}"#);
        o.push(&msg(2));
        o.push(&msg(3));
        assert_eq!(o.last_seq(), 3);
        // Missed 2 and 3.
        let replay = o.clone().replay(Some(1)).unwrap();
        assert_eq!(replay.len(), 2);
        assert!(replay[0].ends_with(r#""seq":2}"#));
        // Nothing missed.
        assert_eq!(o.clone().replay(Some(3)), Ok(vec![]));
        // Saw nothing: everything, still buffered.
        assert_eq!(o.clone().replay(None).unwrap().len(), 3);
        // An ack from the future.
        assert_eq!(o.clone().replay(Some(4)), Err(ReplayError::Future));
        // Over capacity: the oldest goes, a resume needing it fails.
        o.push(&msg(4));
        assert_eq!(o.evicted_total, 1);
        assert_eq!(o.clone().replay(Some(0)), Err(ReplayError::Gone));
        assert_eq!(o.clone().replay(Some(1)).unwrap().len(), 3);
        // Acked messages leave the buffer; replay after them still works.
        o.ack(3);
        assert_eq!(o.clone().replay(Some(3)).unwrap().len(), 1);
        assert_eq!(o.clone().replay(Some(2)), Err(ReplayError::Gone));
        o.ack(4);
        assert_eq!(o.clone().replay(Some(4)), Ok(vec![]));
        assert_eq!(o.clone().replay(Some(3)), Err(ReplayError::Gone));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn message() -> impl Strategy<Value = Result<ClientMessage, ClientMessageError>> {
            prop_oneof![
                Just(Ok(identify())),
                Just(Ok(resume())),
                Just(Ok(select("udp", "aead_aes256_gcm_rtpsize"))),
                Just(Ok(select("udp", "nope"))),
                Just(Ok(select("tcp", "aead_aes256_gcm_rtpsize"))),
                (0u32..10).prop_map(|ssrc| Ok(speaking(ssrc))),
                proptest::option::of(0u64..20).prop_map(|s| Ok(heartbeat(s))),
                Just(Err(ClientMessageError::Decode)),
                Just(Err(ClientMessageError::UnknownOpcode)),
            ]
        }

        #[derive(Clone, Debug)]
        enum Step {
            Message(u64, Result<ClientMessage, ClientMessageError>),
            Tick(u64),
            Answer(bool),
        }

        fn step() -> impl Strategy<Value = Step> {
            prop_oneof![
                4 => (0u64..500, message()).prop_map(|(dt, m)| Step::Message(dt, m)),
                1 => (0u64..4_000).prop_map(Step::Tick),
                2 => any::<bool>().prop_map(Step::Answer),
            ]
        }

        proptest! {
            /// Whatever a client sends and whenever: at most one close,
            /// nothing after it, and media (select protocol) or speaking
            /// only once authenticated.
            #[test]
            fn one_close_nothing_after_media_only_when_authenticated(
                steps in proptest::collection::vec(step(), 0..60)
            ) {
                let (mut m, _) = Machine::new(0, CONFIG);
                let mut now = 0u64;
                let mut closes = 0;
                let mut authenticated = false;
                for step in steps {
                    let actions: Vec<Action> = match step {
                        Step::Message(dt, msg) => {
                            now += dt;
                            m.on_message(now, msg)
                        }
                        Step::Tick(dt) => {
                            now += dt;
                            m.on_tick(now).into_iter().collect()
                        }
                        Step::Answer(ok) => {
                            let answer = if ok { Ok(7) } else { Err(VoiceCloseCode::AuthenticationFailed) };
                            let a = m.authenticated(answer);
                            if ok && a.is_none() && m.phase() == Phase::Identified {
                                authenticated = true;
                            }
                            a.into_iter().collect()
                        }
                    };
                    for action in &actions {
                        prop_assert_eq!(closes, 0, "an action after the close: {:?}", action);
                        match action {
                            Action::Close(_) => closes += 1,
                            Action::SelectProtocol { .. } | Action::Speaking { .. } | Action::Ack(_) => {
                                prop_assert!(authenticated);
                            }
                            _ => {}
                        }
                    }
                    if closes > 0 {
                        prop_assert_eq!(m.phase(), Phase::Closed);
                    }
                }
            }

            /// A replay is exactly the missed suffix, in order, or an error
            /// when part of it is gone (or the ack is from the future).
            #[test]
            fn replay_is_exactly_the_missed_suffix(
                n in 0u64..200, seen in 0u64..220, acked in 0u64..220, cap in 1usize..64
            ) {
                let mut outbox = Outbox::new(cap);
                for id in 1..=n {
                    outbox.push(&ServerMessage::ClientDisconnect { user_id: i64::try_from(id).unwrap_or(0) });
                }
                // An earlier heartbeat acked up to `acked` (never past `seen`).
                let acked = acked.min(seen).min(n);
                outbox.ack(acked);
                let result = outbox.clone().replay(Some(seen));
                if seen > n {
                    prop_assert_eq!(result, Err(ReplayError::Future));
                } else {
                    let oldest_kept = n.saturating_sub(cap as u64).max(acked) + 1;
                    if seen + 1 < oldest_kept && seen < n {
                        prop_assert_eq!(result, Err(ReplayError::Gone));
                    } else {
                        let frames = result.unwrap_or_default();
                        prop_assert_eq!(frames.len() as u64, n - seen);
                        for (i, f) in frames.iter().enumerate() {
                            let seq = seen + 1 + i as u64;
                            let suffix = format!("\"seq\":{seq}}}");
                            prop_assert!(f.ends_with(&suffix));
                        }
                    }
                }
            }
        }
    }
}
