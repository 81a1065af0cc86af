//! Coalesced DOWN notices (Discord's `zen_monitor`, seed 004).
//!
//! When 17 % of sessions died at once, every process that monitored one of
//! them got its own `:DOWN` message: millions of messages, across nodes, into
//! mailboxes that were already behind. Here:
//! - **One remote watch per (peer, target)**, however many local watchers
//!   want it ([`DownInbox::watch`] tells the caller when the first local
//!   watcher appears, so it sends one remote watch).
//! - **Per-peer batches**: the node where targets die queues their notices per
//!   watching peer and sends at most `batch_max` per peer per interval
//!   ([`DownOutbox`]).
//! - **A dead node is one notice**: when membership says a peer is gone, the
//!   inbox enqueues one O(1) marker and expands it lazily while delivering
//!   ([`DownInbox::on_peer_down`]): no cross-node traffic per session.
//! - **Capped local delivery**: at most `deliver_per_s` notices per second,
//!   so the watchers are told promptly but never flooded.
//! - **Cancelled watches are skipped** at delivery time; reasons are
//!   truncated to `reason_bytes_max`.
//! - **Bounded memory**: queued notices are counted in bytes; past
//!   `queue_bytes_max` an incoming batch collapses into one "resync" marker
//!   for its peer (the caller re-checks its watches on that peer) instead of
//!   growing the queue.

use crate::token_bucket::TokenBucket;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A node of the cluster.
pub type NodeId = u32;
/// A remote process that can die (a session, a guild owner).
pub type TargetId = u64;
/// A local process that wants to know.
pub type WatcherId = u64;

/// One target's death, as sent between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DownNotice {
    /// Who died.
    pub target: TargetId,
    /// Why, truncated.
    pub reason: String,
}

/// Bytes a queued notice is charged (the struct plus its reason).
pub fn notice_bytes(notice: &DownNotice) -> usize {
    std::mem::size_of::<DownNotice>() + notice.reason.len()
}

fn truncate(reason: &str, max: usize) -> String {
    let mut end = reason.len().min(max);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end].to_owned()
}

/// Origin side: which peers watch which local targets, and their queues.
#[derive(Debug)]
pub struct DownOutbox {
    batch_max: usize,
    interval_ms: u64,
    reason_bytes_max: usize,
    watched_by: BTreeMap<TargetId, BTreeSet<NodeId>>,
    queues: BTreeMap<NodeId, VecDeque<DownNotice>>,
    next_flush_ms: u64,
}

impl DownOutbox {
    /// An outbox sending at most `batch_max` notices per peer every
    /// `interval_ms`.
    pub fn new(batch_max: usize, interval_ms: u64, reason_bytes_max: usize) -> Self {
        Self {
            batch_max: batch_max.max(1),
            interval_ms: interval_ms.max(1),
            reason_bytes_max,
            watched_by: BTreeMap::new(),
            queues: BTreeMap::new(),
            next_flush_ms: 0,
        }
    }

    /// `peer` watches `target` (idempotent).
    pub fn watch(&mut self, peer: NodeId, target: TargetId) {
        self.watched_by.entry(target).or_default().insert(peer);
    }

    /// `peer` no longer watches `target`.
    pub fn unwatch(&mut self, peer: NodeId, target: TargetId) {
        if let Some(peers) = self.watched_by.get_mut(&target) {
            peers.remove(&peer);
            if peers.is_empty() {
                self.watched_by.remove(&target);
            }
        }
    }

    /// A local target died: queue one notice per watching peer.
    pub fn target_down(&mut self, target: TargetId, reason: &str) {
        let Some(peers) = self.watched_by.remove(&target) else {
            return;
        };
        let reason = truncate(reason, self.reason_bytes_max);
        for peer in peers {
            self.queues.entry(peer).or_default().push_back(DownNotice {
                target,
                reason: reason.clone(),
            });
        }
    }

    /// A peer left: drop what was queued for it and its watches.
    pub fn peer_gone(&mut self, peer: NodeId) {
        self.queues.remove(&peer);
        self.watched_by.retain(|_, peers| {
            peers.remove(&peer);
            !peers.is_empty()
        });
    }

    /// The batches due at `now_ms`: at most one per peer, each at most
    /// `batch_max` notices. Call every interval.
    pub fn flush(&mut self, now_ms: u64) -> Vec<(NodeId, Vec<DownNotice>)> {
        if now_ms < self.next_flush_ms {
            return Vec::new();
        }
        self.next_flush_ms = now_ms + self.interval_ms;
        let mut batches = Vec::new();
        for (peer, queue) in &mut self.queues {
            let n = queue.len().min(self.batch_max);
            if n > 0 {
                batches.push((*peer, queue.drain(..n).collect()));
            }
        }
        self.queues.retain(|_, q| !q.is_empty());
        batches
    }

    /// Notices waiting to be sent.
    pub fn queued(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }
}

