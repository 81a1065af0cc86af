//! A voice participant written from Discord's documentation (Gateway v10
//! op 4, voice gateway v8, UDP IP discovery, the two `_rtpsize` AEAD
//! modes), for tests and benchmarks that need a call over real sockets:
//! the cluster's SFU-kill test, and `voice-bench` (op 4 → VOICE_SERVER_UPDATE
//! latency, packets forwarded per second).
//!
//! It speaks plain `ws://` to the voice gateway (the SFU's route on a
//! node's listener); the libraries' `wss://` is covered by the conformance
//! stage. Every wait has a timeout.

use aes_gcm::Aes256Gcm;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use anyhow::{Context, Result, bail};
use chacha20poly1305::XChaCha20Poly1305;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Mutex;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long any one step may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(15);

/// The transport encryption modes Discord documents as current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `aead_aes256_gcm_rtpsize`.
    Aes256Gcm,
    /// `aead_xchacha20_poly1305_rtpsize`.
    XChaCha20,
}

impl Mode {
    /// The mode's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Aes256Gcm => "aead_aes256_gcm_rtpsize",
            Mode::XChaCha20 => "aead_xchacha20_poly1305_rtpsize",
        }
    }
}

enum Cipher {
    Aes(Box<Aes256Gcm>),
    XChaCha(Box<XChaCha20Poly1305>),
}

impl Cipher {
    fn new(mode: Mode, key: &[u8]) -> Result<Self> {
        Ok(match mode {
            Mode::Aes256Gcm => Cipher::Aes(Box::new(
                Aes256Gcm::new_from_slice(key).map_err(|_| anyhow::anyhow!("bad key"))?,
            )),
            Mode::XChaCha20 => Cipher::XChaCha(Box::new(
                XChaCha20Poly1305::new_from_slice(key).map_err(|_| anyhow::anyhow!("bad key"))?,
            )),
        })
    }

    /// The nonce is the 32-bit counter, zero-padded to the cipher's size.
    fn seal(&self, counter: u32, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        let payload = Payload { msg: plain, aad };
        let sealed = match self {
            Cipher::Aes(c) => {
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt((&nonce).into(), payload)
            }
            Cipher::XChaCha(c) => {
                let mut nonce = [0u8; 24];
                nonce[..4].copy_from_slice(&counter.to_be_bytes());
                c.encrypt((&nonce).into(), payload)
            }
        };
        sealed.map_err(|_| anyhow::anyhow!("encryption failed"))
    }

    fn open(&self, counter: [u8; 4], aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        let payload = Payload { msg: sealed, aad };
        match self {
            Cipher::Aes(c) => {
                let mut nonce = [0u8; 12];
                nonce[..4].copy_from_slice(&counter);
                c.decrypt((&nonce).into(), payload).ok()
            }
            Cipher::XChaCha(c) => {
                let mut nonce = [0u8; 24];
                nonce[..4].copy_from_slice(&counter);
                c.decrypt((&nonce).into(), payload).ok()
            }
        }
    }
}

/// A gateway session (identified) that can join voice.
pub struct GatewaySession {
    ws: Ws,
    /// The session id READY gave.
    pub session_id: String,
    /// The user's id.
    pub user_id: String,
}

/// What a join hands to the voice gateway.
#[derive(Clone, Debug)]
pub struct VoiceServer {
    /// `host:port[/path]`.
    pub endpoint: String,
    /// The voice token.
    pub token: String,
    /// The guild (the voice identify's `server_id`).
    pub guild_id: String,
}

impl GatewaySession {
    /// Connects to `ws://{base}` and identifies with intents GUILDS and
    /// GUILD_VOICE_STATES.
    pub async fn identify(base: &str, token: &str) -> Result<Self> {
        let (mut ws, _) = tokio::time::timeout(
            STEP_TIMEOUT,
            tokio_tungstenite::connect_async(format!("ws://{base}/?v=10&encoding=json")),
        )
        .await
        .context("gateway connect timed out")??;
        next_json(&mut ws, "gateway", None).await?; // HELLO
        ws.send(Message::text(
            json!({"op": 2, "d": {"token": token, "intents": 1 | 128,
                "properties": {"os": "linux", "browser": "guildhall-loadgen", "device": "guildhall-loadgen"}}})
            .to_string(),
        ))
        .await?;
        loop {
            let frame = next_json(&mut ws, "gateway", None).await?;
            if frame["t"] == "READY" {
                return Ok(Self {
                    session_id: str_of(&frame["d"]["session_id"])?,
                    user_id: str_of(&frame["d"]["user"]["id"])?,
                    ws,
                });
            }
        }
    }

