//! Cold guild loads after a restart: distinct guilds load at once, one
//! guild loads once, and the requests that arrive during a load reach the
//! owner in arrival order (a bounded number of them; beyond it, 503 at once).
//!
//! A restarted node (same database, nothing loaded) runs over a bus that
//! holds the users role's batch loads (the step of a guild load that goes
//! over the bus) until the test lets them through, so "loads in flight" is
//! a state the test waits for, not a race it hopes to win. Concurrency is
//! read from the node's gauges, never from wall time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::TestNode;
use bytes::Bytes;
use guildhall_cluster::bus::{BusStats, LocalBus, Message};
use guildhall_cluster::{Bus, BusError, LocalRegistry, Subscription};
use guildhall_limits::Limits;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Polls of a condition before the test gives up (× `POLL_MS`).
const POLLS_MAX: usize = 500;
const POLL_MS: u64 = 20;

/// A bus that holds batch user loads while closed.
#[derive(Debug)]
struct GatedBus {
    inner: Arc<LocalBus>,
    open: tokio::sync::watch::Sender<bool>,
    held: AtomicUsize,
}

impl GatedBus {
    fn new(limits: &Limits) -> Self {
        Self {
            inner: Arc::new(LocalBus::new(limits.bus_payload_bytes_max)),
            open: tokio::sync::watch::Sender::new(false),
            held: AtomicUsize::new(0),
        }
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    fn open(&self) {
        self.open.send_replace(true);
    }
}

#[async_trait::async_trait]
impl Bus for GatedBus {
    fn publish(&self, subject: &str, reply: Option<&str>, payload: Bytes) -> Result<(), BusError> {
        self.inner.publish(subject, reply, payload)
    }

    async fn subscribe(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
    ) -> Result<Subscription, BusError> {
        self.inner
            .subscribe(subject, queue_group, capacity_messages)
            .await
    }

    async fn subscribe_shedding(
        &self,
        subject: &str,
        queue_group: Option<&str>,
        capacity_messages: usize,
        overflow_reply: Bytes,
    ) -> Result<Subscription, BusError> {
        self.inner
            .subscribe_shedding(subject, queue_group, capacity_messages, overflow_reply)
            .await
    }

