//! The snowflake worker id, claimed in the registry: two processes that
//! share one would mint the same ids (messages, users, guilds), so a node
//! holds its worker id as a leased key (`/guildhall/workers/{id}`, its name
//! as the value) for as long as it runs.
//!
//! At start the node claims its id (one compare-and-put,
//! [`guildhall_cluster::Registry::claim`]). Held by another node's name:
//! the node refuses to start and says which node holds it. Held by its own
//! name: its previous process, whose lease has not ended yet (a crash, a
//! `kill -9`), so it waits, at most one lease TTL and a renewal more, and
//! claims it then. A registry that does not answer at start is retried a
//! few times, then the start fails (no id is minted unclaimed).
//!
//! Without a given id (a pod of a Deployment has no per-pod
//! configuration), [`claim_any`] picks one: the id this node's name held
//! before (its previous process), else the first free id from a start
//! spread by the name's hash, each tried with the same compare-and-put, a
//! lost race moving on to the next. The id space bounds the tries.
//!
//! While the node runs, a task keeps the lease alive every
//! `lease_renew_interval_ms`. Should the lease end anyway (the node was
//! cut off from the registry past its TTL), the task claims the id again;
//! if another node has taken it meanwhile, the task says so and the node
//! stops: two minters of one id is the failure this prevents.

use guildhall_cluster::{Claim, LeaseId, Registry, RegistryError};
use std::sync::Arc;
use std::time::Duration;

/// Prefix of the worker id keys.
pub const WORKER_PREFIX: &str = "/guildhall/workers/";

/// Registry calls tried at start before the start fails.
const START_ATTEMPTS_MAX: u32 = 5;

/// The key of worker id `id`.
pub fn worker_key(id: u16) -> String {
    format!("{WORKER_PREFIX}{id:04}")
}

/// Why a worker id could not be held.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WorkerIdError {
    /// Another node holds it.
    #[error("worker id {id} is held by node {holder:?}: give this node another --worker-id")]
    Taken {
        /// The id.
        id: u16,
        /// Who holds it.
        holder: String,
    },
    /// Every worker id is held by a live node.
    #[error("every worker id (0-1023) is held: the cluster has no room for another node")]
    Exhausted,
    /// The registry did not list the held ids.
    #[error("worker ids: the registry did not answer ({reason})")]
    Unlisted {
        /// Its last error.
        reason: String,
    },
    /// The registry did not answer.
    #[error("worker id {id}: the registry did not answer ({reason})")]
    Registry {
        /// The id.
        id: u16,
        /// Its last error.
        reason: String,
    },
}

/// Snowflake worker ids: 10 bits.
pub const WORKER_IDS: u16 = 1_024;

