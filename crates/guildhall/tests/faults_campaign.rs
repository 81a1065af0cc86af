//! The delivery campaign's first form: a real cluster (two gateway+api
//! processes, three guilds processes, over real NATS, etcd and
//! PostgreSQL), a workload of concurrent posts through both api processes
//! into several guilds, a session on each gateway recording every
//! GUILD_CREATE and message it hears, and a nemesis applying a seeded
//! schedule of `kill -9` (and restart) and SIGSTOP/SIGCONT to the guilds
//! processes, a pause of nats-server and a restart of etcd, one fault at
//! a time. The whole history
//! is then judged by `guildhall_faults::history::check`.
//!
//! Sizes: `GUILDHALL_TEST_SEED` picks the schedule (printed first, with the
//! schedule); `GUILDHALL_TEST_FAULTS_SECONDS` how long the nemesis runs
//! (CI's smoke size by default). A long run (through `cargo test`: the
//! nextest profile ends a test after 5 minutes):
//! `GUILDHALL_TEST_FAULTS_SECONDS=3600 cargo test -p guildhall --test faults_campaign -- --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures_util::{SinkExt, StreamExt};
use guildhall_faults::history::{self, Entry};
use guildhall_sandbox::{Node, Service, Services};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the nemesis runs unless `GUILDHALL_TEST_FAULTS_SECONDS` says.
const SMOKE_SECONDS: u64 = 20;
const GUILDS: usize = 6;
const POSTERS: usize = 2;
/// How long the checker is run again after the nemesis stops, while the
/// cluster makes good what the faults cut (outbox retries, resyncs).
const SETTLE_MS_MAX: u64 = 30_000;
/// First and longest pause between two checks while settling: the pause
/// doubles, so a long run's history (checked whole each time) is not
/// re-read hundreds of times.
const SETTLE_PAUSE_MS: (u64, u64) = (100, 5_000);
/// Polls (50 ms apart) of a condition while setting up.
const POLLS_MAX: usize = 600;
/// A post with no answer in this long is indeterminate.
const POST_TIMEOUT_MS: u64 = 5_000;

/// Short leases, so a killed or stopped guilds process leaves the ring in
/// about two seconds and its guilds are served again.
const ENV: [(&str, &str); 6] = [
    ("GUILDHALL_LEASE_TTL_MS", "2000"),
    ("GUILDHALL_LEASE_RENEW_INTERVAL_MS", "500"),
    ("GUILDHALL_MEMBER_PERMANENT_DOWN_MS", "600"),
    ("GUILDHALL_PLACEMENT_REFRESH_INTERVAL_MS", "200"),
    ("GUILDHALL_REST_RATE_LIMIT_PER_WINDOW", "1000000"),
    // A killed process restarts under a new name while the dead one is
    // still listed: two members down at once must not freeze the ring
    // (self-preservation against a registry partition has tests of its
    // own).
    ("GUILDHALL_SELF_PRESERVATION_REMOVALS_MIN", "3"),
];

/// One fault of the schedule.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `kill -9` the guilds process, start it again after `down_ms`.
    Kill { victim: usize, down_ms: u64 },
    /// SIGSTOP it, SIGCONT after `stopped_ms` (past the lease TTL or not).
    Stop { victim: usize, stopped_ms: u64 },
    /// SIGSTOP nats-server, SIGCONT after `paused_ms`: every process's bus
    /// stalls at once (publishes buffer or are refused, requests time out).
    PauseNats { paused_ms: u64 },
    /// `kill -9` etcd and start it again on the same ports and data: every
    /// lease renewal and watch breaks and reconnects.
    RestartEtcd,
}

