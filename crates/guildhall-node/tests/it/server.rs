//! The embedded server over real sockets: REST and gateway as a bot library
//! uses them, and every bad input of the issue with its documented answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use crate::common::{Client, TestNode};
use guildhall_proto::intents;
use serde_json::json;

const BOT_INTENTS: u64 =
    intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS;

#[tokio::test]
async fn identify_ready_guild_create_message_create_and_resume() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Test Guild").await;
    let (app_id, bot) = node.bot_in(&owner, &guild_id).await;

    let mut client = Client::connect(&node.ws).await;
    let ready = client.identify(&bot, BOT_INTENTS).await;
    assert_eq!(ready["s"], 1);
    let d = &ready["d"];
    assert_eq!(d["v"], 10);
    assert_eq!(d["user"]["bot"], true);
    assert_eq!(d["application"]["id"], app_id.as_str());
    assert_eq!(d["guilds"], json!([{"id": guild_id, "unavailable": true}]));
    assert_eq!(d["resume_gateway_url"], node.ws.as_str());
    let session_id = d["session_id"].as_str().unwrap().to_owned();

    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(guild_create["s"], 2);
    let g = &guild_create["d"];
    assert_eq!(g["id"], guild_id.as_str());
    assert_eq!(
        g["roles"][0]["id"],
        guild_id.as_str(),
        "@everyone's id is the guild's"
    );
    assert_eq!(g["channels"][0]["name"], "general");
    assert_eq!(g["member_count"], 2);

    // The owner posts; the bot sees MESSAGE_CREATE with content.
    let (status, posted) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&owner),
            Some(json!({"content": "!ping"})),
        )
        .await;
    assert_eq!(status, 200, "{posted}");
    assert_eq!(posted["author"]["id"], owner_id.as_str());
    let created = client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["content"], "!ping");
    assert_eq!(created["d"]["id"], posted["id"]);
    assert_eq!(created["d"]["guild_id"], guild_id.as_str());
    let last_seen = created["s"].as_u64().unwrap();

    // Heartbeat is acknowledged.
    client.send(json!({"op": 1, "d": last_seen})).await;
    assert_eq!(client.next().await.unwrap()["op"], 11);

    // Forced disconnect; two messages while away; RESUME replays exactly
    // them with their original sequence numbers, then RESUMED.
    drop(client);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for text in ["missed one", "missed two"] {
        let (status, _) = node
            .call(
                "POST",
                &format!("/channels/{channel_id}/messages"),
                Some(&owner),
                Some(json!({"content": text})),
            )
            .await;
        assert_eq!(status, 200);
    }
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    client
        .send(json!({"op": 6, "d": {"token": bot, "session_id": session_id, "seq": last_seen}}))
        .await;
    let one = client.next().await.unwrap();
    let two = client.next().await.unwrap();
    let resumed = client.next().await.unwrap();
    assert_eq!(
        (one["t"].as_str(), one["s"].as_u64()),
        (Some("MESSAGE_CREATE"), Some(last_seen + 1))
    );
    assert_eq!(one["d"]["content"], "missed one");
    assert_eq!(
        (two["t"].as_str(), two["s"].as_u64()),
        (Some("MESSAGE_CREATE"), Some(last_seen + 2))
    );
    assert_eq!(resumed["t"], "RESUMED");
    assert_eq!(resumed["d"], json!({}), "RESUMED's d must be an object");
    assert_eq!(resumed["s"], last_seen + 3);

    // A RESUME of an unknown session: INVALID_SESSION (d=false), and the
    // socket stays open for IDENTIFY.
    let mut bad = Client::connect(&node.ws).await;
    bad.next().await.unwrap();
    bad.send(json!({"op": 6, "d": {"token": bot, "session_id": "no-such-session", "seq": 1}}))
        .await;
    assert_eq!(
        bad.next().await.unwrap(),
        json!({"op": 9, "d": false, "s": null, "t": null})
    );
    // A RESUME claiming a sequence the session never sent: 4007.
    let mut future = Client::connect(&node.ws).await;
    future.next().await.unwrap();
    future
        .send(json!({"op": 6, "d": {"token": bot, "session_id": session_id, "seq": 10_000}}))
        .await;
    assert_eq!(future.close_code().await, Some(4007));
    node.stop().await;
}

#[tokio::test]
async fn message_content_is_blank_without_the_intent_and_op8_chunks_members() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Test Guild").await;
    let (_, bot) = node.bot_in(&owner, &guild_id).await;
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&bot, intents::GUILDS | intents::GUILD_MESSAGES)
        .await;
    client.dispatch("GUILD_CREATE").await;
    node.call(
        "POST",
        &format!("/channels/{channel_id}/messages"),
        Some(&owner),
        Some(json!({"content": "secret"})),
    )
    .await;
    let created = client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(
        created["d"]["content"], "",
        "no MESSAGE_CONTENT intent: blanked"
    );

    client.send(json!({"op": 8, "d": {"guild_id": guild_id.parse::<u64>().unwrap(), "query": "", "limit": 0, "nonce": "n1"}})).await;
    let chunk = client.dispatch("GUILD_MEMBERS_CHUNK").await;
    assert_eq!(chunk["d"]["members"].as_array().unwrap().len(), 2);
    assert_eq!(chunk["d"]["nonce"], "n1");
    assert_eq!(chunk["d"]["chunk_count"], 1);
    node.stop().await;
}

#[tokio::test]
async fn gateway_bad_inputs_close_with_the_documented_codes() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, _) = node.guild(&owner, "Test Guild").await;
    let (app_id, bot) = node.bot_in(&owner, &guild_id).await;
    let identify = |token: &str, intents: u64| {
        json!({"op": 2, "d": {"token": token, "intents": intents}}).to_string()
    };
    let cases: Vec<(&str, Vec<String>, u16)> = vec![
        ("invalid JSON", vec!["{nope".into()], 4002),
        ("unknown opcode", vec![r#"{"op":42,"d":null}"#.into()], 4001),
        (
            "payload over 4096 bytes",
            vec![format!(r#"{{"op":1,"d":"{}"}}"#, "x".repeat(5000))],
            4002,
        ),
        (
            "payload before IDENTIFY",
            vec![r#"{"op":8,"d":{"guild_id":"1","query":"","limit":0}}"#.into()],
            4003,
        ),
        (
            "second IDENTIFY",
            vec![identify(&bot, 1), identify(&bot, 1)],
            4005,
        ),
        ("bad token", vec![identify("not-a-token", 1)], 4004),
        ("invalid intents", vec![identify(&bot, 1 << 40)], 4013),
    ];
    for (name, frames, code) in cases {
        let mut client = Client::connect(&node.ws).await;
        client.next().await.unwrap();
        for frame in &frames {
            client.send_raw(frame).await;
        }
        assert_eq!(client.close_code().await, Some(code), "{name}");
    }
    // Privileged intents switched off for the application: 4014.
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/applications/{app_id}"),
            Some(&owner),
            Some(json!({"flags": 0})),
        )
        .await;
    assert_eq!(status, 200);
    let mut client = Client::connect(&node.ws).await;
    client.next().await.unwrap();
    client
        .send_raw(&identify(&bot, intents::MESSAGE_CONTENT))
        .await;
    assert_eq!(client.close_code().await, Some(4014));
    // After all of that, the server still serves the bot: READY, after
    // at most a few INVALID_SESSIONs that a loaded machine may answer
    // with (what the test is about is that it serves, not how fast).
    let (_client, ready) = Client::ready_with_retries(&node.ws, &bot, intents::GUILDS, 5).await;
    assert_eq!(ready["t"], "READY");
    node.stop().await;
}

#[tokio::test]
async fn rest_bad_inputs_get_discord_error_bodies() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (stranger, _) = node.register("mallory").await;
    let (_, channel_id) = node.guild(&owner, "Test Guild").await;
    let messages = format!("/channels/{channel_id}/messages");

    let raw = |body: &'static str| {
        let client = node.http.clone();
        let url = format!("{}{messages}", node.base);
        let token = owner.clone();
        async move {
            let response = client
                .post(url)
                .header("authorization", token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let content_type = response.headers()["content-type"]
                .to_str()
                .unwrap()
                .to_owned();
            (
                status,
                content_type,
                response.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let (status, content_type, body) = raw("{not json").await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50109)));
    assert_eq!(content_type, "application/json", "exactly, no charset");
    let (status, _, body) = raw(Box::leak(
        format!(r#"{{"content":"{}"}}"#, "x".repeat(70_000)).into_boxed_str(),
    ))
    .await;
    assert_eq!((status, body["code"].as_u64()), (413, Some(40005)));

    let cases: Vec<(Option<&str>, &str, serde_json::Value, u16, u64)> = vec![
        (Some(&owner), &messages, json!({"content": ""}), 400, 50006),
        (
            Some(&owner),
            &messages,
            json!({"content": "x".repeat(2001)}),
            400,
            50035,
        ),
        (Some(&owner), &messages, json!({"content": 5}), 400, 50035),
        (None, &messages, json!({"content": "hi"}), 401, 0),
        (
            Some("bad-token"),
            &messages,
            json!({"content": "hi"}),
            401,
            0,
        ),
        (
            Some(&stranger),
            &messages,
            json!({"content": "hi"}),
            403,
            50001,
        ),
        (
            Some(&owner),
            "/channels/1234567890123/messages",
            json!({"content": "hi"}),
            404,
            10003,
        ),
    ];
    for (token, path, body, status, code) in cases {
        let (got_status, got) = node.call("POST", path, token, Some(body.clone())).await;
        assert_eq!(
            (got_status, got["code"].as_u64()),
            (status, Some(code)),
            "{path} {body}: {got}"
        );
    }
    let (status, body) = node.call("GET", &messages, Some(&stranger), None).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(50001)),
        "a non-member cannot read"
    );
    // Nothing was stored by any of those.
    let (status, history) = node.call("GET", &messages, Some(&owner), None).await;
    assert_eq!(status, 200);
    assert_eq!(history, json!([]));
    // And the server still serves.
    let (status, _) = node
        .call(
            "POST",
            &messages,
            Some(&owner),
            Some(json!({"content": "still here"})),
        )
        .await;
    assert_eq!(status, 200);
    node.stop().await;
}

#[tokio::test]
async fn rate_limit_headers_and_429_shape() {
    let limits = guildhall_limits::Limits {
        rest_rate_limit_per_window: 2,
        rest_rate_window_ms: 60_000,
        ..Default::default()
    };
    let node = TestNode::with_limits(limits).await;
    let url = format!("{}/gateway", node.base);
    for _ in 0..2 {
        let response = node.http.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        for header in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-reset-after",
            "x-ratelimit-bucket",
            "x-ratelimit-scope",
        ] {
            assert!(response.headers().contains_key(header), "{header}");
        }
    }
    let response = node.http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    assert!(response.headers().contains_key("via"));
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["message"], "You are being rate limited.");
    assert_eq!(body["global"], false);
    assert_eq!(body["code"], 0);
    assert!(body["retry_after"].as_f64().unwrap() > 0.0);
    node.stop().await;
}

#[tokio::test]
async fn upgrades_over_the_session_cap_are_refused_before_the_101() {
    let limits = guildhall_limits::Limits {
        sessions_per_node_max: 1,
        ..Default::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("alice").await;
    let mut first = Client::connect(&node.ws).await;
    first.identify(&owner, intents::GUILDS).await;
    match tokio_tungstenite::connect_async(format!("{}/", node.ws)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            assert!(response.headers().contains_key("retry-after"));
        }
        other => panic!(
            "expected 503 before the upgrade, got {:?}",
            other.map(|_| ())
        ),
    }
    node.stop().await;
}

#[tokio::test]
async fn shutdown_drains_sessions_with_reconnect_and_metrics_count() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (_, channel_id) = node.guild(&owner, "Drain Guild").await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut client = Client::connect(&node.ws).await;
        client
            .identify(&owner, intents::GUILDS | intents::GUILD_MESSAGES)
            .await;
        client.dispatch("GUILD_CREATE").await;
        clients.push(client);
    }
    node.call(
        "POST",
        &format!("/channels/{channel_id}/messages"),
        Some(&owner),
        Some(json!({"content": "hi"})),
    )
    .await;
    let metrics = node.metrics_text().await;
    for line in [
        "guildhall_sessions 3",
        "guildhall_ready_total 3",
        "guildhall_messages_total 1",
        "guildhall_sockets_open 3",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    assert!(metrics.contains("# TYPE guildhall_dispatches_total counter"));
    assert!(
        metrics
            .lines()
            .any(|l| l == "guildhall_identify_to_ready_seconds_count 3"),
        "{metrics}"
    );
    assert!(metrics.contains("guildhall_rest_request_seconds_bucket{le=\"+Inf\"}"));

    let readiness = node.base.replace("/api/v10", "/healthz");
    assert_eq!(
        node.http.get(&readiness).send().await.unwrap().status(),
        200
    );
    let stop = tokio::spawn(node.stop());
    for client in &mut clients {
        // Every session gets op 7 RECONNECT, then a reconnectable close.
        loop {
            match client.next().await {
                Ok(frame) if frame["op"] == 7 => break,
                Ok(_) => continue,
                Err(code) => panic!("closed with {code:?} before RECONNECT"),
            }
        }
        assert_eq!(client.close_code().await, Some(4000));
    }
    stop.await.unwrap();
}

#[tokio::test]
async fn guild_management_emits_events_and_enforces_permissions() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (guild_id, channel_id) = node.guild(&owner, "Managed").await;
    // Bob joins through an invite.
    let (status, invite) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/invites"),
            Some(&owner),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{invite}");
    let code = invite["code"].as_str().unwrap();
    let (status, preview) = node
        .call("GET", &format!("/invites/{code}"), None, None)
        .await;
    assert_eq!(
        (status, preview["guild"]["id"].as_str()),
        (200, Some(guild_id.as_str()))
    );
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);

    let all = intents::GUILDS
        | intents::GUILD_MEMBERS
        | intents::GUILD_MESSAGES
        | intents::GUILD_MESSAGE_REACTIONS
        | intents::MESSAGE_CONTENT;
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&owner, all).await;
    watcher.dispatch("GUILD_CREATE").await;
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client.identify(&bob, all).await;
    bob_client.dispatch("GUILD_CREATE").await;

    // Bob may not manage anything yet.
    let (status, body) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&bob),
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));

    // Roles: create, give to Bob, rename; events for each.
    let (status, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "mods", "permissions": "8192", "hoist": true})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    assert_eq!(role["permissions"], "8192");
    let role_id = role["id"].as_str().unwrap().to_owned();
    let created = watcher.dispatch("GUILD_ROLE_CREATE").await;
    assert_eq!(created["d"]["role"]["name"], "mods");
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{bob_id}/roles/{role_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let update = watcher.dispatch("GUILD_MEMBER_UPDATE").await;
    assert_eq!(update["d"]["roles"], json!([role_id]));
    let (status, member) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/members/{bob_id}"),
            Some(&owner),
            Some(json!({"nick": "Bobby"})),
        )
        .await;
    assert_eq!((status, member["nick"].as_str()), (200, Some("Bobby")));
    let (status, renamed) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/roles/{role_id}"),
            Some(&owner),
            Some(json!({"name": "moderators"})),
        )
        .await;
    assert_eq!(
        (status, renamed["name"].as_str()),
        (200, Some("moderators"))
    );
    let (status, page) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members?limit=1"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!((status, page.as_array().unwrap().len()), (200, 1));
    let first = page[0]["user"]["id"].as_str().unwrap().to_owned();
    let (_, rest) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members?limit=10&after={first}"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(
        rest.as_array().unwrap().len(),
        1,
        "paging with after skips the first"
    );
    assert_ne!(rest[0]["user"]["id"].as_str().unwrap(), first);
    let (status, roles) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/roles"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!((status, roles.as_array().unwrap().len()), (200, 2));

    // Channel update.
    let (status, channel) = node
        .call(
            "PATCH",
            &format!("/channels/{channel_id}"),
            Some(&owner),
            Some(json!({"name": "lobby", "topic": "hello"})),
        )
        .await;
    assert_eq!(
        (status, channel["name"].as_str(), channel["topic"].as_str()),
        (200, Some("lobby"), Some("hello"))
    );
    assert_eq!(
        watcher.dispatch("CHANNEL_UPDATE").await["d"]["name"],
        "lobby"
    );

    // Reactions and bulk delete (Bob's role carries MANAGE_MESSAGES).
    let mut ids = Vec::new();
    for text in ["one", "two", "three"] {
        let (_, m) = node
            .call(
                "POST",
                &format!("/channels/{channel_id}/messages"),
                Some(&owner),
                Some(json!({"content": text})),
            )
            .await;
        ids.push(m["id"].as_str().unwrap().to_owned());
    }
    let (status, _) = node
        .call(
            "PUT",
            &format!(
                "/channels/{channel_id}/messages/{}/reactions/%F0%9F%91%8D/@me",
                ids[0]
            ),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let reaction = watcher.dispatch("MESSAGE_REACTION_ADD").await;
    assert_eq!(reaction["d"]["emoji"], json!({"id": null, "name": "👍"}));
    assert_eq!(reaction["d"]["user_id"], bob_id.as_str());
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages/bulk-delete"),
            Some(&bob),
            Some(json!({"messages": [ids[1], ids[2]]})),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(
        watcher.dispatch("MESSAGE_DELETE_BULK").await["d"]["ids"],
        json!([ids[1], ids[2]])
    );

    // Kick: everyone sees GUILD_MEMBER_REMOVE; Bob's session sees GUILD_DELETE.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/guilds/{guild_id}/members/{bob_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        watcher.dispatch("GUILD_MEMBER_REMOVE").await["d"]["user"]["id"],
        bob_id.as_str()
    );
    assert_eq!(
        bob_client.dispatch("GUILD_DELETE").await["d"]["id"],
        guild_id.as_str()
    );
    let (status, body) = node
        .call(
            "GET",
            &format!("/channels/{channel_id}/messages"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(50001)),
        "a kicked member cannot read"
    );
    node.stop().await;
}

