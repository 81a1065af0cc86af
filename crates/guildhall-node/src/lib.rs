//! A Guildhall node: the one function that wires the roles, each a crate
//! of its own, into a process.
//!
//! - [`http`]: the accept loop and every connection's bounds, for every
//!   role the process serves over HTTP.
//! - [`worker_id`]: the snowflake worker id, held in the registry.
//! - [`run`]: which roles this process runs, over which transports, and
//!   `/metrics`.
//!
//! Each role is a crate of its own: `guildhall-api` (REST, commands,
//! interactions, webhooks), `guildhall-gateway` (WebSocket sessions,
//! the hub, the guild event streams, RESUME on any node), `guildhall-guilds`
//! (one owner per guild, fanning out over the bus), `guildhall-presence`, `guildhall-users`,
//! `guildhall-voice`, `guildhall-sfu`.
//!
//! [`run`] takes a bound listener and a shutdown future (so tests and the
//! binary wire the node the same way, mini-redis style). Embedded mode is
//! this node with every role over the in-process bus and registry; cluster
//! mode passes other transports in [`NodeConfig`], not other code.

use guildhall_api::{self as api, interaction_forward, interactions, ratelimit};
use guildhall_common::{auth, cluster, log, state, throttled};
use guildhall_gateway::{self as gateway, events, hub, subscriptions, takeover};
use guildhall_presence as presence;

pub mod http;
pub mod worker_id;

use guildhall_limits::Limits;
use guildhall_proto::cluster::Role;
use guildhall_store::Store;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;

/// How a node starts.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// Where the database and the admin token live.
    pub data_dir: PathBuf,
    /// Every bound.
    pub limits: Limits,
    /// Snowflake worker id (unique per node in a cluster); None: a free
    /// one is picked and claimed at start (`worker_id::claim_any`).
    pub worker_id: Option<u16>,
    /// Stable node name announced in the registry (`[a-z0-9._-]`).
    pub node_name: String,
    /// The registry to announce in and watch; `None`: a private in-process
    /// one (embedded mode). Tests pass a shared one to run several nodes
    /// against one registry.
    pub registry: Option<Arc<dyn guildhall_cluster::Registry>>,
    /// The bus; `None`: a private in-process one (embedded mode). Tests
    /// pass a shared one, or one that injects faults.
    pub bus: Option<Arc<dyn guildhall_cluster::Bus>>,
    /// The roles this process runs (embedded mode: all of them). A role
    /// that is not listed is not served here: its bus subjects have no
    /// subscriber in this process and its routes answer 404, so other
    /// processes of the cluster must run it.
    pub roles: Vec<Role>,
    /// The gateway URL clients are sent to (`GET /gateway`, READY's
    /// `resume_gateway_url`): a load balancer's address in a cluster.
    /// `None`: this node's own listener.
    pub public_gateway_url: Option<String>,
    /// The store: `None` is SQLite in `data_dir` (embedded mode); cluster
    /// mode gives a `postgres://` URL every process shares.
    pub database_url: Option<String>,
    /// The node's cluster state; `None`: a fresh one. Tests pass their own
    /// to watch placement and to cut a node off from the registry
    /// (`ClusterState::partitioned`) while it keeps running.
    pub cluster_state: Option<Arc<cluster::ClusterState>>,
    /// Where the SFU role takes media and serves its voice gateway.
    pub voice: VoiceSettings,
    /// Where the api role keeps files and where they are served.
    pub files: FileSettings,
}

/// The api role's files (see the binary's config for the keys).
#[derive(Clone, Debug, Default)]
pub struct FileSettings {
    /// The directory files are kept in; `None`: `DATA_DIR/blobs`.
    pub blob_dir: Option<PathBuf>,
    /// The base of file URLs (a CDN's); `None`: this node's listener.
    pub public_cdn_url: Option<String>,
    /// The key attachment URLs are signed with; `None`: the cluster's,
    /// made by the first node that needs it and kept in the store.
    pub signing_key: Option<String>,
}

/// The SFU role's addresses (see the binary's config for the keys).
#[derive(Clone, Debug, Default)]
pub struct VoiceSettings {
    /// UDP media address; `None`: the listener's IP, any port.
    pub udp: Option<std::net::SocketAddr>,
    /// The IP clients send media to (READY's `ip`); `None`: the UDP
    /// address's IP (loopback when that is unspecified).
    pub public_ip: Option<String>,
    /// The voice gateway's own TLS listener; `None`: served plain at
    /// `/voice` on the node's listener (behind a TLS proxy).
    pub tls: Option<VoiceTls>,
    /// The endpoint clients are given; `None`: the TLS listener's address,
    /// else the node's listener with the voice path.
    pub endpoint: Option<String>,
    /// The voice gateway's path on the node's listener; `None`:
    /// [`SFU_WS_PATH`].
    pub ws_path: Option<String>,
}

/// A TLS listener for the voice gateway.
#[derive(Clone, Debug)]
pub struct VoiceTls {
    /// Where it listens.
    pub listen: std::net::SocketAddr,
    /// Certificate chain, PEM.
    pub cert: PathBuf,
    /// Private key, PEM.
    pub key: PathBuf,
}

/// The roles a process can run; embedded mode runs all of them.
pub const ROLES_ALL: [Role; 7] = [
    Role::Gateway,
    Role::Api,
    Role::Guilds,
    Role::Users,
    Role::Presence,
    Role::Voice,
    Role::Sfu,
];

impl NodeConfig {
    /// Embedded mode's configuration: every role, in-process bus and
    /// registry, the store in `data_dir`.
    pub fn embedded(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            limits: Limits::default(),
            worker_id: Some(1),
            node_name: "node-1".to_owned(),
            registry: None,
            bus: None,
            roles: ROLES_ALL.to_vec(),
            public_gateway_url: None,
            database_url: None,
            cluster_state: None,
            voice: VoiceSettings::default(),
            files: FileSettings::default(),
        }
    }

    fn runs(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }
}

