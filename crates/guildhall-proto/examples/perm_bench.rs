//! What delivery that follows permissions costs on the fanout path, per
//! recipient, against the same fanout without it, measured in one run.
//!
//! ```sh
//! cargo run --release -p guildhall-proto --example perm_bench -- [members] [roles] [seed]
//! ```
//!
//! A seeded guild of `members` (10,000) members holding some of `roles`
//! (50) roles, and a channel with overwrites for `@everyone` (deny
//! VIEW_CHANNEL), ten roles (allow or deny) and five members: a private
//! channel that part of the guild may view. Three figures:
//! - the audience: `permissions::in_channel` for every member, which the
//!   guild's owner runs once per channel after a change (ns per member);
//! - the baseline: per event, each recipient's share of the fanout the
//!   gateway does without the filter (the intent check and a queue push
//!   of the shared frame, standing in for `Slot::dispatch`);
//! - the filtered fanout: the same, plus the owner's choice of the node's
//!   hidden users (a binary search per session) and the gateway's skip
//!   check (a binary search per slot).
//!
//! Rounds alternate baseline and filtered (A B A B), three of each; the
//! medians and their ratio are printed as one JSON object.

use guildhall_proto::permissions::{self as perm, Overwrite, OverwriteKind, Subject};
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

/// Events per round.
const EVENTS: usize = 200;
/// Frames a session queue holds before the oldest is dropped (a socket's
/// bounded queue).
const QUEUE_FRAMES_MAX: usize = 64;

struct Member {
    user_id: i64,
    roles: Vec<i64>,
    role_bits: u64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let members_n = args.first().copied().unwrap_or(10_000) as i64;
    let roles_n = args.get(1).copied().unwrap_or(50) as i64;
    let seed = args.get(2).copied().unwrap_or(1);
    let mut rng = rand_pcg::Pcg64Mcg::seed_from_u64(seed);
    let guild_id = 1_000_000;
    let role_ids: Vec<i64> = (1..=roles_n).map(|r| guild_id + r).collect();
    let role_bits: Vec<u64> = role_ids
        .iter()
        .map(|_| {
            let mut bits = perm::EVERYONE_DEFAULT & rng.random::<u64>();
            if rng.random_ratio(1, 10) {
                bits |= perm::MANAGE_MESSAGES;
            }
            bits
        })
        .collect();
    let members: Vec<Member> = (0..members_n)
        .map(|i| {
            let roles: Vec<i64> = role_ids
                .iter()
                .filter(|_| rng.random_ratio(1, 10))
                .copied()
                .collect();
            let bits = roles.iter().fold(perm::EVERYONE_DEFAULT, |b, r| {
                b | role_bits[(*r - guild_id - 1) as usize]
            });
            Member {
                user_id: 10_000_000 + i,
                roles,
                role_bits: bits,
            }
        })
        .collect();
    let mut overwrites = vec![Overwrite {
        id: guild_id,
        kind: OverwriteKind::Role,
        allow: 0,
        deny: perm::VIEW_CHANNEL,
    }];
    for (i, role) in role_ids.iter().take(10).enumerate() {
        let (allow, deny) = if i % 3 == 0 {
            (0, perm::SEND_MESSAGES)
        } else {
            (perm::VIEW_CHANNEL, 0)
        };
        overwrites.push(Overwrite {
            id: *role,
            kind: OverwriteKind::Role,
            allow,
            deny,
        });
    }
    for member in members
        .iter()
        .step_by((members_n as usize / 5).max(1))
        .take(5)
    {
        overwrites.push(Overwrite {
            id: member.user_id,
            kind: OverwriteKind::Member,
            allow: perm::VIEW_CHANNEL,
            deny: 0,
        });
    }

    // The audience, as the owner computes it.
    let audience = || -> Vec<i64> {
        members
            .iter()
            .filter(|m| {
                let subject = Subject {
                    guild_id,
                    user_id: m.user_id,
                    is_owner: false,
                    role_bits: m.role_bits,
                    roles: &m.roles,
                    timed_out: false,
                };
                perm::in_channel(&subject, 0, &overwrites) & perm::VIEW_CHANNEL == 0
            })
            .map(|m| m.user_id)
            .collect()
    };
    let mut audience_ns = vec![];
    let mut hidden = vec![];
    for _ in 0..3 {
        let started = Instant::now();
        hidden = black_box(audience());
        audience_ns.push(started.elapsed().as_nanos() as f64 / members_n as f64);
    }

    // One node holding a session per member.
    let sessions: Vec<(i64, u64)> = members.iter().map(|m| (m.user_id, 1 << 9)).collect();
    let frame: Arc<[u8]> = Arc::from(&b"{\"op\":0,\"t\":\"MESSAGE_CREATE\",\"d\":{}}"[..]);
    let mut queues: Vec<VecDeque<Arc<[u8]>>> = vec![VecDeque::new(); sessions.len()];
    let push = |queues: &mut Vec<VecDeque<Arc<[u8]>>>, i: usize| {
        let queue = &mut queues[i];
        if queue.len() >= QUEUE_FRAMES_MAX {
            queue.pop_front();
        }
        queue.push_back(frame.clone());
    };
    let recipients = (EVENTS * sessions.len()) as f64;
    let (mut baseline_ns, mut filtered_ns) = (vec![], vec![]);
    for _ in 0..3 {
        let started = Instant::now();
        for _ in 0..EVENTS {
            for (i, (_, intents)) in sessions.iter().enumerate() {
                if intents & (1 << 9) != 0 {
                    push(&mut queues, i);
                }
            }
        }
        baseline_ns.push(started.elapsed().as_nanos() as f64 / recipients);

        let started = Instant::now();
        for _ in 0..EVENTS {
            // The owner: this node's users who may not view the channel.
            let mut here: Vec<i64> = sessions
                .iter()
                .map(|(user, _)| *user)
                .filter(|user| hidden.binary_search(user).is_ok())
                .collect();
            here.sort_unstable();
            here.dedup();
            // The gateway: skip them.
            for (i, (user, intents)) in sessions.iter().enumerate() {
                if intents & (1 << 9) == 0 {
                    continue;
                }
                if !here.is_empty() && here.binary_search(user).is_ok() {
                    continue;
                }
                push(&mut queues, i);
            }
        }
        filtered_ns.push(started.elapsed().as_nanos() as f64 / recipients);
    }
    black_box(&queues);
    let (baseline, filtered) = (median(baseline_ns), median(filtered_ns));
    // One JSON object on stdout, for scripts to read.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}",
        serde_json::json!({
            "members": members_n,
            "roles": roles_n,
            "overwrites": overwrites.len(),
            "seed": seed,
            "hidden_members": hidden.len(),
            "audience_ns_per_member": (median(audience_ns) * 10.0).round() / 10.0,
            "baseline_ns_per_recipient": (baseline * 10.0).round() / 10.0,
            "filtered_ns_per_recipient": (filtered * 10.0).round() / 10.0,
            "filtered_over_baseline": (filtered / baseline * 100.0).round() / 100.0,
        })
    );
}