#[tokio::test]
async fn direct_messages_reach_both_participants() {
    let node = TestNode::start().await;
    let (alice, alice_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (mallory, _) = node.register("mallory").await;
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client.identify(&bob, intents::DIRECT_MESSAGES).await;
    let (status, dm) = node
        .call(
            "POST",
            "/users/@me/channels",
            Some(&alice),
            Some(json!({"recipient_id": bob_id})),
        )
        .await;
    assert_eq!((status, dm["type"].as_u64()), (200, Some(1)), "{dm}");
    assert_eq!(dm["recipients"][0]["id"], bob_id.as_str());
    let (_, again) = node
        .call(
            "POST",
            "/users/@me/channels",
            Some(&bob),
            Some(json!({"recipient_id": alice_id})),
        )
        .await;
    assert_eq!(again["id"], dm["id"], "one DM channel per pair");
    let channel = dm["id"].as_str().unwrap();
    let (status, _) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&alice),
            Some(json!({"content": "psst"})),
        )
        .await;
    assert_eq!(status, 200);
    let created = bob_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["content"], "psst", "DMs are never blanked");
    assert!(created["d"].get("guild_id").is_none());
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&mallory),
            Some(json!({"content": "hi"})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50001)));
    let (status, history) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(
        (status, history[0]["content"].as_str()),
        (200, Some("psst"))
    );
    node.stop().await;
}

#[tokio::test]
async fn guild_user_presence_and_voice_events() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (guild_id, _) = node.guild(&owner, "Events").await;
    let all = intents::GUILDS | intents::GUILD_PRESENCES | intents::GUILD_VOICE_STATES;
    let mut client = Client::connect(&node.ws).await;
    client.identify(&owner, all).await;
    client.dispatch("GUILD_CREATE").await;

    let (status, _) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}"),
            Some(&owner),
            Some(json!({"name": "Renamed"})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        client.dispatch("GUILD_UPDATE").await["d"]["name"],
        "Renamed"
    );

    let (status, me) = node
        .call(
            "PATCH",
            "/users/@me",
            Some(&owner),
            Some(json!({"global_name": "Alice A."})),
        )
        .await;
    assert_eq!(
        (status, me["global_name"].as_str()),
        (200, Some("Alice A."))
    );
    assert_eq!(
        client.dispatch("USER_UPDATE").await["d"]["global_name"],
        "Alice A."
    );

    client
        .send(
            json!({"op": 3, "d": {"since": null, "activities": [], "status": "dnd", "afk": false}}),
        )
        .await;
    let presence = client.dispatch("PRESENCE_UPDATE").await;
    assert_eq!(
        (
            presence["d"]["status"].as_str(),
            presence["d"]["user"]["id"].as_str()
        ),
        (Some("dnd"), Some(owner_id.as_str()))
    );

    // Voice: op 4 into a voice channel → VOICE_STATE_UPDATE and
    // VOICE_SERVER_UPDATE with the embedded SFU's endpoint.
    let (status, voice) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "Voice", "type": 2})),
        )
        .await;
    assert_eq!(status, 200, "{voice}");
    let voice_id = voice["id"].as_str().unwrap();
    client.send(json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": voice_id, "self_mute": false, "self_deaf": true}})).await;
    let state = client.dispatch("VOICE_STATE_UPDATE").await;
    assert_eq!(
        (
            state["d"]["channel_id"].as_str(),
            state["d"]["self_deaf"].as_bool()
        ),
        (Some(voice_id), Some(true))
    );
    let server = client.dispatch("VOICE_SERVER_UPDATE").await;
    assert!(
        server["d"]["endpoint"]
            .as_str()
            .is_some_and(|e| e.ends_with("/voice")),
        "{server}"
    );
    assert_eq!(server["d"]["guild_id"], guild_id.as_str());
    assert_eq!(server["d"]["token"].as_str().map(str::len), Some(32));

    // Deleting the guild: GUILD_DELETE, then the guild is gone.
    let (status, _) = node
        .call("DELETE", &format!("/guilds/{guild_id}"), Some(&owner), None)
        .await;
    assert_eq!(status, 204);
    assert_eq!(
        client.dispatch("GUILD_DELETE").await["d"]["id"],
        guild_id.as_str()
    );
    let (status, body) = node
        .call("GET", &format!("/guilds/{guild_id}"), Some(&owner), None)
        .await;
    assert_eq!((status, body["code"].as_u64()), (404, Some(10004)));
    node.stop().await;
}

#[tokio::test]
async fn a_reset_bot_token_stops_working_at_once() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, _) = node.guild(&owner, "Tokens").await;
    let (app_id, old) = node.bot_in(&owner, &guild_id).await;
    // Warm the users cache with the old token.
    assert_eq!(
        node.call("GET", "/users/@me", Some(&old), None).await.0,
        200
    );
    let (status, reset) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/bot/reset"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        node.call("GET", "/users/@me", Some(&old), None).await.0,
        401,
        "cached token was evicted"
    );
    assert_eq!(
        node.call(
            "GET",
            "/users/@me",
            Some(reset["token"].as_str().unwrap()),
            None
        )
        .await
        .0,
        200
    );
    let mut client = Client::connect(&node.ws).await;
    client.next().await.unwrap();
    client
        .send(json!({"op": 2, "d": {"token": old, "intents": 1}}))
        .await;
    assert_eq!(client.close_code().await, Some(4004));
    node.stop().await;
}

#[tokio::test]
async fn op8_pages_every_member_in_counted_chunks() {
    let limits = guildhall_limits::Limits {
        members_per_page_max: 2,
        ..Default::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Chunky").await;
    let (_, invite) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/invites"),
            Some(&owner),
            Some(json!({})),
        )
        .await;
    let code = invite["code"].as_str().unwrap().to_owned();
    for name in ["bob", "carol", "dave", "erin"] {
        let (token, _) = node.register(name).await;
        assert_eq!(
            node.call("POST", &format!("/invites/{code}"), Some(&token), None)
                .await
                .0,
            200
        );
    }
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&owner, intents::GUILDS | intents::GUILD_MEMBERS)
        .await;
    client.dispatch("GUILD_CREATE").await;
    client
        .send(json!({"op": 8, "d": {"guild_id": guild_id, "query": "", "limit": 0}}))
        .await;
    let mut seen = std::collections::BTreeSet::new();
    for expected_index in 0..3 {
        let chunk = client.dispatch("GUILD_MEMBERS_CHUNK").await;
        assert_eq!(chunk["d"]["chunk_index"], expected_index);
        assert_eq!(chunk["d"]["chunk_count"], 3);
        for member in chunk["d"]["members"].as_array().unwrap() {
            assert!(
                seen.insert(member["user"]["id"].as_str().unwrap().to_owned()),
                "a member was sent twice"
            );
        }
    }
    assert_eq!(seen.len(), 5, "every member exactly once");
    node.stop().await;
}

/// Waits (bounded) until the node's /metrics has `line`.
async fn metrics_until(node: &TestNode, line: &str) -> String {
    let url = node.base.replace("/api/v10", "/metrics");
    let mut last = String::new();
    for _ in 0..200 {
        last = node
            .http
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if last.lines().any(|l| l == line) {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("never saw {line:?} in\n{last}");
}

#[tokio::test]
async fn registry_announcement_survives_corrupt_entries() {
    use guildhall_cluster::LocalRegistry;
    use guildhall_proto::cluster::instance_key;
    let registry = std::sync::Arc::new(LocalRegistry::default());
    let node = TestNode::with(guildhall_limits::Limits::default(), Some(registry.clone())).await;
    metrics_until(&node, "guildhall_ring_members 1").await;
    metrics_until(&node, "guildhall_registry_instances 1").await;

    // Seed 002: an empty value over this node's own key, garbage elsewhere.
    registry.put_raw(&instance_key("test-node"), Vec::new());
    registry.put_raw(
        &instance_key("stranger"),
        b"{\"schema\":1,\"node\":\"str".to_vec(),
    );
    let metrics = metrics_until(
        &node,
        "guildhall_registry_rejected_entries_total{reason=\"empty\"} 1",
    )
    .await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "guildhall_registry_rejected_entries_total{reason=\"malformed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "guildhall_registry_instances 1"),
        "last good value kept:\n{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l == "guildhall_ring_members 1"),
        "{metrics}"
    );
    let (token, _) = node.register("alice").await;
    assert_eq!(
        node.call("GET", "/users/@me", Some(&token), None).await.0,
        200,
        "still serving"
    );

    node.stop().await;
}

#[tokio::test]
async fn shutdown_revokes_the_lease_at_once() {
    use guildhall_cluster::{LocalRegistry, Registry};
    use guildhall_proto::cluster::{INSTANCE_PREFIX, instance_key};
    let registry = std::sync::Arc::new(LocalRegistry::default());
    let node = TestNode::with(guildhall_limits::Limits::default(), Some(registry.clone())).await;
    metrics_until(&node, "guildhall_registry_instances 1").await;
    assert!(
        registry
            .list(INSTANCE_PREFIX)
            .await
            .unwrap()
            .entries
            .contains_key(&instance_key("test-node"))
    );
    node.stop().await;
    // Well inside the 15 s lease TTL: only a revoke can have removed it.
    assert!(
        registry
            .list(INSTANCE_PREFIX)
            .await
            .unwrap()
            .entries
            .is_empty(),
        "graceful leave revokes the lease"
    );
}

/// A private channel (issue 25): overwrites given at creation hide it
/// from members without the allowed role (50001 on every route, as
/// Discord answers), a role grants it, a member overwrite takes one
/// permission back, and each change is stored, echoed in the channel
/// object and announced with CHANNEL_UPDATE. Malformed overwrites, unknown
/// targets and callers without MANAGE_ROLES are refused with nothing
/// stored.
#[tokio::test]
async fn permission_overwrites_make_a_channel_private() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (guild_id, channel_id) = node.guild(&owner, "Private").await;
    let code = node.invite(&owner, &channel_id).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&owner, intents::GUILDS).await;
    watcher.dispatch("GUILD_CREATE").await;
    let (_, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "staff"})),
        )
        .await;
    let staff = role["id"].as_str().unwrap().to_owned();
    let view = guildhall_proto::permissions::VIEW_CHANNEL.to_string();
    let (status, private) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "tickets", "permission_overwrites": [
                {"id": guild_id, "type": 0, "deny": view},
                {"id": staff, "type": 0, "allow": view, "deny": "0"},
            ]})),
        )
        .await;
    assert_eq!(status, 200, "{private}");
    let overwrites = private["permission_overwrites"].as_array().unwrap();
    assert_eq!(overwrites.len(), 2, "{private}");
    assert_eq!(overwrites[0]["deny"], view);
    assert_eq!(overwrites[1]["type"], 0);
    let private_id = private["id"].as_str().unwrap().to_owned();
    let created = watcher.dispatch("CHANNEL_CREATE").await;
    assert_eq!(
        created["d"]["permission_overwrites"],
        private["permission_overwrites"]
    );

    let post = |token: String| {
        let node = &node;
        let private_id = private_id.clone();
        async move {
            node.call(
                "POST",
                &format!("/channels/{private_id}/messages"),
                Some(&token),
                Some(json!({"content": "hi"})),
            )
            .await
        }
    };
    // Bob cannot see it: no read, no send.
    let (status, body) = node
        .call("GET", &format!("/channels/{private_id}"), Some(&bob), None)
        .await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50001)));
    let (status, body) = post(bob.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50001)));
    // The public channel is unchanged for him.
    let (status, _) = node
        .call("GET", &format!("/channels/{channel_id}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);

    // The role lets him in.
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{bob_id}/roles/{staff}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, body) = post(bob.clone()).await;
    assert_eq!(status, 200, "{body}");

    // A member overwrite takes SEND_MESSAGES back from him alone.
    let send = guildhall_proto::permissions::SEND_MESSAGES.to_string();
    let (status, body) = node
        .call(
            "PUT",
            &format!("/channels/{private_id}/permissions/{bob_id}"),
            Some(&owner),
            Some(json!({"type": 1, "deny": send})),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let update = watcher.dispatch("CHANNEL_UPDATE").await;
    let theirs: Vec<_> = update["d"]["permission_overwrites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["id"] == bob_id.as_str())
        .cloned()
        .collect();
    assert_eq!(
        theirs,
        vec![json!({"id": bob_id, "type": 1, "allow": "0", "deny": send})]
    );
    let (status, body) = post(bob.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, _) = post(owner.clone()).await;
    assert_eq!(status, 200, "the owner is not affected");

    // Bad input: each refused, nothing stored.
    let before = node
        .call(
            "GET",
            &format!("/channels/{private_id}"),
            Some(&owner),
            None,
        )
        .await
        .1["permission_overwrites"]
        .clone();
    let put = |target: String, body: serde_json::Value, token: String| {
        let node = &node;
        let private_id = private_id.clone();
        async move {
            node.call(
                "PUT",
                &format!("/channels/{private_id}/permissions/{target}"),
                Some(&token),
                Some(body),
            )
            .await
        }
    };
    let (status, body) = put(staff.clone(), json!({"type": 2}), owner.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    assert!(body["errors"]["type"].is_object(), "{body}");
    let (status, body) = put(
        staff.clone(),
        json!({"type": 0, "allow": (1u64 << 47).to_string()}),
        owner.clone(),
    )
    .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    assert!(body["errors"]["allow"].is_object(), "{body}");
    let (status, body) = put("12345".into(), json!({"type": 0}), owner.clone()).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (404, Some(10011)),
        "{body}"
    );
    let (status, body) = put("12345".into(), json!({"type": 1}), owner.clone()).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (404, Some(10007)),
        "{body}"
    );
    let (status, body) = put(staff.clone(), json!({"type": 0}), bob.clone()).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(50013)),
        "{body}"
    );
    let too_many: Vec<_> = (1..=101)
        .map(|i| json!({"id": (i as u64).to_string(), "type": 1}))
        .collect();
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/channels/{private_id}"),
            Some(&owner),
            Some(json!({"permission_overwrites": too_many})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (400, Some(50035)),
        "{body}"
    );
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/channels/{private_id}"),
            Some(&owner),
            Some(json!({"permission_overwrites": [{"id": staff, "type": "x"}]})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    assert!(
        body["errors"]["permission_overwrites"]["0"]["type"].is_object(),
        "{body}"
    );
    let after = node
        .call(
            "GET",
            &format!("/channels/{private_id}"),
            Some(&owner),
            None,
        )
        .await
        .1["permission_overwrites"]
        .clone();
    assert_eq!(before, after, "nothing refused was stored");

    // Removing his overwrite gives SEND_MESSAGES back.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{private_id}/permissions/{bob_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let update = watcher.dispatch("CHANNEL_UPDATE").await;
    assert_eq!(
        update["d"]["permission_overwrites"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let (status, _) = post(bob.clone()).await;
    assert_eq!(status, 200);
    // Fields the server does not act on yet are refused, not dropped; the
    // values libraries send when nothing was set pass.
    for (field, value) in [
        ("rtc_region", json!("us-west")),
        ("flags", json!(2)),
        ("default_reaction_emoji", json!({"emoji_name": "x"})),
    ] {
        let (status, body) = node
            .call(
                "PATCH",
                &format!("/channels/{private_id}"),
                Some(&owner),
                Some(json!({ field: value })),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_u64()),
            (400, Some(50035)),
            "{field}"
        );
        assert!(body["errors"][field].is_object(), "{body}");
        let (status, _) = node
            .call(
                "POST",
                &format!("/guilds/{guild_id}/channels"),
                Some(&owner),
                Some(json!({"name": "x", field: value})),
            )
            .await;
        assert_eq!(status, 400, "{field} at creation");
    }
    let (status, _) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "defaults", "nsfw": false, "rate_limit_per_user": 0, "parent_id": null})),
        )
        .await;
    assert_eq!(status, 200);
    // PATCH with null clears the overwrites: the channel is public again.
    let (status, cleared) = node
        .call(
            "PATCH",
            &format!("/channels/{private_id}"),
            Some(&owner),
            Some(json!({"permission_overwrites": null})),
        )
        .await;
    assert_eq!(
        (status, cleared["permission_overwrites"].clone()),
        (200, json!([]))
    );
}

