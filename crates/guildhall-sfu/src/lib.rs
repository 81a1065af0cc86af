//! The SFU role: Discord's voice gateway (v8) over WebSocket, UDP media
//! with transport encryption, and selective forwarding — each packet a
//! participant sends is decrypted once and re-encrypted for every other
//! participant of its call; nothing is mixed or transcoded.
//!
//! - [`machine`]: the pure session state machine and the numbered outbox
//!   (resume replay).
//! - [`crypto`]: the two rtpsize AEAD modes.
//! - `media`: the UDP socket: IP discovery, keep-alive echo, forwarding.
//! - `calls`: calls, admissions and sessions, as the control plane and
//!   the voice gateway change them.
//! - `ws`, `tls`: the voice gateway's WebSocket edge and its TLS listener.
//!
//! The control plane is the bus: [`Sfu::start`] serves
//! [`sfu_requests_subject`] (Allocate, Admit: bulk, a shedding
//! subscription that answers `Refused { Full }` when full) and
//! [`sfu_control_subject`] (Evict, Release: their own subscription, never
//! queued behind allocations). The node announces [`Sfu::info`] and
//! mounts [`Sfu::router`] (or runs [`Sfu::serve_tls`]).
//!
//! Deliberately absent: DAVE (declined with `dave_protocol_version: 0`),
//! video, RTCP feedback (RTCP is dropped and counted), simulcast.

pub mod crypto;
pub mod machine;

mod calls;
mod media;
mod stats;
mod tls;
mod ws;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use guildhall_cluster::{Bus, BusError, Subscription};
use guildhall_control::log_throttle::{LogThrottle, Verdict};
use guildhall_limits::Limits;
use guildhall_proto::cluster::SfuInfo;
use guildhall_proto::voice::{
    SfuEnvelope, SfuRefusal, SfuReply, SfuRequest, encode_reply, sfu_control_subject,
    sfu_requests_subject,
};
use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use crate::calls::{Announce, Calls};
use crate::machine::MachineConfig;
use crate::media::{Media, lock};
use crate::stats::Counters;

pub use stats::SfuStats;

/// What an SFU needs; plain data, filled by the node from its config.
#[derive(Clone, Debug)]
pub struct SfuConfig {
    /// The node's name (the bus subjects are named after it).
    pub node: String,
    /// The bounds (the `sfu_*` fields, and `bus_subscription_messages_max`
    /// for the two subscriptions).
    pub limits: Limits,
    /// Where the UDP socket binds (port 0: ephemeral).
    pub udp_bind: SocketAddr,
    /// The IP clients send media to, as READY tells them.
    pub public_ip: String,
    /// The voice gateway as Allocate answers and the announcement carries
    /// (`host:port[/path]`, no scheme).
    pub endpoint: String,
}

/// Why an SFU could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum SfuError {
    /// The limits do not validate.
    #[error("limits: {0}")]
    Limits(String),
    /// The UDP socket.
    #[error("udp: {0}")]
    Udp(std::io::Error),
    /// The bus subscriptions.
    #[error("bus: {0}")]
    Bus(#[from] BusError),
    /// The TLS certificate or key.
    #[error("tls: {0}")]
    Tls(String),
}

pub(crate) struct Inner {
    config: SfuConfig,
    calls: Mutex<Calls>,
    media: Arc<Media>,
    counters: Arc<Counters>,
    epoch: tokio::time::Instant,
    next_conn_id: AtomicU64,
    ws_connections: Arc<AtomicUsize>,
    tls_connections: Arc<AtomicUsize>,
    draining: AtomicBool,
    throttle: Mutex<LogThrottle<&'static str>>,
}

impl Inner {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn limits(&self) -> &Limits {
        &self.config.limits
    }

    fn machine_config(&self) -> MachineConfig {
        let l = self.limits();
        MachineConfig {
            heartbeat_interval_ms: l.sfu_heartbeat_interval_ms,
            heartbeat_timeout_ms: l.sfu_heartbeat_timeout_ms,
            identify_timeout_ms: l.sfu_identify_timeout_ms,
            inbound_per_minute_max: l.sfu_ws_inbound_per_minute_max,
        }
    }

    /// A rate-limited warning (bad input must never flood the log).
    fn warn(&self, key: &'static str, detail: &dyn std::fmt::Display) {
        let verdict = lock(&self.throttle).check(key, self.now_ms());
        if let Verdict::Emit { suppressed } = verdict {
            tracing::warn!(node = %self.config.node, suppressed, "sfu {key}: {detail}");
        }
    }

