//! REST hardening over real sockets: ids of another guild refused on every
//! route that takes one (and nothing of that guild touched), and invite
//! previews that do not load the guild.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// A node whose REST rate limit never gets in the way of a test's many
/// calls.
async fn node() -> TestNode {
    TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await
}

fn id(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

/// Every (method, path) of `api::routes()`, read from its source: a route
/// added there without a row in the table below fails the test.
fn declared_routes() -> BTreeSet<(String, String)> {
    let source = include_str!("../src/api.rs");
    let body = source
        .split("pub fn routes()")
        .nth(1)
        .and_then(|rest| rest.split(".fallback(").next())
        .expect("routes() in api.rs");
    let mut routes = BTreeSet::new();
    for chunk in body.split(".route(").skip(1) {
        let path = chunk.split('"').nth(1).expect("a quoted path").to_owned();
        for method in ["get", "post", "patch", "put", "delete"] {
            let called = chunk.match_indices(&format!("{method}(")).any(|(at, _)| {
                at == 0
                    || !chunk.as_bytes()[at - 1].is_ascii_alphanumeric()
                        && chunk.as_bytes()[at - 1] != b'_'
            });
            if called {
                routes.insert((method.to_ascii_uppercase(), path.clone()));
            }
        }
    }
    routes
}

/// One call of the table: method, route as `routes()` declares it, the
/// values of its `{..}` in order, body, expected status and JSON code (0:
/// no body expected).
type Case<'a> = (&'a str, &'a str, Vec<&'a str>, Option<Value>, u16, u64);

/// Routes with ids that are not a guild's: users and applications are
/// global (and applications are checked against their owner), invite codes
/// are meant to be used from outside the guild.
const NOT_GUILD_SCOPED: [&str; 4] = [
    "/users/{id}",
    "/applications/{id}",
    "/applications/{id}/bot/reset",
    "/invites/{code}",
];

/// Posts `content` to `channel`; the message's id.
async fn post(node: &TestNode, token: &str, channel: &str, content: &str) -> String {
    let path = format!("/channels/{channel}/messages");
    let (status, message) = node
        .call(
            "POST",
            &path,
            Some(token),
            Some(json!({ "content": content })),
        )
        .await;
    assert_eq!(status, 200, "{message}");
    id(&message)
}

/// A new role of `guild`; its id.
async fn new_role(node: &TestNode, token: &str, guild: &str) -> String {
    let path = format!("/guilds/{guild}/roles");
    let (status, role) = node
        .call("POST", &path, Some(token), Some(json!({"name": "mods"})))
        .await;
    assert_eq!(status, 200, "{role}");
    id(&role)
}