    /// Op 4 into `channel_id`; waits for this user's VOICE_STATE_UPDATE and
    /// the VOICE_SERVER_UPDATE with an endpoint.
    pub async fn join(&mut self, guild_id: &str, channel_id: &str) -> Result<VoiceServer> {
        self.op4(guild_id, Some(channel_id)).await?;
        self.next_voice_server(guild_id).await
    }

    /// Op 4 with `channel_id: null`.
    pub async fn leave(&mut self, guild_id: &str) -> Result<()> {
        self.op4(guild_id, None).await
    }

    async fn op4(&mut self, guild_id: &str, channel_id: Option<&str>) -> Result<()> {
        self.ws
            .send(Message::text(
                json!({"op": 4, "d": {"guild_id": guild_id, "channel_id": channel_id,
                    "self_mute": false, "self_deaf": false}})
                .to_string(),
            ))
            .await?;
        Ok(())
    }

    /// The next VOICE_SERVER_UPDATE of `guild_id` with an endpoint (a join's,
    /// or one sent when the call was re-placed on another SFU).
    pub async fn next_voice_server(&mut self, guild_id: &str) -> Result<VoiceServer> {
        loop {
            let frame = next_json(&mut self.ws, "gateway", None).await?;
            if frame["op"] == 1 {
                self.ws
                    .send(Message::text(json!({"op": 1, "d": null}).to_string()))
                    .await?;
            }
            if frame["t"] == "VOICE_SERVER_UPDATE" && frame["d"]["guild_id"] == guild_id {
                if frame["d"]["endpoint"].is_null() {
                    bail!("VOICE_SERVER_UPDATE without an endpoint: no voice role or SFU");
                }
                return Ok(VoiceServer {
                    endpoint: str_of(&frame["d"]["endpoint"])?,
                    token: str_of(&frame["d"]["token"])?,
                    guild_id: guild_id.to_owned(),
                });
            }
        }
    }

    /// One heartbeat (op 1) and its ack (op 11): the gateway round trip.
    pub async fn round_trip(&mut self) -> Result<Duration> {
        let sent = std::time::Instant::now();
        self.ws
            .send(Message::text(json!({"op": 1, "d": null}).to_string()))
            .await?;
        loop {
            if next_json(&mut self.ws, "gateway", None).await?["op"] == 11 {
                return Ok(sent.elapsed());
            }
        }
    }

    /// Answers the gateway's heartbeat requests and reads what is waiting,
    /// for up to `wait`.
    pub async fn pump(&mut self, wait: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + wait;
        while let Ok(frame) = tokio::time::timeout_at(deadline, self.ws.next()).await {
            match frame {
                Some(Ok(Message::Text(_))) => {}
                Some(Ok(_)) => {}
                _ => bail!("gateway closed"),
            }
        }
        Ok(())
    }
}

/// A connected voice participant: identified on the voice gateway, UDP
/// discovered, protocol selected, session key held.
pub struct VoiceClient {
    sink: Arc<Mutex<SplitSink<Ws, Message>>>,
    stream: SplitStream<Ws>,
    udp: UdpSocket,
    cipher: Cipher,
    /// This participant's SSRC.
    pub ssrc: u32,
    /// The mode selected.
    pub mode: Mode,
    nonce: u32,
    sequence: u16,
    timestamp: u32,
    seq_ack: Arc<AtomicI64>,
    heartbeat: tokio::task::JoinHandle<()>,
    /// Op codes received after the session description, in order (5
    /// speaking, 11 clients connect, 13 client disconnect, ...).
    pub events: Vec<Value>,
}

