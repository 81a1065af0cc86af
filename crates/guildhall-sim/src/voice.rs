//! `sim voice`: seed 003's cold restart of the whole voice-syncer fleet
//! (13:05 and 13:43).
//!
//! `instances` voice nodes restart at once and every call is re-created at
//! t = 0: `guilds` guilds with a Zipf-skewed number of voice channels
//! (exponent `zipf_s`, at most `channels_per_guild_max` each, Discord's
//! channel limit). Each guild is placed on an instance; on its instance a
//! call needs its guild's coordinator, then its own syncer, each spawned
//! under the instance's [`SpawnBudget`] (the server's type). A spawned
//! syncer queues one allocation RPC in its instance's mailbox; an instance
//! sends `rpc_capacity_per_s` RPCs per second to the SFUs (seed 003's
//! connection pools), each with a deadline of `rpc_deadline_ms`. A call is
//! placed when its RPC is answered within its deadline.
//!
//! Hardened: the real spawn budget (children counted, per-guild shares,
//! live caps), bounded-load placement of guilds ([`BoundedLoads`]), a
//! bounded mailbox (a full one refuses at once; the syncer retries after
//! a jittered delay) and expired RPCs never started.
//!
//! Naive (the incident): the budget counts coordinators only, plain ring
//! placement, unbounded mailboxes, and a syncer whose RPC timed out sends
//! it again while the stale one still waits in the mailbox and is still
//! sent: the queue grows faster than it drains and nothing is placed.

use crate::sim::{MS, Micros, Queue, Rng, S, percentile, round4};
use guildhall_control::spawn::{SpawnBudget, SpawnConfig, SpawnKind};
use guildhall_control::token_bucket::TokenBucket;
use guildhall_ring::{BoundedLoads, MemberId, Ring};
use serde::Serialize;
use std::collections::VecDeque;

/// Parameters.
#[derive(Clone, Debug)]
pub struct Params {
    /// Voice instances.
    pub instances: u32,
    /// Guilds with calls.
    pub guilds: u32,
    /// Calls wanted before the per-guild cap (the Zipf split of this).
    pub calls: u32,
    /// Zipf exponent of calls per guild.
    pub zipf_s: f64,
    /// Most voice channels one guild has.
    pub channels_per_guild_max: u32,
    /// Allocation RPCs an instance sends per second.
    pub rpc_capacity_per_s: u32,
    /// Deadline of one RPC.
    pub rpc_deadline_ms: u64,
    /// Spawns per second per instance (coordinators and children).
    pub spawn_rate_per_s: u32,
    /// Spawn burst per instance.
    pub spawn_burst: u32,
    /// Spawns per second per guild.
    pub guild_rate_per_s: u32,
    /// Spawn burst per guild.
    pub guild_burst: u32,
    /// How long the run lasts.
    pub duration_s: u64,
}

impl Default for Params {
    fn default() -> Self {
        let l = guildhall_limits::Limits::default();
        Self {
            instances: 20,
            guilds: 10_000,
            calls: 40_000,
            zipf_s: 1.0,
            channels_per_guild_max: 500,
            rpc_capacity_per_s: 250,
            rpc_deadline_ms: l.voice_sfu_request_timeout_ms,
            spawn_rate_per_s: l.voice_spawn_rate_per_s,
            spawn_burst: l.voice_spawn_burst,
            guild_rate_per_s: l.voice_spawn_guild_rate_per_s,
            guild_burst: l.voice_spawn_guild_burst,
            duration_s: 120,
        }
    }
}

