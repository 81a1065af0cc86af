//! Two nodes in one process over one in-process registry and bus, sharing
//! one database: embedded mode is cluster mode over in-process transports.
//! A guild's owner lives on the node the ring places it on; REST and
//! gateway requests arriving at the other node reach it over the bus, and
//! its events reach sessions on both nodes through their event streams.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use guildhall_ring::Ring;
use guildhall_ring::hash::member_id_of;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Polls of the ring's size before giving up (a bound on the wait, not a
/// timed assertion).
const RING_POLLS_MAX: usize = 200;
const GUILDS_TRIED_MAX: usize = 64;

/// A labelled metric's value; None until the node renders the line (the
/// role counts appear with the node's first full registry listing).
async fn labelled(node: &TestNode, line: &str) -> Option<u64> {
    node.metrics_text()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{line} ")))
        .and_then(|v| v.parse().ok())
}

/// Roles in processes of their own meet only over the bus: a front node
/// (gateway, api) owns no guild and serves no users lookups; a back node
/// (guilds, users, presence) serves no REST and no sockets. A session on
/// the front gets READY (its token resolved by the back's users role),
/// GUILD_CREATE from the back's owner, and a message posted through the
/// front's REST. Each counts the roles of its view (a role running
/// nowhere shows 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_on_separate_nodes_meet_only_over_the_bus() {
    use guildhall_proto::cluster::Role;
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(Limits::default().bus_payload_bytes_max));
    let back = TestNode::member_roles(
        "back",
        2,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Guilds, Role::Users, Role::Presence],
    )
    .await;
    back.metric("guildhall_ring_members").await;
    // Alone, the back says which roles run nowhere (by role, on /metrics).
    let role = |name: &str| format!("guildhall_cluster_role_nodes{{role=\"{name}\"}}");
    let mut polls = 0;
    while labelled(&back, &role("guilds")).await != Some(1) {
        polls += 1;
        assert!(polls < RING_POLLS_MAX, "the back never counted itself");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(back.metric(&role("gateway")).await, 0);
    assert_eq!(back.metric(&role("voice")).await, 0);
    let front = TestNode::member_roles(
        "front",
        1,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Gateway, Role::Api],
    )
    .await;
    let mut polls = 0;
    while front.metric("guildhall_ring_members").await < 1
        || labelled(&back, &role("gateway")).await != Some(1)
        || labelled(&front, &role("api")).await != Some(1)
    {
        polls += 1;
        assert!(
            polls < RING_POLLS_MAX,
            "the front and the back never saw each other"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (token, _) = front.register("alice").await;
    let (guild_id, channel_id) = front.guild(&token, "split").await;
    assert_eq!(front.metric("guildhall_guild_owners").await, 0);
    assert_eq!(back.metric("guildhall_guild_owners").await, 1);

    let mut session = Client::connect(&front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    let created = session.dispatch("GUILD_CREATE").await;
    assert_eq!(created["d"]["id"], guild_id.as_str());
    let (status, body) = front
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "front to back to front"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let message = session.dispatch("MESSAGE_CREATE").await;
    assert_eq!(message["d"]["content"], "front to back to front");

    // The back serves neither REST nor sockets.
    let (status, _) = back.call("GET", "/users/@me", Some(&token), None).await;
    assert_eq!(status, 404);
    front.stop().await;
    back.stop().await;
}

/// Webhooks across roles: the front's api asks the back's guild owner for
/// MANAGE_WEBHOOKS (on a channel, and guild-wide for the guild's list)
/// over the bus, and a webhook executed through the front reaches a
/// front session as MESSAGE_CREATE after the back's owner, with
/// WEBHOOKS_UPDATE before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_work_when_the_guild_owner_is_another_node() {
    use guildhall_proto::cluster::Role;
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(Limits::default().bus_payload_bytes_max));
    let back = TestNode::member_roles(
        "back",
        2,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Guilds, Role::Users, Role::Presence],
    )
    .await;
    // Started (its migrations run) before the second node opens the
    // database.
    back.metric("guildhall_ring_members").await;
    let front = TestNode::member_roles(
        "front",
        1,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Gateway, Role::Api],
    )
    .await;
    let mut polls = 0;
    while front.metric("guildhall_ring_members").await < 1 {
        polls += 1;
        assert!(polls < RING_POLLS_MAX, "the front never saw the back");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (token, _) = front.register("alice").await;
    let (guild_id, channel_id) = front.guild(&token, "split").await;
    assert_eq!(back.metric("guildhall_guild_owners").await, 1);
    let mut session = Client::connect(&front.ws).await;
    session
        .identify(
            &token,
            intents::GUILDS
                | intents::GUILD_MESSAGES
                | intents::MESSAGE_CONTENT
                | intents::GUILD_WEBHOOKS,
        )
        .await;
    session.dispatch("GUILD_CREATE").await;

    let (status, hook) = front
        .call(
            "POST",
            &format!("/channels/{channel_id}/webhooks"),
            Some(&token),
            Some(json!({"name": "split hook"})),
        )
        .await;
    assert_eq!(status, 200, "{hook}");
    let update = session.dispatch("WEBHOOKS_UPDATE").await;
    assert_eq!(update["d"]["channel_id"], channel_id.as_str());
    let (status, list) = front
        .call(
            "GET",
            &format!("/guilds/{guild_id}/webhooks"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 1);
    let path = format!(
        "/webhooks/{}/{}?wait=true",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    );
    let (status, message) = front
        .call(
            "POST",
            &path,
            None,
            Some(json!({"content": "across nodes"})),
        )
        .await;
    assert_eq!(status, 200, "{message}");
    let created = session.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["id"], message["id"]);
    assert_eq!(created["d"]["webhook_id"], hook["id"]);
    front.stop().await;
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guild_owned_by_another_node_serves_sessions_on_both() {
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(Limits::default().bus_payload_bytes_max));
    let a = TestNode::member("node-a", 1, dir.path(), registry.clone(), bus.clone()).await;
    // Node A answers once its store is open and migrated; only then does
    // node B open the same file (SQLite migrations take no cross-process
    // lock; cluster mode's PostgreSQL store is where concurrent starts
    // belong).
    a.metric("guildhall_ring_members").await;
    let b = TestNode::member("node-b", 2, dir.path(), registry.clone(), bus.clone()).await;
    let mut polls = 0;
    while a.metric("guildhall_ring_members").await < 2
        || b.metric("guildhall_ring_members").await < 2
    {
        polls += 1;
        assert!(polls < RING_POLLS_MAX, "the nodes never saw each other");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // The same ring the nodes built: which guilds node B owns.
    let ring = Ring::new(
        0,
        &[member_id_of("node-a"), member_id_of("node-b")],
        Limits::default().ring_vnodes_per_member,
    );
    let owned_by_b = |guild_id: &str| {
        ring.primary(guild_id.parse::<u64>().unwrap()) == Some(member_id_of("node-b"))
    };

    let (token, _) = a.register("alice").await;
    let mut remote = None;
    let mut on_a_count = 0;
    for i in 0..GUILDS_TRIED_MAX {
        // Created through node A; the snapshot in the answer came from the
        // owner, wherever it runs.
        let (guild_id, channel_id) = a.guild(&token, &format!("guild {i}")).await;
        if owned_by_b(&guild_id) {
            remote = Some((guild_id, channel_id));
            break;
        }
        on_a_count += 1;
    }
    let (guild_id, channel_id) = remote.expect("some guild lands on node B");
    // Each owner runs where the ring puts it, and only there.
    assert_eq!(a.metric("guildhall_guild_owners").await, on_a_count);
    assert_eq!(b.metric("guildhall_guild_owners").await, 1);

    let wanted = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;
    let mut on_a = Client::connect(&a.ws).await;
    on_a.identify(&token, wanted).await;
    let mut on_b = Client::connect(&b.ws).await;
    on_b.identify(&token, wanted).await;
    for client in [&mut on_a, &mut on_b] {
        loop {
            let created = client.dispatch("GUILD_CREATE").await;
            if created["d"]["id"] == guild_id.as_str() {
                break;
            }
        }
    }

    // Posted through node A, authorised by the owner on node B, delivered
    // by each node's own event stream.
    let (status, body) = a
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "across nodes"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    for client in [&mut on_a, &mut on_b] {
        let created = client.dispatch("MESSAGE_CREATE").await;
        assert_eq!(created["d"]["content"], "across nodes");
        assert_eq!(created["d"]["guild_id"], guild_id.as_str());
    }
    // Node B's owner sent the stream messages; node B applied its own.
    assert!(b.metric("guildhall_guild_stream_messages_total").await > 0);
    assert!(a.metric("guildhall_stream_events_applied_total").await > 0);

    // A REST read through node B of the same guild, and a change through
    // node A whose event reaches both.
    let (status, guild) = b
        .call("GET", &format!("/guilds/{guild_id}"), Some(&token), None)
        .await;
    assert_eq!(
        (status, guild["id"].as_str()),
        (200, Some(guild_id.as_str()))
    );
    let (status, _) = a
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}"),
            Some(&token),
            Some(json!({"name": "renamed"})),
        )
        .await;
    assert_eq!(status, 200);
    for client in [&mut on_a, &mut on_b] {
        let updated = client.dispatch("GUILD_UPDATE").await;
        assert_eq!(updated["d"]["name"], "renamed");
    }
    assert_eq!(a.metric("guildhall_guild_owners").await, on_a_count);
    assert_eq!(b.metric("guildhall_guild_owners").await, 1);

    // Corrupt bus traffic is counted and dropped; both nodes keep serving.
    for garbage in [
        &b""[..],
        b"{",
        br#"{"v":99,"guild_id":1,"call":{"Roles":{"user_id":1}}}"#,
    ] {
        bus.publish("guilds.node-b.requests", None, garbage.to_vec().into())
            .unwrap();
        bus.publish("gw.node-a.events.0", None, garbage.to_vec().into())
            .unwrap();
    }
    let mut polls = 0;
    while b.metric("guildhall_guild_requests_malformed_total").await < 3
        || a.metric("guildhall_bus_malformed_envelopes_total").await < 3
    {
        polls += 1;
        assert!(polls < RING_POLLS_MAX, "corrupt messages were not counted");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (status, _) = a
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&token),
            Some(json!({"content": "still here"})),
        )
        .await;
    assert_eq!(status, 200);
    for client in [&mut on_a, &mut on_b] {
        let created = client.dispatch("MESSAGE_CREATE").await;
        assert_eq!(created["d"]["content"], "still here");
    }
    a.stop().await;
    b.stop().await;
}

