//! `sim herd`: seed 001's reconnect herd.
//!
//! `sessions` are spread over `nodes` gateway nodes. At 5 s the identify
//! dependency (the users service) fails for `outage_s` and every session is
//! disconnected; clients reconnect 0–1 s later to a random node (libraries
//! barely jitter). A session is READY once its node admitted the upgrade and
//! the dependency answered IDENTIFY (`users_capacity_rps` for the whole
//! cluster, 5 ms each). Memory per node is modelled from what each state
//! holds: a READY session 16 KiB, a handshake in IDENTIFY 64 KiB, an upgrade
//! held in the admission queue 4 KiB, plus the dispatches buffered for a
//! session that is not READY yet (10 events/s of 1 KiB) where buffering is
//! allowed. A node above `memory_budget_mib` is OOM-killed: its sessions
//! reconnect elsewhere and it restarts empty 20 s later.
//!
//! Hardened: each node decides upgrades with the gateway's own admission
//! type (`guildhall_control::admission::HandshakeAdmission`, with the
//! gateway's default hold, `Retry-After` bounds and session cap) at
//! `identify_rate_per_node`: up to `handshake_hold_ms_max` worth is held in
//! reserved slots (never refuse what can be admitted soon), the rest are
//! refused before the 101 with 503 and a whole-second `Retry-After` spread
//! over the node's current pressure, which clients honour; a breaker
//! refuses upgrades while the dependency is down; identify carries a 5 s
//! deadline; nothing is buffered before READY (READY and GUILD_CREATE carry
//! the state).
//! Naive: every upgrade is accepted at once, identify waits on the stalled
//! dependency for up to 30 s (then the client is closed and reconnects in
//! 0.1–0.5 s, as libraries do after a close), events are buffered for
//! sessions that are not READY without bound, and the dependency works
//! through calls whose clients have already gone.

use crate::sim::{MS, Micros, Queue, Rng, S, Windows, percentile, round4};
use guildhall_control::admission::{Decision, HandshakeAdmission, HandshakeBounds};
use serde::Serialize;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Sessions.
    pub sessions: u64,
    /// Gateway nodes.
    pub nodes: u32,
    /// Upgrades admitted per node per second.
    pub identify_rate_per_node: u64,
    /// How long the dependency is down.
    pub outage_s: u64,
    /// IDENTIFY calls per second the dependency serves, cluster-wide (0:
    /// 1.25 × nodes × identify rate, i.e. admission derived from capacity).
    pub users_capacity_rps: u64,
    /// Memory per node before the OOM killer acts.
    pub memory_budget_mib: u64,
    /// How long the run lasts.
    pub duration_s: u64,
}

impl Default for Params {
    fn default() -> Self {
        Self {
            sessions: 1_000_000,
            nodes: 100,
            identify_rate_per_node: 2_000,
            outage_s: 10,
            users_capacity_rps: 0,
            memory_budget_mib: 1_024,
            duration_s: 120,
        }
    }
}

/// What `sim herd` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "herd".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Sessions.
    pub sessions: u64,
    /// Upgrade attempts, refused ones included.
    pub attempts_total: u64,
    /// Peak attempts in one second over the mean per second, from the
    /// disconnect to the last READY.
    pub arrivals_peak_over_mean: f64,
    /// The same after the first second: the first wave is the clients' own
    /// reaction to the disconnect; what follows is what the server shaped.
    pub retry_arrivals_peak_over_mean: f64,
    /// Most upgrades one node admitted in one second.
    pub admitted_per_s_max_per_node: u64,
    /// p99 of disconnect → READY, in seconds (null: more than 1 % never
    /// became READY within the run).
    pub ready_p99_s: Option<f64>,
    /// Share of sessions READY at the end.
    pub ready_fraction: f64,
    /// The bound the acceptance criterion sets: outage + 1.2 × sessions ÷
    /// (nodes × rate), in seconds.
    pub ready_bound_s: f64,
    /// Largest modelled memory of one node.
    pub memory_peak_bytes_per_node: u64,
    /// Nodes OOM-killed at least once.
    pub oom_nodes: u32,
    /// OOM kills in total.
    pub oom_kills: u32,
    /// IDENTIFY calls the dependency served for clients that had gone.
    pub wasted_dependency_calls: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    /// Disconnected, will attempt.
    Away,
    /// Upgrade held in the admission queue.
    Held,
    /// IDENTIFY in flight since `since`.
    Identifying {
        since: Micros,
    },
}

