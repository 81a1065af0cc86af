//! Conformance with a second real, unmodified client library: serenity 0.12
//! (its `Client`, gateway, cache and strict models) against a node on
//! loopback, with only its REST base URL changed (`HttpBuilder::proxy`,
//! which needs serenity's own rate limiter off; the gateway URL comes from
//! `GET /gateway`, as with Discord). The bot answers the owner's `!ping`
//! with `pong`.
//!
//! Serenity skips a gateway payload it cannot deserialize with a `warn!`
//! and carries on, so every warning or error it logs is collected here and
//! fails the test: a payload serenity rejects is a server bug.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::TestNode;
use serde_json::{Value, json};
use serenity::all::{
    ChannelId, ClientBuilder, Context, EventHandler, GatewayIntents, Guild, GuildId, HttpBuilder,
    Message, Permissions, Ready, UserId,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt as _;

/// What the bot saw, handed from serenity's handler tasks to the test.
#[derive(Debug)]
enum Seen {
    Ready(Box<Ready>),
    GuildCreate {
        guild: Box<Guild>,
        /// What the cache held for the guild once serenity had applied it.
        cached: Option<Cached>,
    },
    Message(Box<Message>),
    Replied(Result<Box<Message>, String>),
    Stopped(String),
}

#[derive(Debug)]
struct Cached {
    channel_names: Vec<String>,
    /// The bot's own permissions in the general channel, computed by
    /// serenity from the cached roles, overwrites and the bot's member.
    bot_permissions: Option<Permissions>,
}

/// Events the handler may have sent ahead of the test's reads.
const SEEN_EVENTS_MAX: usize = 64;

struct Bot {
    seen: mpsc::Sender<Seen>,
}

#[serenity::async_trait]
impl EventHandler for Bot {
    async fn ready(&self, _ctx: Context, ready: Ready) {
        let _ = self.seen.send(Seen::Ready(Box::new(ready))).await;
    }

    async fn guild_create(&self, ctx: Context, guild: Guild, _is_new: Option<bool>) {
        let me = ctx.cache.current_user().id;
        let cached = ctx.cache.guild(guild.id).map(|cached| {
            let mut channel_names: Vec<String> =
                cached.channels.values().map(|c| c.name.clone()).collect();
            channel_names.sort();
            let general = cached.channels.values().find(|c| c.name == "general");
            let member = cached.members.get(&me);
            let bot_permissions = general
                .zip(member)
                .map(|(channel, member)| cached.user_permissions_in(channel, member));
            Cached {
                channel_names,
                bot_permissions,
            }
        });
        let _ = self
            .seen
            .send(Seen::GuildCreate {
                guild: Box::new(guild),
                cached,
            })
            .await;
    }

    async fn message(&self, ctx: Context, msg: Message) {
        let ping = msg.content == "!ping";
        let _ = self.seen.send(Seen::Message(Box::new(msg.clone()))).await;
        if ping {
            // Through the cache-aware path: serenity checks SEND_MESSAGES
            // against its cache before it posts the (inline) reply.
            let replied = msg.reply(&ctx, "pong").await;
            let _ = self
                .seen
                .send(Seen::Replied(
                    replied.map(Box::new).map_err(|e| format!("{e:?}")),
                ))
                .await;
        }
    }
}

/// Every warning or error serenity logs (a payload it could not
/// deserialize, a failed request it retried, a shard error).
#[derive(Clone, Default)]
struct Complaints(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Complaints {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() > tracing::Level::WARN || !meta.target().starts_with("serenity") {
            return;
        }
        let mut text = format!("{} {}:", meta.level(), meta.target());
        event.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                text.push_str(&format!(" {}={value:?}", field.name()));
            },
        );
        eprintln!("serenity complained: {text}");
        self.0.lock().unwrap().push(text);
    }
}

impl Complaints {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

async fn next(seen: &mut mpsc::Receiver<Seen>, complaints: &Complaints) -> Seen {
    let event = tokio::time::timeout(Duration::from_secs(15), seen.recv())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "serenity saw nothing in time; it logged: {:?}",
                complaints.take()
            )
        })
        .expect("the client is running");
    match event {
        Seen::Stopped(why) => panic!(
            "serenity's client stopped: {why}; it logged: {:?}",
            complaints.take()
        ),
        event => event,
    }
}

