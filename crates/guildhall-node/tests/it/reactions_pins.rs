//! Reactions and pins over real sockets, as Discord REST v10 documents
//! them ("Get Reactions", "Delete User Reaction", "Delete All Reactions",
//! "Delete All Reactions for Emoji", "Get Channel Pins", "Pin Message",
//! "Unpin Message" and their deprecated `/pins` forms): the users who
//! reacted, by id ascending and paged with `after`/`limit`; a moderator's
//! removals, refused without MANAGE_MESSAGES and heard by the guild's
//! sessions; pins with PIN_MESSAGES, CHANNEL_PINS_UPDATE carrying the
//! newest pin's time (null when none is left), `pinned` on every read of a
//! message, pages newest pin first with `before`/`has_more`, the
//! per-channel cap (30003), and the same in a DM, whose members also
//! edit, delete and react there and moderate nothing (50003).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

const THUMBS: &str = "%F0%9F%91%8D";
const TADA: &str = "%F0%9F%8E%89";

async fn node_with(limits: Limits) -> TestNode {
    TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..limits
    })
    .await
}

fn id_of(value: &Value) -> String {
    value["id"].as_str().unwrap().to_owned()
}

/// Registers `name` and joins them through invite `code`: (token, id).
async fn join(node: &TestNode, code: &str, name: &str) -> (String, String) {
    let (token, id) = node.register(name).await;
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&token), None)
        .await;
    assert_eq!(status, 200, "{body}");
    (token, id)
}

