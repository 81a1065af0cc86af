//! The registry: keys bound to leases that expire unless kept alive.
//!
//! The trait is shaped by the real registry, etcd v3, so that both
//! implementations fit it honestly: every call is asynchronous and can fail
//! with [`RegistryError::Unavailable`] (the connection is down); a watch
//! starts after a revision a listing returned and can end at any time (a
//! compaction, a reconnect, a watcher too slow to keep up), after which the
//! watcher lists again and watches from the new revision. [`LocalRegistry`]
//! is the in-process implementation embedded mode runs on; it keeps no
//! history, so a watch from a revision that is not the current one ends at
//! once, as a compacted etcd watch does.

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// A lease.
pub type LeaseId = u64;

/// Entries an in-process registry holds. When hit: new keys are refused
/// ([`RegistryError::Full`]); existing keys can still be updated.
pub const LOCAL_REGISTRY_ENTRIES_MAX: usize = 16_384;

/// Watches an in-process registry serves at once. When hit: a new watch is
/// refused ([`RegistryError::Full`]) and its caller retries after a pause.
pub const LOCAL_REGISTRY_WATCHERS_MAX: usize = 1_024;

/// What can go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The lease expired or was revoked: announce again.
    #[error("unknown lease")]
    UnknownLease,
    /// The registry holds its maximum of entries (or watches).
    #[error("registry full")]
    Full,
    /// The registry cannot be reached (or did not answer in time): retry
    /// with backoff, keep the last known view meanwhile.
    #[error("registry unavailable")]
    Unavailable,
}

/// Every entry under a prefix at one revision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// The registry's revision the listing was read at; a watch from it
    /// misses nothing.
    pub revision: u64,
    /// Key → raw value (validated by the reader, never here).
    pub entries: BTreeMap<String, Vec<u8>>,
}

/// A change under a watched prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// A key was written (any value: corrupt ones included).
    Put {
        /// The key.
        key: String,
        /// Its new raw value.
        value: Vec<u8>,
    },
    /// A key was deleted or its lease ended.
    Delete {
        /// The key.
        key: String,
    },
}

/// A stream of changes. `None` from [`Watch::next`] means the watch ended
/// (compaction, reconnect, the watcher fell behind): list again and watch
/// from the new listing's revision.
pub struct Watch {
    events: BoxStream<'static, WatchEvent>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

impl Watch {
    /// A watch over a stream of events (for implementations).
    pub fn new(events: BoxStream<'static, WatchEvent>) -> Self {
        Self { events }
    }

    /// The next change; `None` once the watch has ended.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        self.events.next().await
    }
}

/// What [`Registry::claim`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The key was free and is now the claimant's, under this new lease.
    Won(LeaseId),
    /// Another value holds the key (its holder's): nothing was written.
    Held(Vec<u8>),
}

/// A registry of leased keys.
#[async_trait::async_trait]
pub trait Registry: Send + Sync + std::fmt::Debug + 'static {
    /// Puts `value` under `key` bound to a new lease of `ttl_ms` only if no
    /// live entry holds `key`: one compare-and-put, so of two claimants of
    /// one key exactly one wins (a snowflake worker id, which two processes
    /// must never share).
    async fn claim(&self, key: &str, value: Vec<u8>, ttl_ms: u64) -> Result<Claim, RegistryError>;
    /// Puts `value` under `key` bound to a new lease of `ttl_ms`, in one
    /// step: a half-written value cannot exist (seed 002).
    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<LeaseId, RegistryError>;
    /// Replaces the value under `key` with `value`, bound to `lease`, an
    /// existing lease (a refreshed announcement: its key lives and dies with
    /// the lease the node already keeps alive, so no second lease can
    /// outlive the node). One atomic put; [`RegistryError::UnknownLease`]
    /// when the lease has ended (announce again with a new one).
    async fn put_under_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<(), RegistryError>;
    /// Extends a lease by its TTL.
    async fn keep_alive(&self, lease: LeaseId) -> Result<(), RegistryError>;
    /// Ends a lease and removes its keys (graceful leave).
    async fn revoke(&self, lease: LeaseId) -> Result<(), RegistryError>;
    /// Every live entry under `prefix`, with the revision it was read at.
    async fn list(&self, prefix: &str) -> Result<Listing, RegistryError>;
    /// Changes under `prefix` after `after_revision` (a listing's), at most
    /// `capacity_events` of them buffered: a watcher that falls further
    /// behind has its watch ended and lists again.
    async fn watch(
        &self,
        prefix: &str,
        after_revision: u64,
        capacity_events: usize,
    ) -> Result<Watch, RegistryError>;
}

