//! The standing adversarial suite: seeded fuzzing of gateway frames and
//! REST requests against a real node over real sockets, bounded in count and time, the way a
//! hostile client or a broken library would probe it.
//!
//! What must hold, whatever arrives:
//! - no panic anywhere in the server (a panic hook counts them, including
//!   panics inside spawned tasks that would otherwise only be logged);
//! - every gateway connection the server ends, it ends with a close frame
//!   whose code is one Discord documents (or a WebSocket protocol code);
//! - no REST answer is a 5xx other than 503 with `Retry-After`, and every
//!   error answer carries Discord's `{"code", "message"}` body;
//! - a canary guild that the fuzzer knows the ids of but holds no token
//!   for is left exactly as it was (the guild, its channels, roles,
//!   members and messages as REST shows them): ids from another guild never
//!   reach its state;
//! - afterwards the node still serves IDENTIFY → READY → GUILD_CREATE and
//!   a posted message reaches the session.
//!
//! The inputs come from a seed, printed first; rerun a failure with
//! `GUILDHALL_TEST_SEED=<seed>`. CI runs the smoke size below; a longer
//! run: `GUILDHALL_ADVERSARIAL_REST_CASES=50000
//! GUILDHALL_ADVERSARIAL_GATEWAY_CASES=5000 GUILDHALL_ADVERSARIAL_SECONDS=600 cargo nextest run -p guildhall-node
//! -E 'test(/^adversarial::/)'`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode, seed};
use futures_util::{SinkExt, StreamExt};
use guildhall_limits::Limits;
use rand::{Rng, RngCore, SeedableRng};
use rand_pcg::Pcg64;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// REST requests in the smoke size (CI).
const REST_CASES_DEFAULT: u64 = 6_000;
/// Gateway connections in the smoke size (CI).
const GATEWAY_CASES_DEFAULT: u64 = 150;
/// Wall-clock bound of each half of the suite: whatever is not done by
/// then is skipped (the counts above normally finish well within it).
const SECONDS_DEFAULT: u64 = 60;
/// How long one fuzzed request or frame may take before it counts as a
/// hang: generous, so a slow machine cannot fail the suite, and still far
/// below "never answers".
const ANSWER_TIMEOUT_MS: u64 = 15_000;
/// Frames one fuzzed gateway connection sends.
const FRAMES_PER_CONNECTION_MAX: usize = 6;

static PANICS: AtomicU64 = AtomicU64::new(0);

fn count_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn limits() -> Limits {
    Limits {
        // The fuzzer's own bursts must not turn every answer into a 429:
        // the point is to reach the handlers.
        rest_rate_limit_per_window: 1_000_000,
        rest_auth_rate_limit_per_window: 1_000_000,
        rest_invalid_requests_max: 1_000_000,
        ..Limits::default()
    }
}

/// A guild the fuzzer knows every id of but cannot act in.
struct Canary {
    token: String,
    guild: String,
    channel: String,
    message: String,
    role: String,
    user: String,
    /// A webhook of the canary's channel (its id is known, its token not).
    webhook: String,
}

impl Canary {
    async fn create(node: &TestNode) -> Self {
        let (token, user) = node.register("canary").await;
        let (guild, channel) = node.guild(&token, "canary").await;
        let (status, message) = node
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&token),
                Some(json!({"content": "canary"})),
            )
            .await;
        assert_eq!(status, 200, "{message}");
        let message = message["id"].as_str().unwrap().to_owned();
        let (status, _) = node
            .call(
                "PUT",
                &format!("/channels/{channel}/messages/{message}/reactions/%F0%9F%91%8D/@me"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(status, 204);
        let (status, role) = node
            .call(
                "POST",
                &format!("/guilds/{guild}/roles"),
                Some(&token),
                Some(json!({"name": "canary-role"})),
            )
            .await;
        assert_eq!(status, 200, "{role}");
        let role = role["id"].as_str().unwrap().to_owned();
        let (status, webhook) = node
            .call(
                "POST",
                &format!("/channels/{channel}/webhooks"),
                Some(&token),
                Some(json!({"name": "canary-hook"})),
            )
            .await;
        assert_eq!(status, 200, "{webhook}");
        let webhook = webhook["id"].as_str().unwrap().to_owned();
        Self {
            token,
            guild,
            channel,
            message,
            role,
            user,
            webhook,
        }
    }

    /// Everything of the canary guild the fuzzer must not change.
    async fn state(&self, node: &TestNode) -> Vec<(u16, Value)> {
        let mut state = Vec::new();
        for path in [
            format!("/guilds/{}", self.guild),
            format!("/guilds/{}/channels", self.guild),
            format!("/guilds/{}/roles", self.guild),
            format!("/guilds/{}/members?limit=1000", self.guild),
            format!("/channels/{}/messages?limit=100", self.channel),
            format!("/guilds/{}/webhooks", self.guild),
        ] {
            let (status, mut body) = node.call("GET", &path, Some(&self.token), None).await;
            // `approximate_*` counts and presences are not state the
            // fuzzer could corrupt; leave them out of the comparison.
            if let Some(object) = body.as_object_mut() {
                object.remove("approximate_member_count");
                object.remove("approximate_presence_count");
            }
            state.push((status, body));
        }
        state
    }
}