/// A guild owner loading after a restart gets its members' users from the
/// users role over the bus, in batches of `users_batch_ids_max`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_loads_its_members_in_batches_from_the_users_role() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        rest_rate_limit_per_window: 1_000_000,
        users_batch_ids_max: 2,
        ..Limits::default()
    };
    let start = |limits: Limits| {
        let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
        let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
        TestNode::member_with("solo", 1, dir.path(), registry, bus, limits)
    };
    let node = start(limits.clone()).await;
    let (owner, _) = node.register("owner").await;
    let (guild_id, channel_id) = node.guild(&owner, "batched").await;
    let code = node.invite(&owner, &channel_id).await;
    node.join_all(&code, &["m1", "m2", "m3", "m4"]).await;
    node.stop().await;

    // A fresh node on the same database loads the owner from scratch.
    let node = start(limits).await;
    let (status, members) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members?limit=100"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{members}");
    let mut names: Vec<&str> = members
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["user"]["username"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["m1", "m2", "m3", "m4", "owner"]);
    // Five members in batches of two.
    assert_eq!(node.metric("guildhall_users_batch_loads_total").await, 3);
    node.stop().await;
}

/// A token reset on one node stops the old token on every node at once:
/// the invalidation crosses the bus, so a node that had the token cached
/// (with a cache TTL far beyond the test) refuses it as soon as it hears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_reset_on_one_node_is_refused_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let limits = Limits {
        rest_rate_limit_per_window: 1_000_000,
        // No expiry helps: only the invalidation can evict.
        users_cache_ttl_ms: 3_600_000,
        ..Limits::default()
    };
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let a = TestNode::member_with(
        "a",
        1,
        dir.path(),
        registry.clone(),
        bus.clone(),
        limits.clone(),
    )
    .await;
    // Started (its migrations run) before the second node opens the
    // database.
    a.metric("guildhall_ring_members").await;
    let b = TestNode::member_with("b", 2, dir.path(), registry, bus, limits).await;
    let (owner, _) = a.register("owner").await;
    let (guild_id, _) = a.guild(&owner, "tokens").await;
    let (app_id, old) = a.bot_in(&owner, &guild_id).await;
    // Node b caches the bot's token.
    let (status, me) = b.call("GET", "/users/@me", Some(&old), None).await;
    assert_eq!(status, 200, "{me}");
    let heard_before = b.metric("guildhall_users_invalidations_heard_total").await;

    let (status, reset) = a
        .call(
            "POST",
            &format!("/applications/{app_id}/bot/reset"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{reset}");
    let new = reset["token"].as_str().unwrap().to_owned();
    let mut polls = 0;
    while b.call("GET", "/users/@me", Some(&old), None).await.0 != 401 {
        polls += 1;
        assert!(polls < RING_POLLS_MAX, "node b still takes the old token");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(b.metric("guildhall_users_invalidations_heard_total").await > heard_before);
    assert_eq!(
        a.metric("guildhall_users_invalidations_unsent_total").await,
        0
    );
    let (status, me) = b.call("GET", "/users/@me", Some(&new), None).await;
    assert_eq!(status, 200, "{me}");
    // And on a, which reset it.
    assert_eq!(a.call("GET", "/users/@me", Some(&old), None).await.0, 401);
    b.stop().await;
    a.stop().await;
}

/// Two processes must never mint the same snowflakes: a node holds its
/// worker id in the registry (`/guildhall/workers/{id}`, its name), a
/// second node configured with the same id refuses to start and names the
/// holder, and once the holder leaves the id is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_id_is_held_by_one_node_at_a_time() {
    use guildhall_node::worker_id::{WorkerIdError, worker_key};
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(Limits::default().bus_payload_bytes_max));
    let holder = TestNode::member("holder", 5, dir.path(), registry.clone(), bus.clone()).await;
    holder.metric("guildhall_ring_members").await;
    let held = registry.list("/guildhall/workers/").await.unwrap();
    assert_eq!(
        held.entries.get(&worker_key(5)).map(Vec::as_slice),
        Some(&b"holder"[..])
    );

    let intruder = guildhall_node::NodeConfig {
        worker_id: Some(5),
        node_name: "intruder".into(),
        registry: Some(registry.clone()),
        bus: Some(bus.clone()),
        ..guildhall_node::NodeConfig::embedded(dir.path().to_owned())
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        guildhall_node::run(intruder, listener, std::future::pending()),
    )
    .await
    .expect("refused at once, not served");
    match refused {
        Err(guildhall_node::NodeError::WorkerId(WorkerIdError::Taken { id, holder })) => {
            assert_eq!((id, holder.as_str()), (5, "holder"));
        }
        other => panic!("a second holder of worker id 5: {other:?}"),
    }

    holder.stop().await;
    let after = registry.list("/guildhall/workers/").await.unwrap();
    assert!(after.entries.is_empty(), "{:?}", after.entries.keys());
}

