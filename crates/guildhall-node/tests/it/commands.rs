//! Application commands over REST against a real node: create (an upsert
//! by name), read, edit, delete and bulk overwrite, global and per guild,
//! who may act, the per-scope maxima, and Discord's error bodies for every
//! refusal, with nothing stored by a refused request.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::TestNode;
use guildhall_limits::Limits;
use serde_json::{Value, json};

struct App {
    node: TestNode,
    owner: String,
    bot: String,
    app_id: String,
    guild: String,
}

async fn app_with(limits: Limits) -> App {
    let node = TestNode::with_limits(Limits {
        rest_rate_limit_per_window: 1_000_000,
        ..limits
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (guild, _) = node.guild(&owner, "commands").await;
    let (app_id, bot) = node.bot_in(&owner, &guild).await;
    App {
        node,
        owner,
        bot,
        app_id,
        guild,
    }
}

async fn app() -> App {
    app_with(Limits::default()).await
}

fn ping() -> Value {
    json!({"name": "ping", "description": "Replies with pong", "options": [
        {"type": 3, "name": "text", "description": "What to echo", "required": true, "max_length": 100},
        {"type": 4, "name": "times", "description": "How often", "min_value": 1, "max_value": 5,
         "choices": [{"name": "once", "value": 1}, {"name": "twice", "value": 2}]}
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_commands_round_trip() {
    let App {
        node, bot, app_id, ..
    } = app().await;
    let base = format!("/applications/{app_id}/commands");
    let (status, created) = node.call("POST", &base, Some(&bot), Some(ping())).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["application_id"], app_id.as_str());
    assert_eq!(created["type"], 1);
    assert_eq!(created["options"][0]["required"], true);
    assert_eq!(created["options"][1]["choices"][1]["value"], 2);
    assert_eq!(created["dm_permission"], true);
    assert_eq!(created["integration_types"], json!([0]));
    assert!(created["version"].is_string());
    let id = created["id"].as_str().unwrap().to_owned();

    // POST with a taken name replaces that command and keeps its id: 200.
    let (status, again) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"name": "ping", "description": "Pong, again"})),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(again["description"], "Pong, again");
    assert!(again.get("options").is_none(), "{again}");

    // A user command of the same name is another command.
    let (status, user_cmd) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"type": 2, "name": "Show Profile"})),
        )
        .await;
    assert_eq!(status, 201, "{user_cmd}");
    assert_eq!(user_cmd["description"], "");

    let (status, list) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");

    let (status, one) = node
        .call("GET", &format!("{base}/{id}"), Some(&bot), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(one, again);

    let (status, edited) = node
        .call(
            "PATCH",
            &format!("{base}/{id}"),
            Some(&bot),
            Some(json!({"description": "Edited", "default_member_permissions": "32", "type": 3})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["description"], "Edited");
    assert_eq!(edited["default_member_permissions"], "32");
    assert_eq!(edited["type"], 1, "the type never changes");
    assert_ne!(edited["version"], again["version"]);

    // Renaming onto a name the type already has is refused.
    let (status, other) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"name": "other", "description": "o"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, refused) = node
        .call(
            "PATCH",
            &format!("{base}/{}", other["id"].as_str().unwrap()),
            Some(&bot),
            Some(json!({"name": "ping"})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["code"], 50035);

    let (status, _) = node
        .call("DELETE", &format!("{base}/{id}"), Some(&bot), None)
        .await;
    assert_eq!(status, 204);
    let (status, gone) = node
        .call("GET", &format!("{base}/{id}"), Some(&bot), None)
        .await;
    assert_eq!((status, gone["code"].clone()), (404, json!(10063)));
    let (status, gone) = node
        .call("DELETE", &format!("{base}/{id}"), Some(&bot), None)
        .await;
    assert_eq!((status, gone["code"].clone()), (404, json!(10063)));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guild_commands_need_the_bot_in_the_guild() {
    let App {
        node,
        owner,
        bot,
        app_id,
        guild,
    } = app().await;
    let base = format!("/applications/{app_id}/guilds/{guild}/commands");
    let (status, created) = node.call("POST", &base, Some(&bot), Some(ping())).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["guild_id"], guild.as_str());
    assert!(created.get("contexts").is_none());
    // The same name globally is a different command.
    let (status, _) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/commands"),
            Some(&bot),
            Some(ping()),
        )
        .await;
    assert_eq!(status, 201);

    // A guild the bot is not in.
    let (other_guild, _) = node.guild(&owner, "elsewhere").await;
    let (status, body) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/guilds/{other_guild}/commands"),
            Some(&bot),
            Some(ping()),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!(50001)),
        "{body}"
    );

    // Permissions: none set.
    let (status, perms) = node
        .call("GET", &format!("{base}/permissions"), Some(&bot), None)
        .await;
    assert_eq!((status, perms), (200, json!([])));
    let id = created["id"].as_str().unwrap();
    let (status, body) = node
        .call("GET", &format!("{base}/{id}/permissions"), Some(&bot), None)
        .await;
    assert_eq!((status, body["code"].clone()), (404, json!(10066)));
    let (status, body) = node
        .call("GET", &format!("{base}/1/permissions"), Some(&bot), None)
        .await;
    assert_eq!((status, body["code"].clone()), (404, json!(10063)));

    // Deleting the guild deletes its commands with it.
    let (status, _) = node
        .call("DELETE", &format!("/guilds/{guild}"), Some(&owner), None)
        .await;
    assert_eq!(status, 204);
    let (status, body) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!((status, body["code"].clone()), (403, json!(50001)));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_application_may_manage_its_commands() {
    let App {
        node,
        owner,
        bot,
        app_id,
        ..
    } = app().await;
    let base = format!("/applications/{app_id}/commands");
    // The owner may, with their own token.
    let (status, _) = node.call("POST", &base, Some(&owner), Some(ping())).await;
    assert_eq!(status, 201);
    let (stranger, _) = node.register("stranger").await;
    for (method, body) in [
        ("GET", None),
        ("POST", Some(ping())),
        ("PUT", Some(json!([]))),
    ] {
        let (status, refused) = node.call(method, &base, Some(&stranger), body).await;
        assert_eq!(
            (status, refused["code"].clone()),
            (403, json!(20012)),
            "{method}"
        );
    }
    let (status, refused) = node
        .call("GET", "/applications/12345/commands", Some(&bot), None)
        .await;
    assert_eq!((status, refused["code"].clone()), (404, json!(10002)));
    let (status, _) = node.call("GET", &base, None, None).await;
    assert_eq!(status, 401);
    // Nothing the stranger sent was stored.
    let (_, list) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_overwrite_keeps_ids_and_versions_of_what_did_not_change() {
    let App {
        node, bot, app_id, ..
    } = app().await;
    let base = format!("/applications/{app_id}/commands");
    let set = json!([
        ping(),
        {"name": "help", "description": "Lists commands"},
        {"type": 3, "name": "Quote", "contexts": [0], "integration_types": [0, 1]},
    ]);
    let (status, first) = node.call("PUT", &base, Some(&bot), Some(set.clone())).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first.as_array().unwrap().len(), 3);
    assert_eq!(first[2]["contexts"], json!([0]));

    // The same set again changes nothing.
    let (_, second) = node.call("PUT", &base, Some(&bot), Some(set)).await;
    assert_eq!(first, second);

    // One changed, one gone, one new.
    let (status, third) = node
        .call(
            "PUT",
            &base,
            Some(&bot),
            Some(json!([
                ping(),
                {"name": "help", "description": "Lists every command"},
                {"name": "new", "description": "Brand new"},
            ])),
        )
        .await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(third[0]["id"], first[0]["id"]);
    assert_eq!(third[0]["version"], first[0]["version"]);
    assert_eq!(third[1]["id"], first[1]["id"]);
    assert_ne!(third[1]["version"], first[1]["version"]);
    let (_, list) = node.call("GET", &base, Some(&bot), None).await;
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 3);
    assert!(!names.contains(&"Quote"), "{names:?}");

    // A refused overwrite leaves the old set in place.
    let (status, refused) = node
        .call(
            "PUT",
            &base,
            Some(&bot),
            Some(json!([{"name": "a", "description": "a"}, {"name": "a", "description": "b"}])),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["errors"]["1"]["name"]["_errors"].is_array(),
        "{refused}"
    );
    let (_, after) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!(after, list);

    let (status, empty) = node.call("PUT", &base, Some(&bot), Some(json!([]))).await;
    assert_eq!((status, empty), (200, json!([])));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_commands_get_nested_form_errors_and_store_nothing() {
    let App {
        node, bot, app_id, ..
    } = app().await;
    let base = format!("/applications/{app_id}/commands");
    let cases = [
        (json!({"name": "Bad Name", "description": "d"}), "name"),
        (json!({"name": "x".repeat(33), "description": "d"}), "name"),
        (json!({"name": "ok", "description": ""}), "description"),
        (
            json!({"name": "ok", "description": "d".repeat(101)}),
            "description",
        ),
        (json!({"name": "ok", "description": "d", "type": 9}), "type"),
        (
            json!({"name": "ok", "description": "d", "options": [{"type": 99, "name": "o", "description": "o"}]}),
            "options.0.type",
        ),
        (
            json!({"name": "ok", "description": "d", "options": [{"type": 3, "name": "o", "description": "o", "choices": [{"name": "n", "value": "v".repeat(101)}]}]}),
            "options.0.choices.0.value",
        ),
        (
            json!({"name": "ok", "description": "d", "name_localizations": {"klingon": "ok"}}),
            "name_localizations.klingon",
        ),
        (
            json!({"name": "ok", "description": "d", "default_member_permissions": "lots"}),
            "default_member_permissions",
        ),
        (
            json!({"name": "ok", "description": "d", "nsfw": "yes"}),
            "nsfw",
        ),
        (json!("not an object"), ""),
    ];
    for (body, path) in cases {
        let (status, refused) = node
            .call("POST", &base, Some(&bot), Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {refused}");
        assert_eq!(refused["code"], 50035, "{body}: {refused}");
        let mut at = &refused["errors"];
        for segment in path.split('.').filter(|s| !s.is_empty()) {
            at = &at[segment];
        }
        assert!(
            at["_errors"].is_array(),
            "{body}: no error at {path}: {refused}"
        );
    }
    let (status, refused) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"name": "ok", "description": "d", "pad": "x".repeat(3 << 20)})),
        )
        .await;
    assert_eq!((status, refused["code"].clone()), (413, json!(40005)));
    let (_, list) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!(list, json!([]));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_holds_at_most_its_maximum() {
    let App {
        node, bot, app_id, ..
    } = app_with(Limits {
        application_commands_chat_input_max: 2,
        application_commands_context_menu_max: 1,
        ..Limits::default()
    })
    .await;
    let base = format!("/applications/{app_id}/commands");
    for name in ["a", "b"] {
        let (status, _) = node
            .call(
                "POST",
                &base,
                Some(&bot),
                Some(json!({"name": name, "description": "d"})),
            )
            .await;
        assert_eq!(status, 201);
    }
    let (status, full) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"name": "c", "description": "d"})),
        )
        .await;
    assert_eq!(
        (status, full["code"].clone()),
        (400, json!(30032)),
        "{full}"
    );
    // Replacing an existing one is still an upsert, not a new command.
    let (status, _) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"name": "b", "description": "again"})),
        )
        .await;
    assert_eq!(status, 200);
    // Another type has its own maximum.
    let (status, _) = node
        .call(
            "POST",
            &base,
            Some(&bot),
            Some(json!({"type": 2, "name": "User"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, full) = node
        .call(
            "PUT",
            &base,
            Some(&bot),
            Some(json!([{"type": 3, "name": "M1"}, {"type": 3, "name": "M2"}])),
        )
        .await;
    assert_eq!(
        (status, full["code"].clone()),
        (400, json!(30032)),
        "{full}"
    );
    let (_, list) = node.call("GET", &base, Some(&bot), None).await;
    assert_eq!(list.as_array().unwrap().len(), 3);
    node.stop().await;
}