/// What the fuzzer acts with: its own user, guild and objects, plus the
/// canary's ids as foreign ids.
struct Targets {
    tokens: Vec<Option<String>>,
    /// Real ids (the fuzzer's own and the canary's) and junk.
    ids: Vec<String>,
    /// Only the real ids.
    real: Vec<String>,
}

impl Targets {
    async fn create(node: &TestNode, canary: &Canary) -> Self {
        let (token, user) = node.register("fuzzer").await;
        let (other, other_user) = node.register("fuzzer2").await;
        let (guild, channel) = node.guild(&token, "fuzzed").await;
        let code = node.invite(&token, &channel).await;
        let (status, _) = node
            .call("POST", &format!("/invites/{code}"), Some(&other), None)
            .await;
        assert_eq!(status, 200);
        let (_, message) = node
            .call(
                "POST",
                &format!("/channels/{channel}/messages"),
                Some(&token),
                Some(json!({"content": "fuzz me"})),
            )
            .await;
        let message = message["id"].as_str().unwrap_or("1").to_owned();
        let (_, role) = node
            .call(
                "POST",
                &format!("/guilds/{guild}/roles"),
                Some(&token),
                Some(json!({"name": "fuzz-role"})),
            )
            .await;
        let role = role["id"].as_str().unwrap_or("1").to_owned();
        // The fuzzer's own webhook: its id and token are among the ids, so
        // the token routes are reached with a token that works, too.
        let (_, webhook) = node
            .call(
                "POST",
                &format!("/channels/{channel}/webhooks"),
                Some(&token),
                Some(json!({"name": "fuzz-hook"})),
            )
            .await;
        let webhook_id = webhook["id"].as_str().unwrap_or("1").to_owned();
        let webhook_token = webhook["token"].as_str().unwrap_or("x").to_owned();
        let real = vec![
            guild.clone(),
            channel.clone(),
            message.clone(),
            role.clone(),
            user.clone(),
            other_user.clone(),
            canary.guild.clone(),
            canary.channel.clone(),
            canary.message.clone(),
            canary.role.clone(),
            canary.user.clone(),
            canary.webhook.clone(),
        ];
        Self {
            real,
            tokens: vec![
                Some(token),
                Some(other),
                None,
                Some("not-a-token".to_owned()),
                Some("MTIz.AAAA.bad-secret-xxxxxxxxxxxxxxxxxxxxxxxx".to_owned()),
            ],
            ids: vec![
                guild,
                channel,
                message,
                role,
                user,
                other_user,
                canary.guild.clone(),
                canary.channel.clone(),
                canary.message.clone(),
                canary.role.clone(),
                canary.user.clone(),
                canary.webhook.clone(),
                webhook_id,
                webhook_token,
                "0".to_owned(),
                "-1".to_owned(),
                "18446744073709551615".to_owned(),
                "99999999999999999999999999".to_owned(),
                "abc".to_owned(),
                "@me".to_owned(),
                "%00".to_owned(),
                "..".to_owned(),
                "1".repeat(300),
            ],
        }
    }
}

