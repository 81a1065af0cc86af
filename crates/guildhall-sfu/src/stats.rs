//! The SFU's counters: atomics bumped on the hot path, read as a plain
//! snapshot ([`SfuStats`]) by the node's metrics and the tests.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) decrypted_total: AtomicU64,
    pub(crate) auth_failures_total: AtomicU64,
    pub(crate) forwarded_total: AtomicU64,
    pub(crate) rtcp_dropped_total: AtomicU64,
    pub(crate) keepalives_echoed_total: AtomicU64,
    pub(crate) ip_discoveries_total: AtomicU64,
    pub(crate) dropped_oversized_total: AtomicU64,
    pub(crate) dropped_malformed_total: AtomicU64,
    pub(crate) dropped_unknown_total: AtomicU64,
    pub(crate) dropped_wrong_source_total: AtomicU64,
    pub(crate) dropped_not_live_total: AtomicU64,
    pub(crate) dropped_rate_total: AtomicU64,
    pub(crate) dropped_send_full_total: AtomicU64,
    pub(crate) udp_send_errors_total: AtomicU64,
    pub(crate) udp_recv_errors_total: AtomicU64,
    pub(crate) ws_connections_total: AtomicU64,
    pub(crate) ws_refused_total: AtomicU64,
    pub(crate) ws_closed_by_code_total: AtomicU64,
    pub(crate) slow_consumers_total: AtomicU64,
    pub(crate) identified_total: AtomicU64,
    pub(crate) resumed_total: AtomicU64,
    pub(crate) auth_failed_total: AtomicU64,
    pub(crate) admissions_lapsed_total: AtomicU64,
    pub(crate) sessions_expired_total: AtomicU64,
    pub(crate) requests_total: AtomicU64,
    pub(crate) requests_expired_total: AtomicU64,
    pub(crate) requests_malformed_total: AtomicU64,
    pub(crate) refused_full_total: AtomicU64,
    pub(crate) refused_stale_epoch_total: AtomicU64,
    pub(crate) tls_handshake_failures_total: AtomicU64,
    pub(crate) tls_refused_total: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, sessions: u32, calls: u32) -> SfuStats {
        SfuStats {
            sessions,
            calls,
            decrypted_total: self.decrypted_total.load(Ordering::Relaxed),
            auth_failures_total: self.auth_failures_total.load(Ordering::Relaxed),
            forwarded_total: self.forwarded_total.load(Ordering::Relaxed),
            rtcp_dropped_total: self.rtcp_dropped_total.load(Ordering::Relaxed),
            keepalives_echoed_total: self.keepalives_echoed_total.load(Ordering::Relaxed),
            ip_discoveries_total: self.ip_discoveries_total.load(Ordering::Relaxed),
            dropped_oversized_total: self.dropped_oversized_total.load(Ordering::Relaxed),
            dropped_malformed_total: self.dropped_malformed_total.load(Ordering::Relaxed),
            dropped_unknown_total: self.dropped_unknown_total.load(Ordering::Relaxed),
            dropped_wrong_source_total: self.dropped_wrong_source_total.load(Ordering::Relaxed),
            dropped_not_live_total: self.dropped_not_live_total.load(Ordering::Relaxed),
            dropped_rate_total: self.dropped_rate_total.load(Ordering::Relaxed),
            dropped_send_full_total: self.dropped_send_full_total.load(Ordering::Relaxed),
            udp_send_errors_total: self.udp_send_errors_total.load(Ordering::Relaxed),
            udp_recv_errors_total: self.udp_recv_errors_total.load(Ordering::Relaxed),
            ws_connections_total: self.ws_connections_total.load(Ordering::Relaxed),
            ws_refused_total: self.ws_refused_total.load(Ordering::Relaxed),
            ws_closed_by_code_total: self.ws_closed_by_code_total.load(Ordering::Relaxed),
            slow_consumers_total: self.slow_consumers_total.load(Ordering::Relaxed),
            identified_total: self.identified_total.load(Ordering::Relaxed),
            resumed_total: self.resumed_total.load(Ordering::Relaxed),
            auth_failed_total: self.auth_failed_total.load(Ordering::Relaxed),
            admissions_lapsed_total: self.admissions_lapsed_total.load(Ordering::Relaxed),
            sessions_expired_total: self.sessions_expired_total.load(Ordering::Relaxed),
            requests_total: self.requests_total.load(Ordering::Relaxed),
            requests_expired_total: self.requests_expired_total.load(Ordering::Relaxed),
            requests_malformed_total: self.requests_malformed_total.load(Ordering::Relaxed),
            refused_full_total: self.refused_full_total.load(Ordering::Relaxed),
            refused_stale_epoch_total: self.refused_stale_epoch_total.load(Ordering::Relaxed),
            tls_handshake_failures_total: self.tls_handshake_failures_total.load(Ordering::Relaxed),
            tls_refused_total: self.tls_refused_total.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of the SFU's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SfuStats {
    /// Voice sessions (admitted or connected) now.
    pub sessions: u32,
    /// Calls allocated now.
    pub calls: u32,
    /// RTP packets whose tag verified under the sender's key.
    pub decrypted_total: u64,
    /// RTP packets whose tag did not verify (tampered, wrong key).
    pub auth_failures_total: u64,
    /// Packets sent on to a receiver (one per receiver).
    pub forwarded_total: u64,
    /// RTCP packets (payload types 200–204), not forwarded.
    pub rtcp_dropped_total: u64,
    /// 8-byte keep-alives echoed to a known address.
    pub keepalives_echoed_total: u64,
    /// IP discovery requests answered.
    pub ip_discoveries_total: u64,
    /// Datagrams over the size limit.
    pub dropped_oversized_total: u64,
    /// Datagrams too short or not RTP.
    pub dropped_malformed_total: u64,
    /// Datagrams from an unknown SSRC or address.
    pub dropped_unknown_total: u64,
    /// RTP from a known SSRC but another address (or a rebinding of a live session).
    pub dropped_wrong_source_total: u64,
    /// RTP from a session that has not selected its protocol.
    pub dropped_not_live_total: u64,
    /// RTP over the per-SSRC packet rate.
    pub dropped_rate_total: u64,
    /// Forwards dropped because the socket's send buffer was full (drop-newest).
    pub dropped_send_full_total: u64,
    /// Other send errors.
    pub udp_send_errors_total: u64,
    /// Receive errors.
    pub udp_recv_errors_total: u64,
    /// Voice gateway connections accepted.
    pub ws_connections_total: u64,
    /// Voice gateway connections refused at the connection cap or for the version.
    pub ws_refused_total: u64,
    /// Connections the server closed with a voice close code.
    pub ws_closed_by_code_total: u64,
    /// Connections dropped because their queue was full (resumable).
    pub slow_consumers_total: u64,
    /// Successful identifies.
    pub identified_total: u64,
    /// Successful resumes.
    pub resumed_total: u64,
    /// Identifies or resumes refused.
    pub auth_failed_total: u64,
    /// Admissions whose TTL passed unused.
    pub admissions_lapsed_total: u64,
    /// Detached sessions whose resume window passed.
    pub sessions_expired_total: u64,
    /// Control-plane requests handled.
    pub requests_total: u64,
    /// Requests whose deadline passed before they started (not started).
    pub requests_expired_total: u64,
    /// Requests that did not decode.
    pub requests_malformed_total: u64,
    /// Allocate/Admit refused for capacity.
    pub refused_full_total: u64,
    /// Requests refused for an older epoch.
    pub refused_stale_epoch_total: u64,
    /// TLS handshakes that failed or timed out.
    pub tls_handshake_failures_total: u64,
    /// TLS connections refused at the connection cap.
    pub tls_refused_total: u64,
}