/// Bans (issue 25): a moderator above the target bans a member with
/// `delete_message_seconds` and a reason (the member is removed, the ban
/// announced, their recent messages deleted in one bulk event), the
/// banned user cannot come back by invite (40007) until unbanned, bans
/// are listed and read back with the reason, bulk bans report who was
/// banned and who was not, and the owner, a higher member and bad values
/// are refused with nothing changed.
#[tokio::test]
async fn bans_remove_keep_out_and_are_lifted() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (_, dave_id) = node.register("dave").await;
    let (guild_id, channel_id) = node.guild(&owner, "Moderated").await;
    let code = node.invite(&owner, &channel_id).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let ban = guildhall_proto::permissions::BAN_MEMBERS;
    let (_, mods) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "mods", "permissions": ban.to_string()})),
        )
        .await;
    let mods = mods["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{carol_id}/roles/{mods}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(
            &owner,
            intents::GUILDS
                | intents::GUILD_MEMBERS
                | intents::GUILD_MODERATION
                | intents::GUILD_MESSAGES,
        )
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    let mut spam = vec![];
    for text in ["spam 1", "spam 2"] {
        let (status, message) = node
            .post_message(&bob, &channel_id, json!({"content": text}))
            .await;
        assert_eq!(status, 200);
        spam.push(message["id"].as_str().unwrap().to_owned());
    }
    let (status, kept) = node
        .post_message(&carol, &channel_id, json!({"content": "not spam"}))
        .await;
    assert_eq!(status, 200);

    let put_ban = |token: String, target: String, body: serde_json::Value| {
        let node = &node;
        let guild_id = guild_id.clone();
        async move {
            node.call_with(
                "PUT",
                &format!("/guilds/{guild_id}/bans/{target}"),
                Some(&token),
                Some(body),
                &[("X-Audit-Log-Reason", "spam%20bot")],
            )
            .await
        }
    };
    // Refused: the owner, someone without BAN_MEMBERS, a window past 7 days.
    let (status, body) = put_ban(carol.clone(), owner_id.clone(), json!({})).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, body) = put_ban(bob.clone(), carol_id.clone(), json!({})).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, body) = put_ban(
        carol.clone(),
        bob_id.clone(),
        json!({"delete_message_seconds": 604_801}),
    )
    .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    let (status, body) = put_ban(carol.clone(), "999999999".into(), json!({})).await;
    assert_eq!((status, body["code"].as_u64()), (404, Some(10013)));
    assert_eq!(
        node.history(&owner, &channel_id).await.len(),
        3,
        "nothing deleted yet"
    );

    // Carol bans Bob with an hour of his messages.
    let (status, body) = put_ban(
        carol.clone(),
        bob_id.clone(),
        json!({"delete_message_seconds": 3600}),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let removed = watcher.dispatch("GUILD_MEMBER_REMOVE").await;
    assert_eq!(removed["d"]["user"]["id"], bob_id.as_str());
    let banned = watcher.dispatch("GUILD_BAN_ADD").await;
    assert_eq!(
        (
            banned["d"]["guild_id"].as_str(),
            banned["d"]["user"]["id"].as_str()
        ),
        (Some(guild_id.as_str()), Some(bob_id.as_str()))
    );
    let deleted = watcher.dispatch("MESSAGE_DELETE_BULK").await;
    let mut ids: Vec<String> = deleted["d"]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    spam.sort();
    assert_eq!(ids, spam);
    let history = node.history(&owner, &channel_id).await;
    assert!(history.iter().any(|m| m["id"] == kept["id"]));
    assert!(history.iter().all(|m| m["author"]["id"] != bob_id.as_str()));

    // He cannot come back, and the ban reads back with its reason.
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(40007)),
        "{body}"
    );
    let (status, list) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/bans"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(
        list,
        json!([{"reason": "spam bot", "user": list[0]["user"].clone()}])
    );
    assert_eq!(list[0]["user"]["id"], bob_id.as_str());
    let (status, one) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/bans/{bob_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, one["reason"].as_str()), (200, Some("spam bot")));
    let (status, body) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/bans/{dave_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (404, Some(10026)));
    let (status, body) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/bans?limit=1001"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));

    // A bulk ban: Dave is banned; the owner and an unknown id are not.
    let (status, body) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/bulk-ban"),
            Some(&owner),
            Some(json!({"user_ids": [dave_id, owner_id, "999999999"]})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["banned_users"], json!([dave_id]));
    let mut failed: Vec<_> = body["failed_users"].as_array().unwrap().clone();
    failed.sort_by_key(|v| v.as_str().unwrap().to_owned());
    assert_eq!(failed, vec![json!(owner_id), json!("999999999")]);
    let (status, body) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/bulk-ban"),
            Some(&owner),
            Some(json!({"user_ids": [owner_id]})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(500000)));
    let too_many: Vec<String> = (1..=201).map(|i: u64| i.to_string()).collect();
    let (status, body) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/bulk-ban"),
            Some(&owner),
            Some(json!({"user_ids": too_many})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));

    // Lifted: announced, gone from the list, and Bob may join again.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/guilds/{guild_id}/bans/{bob_id}"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let lifted = watcher.dispatch("GUILD_BAN_REMOVE").await;
    assert_eq!(lifted["d"]["user"]["id"], bob_id.as_str());
    let (status, body) = node
        .call(
            "DELETE",
            &format!("/guilds/{guild_id}/bans/{bob_id}"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (404, Some(10026)));
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
}

/// Timeouts (issue 25): a moderator times a member out (announced in
/// GUILD_MEMBER_UPDATE with `communication_disabled_until`); the member
/// still reads but cannot send or react, even with an emoji already
/// there; the timeout ends by itself at its time with no write, and a
/// null lifts it at once. The owner, administrators, oneself, a time past
/// 28 days and fields the server does not act on are refused.
#[tokio::test]
async fn a_timeout_silences_until_it_ends_by_itself() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (guild_id, channel_id) = node.guild(&owner, "Quiet").await;
    let code = node.invite(&owner, &channel_id).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let (_, admins) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "admins", "permissions": "8"})),
        )
        .await;
    let admins = admins["id"].as_str().unwrap().to_owned();
    node.call(
        "PUT",
        &format!("/guilds/{guild_id}/members/{carol_id}/roles/{admins}"),
        Some(&owner),
        None,
    )
    .await;
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(&owner, intents::GUILDS | intents::GUILD_MEMBERS)
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    let (_, message) = node
        .post_message(&owner, &channel_id, json!({"content": "react to me"}))
        .await;
    let message_id = message["id"].as_str().unwrap().to_owned();
    let react = |token: String| {
        let node = &node;
        let path =
            format!("/channels/{channel_id}/messages/{message_id}/reactions/%F0%9F%91%8D/@me");
        async move { node.call("PUT", &path, Some(&token), None).await }
    };
    assert_eq!(react(owner.clone()).await.0, 204);

    let timeout = |target: String, until: serde_json::Value, token: String| {
        let node = &node;
        let guild_id = guild_id.clone();
        async move {
            node.call(
                "PATCH",
                &format!("/guilds/{guild_id}/members/{target}"),
                Some(&token),
                Some(json!({"communication_disabled_until": until})),
            )
            .await
        }
    };
    let iso = |unix_ms: u64| guildhall_proto::timestamp::format_unix_ms(unix_ms);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // Refused: past 28 days, the owner, an administrator, oneself, a
    // moderator without MODERATE_MEMBERS, fields not acted on.
    let day = 86_400_000;
    let (status, body) = timeout(bob_id.clone(), json!(iso(now() + 29 * day)), owner.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    assert!(
        body["errors"]["communication_disabled_until"].is_object(),
        "{body}"
    );
    let (status, body) = timeout(owner_id.clone(), json!(iso(now() + day)), carol.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, body) = timeout(carol_id.clone(), json!(iso(now() + day)), owner.clone()).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(50013)),
        "administrators are exempt"
    );
    let (status, body) = timeout(carol_id.clone(), json!(iso(now() + day)), bob.clone()).await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/members/{bob_id}"),
            Some(&owner),
            Some(json!({"mute": true})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    assert!(body["errors"]["mute"].is_object(), "{body}");

    // A day's timeout: announced; reading only.
    let (status, member) = timeout(bob_id.clone(), json!(iso(now() + day)), carol.clone()).await;
    assert_eq!(status, 200, "{member}");
    assert!(
        member["communication_disabled_until"].is_string(),
        "{member}"
    );
    let update = watcher.dispatch("GUILD_MEMBER_UPDATE").await;
    assert_eq!(
        update["d"]["communication_disabled_until"],
        member["communication_disabled_until"]
    );
    let (status, body) = node
        .post_message(&bob, &channel_id, json!({"content": "let me talk"}))
        .await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));
    let (status, body) = react(bob.clone()).await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (403, Some(50013)),
        "not even an existing emoji"
    );
    assert_eq!(
        node.history(&bob, &channel_id).await.len(),
        1,
        "reading stays"
    );
    // Lifted with null: talking again at once.
    let (status, member) = timeout(bob_id.clone(), json!(null), carol.clone()).await;
    assert_eq!(
        (status, member["communication_disabled_until"].clone()),
        (200, json!(null))
    );
    let (status, _) = node
        .post_message(&bob, &channel_id, json!({"content": "thanks"}))
        .await;
    assert_eq!(status, 200);

    // A short timeout ends by itself: no write, and Bob talks again.
    let until = now() + 1_500;
    let (status, _) = timeout(bob_id.clone(), json!(iso(until)), owner.clone()).await;
    assert_eq!(status, 200);
    let (status, _) = node
        .post_message(&bob, &channel_id, json!({"content": "too early"}))
        .await;
    if now() < until {
        assert_eq!(status, 403, "refused while it runs");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, _) = node
            .post_message(&bob, &channel_id, json!({"content": "back"}))
            .await;
        if status == 200 {
            assert!(now() >= until, "allowed before the timeout ended");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the timeout never ended"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, member) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members/{bob_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(member["communication_disabled_until"], json!(null));
}