    fn handle(&self, request: SfuRequest) -> SfuReply {
        let now_ms = self.now_ms();
        let c = &self.counters;
        if !request.is_control() && self.draining.load(Ordering::Relaxed) {
            // Calls already here go on; new work goes to another SFU.
            return SfuReply::Refused {
                reason: SfuRefusal::Draining,
            };
        }
        let mut calls = lock(&self.calls);
        match request {
            SfuRequest::Allocate {
                guild_id,
                channel_id,
                epoch,
            } => calls.allocate(guild_id, channel_id, epoch, c),
            SfuRequest::Admit {
                guild_id,
                channel_id,
                user_id,
                session_id,
                token_sha256,
                epoch,
            } => calls.admit(
                now_ms,
                guild_id,
                channel_id,
                user_id,
                &session_id,
                &token_sha256,
                epoch,
                &self.media,
                c,
            ),
            SfuRequest::Evict {
                channel_id,
                user_id,
            } => calls.evict(now_ms, channel_id, user_id, &self.media, c),
            SfuRequest::Release { channel_id, epoch } => {
                calls.release(now_ms, channel_id, epoch, &self.media, c)
            }
        }
    }
}

/// A connection slot under a cap; freed on drop.
pub(crate) struct Slot(Arc<AtomicUsize>);