/// The unauthenticated preview of invite `code`.
async fn preview(node: &TestNode, code: &str, query: &str) -> Value {
    let (status, body) = node
        .call("GET", &format!("/invites/{code}{query}"), None, None)
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

/// What the victim guild looks like through its owner's eyes.
async fn state_of(node: &TestNode, token: &str, guild: &str, channel: &str) -> Value {
    let mut state = json!({});
    for (key, path) in [
        ("guild", format!("/guilds/{guild}")),
        ("roles", format!("/guilds/{guild}/roles")),
        ("channels", format!("/guilds/{guild}/channels")),
        ("members", format!("/guilds/{guild}/members?limit=1000")),
        (
            "messages",
            format!("/channels/{channel}/messages?limit=100"),
        ),
    ] {
        let (status, body) = node.call("GET", &path, Some(token), None).await;
        assert_eq!(status, 200, "{path}: {body}");
        state[key] = body;
    }
    state
}

/// Every route that takes a guild, channel, message, role or member id,
/// called by the owner of guild A with ids of guild B: each is refused
/// with Discord's answer, and B's messages, reactions, roles, channels and
/// members are as they were (and B's sessions heard nothing).
#[tokio::test]
async fn ids_of_another_guild_are_refused_on_every_route() {
    let node = node().await;
    let (alice, alice_id) = node.register("alice").await;
    let (bob, _) = node.register("bob").await;
    let (carol, carol_id) = node.register("carol").await;
    let (a_guild, a_channel) = node.guild(&alice, "Attacker").await;
    let (b_guild, b_channel) = node.guild(&bob, "Victim").await;
    let code = node.invite(&bob, &b_channel).await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200);
    let b_message = post(&node, &bob, &b_channel, "victim one").await;
    let b_message_2 = post(&node, &bob, &b_channel, "victim two").await;
    let a_message = post(&node, &alice, &a_channel, "attacker").await;
    let thumbs = "%F0%9F%91%8D";
    let (status, _) = node
        .call(
            "PUT",
            &format!("/channels/{b_channel}/messages/{b_message}/reactions/{thumbs}/@me"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let b_role = new_role(&node, &bob, &b_guild).await;
    let a_role = new_role(&node, &alice, &a_guild).await;

    let all = intents::GUILDS
        | intents::GUILD_MEMBERS
        | intents::GUILD_MESSAGES
        | intents::GUILD_MESSAGE_REACTIONS
        | intents::MESSAGE_CONTENT;
    let mut watcher = Client::connect(&node.ws).await;
    watcher.identify(&bob, all).await;
    watcher.dispatch("GUILD_CREATE").await;
    let before = state_of(&node, &bob, &b_guild, &b_channel).await;

    // (method, route, its ids, body, expected status, expected code).
    let e = thumbs;
    let (ag, ac, am, ar) = (&a_guild, &a_channel, &a_message, &a_role);
    let (bg, bc, bm, br, bu) = (&b_guild, &b_channel, &b_message, &b_role, &carol_id);
    let me = &alice_id;
    let bulk = json!({"messages": [b_message, b_message_2]});
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // A's container, B's object.
        ("GET", "/channels/{id}/messages/{message}", vec![ac, bm], None, 404, 10008),
        ("PATCH", "/channels/{id}/messages/{message}", vec![ac, bm], Some(json!({"content": "x"})), 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}", vec![ac, bm], None, 404, 10008),
        ("PUT", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![ac, bm, e], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![ac, bm, e], None, 404, 10008),
        // Discord: ids that are not the channel's count toward 2-100 and
        // are left alone; the answer is 204 and nothing of B changes.
        ("POST", "/channels/{id}/messages/bulk-delete", vec![ac], Some(json!({"messages": [bm, am]})), 204, 0),
        ("GET", "/guilds/{id}/members/{user}", vec![ag, bu], None, 404, 10007),
        ("PATCH", "/guilds/{id}/members/{user}", vec![ag, bu], Some(json!({"nick": "x"})), 404, 10007),
        ("PATCH", "/guilds/{id}/members/{user}", vec![ag, me], Some(json!({"roles": [b_role]})), 404, 10011),
        ("DELETE", "/guilds/{id}/members/{user}", vec![ag, bu], None, 404, 10007),
        ("PUT", "/guilds/{id}/members/{user}/roles/{role}", vec![ag, bu, ar], None, 404, 10007),
        ("PUT", "/guilds/{id}/members/{user}/roles/{role}", vec![ag, me, br], None, 404, 10011),
        ("DELETE", "/guilds/{id}/members/{user}/roles/{role}", vec![ag, me, br], None, 404, 10011),
        ("PATCH", "/guilds/{id}/roles/{role}", vec![ag, br], Some(json!({"name": "x"})), 404, 10011),
        ("DELETE", "/guilds/{id}/roles/{role}", vec![ag, br], None, 404, 10011),
        // B's container itself: A's owner is not a member of B.
        ("GET", "/guilds/{id}", vec![bg], None, 403, 50001),
        ("PATCH", "/guilds/{id}", vec![bg], Some(json!({"name": "pwned"})), 403, 50001),
        ("DELETE", "/guilds/{id}", vec![bg], None, 403, 50013),
        ("GET", "/guilds/{id}/channels", vec![bg], None, 403, 50001),
        ("POST", "/guilds/{id}/channels", vec![bg], Some(json!({"name": "x"})), 403, 50001),
        ("GET", "/guilds/{id}/members", vec![bg], None, 403, 50001),
        ("GET", "/guilds/{id}/members/{user}", vec![bg, bu], None, 403, 50001),
        ("PATCH", "/guilds/{id}/members/{user}", vec![bg, bu], Some(json!({"nick": "x"})), 403, 50001),
        ("DELETE", "/guilds/{id}/members/{user}", vec![bg, bu], None, 403, 50001),
        ("PUT", "/guilds/{id}/members/{user}/roles/{role}", vec![bg, bu, br], None, 403, 50001),
        ("DELETE", "/guilds/{id}/members/{user}/roles/{role}", vec![bg, bu, br], None, 403, 50001),
        ("GET", "/guilds/{id}/roles", vec![bg], None, 403, 50001),
        ("POST", "/guilds/{id}/roles", vec![bg], Some(json!({"name": "x"})), 403, 50001),
        ("PATCH", "/guilds/{id}/roles/{role}", vec![bg, br], Some(json!({"name": "x"})), 403, 50001),
        ("DELETE", "/guilds/{id}/roles/{role}", vec![bg, br], None, 403, 50001),
        ("DELETE", "/users/@me/guilds/{id}", vec![bg], None, 404, 10007),
        ("GET", "/channels/{id}", vec![bc], None, 403, 50001),
        ("PATCH", "/channels/{id}", vec![bc], Some(json!({"name": "x"})), 403, 50001),
        ("DELETE", "/channels/{id}", vec![bc], None, 403, 50001),
        ("GET", "/channels/{id}/messages", vec![bc], None, 403, 50001),
        ("POST", "/channels/{id}/messages", vec![bc], Some(json!({"content": "x"})), 403, 50001),
        ("GET", "/channels/{id}/messages/{message}", vec![bc, bm], None, 403, 50001),
        ("PATCH", "/channels/{id}/messages/{message}", vec![bc, bm], Some(json!({"content": "x"})), 403, 50001),
        ("DELETE", "/channels/{id}/messages/{message}", vec![bc, bm], None, 403, 50001),
        ("POST", "/channels/{id}/messages/bulk-delete", vec![bc], Some(bulk.clone()), 403, 50001),
        ("PUT", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![bc, bm, e], None, 403, 50001),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![bc, bm, e], None, 403, 50001),
        ("POST", "/channels/{id}/typing", vec![bc], None, 403, 50001),
        ("POST", "/channels/{id}/invites", vec![bc], Some(json!({})), 403, 50001),
    ];

    // Every route of api::routes() with an id of a guild's is in the table.
    let declared = declared_routes();
    assert!(
        declared.contains(&("POST".into(), "/channels/{id}/messages/bulk-delete".into()))
            && declared.contains(&("DELETE".into(), "/guilds/{id}/roles/{role}".into())),
        "routes() not read: {declared:?}"
    );
    let covered: BTreeSet<(String, String)> = cases
        .iter()
        .map(|(method, route, ..)| ((*method).to_owned(), (*route).to_owned()))
        .collect();
    for (method, route) in declared {
        if route.contains('{') && !NOT_GUILD_SCOPED.contains(&route.as_str()) {
            assert!(
                covered.contains(&(method.clone(), route.clone())),
                "{method} {route} takes an id but has no row in the table"
            );
        }
    }

    for (method, route, ids, body, status, code) in &cases {
        let mut path = (*route).to_owned();
        for value in ids {
            let start = path.find('{').unwrap();
            let end = start + path[start..].find('}').unwrap();
            path.replace_range(start..=end, value);
        }
        let (got, answer) = node.call(method, &path, Some(&alice), body.clone()).await;
        assert_eq!(got, *status, "{method} {path}: {answer}");
        if *code != 0 {
            assert_eq!(answer["code"], *code, "{method} {path}: {answer}");
        }
    }

    assert_eq!(
        state_of(&node, &bob, &b_guild, &b_channel).await,
        before,
        "guild B changed"
    );
    // B's reaction is still there: removing it is news to B's sessions
    // (were it gone, the removal would change nothing and announce
    // nothing). The sentinel after it bounds the wait, and every dispatch
    // B's session saw during the probes is checked on the way.
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{b_channel}/messages/{b_message}/reactions/{thumbs}/@me"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 204);
    post(&node, &bob, &b_channel, "sentinel").await;
    let mut removed = false;
    loop {
        let frame = watcher.next().await.unwrap();
        match frame["t"].as_str() {
            Some("MESSAGE_REACTION_REMOVE") => {
                assert_eq!(frame["d"]["message_id"], b_message.as_str());
                removed = true;
            }
            Some("MESSAGE_CREATE") if frame["d"]["content"] == "sentinel" => break,
            Some(other) if other != "PRESENCE_UPDATE" => {
                panic!("guild B heard {other} from another guild's calls: {frame}")
            }
            _ => {}
        }
    }
    assert!(removed, "guild B's reaction was deleted from outside");
}

