//! Guild owners move with placement: several nodes in one process over one
//! in-process registry, bus and database (as in `cluster.rs`). A front node
//! (gateway, api, users, presence) and guilds nodes; guilds nodes leave,
//! join, or go stale, under message load, and the tests hold what clients
//! see: every message answered 200 is in history and was delivered, every
//! session of a moved guild got a fresh GUILD_CREATE, loads stay within
//! ⌈1.25 × average⌉, and a stale owner's events and writes are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use futures_util::StreamExt;
use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
use guildhall_common::cluster::ClusterState;
use guildhall_limits::Limits;
use guildhall_proto::cluster::Role;
use guildhall_proto::intents;
use guildhall_ring::Ring;
use guildhall_ring::bounded::capacity_for;
use guildhall_ring::hash::member_id_of;
use guildhall_ring::placement::Placement;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Polls (25 ms apart) before a wait gives up: a bound, not a timing
/// assertion.
const POLLS_MAX: usize = 800;
const GUILDS: usize = 12;

/// Short leases and hysteresis so a departed member leaves the ring in
/// about two seconds; the default removal budget (one member per window
/// whatever the share) lets one of three guilds nodes go.
fn limits() -> Limits {
    Limits {
        rest_rate_limit_per_window: 1_000_000,
        lease_ttl_ms: 1_500,
        lease_renew_interval_ms: 300,
        member_permanent_down_ms: 300,
        placement_refresh_interval_ms: 200,
        ..Limits::default()
    }
}

struct Cluster {
    dir: tempfile::TempDir,
    registry: Arc<dyn Registry>,
    bus: Arc<dyn Bus>,
    front: TestNode,
    guilds: BTreeMap<String, (TestNode, Arc<ClusterState>)>,
}

impl Cluster {
    async fn start(guild_nodes: &[&str]) -> Self {
        Self::start_with(guild_nodes, limits()).await
    }

