//! The SFU's table of calls, admissions and voice sessions: what the
//! control plane (Allocate, Admit, Evict, Release) changes and what the
//! voice gateway's identify and resume consult.
//!
//! Invariants:
//! - A call is keyed by its channel and fenced by its syncer's epoch: an
//!   older epoch is refused (`StaleEpoch`), a newer one takes over.
//! - An admission is a (guild, user) → (channel, session id, SHA-256 of
//!   the token) entry with a TTL; only the digest is held, and identify
//!   compares digests in constant time.
//! - Admissions and sessions together never exceed `sfu_sessions_max`, a
//!   call's never `sfu_participants_per_call_max`, calls never
//!   `sfu_calls_max`.
//! - Every message to a session goes through its numbered [`Outbox`] and
//!   then, if a connection is attached, into that connection's bounded
//!   queue with `try_send`; a full queue detaches the connection (the
//!   client resumes and is replayed what it missed). Nothing here waits.
//!
//! Time is an argument; the table is behind one mutex, held briefly.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use guildhall_limits::Limits;
use guildhall_proto::voice::{SfuRefusal, SfuReply};
use guildhall_proto::voice_gateway::{
    SECRET_KEY_BYTES, ServerMessage, VoiceCloseCode, VoiceIdentify, VoiceResume,
};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::{Notify, mpsc};

use crate::crypto::{Cipher, Mode};
use crate::machine::Outbox;
use crate::media::{Media, MediaSession};
use crate::stats::Counters;

/// A close without a close frame: the client sees a dropped connection
/// and resumes.
pub(crate) const CLOSE_ABRUPT: u16 = 1;

/// How the table tells a connection task to close.
#[derive(Debug, Default)]
pub(crate) struct ConnControl {
    code: AtomicU16,
    pub(crate) notify: Notify,
}

impl ConnControl {
    pub(crate) fn close(&self, code: u16) {
        // The first reason wins.
        let _ = self
            .code
            .compare_exchange(0, code, Ordering::Relaxed, Ordering::Relaxed);
        self.notify.notify_one();
    }

    pub(crate) fn code(&self) -> u16 {
        self.code.load(Ordering::Relaxed)
    }
}

/// A connection attached to a session.
#[derive(Clone, Debug)]
pub(crate) struct ConnHandle {
    pub(crate) id: u64,
    pub(crate) tx: mpsc::Sender<String>,
    pub(crate) control: Arc<ConnControl>,
}

/// A session's key: (guild, user).
pub(crate) type SessionKey = (i64, i64);

struct Admission {
    channel_id: i64,
    session_id: String,
    token_sha256: [u8; 32],
    expires_ms: u64,
}

struct Session {
    channel_id: i64,
    session_id: String,
    token_sha256: [u8; 32],
    ssrc: u32,
    speaking: u32,
    live: bool,
    key: [u8; SECRET_KEY_BYTES],
    outbox: Outbox,
    conn: Option<ConnHandle>,
    detached_ms: Option<u64>,
}

struct Call {
    guild_id: i64,
    epoch: u64,
}

/// What identify and resume need to answer READY.
#[derive(Clone, Debug)]
pub(crate) struct Announce {
    pub(crate) public_ip: String,
    pub(crate) udp_port: u16,
}