/// Delivery follows permissions (issue 25): a private channel's messages,
/// reactions and typing reach the sessions of members who may view it and
/// no one else's, decided by the guild's owner per event; a member given
/// the role hears the channel from the next event on.
#[tokio::test]
async fn a_private_channels_events_reach_only_who_may_view_it() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (guild_id, public) = node.guild(&owner, "Hidden").await;
    let code = node.invite(&owner, &public).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let (_, staff) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "staff"})),
        )
        .await;
    let staff = staff["id"].as_str().unwrap().to_owned();
    node.call(
        "PUT",
        &format!("/guilds/{guild_id}/members/{carol_id}/roles/{staff}"),
        Some(&owner),
        None,
    )
    .await;
    let view = guildhall_proto::permissions::VIEW_CHANNEL.to_string();
    let (_, private) = node
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
    let private = private["id"].as_str().unwrap().to_owned();
    let all = intents::GUILDS
        | intents::GUILD_MESSAGES
        | intents::MESSAGE_CONTENT
        | intents::GUILD_MESSAGE_REACTIONS
        | intents::GUILD_MESSAGE_TYPING;
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client.identify(&bob, all).await;
    bob_client.dispatch("GUILD_CREATE").await;
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client.identify(&carol, all).await;
    carol_client.dispatch("GUILD_CREATE").await;

    // Traffic in the private channel, then one public message.
    let (status, secret) = node
        .post_message(&owner, &private, json!({"content": "secret"}))
        .await;
    assert_eq!(status, 200);
    let secret_id = secret["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "PUT",
            &format!("/channels/{private}/messages/{secret_id}/reactions/%F0%9F%91%8D/@me"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .call(
            "POST",
            &format!("/channels/{private}/typing"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .post_message(&owner, &public, json!({"content": "hello all"}))
        .await;
    assert_eq!(status, 200);

    // Carol hears all of it; Bob only the public message.
    let seen = carol_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(seen["d"]["content"], "secret");
    carol_client.dispatch("MESSAGE_REACTION_ADD").await;
    carol_client.dispatch("TYPING_START").await;
    loop {
        let frame = bob_client.next().await.unwrap();
        assert_ne!(
            frame["d"]["channel_id"],
            private.as_str(),
            "a private channel's event reached a member without access: {frame}"
        );
        if frame["t"] == "MESSAGE_CREATE" {
            assert_eq!(frame["d"]["content"], "hello all");
            break;
        }
    }

    // Given the role, Bob hears the channel from the next event on.
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{bob_id}/roles/{staff}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .post_message(&owner, &private, json!({"content": "welcome"}))
        .await;
    assert_eq!(status, 200);
    let welcome = bob_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(welcome["d"]["content"], "welcome");
    let metrics = node.metrics_text().await;
    assert!(
        metrics.contains("# TYPE guildhall_dispatches_hidden_total counter"),
        "{metrics}"
    );
}

/// The audit log (issue 25): moderation through the API is recorded with
/// the moderator, the target, the changes and the `X-Audit-Log-Reason`;
/// `GET /guilds/{id}/audit-logs` pages and filters it for VIEW_AUDIT_LOG
/// holders; GUILD_AUDIT_LOG_ENTRY_CREATE reaches their sessions and no
/// one else's.
#[tokio::test]
async fn the_audit_log_records_moderation_with_reasons() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (dave, _) = node.register("dave").await;
    let (_, eve_id) = node.register("eve").await;
    let (guild_id, channel_id) = node.guild(&owner, "Logged").await;
    let code = node.invite(&owner, &channel_id).await;
    for token in [&bob, &carol, &dave] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let (_, auditors) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "auditors", "permissions": guildhall_proto::permissions::VIEW_AUDIT_LOG.to_string()})),
        )
        .await;
    let auditors = auditors["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{carol_id}/roles/{auditors}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let moderation = intents::GUILDS | intents::GUILD_MODERATION;
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client.identify(&carol, moderation).await;
    carol_client.dispatch("GUILD_CREATE").await;
    let mut dave_client = Client::connect(&node.ws).await;
    dave_client.identify(&dave, moderation).await;
    dave_client.dispatch("GUILD_CREATE").await;

    let with_reason = |method: &'static str,
                       path: String,
                       body: Option<serde_json::Value>,
                       reason: &'static str| {
        let node = &node;
        let owner = owner.clone();
        async move {
            node.call_with(
                method,
                &path,
                Some(&owner),
                body,
                &[("X-Audit-Log-Reason", reason)],
            )
            .await
        }
    };
    let (status, channel) = with_reason(
        "POST",
        format!("/guilds/{guild_id}/channels"),
        Some(json!({"name": "mod-log"})),
        "set%20up",
    )
    .await;
    assert_eq!(status, 200);
    let log_channel = channel["id"].as_str().unwrap().to_owned();
    let (status, _) = with_reason(
        "PUT",
        format!("/channels/{log_channel}/permissions/{guild_id}"),
        Some(json!({"type": 0, "deny": "1024"})),
        "private",
    )
    .await;
    assert_eq!(status, 204);
    let (status, _) = with_reason(
        "PATCH",
        format!("/guilds/{guild_id}/members/{bob_id}"),
        Some(json!({"nick": "Robert"})),
        "a nicer name",
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = with_reason(
        "DELETE",
        format!("/guilds/{guild_id}/members/{bob_id}"),
        None,
        "bye%20bob",
    )
    .await;
    assert_eq!(status, 204);

    // Carol's session hears the entries as they are made.
    let created = carol_client.dispatch("GUILD_AUDIT_LOG_ENTRY_CREATE").await;
    assert_eq!(created["d"]["guild_id"], guild_id.as_str());
    let kicked = loop {
        let entry = carol_client.dispatch("GUILD_AUDIT_LOG_ENTRY_CREATE").await;
        if entry["d"]["action_type"] == 20 {
            break entry;
        }
    };
    assert_eq!(kicked["d"]["reason"], "bye bob");
    assert_eq!(kicked["d"]["target_id"], bob_id.as_str());

    // The log, newest first, with who and why.
    let (status, log) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 200, "{log}");
    let entries = log["audit_log_entries"].as_array().unwrap();
    let actions: Vec<u64> = entries
        .iter()
        .map(|e| e["action_type"].as_u64().unwrap())
        .collect();
    assert_eq!(&actions[..4], &[20, 24, 13, 10], "{log}");
    assert_eq!(entries[0]["user_id"], owner_id.as_str());
    assert_eq!(
        entries[1]["changes"],
        json!([{"key": "nick", "new_value": "Robert"}])
    );
    assert_eq!(entries[1]["reason"], "a nicer name");
    assert_eq!(entries[2]["options"]["type"], "0");
    assert_eq!(entries[2]["options"]["role_name"], "@everyone");
    assert_eq!(entries[2]["target_id"], log_channel.as_str());
    assert_eq!(entries[3]["reason"], "set up");
    assert!(
        actions.contains(&25) && actions.contains(&30),
        "role create and grant: {actions:?}"
    );
    let users: Vec<&str> = log["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_str().unwrap())
        .collect();
    assert!(users.contains(&bob_id.as_str()) && users.contains(&owner_id.as_str()));

    // Filters and paging.
    let (_, only) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?action_type=13"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(only["audit_log_entries"].as_array().unwrap().len(), 1);
    let newest = entries[0]["id"].as_str().unwrap();
    let (_, older) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?before={newest}&limit=1"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(older["audit_log_entries"][0]["action_type"], 24);
    let oldest = entries.last().unwrap()["id"].as_str().unwrap();
    let (_, newer) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?after={oldest}&limit=2"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(
        newer["audit_log_entries"][0]["id"],
        entries[entries.len() - 2]["id"],
        "after: oldest first"
    );
    let (status, body) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?limit=101"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
    let (status, body) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs"),
            Some(&dave),
            None,
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (403, Some(50013)));

    // Dave (no VIEW_AUDIT_LOG) heard none of the entries: the first
    // moderation event he gets is the ban itself.
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/bans/{eve_id}"),
            Some(&owner),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 204);
    loop {
        let frame = dave_client.next().await.unwrap();
        assert_ne!(frame["t"], "GUILD_AUDIT_LOG_ENTRY_CREATE", "{frame}");
        if frame["t"] == "GUILD_BAN_ADD" {
            break;
        }
    }
}

/// A bot authorized with permissions (issue 25) gets its managed role
/// with exactly those bits (`managed`, `tags.bot_id`), so an
/// administrator bot can moderate; nobody gives, takes or deletes that
/// role by hand, and it leaves with the bot. Authorized with none, the bot
/// holds only `@everyone`, as before.
#[tokio::test]
async fn an_authorized_bot_holds_its_managed_role() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (carol, carol_id) = node.register("carol").await;
    let (guild_id, channel_id) = node.guild(&owner, "Bots").await;
    let code = node.invite(&owner, &channel_id).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200);
    let (status, app) = node
        .call(
            "POST",
            "/applications",
            Some(&owner),
            Some(json!({"name": "modbot"})),
        )
        .await;
    assert_eq!(status, 200, "{app}");
    let app_id = app["id"].as_str().unwrap().to_owned();
    // The bot user has its application's id.
    let bot_id = app_id.clone();
    let admin = guildhall_proto::permissions::ADMINISTRATOR.to_string();
    let (status, body) = node
        .call(
            "POST",
            &format!("/oauth2/authorize?client_id={app_id}&scope=bot"),
            Some(&owner),
            Some(json!({"guild_id": guild_id, "permissions": admin, "authorize": true})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, roles) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            None,
        )
        .await;
    let managed: Vec<_> = roles
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["managed"] == true)
        .cloned()
        .collect();
    assert_eq!(managed.len(), 1, "{roles}");
    assert_eq!(managed[0]["tags"]["bot_id"], bot_id.as_str());
    assert_eq!(managed[0]["permissions"], admin);
    assert!(
        managed[0]["name"].as_str().unwrap().starts_with("modbot"),
        "{roles}"
    );
    let role_id = managed[0]["id"].as_str().unwrap().to_owned();
    let (_, member) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members/{bot_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(member["roles"], json!([role_id]));

    // The role is the bot's alone.
    for (method, path) in [
        (
            "PUT",
            format!("/guilds/{guild_id}/members/{carol_id}/roles/{role_id}"),
        ),
        (
            "DELETE",
            format!("/guilds/{guild_id}/members/{bot_id}/roles/{role_id}"),
        ),
        ("DELETE", format!("/guilds/{guild_id}/roles/{role_id}")),
    ] {
        let (status, body) = node.call(method, &path, Some(&owner), None).await;
        assert_eq!(
            (status, body["code"].as_u64()),
            (403, Some(50013)),
            "{method} {path}"
        );
    }
    let (_, log) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?action_type=28"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(
        log["audit_log_entries"][0]["target_id"],
        bot_id.as_str(),
        "{log}"
    );
    assert_eq!(log["audit_log_entries"][0]["user_id"], owner_id.as_str());

    // The role leaves with the bot.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/guilds/{guild_id}/members/{bot_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (_, roles) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            None,
        )
        .await;
    assert!(
        roles
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != role_id.as_str()),
        "{roles}"
    );
    // Unknown bits are refused.
    let (status, body) = node
        .call(
            "POST",
            &format!("/oauth2/authorize?client_id={app_id}&scope=bot"),
            Some(&owner),
            Some(json!({"guild_id": guild_id, "permissions": (1u64 << 47).to_string(), "authorize": true})),
        )
        .await;
    assert_eq!((status, body["code"].as_u64()), (400, Some(50035)));
}

/// Invites as Discord documents them: a day's age unless told (0 never
/// expires), reused unless `unique`, gone when expired or used up, listed
/// by channel and guild for their managers, deleted by them; INVITE_CREATE
/// and INVITE_DELETE reach only members who manage the channel; bounds
/// and unsupported settings (the voice targets, role_ids) refused with
/// nothing created; a banned user
/// uses none of an invite.
#[tokio::test]
async fn invites_expire_run_out_are_listed_and_deleted() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (mallory, mallory_id) = node.register("mallory").await;
    let (guild_id, channel) = node.guild(&owner, "Invites").await;
    let invites = format!("/channels/{channel}/invites");
    let create = |body: serde_json::Value| node.call("POST", &invites, Some(&owner), Some(body));

    // Bob joins through a one-use invite, which goes with that use.
    let (status, once) = create(json!({"max_uses": 1})).await;
    assert_eq!(status, 200, "{once}");
    let once_code = once["code"].as_str().unwrap().to_owned();
    assert_eq!(
        (once["max_uses"].as_i64(), once["max_age"].as_i64()),
        (Some(1), Some(86_400))
    );
    assert_eq!(
        (once["uses"].as_i64(), once["temporary"].as_bool()),
        (Some(0), Some(false))
    );
    assert!(once["expires_at"].is_string(), "{once}");
    let (status, _) = node
        .call("POST", &format!("/invites/{once_code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let (status, body) = node
        .call("GET", &format!("/invites/{once_code}"), None, None)
        .await;
    assert_eq!(
        (status, body["code"].as_i64()),
        (404, Some(10006)),
        "{body}"
    );

    // The owner manages the channel and hears invite events; Bob does not.
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(&owner, intents::GUILDS | intents::GUILD_INVITES)
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client
        .identify(&bob, intents::GUILDS | intents::GUILD_INVITES)
        .await;
    bob_client.dispatch("GUILD_CREATE").await;

    // Not unique: the same settings answer the same invite.
    let (status, forever) = create(json!({"max_age": 0})).await;
    assert_eq!(status, 200, "{forever}");
    assert_eq!(forever["expires_at"], serde_json::Value::Null);
    let forever_code = forever["code"].as_str().unwrap().to_owned();
    let created = watcher.dispatch("INVITE_CREATE").await;
    assert_eq!(created["d"]["code"], forever_code.as_str());
    assert_eq!(created["d"]["guild_id"], guild_id.as_str());
    assert_eq!(created["d"]["max_age"], 0);
    let (_, again) = create(json!({"max_age": 0})).await;
    assert_eq!(again["code"], forever_code.as_str());
    let (_, unique) = create(json!({"max_age": 0, "unique": true})).await;
    assert_ne!(unique["code"], forever_code.as_str());
    let unique_code = unique["code"].as_str().unwrap().to_owned();
    assert_eq!(
        watcher.dispatch("INVITE_CREATE").await["d"]["code"],
        unique_code.as_str()
    );

    // Bad settings: 50035 at the field, nothing created.
    for (body, field) in [
        (json!({"max_age": 604_801}), "max_age"),
        (json!({"max_age": -1}), "max_age"),
        (json!({"max_uses": 101}), "max_uses"),
        (json!({"role_ids": ["1"]}), "role_ids"),
        (
            json!({"target_type": 1, "target_user_id": bob_id}),
            "target_type",
        ),
    ] {
        let (status, error) = create(body.clone()).await;
        assert_eq!(
            (status, error["code"].as_i64()),
            (400, Some(50035)),
            "{body}: {error}"
        );
        assert!(error["errors"][field].is_object(), "{body}: {error}");
    }

    // Listed for managers only; Bob (a member without MANAGE_CHANNELS or
    // MANAGE_GUILD) may neither list nor delete.
    let codes = |list: &serde_json::Value| {
        let mut codes: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["code"].as_str().unwrap().to_owned())
            .collect();
        codes.sort();
        codes
    };
    let mut expected = vec![forever_code.clone(), unique_code.clone()];
    expected.sort();
    let (status, listed) = node.call("GET", &invites, Some(&owner), None).await;
    assert_eq!(status, 200);
    assert_eq!(codes(&listed), expected);
    assert_eq!(listed[0]["uses"], 0);
    let guild_invites = format!("/guilds/{guild_id}/invites");
    let (status, listed) = node.call("GET", &guild_invites, Some(&owner), None).await;
    assert_eq!((status, codes(&listed)), (200, expected.clone()));
    for (method, path) in [
        ("GET", invites.clone()),
        ("GET", guild_invites.clone()),
        ("DELETE", format!("/invites/{unique_code}")),
    ] {
        let (status, error) = node.call(method, &path, Some(&bob), None).await;
        assert_eq!(
            (status, error["code"].as_i64()),
            (403, Some(50013)),
            "{method} {path}"
        );
    }
    let (status, deleted) = node
        .call(
            "DELETE",
            &format!("/invites/{unique_code}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(
        (status, deleted["code"].as_str()),
        (200, Some(unique_code.as_str()))
    );
    let gone = watcher.dispatch("INVITE_DELETE").await;
    assert_eq!(gone["d"]["code"], unique_code.as_str());
    assert_eq!(gone["d"]["channel_id"], channel.as_str());
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/invites/{unique_code}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 404);

    // Bob heard none of the invite events: the next thing he hears is
    // the channel update after them.
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}"),
            Some(&owner),
            Some(json!({"topic": "after the invites"})),
        )
        .await;
    assert_eq!(status, 200);
    let next = bob_client.next().await.unwrap();
    assert_eq!(next["t"], "CHANNEL_UPDATE", "{next}");

    // A banned user is refused and uses nothing.
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/bans/{mallory_id}"),
            Some(&owner),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 204);
    let (status, error) = node
        .call(
            "POST",
            &format!("/invites/{forever_code}"),
            Some(&mallory),
            None,
        )
        .await;
    assert_eq!(
        (status, error["code"].as_i64()),
        (403, Some(40007)),
        "{error}"
    );
    let (_, listed) = node.call("GET", &invites, Some(&owner), None).await;
    assert_eq!(listed[0]["uses"], 0, "{listed}");

    // A one-second invite expires by itself: unknown, unlisted.
    let (_, short) = create(json!({"max_age": 1})).await;
    let short_code = short["code"].as_str().unwrap().to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (status, _) = node
            .call("GET", &format!("/invites/{short_code}"), None, None)
            .await;
        if status == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the invite never expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (_, listed) = node.call("GET", &invites, Some(&owner), None).await;
    assert_eq!(codes(&listed), vec![forever_code.clone()]);
    let (status, _) = node
        .call(
            "POST",
            &format!("/invites/{short_code}"),
            Some(&mallory),
            None,
        )
        .await;
    assert_eq!(status, 404);
}

