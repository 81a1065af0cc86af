//! The media plane: one UDP socket per SFU, IP discovery, keep-alive
//! echo, and selective forwarding of encrypted RTP.
//!
//! A packet from a connection is found by its SSRC and checked against
//! the source address that connection's IP discovery (or its select
//! protocol) bound; it is decrypted with the sender's key (counted as
//! `decrypted_total`, or `auth_failures_total` when the tag does not
//! verify), then re-encrypted for every other live participant of the
//! call under *their* key and *their* outgoing nonce counter, keeping the
//! sender's RTP header (so its SSRC, which receivers map to a user from
//! op 5 and op 11). Nothing is mixed or transcoded.
//!
//! Bounds: the datagram size, a token bucket per SSRC, and no user-space
//! send queue at all: sends are `try_send_to`, so the kernel's socket
//! buffer is the only queue and a full one drops the newest packet
//! (counted `dropped_send_full`) instead of delaying the receive loop.
//! Several worker tasks ([`guildhall_limits::SFU_UDP_WORKERS`]) receive
//! on the one socket, so decryption and re-encryption spread over cores;
//! the call table is behind a read-mostly lock, taken for reading per
//! packet and for writing only when a session joins, leaves or goes live.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use guildhall_control::token_bucket::TokenBucket;
use guildhall_proto::voice_gateway::{
    IP_DISCOVERY_BYTES, ip_discovery_response, parse_ip_discovery_request,
};
use tokio::net::UdpSocket;

use crate::crypto::{Cipher, CryptoError, RTP_HEADER_BYTES, rtp_ssrc};
use crate::stats::Counters;

/// Length of @discordjs/voice's UDP keep-alive (a counter it expects
/// echoed), bytes.
pub const KEEP_ALIVE_BYTES: usize = 8;

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

struct MediaState {
    cipher: Option<Arc<Cipher>>,
    addr: Option<SocketAddr>,
    bucket: TokenBucket,
}

/// One voice session's media state.
pub(crate) struct MediaSession {
    pub(crate) channel_id: i64,
    pub(crate) ssrc: u32,
    state: Mutex<MediaState>,
    out_nonce: AtomicU32,
}

impl MediaSession {
    pub(crate) fn new(
        channel_id: i64,
        ssrc: u32,
        now_ms: u64,
        rate_per_s: u32,
        burst: u32,
    ) -> Arc<MediaSession> {
        Arc::new(MediaSession {
            channel_id,
            ssrc,
            state: Mutex::new(MediaState {
                cipher: None,
                addr: None,
                bucket: TokenBucket::new(now_ms, rate_per_s, burst),
            }),
            out_nonce: AtomicU32::new(0),
        })
    }
}

#[derive(Default)]
struct Table {
    by_ssrc: HashMap<u32, Arc<MediaSession>>,
    by_addr: HashMap<SocketAddr, u32>,
    calls: HashMap<i64, Vec<Arc<MediaSession>>>,
}

/// The UDP side of an SFU.
pub(crate) struct Media {
    socket: Arc<UdpSocket>,
    table: RwLock<Table>,
    counters: Arc<Counters>,
    epoch: tokio::time::Instant,
    datagram_bytes_max: usize,
}

#[derive(Default)]
struct Scratch {
    plain: Vec<u8>,
    out: Vec<u8>,
}

impl Media {
    pub(crate) fn new(
        socket: UdpSocket,
        counters: Arc<Counters>,
        epoch: tokio::time::Instant,
        datagram_bytes_max: usize,
    ) -> Media {
        Media {
            socket: Arc::new(socket),
            table: RwLock::new(Table::default()),
            counters,
            epoch,
            datagram_bytes_max,
        }
    }

    pub(crate) fn ssrc_in_use(&self, ssrc: u32) -> bool {
        read(&self.table).by_ssrc.contains_key(&ssrc)
    }

    /// A session joins its call (not yet live: no key, no address).
    pub(crate) fn add(&self, session: Arc<MediaSession>) {
        let mut t = write(&self.table);
        t.calls
            .entry(session.channel_id)
            .or_default()
            .push(session.clone());
        t.by_ssrc.insert(session.ssrc, session);
    }

    /// A session leaves.
    pub(crate) fn remove(&self, ssrc: u32) {
        let mut t = write(&self.table);
        let Some(session) = t.by_ssrc.remove(&ssrc) else {
            return;
        };
        if let Some(addr) = lock(&session.state).addr.take() {
            t.by_addr.remove(&addr);
        }
        if let Some(members) = t.calls.get_mut(&session.channel_id) {
            members.retain(|m| m.ssrc != ssrc);
            if members.is_empty() {
                t.calls.remove(&session.channel_id);
            }
        }
    }

    /// The session selected its protocol: its key is set, and its address
    /// too if IP discovery did not bind one (a client that skipped it).
    pub(crate) fn go_live(&self, ssrc: u32, cipher: Cipher, reported: Option<SocketAddr>) {
        let mut t = write(&self.table);
        let Some(session) = t.by_ssrc.get(&ssrc).cloned() else {
            return;
        };
        let mut st = lock(&session.state);
        st.cipher = Some(Arc::new(cipher));
        if st.addr.is_none()
            && let Some(addr) = reported
        {
            st.addr = Some(addr);
            drop(st);
            t.by_addr.insert(addr, ssrc);
        }
    }