impl Drop for VoiceClient {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

impl VoiceClient {
    /// Identifies on `ws://{endpoint}/?v=8` as `user_id` of `session_id`
    /// with `server`'s token, discovers its address, selects `mode`.
    pub async fn connect(
        server: &VoiceServer,
        user_id: &str,
        session_id: &str,
        mode: Mode,
    ) -> Result<Self> {
        let (ws, _) = tokio::time::timeout(
            STEP_TIMEOUT,
            tokio_tungstenite::connect_async(format!("ws://{}/?v=8", server.endpoint)),
        )
        .await
        .context("voice gateway connect timed out")??;
        let (sink, mut stream) = ws.split();
        let sink = Arc::new(Mutex::new(sink));
        let seq_ack = Arc::new(AtomicI64::new(-1));
        let hello = next_json(&mut stream, "voice gateway", Some(&seq_ack)).await?;
        if hello["op"] != 8 {
            bail!("expected HELLO, got {hello}");
        }
        let interval_ms = hello["d"]["heartbeat_interval"].as_f64().unwrap_or(5_000.0) as u64;
        let heartbeat = {
            let (sink, seq_ack) = (sink.clone(), seq_ack.clone());
            tokio::spawn(async move {
                let mut nonce = 0u64;
                loop {
                    tokio::time::sleep(Duration::from_millis(interval_ms.max(100))).await;
                    nonce += 1;
                    let beat = json!({"op": 3, "d": {"t": nonce, "seq_ack": seq_ack.load(Ordering::Relaxed)}});
                    if sink
                        .lock()
                        .await
                        .send(Message::text(beat.to_string()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            })
        };
        send(
            &sink,
            json!({"op": 0, "d": {"server_id": server.guild_id, "user_id": user_id,
                "session_id": session_id, "token": server.token, "max_dave_protocol_version": 0}}),
        )
        .await?;
        let ready = loop {
            let frame = next_json(&mut stream, "voice gateway", Some(&seq_ack)).await?;
            if frame["op"] == 2 {
                break frame["d"].clone();
            }
        };
        let modes: Vec<&str> = ready["modes"]
            .as_array()
            .map(|m| m.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !modes.contains(&mode.name()) {
            bail!("READY does not offer {}: {modes:?}", mode.name());
        }
        let ssrc = ready["ssrc"].as_u64().context("READY without ssrc")? as u32;
        let ip = str_of(&ready["ip"])?;
        let port = ready["port"].as_u64().context("READY without port")? as u16;
        let udp = UdpSocket::bind("127.0.0.1:0").await?;
        udp.connect((ip.as_str(), port)).await?;
        let mut discovery = vec![0u8; 74];
        discovery[0..2].copy_from_slice(&1u16.to_be_bytes());
        discovery[2..4].copy_from_slice(&70u16.to_be_bytes());
        discovery[4..8].copy_from_slice(&ssrc.to_be_bytes());
        udp.send(&discovery).await?;
        let mut answer = [0u8; 1500];
        let n = tokio::time::timeout(STEP_TIMEOUT, udp.recv(&mut answer))
            .await
            .context("no IP discovery answer")??;
        if n != 74 || answer[1] != 2 {
            bail!("bad IP discovery answer ({n} bytes)");
        }
        let end = answer[8..72].iter().position(|b| *b == 0).unwrap_or(64) + 8;
        let address = String::from_utf8_lossy(&answer[8..end]).into_owned();
        let discovered_port = u16::from_be_bytes([answer[72], answer[73]]);
        send(
            &sink,
            json!({"op": 1, "d": {"protocol": "udp", "data": {"address": address,
                "port": discovered_port, "mode": mode.name()}}}),
        )
        .await?;
        let description = loop {
            let frame = next_json(&mut stream, "voice gateway", Some(&seq_ack)).await?;
            if frame["op"] == 4 {
                break frame["d"].clone();
            }
        };
        let key: Vec<u8> = description["secret_key"]
            .as_array()
            .context("no secret_key")?
            .iter()
            .filter_map(|b| b.as_u64().map(|b| b as u8))
            .collect();
        Ok(Self {
            cipher: Cipher::new(mode, &key)?,
            sink,
            stream,
            udp,
            ssrc,
            mode,
            nonce: 0,
            sequence: 0,
            timestamp: 0,
            seq_ack,
            heartbeat,
            events: Vec::new(),
        })
    }

    /// Op 5: speaking (microphone).
    pub async fn speak(&self) -> Result<()> {
        send(
            &self.sink,
            json!({"op": 5, "d": {"speaking": 1, "delay": 0, "ssrc": self.ssrc}}),
        )
        .await
    }

    /// One RTP packet carrying `payload` (an Opus frame, 20 ms), encrypted
    /// as the selected mode says.
    pub async fn send_frame(&mut self, payload: &[u8]) -> Result<()> {
        let packet = self.seal_frame(payload)?;
        self.udp.send(&packet).await?;
        Ok(())
    }

    /// The packet `send_frame` would send (benchmarks pre-build them).
    pub fn seal_frame(&mut self, payload: &[u8]) -> Result<Vec<u8>> {
        self.sequence = self.sequence.wrapping_add(1);
        self.timestamp = self.timestamp.wrapping_add(960);
        self.nonce = self.nonce.wrapping_add(1);
        let mut header = vec![0x80, 0x78];
        header.extend_from_slice(&self.sequence.to_be_bytes());
        header.extend_from_slice(&self.timestamp.to_be_bytes());
        header.extend_from_slice(&self.ssrc.to_be_bytes());
        let sealed = self.cipher.seal(self.nonce, &header, payload)?;
        let mut packet = header;
        packet.extend_from_slice(&sealed);
        packet.extend_from_slice(&self.nonce.to_be_bytes());
        Ok(packet)
    }

    /// The UDP socket (benchmarks send pre-built packets on it).
    pub fn udp(&self) -> &UdpSocket {
        &self.udp
    }

    /// The next media packet within `wait`, decrypted with this
    /// participant's key: `Some(Ok((ssrc, payload)))`, `Some(Err(()))` for
    /// one that does not authenticate, `None` when nothing came.
    pub async fn recv_frame(&self, wait: Duration) -> Option<Result<(u32, Vec<u8>), ()>> {
        let mut buf = [0u8; 2048];
        loop {
            let n = tokio::time::timeout(wait, self.udp.recv(&mut buf))
                .await
                .ok()?
                .ok()?;
            if let Some(frame) = self.open(&buf[..n]) {
                return Some(frame);
            }
        }
    }

    /// Decrypts one datagram (`None`: not media, such as a keep-alive).
    pub fn open(&self, packet: &[u8]) -> Option<Result<(u32, Vec<u8>), ()>> {
        if packet.len() < 12 + 4 + 16
            || packet[0] >> 6 != 2
            || (72..=76).contains(&(packet[1] & 0x7f))
        {
            return None;
        }
        let mut header_len = 12 + 4 * usize::from(packet[0] & 0x0f);
        let extension = packet[0] & 0x10 != 0;
        if extension {
            header_len += 4;
        }
        if packet.len() < header_len + 4 + 16 {
            return Some(Err(()));
        }
        let counter: [u8; 4] = packet[packet.len() - 4..].try_into().ok()?;
        let ssrc = u32::from_be_bytes(packet[8..12].try_into().ok()?);
        let Some(mut plain) = self.cipher.open(
            counter,
            &packet[..header_len],
            &packet[header_len..packet.len() - 4],
        ) else {
            return Some(Err(()));
        };
        if extension {
            let words = usize::from(u16::from_be_bytes([packet[14], packet[15]]));
            plain.drain(..(4 * words).min(plain.len()));
        }
        Some(Ok((ssrc, plain)))
    }

    /// Reads voice gateway messages for up to `wait`, keeping them in
    /// [`VoiceClient::events`]; returns the close code if the SFU closed.
    pub async fn pump(&mut self, wait: Duration) -> Option<u16> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Err(_) => return None,
                Ok(Some(Ok(Message::Text(text)))) => {
                    if let Ok(frame) = serde_json::from_str::<Value>(&text) {
                        if let Some(seq) = frame["seq"].as_i64() {
                            self.seq_ack.store(seq, Ordering::Relaxed);
                        }
                        self.events.push(frame);
                    }
                }
                Ok(Some(Ok(Message::Close(frame)))) => {
                    return Some(frame.map(|f| u16::from(f.code)).unwrap_or(1005));
                }
                Ok(Some(Ok(_))) => {}
                Ok(_) => return Some(1006),
            }
        }
    }
}

async fn send(sink: &Mutex<SplitSink<Ws, Message>>, frame: Value) -> Result<()> {
    sink.lock()
        .await
        .send(Message::text(frame.to_string()))
        .await?;
    Ok(())
}

/// The next text frame of either gateway as JSON (`what` names it in
/// errors); the voice gateway's `seq` goes to `seq_ack` when given, for
/// its heartbeats.
async fn next_json<S>(stream: &mut S, what: &str, seq_ack: Option<&AtomicI64>) -> Result<Value>
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match tokio::time::timeout(STEP_TIMEOUT, stream.next())
            .await
            .with_context(|| format!("{what} went quiet"))?
        {
            Some(Ok(Message::Text(text))) => {
                let frame: Value = serde_json::from_str(&text)?;
                if let (Some(seq_ack), Some(seq)) = (seq_ack, frame["seq"].as_i64()) {
                    seq_ack.store(seq, Ordering::Relaxed);
                }
                return Ok(frame);
            }
            Some(Ok(Message::Close(frame))) => bail!("{what} closed: {frame:?}"),
            Some(Ok(_)) => {}
            Some(Err(error)) => return Err(error.into()),
            None => bail!("{what} ended"),
        }
    }
}

fn str_of(value: &Value) -> Result<String> {
    value
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("expected a string, got {value}"))
}