/// A temporary invite's members leave when their last session ends
/// (after the resume window, as presence goes offline), unless they hold
/// a role by then; a member by any other invite stays.
#[tokio::test]
async fn temporary_members_leave_when_they_disconnect_without_a_role() {
    let node = TestNode::with_limits(guildhall_limits::Limits {
        resume_window_ms: 300,
        session_reap_interval_ms: 50,
        ..guildhall_limits::Limits::default()
    })
    .await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel) = node.guild(&owner, "Temporary").await;
    let (status, invite) = node
        .call(
            "POST",
            &format!("/channels/{channel}/invites"),
            Some(&owner),
            Some(json!({"temporary": true, "max_age": 0})),
        )
        .await;
    assert_eq!(
        (status, invite["temporary"].as_bool()),
        (200, Some(true)),
        "{invite}"
    );
    let code = invite["code"].as_str().unwrap().to_owned();
    let lasting = node.invite(&owner, &channel).await;
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(
            &owner,
            intents::GUILDS | intents::GUILD_MEMBERS | intents::GUILD_PRESENCES,
        )
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    let (_, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "verified"})),
        )
        .await;
    let role = role["id"].as_str().unwrap().to_owned();

    // Dave (temporary, then given a role) and Erin (by a lasting invite)
    // come and go first; Carol (temporary, no role) last.
    let mut joined = vec![];
    for (name, code) in [("dave", &code), ("erin", &lasting), ("carol", &code)] {
        let (token, id) = node.register(name).await;
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(&token), None)
            .await;
        assert_eq!(status, 200);
        joined.push((token, id));
    }
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{}/roles/{role}", joined[0].1),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    for (token, _) in &joined {
        let mut session = Client::connect(&node.ws).await;
        session.identify(token, intents::GUILDS).await;
        session.dispatch("GUILD_CREATE").await;
        drop(session);
    }
    // Dave and Erin go offline and stay; Carol leaves.
    let carol_id = joined[2].1.clone();
    let stay: Vec<String> = joined[..2].iter().map(|(_, id)| id.clone()).collect();
    let (mut offline, mut carol_left) = (vec![], false);
    while !(carol_left && offline.len() == 2) {
        let event = watcher.next().await.unwrap();
        let d = &event["d"];
        if event["t"] == "GUILD_MEMBER_REMOVE" {
            assert_eq!(
                d["user"]["id"],
                carol_id.as_str(),
                "only Carol leaves: {event}"
            );
            carol_left = true;
        }
        if event["t"] == "PRESENCE_UPDATE" && d["status"] == "offline" {
            let id = d["user"]["id"].as_str().unwrap().to_owned();
            assert!(stay.contains(&id), "{event}");
            if !offline.contains(&id) {
                offline.push(id);
            }
        }
    }
    let (status, error) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/members/{carol_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(
        (status, error["code"].as_i64()),
        (404, Some(10007)),
        "{error}"
    );
    for (_, id) in &joined[..2] {
        let (status, _) = node
            .call(
                "GET",
                &format!("/guilds/{guild_id}/members/{id}"),
                Some(&owner),
                None,
            )
            .await;
        assert_eq!(status, 200, "{id} is still a member");
    }
}

/// The documented channel fields are checked against Discord's bounds and
/// the channel's type, stored and echoed: nsfw, slowmode, the category
/// (`parent_id`, and a deleted category's channels move out of it), a
/// voice channel's bitrate, user limit (a full channel admits nobody
/// more until someone leaves) and camera quality, the auto-archive
/// default, announcement channels and the text/announcement type switch.
/// Every bad value is 50035 at its field with nothing stored.
#[tokio::test]
async fn channel_fields_are_checked_stored_and_echoed() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, public) = node.guild(&owner, "Fields").await;
    let channels = format!("/guilds/{guild_id}/channels");
    let create = |body: serde_json::Value| node.call("POST", &channels, Some(&owner), Some(body));
    let (status, category) = create(json!({"name": "Lobby", "type": 4})).await;
    assert_eq!(status, 200, "{category}");
    let category = category["id"].as_str().unwrap().to_owned();
    let (status, text) = create(json!({
        "name": "rules", "nsfw": true, "rate_limit_per_user": 30,
        "parent_id": category, "default_auto_archive_duration": 4320,
    }))
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        (
            &text["nsfw"],
            &text["rate_limit_per_user"],
            &text["parent_id"],
            &text["default_auto_archive_duration"]
        ),
        (&json!(true), &json!(30), &json!(category), &json!(4320)),
        "{text}"
    );
    let text_id = text["id"].as_str().unwrap().to_owned();
    let (status, voice) = create(json!({
        "name": "talk", "type": 2, "bitrate": 32_000, "user_limit": 1,
        "video_quality_mode": 2, "parent_id": category,
    }))
    .await;
    assert_eq!(status, 200, "{voice}");
    assert_eq!(
        (
            &voice["bitrate"],
            &voice["user_limit"],
            &voice["video_quality_mode"]
        ),
        (&json!(32_000), &json!(1), &json!(2)),
        "{voice}"
    );
    let voice_id = voice["id"].as_str().unwrap().to_owned();
    let (status, fetched) = node
        .call("GET", &format!("/channels/{text_id}"), Some(&owner), None)
        .await;
    assert_eq!((status, &fetched["rate_limit_per_user"]), (200, &json!(30)));

    // Bad values: 50035 at the field, and the guild's channels unchanged.
    let (_, before) = node.call("GET", &channels, Some(&owner), None).await;
    let text_path = format!("/channels/{text_id}");
    let voice_path = format!("/channels/{voice_id}");
    let category_path = format!("/channels/{category}");
    for (method, path, body, field) in [
        (
            "POST",
            &channels,
            json!({"name": "x", "bitrate": 64_000}),
            "bitrate",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "type": 2, "bitrate": 96_001}),
            "bitrate",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "type": 2, "user_limit": 100}),
            "user_limit",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "rate_limit_per_user": 21_601}),
            "rate_limit_per_user",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "parent_id": public}),
            "parent_id",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "type": 4, "parent_id": category}),
            "parent_id",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "default_auto_archive_duration": 61}),
            "default_auto_archive_duration",
        ),
        (
            "POST",
            &channels,
            json!({"name": "x", "type": 2, "rtc_region": "us-west"}),
            "rtc_region",
        ),
        ("PATCH", &voice_path, json!({"type": 0}), "type"),
        (
            "PATCH",
            &voice_path,
            json!({"video_quality_mode": 3}),
            "video_quality_mode",
        ),
        ("PATCH", &text_path, json!({"user_limit": 5}), "user_limit"),
        ("PATCH", &text_path, json!({"nsfw": "yes"}), "nsfw"),
        (
            "PATCH",
            &category_path,
            json!({"parent_id": category}),
            "parent_id",
        ),
    ] {
        let (status, error) = node
            .call(method, path, Some(&owner), Some(body.clone()))
            .await;
        assert_eq!(
            (status, error["code"].as_i64()),
            (400, Some(50035)),
            "{body}: {error}"
        );
        assert!(error["errors"][field].is_object(), "{body}: {error}");
    }
    let (_, after) = node.call("GET", &channels, Some(&owner), None).await;
    assert_eq!(before, after);

    // Out of the category, slowmode off, into an announcement channel.
    let (status, patched) = node
        .call(
            "PATCH",
            &text_path,
            Some(&owner),
            Some(json!({"parent_id": null, "rate_limit_per_user": 0, "type": 5, "nsfw": false})),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        (
            &patched["type"],
            &patched["parent_id"],
            &patched["rate_limit_per_user"],
            &patched["nsfw"]
        ),
        (&json!(5), &json!(null), &json!(0), &json!(false)),
        "{patched}"
    );
    let (status, posted) = node
        .post_message(&owner, &text_id, json!({"content": "news"}))
        .await;
    assert_eq!(status, 200, "{posted}");

    // The voice channel holds one: Bob is in, Carol waits until he leaves.
    let (bob, _) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let code = node.invite(&owner, &public).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let join = |channel: Option<&str>| json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": channel, "self_mute": false, "self_deaf": false}});
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client
        .identify(&bob, intents::GUILDS | intents::GUILD_VOICE_STATES)
        .await;
    bob_client.dispatch("GUILD_CREATE").await;
    bob_client.send(join(Some(&voice_id))).await;
    bob_client.dispatch("VOICE_SERVER_UPDATE").await;
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client
        .identify(&carol, intents::GUILDS | intents::GUILD_VOICE_STATES)
        .await;
    carol_client.dispatch("GUILD_CREATE").await;
    let refused_before = node.metric("guildhall_voice_owner_failures_total").await;
    carol_client.send(join(Some(&voice_id))).await;
    common::until("the full channel refused Carol", 300, async || {
        node.metric("guildhall_voice_owner_failures_total").await > refused_before
    })
    .await;
    bob_client.send(join(None)).await;
    loop {
        let state = carol_client.dispatch("VOICE_STATE_UPDATE").await;
        if state["d"]["channel_id"].is_null() {
            break; // Bob left
        }
        assert_ne!(
            state["d"]["user_id"],
            carol_id.as_str(),
            "Carol got in while full: {state}"
        );
    }
    carol_client.send(join(Some(&voice_id))).await;
    carol_client.dispatch("VOICE_SERVER_UPDATE").await;

    // Deleting the category moves its channels out of it.
    let (status, _) = node
        .call("DELETE", &category_path, Some(&owner), None)
        .await;
    assert_eq!(status, 200);
    let updated = carol_client.dispatch("CHANNEL_UPDATE").await;
    assert_eq!(
        (&updated["d"]["id"], &updated["d"]["parent_id"]),
        (&json!(voice_id), &json!(null))
    );
    let (_, fetched) = node.call("GET", &voice_path, Some(&owner), None).await;
    assert_eq!(fetched["parent_id"], json!(null));
}

/// Slowmode (`rate_limit_per_user`) holds a member between messages in
/// that channel only: 429 with 20016 and the seconds left, nothing
/// stored; other channels, bots and holders of BYPASS_SLOWMODE are
/// unaffected; after the wait the member sends again.
#[tokio::test]
async fn slowmode_holds_a_member_between_messages() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, _) = node.register("bob").await;
    let (guild_id, public) = node.guild(&owner, "Slow").await;
    let code = node.invite(&owner, &public).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let (_, bot) = node.bot_in(&owner, &guild_id).await;
    let (status, slow) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "slow", "rate_limit_per_user": 1})),
        )
        .await;
    assert_eq!(status, 200, "{slow}");
    let slow = slow["id"].as_str().unwrap().to_owned();

    let (status, _) = node
        .post_message(&bob, &slow, json!({"content": "first"}))
        .await;
    assert_eq!(status, 200);
    let (status, error) = node
        .post_message(&bob, &slow, json!({"content": "second"}))
        .await;
    assert_eq!(
        (status, error["code"].as_i64()),
        (429, Some(20016)),
        "{error}"
    );
    let retry_after = error["retry_after"].as_f64().unwrap();
    assert!(retry_after > 0.0 && retry_after <= 1.0, "{error}");
    // Elsewhere, and for the owner (who holds every permission, so
    // BYPASS_SLOWMODE) and a bot, nothing waits.
    let (status, _) = node
        .post_message(&bob, &public, json!({"content": "elsewhere"}))
        .await;
    assert_eq!(status, 200);
    for token in [&owner, &owner, &bot, &bot] {
        let (status, body) = node
            .post_message(token, &slow, json!({"content": "exempt"}))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let history = node.history(&owner, &slow).await;
    assert!(
        history.iter().all(|m| m["content"] != "second"),
        "a refused message was stored"
    );
    // After the wait, Bob sends again.
    common::until("Bob's slowmode ran out", 100, async || {
        node.post_message(&bob, &slow, json!({"content": "later"}))
            .await
            .0
            == 200
    })
    .await;
}

/// `PATCH /guilds/{id}/roles` reorders roles as Discord inserts (the
/// moved role takes its position, the others keep their order) under the
/// hierarchy (nobody moves a role at or above their own, nor to there);
/// `PATCH /guilds/{id}/channels` moves channels and categories at once,
/// syncing overwrites with `lock_permissions`, all or none.
#[tokio::test]
async fn roles_and_channels_are_reordered_in_bulk() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (guild_id, general) = node.guild(&owner, "Order").await;
    let code = node.invite(&owner, &general).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let roles_path = format!("/guilds/{guild_id}/roles");
    let mut ids = vec![];
    for (name, permissions) in [("r1", "0"), ("r2", "0"), ("r3", "0"), ("mod", "268435456")] {
        let (status, role) = node
            .call(
                "POST",
                &roles_path,
                Some(&owner),
                Some(json!({"name": name, "permissions": permissions})),
            )
            .await;
        assert_eq!(status, 200, "{role}");
        ids.push(role["id"].as_str().unwrap().to_owned());
    }
    let (r1, r2, r3, moderator) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{bob_id}/roles/{moderator}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let order = |roles: &serde_json::Value| -> Vec<(String, i64)> {
        let mut list: Vec<(String, i64)> = roles
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_owned(),
                    r["position"].as_i64().unwrap(),
                )
            })
            .collect();
        list.sort_by_key(|(_, p)| *p);
        list.into_iter().filter(|(id, _)| *id != guild_id).collect()
    };
    let (status, roles) = node
        .call(
            "PATCH",
            &roles_path,
            Some(&owner),
            Some(json!([{"id": r3, "position": 1}])),
        )
        .await;
    assert_eq!(status, 200, "{roles}");
    let expected = |list: [&String; 4]| -> Vec<(String, i64)> {
        list.iter()
            .enumerate()
            .map(|(i, id)| ((*id).clone(), i as i64 + 1))
            .collect()
    };
    assert_eq!(order(&roles), expected([r3, r1, r2, moderator]));
    // Bob (MANAGE_ROLES through "mod", at position 4) moves what is below
    // him, and nothing to or at his own position.
    let (status, roles) = node
        .call(
            "PATCH",
            &roles_path,
            Some(&bob),
            Some(json!([{"id": r2, "position": 1}])),
        )
        .await;
    assert_eq!(status, 200, "{roles}");
    assert_eq!(order(&roles), expected([r2, r3, r1, moderator]));
    for body in [
        json!([{"id": r1, "position": 4}]),
        json!([{"id": moderator, "position": 1}]),
    ] {
        let (status, error) = node
            .call("PATCH", &roles_path, Some(&bob), Some(body.clone()))
            .await;
        assert_eq!(
            (status, error["code"].as_i64()),
            (403, Some(50013)),
            "{body}"
        );
    }
    let (_, roles) = node.call("GET", &roles_path, Some(&owner), None).await;
    assert_eq!(
        order(&roles),
        expected([r2, r3, r1, moderator]),
        "a refused move changed nothing"
    );

    // Channels: into a category, taking its overwrites; bad moves change
    // nothing.
    let channels_path = format!("/guilds/{guild_id}/channels");
    let send = guildhall_proto::permissions::SEND_MESSAGES.to_string();
    let (_, category) = node
        .call(
            "POST",
            &channels_path,
            Some(&owner),
            Some(json!({"name": "Quiet", "type": 4,
            "permission_overwrites": [{"id": guild_id, "type": 0, "deny": send}]})),
        )
        .await;
    let category = category["id"].as_str().unwrap().to_owned();
    let (_, other) = node
        .call(
            "POST",
            &channels_path,
            Some(&owner),
            Some(json!({"name": "other"})),
        )
        .await;
    let other = other["id"].as_str().unwrap().to_owned();
    let (_, before) = node.call("GET", &channels_path, Some(&owner), None).await;
    for body in [
        json!({"id": general}),
        json!([{"id": general, "position": 1}, {"id": general, "position": 2}]),
        json!([{"id": general, "parent_id": other}]),
        json!([{"id": general, "position": 3}, {"id": "1", "position": 2}]),
    ] {
        let (status, _) = node
            .call("PATCH", &channels_path, Some(&owner), Some(body.clone()))
            .await;
        assert!(status == 400 || status == 404, "{body}: {status}");
    }
    let (_, after) = node.call("GET", &channels_path, Some(&owner), None).await;
    assert_eq!(before, after, "a refused move changed nothing");
    let (status, _) = node
        .call(
            "PATCH",
            &channels_path,
            Some(&owner),
            Some(json!([
                {"id": general, "position": 5, "parent_id": category, "lock_permissions": true},
                {"id": other, "position": 3},
            ])),
        )
        .await;
    assert_eq!(status, 204);
    let (_, moved) = node
        .call("GET", &format!("/channels/{general}"), Some(&owner), None)
        .await;
    assert_eq!(
        (&moved["position"], &moved["parent_id"]),
        (&json!(5), &json!(category)),
        "{moved}"
    );
    assert_eq!(
        moved["permission_overwrites"][0]["deny"],
        send.as_str(),
        "{moved}"
    );
    // Bob now may not send there: the category's overwrite holds.
    let (status, _) = node
        .post_message(&bob, &general, json!({"content": "hi"}))
        .await;
    assert_eq!(status, 403);
    let (_, other_now) = node
        .call("GET", &format!("/channels/{other}"), Some(&owner), None)
        .await;
    assert_eq!(other_now["position"], 3);
}

