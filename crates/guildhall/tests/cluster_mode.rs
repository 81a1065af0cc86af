//! Cluster mode as an operator runs it: `guildhall serve` processes with
//! roles of their own over real nats-server, etcd and PostgreSQL (started
//! by `scripts/services.sh` on free loopback ports), faults injected with
//! real tools.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../guildhall-node/tests/it/common.rs"]
mod common;

use common::{Client, TestNode};
use guildhall_sandbox::{Node, Service, Services};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Seed 002's injection: corrupt values written under the discovery
/// prefix at this rate, for `GUILDHALL_TEST_INJECT_S` seconds (30 unless
/// set: the figure).
const INJECT_PER_S: u64 = 100;
const INJECT_S_DEFAULT: u64 = 30;
/// One put in this many goes through etcdctl, as an operator's would; the
/// rest through etcd's JSON gateway (3,000 etcdctl processes would cost
/// the test more than the servers it checks).
const ETCDCTL_EVERY: u64 = 100;
/// Polls (every 100 ms) for a condition before failing; a bound on the
/// wait, not a timed assertion.
const POLLS_MAX: u32 = 600;
const PREFIX: &str = "/guildhall/instances/";

fn binary() -> std::path::PathBuf {
    env!("CARGO_BIN_EXE_guildhall").into()
}

