//! `sim down`: seed 004's flood of DOWN notices.
//!
//! `nodes` nodes each hold `sessions_per_node` sessions. Every session is
//! watched by `watchers_per_session` processes on other nodes (guild owners,
//! presence, voice). Two things happen:
//! 1. at 1 s, `churn_fraction` of one live node's sessions disconnect at once
//!    (a zone's clients drop): per-session DOWN notices must cross nodes;
//! 2. at `kill_at_s`, node `kill_node` dies; membership notices it
//!    `detect_ms` later and every other node learns it from the registry.
//!
//! Hardened: [`DownOutbox`] per node (one remote watch per target and peer,
//! per-peer batches of at most `batch_max` per `batch_interval_ms`) and
//! [`DownInbox`] per node (a dead peer is one marker expanded lazily, local
//! delivery capped at `deliver_rate` per second, reasons truncated).
//! Naive: one message per (watcher, target) with the full reason, delivered
//! at once into the watchers' mailboxes.

use crate::sim::{MS, Micros, Rng, S, Windows, round4};
use guildhall_control::down::{DownInbox, DownNotice, DownOutbox, InboxEffect};
use serde::Serialize;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Nodes.
    pub nodes: u32,
    /// Sessions per node.
    pub sessions_per_node: u32,
    /// The node that dies.
    pub kill_node: u32,
    /// When it dies.
    pub kill_at_s: u64,
    /// How long membership takes to notice.
    pub detect_ms: u64,
    /// Share of one live node's sessions that disconnect at 1 s.
    pub churn_fraction: f64,
    /// Remote watchers per session.
    pub watchers_per_session: u32,
    /// Most notices per peer per batch.
    pub batch_max: usize,
    /// Batch interval.
    pub batch_interval_ms: u64,
    /// Local deliveries per second per node.
    pub deliver_rate: u32,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            nodes: 10,
            sessions_per_node: 100_000,
            kill_node: 0,
            kill_at_s: 5,
            detect_ms: 1_000,
            churn_fraction: 0.2,
            watchers_per_session: 1,
            batch_max: guildhall_limits::DOWN_BATCH_MAX,
            batch_interval_ms: guildhall_limits::DOWN_BATCH_INTERVAL_MS,
            deliver_rate: guildhall_limits::DOWN_DELIVER_PER_S,
        }
    }
}

/// What `sim down` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "down".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Messages that crossed nodes (batches, or single notices when naive).
    pub cross_node_messages: u64,
    /// Of those, messages about a single session of the dead node.
    pub per_session_cross_node_messages: u64,
    /// Peer-down notices from membership (one per surviving node).
    pub peer_down_notices: u64,
    /// Largest batch sent between two nodes.
    pub max_batch: u64,
    /// Local deliveries (each watcher told once).
    pub delivered: u64,
    /// Watchers that should have been told.
    pub expected: u64,
    /// Highest local delivery rate of one node, per second, measured over
    /// 100 ms windows (so an instantaneous burst shows as the rate it is).
    pub max_delivery_per_s: u64,
    /// Most bytes of queued notices on one node.
    pub queue_bytes_max: u64,
    /// Seconds from the dead node's detection to the last delivery.
    pub drain_s: f64,
}

