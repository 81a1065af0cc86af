//! `guilds-node-loss`: seed 000's first sentence, replayed. A cluster of
//! gateway+api processes and several guilds processes under posts to
//! every guild and sessions following them; one guilds process is killed
//! with SIGKILL (an OOM kill is one), its guilds must be served again by
//! the survivors within the lease TTL plus the permanent-down delay plus
//! 5 s, no acknowledged message may be lost, duplicated or reordered, and
//! a replacement joins without overloading anyone.
//!
//! Phases: baseline (posts and sessions), trigger (the kill, until every
//! guild is served again), trigger removed (a replacement process starts),
//! recovery (watched until the end).

use crate::catalog::{NodeLossSize, Scenario};
use crate::harness::{self, Clock, Cluster, Options, Post};
use crate::report::{Chart, Criterion, Mark, Run};
use crate::workload::{self, Workload};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The metrics the sampler keeps for this scenario's charts.
const METRICS: &[&str] = &[
    "guildhall_guild_owners",
    "guildhall_ring_members",
    "guildhall_guild_loads_in_flight",
    "guildhall_fanout_outbox_events",
    "guildhall_sessions",
];
/// Longest a graceful leave may leave a guild unserved: no lease or
/// hysteresis to wait out, only the new owners' loads.
const LEAVE_RECOVERY_MS_MAX: u64 = 5_000;
/// Replays it.
///
/// # Errors
/// What kept the cluster from starting or the workload from being set up
/// (a failure after that is a failed criterion, not an error).
pub async fn run(options: &Options) -> Result<Run, String> {
    let size = NodeLossSize::at(options.scale);
    let mut cluster = Cluster::start(&options.binary, &size.env)?;
    let run = replay(options, size, &mut cluster).await;
    // The logs are kept whatever happened: a replay that could not be set
    // up is explained by them.
    cluster.keep_logs(&options.out.join("logs"));
    run
}