/// Every REST route of `api::routes()` as (method, template): `{id}` and
/// friends are filled from the targets, so both real ids (own and the
/// canary's) and junk reach every handler.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/gateway"),
    ("GET", "/gateway/bot"),
    ("POST", "/auth/register"),
    ("POST", "/auth/login"),
    ("GET", "/users/@me"),
    ("PATCH", "/users/@me"),
    ("GET", "/users/{id}"),
    ("POST", "/users/@me/channels"),
    ("DELETE", "/users/@me/guilds/{id}"),
    ("GET", "/oauth2/applications/@me"),
    ("POST", "/oauth2/authorize?client_id={id}&scope=bot"),
    ("POST", "/applications"),
    ("GET", "/applications/{id}"),
    ("PATCH", "/applications/{id}"),
    ("POST", "/applications/{id}/bot/reset"),
    ("POST", "/guilds"),
    ("GET", "/guilds/{id}"),
    ("PATCH", "/guilds/{id}"),
    ("DELETE", "/guilds/{id}"),
    ("GET", "/guilds/{id}/channels"),
    ("POST", "/guilds/{id}/channels"),
    ("GET", "/guilds/{id}/members?limit={n}&after={id}"),
    ("GET", "/guilds/{id}/members/{id}"),
    ("PATCH", "/guilds/{id}/members/{id}"),
    ("DELETE", "/guilds/{id}/members/{id}"),
    ("PUT", "/guilds/{id}/members/{id}/roles/{id}"),
    ("DELETE", "/guilds/{id}/members/{id}/roles/{id}"),
    ("GET", "/guilds/{id}/roles"),
    ("POST", "/guilds/{id}/roles"),
    ("PATCH", "/guilds/{id}/roles/{id}"),
    ("DELETE", "/guilds/{id}/roles/{id}"),
    ("GET", "/channels/{id}"),
    ("PATCH", "/channels/{id}"),
    ("DELETE", "/channels/{id}"),
    ("POST", "/channels/{id}/messages/bulk-delete"),
    ("PUT", "/channels/{id}/messages/{id}/reactions/{emoji}/@me"),
    (
        "DELETE",
        "/channels/{id}/messages/{id}/reactions/{emoji}/@me",
    ),
    ("GET", "/channels/{id}/messages?limit={n}&before={id}"),
    ("POST", "/channels/{id}/messages"),
    ("GET", "/channels/{id}/messages/{id}"),
    ("PATCH", "/channels/{id}/messages/{id}"),
    ("DELETE", "/channels/{id}/messages/{id}"),
    ("POST", "/channels/{id}/typing"),
    ("POST", "/channels/{id}/invites"),
    ("GET", "/invites/{id}?with_counts=true"),
    ("POST", "/invites/{id}"),
    ("POST", "/admin/bots"),
    ("POST", "/channels/{id}/webhooks"),
    ("GET", "/channels/{id}/webhooks"),
    ("GET", "/guilds/{id}/webhooks"),
    ("GET", "/webhooks/{id}"),
    ("PATCH", "/webhooks/{id}"),
    ("DELETE", "/webhooks/{id}"),
    ("GET", "/webhooks/{id}/{id}"),
    ("PATCH", "/webhooks/{id}/{id}"),
    ("DELETE", "/webhooks/{id}/{id}"),
    ("POST", "/webhooks/{id}/{id}?wait=true"),
    ("GET", "/webhooks/{id}/{id}/messages/{id}"),
    ("PATCH", "/webhooks/{id}/{id}/messages/{id}"),
    ("DELETE", "/webhooks/{id}/{id}/messages/{id}"),
    ("GET", "/webhooks/{id}/{id}/messages/@original"),
    ("PATCH", "/webhooks/{id}/{id}/messages/@original"),
    ("DELETE", "/webhooks/{id}/{id}/messages/@original"),
    ("POST", "/interactions"),
    (
        "POST",
        "/interactions/{id}/{id}/callback?with_response=true",
    ),
    ("GET", "/no/such/route"),
    ("PUT", "/guilds"),
];

