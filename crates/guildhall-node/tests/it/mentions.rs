//! A message's `mentions`, `mention_roles` and `mention_everyone`, as
//! Discord REST v10 documents them ("Allowed Mentions Object", "Edit
//! Message"): read from the content, limited by `allowed_mentions` (all
//! kinds by default for a message, users only for a webhook), by which
//! users and roles exist, and by MENTION_EVERYONE for `@everyone`/`@here`
//! and roles that are not mentionable; a reply mentions the author replied
//! to unless `replied_user` is false; an edit of the content rebuilds them.
//! The same in the REST answer, MESSAGE_CREATE and both reads. A bad
//! `allowed_mentions` is a 50035 nested at the field, and nothing is
//! stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

/// (user ids, role ids, everyone) of a message.
fn mentioned(message: &Value) -> (Vec<String>, Vec<String>, bool) {
    let ids = |key: &str| -> Vec<String> {
        message[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} missing: {message}"))
            .iter()
            .map(|v| v.as_str().or_else(|| v["id"].as_str()).unwrap().to_owned())
            .collect()
    };
    (
        ids("mentions"),
        ids("mention_roles"),
        message["mention_everyone"].as_bool().unwrap(),
    )
}

async fn role(node: &TestNode, owner: &str, guild: &str, name: &str, mentionable: bool) -> String {
    let (status, role) = node
        .call(
            "POST",
            &format!("/guilds/{guild}/roles"),
            Some(owner),
            Some(json!({"name": name, "mentionable": mentionable})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    role["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mentions_follow_content_allowances_and_permissions() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, owner_id) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "mentions").await;
    let code = node.invite(&owner, &channel).await;
    let (member, member_id) = node.register("member").await;
    let (status, body) = node
        .call("POST", &format!("/invites/{code}"), Some(&member), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let open = role(&node, &owner, &guild, "open", true).await;
    let closed = role(&node, &owner, &guild, "closed", false).await;
    let mut session = Client::connect(&node.ws).await;
    session
        .identify(
            &owner,
            intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT,
        )
        .await;
    session.dispatch("GUILD_CREATE").await;

    // The guild's owner may mention everything; an unknown user is left
    // out, a user mentioned twice is listed once.
    let content = format!(
        "@everyone hi <@{member_id}> <@!{member_id}> <@&{open}> <@&{closed}> <@999999999999>"
    );
    let (status, sent) = node
        .post_message(&owner, &channel, json!({"content": content}))
        .await;
    assert_eq!(status, 200, "{sent}");
    let expected = (
        vec![member_id.clone()],
        vec![open.clone(), closed.clone()],
        true,
    );
    assert_eq!(mentioned(&sent), expected);
    assert_eq!(sent["mentions"][0]["username"], "member", "{sent}");
    let created = session.dispatch("MESSAGE_CREATE").await;
    assert_eq!(mentioned(&created["d"]), expected);
    let id = sent["id"].as_str().unwrap().to_owned();
    let (_, read) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(mentioned(&read), expected);
    let page = node.history(&owner, &channel).await;
    assert_eq!(mentioned(&page[0]), expected);

    // A member without MENTION_EVERYONE: no @everyone, only the
    // mentionable role.
    let (status, sent) = node
        .post_message(&member, &channel, json!({"content": content}))
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(
        mentioned(&sent),
        (vec![member_id.clone()], vec![open.clone()], false)
    );
    session.dispatch("MESSAGE_CREATE").await;

    // allowed_mentions: nothing, then only the listed user.
    let (_, sent) = node
        .post_message(
            &owner,
            &channel,
            json!({"content": content, "allowed_mentions": {"parse": []}}),
        )
        .await;
    assert_eq!(mentioned(&sent), (vec![], vec![], false));
    assert!(
        sent.get("mentions").is_some(),
        "empty lists are sent: {sent}"
    );
    session.dispatch("MESSAGE_CREATE").await;
    let (_, sent) = node.post_message(&owner,
        &channel,
        json!({"content": content, "allowed_mentions": {"users": [member_id, owner_id], "parse": ["everyone"]}}),
    )
    .await;
    assert_eq!(mentioned(&sent), (vec![member_id.clone()], vec![], true));
    session.dispatch("MESSAGE_CREATE").await;

    // Refusals: 50035 at allowed_mentions, nothing stored.
    let before = node.history(&owner, &channel).await;
    for (allowed, path, code) in [
        (
            json!({"parse": ["users"], "users": [member_id]}),
            vec![],
            "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
        ),
        (
            json!({"parse": ["channels"]}),
            vec!["parse", "0"],
            "BASE_TYPE_CHOICES",
        ),
        (
            json!({"users": ["nope"]}),
            vec!["users", "0"],
            "NUMBER_TYPE_COERCE",
        ),
        (
            json!({"replied_user": 1}),
            vec!["replied_user"],
            "BOOLEAN_TYPE_CONVERT",
        ),
    ] {
        let (status, body) = node
            .post_message(
                &owner,
                &channel,
                json!({"content": "x", "allowed_mentions": allowed}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["code"], 50035, "{body}");
        let mut at = &body["errors"]["allowed_mentions"];
        for key in &path {
            at = &at[*key];
        }
        assert_eq!(at["_errors"][0]["code"], code, "{body}");
    }
    let after = node.history(&owner, &channel).await;
    assert_eq!(before, after, "a refused message is not stored");

    // A reply mentions the author replied to, unless replied_user is false.
    let reference = json!({"message_id": id});
    let (status, reply) = node
        .post_message(
            &member,
            &channel,
            json!({"content": "re", "message_reference": reference}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(mentioned(&reply).0, vec![owner_id.clone()]);
    let reply_id = reply["id"].as_str().unwrap().to_owned();
    let (_, quiet) = node
        .post_message(
            &member,
            &channel,
            json!({"content": "re", "message_reference": reference,
               "allowed_mentions": {"parse": ["users"], "replied_user": false}}),
        )
        .await;
    assert_eq!(mentioned(&quiet).0, Vec::<String>::new());

    // An edit rebuilds the lists from the new content; the replied-to
    // author stays mentioned.
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}/messages/{reply_id}"),
            Some(&member),
            Some(json!({"content": format!("now <@&{open}>")})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        mentioned(&edited),
        (vec![owner_id.clone()], vec![open.clone()], false)
    );
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}/messages/{id}"),
            Some(&owner),
            Some(json!({"content": "calm", "allowed_mentions": {"parse": []}})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(mentioned(&edited), (vec![], vec![], false));

    // A webhook parses user mentions only, unless its body allows more.
    let (status, hook) = node
        .call(
            "POST",
            &format!("/channels/{channel}/webhooks"),
            Some(&owner),
            Some(json!({"name": "hook"})),
        )
        .await;
    assert_eq!(status, 200, "{hook}");
    let url = format!(
        "/webhooks/{}/{}?wait=true",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    );
    let (status, sent) = node
        .call("POST", &url, None, Some(json!({"content": content})))
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(mentioned(&sent), (vec![member_id.clone()], vec![], false));
    let (_, sent) = node
        .call(
            "POST",
            &url,
            None,
            Some(json!({"content": content, "allowed_mentions": {"parse": ["everyone", "roles"]}})),
        )
        .await;
    assert_eq!(
        mentioned(&sent),
        (vec![], vec![open.clone(), closed.clone()], true)
    );
    node.stop().await;
}