    /// The receive loop of one worker (several share the socket).
    pub(crate) async fn run(self: Arc<Self>) {
        let mut buf = vec![0u8; self.datagram_bytes_max + 1];
        let mut scratch = Scratch::default();
        loop {
            match self.socket.recv_from(&mut buf).await {
                Ok((n, from)) => {
                    if n > self.datagram_bytes_max {
                        Counters::bump(&self.counters.dropped_oversized_total);
                        continue;
                    }
                    self.handle(&buf[..n], from, &mut scratch);
                }
                Err(_) => {
                    // Linux reports an earlier send's ICMP error here; the
                    // socket itself stays usable.
                    Counters::bump(&self.counters.udp_recv_errors_total);
                    tokio::task::yield_now().await;
                }
            }
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn handle(&self, packet: &[u8], from: SocketAddr, scratch: &mut Scratch) {
        let c = &self.counters;
        if packet.len() == KEEP_ALIVE_BYTES {
            if read(&self.table).by_addr.contains_key(&from) {
                if self.socket.try_send_to(packet, from).is_ok() {
                    Counters::bump(&c.keepalives_echoed_total);
                }
            } else {
                Counters::bump(&c.dropped_unknown_total);
            }
            return;
        }
        if packet.len() == IP_DISCOVERY_BYTES
            && let Some(ssrc) = parse_ip_discovery_request(packet)
        {
            self.discover(ssrc, from);
            return;
        }
        if packet.len() < RTP_HEADER_BYTES {
            Counters::bump(&c.dropped_malformed_total);
            return;
        }
        if (200..=204).contains(&packet[1]) {
            // RTCP (sender/receiver reports): not forwarded, no feedback
            // is implemented.
            Counters::bump(&c.rtcp_dropped_total);
            return;
        }
        let Some(ssrc) = rtp_ssrc(packet) else {
            Counters::bump(&c.dropped_malformed_total);
            return;
        };
        let table = read(&self.table);
        let Some(sender) = table.by_ssrc.get(&ssrc) else {
            Counters::bump(&c.dropped_unknown_total);
            return;
        };
        let cipher = {
            let mut st = lock(&sender.state);
            let (Some(cipher), Some(addr)) = (st.cipher.clone(), st.addr) else {
                Counters::bump(&c.dropped_not_live_total);
                return;
            };
            if addr != from {
                Counters::bump(&c.dropped_wrong_source_total);
                return;
            }
            if st.bucket.try_take(self.now_ms(), 1).is_err() {
                Counters::bump(&c.dropped_rate_total);
                return;
            }
            cipher
        };
        let header_len = match cipher.open(packet, &mut scratch.plain) {
            Ok(n) => n,
            Err(CryptoError::Auth) => {
                Counters::bump(&c.auth_failures_total);
                return;
            }
            Err(CryptoError::Malformed) => {
                Counters::bump(&c.dropped_malformed_total);
                return;
            }
        };
        Counters::bump(&c.decrypted_total);
        let Some(members) = table.calls.get(&sender.channel_id) else {
            return;
        };
        let (header, payload) = scratch.plain.split_at(header_len);
        for receiver in members.iter().filter(|m| m.ssrc != ssrc) {
            let (cipher, addr) = {
                let st = lock(&receiver.state);
                match (st.cipher.clone(), st.addr) {
                    (Some(c), Some(a)) => (c, a),
                    _ => continue,
                }
            };
            let nonce = receiver.out_nonce.fetch_add(1, Ordering::Relaxed);
            cipher.seal(header, payload, nonce, &mut scratch.out);
            match self.socket.try_send_to(&scratch.out, addr) {
                Ok(_) => Counters::bump(&c.forwarded_total),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    Counters::bump(&c.dropped_send_full_total);
                }
                Err(_) => Counters::bump(&c.udp_send_errors_total),
            }
        }
    }

    fn discover(&self, ssrc: u32, from: SocketAddr) {
        let c = &self.counters;
        let mut t = write(&self.table);
        let Some(session) = t.by_ssrc.get(&ssrc).cloned() else {
            Counters::bump(&c.dropped_unknown_total);
            return;
        };
        {
            let mut st = lock(&session.state);
            match st.addr {
                Some(addr) if addr == from => {}
                // Rebinding is allowed only before the session is live: a
                // stranger who learnt an SSRC from op 5 cannot redirect a
                // live participant's media.
                Some(_) if st.cipher.is_some() => {
                    Counters::bump(&c.dropped_wrong_source_total);
                    return;
                }
                old => {
                    if let Some(old) = old {
                        t.by_addr.remove(&old);
                    }
                    st.addr = Some(from);
                }
            }
        }
        t.by_addr.insert(from, ssrc);
        drop(t);
        let answer = ip_discovery_response(ssrc, &from.ip().to_string(), from.port());
        if self.socket.try_send_to(&answer, from).is_ok() {
            Counters::bump(&c.ip_discoveries_total);
        }
    }
}
