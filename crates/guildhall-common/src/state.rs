//! What every role of a node shares: the store, the id generator, the
//! limits, and the clock (read here, at the edge, and passed as `now_ms` to
//! everything pure).

use guildhall_limits::Limits;
use guildhall_proto::Snowflake;
use guildhall_proto::snowflake::SnowflakeGenerator;
use guildhall_store::Store;
use std::sync::{Mutex, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds on this process's monotonic clock, from 1 (so 0 can mean
/// "never"). Leases and claim holds are timed on it: a wall clock stepped
/// back (an NTP correction, an operator's `date`) would keep a cut-off
/// owner serving past its lease, and one stepped forward would stop every
/// owner at once. Only meaningful within this process.
pub fn monotonic_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    (START.get_or_init(Instant::now).elapsed().as_millis() as u64).saturating_add(1)
}

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Shared by the roles of one node.
pub struct Shared {
    /// Durable state.
    pub store: Store,
    /// Every bound.
    pub limits: Limits,
    /// This node's own `ws://host:port` (what it announces as a gateway
    /// node, and the answer when the cluster offers nothing better).
    pub gateway_url: String,
    /// The configured public gateway URL (a load balancer), if any.
    pub public_gateway_url: Option<String>,
    ids: Mutex<SnowflakeGenerator>,
}

impl Shared {
    /// Shared state for a node with snowflake worker id `worker_id`.
    pub fn new(store: Store, limits: Limits, gateway_url: String, worker_id: u16) -> Self {
        Self {
            store,
            limits,
            gateway_url,
            public_gateway_url: None,
            ids: Mutex::new(SnowflakeGenerator::new(worker_id)),
        }
    }

    /// Where clients are sent (`GET /gateway`, READY's
    /// `resume_gateway_url`): see [`crate::cluster::gateway_url_for`].
    pub fn client_gateway_url(&self, cluster: &crate::cluster::ClusterState) -> String {
        crate::cluster::gateway_url_for(
            self.public_gateway_url.as_deref(),
            &cluster.gateway_infos(),
            &self.gateway_url,
        )
    }

    /// A new id.
    pub fn next_id(&self) -> Snowflake {
        self.ids
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .next(now_ms())
    }
}

/// i64 (store) → Snowflake (wire). Ids in the store are never zero or
/// negative; a corrupt row maps to the smallest id rather than a panic.
pub fn sf(id: i64) -> Snowflake {
    Snowflake::new(u64::try_from(id).unwrap_or(1)).unwrap_or(Snowflake(std::num::NonZeroU64::MIN))
}
