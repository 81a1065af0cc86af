//! Webhooks over real sockets: every route's happy path with Discord's
//! shapes, execute reaching gateway sessions as MESSAGE_CREATE with
//! `webhook_id`, WEBHOOKS_UPDATE by intent, and every refusal with
//! Discord's error body and nothing stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

struct Guild {
    node: TestNode,
    owner: String,
    owner_id: String,
    guild: String,
    channel: String,
}

async fn guild_with(limits: Limits) -> Guild {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..limits
    })
    .await;
    let (owner, owner_id) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "hooks").await;
    Guild {
        node,
        owner,
        owner_id,
        guild,
        channel,
    }
}

async fn guild() -> Guild {
    guild_with(Limits {
        webhook_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await
}

impl Guild {
    async fn create(&self, channel: &str, name: &str) -> Value {
        let (status, hook) = self
            .node
            .call(
                "POST",
                &format!("/channels/{channel}/webhooks"),
                Some(&self.owner),
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(status, 200, "{hook}");
        hook
    }

    async fn channel(&self, name: &str) -> String {
        let (status, channel) = self
            .node
            .call(
                "POST",
                &format!("/guilds/{}/channels", self.guild),
                Some(&self.owner),
                Some(json!({"name": name})),
            )
            .await;
        assert_eq!(status, 200, "{channel}");
        channel["id"].as_str().unwrap().to_owned()
    }

    async fn history(&self, channel: &str) -> Vec<Value> {
        let (status, messages) = self
            .node
            .call(
                "GET",
                &format!("/channels/{channel}/messages"),
                Some(&self.owner),
                None,
            )
            .await;
        assert_eq!(status, 200, "{messages}");
        messages.as_array().unwrap().clone()
    }

    async fn webhook_count(&self) -> usize {
        let (status, hooks) = self
            .node
            .call(
                "GET",
                &format!("/guilds/{}/webhooks", self.guild),
                Some(&self.owner),
                None,
            )
            .await;
        assert_eq!(status, 200, "{hooks}");
        hooks.as_array().unwrap().len()
    }
}

fn token_path(hook: &Value) -> String {
    format!(
        "/webhooks/{}/{}",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    )
}

fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

fn assert_error(status: u16, body: &Value, want_status: u16, code: u64) {
    assert_eq!(status, want_status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(body["message"].is_string(), "{body}");
}

/// The 50035 error code on `field`.
fn field_error(body: &Value, field: &str) -> String {
    assert_eq!(body["code"], 50035, "{body}");
    body["errors"][field]["_errors"][0]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error on {field}: {body}"))
        .to_owned()
}

const WITH_USER: [&str; 10] = [
    "application_id",
    "avatar",
    "channel_id",
    "guild_id",
    "id",
    "name",
    "token",
    "type",
    "url",
    "user",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_routes_round_trip_with_documented_shapes() {
    let g = guild().await;
    let node = &g.node;
    let hook = g.create(&g.channel, "Captain Hook").await;
    assert_eq!(keys(&hook), WITH_USER);
    assert_eq!(hook["type"], 1);
    assert_eq!(hook["guild_id"], g.guild.as_str());
    assert_eq!(hook["channel_id"], g.channel.as_str());
    assert_eq!(hook["user"]["id"], g.owner_id.as_str());
    assert_eq!(hook["name"], "Captain Hook");
    assert!(hook["avatar"].is_null() && hook["application_id"].is_null());
    let token = hook["token"].as_str().unwrap();
    assert_eq!(token.len(), 68);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    let id = hook["id"].as_str().unwrap();
    assert!(
        hook["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/api/webhooks/{id}/{token}")),
        "{hook}"
    );

    // An avatar data URI becomes a hash.
    let (status, pictured) = node
        .call(
            "POST",
            &format!("/channels/{}/webhooks", g.channel),
            Some(&g.owner),
            Some(json!({"name": "pictured", "avatar": "data:image/png;base64,iVBORw0KGgo="})),
        )
        .await;
    assert_eq!(status, 200, "{pictured}");
    let avatar = pictured["avatar"].as_str().unwrap();
    assert_eq!(avatar.len(), 32);
    assert!(avatar.bytes().all(|b| b.is_ascii_hexdigit()));

    // Lists, per channel and per guild, with creators and tokens.
    for path in [
        format!("/channels/{}/webhooks", g.channel),
        format!("/guilds/{}/webhooks", g.guild),
    ] {
        let (status, list) = node.call("GET", &path, Some(&g.owner), None).await;
        assert_eq!(status, 200, "{list}");
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0], hook);
        assert_eq!(keys(&list[1]), WITH_USER);
    }

    // Read: with an account (with `user`), with the token (without).
    let (status, read) = node
        .call("GET", &format!("/webhooks/{id}"), Some(&g.owner), None)
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read, hook);
    let (status, by_token) = node.call("GET", &token_path(&hook), None, None).await;
    assert_eq!(status, 200, "{by_token}");
    assert!(by_token.get("user").is_none(), "{by_token}");
    let mut without_user = hook.clone();
    without_user.as_object_mut().unwrap().remove("user");
    assert_eq!(by_token, without_user);
    // The same under /api/v9.
    let v9 = node.base.replace("/api/v10", "/api/v9");
    let response = node
        .http
        .get(format!("{v9}{}", token_path(&hook)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);

    // Change with an account: rename and move within the guild.
    let other = g.channel("elsewhere").await;
    let (status, moved) = node
        .call(
            "PATCH",
            &format!("/webhooks/{id}"),
            Some(&g.owner),
            Some(json!({"name": "Moved Hook", "channel_id": other})),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(keys(&moved), WITH_USER);
    assert_eq!(moved["name"], "Moved Hook");
    assert_eq!(moved["channel_id"], other.as_str());
    assert_eq!(moved["token"], hook["token"]);

    // Change with the token: name and avatar, never the channel.
    let (status, renamed) = node
        .call(
            "PATCH",
            &token_path(&hook),
            None,
            Some(json!({"name": "Token Hook", "avatar": "data:image/gif;base64,R0lGODlh"})),
        )
        .await;
    assert_eq!(status, 200, "{renamed}");
    assert!(renamed.get("user").is_none());
    assert_eq!(renamed["name"], "Token Hook");
    assert!(renamed["avatar"].is_string());
    let (status, refused) = node
        .call(
            "PATCH",
            &token_path(&hook),
            None,
            Some(json!({"channel_id": g.channel})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    field_error(&refused, "channel_id");
    let (_, still) = node.call("GET", &token_path(&hook), None, None).await;
    assert_eq!(still["channel_id"], other.as_str(), "nothing moved");

    // Delete: with the token, then with an account.
    let (status, body) = node.call("DELETE", &token_path(&hook), None, None).await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = node.call("GET", &token_path(&hook), None, None).await;
    assert_error(status, &body, 404, 10015);
    let pictured_id = pictured["id"].as_str().unwrap();
    let (status, body) = node
        .call(
            "DELETE",
            &format!("/webhooks/{pictured_id}"),
            Some(&g.owner),
            None,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(g.webhook_count().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_reaches_sessions_as_message_create_and_changes_send_webhooks_update() {
    let g = guild().await;
    let node = &g.node;
    let (_, bot) = node.bot_in(&g.owner, &g.guild).await;
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(
            &bot,
            intents::GUILDS
                | intents::GUILD_MESSAGES
                | intents::MESSAGE_CONTENT
                | intents::GUILD_WEBHOOKS,
        )
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    // A session without GUILD_WEBHOOKS never sees WEBHOOKS_UPDATE.
    let (_, other_bot) = node.bot_in(&g.owner, &g.guild).await;
    let mut unsubscribed = Client::connect(&node.ws).await;
    unsubscribed
        .identify(
            &other_bot,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    unsubscribed.dispatch("GUILD_CREATE").await;

    let hook = g.create(&g.channel, "Announcer").await;
    let update = watcher.dispatch("WEBHOOKS_UPDATE").await;
    assert_eq!(
        update["d"],
        json!({"guild_id": g.guild, "channel_id": g.channel})
    );
    let hook_id = hook["id"].as_str().unwrap();

    // Without wait: 204, and the message is stored and announced.
    let (status, body) = node
        .call(
            "POST",
            &token_path(&hook),
            None,
            Some(json!({"content": "first"})),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let created = watcher.dispatch("MESSAGE_CREATE").await;
    let d = &created["d"];
    assert_eq!(d["content"], "first");
    assert_eq!(d["webhook_id"], hook_id);
    assert_eq!(d["channel_id"], g.channel.as_str());
    assert_eq!(d["guild_id"], g.guild.as_str());
    assert_eq!(d["author"]["id"], hook_id);
    assert_eq!(d["author"]["username"], "Announcer");
    assert_eq!(d["author"]["discriminator"], "0000");
    assert_eq!(d["author"]["bot"], true);
    assert!(d["author"]["avatar"].is_null());
    assert!(d.get("member").is_none(), "{d}");
    let first = unsubscribed.next().await.unwrap();
    assert_eq!(
        first["t"], "MESSAGE_CREATE",
        "no WEBHOOKS_UPDATE without the intent"
    );

    // With wait: the message itself, under an overridden name.
    let (status, message) = node
        .call(
            "POST",
            &format!("{}?wait=true", token_path(&hook)),
            None,
            Some(json!({"content": "second", "username": "Someone Else",
                        "avatar_url": "https://example.com/a.png",
                        "allowed_mentions": {"parse": []}, "flags": 4096})),
        )
        .await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["webhook_id"], hook_id);
    assert_eq!(message["author"]["username"], "Someone Else");
    assert_eq!(message["flags"], 4096);
    let created = watcher.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["id"], message["id"]);
    assert_eq!(created["d"]["author"]["username"], "Someone Else");

    // History shows both as the webhook's.
    let history = g.history(&g.channel).await;
    assert_eq!(history.len(), 2);
    for stored in &history {
        assert_eq!(stored["webhook_id"], hook_id);
        assert_eq!(stored["author"]["id"], hook_id);
    }

    // The webhook's message routes.
    let message_id = message["id"].as_str().unwrap();
    let message_path = format!("{}/messages/{message_id}", token_path(&hook));
    let (status, read) = node.call("GET", &message_path, None, None).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["content"], "second");
    // Its flags are stored with it, not only answered.
    assert_eq!(read["flags"], 4096, "{read}");
    assert_eq!(read["author"]["username"], "Someone Else");
    let (status, edited) = node
        .call(
            "PATCH",
            &message_path,
            None,
            Some(json!({"content": "second, edited"})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["content"], "second, edited");
    assert!(edited["edited_timestamp"].is_string());
    let update = watcher.dispatch("MESSAGE_UPDATE").await;
    assert_eq!(update["d"]["content"], "second, edited");
    assert_eq!(update["d"]["webhook_id"], hook_id);
    let (status, body) = node.call("DELETE", &message_path, None, None).await;
    assert_eq!(status, 204, "{body}");
    let deleted = watcher.dispatch("MESSAGE_DELETE").await;
    assert_eq!(deleted["d"]["id"], message_id);
    let (status, body) = node.call("GET", &message_path, None, None).await;
    assert_error(status, &body, 404, 10008);

    // A rename announces; deleting the webhook announces and keeps its
    // messages.
    let (status, _) = node
        .call(
            "PATCH",
            &token_path(&hook),
            None,
            Some(json!({"name": "Renamed"})),
        )
        .await;
    assert_eq!(status, 200);
    watcher.dispatch("WEBHOOKS_UPDATE").await;
    let (status, _) = node.call("DELETE", &token_path(&hook), None, None).await;
    assert_eq!(status, 204);
    let update = watcher.dispatch("WEBHOOKS_UPDATE").await;
    assert_eq!(update["d"]["channel_id"], g.channel.as_str());
    let history = g.history(&g.channel).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["content"], "first");
    assert_eq!(
        history[0]["author"]["username"], "Announcer",
        "a message keeps the name it was posted under"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_unknown_webhooks_and_tokens_are_refused() {
    let g = guild().await;
    let node = &g.node;
    let hook = g.create(&g.channel, "guarded").await;
    let other = g.create(&g.channel, "other").await;
    let id = hook["id"].as_str().unwrap();
    // A member without MANAGE_WEBHOOKS (a bot with @everyone's bits).
    let (_, member) = node.bot_in(&g.owner, &g.guild).await;
    for (method, path, body) in [
        (
            "POST",
            format!("/channels/{}/webhooks", g.channel),
            Some(json!({"name": "mine"})),
        ),
        ("GET", format!("/channels/{}/webhooks", g.channel), None),
        ("GET", format!("/guilds/{}/webhooks", g.guild), None),
        ("GET", format!("/webhooks/{id}"), None),
        (
            "PATCH",
            format!("/webhooks/{id}"),
            Some(json!({"name": "x"})),
        ),
        ("DELETE", format!("/webhooks/{id}"), None),
    ] {
        let (status, answer) = node.call(method, &path, Some(&member), body).await;
        assert_error(status, &answer, 403, 50013);
    }
    // No account: 401 on the account routes.
    let (status, _) = node
        .call("GET", &format!("/webhooks/{id}"), None, None)
        .await;
    assert_eq!(status, 401);

    // Unknown webhook: 10015, with or without a token.
    let unknown = "1234567890123456789";
    let (status, body) = node
        .call("GET", &format!("/webhooks/{unknown}"), Some(&g.owner), None)
        .await;
    assert_error(status, &body, 404, 10015);
    let (status, body) = node
        .call(
            "POST",
            &format!("/webhooks/{unknown}/sometoken"),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_error(status, &body, 404, 10015);

    // A wrong token, and another webhook's token: 401 with 50027, on every
    // token route, and nothing changes.
    let wrong = format!("/webhooks/{id}/{}", "A".repeat(68));
    let foreign = format!("/webhooks/{id}/{}", other["token"].as_str().unwrap());
    for path in [&wrong, &foreign] {
        for (method, body) in [
            ("GET", None),
            ("PATCH", Some(json!({"name": "stolen"}))),
            ("POST", Some(json!({"content": "stolen"}))),
            ("DELETE", None),
        ] {
            let (status, answer) = node.call(method, path, None, body).await;
            assert_error(status, &answer, 401, 50027);
            assert_eq!(answer["message"], "Invalid Webhook Token");
        }
    }
    assert_eq!(g.webhook_count().await, 2);
    let (_, still) = node.call("GET", &token_path(&hook), None, None).await;
    assert_eq!(still["name"], "guarded");
    assert!(g.history(&g.channel).await.is_empty());

    // Messages of another webhook, and of a user, are not this webhook's.
    let (status, theirs) = node
        .call(
            "POST",
            &format!("{}?wait=true", token_path(&other)),
            None,
            Some(json!({"content": "other's"})),
        )
        .await;
    assert_eq!(status, 200, "{theirs}");
    let (status, user_message) = node
        .call(
            "POST",
            &format!("/channels/{}/messages", g.channel),
            Some(&g.owner),
            Some(json!({"content": "a user's"})),
        )
        .await;
    assert_eq!(status, 200, "{user_message}");
    for message in [&theirs, &user_message] {
        let path = format!(
            "{}/messages/{}",
            token_path(&hook),
            message["id"].as_str().unwrap()
        );
        for (method, body) in [
            ("GET", None),
            ("PATCH", Some(json!({"content": "hijacked"}))),
            ("DELETE", None),
        ] {
            let (status, answer) = node.call(method, &path, None, body).await;
            assert_error(status, &answer, 404, 10008);
        }
    }
    // The creator cannot edit the webhook's message as their own.
    let (status, body) = node
        .call(
            "PATCH",
            &format!(
                "/channels/{}/messages/{}",
                g.channel,
                theirs["id"].as_str().unwrap()
            ),
            Some(&g.owner),
            Some(json!({"content": "mine now"})),
        )
        .await;
    assert_error(status, &body, 403, 50005);
    let contents: Vec<Value> = g
        .history(&g.channel)
        .await
        .iter()
        .map(|m| m["content"].clone())
        .collect();
    assert_eq!(contents, [json!("a user's"), json!("other's")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_discords_errors_and_stores_nothing() {
    let g = guild().await;
    let node = &g.node;
    let owner: &str = &g.owner;
    let create = |body: Value| {
        let path = format!("/channels/{}/webhooks", g.channel);
        async move { node.call("POST", &path, Some(owner), Some(body)).await }
    };
    let (status, body) = create(json!({"name": "x".repeat(81)})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "name"), "BASE_TYPE_BAD_LENGTH");
    let (status, body) = create(json!({"name": ""})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "name"), "BASE_TYPE_BAD_LENGTH");
    for name in ["my Discord hook", "CLYDE", "clydesdale"] {
        let (status, body) = create(json!({"name": name})).await;
        assert_eq!(status, 400, "{name}");
        assert_eq!(field_error(&body, "name"), "USERNAME_INVALID_CONTAINS");
    }
    let (status, body) = create(json!({})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "name"), "BASE_TYPE_REQUIRED");
    let (status, body) = create(json!({"name": "ok", "avatar": "not an image"})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "avatar"), "IMAGE_INVALID");
    // 80 characters (not bytes) is the bound.
    let (status, body) = create(json!({"name": "é".repeat(80)})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = create(json!({"name": "hook"})).await;
    assert_eq!(status, 200, "{body}");
    let hook = body;
    assert_eq!(g.webhook_count().await, 2);

    let path = token_path(&hook);
    let execute = |body: Value| {
        let path = path.clone();
        async move { node.call("POST", &path, None, Some(body)).await }
    };
    // Nothing to send: 50006 (an empty body too).
    for empty in [
        json!({}),
        json!({"content": ""}),
        json!({"content": "   ", "embeds": []}),
    ] {
        let (status, body) = execute(empty).await;
        assert_error(status, &body, 400, 50006);
    }
    let (status, body) = node.call("POST", &path, None, None).await;
    assert_error(status, &body, 400, 50006);
    let (status, body) = execute(json!({"content": "x".repeat(2001)})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "content"), "BASE_TYPE_MAX_LENGTH");
    let (status, body) = execute(json!({"embeds": vec![json!({"title": "t"}); 11]})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "embeds"), "BASE_TYPE_MAX_LENGTH");
    let (status, body) = execute(json!({"content": "x", "username": "x".repeat(81)})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "username"), "BASE_TYPE_BAD_LENGTH");
    let (status, body) = execute(json!({"content": "x", "username": "discord"})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "username"), "USERNAME_INVALID_CONTAINS");
    let (status, body) = execute(json!({"content": "x", "flags": 1})).await;
    assert_eq!(status, 400);
    field_error(&body, "flags");
    let (status, body) =
        execute(json!({"content": "x", "poll": {"question": {"text": "?"}}})).await;
    assert_eq!(status, 400);
    field_error(&body, "poll");
    let (status, body) = execute(json!({"content": 5})).await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "content"), "BASE_TYPE_STRING");
    // Malformed JSON and an oversized body.
    let response = node
        .http
        .post(format!("{}{path}", node.base))
        .header("content-type", "application/json")
        .body("{\"content\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], 50109);
    let (status, body) =
        execute(json!({"content": "x", "embeds": [{"description": "y".repeat(70_000)}]})).await;
    assert_error(status, &body, 413, 40005);
    // A thread that does not exist: an unknown channel.
    let (status, body) = node
        .call(
            "POST",
            &format!("{path}?thread_id=1234567890123456789"),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_error(status, &body, 404, 10003);
    assert!(g.history(&g.channel).await.is_empty(), "nothing stored");

    // A message edit that would leave nothing, or too much.
    let (status, message) = node
        .call(
            "POST",
            &format!("{path}?wait=1"),
            None,
            Some(json!({"content": "kept"})),
        )
        .await;
    assert_eq!(status, 200, "{message}");
    let message_path = format!("{path}/messages/{}", message["id"].as_str().unwrap());
    let (status, body) = node
        .call("PATCH", &message_path, None, Some(json!({"content": ""})))
        .await;
    assert_error(status, &body, 400, 50006);
    let (status, body) = node
        .call(
            "PATCH",
            &message_path,
            None,
            Some(json!({"content": "x".repeat(2001)})),
        )
        .await;
    assert_eq!(status, 400);
    field_error(&body, "content");
    let (status, body) = node
        .call("PATCH", &path, None, Some(json!({"name": "Discord"})))
        .await;
    assert_eq!(status, 400);
    assert_eq!(field_error(&body, "name"), "USERNAME_INVALID_CONTAINS");
    let history = g.history(&g.channel).await;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["content"], "kept");
    assert!(history[0]["edited_timestamp"].is_null());
    let (_, still) = node.call("GET", &path, None, None).await;
    assert_eq!(still["name"], "hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_and_guilds_hold_at_most_their_maximum() {
    let g = guild().await;
    let node = &g.node;
    for i in 0..15 {
        g.create(&g.channel, &format!("hook {i}")).await;
    }
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{}/webhooks", g.channel),
            Some(&g.owner),
            Some(json!({"name": "one too many"})),
        )
        .await;
    assert_error(status, &body, 400, 30007);
    assert_eq!(body["message"], "Maximum number of webhooks reached (15)");
    assert_eq!(g.webhook_count().await, 15);
    // Moving one into the full channel is refused too.
    let other = g.channel("other").await;
    let outsider = g.create(&other, "outsider").await;
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/webhooks/{}", outsider["id"].as_str().unwrap()),
            Some(&g.owner),
            Some(json!({"channel_id": g.channel})),
        )
        .await;
    assert_error(status, &body, 400, 30007);

    // The guild's maximum, with the limits overridden small.
    let g = guild_with(Limits {
        webhooks_per_channel_max: 2,
        webhooks_per_guild_max: 3,
        webhook_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let second = g.channel("second").await;
    g.create(&g.channel, "a").await;
    g.create(&g.channel, "b").await;
    g.create(&second, "c").await;
    let (status, body) = g
        .node
        .call(
            "POST",
            &format!("/channels/{second}/webhooks"),
            Some(&g.owner),
            Some(json!({"name": "d"})),
        )
        .await;
    assert_error(status, &body, 400, 30058);
    assert_eq!(g.webhook_count().await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_channel_deletes_its_webhooks() {
    let g = guild().await;
    let node = &g.node;
    let doomed = g.channel("doomed").await;
    let hook = g.create(&doomed, "doomed hook").await;
    let kept = g.create(&g.channel, "kept hook").await;
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{doomed}"),
            Some(&g.owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = node.call("GET", &token_path(&hook), None, None).await;
    assert_error(status, &body, 404, 10015);
    let (status, body) = node
        .call(
            "POST",
            &token_path(&hook),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_error(status, &body, 404, 10015);
    let (status, _) = node.call("GET", &token_path(&kept), None, None).await;
    assert_eq!(status, 200);
    assert_eq!(g.webhook_count().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_routes_are_rate_limited_per_webhook() {
    let g = guild_with(Limits {
        webhook_rate_limit_per_window: 2,
        rest_rate_window_ms: 60_000,
        ..Limits::default()
    })
    .await;
    let node = &g.node;
    let hook = g.create(&g.channel, "busy").await;
    let calm = g.create(&g.channel, "calm").await;
    for _ in 0..2 {
        let (status, body) = node
            .call(
                "POST",
                &token_path(&hook),
                None,
                Some(json!({"content": "x"})),
            )
            .await;
        assert_eq!(status, 204, "{body}");
    }
    let (status, body) = node
        .call(
            "POST",
            &token_path(&hook),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(body["retry_after"].is_number());
    // Another webhook has its own bucket, and so does a wrong token.
    let (status, _) = node
        .call(
            "POST",
            &token_path(&calm),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_eq!(status, 204);
    let wrong = format!(
        "/webhooks/{}/{}",
        hook["id"].as_str().unwrap(),
        "B".repeat(68)
    );
    let (status, body) = node
        .call("POST", &wrong, None, Some(json!({"content": "x"})))
        .await;
    assert_error(status, &body, 401, 50027);
    assert_eq!(g.history(&g.channel).await.len(), 3);
}

/// twilight 0.18 (unmodified, base URL changed) drives every webhook
/// route it has and parses each answer into its strict models; its shard
/// receives WEBHOOKS_UPDATE and the webhook's MESSAGE_CREATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_manages_and_executes_webhooks() {
    use std::time::Duration;
    use twilight_gateway::StreamExt as _;
    use twilight_gateway::{ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId};
    use twilight_model::id::Id;

    let g = guild().await;
    let node = &g.node;
    let (_, bot) = node.bot_in(&g.owner, &g.guild).await;
    let addr = node.ws.trim_start_matches("ws://").to_owned();
    let http = twilight_http::Client::builder()
        .token(g.owner.clone())
        .proxy(addr, true)
        .ratelimiter(None)
        .build();
    let intents = Intents::GUILDS
        | Intents::GUILD_MESSAGES
        | Intents::MESSAGE_CONTENT
        | Intents::GUILD_WEBHOOKS;
    let config = ConfigBuilder::new(bot, intents)
        .proxy_url(node.ws.clone())
        .build();
    let mut shard = Shard::with_config(ShardId::ONE, config);
    async fn until<T>(shard: &mut Shard, mut pick: impl FnMut(Event) -> Option<T>) -> T {
        loop {
            let event = tokio::time::timeout(
                Duration::from_secs(15),
                shard.next_event(EventTypeFlags::all()),
            )
            .await
            .expect("an event in time")
            .expect("the shard is open")
            .unwrap_or_else(|error| panic!("twilight could not parse a payload: {error:?}"));
            if let Some(found) = pick(event) {
                return found;
            }
        }
    }
    until(&mut shard, |e| {
        matches!(e, Event::GuildCreate(_)).then_some(())
    })
    .await;

    let channel = Id::new(g.channel.parse().unwrap());
    let guild_id = Id::new(g.guild.parse().unwrap());
    let hook = http
        .create_webhook(channel, "Twilight Hook")
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(hook.name.as_deref(), Some("Twilight Hook"));
    assert_eq!(hook.channel_id, Some(channel));
    assert!(hook.user.is_some());
    let token = hook.token.clone().unwrap();
    let update = until(&mut shard, |e| match e {
        Event::WebhooksUpdate(update) => Some(update),
        _ => None,
    })
    .await;
    assert_eq!((update.guild_id, update.channel_id), (guild_id, channel));

    let listed = http
        .channel_webhooks(channel)
        .await
        .unwrap()
        .models()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0], hook);
    let listed = http
        .guild_webhooks(guild_id)
        .await
        .unwrap()
        .models()
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    let read = http.webhook(hook.id).await.unwrap().model().await.unwrap();
    assert_eq!(read, hook);
    let by_token = http
        .webhook(hook.id)
        .token(&token)
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert!(by_token.user.is_none());
    let renamed = http
        .update_webhook(hook.id)
        .name("Renamed Hook")
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(renamed.name.as_deref(), Some("Renamed Hook"));
    let renamed = http
        .update_webhook_with_token(hook.id, &token)
        .name("Token Renamed")
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(renamed.name.as_deref(), Some("Token Renamed"));

    let sent = http
        .execute_webhook(hook.id, &token)
        .content("from twilight")
        .username("Twi")
        .wait()
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(sent.webhook_id, Some(hook.id));
    assert_eq!(sent.author.name, "Twi");
    assert_eq!(sent.author.id.get(), hook.id.get());
    let created = until(&mut shard, |e| match e {
        Event::MessageCreate(message) => Some(message),
        _ => None,
    })
    .await;
    assert_eq!(created.id, sent.id);
    assert_eq!(created.webhook_id, Some(hook.id));
    let read = http
        .webhook_message(hook.id, &token, sent.id)
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(read.content, "from twilight");
    let edited = http
        .update_webhook_message(hook.id, &token, sent.id)
        .content(Some("edited by twilight"))
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(edited.content, "edited by twilight");
    http.delete_webhook_message(hook.id, &token, sent.id)
        .await
        .unwrap();
    http.delete_webhook(hook.id).await.unwrap();
    assert_eq!(g.webhook_count().await, 0);
}

/// `?with_components`, as Discord documents it: without it a body's
/// components are ignored; with it a webhook no application owns sends
/// non-interactive components only (a link button: stored and echoed; a
/// custom_id button: 50035, nothing stored), while a bot's webhook is its
/// application's (`application_id`) and sends any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_count_only_with_with_components() {
    let g = guild().await;
    let node = &g.node;
    let hook = g.create(&g.channel, "plain").await;
    assert_eq!(hook["application_id"], Value::Null);
    let link = json!([{"type": 1, "components": [
        {"type": 2, "style": 5, "label": "Docs", "url": "https://example.com/docs"}]}]);
    let press = json!([{"type": 1, "components": [
        {"type": 2, "style": 1, "label": "Press", "custom_id": "press"}]}]);
    // As stored and echoed: each component numbered in document order.
    let link_kept = json!([{"type": 1, "id": 1, "components": [
        {"type": 2, "id": 2, "style": 5, "label": "Docs", "url": "https://example.com/docs"}]}]);
    let press_kept = json!([{"type": 1, "id": 1, "components": [
        {"type": 2, "id": 2, "style": 1, "label": "Press", "custom_id": "press"}]}]);
    let execute = |hook: &Value, query: &str, components: &Value| {
        let path = format!("{}?wait=true{query}", token_path(hook));
        let body = json!({"content": "with parts", "components": components});
        async move { node.call("POST", &path, None, Some(body)).await }
    };
    // Ignored without the flag.
    let (status, sent) = execute(&hook, "", &link).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["components"], json!([]), "{sent}");
    // Kept with it, and read back.
    let (status, sent) = execute(&hook, "&with_components=true", &link).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["components"], link_kept, "{sent}");
    let (status, read) = node
        .call(
            "GET",
            &format!(
                "{}/messages/{}",
                token_path(&hook),
                sent["id"].as_str().unwrap()
            ),
            None,
            None,
        )
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["components"], link_kept);
    // Interactive ones: refused on a user's webhook, nothing stored.
    let before = g.history(&g.channel).await.len();
    let (status, refused) = execute(&hook, "&with_components=true", &press).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    assert!(refused["errors"]["components"].is_object(), "{refused}");
    assert_eq!(g.history(&g.channel).await.len(), before);

    // A bot with MANAGE_WEBHOOKS: its webhook is its application's.
    let (app_id, bot) = node.bot_in(&g.owner, &g.guild).await;
    let (_, me) = node.call("GET", "/users/@me", Some(&bot), None).await;
    let (status, role) = node
        .call(
            "POST",
            &format!("/guilds/{}/roles", g.guild),
            Some(&g.owner),
            Some(json!({"name": "hooks", "permissions": (1u64 << 29).to_string()})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    let (status, body) = node
        .call(
            "PUT",
            &format!(
                "/guilds/{}/members/{}/roles/{}",
                g.guild,
                me["id"].as_str().unwrap(),
                role["id"].as_str().unwrap()
            ),
            Some(&g.owner),
            None,
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, owned) = node
        .call(
            "POST",
            &format!("/channels/{}/webhooks", g.channel),
            Some(&bot),
            Some(json!({"name": "owned"})),
        )
        .await;
    assert_eq!(status, 200, "{owned}");
    assert_eq!(owned["application_id"], app_id.as_str());
    let (status, sent) = execute(&owned, "&with_components=true", &press).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["components"], press_kept, "{sent}");
    assert_eq!(sent["application_id"], app_id.as_str(), "{sent}");

    // Edits: components change only with the flag; `[]` clears them; the
    // same rule on what a user's webhook may send.
    let edit = |hook: &Value, message: &Value, query: &str, components: Value| {
        let path = format!(
            "{}/messages/{}{query}",
            token_path(hook),
            message["id"].as_str().unwrap()
        );
        async move {
            node.call(
                "PATCH",
                &path,
                None,
                Some(json!({"components": components})),
            )
            .await
        }
    };
    let (status, edited) = edit(&owned, &sent, "", json!([])).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["components"], press_kept, "ignored without the flag");
    let (status, edited) = edit(&owned, &sent, "?with_components=true", json!([])).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["components"], json!([]), "{edited}");
    let (status, linked) = execute(&hook, "&with_components=true", &link).await;
    assert_eq!(status, 200, "{linked}");
    let (status, refused) = edit(&hook, &linked, "?with_components=true", press.clone()).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
}