/// What `sim voice` prints.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// "voice".
    pub scenario: &'static str,
    /// "hardened" or "naive".
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Instances.
    pub instances: u32,
    /// Guilds.
    pub guilds: u32,
    /// Calls re-created at t = 0.
    pub calls: u32,
    /// Calls of the largest guild.
    pub largest_guild_calls: u32,
    /// Most calls on one instance.
    pub max_instance_calls: u32,
    /// Average calls per instance.
    pub avg_instance_calls: f64,
    /// The budget's allowance in any 1 s window: rate + burst.
    pub spawn_allowed_per_1s_window: u64,
    /// Most spawns (coordinators and children) on one instance in any 1 s
    /// window.
    pub max_spawns_per_1s_window: u64,
    /// Whether no instance ever spawned above its budget in any window.
    pub spawn_budget_respected: bool,
    /// Coordinators spawned.
    pub coordinators_spawned: u64,
    /// Syncers spawned.
    pub syncers_spawned: u64,
    /// Deepest mailbox (queued RPCs) of any instance.
    pub mailbox_depth_max: u64,
    /// Mailbox depth of the deepest instance at the end.
    pub mailbox_depth_end: u64,
    /// Share of calls placed by the end.
    pub placed_fraction: f64,
    /// Seconds to place a call, median (placed calls).
    pub placed_p50_s: f64,
    /// 99th percentile.
    pub placed_p99_s: f64,
    /// Seconds until the last call was placed; null if some never were.
    pub all_placed_s: Option<f64>,
    /// RPCs sent after their deadline (wasted SFU work).
    pub rpcs_wasted: u64,
    /// RPCs dropped unstarted because their deadline had passed.
    pub rpcs_expired_unstarted: u64,
    /// Spawn and mailbox refusals (each retried after a jittered delay).
    pub refusals: u64,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// The call asks its instance to spawn what it needs.
    Spawn(u32),
    /// The call's syncer queues its RPC.
    Enqueue(u32),
    /// Naive: the RPC with this id timed out; the syncer sends it again.
    Timeout(u32, u32),
}

struct Job {
    call: u32,
    id: u32,
    enqueued_at: Micros,
}

struct Instance {
    budget: SpawnBudget,
    rpc: TokenBucket,
    mailbox: VecDeque<Job>,
    /// Spawns per ms, for the sliding-window figure.
    spawns_per_ms: Vec<u32>,
}

/// When a refused caller comes back: `after_ms` (at least
/// [`RETRY_FLOOR_MS`]) plus up to as much again (the refuser's jitter).
fn retry(rng: &mut Rng, now: Micros, after_ms: u64) -> Micros {
    let after_ms = after_ms.clamp(RETRY_FLOOR_MS, 60_000);
    now + (after_ms + rng.below(after_ms + 1)) * MS
}

/// The call owners' shortest retry interval: a budget refusal may say
/// "5 ms" (one token at 200/s), but tens of thousands of callers polling
/// that often only cost the simulation time; a coarser retry changes the
/// placement times by at most this much.
const RETRY_FLOOR_MS: u64 = 100;

/// Calls per guild: a Zipf split of `calls`, at least one each, capped.
fn calls_per_guild(params: &Params) -> Vec<u32> {
    let weights: Vec<f64> = (1..=params.guilds)
        .map(|r| 1.0 / f64::from(r).powf(params.zipf_s))
        .collect();
    let total: f64 = weights.iter().sum();
    weights
        .iter()
        .map(|w| {
            ((f64::from(params.calls) * w / total).round() as u32)
                .clamp(1, params.channels_per_guild_max.max(1))
        })
        .collect()
}