impl Slot {
    pub(crate) fn try_new(count: &Arc<AtomicUsize>, max: usize) -> Option<Slot> {
        count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Slot(count.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A running SFU. Dropping it stops its tasks and closes its sessions.
pub struct Sfu {
    inner: Arc<Inner>,
    udp_addr: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Sfu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sfu")
            .field("node", &self.inner.config.node)
            .field("udp_addr", &self.udp_addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Sfu {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        lock(&self.inner.calls).close_all(&self.inner.media);
    }
}

async fn serve_requests(inner: Arc<Inner>, bus: Arc<dyn Bus>, mut subscription: Subscription) {
    while let Some(message) = subscription.next().await {
        Counters::bump(&inner.counters.requests_total);
        if message.expired() {
            // Its caller stopped waiting: the work is not started.
            Counters::bump(&inner.counters.requests_expired_total);
            continue;
        }
        let reply = match SfuEnvelope::decode(&message.payload) {
            Ok(envelope) => inner.handle(envelope.body),
            Err(error) => {
                Counters::bump(&inner.counters.requests_malformed_total);
                inner.warn("malformed_request", &format_args!("{error:?}"));
                SfuReply::Refused {
                    reason: SfuRefusal::BadRequest,
                }
            }
        };
        if let Some(to) = message.reply.as_deref() {
            // The caller may have gone; nothing to do then.
            let _ = bus.publish(to, None, Bytes::from(encode_reply(&reply)));
        }
    }
}

/// Binds the media socket with its kernel buffers sized: the send buffer
/// is the whole bound on media in flight (no user-space queue), so it is a
/// named limit rather than the system default. The kernel may grant less
/// (`net.core.wmem_max` / `rmem_max`); what it granted is logged.
fn bind_udp(
    addr: SocketAddr,
    send_buffer_bytes: usize,
    recv_buffer_bytes: usize,
) -> std::io::Result<UdpSocket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    socket.set_send_buffer_size(send_buffer_bytes)?;
    socket.set_recv_buffer_size(recv_buffer_bytes)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    tracing::info!(
        send_buffer_bytes = socket.send_buffer_size().unwrap_or(0),
        recv_buffer_bytes = socket.recv_buffer_size().unwrap_or(0),
        "sfu media socket bound"
    );
    UdpSocket::from_std(socket.into())
}

impl Sfu {
    /// Binds the UDP socket, subscribes to the two subjects and starts the
    /// media workers and the sweeper.
    pub async fn start(config: SfuConfig, bus: Arc<dyn Bus>) -> Result<Sfu, SfuError> {
        config.limits.validate().map_err(|errors| {
            SfuError::Limits(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        let limits = config.limits.clone();
        let socket = bind_udp(
            config.udp_bind,
            limits.sfu_udp_send_buffer_bytes,
            limits.sfu_udp_recv_buffer_bytes,
        )
        .map_err(SfuError::Udp)?;
        let udp_addr = socket.local_addr().map_err(SfuError::Udp)?;
        let counters = Arc::new(Counters::default());
        let epoch = tokio::time::Instant::now();
        let media = Arc::new(Media::new(
            socket,
            counters.clone(),
            epoch,
            limits.sfu_udp_datagram_bytes_max,
        ));
        let calls = Calls::new(
            limits.clone(),
            Announce {
                public_ip: config.public_ip.clone(),
                udp_port: udp_addr.port(),
            },
            config.endpoint.clone(),
        );
        let overflow = encode_reply(&SfuReply::Refused {
            reason: SfuRefusal::Full,
        });
        let requests = bus
            .subscribe_shedding(
                &sfu_requests_subject(&config.node),
                None,
                limits.bus_subscription_messages_max,
                Bytes::from(overflow),
            )
            .await?;
        let control = bus
            .subscribe(
                &sfu_control_subject(&config.node),
                None,
                limits.bus_subscription_messages_max,
            )
            .await?;
        let inner = Arc::new(Inner {
            throttle: Mutex::new(LogThrottle::new(
                limits.log_throttle_interval_ms,
                limits.log_throttle_keys_max,
            )),
            config,
            calls: Mutex::new(calls),
            media: media.clone(),
            counters,
            epoch,
            next_conn_id: AtomicU64::new(1),
            ws_connections: Arc::new(AtomicUsize::new(0)),
            tls_connections: Arc::new(AtomicUsize::new(0)),
            draining: AtomicBool::new(false),
        });
        let mut tasks = vec![
            tokio::spawn(serve_requests(inner.clone(), bus.clone(), requests)),
            tokio::spawn(serve_requests(inner.clone(), bus, control)),
        ];
        for _ in 0..limits.sfu_udp_workers {
            tasks.push(tokio::spawn(media.clone().run()));
        }
        // Admissions lapse and detached sessions expire on this beat: a
        // quarter of the shorter window, so neither outlives it by much.
        let sweep_ms =
            (limits.sfu_admission_ttl_ms.min(limits.sfu_resume_window_ms) / 4).clamp(10, 1_000);
        let sweeper = inner.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(sweep_ms));
            loop {
                tick.tick().await;
                let now_ms = sweeper.now_ms();
                lock(&sweeper.calls).sweep(now_ms, &sweeper.media, &sweeper.counters);
            }
        }));
        Ok(Sfu {
            inner,
            udp_addr,
            tasks,
        })
    }

    /// Stops taking new work: Allocate and Admit are answered
    /// `Refused { Draining }` (the voice role places elsewhere) while the
    /// calls already here continue until released. Seed 004: a handoff
    /// must be able to start before the grace period, not wait on it.
    pub fn drain(&self) {
        self.inner.draining.store(true, Ordering::Relaxed);
    }

    /// What the node announces.
    pub fn info(&self) -> SfuInfo {
        let calls = lock(&self.inner.calls);
        SfuInfo {
            endpoint: self.inner.config.endpoint.clone(),
            sessions_max: u32::try_from(self.inner.limits().sfu_sessions_max)
                .unwrap_or(u32::MAX)
                .max(1),
            sessions: u32::try_from(calls.session_count()).unwrap_or(u32::MAX),
            calls: u32::try_from(calls.call_count()).unwrap_or(u32::MAX),
        }
    }

    /// The counters.
    pub fn stats(&self) -> SfuStats {
        let (sessions, calls) = {
            let calls = lock(&self.inner.calls);
            (calls.session_count(), calls.call_count())
        };
        self.inner.counters.snapshot(
            u32::try_from(sessions).unwrap_or(u32::MAX),
            u32::try_from(calls).unwrap_or(u32::MAX),
        )
    }

    /// Where the UDP socket is bound.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp_addr
    }

    /// The voice gateway at `path` and `path/` (discord.py connects to
    /// `wss://{endpoint}/?v=8`, discord.js to `wss://{endpoint}?v=8`).
    pub fn router(&self, path: &str) -> axum::Router {
        ws::router(self.inner.clone(), path)
    }

    /// The voice gateway's own TLS listener (the libraries only speak
    /// `wss://`): loads the PEM certificate chain and key now (errors
    /// here), and returns the accept loop for the caller to spawn. It
    /// holds at most `sfu_connections_max` connections and gives each
    /// `sfu_tls_handshake_timeout_ms` to finish its handshake.
    pub fn serve_tls(
        &self,
        listener: TcpListener,
        path: &str,
        cert_pem_path: &Path,
        key_pem_path: &Path,
    ) -> Result<impl Future<Output = ()> + Send + 'static, SfuError> {
        let acceptor = tls::acceptor(cert_pem_path, key_pem_path)?;
        Ok(tls::serve(
            self.inner.clone(),
            listener,
            acceptor,
            self.router(path),
        ))
    }
}