/// What the api does on a moderator's behalf is audited too, with the
/// request's `X-Audit-Log-Reason`: deleting another's message (72, target
/// its author), a bulk delete (73, target the channel), pins (74, 75)
/// and invites (40, 42). A member's delete of their own message is not.
#[tokio::test]
async fn api_actions_are_audited_with_reasons() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (guild_id, channel) = node.guild(&owner, "Audited").await;
    let code = node.invite(&owner, &channel).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let mut posted = vec![];
    for content in ["one", "two", "three", "four", "mine"] {
        let (status, message) = node
            .post_message(&bob, &channel, json!({"content": content}))
            .await;
        assert_eq!(status, 200);
        posted.push(message["id"].as_str().unwrap().to_owned());
    }
    let reason = [("X-Audit-Log-Reason", "cleanup")];
    let messages = format!("/channels/{channel}/messages");
    let (status, _) = node
        .call_with(
            "DELETE",
            &format!("{messages}/{}", posted[0]),
            Some(&owner),
            None,
            &reason,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .call(
            "DELETE",
            &format!("{messages}/{}", posted[4]),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .call_with(
            "POST",
            &format!("{messages}/bulk-delete"),
            Some(&owner),
            Some(json!({"messages": [posted[1], posted[2]]})),
            &reason,
        )
        .await;
    assert_eq!(status, 204);
    let pin = format!("/channels/{channel}/messages/pins/{}", posted[3]);
    assert_eq!(node.call("PUT", &pin, Some(&owner), None).await.0, 204);
    assert_eq!(node.call("DELETE", &pin, Some(&owner), None).await.0, 204);
    let (status, invite) = node
        .call(
            "POST",
            &format!("/channels/{channel}/invites"),
            Some(&owner),
            Some(json!({"unique": true})),
        )
        .await;
    assert_eq!(status, 200);
    let fresh = invite["code"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call_with(
            "DELETE",
            &format!("/invites/{fresh}"),
            Some(&owner),
            None,
            &reason,
        )
        .await;
    assert_eq!(status, 200);

    let entries = |action: u8| {
        let path = format!("/guilds/{guild_id}/audit-logs?action_type={action}");
        let node = &node;
        let owner = owner.clone();
        async move {
            let (status, log) = node.call("GET", &path, Some(&owner), None).await;
            assert_eq!(status, 200, "{log}");
            log["audit_log_entries"].as_array().unwrap().clone()
        }
    };
    let deleted = entries(72).await;
    assert_eq!(deleted.len(), 1, "only the moderator's delete: {deleted:?}");
    assert_eq!(
        (
            &deleted[0]["target_id"],
            &deleted[0]["user_id"],
            &deleted[0]["reason"]
        ),
        (&json!(bob_id), &json!(owner_id), &json!("cleanup"))
    );
    assert_eq!(deleted[0]["options"]["channel_id"], channel.as_str());
    let bulk = entries(73).await;
    assert_eq!(
        (&bulk[0]["target_id"], &bulk[0]["options"]["count"]),
        (&json!(channel), &json!("2"))
    );
    for action in [74, 75] {
        let pins = entries(action).await;
        assert_eq!(pins.len(), 1, "{action}: {pins:?}");
        assert_eq!(pins[0]["options"]["message_id"], posted[3].as_str());
        assert_eq!(pins[0]["target_id"], bob_id.as_str());
    }
    let created = entries(40).await;
    assert!(
        created.iter().any(|e| e["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["key"] == "code" && c["new_value"] == fresh.as_str())),
        "{created:?}"
    );
    let removed = entries(42).await;
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0]["reason"], "cleanup");
}

/// `POST /oauth2/authorize` takes MANAGE_GUILD, as Discord: a member who
/// manages the guild adds a bot; a member who does not gets 50013 and a
/// stranger 50001, and neither adds anything.
#[tokio::test]
async fn managers_authorize_bots_and_others_cannot() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (dan, dan_id) = node.register("dan").await;
    let (eve, _) = node.register("eve").await;
    let (stranger, _) = node.register("stranger").await;
    let (guild_id, channel) = node.guild(&owner, "Managed").await;
    let code = node.invite(&owner, &channel).await;
    for token in [&dan, &eve] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let manage_guild = guildhall_proto::permissions::MANAGE_GUILD.to_string();
    let (_, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/roles"),
            Some(&owner),
            Some(json!({"name": "managers", "permissions": manage_guild})),
        )
        .await;
    let role = role["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "PUT",
            &format!("/guilds/{guild_id}/members/{dan_id}/roles/{role}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let authorize = |token: String, app_id: String| {
        let node = &node;
        let guild_id = guild_id.clone();
        async move {
            node.call(
                "POST",
                &format!("/oauth2/authorize?client_id={app_id}&scope=bot"),
                Some(&token),
                Some(json!({"guild_id": guild_id, "permissions": "0", "authorize": true})),
            )
            .await
        }
    };
    let mut apps = vec![];
    for token in [&eve, &stranger, &dan] {
        let (status, app) = node
            .call(
                "POST",
                "/applications",
                Some(token),
                Some(json!({"name": "helper"})),
            )
            .await;
        assert_eq!(status, 200, "{app}");
        apps.push(app["id"].as_str().unwrap().to_owned());
    }
    let (status, error) = authorize(eve.clone(), apps[0].clone()).await;
    assert_eq!(
        (status, error["code"].as_i64()),
        (403, Some(50013)),
        "{error}"
    );
    let (status, error) = authorize(stranger.clone(), apps[1].clone()).await;
    assert_eq!(
        (status, error["code"].as_i64()),
        (403, Some(50001)),
        "{error}"
    );
    let (status, body) = authorize(dan.clone(), apps[2].clone()).await;
    assert_eq!(status, 200, "{body}");
    let members = |id: &str| format!("/guilds/{guild_id}/members/{id}");
    assert_eq!(
        node.call("GET", &members(&apps[2]), Some(&owner), None)
            .await
            .0,
        200
    );
    for refused in &apps[..2] {
        assert_eq!(
            node.call("GET", &members(refused), Some(&owner), None)
                .await
                .0,
            404
        );
    }
}

/// Webhook create, rename and delete by a member are audited (50, 51,
/// 52, target the webhook) with Discord's change keys and the reason.
#[tokio::test]
async fn webhook_changes_are_audited() {
    let node = TestNode::start().await;
    let (owner, owner_id) = node.register("alice").await;
    let (guild_id, channel) = node.guild(&owner, "Hooks").await;
    let reason = [("X-Audit-Log-Reason", "hooks")];
    let (status, hook) = node
        .call_with(
            "POST",
            &format!("/channels/{channel}/webhooks"),
            Some(&owner),
            Some(json!({"name": "first"})),
            &reason,
        )
        .await;
    assert_eq!(status, 200, "{hook}");
    let hook_id = hook["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/webhooks/{hook_id}"),
            Some(&owner),
            Some(json!({"name": "second"})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/webhooks/{hook_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let mut seen = vec![];
    for action in [50, 51, 52] {
        let (status, log) = node
            .call(
                "GET",
                &format!("/guilds/{guild_id}/audit-logs?action_type={action}"),
                Some(&owner),
                None,
            )
            .await;
        assert_eq!(status, 200, "{log}");
        let entries = log["audit_log_entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{action}: {log}");
        assert_eq!(
            (&entries[0]["target_id"], &entries[0]["user_id"]),
            (&json!(hook_id), &json!(owner_id))
        );
        seen.push(entries[0].clone());
    }
    assert_eq!(seen[0]["reason"], "hooks");
    assert!(
        seen[0]["changes"]
            .as_array()
            .unwrap()
            .contains(&json!({"key": "name", "new_value": "first"})),
        "{}",
        seen[0]
    );
    assert_eq!(
        seen[1]["changes"],
        json!([{"key": "name", "old_value": "first", "new_value": "second"}])
    );
    assert!(
        seen[2]["changes"]
            .as_array()
            .unwrap()
            .contains(&json!({"key": "name", "old_value": "second"})),
        "{}",
        seen[2]
    );
}

/// `GET /guilds/{id}/members/search`: a prefix of the username or the
/// nickname, case insensitive, `limit` 1 (default) to 1,000, `query`
/// required, members only.
#[tokio::test]
async fn members_are_searched_by_username_and_nickname() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (robert, robert_id) = node.register("robert").await;
    let (stranger, _) = node.register("stranger").await;
    let (guild_id, channel) = node.guild(&owner, "Searched").await;
    let code = node.invite(&owner, &channel).await;
    for token in [&bob, &robert] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/members/{robert_id}"),
            Some(&owner),
            Some(json!({"nick": "Bobcat"})),
        )
        .await;
    assert_eq!(status, 200);
    let search = |query: &str| format!("/guilds/{guild_id}/members/search?{query}");
    let ids = |members: &serde_json::Value| -> Vec<String> {
        let mut ids: Vec<String> = members
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["user"]["id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let mut both = vec![bob_id.clone(), robert_id.clone()];
    both.sort();
    for query in ["query=bo&limit=10", "query=BO&limit=1000"] {
        let (status, members) = node.call("GET", &search(query), Some(&bob), None).await;
        assert_eq!((status, ids(&members)), (200, both.clone()), "{query}");
    }
    let (status, members) = node
        .call("GET", &search("query=rob"), Some(&bob), None)
        .await;
    assert_eq!((status, ids(&members)), (200, vec![robert_id.clone()]));
    assert_eq!(members[0]["nick"], "Bobcat");
    // The default limit is 1.
    let (status, members) = node.call("GET", &search("query=b"), Some(&bob), None).await;
    assert_eq!((status, members.as_array().map(Vec::len)), (200, Some(1)));
    let (status, members) = node
        .call("GET", &search("query=zed"), Some(&bob), None)
        .await;
    assert_eq!((status, members), (200, json!([])));
    for (query, field) in [
        ("limit=5", "query"),
        ("query=b&limit=0", "limit"),
        ("query=b&limit=1001", "limit"),
    ] {
        let (status, error) = node.call("GET", &search(query), Some(&bob), None).await;
        assert_eq!(
            (status, &error["code"]),
            (400, &json!(50035)),
            "{query}: {error}"
        );
        assert!(
            error["errors"][field]["_errors"][0]["code"].is_string(),
            "{query}: {error}"
        );
    }
    let (status, error) = node
        .call("GET", &search("query=b"), Some(&stranger), None)
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50001)));
}

/// Threads: started with and without a message, kept apart from the
/// guild's channels, talked in by SEND_MESSAGES_IN_THREADS (not
/// SEND_MESSAGES), and a private one seen only by its members and
/// moderators: in events, GUILD_CREATE, REST and the active list.
#[tokio::test]
async fn threads_are_started_talked_in_and_private_ones_kept_private() {
    use guildhall_proto::permissions as perm;
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, _) = node.register("carol").await;
    let (guild_id, general) = node.guild(&owner, "Threads").await;
    let code = node.invite(&owner, &general).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let start = |token: String, body: serde_json::Value| {
        let node = &node;
        let general = general.clone();
        async move {
            node.call(
                "POST",
                &format!("/channels/{general}/threads"),
                Some(&token),
                Some(body),
            )
            .await
        }
    };
    // @everyone holds no thread bit by default: only the owner starts one.
    let (status, error) = start(bob.clone(), json!({"name": "talk", "type": 11})).await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    let (status, public) = start(
        owner.clone(),
        json!({"name": "talk", "type": 11, "auto_archive_duration": 60}),
    )
    .await;
    assert_eq!(status, 201, "{public}");
    let public_id = public["id"].as_str().unwrap().to_owned();
    assert_eq!(public["type"], 11);
    assert_eq!(public["parent_id"], json!(general));
    assert_eq!(public["guild_id"], json!(guild_id));
    assert_eq!(public["member_count"], 1);
    assert_eq!(public["message_count"], 0);
    assert_eq!(public["thread_metadata"]["archived"], false);
    assert_eq!(public["thread_metadata"]["auto_archive_duration"], 60);
    assert!(public["thread_metadata"]["create_timestamp"].is_string());
    assert!(public["member"]["join_timestamp"].is_string(), "{public}");
    // SEND_MESSAGES alone does not talk in a thread.
    let (status, error) = node
        .post_message(&bob, &public_id, json!({"content": "hi"}))
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    let bits = perm::EVERYONE_DEFAULT
        | perm::CREATE_PUBLIC_THREADS
        | perm::CREATE_PRIVATE_THREADS
        | perm::SEND_MESSAGES_IN_THREADS;
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/roles/{guild_id}"),
            Some(&owner),
            Some(json!({"permissions": bits.to_string()})),
        )
        .await;
    assert_eq!(status, 200);
    let intents = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client.identify(&carol, intents).await;
    let guild = carol_client.dispatch("GUILD_CREATE").await;
    let ids = |list: &serde_json::Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&guild["d"]["threads"]), vec![public_id.clone()]);
    assert!(!ids(&guild["d"]["channels"]).contains(&public_id));
    let (status, _) = node
        .post_message(&bob, &public_id, json!({"content": "in thread"}))
        .await;
    assert_eq!(status, 200);
    let heard = carol_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(heard["d"]["channel_id"], json!(public_id));

    // Bob's private thread (type 12 by default) and what is said in it
    // reach neither carol's session nor her REST calls.
    let (status, private) = start(bob.clone(), json!({"name": "secret"})).await;
    assert_eq!(status, 201, "{private}");
    assert_eq!(private["type"], 12);
    assert_eq!(private["thread_metadata"]["invitable"], true);
    let private_id = private["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .post_message(&bob, &private_id, json!({"content": "psst"}))
        .await;
    assert_eq!(status, 200);
    let (status, _) = node
        .post_message(&owner, &general, json!({"content": "marker"}))
        .await;
    assert_eq!(status, 200);
    loop {
        let frame = carol_client.next().await.unwrap();
        assert!(!frame.to_string().contains(&private_id), "{frame}");
        if frame["t"] == "MESSAGE_CREATE" && frame["d"]["content"] == "marker" {
            break;
        }
    }
    let (status, error) = node
        .call(
            "GET",
            &format!("/channels/{private_id}"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50001)));
    let (status, error) = node
        .post_message(&carol, &private_id, json!({"content": "let me in"}))
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50001)));
    // The owner moderates (MANAGE_THREADS): she sees it.
    let (status, seen) = node
        .call(
            "GET",
            &format!("/channels/{private_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, seen["message_count"].as_u64()), (200, Some(1)));
    let active = |token: String| {
        let node = &node;
        let guild_id = guild_id.clone();
        async move {
            let (status, list) = node
                .call(
                    "GET",
                    &format!("/guilds/{guild_id}/threads/active"),
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(status, 200, "{list}");
            list
        }
    };
    let list = active(carol.clone()).await;
    assert_eq!(ids(&list["threads"]), vec![public_id.clone()]);
    assert_eq!(list["members"], json!([]));
    let list = active(bob.clone()).await;
    assert_eq!(
        ids(&list["threads"]),
        vec![private_id.clone(), public_id.clone()]
    );
    assert_eq!(list["members"][0]["user_id"], json!(bob_id));
    assert_eq!(list["members"][0]["id"], json!(private_id));
    assert_eq!(list["threads"][1]["message_count"], 1);

    // From a message: the thread shares its id; a second start is 160004.
    let (_, message) = node
        .post_message(&owner, &general, json!({"content": "start here"}))
        .await;
    let message_id = message["id"].as_str().unwrap().to_owned();
    let from_message = format!("/channels/{general}/messages/{message_id}/threads");
    let (status, thread) = node
        .call(
            "POST",
            &from_message,
            Some(&bob),
            Some(json!({"name": "about that"})),
        )
        .await;
    assert_eq!(
        (status, thread["id"].as_str()),
        (201, Some(message_id.as_str()))
    );
    assert_eq!(thread["type"], 11);
    let (status, error) = node
        .call(
            "POST",
            &from_message,
            Some(&carol),
            Some(json!({"name": "again"})),
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(160004)), "{error}");

    // A webhook of the parent posts into the thread with `thread_id`;
    // a thread of no channel of its is an unknown channel.
    let (status, hook) = node
        .call(
            "POST",
            &format!("/channels/{general}/webhooks"),
            Some(&owner),
            Some(json!({"name": "hook"})),
        )
        .await;
    assert_eq!(status, 200, "{hook}");
    let hook_path = format!(
        "/webhooks/{}/{}",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    );
    let (status, posted) = node
        .call(
            "POST",
            &format!("{hook_path}?wait=true&thread_id={public_id}"),
            None,
            Some(json!({"content": "from the hook"})),
        )
        .await;
    assert_eq!(
        (status, &posted["channel_id"]),
        (200, &json!(public_id)),
        "{posted}"
    );
    loop {
        let heard = carol_client.dispatch("MESSAGE_CREATE").await;
        if heard["d"]["content"] == "from the hook" {
            assert_eq!(heard["d"]["channel_id"], json!(public_id));
            break;
        }
    }
    let posted_id = posted["id"].as_str().unwrap();
    let (status, _) = node
        .call(
            "GET",
            &format!("{hook_path}/messages/{posted_id}?thread_id={public_id}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (status, error) = node
        .call(
            "POST",
            &format!("{hook_path}?thread_id={general}"),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_eq!((status, &error["code"]), (404, &json!(10003)));

    // Refused with nothing started.
    for (body, code) in [
        (json!({"name": "x", "type": 10}), 50024),
        (
            json!({"name": "x", "type": 11, "auto_archive_duration": 61}),
            50035,
        ),
        (json!({"type": 11}), 50035),
        (json!({"name": "x", "type": 9}), 50035),
        (json!({"name": "x", "type": 11, "invitable": false}), 50035),
    ] {
        let (status, error) = start(owner.clone(), body.clone()).await;
        assert_eq!(
            (status, &error["code"]),
            (400, &json!(code)),
            "{body}: {error}"
        );
    }
    let (_, channels) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(channels.as_array().map(Vec::len), Some(1), "{channels}");
    // A fresh session of carol's: the public threads, not the private one.
    let mut again = Client::connect(&node.ws).await;
    again.identify(&carol, intents).await;
    let guild = again.dispatch("GUILD_CREATE").await;
    let mut seen = ids(&guild["d"]["threads"]);
    seen.sort();
    let mut expected = vec![public_id, message_id];
    expected.sort();
    assert_eq!(seen, expected);
}

/// Forum and media channels are created and edited with their documented
/// fields, each stored and echoed: tags (ids minted for new ones, kept
/// across edits, an id the forum does not hold refused), the default
/// reaction, sort order and layout, and the slowmode new threads get.
/// They hold posts, not messages (50008); other channel types refuse the
/// forum fields with 50035.
#[tokio::test]
async fn forum_channels_keep_their_tags_and_settings() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, general) = node.guild(&owner, "Forums").await;
    let (status, forum) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({
                "name": "help",
                "type": 15,
                "topic": "ask here",
                "available_tags": [
                    {"name": "solved", "moderated": true, "emoji_name": "✅"},
                    {"name": "bug"}
                ],
                "default_reaction_emoji": {"emoji_id": null, "emoji_name": "👍"},
                "default_sort_order": 1,
                "default_forum_layout": 2,
                "default_thread_rate_limit_per_user": 30
            })),
        )
        .await;
    assert_eq!(status, 200, "{forum}");
    let forum_id = forum["id"].as_str().unwrap().to_owned();
    assert_eq!(forum["type"], 15);
    let tags = forum["available_tags"].as_array().unwrap().clone();
    assert_eq!(tags.len(), 2, "{forum}");
    assert_eq!(tags[0]["name"], "solved");
    assert_eq!(tags[0]["moderated"], true);
    assert_eq!(tags[0]["emoji_name"], "✅");
    assert!(tags[0]["id"].as_str().unwrap().parse::<u64>().is_ok());
    assert_ne!(tags[0]["id"], tags[1]["id"]);
    assert_eq!(forum["default_reaction_emoji"]["emoji_name"], "👍");
    assert_eq!(forum["default_sort_order"], 1);
    assert_eq!(forum["default_forum_layout"], 2);
    assert_eq!(forum["default_thread_rate_limit_per_user"], 30);
    let (status, seen) = node
        .call("GET", &format!("/channels/{forum_id}"), Some(&owner), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(seen["available_tags"], forum["available_tags"]);

    // An edit keeps "solved" by id, drops "bug" and adds "idea".
    let solved = tags[0]["id"].clone();
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("/channels/{forum_id}"),
            Some(&owner),
            Some(json!({
                "available_tags": [
                    {"id": solved, "name": "done", "moderated": true},
                    {"name": "idea"}
                ],
                "default_reaction_emoji": null,
                "default_sort_order": null
            })),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["available_tags"][0]["id"], solved);
    assert_eq!(edited["available_tags"][0]["name"], "done");
    assert_eq!(edited["available_tags"][1]["name"], "idea");
    assert_eq!(edited["available_tags"].as_array().unwrap().len(), 2);
    assert_eq!(edited["default_reaction_emoji"], json!(null));
    assert_eq!(edited["default_sort_order"], json!(null));
    // A tag id the forum does not hold, and malformed tags.
    for (body, field) in [
        (
            json!({"available_tags": [{"id": "12345", "name": "x"}]}),
            "available_tags",
        ),
        (json!({"available_tags": [{"name": ""}]}), "available_tags"),
        (
            json!({"available_tags": [{"name": "x", "emoji_id": "1", "emoji_name": "y"}]}),
            "available_tags",
        ),
        (json!({"default_sort_order": 2}), "default_sort_order"),
        (json!({"default_forum_layout": 3}), "default_forum_layout"),
        (
            json!({"default_reaction_emoji": {"emoji_name": ""}}),
            "default_reaction_emoji",
        ),
    ] {
        let (status, error) = node
            .call(
                "PATCH",
                &format!("/channels/{forum_id}"),
                Some(&owner),
                Some(body),
            )
            .await;
        assert_eq!((status, &error["code"]), (400, &json!(50035)), "{error}");
        assert!(error["errors"][field].is_object(), "{field}: {error}");
    }
    let many: Vec<_> = (0..21).map(|i| json!({"name": format!("t{i}")})).collect();
    let (status, error) = node
        .call(
            "PATCH",
            &format!("/channels/{forum_id}"),
            Some(&owner),
            Some(json!({"available_tags": many})),
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50035)), "{error}");
    // A forum holds posts, not messages.
    let (status, error) = node
        .post_message(&owner, &forum_id, json!({"content": "hi"}))
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50008)), "{error}");
    // A media channel has tags but no layout.
    let (status, media) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "clips", "type": 16, "default_forum_layout": 1})),
        )
        .await;
    assert_eq!((status, &media["code"]), (400, &json!(50035)), "{media}");
    // A text channel has no tags; its threads start with its slowmode.
    let (status, error) = node
        .call(
            "PATCH",
            &format!("/channels/{general}"),
            Some(&owner),
            Some(json!({"available_tags": [{"name": "x"}]})),
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50035)), "{error}");
    let (status, text) = node
        .call(
            "PATCH",
            &format!("/channels/{general}"),
            Some(&owner),
            Some(json!({"default_thread_rate_limit_per_user": 10})),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text["default_thread_rate_limit_per_user"], 10);
    let (status, thread) = node
        .call(
            "POST",
            &format!("/channels/{general}/threads"),
            Some(&owner),
            Some(json!({"name": "slow", "type": 11})),
        )
        .await;
    assert_eq!(status, 201, "{thread}");
    assert_eq!(thread["rate_limit_per_user"], 10);
    assert_eq!(thread["applied_tags"], json!([]));
}

