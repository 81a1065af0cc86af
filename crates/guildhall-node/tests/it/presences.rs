//! Presences beyond PRESENCE_UPDATE, as Discord's gateway documents them:
//! GUILD_CREATE's `presences` (with GUILD_PRESENCES, offline members left
//! out), op 8's `presences: true` (only with GUILD_PRESENCES), and the
//! REST guild's `approximate_presence_count`; a member who joins while
//! online is announced online; and a presence role that does not answer
//! costs a guild load its statuses, not the load itself.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

const WATCH: u64 = intents::GUILDS | intents::GUILD_MEMBERS | intents::GUILD_PRESENCES;

/// (user id, status) of a list of presences, by user id.
fn statuses(presences: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = presences
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {presences}"))
        .iter()
        .map(|p| {
            assert_eq!(p["activities"], json!([]), "{p}");
            assert_eq!(p["client_status"]["web"], p["status"], "{p}");
            (
                p["user"]["id"].as_str().unwrap().to_owned(),
                p["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Reads `client` up to the PRESENCE_UPDATE saying `user_id` is `status`.
async fn presence_of(client: &mut Client, user_id: &str, status: &str) -> Value {
    loop {
        let update = client.dispatch("PRESENCE_UPDATE").await;
        if update["d"]["user"]["id"] == user_id && update["d"]["status"] == status {
            return update["d"].clone();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_create_chunks_and_counts_carry_the_members_statuses() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, owner_id) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "Statuses").await;
    let code = node.invite(&owner, &channel).await;
    let (alice, alice_id) = node.register("alice").await;
    let (bob, _) = node.register("bob").await;
    for token in [&alice, &bob] {
        let (status, body) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&owner, WATCH).await;
    watcher.dispatch("GUILD_CREATE").await;
    // Alice comes online and turns to dnd; bob never connects. (The
    // owner's own READY went to the presence role before hers, so the
    // guild's owner has it once hers is heard.)
    let mut session = Client::connect(&node.ws).await;
    session.identify(&alice, intents::GUILDS).await;
    presence_of(&mut watcher, &alice_id, "online").await;
    session
        .send(
            json!({"op": 3, "d": {"since": null, "activities": [], "status": "dnd", "afk": false}}),
        )
        .await;
    let update = presence_of(&mut watcher, &alice_id, "dnd").await;
    assert_eq!(update["guild_id"], guild.as_str(), "{update}");
    let want = {
        let mut want = vec![
            (owner_id.clone(), "online".to_owned()),
            (alice_id.clone(), "dnd".to_owned()),
        ];
        want.sort();
        want
    };

    // A new session with GUILD_PRESENCES: its GUILD_CREATE says so, and
    // nothing for bob (offline). Without it: no presences, own member only.
    let mut reader = Client::connect(&node.ws).await;
    reader.identify(&owner, WATCH).await;
    let created = reader.dispatch("GUILD_CREATE").await["d"].clone();
    assert_eq!(
        statuses(&created["presences"]),
        want,
        "{}",
        created["presences"]
    );
    assert!(created["presences"][0].get("guild_id").is_none());
    assert_eq!(created["members"].as_array().unwrap().len(), 3);
    let mut blind = Client::connect(&node.ws).await;
    blind
        .identify(&owner, intents::GUILDS | intents::GUILD_MEMBERS)
        .await;
    let created = blind.dispatch("GUILD_CREATE").await["d"].clone();
    assert_eq!(created["presences"], json!([]), "{created}");

    // Op 8 with `presences: true`: the chunk's members' statuses; without
    // GUILD_PRESENCES the flag counts for nothing.
    let request =
        json!({"op": 8, "d": {"guild_id": guild, "query": "", "limit": 0, "presences": true}});
    reader.send(request.clone()).await;
    let chunk = reader.dispatch("GUILD_MEMBERS_CHUNK").await["d"].clone();
    assert_eq!(chunk["members"].as_array().unwrap().len(), 3, "{chunk}");
    assert_eq!(statuses(&chunk["presences"]), want, "{chunk}");
    blind.send(request).await;
    let chunk = blind.dispatch("GUILD_MEMBERS_CHUNK").await["d"].clone();
    assert!(chunk.get("presences").is_none(), "{chunk}");

    // The REST guild counts them.
    let (status, rest) = node
        .call(
            "GET",
            &format!("/guilds/{guild}?with_counts=true"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["approximate_member_count"], 3, "{rest}");
    assert_eq!(rest["approximate_presence_count"], 2, "{rest}");

    // Alice turns invisible: offline to others, and no longer among the
    // presences.
    session
        .send(json!({"op": 3, "d": {"since": null, "activities": [], "status": "invisible", "afk": false}}))
        .await;
    let update = presence_of(&mut watcher, &alice_id, "offline").await;
    assert_eq!(update["client_status"], json!({}), "{update}");
    let mut late = Client::connect(&node.ws).await;
    late.identify(&owner, WATCH).await;
    let created = late.dispatch("GUILD_CREATE").await["d"].clone();
    assert_eq!(
        statuses(&created["presences"]),
        [(owner_id.clone(), "online".to_owned())]
    );
}

/// A user who joins while online is announced online to the guild (the
/// presence role tells owners of changes only, and a join is none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_who_joins_online_is_announced_online() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "Joins").await;
    let code = node.invite(&owner, &channel).await;
    let (carol, carol_id) = node.register("carol").await;
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&owner, WATCH).await;
    watcher.dispatch("GUILD_CREATE").await;
    // Carol is online, in no guild yet, and idle.
    let mut session = Client::connect(&node.ws).await;
    session.identify(&carol, intents::GUILDS).await;
    session
        .send(json!({"op": 3, "d": {"since": null, "activities": [], "status": "idle", "afk": false}}))
        .await;
    // A round trip of the presence role: its answer to the join below
    // follows this update.
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200, "{body}");
    watcher.dispatch("GUILD_MEMBER_ADD").await;
    presence_of(&mut watcher, &carol_id, "idle").await;
}

/// One op 8 and its (single) chunk: (members, nonce).
async fn count(client: &mut Client, request: Value) -> (usize, Option<Value>) {
    client.send(json!({"op": 8, "d": request})).await;
    let chunk = client.dispatch("GUILD_MEMBERS_CHUNK").await["d"].clone();
    (
        chunk["members"].as_array().unwrap().len(),
        chunk.get("nonce").cloned(),
    )
}

/// Op 8's documented limits: a `query` prefix or `user_ids` returns at most
/// `member_request_matches_max` members (Discord's 100), the whole list
/// (`query: ""`, `limit: 0`) every one; a nonce over 32 bytes is ignored.
/// And a large guild's GUILD_CREATE carries, besides online members,
/// those with a nickname or a role, as Discord's gateway documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_requests_keep_discords_limits() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        member_request_matches_max: 2,
        guild_create_members_max: 3,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "Limits").await;
    let code = node.invite(&owner, &channel).await;
    let mut ids = vec![];
    for name in ["ma", "mb", "mc", "md"] {
        let (token, id) = node.register(name).await;
        let (status, body) = node
            .call("POST", &format!("/invites/{code}"), Some(&token), None)
            .await;
        assert_eq!(status, 200, "{body}");
        ids.push(id);
    }
    let mut client = Client::connect(&node.ws).await;
    client.identify(&owner, WATCH).await;
    client.dispatch("GUILD_CREATE").await;
    assert_eq!(
        count(
            &mut client,
            json!({"guild_id": guild, "query": "m", "limit": 0})
        )
        .await
        .0,
        2,
        "a prefix: at most the cap"
    );
    assert_eq!(
        count(
            &mut client,
            json!({"guild_id": guild, "query": "m", "limit": 10})
        )
        .await
        .0,
        2
    );
    assert_eq!(
        count(&mut client, json!({"guild_id": guild, "user_ids": ids}))
            .await
            .0,
        2,
        "ids: at most the cap"
    );
    assert_eq!(
        count(
            &mut client,
            json!({"guild_id": guild, "query": "", "limit": 0, "nonce": "n".repeat(32)})
        )
        .await,
        (5, Some(json!("n".repeat(32)))),
        "the whole list"
    );
    assert_eq!(
        count(
            &mut client,
            json!({"guild_id": guild, "query": "", "limit": 0, "nonce": "n".repeat(33)})
        )
        .await,
        (5, None),
        "an over-long nonce is ignored"
    );

    // Five members, three at most in GUILD_CREATE: `large`. Nobody else
    // is online; one gets a nickname, so only they come along.
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild}/members/{}", ids[2]),
            Some(&owner),
            Some(json!({"nick": "named"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut reader = Client::connect(&node.ws).await;
    reader.identify(&owner, WATCH).await;
    let created = reader.dispatch("GUILD_CREATE").await["d"].clone();
    assert_eq!(created["large"], true);
    let carried: Vec<&str> = created["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["user"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(carried.len(), 2, "{carried:?}");
    assert!(carried.contains(&ids[2].as_str()), "{carried:?}");
}

/// With two presence processes each user's statuses live on one of them
/// (the ring of the presence nodes places the user), so a question about
/// many users gets every answer; when one presence node goes, the gateway
/// node publishes its sessions' statuses again to their users' new node,
/// and the answers are whole again. Nodes in one process over one bus and
/// registry; every wait is a bounded number of polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_live_on_one_presence_node_each_and_move_when_it_goes() {
    use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
    use guildhall_proto::cluster::Role;
    use std::sync::Arc;
    const USERS: usize = 12;
    const POLLS_MAX: usize = 400;
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        rest_rate_limit_per_window: 1_000_000,
        rest_auth_rate_limit_per_window: 1_000_000,
        http_connections_per_ip_max: 4_096,
        ..Limits::default()
    };
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let state = Arc::new(guildhall_common::cluster::ClusterState::default());
    let front = TestNode::member_roles_with(
        "front",
        1,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Gateway, Role::Api, Role::Guilds, Role::Users],
        limits.clone(),
        Some(state.clone()),
    )
    .await;
    front.metric("guildhall_ring_members").await;
    let p1 = TestNode::member_roles_with(
        "presence-1",
        2,
        dir.path(),
        registry.clone(),
        bus.clone(),
        &[Role::Presence],
        limits.clone(),
        None,
    )
    .await;
    let p2 = TestNode::member_roles_with(
        "presence-2",
        3,
        dir.path(),
        registry,
        bus.clone(),
        &[Role::Presence],
        limits,
        None,
    )
    .await;
    // Both presence nodes known, and each holding some of the users.
    let mut polls = 0;
    let ids: Vec<i64> = (1..=USERS as i64).collect();
    while state.presence_node_of(1).is_none()
        || ids
            .iter()
            .filter_map(|id| state.presence_node_of(*id))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
            < 2
    {
        polls += 1;
        assert!(polls < POLLS_MAX, "the front never saw both presence nodes");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }

    let mut sessions = Vec::new();
    let mut user_ids = Vec::new();
    for i in 0..USERS {
        let (token, user_id) = front.register(&format!("user{i}")).await;
        let mut client = Client::connect(&front.ws).await;
        client.identify(&token, intents::GUILDS).await;
        sessions.push(client);
        user_ids.push(user_id.parse::<i64>().unwrap());
    }
    // The users are spread over both nodes (their ids are hashed: all
    // twelve on one of two is a 1-in-2048 chance).
    let held: std::collections::BTreeSet<String> = user_ids
        .iter()
        .filter_map(|id| state.presence_node_of(*id))
        .collect();
    println!("presence nodes holding the users: {held:?}");
    let ask = || {
        let bus = bus.clone();
        let state = state.clone();
        let user_ids = user_ids.clone();
        async move {
            guildhall_common::presence::query(
                bus.as_ref(),
                &state,
                &user_ids,
                1_000,
                16,
                std::time::Duration::from_millis(500),
            )
            .await
            .unwrap_or_default()
        }
    };
    let mut polls = 0;
    loop {
        let answers = ask().await;
        if answers.len() == USERS {
            assert!(answers.iter().all(|(_, s)| s == "online"), "{answers:?}");
            break;
        }
        polls += 1;
        assert!(
            polls < POLLS_MAX,
            "only {} of {USERS} statuses",
            answers.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }

    // presence-2 goes: its users move to presence-1 with their statuses.
    p2.stop().await;
    let mut polls = 0;
    while state.presence_node_of(user_ids[0]).as_deref() != Some("presence-1")
        || user_ids
            .iter()
            .any(|id| state.presence_node_of(*id).as_deref() != Some("presence-1"))
    {
        polls += 1;
        assert!(polls < POLLS_MAX, "the front never saw presence-2 go");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let mut polls = 0;
    loop {
        let answers = ask().await;
        if answers.len() == USERS {
            break;
        }
        polls += 1;
        assert!(
            polls < POLLS_MAX,
            "only {} of {USERS} statuses after the move",
            answers.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(front.metric("guildhall_presence_resynced_total").await >= 1);
    drop(sessions);
    drop(p1);
}
