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

use crate::catalog::{NodeLossSize, Scale, Scenario};
use crate::harness::{self, Clock, Cluster, History, Post, Sessions};
use crate::history::{self, Entry};
use crate::report::{self, Chart, Criterion, Mark, Run, Series};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The metrics the sampler keeps for this scenario's charts.
const METRICS: &[&str] = &[
    "guildhall_guild_owners",
    "guildhall_ring_members",
    "guildhall_guild_loads_in_flight",
    "guildhall_fanout_outbox_events",
    "guildhall_sessions",
];
/// After the posters stop, how long the history checker is retried while
/// the outboxes make good what the kill cut.
const SETTLE_MS_MAX: u64 = 20_000;
/// The pause of a poster whose guild is not served again yet: recovery is
/// measured to this precision, whatever the baseline pace.
const PROBE_INTERVAL_MS: u64 = 200;
/// Probes of one guild in flight at once while it is not served again
/// (a reply timeout's worth at `PROBE_INTERVAL_MS`, and some).
const PROBES_IN_FLIGHT_MAX: usize = 32;
/// Longest a graceful leave may leave a guild unserved: no lease or
/// hysteresis to wait out, only the new owners' loads.
const LEAVE_RECOVERY_MS_MAX: u64 = 5_000;
/// Chart buckets.
const BUCKET_MS: u64 = 1_000;