/// A post in a forum, as documented: a public thread with its first
/// message (which shares its id), SEND_MESSAGES in the forum being what
/// posts, the forum's tags applied (a moderated one by moderators only),
/// files beside `payload_json`, THREAD_CREATE then MESSAGE_CREATE to the
/// forum's viewers; bad posts refused with nothing written.
#[tokio::test]
async fn forum_posts_start_with_their_message_and_tags() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, _) = node.register("bob").await;
    let (guild_id, general) = node.guild(&owner, "Posts").await;
    let code = node.invite(&owner, &general).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&bob), None)
        .await;
    assert_eq!(status, 200);
    let (status, forum) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({
                "name": "help",
                "type": 15,
                "available_tags": [{"name": "solved", "moderated": true}, {"name": "bug"}]
            })),
        )
        .await;
    assert_eq!(status, 200, "{forum}");
    let forum_id = forum["id"].as_str().unwrap().to_owned();
    let solved = forum["available_tags"][0]["id"].clone();
    let bug = forum["available_tags"][1]["id"].clone();
    let mut bob_client = Client::connect(&node.ws).await;
    bob_client
        .identify(
            &bob,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    bob_client.dispatch("GUILD_CREATE").await;
    let posts = format!("/channels/{forum_id}/threads");

    let (status, post) = node
        .call(
            "POST",
            &posts,
            Some(&bob),
            Some(json!({
                "name": "it crashes",
                "applied_tags": [bug],
                "message": {"content": "on start"}
            })),
        )
        .await;
    assert_eq!(status, 201, "{post}");
    let post_id = post["id"].as_str().unwrap().to_owned();
    assert_eq!(post["type"], 11);
    assert_eq!(post["parent_id"], json!(forum_id));
    assert_eq!(post["applied_tags"], json!([bug]));
    assert_eq!(post["message_count"], 1);
    assert_eq!(post["message"]["id"], json!(post_id));
    assert_eq!(post["message"]["channel_id"], json!(post_id));
    assert_eq!(post["message"]["content"], "on start");
    let created = bob_client.dispatch("THREAD_CREATE").await;
    assert_eq!(created["d"]["id"], json!(post_id));
    let first = bob_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(first["d"]["id"], json!(post_id));
    let history = node.history(&bob, &post_id).await;
    assert_eq!(history.len(), 1);

    // Refused, nothing written: a moderated tag, a tag the forum lacks,
    // too many tags, no message, an empty message.
    let refused = [
        (
            json!({"name": "x", "applied_tags": [solved], "message": {"content": "x"}}),
            403,
            50013,
        ),
        (
            json!({"name": "x", "applied_tags": ["1"], "message": {"content": "x"}}),
            400,
            50035,
        ),
        (
            json!({"name": "x", "applied_tags": ["1", "2", "3", "4", "5", "6"], "message": {"content": "x"}}),
            400,
            50035,
        ),
        (json!({"name": "x"}), 400, 50035),
        (json!({"name": "x", "message": {}}), 400, 50006),
        (
            json!({"name": "x", "type": 12, "message": {"content": "x"}}),
            400,
            50035,
        ),
    ];
    for (body, status, code) in refused {
        let (got, error) = node.call("POST", &posts, Some(&bob), Some(body)).await;
        assert_eq!((got, &error["code"]), (status, &json!(code)), "{error}");
    }
    let (status, active) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/threads/active"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(active["threads"].as_array().unwrap().len(), 1, "{active}");

    // A post with a file, as libraries send it.
    let payload = json!({"name": "screenshot", "message": {"content": "see"}}).to_string();
    let body = crate::files::multipart(&[
        ("payload_json", None, payload.as_bytes()),
        ("files[0]", Some("shot.txt"), b"pixels"),
    ]);
    let (status, with_file) =
        crate::files::send_form(&node, "POST", &posts, Some(&bob), body).await;
    assert_eq!(status, 201, "{with_file}");
    assert_eq!(
        with_file["message"]["attachments"][0]["filename"],
        "shot.txt"
    );

    // Tags change on an edit: the starter may apply the forum's own, a
    // moderator the moderated one, which the starter then cannot remove.
    let edit = |token: String, body: serde_json::Value| {
        let node = &node;
        let post_id = post_id.clone();
        async move {
            node.call(
                "PATCH",
                &format!("/channels/{post_id}"),
                Some(&token),
                Some(body),
            )
            .await
        }
    };
    let (status, edited) = edit(bob.clone(), json!({"applied_tags": []})).await;
    assert_eq!(
        (status, &edited["applied_tags"]),
        (200, &json!([])),
        "{edited}"
    );
    let (status, edited) = edit(owner.clone(), json!({"applied_tags": [solved, bug]})).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["applied_tags"], json!([solved, bug]));
    let (status, error) = edit(bob.clone(), json!({"applied_tags": [bug]})).await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    // Posts are talked in as threads are; they are listed when archived.
    let (status, _) = edit(owner.clone(), json!({"archived": true})).await;
    assert_eq!(status, 200);
    let (status, list) = node
        .call(
            "GET",
            &format!("/channels/{forum_id}/threads/archived/public"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["threads"][0]["id"], json!(post_id));
}

/// A thread archives by itself after its `auto_archive_duration` without
/// activity, counted from its archive time or its newest message, also
/// across a restart (the owner reads both back at load). Two hours pass
/// by moving the threads' archive times back while the node is down; a
/// message's time is its id, so the thread with a fresh message stays.
#[tokio::test]
async fn threads_archive_by_themselves_when_inactive() {
    let dir = tempfile::tempdir().unwrap();
    let config = || guildhall_node::NodeConfig::embedded(dir.path().to_owned());
    let node = TestNode::from_config(config()).await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, general) = node.guild(&owner, "Quiet").await;
    let mut threads = vec![];
    for name in ["quiet", "busy"] {
        let (status, thread) = node
            .call(
                "POST",
                &format!("/channels/{general}/threads"),
                Some(&owner),
                Some(json!({"name": name, "type": 11, "auto_archive_duration": 60})),
            )
            .await;
        assert_eq!(status, 201, "{thread}");
        threads.push(thread["id"].as_str().unwrap().parse::<i64>().unwrap());
    }
    let (quiet, busy) = (threads[0], threads[1]);
    node.stop().await;

    let store = guildhall_store::Store::open(
        &dir.path().join("guildhall.db"),
        &guildhall_limits::Limits::default(),
    )
    .await
    .unwrap();
    let guild: i64 = guild_id.parse().unwrap();
    let epoch = store.owner_epoch(guild).await.unwrap().unwrap();
    let two_hours_ago = guildhall_common::state::now_ms() as i64 - 2 * 3_600_000;
    for id in [quiet, busy] {
        let row = guildhall_store::ChannelRow {
            archive_ms: Some(two_hours_ago),
            ..store.channel(id).await.unwrap().unwrap()
        };
        assert!(store.update_thread(&row, epoch).await.unwrap());
    }
    drop(store);

    let node = TestNode::from_config(config()).await;
    let (status, _) = node
        .post_message(&owner, &busy.to_string(), json!({"content": "still here"}))
        .await;
    assert_eq!(status, 200);
    // The owner loaded the guild for that message; the quiet thread was
    // due two hours ago.
    let archived = |id: i64| {
        let node = &node;
        let owner = owner.clone();
        async move {
            let (status, thread) = node
                .call("GET", &format!("/channels/{id}"), Some(&owner), None)
                .await;
            assert_eq!(status, 200, "{thread}");
            thread["thread_metadata"]["archived"] == json!(true)
        }
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !archived(quiet).await {
        assert!(std::time::Instant::now() < deadline, "never archived");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!archived(busy).await);
    let (status, active) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/threads/active"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        active["threads"][0]["id"],
        json!(busy.to_string()),
        "{active}"
    );
    assert_eq!(active["threads"].as_array().unwrap().len(), 1);
}