type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

struct Watcher {
    prefix: String,
    events: mpsc::Sender<WatchEvent>,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<String, (Vec<u8>, Option<LeaseId>)>,
    leases: BTreeMap<LeaseId, (u64, u64)>, // ttl_ms, expires_ms
    next_lease: LeaseId,
    revision: u64,
    watchers: Vec<Watcher>,
}

impl State {
    /// One change: the revision moves and every watcher of the key hears
    /// of it. A watcher whose buffer is full (or who is gone) is dropped:
    /// its stream ends after what it holds, and it lists again.
    fn changed(&mut self, event: WatchEvent) {
        self.revision += 1;
        let key = match &event {
            WatchEvent::Put { key, .. } | WatchEvent::Delete { key } => key.clone(),
        };
        self.watchers
            .retain(|w| !key.starts_with(&w.prefix) || w.events.try_send(event.clone()).is_ok());
    }

    /// A new lease of `ttl_ms` from `now_ms`, and `value` under `key`
    /// bound to it (the caller checked the entry bound).
    fn put_leased(&mut self, key: &str, value: Vec<u8>, ttl_ms: u64, now_ms: u64) -> LeaseId {
        self.next_lease += 1;
        let lease = self.next_lease;
        self.leases
            .insert(lease, (ttl_ms, now_ms.saturating_add(ttl_ms)));
        self.entries
            .insert(key.to_owned(), (value.clone(), Some(lease)));
        self.changed(WatchEvent::Put {
            key: key.to_owned(),
            value,
        });
        lease
    }

    fn expire(&mut self, now_ms: u64) {
        let expired: Vec<LeaseId> = self
            .leases
            .iter()
            .filter(|(_, (_, expires))| *expires <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        for lease in expired {
            self.end_lease(lease);
        }
    }

    fn end_lease(&mut self, lease: LeaseId) {
        if self.leases.remove(&lease).is_none() {
            return;
        }
        let keys: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, (_, l))| *l == Some(lease))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.entries.remove(&key);
            self.changed(WatchEvent::Delete { key });
        }
    }

    fn next_expiry_ms(&self) -> Option<u64> {
        self.leases.values().map(|(_, expires)| *expires).min()
    }
}

struct Inner {
    state: Mutex<State>,
    clock: Clock,
}

/// The in-process registry. Leases expire on its clock: whenever it is
/// used, and at the expiry time itself while anyone watches.
#[derive(Clone)]
pub struct LocalRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRegistry").finish_non_exhaustive()
    }
}

impl Default for LocalRegistry {
    fn default() -> Self {
        let epoch = std::time::Instant::now();
        Self::with_clock(move || u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

impl LocalRegistry {
    /// A registry whose leases run on `clock_ms` (tests pass a manual one).
    pub fn with_clock(clock_ms: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State::default()),
                clock: Arc::new(clock_ms),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.inner)
    }

    /// The state with every lease due by now ended.
    fn current(&self) -> std::sync::MutexGuard<'_, State> {
        let now = (self.inner.clock)();
        let mut state = self.lock();
        state.expire(now);
        state
    }

