//! The routes bots call as they start: the current user's guilds (paged,
//! with permissions and counts) and the current application (read and
//! edit), against a real node.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::TestNode;
use guildhall_limits::Limits;
use serde_json::{Value, json};

async fn node() -> TestNode {
    TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..Limits::default()
    })
    .await
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn my_guilds_are_paged_with_permissions_and_counts() {
    let node = node().await;
    let (owner, _) = node.register("owner").await;
    let (member, member_id) = node.register("member").await;
    let mut guilds = Vec::new();
    for name in ["first", "second", "third"] {
        let (guild, channel) = node.guild(&owner, name).await;
        let code = node.invite(&owner, &channel).await;
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(&member), None)
            .await;
        assert_eq!(status, 200);
        guilds.push(guild);
    }
    // The member's own guild, and a role that grants MANAGE_GUILD (1 << 5)
    // in the second.
    let (own, _) = node.guild(&member, "own").await;
    let (status, role) = node
        .call(
            "POST",
            &format!("/guilds/{}/roles", guilds[1]),
            Some(&owner),
            Some(json!({"name": "managers", "permissions": "32"})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    let (status, _) = node
        .call(
            "PUT",
            &format!(
                "/guilds/{}/members/{member_id}/roles/{}",
                guilds[1],
                role["id"].as_str().unwrap()
            ),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);

    let (status, all) = node
        .call("GET", "/users/@me/guilds", Some(&member), None)
        .await;
    assert_eq!(status, 200, "{all}");
    let mut expected = guilds.clone();
    expected.push(own.clone());
    expected.sort_by_key(|id| id.parse::<u64>().unwrap());
    assert_eq!(ids(&all), expected);
    let by_id = |id: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|g| g["id"] == id)
            .unwrap()
            .clone()
    };
    let everyone: u64 = by_id(&guilds[0])["permissions"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let managed: u64 = by_id(&guilds[1])["permissions"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(managed, everyone | 32, "the role's bits join @everyone's");
    assert_eq!(by_id(&guilds[0])["owner"], false);
    assert_eq!(by_id(&own)["owner"], true);
    assert_eq!(
        by_id(&own)["permissions"],
        guildhall_proto::permissions::ALL.to_string()
    );
    assert!(by_id(&own).get("approximate_member_count").is_none());
    assert_eq!(by_id(&guilds[0])["name"], "first");

    // The member's own member object in a guild: its role, no user
    // needed beyond its own; a guild it is not in (or no guild) is 10004.
    let (status, me) = node
        .call(
            "GET",
            &format!("/users/@me/guilds/{}/member", guilds[1]),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["user"]["id"], member_id.as_str());
    assert_eq!(me["roles"], json!([role["id"]]));
    assert!(me["joined_at"].is_string(), "{me}");
    let (stranger_guild, _) = node.guild(&owner, "not theirs").await;
    for guild in [stranger_guild.as_str(), "123", "x"] {
        let (status, body) = node
            .call(
                "GET",
                &format!("/users/@me/guilds/{guild}/member"),
                Some(&member),
                None,
            )
            .await;
        assert_eq!(
            (status, body["code"].clone()),
            (404, json!(10004)),
            "{guild}: {body}"
        );
    }

    // Pages: after, before (the page just below it), limit.
    let (_, page) = node
        .call("GET", "/users/@me/guilds?limit=2", Some(&member), None)
        .await;
    assert_eq!(ids(&page), expected[..2]);
    let (_, page) = node
        .call(
            "GET",
            &format!("/users/@me/guilds?after={}", expected[1]),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(ids(&page), expected[2..]);
    let (_, page) = node
        .call(
            "GET",
            &format!("/users/@me/guilds?before={}&limit=2", expected[3]),
            Some(&member),
            None,
        )
        .await;
    assert_eq!(ids(&page), expected[1..3]);

    let (_, counted) = node
        .call(
            "GET",
            "/users/@me/guilds?with_counts=true",
            Some(&member),
            None,
        )
        .await;
    let first = counted
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["id"] == guilds[0].as_str())
        .unwrap();
    assert_eq!(first["approximate_member_count"], 2);

    for limit in ["0", "201", "-1"] {
        let (status, body) = node
            .call(
                "GET",
                &format!("/users/@me/guilds?limit={limit}"),
                Some(&member),
                None,
            )
            .await;
        assert_eq!(
            (status, body["code"].clone()),
            (400, json!(50035)),
            "{limit}"
        );
    }
    let (status, _) = node.call("GET", "/users/@me/guilds", None, None).await;
    assert_eq!(status, 401);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_application_is_read_and_edited() {
    let node = node().await;
    let (owner, _) = node.register("owner").await;
    let (guild, _) = node.guild(&owner, "home").await;
    let (app_id, bot) = node.bot_in(&owner, &guild).await;

    let (status, app) = node
        .call("GET", "/applications/@me", Some(&bot), None)
        .await;
    assert_eq!(status, 200, "{app}");
    assert_eq!(app["id"], app_id.as_str());
    assert_eq!(app["approximate_guild_count"], 1);
    assert_eq!(app["bot"]["id"], app_id.as_str());
    assert_eq!(app["owner"]["username"], "owner");
    let (_, oauth) = node
        .call("GET", "/oauth2/applications/@me", Some(&bot), None)
        .await;
    assert_eq!(oauth, app);
    // By id, for its owner only.
    let (status, by_id) = node
        .call(
            "GET",
            &format!("/applications/{app_id}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!((status, &by_id), (200, &app));
    let (stranger, _) = node.register("stranger").await;
    let (status, refused) = node
        .call(
            "GET",
            &format!("/applications/{app_id}"),
            Some(&stranger),
            None,
        )
        .await;
    assert_eq!((status, refused["code"].clone()), (403, json!(50001)));
    let (status, refused) = node
        .call("GET", "/applications/1234567", Some(&owner), None)
        .await;
    assert_eq!((status, refused["code"].clone()), (404, json!(10002)));

    let flags = app["flags"].as_i64().unwrap();
    let message_content_limited = 1 << 19;
    let (status, edited) = node
        .call(
            "PATCH",
            "/applications/@me",
            Some(&bot),
            Some(json!({"description": "Plays music", "flags": flags & !message_content_limited})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["description"], "Plays music");
    assert_eq!(edited["flags"], flags & !message_content_limited);
    let (_, again) = node
        .call("GET", "/applications/@me", Some(&bot), None)
        .await;
    assert_eq!(again, edited);

    for (body, field) in [
        (json!({"description": "d".repeat(401)}), "description"),
        (json!({"description": 5}), "description"),
        (json!({"flags": 1 << 23}), "flags"),
        (json!({"icon": "data:image/png;base64,AAAA"}), "icon"),
        (
            json!({"interactions_endpoint_url": "https://example.com"}),
            "interactions_endpoint_url",
        ),
    ] {
        let (status, refused) = node
            .call("PATCH", "/applications/@me", Some(&bot), Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert!(
            refused["errors"][field]["_errors"].is_array(),
            "{body}: {refused}"
        );
    }
    let (_, unchanged) = node
        .call("GET", "/applications/@me", Some(&bot), None)
        .await;
    assert_eq!(unchanged, edited, "a refused edit stores nothing");

    // A user without an application of their own.
    let (status, body) = node
        .call("GET", "/applications/@me", Some(&owner), None)
        .await;
    assert_eq!((status, body["code"].clone()), (404, json!(10002)));
    node.stop().await;
}