/// Runs the scenario.
pub fn run(params: &Params, seed: u64, naive: bool) -> Report {
    let mut rng = Rng::new(seed);
    let limits = guildhall_limits::Limits::default();
    let per_guild = calls_per_guild(params);
    let guild_keys: Vec<u64> = per_guild.iter().map(|_| rng.next_u64()).collect();
    let members: Vec<MemberId> = (0..params.instances.max(1))
        .map(|i| MemberId(u64::from(i) + 1))
        .collect();
    let ring = Ring::new(1, &members, limits.ring_vnodes_per_member);
    // Guild → instance: bounded loads (hardened) or the plain ring.
    let instance_of_guild: Vec<usize> = if naive {
        guild_keys
            .iter()
            .map(|k| ring.primary(*k).map_or(0, |m| (m.0 - 1) as usize))
            .collect()
    } else {
        let mut placement =
            BoundedLoads::new(ring.clone(), limits.ring_load_epsilon_permille, usize::MAX);
        guild_keys
            .iter()
            .map(|k| placement.place(*k).map_or(0, |m| (m.0 - 1) as usize))
            .collect()
    };
    let mut call_guild: Vec<u32> = Vec::new();
    for (g, n) in per_guild.iter().enumerate() {
        call_guild.extend(std::iter::repeat_n(g as u32, *n as usize));
    }
    let calls = call_guild.len();
    let mut instance_calls = vec![0u32; members.len()];
    for g in &call_guild {
        instance_calls[instance_of_guild[*g as usize]] += 1;
    }

    let duration_ms = params.duration_s * 1000;
    let config = SpawnConfig {
        rate_per_s: params.spawn_rate_per_s,
        burst: params.spawn_burst,
        guild_rate_per_s: params.guild_rate_per_s,
        guild_burst: params.guild_burst,
        coordinators_max: limits.voice_coordinators_max,
        children_max: limits.voice_syncers_max,
        guilds_tracked_max: limits.voice_spawn_guilds_tracked_max,
        cap_retry_after_ms: limits.voice_retry_after_ms,
    };
    let mut instances: Vec<Instance> = members
        .iter()
        .map(|_| Instance {
            budget: if naive {
                SpawnBudget::naive(config, 0)
            } else {
                SpawnBudget::new(config, 0)
            },
            rpc: TokenBucket::new(0, params.rpc_capacity_per_s, 1),
            mailbox: VecDeque::new(),
            spawns_per_ms: vec![0; duration_ms as usize + 1],
        })
        .collect();
    let mailbox_max = limits.voice_requests_queue_max;
    let deadline_us = params.rpc_deadline_ms * MS;

    let mut coordinator = vec![false; per_guild.len()];
    let mut current_job = vec![0u32; calls];
    let mut placed_at: Vec<Option<Micros>> = vec![None; calls];
    let mut queue: Queue<Event> = Queue::default();
    for c in 0..calls {
        // The call owners re-create every call within the first 100 ms.
        queue.push(rng.below(100 * MS), Event::Spawn(c as u32));
    }
    let (mut coordinators_spawned, mut syncers_spawned, mut refusals) = (0u64, 0u64, 0u64);
    let (mut wasted, mut expired_unstarted, mut depth_max) = (0u64, 0u64, 0u64);
    let enqueue = |instance: &mut Instance, call: u32, id: u32, now: Micros| -> bool {
        if !naive && instance.mailbox.len() >= mailbox_max {
            return false;
        }
        instance.mailbox.push_back(Job {
            call,
            id,
            enqueued_at: now,
        });
        true
    };

    for ms in 0..=duration_ms {
        let now = ms * MS;
        while let Some((at, event)) = queue.pop_until(now) {
            match event {
                Event::Spawn(c) => {
                    let ci = c as usize;
                    let g = call_guild[ci] as usize;
                    let inst = &mut instances[instance_of_guild[g]];
                    if !coordinator[g] {
                        match inst
                            .budget
                            .try_spawn(at / MS, guild_keys[g], SpawnKind::Coordinator)
                        {
                            Ok(()) => {
                                coordinator[g] = true;
                                coordinators_spawned += 1;
                                inst.spawns_per_ms[ms as usize] += 1;
                            }
                            Err(refused) => {
                                refusals += 1;
                                queue.push(
                                    retry(&mut rng, at, refused.retry_after_ms),
                                    Event::Spawn(c),
                                );
                                continue;
                            }
                        }
                    }
                    match inst
                        .budget
                        .try_spawn(at / MS, guild_keys[g], SpawnKind::Child)
                    {
                        Ok(()) => {
                            syncers_spawned += 1;
                            inst.spawns_per_ms[ms as usize] += 1;
                            queue.push(at, Event::Enqueue(c));
                        }
                        Err(refused) => {
                            refusals += 1;
                            queue
                                .push(retry(&mut rng, at, refused.retry_after_ms), Event::Spawn(c));
                        }
                    }
                }
                Event::Enqueue(c) => {
                    let ci = c as usize;
                    if placed_at[ci].is_some() {
                        continue;
                    }
                    let inst = &mut instances[instance_of_guild[call_guild[ci] as usize]];
                    current_job[ci] += 1;
                    if enqueue(inst, c, current_job[ci], at) {
                        if naive {
                            queue.push(at + deadline_us, Event::Timeout(c, current_job[ci]));
                        }
                    } else {
                        refusals += 1;
                        queue.push(
                            retry(&mut rng, at, limits.voice_retry_after_ms),
                            Event::Enqueue(c),
                        );
                    }
                }
                Event::Timeout(c, id) => {
                    let ci = c as usize;
                    if placed_at[ci].is_none() && current_job[ci] == id {
                        queue.push(at, Event::Enqueue(c));
                    }
                }
            }
        }
        for inst in &mut instances {
            depth_max = depth_max.max(inst.mailbox.len() as u64);
            while let Some(job) = inst.mailbox.front() {
                let expired = now >= job.enqueued_at + deadline_us;
                let (call, id) = (job.call as usize, job.id);
                if expired && !naive {
                    // Not started: nobody waits for its answer. The syncer
                    // timed out at the deadline and retries after a delay.
                    inst.mailbox.pop_front();
                    expired_unstarted += 1;
                    let at = retry(&mut rng, now, limits.voice_retry_after_ms);
                    queue.push(at, Event::Enqueue(call as u32));
                    continue;
                }
                if inst.rpc.try_take(ms, 1).is_err() {
                    break;
                }
                inst.mailbox.pop_front();
                if expired || placed_at[call].is_some() || id != current_job[call] {
                    wasted += 1;
                } else {
                    placed_at[call] = Some(now);
                }
            }
        }
    }

    let window_ms = 1000usize;
    let mut max_window = 0u64;
    for inst in &instances {
        let mut sum = 0u64;
        for (i, n) in inst.spawns_per_ms.iter().enumerate() {
            sum += u64::from(*n);
            if i >= window_ms {
                sum -= u64::from(inst.spawns_per_ms[i - window_ms]);
            }
            max_window = max_window.max(sum);
        }
    }
    let allowed = u64::from(params.spawn_rate_per_s) + u64::from(params.spawn_burst);
    let mut times: Vec<u64> = placed_at.iter().flatten().copied().collect();
    let placed = times.len();
    let p50 = percentile(&mut times, 50.0);
    let p99 = percentile(&mut times, 99.0);
    let all_placed =
        (placed == calls).then(|| round4(times.last().copied().unwrap_or(0) as f64 / S as f64));
    Report {
        scenario: "voice",
        mode: if naive { "naive" } else { "hardened" },
        seed,
        instances: params.instances,
        guilds: params.guilds,
        calls: calls as u32,
        largest_guild_calls: per_guild.iter().copied().max().unwrap_or(0),
        max_instance_calls: instance_calls.iter().copied().max().unwrap_or(0),
        avg_instance_calls: round4(calls as f64 / members.len() as f64),
        spawn_allowed_per_1s_window: allowed,
        max_spawns_per_1s_window: max_window,
        spawn_budget_respected: max_window <= allowed,
        coordinators_spawned,
        syncers_spawned,
        mailbox_depth_max: depth_max,
        mailbox_depth_end: instances
            .iter()
            .map(|i| i.mailbox.len() as u64)
            .max()
            .unwrap_or(0),
        placed_fraction: round4(placed as f64 / calls.max(1) as f64),
        placed_p50_s: round4(p50 as f64 / S as f64),
        placed_p99_s: round4(p99 as f64 / S as f64),
        all_placed_s: all_placed,
        rpcs_wasted: wasted,
        rpcs_expired_unstarted: expired_unstarted,
        refusals,
    }
}
