//! The registry: keys bound to leases that expire unless kept alive.

use std::collections::BTreeMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// A lease.
pub type LeaseId = u64;

/// Entries an in-process registry holds. When hit: new keys are refused
/// ([`RegistryError::Full`]); existing keys can still be updated.
pub const LOCAL_REGISTRY_ENTRIES_MAX: usize = 16_384;

/// What can go wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The lease expired or was revoked: announce again.
    #[error("unknown lease")]
    UnknownLease,
    /// The registry holds its maximum of entries.
    #[error("registry full")]
    Full,
}

/// A registry of leased keys.
pub trait Registry: Send + Sync + std::fmt::Debug + 'static {
    /// Puts `value` under `key` bound to a new lease of `ttl_ms`, in one
    /// step: a half-written value cannot exist (seed 002).
    fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<LeaseId, RegistryError>;
    /// Extends a lease by its TTL.
    fn keep_alive(&self, lease: LeaseId, now_ms: u64) -> Result<(), RegistryError>;
    /// Ends a lease and removes its keys (graceful leave).
    fn revoke(&self, lease: LeaseId);
    /// The revision and every live entry under `prefix`.
    fn list(&self, prefix: &str, now_ms: u64) -> (u64, BTreeMap<String, Vec<u8>>);
    /// A receiver that changes whenever the registry does.
    fn subscribe(&self) -> watch::Receiver<u64>;
}

#[derive(Debug, Default)]
struct State {
    entries: BTreeMap<String, (Vec<u8>, Option<LeaseId>)>,
    leases: BTreeMap<LeaseId, (u64, u64)>, // ttl_ms, expires_ms
    next_lease: LeaseId,
    revision: u64,
}

/// The in-process registry.
#[derive(Debug)]
pub struct LocalRegistry {
    state: Mutex<State>,
    changes: watch::Sender<u64>,
}

impl Default for LocalRegistry {
    fn default() -> Self {
        Self {
            state: Mutex::new(State::default()),
            changes: watch::Sender::new(0),
        }
    }
}

impl LocalRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn bump(&self, state: &mut State) {
        state.revision += 1;
        self.changes.send_replace(state.revision);
    }

    fn expire(&self, state: &mut State, now_ms: u64) {
        let expired: Vec<LeaseId> = state
            .leases
            .iter()
            .filter(|(_, (_, expires))| *expires <= now_ms)
            .map(|(id, _)| *id)
            .collect();
        if expired.is_empty() {
            return;
        }
        for lease in &expired {
            state.leases.remove(lease);
        }
        state
            .entries
            .retain(|_, (_, lease)| lease.is_none_or(|l| !expired.contains(&l)));
        self.bump(state);
    }

    /// Writes `value` under `key` with no lease and no validation, as a
    /// faulty client would (seed 002's empty value). Fault injection only.
    pub fn put_raw(&self, key: &str, value: Vec<u8>) {
        let mut state = self.lock();
        state.entries.insert(key.to_owned(), (value, None));
        self.bump(&mut state);
    }

    /// Removes a key whatever its lease (fault injection and operators).
    pub fn delete(&self, key: &str) {
        let mut state = self.lock();
        if state.entries.remove(key).is_some() {
            self.bump(&mut state);
        }
    }
}

impl Registry for LocalRegistry {
    fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        ttl_ms: u64,
        now_ms: u64,
    ) -> Result<LeaseId, RegistryError> {
        let mut state = self.lock();
        self.expire(&mut state, now_ms);
        if !state.entries.contains_key(key) && state.entries.len() >= LOCAL_REGISTRY_ENTRIES_MAX {
            return Err(RegistryError::Full);
        }
        state.next_lease += 1;
        let lease = state.next_lease;
        state
            .leases
            .insert(lease, (ttl_ms, now_ms.saturating_add(ttl_ms)));
        state.entries.insert(key.to_owned(), (value, Some(lease)));
        self.bump(&mut state);
        Ok(lease)
    }

    fn keep_alive(&self, lease: LeaseId, now_ms: u64) -> Result<(), RegistryError> {
        let mut state = self.lock();
        self.expire(&mut state, now_ms);
        let (ttl, expires) = state
            .leases
            .get_mut(&lease)
            .ok_or(RegistryError::UnknownLease)?;
        *expires = now_ms.saturating_add(*ttl);
        Ok(())
    }

    fn revoke(&self, lease: LeaseId) {
        let mut state = self.lock();
        if state.leases.remove(&lease).is_some() {
            state.entries.retain(|_, (_, l)| *l != Some(lease));
            self.bump(&mut state);
        }
    }

    fn list(&self, prefix: &str, now_ms: u64) -> (u64, BTreeMap<String, Vec<u8>>) {
        let mut state = self.lock();
        self.expire(&mut state, now_ms);
        let entries = state
            .entries
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, (v, _))| (k.clone(), v.clone()))
            .collect();
        (state.revision, entries)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_expire_unless_kept_alive_and_revoke_is_immediate() {
        let registry = LocalRegistry::default();
        let a = registry
            .put_with_lease("/p/a", b"1".to_vec(), 100, 0)
            .unwrap();
        let b = registry
            .put_with_lease("/p/b", b"2".to_vec(), 100, 0)
            .unwrap();
        registry.keep_alive(a, 90).unwrap();
        let (_, live) = registry.list("/p/", 150);
        assert_eq!(
            live.keys().collect::<Vec<_>>(),
            ["/p/a"],
            "b expired, a was kept alive"
        );
        assert_eq!(
            registry.keep_alive(b, 150),
            Err(RegistryError::UnknownLease)
        );
        registry.revoke(a);
        assert!(registry.list("/p/", 151).1.is_empty());
    }

    #[test]
    fn changes_are_notified_and_prefixes_are_exact() {
        let registry = LocalRegistry::default();
        let mut changes = registry.subscribe();
        registry.put_raw("/p/x", vec![]);
        registry.put_raw("/q/y", vec![]);
        assert!(changes.has_changed().unwrap());
        assert_eq!(*changes.borrow_and_update(), 2);
        assert_eq!(registry.list("/p/", 0).1.len(), 1);
    }
}