    /// Every node, the front included, on `limits`.
    async fn start_with(guild_nodes: &[&str], limits: Limits) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
        let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(Limits::default().bus_payload_bytes_max));
        let front = TestNode::member_roles_with(
            "front",
            1,
            dir.path(),
            registry.clone(),
            bus.clone(),
            &[Role::Gateway, Role::Api, Role::Users, Role::Presence],
            limits.clone(),
            None,
        )
        .await;
        // Migrated before the others open the same SQLite file.
        front.metric("guildhall_ring_members").await;
        let mut cluster = Self {
            dir,
            registry,
            bus,
            front,
            guilds: BTreeMap::new(),
        };
        for name in guild_nodes {
            cluster.add(name, limits.clone()).await;
        }
        cluster.wait_ring(guild_nodes.len()).await;
        cluster
    }

    async fn add(&mut self, name: &str, limits: Limits) {
        let bus = self.bus.clone();
        self.add_on(name, limits, bus).await;
    }

    /// A guilds node on its own view of the bus (a fault-injecting one).
    async fn add_on(&mut self, name: &str, limits: Limits, bus: Arc<dyn Bus>) {
        let state = Arc::new(ClusterState::default());
        let worker = 2 + self.guilds.len() as u16 + u16::from(name.len() as u8);
        let node = TestNode::member_roles_with(
            name,
            worker,
            self.dir.path(),
            self.registry.clone(),
            bus,
            &[Role::Guilds],
            limits,
            Some(state.clone()),
        )
        .await;
        node.metric("guildhall_ring_members").await;
        self.guilds.insert(name.to_owned(), (node, state));
    }

    /// Until the front and every live guilds node see `members`.
    async fn wait_ring(&self, members: usize) {
        for _ in 0..POLLS_MAX {
            let mut all = self.front.metric("guildhall_ring_members").await == members as u64;
            for (node, state) in self.guilds.values() {
                if !state.partitioned.load(std::sync::atomic::Ordering::Relaxed) {
                    all &= node.metric("guildhall_ring_members").await == members as u64;
                }
            }
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("the ring never reached {members} members");
    }

    /// Until the placement of the front and of every live guilds node
    /// covers `guilds` guilds (each node refreshes its own on its own
    /// clock, so the front's alone says nothing of the others').
    async fn wait_placed(&self, guilds: usize) {
        for _ in 0..POLLS_MAX {
            let mut all = self.front.metric("guildhall_placement_guilds").await == guilds as u64;
            for (node, state) in self.guilds.values() {
                if !state.partitioned.load(std::sync::atomic::Ordering::Relaxed) {
                    all &= node.metric("guildhall_placement_guilds").await == guilds as u64;
                }
            }
            if all {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("placement never covered {guilds} guilds");
    }

    /// Until the guilds nodes run `total` owners between them and none more
    /// than `cap`: an owner started under an older placement (a guild
    /// created while the others were not yet listed) stops once its node's
    /// placement refreshes, so loads are held once they settle, within
    /// the polling bound, not at one arbitrary instant.
    async fn settled_loads(&self, total: u64, cap: u64) -> BTreeMap<String, u64> {
        let mut loads = BTreeMap::new();
        for _ in 0..POLLS_MAX {
            loads = self.loads().await;
            if loads.values().sum::<u64>() == total && loads.values().all(|l| *l <= cap) {
                return loads;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("loads never settled at {total} with none over {cap}: {loads:?}");
    }

    /// Owners running on each guilds node that is not cut off.
    async fn loads(&self) -> BTreeMap<String, u64> {
        let mut loads = BTreeMap::new();
        for (name, (node, state)) in &self.guilds {
            if state.partitioned.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            loads.insert(name.clone(), node.metric("guildhall_guild_owners").await);
        }
        loads
    }

    async fn stop(self) {
        self.front.stop().await;
        for (node, _) in self.guilds.into_values() {
            node.stop().await;
        }
    }
}

/// The placement every node computes for `members` and `guild_ids`.
fn expected(members: &[&str], guild_ids: &[String]) -> BTreeMap<String, String> {
    let ids: Vec<u64> = guild_ids.iter().map(|g| g.parse().unwrap()).collect();
    let member_ids: Vec<_> = members.iter().map(|m| member_id_of(m)).collect();
    let limits = Limits::default();
    let placement = Placement::compute(
        Ring::new(0, &member_ids, limits.ring_vnodes_per_member),
        &ids,
        limits.ring_load_epsilon_permille,
    );
    guild_ids
        .iter()
        .zip(&ids)
        .map(|(g, id)| {
            let owner = placement.owner(*id).unwrap();
            let name = members.iter().find(|m| member_id_of(m) == owner).unwrap();
            (g.clone(), (*name).to_owned())
        })
        .collect()
}

/// What a session heard, with when.
#[derive(Default)]
struct Heard {
    /// (guild, when) of every GUILD_CREATE.
    guild_creates: Vec<(String, Instant)>,
    /// Message ids of every MESSAGE_CREATE.
    messages: BTreeSet<String>,
    /// Contents of every MESSAGE_CREATE.
    contents: BTreeSet<String>,
}

/// Reads a session's frames into `heard` until `stop` fires.
fn listen(
    mut client: Client,
    heard: Arc<Mutex<Heard>>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Client> {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = &mut stop => return client,
                frame = client.ws.next() => {
                    let Some(Ok(tokio_tungstenite::tungstenite::Message::Text(text))) = frame else {
                        continue;
                    };
                    let frame: Value = serde_json::from_str(&text).unwrap();
                    let now = Instant::now();
                    let mut heard = heard.lock().unwrap();
                    match frame["t"].as_str() {
                        Some("GUILD_CREATE") => {
                            let id = frame["d"]["id"].as_str().unwrap().to_owned();
                            heard.guild_creates.push((id.clone(), now));
                        }
                        Some("MESSAGE_CREATE") => {
                            let id = frame["d"]["id"].as_str().unwrap().to_owned();
                            heard.messages.insert(id);
                            heard.contents.insert(frame["d"]["content"].as_str().unwrap_or("").to_owned());
                        }
                        _ => {}
                    }
                }
            }
        }
    })
}

/// A post's answer: status, message id, guild, when.
type Answer = (u16, Option<String>, String, Instant);

/// Posts round-robin to `channels` until `stop`; every answer recorded.
fn post_load(
    base: String,
    token: String,
    channels: Vec<(String, String)>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Answer>> {
    tokio::spawn(async move {
        let http = reqwest::Client::new();
        let mut answers = Vec::new();
        let mut i = 0usize;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (guild, channel) = &channels[i % channels.len()];
            i += 1;
            let response = http
                .post(format!("{base}/channels/{channel}/messages"))
                .header("Authorization", format!("Bot {token}"))
                .json(&json!({"content": format!("load {i}")}))
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let id = body["id"].as_str().map(str::to_owned);
            answers.push((status, id, guild.clone(), Instant::now()));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        answers
    })
}

async fn guilds_of(front: &TestNode, token: &str) -> Vec<(String, String)> {
    let mut guilds = Vec::new();
    for i in 0..GUILDS {
        guilds.push(front.guild(token, &format!("guild {i}")).await);
    }
    guilds
}

/// Every guild answers a read (loading it at its owner).
async fn touch_all(front: &TestNode, token: &str, guilds: &[(String, String)]) {
    for (guild_id, _) in guilds {
        let mut polls = 0;
        loop {
            let (status, _) = front
                .call("GET", &format!("/guilds/{guild_id}"), Some(token), None)
                .await;
            if status == 200 {
                break;
            }
            polls += 1;
            assert!(polls < POLLS_MAX, "guild {guild_id} answered {status}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

async fn history(front: &TestNode, token: &str, channel: &str) -> BTreeSet<String> {
    let (status, body) = front
        .call(
            "GET",
            &format!("/channels/{channel}/messages?limit=100"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Checks of a run under load: every 200 in history and delivered; every
/// guild in `moved` heard a GUILD_CREATE after `since` (that no event of a
/// new owner precedes it is the gateway's epoch rule, held by the stale
/// owner test).
#[allow(clippy::too_many_arguments)]
async fn check_run(
    front: &TestNode,
    token: &str,
    guilds: &[(String, String)],
    answers: &[Answer],
    heard: &Heard,
    moved: &BTreeSet<String>,
    since: Instant,
    settled: Option<Instant>,
) -> usize {
    let ok: Vec<_> = answers.iter().filter(|a| a.0 == 200).collect();
    let refused = answers.iter().filter(|a| a.0 == 503).count();
    assert_eq!(
        ok.len() + refused,
        answers.len(),
        "only 200 or 503 under a move: {:?}",
        answers
            .iter()
            .filter(|a| a.0 != 200 && a.0 != 503)
            .map(|a| a.0)
            .collect::<Vec<_>>()
    );
    assert!(ok.len() > 50, "load too thin: {} answered 200", ok.len());
    // History holds the newest 100 per channel: the load stays under that.
    let mut stored = BTreeSet::new();
    for (_, channel) in guilds {
        stored.extend(history(front, token, channel).await);
    }
    // Messages answered before `settled` (while two owners could both be
    // running) may miss their event; every later one must arrive.
    let (undelivered, window_lost): (Vec<&&Answer>, Vec<&&Answer>) = ok
        .iter()
        .filter(|a| !heard.messages.contains(a.1.as_ref().unwrap()))
        .partition(|a| settled.is_none_or(|at| a.3 >= at));
    for (_, id, _, _) in &ok {
        assert!(
            stored.contains(id.as_ref().unwrap()),
            "message {id:?} not in history"
        );
    }
    assert!(
        undelivered.is_empty(),
        "{} of {} messages answered 200 were not delivered",
        undelivered.len(),
        ok.len()
    );
    for guild in moved {
        let fresh = heard
            .guild_creates
            .iter()
            .find(|(g, at)| g == guild && *at > since)
            .map(|(_, at)| *at);
        assert!(
            fresh.is_some(),
            "moved guild {guild} got no fresh GUILD_CREATE"
        );
    }
    window_lost.len()
}

/// A guilds node leaves (graceful stop: drain, then its lease is revoked)
/// under message load: its guilds are served by the survivors, within the
/// bound, every session following them got a fresh GUILD_CREATE, and every
/// message answered 200 is in history and was delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guilds_node_leaving_under_load_moves_its_guilds() {
    let mut cluster = Cluster::start(&["g1", "g2", "g3"]).await;
    let (token, _) = cluster.front.register("alice").await;
    let guilds = guilds_of(&cluster.front, &token).await;
    cluster.wait_placed(GUILDS).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let ids: Vec<String> = guilds.iter().map(|g| g.0.clone()).collect();
    let before = expected(&["g1", "g2", "g3"], &ids);
    let cap3 = capacity_for(GUILDS, 3, 250) as u64;
    cluster.settled_loads(GUILDS as u64, cap3).await;
    assert!(cluster.front.metric("guildhall_placement_load_max").await <= cap3);

    let mut session = Client::connect(&cluster.front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    let heard = Arc::new(Mutex::new(Heard::default()));
    let (stop_listen, listen_stop) = tokio::sync::oneshot::channel();
    let listener = listen(session, heard.clone(), listen_stop);
    for _ in 0..POLLS_MAX {
        if heard.lock().unwrap().guild_creates.len() >= GUILDS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(heard.lock().unwrap().guild_creates.len(), GUILDS);

    let stop_load = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = post_load(
        cluster.front.base.clone(),
        token.clone(),
        guilds.clone(),
        stop_load.clone(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The victim: the node holding the most guilds.
    let victim = {
        let mut counts: BTreeMap<&String, usize> = BTreeMap::new();
        for owner in before.values() {
            *counts.entry(owner).or_default() += 1;
        }
        counts
            .into_iter()
            .max_by_key(|(_, c)| *c)
            .unwrap()
            .0
            .clone()
    };
    let moved: BTreeSet<String> = before
        .iter()
        .filter(|(_, o)| **o == victim)
        .map(|(g, _)| g.clone())
        .collect();
    let left_at = Instant::now();
    let (node, _) = cluster.guilds.remove(&victim).unwrap();
    node.stop().await;
    cluster.wait_ring(2).await;
    let ring_at = Instant::now();
    // Every moved guild answers again.
    touch_all(&cluster.front, &token, &guilds).await;
    let served_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = load.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_listen.send(());
    let _client = listener.await.unwrap();

    let survivors: Vec<&str> = cluster.guilds.keys().map(String::as_str).collect();
    let cap2 = capacity_for(GUILDS, 2, 250) as u64;
    let loads = cluster.settled_loads(GUILDS as u64, cap2).await;
    let after = expected(&survivors, &ids);
    let mut moved_in = 0;
    for (node, _) in cluster.guilds.values() {
        moved_in += node.metric("guildhall_guild_owners_moved_in_total").await;
    }
    assert!(moved_in >= moved.len() as u64, "moved in {moved_in}");
    {
        // The listener has stopped: take what it heard.
        let heard = std::mem::take(&mut *heard.lock().unwrap());
        // Only the victim's guilds moved (guilds of survivors stay).
        let stayed = before.iter().filter(|(g, o)| after[*g] == **o).count();
        check_run(
            &cluster.front,
            &token,
            &guilds,
            &answers,
            &heard,
            &moved,
            left_at,
            None,
        )
        .await;
        eprintln!(
            "leave: {} guilds moved, {} stayed; ring changed {:?} after the stop, all served {:?} after; loads {loads:?} (cap {cap2}); {} posts, {} answered 503",
            moved.len(),
            stayed,
            ring_at - left_at,
            served_at - left_at,
            answers.len(),
            answers.iter().filter(|a| a.0 == 503).count(),
        );
    }
    assert!(
        cluster
            .front
            .metric("guildhall_stream_owner_changes_total")
            .await
            >= moved.len() as u64
    );
    cluster.stop().await;
}

/// A guilds node joins: it takes its share (placement's, within the
/// bound), the owners that moved stop where they were, and the sessions
/// following the moved guilds get a fresh GUILD_CREATE and every message
/// answered once the move settled. While the old owner (still alive) and
/// the new one both run, an event the old one emits after the new one's
/// stream reached the gateway is refused there (fencing), so a message
/// answered in that window can miss its event (it is in history); the
/// count is printed (ARCHITECTURE.md, "Deliberately absent").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guilds_node_joining_takes_its_share() {
    let mut cluster = Cluster::start(&["g1", "g2"]).await;
    let (token, _) = cluster.front.register("alice").await;
    let guilds = guilds_of(&cluster.front, &token).await;
    cluster.wait_placed(GUILDS).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let ids: Vec<String> = guilds.iter().map(|g| g.0.clone()).collect();
    let before = expected(&["g1", "g2"], &ids);

    let mut session = Client::connect(&cluster.front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    let heard = Arc::new(Mutex::new(Heard::default()));
    let (stop_listen, listen_stop) = tokio::sync::oneshot::channel();
    let listener = listen(session, heard.clone(), listen_stop);
    for _ in 0..POLLS_MAX {
        if heard.lock().unwrap().guild_creates.len() >= GUILDS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let stop_load = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = post_load(
        cluster.front.base.clone(),
        token.clone(),
        guilds.clone(),
        stop_load.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let joined_at = Instant::now();
    cluster.add("g3", limits()).await;
    cluster.wait_ring(3).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let served_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = load.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_listen.send(());
    let _client = listener.await.unwrap();

    let after = expected(&["g1", "g2", "g3"], &ids);
    let moved: BTreeSet<String> = ids
        .iter()
        .filter(|g| before[*g] != after[*g])
        .cloned()
        .collect();
    let to_newcomer = moved.iter().filter(|g| after[*g] == "g3").count();
    assert!(to_newcomer > 0, "the newcomer took nothing");
    // Placement is recomputed from scratch: the smaller cap may also move
    // an overflowed guild between old members; few do.
    assert!(
        moved.len() - to_newcomer <= GUILDS / 10 + 1,
        "{} moves between old members",
        moved.len() - to_newcomer
    );
    let cap3 = capacity_for(GUILDS, 3, 250) as u64;
    let loads = cluster.settled_loads(GUILDS as u64, cap3).await;
    assert_eq!(loads["g3"], to_newcomer as u64, "{loads:?}");
    let mut moved_out = 0;
    for (node, _) in cluster.guilds.values() {
        moved_out += node.metric("guildhall_guild_owners_moved_out_total").await;
    }
    // Every guild that moved was stopped where it was. A join can also
    // move a guild twice (out and back, or on through a node whose first
    // view was not yet the cluster's): a known weakness of placement
    // recomputed from each node's own view during the join window, open
    // under the cluster-mode issue. A few such extra moves: up to two on a
    // quiet machine, three seen once under the whole suite on two cores.
    assert!(
        moved_out >= moved.len() as u64 && moved_out <= moved.len() as u64 + 4,
        "{moved_out} owners stopped for {} guilds moved",
        moved.len()
    );
    {
        // The listener has stopped: take what it heard.
        let heard = std::mem::take(&mut *heard.lock().unwrap());
        let window_lost = check_run(
            &cluster.front,
            &token,
            &guilds,
            &answers,
            &heard,
            &moved,
            joined_at,
            Some(served_at),
        )
        .await;
        eprintln!(
            "join: {} of {GUILDS} guilds moved ({to_newcomer} to the newcomer); all served {:?} after it started; loads {loads:?} (cap {cap3}); {} posts, {} answered 503, {window_lost} answered 200 during the move not delivered (open problem: no hand-over between a live old owner and the new one)",
            moved.len(),
            served_at - joined_at,
            answers.len(),
            answers.iter().filter(|a| a.0 == 503).count(),
        );
    }
    cluster.stop().await;
}

/// A node whose lease was revoked while it was cut off from the registry
/// keeps running and still believes it owns its guilds. Its stream events
/// are refused by the gateway once the new owner's stream arrived, its
/// writes are refused by the store, and it stops (and claims nothing)
/// instead of taking the guild back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_owner_is_refused_by_gateways_and_the_store() {
    let mut cluster = Cluster::start(&["g1"]).await;
    // The stale node's own lease check runs on its TTL: long enough that it
    // still thinks it is an owner throughout the test.
    cluster
        .add(
            "g2",
            Limits {
                lease_ttl_ms: 60_000,
                lease_renew_interval_ms: 300,
                ..limits()
            },
        )
        .await;
    cluster.wait_ring(2).await;
    let (token, user_id) = cluster.front.register("alice").await;
    let guilds = guilds_of(&cluster.front, &token).await;
    cluster.wait_placed(GUILDS).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let ids: Vec<String> = guilds.iter().map(|g| g.0.clone()).collect();
    let placed = expected(&["g1", "g2"], &ids);
    let (guild_id, channel_id) = guilds
        .iter()
        .find(|(g, _)| placed[g] == "g2")
        .cloned()
        .expect("a guild on g2");

    let mut session = Client::connect(&cluster.front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    let heard = Arc::new(Mutex::new(Heard::default()));
    let (stop_listen, listen_stop) = tokio::sync::oneshot::channel();
    let listener = listen(session, heard.clone(), listen_stop);
    for _ in 0..POLLS_MAX {
        if heard.lock().unwrap().guild_creates.len() >= GUILDS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Cut g2 off and end its lease behind its back.
    let state = cluster.guilds["g2"].1.clone();
    state
        .partitioned
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let lease = state.lease.load(std::sync::atomic::Ordering::Relaxed);
    cluster.registry.revoke(lease).await.unwrap();
    // The front and g1 drop g2; g2 does not notice. Both views, not only
    // the front's: while g1 still places the guild on g2 it forwards the
    // post there, which answers nothing, and the post gets a 503.
    for _ in 0..POLLS_MAX {
        if cluster.front.metric("guildhall_ring_members").await == 1
            && cluster.guilds["g1"]
                .0
                .metric("guildhall_ring_members")
                .await
                == 1
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        cluster.guilds["g2"]
            .0
            .metric("guildhall_ring_members")
            .await,
        2
    );
    // A post through the front now reaches g1, which claims the guild and
    // subscribes the session (fresh GUILD_CREATE, then the message).
    let (status, body) = cluster
        .front
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "from the new owner"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..POLLS_MAX {
        if heard
            .lock()
            .unwrap()
            .contents
            .contains("from the new owner")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        heard
            .lock()
            .unwrap()
            .contents
            .contains("from the new owner")
    );

    // The stale owner fans out an event (as a router with a stale view
    // would make it): the gateway refuses it, and the owner, finding the
    // newer claim, does not confirm it (before, it answered Published and
    // the caller let go of an event no session heard).
    let stale_event = json!({"v": 1, "guild_id": guild_id.parse::<i64>().unwrap(), "call": {"Publish": {
        "name": "MESSAGE_CREATE", "required_intent": intents::GUILD_MESSAGES,
        "data": {"id": "1", "channel_id": channel_id, "guild_id": guild_id, "content": "from the stale owner"},
        "blanked": null, "content_exempt": [], "publish_id": 77}}});
    let answer = cluster
        .bus
        .request(
            "guilds.g2.requests",
            serde_json::to_vec(&stale_event).unwrap().into(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answer["result"]["Err"], "Overloaded", "{answer}");
    let g2 = &cluster.guilds["g2"].0;
    assert_eq!(
        g2.metric("guildhall_guild_superseded_publishes_total")
            .await,
        1
    );
    let mut polls = 0;
    while cluster
        .front
        .metric("guildhall_stream_stale_epoch_total")
        .await
        == 0
    {
        polls += 1;
        assert!(polls < POLLS_MAX, "the stale owner's event was not refused");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !heard
            .lock()
            .unwrap()
            .contents
            .contains("from the stale owner")
    );

    // Its write is refused by the store: answered Overloaded, nothing
    // changed, and the owner stops.
    let rename = json!({"v": 1, "guild_id": guild_id.parse::<i64>().unwrap(), "call": {"Change": {
        "actor": user_id.parse::<i64>().unwrap(), "change": {"UpdateGuild": {"name": "stale rename"}}}}});
    let answer = cluster
        .bus
        .request(
            "guilds.g2.requests",
            serde_json::to_vec(&rename).unwrap().into(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answer["result"]["Err"], "Overloaded", "{answer}");
    assert_eq!(g2.metric("guildhall_guild_owners_fenced_total").await, 1);
    let (status, guild) = cluster
        .front
        .call("GET", &format!("/guilds/{guild_id}"), Some(&token), None)
        .await;
    assert_eq!(status, 200);
    assert_ne!(guild["name"], "stale rename");
    // Asked again, the stale node claims nothing: refused, not taken back.
    let answer = cluster
        .bus
        .request(
            "guilds.g2.requests",
            serde_json::to_vec(&rename).unwrap().into(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer.payload).unwrap();
    assert_eq!(answer["result"]["Err"], "Overloaded", "{answer}");
    assert!(g2.metric("guildhall_guild_claims_refused_total").await >= 1);
    // The new owner still serves, and its events still arrive.
    let (status, _) = cluster
        .front
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "still the new owner"})),
        )
        .await;
    assert_eq!(status, 200);
    for _ in 0..POLLS_MAX {
        if heard
            .lock()
            .unwrap()
            .contents
            .contains("still the new owner")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        heard
            .lock()
            .unwrap()
            .contents
            .contains("still the new owner")
    );
    let _ = stop_listen.send(());
    let _client = listener.await.unwrap();
    cluster.stop().await;
}

/// Cuts `names` off at once, as a `kill -9` of each would: they stop
/// renewing (and notice nothing), and their leases end behind their backs.
async fn kill_together(cluster: &Cluster, names: &[&str]) {
    for name in names {
        let state = cluster.guilds[*name].1.clone();
        state
            .partitioned
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let lease = state.lease.load(std::sync::atomic::Ordering::Relaxed);
        cluster.registry.revoke(lease).await.unwrap();
    }
}

/// Until the front and `g1` both report `metric` at `value` or more.
async fn wait_survivors(cluster: &Cluster, metric: &str, value: u64) {
    for _ in 0..POLLS_MAX {
        if cluster.front.metric(metric).await >= value
            && cluster.guilds["g1"].0.metric(metric).await >= value
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{metric} never reached {value} on the front and g1");
}

/// Two of three guilds nodes die together: more than one window's
/// removal budget, so self-preservation freezes and their guilds keep
/// their owners. An operator's release (the registry key every node reads
/// while frozen) removes them at once, and every guild is served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deaths_freeze_the_ring_until_an_operator_releases_it() {
    let cluster = Cluster::start(&["g1", "g2", "g3"]).await;
    let (token, _) = cluster.front.register("alice").await;
    let guilds = guilds_of(&cluster.front, &token).await;
    cluster.wait_placed(GUILDS).await;
    touch_all(&cluster.front, &token, &guilds).await;

    kill_together(&cluster, &["g2", "g3"]).await;
    wait_survivors(&cluster, "guildhall_membership_frozen", 1).await;
    // Frozen: nothing removed, and the freeze's age is on /metrics.
    assert_eq!(cluster.front.metric("guildhall_ring_members").await, 3);
    wait_survivors(&cluster, "guildhall_membership_frozen_ms", 1).await;

    cluster
        .registry
        .put_with_lease(
            guildhall_proto::cluster::RING_RELEASE_KEY,
            b"operator-release-1".to_vec(),
            60_000,
        )
        .await
        .unwrap();
    // The survivors drop the dead (cut-off nodes are not asked).
    cluster.wait_ring(1).await;
    assert_eq!(cluster.front.metric("guildhall_ring_members").await, 1);
    assert_eq!(cluster.front.metric("guildhall_membership_frozen").await, 0);
    assert_eq!(
        cluster.front.metric("guildhall_membership_frozen_ms").await,
        0
    );
    assert_eq!(
        cluster
            .front
            .metric("guildhall_membership_releases_total")
            .await,
        1
    );
    assert_eq!(
        cluster
            .front
            .metric("guildhall_membership_released_members_total")
            .await,
        2
    );
    // Every guild answers again, from the survivor.
    touch_all(&cluster.front, &token, &guilds).await;
    cluster.settled_loads(GUILDS as u64, GUILDS as u64).await;
    cluster.stop().await;
}

/// The same two deaths without an operator: the freeze holds for
/// `self_preservation_freeze_max_ms` and then the dead go at the window's
/// budget, so no guild stays unserved for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_ends_at_its_bound_without_an_operator() {
    let bounded = Limits {
        self_preservation_freeze_max_ms: 1_000,
        self_preservation_window_ms: 1_000,
        ..limits()
    };
    let cluster = Cluster::start_with(&["g1", "g2", "g3"], bounded).await;
    let (token, _) = cluster.front.register("alice").await;
    let guilds = guilds_of(&cluster.front, &token).await;
    cluster.wait_placed(GUILDS).await;
    touch_all(&cluster.front, &token, &guilds).await;

    kill_together(&cluster, &["g2", "g3"]).await;
    wait_survivors(&cluster, "guildhall_membership_freeze_expired_total", 1).await;
    cluster.wait_ring(1).await;
    assert_eq!(
        cluster.guilds["g1"]
            .0
            .metric("guildhall_ring_members")
            .await,
        1
    );
    // The longest down went past the bound; the other, in the next window,
    // fit the budget again and went as an ordinary expiry.
    assert!(
        cluster.guilds["g1"]
            .0
            .metric("guildhall_membership_released_members_total")
            .await
            >= 1
    );
    touch_all(&cluster.front, &token, &guilds).await;
    cluster.settled_loads(GUILDS as u64, GUILDS as u64).await;
    cluster.stop().await;
}

/// Finding 4: an owner commits a member and dies (`kill -9`) before it
/// announces the join. The joiner's retry reaches the new owner, which
/// loaded the member from the store and answers "already a member"; it
/// announces the join all the same, so the joiner's open session hears
/// the guild (before: it never did), and only sessions that do not follow
/// the guild yet are subscribed (a repeat costs no second GUILD_CREATE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_committed_by_an_owner_that_died_reaches_the_joiners_sessions() {
    let cluster = Cluster::start(&["g1", "g2"]).await;
    let (alice, _) = cluster.front.register("alice").await;
    let (guild_id, channel_id) = cluster.front.guild(&alice, "joined").await;
    cluster.wait_placed(1).await;
    touch_all(
        &cluster.front,
        &alice,
        &[(guild_id.clone(), channel_id.clone())],
    )
    .await;
    let (status, invite) = cluster
        .front
        .call(
            "POST",
            &format!("/channels/{channel_id}/invites"),
            Some(&alice),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{invite}");
    let code = invite["code"].as_str().unwrap().to_owned();
    let (bob, bob_id) = cluster.front.register("bob").await;
    let mut session = Client::connect(&cluster.front.ws).await;
    session
        .identify(
            &bob,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;

    // The owner commits bob and dies before announcing him.
    let owner = expected(&["g1", "g2"], std::slice::from_ref(&guild_id))[&guild_id].clone();
    kill_together(&cluster, &[owner.as_str()]).await;
    let store =
        guildhall_store::Store::open(&cluster.dir.path().join("guildhall.db"), &Limits::default())
            .await
            .unwrap();
    let id: i64 = guild_id.parse().unwrap();
    let epoch = store.claim_guild(id).await.unwrap().unwrap();
    let row = guildhall_store::MemberRow {
        temporary: false,
        communication_disabled_until_ms: None,
        guild_id: id,
        user_id: bob_id.parse().unwrap(),
        joined_ms: 0,
        nick: None,
    };
    assert!(store.add_member(&row, epoch).await.unwrap());
    // The survivors drop the dead (cut-off nodes are not asked).
    cluster.wait_ring(1).await;

    // Bob's client retries the join; the new owner finds him present.
    let mut joined = None;
    for _ in 0..POLLS_MAX {
        let (status, body) = cluster
            .front
            .call("POST", &format!("/invites/{code}"), Some(&bob), None)
            .await;
        if status == 200 {
            joined = Some(body);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(joined.is_some(), "the join was never answered");
    let create = session.dispatch("GUILD_CREATE").await;
    assert_eq!(create["d"]["id"], guild_id.as_str());

    // A repeat of the join subscribes nothing again.
    let (status, body) = cluster
        .front
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = cluster
        .front
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&alice),
            Some(json!({"content": "after the join"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // The next dispatch is the message, not a second GUILD_CREATE.
    let next = loop {
        let frame = session.next().await.unwrap();
        if frame["op"] == 0 {
            break frame;
        }
    };
    assert_eq!(next["t"], "MESSAGE_CREATE", "{next}");
    assert_eq!(next["d"]["content"], "after the join");
    cluster.stop().await;
}

/// Finding 2: a gateway node that misses a new owner's question (who
/// follows this guild?) is asked again. The new owner's questions to the
/// gateways are lost while it loads the dead owner's guild; before, the
/// gateway got no stream, never saw the new epoch, and its session heard
/// nothing more of the guild. Now the owner asks again once the loss ends,
/// subscribes the session (a fresh GUILD_CREATE) and its events follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_missed_the_new_owners_question_is_asked_again() {
    let mut cluster = Cluster::start(&["g1"]).await;
    let lossy = Arc::new(guildhall_cluster::bus::DroppingBus::new(
        cluster.bus.clone(),
        "gw.",
        0,
        1,
    ));
    cluster.add_on("g2", limits(), lossy.clone()).await;
    cluster.wait_ring(2).await;
    let (token, _) = cluster.front.register("alice").await;
    let mut guilds = Vec::new();
    for i in 0..4 {
        guilds.push(cluster.front.guild(&token, &format!("guild {i}")).await);
    }
    cluster.wait_placed(guilds.len()).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let ids: Vec<String> = guilds.iter().map(|g| g.0.clone()).collect();
    let placed = expected(&["g1", "g2"], &ids);
    let (guild_id, channel_id) = guilds
        .iter()
        .find(|(g, _)| placed[g] == "g1")
        .cloned()
        .expect("a guild on g1");
    let mut session = Client::connect(&cluster.front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    for _ in 0..guilds.len() {
        session.dispatch("GUILD_CREATE").await;
    }

    // g2's questions to the gateways are lost; g1 dies.
    lossy.set_lose_requests(Some(b"guild_id".to_vec()));
    kill_together(&cluster, &["g1"]).await;
    // The survivors drop the dead (cut-off nodes are not asked).
    cluster.wait_ring(1).await;
    // A post loads the guild at g2, whose question to the front is lost.
    let mut posted = false;
    for _ in 0..POLLS_MAX {
        let (status, _) = cluster
            .front
            .call(
                "POST",
                &format!("/channels/{channel_id}/messages"),
                Some(&token),
                Some(json!({"content": "while the question is lost"})),
            )
            .await;
        if status == 200 {
            posted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(posted);
    let g2 = &cluster.guilds["g2"].0;
    assert!(g2.metric("guildhall_guild_pulls_failed_total").await >= 1);
    lossy.set_lose_requests(None);

    // The owner asks again: the session hears the guild anew, then its
    // events.
    let mut fresh = false;
    for _ in 0..20 {
        let create = session.dispatch("GUILD_CREATE").await;
        if create["d"]["id"] == guild_id.as_str() {
            fresh = true;
            break;
        }
    }
    assert!(fresh, "no fresh GUILD_CREATE for the moved guild");
    let (status, body) = cluster
        .front
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "after the question"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let message = session.dispatch("MESSAGE_CREATE").await;
    assert_eq!(message["d"]["content"], "after the question");
    assert!(g2.metric("guildhall_guild_pulls_retried_total").await >= 1);
    cluster.stop().await;
}

/// Leases are timed on the process's monotonic clock, not the wall clock:
/// a wall clock stepped back would keep a cut-off owner serving past its
/// lease, one stepped forward would stop every owner. The renewal each
/// guilds node records is a monotonic reading, and its lease is live on
/// that clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_timed_on_the_monotonic_clock() {
    let cluster = Cluster::start(&["g1"]).await;
    let state = &cluster.guilds["g1"].1;
    let now = guildhall_common::state::monotonic_ms();
    let renewed = state
        .lease_renewed_ms
        .load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        renewed > 0 && renewed <= now,
        "renewed {renewed}, now {now}"
    );
    assert!(state.lease_live(now));
    assert!(state.may_claim(now));
    // A wall-clock reading is no monotonic one: it would read as a lease
    // renewed decades from now.
    assert!(!state.lease_live(guildhall_common::state::now_ms() + limits().lease_ttl_ms));
    cluster.stop().await;
}

/// A guilds node `g1`, the front and a second gateway node `gw2` (which
/// can be cut off); alice's guild, loaded, and one session of hers on each
/// gateway following it.
struct TwoGateways {
    cluster: Cluster,
    gw2: TestNode,
    gw2_state: Arc<ClusterState>,
    token: String,
    guild_id: String,
    channel_id: String,
    first: Client,
    second: Client,
}

const WANTED: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;

async fn two_gateways(limits: Limits) -> TwoGateways {
    let cluster = Cluster::start_with(&["g1"], limits.clone()).await;
    let (token, _) = cluster.front.register("alice").await;
    let (guild_id, channel_id) = cluster.front.guild(&token, "crowded").await;
    // One guilds member owns every guild: nothing to place.
    touch_all(
        &cluster.front,
        &token,
        &[(guild_id.clone(), channel_id.clone())],
    )
    .await;
    let gw2_state = Arc::new(ClusterState::default());
    let gw2 = TestNode::member_roles_with(
        "gw2",
        40,
        cluster.dir.path(),
        cluster.registry.clone(),
        cluster.bus.clone(),
        &[Role::Gateway, Role::Api],
        limits,
        Some(gw2_state.clone()),
    )
    .await;
    gw2.metric("guildhall_ring_members").await;
    let mut first = Client::connect(&cluster.front.ws).await;
    first.identify(&token, WANTED).await;
    first.dispatch("GUILD_CREATE").await;
    let mut second = Client::connect(&gw2.ws).await;
    second.identify(&token, WANTED).await;
    second.dispatch("GUILD_CREATE").await;
    TwoGateways {
        cluster,
        gw2,
        gw2_state,
        token,
        guild_id,
        channel_id,
        first,
        second,
    }
}

impl TwoGateways {
    /// gw2's lease ends behind its back (a kill -9, as the owner sees it),
    /// and the owner, on its next events, drops gw2's session.
    async fn cut_gw2(&self) {
        self.gw2_state
            .partitioned
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let lease = self
            .gw2_state
            .lease
            .load(std::sync::atomic::Ordering::Relaxed);
        self.cluster.registry.revoke(lease).await.unwrap();
        let owner = &self.cluster.guilds["g1"].0;
        let mut dropped = 0;
        for _ in 0..POLLS_MAX {
            let (status, _) = self
                .cluster
                .front
                .call(
                    "POST",
                    &format!("/channels/{}/messages", self.channel_id),
                    Some(&self.token),
                    Some(json!({"content": "tick"})),
                )
                .await;
            assert_eq!(status, 200);
            dropped = owner
                .metric("guildhall_guild_dead_gateway_sessions_dropped_total")
                .await;
            if dropped >= 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(dropped, 1, "the dead gateway's session was not dropped");
    }

    async fn stop(self) {
        self.gw2.stop().await;
        self.cluster.stop().await;
    }
}

/// Finding 9: an owner drops the sessions of a gateway node whose lease
/// ended. With room for two subscriptions, a session on the front and one
/// on gw2 fill the guild, and gw2 dies. Before, its session counted for
/// good and a new session was refused silently (it never heard the
/// guild); now the owner drops it and the newcomer subscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_gateways_sessions_no_longer_fill_the_guild() {
    let run = two_gateways(Limits {
        guild_subscriptions_max: 2,
        ..limits()
    })
    .await;
    run.cut_gw2().await;
    let mut third = Client::connect(&run.cluster.front.ws).await;
    third.identify(&run.token, WANTED).await;
    let create = third.dispatch("GUILD_CREATE").await;
    assert_eq!(create["d"]["id"], run.guild_id.as_str());
    run.stop().await;
}

/// A gateway node whose lease ended and that announces itself again
/// re-subscribes every session it holds (owners dropped them): its session
/// hears the guild anew, then its events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_regains_its_lease_resubscribes_its_sessions() {
    let mut run = two_gateways(limits()).await;
    run.cut_gw2().await;
    run.gw2_state
        .partitioned
        .store(false, std::sync::atomic::Ordering::Relaxed);
    let mut fresh = false;
    for _ in 0..20 {
        let frame = run.second.dispatch("GUILD_CREATE").await;
        if frame["d"]["id"] == run.guild_id.as_str() {
            fresh = true;
            break;
        }
    }
    assert!(
        fresh,
        "the returning gateway's session never heard the guild again"
    );
    assert!(
        run.gw2
            .metric("guildhall_stream_lease_regained_resyncs_total")
            .await
            >= 1
    );
    let (status, body) = run
        .cluster
        .front
        .call(
            "POST",
            &format!("/channels/{}/messages", run.channel_id),
            Some(&run.token),
            Some(json!({"content": "after the return"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    loop {
        let message = run.second.dispatch("MESSAGE_CREATE").await;
        if message["d"]["content"] == "after the return" {
            break;
        }
    }
    let _ = &mut run.first;
    run.stop().await;
}

/// Delivery follows permissions across gateway nodes (issue 25): the
/// owner sends each node only the users of its own sessions to skip, and
/// nothing at all to a node whose sessions may none of them view the
/// channel. Bob (no access) has a session on each gateway, Carol (staff)
/// one on gw2: a private message reaches Carol alone, and the public
/// message after it reaches all three in order, with no gap in either
/// node's stream (no resync).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_channels_events_skip_members_on_every_gateway() {
    let cluster = Cluster::start(&["g1"]).await;
    let front = &cluster.front;
    let (owner, _) = front.register("alice").await;
    let (bob, _) = front.register("bob").await;
    let (carol, carol_id) = front.register("carol").await;
    let (guild_id, public) = front.guild(&owner, "split").await;
    touch_all(front, &owner, &[(guild_id.clone(), public.clone())]).await;
    let code = front.invite(&owner, &public).await;
    for token in [&bob, &carol] {
        let (status, _) = front
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let (_, staff) = front
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "staff"})),
        )
        .await;
    let staff = staff["id"].as_str().unwrap().to_owned();
    let (status, _) = front
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{carol_id}/roles/{staff}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let view = guildhall_proto::permissions::VIEW_CHANNEL.to_string();
    let (status, private) = front
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "staff-only", "permission_overwrites": [
                {"id": guild_id, "type": 0, "deny": view},
                {"id": staff, "type": 0, "allow": view},
            ]})),
        )
        .await;
    assert_eq!(status, 200, "{private}");
    let private = private["id"].as_str().unwrap().to_owned();
    let gw2 = TestNode::member_roles_with(
        "gw2",
        41,
        cluster.dir.path(),
        cluster.registry.clone(),
        cluster.bus.clone(),
        &[Role::Gateway, Role::Api],
        limits(),
        None,
    )
    .await;
    gw2.metric("guildhall_ring_members").await;
    let mut bob_front = Client::connect(&front.ws).await;
    bob_front.identify(&bob, WANTED).await;
    bob_front.dispatch("GUILD_CREATE").await;
    let mut bob_gw2 = Client::connect(&gw2.ws).await;
    bob_gw2.identify(&bob, WANTED).await;
    bob_gw2.dispatch("GUILD_CREATE").await;
    let mut carol_gw2 = Client::connect(&gw2.ws).await;
    carol_gw2.identify(&carol, WANTED).await;
    carol_gw2.dispatch("GUILD_CREATE").await;

    for (channel, content) in [(&private, "secret"), (&public, "hello all")] {
        let (status, _) = front
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&owner),
                Some(json!({"content": content})),
            )
            .await;
        assert_eq!(status, 200);
    }
    let first = carol_gw2.dispatch("MESSAGE_CREATE").await;
    assert_eq!(first["d"]["content"], "secret");
    let second = carol_gw2.dispatch("MESSAGE_CREATE").await;
    assert_eq!(second["d"]["content"], "hello all");
    for client in [&mut bob_front, &mut bob_gw2] {
        let seen = client.dispatch("MESSAGE_CREATE").await;
        assert_eq!(seen["d"]["content"], "hello all", "a hidden event leaked");
    }
    assert_eq!(gw2.metric("guildhall_dispatches_hidden_total").await, 1);
    assert_eq!(
        front.metric("guildhall_dispatches_hidden_total").await,
        0,
        "front was sent nothing"
    );
    for node in [front, &gw2] {
        assert_eq!(node.metric("guildhall_stream_resyncs_total").await, 0);
    }
    gw2.stop().await;
    cluster.stop().await;
}

/// Finding 8: a guild's owner changes while a session moves between two
/// gateway nodes. The taker (gw2) has asked the holder (the front) to
/// prepare and its commit is slow in transit (held on gw2's bus) when the
/// guild's owner dies; the new owner asks every gateway node which
/// sessions follow the guild. Before, the taker already listed the
/// session (it registered the session's guilds before the commit), so the
/// new owner subscribed it on both nodes: the holder recorded the guild's
/// events and the taker held them too, and the RESUME replayed each twice
/// (`[m2, m2, m3]`). Now only the holder speaks for a session until the
/// owner moves it: each event once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_change_during_a_takeover_delivers_each_event_once() {
    let limits = Limits {
        // The commit waits in transit while the owner changes.
        session_takeover_timeout_ms: 30_000,
        ..limits()
    };
    let cluster = Cluster::start_with(&["g1", "g2"], limits.clone()).await;
    let (token, _) = cluster.front.register("alice").await;
    let mut guilds = Vec::new();
    for i in 0..4 {
        guilds.push(cluster.front.guild(&token, &format!("guild {i}")).await);
    }
    cluster.wait_placed(guilds.len()).await;
    touch_all(&cluster.front, &token, &guilds).await;
    let ids: Vec<String> = guilds.iter().map(|g| g.0.clone()).collect();
    let placed = expected(&["g1", "g2"], &ids);
    let (guild_id, channel_id) = guilds
        .iter()
        .find(|(g, _)| placed[g] == "g1")
        .cloned()
        .expect("a guild on g1");
    let slow = Arc::new(guildhall_cluster::bus::DroppingBus::new(
        cluster.bus.clone(),
        "gw.",
        0,
        1,
    ));
    let gw2 = TestNode::member_roles_with(
        "gw2",
        40,
        cluster.dir.path(),
        cluster.registry.clone(),
        slow.clone(),
        &[Role::Gateway, Role::Api],
        limits,
        None,
    )
    .await;
    gw2.metric("guildhall_ring_members").await;

    let mut session = Client::connect(&cluster.front.ws).await;
    let ready = session.identify(&token, WANTED).await;
    let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
    for _ in 0..guilds.len() {
        session.dispatch("GUILD_CREATE").await;
    }
    let (status, body) = cluster
        .front
        .post_message(&token, &channel_id, json!({"content": "m1"}))
        .await;
    assert_eq!(status, 200, "{body}");
    let m1 = session.dispatch("MESSAGE_CREATE").await;
    let seen = m1["s"].as_u64().unwrap();
    drop(session);
    let mut polls = 0;
    while cluster.front.metric("guildhall_sockets_open").await > 0 {
        polls += 1;
        assert!(polls < POLLS_MAX, "the socket never closed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // The RESUME reaches gw2; its commit is held on the way to the front.
    slow.set_hold_requests(Some(b"\"step\":\"commit\"".to_vec()));
    let mut session = Client::connect(&gw2.ws).await;
    let hello = session.next().await.unwrap();
    assert_eq!(hello["op"], 10);
    session
        .send(json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": session_id, "seq": seen}}))
        .await;
    let mut polls = 0;
    while slow
        .requests_held_total
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        polls += 1;
        assert!(polls < POLLS_MAX, "the commit was never sent");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // g1 dies; a post loads the guild at g2, which asks both gateways.
    kill_together(&cluster, &["g1"]).await;
    cluster.wait_ring(1).await;
    let mut posted = false;
    for _ in 0..POLLS_MAX {
        let (status, _) = cluster
            .front
            .post_message(&token, &channel_id, json!({"content": "m2"}))
            .await;
        if status == 200 {
            posted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(posted, "the guild never came back");
    slow.set_hold_requests(None);

    let mut frames = Vec::new();
    loop {
        let frame = session.next().await.expect("the session lives on gw2");
        if frame["op"] != 0 {
            continue;
        }
        if frame["t"] == "RESUMED" {
            let (status, body) = cluster
                .front
                .post_message(&token, &channel_id, json!({"content": "m3"}))
                .await;
            assert_eq!(status, 200, "{body}");
        }
        let last = frame["t"] == "MESSAGE_CREATE" && frame["d"]["content"] == "m3";
        frames.push(frame);
        if last {
            break;
        }
    }
    let seqs: Vec<u64> = frames.iter().map(|f| f["s"].as_u64().unwrap()).collect();
    let numbered: Vec<u64> = (seen + 1..=seen + frames.len() as u64).collect();
    assert_eq!(
        seqs, numbered,
        "numbering continues without a gap or a repeat"
    );
    let contents: Vec<&str> = frames
        .iter()
        .filter(|f| f["t"] == "MESSAGE_CREATE")
        .map(|f| f["d"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["m2", "m3"], "each message once, in order");
    let creates = frames
        .iter()
        .filter(|f| f["t"] == "GUILD_CREATE" && f["d"]["id"] == guild_id.as_str())
        .count();
    assert!(creates <= 1, "the guild's GUILD_CREATE {creates} times");
    assert_eq!(gw2.metric("guildhall_sessions_taken_total").await, 1);
    drop(session);
    gw2.stop().await;
    cluster.stop().await;
}