/// A thread is edited, archived, unarchived and deleted as Discord
/// documents it: the starter renames and archives their own thread,
/// others are refused; an archived thread leaves the active list for the
/// archived lists, can be read but not changed (50083), is unarchived by
/// a message unless locked; THREAD_UPDATE and THREAD_DELETE reach its
/// viewers; each edit is in the audit log.
#[tokio::test]
async fn threads_are_edited_archived_and_deleted() {
    use guildhall_proto::permissions as perm;
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, _) = node.register("carol").await;
    let (guild_id, general) = node.guild(&owner, "Archive").await;
    let code = node.invite(&owner, &general).await;
    for token in [&bob, &carol] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let bits = perm::EVERYONE_DEFAULT
        | perm::CREATE_PUBLIC_THREADS
        | perm::CREATE_PRIVATE_THREADS
        | perm::SEND_MESSAGES_IN_THREADS;
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/roles/{guild_id}"),
            Some(&owner),
            Some(json!({"permissions": bits.to_string()})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, talk) = node
        .call(
            "POST",
            &format!("/channels/{general}/threads"),
            Some(&bob),
            Some(json!({"name": "talk", "type": 11})),
        )
        .await;
    assert_eq!(status, 201, "{talk}");
    let talk = talk["id"].as_str().unwrap().to_owned();
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client
        .identify(
            &carol,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    carol_client.dispatch("GUILD_CREATE").await;
    let edit = |token: String, thread: String, body: serde_json::Value| {
        let node = &node;
        async move {
            node.call(
                "PATCH",
                &format!("/channels/{thread}"),
                Some(&token),
                Some(body),
            )
            .await
        }
    };

    // The starter renames it; carol hears it.
    let (status, renamed) = edit(bob.clone(), talk.clone(), json!({"name": "chat"})).await;
    assert_eq!(
        (status, &renamed["name"]),
        (200, &json!("chat")),
        "{renamed}"
    );
    let update = carol_client.dispatch("THREAD_UPDATE").await;
    assert_eq!(update["d"]["name"], "chat");
    // Carol neither started nor moderates it.
    for body in [json!({"name": "mine"}), json!({"locked": true})] {
        let (status, error) = edit(carol.clone(), talk.clone(), body).await;
        assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    }
    // A thread has no topic; a public one is not invitable; bounds hold.
    for (body, field) in [
        (json!({"topic": "x"}), "topic"),
        (json!({"invitable": false}), "invitable"),
        (
            json!({"auto_archive_duration": 61}),
            "auto_archive_duration",
        ),
        (
            json!({"rate_limit_per_user": 21_601}),
            "rate_limit_per_user",
        ),
        (json!({"archived": "yes"}), "archived"),
    ] {
        let (status, error) = edit(owner.clone(), talk.clone(), body).await;
        assert_eq!((status, &error["code"]), (400, &json!(50035)), "{error}");
        assert!(error["errors"][field].is_object(), "{field}: {error}");
    }

    let (status, doomed) = node
        .post_message(&bob, &talk, json!({"content": "doomed"}))
        .await;
    assert_eq!(status, 200);
    let doomed = doomed["id"].as_str().unwrap().to_owned();
    // Bob archives it: it leaves the active list for the archived one.
    let (status, archived) = edit(bob.clone(), talk.clone(), json!({"archived": true})).await;
    assert_eq!(status, 200, "{archived}");
    assert_eq!(archived["thread_metadata"]["archived"], true);
    let update = carol_client.dispatch("THREAD_UPDATE").await;
    assert_eq!(update["d"]["thread_metadata"]["archived"], true);
    let (status, active) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/threads/active"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(active["threads"], json!([]), "{active}");
    let (status, list) = node
        .call(
            "GET",
            &format!("/channels/{general}/threads/archived/public"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["threads"][0]["id"], json!(talk));
    assert_eq!(list["members"][0]["user_id"], json!(bob_id));
    assert_eq!(list["has_more"], false);
    let archived_at = list["threads"][0]["thread_metadata"]["archive_timestamp"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, list) = node
        .call(
            "GET",
            &format!(
                "/channels/{general}/threads/archived/public?before={}",
                archived_at.replace('+', "%2B")
            ),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!((status, &list["threads"]), (200, &json!([])), "{list}");
    let (status, error) = node
        .call(
            "GET",
            &format!("/channels/{general}/threads/archived/public?limit=101"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50035)), "{error}");
    // Read, but not changed.
    let (status, seen) = node
        .call("GET", &format!("/channels/{talk}"), Some(&carol), None)
        .await;
    assert_eq!(
        (status, &seen["thread_metadata"]["archived"]),
        (200, &json!(true))
    );
    // Only a member's answer carries their thread member.
    assert!(seen.get("member").is_none(), "{seen}");
    let (status, seen) = node
        .call("GET", &format!("/channels/{talk}"), Some(&bob), None)
        .await;
    assert_eq!(
        (status, &seen["member"]["user_id"]),
        (200, &json!(bob_id)),
        "{seen}"
    );
    assert!(seen["member"]["join_timestamp"].is_string(), "{seen}");
    let (status, _) = node
        .call(
            "GET",
            &format!("/channels/{talk}/messages"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (status, error) = edit(bob.clone(), talk.clone(), json!({"name": "again"})).await;
    assert_eq!((status, &error["code"]), (400, &json!(50083)), "{error}");
    let (status, error) = node
        .call(
            "PUT",
            &format!("/channels/{talk}/messages/{doomed}/reactions/%F0%9F%91%8D/@me"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50083)), "{error}");
    // Deleting messages is what an archived thread still takes.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{talk}/messages/{doomed}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, error) = node
        .call(
            "PUT",
            &format!("/channels/{talk}/thread-members/@me"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50083)), "{error}");
    // A message unarchives it.
    let (status, _) = node
        .post_message(&carol, &talk, json!({"content": "wake up"}))
        .await;
    assert_eq!(status, 200);
    let update = carol_client.dispatch("THREAD_UPDATE").await;
    assert_eq!(update["d"]["thread_metadata"]["archived"], false);
    let heard = carol_client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(heard["d"]["content"], "wake up");

    // Locked and archived by the owner: only a moderator unarchives it.
    let (status, locked) = edit(
        owner.clone(),
        talk.clone(),
        json!({"archived": true, "locked": true}),
    )
    .await;
    assert_eq!(status, 200, "{locked}");
    assert_eq!(locked["thread_metadata"]["locked"], true);
    let (status, error) = node
        .post_message(&carol, &talk, json!({"content": "let me"}))
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50083)), "{error}");
    let (status, error) = edit(carol.clone(), talk.clone(), json!({"archived": false})).await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    let (status, open) = edit(
        owner.clone(),
        talk.clone(),
        json!({"archived": false, "locked": false}),
    )
    .await;
    assert_eq!(status, 200, "{open}");
    assert_eq!(open["thread_metadata"]["archived"], false);

    // A private archived thread: in the moderators' list and its
    // members' joined list only.
    let (status, club) = node
        .call(
            "POST",
            &format!("/channels/{general}/threads"),
            Some(&bob),
            Some(json!({"name": "club", "type": 12})),
        )
        .await;
    assert_eq!(status, 201, "{club}");
    let club = club["id"].as_str().unwrap().to_owned();
    let (status, _) = edit(bob.clone(), club.clone(), json!({"archived": true})).await;
    assert_eq!(status, 200);
    let listed = |token: String, path: String| {
        let node = &node;
        async move {
            let (status, list) = node.call("GET", &path, Some(&token), None).await;
            (status, list)
        }
    };
    let private = format!("/channels/{general}/threads/archived/private");
    let joined = format!("/channels/{general}/users/@me/threads/archived/private");
    let (status, error) = listed(carol.clone(), private.clone()).await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    let (status, list) = listed(owner.clone(), private).await;
    assert_eq!((status, &list["threads"][0]["id"]), (200, &json!(club)));
    let (status, list) = listed(bob.clone(), joined.clone()).await;
    assert_eq!((status, &list["threads"][0]["id"]), (200, &json!(club)));
    let (status, list) = listed(carol.clone(), joined).await;
    assert_eq!((status, &list["threads"]), (200, &json!([])));

    // Deleting takes MANAGE_THREADS; THREAD_DELETE names the thread.
    let (status, error) = node
        .call("DELETE", &format!("/channels/{talk}"), Some(&bob), None)
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)), "{error}");
    let (status, deleted) = node
        .call("DELETE", &format!("/channels/{talk}"), Some(&owner), None)
        .await;
    assert_eq!((status, &deleted["id"]), (200, &json!(talk)), "{deleted}");
    let gone = carol_client.dispatch("THREAD_DELETE").await;
    assert_eq!(gone["d"]["id"], json!(talk));
    assert_eq!(gone["d"]["parent_id"], json!(general));
    assert_eq!(gone["d"]["type"], 11);
    let (status, error) = node
        .call("GET", &format!("/channels/{talk}"), Some(&carol), None)
        .await;
    assert_eq!((status, &error["code"]), (404, &json!(10003)));
    // An archived thread is deleted too.
    let (status, _) = node
        .call("DELETE", &format!("/channels/{club}"), Some(&owner), None)
        .await;
    assert_eq!(status, 200);

    // The audit log holds the edits and the delete.
    let (status, log) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?action_type=111"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{log}");
    let entries = log["audit_log_entries"].as_array().unwrap();
    assert!(
        entries.iter().any(|e| e["target_id"] == json!(talk)
            && e["changes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["key"] == "archived" && c["new_value"] == true)),
        "{log}"
    );
    let (status, log) = node
        .call(
            "GET",
            &format!("/guilds/{guild_id}/audit-logs?action_type=112"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        log["audit_log_entries"].as_array().unwrap().len(),
        2,
        "{log}"
    );
}

/// Thread members: joining and leaving, adding and removing (who may),
/// THREAD_CREATE and THREAD_MEMBERS_UPDATE to whom they are for (the
/// user added or removed whatever their intents; the thread's viewers
/// with GUILD_MEMBERS), and the member list with its guild members.
#[tokio::test]
async fn thread_members_join_leave_and_are_announced() {
    use guildhall_proto::permissions as perm;
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (dave, dave_id) = node.register("dave").await;
    let (guild_id, general) = node.guild(&owner, "Members").await;
    let code = node.invite(&owner, &general).await;
    for token in [&bob, &carol, &dave] {
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(token), None)
            .await;
        assert_eq!(status, 200);
    }
    let bits = perm::EVERYONE_DEFAULT
        | perm::CREATE_PUBLIC_THREADS
        | perm::CREATE_PRIVATE_THREADS
        | perm::SEND_MESSAGES_IN_THREADS;
    let (status, _) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild_id}/roles/{guild_id}"),
            Some(&owner),
            Some(json!({"permissions": bits.to_string()})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, club) = node
        .call(
            "POST",
            &format!("/channels/{general}/threads"),
            Some(&bob),
            Some(json!({"name": "club", "type": 12})),
        )
        .await;
    assert_eq!(status, 201, "{club}");
    let club = club["id"].as_str().unwrap().to_owned();
    let mut carol_client = Client::connect(&node.ws).await;
    carol_client.identify(&carol, intents::GUILDS).await;
    carol_client.dispatch("GUILD_CREATE").await;
    let mut owner_client = Client::connect(&node.ws).await;
    owner_client
        .identify(&owner, intents::GUILDS | intents::GUILD_MEMBERS)
        .await;
    owner_client.dispatch("GUILD_CREATE").await;
    let member_path =
        |thread: &str, user: &str| format!("/channels/{thread}/thread-members/{user}");

    // Bob adds carol: she learns of the thread, then of her membership.
    let (status, _) = node
        .call("PUT", &member_path(&club, &carol_id), Some(&bob), None)
        .await;
    assert_eq!(status, 204);
    let created = carol_client.dispatch("THREAD_CREATE").await;
    assert_eq!(created["d"]["id"], json!(club));
    assert!(
        created["d"]["member"]["join_timestamp"].is_string(),
        "{created}"
    );
    let update = carol_client.dispatch("THREAD_MEMBERS_UPDATE").await;
    assert_eq!(update["d"]["added_members"][0]["user_id"], json!(carol_id));
    assert_eq!(update["d"]["member_count"], 2);
    let seen = owner_client.dispatch("THREAD_MEMBERS_UPDATE").await;
    assert_eq!(seen["d"]["added_members"][0]["user_id"], json!(carol_id));
    assert_eq!(
        seen["d"]["added_members"][0]["member"]["user"]["id"],
        json!(carol_id)
    );
    // Again: 204, nothing changes.
    let (status, _) = node
        .call("PUT", &member_path(&club, &carol_id), Some(&bob), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = node
        .call("GET", &format!("/channels/{club}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200);
    let (status, list) = node
        .call(
            "GET",
            &format!("/channels/{club}/thread-members"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 200, "{list}");
    let users: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["user_id"].as_str().unwrap())
        .collect();
    assert_eq!(users, vec![bob_id.as_str(), carol_id.as_str()]);
    assert_eq!(list[0]["id"], json!(club));
    let (status, one) = node
        .call(
            "GET",
            &format!("{}?with_member=true", member_path(&club, &carol_id)),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(
        (status, &one["member"]["user"]["id"]),
        (200, &json!(carol_id))
    );
    let (status, error) = node
        .call("GET", &member_path(&club, &dave_id), Some(&carol), None)
        .await;
    assert_eq!((status, &error["code"]), (404, &json!(10007)));
    let (status, error) = node
        .call(
            "GET",
            &format!("/channels/{club}/thread-members?limit=0"),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50035)));

    // Who may not: dave cannot see the private thread; carol neither
    // moderates nor started it.
    let (status, error) = node
        .call("PUT", &member_path(&club, "@me"), Some(&dave), None)
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50001)));
    let (status, error) = node
        .call("DELETE", &member_path(&club, &bob_id), Some(&carol), None)
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50013)));

    // Carol leaves: she hears it, and no longer sees the thread.
    let (status, _) = node
        .call("DELETE", &member_path(&club, "@me"), Some(&carol), None)
        .await;
    assert_eq!(status, 204);
    let update = carol_client.dispatch("THREAD_MEMBERS_UPDATE").await;
    assert_eq!(update["d"]["removed_member_ids"], json!([carol_id]));
    let (status, error) = node
        .call("GET", &format!("/channels/{club}"), Some(&carol), None)
        .await;
    assert_eq!((status, &error["code"]), (403, &json!(50001)));

    // A public thread: anyone who sees it joins.
    let (_, open) = node
        .call(
            "POST",
            &format!("/channels/{general}/threads"),
            Some(&owner),
            Some(json!({"name": "open", "type": 11})),
        )
        .await;
    let open = open["id"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call("PUT", &member_path(&open, "@me"), Some(&dave), None)
        .await;
    assert_eq!(status, 204);
    let (_, list) = node
        .call(
            "GET",
            &format!("/channels/{open}/thread-members"),
            Some(&dave),
            None,
        )
        .await;
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
    // A channel that is no thread.
    let (status, error) = node
        .call("PUT", &member_path(&general, "@me"), Some(&dave), None)
        .await;
    assert_eq!((status, &error["code"]), (404, &json!(10003)));
    let (status, error) = node
        .call(
            "GET",
            &format!("/channels/{general}/thread-members"),
            Some(&dave),
            None,
        )
        .await;
    assert_eq!((status, &error["code"]), (400, &json!(50024)));
}