/// Well-formed requests whose ids are drawn from the fuzzer's own objects
/// and the canary's alike, sent with the fuzzer's owner token: the shape of
/// a cross-guild attack (a bulk delete in one's own channel naming another
/// guild's messages, one's own member given another guild's role, ...).
const CRAFTED: &[(&str, &str, &str)] = &[
    (
        "POST",
        "/channels/{id}/messages/bulk-delete",
        r#"{"messages": ["{id}", "{id}", "{id}"]}"#,
    ),
    ("DELETE", "/channels/{id}/messages/{id}", ""),
    (
        "PATCH",
        "/channels/{id}/messages/{id}",
        r#"{"content": "x"}"#,
    ),
    ("GET", "/channels/{id}/messages/{id}", ""),
    (
        "PUT",
        "/channels/{id}/messages/{id}/reactions/%F0%9F%91%8D/@me",
        "",
    ),
    (
        "DELETE",
        "/channels/{id}/messages/{id}/reactions/%F0%9F%91%8D/@me",
        "",
    ),
    (
        "PATCH",
        "/guilds/{id}/members/{id}",
        r#"{"roles": ["{id}"], "nick": "x"}"#,
    ),
    ("DELETE", "/guilds/{id}/members/{id}", ""),
    ("PUT", "/guilds/{id}/members/{id}/roles/{id}", ""),
    ("DELETE", "/guilds/{id}/members/{id}/roles/{id}", ""),
    (
        "PATCH",
        "/guilds/{id}/roles/{id}",
        r#"{"name": "x", "permissions": "8"}"#,
    ),
    ("DELETE", "/guilds/{id}/roles/{id}", ""),
    (
        "PATCH",
        "/channels/{id}",
        r#"{"name": "x", "parent_id": "{id}"}"#,
    ),
    (
        "POST",
        "/guilds/{id}/channels",
        r#"{"name": "x", "parent_id": "{id}"}"#,
    ),
    (
        "POST",
        "/channels/{id}/messages",
        r#"{"content": "x", "message_reference": {"message_id": "{id}", "channel_id": "{id}", "guild_id": "{id}"}}"#,
    ),
    ("POST", "/channels/{id}/invites", "{}"),
    (
        "PATCH",
        "/guilds/{id}",
        r#"{"name": "xx", "owner_id": "{id}"}"#,
    ),
];

/// Field names the handlers read, so random bodies reach their checks.
const FIELDS: &[&str] = &[
    "name",
    "content",
    "topic",
    "nick",
    "username",
    "password",
    "roles",
    "permissions",
    "color",
    "hoist",
    "mentionable",
    "type",
    "position",
    "parent_id",
    "guild_id",
    "channel_id",
    "recipient_id",
    "messages",
    "max_age",
    "max_uses",
    "unique",
    "authorize",
    "description",
    "flags",
    "embeds",
    "tts",
    "nonce",
    "message_reference",
    "allowed_mentions",
    "owner_id",
    "icon",
    "nsfw",
    "rate_limit_per_user",
];

fn junk_string(rng: &mut Pcg64) -> String {
    let len = match rng.random_range(0..10) {
        0 => 0,
        1..=5 => rng.random_range(1..40),
        6..=8 => rng.random_range(40..2_100),
        _ => rng.random_range(2_100..70_000),
    };
    let alphabet = [
        "a",
        "Z",
        "0",
        " ",
        "\"",
        "\\",
        "\u{0}",
        "é",
        "👍",
        "\u{202e}",
        "@everyone",
        "<@1>",
        "\n",
        "%",
        "{",
        "}",
    ];
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())])
        .collect()
}

fn junk_value(rng: &mut Pcg64, targets: &Targets, depth: u32) -> Value {
    match rng.random_range(0..12) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random_range(-3i64..3)),
        4 => json!(rng.random::<f64>() * 1e300),
        5 | 6 => json!(targets.ids[rng.random_range(0..targets.ids.len())]),
        7 => json!(junk_string(rng)),
        8 if depth < 3 => Value::Array(
            (0..rng.random_range(0..5))
                .map(|_| junk_value(rng, targets, depth + 1))
                .collect(),
        ),
        9 if depth < 3 => junk_object(rng, targets, depth + 1),
        10 => Value::Array(
            (0..rng.random_range(0..150))
                .map(|_| json!(targets.ids[rng.random_range(0..targets.ids.len())]))
                .collect(),
        ),
        _ => json!(rng.random_range(0..100_000u32).to_string()),
    }
}

fn junk_object(rng: &mut Pcg64, targets: &Targets, depth: u32) -> Value {
    let mut object = serde_json::Map::new();
    for _ in 0..rng.random_range(0..6) {
        let key = if rng.random_bool(0.9) {
            FIELDS[rng.random_range(0..FIELDS.len())].to_owned()
        } else {
            junk_string(rng)
        };
        object.insert(key, junk_value(rng, targets, depth));
    }
    Value::Object(object)
}

