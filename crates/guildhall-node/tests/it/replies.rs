//! Message replies over real sockets, as Discord REST v10 documents them
//! ("Message Reference", "Create Message"): a `message_reference` makes the
//! message a reply (type 19) carrying the reference and the referenced
//! message, the same in the REST answer, in MESSAGE_CREATE, and in both
//! history reads, where the referenced message is read as it is now (null
//! once deleted). `fail_if_not_exists: false` posts a plain message when
//! the referenced one is gone. Every refusal is Discord's 50035 nested at
//! `message_reference`, and nothing is stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

/// The reply-specific fields of a message, for comparing the copies a
/// client can see (REST answer, gateway, history).
fn reply_fields(message: &Value) -> Value {
    json!({
        "id": message["id"],
        "type": message["type"],
        "content": message["content"],
        "message_reference": message.get("message_reference"),
        "referenced_message": message.get("referenced_message"),
    })
}

async fn get(node: &TestNode, token: &str, channel: &str, id: &str) -> Value {
    let (status, message) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{id}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, 200, "{message}");
    message
}

fn id_of(message: &Value) -> String {
    message["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_carries_its_reference_everywhere_and_null_once_deleted() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, owner_id) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "replies").await;
    let code = node.invite(&owner, &channel).await;
    let (member, member_id) = node.register("member").await;
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&member), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let mut session = Client::connect(&node.ws).await;
    session
        .identify(
            &owner,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    assert_eq!(
        session.dispatch("GUILD_CREATE").await["d"]["id"],
        guild.as_str()
    );

    let (status, original) = node
        .post_message(&owner, &channel, json!({"content": "hello"}))
        .await;
    assert_eq!(status, 200, "{original}");
    assert_eq!(original["type"], 0);
    assert!(original.get("message_reference").is_none(), "{original}");
    assert!(original.get("referenced_message").is_none(), "{original}");
    session.dispatch("MESSAGE_CREATE").await;
    let original_id = id_of(&original);

    // The reply: only message_id given, as discord.py's and discord.js's
    // `message.reply()` send it (plus fail_if_not_exists).
    let (status, reply) = node
        .post_message(
            &member,
            &channel,
            json!({"content": "hi back", "message_reference":
            {"message_id": original_id, "fail_if_not_exists": true}}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["type"], 19);
    assert_eq!(reply["author"]["id"], member_id.as_str());
    assert_eq!(
        reply["message_reference"],
        json!({"type": 0, "message_id": original_id, "channel_id": channel, "guild_id": guild})
    );
    let referenced = &reply["referenced_message"];
    assert_eq!(referenced["id"], original_id.as_str());
    assert_eq!(referenced["content"], "hello");
    assert_eq!(referenced["type"], 0);
    assert_eq!(referenced["author"]["id"], owner_id.as_str());
    assert_eq!(referenced["channel_id"], channel.as_str());
    let created = session.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(reply_fields(&created), reply_fields(&reply));
    let reply_id = id_of(&reply);
    assert_eq!(
        reply_fields(&get(&node, &owner, &channel, &reply_id).await),
        reply_fields(&reply)
    );

    // A reply to the reply: its referenced message shows its own
    // reference but is not nested further.
    let (status, second) = node
        .post_message(
            &owner,
            &channel,
            json!({"content": "and again", "message_reference":
            {"type": 0, "message_id": reply_id, "channel_id": channel, "guild_id": guild}}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let nested = &second["referenced_message"];
    assert_eq!(nested["id"], reply_id.as_str());
    assert_eq!(nested["type"], 19);
    assert_eq!(nested["message_reference"], reply["message_reference"]);
    assert!(nested.get("referenced_message").is_none(), "{nested}");
    assert_eq!(
        reply_fields(&session.dispatch("MESSAGE_CREATE").await["d"]),
        reply_fields(&second)
    );
    let second_id = id_of(&second);

    // History: newest first, each reply as it was answered.
    let page = node.history(&owner, &channel).await;
    let ids: Vec<&str> = page.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        vec![second_id.as_str(), reply_id.as_str(), original_id.as_str()]
    );
    assert_eq!(reply_fields(&page[0]), reply_fields(&second));
    assert_eq!(reply_fields(&page[1]), reply_fields(&reply));
    assert!(page[2].get("referenced_message").is_none());

    // The original deleted: the reply keeps its type and reference, and
    // its referenced_message is null (present, not absent).
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{channel}/messages/{original_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    for copy in [
        get(&node, &member, &channel, &reply_id).await,
        node.history(&member, &channel).await[1].clone(),
    ] {
        assert_eq!(copy["id"], reply_id.as_str());
        assert_eq!(copy["type"], 19);
        assert_eq!(copy["message_reference"], reply["message_reference"]);
        assert_eq!(copy.get("referenced_message"), Some(&Value::Null), "{copy}");
    }

    // An edited reply still shows what it replies to, in the answer and
    // in MESSAGE_UPDATE.
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}/messages/{second_id}"),
            Some(&owner),
            Some(json!({"content": "edited"})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["type"], 19);
    assert_eq!(edited["referenced_message"]["id"], reply_id.as_str());
    assert_eq!(
        reply_fields(&session.dispatch("MESSAGE_UPDATE").await["d"]),
        reply_fields(&edited)
    );

    // The deleted message with fail_if_not_exists false: a plain message,
    // type 0, with no reference (Discord: "instead of sending as a normal
    // (non-reply) message").
    let (status, plain) = node
        .post_message(
            &member,
            &channel,
            json!({"content": "plain", "message_reference":
            {"message_id": original_id, "fail_if_not_exists": false}}),
        )
        .await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain["type"], 0);
    assert!(plain.get("message_reference").is_none(), "{plain}");
    assert!(plain.get("referenced_message").is_none(), "{plain}");
    let plain_id = id_of(&plain);
    let stored = get(&node, &member, &channel, &plain_id).await;
    assert_eq!(reply_fields(&stored), reply_fields(&plain));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_references_are_50035_at_message_reference_and_store_nothing() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "refusals").await;
    let (status, other) = node
        .call(
            "POST",
            &format!("/guilds/{guild}/channels"),
            Some(&owner),
            Some(json!({"name": "other", "type": 0})),
        )
        .await;
    assert_eq!(status, 200, "{other}");
    let other = id_of(&other);
    let (other_guild, other_guild_channel) = node.guild(&owner, "elsewhere").await;

    let (status, here) = node
        .post_message(&owner, &channel, json!({"content": "here"}))
        .await;
    assert_eq!(status, 200, "{here}");
    let here = id_of(&here);
    let (status, there) = node
        .post_message(&owner, &other, json!({"content": "there"}))
        .await;
    assert_eq!(status, 200, "{there}");
    let there = id_of(&there);
    let (status, deleted) = node
        .post_message(&owner, &channel, json!({"content": "gone"}))
        .await;
    assert_eq!(status, 200, "{deleted}");
    let deleted = id_of(&deleted);
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{channel}/messages/{deleted}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let before = node.history(&owner, &channel).await;
    let before_other = node.history(&owner, &other).await;
    assert_eq!(before.len(), 1);

    // (reference, path below message_reference, Discord's field code).
    let cases: Vec<(Value, Vec<&str>, &str)> = vec![
        // Deleted, fail_if_not_exists defaulting to true.
        (
            json!({"message_id": deleted}),
            vec![],
            "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
        ),
        // Never existed.
        (
            json!({"message_id": "123456789012345678", "fail_if_not_exists": true}),
            vec![],
            "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
        ),
        // A message of another channel: not in this one.
        (
            json!({"message_id": there}),
            vec![],
            "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
        ),
        // Naming another channel or another guild.
        (
            json!({"message_id": there, "channel_id": other}),
            vec![],
            "REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL",
        ),
        (
            json!({"message_id": here, "guild_id": other_guild}),
            vec![],
            "REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL",
        ),
        (
            json!({"message_id": "abc"}),
            vec!["message_id"],
            "NUMBER_TYPE_COERCE",
        ),
        (
            json!({"message_id": here, "channel_id": "-1"}),
            vec!["channel_id"],
            "NUMBER_TYPE_COERCE",
        ),
        (json!({}), vec!["message_id"], "BASE_TYPE_REQUIRED"),
        (
            json!({"type": 7, "message_id": here}),
            vec!["type"],
            "BASE_TYPE_CHOICES",
        ),
        // Forwards are not served (no message_snapshots yet).
        (
            json!({"type": 1, "message_id": here, "channel_id": channel}),
            vec!["type"],
            "BASE_TYPE_CHOICES",
        ),
        (
            json!({"message_id": here, "fail_if_not_exists": "yes"}),
            vec!["fail_if_not_exists"],
            "BOOLEAN_TYPE_CONVERT",
        ),
        (json!([here]), vec![], "MODEL_TYPE_CONVERT"),
    ];
    for (reference, path, code) in cases {
        let (status, body) = node
            .post_message(
                &owner,
                &channel,
                json!({"content": "reply", "message_reference": reference}),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_u64(), body["message"].as_str()),
            (400, Some(50035), Some("Invalid Form Body")),
            "{reference}: {body}"
        );
        let mut at = &body["errors"]["message_reference"];
        for key in &path {
            at = &at[*key];
        }
        assert_eq!(at["_errors"][0]["code"], code, "{reference}: {body}");
        assert!(at["_errors"][0]["message"].is_string(), "{body}");
    }
    assert_eq!(node.history(&owner, &channel).await, before);
    assert_eq!(node.history(&owner, &other).await, before_other);
    assert!(node.history(&owner, &other_guild_channel).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dm_reply_has_no_guild_id() {
    let node = TestNode::start().await;
    let (alice, _) = node.register("alice").await;
    let (_, bob_id) = node.register("bob").await;
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
    let (status, first) = node
        .post_message(&alice, &dm, json!({"content": "one"}))
        .await;
    assert_eq!(status, 200, "{first}");
    let first = id_of(&first);
    let (status, reply) = node
        .post_message(
            &alice,
            &dm,
            json!({"content": "two", "message_reference": {"message_id": first}}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["type"], 19);
    assert_eq!(
        reply["message_reference"],
        json!({"type": 0, "message_id": first, "channel_id": dm})
    );
    assert_eq!(reply["referenced_message"]["id"], first.as_str());
    assert_eq!(
        reply_fields(&node.history(&alice, &dm).await[0]),
        reply_fields(&reply)
    );
}
