//! `sim drain`: seed 004's resize that the handoff could not fit.
//!
//! A node holding `sessions` gets SIGTERM at t = 0 and SIGKILL at `grace_s`.
//! Each session must be told op 7 RECONNECT, reconnect (20–200 ms), and
//! RESUME on another node, which fetches the session's replay buffer from the
//! draining node (so a resume completes only while that node is alive).
//! Receivers accept at most `resume_cap_per_s` resumes in total; above that
//! they refuse the upgrade with 503 + `Retry-After` (never accept-then-close).
//! A session that has not resumed when the node dies must re-identify.
//!
//! Hardened: the drain planner's paced, jittered schedule, and admission at
//! the receivers. Naive: no drain plan, which is what a server without one
//! does under Kubernetes: it keeps serving until SIGKILL at the end of the
//! grace period, its sessions die with their replay buffers, and every client
//! reconnects at once and must re-identify (seed 004's abrupt shutdown).

use crate::sim::{MS, Micros, Queue, Rng, S, Windows, percentile, round4};
use guildhall_control::drain::{DrainInput, plan};
use guildhall_control::token_bucket::TokenBucket;
use serde::Serialize;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Sessions on the draining node.
    pub sessions: u64,
    /// SIGTERM → SIGKILL.
    pub grace_s: u64,
    /// Kept free at the end.
    pub margin_s: u64,
    /// Resumes per second the receivers accept in total.
    pub resume_cap_per_s: u64,
    /// Events per second each session receives (for sequence gaps).
    pub events_per_s: f64,
    /// Events a session's replay buffer holds.
    pub replay_events_max: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            sessions: 50_000,
            grace_s: 30,
            margin_s: 5,
            resume_cap_per_s: 5_000,
            events_per_s: 1.0,
            replay_events_max: 1_000,
        }
    }
}

/// What `sim drain` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "drain".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Sessions drained.
    pub sessions: u64,
    /// The planner's verdict (null when there is no planner).
    pub fits: Option<bool>,
    /// When the last RECONNECT was sent, in seconds after SIGTERM (null:
    /// none was sent).
    pub last_reconnect_s: Option<f64>,
    /// Sessions that resumed (no re-identify, no missed sequence), over all.
    pub resumed_fraction: f64,
    /// Sessions that had to re-identify.
    pub reidentified: u64,
    /// Sessions that resumed with a gap larger than the replay buffer.
    pub missed_sequence: u64,
    /// Most resume attempts reaching the receivers in one second.
    pub receiver_attempts_max_per_s: u64,
    /// Most resumes (or, naive, identifies) the receivers processed in one
    /// second.
    pub receiver_rate_max_per_s: u64,
    /// Resume attempts in total (retries included).
    pub attempts_total: u64,
    /// p99 of RECONNECT → RESUMED, in milliseconds (null: nobody resumed).
    pub resume_latency_p99_ms: Option<u64>,
}

enum Ev {
    Reconnect(u32),
    Arrive(u32),
    Done(u32),
}

const RESUME_WORK: Micros = 2 * MS;

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let n = params.sessions as usize;
    let grace = params.grace_s * S;
    let cap = params.resume_cap_per_s.max(1);
    let mut q: Queue<Ev> = Queue::default();
    let mut sent_at = vec![0 as Micros; n];
    let mut resumed = vec![false; n];
    let mut last_send: Micros = 0;
    if naive {
        // Nothing is sent; at SIGKILL every client notices the dead socket
        // 20–200 ms later and reconnects: RESUME fails (the buffer died with
        // the node), so each one re-identifies.
        let mut arrivals = Windows::new(S);
        for _ in 0..n {
            arrivals.add(grace + 20 * MS + rng.below(180 * MS), 1);
        }
        return Report {
            scenario: "drain",
            mode: "naive",
            seed,
            sessions: params.sessions,
            fits: None,
            last_reconnect_s: None,
            resumed_fraction: 0.0,
            reidentified: params.sessions,
            missed_sequence: 0,
            receiver_attempts_max_per_s: arrivals.max(),
            receiver_rate_max_per_s: arrivals.max(),
            attempts_total: params.sessions,
            resume_latency_p99_ms: None,
        };
    }
    let p = plan(DrainInput {
        sessions: params.sessions,
        grace_ms: params.grace_s * 1000,
        margin_ms: params.margin_s * 1000,
        resume_cap_per_s: cap,
        utilization_permille: guildhall_limits::DRAIN_RECEIVER_UTILIZATION_PERMILLE,
        batch_interval_ms: guildhall_limits::DRAIN_BATCH_INTERVAL_MS,
    });
    let fits = Some(p.fits);
    for i in 0..n {
        let at = p.send_at_ms(i as u64, rng.unit()) * MS;
        last_send = last_send.max(at);
        q.push(at, Ev::Reconnect(i as u32));
    }
    let mut bucket = TokenBucket::new(0, cap as u32, (cap / 10).max(1) as u32);
    let (mut attempts, mut missed) = (0u64, 0u64);
    let mut arrivals = Windows::new(S);
    let mut processed = Windows::new(S);
    let mut latency_ms = Vec::with_capacity(n);
    while let Some((now, ev)) = q.pop_until(grace) {
        match ev {
            Ev::Reconnect(i) => {
                sent_at[i as usize] = now;
                q.push(now + 20 * MS + rng.below(180 * MS), Ev::Arrive(i));
            }
            Ev::Arrive(i) => {
                let s = i as usize;
                if resumed[s] {
                    continue;
                }
                attempts += 1;
                arrivals.add(now, 1);
                match bucket.try_take(now / MS, 1) {
                    Ok(()) => {
                        processed.add(now, 1);
                        q.push(now + RESUME_WORK, Ev::Done(i));
                    }
                    Err(limited) => {
                        // 503 + Retry-After, spread over one more second so
                        // the refused do not return as one spike.
                        let wait = limited.retry_after_ms.min(60_000) * MS + rng.below(S);
                        q.push(now + wait, Ev::Arrive(i));
                    }
                }
            }
            Ev::Done(i) => {
                let s = i as usize;
                if resumed[s] {
                    continue;
                }
                resumed[s] = true;
                let gap = now - sent_at[s];
                if (gap as f64 / S as f64) * params.events_per_s > params.replay_events_max as f64 {
                    missed += 1;
                }
                latency_ms.push(gap / MS);
            }
        }
    }
    let resumed_ok = resumed.iter().filter(|r| **r).count() as u64 - missed;
    Report {
        scenario: "drain",
        mode: "hardened",
        seed,
        sessions: params.sessions,
        fits,
        last_reconnect_s: Some(round4(last_send as f64 / S as f64)),
        resumed_fraction: round4(resumed_ok as f64 / params.sessions.max(1) as f64),
        reidentified: params.sessions - resumed.iter().filter(|r| **r).count() as u64,
        missed_sequence: missed,
        receiver_attempts_max_per_s: arrivals.max(),
        receiver_rate_max_per_s: processed.max(),
        attempts_total: attempts,
        resume_latency_p99_ms: (!latency_ms.is_empty()).then(|| percentile(&mut latency_ms, 99.0)),
    }
}
