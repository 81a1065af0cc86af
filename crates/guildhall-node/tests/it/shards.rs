//! Gateway sharding as Discord documents it, over real sockets: a bot in
//! six guilds (three on each shard of two) with one session per shard.
//! Each READY lists its shard's guilds only and GUILD_CREATE follows for
//! those; a message in a guild reaches the owning shard only, a DM shard 0
//! only; a guild joined later goes to its shard; 4011 counts the shard's
//! guilds; `GET /gateway/bot`'s `session_start_limit.remaining` counts
//! IDENTIFYs down and the one past the total is closed with 4004 and, as
//! Discord documents, terminates the bot's sessions and resets its token; an
//! IDENTIFY in a `max_concurrency` bucket used within its window gets
//! INVALID_SESSION and may identify again on the same socket.
//!
//! "Only" without timing: every event of the node passes one events
//! partition (`gateway_event_partitions: 1`), and a guild's event is
//! queued to every subscribed session of the node in one pass. So once
//! the owning session has an event, any wrong recipient has it queued
//! too, before a barrier message posted afterwards in a guild of its own;
//! each session is read up to its barrier and everything it got checked.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const INTENTS: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::DIRECT_MESSAGES;
const STARTS_TOTAL: u32 = 4;

/// Discord's formula, written out here rather than taken from the crate.
fn shard_of(guild_id: &str, num_shards: u64) -> u64 {
    (guild_id.parse::<u64>().unwrap() >> 22) % num_shards
}

/// HELLO, then IDENTIFY with `shard`: READY, or the close code.
async fn identify(
    node: &TestNode,
    token: &str,
    shard: Option<[u32; 2]>,
) -> Result<(Client, Value), Option<u16>> {
    let mut client = Client::connect(&node.ws).await;
    let hello = client.next().await.unwrap();
    assert_eq!(hello["op"], 10);
    let mut d = json!({"token": format!("Bot {token}"), "intents": INTENTS,
        "properties": {"os": "linux", "browser": "test", "device": "test"}});
    if let Some(shard) = shard {
        d["shard"] = json!(shard);
    }
    client.send(json!({"op": 2, "d": d})).await;
    loop {
        let frame = client.next().await?;
        if frame["t"] == "READY" {
            return Ok((client, frame));
        }
    }
}

/// `session_start_limit` of the bot.
async fn start_limit(node: &TestNode, token: &str) -> Value {
    let (status, body) = node.call("GET", "/gateway/bot", Some(token), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["session_start_limit"]["total"], STARTS_TOTAL);
    assert!(body["session_start_limit"]["max_concurrency"].as_u64() >= Some(1));
    body
}