/// What a replay needs beside its scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// Its scale.
    pub scale: Scale,
    /// Its seed (which guilds process dies).
    pub seed: u64,
    /// The `guildhall` binary to start the processes from.
    pub binary: std::path::PathBuf,
    /// Where logs are kept.
    pub out: std::path::PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

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
    let fronts: Vec<String> = (1..=size.fronts).map(|i| format!("front-{i}")).collect();
    for (i, name) in fronts.iter().enumerate() {
        let roles = if i == 0 {
            "gateway,api,users,presence"
        } else {
            "gateway,api"
        };
        cluster.spawn(name, u16::try_from(i + 1).unwrap_or(1), roles)?;
    }
    let mut guilds_nodes: Vec<String> = (1..=size.guilds_nodes)
        .map(|i| format!("guilds-{i}"))
        .collect();
    for (i, name) in guilds_nodes.iter().enumerate() {
        cluster.spawn(name, u16::try_from(100 + i).unwrap_or(100), "guilds")?;
    }
    let ring_members = size.guilds_nodes as f64;
    for front in &fronts {
        let front = front.clone();
        cluster
            .wait_for("every guilds process in the ring", async || {
                cluster.metric(&front, "guildhall_ring_members").await == ring_members
            })
            .await?;
    }
    let api = cluster.addr(&fronts[0]);
    let user = harness::register(cluster.http(), &api, "chaos").await?;
    let mut guilds = Vec::new();
    for i in 0..size.guilds {
        guilds.push(
            harness::create_guild(cluster.http(), &api, &user, &format!("replay {i}")).await?,
        );
    }
    let mut invites = Vec::new();
    for (_, channel) in &guilds {
        invites.push(harness::create_invite(cluster.http(), &api, &user, channel).await?);
    }
    let mut members = Vec::new();
    for u in 0..size.users {
        let member = harness::register(cluster.http(), &api, &format!("member{u}")).await?;
        for k in 0..size.guilds_per_user {
            let code = &invites[(u * size.guilds_per_user + k) % invites.len()];
            harness::join(cluster.http(), &api, &member, code).await?;
        }
        members.push(member);
    }
    let placed = size.guilds as f64;
    cluster
        .wait_for("every guild placed", async || {
            cluster
                .metric(&fronts[0], "guildhall_placement_guilds")
                .await
                == placed
        })
        .await?;

    let clock = Clock::start();
    let history = History::default();
    for (u, member) in members.iter().enumerate() {
        for k in 0..size.guilds_per_user {
            history.push(Entry::Membership {
                at_us: 0,
                user: member.id,
                guild: guilds[(u * size.guilds_per_user + k) % guilds.len()].0,
                member: true,
            });
        }
    }
    let gateways: Vec<String> = fronts.iter().map(|f| cluster.addr(f)).collect();
    let sessions = Sessions::open(
        &gateways,
        &members,
        size.sessions,
        size.recording_sessions,
        &history,
        clock,
    )
    .await?;
    let stop_sampler = Arc::new(AtomicBool::new(false));
    let sampler = cluster.sample(clock, METRICS, stop_sampler.clone());

    // The posters: one per guild, through the fronts in turn.
    let baseline_at = clock.ms();
    let mut phases = vec![Mark {
        at_ms: baseline_at,
        label: format!(
            "baseline: {} sessions, posts to {} guilds",
            sessions.ready,
            guilds.len()
        ),
    }];
    let mut events = Vec::new();
    let stop_posts = Arc::new(AtomicBool::new(false));
    // ms of the kill (0: not yet); a post sent after it and acknowledged
    // marks its guild served again.
    let killed_at = Arc::new(AtomicU64::new(0));
    let served_again: Arc<Mutex<Vec<Option<u64>>>> = Arc::new(Mutex::new(vec![None; guilds.len()]));
    let posts: Arc<Mutex<Vec<Post>>> = Arc::default();
    let mut posters = Vec::new();
    for (g, (guild, channel)) in guilds.iter().enumerate() {
        let via = fronts[g % fronts.len()].clone();
        let url = format!(
            "http://{}/api/v10/channels/{channel}/messages",
            cluster.addr(&via)
        );
        let (http, token, guild) = (cluster.http().clone(), user.token.clone(), *guild);
        let (stop, killed_at, served_again, posts, history) = (
            stop_posts.clone(),
            killed_at.clone(),
            served_again.clone(),
            posts.clone(),
            history.clone(),
        );
        // Spread the posters' first posts over one interval.
        let offset_ms =
            (options.seed.wrapping_add(g as u64 * 7_919)) % size.post_interval_ms.max(1);
        let interval_ms = size.post_interval_ms;
        posters.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(offset_ms)).await;
            let probes = Arc::new(tokio::sync::Semaphore::new(PROBES_IN_FLIGHT_MAX));
            let mut in_flight = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = format!("g{g}-{n}");
                n += 1;
                let sent_ms = clock.ms();
                history.push(Entry::Invoke {
                    at_us: clock.us(),
                    guild,
                    key: key.clone(),
                    via: via.clone(),
                });
                let post = {
                    let (http, url, token, history, posts, served_again, killed_at) = (
                        http.clone(),
                        url.clone(),
                        token.clone(),
                        history.clone(),
                        posts.clone(),
                        served_again.clone(),
                        killed_at.clone(),
                    );
                    let kill_ms = killed_at.load(Ordering::Relaxed);
                    async move {
                        let answer = http
                            .post(&url)
                            .header("authorization", &token)
                            .json(&json!({ "content": key }))
                            .send()
                            .await;
                        let status = answer.as_ref().map(|a| a.status().as_u16()).unwrap_or(0);
                        let ok = (200..300).contains(&status);
                        // A 5xx or no answer leaves the send indeterminate.
                        if (200..500).contains(&status) {
                            history.push(Entry::Complete {
                                at_us: clock.us(),
                                key,
                                ok,
                            });
                        }
                        let done_ms = clock.ms();
                        lock(&posts).push(Post {
                            guild: g,
                            sent_ms,
                            done_ms,
                            ok,
                        });
                        // Sent after the latest fault: its guild is served.
                        if ok && kill_ms > 0 && killed_at.load(Ordering::Relaxed) == kill_ms {
                            let mut served = lock(&served_again);
                            if served[g].is_none() {
                                served[g] = Some(done_ms);
                            }
                        }
                    }
                };
                let kill_ms = killed_at.load(Ordering::Relaxed);
                if kill_ms > 0 && lock(&served_again)[g].is_none() {
                    // Not served again yet: a probe every PROBE_INTERVAL_MS,
                    // each in its own task, so one waiting out the dead
                    // owner's reply timeout does not blur the measure.
                    let Ok(permit) = probes.clone().acquire_owned().await else {
                        break;
                    };
                    in_flight.push(tokio::spawn(async move {
                        post.await;
                        drop(permit);
                    }));
                    tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
                    continue;
                }
                post.await;
                // The baseline's pace, cut short by a kill (the probes
                // start at once).
                let due_ms = clock.ms() + interval_ms;
                while clock.ms() < due_ms
                    && !stop.load(Ordering::Relaxed)
                    && killed_at.load(Ordering::Relaxed) <= sent_ms
                {
                    tokio::time::sleep(Duration::from_millis(PROBE_INTERVAL_MS)).await;
                }
            }
            for probe in in_flight {
                let _ = probe.await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(size.baseline_ms)).await;

    // Trigger: the seeded choice of a guilds process, killed.
    let victim_index = (options.seed % size.guilds_nodes as u64) as usize;
    let victim = guilds_nodes[victim_index].clone();
    let owned = cluster.metric(&victim, "guildhall_guild_owners").await;
    let victim_pid = cluster.pid(&victim);
    cluster.signal(&victim, "KILL");
    let kill_ms = clock.ms().max(1);
    killed_at.store(kill_ms, Ordering::Relaxed);
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
    let served_by = async |fault_ms: u64| loop {
        let served = lock(&served_again).clone();
        if served.iter().all(Option::is_some) {
            break served.iter().flatten().max().copied();
        }
        if clock.ms() > fault_ms + size.recovery_wait_ms_max {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let recovered_ms = served_by(kill_ms).await;
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
    lock(&served_again).iter_mut().for_each(|s| *s = None);
    cluster.expect_exit(&leaver);
    cluster.signal(&leaver, "TERM");
    let leave_ms = clock.ms();
    killed_at.store(leave_ms, Ordering::Relaxed);
    events.push(Mark {
        at_ms: leave_ms,
        label: format!(
            "SIGTERM {leaver} (pid {leaver_pid}), owner of {left_owned} guilds: a graceful leave"
        ),
    });
    let left_served_ms = served_by(leave_ms).await;
    let leave_recovery_ms = left_served_ms.map(|at| at.saturating_sub(leave_ms));
    if let Some(at) = left_served_ms {
        events.push(Mark {
            at_ms: at,
            label: "every guild served again after the leave".to_owned(),
        });
    }
    stop_posts.store(true, Ordering::Relaxed);
    for poster in posters {
        let _ = poster.await;
    }
    let posting_ended_ms = clock.ms();

    // The history, judged until the cluster made good what the kill cut.
    let check = || {
        let (mut entries, cut) = history.snapshot();
        let ended: BTreeSet<String> = entries
            .iter()
            .filter_map(|e| match e {
                Entry::SessionEnd { session, .. } => Some(session.clone()),
                _ => None,
            })
            .collect();
        let at_us = clock.us();
        for session in &sessions.recording {
            if !ended.contains(session) {
                entries.push(Entry::SessionEnd {
                    at_us,
                    session: session.clone(),
                });
            }
        }
        (history::check(&entries, 0), cut)
    };
    let (mut checked, mut cut) = check();
    let mut pause_ms = 100;
    while checked.breaches_total() > 0 && clock.ms() < posting_ended_ms + SETTLE_MS_MAX {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        pause_ms = (pause_ms * 2).min(2_000);
        (checked, cut) = check();
    }
    let duration_ms = clock.ms();
    stop_sampler.store(true, Ordering::Relaxed);
    let samples = sampler.await.map_err(|e| e.to_string())?;
    cluster.check_exits();
    let deliveries = lock(&sessions.deliveries).clone();
    sessions.close();

    // Criteria.
    // The loads were read before the leave, over one more process.
    let live = (guilds_nodes.len() + 1) as f64;
    let bound = (1.25 * size.guilds as f64 / live).ceil();
    let max_load = loads.iter().copied().fold(0.0, f64::max);
    let posts = lock(&posts).clone();
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
            bound: format!("≤ ⌈1.25 × {} / {live}⌉ = {bound}", size.guilds),
            measured: max_load,
            unit: "guilds".to_owned(),
            pass: max_load <= bound && loads.iter().sum::<f64>() == size.guilds as f64,
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

/// One series per process of a sampled metric.
fn per_process(samples: &harness::Samples, metric: &str, scale: f64) -> Vec<Series> {
    samples
        .iter()
        .filter(|((_, m), _)| m == metric)
        .map(|((label, _), points)| Series {
            label: label.clone(),
            points: points.iter().map(|&(t, v)| (t, v * scale)).collect(),
        })
        .collect()
}

fn charts(
    posts: &[Post],
    deliveries: &[u64],
    samples: &harness::Samples,
    end_ms: u64,
) -> Vec<Chart> {
    let done = |ok: bool| -> Vec<u64> {
        posts
            .iter()
            .filter(|p| p.ok == ok)
            .map(|p| p.done_ms)
            .collect()
    };
    let latency: Vec<(u64, f64)> = posts
        .iter()
        .filter(|p| p.ok)
        .map(|p| (p.done_ms, (p.done_ms - p.sent_ms) as f64))
        .collect();
    // Per-second rates of sampled counters. CPU time is in clock ticks,
    // 100 per second of one core: its rate is the % of one core.
    let rate = |series: Vec<Series>| -> Vec<Series> {
        series
            .into_iter()
            .map(|s| Series {
                label: s.label,
                points: report::counter_rate(&s.points),
            })
            .collect()
    };
    let owners: Vec<Series> = per_process(samples, "guildhall_guild_owners", 1.0)
        .into_iter()
        .filter(|s| s.label.starts_with("guilds"))
        .collect();
    let loads: Vec<Series> = per_process(samples, "guildhall_guild_loads_in_flight", 1.0)
        .into_iter()
        .filter(|s| s.label.starts_with("guilds"))
        .collect();
    let ring: Vec<Series> = per_process(samples, "guildhall_ring_members", 1.0)
        .into_iter()
        .filter(|s| s.label.starts_with("front"))
        .collect();
    vec![
        Chart {
            title: "Posts answered".to_owned(),
            unit: "per s".to_owned(),
            series: vec![
                Series {
                    label: "acknowledged (2xx)".to_owned(),
                    points: report::rate_per_s(&done(true), BUCKET_MS, end_ms),
                },
                Series {
                    label: "failed or no answer".to_owned(),
                    points: report::rate_per_s(&done(false), BUCKET_MS, end_ms),
                },
            ],
        },
        Chart {
            title: "Post latency, acknowledged posts".to_owned(),
            unit: "ms".to_owned(),
            series: vec![
                Series {
                    label: "p50".to_owned(),
                    points: report::percentile_per_bucket(&latency, BUCKET_MS, 50.0),
                },
                Series {
                    label: "p99".to_owned(),
                    points: report::percentile_per_bucket(&latency, BUCKET_MS, 99.0),
                },
            ],
        },
        Chart {
            title: "Messages delivered to the recording sessions".to_owned(),
            unit: "per s".to_owned(),
            series: vec![Series {
                label: "MESSAGE_CREATE".to_owned(),
                points: report::rate_per_s(deliveries, BUCKET_MS, end_ms),
            }],
        },
        Chart {
            title: "Guilds owned per guilds process".to_owned(),
            unit: "guilds".to_owned(),
            series: owners,
        },
        Chart {
            title: "Guild loads in flight per guilds process".to_owned(),
            unit: "loads".to_owned(),
            series: loads,
        },
        Chart {
            title: "Ring members as each front sees them".to_owned(),
            unit: "guilds processes".to_owned(),
            series: ring,
        },
        Chart {
            title: "Resident memory per process".to_owned(),
            unit: "MiB".to_owned(),
            series: per_process(samples, "rss_mib", 1.0),
        },
        Chart {
            title: "CPU per process".to_owned(),
            unit: "% of one core".to_owned(),
            series: rate(per_process(samples, "cpu_ticks", 1.0)),
        },
        Chart {
            title: "Log lines per process".to_owned(),
            unit: "per s".to_owned(),
            series: rate(per_process(samples, "log_lines", 1.0)),
        },
        Chart {
            title: "Open file descriptors per process".to_owned(),
            unit: "files".to_owned(),
            series: per_process(samples, "open_files", 1.0),
        },
    ]
}