fn start_services() -> Services {
    Services::start(&[Service::Nats, Service::Etcd, Service::Postgres])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn spawn(services: &Services, name: &str, worker_id: u16, roles: &str) -> Node {
    Node::spawn(&binary(), services, name, worker_id, roles, &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Sum of a labelled counter's values on a node's /metrics.
async fn metric_sum(node: &TestNode, name: &str) -> u64 {
    node.metrics_text()
        .await
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// [`common::until`] with this file's bound.
async fn until(what: &str, check: impl AsyncFnMut() -> bool) {
    common::until(what, POLLS_MAX, check).await;
}

/// The `i`-th corrupt value for the key it goes to: the replay's
/// (`guildhall chaos run poisoned-discovery`), kinds taking turns per key.
fn corruption(i: u64, key_node: &str) -> Vec<u8> {
    guildhall_faults::poisoned::corruption(i, i / 5, key_node)
}

fn b64(bytes: &[u8]) -> String {
    // Standard base64 for etcd's JSON gateway (a dozen lines are not worth
    // a dependency in a test).
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Seed 002 across processes: corrupt values under the discovery prefix at
/// 100/s for 30 s while messages flow through a front (gateway, api) to a
/// back (guilds, users, presence). No process exits or panics, the routing
/// view stays the last good one, every injection is counted exactly once
/// on every process, and still is after etcd is killed and restarted
/// (every watch breaks; both processes list again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_discovery_values_under_traffic_change_nothing() {
    let inject_s: u64 = std::env::var("GUILDHALL_TEST_INJECT_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(INJECT_S_DEFAULT);
    let services = start_services();
    let mut back = spawn(&services, "back", 2, "guilds,users,presence");
    let mut front = spawn(&services, "front", 1, "gateway,api");
    let api = TestNode::remote(front.addr());
    let back_metrics = TestNode::remote(back.addr());
    until("the front sees both processes and the ring", async || {
        api.metric("guildhall_registry_instances").await == 2
            && api.metric("guildhall_ring_members").await == 1
    })
    .await;
    // The NATS client's own counters are on /metrics (one connection
    // each, none lost).
    for process in [&api, &back_metrics] {
        assert!(process.metric("guildhall_nats_connects_total").await >= 1);
        assert_eq!(process.metric("guildhall_nats_disconnects_total").await, 0);
    }

    let (token, _) = api.register("alice").await;
    let (guild_id, channel_id) = api.guild(&token, "discovery").await;
    let mut session = Client::connect(&api.ws).await;
    session
        .identify(
            &token,
            guildhall_proto::intents::GUILDS
                | guildhall_proto::intents::GUILD_MESSAGES
                | guildhall_proto::intents::MESSAGE_CONTENT,
        )
        .await;
    assert_eq!(
        session.dispatch("GUILD_CREATE").await["d"]["id"],
        guild_id.as_str()
    );

    // Traffic: one message every 50 ms until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let traffic = {
        let (stop, acknowledged, api) = (
            stop.clone(),
            acknowledged.clone(),
            TestNode::remote(front.addr()),
        );
        let (token, channel_id) = (token.clone(), channel_id.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let (status, body) = api
                    .call(
                        "POST",
                        &format!("/channels/{channel_id}/messages"),
                        Some(&token),
                        Some(json!({"content": format!("m{i}")})),
                    )
                    .await;
                assert_eq!(status, 200, "{body}");
                acknowledged.fetch_add(1, Ordering::Relaxed);
                i += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // The injection, paced at INJECT_PER_S.
    let etcd = services.etcd_endpoint().to_owned();
    let http = reqwest::Client::new();
    let keys = ["front", "back", "ghost-1", "ghost-2", "ghost-3"];
    let total = INJECT_PER_S * inject_s;
    let started = Instant::now();
    for i in 0..total {
        let key_node = keys[(i % 5) as usize];
        let key = format!("{PREFIX}{key_node}");
        let value = corruption(i, key_node);
        if i % ETCDCTL_EVERY == 0 {
            let status = std::process::Command::new("etcdctl")
                .env("ETCDCTL_API", "3")
                .args(["--endpoints", &etcd, "put", "--", &key])
                .arg(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&value))
                .stdout(std::process::Stdio::null())
                .status()
                .expect("etcdctl");
            assert!(status.success());
        } else {
            let response = http
                .post(format!("{etcd}/v3/kv/put"))
                .json(&json!({"key": b64(key.as_bytes()), "value": b64(&value)}))
                .send()
                .await
                .unwrap();
            assert!(
                response.status().is_success(),
                "{:?}",
                response.text().await
            );
        }
        let due = Duration::from_millis((i + 1) * 1000 / INJECT_PER_S);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    }

    for node in [&api, &back_metrics] {
        until("every injection counted", async || {
            metric_sum(node, "guildhall_registry_rejected_entries_total").await >= total
        })
        .await;
        assert_eq!(
            metric_sum(node, "guildhall_registry_rejected_entries_total").await,
            total
        );
        assert_eq!(
            node.metric("guildhall_registry_instances").await,
            2,
            "the last good view"
        );
        assert_eq!(node.metric("guildhall_ring_members").await, 1);
    }

    // Every watch breaks; both processes list again and count nothing twice.
    let relists_before = api.metric("guildhall_registry_relists_total").await;
    services.restart_etcd().unwrap();
    until("the front lists again after etcd restarted", async || {
        api.metric("guildhall_registry_relists_total").await > relists_before
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for node in [&api, &back_metrics] {
        assert_eq!(
            metric_sum(node, "guildhall_registry_rejected_entries_total").await,
            total
        );
        assert_eq!(node.metric("guildhall_registry_instances").await, 2);
    }

    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
    let sent = acknowledged.load(Ordering::Relaxed);
    let mut received = 0;
    while received < sent {
        let frame = session.dispatch("MESSAGE_CREATE").await;
        assert_eq!(
            frame["d"]["content"],
            format!("m{received}"),
            "in order, none lost"
        );
        received += 1;
    }
    assert!(sent > 0);
    for node in [&mut front, &mut back] {
        assert!(
            node.exited().is_none(),
            "{} exited:\n{}",
            node.name(),
            node.log_text()
        );
        assert!(
            !node.log_text().contains("panicked"),
            "{}:\n{}",
            node.name(),
            node.log_text()
        );
    }
    eprintln!(
        "injected {total} corrupt values in {:.1} s; {sent} messages acknowledged and delivered in order",
        started.elapsed().as_secs_f64()
    );
}

/// Seed 000 across processes: a flood of batch member loads against a
/// users process whose NATS subscription is small enough to overflow.
/// Every request is answered (no caller waits out its deadline): the ones
/// the subscription cannot take get the role's retryable Overloaded at
/// once; the drops are counted, the log line about them appears at most
/// once a second, and after the flood every request is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_load_flood_is_refused_fast_and_recovers() {
    use guildhall_cluster::{Bus, BusError, NatsBus, NatsOptions};
    const WORKERS: usize = 256;
    const REQUESTS_PER_WORKER: usize = 40;
    let services = start_services();
    let users = Node::spawn_with_env(
        &binary(),
        &services,
        "users",
        3,
        "users",
        &[],
        &[("GUILDHALL_BUS_SUBSCRIPTION_MESSAGES_MAX", "16")],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let metrics = TestNode::remote(users.addr());
    let bus = Arc::new(
        NatsBus::connect(services.nats_url(), NatsOptions::default())
            .await
            .unwrap(),
    );
    let load = |i: usize| -> bytes::Bytes {
        let ids: Vec<i64> = (0..10)
            .map(|k| 1_000 + ((i * 10 + k) % 3_000) as i64)
            .collect();
        json!({"v": 1, "call": {"Load": {"ids": ids}}})
            .to_string()
            .into()
    };
    let deadline = Duration::from_secs(10);
    let (served, refused, timed_out) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let (bus, served, refused, timed_out) = (
            bus.clone(),
            served.clone(),
            refused.clone(),
            timed_out.clone(),
        );
        workers.push(tokio::spawn(async move {
            for r in 0..REQUESTS_PER_WORKER {
                match bus
                    .request(
                        "users.requests",
                        load(w * REQUESTS_PER_WORKER + r),
                        deadline,
                    )
                    .await
                {
                    Ok(answer) => {
                        let reply: serde_json::Value =
                            serde_json::from_slice(&answer.payload).unwrap();
                        if reply["result"].get("Ok").is_some() {
                            served.fetch_add(1, Ordering::Relaxed);
                        } else {
                            assert_eq!(reply["result"]["Err"], "Overloaded", "{reply}");
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(BusError::Timeout) => {
                        timed_out.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => panic!("{error}"),
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let (served, refused, timed_out) = (
        served.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        timed_out.load(Ordering::Relaxed),
    );
    eprintln!("flood: {served} served, {refused} refused at once, {timed_out} timed out");
    assert_eq!(
        served + refused + timed_out,
        (WORKERS * REQUESTS_PER_WORKER) as u64
    );
    assert_eq!(
        timed_out, 0,
        "every caller was answered before its deadline"
    );
    // Refused by the full subscription (shed, counted as drops, each
    // answered) or by the role's own permit pool behind it.
    let shed = metrics.metric("guildhall_bus_shed_replies_total").await;
    let dropped = metrics.metric("guildhall_bus_dropped_full_total").await;
    eprintln!(
        "users process: {dropped} dropped by the full subscription, {shed} of them answered at once"
    );
    assert!(shed > 0, "the subscription overflowed");
    assert_eq!(dropped, shed, "every drop was answered");
    assert!(refused >= shed);
    // At most one line per second about the drops.
    let log = users.log_text();
    let mut per_second: std::collections::BTreeMap<&str, u32> = std::collections::BTreeMap::new();
    for line in log.lines().filter(|l| l.contains("bus subscription full")) {
        *per_second
            .entry(line.get(..19).unwrap_or(line))
            .or_default() += 1;
    }
    assert!(per_second.values().all(|n| *n <= 1), "{per_second:?}");
    // Recovery: one caller at a time is served again.
    for i in 0..20 {
        let answer = bus
            .request("users.requests", load(i), deadline)
            .await
            .unwrap();
        let reply: serde_json::Value = serde_json::from_slice(&answer.payload).unwrap();
        assert!(reply["result"].get("Ok").is_some(), "{reply}");
    }
    assert!(!log.contains("panicked"));
}