async fn replay(
    options: &Options,
    size: NodeLossSize,
    cluster: &mut Cluster,
) -> Result<Run, String> {
    let lease_ttl_ms = size.limit_ms("GUILDHALL_LEASE_TTL_MS", guildhall_limits::LEASE_TTL_MS);
    let permanent_down_ms = size.limit_ms(
        "GUILDHALL_MEMBER_PERMANENT_DOWN_MS",
        guildhall_limits::MEMBER_PERMANENT_DOWN_MS,
    );
    let recovery_bound_ms = lease_ttl_ms + permanent_down_ms + 5_000;
    let (fronts, mut guilds_nodes) = cluster.spawn_layout(size.fronts, size.guilds_nodes)?;
    let ring_members = size.guilds_nodes as f64;
    for front in &fronts {
        let front = front.clone();
        cluster
            .wait_for("every guilds process in the ring", async || {
                cluster.metric(&front, "guildhall_ring_members").await == ring_members
            })
            .await?;
    }
    let load = size.workload.clone();
    let setup = workload::setup(cluster, &fronts[0], &load).await?;
    let clock = Clock::start();
    let mut workload = Workload::start(cluster, &fronts, setup, &load, options.seed, clock).await?;
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = cluster.sample(clock, METRICS, stop_sampler.clone());
    let mut phases = vec![Mark {
        at_ms: clock.ms(),
        label: format!(
            "baseline: {} sessions, posts to {} guilds",
            workload.sessions.ready,
            workload.guilds.len()
        ),
    }];
    let mut events = Vec::new();
    tokio::time::sleep(Duration::from_millis(size.baseline_ms)).await;

    // Trigger: the seeded choice of a guilds process, killed.
    let victim_index = (options.seed % size.guilds_nodes as u64) as usize;
    let victim = guilds_nodes[victim_index].clone();
    let owned = cluster.metric(&victim, "guildhall_guild_owners").await;
    let victim_pid = cluster.pid(&victim);
    cluster.signal(&victim, "KILL");
    let kill_ms = workload.fault();
    phases.push(Mark {
        at_ms: kill_ms,
        label: "trigger".to_owned(),
    });
    events.push(Mark {
        at_ms: kill_ms,
        label: format!("kill -9 {victim} (pid {victim_pid}), owner of {owned} guilds"),
    });
    guilds_nodes.remove(victim_index);

    // Until every guild is served again (or the wait's bound).
    let recovered_ms = workload
        .served_again(kill_ms, size.recovery_wait_ms_max)
        .await;
    let recovery_ms = recovered_ms.map(|at| at.saturating_sub(kill_ms));
    if let Some(at) = recovered_ms {
        events.push(Mark {
            at_ms: at,
            label: "every guild served again".to_owned(),
        });
    }

    // Trigger removed: a replacement process (a new name and worker id,
    // as a restarted pod gets), then recovery: the ring takes it in.
    let replacement = format!("{victim}-replacement");
    let removed_at = clock.ms();
    phases.push(Mark {
        at_ms: removed_at,
        label: "trigger removed".to_owned(),
    });
    cluster.spawn(&replacement, 200, "guilds")?;
    events.push(Mark {
        at_ms: clock.ms(),
        label: format!("{replacement} started (pid {})", cluster.pid(&replacement)),
    });
    guilds_nodes.push(replacement.clone());
    phases.push(Mark {
        at_ms: clock.ms(),
        label: "recovery".to_owned(),
    });
    tokio::time::sleep(Duration::from_millis(size.observe_ms)).await;
    let mut loads = Vec::new();
    for node in &guilds_nodes {
        loads.push(cluster.metric(node, "guildhall_guild_owners").await);
    }

    // A graceful leave, told apart from a crash: SIGTERM to a survivor
    // of the kill; its guilds must move at once, not after the lease.
    let leaver = guilds_nodes.remove(0);
    let left_owned = cluster.metric(&leaver, "guildhall_guild_owners").await;
    let leaver_pid = cluster.pid(&leaver);
    cluster.expect_exit(&leaver);
    cluster.signal(&leaver, "TERM");
    let leave_ms = workload.fault();
    events.push(Mark {
        at_ms: leave_ms,
        label: format!(
            "SIGTERM {leaver} (pid {leaver_pid}), owner of {left_owned} guilds: a graceful leave"
        ),
    });
    let left_served_ms = workload
        .served_again(leave_ms, size.recovery_wait_ms_max)
        .await;
    let leave_recovery_ms = left_served_ms.map(|at| at.saturating_sub(leave_ms));
    if let Some(at) = left_served_ms {
        events.push(Mark {
            at_ms: at,
            label: "every guild served again after the leave".to_owned(),
        });
    }
    let (checked, cut) = workload.stop_and_check().await;
    let duration_ms = clock.ms();
    stop_sampler.store(true, Ordering::Relaxed);
    let samples = sampler.await.map_err(|e| e.to_string())?;
    cluster.check_exits();
    let (posts, deliveries) = workload.finish();

    // Criteria.
    // The loads were read before the leave, over one more process.
    let live = (guilds_nodes.len() + 1) as f64;
    let bound = (1.25 * size.workload.guilds as f64 / live).ceil();
    let max_load = loads.iter().copied().fold(0.0, f64::max);
    let acked = posts.iter().filter(|p| p.ok).count();
    let criteria = vec![
        Criterion {
            name: "every guild served again after the kill (an acknowledged post sent after it)"
                .to_owned(),
            bound: format!(
                "≤ {:.1} s (lease TTL {:.1} s + permanent-down {:.1} s + 5 s)",
                recovery_bound_ms as f64 / 1_000.0,
                lease_ttl_ms as f64 / 1_000.0,
                permanent_down_ms as f64 / 1_000.0
            ),
            measured: recovery_ms.map_or(f64::INFINITY, |ms| ms as f64 / 1_000.0),
            unit: "s".to_owned(),
            pass: recovery_ms.is_some_and(|ms| ms <= recovery_bound_ms),
        },
        Criterion {
            name: "acknowledged messages missing, duplicated, reordered or misdelivered (history checker)"
                .to_owned(),
            bound: "= 0".to_owned(),
            measured: checked.breaches_total() as f64,
            unit: "events".to_owned(),
            pass: checked.breaches_total() == 0 && !cut && checked.required > 0,
        },
        Criterion {
            name: "every guild served again after a graceful leave (SIGTERM)".to_owned(),
            bound: format!(
                "≤ {:.1} s (at once: no lease to wait out, only the loads)",
                LEAVE_RECOVERY_MS_MAX as f64 / 1_000.0
            ),
            measured: leave_recovery_ms.map_or(f64::INFINITY, |ms| ms as f64 / 1_000.0),
            unit: "s".to_owned(),
            pass: leave_recovery_ms.is_some_and(|ms| ms <= LEAVE_RECOVERY_MS_MAX),
        },
        Criterion {
            name: "guilds per guilds process after the replacement joined (max)".to_owned(),
            bound: format!("≤ ⌈1.25 × {} / {live}⌉ = {bound}", size.workload.guilds),
            measured: max_load,
            unit: "guilds".to_owned(),
            pass: max_load <= bound && loads.iter().sum::<f64>() == size.workload.guilds as f64,
        },
        Criterion {
            name: "processes that exited without being killed".to_owned(),
            bound: "= 0".to_owned(),
            measured: cluster.unexpected_exits.len() as f64,
            unit: "processes".to_owned(),
            pass: cluster.unexpected_exits.is_empty(),
        },
    ];
    let figures = vec![
        (
            "guilds owned by the killed process".to_owned(),
            format!("{owned}"),
        ),
        (
            "guilds owned by the process that left gracefully".to_owned(),
            format!("{left_owned}"),
        ),
        (
            "time until every guild was served again after the leave".to_owned(),
            leave_recovery_ms.map_or("not within the wait".to_owned(), |ms| {
                format!("{:.2} s", ms as f64 / 1_000.0)
            }),
        ),
        (
            "time until every guild was served again".to_owned(),
            recovery_ms.map_or("not within the wait".to_owned(), |ms| {
                format!("{:.2} s", ms as f64 / 1_000.0)
            }),
        ),
        ("posts sent".to_owned(), posts.len().to_string()),
        ("posts acknowledged".to_owned(), acked.to_string()),
        (
            "sends acknowledged / refused / indeterminate (history)".to_owned(),
            format!(
                "{} / {} / {}",
                checked.acknowledged, checked.refused, checked.indeterminate
            ),
        ),
        (
            "deliveries checked on the recording sessions".to_owned(),
            format!("{} (required {})", checked.deliveries, checked.required),
        ),
        (
            "anomalies by kind".to_owned(),
            format!("{:?}", checked.counts),
        ),
        (
            "guilds per guilds process at the end".to_owned(),
            format!("{loads:?}"),
        ),
        (
            "processes that exited by themselves".to_owned(),
            format!("{:?}", cluster.unexpected_exits),
        ),
    ];
    let charts = charts(&posts, &deliveries, &samples, duration_ms);
    Ok(Run {
        scenario: Scenario::GuildsNodeLoss,
        scale: options.scale,
        seed: options.seed,
        configuration: "guildhall".to_owned(),
        command: format!(
            "guildhall chaos run {} --scale {} --seed {}",
            Scenario::GuildsNodeLoss.name(),
            options.scale.name(),
            options.seed
        ),
        duration_ms,
        phases,
        events,
        figures,
        criteria,
        charts,
        scaled_down: size.scaled_down,
    })
}

fn charts(
    posts: &[Post],
    deliveries: &[u64],
    samples: &harness::Samples,
    end_ms: u64,
) -> Vec<Chart> {
    let mut charts = workload::workload_charts(posts, deliveries, end_ms);
    charts.extend([
        Chart {
            title: "Guilds owned per guilds process".to_owned(),
            unit: "guilds".to_owned(),
            series: workload::per_process(samples, "guildhall_guild_owners", "guilds"),
        },
        Chart {
            title: "Guild loads in flight per guilds process".to_owned(),
            unit: "loads".to_owned(),
            series: workload::per_process(samples, "guildhall_guild_loads_in_flight", "guilds"),
        },
        Chart {
            title: "Ring members as each front sees them".to_owned(),
            unit: "guilds processes".to_owned(),
            series: workload::per_process(samples, "guildhall_ring_members", "front"),
        },
    ]);
    charts.extend(workload::process_charts(samples));
    charts
}
