//! The SFU end to end over real sockets: a test client that speaks the
//! documented voice gateway v8 (WebSocket on 127.0.0.1:0, and once over
//! TLS) and UDP media, with the control plane driven over the in-process
//! bus with the real envelopes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use guildhall_cluster::{Bus, LocalBus};
use guildhall_limits::Limits;
use guildhall_proto::voice::{
    SfuEnvelope, SfuRefusal, SfuReply, SfuRequest, decode_reply, sfu_control_subject,
    sfu_requests_subject,
};
use guildhall_sfu::crypto::{Cipher, Mode};
use guildhall_sfu::{Sfu, SfuConfig};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

const NODE: &str = "sfu-a";
const GUILD: i64 = 41_771_983_423_143_937;
const CHANNEL: i64 = 10;
/// Long enough never to fire on a healthy run; only bounds a hung one.
const WAIT: Duration = Duration::from_secs(20);

struct Harness {
    sfu: Sfu,
    bus: Arc<LocalBus>,
    ws_addr: SocketAddr,
}

fn test_limits() -> Limits {
    Limits {
        // The tests send bursts faster than real time.
        sfu_packets_burst: 1_000,
        sfu_packets_per_s_per_ssrc: 1_000,
        ..Limits::default()
    }
}

async fn start(limits: Limits) -> Harness {
    let bus = Arc::new(LocalBus::new(1 << 20));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ws_addr = listener.local_addr().unwrap();
    let sfu = Sfu::start(
        SfuConfig {
            node: NODE.into(),
            limits,
            udp_bind: "127.0.0.1:0".parse().unwrap(),
            public_ip: "127.0.0.1".into(),
            endpoint: format!("{ws_addr}/voice"),
        },
        bus.clone(),
    )
    .await
    .unwrap();
    let router = sfu.router("/voice");
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Harness { sfu, bus, ws_addr }
}

impl Harness {
    async fn request(&self, control: bool, body: SfuRequest) -> SfuReply {
        let subject = if control {
            sfu_control_subject(NODE)
        } else {
            sfu_requests_subject(NODE)
        };
        let reply = self
            .bus
            .request(
                &subject,
                Bytes::from(SfuEnvelope::new(body).encode()),
                Duration::from_secs(10),
            )
            .await
            .unwrap();
        decode_reply(&reply.payload).unwrap()
    }

    async fn allocate(&self, channel_id: i64, epoch: u64) -> SfuReply {
        self.request(
            false,
            SfuRequest::Allocate {
                guild_id: GUILD,
                channel_id,
                epoch,
            },
        )
        .await
    }

