//! `poisoned-discovery`: seed 002 replayed. Under posts and sessions,
//! corrupt values (empty, truncated, not UTF-8, oversized, of another
//! schema, and well-formed ones naming nodes that do not exist) are
//! written under the discovery prefix, over the keys of every live process
//! and over keys of no process, at `inject_per_s` for `inject_ms`, most
//! through etcd's JSON gateway and one in a hundred with `etcdctl`, as an
//! operator's would be. In the incident every watcher failed to parse an
//! empty value and crash-looped. Here: no process exits, every process's
//! routing view stays the last good one (its instances and its ring never
//! change), every value is counted rejected exactly once on every process,
//! the rejection log stays throttled, and posts keep being acknowledged.
//!
//! Phases: baseline; trigger (the injection); trigger removed (etcd killed
//! and restarted on the same data: every watch breaks and every process
//! lists again, the poisoned values still there; then a process started
//! after the injection, which never saw the good values); recovery
//! (watched until the end).

use crate::catalog::{DiscoverySize, Scenario};
use crate::harness::{Clock, Cluster, Options};
use crate::report::{Chart, Criterion, Mark, Run};
use crate::workload::{self, Workload};
use base64::Engine as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The metrics the sampler keeps for this scenario's charts.
const METRICS: &[&str] = &[
    "guildhall_registry_instances",
    "guildhall_ring_members",
    "guildhall_registry_relists_total",
];
/// The rejected-entries counter (one line per reason).
const REJECTED: &str = "guildhall_registry_rejected_entries_total";
/// The registry prefix the nodes announce under.
const PREFIX: &str = "/guildhall/instances/";
/// One put in this many goes through `etcdctl`; the rest through etcd's
/// JSON gateway (a process per put would cost more than the servers it
/// checks).
const ETCDCTL_EVERY: u64 = 100;
/// Longest wait after the injection for every process to have counted
/// it.
const COUNTED_WAIT_MS: u64 = 10_000;
/// Keys of no process that are poisoned too.
const GHOST_KEYS: [&str; 3] = ["ghost-1", "ghost-2", "ghost-3"];
/// Rejection log lines allowed per process and second of injection: the
/// throttle's one line per second per key, for every poisoned key.
fn log_lines_max(keys: usize, inject_ms: u64) -> f64 {
    (keys as u64 * (inject_ms / 1_000 + 1)) as f64
}

/// The `i`-th corrupt value for `key_node`, of `kind` (0-5). Keys take
/// turns and a key's consecutive values are of different kinds, so every
/// put is a distinct bad value the view must count once (it counts a value
/// equal to the key's last rejected one only once).
pub fn corruption(i: u64, kind: u64, key_node: &str) -> Vec<u8> {
    match kind % 6 {
        0 => Vec::new(),
        1 => format!("{{\"schema\":1,\"node\":\"{key_node}{i}").into_bytes(),
        2 => {
            let mut v = vec![0xff, 0xfe];
            v.extend_from_slice(i.to_string().as_bytes());
            v
        }
        3 => {
            let mut v = vec![b'x'; 4_200];
            v.extend_from_slice(i.to_string().as_bytes());
            v
        }
        4 => format!("{{\"schema\":9,\"n\":{i}}}").into_bytes(),
        _ => serde_json::json!({"schema": 1, "node": format!("other{i}"), "roles": ["guilds"],
                    "addr": "127.0.0.1:9", "started_ms": i})
        .to_string()
        .into_bytes(),
    }
}

/// Replays it.
///
/// # Errors
/// What kept the cluster from starting or the workload from being set up.
pub async fn run(options: &Options) -> Result<Run, String> {
    let size = DiscoverySize::at(options.scale);
    let mut cluster = Cluster::start(&options.binary, &size.env)?;
    let run = replay(options, size, &mut cluster).await;
    cluster.keep_logs(&options.out.join("logs"));
    run
}

