//! The raw broadcast baseline: the least work that delivers a gateway-shaped
//! text frame to N sockets, measured with the same client in the same run
//! as Guildhall, so Guildhall's figures are reported as ratios against it.
//!
//! It answers just enough of the protocol for the load generator: HELLO on
//! connect, READY on IDENTIFY, a token on register, a channel on guild
//! create. A POST to the channel encodes one MESSAGE_CREATE frame once and
//! hands the shared bytes to every socket's bounded queue; each socket task
//! writes whatever is queued and flushes once per wake-up. One worker
//! thread, no store, no permissions, no replay buffer, no intents: the
//! floor a real server is compared with.

use axum::extract::State;
use axum::extract::ws::{Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::routing::{any, post};
use axum::{Json, Router};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Frames a socket's queue holds; a full queue drops the frame for that
/// socket (counted), as a real server would close a slow consumer.
const SOCKET_QUEUE_FRAMES_MAX: usize = 4096;

#[derive(Default)]
struct Raw {
    sockets: Mutex<Vec<mpsc::Sender<Utf8Bytes>>>,
    sequence: AtomicU64,
    dropped: AtomicU64,
}

/// Serves the baseline on `listen` until the process is killed.
pub fn serve(listen: &str) -> anyhow::Result<()> {
    // One worker, as the baseline is defined.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let raw = Arc::new(Raw::default());
        let app = Router::new()
            .route("/api/v10/auth/register", post(register))
            .route("/api/v10/guilds", post(guild))
            .route("/api/v10/channels/{id}/messages", post(message))
            .fallback(any(upgrade))
            .with_state(raw);
        let listener = tokio::net::TcpListener::bind(listen).await?;
        axum::serve(listener, app).await?;
        Ok(())
    })
}

async fn register() -> Json<Value> {
    Json(json!({"token": "raw", "user_id": "1"}))
}

async fn guild() -> Json<Value> {
    Json(json!({"id": "1", "channels": [{"id": "1"}]}))
}

async fn message(State(raw): State<Arc<Raw>>, Json(body): Json<Value>) -> Json<Value> {
    let seq = raw.sequence.fetch_add(1, Ordering::Relaxed) + 1;
    let data = json!({"id": seq.to_string(), "channel_id": "1", "content": body["content"]});
    // Encoded once; every socket gets a refcount of the same bytes.
    let frame = Utf8Bytes::from(format!(
        r#"{{"op":0,"t":"MESSAGE_CREATE","d":{data},"s":{seq}}}"#
    ));
    let sockets = raw
        .sockets
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for socket in sockets {
        if socket.try_send(frame.clone()).is_err() {
            raw.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
    Json(data)
}

async fn upgrade(State(raw): State<Arc<Raw>>, ws: WebSocketUpgrade) -> axum::response::Response {
    ws.read_buffer_size(4096)
        .write_buffer_size(4096)
        .on_upgrade(move |socket| session(raw, socket))
}

async fn session(raw: Arc<Raw>, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let hello = r#"{"op":10,"d":{"heartbeat_interval":41250},"s":null,"t":null}"#;
    if sink.send(Message::Text(hello.into())).await.is_err() {
        return;
    }
    // IDENTIFY → READY.
    loop {
        match stream.next().await {
            Some(Ok(Message::Text(text))) if text.contains("\"op\":2") => break,
            Some(Ok(_)) => continue,
            _ => return,
        }
    }
    let ready = r#"{"op":0,"t":"READY","d":{"v":10,"session_id":"raw"},"s":1}"#;
    if sink.send(Message::Text(ready.into())).await.is_err() {
        return;
    }
    let (sender, mut frames) = mpsc::channel::<Utf8Bytes>(SOCKET_QUEUE_FRAMES_MAX);
    raw.sockets
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(sender);
    loop {
        tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { return };
                // Everything queued goes out in one flush.
                if sink.feed(Message::Text(frame)).await.is_err() {
                    return;
                }
                while let Ok(frame) = frames.try_recv() {
                    if sink.feed(Message::Text(frame)).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
            incoming = stream.next() => {
                if !matches!(incoming, Some(Ok(_))) {
                    return;
                }
            }
        }
    }
}