#[derive(Clone, Copy)]
struct Session {
    node: u32,
    state: State,
    epoch: u32,
    down_at: Micros,
}

enum Ev {
    Tick,
    Attempt { s: u32, epoch: u32 },
    Admit { s: u32, epoch: u32 },
    IdentifyDone { s: u32, epoch: u32 },
    IdentifyTimeout { s: u32, epoch: u32 },
    Restart { node: u32 },
}

#[derive(Clone, Default)]
struct Node {
    ready: u64,
    held: u64,
    identifying: u64,
    /// Σ start times of sessions identifying (for buffered bytes).
    identifying_since_sum: u128,
    down_until: Micros,
    oomed: bool,
    peak: u64,
}

const KIB: u64 = 1024;
const READY_BYTES: u64 = 16 * KIB;
const HANDSHAKE_BYTES: u64 = 64 * KIB;
const HELD_BYTES: u64 = 4 * KIB;
const BUFFER_BYTES_PER_S: u64 = 10 * KIB;
const OUTAGE_AT: Micros = 5 * S;
const IDENTIFY_WORK: Micros = 5 * MS;
const NAIVE_IDENTIFY_TIMEOUT: Micros = 30 * S;
const HARDENED_IDENTIFY_DEADLINE: Micros = 5 * S;
const RESTART_AFTER: Micros = 20 * S;

/// The gateway's admission at `rate` upgrades per second, with the
/// gateway's default bounds.
fn admission(rate: u64) -> HandshakeAdmission {
    HandshakeAdmission::new(HandshakeBounds {
        rate_per_s: u32::try_from(rate).unwrap_or(u32::MAX),
        hold_ms_max: guildhall_limits::HANDSHAKE_HOLD_MS_MAX,
        sessions_max: guildhall_limits::SESSIONS_PER_NODE_MAX,
        sessions_full_retry_after_s: guildhall_limits::SESSIONS_FULL_RETRY_AFTER_S,
        retry_after_s_max: guildhall_limits::HANDSHAKE_RETRY_AFTER_S_MAX,
    })
}

impl Node {
    /// Sessions as the gateway counts them for its cap: those past READY.
    fn sessions(&self) -> usize {
        usize::try_from(self.ready).unwrap_or(usize::MAX)
    }

    fn memory(&self, now: Micros, naive: bool) -> u64 {
        let base =
            self.ready * READY_BYTES + self.held * HELD_BYTES + self.identifying * HANDSHAKE_BYTES;
        if !naive {
            return base;
        }
        let age_us =
            (self.identifying as u128 * now as u128).saturating_sub(self.identifying_since_sum);
        base + (age_us * BUFFER_BYTES_PER_S as u128 / S as u128) as u64
    }
}

/// The identify dependency: a FIFO at `rps` that stalls during `outage`.
struct Dependency {
    outage: (Micros, Micros),
    rps: u64,
    naive: bool,
    /// When the FIFO is next free.
    free_at: Micros,
    /// Calls served for clients that had already gone.
    wasted: u64,
}