async fn post(node: &TestNode, token: &str, channel_id: &str, content: &str) -> String {
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(token),
            Some(json!({"content": content})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// What one session was sent: (event, guild id or "" for none, id).
#[derive(Default)]
struct Seen {
    events: Vec<(String, String, String)>,
}

impl Seen {
    /// Reads `client` until a dispatch satisfies `until`, recording every
    /// dispatch on the way.
    async fn read_until(&mut self, client: &mut Client, until: impl Fn(&str, &Value) -> bool) {
        loop {
            let frame = client
                .next()
                .await
                .unwrap_or_else(|code| panic!("closed with {code:?}"));
            let Some(t) = frame["t"].as_str() else {
                continue;
            };
            let d = &frame["d"];
            let guild = match t {
                "GUILD_CREATE" => d["id"].as_str(),
                _ => d["guild_id"].as_str(),
            };
            self.events.push((
                t.to_owned(),
                guild.unwrap_or("").to_owned(),
                d["id"].as_str().unwrap_or("").to_owned(),
            ));
            if until(t, d) {
                return;
            }
        }
    }

    fn guilds_of(&self, event: &str) -> BTreeSet<String> {
        self.events
            .iter()
            .filter(|(t, _, _)| t == event)
            .map(|(_, g, _)| g.clone())
            .collect()
    }

    fn has(&self, event: &str, id: &str) -> bool {
        self.events.iter().any(|(t, _, i)| t == event && i == id)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_hears_its_guilds_and_shard_zero_the_dms() {
    let limits = Limits {
        // One partition: the node's events in one order (see the top).
        gateway_event_partitions: 1,
        // Six guilds in all, three per shard, four after the join.
        ready_guilds_max: 4,
        session_starts_per_window_max: STARTS_TOTAL,
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits.clone()).await;
    let (owner, _) = node.register("owner").await;

    // Guilds until three fall on each shard of two: (guild, channel) each.
    let mut by_shard: [Vec<(String, String)>; 2] = [vec![], vec![]];
    let mut spare = Vec::new();
    for n in 0..200 {
        if by_shard.iter().all(|s| s.len() == 3) {
            break;
        }
        let (guild, channel) = node.guild(&owner, &format!("g{n}")).await;
        let shard = shard_of(&guild, 2) as usize;
        if by_shard[shard].len() < 3 {
            by_shard[shard].push((guild, channel));
        } else {
            spare.push((guild, channel));
        }
    }
    assert!(
        by_shard.iter().all(|s| s.len() == 3),
        "ids spread over both shards"
    );

    // One bot in those six.
    let (status, app) = node
        .call(
            "POST",
            "/applications",
            Some(&owner),
            Some(json!({"name": "shardbot"})),
        )
        .await;
    assert_eq!(status, 200, "{app}");
    let app_id = app["id"].as_str().unwrap().to_owned();
    let (status, reset) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/bot/reset"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{reset}");
    let bot = reset["token"].as_str().unwrap().to_owned();
    let authorize = |guild_id: String| {
        let (node, owner, app_id) = (&node, owner.clone(), app_id.clone());
        async move {
            let (status, body) = node
                .call(
                    "POST",
                    &format!("/oauth2/authorize?client_id={app_id}&scope=bot"),
                    Some(&owner),
                    Some(json!({"guild_id": guild_id, "permissions": "0", "authorize": true})),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        }
    };
    for (guild, _) in by_shard.iter().flatten() {
        authorize(guild.clone()).await;
    }
    let (_, me) = node.call("GET", "/users/@me", Some(&bot), None).await;
    let bot_id = me["id"].as_str().unwrap().to_owned();
    let mine = |shard: usize| -> BTreeSet<String> {
        by_shard[shard].iter().map(|(g, _)| g.clone()).collect()
    };

    // Nothing counted yet; nothing to wait for.
    let limit = start_limit(&node, &bot).await;
    assert_eq!(limit["session_start_limit"]["remaining"], STARTS_TOTAL);
    assert_eq!(limit["session_start_limit"]["reset_after"], 0);
    assert_eq!(
        limit["shards"], 3,
        "six guilds, two (half of ready_guilds_max) per shard"
    );

    // 4011 counts the guilds of the session's shard: all six without a
    // shard or on the one shard of one; and these IDENTIFYs start nothing.
    for shard in [None, Some([0, 1])] {
        let refused = identify(&node, &bot, shard).await.err();
        assert_eq!(refused, Some(Some(4011)), "{shard:?}");
    }
    let limit = start_limit(&node, &bot).await;
    assert_eq!(limit["session_start_limit"]["remaining"], STARTS_TOTAL);

    // One session per shard: READY lists exactly its guilds.
    let mut clients = Vec::new();
    for shard in 0..2u32 {
        let (client, ready) = identify(&node, &bot, Some([shard, 2])).await.unwrap();
        assert_eq!(ready["d"]["shard"], json!([shard, 2]));
        let listed: BTreeSet<String> = ready["d"]["guilds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(listed, mine(shard as usize), "READY of shard {shard}");
        let limit = start_limit(&node, &bot).await["session_start_limit"].clone();
        assert_eq!(limit["remaining"], STARTS_TOTAL - 1 - shard, "{limit}");
        let reset_after = limit["reset_after"].as_u64().unwrap();
        assert!(
            reset_after > 0 && reset_after <= limits.session_start_window_ms,
            "{limit}"
        );
        clients.push(client);
    }

    // GUILD_CREATE for its three guilds.
    let mut seen = [Seen::default(), Seen::default()];
    for shard in 0..2 {
        let want = mine(shard);
        let (seen, client) = (&mut seen[shard], &mut clients[shard]);
        while seen.guilds_of("GUILD_CREATE") != want {
            seen.read_until(client, |t, _| t == "GUILD_CREATE").await;
            assert!(
                seen.guilds_of("GUILD_CREATE").is_subset(&want),
                "shard {shard}"
            );
        }
    }

    // A message in each guild reaches its shard.
    let mut messages = [vec![], vec![]];
    for shard in 0..2 {
        for (_, channel) in &by_shard[shard] {
            messages[shard].push(post(&node, &owner, channel, "hello").await);
        }
    }
    for shard in 0..2 {
        for id in &messages[shard] {
            if !seen[shard].has("MESSAGE_CREATE", id) {
                let id = id.clone();
                seen[shard]
                    .read_until(&mut clients[shard], |t, d| {
                        t == "MESSAGE_CREATE" && d["id"] == id.as_str()
                    })
                    .await;
            }
        }
    }

    // A DM reaches shard 0.
    let (status, dm) = node
        .call(
            "POST",
            "/users/@me/channels",
            Some(&owner),
            Some(json!({"recipient_id": bot_id})),
        )
        .await;
    assert_eq!(status, 200, "{dm}");
    let dm_message = post(&node, &owner, dm["id"].as_str().unwrap(), "psst").await;
    if !seen[0].has("MESSAGE_CREATE", &dm_message) {
        seen[0]
            .read_until(&mut clients[0], |t, d| {
                t == "MESSAGE_CREATE" && d["id"] == dm_message.as_str()
            })
            .await;
    }

    // Barriers: everything above is queued to any wrong recipient by now.
    for shard in 0..2 {
        let barrier = post(&node, &owner, &by_shard[shard][0].1, "barrier").await;
        seen[shard]
            .read_until(&mut clients[shard], |t, d| {
                t == "MESSAGE_CREATE" && d["id"] == barrier.as_str()
            })
            .await;
    }
    for shard in 0..2 {
        let events = &seen[shard].events;
        for (t, guild, id) in events {
            match t.as_str() {
                "GUILD_CREATE" => assert!(mine(shard).contains(guild), "shard {shard}: {guild}"),
                "MESSAGE_CREATE" if guild.is_empty() => {
                    assert_eq!((shard, id), (0, &dm_message), "DMs on shard 0 only");
                }
                "MESSAGE_CREATE" => assert!(mine(shard).contains(guild), "shard {shard}: {guild}"),
                _ => {}
            }
        }
        let foreign: Vec<&String> = messages[1 - shard]
            .iter()
            .filter(|id| seen[shard].has("MESSAGE_CREATE", id))
            .collect();
        assert!(foreign.is_empty(), "shard {shard} got {foreign:?}");
    }
    assert!(seen[0].has("MESSAGE_CREATE", &dm_message));
    assert!(!seen[1].has("MESSAGE_CREATE", &dm_message));

    // A guild joined later: its shard gets GUILD_CREATE and its messages,
    // the other shard neither.
    let (late, late_channel) = match spare.pop() {
        Some(spare) => spare,
        None => node.guild(&owner, "late").await,
    };
    let owning = shard_of(&late, 2) as usize;
    let other = 1 - owning;
    authorize(late.clone()).await;
    seen[owning]
        .read_until(&mut clients[owning], |t, d| {
            t == "GUILD_CREATE" && d["id"] == late.as_str()
        })
        .await;
    let late_message = post(&node, &owner, &late_channel, "late").await;
    seen[owning]
        .read_until(&mut clients[owning], |t, d| {
            t == "MESSAGE_CREATE" && d["id"] == late_message.as_str()
        })
        .await;
    let barrier = post(&node, &owner, &by_shard[other][0].1, "barrier").await;
    seen[other]
        .read_until(&mut clients[other], |t, d| {
            t == "MESSAGE_CREATE" && d["id"] == barrier.as_str()
        })
        .await;
    assert!(
        !seen[other].events.iter().any(|(_, g, _)| g == &late),
        "shard {other} heard the late guild"
    );

    // Two more starts use the total; the next IDENTIFY is refused with
    // 4004, which libraries do not reconnect on.
    for remaining in [1, 0] {
        let (client, _) = identify(&node, &bot, Some([0, 2])).await.unwrap();
        clients.push(client);
        let limit = start_limit(&node, &bot).await;
        assert_eq!(limit["session_start_limit"]["remaining"], remaining);
    }
    let refused = identify(&node, &bot, Some([1, 2])).await.err();
    assert_eq!(refused, Some(Some(4004)));
    // Discord: "all active sessions for the app will be terminated, the
    // bot token will be reset". Every live session closes with 4004, and
    // the token no longer authenticates anywhere.
    for client in &mut clients {
        assert_eq!(client.close_code().await, Some(4004));
    }
    let (status, _) = node.call("GET", "/users/@me", Some(&bot), None).await;
    assert_eq!(status, 401);
    // The owner resets it for a new one; the limit stands until it resets.
    let (status, reset) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/bot/reset"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{reset}");
    let bot = reset["token"].as_str().unwrap().to_owned();
    let limit = start_limit(&node, &bot).await;
    assert_eq!(limit["session_start_limit"]["remaining"], 0);
    assert!(
        limit["session_start_limit"]["reset_after"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(node.metric("guildhall_session_limit_resets_total").await, 1);
    assert_eq!(
        node.metric("guildhall_terminated_sessions_total").await,
        clients.len() as u64
    );
    drop(clients);
    node.stop().await;
}

/// Two gateway nodes over one database count one bot's session starts
/// against one total: each IDENTIFY lowers `remaining` as either node
/// reports it. A RESUME starts no session: with nothing remaining, a
/// session of node a resumes on node b, and the count stays where it was.
/// The IDENTIFY past the total is refused on the node it reaches and ends
/// the bot's sessions on both, its token revoked on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_nodes_share_one_session_start_count() {
    use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
    use std::sync::Arc;
    let limits = Limits {
        session_starts_per_window_max: STARTS_TOTAL,
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let start = |name: &'static str, worker_id| {
        let (dir, registry, bus, limits) = (
            dir.path().to_owned(),
            registry.clone(),
            bus.clone(),
            limits.clone(),
        );
        async move {
            let node = TestNode::member_with(name, worker_id, &dir, registry, bus, limits).await;
            // Serving means migrated: the next node opens a migrated
            // database rather than migrating it at the same time.
            node.metric("guildhall_ring_members").await;
            node
        }
    };
    let nodes = [start("a", 1).await, start("b", 2).await];
    let (owner, _) = nodes[0].register("owner").await;
    let (status, app) = nodes[0]
        .call(
            "POST",
            "/applications",
            Some(&owner),
            Some(json!({"name": "bot"})),
        )
        .await;
    assert_eq!(status, 200, "{app}");
    let app_id = app["id"].as_str().unwrap();
    let (status, reset) = nodes[0]
        .call(
            "POST",
            &format!("/applications/{app_id}/bot/reset"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{reset}");
    let bot = reset["token"].as_str().unwrap().to_owned();

    let mut sessions = Vec::new();
    let mut on_a = None;
    for started in 1..=STARTS_TOTAL {
        let node = &nodes[started as usize % 2];
        let (client, ready) = identify(node, &bot, None).await.unwrap();
        if started % 2 == 0 {
            on_a = Some(ready);
        }
        sessions.push(client);
        for node in &nodes {
            let limit = start_limit(node, &bot).await;
            assert_eq!(
                limit["session_start_limit"]["remaining"],
                STARTS_TOTAL - started
            );
        }
    }
    // The last session identified on a: its socket goes, and it resumes
    // on b, which starts no session.
    let ready = on_a.unwrap();
    drop(sessions.remove(STARTS_TOTAL as usize - 1));
    let mut resumed = Client::connect(&nodes[1].ws).await;
    assert_eq!(resumed.next().await.unwrap()["op"], 10);
    resumed
        .send(json!({"op": 6, "d": {"token": format!("Bot {bot}"),
            "session_id": ready["d"]["session_id"], "seq": ready["s"]}}))
        .await;
    resumed.dispatch("RESUMED").await;
    for node in &nodes {
        let limit = start_limit(node, &bot).await;
        assert_eq!(limit["session_start_limit"]["remaining"], 0);
    }
    sessions.push(resumed);

    // One IDENTIFY past the total, on b: refused, and every session of the
    // bot on both nodes ends with 4004 (the node that refused tells the
    // other over the bus); the token is gone on both, so a, which never
    // counted past the total itself, refuses it too.
    assert_eq!(
        identify(&nodes[1], &bot, None).await.err(),
        Some(Some(4004))
    );
    for session in &mut sessions {
        assert_eq!(session.close_code().await, Some(4004));
    }
    for node in &nodes {
        assert_eq!(identify(node, &bot, None).await.err(), Some(Some(4004)));
        let (status, _) = node.call("GET", "/users/@me", Some(&bot), None).await;
        assert_eq!(status, 401);
    }
    drop(sessions);
    for node in nodes {
        node.stop().await;
    }
}

/// HELLO's socket after an IDENTIFY: READY, or INVALID_SESSION's `d`.
async fn identify_on(client: &mut Client, token: &str, shard: [u32; 2]) -> Result<Value, Value> {
    client
        .send(
            json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": INTENTS,
            "shard": shard, "properties": {"os": "linux", "browser": "test", "device": "test"}}}),
        )
        .await;
    loop {
        let frame = client.next().await.unwrap();
        if frame["t"] == "READY" {
            return Ok(frame);
        }
        if frame["op"] == 9 {
            return Err(frame["d"].clone());
        }
    }
}

/// Discord's `max_concurrency`: a bot's IDENTIFYs fall in buckets by
/// `shard_id % max_concurrency`, one per bucket per window; one more in a
/// used bucket gets INVALID_SESSION (`d: false`) and its socket stays open
/// for the next IDENTIFY, which a free bucket admits. Buckets are the
/// bot's own, and users' IDENTIFYs are not bucketed. The window outlasts
/// the test, so nothing here depends on timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifies_are_admitted_one_per_concurrency_bucket() {
    let limits = Limits {
        identify_concurrency_max: 2,
        identify_concurrency_window_ms: 60_000,
        session_starts_per_window_max: STARTS_TOTAL,
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("owner").await;
    let (guild, _) = node.guild(&owner, "buckets").await;
    let (_, bot) = node.bot_in(&owner, &guild).await;
    let (_, other_bot) = node.bot_in(&owner, &guild).await;
    let limit = start_limit(&node, &bot).await;
    assert_eq!(limit["session_start_limit"]["max_concurrency"], 2);
    let connect = async || {
        let mut client = Client::connect(&node.ws).await;
        assert_eq!(client.next().await.unwrap()["op"], 10);
        client
    };

    let mut shard0 = connect().await;
    let ready = identify_on(&mut shard0, &bot, [0, 4]).await.unwrap();
    assert_eq!(ready["d"]["shard"], json!([0, 4]));
    // Shard 2 is bucket 0 too: refused, and the socket may identify again.
    let mut next = connect().await;
    assert_eq!(
        identify_on(&mut next, &bot, [2, 4]).await,
        Err(json!(false))
    );
    assert_eq!(
        node.metric("guildhall_identify_concurrency_refused_total")
            .await,
        1
    );
    // Shard 1 (bucket 1) on that same socket: admitted.
    let ready = identify_on(&mut next, &bot, [1, 4]).await.unwrap();
    assert_eq!(ready["d"]["shard"], json!([1, 4]));
    let mut third = connect().await;
    assert_eq!(
        identify_on(&mut third, &bot, [3, 4]).await,
        Err(json!(false))
    );
    // A refused IDENTIFY started no session.
    assert_eq!(
        start_limit(&node, &bot).await["session_start_limit"]["remaining"],
        limit["session_start_limit"]["remaining"].as_u64().unwrap() - 2
    );
    // Another bot's bucket 0 is its own.
    let mut other = connect().await;
    identify_on(&mut other, &other_bot, [0, 4]).await.unwrap();
    // Users are not bucketed: two IDENTIFYs in a row, two READYs.
    for _ in 0..2 {
        let mut user = Client::connect(&node.ws).await;
        user.identify(&owner, INTENTS).await;
    }
    assert_eq!(
        node.metric("guildhall_identify_concurrency_refused_total")
            .await,
        2
    );
    assert_eq!(
        node.metric("guildhall_identify_buckets_untracked_total")
            .await,
        0
    );
}