/// Sum of a labelled counter on a process.
async fn counter_sum(cluster: &Cluster, process: &str, name: &str) -> f64 {
    cluster
        .metrics(process)
        .await
        .iter()
        .filter(|(k, _)| *k == name || k.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .sum()
}

async fn replay(
    options: &Options,
    size: DiscoverySize,
    cluster: &mut Cluster,
) -> Result<Run, String> {
    let (fronts, guilds_nodes) = cluster.spawn_layout(size.fronts, size.guilds_nodes)?;
    let mut processes: Vec<String> = fronts.iter().chain(&guilds_nodes).cloned().collect();
    let live = processes.len() as f64;
    let ring_members = size.guilds_nodes as f64;
    for process in &processes {
        cluster
            .wait_for("every process in every view", async || {
                cluster
                    .metric(process, "guildhall_registry_instances")
                    .await
                    == live
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

    // Trigger: the injection, paced at inject_per_s.
    let etcd = cluster.services.etcd_endpoint().to_owned();
    let keys: Vec<String> = processes
        .iter()
        .map(String::as_str)
        .chain(GHOST_KEYS)
        .map(str::to_owned)
        .collect();
    let total = size.inject_per_s * size.inject_ms / 1_000;
    let inject_start_ms = clock.ms();
    phases.push(Mark {
        at_ms: inject_start_ms,
        label: "trigger".to_owned(),
    });
    events.push(Mark {
        at_ms: inject_start_ms,
        label: format!(
            "{total} corrupt values under {} keys ({} of live processes) at {}/s",
            keys.len(),
            processes.len(),
            size.inject_per_s
        ),
    });
    let started = Instant::now();
    let mut injected = 0u64;
    let mut refused = Vec::new();
    for i in 0..total {
        let key_node = &keys[(i % keys.len() as u64) as usize];
        let key = format!("{PREFIX}{key_node}");
        let value = corruption(i, i / keys.len() as u64, key_node);
        let written = if i % ETCDCTL_EVERY == 0 {
            let etcd = etcd.clone();
            tokio::task::spawn_blocking(move || {
                std::process::Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .args(["--endpoints", &etcd, "put", "--", &key])
                    .arg(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&value))
                    .stdout(std::process::Stdio::null())
                    .status()
                    .map(|s| s.success())
                    .unwrap_or(false)
            })
            .await
            .unwrap_or(false)
        } else {
            let b64 = base64::engine::general_purpose::STANDARD;
            cluster
                .http()
                .post(format!("{etcd}/v3/kv/put"))
                .json(&serde_json::json!({"key": b64.encode(key.as_bytes()), "value": b64.encode(&value)}))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        };
        if written {
            injected += 1;
        } else if refused.len() < 3 {
            refused.push(i);
        }
        let due = Duration::from_millis((i + 1) * 1_000 / size.inject_per_s.max(1));
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }
    let inject_end_ms = clock.ms();
    events.push(Mark {
        at_ms: inject_end_ms,
        label: format!("injection over: {injected} values written"),
    });
    // Every process counts them (the watch delivers them in order); a
    // bounded wait, after which the count is judged as it stands.
    let counted_by_ms = clock.ms() + COUNTED_WAIT_MS;
    for process in &processes {
        while clock.ms() < counted_by_ms
            && counter_sum(cluster, process, REJECTED).await < injected as f64
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut rejected_after_inject = Vec::new();
    for process in &processes {
        rejected_after_inject.push(counter_sum(cluster, process, REJECTED).await);
    }

    // Trigger removed: etcd killed and restarted on its data (the poisoned
    // values stay): every watch breaks, every process lists again.
    phases.push(Mark {
        at_ms: clock.ms(),
        label: "trigger removed".to_owned(),
    });
    let relists_before = cluster
        .metric(&fronts[0], "guildhall_registry_relists_total")
        .await;
    cluster.services.restart_etcd()?;
    events.push(Mark {
        at_ms: clock.ms(),
        label: "etcd killed and restarted: every process lists again".to_owned(),
    });
    let relisted = cluster
        .wait_for("a fresh listing after the restart", async || {
            cluster
                .metric(&fronts[0], "guildhall_registry_relists_total")
                .await
                > relists_before
        })
        .await
        .is_ok();
    // A process that never saw the good values: the live processes must
    // have made their own keys good again.
    let late = "front-late".to_owned();
    let late_start_ms = clock.ms();
    cluster.spawn(&late, 50, "gateway,api")?;
    events.push(Mark {
        at_ms: clock.ms(),
        label: format!("{late} started after the injection"),
    });
    let everyone = live + 1.0;
    let late_sees_all = cluster
        .wait_for("the late process sees every live process", async || {
            cluster.metric(&late, "guildhall_registry_instances").await == everyone
        })
        .await
        .is_ok();
    let late_sees = cluster.metric(&late, "guildhall_registry_instances").await;
    processes.push(late);
    phases.push(Mark {
        at_ms: clock.ms(),
        label: "recovery".to_owned(),
    });
    tokio::time::sleep(Duration::from_millis(size.observe_ms)).await;
    let mut rejected_at_end = Vec::new();
    for process in processes.iter().take(rejected_after_inject.len()) {
        rejected_at_end.push(counter_sum(cluster, process, REJECTED).await);
    }
    let (checked, cut) = workload.stop_and_check().await;
    let duration_ms = clock.ms();
    stop_sampler.store(true, Ordering::Relaxed);
    let samples = sampler.await.map_err(|e| e.to_string())?;
    cluster.check_exits();
    let (posts, deliveries) = workload.finish();

    // Over the sampled views: the fewest and most instances and ring
    // members any original process saw from the injection until the late
    // process joined (one more instance from then on).
    let seen = |metric: &str| -> (f64, f64) {
        samples
            .iter()
            .filter(|((label, m), _)| m == metric && label != "front-late")
            .flat_map(|(_, points)| {
                points
                    .iter()
                    .filter(|(t, _)| *t >= inject_start_ms && *t < late_start_ms)
            })
            .fold((f64::INFINITY, 0.0f64), |(lo, hi), &(_, v)| {
                (lo.min(v), hi.max(v))
            })
    };
    let (instances_min, instances_max) = seen("guildhall_registry_instances");
    let (ring_min, ring_max) = seen("guildhall_ring_members");
    let miscounted = rejected_after_inject
        .iter()
        .filter(|&&n| n != injected as f64)
        .count();
    let recounted = rejected_after_inject
        .iter()
        .zip(&rejected_at_end)
        .filter(|(a, b)| a != b)
        .count();
    let log_lines_inject = samples
        .iter()
        .filter(|((_, m), _)| m == "log_lines")
        .map(|(_, points)| {
            let at = |t: u64| {
                points
                    .iter()
                    .rev()
                    .find(|(at, _)| *at <= t)
                    .map_or(0.0, |p| p.1)
            };
            at(inject_end_ms + 1_000) - at(inject_start_ms)
        })
        .fold(0.0f64, f64::max);
    let log_bound = log_lines_max(keys.len(), size.inject_ms);
    let trigger_posts: Vec<_> = posts
        .iter()
        .filter(|p| p.sent_ms >= inject_start_ms && p.sent_ms <= inject_end_ms)
        .collect();
    let trigger_failed = trigger_posts.iter().filter(|p| !p.ok).count();
    let criteria = vec![
        Criterion {
            name: "processes that exited".to_owned(),
            bound: "= 0".to_owned(),
            measured: cluster.unexpected_exits.len() as f64,
            unit: "processes".to_owned(),
            pass: cluster.unexpected_exits.is_empty(),
        },
        Criterion {
            name: "instances in any process's view from the injection on (most)".to_owned(),
            bound: format!("= {live} (the last good set)"),
            measured: instances_max,
            unit: format!("instances (fewest {instances_min})"),
            pass: instances_min == live && instances_max == live,
        },
        Criterion {
            name: "ring members in any process's view from the injection on (most)".to_owned(),
            bound: format!("= {ring_members}"),
            measured: ring_max,
            unit: format!("members (fewest {ring_min})"),
            pass: ring_min == ring_members && ring_max == ring_members,
        },
        Criterion {
            name: "processes whose rejected count differs from the values injected".to_owned(),
            bound: format!("= 0 (each counts {injected})"),
            measured: miscounted as f64,
            unit: "processes".to_owned(),
            pass: miscounted == 0 && injected == total,
        },
        Criterion {
            name: "processes that counted a value again after etcd's restart (a fresh listing)"
                .to_owned(),
            bound: "= 0".to_owned(),
            measured: recounted as f64,
            unit: "processes".to_owned(),
            pass: recounted == 0 && relisted,
        },
        Criterion {
            name: "instances a process started after the injection sees".to_owned(),
            bound: format!("= {everyone} (every live process and itself)"),
            measured: late_sees,
            unit: "instances".to_owned(),
            pass: late_sees_all,
        },
        Criterion {
            name: "log lines of one process over the injection (most)".to_owned(),
            bound: format!("≤ {log_bound} (one a second per poisoned key)"),
            measured: log_lines_inject,
            unit: "lines".to_owned(),
            pass: log_lines_inject <= log_bound,
        },
        Criterion {
            name: "posts sent during the injection that were not acknowledged".to_owned(),
            bound: "= 0".to_owned(),
            measured: trigger_failed as f64,
            unit: format!("posts (of {})", trigger_posts.len()),
            pass: trigger_failed == 0 && !trigger_posts.is_empty(),
        },
        Criterion {
            name: "acknowledged messages missing, duplicated, reordered or misdelivered (history checker)"
                .to_owned(),
            bound: "= 0".to_owned(),
            measured: checked.breaches_total() as f64,
            unit: "events".to_owned(),
            pass: checked.breaches_total() == 0 && !cut && checked.required > 0,
        },
    ];
    let figures = vec![
        (
            "values injected".to_owned(),
            format!("{injected} of {total}"),
        ),
        (
            "puts refused by etcd (first)".to_owned(),
            format!("{refused:?}"),
        ),
        (
            "rejected per process after the injection".to_owned(),
            format!("{rejected_after_inject:?}"),
        ),
        (
            "rejected per process at the end".to_owned(),
            format!("{rejected_at_end:?}"),
        ),
        ("posts sent".to_owned(), posts.len().to_string()),
        (
            "posts acknowledged".to_owned(),
            posts.iter().filter(|p| p.ok).count().to_string(),
        ),
        (
            "deliveries checked on the recording sessions".to_owned(),
            format!("{} (required {})", checked.deliveries, checked.required),
        ),
        (
            "processes that exited by themselves".to_owned(),
            format!("{:?}", cluster.unexpected_exits),
        ),
    ];
    let mut charts = workload::workload_charts(&posts, &deliveries, duration_ms);
    charts.extend([
        Chart {
            title: "Instances in each process's routing view".to_owned(),
            unit: "instances".to_owned(),
            series: workload::per_process(&samples, "guildhall_registry_instances", ""),
        },
        Chart {
            title: "Ring members in each process's view".to_owned(),
            unit: "guilds processes".to_owned(),
            series: workload::per_process(&samples, "guildhall_ring_members", ""),
        },
        Chart {
            title: "Registry listings (a broken watch lists again)".to_owned(),
            unit: "listings".to_owned(),
            series: workload::per_process(&samples, "guildhall_registry_relists_total", ""),
        },
    ]);
    charts.extend(workload::process_charts(&samples));
    Ok(Run {
        scenario: Scenario::PoisonedDiscovery,
        scale: options.scale,
        seed: options.seed,
        configuration: "guildhall".to_owned(),
        command: format!(
            "guildhall chaos run {} --scale {} --seed {}",
            Scenario::PoisonedDiscovery.name(),
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