    async fn request(
        &self,
        subject: &str,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        let is_load =
            subject == "users.requests" && payload.windows(6).any(|w| w == b"\"Load\"".as_slice());
        if is_load && !*self.open.borrow() {
            self.held.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.request(subject, payload, timeout).await
    }

    fn stats(&self) -> &BusStats {
        self.inner.stats()
    }
}

fn limits() -> Limits {
    Limits {
        rest_rate_limit_per_window: 1_000_000,
        // Loads are held on purpose; nothing may time out meanwhile.
        guild_reply_timeout_ms: 60_000,
        users_lookup_timeout_ms: 60_000,
        ..Limits::default()
    }
}

/// Creates `guilds` guilds on a first node, stops it, and starts a second
/// one on the same database behind a closed [`GatedBus`].
async fn cold_node(guilds: usize, limits: Limits) -> Cold {
    let dir = tempfile::tempdir().unwrap();
    let first = TestNode::member_with(
        "before-restart",
        1,
        dir.path(),
        Arc::new(LocalRegistry::default()),
        Arc::new(LocalBus::new(limits.bus_payload_bytes_max)),
        limits.clone(),
    )
    .await;
    let (token, _) = first.register("owner").await;
    let mut ids = Vec::new();
    for i in 0..guilds {
        ids.push(first.guild(&token, &format!("g{i}")).await.0);
    }
    first.stop().await;
    let bus = Arc::new(GatedBus::new(&limits));
    let node = TestNode::member_with(
        "after-restart",
        2,
        dir.path(),
        Arc::new(LocalRegistry::default()),
        bus.clone(),
        limits,
    )
    .await;
    Cold {
        node,
        bus,
        token,
        ids,
        _dir: dir,
    }
}

struct Cold {
    node: TestNode,
    bus: Arc<GatedBus>,
    token: String,
    ids: Vec<String>,
    _dir: tempfile::TempDir,
}

async fn wait_for(what: &str, mut done: impl AsyncFnMut() -> bool) {
    for _ in 0..POLLS_MAX {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(POLL_MS)).await;
    }
    panic!("gave up waiting for {what}");
}

fn spawn_call(
    node: &TestNode,
    method: &'static str,
    path: String,
    token: &str,
    body: Option<Value>,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let (http, base, token) = (node.http.clone(), node.base.clone(), token.to_owned());
    tokio::spawn(async move {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = http
            .request(method, format!("{base}{path}"))
            .header("authorization", format!("Bot {token}"));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_cold_guilds_load_at_once() {
    const GUILDS: usize = 4;
    let Cold {
        node,
        bus,
        token,
        ids,
        _dir,
    } = cold_node(GUILDS, limits()).await;
    let calls: Vec<_> = ids
        .iter()
        .map(|id| spawn_call(&node, "GET", format!("/guilds/{id}"), &token, None))
        .collect();
    // Every load reaches its users batch while the others are still held:
    // one node-wide load lock would let only one get there.
    wait_for("every guild's load to be in flight", async || {
        bus.held() == GUILDS
    })
    .await;
    assert_eq!(
        node.metric("guildhall_guild_loads_in_flight").await,
        GUILDS as u64
    );
    bus.open();
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(
        node.metric("guildhall_guild_loads_in_flight_peak").await,
        GUILDS as u64
    );
    assert_eq!(
        node.metric("guildhall_guild_loads_total").await,
        GUILDS as u64
    );
    assert_eq!(node.metric("guildhall_guild_loads_in_flight").await, 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_a_load_reach_the_owner_in_arrival_order() {
    const ROLES: usize = 8;
    let Cold {
        node,
        bus,
        token,
        ids,
        _dir,
    } = cold_node(1, limits()).await;
    let guild = &ids[0];
    let mut calls = Vec::new();
    for i in 0..ROLES {
        calls.push(spawn_call(
            &node,
            "POST",
            format!("/guilds/{guild}/roles"),
            &token,
            Some(json!({"name": format!("r{i}")})),
        ));
        // The next request leaves only once this one is queued, so the
        // arrival order is the order of `i`.
        if i == 0 {
            wait_for("the load to start", async || bus.held() == 1).await;
        } else {
            wait_for("the request to queue behind the load", async || {
                node.metric("guildhall_guild_load_waiters").await == i as u64
            })
            .await;
        }
    }
    bus.open();
    let mut positions = Vec::new();
    for (i, call) in calls.into_iter().enumerate() {
        let (status, role) = call.await.unwrap();
        assert_eq!(status, 200, "{role}");
        assert_eq!(role["name"], format!("r{i}"));
        positions.push(role["position"].as_i64().unwrap());
    }
    // The owner numbers each new role after the last: applied in arrival
    // order, the positions rise with `i`.
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "roles applied out of order: {positions:?}"
    );
    assert_eq!(node.metric("guildhall_guild_loads_total").await, 1);
    assert_eq!(node.metric("guildhall_guild_load_waiters").await, 0);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_beyond_the_bound_are_refused_at_once() {
    const WAITERS_MAX: usize = 2;
    let limits = Limits {
        guild_load_waiters_max: WAITERS_MAX,
        ..limits()
    };
    let Cold {
        node,
        bus,
        token,
        ids,
        _dir,
    } = cold_node(1, limits).await;
    let path = format!("/guilds/{}", ids[0]);
    let mut calls = vec![spawn_call(&node, "GET", path.clone(), &token, None)];
    wait_for("the load to start", async || bus.held() == 1).await;
    for i in 1..=WAITERS_MAX {
        calls.push(spawn_call(&node, "GET", path.clone(), &token, None));
        wait_for("the request to queue", async || {
            node.metric("guildhall_guild_load_waiters").await == i as u64
        })
        .await;
    }
    // The load is still held: this answer cannot have waited for it.
    let (status, body) = node.call("GET", &path, Some(&token), None).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(node.metric("guildhall_guild_load_refused_total").await, 1);
    bus.open();
    for call in calls {
        let (status, body) = call.await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    node.stop().await;
}