/// A body: mostly JSON objects with the fields handlers read, sometimes
/// something that is not an object or not JSON at all.
fn junk_body(rng: &mut Pcg64, targets: &Targets) -> Option<Vec<u8>> {
    match rng.random_range(0..10) {
        0 => None,
        1 => Some(b"{\"name\": ".to_vec()),
        2 => {
            let mut bytes = vec![0u8; rng.random_range(0..300)];
            rng.fill_bytes(&mut bytes);
            Some(bytes)
        }
        3 => Some("[".repeat(rng.random_range(1..5_000)).into_bytes()),
        4 => Some(junk_value(rng, targets, 0).to_string().into_bytes()),
        _ => Some(junk_object(rng, targets, 0).to_string().into_bytes()),
    }
}

fn fill(template: &str, rng: &mut Pcg64, ids: &[String]) -> String {
    const EMOJIS: &[&str] = &[
        "%F0%9F%91%8D",
        "name:1",
        "%E2%9D%A4",
        "x",
        "%FF%FE",
        "",
        "a%3A1",
    ];
    let mut path = template.to_owned();
    while let Some(at) = path.find("{id}") {
        let id = &ids[rng.random_range(0..ids.len())];
        path.replace_range(at..at + 4, id);
    }
    while let Some(at) = path.find("{emoji}") {
        let emoji = EMOJIS[rng.random_range(0..EMOJIS.len())];
        path.replace_range(at..at + 7, emoji);
    }
    while let Some(at) = path.find("{n}") {
        let n = ["0", "1", "100", "1001", "-5", "x", "99999999999"][rng.random_range(0..7)];
        path.replace_range(at..at + 3, n);
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_rest_requests_get_discord_errors_and_touch_no_other_guild() {
    count_panics();
    let seed = seed();
    eprintln!("adversarial REST seed {seed} (rerun with GUILDHALL_TEST_SEED={seed})");
    let cases = env_u64("GUILDHALL_ADVERSARIAL_REST_CASES", REST_CASES_DEFAULT);
    let deadline = Instant::now()
        + Duration::from_secs(env_u64("GUILDHALL_ADVERSARIAL_SECONDS", SECONDS_DEFAULT));
    let node = TestNode::with_limits(limits()).await;
    let canary = Canary::create(&node).await;
    let before = canary.state(&node).await;
    let targets = Targets::create(&node, &canary).await;
    let mut rng = Pcg64::seed_from_u64(seed);
    // A fresh connection per request: a server that closes a connection
    // after refusing a body (as it may) would otherwise fail the next
    // request on that pooled connection, a client-side race this suite is
    // not about.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_millis(ANSWER_TIMEOUT_MS))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let (mut sent, mut by_class) = (0u64, [0u64; 6]);
    while sent < cases && Instant::now() < deadline {
        sent += 1;
        let (method, path, token, body) = if rng.random_bool(0.3) {
            let (method, template, body) = CRAFTED[rng.random_range(0..CRAFTED.len())];
            // The first id is mostly the fuzzer's own guild or channel, so
            // the request passes the first permission check and the
            // foreign ids that follow reach the deeper ones.
            let first = if template.starts_with("/guilds") {
                &targets.real[0]
            } else {
                &targets.real[1]
            };
            let path = if rng.random_bool(0.7) {
                template.replacen("{id}", first, 1)
            } else {
                template.to_owned()
            };
            let path = fill(&path, &mut rng, &targets.real);
            let body = (!body.is_empty()).then(|| fill(body, &mut rng, &targets.real).into_bytes());
            (method, path, &targets.tokens[0], body)
        } else {
            let (method, template) = ROUTES[rng.random_range(0..ROUTES.len())];
            let path = fill(template, &mut rng, &targets.ids);
            let mut token = &targets.tokens[rng.random_range(0..targets.tokens.len())];
            // The fuzzer keeps its own guild and channel: once they are
            // deleted every later case is only an Unknown Guild. The second
            // user (a member, not the owner) asks instead, and is refused.
            let own_root = [
                format!("/guilds/{}", targets.real[0]),
                format!("/channels/{}", targets.real[1]),
            ];
            if method == "DELETE" && own_root.contains(&path) {
                token = &targets.tokens[1];
            }
            (method, path, token, junk_body(&mut rng, &targets))
        };
        let case = format!("case {sent}: {method} {path} (seed {seed})");
        let mut request = http.request(
            reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", node.base),
        );
        if let Some(token) = token {
            let scheme = if rng.random_bool(0.8) { "Bot " } else { "" };
            request = request.header("authorization", format!("{scheme}{token}"));
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{case}: no answer: {e:?}"));
        let status = response.status().as_u16();
        let retry_after = response.headers().contains_key("retry-after");
        let text = response
            .text()
            .await
            .unwrap_or_else(|e| panic!("{case}: body not read: {e}"));
        by_class[usize::from(status / 100).min(5)] += 1;
        if std::env::var("ADV_DEBUG").is_ok() {
            eprintln!("{status} {method} {path} {:.200}", text);
        }
        assert!(
            status < 500 || (status == 503 && retry_after),
            "{case}: answered {status}: {text}"
        );
        if status >= 400 {
            let body: Value = serde_json::from_str(&text)
                .unwrap_or_else(|_| panic!("{case}: {status} without a JSON body: {text:?}"));
            assert!(
                body["code"].is_u64() && body["message"].is_string(),
                "{case}: {status} without Discord's error body: {text}"
            );
        }
    }
    eprintln!(
        "REST: {sent} requests; 2xx {} 3xx {} 4xx {} 5xx {}",
        by_class[2], by_class[3], by_class[4], by_class[5]
    );
    assert!(
        sent >= cases.min(100),
        "only {sent} requests in the time bound"
    );
    let after = canary.state(&node).await;
    assert_eq!(
        before, after,
        "the canary guild changed (seed {seed}): ids from another guild reached its state"
    );
    alive(&node).await;
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "the server panicked (seed {seed})"
    );
    node.stop().await;
}

/// Close codes a Discord client may see: WebSocket's own (normal, going
/// away, protocol error, invalid payload, too big) and the gateway's.
fn documented_close(code: u16) -> bool {
    matches!(code, 1000 | 1001 | 1002 | 1007 | 1009 | 1011)
        || (4000..=4014).contains(&code) && code != 4006
}

/// One gateway frame a broken or hostile client might send.
fn junk_frame(rng: &mut Pcg64, token: &str) -> Message {
    let valid_identify = json!({"op": 2, "d": {"token": format!("Bot {token}"),
        "intents": 513, "properties": {"os": "linux", "browser": "fuzz", "device": "fuzz"}}});
    match rng.random_range(0..16) {
        0 => Message::Text(json!({"op": 1, "d": null}).to_string().into()),
        1 => Message::Text(valid_identify.to_string().into()),
        2 => {
            // A valid payload with bytes flipped, kept as text when it is
            // still UTF-8.
            let mut bytes = valid_identify.to_string().into_bytes();
            for _ in 0..rng.random_range(1..6) {
                let at = rng.random_range(0..bytes.len());
                bytes[at] = rng.random();
            }
            match String::from_utf8(bytes) {
                Ok(text) => Message::Text(text.into()),
                Err(e) => Message::Binary(e.into_bytes().into()),
            }
        }
        3 => Message::Text(
            json!({"op": rng.random_range(0..20), "d": junk_string(rng)})
                .to_string()
                .into(),
        ),
        4 => Message::Text("x".repeat(rng.random_range(4_000..20_000)).into()),
        5 => Message::Text("[".repeat(rng.random_range(100..4_000)).into()),
        6 => {
            let mut bytes = vec![0u8; rng.random_range(0..512)];
            rng.fill_bytes(&mut bytes);
            Message::Binary(bytes.into())
        }
        7 => Message::Text(
            json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": junk_string(rng),
                "seq": rng.random::<i64>()}})
            .to_string()
            .into(),
        ),
        8 => Message::Text(
            json!({"op": 8, "d": {"guild_id": rng.random::<u64>().to_string(), "query": "",
                "limit": rng.random_range(-1i64..2_000)}})
            .to_string()
            .into(),
        ),
        9 => Message::Text(
            json!({"op": 3, "d": {"status": junk_string(rng), "since": null, "activities": [],
                "afk": rng.random_bool(0.5)}})
            .to_string()
            .into(),
        ),
        10 => Message::Text(
            json!({"op": 4, "d": {"guild_id": rng.random::<u64>().to_string(),
                "channel_id": rng.random::<u64>().to_string(), "self_mute": false, "self_deaf": 1}})
            .to_string()
            .into(),
        ),
        11 => Message::Text(
            json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": rng.random::<i64>(),
                "properties": {}, "shard": [rng.random::<u32>(), rng.random_range(0u32..4)],
                "large_threshold": rng.random::<i64>(), "compress": rng.random_bool(0.5)}})
            .to_string()
            .into(),
        ),
        12 => Message::Text(
            json!({"op": 2, "d": {"token": junk_string(rng)}})
                .to_string()
                .into(),
        ),
        13 => Message::Ping(vec![1, 2, 3].into()),
        14 => Message::Text(json!(junk_string(rng)).to_string().into()),
        _ => Message::Text("{\"op\": 1, \"d\": 1".into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzzed_gateway_frames_get_documented_close_codes() {
    count_panics();
    let seed = seed();
    eprintln!("adversarial gateway seed {seed} (rerun with GUILDHALL_TEST_SEED={seed})");
    let cases = env_u64("GUILDHALL_ADVERSARIAL_GATEWAY_CASES", GATEWAY_CASES_DEFAULT);
    let deadline = Instant::now()
        + Duration::from_secs(env_u64("GUILDHALL_ADVERSARIAL_SECONDS", SECONDS_DEFAULT));
    let node = TestNode::with_limits(limits()).await;
    let (token, _) = node.register("fuzzbot").await;
    node.guild(&token, "fuzzed").await;
    let mut rng = Pcg64::seed_from_u64(seed);
    let (mut connections, mut closes, mut open_at_end, mut resets) = (0u64, 0u64, 0u64, 0u64);
    while connections < cases && Instant::now() < deadline {
        connections += 1;
        let case = format!("connection {connections} (seed {seed})");
        let (mut ws, _) =
            tokio_tungstenite::connect_async(format!("{}/?v=10&encoding=json", node.ws))
                .await
                .unwrap_or_else(|e| panic!("{case}: upgrade refused: {e}"));
        let mut sent = Vec::new();
        let mut ended = None;
        for _ in 0..rng.random_range(1..=FRAMES_PER_CONNECTION_MAX) {
            let frame = junk_frame(&mut rng, &token);
            sent.push(format!("{:.80}", format!("{frame:?}")));
            if ws.send(frame).await.is_err() {
                break;
            }
        }
        // Read what the server answers until it closes or goes quiet.
        loop {
            match tokio::time::timeout(Duration::from_millis(300), ws.next()).await {
                Err(_) => break,
                Ok(Some(Ok(Message::Close(frame)))) => {
                    ended = Some(frame.map(|f| u16::from(f.code)));
                    break;
                }
                Ok(Some(Ok(_))) => continue,
                // A reset that overtook the close frame: counted and
                // bounded below (the server lingers for the client's close,
                // which leaves the rare reset of a client that keeps
                // sending after it).
                Ok(Some(Err(e))) => {
                    eprintln!("{case}: reset before a close frame: {e}; sent {sent:?}");
                    resets += 1;
                    ended = Some(Some(0));
                    break;
                }
                Ok(None) => panic!("{case}: dropped without a close frame; sent {sent:?}"),
            }
        }
        match ended {
            Some(Some(0)) => {}
            Some(Some(code)) => {
                closes += 1;
                assert!(
                    documented_close(code),
                    "{case}: close code {code}; sent {sent:?}"
                );
            }
            Some(None) => panic!("{case}: close frame without a code; sent {sent:?}"),
            None => {
                open_at_end += 1;
                let _ = ws.close(None).await;
            }
        }
    }
    eprintln!(
        "gateway: {connections} connections; {closes} closed by the server with a code, \
         {resets} reset first, {open_at_end} still open"
    );
    assert!(
        resets * 50 <= connections.max(50),
        "{resets} of {connections} connections were reset before their close frame (seed {seed})"
    );
    assert!(
        connections >= cases.min(20),
        "only {connections} connections in the time bound"
    );
    alive(&node).await;
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        0,
        "the server panicked (seed {seed})"
    );
    node.stop().await;
}

/// After the fuzz: a new user and bot still get READY and GUILD_CREATE,
/// and a posted message reaches the session.
async fn alive(node: &TestNode) {
    let (token, _) = node.register("survivor").await;
    let (_, channel) = node.guild(&token, "after the storm").await;
    let mut client = Client::connect(&node.ws).await;
    client.identify(&token, 513 | (1 << 15)).await;
    client.dispatch("GUILD_CREATE").await;
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel}/messages"),
            Some(&token),
            Some(json!({"content": "still here"})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let created = client.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["content"], "still here");
}