#[derive(Clone, Debug)]
enum Pending {
    Notice(DownNotice),
    /// Every target of `node` died; `after` is the expansion cursor: targets
    /// up to it (inclusive) were already delivered.
    NodeDown {
        node: NodeId,
        after: Option<TargetId>,
    },
}

/// What the receiving side must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InboxEffect {
    /// Tell `watcher` that `target` died.
    Deliver {
        /// Local watcher.
        watcher: WatcherId,
        /// Remote target.
        target: TargetId,
    },
    /// The queue was full when a batch from `node` arrived: re-check the
    /// watches on that node.
    Resync(NodeId),
}

/// Receiving side: local watchers of remote targets and the delivery queue.
#[derive(Debug)]
pub struct DownInbox {
    /// Local watchers per remote target.
    watchers: BTreeMap<TargetId, Vec<WatcherId>>,
    /// Remote targets per remote node (to expand a peer-down lazily).
    node_targets: BTreeMap<NodeId, BTreeSet<TargetId>>,
    target_node: BTreeMap<TargetId, NodeId>,
    pending: VecDeque<Pending>,
    pending_bytes: usize,
    pending_bytes_max_seen: usize,
    queue_bytes_max: usize,
    bucket: TokenBucket,
    bucket_burst: u32,
    resync_due: BTreeSet<NodeId>,
    /// Notices delivered so far.
    pub delivered_total: u64,
    /// Notices skipped because their watch was cancelled.
    pub skipped_total: u64,
    /// Batches collapsed into a resync because the queue was full.
    pub overflowed_total: u64,
}

const MARKER_BYTES: usize = std::mem::size_of::<Pending>();