/// Gives `user` a new role of `guild` with `permissions`.
async fn grant(node: &TestNode, owner: &str, guild: &str, user: &str, permissions: u64) {
    let (status, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild}/roles"),
            Some(owner),
            Some(json!({"name": "mods", "permissions": permissions.to_string()})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    let role = id_of(&role);
    let (status, body) = node
        .call(
            "PUT",
            &format!("/guilds/{guild}/members/{user}/roles/{role}"),
            Some(owner),
            None,
        )
        .await;
    assert_eq!(status, 204, "{body}");
}

async fn post(node: &TestNode, token: &str, channel: &str, content: &str) -> String {
    let (status, message) = node
        .post_message(token, channel, json!({ "content": content }))
        .await;
    assert_eq!(status, 200, "{message}");
    id_of(&message)
}

/// A call that must answer 204 with no body.
async fn no_content(node: &TestNode, method: &str, path: &str, token: &str) {
    let (status, body) = node.call(method, path, Some(token), None).await;
    assert_eq!(status, 204, "{method} {path}: {body}");
    assert_eq!(body, Value::Null, "{method} {path}");
}

/// A call that must be refused with `status` and JSON `code`.
async fn refused(node: &TestNode, method: &str, path: &str, token: &str, status: u16, code: u64) {
    let (got, body) = node.call(method, path, Some(token), None).await;
    assert_eq!(got, status, "{method} {path}: {body}");
    assert_eq!(body["code"], code, "{method} {path}: {body}");
}

/// Posts a sentinel and reads `session` up to its MESSAGE_CREATE, failing
/// on any of `forbidden` on the way: what was done before the sentinel
/// announced none of them.
async fn heard_none_of(
    node: &TestNode,
    session: &mut Client,
    token: &str,
    channel: &str,
    forbidden: &[&str],
) {
    post(node, token, channel, "sentinel").await;
    loop {
        let frame = session.next().await.unwrap();
        let name = frame["t"].as_str().unwrap_or_default();
        assert!(!forbidden.contains(&name), "announced: {frame}");
        // A pin that changed nothing posts no "pinned a message" notice.
        assert!(
            !(name == "MESSAGE_CREATE" && frame["d"]["type"] == 6),
            "notice: {frame}"
        );
        if name == "MESSAGE_CREATE" && frame["d"]["content"] == "sentinel" {
            return;
        }
    }
}

/// The ids of a list of users.
fn user_ids(users: &Value) -> Vec<String> {
    users
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {users}"))
        .iter()
        .map(id_of)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reaction_users_are_listed_by_id_and_paged_with_after_and_limit() {
    let node = node_with(Limits::default()).await;
    let (owner, owner_id) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "reactions").await;
    let code = node.invite(&owner, &channel).await;
    let message = post(&node, &owner, &channel, "react to me").await;
    let reactions = format!("/channels/{channel}/messages/{message}/reactions");
    // Reacting in an order that is not the ids' own.
    let mut reactors = vec![];
    for name in ["r1", "r2", "r3", "r4"] {
        reactors.push(join(&node, &code, name).await);
    }
    reactors.push((owner.clone(), owner_id.clone()));
    for (token, _) in reactors.iter().rev() {
        no_content(&node, "PUT", &format!("{reactions}/{THUMBS}/@me"), token).await;
    }
    let mut expected: Vec<String> = reactors.iter().map(|(_, id)| id.clone()).collect();
    expected.sort_by_key(|id| id.parse::<u64>().unwrap());

    // Default limit (25) holds all five, by id ascending, as user objects.
    let (status, all) = node
        .call("GET", &format!("{reactions}/{THUMBS}"), Some(&owner), None)
        .await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(user_ids(&all), expected);
    let owner_entry = all
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["id"] == owner_id.as_str())
        .unwrap();
    assert_eq!(owner_entry["username"], "owner", "{owner_entry}");

    // Pages of two: after the last id of each page, until empty.
    let mut paged = vec![];
    let mut after = "0".to_owned();
    for _ in 0..4 {
        let (status, page) = node
            .call(
                "GET",
                &format!("{reactions}/{THUMBS}?limit=2&after={after}"),
                Some(&owner),
                None,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        let ids = user_ids(&page);
        assert!(ids.len() <= 2, "{page}");
        match ids.last() {
            Some(last) => after = last.clone(),
            None => break,
        }
        paged.extend(ids);
    }
    assert_eq!(paged, expected);
    let (_, tail) = node
        .call(
            "GET",
            &format!("{reactions}/{THUMBS}?after={}", expected[2]),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(user_ids(&tail), expected[3..]);
    // A limit above Discord's 100 is read as 100; below 1 as 1.
    let (_, one) = node
        .call(
            "GET",
            &format!("{reactions}/{THUMBS}?limit=0"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(user_ids(&one), expected[..1]);
    let (_, capped) = node
        .call(
            "GET",
            &format!("{reactions}/{THUMBS}?limit=1000"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(user_ids(&capped), expected);
    // Nobody super-reacts here; an emoji nobody used has no users.
    let (status, burst) = node
        .call(
            "GET",
            &format!("{reactions}/{THUMBS}?type=1"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, burst), (200, json!([])));
    let (status, none) = node
        .call("GET", &format!("{reactions}/{TADA}"), Some(&owner), None)
        .await;
    assert_eq!((status, none), (200, json!([])));

    // A custom emoji is name:id, listed the same way.
    no_content(&node, "PUT", &format!("{reactions}/blob:123/@me"), &owner).await;
    let (status, custom) = node
        .call("GET", &format!("{reactions}/blob:123"), Some(&owner), None)
        .await;
    assert_eq!(status, 200, "{custom}");
    assert_eq!(user_ids(&custom), [owner_id.as_str()]);
    // What cannot be an emoji is 10014, on every reactions route.
    for bad in ["blob:", ":123", "blob:notanid"] {
        refused(
            &node,
            "GET",
            &format!("{reactions}/{bad}"),
            &owner,
            400,
            10014,
        )
        .await;
        refused(
            &node,
            "PUT",
            &format!("{reactions}/{bad}/@me"),
            &owner,
            400,
            10014,
        )
        .await;
        refused(
            &node,
            "DELETE",
            &format!("{reactions}/{bad}"),
            &owner,
            400,
            10014,
        )
        .await;
        refused(
            &node,
            "DELETE",
            &format!("{reactions}/{bad}/{owner_id}"),
            &owner,
            400,
            10014,
        )
        .await;
    }
    // An unknown message is 10008.
    refused(
        &node,
        "GET",
        &format!("/channels/{channel}/messages/1234567/reactions/{THUMBS}"),
        &owner,
        404,
        10008,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moderators_remove_reactions_and_the_guild_hears_it() {
    let node = node_with(Limits::default()).await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "moderation").await;
    let code = node.invite(&owner, &channel).await;
    let (moderator, moderator_id) = join(&node, &code, "moderator").await;
    let (member, member_id) = join(&node, &code, "member").await;
    grant(&node, &owner, &guild, &moderator_id, 1 << 13).await;
    let message = post(&node, &owner, &channel, "react to me").await;
    let reactions = format!("/channels/{channel}/messages/{message}/reactions");
    let mut session = Client::connect(&node.ws).await;
    session
        .identify(
            &owner,
            intents::GUILDS
                | intents::GUILD_MESSAGES
                | intents::GUILD_MESSAGE_REACTIONS
                | intents::MESSAGE_CONTENT,
        )
        .await;
    session.dispatch("GUILD_CREATE").await;
    for token in [&member, &moderator] {
        no_content(&node, "PUT", &format!("{reactions}/{THUMBS}/@me"), token).await;
        no_content(&node, "PUT", &format!("{reactions}/{TADA}/@me"), token).await;
    }

    // Without MANAGE_MESSAGES: 50013 on each route, and nothing goes.
    for (method, path) in [
        ("DELETE", format!("{reactions}/{THUMBS}/{moderator_id}")),
        ("DELETE", format!("{reactions}/{THUMBS}")),
        ("DELETE", reactions.clone()),
    ] {
        refused(&node, method, &path, &member, 403, 50013).await;
    }
    let (_, thumbs) = node
        .call("GET", &format!("{reactions}/{THUMBS}"), Some(&owner), None)
        .await;
    assert_eq!(user_ids(&thumbs).len(), 2, "{thumbs}");

    // The moderator takes the member's 👍: 204, and MESSAGE_REACTION_REMOVE
    // names the member, not the moderator.
    no_content(
        &node,
        "DELETE",
        &format!("{reactions}/{THUMBS}/{member_id}"),
        &moderator,
    )
    .await;
    let removed = session.dispatch("MESSAGE_REACTION_REMOVE").await["d"].clone();
    assert_eq!(removed["user_id"], member_id.as_str(), "{removed}");
    assert_eq!(removed["message_id"], message.as_str());
    assert_eq!(removed["channel_id"], channel.as_str());
    assert_eq!(removed["guild_id"], guild.as_str());
    assert_eq!(removed["emoji"], json!({"id": null, "name": "👍"}));
    assert_eq!(removed["burst"], false);
    let (_, thumbs) = node
        .call("GET", &format!("{reactions}/{THUMBS}"), Some(&owner), None)
        .await;
    assert_eq!(user_ids(&thumbs), [moderator_id.as_str()]);
    // Again: it is gone already, 204 and nothing announced.
    no_content(
        &node,
        "DELETE",
        &format!("{reactions}/{THUMBS}/{member_id}"),
        &moderator,
    )
    .await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["MESSAGE_REACTION_REMOVE"],
    )
    .await;

    // Every 🎉 at once: MESSAGE_REACTION_REMOVE_EMOJI, and 👍 stays.
    no_content(&node, "DELETE", &format!("{reactions}/{TADA}"), &moderator).await;
    let emoji_gone = session.dispatch("MESSAGE_REACTION_REMOVE_EMOJI").await["d"].clone();
    assert_eq!(
        emoji_gone,
        json!({"channel_id": channel, "guild_id": guild, "message_id": message,
            "emoji": {"id": null, "name": "🎉"}})
    );
    let (_, tada) = node
        .call("GET", &format!("{reactions}/{TADA}"), Some(&owner), None)
        .await;
    assert_eq!(tada, json!([]));
    let (_, thumbs) = node
        .call("GET", &format!("{reactions}/{THUMBS}"), Some(&owner), None)
        .await;
    assert_eq!(user_ids(&thumbs), [moderator_id.as_str()], "👍 stays");
    // No 🎉 left: 204, nothing announced.
    no_content(&node, "DELETE", &format!("{reactions}/{TADA}"), &moderator).await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["MESSAGE_REACTION_REMOVE_EMOJI"],
    )
    .await;

    // Everything: MESSAGE_REACTION_REMOVE_ALL (the owner may, as every
    // owner may everything).
    no_content(&node, "PUT", &format!("{reactions}/{TADA}/@me"), &owner).await;
    no_content(&node, "DELETE", &reactions, &owner).await;
    let all_gone = session.dispatch("MESSAGE_REACTION_REMOVE_ALL").await["d"].clone();
    assert_eq!(
        all_gone,
        json!({"channel_id": channel, "message_id": message, "guild_id": guild})
    );
    for emoji in [THUMBS, TADA] {
        let (_, users) = node
            .call("GET", &format!("{reactions}/{emoji}"), Some(&owner), None)
            .await;
        assert_eq!(users, json!([]), "{emoji}");
    }
    no_content(&node, "DELETE", &reactions, &moderator).await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["MESSAGE_REACTION_REMOVE_ALL"],
    )
    .await;
}

/// The `pinned` of `id` in `channel`'s history and in a GET of it.
async fn pinned_everywhere(node: &TestNode, token: &str, channel: &str, id: &str) -> (bool, bool) {
    let in_history = node
        .history(token, channel)
        .await
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in history"))["pinned"]
        .as_bool()
        .unwrap();
    let (status, read) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{id}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{read}");
    (in_history, read["pinned"].as_bool().unwrap())
}

/// The `pinned` of `id` in `channel`'s history.
async fn pinned_in_history(node: &TestNode, token: &str, channel: &str, id: &str) -> bool {
    let history = node.history(token, channel).await;
    let message = history
        .iter()
        .find(|m| m["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in history"));
    message["pinned"].as_bool().unwrap()
}

/// `GET /channels/{channel}/messages/pins{query}`: (message ids, pinned_at
/// of each, has_more), every message `pinned: true`.
async fn pins(
    node: &TestNode,
    token: &str,
    channel: &str,
    query: &str,
) -> (Vec<String>, Vec<String>, bool) {
    let (status, page) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/pins{query}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let items = page["items"].as_array().unwrap();
    for item in items {
        assert_eq!(item["message"]["pinned"], true, "{item}");
        assert_eq!(item["message"]["channel_id"], channel, "{item}");
    }
    (
        items.iter().map(|i| id_of(&i["message"])).collect(),
        items
            .iter()
            .map(|i| i["pinned_at"].as_str().unwrap().to_owned())
            .collect(),
        page["has_more"].as_bool().unwrap(),
    )
}

/// A timestamp as a query value (its `+` would read as a space).
fn query_time(timestamp: &str) -> String {
    timestamp.replace('+', "%2B")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_are_announced_shown_paged_and_idempotent() {
    let node = node_with(Limits::default()).await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "pins").await;
    let code = node.invite(&owner, &channel).await;
    let (member, _) = join(&node, &code, "member").await;
    let (pinner, pinner_id) = join(&node, &code, "pinner").await;
    grant(&node, &owner, &guild, &pinner_id, 1 << 51).await;
    let mut session = Client::connect(&node.ws).await;
    session
        .identify(
            &owner,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    session.dispatch("GUILD_CREATE").await;
    let first = post(&node, &owner, &channel, "first").await;
    let second = post(&node, &member, &channel, "second").await;
    let third = post(&node, &owner, &channel, "third").await;
    let pin = |id: &str| format!("/channels/{channel}/messages/pins/{id}");
    let legacy = |id: &str| format!("/channels/{channel}/pins/{id}");

    // No pins yet.
    assert_eq!(
        pins(&node, &owner, &channel, "").await,
        (vec![], vec![], false)
    );
    assert_eq!(
        pinned_everywhere(&node, &owner, &channel, &first).await,
        (false, false)
    );
    // PIN_MESSAGES is needed, MANAGE_MESSAGES is not what is asked.
    refused(&node, "PUT", &pin(&first), &member, 403, 50013).await;
    refused(&node, "DELETE", &pin(&first), &member, 403, 50013).await;
    refused(&node, "PUT", &legacy(&first), &member, 403, 50013).await;
    refused(&node, "PUT", &pin("1234567"), &owner, 404, 10008).await;
    refused(&node, "DELETE", &pin("1234567"), &owner, 404, 10008).await;

    // The pinner pins the first: MESSAGE_UPDATE of it, `pinned`, then
    // CHANNEL_PINS_UPDATE with its time.
    no_content(&node, "PUT", &pin(&first), &pinner).await;
    let updated = session.dispatch("MESSAGE_UPDATE").await["d"].clone();
    assert_eq!(updated["id"], first.as_str(), "{updated}");
    assert_eq!(updated["pinned"], true, "{updated}");
    assert_eq!(updated["content"], "first", "{updated}");
    let update = session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    assert_eq!(update["guild_id"], guild.as_str(), "{update}");
    assert_eq!(update["channel_id"], channel.as_str(), "{update}");
    let first_pinned_at = update["last_pin_timestamp"].as_str().unwrap().to_owned();
    assert!(first_pinned_at.ends_with("+00:00"), "{update}");
    // Then the pinner's "pinned a message" notice (type 6), referring to
    // the message without embedding it.
    let notice = session.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(notice["type"], 6, "{notice}");
    assert_eq!(notice["content"], "", "{notice}");
    assert_eq!(notice["author"]["id"], pinner_id.as_str(), "{notice}");
    assert_eq!(
        notice["member"]["roles"].as_array().map(Vec::len),
        Some(1),
        "{notice}"
    );
    assert_eq!(
        notice["message_reference"]["message_id"],
        first.as_str(),
        "{notice}"
    );
    assert_eq!(notice["message_reference"]["channel_id"], channel.as_str());
    assert_eq!(notice["message_reference"]["guild_id"], guild.as_str());
    assert!(notice.get("referenced_message").is_none(), "{notice}");
    let notice_path = format!("/channels/{channel}/messages/{}", id_of(&notice));
    let (status, body) = node
        .call(
            "PATCH",
            &notice_path,
            Some(&pinner),
            Some(json!({"content": "x"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!(50021)),
        "{body}"
    );
    let (status, read) = node.call("GET", &notice_path, Some(&member), None).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["type"], 6, "{read}");
    assert_eq!(read["message_reference"]["message_id"], first.as_str());
    assert_eq!(
        pinned_everywhere(&node, &member, &channel, &first).await,
        (true, true)
    );
    assert_eq!(
        pinned_everywhere(&node, &member, &channel, &second).await,
        (false, false)
    );
    // Pinning it again changes nothing and announces nothing.
    no_content(&node, "PUT", &pin(&first), &pinner).await;
    no_content(&node, "PUT", &legacy(&first), &owner).await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["CHANNEL_PINS_UPDATE", "MESSAGE_UPDATE"],
    )
    .await;

    // The other two, one through the deprecated route.
    no_content(&node, "PUT", &pin(&second), &pinner).await;
    let second_pinned_at = session.dispatch("CHANNEL_PINS_UPDATE").await["d"]["last_pin_timestamp"]
        .as_str()
        .unwrap()
        .to_owned();
    no_content(&node, "PUT", &legacy(&third), &owner).await;
    let third_pinned_at = session.dispatch("CHANNEL_PINS_UPDATE").await["d"]["last_pin_timestamp"]
        .as_str()
        .unwrap()
        .to_owned();

    // Newest pin first, each at the time its update announced.
    let all = pins(&node, &member, &channel, "").await;
    assert_eq!(
        all,
        (
            vec![third.clone(), second.clone(), first.clone()],
            vec![
                third_pinned_at.clone(),
                second_pinned_at.clone(),
                first_pinned_at.clone()
            ],
            false
        )
    );
    assert!(first_pinned_at < second_pinned_at && second_pinned_at < third_pinned_at);
    // Paged as Discord's example: limit, then before the last pinned_at.
    let (ids, times, more) = pins(&node, &member, &channel, "?limit=2").await;
    assert_eq!(
        (ids.clone(), more),
        (vec![third.clone(), second.clone()], true)
    );
    let query = format!("?limit=2&before={}", query_time(&times[1]));
    assert_eq!(
        pins(&node, &member, &channel, &query).await,
        (vec![first.clone()], vec![first_pinned_at.clone()], false)
    );
    // A limit of 1 is one pin with more to come; before the oldest is
    // nothing; Discord's other timestamp shapes read the same.
    let (ids, _, more) = pins(&node, &member, &channel, "?limit=1").await;
    assert_eq!((ids, more), (vec![third.clone()], true));
    let query = format!("?before={}", query_time(&first_pinned_at));
    assert_eq!(
        pins(&node, &member, &channel, &query).await,
        (vec![], vec![], false)
    );
    let zulu = third_pinned_at.replace("+00:00", "Z");
    let (ids, _, _) = pins(&node, &member, &channel, &format!("?before={zulu}")).await;
    assert_eq!(ids, [second.clone(), first.clone()]);
    // A `before` that is not a date is Discord's 50035.
    let (status, body) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/pins?before=yesterday"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!((status, &body["code"]), (400, &json!(50035)), "{body}");

    // The deprecated list: the messages themselves, newest pin first.
    let (status, listed) = node
        .call(
            "GET",
            &format!("/channels/{channel}/pins"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(status, 200, "{listed}");
    let listed = listed.as_array().unwrap();
    assert_eq!(
        listed.iter().map(id_of).collect::<Vec<_>>(),
        [third.clone(), second.clone(), first.clone()]
    );
    assert!(listed.iter().all(|m| m["pinned"] == true));
    assert_eq!(listed[1]["content"], "second");

    // History shows all three pinned, the sentinels not.
    for message in node.history(&member, &channel).await {
        let expected = [&first, &second, &third].contains(&&id_of(&message));
        assert_eq!(message["pinned"], expected, "{message}");
    }

    // Unpinning the newest (deprecated route): the update names the
    // newest pin left.
    no_content(&node, "DELETE", &legacy(&third), &pinner).await;
    let updated = session.dispatch("MESSAGE_UPDATE").await["d"].clone();
    assert_eq!(updated["id"], third.as_str(), "{updated}");
    assert_eq!(updated["pinned"], false, "{updated}");
    let update = session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    assert_eq!(update["last_pin_timestamp"], second_pinned_at.as_str());
    assert_eq!(
        pinned_everywhere(&node, &member, &channel, &third).await,
        (false, false)
    );
    // Unpinning it again changes nothing and announces nothing.
    no_content(&node, "DELETE", &pin(&third), &pinner).await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["CHANNEL_PINS_UPDATE", "MESSAGE_UPDATE"],
    )
    .await;

    // A pinned message deleted leaves the pins, and Discord sends no
    // CHANNEL_PINS_UPDATE for it.
    no_content(
        &node,
        "DELETE",
        &format!("/channels/{channel}/messages/{second}"),
        &owner,
    )
    .await;
    session.dispatch("MESSAGE_DELETE").await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["CHANNEL_PINS_UPDATE", "MESSAGE_UPDATE"],
    )
    .await;
    assert_eq!(
        pins(&node, &member, &channel, "").await,
        (vec![first.clone()], vec![first_pinned_at.clone()], false)
    );
    refused(&node, "DELETE", &pin(&second), &owner, 404, 10008).await;

    // The last one: last_pin_timestamp null (present, not absent).
    no_content(&node, "DELETE", &pin(&first), &pinner).await;
    let update = session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    assert_eq!(
        update,
        json!({"guild_id": guild, "channel_id": channel, "last_pin_timestamp": null})
    );
    assert_eq!(
        pins(&node, &member, &channel, "").await,
        (vec![], vec![], false)
    );
    // A pin after that is the newest again.
    no_content(&node, "PUT", &pin(&third), &owner).await;
    let update = session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    let (ids, times, _) = pins(&node, &member, &channel, "").await;
    assert_eq!(ids, [third.as_str()]);
    assert_eq!(update["last_pin_timestamp"], times[0].as_str());
    assert!(times[0] > third_pinned_at, "a re-pin is a new pin time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_holds_at_most_pins_per_channel_max_pins() {
    const PINS_MAX: usize = 2;
    let node = node_with(Limits {
        pins_per_channel_max: PINS_MAX,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "capped").await;
    let (_, other_channel) = node.guild(&owner, "elsewhere").await;
    let mut messages = vec![];
    for i in 0..=PINS_MAX {
        messages.push(post(&node, &owner, &channel, &format!("m{i}")).await);
    }
    let pin = |id: &str| format!("/channels/{channel}/messages/pins/{id}");
    for id in &messages[..PINS_MAX] {
        no_content(&node, "PUT", &pin(id), &owner).await;
    }
    // The one over: 30003 on both routes, and nothing changes.
    refused(&node, "PUT", &pin(&messages[PINS_MAX]), &owner, 400, 30003).await;
    refused(
        &node,
        "PUT",
        &format!("/channels/{channel}/pins/{}", messages[PINS_MAX]),
        &owner,
        400,
        30003,
    )
    .await;
    let (ids, _, _) = pins(&node, &owner, &channel, "").await;
    assert_eq!(ids.len(), PINS_MAX);
    assert!(!ids.contains(&messages[PINS_MAX]));
    // A pinned message pinned again is no new pin, full or not.
    no_content(&node, "PUT", &pin(&messages[0]), &owner).await;
    // The cap is per channel: another channel pins freely.
    let elsewhere = post(&node, &owner, &other_channel, "there").await;
    no_content(
        &node,
        "PUT",
        &format!("/channels/{other_channel}/messages/pins/{elsewhere}"),
        &owner,
    )
    .await;
    // One unpinned frees its place.
    no_content(&node, "DELETE", &pin(&messages[0]), &owner).await;
    no_content(&node, "PUT", &pin(&messages[PINS_MAX]), &owner).await;
    let (ids, _, _) = pins(&node, &owner, &channel, "").await;
    assert_eq!(ids, [messages[2].clone(), messages[1].clone()]);
    // The deprecated list, without a limit, holds them all.
    let (status, listed) = node
        .call(
            "GET",
            &format!("/channels/{channel}/pins"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed.as_array().unwrap().len(), PINS_MAX);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_in_a_dm_are_its_members_and_announced_to_them() {
    let node = node_with(Limits::default()).await;
    let (alice, _) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, _) = node.register("carol").await;
    let (status, dm) = node
        .call(
            "POST",
            "/users/@me/channels",
            Some(&alice),
            Some(json!({"recipient_id": bob_id})),
        )
        .await;
    assert_eq!(status, 200, "{dm}");
    let dm = id_of(&dm);
    let mut bob_session = Client::connect(&node.ws).await;
    bob_session
        .identify(&bob, intents::DIRECT_MESSAGES | intents::MESSAGE_CONTENT)
        .await;
    let message = post(&node, &alice, &dm, "pin this").await;
    bob_session.dispatch("MESSAGE_CREATE").await;
    let pin = format!("/channels/{dm}/messages/pins/{message}");

    // Someone outside the DM can neither pin nor read its pins.
    refused(&node, "PUT", &pin, &carol, 403, 50001).await;
    refused(
        &node,
        "GET",
        &format!("/channels/{dm}/messages/pins"),
        &carol,
        403,
        50001,
    )
    .await;

    // Either member pins, without permissions; the other's session hears
    // CHANNEL_PINS_UPDATE without a guild_id.
    no_content(&node, "PUT", &pin, &bob).await;
    let update = bob_session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    assert_eq!(update["channel_id"], dm.as_str(), "{update}");
    assert!(update.get("guild_id").is_none(), "{update}");
    let pinned_at = update["last_pin_timestamp"].as_str().unwrap().to_owned();
    assert_eq!(
        pins(&node, &alice, &dm, "").await,
        (vec![message.clone()], vec![pinned_at], false)
    );
    // Its GET and its history show the pin.
    let (status, read) = node
        .call(
            "GET",
            &format!("/channels/{dm}/messages/{message}"),
            Some(&bob),
            None,
        )
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["pinned"], true, "{read}");
    assert!(pinned_in_history(&node, &alice, &dm, &message).await);

    no_content(&node, "DELETE", &pin, &alice).await;
    let update = bob_session.dispatch("CHANNEL_PINS_UPDATE").await["d"].clone();
    assert_eq!(
        update,
        json!({"channel_id": dm, "last_pin_timestamp": null})
    );
    assert_eq!(pins(&node, &bob, &dm, "").await, (vec![], vec![], false));
    assert!(!pinned_in_history(&node, &bob, &dm, &message).await);
}

/// A message's `reactions` on every read of it: one entry per emoji with
/// its count and whether the reader is among them (`me`), absent on a
/// message nobody reacted to; a message holds at most
/// `reactions_per_message_max` emoji (30010, nothing stored), while more
/// users may still react with one it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_carry_their_reactions_counted_for_the_reader() {
    let node = node_with(Limits {
        reactions_per_message_max: 2,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "counted").await;
    let code = node.invite(&owner, &channel).await;
    let (member, _) = join(&node, &code, "member").await;
    let (late, _) = join(&node, &code, "late").await;
    let message = post(&node, &owner, &channel, "react to me").await;
    let quiet = post(&node, &owner, &channel, "nobody reacts").await;
    let reactions = format!("/channels/{channel}/messages/{message}/reactions");
    let react = |emoji: &str| format!("{reactions}/{emoji}/@me");
    no_content(&node, "PUT", &react(THUMBS), &owner).await;
    no_content(&node, "PUT", &react(THUMBS), &member).await;
    no_content(&node, "PUT", &react(TADA), &member).await;

    // (emoji, count, me) of `message` as `reader` sees it.
    let seen = |reactions: &Value| -> Vec<(String, u64, bool)> {
        reactions
            .as_array()
            .unwrap_or_else(|| panic!("no reactions: {reactions}"))
            .iter()
            .map(|r| {
                assert_eq!(r["emoji"]["id"], Value::Null, "{r}");
                assert_eq!(r["count_details"]["burst"], 0, "{r}");
                assert_eq!(r["count_details"]["normal"], r["count"], "{r}");
                assert_eq!(r["me_burst"], false, "{r}");
                assert_eq!(r["burst_colors"], json!([]), "{r}");
                (
                    r["emoji"]["name"].as_str().unwrap().to_owned(),
                    r["count"].as_u64().unwrap(),
                    r["me"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let read = |token: String| {
        let node = &node;
        let path = format!("/channels/{channel}/messages/{message}");
        async move {
            let (status, body) = node.call("GET", &path, Some(&token), None).await;
            assert_eq!(status, 200, "{body}");
            body["reactions"].clone()
        }
    };
    let thumbs = "\u{1F44D}".to_owned();
    let tada = "\u{1F389}".to_owned();
    assert_eq!(
        seen(&read(owner.clone()).await),
        [(tada.clone(), 1, false), (thumbs.clone(), 2, true)]
    );
    assert_eq!(
        seen(&read(member.clone()).await),
        [(tada.clone(), 1, true), (thumbs.clone(), 2, true)]
    );
    // History: the same for its reader, nothing on the other message.
    for listed in node.history(&late, &channel).await {
        if id_of(&listed) == quiet {
            assert!(listed.get("reactions").is_none(), "{listed}");
        } else if id_of(&listed) == message {
            assert_eq!(
                seen(&listed["reactions"]),
                [(tada.clone(), 1, false), (thumbs.clone(), 2, false)]
            );
        }
    }

    // A third emoji is refused while two are there; nothing is stored.
    let heart = "%E2%9D%A4";
    let (status, body) = node.call("PUT", &react(heart), Some(&late), None).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], 30010, "{body}");
    assert_eq!(seen(&read(late.clone()).await).len(), 2);
    // One it has takes another user.
    no_content(&node, "PUT", &react(TADA), &late).await;
    assert_eq!(
        seen(&read(late.clone()).await),
        [(tada.clone(), 2, true), (thumbs.clone(), 2, false)]
    );

    // The pins list renders them too.
    no_content(
        &node,
        "PUT",
        &format!("/channels/{channel}/messages/pins/{message}"),
        &owner,
    )
    .await;
    let (status, page) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/pins"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        seen(&page["items"][0]["message"]["reactions"]),
        [(tada.clone(), 2, true), (thumbs.clone(), 2, true)]
    );

    // Every reaction removed: `reactions` is absent again, and the emoji
    // freed take the third.
    no_content(&node, "DELETE", &reactions, &owner).await;
    assert_eq!(read(owner.clone()).await, Value::Null);
    no_content(&node, "PUT", &react(heart), &late).await;
    assert_eq!(
        seen(&read(late.clone()).await),
        [("\u{2764}".to_owned(), 1, true)]
    );
}

/// A DM's members edit and delete their own messages and react there, as
/// in a guild, and hear it without `guild_id` (DIRECT_MESSAGES,
/// DIRECT_MESSAGE_REACTIONS); a moderator's action (another's message or
/// reaction removed) is 50003, and anyone outside the DM gets 50001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dm_members_edit_delete_and_react_and_moderate_nothing() {
    let node = node_with(Limits::default()).await;
    let (alice, alice_id) = node.register("alice").await;
    let (bob, bob_id) = node.register("bob").await;
    let (carol, _) = node.register("carol").await;
    let (status, dm) = node
        .call(
            "POST",
            "/users/@me/channels",
            Some(&alice),
            Some(json!({"recipient_id": bob_id})),
        )
        .await;
    assert_eq!(status, 200, "{dm}");
    let dm = id_of(&dm);
    let mut bob_session = Client::connect(&node.ws).await;
    bob_session
        .identify(
            &bob,
            intents::DIRECT_MESSAGES | intents::DIRECT_MESSAGE_REACTIONS | intents::MESSAGE_CONTENT,
        )
        .await;
    let message = post(&node, &alice, &dm, "hello bob").await;
    bob_session.dispatch("MESSAGE_CREATE").await;
    let path = format!("/channels/{dm}/messages/{message}");
    let reactions = format!("{path}/reactions");

    // Only its author edits it (50005 for anyone else); outsiders do not reach it at all.
    let edit = json!({"content": "hello again"});
    let (status, body) = node
        .call("PATCH", &path, Some(&bob), Some(edit.clone()))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!(50005)),
        "{body}"
    );
    let (status, body) = node
        .call("PATCH", &path, Some(&carol), Some(edit.clone()))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!(50001)),
        "{body}"
    );
    let (status, edited) = node.call("PATCH", &path, Some(&alice), Some(edit)).await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["content"], "hello again", "{edited}");
    let update = bob_session.dispatch("MESSAGE_UPDATE").await["d"].clone();
    assert_eq!(update["id"], message.as_str(), "{update}");
    assert_eq!(update["content"], "hello again", "{update}");
    assert!(update.get("guild_id").is_none(), "{update}");

    // Bob reacts: the DM's sessions hear it without guild or member.
    no_content(&node, "PUT", &format!("{reactions}/{THUMBS}/@me"), &bob).await;
    let added = bob_session.dispatch("MESSAGE_REACTION_ADD").await["d"].clone();
    assert_eq!(added["user_id"], bob_id.as_str(), "{added}");
    assert_eq!(added["channel_id"], dm.as_str(), "{added}");
    assert_eq!(added["message_author_id"], alice_id.as_str(), "{added}");
    assert_eq!(added["emoji"]["name"], "\u{1F44D}", "{added}");
    assert!(added.get("guild_id").is_none(), "{added}");
    assert!(added.get("member").is_none(), "{added}");
    refused(
        &node,
        "PUT",
        &format!("{reactions}/{THUMBS}/@me"),
        &carol,
        403,
        50001,
    )
    .await;
    let (status, read) = node.call("GET", &path, Some(&alice), None).await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["reactions"][0]["count"], 1, "{read}");
    assert_eq!(read["reactions"][0]["me"], false, "{read}");
    let (status, users) = node
        .call("GET", &format!("{reactions}/{THUMBS}"), Some(&alice), None)
        .await;
    assert_eq!(status, 200, "{users}");
    assert_eq!(user_ids(&users), std::slice::from_ref(&bob_id));

    // Nobody moderates a DM: another's reaction, one emoji's or all.
    for target in [
        format!("{reactions}/{THUMBS}/{bob_id}"),
        format!("{reactions}/{THUMBS}"),
        reactions.clone(),
    ] {
        refused(&node, "DELETE", &target, &alice, 403, 50003).await;
    }
    // One's own reaction, though.
    no_content(&node, "DELETE", &format!("{reactions}/{THUMBS}/@me"), &bob).await;
    let removed = bob_session.dispatch("MESSAGE_REACTION_REMOVE").await["d"].clone();
    assert_eq!(removed["user_id"], bob_id.as_str(), "{removed}");
    assert!(removed.get("guild_id").is_none(), "{removed}");

    // Nor another's message deleted; its author deletes it.
    refused(&node, "DELETE", &path, &bob, 403, 50003).await;
    refused(&node, "DELETE", &path, &carol, 403, 50001).await;
    no_content(&node, "DELETE", &path, &alice).await;
    let deleted = bob_session.dispatch("MESSAGE_DELETE").await["d"].clone();
    assert_eq!(
        deleted,
        json!({"id": message, "channel_id": dm}),
        "{deleted}"
    );
    refused(&node, "GET", &path, &alice, 404, 10008).await;
}

/// Discord's ADD_REACTIONS: the first to react with an emoji needs it;
/// joining an emoji already there needs only READ_MESSAGE_HISTORY. A
/// refusal (50013) stores and announces nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_emoji_needs_add_reactions_and_joining_one_does_not() {
    let node = node_with(Limits::default()).await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "no new emoji").await;
    let code = node.invite(&owner, &channel).await;
    let (member, _) = join(&node, &code, "member").await;
    // @everyone (the role with the guild's id) without ADD_REACTIONS.
    let (status, everyone) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild}/roles/{guild}"),
            Some(&owner),
            Some(json!({"permissions": ((1u64 << 10) | (1 << 11) | (1 << 16)).to_string()})),
        )
        .await;
    assert_eq!(status, 200, "{everyone}");
    let mut session = Client::connect(&node.ws).await;
    session
        .identify(
            &owner,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::GUILD_MESSAGE_REACTIONS,
        )
        .await;
    session.dispatch("GUILD_CREATE").await;
    let message = post(&node, &owner, &channel, "react").await;
    let react =
        |emoji: &str| format!("/channels/{channel}/messages/{message}/reactions/{emoji}/@me");

    refused(&node, "PUT", &react(THUMBS), &member, 403, 50013).await;
    heard_none_of(
        &node,
        &mut session,
        &owner,
        &channel,
        &["MESSAGE_REACTION_ADD"],
    )
    .await;
    let (_, read) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{message}"),
            Some(&member),
            None,
        )
        .await;
    assert!(read.get("reactions").is_none(), "{read}");
    // The owner holds every permission; the member may then join it.
    no_content(&node, "PUT", &react(THUMBS), &owner).await;
    no_content(&node, "PUT", &react(THUMBS), &member).await;
    let (_, read) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{message}"),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(read["reactions"][0]["count"], 2, "{read}");
    assert_eq!(read["reactions"][0]["me"], true, "{read}");
    // Another new one is still refused.
    refused(&node, "PUT", &react(TADA), &member, 403, 50013).await;
}

