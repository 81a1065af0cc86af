//! REST hardening over real sockets: ids of another guild refused on every
//! route that takes one (and nothing of that guild touched), invite
//! previews that do not load the guild, and Discord's bounds on every
//! string, array and count the REST API accepts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
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
    let source = include_str!("../../../guildhall-api/src/lib.rs");
    let body = source
        .split("pub fn routes()")
        .nth(1)
        .and_then(|rest| rest.split(".fallback(").next())
        .expect("routes() in guildhall-api");
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
        ("pins", format!("/channels/{channel}/messages/pins")),
    ] {
        let (status, body) = node.call("GET", &path, Some(token), None).await;
        assert_eq!(status, 200, "{path}: {body}");
        state[key] = body;
    }
    // Presence moves on its own (a session's READY reaches the presence
    // role and its owner whenever it does): not what this state is about.
    if let Some(guild) = state["guild"].as_object_mut() {
        guild.remove("approximate_presence_count");
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
    let (bob, bob_id) = node.register("bob").await;
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
    // B's first message pinned (before B's session connects, so it hears
    // nothing of it): an unpin from outside would show in B's pins.
    let (status, _) = node
        .call(
            "PUT",
            &format!("/channels/{b_channel}/messages/pins/{b_message}"),
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
    assert_eq!(
        before["pins"]["items"][0]["message"]["id"],
        b_message.as_str(),
        "B's pin is in the state compared"
    );

    // (method, route, its ids, body, expected status, expected code).
    let e = thumbs;
    let (ag, ac, am, ar) = (&a_guild, &a_channel, &a_message, &a_role);
    let (bg, bc, bm, br, bu) = (&b_guild, &b_channel, &b_message, &b_role, &carol_id);
    let me = &alice_id;
    // Bob's own reaction: the one a moderator's removal would take.
    let bo = &bob_id;
    let bulk = json!({"messages": [b_message, b_message_2]});
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // A's container, B's object.
        ("GET", "/channels/{id}/messages/{message}", vec![ac, bm], None, 404, 10008),
        ("PATCH", "/channels/{id}/messages/{message}", vec![ac, bm], Some(json!({"content": "x"})), 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}", vec![ac, bm], None, 404, 10008),
        ("PUT", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![ac, bm, e], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}/@me", vec![ac, bm, e], None, 404, 10008),
        ("GET", "/channels/{id}/messages/{message}/reactions/{emoji}", vec![ac, bm, e], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}", vec![ac, bm, e], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}/{user}", vec![ac, bm, e, bo], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/{message}/reactions", vec![ac, bm], None, 404, 10008),
        // B's pinned message through A's channel: not A's message.
        ("PUT", "/channels/{id}/messages/pins/{message}", vec![ac, bm], None, 404, 10008),
        ("DELETE", "/channels/{id}/messages/pins/{message}", vec![ac, bm], None, 404, 10008),
        ("PUT", "/channels/{id}/pins/{message}", vec![ac, bm], None, 404, 10008),
        ("DELETE", "/channels/{id}/pins/{message}", vec![ac, bm], None, 404, 10008),
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
        // An overwrite in A's channel for B's role or member names nobody of A.
        ("PUT", "/channels/{id}/permissions/{overwrite}", vec![ac, br], Some(json!({"type": 0, "deny": "1024"})), 404, 10011),
        ("PUT", "/channels/{id}/permissions/{overwrite}", vec![ac, bu], Some(json!({"type": 1, "deny": "1024"})), 404, 10007),
        // Nothing to remove: 204, and nothing of B changes.
        ("DELETE", "/channels/{id}/permissions/{overwrite}", vec![ac, br], None, 204, 0),
        // A ban in A's guild names any user; B's guild is untouched.
        ("GET", "/guilds/{id}/bans/{user}", vec![ag, bu], None, 404, 10026),
        ("DELETE", "/guilds/{id}/bans/{user}", vec![ag, bu], None, 404, 10026),
        ("PUT", "/guilds/{id}/bans/{user}", vec![ag, bu], Some(json!({})), 204, 0),
        // B's container itself: A's owner is not a member of B.
        ("GET", "/guilds/{id}", vec![bg], None, 403, 50001),
        ("PATCH", "/guilds/{id}", vec![bg], Some(json!({"name": "pwned"})), 403, 50001),
        ("DELETE", "/guilds/{id}", vec![bg], None, 403, 50013),
        ("GET", "/guilds/{id}/channels", vec![bg], None, 403, 50001),
        ("POST", "/guilds/{id}/channels", vec![bg], Some(json!({"name": "x"})), 403, 50001),
        ("GET", "/guilds/{id}/members", vec![bg], None, 403, 50001),
        ("GET", "/guilds/{id}/members/{user}", vec![bg, bu], None, 403, 50001),
        // Without `query` the search is refused before any guild is asked.
        ("GET", "/guilds/{id}/members/search", vec![bg], None, 400, 50035),
        ("PATCH", "/guilds/{id}/members/{user}", vec![bg, bu], Some(json!({"nick": "x"})), 403, 50001),
        ("DELETE", "/guilds/{id}/members/{user}", vec![bg, bu], None, 403, 50001),
        ("PUT", "/guilds/{id}/members/{user}/roles/{role}", vec![bg, bu, br], None, 403, 50001),
        ("DELETE", "/guilds/{id}/members/{user}/roles/{role}", vec![bg, bu, br], None, 403, 50001),
        ("GET", "/guilds/{id}/roles", vec![bg], None, 403, 50001),
        ("POST", "/guilds/{id}/roles", vec![bg], Some(json!({"name": "x"})), 403, 50001),
        ("PATCH", "/guilds/{id}/roles/{role}", vec![bg, br], Some(json!({"name": "x"})), 403, 50001),
        ("DELETE", "/guilds/{id}/roles/{role}", vec![bg, br], None, 403, 50001),
        ("GET", "/guilds/{id}/bans", vec![bg], None, 403, 50001),
        ("GET", "/guilds/{id}/audit-logs", vec![bg], None, 403, 50001),
        ("GET", "/guilds/{id}/bans/{user}", vec![bg, bu], None, 403, 50001),
        ("PUT", "/guilds/{id}/bans/{user}", vec![bg, bu], Some(json!({})), 403, 50001),
        ("DELETE", "/guilds/{id}/bans/{user}", vec![bg, bu], None, 403, 50001),
        ("POST", "/guilds/{id}/bulk-ban", vec![bg], Some(json!({"user_ids": [bu]})), 403, 50001),
        ("PUT", "/channels/{id}/permissions/{overwrite}", vec![bc, br], Some(json!({"type": 0, "deny": "1024"})), 403, 50001),
        ("DELETE", "/channels/{id}/permissions/{overwrite}", vec![bc, br], None, 403, 50001),
        ("DELETE", "/users/@me/guilds/{id}", vec![bg], None, 404, 10007),
        ("GET", "/users/@me/guilds/{id}/member", vec![bg], None, 404, 10004),
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
        ("GET", "/channels/{id}/messages/{message}/reactions/{emoji}", vec![bc, bm, e], None, 403, 50001),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}", vec![bc, bm, e], None, 403, 50001),
        ("DELETE", "/channels/{id}/messages/{message}/reactions/{emoji}/{user}", vec![bc, bm, e, bo], None, 403, 50001),
        ("DELETE", "/channels/{id}/messages/{message}/reactions", vec![bc, bm], None, 403, 50001),
        ("GET", "/channels/{id}/messages/pins", vec![bc], None, 403, 50001),
        ("PUT", "/channels/{id}/messages/pins/{message}", vec![bc, bm], None, 403, 50001),
        ("DELETE", "/channels/{id}/messages/pins/{message}", vec![bc, bm], None, 403, 50001),
        ("GET", "/channels/{id}/pins", vec![bc], None, 403, 50001),
        ("PUT", "/channels/{id}/pins/{message}", vec![bc, bm], None, 403, 50001),
        ("DELETE", "/channels/{id}/pins/{message}", vec![bc, bm], None, 403, 50001),
        ("POST", "/channels/{id}/typing", vec![bc], None, 403, 50001),
        ("POST", "/channels/{id}/invites", vec![bc], Some(json!({})), 403, 50001),
        ("GET", "/channels/{id}/invites", vec![bc], None, 403, 50001),
        ("GET", "/guilds/{id}/invites", vec![bg], None, 403, 50001),
        ("PATCH", "/guilds/{id}/channels", vec![bg], Some(json!([])), 403, 50001),
        ("PATCH", "/guilds/{id}/roles", vec![bg], Some(json!([])), 403, 50001),
        // A thread from B's message through A's channel: not A's message.
        ("POST", "/channels/{id}/messages/{message}/threads", vec![ac, bm], Some(json!({"name": "x"})), 404, 10008),
        ("POST", "/channels/{id}/messages/{message}/threads", vec![bc, bm], Some(json!({"name": "x"})), 403, 50001),
        ("POST", "/channels/{id}/threads", vec![bc], Some(json!({"name": "x", "type": 11})), 403, 50001),
        ("GET", "/guilds/{id}/threads/active", vec![bg], None, 403, 50001),
        ("GET", "/channels/{id}/thread-members", vec![bc], None, 403, 50001),
        ("PUT", "/channels/{id}/thread-members/@me", vec![bc], None, 403, 50001),
        ("DELETE", "/channels/{id}/thread-members/@me", vec![bc], None, 403, 50001),
        ("GET", "/channels/{id}/thread-members/{user}", vec![bc, bu], None, 403, 50001),
        ("PUT", "/channels/{id}/thread-members/{user}", vec![bc, bu], None, 403, 50001),
        ("DELETE", "/channels/{id}/thread-members/{user}", vec![bc, bu], None, 403, 50001),
        ("GET", "/channels/{id}/threads/archived/public", vec![bc], None, 403, 50001),
        ("GET", "/channels/{id}/threads/archived/private", vec![bc], None, 403, 50001),
        ("GET", "/channels/{id}/users/@me/threads/archived/private", vec![bc], None, 403, 50001),
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

/// Every string and array bound of the REST bodies is refused with 400,
/// 50035 and the field's key in `errors`, and nothing is stored.
#[tokio::test]
async fn every_field_bound_is_refused_and_nothing_is_stored() {
    let node = node().await;
    let (owner, owner_id) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "Bounded").await;
    let role = new_role(&node, &owner, &guild).await;
    let long = |n: usize| "x".repeat(n);
    let many_roles: Vec<String> = (0..251).map(|_| role.clone()).collect();
    let embeds: Vec<Value> = (0..11).map(|_| json!({"title": "t"})).collect();
    let guild_path = format!("/guilds/{guild}");
    let channels_path = format!("/guilds/{guild}/channels");
    let channel_path = format!("/channels/{channel}");
    let roles_path = format!("/guilds/{guild}/roles");
    let role_path = format!("/guilds/{guild}/roles/{role}");
    let me_path = format!("/guilds/{guild}/members/@me");
    let owner_path = format!("/guilds/{guild}/members/{owner_id}");
    let messages_path = format!("/channels/{channel}/messages");
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        ("POST", "/guilds", json!({"name": "x"}), "name"),
        ("POST", "/guilds", json!({"name": long(101)}), "name"),
        ("PATCH", &guild_path, json!({"name": long(101)}), "name"),
        ("POST", &channels_path, json!({"name": ""}), "name"),
        ("POST", &channels_path, json!({"name": long(101)}), "name"),
        ("POST", &channels_path, json!({"name": "ok", "topic": long(1025)}), "topic"),
        ("POST", &channels_path, json!({"name": "ok", "type": 13}), "type"),
        ("POST", &channels_path, json!({"name": "ok", "type": 15, "available_tags": [{"name": long(21)}]}), "available_tags"),
        ("PATCH", &channel_path, json!({"name": long(101)}), "name"),
        ("PATCH", &channel_path, json!({"topic": long(1025)}), "topic"),
        ("POST", &roles_path, json!({"name": long(101)}), "name"),
        ("POST", &roles_path, json!({"name": ""}), "name"),
        ("PATCH", &role_path, json!({"name": long(101)}), "name"),
        ("PATCH", &me_path, json!({"nick": long(33)}), "nick"),
        ("PATCH", &owner_path, json!({"roles": many_roles}), "roles"),
        ("POST", &messages_path, json!({"content": long(2001)}), "content"),
        ("POST", &messages_path, json!({"content": "x", "nonce": long(26)}), "nonce"),
        ("POST", &messages_path, json!({"content": "x", "embeds": embeds}), "embeds"),
        ("POST", "/applications", json!({"name": long(33)}), "name"),
    ];
    let before = state_of(&node, &owner, &guild, &channel).await;
    let refused = node.metric("guildhall_rest_bad_requests_total").await;
    for (method, path, body, key) in &cases {
        let (status, answer) = node
            .call(method, path, Some(&owner), Some(body.clone()))
            .await;
        assert_eq!(
            (status, &answer["code"], &answer["message"]),
            (400, &json!(50035), &json!("Invalid Form Body")),
            "{method} {path}: {answer}"
        );
        let errors = answer["errors"][key]["_errors"].as_array();
        assert!(
            errors.is_some_and(|e| e[0]["code"]
                .as_str()
                .is_some_and(|c| c.starts_with("BASE_TYPE_"))),
            "{method} {path}: {answer}"
        );
    }
    assert_eq!(state_of(&node, &owner, &guild, &channel).await, before);
    assert!(
        node.metric("guildhall_rest_bad_requests_total").await >= refused + cases.len() as u64,
        "every refusal is counted"
    );
    // At the bounds themselves, accepted.
    for (method, path, body) in [
        (
            "PATCH",
            &channel_path,
            json!({"name": long(100), "topic": long(1024)}),
        ),
        ("PATCH", &role_path, json!({"name": long(100)})),
        ("PATCH", &me_path, json!({"nick": long(32)})),
        ("PATCH", &guild_path, json!({"name": long(100)})),
    ] {
        let (status, answer) = node.call(method, path, Some(&owner), Some(body)).await;
        assert_eq!(status, 200, "{method} {path}: {answer}");
    }
}

