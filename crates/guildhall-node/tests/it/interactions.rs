//! Interactions over real sockets: a user invokes a slash command
//! (`POST /interactions`), the bot's session gets INTERACTION_CREATE with
//! the whole object, answers through the callback, and the user's session
//! sees the response with `interaction_metadata`; deferred responses,
//! @original and followups, a button that updates its message, a modal
//! and its submit, autocomplete, ephemeral messages for the invoker only,
//! and every refusal with Discord's error body and nothing created.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};

const USER_INTENTS: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;

struct Setup {
    node: TestNode,
    user: String,
    user_id: String,
    bot: String,
    bot_id: String,
    app_id: String,
    guild: String,
    channel: String,
    command: Value,
}

fn roll() -> Value {
    json!({"name": "roll", "description": "Rolls a die", "options": [
        {"type": 4, "name": "sides", "description": "Sides", "required": true, "min_value": 2, "max_value": 100},
        {"type": 3, "name": "colour", "description": "Colour", "autocomplete": true},
        {"type": 6, "name": "who", "description": "For whom"},
    ]})
}

fn test_limits(limits: Limits) -> Limits {
    Limits {
        rest_rate_limit_per_window: 1_000_000,
        webhook_rate_limit_per_window: 1_000_000,
        ..limits
    }
}

async fn setup_with(limits: Limits) -> Setup {
    setup_on(TestNode::with_limits(test_limits(limits)).await).await
}

/// A user, their guild, a bot in it and its /roll, on `node`.
async fn setup_on(node: TestNode) -> Setup {
    let (user, user_id) = node.register("alice").await;
    let (guild, channel) = node.guild(&user, "games").await;
    let (app_id, bot) = node.bot_in(&user, &guild).await;
    let (status, command) = node
        .call(
            "POST",
            &format!("/applications/{app_id}/guilds/{guild}/commands"),
            Some(&bot),
            Some(roll()),
        )
        .await;
    assert_eq!(status, 201, "{command}");
    let (status, me) = node.call("GET", "/users/@me", Some(&bot), None).await;
    assert_eq!(status, 200, "{me}");
    Setup {
        node,
        user,
        user_id,
        bot,
        bot_id: me["id"].as_str().unwrap().to_owned(),
        app_id,
        guild,
        channel,
        command,
    }
}

async fn setup() -> Setup {
    setup_with(Limits::default()).await
}

impl Setup {
    /// A session of `token` that has its guilds (so guild events reach it).
    async fn session(&self, token: &str, intents: u64) -> Client {
        let mut client = Client::connect(&self.node.ws).await;
        client.identify(token, intents).await;
        client.dispatch("GUILD_CREATE").await;
        client
    }

    fn invoke_body(&self, options: Value, nonce: &str) -> Value {
        json!({
            "type": 2, "application_id": self.app_id, "guild_id": self.guild,
            "channel_id": self.channel, "session_id": "s", "nonce": nonce,
            "data": {"id": self.command["id"], "name": "roll", "type": 1,
                     "version": self.command["version"], "options": options},
        })
    }

    async fn post_interaction(&self, token: &str, body: Value) -> (u16, Value) {
        self.node
            .call("POST", "/interactions", Some(token), Some(body))
            .await
    }

    /// Invokes /roll sides:6 as the user: the bot's INTERACTION_CREATE.
    async fn invoke(&self, bot: &mut Client) -> Value {
        let (status, body) = self
            .post_interaction(
                &self.user,
                self.invoke_body(json!([{"name": "sides", "type": 4, "value": 6}]), "n1"),
            )
            .await;
        assert_eq!(status, 204, "{body}");
        bot.dispatch("INTERACTION_CREATE").await["d"].clone()
    }

    async fn callback(&self, interaction: &Value, body: Value) -> (u16, Value) {
        self.callback_query(interaction, "", body).await
    }

    async fn callback_query(&self, interaction: &Value, query: &str, body: Value) -> (u16, Value) {
        let id = interaction["id"].as_str().unwrap();
        let token = interaction["token"].as_str().unwrap();
        self.node
            .call(
                "POST",
                &format!("/interactions/{id}/{token}/callback{query}"),
                None,
                Some(body),
            )
            .await
    }

    async fn hook(
        &self,
        method: &str,
        interaction: &Value,
        tail: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let token = interaction["token"].as_str().unwrap();
        self.node
            .call(
                method,
                &format!("/webhooks/{}/{token}{tail}", self.app_id),
                None,
                body,
            )
            .await
    }