/// Discord: a member without READ_MESSAGE_HISTORY gets an empty list of
/// pins (not an error), on the current route and the deprecated one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_are_empty_without_read_message_history() {
    let node = node_with(Limits::default()).await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "no history").await;
    let code = node.invite(&owner, &channel).await;
    let (member, _) = join(&node, &code, "member").await;
    let message = post(&node, &owner, &channel, "pinned").await;
    no_content(
        &node,
        "PUT",
        &format!("/channels/{channel}/messages/pins/{message}"),
        &owner,
    )
    .await;
    let list = |token: String, path: String| {
        let node = &node;
        async move {
            let (status, body) = node.call("GET", &path, Some(&token), None).await;
            assert_eq!(status, 200, "{path}: {body}");
            body
        }
    };
    let current = format!("/channels/{channel}/messages/pins");
    let legacy = format!("/channels/{channel}/pins");
    assert_eq!(
        list(member.clone(), current.clone()).await["items"][0]["message"]["id"],
        message.as_str()
    );
    // @everyone (the role with the guild's id) keeps VIEW_CHANNEL only.
    let (status, everyone) = node
        .call(
            "PATCH",
            &format!("/guilds/{guild}/roles/{guild}"),
            Some(&owner),
            Some(json!({"permissions": (1u64 << 10).to_string()})),
        )
        .await;
    assert_eq!(status, 200, "{everyone}");
    assert_eq!(
        list(member.clone(), current.clone()).await,
        json!({"items": [], "has_more": false})
    );
    assert_eq!(list(member.clone(), legacy.clone()).await, json!([]));
    // The owner still sees it.
    assert_eq!(list(owner.clone(), legacy).await[0]["id"], message.as_str());
}