const NAIVE_REASON: &str = "noconnection: node guildhall-gateway@10.0.0.1 went down; session process exited, monitor fired";
const STEP: Micros = 10 * MS;

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let n = params.nodes.max(2);
    let spn = u64::from(params.sessions_per_node);
    let kill = params.kill_node % n;
    let churn = (kill + 1) % n;
    let churn_count = (spn as f64 * params.churn_fraction).round() as u64;
    // Watches: (watcher node, watcher id, target node, target id). Only the
    // sessions that die need watches; the rest would never fire.
    let mut watches: Vec<(u32, u64, u32, u64)> = Vec::new();
    let mut next_watcher = 0u64;
    for (node, count) in [(churn, churn_count), (kill, spn)] {
        for j in 0..count {
            let target = u64::from(node) * spn + j;
            for _ in 0..params.watchers_per_session {
                let mut w = rng.below(u64::from(n - 1)) as u32;
                if w >= node {
                    w += 1;
                }
                watches.push((w, next_watcher, node, target));
                next_watcher += 1;
            }
        }
    }
    let expected = watches.len() as u64;
    let detect_at = params.kill_at_s * S + params.detect_ms * MS;
    let mut deliveries: Vec<Windows> = (0..n).map(|_| Windows::new(100 * MS)).collect();
    let mut report = Report {
        scenario: "down",
        mode: if naive { "naive" } else { "hardened" },
        seed,
        cross_node_messages: 0,
        per_session_cross_node_messages: 0,
        peer_down_notices: u64::from(n - 1),
        max_batch: 0,
        delivered: 0,
        expected,
        max_delivery_per_s: 0,
        queue_bytes_max: 0,
        drain_s: 0.0,
    };
    let mut last_delivery: Micros = 0;

    if naive {
        // Every watch fires its own message, all in the same instant.
        let bytes = (std::mem::size_of::<DownNotice>() + NAIVE_REASON.len()) as u64;
        let mut per_node_burst = vec![[0u64; 2]; n as usize];
        for (w_node, _, t_node, _) in &watches {
            let phase = usize::from(*t_node == kill);
            per_node_burst[*w_node as usize][phase] += 1;
            report.cross_node_messages += 1;
            if *t_node == kill {
                report.per_session_cross_node_messages += 1;
            }
            let at = if *t_node == kill { detect_at } else { S };
            deliveries[*w_node as usize].add(at, 1);
            last_delivery = last_delivery.max(at);
        }
        report.max_batch = 1;
        report.delivered = expected;
        report.queue_bytes_max = per_node_burst
            .iter()
            .flat_map(|b| b.iter())
            .max()
            .copied()
            .unwrap_or(0)
            * bytes;
    } else {
        let mut outboxes: Vec<DownOutbox> = (0..n)
            .map(|_| {
                DownOutbox::new(
                    params.batch_max,
                    params.batch_interval_ms,
                    guildhall_limits::DOWN_REASON_BYTES_MAX,
                )
            })
            .collect();
        let mut inboxes: Vec<DownInbox> = (0..n)
            .map(|_| {
                DownInbox::new(
                    0,
                    params.deliver_rate,
                    guildhall_limits::DOWN_QUEUE_BYTES_MAX,
                )
            })
            .collect();
        for (w_node, watcher, t_node, target) in &watches {
            if inboxes[*w_node as usize].watch(*watcher, *t_node, *target) {
                outboxes[*t_node as usize].watch(*w_node, *target);
            }
        }
        let mut now: Micros = 0;
        let mut fx = Vec::new();
        let horizon = detect_at + 600 * S;
        let mut killed = false;
        while now <= horizon {
            if now == S {
                for j in 0..churn_count {
                    outboxes[churn as usize].target_down(u64::from(churn) * spn + j, NAIVE_REASON);
                }
            }
            if !killed && now >= detect_at {
                killed = true;
                for (i, inbox) in inboxes.iter_mut().enumerate() {
                    if i as u32 != kill {
                        inbox.on_peer_down(kill);
                        outboxes[i].peer_gone(kill);
                    }
                }
            }
            for (from, outbox) in outboxes.iter_mut().enumerate() {
                if from as u32 == kill && killed {
                    continue;
                }
                let queued = outbox.queued() as u64 * std::mem::size_of::<DownNotice>() as u64;
                report.queue_bytes_max = report.queue_bytes_max.max(queued);
                for (peer, batch) in outbox.flush(now / MS) {
                    report.cross_node_messages += 1;
                    report.max_batch = report.max_batch.max(batch.len() as u64);
                    inboxes[peer as usize].on_batch(from as u32, batch);
                }
            }
            let mut busy = false;
            for (i, inbox) in inboxes.iter_mut().enumerate() {
                fx.clear();
                inbox.deliver(now / MS, &mut fx);
                let delivered = fx
                    .iter()
                    .filter(|e| matches!(e, InboxEffect::Deliver { .. }))
                    .count() as u64;
                if delivered > 0 {
                    deliveries[i].add(now, delivered);
                    report.delivered += delivered;
                    last_delivery = now;
                }
                report.queue_bytes_max =
                    report.queue_bytes_max.max(inbox.queued_bytes_max() as u64);
                busy |= !inbox.is_idle();
            }
            if killed && !busy && outboxes.iter().all(|o| o.queued() == 0) {
                break;
            }
            now += STEP;
        }
    }
    report.max_delivery_per_s = 10 * deliveries.iter().map(Windows::max).max().unwrap_or(0);
    report.drain_s = round4(last_delivery.saturating_sub(detect_at) as f64 / S as f64);
    report
}
