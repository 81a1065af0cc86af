//! Gateway compression and encoding over real sockets: `compress=zlib-stream`
//! (one zlib stream per connection, every frame binary and sync-flushed),
//! IDENTIFY's `compress: true` (dispatches as complete zlib streams), JSON
//! in binary client frames, `encoding=etf` (Erlang terms both ways), the
//! `v`, `encoding` and `compress` checks, the
//! compressor bound, and READY's `application.flags`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use flate2::{Decompress, FlushDecompress, Status};
use futures_util::{SinkExt, StreamExt};
use guildhall_limits::Limits;
use guildhall_proto::intents;
use serde_json::{Value, json};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

const WITHIN: Duration = Duration::from_secs(10);
const SYNC_FLUSH: [u8; 4] = [0, 0, 0xff, 0xff];
const BOT_INTENTS: u64 = intents::GUILDS | intents::GUILD_MESSAGES | intents::MESSAGE_CONTENT;

/// A raw socket to `url` with `query`.
async fn socket(url: &str, query: &str) -> Client {
    let (ws, _) = tokio_tungstenite::connect_async(format!("{url}/?{query}"))
        .await
        .unwrap();
    Client { ws }
}

/// The next frame, which must be binary.
async fn binary(client: &mut Client) -> Vec<u8> {
    loop {
        let frame = tokio::time::timeout(WITHIN, client.ws.next())
            .await
            .expect("gateway answered");
        match frame {
            Some(Ok(Message::Binary(bytes))) => return bytes.to_vec(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a binary frame, got {other:?}"),
        }
    }
}

/// A `compress=zlib-stream` client: one inflater for the connection.
struct ZlibStream {
    client: Client,
    inflate: Decompress,
}

impl ZlibStream {
    async fn connect(url: &str) -> Self {
        Self {
            client: socket(url, "v=10&encoding=json&compress=zlib-stream").await,
            inflate: Decompress::new(true),
        }
    }

    /// The next message: a binary frame ending with the sync-flush suffix,
    /// inflated on the connection's one stream.
    async fn next(&mut self) -> Value {
        let frame = binary(&mut self.client).await;
        assert!(frame.ends_with(&SYNC_FLUSH), "every frame is sync-flushed");
        let mut out = Vec::with_capacity(frame.len() * 8 + 1024);
        let start = self.inflate.total_in();
        loop {
            let used = (self.inflate.total_in() - start) as usize;
            self.inflate
                .decompress_vec(&frame[used..], &mut out, FlushDecompress::Sync)
                .unwrap();
            if (self.inflate.total_in() - start) as usize == frame.len()
                && out.len() < out.capacity()
            {
                break;
            }
            out.reserve(out.capacity());
        }
        serde_json::from_slice(&out).unwrap()
    }

    async fn dispatch(&mut self, t: &str) -> Value {
        loop {
            let message = self.next().await;
            if message["t"] == t {
                return message;
            }
        }
    }
}

/// An IDENTIFY payload for `token`.
fn identify(token: &str, compress: bool) -> Value {
    json!({"op": 2, "d": {"token": format!("Bot {token}"), "intents": BOT_INTENTS,
        "properties": {"os": "linux", "browser": "test", "device": "test"},
        "compress": compress}})
}

/// An owner, their guild and general channel, and a bot in it:
/// (owner token, guild id, channel id, app id, bot token).
async fn guild_with_bot(node: &TestNode) -> (String, String, String, String, String) {
    let (owner, _) = node.register("owner").await;
    let (guild_id, channel_id) = node.guild(&owner, "guild one").await;
    let (app_id, bot) = node.bot_in(&owner, &guild_id).await;
    (owner, guild_id, channel_id, app_id, bot)
}

async fn post(node: &TestNode, token: &str, channel_id: &str, content: &str) {
    let (status, body) = node
        .call(
            "POST",
            &format!("/channels/{channel_id}/messages"),
            Some(token),
            Some(json!({"content": content})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
}

/// The status of a refused upgrade.
async fn refused(url: &str, query: &str) -> (u16, Option<String>) {
    match tokio_tungstenite::connect_async(format!("{url}/?{query}")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => (
            response.status().as_u16(),
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned()),
        ),
        Err(other) => panic!("refused with {other}"),
        Ok(_) => panic!("{query}: upgraded"),
    }
}

#[tokio::test]
async fn zlib_stream_carries_hello_ready_guild_create_and_messages_on_one_stream() {
    let node = TestNode::start().await;
    let (owner, guild_id, channel_id, _, bot) = guild_with_bot(&node).await;
    let mut z = ZlibStream::connect(&node.ws).await;
    let hello = z.next().await;
    assert_eq!(hello["op"], 10);
    // The client's own payloads stay plain text: compression is one way.
    z.client.send(identify(&bot, false)).await;
    let ready = z.dispatch("READY").await;
    assert_eq!(ready["d"]["guilds"][0]["id"], guild_id.as_str());
    let guild = z.dispatch("GUILD_CREATE").await;
    assert_eq!(guild["d"]["id"], guild_id.as_str());
    z.client.send(json!({"op": 1, "d": ready["s"]})).await;
    assert_eq!(z.next().await["op"], 11);
    for i in 0..3 {
        let content = format!("hello {i} {}", "ab".repeat(i * 300));
        post(&node, &owner, &channel_id, &content).await;
        let message = z.dispatch("MESSAGE_CREATE").await;
        assert_eq!(message["d"]["content"], content.as_str());
    }
    assert_eq!(node.metric("guildhall_gateway_compressors").await, 1);
    drop(z);
    // The compressor's place is released with its socket.
    let deadline = tokio::time::Instant::now() + WITHIN;
    while node.metric("guildhall_gateway_compressors").await != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "compressor released"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.stop().await;
}

#[tokio::test]
async fn zstd_stream_carries_hello_ready_guild_create_and_messages_on_one_frame() {
    let node = TestNode::start().await;
    let (owner, guild_id, channel_id, _, bot) = guild_with_bot(&node).await;
    let mut client = socket(&node.ws, "v=10&encoding=json&compress=zstd-stream").await;
    let mut decoder = zstd_safe::DCtx::try_create().unwrap();
    let mut next = async |client: &mut Client| -> Value {
        let frame = binary(client).await;
        let mut out: Vec<u8> = Vec::with_capacity(frame.len() * 20 + 4096);
        let mut source = zstd_safe::InBuffer::around(&frame);
        let mut sink = zstd_safe::OutBuffer::around(&mut out);
        decoder.decompress_stream(&mut sink, &mut source).unwrap();
        assert_eq!(
            source.pos(),
            frame.len(),
            "each message decodes as it arrives"
        );
        serde_json::from_slice(&out).unwrap()
    };
    assert_eq!(next(&mut client).await["op"], 10);
    client.send(identify(&bot, true)).await;
    assert_eq!(next(&mut client).await["t"], "READY");
    let guild = next(&mut client).await;
    assert_eq!(guild["t"], "GUILD_CREATE");
    assert_eq!(guild["d"]["id"], guild_id.as_str());
    post(&node, &owner, &channel_id, "over zstd").await;
    loop {
        let message = next(&mut client).await;
        if message["t"] == "MESSAGE_CREATE" {
            assert_eq!(message["d"]["content"], "over zstd");
            break;
        }
    }
    assert_eq!(node.metric("guildhall_gateway_compressors").await, 1);
    node.stop().await;
}

#[tokio::test]
async fn zlib_stream_with_identify_compress_is_still_one_stream() {
    let node = TestNode::start().await;
    let (_, guild_id, _, _, bot) = guild_with_bot(&node).await;
    let mut z = ZlibStream::connect(&node.ws).await;
    assert_eq!(z.next().await["op"], 10);
    z.client.send(identify(&bot, true)).await;
    assert_eq!(z.dispatch("READY").await["op"], 0);
    let guild = z.dispatch("GUILD_CREATE").await;
    assert_eq!(guild["d"]["id"], guild_id.as_str());
    assert_eq!(node.metric("guildhall_gateway_compressors").await, 1);
    node.stop().await;
}

#[tokio::test]
async fn payload_compression_sends_dispatches_as_complete_zlib_streams() {
    let node = TestNode::start().await;
    let (owner, guild_id, channel_id, _, bot) = guild_with_bot(&node).await;
    let mut client = Client::connect(&node.ws).await;
    // HELLO precedes IDENTIFY, so it is plain.
    assert_eq!(client.next().await.unwrap()["op"], 10);
    client.send(identify(&bot, true)).await;
    let whole = |frame: Vec<u8>| -> Value {
        assert_eq!(frame[0], 0x78, "a zlib header");
        let mut inflate = Decompress::new(true);
        let mut out = Vec::with_capacity(frame.len() * 20 + 1024);
        let status = inflate
            .decompress_vec(&frame, &mut out, FlushDecompress::Finish)
            .unwrap();
        assert_eq!(
            status,
            Status::StreamEnd,
            "each payload is a complete stream"
        );
        assert_eq!(inflate.total_in() as usize, frame.len());
        serde_json::from_slice(&out).unwrap()
    };
    let ready = whole(binary(&mut client).await);
    assert_eq!(ready["t"], "READY");
    let guild = whole(binary(&mut client).await);
    assert_eq!(guild["t"], "GUILD_CREATE");
    assert_eq!(guild["d"]["id"], guild_id.as_str());
    // Other ops stay text.
    client.send(json!({"op": 1, "d": 2})).await;
    assert_eq!(client.next().await.unwrap()["op"], 11);
    post(&node, &owner, &channel_id, "compressed").await;
    let message = whole(binary(&mut client).await);
    assert_eq!(message["t"], "MESSAGE_CREATE");
    assert_eq!(message["d"]["content"], "compressed");
    node.stop().await;
}

#[tokio::test]
async fn identify_in_a_binary_frame_gets_ready() {
    let node = TestNode::start().await;
    let (_, guild_id, _, _, bot) = guild_with_bot(&node).await;
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    let payload = identify(&bot, false).to_string();
    client
        .ws
        .send(Message::Binary(payload.into_bytes().into()))
        .await
        .unwrap();
    let ready = client.dispatch("READY").await;
    assert_eq!(ready["d"]["guilds"][0]["id"], guild_id.as_str());
    client
        .ws
        .send(Message::Binary(br#"{"op":1,"d":1}"#.to_vec().into()))
        .await
        .unwrap();
    loop {
        if client.next().await.unwrap()["op"] == 11 {
            break;
        }
    }
    node.stop().await;
}

#[tokio::test]
async fn binary_frames_over_the_payload_bound_or_not_utf8_close_with_4002() {
    let node = TestNode::start().await;
    let text_like = format!(r#"{{"op":1,"d":null,"pad":"{}"}}"#, "a".repeat(5_000));
    for frame in [text_like.into_bytes(), vec![0x78, 0x9c, 0xff, 0xfe, 0x00]] {
        let mut client = Client::connect(&node.ws).await;
        assert_eq!(client.next().await.unwrap()["op"], 10);
        client.ws.send(Message::Binary(frame.into())).await.unwrap();
        assert_eq!(client.close_code().await, Some(4002));
    }
    // The same payload in a text frame: the same code.
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    client
        .send_raw(&format!(
            r#"{{"op":1,"d":null,"pad":"{}"}}"#,
            "a".repeat(5_000)
        ))
        .await;
    assert_eq!(client.close_code().await, Some(4002));
    node.stop().await;
}

/// Discord's available versions are 9 and 10: any other is closed with
/// 4012 before HELLO; READY's `v` is the one the client asked for.
#[tokio::test]
async fn versions_other_than_9_and_10_close_with_4012() {
    let node = TestNode::start().await;
    for v in ["8", "6", "11", "abc"] {
        let mut client = socket(&node.ws, &format!("v={v}&encoding=json")).await;
        assert_eq!(client.next().await, Err(Some(4012)), "v={v}");
    }
    // The versions spoken: HELLO, and a READY that names the version asked
    // for (absent: 10).
    let (token, _) = node.register("versions").await;
    for (query, v) in [
        ("v=9&encoding=json", 9),
        ("v=10&encoding=json", 10),
        ("encoding=json", 10),
    ] {
        let mut client = socket(&node.ws, query).await;
        let ready = client.identify(&token, intents::GUILDS).await;
        assert_eq!(ready["d"]["v"], v, "{query}");
    }
    // zlib-stream with a bad version: the close frame needs no inflating.
    let mut client = socket(&node.ws, "v=5&encoding=json&compress=zlib-stream").await;
    assert_eq!(client.next().await, Err(Some(4012)));
    node.stop().await;
}

#[tokio::test]
async fn unknown_query_values_are_refused_with_400() {
    let node = TestNode::start().await;
    for query in ["v=10&encoding=xml", "v=10&encoding=json&compress=deflate"] {
        assert_eq!(refused(&node.ws, query).await.0, 400, "{query}");
    }
    assert_eq!(
        node.metric("guildhall_gateway_query_refused_total").await,
        2
    );
    node.stop().await;
}

/// A JSON value from an Erlang term, read with `eetf` (an implementation
/// independent of the server's), the way an erlpack client reads it:
/// binaries are strings, `nil` is null.
fn term_value(term: eetf::Term) -> Value {
    use eetf::Term;
    match term {
        Term::Atom(a) => match a.name.as_str() {
            "nil" => Value::Null,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            other => panic!("atom {other}"),
        },
        Term::FixInteger(i) => json!(i.value),
        Term::BigInteger(b) => json!(b.value.to_string().parse::<i128>().unwrap() as f64),
        Term::Float(f) => json!(f.value),
        Term::Binary(b) => Value::String(String::from_utf8(b.bytes).unwrap()),
        Term::ByteList(b) => Value::Array(b.bytes.into_iter().map(Value::from).collect()),
        Term::List(l) => Value::Array(l.elements.into_iter().map(term_value).collect()),
        Term::Map(m) => Value::Object(
            m.map
                .into_iter()
                .map(|(k, v)| match k {
                    Term::Binary(b) => (String::from_utf8(b.bytes).unwrap(), term_value(v)),
                    other => panic!("a key that is not a binary: {other:?}"),
                })
                .collect(),
        ),
        other => panic!("unexpected term {other:?}"),
    }
}

/// An Erlang term for a JSON value, as erlpack sends one: binary keys and
/// strings, atoms for null and booleans.
fn value_term(value: &Value) -> eetf::Term {
    use eetf::{Atom, Binary, FixInteger, List, Term};
    match value {
        Value::Null => Term::Atom(Atom::from("nil")),
        Value::Bool(b) => Term::Atom(Atom::from(if *b { "true" } else { "false" })),
        Value::Number(n) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => Term::FixInteger(FixInteger::from(i)),
            None => Term::BigInteger(eetf::BigInteger::from(n.as_u64().unwrap())),
        },
        Value::String(s) => Term::Binary(Binary::from(s.as_bytes())),
        Value::Array(items) => {
            Term::List(List::from(items.iter().map(value_term).collect::<Vec<_>>()))
        }
        Value::Object(map) => Term::Map(eetf::Map::from(
            map.iter()
                .map(|(k, v)| (Term::Binary(Binary::from(k.as_bytes())), value_term(v)))
                .collect::<std::collections::HashMap<_, _>>(),
        )),
    }
}

fn etf_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    value_term(value).encode(&mut out).unwrap();
    out
}

/// The next frame of an `encoding=etf` socket: binary, one term.
async fn etf_next(client: &mut Client) -> Value {
    let frame = binary(client).await;
    assert_eq!(frame[0], 131, "a term starts with the version byte");
    term_value(eetf::Term::decode(std::io::Cursor::new(frame)).unwrap())
}

async fn etf_dispatch(client: &mut Client, t: &str) -> Value {
    loop {
        let frame = etf_next(client).await;
        if frame["t"] == t {
            return frame;
        }
    }
}

/// `encoding=etf`: every frame is an Erlang term in a binary frame, read
/// here by an independent implementation; the client's terms (erlpack's
/// shape) are read as payloads; what Discord refuses (atom keys, a
/// compressed term, a term that is no payload) closes with 4002; and ETF
/// rides on zlib-stream.
#[tokio::test]
async fn etf_sessions_speak_erlang_terms_both_ways() {
    let node = TestNode::start().await;
    let (owner, guild_id, channel_id, _, bot) = guild_with_bot(&node).await;
    let mut client = socket(&node.ws, "v=10&encoding=etf").await;
    let hello = etf_next(&mut client).await;
    assert_eq!(hello["op"], 10);
    assert!(
        hello["d"]["heartbeat_interval"].as_f64().unwrap() > 0.0,
        "{hello}"
    );
    assert_eq!(hello["s"], Value::Null, "null travels as the atom nil");
    client
        .ws
        .send(Message::Binary(etf_bytes(&identify(&bot, false)).into()))
        .await
        .unwrap();
    let ready = etf_dispatch(&mut client, "READY").await;
    assert_eq!(
        ready["d"]["guilds"][0]["id"],
        guild_id.as_str(),
        "snowflakes are strings"
    );
    assert!(ready["d"]["session_id"].is_string(), "{ready}");
    etf_dispatch(&mut client, "GUILD_CREATE").await;
    post(&node, &owner, &channel_id, "in erlang terms").await;
    let created = etf_dispatch(&mut client, "MESSAGE_CREATE").await;
    assert_eq!(created["d"]["content"], "in erlang terms");
    assert_eq!(created["d"]["channel_id"], channel_id.as_str());
    assert_eq!(created["d"]["edited_timestamp"], Value::Null);
    assert_eq!(created["d"]["tts"], false);
    assert_eq!(created["d"]["mentions"], json!([]));
    client
        .ws
        .send(Message::Binary(
            etf_bytes(&json!({"op": 1, "d": null})).into(),
        ))
        .await
        .unwrap();
    loop {
        if etf_next(&mut client).await["op"] == 11 {
            break;
        }
    }

    // Atom keys, a compressed term, a tuple, a truncated term: 4002.
    let atom_keys = {
        let mut out = Vec::new();
        eetf::Term::Map(eetf::Map::from([(
            eetf::Term::Atom(eetf::Atom::from("op")),
            eetf::Term::FixInteger(eetf::FixInteger::from(1)),
        )]))
        .encode(&mut out)
        .unwrap();
        out
    };
    let tuple = {
        let mut out = Vec::new();
        eetf::Term::Tuple(eetf::Tuple::from(vec![]))
            .encode(&mut out)
            .unwrap();
        out
    };
    for (name, frame) in [
        ("atom keys", atom_keys),
        ("compressed", vec![131, 80, 0, 0, 0, 10, 120, 156]),
        ("tuple", tuple),
        ("truncated", vec![131, 116, 0, 0, 0, 2, 109]),
        ("declares 4 GiB", vec![131, 109, 255, 255, 255, 255]),
    ] {
        let mut client = socket(&node.ws, "v=10&encoding=etf").await;
        etf_next(&mut client).await;
        client.ws.send(Message::Binary(frame.into())).await.unwrap();
        loop {
            match client.next().await {
                Err(code) => {
                    assert_eq!(code, Some(4002), "{name}");
                    break;
                }
                Ok(_) => continue,
            }
        }
    }
    assert_eq!(
        node.metric("guildhall_gateway_etf_undecodable_total").await,
        5
    );

    // ETF under zlib-stream: inflated, then a term.
    let mut client = socket(&node.ws, "v=10&encoding=etf&compress=zlib-stream").await;
    let frame = binary(&mut client).await;
    assert!(frame.ends_with(&SYNC_FLUSH));
    let mut inflate = Decompress::new(true);
    let mut out = Vec::with_capacity(4096);
    inflate
        .decompress_vec(&frame, &mut out, FlushDecompress::Sync)
        .unwrap();
    let hello = term_value(eetf::Term::decode(std::io::Cursor::new(out)).unwrap());
    assert_eq!(hello["op"], 10);
    node.stop().await;
}

#[tokio::test]
async fn compressors_are_bounded() {
    let limits = Limits {
        gateway_compressors_max: 1,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (_, _, _, _, bot) = guild_with_bot(&node).await;
    let mut first = ZlibStream::connect(&node.ws).await;
    assert_eq!(first.next().await["op"], 10);
    // No compressor free: a zlib-stream upgrade is refused before the 101.
    let (status, retry_after) = refused(&node.ws, "v=10&encoding=json&compress=zlib-stream").await;
    assert_eq!(status, 503);
    assert!(retry_after.is_some());
    assert_eq!(
        node.metric("guildhall_compressed_upgrades_refused_total")
            .await,
        1
    );
    // ... and payload compression is declined: dispatches come plain.
    let mut client = Client::connect(&node.ws).await;
    assert_eq!(client.next().await.unwrap()["op"], 10);
    client.send(identify(&bot, true)).await;
    assert_eq!(client.dispatch("READY").await["t"], "READY");
    assert_eq!(
        node.metric("guildhall_payload_compression_declined_total")
            .await,
        1
    );
    node.stop().await;
}

#[tokio::test]
async fn ready_carries_the_application_flags() {
    let node = TestNode::start().await;
    let (owner, _, _, app_id, bot) = guild_with_bot(&node).await;
    // The privileged intents' bits plus APPLICATION_COMMAND_BADGE (1 << 23).
    let flags: u64 = (1 << 13) | (1 << 15) | (1 << 19) | (1 << 23);
    let (status, body) = node
        .call(
            "PATCH",
            &format!("/applications/{app_id}"),
            Some(&owner),
            Some(json!({"flags": flags})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut client = Client::connect(&node.ws).await;
    let ready = client.identify(&bot, BOT_INTENTS).await;
    assert_eq!(ready["d"]["application"]["id"], app_id.as_str());
    assert_eq!(ready["d"]["application"]["flags"], flags);
    // A user's READY: no application flags.
    let mut client = Client::connect(&node.ws).await;
    let ready = client.identify(&owner, intents::GUILDS).await;
    assert_eq!(ready["d"]["application"]["flags"], 0);
    node.stop().await;
}