impl Dependency {
    /// An admitted upgrade starts IDENTIFY.
    fn admit(
        &mut self,
        now: Micros,
        s: u32,
        epoch: u32,
        sessions: &mut [Session],
        nodes: &mut [Node],
        q: &mut Queue<Ev>,
    ) {
        let sess = sessions[s as usize];
        if sess.epoch != epoch {
            return;
        }
        let node = &mut nodes[sess.node as usize];
        if sess.state == State::Held {
            node.held -= 1;
        }
        node.identifying += 1;
        node.identifying_since_sum += u128::from(now);
        sessions[s as usize].state = State::Identifying { since: now };
        // Calls made during the outage queue up and are served when it ends.
        let (outage_at, outage_end) = self.outage;
        let start = if now >= outage_at && now < outage_end {
            self.free_at.max(outage_end)
        } else {
            self.free_at.max(now)
        };
        let cost = S / self.rps.max(1);
        self.free_at = start + cost;
        let done = self.free_at + IDENTIFY_WORK;
        let limit = if self.naive {
            NAIVE_IDENTIFY_TIMEOUT
        } else {
            HARDENED_IDENTIFY_DEADLINE
        };
        if done <= now + limit {
            q.push(done, Ev::IdentifyDone { s, epoch });
        } else {
            if self.naive {
                self.wasted += 1; // served later for a client that has left
            } else {
                // The deadline travels with the call: the dependency drops it
                // unstarted, costing nothing.
                self.free_at -= cost;
            }
            q.push(now + limit, Ev::IdentifyTimeout { s, epoch });
        }
    }
}

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let n_nodes = params.nodes.max(1);
    let rate = params.identify_rate_per_node.max(1);
    let users_rps = if params.users_capacity_rps == 0 {
        u64::from(n_nodes) * rate * 5 / 4
    } else {
        params.users_capacity_rps
    };
    let outage_end = OUTAGE_AT + params.outage_s * S;
    let end = params.duration_s * S;
    let budget = params.memory_budget_mib * KIB * KIB;
    let mut nodes = vec![Node::default(); n_nodes as usize];
    let mut admissions = vec![admission(rate); n_nodes as usize];
    let mut sessions: Vec<Session> = (0..params.sessions)
        .map(|i| Session {
            node: (i % u64::from(n_nodes)) as u32,
            state: State::Ready,
            epoch: 0,
            down_at: 0,
        })
        .collect();
    for s in &sessions {
        nodes[s.node as usize].ready += 1;
    }
    let mut q: Queue<Ev> = Queue::default();
    let mut attempts = Windows::new(S);
    let mut admitted: Vec<Windows> = (0..n_nodes).map(|_| Windows::new(S)).collect();
    let mut ready_after: Vec<u64> = Vec::with_capacity(sessions.len());
    let mut dep = Dependency {
        outage: (OUTAGE_AT, outage_end),
        rps: users_rps,
        naive,
        free_at: 0,
        wasted: 0,
    };
    let mut oom_kills = 0u32;
    let mut last_ready: Micros = OUTAGE_AT;

    // The disconnect: every session goes away and comes back 0–1 s later.
    for (i, s) in sessions.iter_mut().enumerate() {
        nodes[s.node as usize].ready -= 1;
        s.state = State::Away;
        s.down_at = OUTAGE_AT;
        q.push(
            OUTAGE_AT + rng.below(S),
            Ev::Attempt {
                s: i as u32,
                epoch: 0,
            },
        );
    }

    q.push(OUTAGE_AT, Ev::Tick);
    while let Some((now, ev)) = q.pop_until(end) {
        match ev {
            Ev::Tick => {
                // Memory check every 100 ms of virtual time, as an event so
                // an OOM happens when it happens, not when the next client
                // event comes along.
                let mut killed = vec![false; nodes.len()];
                for (id, node) in nodes.iter_mut().enumerate() {
                    let m = node.memory(now, naive);
                    node.peak = node.peak.max(m);
                    if m > budget && node.down_until <= now {
                        // OOM: every session on it is gone; it restarts later.
                        oom_kills += 1;
                        killed[id] = true;
                        *node = Node {
                            oomed: true,
                            down_until: now + RESTART_AFTER,
                            peak: node.peak,
                            ..Node::default()
                        };
                        admissions[id] = admission(rate);
                        q.push(now + RESTART_AFTER, Ev::Restart { node: id as u32 });
                    }
                }
                if killed.iter().any(|k| *k) {
                    for (i, s) in sessions.iter_mut().enumerate() {
                        if killed[s.node as usize] && s.state != State::Away {
                            s.epoch += 1;
                            if s.state == State::Ready {
                                s.down_at = now;
                            }
                            s.state = State::Away;
                            q.push(
                                now + 100 * MS + rng.below(400 * MS),
                                Ev::Attempt {
                                    s: i as u32,
                                    epoch: s.epoch,
                                },
                            );
                        }
                    }
                }
                q.push(now + 100 * MS, Ev::Tick);
            }
            Ev::Restart { node } => {
                nodes[node as usize].down_until = 0;
            }
            Ev::Attempt { s, epoch } => {
                let sess = sessions[s as usize];
                if sess.epoch != epoch || sess.state != State::Away {
                    continue;
                }
                attempts.add(now, 1);
                // The load balancer picks a live node.
                let mut node_id = rng.below(u64::from(n_nodes)) as u32;
                for _ in 0..n_nodes {
                    if nodes[node_id as usize].down_until <= now {
                        break;
                    }
                    node_id = (node_id + 1) % n_nodes;
                }
                let node = &mut nodes[node_id as usize];
                if node.down_until > now {
                    q.push(now + S + rng.below(S), Ev::Attempt { s, epoch });
                    continue;
                }
                sessions[s as usize].node = node_id;
                if naive {
                    // Accepted at once (the 101 comes before any check).
                    admitted[node_id as usize].add(now, 1);
                    dep.admit(now, s, epoch, &mut sessions, &mut nodes, &mut q);
                    continue;
                }
                let dependency_down = now >= OUTAGE_AT && now < outage_end + 500 * MS;
                if dependency_down {
                    q.push(now + S + rng.below(4 * S), Ev::Attempt { s, epoch });
                    continue;
                }
                let now_ms = now / MS;
                let decision =
                    admissions[node_id as usize].decide(now_ms, node.sessions(), rng.unit());
                let wait_ms = match decision {
                    Decision::Admit => 0,
                    Decision::Hold { wait_ms } => wait_ms,
                    Decision::Refuse { retry_after_s } => {
                        // 503 before the 101; the client comes back after
                        // the whole seconds it was told.
                        q.push(now + retry_after_s * S, Ev::Attempt { s, epoch });
                        continue;
                    }
                };
                // The gateway sleeps `wait_ms` from the millisecond it read.
                let at = ((now_ms + wait_ms) * MS).max(now);
                node.held += 1;
                sessions[s as usize].state = State::Held;
                admitted[node_id as usize].add(at, 1);
                q.push(at, Ev::Admit { s, epoch });
            }
            Ev::Admit { s, epoch } => {
                dep.admit(now, s, epoch, &mut sessions, &mut nodes, &mut q);
            }
            Ev::IdentifyDone { s, epoch } | Ev::IdentifyTimeout { s, epoch } => {
                let sess = sessions[s as usize];
                if sess.epoch != epoch {
                    continue;
                }
                let State::Identifying { since } = sess.state else {
                    continue;
                };
                let node = &mut nodes[sess.node as usize];
                node.identifying -= 1;
                node.identifying_since_sum -= u128::from(since);
                let ok = matches!(ev, Ev::IdentifyDone { .. });
                let sess = &mut sessions[s as usize];
                if ok {
                    node.ready += 1;
                    sess.state = State::Ready;
                    ready_after.push(now - sess.down_at);
                    last_ready = last_ready.max(now);
                } else {
                    sess.state = State::Away;
                    sess.epoch += 1;
                    let delay = if naive {
                        100 * MS + rng.below(400 * MS)
                    } else {
                        S + rng.below(4 * S)
                    };
                    q.push(
                        now + delay,
                        Ev::Attempt {
                            s,
                            epoch: sess.epoch,
                        },
                    );
                }
            }
        }
    }
    let ready_now = sessions.iter().filter(|s| s.state == State::Ready).count() as u64;
    let counts = attempts.counts();
    let first = (OUTAGE_AT / S) as usize;
    let last = ((last_ready / S) as usize + 1).min(counts.len());
    let span = &counts[first.min(last)..last];
    let peak_over_mean = |span: &[u64]| {
        let mean = span.iter().sum::<u64>() as f64 / span.len().max(1) as f64;
        let peak = span.iter().copied().max().unwrap_or(0) as f64;
        round4(if mean > 0.0 { peak / mean } else { 0.0 })
    };
    let p99 = if (ready_after.len() as f64) >= 0.99 * params.sessions as f64 {
        // Sessions that never became READY sort last; they are under 1 %.
        let mut v = ready_after.clone();
        v.resize(params.sessions as usize, u64::MAX);
        Some(round4(percentile(&mut v, 99.0) as f64 / S as f64))
    } else {
        None
    };
    Report {
        scenario: "herd",
        mode: if naive { "naive" } else { "hardened" },
        seed,
        sessions: params.sessions,
        attempts_total: counts.iter().sum(),
        arrivals_peak_over_mean: peak_over_mean(span),
        retry_arrivals_peak_over_mean: peak_over_mean(span.get(1..).unwrap_or(&[])),
        admitted_per_s_max_per_node: admitted.iter().map(Windows::max).max().unwrap_or(0),
        ready_p99_s: p99,
        ready_fraction: round4(ready_now as f64 / params.sessions.max(1) as f64),
        ready_bound_s: round4(
            params.outage_s as f64
                + 1.2 * params.sessions as f64 / (f64::from(n_nodes) * rate as f64),
        ),
        memory_peak_bytes_per_node: nodes.iter().map(|n| n.peak).max().unwrap_or(0),
        oom_nodes: nodes.iter().filter(|n| n.oomed).count() as u32,
        oom_kills,
        wasted_dependency_calls: dep.wasted,
    }
}