fn id_of(value: &Value) -> u64 {
    value.as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_connects_caches_and_answers_a_ping() {
    let complaints = Complaints::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(complaints.clone()),
    )
    .expect("the only subscriber of this test binary");

    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Serenity Guild").await;
    let (app_id, bot) = node.bot_in(&owner, &guild_id).await;
    let guild_id = GuildId::new(guild_id.parse().unwrap());
    let channel_id = ChannelId::new(channel_id.parse().unwrap());
    let addr = node.ws.trim_start_matches("ws://").to_owned();

    // Serenity's own REST client, its route prefix `https://discord.com`
    // replaced by the node's address. Serenity's rate limiter builds its
    // requests without the proxy (it expects the proxy to do the limiting:
    // `Ratelimiter::perform` passes `None`), so it has to be off for the
    // proxy to be used at all.
    let http = HttpBuilder::new(&bot)
        .proxy(format!("http://{addr}"))
        .ratelimiter_disabled(true)
        .build();
    let intents =
        GatewayIntents::GUILDS | GatewayIntents::GUILD_MESSAGES | GatewayIntents::MESSAGE_CONTENT;
    // The test reads every event as it comes; a handler that got ahead by
    // this many waits for it (serenity runs handlers in tasks of their own).
    let (tx, mut seen) = mpsc::channel(SEEN_EVENTS_MAX);
    // Awaiting the builder asks `GET /gateway` for the socket's URL.
    let mut client = ClientBuilder::new_with_http(http, intents)
        .event_handler(Bot { seen: tx.clone() })
        .await
        .unwrap();
    let http = Arc::clone(&client.http);
    let shards = Arc::clone(&client.shard_manager);
    let gateway_url = client.ws_url.lock().await.clone();
    assert_eq!(gateway_url, node.ws, "the URL from GET /gateway");
    tokio::spawn(async move {
        let result = client.start().await;
        let _ = tx.send(Seen::Stopped(format!("{result:?}"))).await;
    });

    // REST through serenity's models.
    let me = http.get_current_user().await.unwrap();
    assert!(me.bot);
    let app = http.get_current_application_info().await.unwrap();
    assert_eq!(app.id.get().to_string(), app_id);
    assert_eq!(app.name, "testbot");

    let ready = loop {
        if let Seen::Ready(ready) = next(&mut seen, &complaints).await {
            break ready;
        }
    };
    assert_eq!(ready.user.id, me.id);
    assert!(ready.user.bot);
    assert_eq!(ready.application.id.get().to_string(), app_id);
    assert_eq!(ready.guilds.len(), 1);
    assert_eq!(ready.guilds[0].id, guild_id);
    assert_eq!(ready.version, 10);

    let (guild, cached) = loop {
        if let Seen::GuildCreate { guild, cached } = next(&mut seen, &complaints).await {
            break (guild, cached);
        }
    };
    assert_eq!(guild.id, guild_id);
    assert_eq!(guild.name, "Serenity Guild");
    assert_eq!(guild.channels[&channel_id].name, "general");
    assert!(guild.roles.contains_key(&guild_id.everyone_role()));
    assert!(
        guild.members.contains_key(&me.id),
        "GUILD_CREATE carries the bot's own member"
    );
    let cached = cached.expect("serenity cached the guild");
    assert!(cached.channel_names.iter().any(|name| name == "general"));
    let permissions = cached
        .bot_permissions
        .expect("the cache has the channel and the bot's member");
    assert!(
        permissions.contains(Permissions::VIEW_CHANNEL | Permissions::SEND_MESSAGES),
        "{permissions:?}"
    );

    let channels = guild_id.channels(&http).await.unwrap();
    assert_eq!(channels[&channel_id].name, "general");
    assert_eq!(channels[&channel_id].guild_id, guild_id);

    // The owner says `!ping` (REST, as the owner); serenity hands the bot
    // the message with its content, and the bot replies through serenity.
    let (status, ping) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&owner),
            Some(json!({"content": "!ping"})),
        )
        .await;
    assert_eq!(status, 200, "{ping}");
    let received = loop {
        if let Seen::Message(message) = next(&mut seen, &complaints).await
            && message.author.id != me.id
        {
            break message;
        }
    };
    assert_eq!(received.id.get(), id_of(&ping["id"]));
    assert_eq!(received.content, "!ping");
    assert_eq!(received.channel_id, channel_id);
    assert_eq!(received.guild_id, Some(guild_id));
    assert_eq!(received.author.id.get(), id_of(&ping["author"]["id"]));
    // The reply's result and the bot's own MESSAGE_CREATE for it, in
    // either order.
    let (mut reply, mut echoed) = (None, Vec::new());
    while reply
        .as_deref()
        .is_none_or(|r: &Message| !echoed.contains(&r.id))
    {
        match next(&mut seen, &complaints).await {
            Seen::Replied(replied) => {
                reply = Some(replied.unwrap_or_else(|e| panic!("msg.reply failed: {e}")));
            }
            Seen::Message(message) if message.author.id == me.id => echoed.push(message.id),
            _ => {}
        }
    }
    let reply = reply.unwrap();
    assert_eq!(reply.content, "pong");
    assert_eq!(reply.author.id, me.id);

    // The owner sees the reply, by the bot, answering the ping.
    let (status, messages) = node
        .call(
            "GET",
            &format!("/channels/{channel_id}/messages?limit=10"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200, "{messages}");
    let pong = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["content"] == "pong")
        .unwrap_or_else(|| panic!("no pong in {messages}"));
    assert_eq!(UserId::new(id_of(&pong["author"]["id"])), me.id);
    assert_eq!(pong["author"]["bot"], true);
    assert_eq!(pong["id"].as_str().unwrap(), reply.id.get().to_string());
    // Not checked: the reply's `message_reference` (serenity sends one);
    // the node does not store replies yet and posts it as a plain message.

    let complained = complaints.take();
    assert!(complained.is_empty(), "serenity logged: {complained:#?}");
    shards.shutdown_all().await;
    node.stop().await;
}
