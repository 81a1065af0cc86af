//! Conformance with a real, unmodified client library: twilight 0.18
//! (gateway, http and its strict models) against a node on loopback, with
//! only its base URLs changed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::TestNode;
use std::time::Duration;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Event, EventTypeFlags, Intents, Shard, ShardId, StreamExt as _,
};
use twilight_model::gateway::payload::incoming::GuildCreate;
use twilight_model::id::Id;

async fn next(shard: &mut Shard) -> Event {
    let event = tokio::time::timeout(
        Duration::from_secs(15),
        shard.next_event(EventTypeFlags::all()),
    )
    .await
    .expect("twilight got an event in time")
    .expect("the shard is open");
    match event {
        Ok(event) => {
            eprintln!("twilight event: {:?}", event.kind());
            event
        }
        // A receive error would mean a payload twilight could not parse:
        // exactly what this test exists to catch.
        Err(error) => panic!("twilight could not handle a payload: {error:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilight_connects_reads_posts_and_resumes() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("alice").await;
    let (guild_id, channel_id) = node.guild(&owner, "Twilight Guild").await;
    let (app_id, bot) = node.bot_in(&owner, &guild_id).await;
    let addr = node.ws.trim_start_matches("ws://").to_owned();

    let http = twilight_http::Client::builder()
        .token(bot.clone())
        .proxy(addr.clone(), true)
        .ratelimiter(None)
        .build();
    let me = http.current_user().await.unwrap().model().await.unwrap();
    assert!(me.bot);

    let intents = Intents::GUILDS | Intents::GUILD_MESSAGES | Intents::MESSAGE_CONTENT;
    let config = ConfigBuilder::new(bot.clone(), intents)
        .proxy_url(node.ws.clone())
        .build();
    let mut shard = Shard::with_config(ShardId::ONE, config);

    let ready = loop {
        if let Event::Ready(ready) = next(&mut shard).await {
            break ready;
        }
    };
    assert_eq!(ready.user.id, me.id);
    assert_eq!(ready.application.id.get().to_string(), app_id);
    assert_eq!(ready.guilds.len(), 1);

    let guild = loop {
        if let Event::GuildCreate(create) = next(&mut shard).await {
            match *create {
                GuildCreate::Available(guild) => break guild,
                GuildCreate::Unavailable(_) => panic!("guild unavailable"),
            }
        }
    };
    assert_eq!(guild.id.get().to_string(), guild_id);
    assert_eq!(guild.channels[0].name.as_deref(), Some("general"));
    assert_eq!(guild.roles[0].id.get(), guild.id.get());

    // Post through twilight-http: the answer must parse as a Message.
    let channel = Id::new(channel_id.parse().unwrap());
    let posted = http
        .create_message(channel)
        .content("hello from twilight")
        .await
        .unwrap()
        .model()
        .await
        .unwrap();
    assert_eq!(posted.content, "hello from twilight");
    let created = loop {
        if let Event::MessageCreate(message) = next(&mut shard).await {
            break message;
        }
    };
    assert_eq!(created.id, posted.id);
    assert_eq!(created.content, "hello from twilight");

    // Forced disconnect that keeps the session, with a message posted while
    // the socket goes down: twilight must resume (not re-identify) and get
    // the message exactly once, live or replayed from the resume buffer.
    shard.close(CloseFrame::RESUME);
    let (status, missed) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(&owner),
            Some(serde_json::json!({"content": "while you were away"})),
        )
        .await;
    assert_eq!(status, 200);
    let (mut resumed, mut replayed) = (false, None);
    while !(resumed && replayed.is_some()) {
        match next(&mut shard).await {
            Event::Resumed => resumed = true,
            Event::MessageCreate(message) => {
                assert!(replayed.is_none(), "delivered twice");
                replayed = Some(message);
            }
            Event::Ready(_) => panic!("twilight re-identified instead of resuming"),
            _ => {}
        }
    }
    let replayed = replayed.unwrap();
    assert_eq!(
        replayed.id.get().to_string(),
        missed["id"].as_str().unwrap()
    );
    assert_eq!(replayed.content, "while you were away");
    node.stop().await;
}