    /// Writes `value` under `key` with no lease and no validation, as a
    /// faulty client would (seed 002's empty value). Fault injection only.
    pub fn put_raw(&self, key: &str, value: Vec<u8>) {
        let mut state = self.current();
        state.entries.insert(key.to_owned(), (value.clone(), None));
        state.changed(WatchEvent::Put {
            key: key.to_owned(),
            value,
        });
    }

    /// Removes a key whatever its lease (fault injection and operators).
    pub fn delete(&self, key: &str) {
        let mut state = self.current();
        if state.entries.remove(key).is_some() {
            state.changed(WatchEvent::Delete {
                key: key.to_owned(),
            });
        }
    }
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, State> {
    // Plain data, consistent between statements: a panic elsewhere cannot
    // leave it half-updated.
    inner
        .state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[async_trait::async_trait]
impl Registry for LocalRegistry {
    async fn claim(&self, key: &str, value: Vec<u8>, ttl_ms: u64) -> Result<Claim, RegistryError> {
        let now = (self.inner.clock)();
        let mut state = self.current();
        if let Some((held, _)) = state.entries.get(key) {
            return Ok(Claim::Held(held.clone()));
        }
        if state.entries.len() >= LOCAL_REGISTRY_ENTRIES_MAX {
            return Err(RegistryError::Full);
        }
        Ok(Claim::Won(state.put_leased(key, value, ttl_ms, now)))
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: u64,
    ) -> Result<LeaseId, RegistryError> {
        let now = (self.inner.clock)();
        let mut state = self.current();
        if !state.entries.contains_key(key) && state.entries.len() >= LOCAL_REGISTRY_ENTRIES_MAX {
            return Err(RegistryError::Full);
        }
        Ok(state.put_leased(key, value, ttl_ms, now))
    }

    async fn put_under_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        let mut state = self.current();
        if !state.leases.contains_key(&lease) {
            return Err(RegistryError::UnknownLease);
        }
        if !state.entries.contains_key(key) && state.entries.len() >= LOCAL_REGISTRY_ENTRIES_MAX {
            return Err(RegistryError::Full);
        }
        state
            .entries
            .insert(key.to_owned(), (value.clone(), Some(lease)));
        state.changed(WatchEvent::Put {
            key: key.to_owned(),
            value,
        });
        Ok(())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<(), RegistryError> {
        let now = (self.inner.clock)();
        let mut state = self.current();
        let (ttl, expires) = state
            .leases
            .get_mut(&lease)
            .ok_or(RegistryError::UnknownLease)?;
        *expires = now.saturating_add(*ttl);
        Ok(())
    }

    async fn revoke(&self, lease: LeaseId) -> Result<(), RegistryError> {
        self.current().end_lease(lease);
        Ok(())
    }

    async fn list(&self, prefix: &str) -> Result<Listing, RegistryError> {
        let state = self.current();
        let entries = state
            .entries
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        Ok(Listing {
            revision: state.revision,
            entries,
        })
    }

    async fn watch(
        &self,
        prefix: &str,
        after_revision: u64,
        capacity_events: usize,
    ) -> Result<Watch, RegistryError> {
        let (sender, receiver) = mpsc::channel(capacity_events.max(1));
        {
            let mut state = self.current();
            if state.watchers.len() >= LOCAL_REGISTRY_WATCHERS_MAX {
                return Err(RegistryError::Full);
            }
            // No history is kept: a watch from an older revision would miss
            // changes, so it ends at once (the sender is dropped) and the
            // watcher lists again, as after an etcd compaction.
            if state.revision == after_revision {
                state.watchers.push(Watcher {
                    prefix: prefix.to_owned(),
                    events: sender,
                });
            }
        }
        // The stream also ends leases when they fall due, so a watcher hears
        // of a dead node's expiry even when nobody else touches the registry.
        let inner = self.inner.clone();
        let events =
            futures_util::stream::unfold((receiver, inner), |(mut receiver, inner)| async move {
                loop {
                    let now = (inner.clock)();
                    let due_in_ms = lock(&inner)
                        .next_expiry_ms()
                        .map(|expires| expires.saturating_sub(now));
                    let expiry = async {
                        match due_in_ms {
                            Some(ms) => tokio::time::sleep(Duration::from_millis(ms.max(1))).await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        event = receiver.recv() => return event.map(|e| (e, (receiver, inner))),
                        () = expiry => {
                            let now = (inner.clock)();
                            lock(&inner).expire(now);
                        }
                    }
                }
            });
        Ok(Watch::new(events.boxed()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn manual() -> (LocalRegistry, Arc<AtomicU64>) {
        let now = Arc::new(AtomicU64::new(0));
        let clock = now.clone();
        (
            LocalRegistry::with_clock(move || clock.load(Ordering::Relaxed)),
            now,
        )
    }

    #[tokio::test]
    async fn leases_expire_unless_kept_alive_and_revoke_is_immediate() {
        let (registry, now) = manual();
        let a = registry
            .put_with_lease("/p/a", b"1".to_vec(), 100)
            .await
            .unwrap();
        let b = registry
            .put_with_lease("/p/b", b"2".to_vec(), 100)
            .await
            .unwrap();
        now.store(90, Ordering::Relaxed);
        registry.keep_alive(a).await.unwrap();
        now.store(150, Ordering::Relaxed);
        let live = registry.list("/p/").await.unwrap().entries;
        assert_eq!(
            live.keys().collect::<Vec<_>>(),
            ["/p/a"],
            "b expired, a was kept alive"
        );
        assert_eq!(
            registry.keep_alive(b).await,
            Err(RegistryError::UnknownLease)
        );
        registry.revoke(a).await.unwrap();
        assert!(registry.list("/p/").await.unwrap().entries.is_empty());
    }

    #[tokio::test]
    async fn a_watch_sees_changes_under_its_prefix_only() {
        let (registry, _) = manual();
        let listing = registry.list("/p/").await.unwrap();
        let mut watch = registry.watch("/p/", listing.revision, 8).await.unwrap();
        registry.put_raw("/q/y", vec![]);
        registry.put_raw("/p/x", vec![1]);
        registry.delete("/p/x");
        assert_eq!(
            watch.next().await,
            Some(WatchEvent::Put {
                key: "/p/x".into(),
                value: vec![1]
            })
        );
        assert_eq!(
            watch.next().await,
            Some(WatchEvent::Delete { key: "/p/x".into() })
        );
    }

    #[tokio::test]
    async fn a_watch_from_an_old_revision_or_too_slow_ends() {
        let (registry, _) = manual();
        let listing = registry.list("/p/").await.unwrap();
        registry.put_raw("/p/a", vec![]);
        let mut stale = registry.watch("/p/", listing.revision, 8).await.unwrap();
        assert_eq!(stale.next().await, None, "changes were missed: list again");

        let listing = registry.list("/p/").await.unwrap();
        let mut slow = registry.watch("/p/", listing.revision, 2).await.unwrap();
        for i in 0..5u8 {
            registry.put_raw("/p/a", vec![i]);
        }
        assert!(slow.next().await.is_some());
        assert!(slow.next().await.is_some());
        assert_eq!(slow.next().await, None, "fell behind: list again");
    }

    #[tokio::test]
    async fn a_watcher_hears_of_an_expiry_nobody_else_causes() {
        let registry = LocalRegistry::default();
        registry.put_with_lease("/p/a", vec![], 30).await.unwrap();
        let listing = registry.list("/p/").await.unwrap();
        let mut watch = registry.watch("/p/", listing.revision, 8).await.unwrap();
        assert_eq!(
            watch.next().await,
            Some(WatchEvent::Delete { key: "/p/a".into() })
        );
    }
}