    async fn created(&self) -> u64 {
        self.node
            .metric("guildhall_interactions_created_total")
            .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_command_reaches_the_bot_and_its_response_the_user() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let (status, body) = s
        .post_interaction(
            &s.user,
            s.invoke_body(
                json!([{"name": "sides", "type": 4, "value": 6}, {"name": "who", "value": s.user_id}]),
                "n1",
            ),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let interaction = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    // The complete object.
    assert_eq!(interaction["type"], 2);
    assert_eq!(interaction["version"], 1);
    assert_eq!(interaction["application_id"], s.app_id.as_str());
    assert_eq!(interaction["guild_id"], s.guild.as_str());
    assert_eq!(interaction["channel_id"], s.channel.as_str());
    assert_eq!(interaction["channel"]["id"], s.channel.as_str());
    assert_eq!(interaction["guild"]["id"], s.guild.as_str());
    assert!(interaction["token"].as_str().unwrap().len() >= 60);
    assert_eq!(interaction["data"]["id"], s.command["id"]);
    assert_eq!(interaction["data"]["name"], "roll");
    assert_eq!(interaction["data"]["type"], 1);
    assert_eq!(interaction["data"]["guild_id"], s.guild.as_str());
    assert_eq!(
        interaction["data"]["options"][0],
        json!({"name": "sides", "type": 4, "value": 6})
    );
    assert_eq!(
        interaction["data"]["options"][1]["value"],
        s.user_id.as_str()
    );
    assert_eq!(
        interaction["data"]["resolved"]["users"][s.user_id.as_str()]["username"],
        "alice"
    );
    assert_eq!(interaction["member"]["user"]["id"], s.user_id.as_str());
    assert!(interaction["member"]["permissions"].is_string());
    assert!(interaction["app_permissions"].is_string());
    assert!(interaction.get("user").is_none());
    assert_eq!(interaction["entitlements"], json!([]));
    assert_eq!(
        interaction["authorizing_integration_owners"],
        json!({"0": s.guild})
    );
    assert_eq!(interaction["context"], 0);
    assert!(interaction["locale"].is_string());
    assert!(interaction["attachment_size_limit"].is_u64());
    // An unmodified library reads it (twilight's model is the strictest
    // decoder of interactions among the four).
    let typed: twilight_model::application::interaction::Interaction =
        serde_json::from_value(interaction.clone()).unwrap();
    assert_eq!(
        typed.id.get().to_string(),
        interaction["id"].as_str().unwrap()
    );
    let id = interaction["id"].as_str().unwrap().to_owned();
    let seen = user.dispatch("INTERACTION_CREATE").await;
    assert_eq!(seen["d"], json!({"id": id, "nonce": "n1"}));

    let (status, answer) = s
        .callback_query(
            &interaction,
            "?with_response=true",
            // Mentions in a response: users parse by default; @everyone
            // does not without allowed_mentions.
            json!({"type": 4, "data": {"content": format!("rolled 4 <@{}> @everyone", s.user_id)}}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["interaction"]["id"], id.as_str());
    assert_eq!(answer["interaction"]["type"], 2);
    assert_eq!(answer["interaction"]["response_message_loading"], false);
    assert_eq!(answer["interaction"]["response_message_ephemeral"], false);
    assert_eq!(answer["resource"]["type"], 4);
    let message_id = answer["resource"]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        answer["interaction"]["response_message_id"],
        message_id.as_str()
    );

    // The two travel different paths (the user's sessions, the guild's
    // stream): either may come first.
    let mut seen = std::collections::HashMap::new();
    while seen.len() < 2 {
        let frame = user.next().await.unwrap();
        if let Some(name @ ("INTERACTION_SUCCESS" | "MESSAGE_CREATE")) = frame["t"].as_str() {
            seen.insert(name.to_owned(), frame["d"].clone());
        }
    }
    assert_eq!(
        seen["INTERACTION_SUCCESS"],
        json!({"id": id, "nonce": "n1"})
    );
    let created = seen["MESSAGE_CREATE"].clone();
    assert_eq!(created["id"], message_id.as_str());
    let rolled = format!("rolled 4 <@{}> @everyone", s.user_id);
    assert_eq!(created["content"], rolled.as_str());
    assert_eq!(
        created["mentions"][0]["id"],
        s.user_id.as_str(),
        "{created}"
    );
    assert_eq!(created["mention_everyone"], false);
    assert_eq!(created["type"], 20);
    assert_eq!(created["author"]["id"], s.bot_id.as_str());
    assert_eq!(created["author"]["bot"], true);
    assert_eq!(created["webhook_id"], s.app_id.as_str());
    assert_eq!(created["application_id"], s.app_id.as_str());
    let typed: twilight_model::channel::Message = serde_json::from_value(created.clone()).unwrap();
    assert!(typed.interaction_metadata.is_some());
    let metadata = &created["interaction_metadata"];
    assert_eq!(metadata["id"], id.as_str());
    assert_eq!(metadata["type"], 2);
    assert_eq!(metadata["user"]["id"], s.user_id.as_str());
    assert_eq!(
        metadata["authorizing_integration_owners"],
        json!({"0": s.guild})
    );

    // A second initial response.
    let (status, again) = s
        .callback(
            &interaction,
            json!({"type": 4, "data": {"content": "twice"}}),
        )
        .await;
    assert_eq!(
        (status, again["code"].clone()),
        (400, json!(40060)),
        "{again}"
    );

    // @original reads the response; history holds it, durable.
    let (status, original) = s
        .hook("GET", &interaction, "/messages/@original", None)
        .await;
    assert_eq!(status, 200, "{original}");
    assert_eq!(original["content"], rolled.as_str());
    assert_eq!(original["mentions"][0]["id"], s.user_id.as_str());
    let (status, history) = s
        .node
        .call(
            "GET",
            &format!("/channels/{}/messages", s.channel),
            Some(&s.user),
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(history[0]["id"], message_id.as_str());
    assert_eq!(history[0]["interaction_metadata"]["id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deferred_response_then_original_then_followups() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    // Followups need the initial response first.
    let (status, early) = s
        .hook("POST", &interaction, "", Some(json!({"content": "early"})))
        .await;
    assert_eq!(
        (status, early["code"].clone()),
        (404, json!(10015)),
        "{early}"
    );

    let (status, body) = s.callback(&interaction, json!({"type": 5})).await;
    assert_eq!(status, 204, "{body}");
    let thinking = user.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(thinking["flags"], 128);
    assert_eq!(thinking["content"], "");
    let original_id = thinking["id"].as_str().unwrap().to_owned();

    let (status, edited) = s
        .hook(
            "PATCH",
            &interaction,
            "/messages/@original",
            Some(json!({"content": "done thinking"})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["id"], original_id.as_str());
    assert_eq!(edited["flags"], 0);
    let update = user.dispatch("MESSAGE_UPDATE").await["d"].clone();
    assert_eq!(update["content"], "done thinking");
    assert_eq!(update["flags"], 0);

    let (status, followup) = s
        .hook(
            "POST",
            &interaction,
            "",
            Some(json!({"content": "one more"})),
        )
        .await;
    assert_eq!(status, 200, "{followup}");
    let followup_id = followup["id"].as_str().unwrap().to_owned();
    let created = user.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(created["id"], followup_id.as_str());
    assert_eq!(
        created["interaction_metadata"]["original_response_message_id"],
        original_id.as_str()
    );
    let (status, changed) = s
        .hook(
            "PATCH",
            &interaction,
            &format!("/messages/{followup_id}"),
            Some(json!({"content": "one more, edited"})),
        )
        .await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["content"], "one more, edited");
    let (status, _) = s
        .hook(
            "DELETE",
            &interaction,
            &format!("/messages/{followup_id}"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let deleted = user.dispatch("MESSAGE_DELETE").await["d"].clone();
    assert_eq!(deleted["id"], followup_id.as_str());
    // A message that is not this interaction's is unknown to its token.
    let (status, other) = s
        .hook(
            "GET",
            &interaction,
            &format!("/messages/{followup_id}"),
            None,
        )
        .await;
    assert_eq!((status, other["code"].clone()), (404, json!(10008)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_click_updates_its_message() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let buttons = json!([{"type": 1, "components": [
        {"type": 2, "style": 1, "label": "Go", "custom_id": "go"},
        {"type": 2, "style": 2, "label": "Off", "custom_id": "off", "disabled": true},
    ]}]);
    let (status, answer) = s
        .callback_query(
            &interaction,
            "?with_response=true",
            json!({"type": 4, "data": {"content": "press it", "components": buttons}}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let message_id = answer["resource"]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // Echoed as sent, each component numbered in document order.
    let numbered = json!([{"type": 1, "id": 1, "components": [
        {"type": 2, "id": 2, "style": 1, "label": "Go", "custom_id": "go"},
        {"type": 2, "id": 3, "style": 2, "label": "Off", "custom_id": "off", "disabled": true},
    ]}]);
    assert_eq!(answer["resource"]["message"]["components"], numbered);
    user.dispatch("MESSAGE_CREATE").await;

    let click = |custom_id: &str, kind: u64| {
        json!({"type": 3, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
               "message_id": message_id, "nonce": "c1",
               "data": {"custom_id": custom_id, "component_type": kind}})
    };
    // Refused: an unknown custom_id, the wrong type, a disabled button.
    let before = s.created().await;
    for (custom_id, kind, field) in [
        ("nope", 2, "custom_id"),
        ("go", 3, "component_type"),
        ("off", 2, "custom_id"),
    ] {
        let (status, refused) = s.post_interaction(&s.user, click(custom_id, kind)).await;
        assert_eq!(status, 400, "{refused}");
        assert_eq!(refused["code"], 50035);
        assert!(refused["errors"][field].is_object(), "{refused}");
    }
    assert_eq!(s.created().await, before);

    let (status, body) = s.post_interaction(&s.user, click("go", 2)).await;
    assert_eq!(status, 204, "{body}");
    let pressed = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(pressed["type"], 3);
    assert_eq!(
        pressed["data"],
        json!({"custom_id": "go", "component_type": 2})
    );
    assert_eq!(pressed["message"]["id"], message_id.as_str());
    // A component's interaction cannot autocomplete.
    let (status, _) = s
        .callback(&pressed, json!({"type": 8, "data": {"choices": []}}))
        .await;
    assert_eq!(status, 400);
    let (status, body) = s
        .callback(
            &pressed,
            json!({"type": 7, "data": {"content": "pressed", "components": []}}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let update = user.dispatch("MESSAGE_UPDATE").await["d"].clone();
    assert_eq!(update["id"], message_id.as_str());
    assert_eq!(update["content"], "pressed");
    assert_eq!(update["components"], json!([]));
    // @original of a component's update is the component's message.
    let (status, original) = s.hook("GET", &pressed, "/messages/@original", None).await;
    assert_eq!(status, 200, "{original}");
    assert_eq!(original["id"], message_id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modal_and_its_submit() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let modal = json!({"custom_id": "form", "title": "Who are you", "components": [
        {"type": 1, "components": [{"type": 4, "custom_id": "name", "style": 1, "label": "Name", "max_length": 10}]}
    ]});
    let (status, body) = s
        .callback(&interaction, json!({"type": 9, "data": modal}))
        .await;
    assert_eq!(status, 204, "{body}");
    let shown = user.dispatch("INTERACTION_MODAL_CREATE").await["d"].clone();
    assert_eq!(shown["id"], interaction["id"]);
    assert_eq!(shown["custom_id"], "form");
    assert_eq!(shown["title"], "Who are you");
    assert_eq!(shown["application"]["id"], s.app_id.as_str());

    let submit = |custom_id: &str, value: &str| {
        json!({"type": 5, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
               "nonce": "m1", "data": {"id": interaction["id"], "custom_id": custom_id, "components": [
                   {"type": 1, "components": [{"type": 4, "custom_id": "name", "value": value}]}]}})
    };
    let before = s.created().await;
    for (custom_id, value) in [("other", "Ada"), ("form", "far too long a name")] {
        let (status, refused) = s.post_interaction(&s.user, submit(custom_id, value)).await;
        assert_eq!(
            (status, refused["code"].clone()),
            (400, json!(50035)),
            "{refused}"
        );
    }
    // Another user was not shown the modal.
    let (carol, _) = s.node.register("carol").await;
    let code = s.node.invite(&s.user, &s.channel).await;
    let (status, _) = s
        .node
        .call("POST", &format!("/invites/{code}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200);
    let (status, refused) = s.post_interaction(&carol, submit("form", "Ada")).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    assert_eq!(s.created().await, before);

    let (status, body) = s.post_interaction(&s.user, submit("form", "Ada")).await;
    assert_eq!(status, 204, "{body}");
    let submitted = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(submitted["type"], 5);
    assert_eq!(submitted["data"]["custom_id"], "form");
    // A command showed it: no message.
    assert!(
        submitted.get("message").is_none_or(Value::is_null),
        "{submitted}"
    );
    assert_eq!(
        submitted["data"]["components"][0]["components"][0]["value"],
        "Ada"
    );
    let (status, body) = s
        .callback(
            &submitted,
            json!({"type": 4, "data": {"content": "hello Ada"}}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let created = user.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(created["interaction_metadata"]["type"], 5);
    assert_eq!(
        created["interaction_metadata"]["triggering_interaction_metadata"]["id"],
        interaction["id"]
    );
}

/// A modal a button showed: its submit carries the button's message
/// ("for components or modals triggered by components, the message they
/// were attached to"); discord.js's `isFromMessage()` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modal_from_a_button_carries_its_message() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let row = json!([{"type": 1, "components": [{"type": 2, "style": 1, "label": "Ask", "custom_id": "ask"}]}]);
    let (status, sent) = s
        .node
        .call(
            "POST",
            &format!("/channels/{}/messages", s.channel),
            Some(&s.bot),
            Some(json!({"content": "ask me", "components": row})),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    let click = json!({"type": 3, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
        "message_id": sent["id"], "data": {"custom_id": "ask", "component_type": 2}});
    let (status, body) = s.post_interaction(&s.user, click).await;
    assert_eq!(status, 204, "{body}");
    let clicked = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    let modal = json!({"custom_id": "form", "title": "Ask", "components": [
        {"type": 1, "components": [{"type": 4, "custom_id": "q", "style": 1, "label": "Question"}]}
    ]});
    let (status, body) = s
        .callback(&clicked, json!({"type": 9, "data": modal}))
        .await;
    assert_eq!(status, 204, "{body}");
    user.dispatch("INTERACTION_MODAL_CREATE").await;
    let submit = json!({"type": 5, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
        "data": {"id": clicked["id"], "custom_id": "form", "components": [
            {"type": 1, "components": [{"type": 4, "custom_id": "q", "value": "why"}]}]}});
    let (status, body) = s.post_interaction(&s.user, submit).await;
    assert_eq!(status, 204, "{body}");
    let submitted = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(submitted["type"], 5);
    assert_eq!(submitted["message"]["id"], sent["id"]);
    assert_eq!(
        submitted["message"]["components"],
        json!([{"type": 1, "id": 1, "components": [
            {"type": 2, "id": 2, "style": 1, "label": "Ask", "custom_id": "ask"}]}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autocomplete_answers_the_user() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let mut body = s.invoke_body(
        json!([{"name": "colour", "type": 3, "value": "re", "focused": true}]),
        "a1",
    );
    body["type"] = json!(4);
    let (status, answer) = s.post_interaction(&s.user, body).await;
    assert_eq!(status, 204, "{answer}");
    let interaction = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(interaction["type"], 4);
    assert_eq!(interaction["data"]["options"][0]["focused"], true);
    assert_eq!(interaction["data"]["options"][0]["value"], "re");
    // Autocomplete takes choices, not a message.
    let (status, refused) = s
        .callback(&interaction, json!({"type": 4, "data": {"content": "no"}}))
        .await;
    assert_eq!((status, refused["code"].clone()), (400, json!(50035)));
    // "colour" is a STRING option: a number is no value of it, nor is a
    // string over 100 characters; refused where they are, still answerable.
    let (status, refused) = s
        .callback(
            &interaction,
            json!({"type": 8, "data": {"choices": [
                {"name": "Red", "value": "red"}, {"name": "Seven", "value": 7},
                {"name": "Long", "value": "x".repeat(101)}]}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    let at = &refused["errors"]["data"]["choices"];
    assert_eq!(
        at["1"]["value"]["_errors"][0]["code"], "BASE_TYPE_STRING",
        "{refused}"
    );
    assert_eq!(
        at["2"]["value"]["_errors"][0]["code"], "BASE_TYPE_BAD_LENGTH",
        "{refused}"
    );
    assert!(at.get("0").is_none(), "{refused}");
    let choices = json!([{"name": "Red", "value": "red"}, {"name": "Rose", "value": "rose"}]);
    let (status, body) = s
        .callback(
            &interaction,
            json!({"type": 8, "data": {"choices": choices}}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let answer = user
        .dispatch("APPLICATION_COMMAND_AUTOCOMPLETE_RESPONSE")
        .await;
    assert_eq!(answer["d"]["choices"], choices);
    assert_eq!(answer["d"]["nonce"], "a1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_messages_reach_only_the_invoker() {
    let s = setup().await;
    let (carol, _) = s.node.register("carol").await;
    let code = s.node.invite(&s.user, &s.channel).await;
    let (status, _) = s
        .node
        .call("POST", &format!("/invites/{code}"), Some(&carol), None)
        .await;
    assert_eq!(status, 200);
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let mut other = s.session(&carol, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let (status, answer) = s
        .callback_query(
            &interaction,
            "?with_response=true",
            json!({"type": 4, "data": {"content": "for you only", "flags": 64}}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["interaction"]["response_message_ephemeral"], true);
    let secret_id = answer["resource"]["message"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let seen = user.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(seen["id"], secret_id.as_str());
    assert_eq!(seen["flags"], 64);
    // A public followup after it: the other member's first MESSAGE_CREATE
    // is that one (the ephemeral never entered the guild's stream).
    let (status, public) = s
        .hook(
            "POST",
            &interaction,
            "",
            Some(json!({"content": "for everyone"})),
        )
        .await;
    assert_eq!(status, 200, "{public}");
    let first = other.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(first["id"], public["id"]);
    // History and direct reads leave it out for others.
    let (_, history) = s
        .node
        .call(
            "GET",
            &format!("/channels/{}/messages", s.channel),
            Some(&carol),
            None,
        )
        .await;
    assert!(
        history
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["id"] != secret_id.as_str())
    );
    let (status, _) = s
        .node
        .call(
            "GET",
            &format!("/channels/{}/messages/{secret_id}", s.channel),
            Some(&carol),
            None,
        )
        .await;
    assert_eq!(status, 404);
    // An ephemeral followup, too, goes to the invoker only.
    let (status, _) = s
        .hook(
            "POST",
            &interaction,
            "",
            Some(json!({"content": "psst", "flags": 64})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, public2) = s
        .hook("POST", &interaction, "", Some(json!({"content": "loud"})))
        .await;
    assert_eq!(status, 200);
    let next = other.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(next["id"], public2["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_callback_is_unknown_and_the_user_hears_of_failure() {
    // The deadline driven down through the limits: the test waits for the
    // failure event, it does not time anything.
    let s = setup_with(Limits {
        interaction_response_deadline_ms: 50,
        interaction_sweep_interval_ms: 10,
        ..Limits::default()
    })
    .await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let failure = user.dispatch("INTERACTION_FAILURE").await;
    assert_eq!(
        failure["d"],
        json!({"id": interaction["id"], "nonce": "n1"})
    );
    let (status, late) = s
        .callback(
            &interaction,
            json!({"type": 4, "data": {"content": "late"}}),
        )
        .await;
    assert_eq!(
        (status, late["code"].clone()),
        (404, json!(10062)),
        "{late}"
    );
    // Its token serves no followup either.
    let (status, hook) = s
        .hook("POST", &interaction, "", Some(json!({"content": "late"})))
        .await;
    assert_eq!(
        (status, hook["code"].clone()),
        (404, json!(10015)),
        "{hook}"
    );
    assert_eq!(
        s.node.metric("guildhall_interactions_failed_total").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_have_discords_bodies_and_create_nothing() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let before = s.created().await;
    let cases: Vec<(Value, &str)> = vec![
        // An option the command does not have.
        (
            json!([{"name": "sides", "value": 6}, {"name": "nope", "value": 1}]),
            "1",
        ),
        // The wrong type, out of bounds, the wrong declared type.
        (json!([{"name": "sides", "value": "six"}]), "0"),
        (json!([{"name": "sides", "value": 1000}]), "0"),
        (json!([{"name": "sides", "type": 3, "value": 6}]), "0"),
        // A user that does not exist.
        (
            json!([{"name": "sides", "value": 6}, {"name": "who", "value": "12345"}]),
            "",
        ),
    ];
    for (options, index) in cases {
        let (status, body) = s
            .post_interaction(&s.user, s.invoke_body(options.clone(), "x"))
            .await;
        assert_eq!(
            (status, body["code"].clone()),
            (400, json!(50035)),
            "{options}: {body}"
        );
        if !index.is_empty() {
            assert!(
                body["errors"]["data"]["options"][index].is_object(),
                "{body}"
            );
        }
    }
    // A required option missing.
    let (status, body) = s
        .post_interaction(&s.user, s.invoke_body(json!([]), "x"))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!(50035)),
        "{body}"
    );
    // An outdated version, an unknown command, an unknown application.
    let mut outdated = s.invoke_body(json!([{"name": "sides", "value": 6}]), "x");
    outdated["data"]["version"] = json!("1");
    let (status, body) = s.post_interaction(&s.user, outdated).await;
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!(50035)),
        "{body}"
    );
    let mut unknown = s.invoke_body(json!([]), "x");
    unknown["data"]["id"] = json!("1");
    let (status, body) = s.post_interaction(&s.user, unknown).await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!(10063)),
        "{body}"
    );
    let mut no_app = s.invoke_body(json!([]), "x");
    no_app["application_id"] = json!("1");
    let (status, body) = s.post_interaction(&s.user, no_app).await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!(10002)),
        "{body}"
    );
    // Bots do not create interactions.
    let (status, body) = s
        .post_interaction(
            &s.bot,
            s.invoke_body(json!([{"name": "sides", "value": 6}]), "x"),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!(20001)),
        "{body}"
    );
    // A user outside the guild.
    let (stranger, _) = s.node.register("stranger").await;
    let (status, body) = s
        .post_interaction(
            &stranger,
            s.invoke_body(json!([{"name": "sides", "value": 6}]), "x"),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (403, json!(50001)),
        "{body}"
    );
    assert_eq!(s.created().await, before);

    let interaction = s.invoke(&mut bot).await;
    let id = interaction["id"].as_str().unwrap();
    // The wrong token, an unknown interaction, an unsupported callback.
    let (status, body) = s
        .node
        .call(
            "POST",
            &format!("/interactions/{id}/not-the-token/callback"),
            None,
            Some(json!({"type": 4, "data": {"content": "x"}})),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (401, json!(50027)),
        "{body}"
    );
    let token = interaction["token"].as_str().unwrap();
    let (status, body) = s
        .node
        .call(
            "POST",
            &format!("/interactions/1/{token}/callback"),
            None,
            Some(json!({"type": 4})),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!(10062)),
        "{body}"
    );
    for bad in [
        json!({"type": 10}),
        json!({"type": 12}),
        json!({"type": 4, "data": {"content": ""}}),
        json!({"type": 4, "data": {"content": "x", "flags": 128}}),
        json!({"type": 4, "data": {"content": "x", "poll": {}}}),
        json!({"type": 7, "data": {"content": "x"}}),
    ] {
        let (status, body) = s.callback(&interaction, bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            matches!(body["code"].as_u64(), Some(50035 | 50006)),
            "{bad}: {body}"
        );
    }
    // Nothing was stored by the refused callbacks: the interaction still
    // takes its one response.
    let (status, body) = s
        .callback(&interaction, json!({"type": 4, "data": {"content": "ok"}}))
        .await;
    assert_eq!(status, 204, "{body}");
    // The interaction's webhook with a token that is none of the app's.
    let (status, body) = s
        .node
        .call(
            "POST",
            &format!("/webhooks/{}/not-a-token", s.app_id),
            None,
            Some(json!({"content": "x"})),
        )
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (401, json!(50027)),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_on_a_bot_message_starts_a_component_interaction() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let row = json!([{"type": 1, "components": [{"type": 3, "custom_id": "pick", "max_values": 2,
        "options": [{"label": "A", "value": "a"}, {"label": "B", "value": "b"}]}]}]);
    // Users do not send components.
    let (status, refused) = s
        .node
        .call(
            "POST",
            &format!("/channels/{}/messages", s.channel),
            Some(&s.user),
            Some(json!({"content": "menu", "components": row})),
        )
        .await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    let (status, sent) = s
        .node
        .call(
            "POST",
            &format!("/channels/{}/messages", s.channel),
            Some(&s.bot),
            Some(json!({"content": "menu", "components": row})),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(
        sent["components"],
        json!([{"type": 1, "id": 1, "components": [{"type": 3, "id": 2, "custom_id": "pick", "max_values": 2,
            "options": [{"label": "A", "value": "a"}, {"label": "B", "value": "b"}]}]}])
    );
    let select = |values: Value| {
        json!({"type": 3, "application_id": s.app_id, "channel_id": s.channel,
               "message_id": sent["id"], "data": {"custom_id": "pick", "type": 3, "values": values}})
    };
    let (status, refused) = s.post_interaction(&s.user, select(json!(["z"]))).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    let (status, body) = s.post_interaction(&s.user, select(json!(["a", "b"]))).await;
    assert_eq!(status, 204, "{body}");
    let picked = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(
        picked["data"],
        json!({"custom_id": "pick", "component_type": 3, "values": ["a", "b"]})
    );
    assert_eq!(picked["message"]["id"], sent["id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_refuse_with_429() {
    let s = setup_with(Limits {
        interactions_per_user_per_minute_max: 2,
        interactions_pending_per_application_max: 1,
        ..Limits::default()
    })
    .await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let first = s.invoke(&mut bot).await;
    // The application's one pending place is taken: shared 429.
    let body = s.invoke_body(json!([{"name": "sides", "value": 6}]), "x");
    let response = s
        .node
        .http
        .post(format!("{}/interactions", s.node.base))
        .header("authorization", s.user.as_str())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["x-ratelimit-scope"], "shared");
    let (status, answered) = s
        .callback(&first, json!({"type": 4, "data": {"content": "ok"}}))
        .await;
    assert_eq!(status, 204, "{answered}");
    // The user's window: two a minute.
    s.invoke(&mut bot).await;
    let (status, limited) = s.post_interaction(&s.user, body).await;
    assert_eq!(status, 429, "{limited}");
    assert!(limited["retry_after"].as_f64().unwrap() > 0.0);
    assert_eq!(
        s.node.metric("guildhall_interactions_refused_total").await,
        2
    );
}

/// A command's `default_member_permissions` gates who may invoke it, as
/// Discord documents: a member without every bit is refused (50013) and
/// nothing is created, the owner (every bit) is served; `"0"` leaves
/// administrators only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_member_permissions_gate_who_may_invoke() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let code = s.node.invite(&s.user, &s.channel).await;
    let (member, _) = s.node.register("member").await;
    let (status, body) = s
        .node
        .call("POST", &format!("/invites/{code}"), Some(&member), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let commands = format!("/applications/{}/guilds/{}/commands", s.app_id, s.guild);
    for (required, name) in [("32", "manage"), ("0", "admins")] {
        let (status, command) = s
            .node
            .call(
                "POST",
                &commands,
                Some(&s.bot),
                Some(json!({"name": name, "description": "Gated",
                    "default_member_permissions": required})),
            )
            .await;
        assert_eq!(status, 201, "{command}");
        let body = json!({
            "type": 2, "application_id": s.app_id, "guild_id": s.guild,
            "channel_id": s.channel, "session_id": "s", "nonce": name,
            "data": {"id": command["id"], "name": name, "type": 1,
                     "version": command["version"]},
        });
        let before = s.created().await;
        let (status, refused) = s.post_interaction(&member, body.clone()).await;
        assert_eq!(
            (status, refused["code"].clone()),
            (403, json!(50013)),
            "{name}"
        );
        assert_eq!(s.created().await, before, "{name}: nothing created");
        // The guild's owner holds every permission.
        let (status, answer) = s.post_interaction(&s.user, body).await;
        assert_eq!(status, 204, "{name}: {answer}");
        let interaction = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
        assert_eq!(interaction["data"]["name"], name);
    }
}

/// USER, ROLE and MENTIONABLE options resolve as Discord documents them:
/// `resolved.users` and `resolved.members` (a member without `user`,
/// `deaf` and `mute`) for a user, `resolved.roles` for a role; a role
/// that does not exist is refused and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_and_role_options_resolve_members_and_roles() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let (status, role) = s
        .node
        .call(
            "POST",
            &format!("/guilds/{}/roles", s.guild),
            Some(&s.user),
            Some(json!({"name": "Referees"})),
        )
        .await;
    assert_eq!(status, 200, "{role}");
    let role_id = role["id"].as_str().unwrap().to_owned();
    let (status, command) = s
        .node
        .call(
            "POST",
            &format!("/applications/{}/guilds/{}/commands", s.app_id, s.guild),
            Some(&s.bot),
            Some(
                json!({"name": "assign", "description": "Assigns", "options": [
                    {"type": 6, "name": "who", "description": "Who", "required": true},
                    {"type": 8, "name": "role", "description": "Role", "required": true},
                    {"type": 9, "name": "either", "description": "Either"},
                ]}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{command}");
    let body = |role: &str, either: &str| {
        json!({
            "type": 2, "application_id": s.app_id, "guild_id": s.guild,
            "channel_id": s.channel, "session_id": "s", "nonce": "r",
            "data": {"id": command["id"], "name": "assign", "type": 1,
                     "version": command["version"], "options": [
                {"name": "who", "type": 6, "value": s.user_id},
                {"name": "role", "type": 8, "value": role},
                {"name": "either", "type": 9, "value": either},
            ]},
        })
    };
    let (status, answer) = s.post_interaction(&s.user, body(&role_id, &role_id)).await;
    assert_eq!(status, 204, "{answer}");
    let resolved = bot.dispatch("INTERACTION_CREATE").await["d"]["data"]["resolved"].clone();
    assert_eq!(resolved["users"][&s.user_id]["id"], s.user_id.as_str());
    let member = &resolved["members"][&s.user_id];
    assert!(member["joined_at"].is_string(), "{resolved}");
    assert!(member["roles"].is_array(), "{resolved}");
    for absent in ["user", "deaf", "mute"] {
        assert!(member.get(absent).is_none(), "{absent}: {resolved}");
    }
    assert_eq!(
        resolved["roles"][&role_id]["name"], "Referees",
        "{resolved}"
    );

    let before = s.created().await;
    let (status, refused) = s.post_interaction(&s.user, body("1234567", &role_id)).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    let (status, refused) = s.post_interaction(&s.user, body(&role_id, "7654321")).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    assert_eq!(s.created().await, before, "nothing created");
}

/// Components as a bot's channel messages take them (the component
/// reference): an `IS_COMPONENTS_V2` layout is stored and echoed with its
/// ids, its text displays' mentions are read, the legacy fields are
/// refused beside it, a layout component without the flag is refused where
/// it is, an edit replaces components and keeps the flag (it cannot be
/// unset), and SUPPRESS_EMBEDS goes on and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_messages_take_components_v2_layouts_and_edits() {
    let s = setup().await;
    let path = format!("/channels/{}/messages", s.channel);
    let post = |body: Value| {
        let path = path.clone();
        let node = &s.node;
        let bot = s.bot.clone();
        async move { node.call("POST", &path, Some(&bot), Some(body)).await }
    };
    let layout = json!([{"type": 17, "accent_color": 3447003, "components": [
        {"type": 9, "components": [{"type": 10, "content": format!("Hello <@{}>", s.user_id)}],
         "accessory": {"type": 2, "style": 1, "label": "Wave", "custom_id": "wave"}},
        {"type": 14, "divider": true},
    ]}]);
    let (status, sent) = post(json!({"flags": 1 << 15, "components": layout})).await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["flags"], 1 << 15);
    assert_eq!(sent["content"], "");
    assert_eq!(
        sent["components"],
        json!([{"type": 17, "id": 1, "accent_color": 3447003, "components": [
            {"type": 9, "id": 2, "components": [{"type": 10, "id": 3, "content": format!("Hello <@{}>", s.user_id)}],
             "accessory": {"type": 2, "id": 4, "style": 1, "label": "Wave", "custom_id": "wave"}},
            {"type": 14, "id": 5, "divider": true},
        ]}])
    );
    assert_eq!(sent["mentions"][0]["id"], s.user_id.as_str(), "{sent}");

    // Content beside IS_COMPONENTS_V2, a v2 message without components,
    // and a layout component without the flag: refused, nothing stored.
    let (status, refused) =
        post(json!({"flags": 1 << 15, "content": "hi", "components": layout})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["errors"]["content"]["_errors"][0]["code"],
        "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2"
    );
    let (status, refused) = post(json!({"flags": 1 << 15})).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50006)),
        "{refused}"
    );
    let (status, refused) =
        post(json!({"content": "x", "components": [{"type": 10, "content": "t"}]})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["errors"]["components"]["0"]["type"]["_errors"][0]["code"],
        "UNION_TYPE_CHOICES"
    );
    let (status, refused) = post(json!({"content": "x", "flags": 1 << 6})).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["errors"]["flags"]["_errors"][0]["code"],
        "MESSAGE_FLAGS_INVALID"
    );
    // Every problem of a tree at once, each where it is.
    let (status, refused) = post(
        json!({"content": "x", "components": [{"type": 1, "components": [
            {"type": 2, "style": 1, "label": "No id"},
            {"type": 2, "style": 5, "label": "No url"},
        ]}]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    let row = &refused["errors"]["components"]["0"]["components"];
    assert_eq!(
        row["0"]["custom_id"]["_errors"][0]["code"],
        "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED"
    );
    assert_eq!(
        row["1"]["url"]["_errors"][0]["code"],
        "BUTTON_COMPONENT_URL_REQUIRED"
    );
    let (status, history) = s
        .node
        .call("GET", &format!("{path}?limit=10"), Some(&s.bot), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(history.as_array().map(Vec::len), Some(1), "{history}");

    // An edit replaces the components under the flag the message has, and
    // a `flags` without it does not unset it.
    let message = format!("{path}/{}", sent["id"].as_str().unwrap());
    let (status, edited) = s
        .node
        .call(
            "PATCH",
            &message,
            Some(&s.bot),
            Some(json!({"flags": 0, "components": [{"type": 10, "content": "Bye"}]})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["flags"], 1 << 15);
    assert_eq!(
        edited["components"],
        json!([{"type": 10, "id": 1, "content": "Bye"}])
    );
    assert_eq!(
        edited["mentions"],
        json!([]),
        "mentions follow the new text"
    );
    let (status, refused) = s
        .node
        .call(
            "PATCH",
            &message,
            Some(&s.bot),
            Some(json!({"content": "back"})),
        )
        .await;
    assert_eq!(status, 400, "{refused}");

    // A legacy message: components edited in, SUPPRESS_EMBEDS on and off.
    let (status, plain) = post(json!({"content": "plain"})).await;
    assert_eq!(status, 200, "{plain}");
    let plain_path = format!("{path}/{}", plain["id"].as_str().unwrap());
    let (status, edited) = s
        .node
        .call(
            "PATCH",
            &plain_path,
            Some(&s.bot),
            Some(
                json!({"flags": 4, "components": [{"type": 1, "components": [
                {"type": 2, "style": 5, "label": "Docs", "url": "https://example.com"}]}]}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["flags"], 4);
    assert_eq!(
        edited["components"][0]["components"][0]["url"],
        "https://example.com"
    );
    let (status, edited) = s
        .node
        .call(
            "PATCH",
            &plain_path,
            Some(&s.bot),
            Some(json!({"flags": 0, "components": null})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(
        (edited["flags"].clone(), edited["components"].clone()),
        (json!(0), json!([]))
    );
}

/// A user, role or channel select's values are ids: the interaction
/// carries what they name in `data.resolved` (a user with its member and
/// permissions, a channel), and a value that names nothing, or a channel
/// of a type the menu does not offer, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_populated_selects_resolve_their_values() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let rows = json!([
        {"type": 1, "components": [{"type": 5, "custom_id": "who"}]},
        {"type": 1, "components": [{"type": 8, "custom_id": "where", "channel_types": [2]}]},
        {"type": 1, "components": [{"type": 8, "custom_id": "any"}]},
    ]);
    let (status, sent) = s
        .node
        .call(
            "POST",
            &format!("/channels/{}/messages", s.channel),
            Some(&s.bot),
            Some(json!({"content": "pick", "components": rows})),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    let select = |custom_id: &str, kind: u64, values: Value| {
        json!({"type": 3, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
            "message_id": sent["id"], "data": {"custom_id": custom_id, "component_type": kind, "values": values}})
    };
    let (status, body) = s
        .post_interaction(&s.user, select("who", 5, json!([s.user_id])))
        .await;
    assert_eq!(status, 204, "{body}");
    let picked = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    let resolved = &picked["data"]["resolved"];
    assert_eq!(
        resolved["users"][&s.user_id]["id"],
        s.user_id.as_str(),
        "{picked}"
    );
    assert!(
        resolved["members"][&s.user_id]["permissions"].is_string(),
        "{picked}"
    );
    assert!(resolved["members"][&s.user_id].get("user").is_none());

    let (status, body) = s
        .post_interaction(&s.user, select("any", 8, json!([s.channel])))
        .await;
    assert_eq!(status, 204, "{body}");
    let picked = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(
        picked["data"]["resolved"]["channels"][&s.channel]["type"], 0,
        "{picked}"
    );

    // The text channel is not among the voice channels "where" offers; an
    // id that names no user; a value that is no id.
    for (custom_id, kind, values) in [
        ("where", 8, json!([s.channel])),
        ("who", 5, json!(["1"])),
        ("who", 5, json!(["me"])),
    ] {
        let (status, refused) = s
            .post_interaction(&s.user, select(custom_id, kind, values.clone()))
            .await;
        assert_eq!(
            (status, refused["code"].clone()),
            (400, json!(50035)),
            "{custom_id} {values}: {refused}"
        );
    }
}

/// In a cluster the bot's callback and its webhook calls may reach another
/// api node than the one that created the interaction: that node passes
/// them on over the bus to the creating one (the token names it), which
/// answers on its own table: the callback, a followup, the @original edit,
/// and a second callback refused as already acknowledged. A token naming
/// a node nobody serves is an unknown interaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callbacks_reaching_another_api_node_are_passed_to_the_creating_one() {
    use guildhall_cluster::{Bus, LocalBus, LocalRegistry, Registry};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let limits = test_limits(Limits::default());
    let registry: Arc<dyn Registry> = Arc::new(LocalRegistry::default());
    let bus: Arc<dyn Bus> = Arc::new(LocalBus::new(limits.bus_payload_bytes_max));
    let a = TestNode::member_with(
        "api-a",
        1,
        dir.path(),
        registry.clone(),
        bus.clone(),
        limits.clone(),
    )
    .await;
    // A's store is migrated before B opens the same file.
    a.metric("guildhall_ring_members").await;
    let b = TestNode::member_with("api-b", 2, dir.path(), registry, bus, limits).await;
    let s = setup_on(a).await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let id = interaction["id"].as_str().unwrap();
    let token = interaction["token"].as_str().unwrap();

    let (status, body) = b
        .call(
            "POST",
            &format!("/interactions/{id}/{token}/callback?with_response=true"),
            None,
            Some(json!({"type": 4, "data": {"content": "answered through b"}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["resource"]["message"]["content"], "answered through b");
    let shown = user.dispatch("MESSAGE_CREATE").await;
    assert_eq!(shown["d"]["content"], "answered through b");
    let (status, again) = b
        .call(
            "POST",
            &format!("/interactions/{id}/{token}/callback"),
            None,
            Some(json!({"type": 4, "data": {"content": "twice"}})),
        )
        .await;
    assert_eq!(
        (status, again["code"].clone()),
        (400, json!(40060)),
        "{again}"
    );
    let hook = format!("/webhooks/{}/{token}", s.app_id);
    let (status, followup) = b
        .call("POST", &hook, None, Some(json!({"content": "more"})))
        .await;
    assert_eq!(status, 200, "{followup}");
    assert_eq!(followup["content"], "more");
    let (status, edited) = b
        .call(
            "PATCH",
            &format!("{hook}/messages/@original"),
            None,
            Some(json!({"content": "edited through b"})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["content"], "edited through b");
    let (status, read) = b
        .call("GET", &format!("{hook}/messages/@original"), None, None)
        .await;
    assert_eq!(
        (status, read["content"].clone()),
        (200, json!("edited through b"))
    );
    assert!(
        b.metric("guildhall_interaction_forwards_passed_total")
            .await
            >= 5
    );
    assert!(
        s.node
            .metric("guildhall_interaction_forwards_served_total")
            .await
            >= 5
    );

    // A token of a node nobody serves: its interactions are gone with it.
    let forged = format!("{}.{:016x}", &token[..68], 1u64);
    let (status, gone) = b
        .call(
            "POST",
            &format!("/interactions/{id}/{forged}/callback"),
            None,
            Some(json!({"type": 4, "data": {"content": "x"}})),
        )
        .await;
    assert_eq!(
        (status, gone["code"].clone()),
        (404, json!(10062)),
        "{gone}"
    );
}

/// The user-side events of an interaction (its INTERACTION_CREATE `{id,
/// nonce}`, INTERACTION_SUCCESS) go to the session the client named in
/// `session_id`, as Discord sends them, not to the user's other sessions;
/// those see the response message like everyone in the channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_side_events_reach_the_invoking_session_only() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut invoking = Client::connect(&s.node.ws).await;
    let ready = invoking.identify(&s.user, USER_INTENTS).await;
    let session_id = ready["d"]["session_id"].as_str().unwrap().to_owned();
    invoking.dispatch("GUILD_CREATE").await;
    let mut other = s.session(&s.user, USER_INTENTS).await;

    let mut body = s.invoke_body(json!([{"name": "sides", "type": 4, "value": 6}]), "mine");
    body["session_id"] = json!(session_id);
    let (status, answer) = s.post_interaction(&s.user, body).await;
    assert_eq!(status, 204, "{answer}");
    let interaction = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    let created = invoking.dispatch("INTERACTION_CREATE").await;
    assert_eq!(created["d"]["nonce"], "mine");
    let (status, body) = s
        .callback(
            &interaction,
            json!({"type": 4, "data": {"content": "rolled"}}),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let success = invoking.dispatch("INTERACTION_SUCCESS").await;
    assert_eq!(success["d"]["id"], interaction["id"]);
    // The other session: the response message, and nothing of the
    // interaction's own events before it.
    loop {
        let frame = other.next().await.unwrap();
        let name = frame["t"].as_str().unwrap_or_default().to_owned();
        assert!(!name.starts_with("INTERACTION_"), "{frame}");
        if name == "MESSAGE_CREATE" {
            assert_eq!(frame["d"]["content"], "rolled");
            break;
        }
    }
}

/// A modal's user select (in a Label) picks ids: the submit carries what
/// they name in `data.resolved`, and an id that names no user is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modal_select_submit_resolves_its_values() {
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let modal = json!({"custom_id": "pick", "title": "Pick someone", "components": [
        {"type": 18, "label": "Who", "component": {"type": 5, "custom_id": "who"}}
    ]});
    let (status, body) = s
        .callback(&interaction, json!({"type": 9, "data": modal}))
        .await;
    assert_eq!(status, 204, "{body}");
    user.dispatch("INTERACTION_MODAL_CREATE").await;
    let submit = |values: Value| {
        json!({"type": 5, "application_id": s.app_id, "guild_id": s.guild, "channel_id": s.channel,
               "data": {"id": interaction["id"], "custom_id": "pick", "components": [
                   {"type": 18, "component": {"type": 5, "custom_id": "who", "values": values}}]}})
    };
    let (status, refused) = s.post_interaction(&s.user, submit(json!(["1"]))).await;
    assert_eq!(
        (status, refused["code"].clone()),
        (400, json!(50035)),
        "{refused}"
    );
    let (status, body) = s
        .post_interaction(&s.user, submit(json!([s.user_id])))
        .await;
    assert_eq!(status, 204, "{body}");
    let submitted = bot.dispatch("INTERACTION_CREATE").await["d"].clone();
    assert_eq!(submitted["type"], 5);
    let resolved = &submitted["data"]["resolved"];
    assert_eq!(
        resolved["users"][&s.user_id]["id"],
        s.user_id.as_str(),
        "{submitted}"
    );
    assert!(
        resolved["members"][&s.user_id]["permissions"].is_string(),
        "{submitted}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_followups_and_edits_carry_files() {
    use crate::files::{multipart, send_form};
    let s = setup().await;
    let mut bot = s.session(&s.bot, intents::GUILDS).await;
    let mut user = s.session(&s.user, USER_INTENTS).await;
    let interaction = s.invoke(&mut bot).await;
    let id = interaction["id"].as_str().unwrap();
    let token = interaction["token"].as_str().unwrap();
    // The response (type 4) with a file, as libraries send it: the whole
    // callback in payload_json, the file as files[0].
    let payload = json!({
        "type": 4,
        "data": {"content": "rolled", "attachments": [{"id": 0, "description": "the die"}]},
    })
    .to_string();
    let (status, body) = send_form(
        &s.node,
        "POST",
        &format!("/interactions/{id}/{token}/callback"),
        None,
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("die.txt"), b"6"),
        ]),
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let response = user.dispatch("MESSAGE_CREATE").await["d"].clone();
    assert_eq!(response["content"], "rolled");
    assert_eq!(response["attachments"][0]["filename"], "die.txt");
    assert_eq!(response["attachments"][0]["description"], "the die");
    let url = response["attachments"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        s.node
            .http
            .get(&url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "6"
    );

    // A followup with a file.
    let (status, followup) = send_form(
        &s.node,
        "POST",
        &format!("/webhooks/{}/{token}", s.app_id),
        None,
        multipart(&[
            ("payload_json", None, br#"{"content": "and a log"}"#),
            ("files[0]", Some("log.txt"), b"log"),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{followup}");
    assert_eq!(followup["attachments"][0]["filename"], "log.txt");

    // @original edited to drop its file and carry another; the dropped
    // one is deleted.
    let (status, edited) = send_form(
        &s.node,
        "PATCH",
        &format!("/webhooks/{}/{token}/messages/@original", s.app_id),
        None,
        multipart(&[
            ("payload_json", None, br#"{"attachments": [{"id": 0}]}"#),
            ("files[0]", Some("again.txt"), b"again"),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["attachments"].as_array().unwrap().len(), 1);
    assert_eq!(edited["attachments"][0]["filename"], "again.txt");
    crate::common::until("the dropped response file deleted", 200, async || {
        s.node.http.get(&url).send().await.unwrap().status() == 404
    })
    .await;
}
