//! Rich embeds over real sockets: a message's embeds are stored, echoed
//! over REST and in MESSAGE_CREATE reduced to Discord's documented fields,
//! replaced or cleared by an edit, carried by a webhook's execute and
//! edit; an embed over a documented limit is Discord's 50035 nested at the
//! field, and nothing is stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

fn embed() -> Value {
    json!({
        "title": "Release", "description": "notes", "url": "https://example.com/r",
        "color": 5814783, "timestamp": "2026-12-01T10:00:00.000Z",
        "footer": {"text": "footer", "icon_url": "https://example.com/f.png"},
        "author": {"name": "guildhall"},
        "fields": [{"name": "a", "value": "1", "inline": true}],
        "not_a_field": "dropped",
    })
}

fn stored(embed: &Value) -> Value {
    let mut expected = embed.clone();
    let map = expected.as_object_mut().unwrap();
    map.remove("not_a_field");
    map.insert("type".into(), json!("rich"));
    expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeds_are_stored_echoed_edited_and_refused_past_the_documented_limits() {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        webhook_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (guild, channel) = node.guild(&owner, "embeds").await;
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

    // An embed and no content.
    let (status, message) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&owner),
            Some(json!({"embeds": [embed()]})),
        )
        .await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["embeds"], json!([stored(&embed())]));
    let created = session.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["embeds"], json!([stored(&embed())]));
    let id = message["id"].as_str().unwrap().to_owned();
    assert_eq!(
        node.history(&owner, &channel).await[0]["embeds"],
        json!([stored(&embed())])
    );

    // Refusals: Discord's body nested at the field, nothing stored.
    let before = node.history(&owner, &channel).await.len();
    let cases = [
        (
            json!([{"title": "x".repeat(257)}]),
            vec!["0", "title"],
            "BASE_TYPE_MAX_LENGTH",
        ),
        (
            json!([{}, {"fields": [{"name": "n"}]}]),
            vec!["1", "fields", "0", "value"],
            "BASE_TYPE_REQUIRED",
        ),
        (
            json!([{"color": 16777216}]),
            vec!["0", "color"],
            "NUMBER_TYPE_MAX",
        ),
        (
            json!([{"image": {"url": "ftp://x"}}]),
            vec!["0", "image", "url"],
            "URL_TYPE_INVALID_URL",
        ),
        (
            json!(
                (0..2)
                    .map(|_| json!({"description": "d".repeat(3001)}))
                    .collect::<Vec<_>>()
            ),
            vec![],
            "MAX_EMBED_SIZE_EXCEEDED",
        ),
    ];
    for (embeds, path, code) in cases {
        let (status, body) = node
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&owner),
                Some(json!({"content": "x", "embeds": embeds})),
            )
            .await;
        assert_eq!(
            (status, body["code"].as_u64()),
            (400, Some(50035)),
            "{body}"
        );
        let mut at = &body["errors"]["embeds"];
        for key in &path {
            at = &at[*key];
        }
        assert_eq!(at["_errors"][0]["code"], code, "{body}");
    }
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&owner),
            Some(json!({"embeds": vec![json!({"title": "t"}); 11]})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(node.history(&owner, &channel).await.len(), before);

    // An edit replaces the embeds; clearing them with no content left is
    // an empty message (50006), and the stored embeds stay.
    let replaced = json!({"title": "v2"});
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}/messages/{id}"),
            Some(&owner),
            Some(json!({"embeds": [replaced]})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["embeds"], json!([{"type": "rich", "title": "v2"}]));
    assert!(edited["edited_timestamp"].is_string());
    assert_eq!(
        session.dispatch("MESSAGE_UPDATE").await["d"]["embeds"],
        json!([{"type": "rich", "title": "v2"}])
    );
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/channels/{channel}/messages/{id}"),
            Some(&owner),
            Some(json!({"embeds": null})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_u64()),
        (400, Some(50006)),
        "{body}"
    );
    let (status, kept) = node
        .call(
            "GET",
            &format!("/channels/{channel}/messages/{id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{kept}");
    assert_eq!(kept["embeds"], json!([{"type": "rich", "title": "v2"}]));

    // A webhook's execute and edit carry embeds too.
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
        "/webhooks/{}/{}",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    );
    let (status, sent) = node
        .call(
            "POST",
            &format!("{url}?wait=true"),
            None,
            Some(json!({"embeds": [embed()]})),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["embeds"], json!([stored(&embed())]));
    let sent_id = sent["id"].as_str().unwrap();
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("{url}/messages/{sent_id}"),
            None,
            Some(json!({"content": "now text", "embeds": []})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        (edited["content"].as_str(), &edited["embeds"]),
        (Some("now text"), &json!([]))
    );
    let (status, body) = node
        .call(
            "POST",
            &url,
            None,
            Some(json!({"embeds": [{"footer": {"text": ""}}]})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["errors"]["embeds"]["0"]["footer"]["text"]["_errors"][0]["code"],
        "BASE_TYPE_REQUIRED"
    );
}