/// Posts `body` to `/guilds/{guild}/{path}` until the guild refuses one
/// (at most `at_most` times): how many were created, and the refusal.
async fn fill(
    node: &TestNode,
    token: &str,
    guild: &str,
    path: &str,
    body: &Value,
    at_most: usize,
) -> (usize, Value) {
    for created in 0..at_most {
        let (status, answer) = node
            .call(
                "POST",
                &format!("/guilds/{guild}/{path}"),
                Some(token),
                Some(body.clone()),
            )
            .await;
        if status != 200 {
            assert_eq!(status, 400, "{answer}");
            return (created, answer);
        }
    }
    panic!("{at_most} {path} created and none refused");
}

/// A guild filled to every count bound, with the longest names and topics,
/// still delivers its GUILD_CREATE and answers GET /guilds/{id}; the 251st
/// role is 30005 and the 501st channel 30013.
#[tokio::test]
async fn a_guild_filled_to_its_bounds_still_delivers_guild_create() {
    let node = node().await;
    let (owner, _) = node.register("owner").await;
    let (guild, _) = node.guild(&owner, "Full").await;
    let name = "n".repeat(100);
    let (created, refusal) =
        fill(&node, &owner, &guild, "roles", &json!({"name": name}), 300).await;
    assert_eq!(created, 249, "@everyone and 249 more");
    assert_eq!(refusal["code"], 30005, "{refusal}");
    let body = json!({"name": name, "topic": "t".repeat(1024)});
    let (created, refusal) = fill(&node, &owner, &guild, "channels", &body, 600).await;
    assert_eq!(created, 499, "#general and 499 more");
    assert_eq!(refusal["code"], 30013, "{refusal}");

    let mut client = Client::connect(&node.ws).await;
    client.identify(&owner, intents::GUILDS).await;
    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(guild_create["d"]["roles"].as_array().unwrap().len(), 250);
    assert_eq!(guild_create["d"]["channels"].as_array().unwrap().len(), 500);
    assert_eq!(guild_create["d"]["members"].as_array().unwrap().len(), 1);
    let (status, rest) = node
        .call("GET", &format!("/guilds/{guild}"), Some(&owner), None)
        .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["roles"].as_array().unwrap().len(), 250);
    assert!(
        rest.get("channels").is_none(),
        "Discord's REST guild has no channels"
    );
    let (status, channels) = node
        .call(
            "GET",
            &format!("/guilds/{guild}/channels"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(
        (status, channels.as_array().map(Vec::len)),
        (200, Some(500))
    );
    assert_eq!(
        node.metric("guildhall_guild_create_too_large_total").await,
        0
    );
}

/// Names and topics of the most bytes per character (control characters
/// take six as JSON escapes) cannot grow a guild past what its GUILD_CREATE
/// can carry: creations are refused first (30013, 30005), then edits that
/// would grow it (50035 on the grown field), and the guild keeps serving.
#[tokio::test]
async fn a_guild_cannot_outgrow_its_guild_create() {
    let node = node().await;
    let (owner, _) = node.register("owner").await;
    let (guild, general) = node.guild(&owner, "Heavy").await;
    let heavy = |n: usize| "\u{1}".repeat(n);
    let body = json!({"name": heavy(100), "topic": heavy(1024)});
    let (created, refusal) = fill(&node, &owner, &guild, "channels", &body, 500).await;
    assert_eq!(refusal["code"], 30013, "{refusal}");
    assert!(
        created < 499,
        "the bytes ran out before the count: {created}"
    );
    // Small roles until even one of those does not fit: less room is left
    // than any role takes.
    let (_, refusal) = fill(&node, &owner, &guild, "roles", &json!({"name": "r"}), 250).await;
    assert_eq!(refusal["code"], 30005, "{refusal}");
    for (path, body, key) in [
        (
            format!("/channels/{general}"),
            json!({"topic": heavy(1024)}),
            "topic",
        ),
        (
            format!("/guilds/{guild}"),
            json!({"name": heavy(100)}),
            "name",
        ),
    ] {
        let (status, answer) = node.call("PATCH", &path, Some(&owner), Some(body)).await;
        assert_eq!(
            (status, &answer["code"]),
            (400, &json!(50035)),
            "{path}: {answer}"
        );
        assert!(answer["errors"][key]["_errors"].is_array(), "{answer}");
    }

    let mut client = Client::connect(&node.ws).await;
    client.identify(&owner, intents::GUILDS).await;
    let guild_create = client.dispatch("GUILD_CREATE").await;
    assert_eq!(
        guild_create["d"]["channels"].as_array().unwrap().len(),
        created + 1
    );
    let (status, rest) = node
        .call("GET", &format!("/guilds/{guild}"), Some(&owner), None)
        .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(
        node.metric("guildhall_guild_create_too_large_total").await,
        0
    );
}

/// GUILD_CREATE carries at most `guild_create_members_max` members, the
/// session's own first, and says `large` when the guild has more (clients
/// then ask with op 8, as for Discord's large guilds), whose members it
/// carries only when online; without GUILD_PRESENCES only the session's
/// own member, as Discord documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_create_carries_the_sessions_member_first_and_what_fits() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        guild_create_members_max: 3,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "Crowded").await;
    let code = node.invite(&owner, &channel).await;
    let mut online = vec![];
    for name in ["m1", "m2", "m3"] {
        let (token, id) = node.register(name).await;
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(&token), None)
            .await;
        assert_eq!(status, 200);
        online.push((token, id));
    }
    let (last, last_id) = node.register("last").await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&last), None)
        .await;
    assert_eq!(status, 200);
    // The owner stays offline; m1..m3 come online, which a watcher hears.
    let mut watcher = Client::connect(&node.ws).await;
    watcher
        .identify(&last, intents::GUILDS | intents::GUILD_PRESENCES)
        .await;
    watcher.dispatch("GUILD_CREATE").await;
    let mut sessions = vec![];
    for (token, id) in &online {
        let mut session = Client::connect(&node.ws).await;
        session.identify(token, intents::GUILDS).await;
        sessions.push(session);
        loop {
            let update = watcher.dispatch("PRESENCE_UPDATE").await;
            if update["d"]["user"]["id"] == id.as_str() {
                break;
            }
        }
    }
    let mut client = Client::connect(&node.ws).await;
    client
        .identify(&last, intents::GUILDS | intents::GUILD_PRESENCES)
        .await;
    let guild_create = client.dispatch("GUILD_CREATE").await;
    let members = guild_create["d"]["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    assert_eq!(members[0]["user"]["id"], last_id.as_str());
    // Online members only: never the offline owner.
    let ids: Vec<&Value> = members.iter().map(|m| &m["user"]["id"]).collect();
    assert!(
        ids[1..]
            .iter()
            .all(|id| online.iter().any(|(_, o)| *id == o.as_str())),
        "{ids:?}"
    );
    assert_eq!(guild_create["d"]["member_count"], 5);
    assert_eq!(guild_create["d"]["large"], true);

    let mut client = Client::connect(&node.ws).await;
    client.identify(&last, intents::GUILDS).await;
    let guild_create = client.dispatch("GUILD_CREATE").await;
    let members = guild_create["d"]["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "own member only");
    assert_eq!(members[0]["user"]["id"], last_id.as_str());
}

/// IDENTIFY's `large_threshold` is the session's own (Discord's 50 to
/// 250, default 50; out of range taken at the nearer end): a guild with
/// more members is `large` for that session and its GUILD_CREATE (with
/// GUILD_PRESENCES) stops carrying offline members, the session's own
/// first; a session with a threshold at or above the count gets them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_create_follows_each_sessions_large_threshold() {
    const MEMBERS: usize = 60;
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        rest_auth_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "Sixty").await;
    let code = node.invite(&owner, &channel).await;
    let names: Vec<String> = (1..MEMBERS - 1).map(|i| format!("member{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    node.join_all(&code, &names).await;
    let (last, last_id) = node.register("last").await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&last), None)
        .await;
    assert_eq!(status, 200);

    // (members carried, large) of `threshold`'s GUILD_CREATE, with
    // GUILD_PRESENCES (without it Discord sends only the session's member).
    let guild_create = |threshold: Option<i64>| {
        let (node, last, last_id) = (&node, last.clone(), last_id.clone());
        async move {
            let mut client = Client::connect(&node.ws).await;
            assert_eq!(client.next().await.unwrap()["op"], 10);
            let mut identify = json!({"token": format!("Bot {last}"),
                "intents": intents::GUILDS | intents::GUILD_PRESENCES,
                "properties": {"os": "linux", "browser": "test", "device": "test"}});
            if let Some(threshold) = threshold {
                identify["large_threshold"] = json!(threshold);
            }
            client.send(json!({"op": 2, "d": identify})).await;
            client.dispatch("READY").await;
            let guild = client.dispatch("GUILD_CREATE").await["d"].clone();
            let members = guild["members"].as_array().unwrap();
            assert_eq!(
                members[0]["user"]["id"],
                last_id.as_str(),
                "own member first"
            );
            assert_eq!(guild["member_count"], MEMBERS, "{}", guild["member_count"]);
            (members.len(), guild["large"].as_bool().unwrap())
        }
    };
    // Everyone but the session's user is offline: a guild `large` for the
    // session carries its own member only, one within its threshold all.
    assert_eq!(guild_create(None).await, (1, true), "Discord's default");
    assert_eq!(guild_create(Some(59)).await, (1, true));
    assert_eq!(guild_create(Some(60)).await, (MEMBERS, false), "not above");
    assert_eq!(guild_create(Some(250)).await, (MEMBERS, false));
    assert_eq!(guild_create(Some(10)).await, (1, true), "below 50");
    assert_eq!(
        guild_create(Some(100_000)).await,
        (MEMBERS, false),
        "above 250"
    );
    assert_eq!(guild_create(Some(-1)).await, (1, true), "negative");
    // Without GUILD_PRESENCES: the own member, and `large` as before.
    let mut client = Client::connect(&node.ws).await;
    client.identify(&last, intents::GUILDS).await;
    let guild = client.dispatch("GUILD_CREATE").await["d"].clone();
    assert_eq!(guild["members"].as_array().unwrap().len(), 1, "{guild}");
    assert_eq!(guild["large"], true);
}