/// `GET /invites/{code}?with_counts=true` counts members right after joins
/// and leaves, and never loads the guild (its members) to do it.
#[tokio::test]
async fn invite_previews_count_members_without_loading_them() {
    let node = node().await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "Counted").await;
    let code = node.invite(&owner, &channel).await;
    node.join_all(&code, &["m1", "m2", "m3"]).await;
    assert_eq!(
        preview(&node, &code, "?with_counts=true").await["approximate_member_count"],
        4
    );
    assert!(
        preview(&node, &code, "")
            .await
            .get("approximate_member_count")
            .is_none(),
        "counts only with with_counts, as Discord"
    );

    // One leaves, one is kicked.
    let (m4, m4_id) = node.register("m4").await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&m4), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        preview(&node, &code, "?with_counts=true").await["approximate_member_count"],
        5
    );
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/users/@me/guilds/{guild}"),
            Some(&m4),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, members) = node
        .call(
            "GET",
            &format!("/guilds/{guild}/members?limit=10"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    // Members come by user id: the owner first, then m1.
    let kicked = members[1]["user"]["id"].as_str().unwrap().to_owned();
    assert_ne!(kicked, m4_id);
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/guilds/{guild}/members/{kicked}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);

    let loads = node.metric("guildhall_store_guild_loads_total").await;
    let rows = node
        .metric("guildhall_store_member_rows_loaded_total")
        .await;
    for _ in 0..20 {
        assert_eq!(
            preview(&node, &code, "?with_counts=true").await["approximate_member_count"],
            3
        );
    }
    assert_eq!(
        node.metric("guildhall_store_guild_loads_total").await,
        loads
    );
    assert_eq!(
        node.metric("guildhall_store_member_rows_loaded_total")
            .await,
        rows,
        "a preview loaded members"
    );
}