impl DownInbox {
    /// An inbox delivering at most `deliver_per_s` notices per second with at
    /// most `queue_bytes_max` bytes queued.
    ///
    /// ```
    /// use guildhall_control::down::{DownInbox, InboxEffect};
    /// let mut inbox = DownInbox::new(0, 1_000, 1 << 20);
    /// assert!(inbox.watch(1, 7, 100)); // first local watcher: send a remote watch
    /// assert!(!inbox.watch(2, 7, 100)); // second: nothing crosses the network
    /// inbox.on_peer_down(7); // node 7 died: one marker, whatever it held
    /// let mut effects = Vec::new();
    /// inbox.deliver(0, &mut effects);
    /// assert_eq!(effects, [
    ///     InboxEffect::Deliver { watcher: 1, target: 100 },
    ///     InboxEffect::Deliver { watcher: 2, target: 100 },
    /// ]);
    /// ```
    pub fn new(now_ms: u64, deliver_per_s: u32, queue_bytes_max: usize) -> Self {
        // Burst of a hundredth of a second: delivery is smooth, not bursty
        // (callers deliver at least every 10 ms).
        let burst = (deliver_per_s / 100).max(1);
        Self {
            watchers: BTreeMap::new(),
            node_targets: BTreeMap::new(),
            target_node: BTreeMap::new(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            pending_bytes_max_seen: 0,
            queue_bytes_max,
            bucket: TokenBucket::new(now_ms, deliver_per_s, burst),
            bucket_burst: burst,
            resync_due: BTreeSet::new(),
            delivered_total: 0,
            skipped_total: 0,
            overflowed_total: 0,
        }
    }

    /// Local `watcher` watches `target` on `node`. Returns true when this is
    /// the first local watcher of `target`: the caller sends one remote watch.
    pub fn watch(&mut self, watcher: WatcherId, node: NodeId, target: TargetId) -> bool {
        let list = self.watchers.entry(target).or_default();
        let first = list.is_empty();
        if !list.contains(&watcher) {
            list.push(watcher);
        }
        self.node_targets.entry(node).or_default().insert(target);
        self.target_node.insert(target, node);
        first
    }

    /// Cancels a watch; a notice already queued for it is skipped. Returns
    /// true when no local watcher is left (the caller sends one remote
    /// unwatch).
    pub fn unwatch(&mut self, watcher: WatcherId, target: TargetId) -> bool {
        let Some(list) = self.watchers.get_mut(&target) else {
            return false;
        };
        list.retain(|w| *w != watcher);
        if list.is_empty() {
            self.forget(target);
            true
        } else {
            false
        }
    }

    fn forget(&mut self, target: TargetId) {
        self.watchers.remove(&target);
        if let Some(node) = self.target_node.remove(&target)
            && let Some(set) = self.node_targets.get_mut(&node)
        {
            set.remove(&target);
        }
    }

    fn push(&mut self, item: Pending, bytes: usize) {
        self.pending.push_back(item);
        self.pending_bytes += bytes;
        self.pending_bytes_max_seen = self.pending_bytes_max_seen.max(self.pending_bytes);
    }

    /// A batch arrived from `node`.
    pub fn on_batch(&mut self, node: NodeId, batch: Vec<DownNotice>) {
        let bytes: usize = batch.iter().map(notice_bytes).sum();
        if self.pending_bytes + bytes > self.queue_bytes_max {
            self.overflowed_total += 1;
            self.resync_due.insert(node);
            return;
        }
        for notice in batch {
            let b = notice_bytes(&notice);
            self.push(Pending::Notice(notice), b);
        }
    }

    /// Membership says `node` is gone: one O(1) marker.
    pub fn on_peer_down(&mut self, node: NodeId) {
        self.push(Pending::NodeDown { node, after: None }, MARKER_BYTES);
    }

    /// Delivers what the rate allows at `now_ms`.
    pub fn deliver(&mut self, now_ms: u64, effects: &mut Vec<InboxEffect>) {
        for node in std::mem::take(&mut self.resync_due) {
            effects.push(InboxEffect::Resync(node));
        }
        while let Some(front) = self.pending.front_mut() {
            let target = match front {
                Pending::Notice(notice) => notice.target,
                Pending::NodeDown { node, after } => {
                    let next = self.node_targets.get(node).and_then(|set| match after {
                        None => set.iter().next().copied(),
                        Some(a) => set.range(a.saturating_add(1)..).next().copied(),
                    });
                    match next {
                        Some(t) => {
                            *after = Some(t);
                            t
                        }
                        None => {
                            let node = *node;
                            self.node_targets.remove(&node);
                            self.pending.pop_front();
                            self.pending_bytes -= MARKER_BYTES;
                            continue;
                        }
                    }
                }
            };
            // A target with more watchers than the burst is charged the burst
            // (it still waits its turn), so it cannot block the queue forever.
            let watchers = self.watchers.get(&target).map_or(0, Vec::len) as u32;
            if watchers > 0
                && self
                    .bucket
                    .try_take(now_ms, watchers.min(self.bucket_burst))
                    .is_err()
            {
                // Out of delivery budget: undo the cursor step and stop.
                if let Some(Pending::NodeDown { node, after }) = self.pending.front_mut() {
                    *after = self
                        .node_targets
                        .get(node)
                        .and_then(|s| s.range(..target).next_back().copied());
                }
                return;
            }
            if let Some(Pending::Notice(n)) = self.pending.front() {
                let bytes = notice_bytes(n);
                self.pending.pop_front();
                self.pending_bytes -= bytes;
            }
            match self.watchers.get(&target).cloned() {
                Some(list) => {
                    for watcher in list {
                        self.delivered_total += 1;
                        effects.push(InboxEffect::Deliver { watcher, target });
                    }
                    self.forget(target);
                }
                None => self.skipped_total += 1,
            }
        }
    }

    /// Bytes queued now.
    pub fn queued_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Largest queue seen, in bytes.
    pub fn queued_bytes_max(&self) -> usize {
        self.pending_bytes_max_seen
    }

    /// Whether anything is left to deliver.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_batches_per_peer_and_truncates_reasons() {
        let mut outbox = DownOutbox::new(2, 100, 4);
        for target in 0..5 {
            outbox.watch(1, target);
            outbox.watch(2, target);
        }
        for target in 0..5 {
            outbox.target_down(target, "connection reset by peer");
        }
        let first = outbox.flush(0);
        assert_eq!(first.len(), 2);
        assert!(
            first
                .iter()
                .all(|(_, b)| b.len() == 2 && b[0].reason == "conn")
        );
        assert!(outbox.flush(50).is_empty(), "one batch per interval");
        assert_eq!(outbox.flush(100).len(), 2);
        assert_eq!(outbox.queued(), 2);
    }

    #[test]
    fn peer_down_is_one_marker_expanded_at_the_capped_rate() {
        let mut inbox = DownInbox::new(0, 1_000, 1 << 20);
        for target in 0..5_000u64 {
            inbox.watch(target, 7, target);
        }
        inbox.unwatch(3, 3); // cancelled: skipped
        inbox.on_peer_down(7);
        assert_eq!(inbox.queued_bytes(), MARKER_BYTES);
        let mut delivered = 0;
        for now_ms in (0..=6_000).step_by(10) {
            let mut fx = Vec::new();
            inbox.deliver(now_ms, &mut fx);
            delivered += fx.len();
            // Never more than rate × elapsed + burst.
            assert!(
                delivered as u64 <= 100 + now_ms,
                "{delivered} by {now_ms} ms"
            );
        }
        assert_eq!(delivered, 4_999);
        assert!(inbox.is_idle());
        assert_eq!(inbox.queued_bytes(), 0);
    }

    #[test]
    fn full_queue_collapses_a_batch_into_a_resync() {
        let mut inbox = DownInbox::new(0, 10, 200);
        let batch: Vec<_> = (0..10)
            .map(|t| DownNotice {
                target: t,
                reason: String::new(),
            })
            .collect();
        inbox.on_batch(3, batch);
        assert_eq!(inbox.overflowed_total, 1);
        let mut fx = Vec::new();
        inbox.deliver(0, &mut fx);
        assert_eq!(fx, [InboxEffect::Resync(3)]);
    }
}