/// SplitMix64 over the seed and a counter: the schedule is a function of
/// the seed alone (no generator crate for a dozen lines).
fn mix(seed: u64, n: u64) -> u64 {
    let mut x = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The seeded schedule: (pause before, fault), filling `seconds`.
fn schedule(seed: u64, seconds: u64, processes: usize) -> Vec<(u64, Fault)> {
    let mut faults = Vec::new();
    let mut total_ms = 0;
    let mut n = 0;
    while total_ms < seconds * 1_000 {
        let mut next = || {
            n += 1;
            mix(seed, n)
        };
        let pause_ms = 500 + next() % 2_500;
        let victim = (next() % processes as u64) as usize;
        // Process faults three times as often as service faults.
        let fault = match next() % 8 {
            0..=2 => Fault::Kill {
                victim,
                down_ms: 500 + next() % 4_000,
            },
            3..=5 => Fault::Stop {
                victim,
                stopped_ms: 200 + next() % 4_000,
            },
            6 => Fault::PauseNats {
                paused_ms: 200 + next() % 2_000,
            },
            _ => Fault::RestartEtcd,
        };
        let length_ms = match fault {
            Fault::Kill { down_ms, .. } => down_ms,
            Fault::Stop { stopped_ms, .. } => stopped_ms,
            Fault::PauseNats { paused_ms } => paused_ms,
            Fault::RestartEtcd => 1_000,
        };
        total_ms += pause_ms + length_ms;
        faults.push((pause_ms, fault));
    }
    faults
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn spawn(services: &Services, name: &str, worker: u16, roles: &str) -> Node {
    Node::spawn_with_env(
        std::path::Path::new(env!("CARGO_BIN_EXE_guildhall")),
        services,
        name,
        worker,
        roles,
        &[],
        &ENV,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

async fn metric(http: &reqwest::Client, addr: &str, name: &str) -> u64 {
    let Ok(answer) = http.get(format!("http://{addr}/metrics")).send().await else {
        return 0;
    };
    let text = answer.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..POLLS_MAX {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

type Log = Arc<Mutex<Vec<Entry>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_fault_campaign_loses_nothing_acknowledged() {
    let seed = env_u64("GUILDHALL_TEST_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let seconds = env_u64("GUILDHALL_TEST_FAULTS_SECONDS").unwrap_or(SMOKE_SECONDS);
    let plan = schedule(seed, seconds, 3);
    eprintln!("fault campaign seed {seed} (rerun with GUILDHALL_TEST_SEED={seed}), {seconds} s");
    eprintln!("schedule: {plan:?}");

    let services = Services::start(&[Service::Nats, Service::Etcd, Service::Postgres])
        .unwrap_or_else(|e| panic!("{e}"));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(POST_TIMEOUT_MS))
        .build()
        .unwrap();
    let fronts = [
        spawn(&services, "front-1", 1, "gateway,api,users,presence"),
        spawn(&services, "front-2", 2, "gateway,api"),
    ];
    let mut guilds: Vec<Option<Node>> = (1..=3u16)
        .map(|i| Some(spawn(&services, &format!("guilds-{i}"), 2 + i, "guilds")))
        .collect();
    wait_for("three guilds members", async || {
        metric(&http, fronts[0].addr(), "guildhall_ring_members").await == 3
            && metric(&http, fronts[1].addr(), "guildhall_ring_members").await == 3
    })
    .await;
    let api = |front: &Node| format!("http://{}/api/v10", front.addr());
    let user: Value = http
        .post(format!("{}/auth/register", api(&fronts[0])))
        .json(&json!({"username": "alice", "password": "password123"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = user["token"].as_str().unwrap().to_owned();
    let user_id: i64 = user["user_id"].as_str().unwrap().parse().unwrap();
    let mut channels = Vec::new();
    for i in 0..GUILDS {
        let guild: Value = http
            .post(format!("{}/guilds", api(&fronts[0])))
            .header("authorization", &token)
            .json(&json!({"name": format!("campaign {i}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        channels.push((
            guild["id"].as_str().unwrap().parse::<i64>().unwrap(),
            guild["channels"][0]["id"].as_str().unwrap().to_owned(),
        ));
    }
    wait_for("placement of every guild", async || {
        metric(&http, fronts[0].addr(), "guildhall_placement_guilds").await == GUILDS as u64
    })
    .await;
    let started = Instant::now();
    let now_us = move || started.elapsed().as_micros() as u64;
    let log: Log = Arc::new(Mutex::new(
        channels
            .iter()
            .map(|(guild, _)| Entry::Membership {
                at_us: 0,
                user: user_id,
                guild: *guild,
                member: true,
            })
            .collect(),
    ));

    // A session on each gateway, following every guild.
    let mut sessions = Vec::new();
    let mut readers = Vec::new();
    for front in &fronts {
        let url = format!("ws://{}/?v=10&encoding=json", front.addr());
        let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        ws.next().await.unwrap().unwrap();
        let identify = json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": 1 | 512 | 32768,
            "properties": {"os": "linux", "browser": "campaign", "device": "campaign"}}});
        ws.send(tokio_tungstenite::tungstenite::Message::Text(
            identify.to_string().into(),
        ))
        .await
        .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let log = log.clone();
        readers.push(tokio::spawn(async move {
            let mut tx = Some(tx);
            let mut session = String::new();
            while let Some(Ok(frame)) = ws.next().await {
                let tokio_tungstenite::tungstenite::Message::Text(text) = frame else {
                    continue;
                };
                let frame: Value = serde_json::from_str(&text).unwrap();
                let at_us = now_us();
                let id = |v: &Value| v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
                let entry = match frame["t"].as_str() {
                    Some("READY") => {
                        session = frame["d"]["session_id"].as_str().unwrap().to_owned();
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(session.clone());
                        }
                        Entry::SessionStart {
                            at_us,
                            session: session.clone(),
                            user: user_id,
                        }
                    }
                    Some("GUILD_CREATE") => Entry::Resync {
                        at_us,
                        session: session.clone(),
                        guild: id(&frame["d"]["id"]),
                    },
                    Some("MESSAGE_CREATE") => Entry::Deliver {
                        at_us,
                        session: session.clone(),
                        guild: id(&frame["d"]["guild_id"]),
                        key: frame["d"]["content"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                        seq: frame["s"].as_u64().unwrap_or(0),
                    },
                    _ => continue,
                };
                log.lock().unwrap().push(entry);
            }
        }));
        sessions.push(rx.await.unwrap());
    }

    // The workload: each poster through its own api process, round-robin
    // over the guilds, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let mut posters = Vec::new();
    for p in 0..POSTERS {
        let (http, api, token, channels, stop, log) = (
            http.clone(),
            api(&fronts[p % fronts.len()]),
            token.clone(),
            channels.clone(),
            stop.clone(),
            log.clone(),
        );
        posters.push(tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let (guild, channel) = &channels[(i + p) % channels.len()];
                let key = format!("p{p}-{i}");
                i += 1;
                log.lock().unwrap().push(Entry::Invoke {
                    at_us: now_us(),
                    guild: *guild,
                    key: key.clone(),
                    via: format!("front-{}", p % 2 + 1),
                });
                let answer = http
                    .post(format!("{api}/channels/{channel}/messages"))
                    .header("authorization", &token)
                    .json(&json!({ "content": key }))
                    .send()
                    .await;
                // A 5xx or no answer leaves the send indeterminate.
                if let Ok(answer) = answer
                    && answer.status().as_u16() < 500
                {
                    log.lock().unwrap().push(Entry::Complete {
                        at_us: now_us(),
                        key,
                        ok: answer.status().is_success(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }

    // The nemesis.
    let mut applied = Vec::new();
    let mut restarts = 0u16;
    for (pause_ms, fault) in &plan {
        tokio::time::sleep(Duration::from_millis(*pause_ms)).await;
        match *fault {
            Fault::Kill { victim, down_ms } => {
                let node = guilds[victim].take().unwrap();
                node.signal("KILL");
                drop(node);
                tokio::time::sleep(Duration::from_millis(down_ms)).await;
                // A new incarnation: a name and a worker id of its own (the
                // dead one's lease holds its old ones until it expires).
                restarts += 1;
                guilds[victim] = Some(spawn(
                    &services,
                    &format!("guilds-{}-{restarts}", victim + 1),
                    10 + restarts,
                    "guilds",
                ));
            }
            Fault::Stop { victim, stopped_ms } => {
                let node = guilds[victim].as_ref().unwrap();
                node.signal("STOP");
                tokio::time::sleep(Duration::from_millis(stopped_ms)).await;
                node.signal("CONT");
            }
            Fault::PauseNats { paused_ms } => {
                let pid = services.pid(Service::Nats).unwrap().to_string();
                let signal = |name: &str| {
                    std::process::Command::new("kill")
                        .args([name, &pid])
                        .status()
                        .unwrap()
                };
                signal("-STOP");
                tokio::time::sleep(Duration::from_millis(paused_ms)).await;
                signal("-CONT");
            }
            Fault::RestartEtcd => services.restart_etcd().unwrap_or_else(|e| panic!("{e}")),
        }
        applied.push(*fault);
        // One fault at a time: the ring's removal budget lets one member
        // go per window, and two down together would freeze it.
        wait_for("the ring back at three members", async || {
            metric(&http, fronts[0].addr(), "guildhall_ring_members").await == 3
                && metric(&http, fronts[1].addr(), "guildhall_ring_members").await == 3
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    for poster in posters {
        poster.await.unwrap();
    }

    // Until the cluster made good what the faults cut: a bound on the
    // wait. The first check is printed at once, so a run stopped while it
    // settles still says what it found.
    let check_now = || {
        let mut run = log.lock().unwrap().clone();
        let at_us = now_us();
        run.extend(sessions.iter().map(|session| Entry::SessionEnd {
            at_us,
            session: session.clone(),
        }));
        let started = Instant::now();
        let report = history::check(&run, 0);
        (report, run.len(), started.elapsed())
    };
    let (mut report, entries, took) = check_now();
    eprintln!(
        "seed {seed}: first check ({entries} entries, {} ms): breaches {}, anomalies {:?}",
        took.as_millis(),
        report.breaches_total(),
        report.counts
    );
    let settle_until = Instant::now() + Duration::from_millis(SETTLE_MS_MAX);
    let mut pause_ms = SETTLE_PAUSE_MS.0;
    while report.breaches_total() > 0 && Instant::now() < settle_until {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        pause_ms = (pause_ms * 2).min(SETTLE_PAUSE_MS.1);
        report = check_now().0;
    }
    eprintln!(
        "seed {seed}: {} faults applied; sent {}, acknowledged {}, indeterminate {}, \
         deliveries {}, required {}, excused by a resync {}, anomalies {:?}",
        applied.len(),
        report.sent,
        report.acknowledged,
        report.indeterminate,
        report.deliveries,
        report.required,
        report.excused_by_resync,
        report.counts
    );
    // Events acknowledged by the two api nodes may reach an owner in
    // another order than they were acknowledged (the documented weaker
    // order): counted above, not a breach.
    assert_eq!(
        report.breaches_total(),
        0,
        "seed {seed}: {:#?}",
        report.anomalies
    );
    assert!(report.acknowledged > 0 && report.required > 0);
    for reader in readers {
        reader.abort();
    }
    drop(guilds);
    drop(fronts);
}
