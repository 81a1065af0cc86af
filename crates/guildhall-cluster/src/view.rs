//! A validated view of the registry's instances.
//!
//! Every listing is validated entry by entry. A bad entry never takes a
//! key's last good value with it: the view keeps serving that value (across
//! watch events and full re-lists) until the key disappears (its lease
//! ended) or a valid value replaces it. Each distinct bad value is counted
//! once, so the rejected counter equals the number of bad writes, however
//! often the watcher re-reads them.

use guildhall_proto::cluster::{Announcement, Rejection};
use std::collections::BTreeMap;

/// The view.
#[derive(Debug, Default)]
pub struct RegistryView {
    last_good: BTreeMap<String, Announcement>,
    /// Hash of the last rejected value per key (to count each once).
    last_rejected: BTreeMap<String, u64>,
    rejected: BTreeMap<&'static str, u64>,
}

impl RegistryView {
    /// Applies a full listing; returns the rejections first seen in it.
    pub fn apply(&mut self, listing: &BTreeMap<String, Vec<u8>>) -> Vec<(String, Rejection)> {
        self.last_good.retain(|key, _| listing.contains_key(key));
        self.last_rejected
            .retain(|key, _| listing.contains_key(key));
        let mut fresh = Vec::new();
        for (key, raw) in listing {
            match Announcement::decode(key, raw) {
                Ok(announcement) => {
                    self.last_rejected.remove(key);
                    self.last_good.insert(key.clone(), announcement);
                }
                Err(reason) => {
                    let digest = xxhash_rust::xxh3::xxh3_64(raw);
                    if self.last_rejected.insert(key.clone(), digest) != Some(digest) {
                        *self.rejected.entry(reason.label()).or_insert(0) += 1;
                        fresh.push((key.clone(), reason));
                    }
                }
            }
        }
        fresh
    }

    /// The instances, by key.
    pub fn instances(&self) -> impl Iterator<Item = &Announcement> {
        self.last_good.values()
    }

    /// Rejections so far, by reason.
    pub fn rejected(&self) -> &BTreeMap<&'static str, u64> {
        &self.rejected
    }

    /// Rejections so far.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalRegistry, Registry};

    fn list(registry: &LocalRegistry) -> BTreeMap<String, Vec<u8>> {
        futures_util::FutureExt::now_or_never(registry.list(INSTANCE_PREFIX))
            .and_then(Result::ok)
            .unwrap_or_default()
            .entries
    }
    use guildhall_proto::cluster::{INSTANCE_PREFIX, Role, instance_key};

    fn announce(registry: &LocalRegistry, node: &str) -> Announcement {
        let a = Announcement {
            schema: 1,
            node: node.into(),
            roles: vec![Role::Guilds],
            addr: "127.0.0.1:9".into(),
            started_ms: 1,
            gateway_url: None,
            sessions: 0,
            draining: false,
            sfu: None,
        };
        registry.put_raw(&instance_key(node), a.encode().unwrap());
        a
    }

    /// Seed 002: corrupt values injected over good ones never change the
    /// routing view; the counter equals the injections; a re-list keeps the
    /// last good values.
    #[test]
    fn corrupt_values_keep_the_last_good_value() {
        let registry = LocalRegistry::default();
        let good_a = announce(&registry, "a");
        let good_b = announce(&registry, "b");
        let mut view = RegistryView::default();
        view.apply(&list(&registry));
        let expected: Vec<Announcement> = vec![good_a.clone(), good_b.clone()];
        let corruptions: Vec<Vec<u8>> = vec![
            vec![],
            b"{\"schema\":1,\"no".to_vec(),
            vec![0xff; 3],
            vec![b'x'; 5000],
            br#"{"schema":9}"#.to_vec(),
        ];
        let mut injected = 0;
        for (i, bad) in corruptions.iter().enumerate() {
            let key = if i % 2 == 0 {
                instance_key("a")
            } else {
                instance_key("b")
            };
            registry.put_raw(&key, bad.clone());
            injected += 1;
            for _ in 0..3 {
                // Watch events and re-lists see the same bad value again.
                view.apply(&list(&registry));
                assert_eq!(view.instances().cloned().collect::<Vec<_>>(), expected);
            }
        }
        assert_eq!(view.rejected_total(), injected);
        // A fresh watcher (a restart) has no last good value to keep: it
        // sees no instance under the corrupt keys, and never a bad one.
        let mut fresh = RegistryView::default();
        fresh.apply(&list(&registry));
        assert!(fresh.instances().all(|a| a == &good_a || a == &good_b));
        // A valid rewrite is adopted; a key whose lease ended disappears.
        announce(&registry, "a");
        registry.delete(&instance_key("b"));
        view.apply(&list(&registry));
        assert_eq!(view.instances().cloned().collect::<Vec<_>>(), vec![good_a]);
    }
}