/// The table.
pub(crate) struct Calls {
    limits: Limits,
    announce: Announce,
    endpoint: String,
    calls: HashMap<i64, Call>,
    admissions: HashMap<SessionKey, Admission>,
    sessions: HashMap<SessionKey, Session>,
    next_ssrc: u32,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn parse_hex_digest(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        let hi = char::from(pair[0]).to_digit(16)?;
        let lo = char::from(pair[1]).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

fn deliver(session: &mut Session, message: &ServerMessage, now_ms: u64, counters: &Counters) {
    let text = session.outbox.push(message);
    send_text(session, text, now_ms, counters);
}

fn send_text(session: &mut Session, text: String, now_ms: u64, counters: &Counters) {
    if let Some(conn) = &session.conn
        && conn.tx.try_send(text).is_err()
    {
        conn.control.close(CLOSE_ABRUPT);
        session.conn = None;
        session.detached_ms = Some(now_ms);
        Counters::bump(&counters.slow_consumers_total);
    }
}

impl Calls {
    pub(crate) fn new(limits: Limits, announce: Announce, endpoint: String) -> Calls {
        Calls {
            limits,
            announce,
            endpoint,
            calls: HashMap::new(),
            admissions: HashMap::new(),
            sessions: HashMap::new(),
            next_ssrc: 1,
        }
    }

    /// Admissions plus sessions.
    pub(crate) fn session_count(&self) -> usize {
        self.admissions.len() + self.sessions.len()
    }

    pub(crate) fn call_count(&self) -> usize {
        self.calls.len()
    }

    fn in_call(&self, channel_id: i64) -> usize {
        self.admissions
            .values()
            .filter(|a| a.channel_id == channel_id)
            .count()
            + self
                .sessions
                .values()
                .filter(|s| s.channel_id == channel_id)
                .count()
    }

    /// Allocate: idempotent per channel, fenced by epoch.
    pub(crate) fn allocate(
        &mut self,
        guild_id: i64,
        channel_id: i64,
        epoch: u64,
        counters: &Counters,
    ) -> SfuReply {
        if let Some(call) = self.calls.get_mut(&channel_id) {
            if call.guild_id != guild_id {
                return SfuReply::Refused {
                    reason: SfuRefusal::BadRequest,
                };
            }
            if epoch < call.epoch {
                Counters::bump(&counters.refused_stale_epoch_total);
                return SfuReply::Refused {
                    reason: SfuRefusal::StaleEpoch,
                };
            }
            call.epoch = epoch;
        } else {
            if self.calls.len() >= self.limits.sfu_calls_max {
                Counters::bump(&counters.refused_full_total);
                return SfuReply::Refused {
                    reason: SfuRefusal::Full,
                };
            }
            self.calls.insert(channel_id, Call { guild_id, epoch });
        }
        SfuReply::Allocated {
            endpoint: self.endpoint.clone(),
        }
    }

    /// Admit: the digest of the user's token, with a TTL.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admit(
        &mut self,
        now_ms: u64,
        guild_id: i64,
        channel_id: i64,
        user_id: i64,
        session_id: &str,
        token_sha256: &str,
        epoch: u64,
        media: &Media,
        counters: &Counters,
    ) -> SfuReply {
        let refused = |reason| SfuReply::Refused { reason };
        let Some(token_sha256) = parse_hex_digest(token_sha256) else {
            return refused(SfuRefusal::BadRequest);
        };
        if session_id.is_empty()
            || session_id.len() > guildhall_proto::voice::VOICE_TOKEN_BYTES_MAX * 2
        {
            return refused(SfuRefusal::BadRequest);
        }
        let Some(call) = self.calls.get_mut(&channel_id) else {
            return refused(SfuRefusal::UnknownCall);
        };
        if call.guild_id != guild_id {
            return refused(SfuRefusal::BadRequest);
        }
        if epoch < call.epoch {
            Counters::bump(&counters.refused_stale_epoch_total);
            return refused(SfuRefusal::StaleEpoch);
        }
        call.epoch = epoch;
        let key = (guild_id, user_id);
        // A re-admission replaces the previous one (and its connection),
        // so it does not count against the caps twice.
        let replaced_admission = self.admissions.get(&key).map(|a| a.channel_id);
        let replaced_session = self.sessions.get(&key).map(|s| s.channel_id);
        let replacing = usize::from(replaced_admission.is_some() || replaced_session.is_some());
        if self.session_count() - replacing >= self.limits.sfu_sessions_max {
            Counters::bump(&counters.refused_full_total);
            return refused(SfuRefusal::Full);
        }
        let same_call = usize::from(
            replaced_admission == Some(channel_id) || replaced_session == Some(channel_id),
        );
        if self.in_call(channel_id) - same_call >= self.limits.sfu_participants_per_call_max {
            Counters::bump(&counters.refused_full_total);
            return refused(SfuRefusal::Full);
        }
        self.admissions.remove(&key);
        if self.sessions.contains_key(&key) {
            self.end_session(
                key,
                VoiceCloseCode::Disconnected,
                true,
                now_ms,
                media,
                counters,
            );
        }
        self.admissions.insert(
            key,
            Admission {
                channel_id,
                session_id: session_id.to_owned(),
                token_sha256,
                expires_ms: now_ms.saturating_add(self.limits.sfu_admission_ttl_ms),
            },
        );
        SfuReply::Admitted
    }

    /// Evict: close the user's connection, tell the others (op 13).
    pub(crate) fn evict(
        &mut self,
        now_ms: u64,
        channel_id: i64,
        user_id: i64,
        media: &Media,
        counters: &Counters,
    ) -> SfuReply {
        let Some(guild_id) = self.calls.get(&channel_id).map(|c| c.guild_id) else {
            return SfuReply::Done;
        };
        let key = (guild_id, user_id);
        if self
            .admissions
            .get(&key)
            .is_some_and(|a| a.channel_id == channel_id)
        {
            self.admissions.remove(&key);
        }
        if self
            .sessions
            .get(&key)
            .is_some_and(|s| s.channel_id == channel_id)
        {
            self.end_session(
                key,
                VoiceCloseCode::Disconnected,
                true,
                now_ms,
                media,
                counters,
            );
        }
        SfuReply::Done
    }

    /// Release: close every connection with 4022, free the call.
    pub(crate) fn release(
        &mut self,
        now_ms: u64,
        channel_id: i64,
        epoch: u64,
        media: &Media,
        counters: &Counters,
    ) -> SfuReply {
        match self.calls.get(&channel_id) {
            Some(call) if call.epoch > epoch => {
                // An older syncer's release: ignored.
                Counters::bump(&counters.refused_stale_epoch_total);
                return SfuReply::Done;
            }
            None => return SfuReply::Done,
            Some(_) => {}
        }
        self.calls.remove(&channel_id);
        self.admissions.retain(|_, a| a.channel_id != channel_id);
        let keys: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.channel_id == channel_id)
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            self.end_session(
                key,
                VoiceCloseCode::CallTerminated,
                false,
                now_ms,
                media,
                counters,
            );
        }
        SfuReply::Done
    }

    fn end_session(
        &mut self,
        key: SessionKey,
        code: VoiceCloseCode,
        notify_others: bool,
        now_ms: u64,
        media: &Media,
        counters: &Counters,
    ) {
        let Some(session) = self.sessions.remove(&key) else {
            return;
        };
        if let Some(conn) = &session.conn {
            conn.control.close(code.code());
        }
        media.remove(session.ssrc);
        if notify_others {
            let message = ServerMessage::ClientDisconnect { user_id: key.1 };
            for other in self
                .sessions
                .values_mut()
                .filter(|s| s.channel_id == session.channel_id)
            {
                deliver(other, &message, now_ms, counters);
            }
        }
    }

    fn fresh_ssrc(&mut self, media: &Media) -> Option<u32> {
        // SSRCs are unique per SFU (media finds a sender by SSRC). The
        // space is 2^32 and sessions are capped far below, so a bounded
        // number of tries always finds one in practice.
        for _ in 0..16 {
            let ssrc = self.next_ssrc;
            self.next_ssrc = self.next_ssrc.wrapping_add(1).max(1);
            if !media.ssrc_in_use(ssrc) {
                return Some(ssrc);
            }
        }
        None
    }

    /// Identify: the admission (or the user's existing session, for a
    /// client that reconnects without resuming) must match ids and token.
    pub(crate) fn identify(
        &mut self,
        now_ms: u64,
        identify: &VoiceIdentify,
        conn: ConnHandle,
        secret_key: [u8; SECRET_KEY_BYTES],
        media: &Media,
        counters: &Counters,
    ) -> Result<u32, VoiceCloseCode> {
        let key = (identify.server_id, identify.user_id);
        let token = digest(&identify.token);
        let matches = |session_id: &str, sha: &[u8; 32]| {
            session_id == identify.session_id && bool::from(sha.ct_eq(&token))
        };
        let (channel_id, token_sha256) = if let Some(admission) = self.admissions.get(&key) {
            if admission.expires_ms <= now_ms {
                self.admissions.remove(&key);
                Counters::bump(&counters.admissions_lapsed_total);
                return Err(VoiceCloseCode::AuthenticationFailed);
            }
            if !matches(&admission.session_id, &admission.token_sha256) {
                return Err(VoiceCloseCode::AuthenticationFailed);
            }
            let a = self
                .admissions
                .remove(&key)
                .ok_or(VoiceCloseCode::AuthenticationFailed)?;
            (a.channel_id, a.token_sha256)
        } else if let Some(session) = self.sessions.get(&key) {
            if !matches(&session.session_id, &session.token_sha256) {
                return Err(VoiceCloseCode::AuthenticationFailed);
            }
            let found = (session.channel_id, session.token_sha256);
            self.end_session(
                key,
                VoiceCloseCode::Disconnected,
                true,
                now_ms,
                media,
                counters,
            );
            found
        } else if self
            .calls
            .values()
            .any(|c| c.guild_id == identify.server_id)
        {
            return Err(VoiceCloseCode::AuthenticationFailed);
        } else {
            return Err(VoiceCloseCode::ServerNotFound);
        };
        if !self.calls.contains_key(&channel_id) {
            return Err(VoiceCloseCode::ServerNotFound);
        }
        let ssrc = self
            .fresh_ssrc(media)
            .ok_or(VoiceCloseCode::VoiceServerCrashed)?;
        media.add(MediaSession::new(
            channel_id,
            ssrc,
            now_ms,
            self.limits.sfu_packets_per_s_per_ssrc,
            self.limits.sfu_packets_burst,
        ));
        let mut session = Session {
            channel_id,
            session_id: identify.session_id.clone(),
            token_sha256,
            ssrc,
            speaking: 0,
            live: false,
            key: secret_key,
            outbox: Outbox::new(self.limits.sfu_replay_messages_max),
            conn: Some(conn),
            detached_ms: None,
        };
        deliver(
            &mut session,
            &ServerMessage::Ready {
                ssrc,
                ip: self.announce.public_ip.clone(),
                port: self.announce.udp_port,
                modes: Mode::ALL.iter().map(|m| m.name().to_owned()).collect(),
            },
            now_ms,
            counters,
        );
        // The newcomer learns who is here (op 11) and their SSRCs (op 5);
        // the others learn of the newcomer (op 11).
        let mut present = Vec::new();
        let joined = ServerMessage::ClientsConnect {
            user_ids: vec![identify.user_id],
        };
        for (other_key, other) in self
            .sessions
            .iter_mut()
            .filter(|(_, s)| s.channel_id == channel_id)
        {
            present.push((other_key.1, other.ssrc, other.speaking));
            deliver(other, &joined, now_ms, counters);
        }
        if !present.is_empty() {
            present.sort_unstable();
            deliver(
                &mut session,
                &ServerMessage::ClientsConnect {
                    user_ids: present.iter().map(|p| p.0).collect(),
                },
                now_ms,
                counters,
            );
            for (user_id, ssrc, speaking) in present {
                deliver(
                    &mut session,
                    &ServerMessage::Speaking {
                        user_id,
                        ssrc,
                        speaking,
                    },
                    now_ms,
                    counters,
                );
            }
        }
        self.sessions.insert(key, session);
        Counters::bump(&counters.identified_total);
        Ok(ssrc)
    }

    /// Resume: the session, its token, and a replay of what the client
    /// missed. Answers the SSRC, whether it was live, and its key.
    pub(crate) fn resume(
        &mut self,
        now_ms: u64,
        resume: &VoiceResume,
        conn: ConnHandle,
        media: &Media,
        counters: &Counters,
    ) -> Result<(u32, bool, SessionKey), VoiceCloseCode> {
        let token = digest(&resume.token);
        let Some((&key, _)) = self
            .sessions
            .iter()
            .find(|(k, s)| k.0 == resume.server_id && s.session_id == resume.session_id)
        else {
            return Err(VoiceCloseCode::SessionNoLongerValid);
        };
        let replay = {
            let Some(session) = self.sessions.get_mut(&key) else {
                return Err(VoiceCloseCode::SessionNoLongerValid);
            };
            if !bool::from(session.token_sha256.ct_eq(&token)) {
                return Err(VoiceCloseCode::AuthenticationFailed);
            }
            session.outbox.replay(resume.acked())
        };
        let Ok(replay) = replay else {
            // A missed message is gone: the session cannot continue.
            self.end_session(
                key,
                VoiceCloseCode::SessionNoLongerValid,
                true,
                now_ms,
                media,
                counters,
            );
            return Err(VoiceCloseCode::SessionNoLongerValid);
        };
        let Some(session) = self.sessions.get_mut(&key) else {
            return Err(VoiceCloseCode::SessionNoLongerValid);
        };
        if let Some(old) = session.conn.take() {
            old.control.close(CLOSE_ABRUPT);
        }
        session.conn = Some(conn);
        session.detached_ms = None;
        send_text(
            session,
            ServerMessage::Resumed.encode(None),
            now_ms,
            counters,
        );
        for frame in replay {
            send_text(session, frame, now_ms, counters);
        }
        Counters::bump(&counters.resumed_total);
        Ok((session.ssrc, session.live, key))
    }

    fn attached(&mut self, key: SessionKey, conn_id: u64) -> Option<&mut Session> {
        self.sessions
            .get_mut(&key)
            .filter(|s| s.conn.as_ref().is_some_and(|c| c.id == conn_id))
    }

    /// Select protocol: the cipher, the media going live, op 4.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn select(
        &mut self,
        now_ms: u64,
        key: SessionKey,
        conn_id: u64,
        mode: Mode,
        reported: Option<SocketAddr>,
        media: &Media,
        counters: &Counters,
    ) {
        let Some(session) = self.attached(key, conn_id) else {
            return;
        };
        session.live = true;
        media.go_live(session.ssrc, Cipher::new(mode, &session.key), reported);
        let description = ServerMessage::SessionDescription {
            mode: mode.name().to_owned(),
            secret_key: session.key,
        };
        deliver(session, &description, now_ms, counters);
    }

    /// Speaking: relayed to the call's others with the user id.
    pub(crate) fn speaking(
        &mut self,
        now_ms: u64,
        key: SessionKey,
        conn_id: u64,
        speaking: u32,
        counters: &Counters,
    ) {
        let Some(session) = self.attached(key, conn_id) else {
            return;
        };
        session.speaking = speaking;
        let (channel_id, ssrc) = (session.channel_id, session.ssrc);
        let message = ServerMessage::Speaking {
            user_id: key.1,
            ssrc,
            speaking,
        };
        for (_, other) in self
            .sessions
            .iter_mut()
            .filter(|(k, s)| s.channel_id == channel_id && **k != key)
        {
            deliver(other, &message, now_ms, counters);
        }
    }

    /// A heartbeat's `seq_ack`.
    pub(crate) fn ack(&mut self, key: SessionKey, conn_id: u64, seq: u64) {
        if let Some(session) = self.attached(key, conn_id) {
            session.outbox.ack(seq);
        }
    }

    /// The connection ended: the session stays resumable for the window.
    pub(crate) fn detach(&mut self, now_ms: u64, key: SessionKey, conn_id: u64) {
        if let Some(session) = self.attached(key, conn_id) {
            session.conn = None;
            session.detached_ms = Some(now_ms);
        }
    }

    /// Lapses admissions past their TTL and sessions detached longer than
    /// the resume window.
    pub(crate) fn sweep(&mut self, now_ms: u64, media: &Media, counters: &Counters) {
        let before = self.admissions.len();
        self.admissions.retain(|_, a| a.expires_ms > now_ms);
        for _ in self.admissions.len()..before {
            Counters::bump(&counters.admissions_lapsed_total);
        }
        let window = self.limits.sfu_resume_window_ms;
        let expired: Vec<SessionKey> = self
            .sessions
            .iter()
            .filter(|(_, s)| {
                s.detached_ms
                    .is_some_and(|at| now_ms.saturating_sub(at) >= window)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            Counters::bump(&counters.sessions_expired_total);
            self.end_session(
                key,
                VoiceCloseCode::SessionTimeout,
                true,
                now_ms,
                media,
                counters,
            );
        }
    }

    /// Closes everything (the SFU stops).
    pub(crate) fn close_all(&mut self, media: &Media) {
        for (_, session) in self.sessions.drain() {
            if let Some(conn) = &session.conn {
                conn.control
                    .close(VoiceCloseCode::VoiceServerCrashed.code());
            }
            media.remove(session.ssrc);
        }
        self.admissions.clear();
        self.calls.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digests_parse_strictly() {
        let d = digest("token");
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parse_hex_digest(&hex), Some(d));
        assert_eq!(parse_hex_digest(&hex.to_uppercase()), Some(d));
        assert_eq!(parse_hex_digest(&hex[..62]), None);
        assert_eq!(parse_hex_digest(&format!("zz{}", &hex[2..])), None);
        assert_eq!(parse_hex_digest("é"), None);
    }
}