/// Picks and claims a free worker id for `node` (see the module
/// documentation): the id and the lease that holds it.
pub async fn claim_any(
    registry: &dyn Registry,
    node: &str,
    limits: &guildhall_limits::Limits,
) -> Result<(u16, LeaseId), WorkerIdError> {
    let renew_ms = limits.lease_renew_interval_ms.max(1);
    let mut failures = 0;
    let listing = loop {
        match registry.list(WORKER_PREFIX).await {
            Ok(listing) => break listing,
            Err(error) => {
                failures += 1;
                if failures >= START_ATTEMPTS_MAX {
                    return Err(WorkerIdError::Unlisted {
                        reason: error.to_string(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(renew_ms)).await;
            }
        }
    };
    let id_of = |key: &str| {
        key.strip_prefix(WORKER_PREFIX)
            .and_then(|id| id.parse::<u16>().ok())
            .filter(|id| *id < WORKER_IDS)
    };
    // Its previous process's id: waited for as a given id is.
    if let Some(id) = listing
        .entries
        .iter()
        .filter(|(_, holder)| holder.as_slice() == node.as_bytes())
        .find_map(|(key, _)| id_of(key))
    {
        return Ok((id, claim(registry, node, id, limits).await?));
    }
    let held: std::collections::BTreeSet<u16> = listing
        .entries
        .keys()
        .filter_map(|key| id_of(key))
        .collect();
    let start = start_for(node);
    for step in 0..WORKER_IDS {
        let id = (start + step) % WORKER_IDS;
        if held.contains(&id) {
            continue;
        }
        match registry
            .claim(
                &worker_key(id),
                node.as_bytes().to_vec(),
                limits.lease_ttl_ms,
            )
            .await
        {
            Ok(Claim::Won(lease)) => return Ok((id, lease)),
            // Another node was faster: the next one.
            Ok(Claim::Held(_)) => {}
            Err(error) => {
                failures += 1;
                if failures >= START_ATTEMPTS_MAX {
                    return Err(WorkerIdError::Registry {
                        id,
                        reason: error.to_string(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(renew_ms)).await;
            }
        }
    }
    Err(WorkerIdError::Exhausted)
}

/// Where `node`'s search for a free id starts (FNV-1a of its name):
/// nodes starting at once mostly try different ids, not race for id 0.
fn start_for(node: &str) -> u16 {
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % u64::from(WORKER_IDS)) as u16
}

/// Claims `id` for `node` (see the module documentation): the lease that
/// holds it.
pub async fn claim(
    registry: &dyn Registry,
    node: &str,
    id: u16,
    limits: &guildhall_limits::Limits,
) -> Result<LeaseId, WorkerIdError> {
    let key = worker_key(id);
    let renew_ms = limits.lease_renew_interval_ms.max(1);
    // Our own previous process may hold it for up to one TTL.
    let own_waits_max = limits.lease_ttl_ms / renew_ms + 2;
    let (mut own_waits, mut failures) = (0, 0);
    loop {
        match registry
            .claim(&key, node.as_bytes().to_vec(), limits.lease_ttl_ms)
            .await
        {
            Ok(Claim::Won(lease)) => return Ok(lease),
            Ok(Claim::Held(holder)) if holder == node.as_bytes() && own_waits < own_waits_max => {
                own_waits += 1;
                if own_waits == 1 {
                    tracing::info!(
                        id,
                        "worker id held by this node's previous process: waiting for its lease to end"
                    );
                }
            }
            Ok(Claim::Held(holder)) => {
                return Err(WorkerIdError::Taken {
                    id,
                    holder: String::from_utf8_lossy(&holder).chars().take(64).collect(),
                });
            }
            Err(error) => {
                failures += 1;
                if failures >= START_ATTEMPTS_MAX {
                    return Err(WorkerIdError::Registry {
                        id,
                        reason: error.to_string(),
                    });
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(renew_ms)).await;
    }
}

/// Keeps `lease` (holding `id` for `node`) alive until `lost` is told the
/// id is gone to another node; see the module documentation.
pub fn keep(
    registry: Arc<dyn Registry>,
    node: String,
    id: u16,
    mut lease: LeaseId,
    limits: &guildhall_limits::Limits,
    lost: Arc<tokio::sync::Notify>,
    held: Arc<std::sync::atomic::AtomicU64>,
) -> tokio::task::JoinHandle<()> {
    let renew = Duration::from_millis(limits.lease_renew_interval_ms.max(1));
    let ttl_ms = limits.lease_ttl_ms;
    held.store(lease, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(async move {
        let key = worker_key(id);
        loop {
            tokio::time::sleep(renew).await;
            match registry.keep_alive(lease).await {
                Ok(()) => continue,
                // Unreachable: the lease may still live; try again.
                Err(RegistryError::Unavailable) => continue,
                Err(_) => {}
            }
            // The lease ended: the id is free again, or someone has it.
            match registry.claim(&key, node.as_bytes().to_vec(), ttl_ms).await {
                Ok(Claim::Won(new)) => {
                    lease = new;
                    held.store(lease, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(id, "worker id lease ended; claimed again");
                }
                Ok(Claim::Held(holder)) if holder == node.as_bytes() => {}
                Ok(Claim::Held(holder)) => {
                    tracing::error!(
                        id,
                        holder = %String::from_utf8_lossy(&holder),
                        "worker id taken by another node while this one was cut off: stopping"
                    );
                    lost.notify_one();
                    return;
                }
                Err(_) => {}
            }
        }
    })
}