/// Without a worker id (a pod of a Deployment), a node picks a free one
/// and claims it as a given one is claimed: nodes get distinct ids, an id
/// held by another is passed over, a name gets its own id back when it is
/// free, and a node started this way serves and releases its id on stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_worker_id_picks_a_free_one() {
    use guildhall_node::worker_id::{claim_any, worker_key};
    let limits = Limits::default();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let (a, lease_a) = claim_any(registry.as_ref(), "a", &limits).await.unwrap();
    let (b, _) = claim_any(registry.as_ref(), "b", &limits).await.unwrap();
    assert_ne!(a, b);
    let held = registry.list("/guildhall/workers/").await.unwrap();
    assert_eq!(
        held.entries.get(&worker_key(a)).map(Vec::as_slice),
        Some(&b"a"[..])
    );
    assert_eq!(
        held.entries.get(&worker_key(b)).map(Vec::as_slice),
        Some(&b"b"[..])
    );
    // Gone and back: the same name starts its search at the same id.
    registry.revoke(lease_a).await.unwrap();
    let (again, lease_a) = claim_any(registry.as_ref(), "a", &limits).await.unwrap();
    assert_eq!(again, a);
    // Held by another meanwhile: the next free one.
    registry.revoke(lease_a).await.unwrap();
    let _taken = registry
        .claim(&worker_key(a), b"x".to_vec(), limits.lease_ttl_ms)
        .await
        .unwrap();
    let (moved, _) = claim_any(registry.as_ref(), "a", &limits).await.unwrap();
    assert_ne!(moved, a);
    assert_ne!(moved, b);

    let dir = tempfile::tempdir().unwrap();
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let node = TestNode::from_config(guildhall_node::NodeConfig {
        worker_id: None,
        node_name: "pod-7f9c".into(),
        registry: Some(registry.clone()),
        bus: Some(bus),
        ..guildhall_node::NodeConfig::embedded(dir.path().to_owned())
    })
    .await;
    let (token, _) = node.register("alice").await;
    let (guild_id, _) = node.guild(&token, "Picked").await;
    assert!(guild_id.parse::<u64>().is_ok());
    let held = registry.list("/guildhall/workers/").await.unwrap();
    assert!(
        held.entries
            .values()
            .any(|holder| holder.as_slice() == b"pod-7f9c"),
        "{held:?}"
    );
    node.stop().await;
    let after = registry.list("/guildhall/workers/").await.unwrap();
    assert!(
        after
            .entries
            .values()
            .all(|holder| holder.as_slice() != b"pod-7f9c"),
        "{after:?}"
    );
}