    async fn admit(&self, channel_id: i64, user_id: i64, epoch: u64) -> SfuReply {
        let token_sha256 = Sha256::digest(token(user_id).as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.request(
            false,
            SfuRequest::Admit {
                guild_id: GUILD,
                channel_id,
                user_id,
                session_id: session(user_id),
                token_sha256,
                epoch,
            },
        )
        .await
    }

    async fn connect(&self) -> Client {
        self.connect_url(&format!("ws://{}/voice/?v=8", self.ws_addr))
            .await
    }

    async fn connect_url(&self, url: &str) -> Client {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        let mut client = Client { ws, seq_ack: None };
        let hello = client.next().await;
        assert_eq!(hello["op"], 8);
        assert!(hello.get("seq").is_none(), "hello is connection-level");
        client
    }

    async fn wait_for(&self, what: &str, check: impl Fn(&guildhall_sfu::SfuStats) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let stats = self.sfu.stats();
            if check(&stats) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: stats {stats:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn token(user_id: i64) -> String {
    format!("token-{user_id}")
}

fn session(user_id: i64) -> String {
    format!("session-{user_id}")
}

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

struct Client<S = Ws> {
    ws: S,
    seq_ack: Option<u64>,
}

impl<S> Client<S>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
        + Unpin,
{
    async fn send(&mut self, value: Value) {
        self.ws
            .send(Message::Text(value.to_string().into()))
            .await
            .unwrap();
    }

    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("no frame in time")
                .expect("connection ended")
                .expect("websocket error");
            match message {
                Message::Text(text) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    if let Some(seq) = value["seq"].as_u64() {
                        self.seq_ack = Some(seq);
                    }
                    return value;
                }
                Message::Close(frame) => panic!("closed: {frame:?}"),
                _ => continue,
            }
        }
    }

    /// The next frame of `op`, skipping others.
    async fn expect(&mut self, op: u64) -> Value {
        loop {
            let value = self.next().await;
            if value["op"] == op {
                return value;
            }
        }
    }

    async fn expect_close(&mut self, code: u16) {
        loop {
            let message = tokio::time::timeout(WAIT, self.ws.next())
                .await
                .expect("no close in time");
            match message {
                Some(Ok(Message::Close(Some(frame)))) => {
                    assert_eq!(frame.code, CloseCode::from(code), "{frame:?}");
                    return;
                }
                Some(Ok(Message::Close(None))) | None | Some(Err(_)) => {
                    panic!("closed without code {code}")
                }
                Some(Ok(_)) => continue,
            }
        }
    }

    async fn identify(&mut self, user_id: i64) -> u32 {
        self.send(json!({"op": 0, "d": {
            "server_id": GUILD.to_string(),
            "user_id": user_id.to_string(),
            "session_id": session(user_id),
            "token": token(user_id),
            "max_dave_protocol_version": 1,
        }}))
        .await;
        let ready = self.expect(2).await;
        assert_eq!(ready["d"]["ip"], "127.0.0.1");
        assert_eq!(
            ready["d"]["modes"],
            json!(["aead_aes256_gcm_rtpsize", "aead_xchacha20_poly1305_rtpsize"])
        );
        assert!(ready["seq"].as_u64().is_some());
        u32::try_from(ready["d"]["ssrc"].as_u64().unwrap()).unwrap()
    }

    async fn select(&mut self, udp: &Udp, mode: &str) -> Cipher {
        self.send(json!({"op": 1, "d": {"protocol": "udp", "data": {
            "address": udp.seen.ip().to_string(),
            "port": udp.seen.port(),
            "mode": mode,
        }}}))
        .await;
        let description = self.expect(4).await;
        assert_eq!(description["d"]["mode"], mode);
        assert_eq!(description["d"]["dave_protocol_version"], 0);
        let key: Vec<u8> = description["d"]["secret_key"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| u8::try_from(v.as_u64().unwrap()).unwrap())
            .collect();
        Cipher::new(
            Mode::from_name(mode).unwrap(),
            &<[u8; 32]>::try_from(key).unwrap(),
        )
    }
}

struct Udp {
    socket: UdpSocket,
    seen: SocketAddr,
}

impl Udp {
    /// IP discovery as discord.py does it.
    async fn discover(server: SocketAddr, ssrc: u32) -> Udp {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(server).await.unwrap();
        let mut request = [0u8; 74];
        request[0..2].copy_from_slice(&1u16.to_be_bytes());
        request[2..4].copy_from_slice(&70u16.to_be_bytes());
        request[4..8].copy_from_slice(&ssrc.to_be_bytes());
        socket.send(&request).await.unwrap();
        let mut answer = [0u8; 128];
        let n = tokio::time::timeout(WAIT, socket.recv(&mut answer))
            .await
            .unwrap()
            .unwrap();
        // discord.py's exact check.
        assert!(answer[1] == 0x02 && n == 74);
        let end = answer[8..72].iter().position(|b| *b == 0).unwrap() + 8;
        let ip = std::str::from_utf8(&answer[8..end]).unwrap();
        let port = u16::from_be_bytes([answer[72], answer[73]]);
        let seen = SocketAddr::new(ip.parse().unwrap(), port);
        assert_eq!(seen, socket.local_addr().unwrap());
        Udp { socket, seen }
    }