/// What can stop a node from starting.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The data directory or a file in it.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// Which path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database.
    #[error("store: {0}")]
    Store(#[from] guildhall_store::StoreError),
    /// The listener.
    #[error("serve: {0}")]
    Serve(#[source] std::io::Error),
    /// The limits.
    #[error("invalid limits: {0}")]
    Limits(String),
    /// The snowflake worker id could not be held (another node holds it,
    /// or the registry did not answer).
    #[error("{0}")]
    WorkerId(#[from] worker_id::WorkerIdError),
    /// The worker id went to another node while this one was cut off from
    /// the registry: the node stopped rather than mint its ids twice.
    #[error("worker id {0} was taken by another node while this node was cut off; stopped")]
    WorkerIdLost(u16),
}

/// The roles of one node and what they share.
pub struct Node {
    /// Store, limits, ids.
    pub shared: Arc<state::Shared>,
    /// Sessions.
    pub hub: Arc<hub::Hub>,
    /// How this node's roles reach guild owners (typed calls, and the
    /// outbox of unconfirmed events).
    pub guilds: Arc<guildhall_common::guilds::GuildsClient>,
    /// The guilds role's owners on this node (idle unless it runs the
    /// role).
    pub guild_owners: Arc<guildhall_guilds::GuildDirectory>,
    /// Token resolution (users role).
    pub users: Arc<guildhall_users::Users>,
    /// Gateway role.
    pub gateway: Arc<gateway::Gateway>,
    /// The api role's state (its handlers hold this, not the node).
    pub api: api::AppState,
    /// Readiness (off while draining).
    pub ready: AtomicBool,
    /// The registry this node announces in.
    pub registry: Arc<dyn guildhall_cluster::Registry>,
    /// What the node knows of the cluster.
    pub cluster: Arc<cluster::ClusterState>,
    /// The bus the roles talk over.
    pub bus: Arc<dyn guildhall_cluster::Bus>,
    /// This node's event-stream counters.
    pub events: Arc<events::EventCounters>,
    /// Connection accounting of the HTTP edge.
    pub http: Arc<http::Edge>,
    /// Cross-node RESUME.
    pub takeovers: Arc<takeover::Takeovers>,
    /// The SFU role, when this node runs it.
    pub sfu: Option<Arc<guildhall_sfu::Sfu>>,
    /// The voice role, when this node runs it.
    pub voice: Option<guildhall_voice::VoiceRole>,
}

fn write_private(path: &std::path::Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

async fn metrics(
    axum::extract::State(node): axum::extract::State<Arc<Node>>,
) -> axum::response::Response {
    // Counters are atomics owned by each role and rendered here in the
    // Prometheus text format (names carry their unit).
    use std::fmt::Write;
    let mut out = String::new();
    let hub = &node.hub.counters;
    let gw = &node.gateway.counters;
    let api = &node.api.counters;
    let mut line = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    };
    line(
        "guildhall_sessions",
        "gauge",
        "Sessions held (attached or resumable).",
        node.hub.len() as u64,
    );
    line(
        "guildhall_sockets_open",
        "gauge",
        "Gateway sockets open.",
        gw.sockets_open.load(Ordering::Relaxed) as u64,
    );
    line(
        "guildhall_sockets_unattached",
        "gauge",
        "Gateway sockets open without a session yet (counted by admission).",
        gw.sockets_unattached.load(Ordering::Relaxed) as u64,
    );
    line(
        "guildhall_session_write_stalls_total",
        "counter",
        "Sockets dropped because a write waited past session_write_stall_ms_max.",
        gw.write_stalls_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_protocol_error_closes_total",
        "counter",
        "Sockets closed with 1002, 1007 or 1009 for a frame the WebSocket layer refused.",
        gw.protocol_error_closes_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_gateway_compressors",
        "gauge",
        "Compressors alive (zlib-stream and zstd-stream sockets, payload-compressing sessions).",
        gw.compressors.open.load(Ordering::Relaxed) as u64,
    );
    line(
        "guildhall_compressed_upgrades_refused_total",
        "counter",
        "zlib-stream and zstd-stream upgrades refused with 503 (gateway_compressors_max compressors alive).",
        gw.compressed_upgrades_refused_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_payload_compression_declined_total",
        "counter",
        "IDENTIFYs asking for payload compression served plain (gateway_compressors_max compressors alive).",
        gw.payload_compression_declined_total
            .load(Ordering::Relaxed),
    );
    line(
        "guildhall_gateway_query_refused_total",
        "counter",
        "Upgrades refused with 400 for an encoding or compress value not offered.",
        gw.query_refused_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_gateway_etf_undecodable_total",
        "counter",
        "encoding=etf frames that were no payload (closed with 4002).",
        gw.etf_undecodable_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_member_requests_refused_total",
        "counter",
        "Op 8 requests answered with RATE_LIMITED (one already running).",
        gw.member_requests_refused_total.load(Ordering::Relaxed),
    );
    for (name, help, value) in [
        (
            "guildhall_voice_servers_total",
            "VOICE_SERVER_UPDATEs sent with an SFU endpoint.",
            &gw.voice_servers_total,
        ),
        (
            "guildhall_voice_refused_total",
            "Voice joins the voice role refused (budget, capacity, SFUs).",
            &gw.voice_refused_total,
        ),
        (
            "guildhall_voice_unanswered_total",
            "Voice requests not answered in time.",
            &gw.voice_unanswered_total,
        ),
        (
            "guildhall_voice_dropped_total",
            "Op 4s dropped: the session's voice worker was full.",
            &gw.voice_dropped_total,
        ),
        (
            "guildhall_voice_owner_failures_total",
            "Op 4 attempts the guild owner did not take (busy, gone, slow, or refused).",
            &gw.voice_owner_failures_total,
        ),
        (
            "guildhall_voice_retries_total",
            "Op 4 steps tried again after a failure that may pass.",
            &gw.voice_retries_total,
        ),
        (
            "guildhall_voice_gave_up_total",
            "Op 4s left unanswered: voice_attempts_max or the retry budget spent.",
            &gw.voice_gave_up_total,
        ),
    ] {
        line(name, "counter", help, value.load(Ordering::Relaxed));
    }
    if let Some(sfu) = &node.sfu {
        let st = sfu.stats();
        macro_rules! sfu_lines {
            ($($field:ident: $kind:literal, $help:literal;)*) => {
                $(line(
                    concat!("guildhall_sfu_", stringify!($field)),
                    $kind,
                    $help,
                    u64::from(st.$field),
                );)*
            };
        }
        sfu_lines! {
            sessions: "gauge", "Voice sessions (admitted or connected) on this SFU.";
            calls: "gauge", "Calls allocated on this SFU.";
            decrypted_total: "counter", "RTP packets that authenticated under the sender's key.";
            auth_failures_total: "counter", "RTP packets that did not authenticate (not forwarded).";
            forwarded_total: "counter", "Packets sent on to receivers (one per receiver).";
            rtcp_dropped_total: "counter", "RTCP packets, not forwarded.";
            keepalives_echoed_total: "counter", "UDP keep-alives echoed.";
            ip_discoveries_total: "counter", "IP discovery requests answered.";
            dropped_oversized_total: "counter", "Datagrams over sfu_udp_datagram_bytes_max.";
            dropped_malformed_total: "counter", "Datagrams too short or not RTP.";
            dropped_unknown_total: "counter", "Datagrams from an unknown SSRC or address.";
            dropped_wrong_source_total: "counter", "RTP of a known SSRC from another address.";
            dropped_not_live_total: "counter", "RTP of a session that has not selected its protocol.";
            dropped_rate_total: "counter", "RTP over sfu_packets_per_s_per_ssrc.";
            dropped_send_full_total: "counter", "Forwards dropped on a full send buffer.";
            udp_send_errors_total: "counter", "UDP send errors.";
            udp_recv_errors_total: "counter", "UDP receive errors.";
            ws_connections_total: "counter", "Voice gateway connections accepted.";
            ws_refused_total: "counter", "Voice gateway connections refused (cap, version).";
            ws_closed_by_code_total: "counter", "Voice connections closed with a voice close code.";
            slow_consumers_total: "counter", "Voice connections dropped for not reading.";
            identified_total: "counter", "Voice identifies accepted.";
            resumed_total: "counter", "Voice resumes accepted.";
            auth_failed_total: "counter", "Voice identifies refused with 4004.";
            admissions_lapsed_total: "counter", "Admissions not used within sfu_admission_ttl_ms.";
            sessions_expired_total: "counter", "Voice sessions ended past sfu_resume_window_ms.";
            requests_total: "counter", "Control-plane requests received.";
            requests_expired_total: "counter", "Requests not started: their deadline had passed.";
            requests_malformed_total: "counter", "Malformed control-plane requests.";
            refused_full_total: "counter", "Allocations and admissions refused: full.";
            refused_stale_epoch_total: "counter", "Requests refused: an older syncer epoch.";
            tls_handshake_failures_total: "counter", "TLS handshakes failed or timed out.";
            tls_refused_total: "counter", "TLS connections refused at sfu_connections_max.";
        }
    }
    if let Some(voice) = &node.voice {
        let st = voice.stats();
        macro_rules! voice_lines {
            ($($field:ident: $kind:literal, $help:literal;)*) => {
                $(line(
                    concat!("guildhall_voice_", stringify!($field)),
                    $kind,
                    $help,
                    st.$field.load(Ordering::Relaxed),
                );)*
            };
        }
        voice_lines! {
            coordinators_spawned_total: "counter", "Guild voice coordinators spawned.";
            syncers_spawned_total: "counter", "Channel syncers spawned.";
            coordinators_live: "gauge", "Guild voice coordinators running.";
            syncers_live: "gauge", "Channel syncers running.";
            allocations_total: "counter", "Calls allocated on an SFU.";
            allocation_failures_total: "counter", "Allocations that failed.";
            admissions_total: "counter", "Participants admitted on an SFU.";
            evictions_total: "counter", "Participants evicted.";
            releases_total: "counter", "Calls released.";
            replacements_total: "counter", "Calls re-placed on another SFU.";
            replacement_failures_total: "counter", "Re-placements that failed.";
            server_updates_published_total: "counter", "VOICE_SERVER_UPDATEs published after a re-placement.";
            server_updates_dropped_total: "counter", "Re-placement notices that found no gateway.";
            mailbox_depth_max: "gauge", "Deepest coordinator or syncer mailbox seen.";
            breakers_opened_total: "counter", "SFU circuit breakers opened.";
            malformed_total: "counter", "Malformed voice requests.";
            control_handled_total: "counter", "Control messages handled.";
        }
        let refused: u64 = st
            .refused_total
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        line(
            "guildhall_voice_refused_total",
            "counter",
            "Voice requests refused (budget, capacity, SFUs, deadline).",
            refused,
        );
        let spawn_refused: u64 = st
            .spawn_refused_total
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum();
        line(
            "guildhall_voice_spawn_refused_total",
            "counter",
            "Coordinator and syncer spawns refused by the spawn budget or the instance cap.",
            spawn_refused,
        );
        let live = node.cluster.sfus.borrow().clone();
        let on_dead = voice
            .calls()
            .iter()
            .filter(|c| {
                c.sfu_node
                    .as_ref()
                    .is_some_and(|n| !live.iter().any(|s| &s.node == n))
            })
            .count();
        line(
            "guildhall_voice_calls_on_dead_sfus",
            "gauge",
            "Calls whose SFU is no longer announced (re-placement pending).",
            on_dead as u64,
        );
    }
    line(
        "guildhall_voice_sfus_live",
        "gauge",
        "SFUs announced in this node's registry view.",
        node.cluster.sfus.borrow().len() as u64,
    );
    line(
        "guildhall_dispatches_total",
        "counter",
        "Dispatches queued to sockets.",
        hub.dispatched_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_dispatches_detached_total",
        "counter",
        "Dispatches recorded for detached sessions.",
        hub.recorded_detached_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_dispatches_hidden_total",
        "counter",
        "Guild dispatches a session skipped: its user may not view the event's channel.",
        hub.hidden_skipped_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_slow_consumer_closes_total",
        "counter",
        "Sessions closed because their queue was full.",
        hub.slow_consumer_closes_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_upgrades_refused_total",
        "counter",
        "Upgrades refused by admission.",
        gw.refused_upgrades_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_ready_total",
        "counter",
        "READY sent.",
        gw.ready_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_session_starts_untracked_total",
        "counter",
        "Bot IDENTIFYs admitted uncounted: session_start_bots_max bots tracked.",
        gw.session_starts_untracked_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_session_limit_resets_total",
        "counter",
        "Bots past their session start limit: token reset, sessions terminated.",
        gw.session_limit_resets_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_identify_concurrency_refused_total",
        "counter",
        "Bot IDENTIFYs answered with INVALID_SESSION: max_concurrency bucket used within its window.",
        gw.identify_concurrency_refused_total
            .load(Ordering::Relaxed),
    );
    line(
        "guildhall_identify_buckets_untracked_total",
        "counter",
        "Bot IDENTIFYs admitted outside max_concurrency: session_start_bots_max buckets tracked.",
        gw.identify_buckets_untracked_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_resumed_total",
        "counter",
        "RESUMED sent.",
        gw.resumed_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_rest_requests_total",
        "counter",
        "REST requests.",
        api.requests_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_rest_rate_limited_total",
        "counter",
        "REST 429 answers.",
        api.rate_limited_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_rest_bad_requests_total",
        "counter",
        "REST bodies refused.",
        api.bad_requests_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_rest_unauthorized_total",
        "counter",
        "REST calls with a bad token.",
        api.unauthorized_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_messages_total",
        "counter",
        "Messages stored.",
        api.messages_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_pin_notices_failed_total",
        "counter",
        "Pins whose type 6 notice could not be stored.",
        api.pin_notices_failed_total.load(Ordering::Relaxed),
    );
    let ix = &node.api.interactions.counters;
    line(
        "guildhall_interactions_created_total",
        "counter",
        "Interactions created.",
        ix.created_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interactions_refused_total",
        "counter",
        "Interactions refused by a bound (table, application, user window).",
        ix.refused_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interactions_acknowledged_total",
        "counter",
        "Interaction callbacks accepted.",
        ix.acknowledged_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interactions_failed_total",
        "counter",
        "Interactions whose deadline passed unanswered.",
        ix.failed_total.load(Ordering::Relaxed),
    );
    let forwards = &node.api.forwards.counters;
    line(
        "guildhall_interaction_forwards_passed_total",
        "counter",
        "Interaction requests passed on to the api node that created the interaction.",
        forwards.passed_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interaction_forwards_served_total",
        "counter",
        "Interaction requests another api node passed on, run here.",
        forwards.served_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interaction_forwards_failed_total",
        "counter",
        "Passed-on interaction requests unanswered in time, or refused (busy, malformed).",
        forwards.failed_total.load(Ordering::Relaxed),
    );
    line(
        "guildhall_interactions",
        "gauge",
        "Interactions held.",
        node.api.interactions.with(|t| t.len()) as u64,
    );
    let files = &node.api.files.counters;
    for (name, help, value) in [
        (
            "guildhall_uploads_refused_total",
            "Upload requests answered 503: the node's upload memory (upload_memory_bytes_max) was taken.",
            &files.uploads_refused_total,
        ),
        (
            "guildhall_files_stored_total",
            "Files stored in the blob store.",
            &files.files_stored_total,
        ),
        (
            "guildhall_file_bytes_stored_total",
            "Bytes of files stored in the blob store.",
            &files.file_bytes_stored_total,
        ),
        (
            "guildhall_blob_errors_total",
            "Blob store operations that failed (answered 503).",
            &files.blob_errors_total,
        ),
        (
            "guildhall_files_served_total",
            "Files served at the CDN paths.",
            &files.files_served_total,
        ),
        (
            "guildhall_blobs_deleted_total",
            "Files deleted from the blob store after their message or attachment went.",
            &files.blobs_deleted_total,
        ),
        (
            "guildhall_blob_deletes_dropped_total",
            "Files left in the blob store: the delete queue (blob_delete_queue_max) was full.",
            &files.blob_deletes_dropped_total,
        ),
    ] {
        line(name, "counter", help, value.load(Ordering::Relaxed));
    }
    line(
        "guildhall_fanout_failed_total",
        "counter",
        "Events handed to no owner and not held for redelivery (unknown guild, outbox full).",
        api.fanout_failed_total.load(Ordering::Relaxed),
    );
    let outbox = &node.guilds.outbox_counters;
    for (name, help, value) in [
        (
            "guildhall_fanout_outbox_held_total",
            "Events held for redelivery: their owner did not confirm the fanout.",
            &outbox.held_total,
        ),
        (
            "guildhall_fanout_outbox_delivered_total",
            "Held events an owner confirmed later.",
            &outbox.delivered_total,
        ),
        (
            "guildhall_fanout_outbox_retries_failed_total",
            "Attempts at a held event that failed again (backed off).",
            &outbox.retries_failed_total,
        ),
        (
            "guildhall_fanout_outbox_dropped_total",
            "Held events dropped (outbox full, too old, guild gone); their messages are in history.",
            &outbox.dropped_total,
        ),
        (
            "guildhall_guild_publish_repeats_total",
            "Publishes an owner confirmed without a second fanout (a retry of an id it had fanned out).",
            &node.guild_owners.counters.publish_repeats_total,
        ),
        (
            "guildhall_guild_publish_ids_forgotten_early_total",
            "Publish ids forgotten at guild_publish_ids_remembered_max before a caller could no longer offer them again.",
            &node.guild_owners.counters.publish_ids_forgotten_early_total,
        ),
    ] {
        line(name, "counter", help, value.load(Ordering::Relaxed));
    }
    line(
        "guildhall_fanout_outbox_events",
        "gauge",
        "Events held for redelivery.",
        node.guilds.outbox_events() as u64,
    );
    let users = &node.users.counters;
    for (name, help, value) in [
        (
            "guildhall_users_cache_hits_total",
            "Token lookups answered from the cache.",
            &users.cache_hits_total,
        ),
        (
            "guildhall_users_store_reads_total",
            "Token lookups read from the store.",
            &users.store_reads_total,
        ),
        (
            "guildhall_users_negative_hits_total",
            "Token lookups answered from the cache of known-invalid tokens.",
            &users.negative_hits_total,
        ),
        (
            "guildhall_users_coalesced_total",
            "Token lookups that joined a read in flight.",
            &users.coalesced_total,
        ),
        (
            "guildhall_users_shed_total",
            "Token lookups shed (overloaded).",
            &users.shed_total,
        ),
        (
            "guildhall_users_expired_total",
            "Users requests read after their caller's deadline: not started.",
            &users.expired_total,
        ),
        (
            "guildhall_presence_published_total",
            "Presence messages published by this node's sessions.",
            &node.gateway.presence.published_total,
        ),
        (
            "guildhall_presence_dropped_total",
            "Presence messages the bus refused (presence slow or absent).",
            &node.gateway.presence.dropped_total,
        ),
        (
            "guildhall_presence_changes_total",
            "User status changes the presence role fanned out.",
            &node.gateway.presence.changes_total,
        ),
        (
            "guildhall_presence_refused_total",
            "Sessions not tracked at presence_sessions_max.",
            &node.gateway.presence.refused_total,
        ),
        (
            "guildhall_presence_queries_answered_total",
            "Guild owners' status questions the presence role answered.",
            &node.gateway.presence.queries_answered_total,
        ),
        (
            "guildhall_presence_queries_refused_total",
            "Status questions the presence role dropped (malformed, oversized).",
            &node.gateway.presence.queries_refused_total,
        ),
        (
            "guildhall_presence_resynced_total",
            "Sessions' statuses published again after the presence nodes changed.",
            &node.gateway.presence.resynced_total,
        ),
        (
            "guildhall_presence_handed_off_total",
            "Users this presence node forgot because another now holds them.",
            &node.gateway.presence.handed_off_total,
        ),
        (
            "guildhall_presence_queries_failed_total",
            "Guild loads whose status question went unanswered (went on without).",
            &node.guilds.counters.presence_queries_failed_total,
        ),
        (
            "guildhall_presence_queries_skipped_total",
            "Guild loads that asked no statuses (presence cooling off after a failure).",
            &node.guilds.counters.presence_queries_skipped_total,
        ),
        (
            "guildhall_users_batch_loads_total",
            "Batch user loads served by the users role.",
            &users.batch_loads_total,
        ),
        (
            "guildhall_users_batch_refused_total",
            "Batch user loads refused (pool full, malformed, oversized).",
            &users.batch_refused_total,
        ),
        (
            "guildhall_users_invalidations_unsent_total",
            "User invalidations the bus refused (other nodes' caches expire instead).",
            &users.invalidations_unsent_total,
        ),
        (
            "guildhall_users_invalidations_heard_total",
            "User invalidations heard from the bus (every node's).",
            &users.invalidations_heard_total,
        ),
        (
            "guildhall_bus_published_total",
            "Messages published on the bus by this node's roles.",
            &node.bus.stats().published_total,
        ),
        (
            "guildhall_bus_dropped_full_total",
            "Bus deliveries dropped because a subscription was full.",
            &node.bus.stats().dropped_full_total,
        ),
        (
            "guildhall_bus_shed_replies_total",
            "Requests a full role subscription refused at once with an overloaded answer.",
            &node.bus.stats().shed_replies_total,
        ),
        (
            "guildhall_bus_no_responders_total",
            "Bus publishes that found no subscriber.",
            &node.bus.stats().no_responders_total,
        ),
        (
            "guildhall_bus_too_large_total",
            "Bus publishes refused as larger than bus_payload_bytes_max.",
            &node.bus.stats().too_large_total,
        ),
        (
            "guildhall_bus_request_timeouts_total",
            "Bus requests that got no answer in time.",
            &node.bus.stats().request_timeouts_total,
        ),
        (
            "guildhall_guild_stream_messages_total",
            "Guild stream messages sent to gateway nodes.",
            &node.guild_owners.counters.stream_messages_total,
        ),
        (
            "guildhall_guild_superseded_publishes_total",
            "Publishes fanned out by an owner a newer one had superseded: not confirmed.",
            &node.guild_owners.counters.superseded_publishes_total,
        ),
        (
            "guildhall_guild_stream_tails_total",
            "Stream tails (epoch and last sequence) sent on quiet guild streams.",
            &node.guild_owners.counters.stream_tails_total,
        ),
        (
            "guildhall_guild_stream_publish_failed_total",
            "Guild stream messages the bus refused (kept unsent and published again in order).",
            &node.guild_owners.counters.stream_publish_failed_total,
        ),
        (
            "guildhall_guild_stream_resent_total",
            "Unsent guild stream messages published on a later try.",
            &node.guild_owners.counters.stream_resent_total,
        ),
        (
            "guildhall_guild_stream_unsent_dropped_total",
            "Unsent guild stream messages given up at guild_stream_unsent_max (the receiver resyncs).",
            &node.guild_owners.counters.stream_unsent_dropped_total,
        ),
        (
            "guildhall_guild_publish_unconfirmed_total",
            "Publishes answered not-yet because part of their fanout was still unsent.",
            &node.guild_owners.counters.publish_unconfirmed_total,
        ),
        (
            "guildhall_slowmode_unrecorded_total",
            "Slowmode sends let through unrecorded at guild_slowmode_clocks_max running clocks.",
            &node.guild_owners.counters.slowmode_unrecorded_total,
        ),
        (
            "guildhall_guild_subscriptions_refused_total",
            "Session subscriptions refused at guild_subscriptions_max.",
            &node.guild_owners.counters.subscriptions_refused_total,
        ),
        (
            "guildhall_guild_create_too_large_total",
            "GUILD_CREATEs left out as larger than the bus payload bound.",
            &node.guild_owners.counters.guild_create_too_large_total,
        ),
        (
            "guildhall_guild_requests_malformed_total",
            "Guild requests from the bus that did not decode.",
            &node.guild_owners.counters.malformed_requests_total,
        ),
        (
            "guildhall_guild_requests_expired_total",
            "Guild requests read after their caller's deadline: not started.",
            &node.guild_owners.counters.requests_expired_total,
        ),
        (
            "guildhall_guild_mailbox_refusals_total",
            "Guild requests refused because the owner's mailbox was full.",
            &node.guild_owners.counters.mailbox_refusals_total,
        ),
        (
            "guildhall_guild_loads_total",
            "Guild loads started (one per guild however many requests wait).",
            &node.guild_owners.loads.started_total,
        ),
        (
            "guildhall_guild_load_refused_total",
            "Guild requests refused at the load or waiter bound.",
            &node.guild_owners.loads.refused_total,
        ),
        (
            "guildhall_stream_events_applied_total",
            "Guild stream events applied by this gateway node.",
            &node.events.applied_total,
        ),
        (
            "guildhall_stream_gaps_total",
            "Gaps detected in guild streams (events lost on the bus).",
            &node.events.gaps_total,
        ),
        (
            "guildhall_stream_publish_repeats_dropped_total",
            "Dispatches of a publish this gateway delivered lately, dropped (fanned out again by a new owner).",
            &node.events.publish_repeats_dropped_total,
        ),
        (
            "guildhall_stream_tail_gaps_total",
            "Of the stream gaps, those a quiet stream's tail revealed.",
            &node.events.tail_gaps_total,
        ),
        (
            "guildhall_stream_missed_events_total",
            "Stream events the detected gaps skipped over.",
            &node.events.missed_total,
        ),
        (
            "guildhall_stream_resyncs_total",
            "Guild resyncs (sessions re-subscribed after a gap).",
            &node.events.resyncs_total,
        ),
        (
            "guildhall_stream_lease_regained_resyncs_total",
            "Guild resyncs scheduled because this node's lease ended and it announced itself again.",
            &node.events.lease_regained_resyncs_total,
        ),
        (
            "guildhall_stream_stale_total",
            "Duplicate or out-of-date stream events skipped.",
            &node.events.stale_total,
        ),
        (
            "guildhall_stream_stale_epoch_total",
            "Stream events refused because a newer owner epoch of their guild was seen (a superseded owner).",
            &node.events.stale_epoch_total,
        ),
        (
            "guildhall_stream_owner_changes_total",
            "Guild streams whose owner epoch advanced here (a new owner).",
            &node.events.owner_changes_total,
        ),
        (
            "guildhall_gateway_follows_answered_total",
            "New owners' questions (which sessions follow a guild) answered.",
            &node.events.follows_answered_total,
        ),
        (
            "guildhall_guild_owners_moved_out_total",
            "Owners stopped because placement moved their guild elsewhere (or the lease was not vouched for).",
            &node.guild_owners.counters.moved_out_total,
        ),
        (
            "guildhall_guild_owners_moved_in_total",
            "Owners started for a guild that had an owner before (a move or a restart).",
            &node.guild_owners.counters.moved_in_total,
        ),
        (
            "guildhall_guild_owners_fenced_total",
            "Owners stopped because the store refused a write under their epoch (a newer owner claimed the guild).",
            &node.guild_owners.counters.fenced_total,
        ),
        (
            "guildhall_guild_requests_forwarded_total",
            "Guild requests forwarded to the owner in this node's view.",
            &node.guild_owners.counters.forwarded_total,
        ),
        (
            "guildhall_guild_forward_refused_total",
            "Guild requests answered Overloaded instead of forwarded (hop bound, or no other owner).",
            &node.guild_owners.counters.forward_refused_total,
        ),
        (
            "guildhall_guild_claims_refused_total",
            "Guild loads refused because this node could not claim (lease not renewed within its TTL, or claims held after a fenced write).",
            &node.guild_owners.counters.claims_refused_total,
        ),
        (
            "guildhall_guild_pulled_sessions_total",
            "Sessions new owners subscribed from the gateways' answers at load.",
            &node.guild_owners.counters.pulled_sessions_total,
        ),
        (
            "guildhall_guild_pulls_failed_total",
            "Gateway nodes that did not answer a new owner's question in time.",
            &node.guild_owners.counters.pulls_failed_total,
        ),
        (
            "guildhall_guild_dead_gateway_sessions_dropped_total",
            "Sessions guild owners dropped because their gateway node's lease ended.",
            &node.guild_owners.counters.dead_gateway_sessions_dropped_total,
        ),
        (
            "guildhall_guild_pulls_retried_total",
            "Questions a new owner asked again of gateway nodes that had not answered.",
            &node.guild_owners.counters.pulls_retried_total,
        ),
        (
            "guildhall_guild_late_pulls_refused_total",
            "Late pulls not started at guild_late_pull_tasks_max.",
            &node.guild_owners.counters.late_pulls_refused_total,
        ),
        (
            "guildhall_guild_owner_gone_total",
            "Guild requests refused at once: their owner's node is on the ring but its lease ended.",
            &node.guilds.counters.owner_gone_total,
        ),
        (
            "guildhall_placement_truncated_total",
            "Guild listings that left ids out at placement_guilds_max.",
            &node.cluster.placement_truncated_total,
        ),
        (
            "guildhall_placement_recomputes_total",
            "Placements computed (ring changes and listings).",
            &node.cluster.placement_recomputes_total,
        ),
        (
            "guildhall_bus_malformed_envelopes_total",
            "Bus envelopes that did not decode.",
            &node.events.malformed_total,
        ),
        (
            "guildhall_stream_resyncs_deferred_total",
            "Resyncs moved to the next interval at event_resync_tasks_max.",
            &node.events.resyncs_deferred_total,
        ),
        (
            "guildhall_joined_subscriptions_total",
            "Sessions subscribed to a guild their user joined.",
            &node.events.joined_subscriptions_total,
        ),
        (
            "guildhall_terminated_sessions_total",
            "Sessions ended for good (closed 4004) because their bot hit its session start limit.",
            &node.events.terminated_sessions_total,
        ),
        (
            "guildhall_guild_subscribe_retries_total",
            "READY subscriptions asked for again (no GUILD_CREATE yet).",
            &node.gateway.subscriptions.counters.retries_total,
        ),
        (
            "guildhall_guild_subscribe_retries_refused_total",
            "READY subscription retries refused by the retry budget.",
            &node.gateway.subscriptions.counters.retries_refused_total,
        ),
        (
            "guildhall_guild_subscribe_gave_up_total",
            "READY subscriptions without GUILD_CREATE after every attempt.",
            &node.gateway.subscriptions.counters.gave_up_total,
        ),
        (
            "guildhall_guild_subscribe_tasks_refused_total",
            "Sessions not watched for retries at guild_subscribe_retry_tasks_max.",
            &node.gateway.subscriptions.counters.tasks_refused_total,
        ),
        (
            "guildhall_sessions_taken_total",
            "Sessions taken over from another gateway node (cross-node RESUME).",
            &node.takeovers.counters.taken_total,
        ),
        (
            "guildhall_sessions_given_total",
            "Sessions handed to another gateway node.",
            &node.takeovers.counters.given_total,
        ),
        (
            "guildhall_session_takeovers_failed_total",
            "Cross-node RESUMEs that failed (op 9 to the client).",
            &node.takeovers.counters.failed_total,
        ),
        (
            "guildhall_session_takeover_unknown_holder_total",
            "RESUMEs naming no live gateway node (dead holder or forged id).",
            &node.takeovers.counters.unknown_holder_total,
        ),
        (
            "guildhall_session_takeovers_refused_total",
            "Takeover requests this node refused.",
            &node.takeovers.counters.refused_total,
        ),
        (
            "guildhall_session_move_unconfirmed_guilds_total",
            "Guilds handed over without the owner's move confirmation (subscribed afresh).",
            &node.takeovers.counters.unconfirmed_guilds_total,
        ),
        (
            "guildhall_announce_refreshes_total",
            "Announcement refreshes (sessions, draining) written under the lease.",
            &node.cluster.announce_refreshes_total,
        ),
        (
            "guildhall_announce_repairs_total",
            "Announcements written again because this node's registry key held a value it did not write.",
            &node.cluster.announce_repairs_total,
        ),
        (
            "guildhall_log_lines_suppressed_total",
            "Log lines held back by the log throttle (process-wide).",
            &log::SUPPRESSED_TOTAL,
        ),
        (
            "guildhall_store_guild_loads_total",
            "Whole guilds loaded from the store.",
            &node.shared.store.counters().guild_loads_total,
        ),
        (
            "guildhall_store_member_rows_loaded_total",
            "Member rows read by whole-guild loads.",
            &node.shared.store.counters().member_rows_loaded_total,
        ),
    ]
    .into_iter()
    .chain(node.bus.transport_counters())
    {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
            value.load(Ordering::Relaxed)
        );
    }
    node.http.render(&mut out);
    node.api.passwords.render(&mut out);
    node.api.rate.render(&mut out);
    node.api.counters.request_seconds.render(
        &mut out,
        "guildhall_rest_request_seconds",
        "REST request latency.",
    );
    gw.identify_to_ready_seconds.render(
        &mut out,
        "guildhall_identify_to_ready_seconds",
        "IDENTIFY received to READY queued.",
    );
    gw.voice_server_seconds.render(
        &mut out,
        "guildhall_voice_server_seconds",
        "Op 4 received to VOICE_SERVER_UPDATE queued.",
    );
    let cluster = &node.cluster;
    let ring = cluster.ring();
    let placement = cluster.placement();
    for (name, kind, help, value) in [
        (
            "guildhall_registry_instances",
            "gauge",
            "Valid instances in the registry view.",
            cluster.instances.load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_ring_members",
            "gauge",
            "Members of the guild-owner ring.",
            ring.members().len() as u64,
        ),
        (
            "guildhall_ring_generation",
            "gauge",
            "Generation of the guild-owner ring.",
            ring.generation(),
        ),
        (
            "guildhall_guild_owners",
            "gauge",
            "Guild owners running on this node.",
            node.guild_owners.owners_loaded() as u64,
        ),
        (
            "guildhall_placement_guilds",
            "gauge",
            "Guilds placed with bounded loads (the last listing).",
            placement.len() as u64,
        ),
        (
            "guildhall_placement_load_max",
            "gauge",
            "Most guilds placement puts on one guilds node.",
            u64::from(placement.max_load()),
        ),
        (
            "guildhall_placement_load_avg_permille",
            "gauge",
            "Guilds per guilds node on average, in thousandths.",
            placement.average_load_permille(),
        ),
        (
            "guildhall_placement_capacity",
            "gauge",
            "Placement's per-node cap: ceil((1 + epsilon) x average).",
            u64::from(placement.capacity()),
        ),
        (
            "guildhall_placement_load_here",
            "gauge",
            "Guilds placement puts on this node.",
            placement
                .loads()
                .find(|(m, _)| {
                    *m == guildhall_ring::hash::member_id_of(node.guild_owners.node_name())
                })
                .map_or(0, |(_, l)| u64::from(l)),
        ),
        (
            "guildhall_guild_loads_in_flight",
            "gauge",
            "Guild loads running now.",
            node.guild_owners.loads.in_flight.load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_guild_loads_in_flight_peak",
            "gauge",
            "Most guild loads that ran at once since the node started.",
            node.guild_owners
                .loads
                .in_flight_peak
                .load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_guild_load_waiters",
            "gauge",
            "Guild requests waiting behind their guild's load.",
            node.guild_owners.loads.waiters.load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_stream_resync_tasks",
            "gauge",
            "Stream resync tasks running now.",
            node.events.resync_tasks.load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_stream_resync_tasks_peak",
            "gauge",
            "Most stream resync tasks that ran at once since the node started.",
            node.events.resync_tasks_peak.load(Ordering::Relaxed) as u64,
        ),
        (
            "guildhall_membership_frozen",
            "gauge",
            "1 while self-preservation freezes removals.",
            u64::from(cluster.frozen.load(Ordering::Relaxed)),
        ),
        (
            "guildhall_membership_frozen_ms",
            "gauge",
            "How long the current self-preservation freeze has held removals (0 when none); bounded by self_preservation_freeze_max_ms.",
            cluster.frozen_for_ms.load(Ordering::Relaxed),
        ),
        (
            "guildhall_membership_freeze_expired_total",
            "counter",
            "Freezes that outlasted self_preservation_freeze_max_ms: their down members then went at the window's budget.",
            cluster.freeze_expired_total.load(Ordering::Relaxed),
        ),
        (
            "guildhall_membership_releases_total",
            "counter",
            "Operator releases of a freeze applied (guildhall ring release).",
            cluster.releases_total.load(Ordering::Relaxed),
        ),
        (
            "guildhall_membership_released_members_total",
            "counter",
            "Members removed by an operator's release or past a freeze's bound.",
            cluster.released_members_total.load(Ordering::Relaxed),
        ),
        (
            "guildhall_registry_relists_total",
            "counter",
            "Full listings of the registry (the first, and one after each watch that ended).",
            cluster.relists_total.load(Ordering::Relaxed),
        ),
        (
            "guildhall_registry_errors_total",
            "counter",
            "Registry listings that failed (registry unreachable; the last view was kept).",
            cluster.registry_errors_total.load(Ordering::Relaxed),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP guildhall_cluster_role_nodes Live nodes running each role in this node's registry view (0: the role runs nowhere).\n# TYPE guildhall_cluster_role_nodes gauge"
    );
    for (role, nodes) in cluster
        .role_nodes
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(
            out,
            "guildhall_cluster_role_nodes{{role=\"{role}\"}} {nodes}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP guildhall_registry_rejected_entries_total Registry entries rejected by validation, by reason.\n# TYPE guildhall_registry_rejected_entries_total counter"
    );
    for (reason, count) in cluster
        .rejected
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
    {
        let _ = writeln!(
            out,
            "guildhall_registry_rejected_entries_total{{reason=\"{reason}\"}} {count}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP guildhall_gateway_closes_total Sessions closed, by close code.\n# TYPE guildhall_gateway_closes_total counter"
    );
    for (i, count) in gw.closes_by_code.iter().enumerate() {
        let _ = writeln!(
            out,
            "guildhall_gateway_closes_total{{code=\"{}\"}} {}",
            4000 + i,
            count.load(Ordering::Relaxed)
        );
    }
    let mut response = axum::response::IntoResponse::into_response(out);
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

async fn healthz(
    axum::extract::State(node): axum::extract::State<Arc<Node>>,
) -> axum::http::StatusCode {
    if node.ready.load(Ordering::Relaxed) {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    }
}

/// Polls of the hub while a drain waits for its sessions to move: often
/// enough to leave soon after the last one, rare enough to cost nothing.
const DRAIN_POLL_INTERVAL_MS: u64 = 50;

/// Drains the node: announces it as draining at once (no new session is
/// routed here), sends op 7 RECONNECT to every attached session, paced so
/// all of them fit in the grace period (the drain planner), then waits
/// until every session it told to reconnect has moved to another node
/// (their RESUMEs there take them over from this one, which must stay
/// reachable meanwhile) or the grace period is over. The caller then revokes the lease.
async fn drain(node: &Node) {
    let started = tokio::time::Instant::now();
    node.ready.store(false, Ordering::Relaxed);
    node.cluster.draining.store(true, Ordering::Relaxed);
    node.cluster.announce_now.notify_one();
    if let Some(sfu) = &node.sfu {
        // New calls and admissions go to other SFUs (the voice role sees
        // `Draining`); calls here keep their media until released.
        sfu.drain();
    }
    let sessions = node.hub.attached();
    let limits = &node.shared.limits;
    let plan = guildhall_control::drain::plan(guildhall_control::drain::DrainInput {
        sessions: sessions.len() as u64,
        grace_ms: limits.drain_grace_ms,
        margin_ms: limits.drain_margin_ms,
        resume_cap_per_s: u64::from(limits.handshake_rate_per_s),
        utilization_permille: limits.drain_receiver_utilization_permille,
        batch_interval_ms: limits.drain_batch_interval_ms,
    });
    if !plan.fits {
        tracing::warn!(
            sessions = sessions.len(),
            unfit = plan.sessions_unfit,
            "drain does not fit the grace period"
        );
    }
    tracing::info!(
        sessions = sessions.len(),
        batches = plan.batches,
        "draining"
    );
    for batch in sessions.chunks(plan.batch_size.max(1) as usize) {
        for slot in batch {
            slot.control(hub::Control::Reconnect);
        }
        tokio::time::sleep(Duration::from_millis(plan.interval_ms)).await;
    }
    // Only the sessions told to reconnect are waited for: their clients
    // come back at once. One detached before the drain may never resume;
    // it stays resumable elsewhere only while this node lives.
    let grace_end = started + Duration::from_millis(limits.drain_grace_ms);
    let moving = |node: &Node| sessions.iter().any(|s| node.hub.get(&s.id).is_some());
    while moving(node) && tokio::time::Instant::now() < grace_end {
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_INTERVAL_MS)).await;
    }
    tracing::info!(left_behind = node.hub.len(), "drained");
}

/// Where the SFU's voice gateway is served on the node's listener unless
/// configured otherwise.
pub const SFU_WS_PATH: &str = "/voice";

/// The future serving the SFU's own TLS listener, when it has one.
type SfuTls = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts the SFU role: its UDP socket (the configured address, else the
/// listener's IP on any port), its TLS listener when configured, and the
/// endpoint it answers allocations with (configured; else the TLS
/// listener; else this listener's `/voice`).
async fn start_sfu(
    config: &NodeConfig,
    addr: std::net::SocketAddr,
    bus: Arc<dyn guildhall_cluster::Bus>,
) -> Result<(Arc<guildhall_sfu::Sfu>, Option<SfuTls>), NodeError> {
    let voice = &config.voice;
    let udp_bind = voice
        .udp
        .unwrap_or_else(|| std::net::SocketAddr::new(addr.ip(), 0));
    let public_ip = voice.public_ip.clone().unwrap_or_else(|| {
        if udp_bind.ip().is_unspecified() {
            std::net::Ipv4Addr::LOCALHOST.to_string()
        } else {
            udp_bind.ip().to_string()
        }
    });
    let tls_listener = match &voice.tls {
        Some(tls) => Some((
            TcpListener::bind(tls.listen)
                .await
                .map_err(NodeError::Serve)?,
            tls,
        )),
        None => None,
    };
    let endpoint = match (&voice.endpoint, &tls_listener) {
        (Some(endpoint), _) => endpoint.clone(),
        (None, Some((listener, _))) => listener.local_addr().map_err(NodeError::Serve)?.to_string(),
        (None, None) => format!("{addr}{}", voice.ws_path.as_deref().unwrap_or(SFU_WS_PATH)),
    };
    let sfu = guildhall_sfu::Sfu::start(
        guildhall_sfu::SfuConfig {
            node: config.node_name.clone(),
            limits: config.limits.clone(),
            udp_bind,
            public_ip,
            endpoint,
        },
        bus,
    )
    .await
    .map_err(|e| NodeError::Serve(std::io::Error::other(format!("sfu: {e}"))))?;
    let serve_tls = match tls_listener {
        Some((listener, tls)) => Some(Box::pin(
            sfu.serve_tls(listener, "/", &tls.cert, &tls.key)
                .map_err(|e| NodeError::Serve(std::io::Error::other(format!("sfu tls: {e}"))))?,
        ) as SfuTls),
        None => None,
    };
    tracing::info!(udp = %sfu.udp_addr(), endpoint = %sfu.info().endpoint, "sfu serving");
    Ok((Arc::new(sfu), serve_tls))
}

/// Runs a node on `listener` until `shutdown` completes, then drains.
pub async fn run(
    config: NodeConfig,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), NodeError> {
    config.limits.validate().map_err(|errors| {
        NodeError::Limits(
            errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    log::configure(&config.limits);
    std::fs::create_dir_all(&config.data_dir).map_err(|source| NodeError::DataDir {
        path: config.data_dir.clone(),
        source,
    })?;
    let store = match &config.database_url {
        Some(url) => Store::open_url(url, &config.limits).await?,
        None => Store::open(&config.data_dir.join("guildhall.db"), &config.limits).await?,
    };
    let admin_token = auth::new_token(0, state::now_ms())
        .map_err(|e| NodeError::Serve(std::io::Error::other(e.to_string())))?;
    let token_path = config.data_dir.join("admin.token");
    write_private(&token_path, &admin_token).map_err(|source| NodeError::DataDir {
        path: token_path,
        source,
    })?;
    let addr = listener.local_addr().map_err(NodeError::Serve)?;
    let own_gateway_url = format!("ws://{addr}");
    let registry: Arc<dyn guildhall_cluster::Registry> = config
        .registry
        .clone()
        .unwrap_or_else(|| Arc::new(guildhall_cluster::LocalRegistry::default()));
    // No id is minted before the worker id is this node's alone.
    let (worker_id, worker_lease) = match config.worker_id {
        Some(id) => (
            id,
            worker_id::claim(registry.as_ref(), &config.node_name, id, &config.limits).await?,
        ),
        None => {
            let (id, lease) =
                worker_id::claim_any(registry.as_ref(), &config.node_name, &config.limits).await?;
            tracing::info!(worker_id = id, "picked a free snowflake worker id");
            (id, lease)
        }
    };
    let worker_lost = Arc::new(tokio::sync::Notify::new());
    let worker_held = Arc::new(AtomicU64::new(0));
    let worker_keeper = worker_id::keep(
        registry.clone(),
        config.node_name.clone(),
        worker_id,
        worker_lease,
        &config.limits,
        worker_lost.clone(),
        worker_held.clone(),
    );
    let mut shared = state::Shared::new(
        store,
        config.limits.clone(),
        own_gateway_url.clone(),
        worker_id,
    );
    shared.public_gateway_url = config.public_gateway_url.clone();
    let shared = Arc::new(shared);
    let hub = Arc::new(hub::Hub::new(&config.limits));
    let bus: Arc<dyn guildhall_cluster::Bus> = config.bus.clone().unwrap_or_else(|| {
        Arc::new(guildhall_cluster::LocalBus::new(
            config.limits.bus_payload_bytes_max,
        ))
    });
    let cluster_state = config.cluster_state.clone().unwrap_or_default();
    let guilds = Arc::new(guildhall_common::guilds::GuildsClient::new(
        bus.clone(),
        cluster_state.clone(),
        config.node_name.clone(),
        &config.limits,
    ));
    let guild_owners = Arc::new(guildhall_guilds::GuildDirectory::new(
        shared.clone(),
        bus.clone(),
        cluster_state.clone(),
        config.node_name.clone(),
        guilds.clone(),
    ));
    let subscriptions = Arc::new(subscriptions::Subscriptions::new(
        shared.clone(),
        hub.clone(),
        guilds.clone(),
        config.node_name.clone(),
    ));
    let bus_error = |e: guildhall_cluster::BusError| {
        NodeError::Serve(std::io::Error::other(format!("bus: {e}")))
    };
    // Each role subscribes before the node serves anything, so no request
    // reaches a subject nobody listens on yet.
    let mut roles = Vec::new();
    if config.runs(Role::Guilds) {
        roles.push(guild_owners.serve().await.map_err(bus_error)?);
        roles.push(guild_owners.start_rebalance());
    }
    // Any role may publish guild events (REST, webhooks, interactions), so
    // every node redelivers the ones their owner did not confirm.
    roles.push(guilds.start_outbox());
    // Every node routes guild requests, so every node keeps placement.
    cluster::start_placement(shared.store.clone(), &config.limits, cluster_state.clone());
    let event_counters = Arc::new(events::EventCounters::default());
    if config.runs(Role::Gateway) {
        roles.extend(
            events::start(
                &bus,
                &config.node_name,
                &config.limits,
                hub.clone(),
                subscriptions.clone(),
                event_counters.clone(),
                cluster_state.lease_regained.subscribe(),
            )
            .await
            .map_err(bus_error)?,
        );
    }
    let takeovers = Arc::new(takeover::Takeovers::new(
        hub.clone(),
        subscriptions.clone(),
        bus.clone(),
        cluster_state.clone(),
        config.node_name.clone(),
        &config.limits,
    ));
    if config.runs(Role::Gateway) {
        roles.push(takeovers.serve().await.map_err(bus_error)?);
    }
    let users = guildhall_users::Users::new(shared.store.clone(), &config.limits, bus.clone());
    // Every node: any node may cache a token that another node revokes.
    roles.push(
        users
            .listen_invalidations(config.limits.bus_subscription_messages_max)
            .await
            .map_err(bus_error)?,
    );
    let presence_counters = Arc::new(presence::PresenceCounters::default());
    if config.runs(Role::Users) {
        roles.push(users.serve(&config.limits).await.map_err(bus_error)?);
    }
    let gateway = Arc::new(gateway::Gateway {
        shared: shared.clone(),
        hub: hub.clone(),
        guilds: guilds.clone(),
        subscriptions: subscriptions.clone(),
        users: users.lookups(),
        counters: gateway::GatewayCounters::default(),
        admission: gateway::Admission::new(&config.limits),
        bus: bus.clone(),
        presence: presence_counters.clone(),
        cluster: cluster_state.clone(),
        takeovers: takeovers.clone(),
        voice_budget: std::sync::Mutex::new(guildhall_control::retry::RetryBudget::new(
            config.limits.retry_budget_ratio_permille,
            config.limits.retry_budget_floor_per_s,
            config.limits.retry_budget_window_ms,
            guildhall_limits::RETRY_BUDGET_BUCKETS,
        )),
    });
    if config.runs(Role::Presence) {
        roles.push(
            presence::serve(
                bus.clone(),
                shared.store.clone(),
                guilds.clone(),
                presence_counters.clone(),
                (cluster_state.clone(), config.node_name.clone()),
                &config.limits,
            )
            .await
            .map_err(bus_error)?,
        );
    }
    if config.runs(Role::Gateway) {
        roles.push(gateway::start_presence_resync(
            bus.clone(),
            hub.clone(),
            cluster_state.clone(),
            presence_counters.clone(),
            &config.limits,
        ));
    }
    let (sfu, sfu_tls) = if config.runs(Role::Sfu) {
        let (sfu, tls) = start_sfu(&config, addr, bus.clone()).await?;
        (Some(sfu), tls)
    } else {
        (None, None)
    };
    let voice = if config.runs(Role::Voice) {
        let gateway_cluster = cluster_state.clone();
        let gateway_of_session: guildhall_voice::GatewayOfSession = Arc::new(move |session_id| {
            takeover::holder_tag(session_id).and_then(|tag| gateway_cluster.gateway_by_tag(tag))
        });
        Some(
            guildhall_voice::VoiceRole::start(
                guildhall_voice::VoiceConfig {
                    node: config.node_name.clone(),
                    limits: config.limits.clone(),
                },
                bus.clone(),
                cluster_state.sfus.subscribe(),
                gateway_of_session,
            )
            .await
            .map_err(bus_error)?,
        )
    } else {
        None
    };
    // Every api node signs and verifies attachment URLs with one key.
    let signing_key = match &config.files.signing_key {
        Some(key) => key.clone(),
        None => {
            let fresh = auth::new_token(0, state::now_ms())
                .map_err(|e| NodeError::Serve(std::io::Error::other(e.to_string())))?;
            shared
                .store
                .setting_or_insert("cdn_signing_key", &fresh)
                .await?
        }
    };
    let api = Arc::new(api::ApiState {
        shared: shared.clone(),
        guilds: guilds.clone(),
        users: users.lookups(),
        counters: api::ApiCounters::default(),
        rate: ratelimit::RateLimiter::new(&config.limits),
        admin_token,
        cluster: cluster_state.clone(),
        bus: bus.clone(),
        passwords: auth::Passwords::new(config.limits.password_hash_concurrency_max),
        node_name: config.node_name.clone(),
        interactions: interactions::Interactions::new(&config.limits),
        forwards: interaction_forward::Forwards::new(&config.limits),
        files: {
            let dir = config
                .files
                .blob_dir
                .clone()
                .unwrap_or_else(|| config.data_dir.join("blobs"));
            let base = config
                .files
                .public_cdn_url
                .clone()
                .unwrap_or_else(|| format!("http://{addr}"));
            api::files::Files::local(&dir, base, signing_key.as_bytes(), &config.limits)
                .map_err(|source| NodeError::DataDir { path: dir, source })?
        },
    });
    let node = Arc::new(Node {
        shared,
        hub,
        guilds,
        guild_owners,
        users,
        gateway,
        api,
        ready: AtomicBool::new(true),
        registry,
        cluster: cluster_state,
        bus,
        events: event_counters,
        http: http::Edge::new(&config.limits),
        takeovers,
        sfu,
        voice,
    });
    if let Some(serve_tls) = sfu_tls {
        tokio::spawn(serve_tls);
    }
    let announcement = guildhall_proto::cluster::Announcement {
        schema: guildhall_proto::cluster::ANNOUNCEMENT_SCHEMA,
        node: config.node_name.clone(),
        roles: config.roles.clone(),
        addr: addr.to_string(),
        started_ms: state::now_ms(),
        gateway_url: config.runs(Role::Gateway).then_some(own_gateway_url),
        sessions: 0,
        draining: false,
        sfu: None,
    };
    let sessions: cluster::SessionCount = {
        let hub = node.hub.clone();
        Arc::new(move || hub.len() as u64)
    };
    cluster::start(
        node.registry.clone(),
        announcement,
        &config.limits,
        node.cluster.clone(),
        sessions,
        {
            let sfu = node.sfu.clone();
            Arc::new(move || sfu.as_ref().map(|s| s.info()))
        },
    )
    .await;
    let rest = api::routes()
        .route_layer(axum::middleware::from_fn_with_state(
            node.api.clone(),
            ratelimit::layer,
        ))
        .layer(axum::middleware::map_response(api::discord_error_bodies))
        .with_state(node.api.clone());
    let mut app = axum::Router::new();
    if config.runs(Role::Api) {
        app = app.nest("/api/v10", rest.clone()).nest("/api/v9", rest);
        // Files, at the paths of Discord's CDN (the URLs name this node
        // or the configured CDN in front of the api nodes).
        app = app.merge(
            axum::Router::new()
                .route(
                    "/attachments/{channel}/{attachment}/{filename}",
                    axum::routing::get(api::files::serve_attachment),
                )
                .with_state(node.api.clone()),
        );
        // The interaction requests other api nodes pass on: the same
        // routes without the edge (the passing node applied it).
        let passed_on = axum::Router::new()
            .nest("/api/v10", api::routes())
            .nest("/api/v9", api::routes())
            .layer(axum::middleware::map_response(api::discord_error_bodies))
            .with_state(node.api.clone());
        roles.push(
            interaction_forward::serve(node.api.clone(), passed_on)
                .await
                .map_err(bus_error)?,
        );
    }
    let mut app = app
        .route("/metrics", axum::routing::get(metrics))
        .route("/healthz", axum::routing::get(healthz));
    if let Some(sfu) = &node.sfu {
        // The voice gateway, plain, for a TLS proxy in front (or tests);
        // the libraries themselves need `wss://`.
        let path = config
            .voice
            .ws_path
            .clone()
            .unwrap_or_else(|| SFU_WS_PATH.to_owned());
        let path = path.trim_end_matches('/');
        let voice = sfu.router(path);
        app = app
            .route_service(path, voice.clone())
            .route_service(&format!("{path}/"), voice);
    }
    let app = if config.runs(Role::Gateway) {
        // Any path that is a WebSocket upgrade is a gateway connection
        // (`/`, `/resume/`, `//`, with any query): the gateway's own handler
        // over the gateway's state, not the node's.
        app.fallback_service(
            axum::Router::new()
                .fallback(gateway::upgrade::upgrade_or_404)
                .with_state(node.gateway.clone()),
        )
    } else {
        app.fallback(api::not_found)
    }
    .with_state(node.clone());
    let reaper = {
        let node = node.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(
                node.shared.limits.session_reap_interval_ms,
            ));
            loop {
                tick.tick().await;
                let reaped = node
                    .hub
                    .reap(state::now_ms(), node.shared.limits.resume_window_ms);
                // Owners stop counting the sessions (one message each;
                // best effort: a lost one only costs an idle stream entry).
                for (slot, guild_ids) in reaped {
                    // The session is gone for good: its presence too.
                    node.gateway.presence_gone(&slot);
                    for guild_id in guild_ids {
                        node.gateway
                            .subscriptions
                            .unsubscribe(guild_id, slot.id.clone())
                            .await;
                    }
                }
            }
        })
    };
    let interaction_sweeper = tokio::spawn(interactions::run_sweeper(node.api.clone()));
    tracing::info!(%addr, "guildhall serving");
    let drain_node = node.clone();
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let worker_gone = Arc::new(AtomicBool::new(false));
    {
        let worker_gone = worker_gone.clone();
        let keeper = worker_keeper.abort_handle();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown => {}
                () = worker_lost.notified() => worker_gone.store(true, Ordering::Relaxed),
            }
            drain(&drain_node).await;
            cluster::leave(drain_node.registry.as_ref(), &drain_node.cluster).await;
            // The worker id last: nothing is minted after the drain (and
            // its keeper stops first, or it would claim the id back).
            keeper.abort();
            let lease = worker_held.load(Ordering::Relaxed);
            let _ = drain_node.registry.revoke(lease).await;
            let _ = drained_tx.send(());
        });
    }
    let served = http::serve(
        listener,
        app,
        node.http.clone(),
        &config.limits,
        async move {
            let _ = drained_rx.await;
        },
    )
    .await;
    reaper.abort();
    interaction_sweeper.abort();
    worker_keeper.abort();
    for task in roles {
        task.abort();
    }
    if worker_gone.load(Ordering::Relaxed) {
        return Err(NodeError::WorkerIdLost(worker_id));
    }
    served.map_err(NodeError::Serve)
}