    async fn recv(&self) -> Vec<u8> {
        let mut buf = vec![0u8; 2048];
        let n = tokio::time::timeout(WAIT, self.socket.recv(&mut buf))
            .await
            .expect("no datagram in time")
            .unwrap();
        buf.truncate(n);
        buf
    }
}

/// discord.py's RTP header.
fn header(sequence: u16, timestamp: u32, ssrc: u32) -> [u8; 12] {
    let mut h = [0u8; 12];
    h[0] = 0x80;
    h[1] = 0x78;
    h[2..4].copy_from_slice(&sequence.to_be_bytes());
    h[4..8].copy_from_slice(&timestamp.to_be_bytes());
    h[8..12].copy_from_slice(&ssrc.to_be_bytes());
    h
}

struct Pair {
    a: Client,
    b: Client,
    a_udp: Udp,
    b_udp: Udp,
    a_ssrc: u32,
    a_cipher: Cipher,
    b_cipher: Cipher,
}

const USER_A: i64 = 104_694_319_306_248_192;
const USER_B: i64 = 200;

async fn pair(h: &Harness) -> Pair {
    assert!(matches!(
        h.allocate(CHANNEL, 1).await,
        SfuReply::Allocated { endpoint } if endpoint == format!("{}/voice", h.ws_addr)
    ));
    assert_eq!(h.admit(CHANNEL, USER_A, 1).await, SfuReply::Admitted);
    assert_eq!(h.admit(CHANNEL, USER_B, 1).await, SfuReply::Admitted);
    let udp_port = h.sfu.udp_addr();
    let mut a = h.connect().await;
    let a_ssrc = a.identify(USER_A).await;
    let a_udp = Udp::discover(udp_port, a_ssrc).await;
    let a_cipher = a.select(&a_udp, "aead_aes256_gcm_rtpsize").await;
    // discord.js's URL shape: no slash before the query.
    let mut b = h
        .connect_url(&format!("ws://{}/voice?v=8", h.ws_addr))
        .await;
    let b_ssrc = b.identify(USER_B).await;
    assert_ne!(a_ssrc, b_ssrc);
    // B learns who is here and their SSRC; A learns of B.
    let present = b.expect(11).await;
    assert_eq!(present["d"]["user_ids"], json!([USER_A.to_string()]));
    let a_speaking = b.expect(5).await;
    assert_eq!(a_speaking["d"]["user_id"], USER_A.to_string());
    assert_eq!(a_speaking["d"]["ssrc"], a_ssrc);
    let joined = a.expect(11).await;
    assert_eq!(joined["d"]["user_ids"], json!([USER_B.to_string()]));
    let b_udp = Udp::discover(udp_port, b_ssrc).await;
    let b_cipher = b.select(&b_udp, "aead_xchacha20_poly1305_rtpsize").await;
    Pair {
        a,
        b,
        a_udp,
        b_udp,
        a_ssrc,
        a_cipher,
        b_cipher,
    }
}

#[tokio::test]
async fn two_participants_forward_every_packet_each_under_its_own_key() {
    let h = start(test_limits()).await;
    let mut p = pair(&h).await;
    // Speaking is relayed with the user id.
    p.a.send(json!({"op": 5, "d": {"speaking": 1, "delay": 0, "ssrc": p.a_ssrc}}))
        .await;
    let relayed = p.b.expect(5).await;
    assert_eq!(
        relayed["d"],
        json!({"user_id": USER_A.to_string(), "ssrc": p.a_ssrc, "speaking": 1})
    );
    const N: u32 = 50;
    let mut packet = Vec::new();
    for i in 0..N {
        let opus = format!("opus frame {i}");
        p.a_cipher.seal(
            &header(u16::try_from(i).unwrap(), i * 960, p.a_ssrc),
            opus.as_bytes(),
            i,
            &mut packet,
        );
        p.a_udp.socket.send(&packet).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut plain = Vec::new();
    for _ in 0..N {
        let datagram = p.b_udp.recv().await;
        let header_len = p.b_cipher.open(&datagram, &mut plain).expect("B decrypts");
        assert_eq!(header_len, 12);
        // The sender's SSRC is kept.
        assert_eq!(&plain[8..12], &p.a_ssrc.to_be_bytes());
        seen.push(String::from_utf8(plain[12..].to_vec()).unwrap());
    }
    seen.sort();
    let mut expected: Vec<String> = (0..N).map(|i| format!("opus frame {i}")).collect();
    expected.sort();
    assert_eq!(seen, expected);
    let stats = h.sfu.stats();
    assert_eq!(stats.decrypted_total, u64::from(N));
    assert_eq!(stats.auth_failures_total, 0);
    assert_eq!(stats.forwarded_total, u64::from(N));

    // A tampered packet is an auth failure and is not forwarded.
    p.a_cipher
        .seal(&header(999, 0, p.a_ssrc), b"tampered", N, &mut packet);
    let last = packet.len() - 5;
    packet[last] ^= 0x01;
    p.a_udp.socket.send(&packet).await.unwrap();
    h.wait_for("auth failure counted", |s| s.auth_failures_total == 1)
        .await;
    p.a_cipher
        .seal(&header(1000, 0, p.a_ssrc), b"after", N + 1, &mut packet);
    p.a_udp.socket.send(&packet).await.unwrap();
    let datagram = p.b_udp.recv().await;
    p.b_cipher.open(&datagram, &mut plain).unwrap();
    assert_eq!(&plain[12..], b"after");
    let stats = h.sfu.stats();
    assert_eq!(stats.forwarded_total, u64::from(N) + 1);
    assert_eq!(stats.decrypted_total, u64::from(N) + 1);

    // RTCP is dropped and counted.
    let mut rtcp = [0u8; 40];
    rtcp[0] = 0x80;
    rtcp[1] = 200;
    p.a_udp.socket.send(&rtcp).await.unwrap();
    h.wait_for("rtcp counted", |s| s.rtcp_dropped_total == 1)
        .await;

    // @discordjs/voice's keep-alive is echoed.
    let keep_alive = 7u64.to_le_bytes();
    p.a_udp.socket.send(&keep_alive).await.unwrap();
    assert_eq!(p.a_udp.recv().await, keep_alive);
    assert_eq!(h.sfu.stats().keepalives_echoed_total, 1);

    let info = h.sfu.info();
    assert_eq!((info.sessions, info.calls), (2, 1));

    // Evict B: A hears op 13, B is closed with 4014.
    assert_eq!(
        h.request(
            true,
            SfuRequest::Evict {
                channel_id: CHANNEL,
                user_id: USER_B
            }
        )
        .await,
        SfuReply::Done
    );
    let gone = p.a.expect(13).await;
    assert_eq!(gone["d"]["user_id"], USER_B.to_string());
    p.b.expect_close(4014).await;
    // Release: A is closed with 4022, the call is gone.
    assert_eq!(
        h.request(
            true,
            SfuRequest::Release {
                channel_id: CHANNEL,
                epoch: 1
            }
        )
        .await,
        SfuReply::Done
    );
    p.a.expect_close(4022).await;
    let info = h.sfu.info();
    assert_eq!((info.sessions, info.calls), (0, 0));
}

#[tokio::test]
async fn resume_replays_the_missed_numbered_messages() {
    let h = start(test_limits()).await;
    let mut p = pair(&h).await;
    // B heartbeats what it saw, then drops its connection.
    let seq_ack = p.b.seq_ack.unwrap();
    p.b.send(json!({"op": 3, "d": {"t": 1, "seq_ack": seq_ack}}))
        .await;
    assert_eq!(p.b.expect(6).await["d"]["t"], 1);
    drop(p.b);
    // What B misses: A's speaking.
    p.a.send(json!({"op": 5, "d": {"speaking": 1, "delay": 0, "ssrc": p.a_ssrc}}))
        .await;
    p.a.send(json!({"op": 5, "d": {"speaking": 0, "delay": 0, "ssrc": p.a_ssrc}}))
        .await;
    let mut b = h.connect().await;
    b.send(json!({"op": 7, "d": {
        "server_id": GUILD.to_string(),
        "session_id": session(USER_B),
        "token": token(USER_B),
        "seq_ack": seq_ack,
    }}))
    .await;
    assert_eq!(b.next().await["op"], 9);
    let first = b.expect(5).await;
    assert_eq!(first["seq"], seq_ack + 1);
    assert_eq!(first["d"]["speaking"], 1);
    let second = b.expect(5).await;
    assert_eq!(second["seq"], seq_ack + 2);
    assert_eq!(second["d"]["speaking"], 0);
    // The media keeps flowing to the resumed session (same key).
    let mut packet = Vec::new();
    p.a_cipher
        .seal(&header(1, 960, p.a_ssrc), b"after resume", 0, &mut packet);
    p.a_udp.socket.send(&packet).await.unwrap();
    let mut plain = Vec::new();
    p.b_cipher.open(&p.b_udp.recv().await, &mut plain).unwrap();
    assert_eq!(&plain[12..], b"after resume");
    assert_eq!(h.sfu.stats().resumed_total, 1);

    // A resume whose missed messages are gone (acked from the future) or
    // of an unknown session is closed with 4006.
    let mut stranger = h.connect().await;
    stranger
        .send(json!({"op": 7, "d": {
            "server_id": GUILD.to_string(),
            "session_id": "nobody",
            "token": "x",
            "seq_ack": 1,
        }}))
        .await;
    stranger.expect_close(4006).await;
}

async fn closes_with(h: &Harness, steps: &[Value], code: u16) {
    let mut c = h.connect().await;
    for step in steps {
        c.send(step.clone()).await;
    }
    c.expect_close(code).await;
}

fn identify_json(user_id: i64, token: &str) -> Value {
    json!({"op": 0, "d": {
        "server_id": GUILD.to_string(),
        "user_id": user_id.to_string(),
        "session_id": session(user_id),
        "token": token,
    }})
}

#[tokio::test]
async fn bad_inputs_get_their_documented_close_codes() {
    let h = start(test_limits()).await;
    h.allocate(CHANNEL, 1).await;
    for user in 1..=3 {
        assert_eq!(h.admit(CHANNEL, user, 1).await, SfuReply::Admitted);
    }
    closes_with(&h, &[json!({"op": 99, "d": null})], 4001).await;
    let mut c = h.connect().await;
    c.ws.send(Message::Text("{not json".into())).await.unwrap();
    c.expect_close(4002).await;
    let select = json!({"op": 1, "d": {"protocol": "udp", "data": {
        "address": "127.0.0.1", "port": 1, "mode": "aead_aes256_gcm_rtpsize"}}});
    closes_with(&h, &[select], 4003).await;
    closes_with(&h, &[identify_json(1, "wrong")], 4004).await;
    // An unknown guild: 4011.
    closes_with(
        &h,
        &[json!({"op": 0, "d": {"server_id": "5", "user_id": "1",
            "session_id": session(1), "token": token(1)}})],
        4011,
    )
    .await;
    let mut c = h.connect().await;
    c.identify(1).await;
    c.send(identify_json(1, &token(1))).await;
    c.expect_close(4005).await;
    let mut c = h.connect().await;
    c.identify(2).await;
    c.send(json!({"op": 1, "d": {"protocol": "udp", "data": {
        "address": "127.0.0.1", "port": 1, "mode": "xsalsa20_poly1305"}}}))
        .await;
    c.expect_close(4016).await;
    let mut c = h.connect().await;
    c.identify(3).await;
    c.send(json!({"op": 1, "d": {"protocol": "webrtc", "data": {
        "address": "127.0.0.1", "port": 1, "mode": "aead_aes256_gcm_rtpsize"}}}))
        .await;
    c.expect_close(4012).await;
    // Over the payload limit (but under the frame limit): 4002.
    let mut c = h.connect().await;
    let padding = "x".repeat(test_limits().sfu_ws_payload_bytes_max);
    c.send(json!({"op": 3, "d": {"t": 1}, "pad": padding}))
        .await;
    c.expect_close(4002).await;
    // Another gateway version: 4020.
    let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/voice?v=4", h.ws_addr))
        .await
        .unwrap();
    let mut c = Client { ws, seq_ack: None };
    c.expect_close(4020).await;
    assert!(h.sfu.stats().ws_closed_by_code_total >= 9);
}

#[tokio::test]
async fn silent_connections_time_out_with_4009() {
    let h = start(Limits {
        sfu_heartbeat_interval_ms: 50,
        sfu_heartbeat_timeout_ms: 200,
        sfu_identify_timeout_ms: 200,
        ..test_limits()
    })
    .await;
    h.allocate(CHANNEL, 1).await;
    h.admit(CHANNEL, 1, 1).await;
    // Never identifies.
    h.connect().await.expect_close(4009).await;
    // Identifies, never heartbeats.
    let mut c = h.connect().await;
    c.identify(1).await;
    c.expect_close(4009).await;
}

#[tokio::test]
async fn capacity_and_epochs_refuse_with_the_named_reasons() {
    let h = start(Limits {
        sfu_calls_max: 1,
        sfu_participants_per_call_max: 2,
        sfu_sessions_max: 3,
        ..test_limits()
    })
    .await;
    assert!(matches!(
        h.allocate(CHANNEL, 5).await,
        SfuReply::Allocated { .. }
    ));
    // Idempotent, and a newer epoch takes over.
    assert!(matches!(
        h.allocate(CHANNEL, 6).await,
        SfuReply::Allocated { .. }
    ));
    assert_eq!(
        h.allocate(CHANNEL, 5).await,
        SfuReply::Refused {
            reason: SfuRefusal::StaleEpoch
        }
    );
    assert_eq!(
        h.allocate(CHANNEL + 1, 1).await,
        SfuReply::Refused {
            reason: SfuRefusal::Full
        }
    );
    assert_eq!(
        h.admit(CHANNEL + 1, 1, 6).await,
        SfuReply::Refused {
            reason: SfuRefusal::UnknownCall
        }
    );
    assert_eq!(
        h.admit(CHANNEL, 1, 5).await,
        SfuReply::Refused {
            reason: SfuRefusal::StaleEpoch
        }
    );
    assert_eq!(h.admit(CHANNEL, 1, 6).await, SfuReply::Admitted);
    // Re-admitting the same user replaces, it does not count twice.
    assert_eq!(h.admit(CHANNEL, 1, 6).await, SfuReply::Admitted);
    assert_eq!(h.admit(CHANNEL, 2, 6).await, SfuReply::Admitted);
    assert_eq!(
        h.admit(CHANNEL, 3, 6).await,
        SfuReply::Refused {
            reason: SfuRefusal::Full
        }
    );
    // A malformed digest.
    assert_eq!(
        h.request(
            false,
            SfuRequest::Admit {
                guild_id: GUILD,
                channel_id: CHANNEL,
                user_id: 4,
                session_id: "s".into(),
                token_sha256: "nothex".into(),
                epoch: 6,
            }
        )
        .await,
        SfuReply::Refused {
            reason: SfuRefusal::BadRequest
        }
    );
    // A malformed envelope.
    let reply = h
        .bus
        .request(
            &sfu_requests_subject(NODE),
            Bytes::from_static(b"{"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(
        decode_reply::<SfuReply>(&reply.payload).unwrap(),
        SfuReply::Refused {
            reason: SfuRefusal::BadRequest
        }
    );
    // An older epoch's release is ignored.
    assert_eq!(
        h.request(
            true,
            SfuRequest::Release {
                channel_id: CHANNEL,
                epoch: 5
            }
        )
        .await,
        SfuReply::Done
    );
    assert_eq!(h.sfu.info().calls, 1);
    assert_eq!(h.sfu.info().sessions, 2);
    assert_eq!(h.sfu.info().sessions_max, 3);
    // Draining: no new work, control still served.
    h.sfu.drain();
    assert_eq!(
        h.allocate(CHANNEL, 6).await,
        SfuReply::Refused {
            reason: SfuRefusal::Draining
        }
    );
    assert_eq!(
        h.request(
            true,
            SfuRequest::Release {
                channel_id: CHANNEL,
                epoch: 6
            }
        )
        .await,
        SfuReply::Done
    );
    assert_eq!(h.sfu.info().calls, 0);
}

#[tokio::test]
async fn admissions_lapse_after_their_ttl() {
    let h = start(Limits {
        sfu_admission_ttl_ms: 50,
        ..test_limits()
    })
    .await;
    h.allocate(CHANNEL, 1).await;
    h.admit(CHANNEL, 1, 1).await;
    h.wait_for("admission lapsed", |s| s.admissions_lapsed_total == 1)
        .await;
    assert_eq!(h.sfu.info().sessions, 0);
    closes_with(&h, &[identify_json(1, &token(1))], 4004).await;
}

#[tokio::test]
async fn the_tls_listener_serves_the_same_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        // An end-entity certificate (req -x509 makes a CA by default,
        // which webpki refuses as a server's).
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl runs");
    assert!(status.success());
    let h = start(test_limits()).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let tls_addr = listener.local_addr().unwrap();
    let serve = h.sfu.serve_tls(listener, "/voice", &cert, &key).unwrap();
    tokio::spawn(serve);
    h.allocate(CHANNEL, 1).await;
    h.admit(CHANNEL, 1, 1).await;

    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&cert).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(tls_addr).await.unwrap();
    let tls = connector
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (ws, _) = tokio_tungstenite::client_async("wss://localhost/voice/?v=8", tls)
        .await
        .unwrap();
    let mut c = Client { ws, seq_ack: None };
    assert_eq!(c.next().await["op"], 8);
    c.identify(1).await;
    // A bad certificate path is an error at once, not in the loop.
    assert!(
        h.sfu
            .serve_tls(
                TcpListener::bind("127.0.0.1:0").await.unwrap(),
                "/voice",
                &dir.path().join("missing.pem"),
                &key
            )
            .is_err()
    );
}

#[tokio::test]
async fn requests_past_their_deadline_are_not_started() {
    let h = start(test_limits()).await;
    let allocate = SfuEnvelope::new(SfuRequest::Allocate {
        guild_id: GUILD,
        channel_id: CHANNEL,
        epoch: 1,
    });
    // The caller gives up at once: the request arrives already expired.
    let answer = h
        .bus
        .request(
            &sfu_requests_subject(NODE),
            Bytes::from(allocate.encode()),
            Duration::ZERO,
        )
        .await;
    assert!(answer.is_err());
    h.wait_for("expired request counted", |s| s.requests_expired_total == 1)
        .await;
    assert_eq!(h.sfu.info().calls, 0);
}

#[tokio::test]
async fn the_connection_cap_refuses_upgrades_with_503() {
    let h = start(Limits {
        sfu_connections_max: 1,
        sfu_sessions_max: 1,
        sfu_calls_max: 1,
        sfu_participants_per_call_max: 1,
        ..test_limits()
    })
    .await;
    let _held = h.connect().await;
    let refused = tokio_tungstenite::connect_async(format!("ws://{}/voice?v=8", h.ws_addr)).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
        }
        other => panic!("expected 503, got {other:?}"),
    }
    assert_eq!(h.sfu.stats().ws_refused_total, 1);
}

#[tokio::test]
async fn a_sender_over_its_packet_rate_is_dropped_and_counted() {
    let h = start(Limits {
        sfu_packets_per_s_per_ssrc: 1,
        sfu_packets_burst: 2,
        ..Limits::default()
    })
    .await;
    let p = pair(&h).await;
    const SENT: u64 = 20;
    let mut packet = Vec::new();
    for i in 0..SENT {
        let i = u32::try_from(i).unwrap();
        p.a_cipher
            .seal(&header(1, i, p.a_ssrc), b"frame", i, &mut packet);
        p.a_udp.socket.send(&packet).await.unwrap();
    }
    h.wait_for("every packet accounted for", |s| {
        s.decrypted_total + s.dropped_rate_total == SENT
    })
    .await;
    let stats = h.sfu.stats();
    // A burst of 2, then 1 a second: far fewer than 20 in the time it
    // takes to send them.
    assert!(stats.dropped_rate_total >= 1, "{stats:?}");
    assert_eq!(stats.forwarded_total, stats.decrypted_total);
    drop(p.b);
}
