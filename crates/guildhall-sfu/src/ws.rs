//! The voice gateway's WebSocket edge: one task per connection drives a
//! [`Machine`] with what the client sends and the clock, carries its
//! actions to the call table, and writes what the table queued for it.
//!
//! Only version 8 is served (`?v=8`): another (or none) is closed with
//! 4020, the documented "bad request", since older versions differ in
//! heartbeat and resume shapes this server does not speak. Text frames
//! over `sfu_ws_payload_bytes_max` are closed with 4002; frames over
//! twice that are cut by the WebSocket layer itself.
//! permessage-deflate, which aiohttp requests, is not negotiated.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use guildhall_proto::voice_gateway::{
    VOICE_GATEWAY_VERSION, VoiceCloseCode, parse_client, parse_client_binary,
};
use tokio::sync::mpsc;

use crate::calls::{CLOSE_ABRUPT, ConnControl, ConnHandle, SessionKey};
use crate::crypto::new_secret_key;
use crate::machine::{Action, Machine};
use crate::media::lock;
use crate::stats::Counters;
use crate::{Inner, Slot};

/// Longest sleep between deadline checks (a machine with no deadline).
const IDLE_SLEEP_MS: u64 = 3_600_000;

/// Longest wait to write a close frame: the connection ends either way.
const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

pub(crate) fn router(inner: Arc<Inner>, path: &str) -> Router {
    let base = path.trim_end_matches('/');
    let base = if base.is_empty() || base.starts_with('/') {
        base.to_owned()
    } else {
        format!("/{base}")
    };
    let router = if base.is_empty() {
        Router::new().route("/", get(upgrade))
    } else {
        Router::new()
            .route(&base, get(upgrade))
            .route(&format!("{base}/"), get(upgrade))
    };
    router.with_state(inner)
}

async fn upgrade(
    State(inner): State<Arc<Inner>>,
    Query(query): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    let max = inner.limits().sfu_connections_max;
    let Some(slot) = Slot::try_new(&inner.ws_connections, max) else {
        Counters::bump(&inner.counters.ws_refused_total);
        inner.warn("ws_full", &"voice gateway connection cap reached");
        return (StatusCode::SERVICE_UNAVAILABLE, "voice gateway full").into_response();
    };
    let version_ok = query
        .get("v")
        .is_some_and(|v| v.parse::<u32>().ok() == Some(VOICE_GATEWAY_VERSION));
    let frame_max = inner.limits().sfu_ws_payload_bytes_max.saturating_mul(2);
    ws.max_message_size(frame_max)
        .max_frame_size(frame_max)
        .on_upgrade(move |socket| async move {
            let _slot = slot;
            run(inner, socket, version_ok).await;
        })
}

/// Sends one frame, giving up after `stall` (a client that stops reading
/// must not hold its task and connection slot forever).
async fn send(socket: &mut WebSocket, message: Message, stall: Duration) -> bool {
    matches!(
        tokio::time::timeout(stall, socket.send(message)).await,
        Ok(Ok(()))
    )
}

async fn send_close(socket: &mut WebSocket, code: VoiceCloseCode) {
    let frame = CloseFrame {
        code: code.code(),
        reason: code.reason().into(),
    };
    // Best effort: the peer may be gone already (or not reading: bounded
    // like any write).
    let _ = tokio::time::timeout(
        CLOSE_WRITE_TIMEOUT,
        socket.send(Message::Close(Some(frame))),
    )
    .await;
}

async fn run(inner: Arc<Inner>, mut socket: WebSocket, version_ok: bool) {
    let counters = inner.counters.clone();
    Counters::bump(&counters.ws_connections_total);
    if !version_ok {
        Counters::bump(&counters.ws_refused_total);
        send_close(&mut socket, VoiceCloseCode::BadRequest).await;
        return;
    }
    let Ok(secret_key) = new_secret_key() else {
        send_close(&mut socket, VoiceCloseCode::VoiceServerCrashed).await;
        return;
    };
    let payload_max = inner.limits().sfu_ws_payload_bytes_max;
    // A write may stall as long as a heartbeat may be missing.
    let stall = Duration::from_millis(inner.limits().sfu_heartbeat_timeout_ms);
    let (mut machine, hello) = Machine::new(inner.now_ms(), inner.machine_config());
    if !send(&mut socket, Message::Text(hello.encode(None).into()), stall).await {
        return;
    }
    let conn_id = inner.next_conn_id.fetch_add(1, Ordering::Relaxed);
    let control = Arc::new(ConnControl::default());
    let (tx, mut rx) = mpsc::channel::<String>(inner.limits().sfu_connection_queue_messages_max);
    let handle = ConnHandle {
        id: conn_id,
        tx,
        control: control.clone(),
    };
    let mut key: Option<SessionKey> = None;
    'connection: loop {
        let sleep_ms = machine
            .deadline_ms()
            .saturating_sub(inner.now_ms())
            .min(IDLE_SLEEP_MS);
        let actions: Vec<Action> = tokio::select! {
            biased;
            () = control.notify.notified() => {
                machine.closed();
                let code = control.code();
                if code != CLOSE_ABRUPT
                    && let Some(code) = VoiceCloseCode::from_code(code)
                {
                    // What was queued before the close goes first (an
                    // evicted client still hears the op 13s before it).
                    while let Ok(text) = rx.try_recv() {
                        if !send(&mut socket, Message::Text(text.into()), stall).await {
                            break;
                        }
                    }
                    Counters::bump(&counters.ws_closed_by_code_total);
                    send_close(&mut socket, code).await;
                }
                break 'connection;
            }
            out = rx.recv() => match out {
                Some(text) => {
                    if !send(&mut socket, Message::Text(text.into()), stall).await {
                        break 'connection;
                    }
                    continue 'connection;
                }
                None => break 'connection,
            },
            message = socket.recv() => {
                let now_ms = inner.now_ms();
                match message {
                    Some(Ok(Message::Text(text))) => {
                        machine.on_message(now_ms, parse_client(text.as_bytes(), payload_max))
                    }
                    Some(Ok(Message::Binary(bytes))) => {
                        machine.on_message(now_ms, parse_client_binary(&bytes, payload_max))
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue 'connection,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break 'connection,
                }
            }
            () = tokio::time::sleep(Duration::from_millis(sleep_ms)) => {
                machine.on_tick(inner.now_ms()).into_iter().collect()
            }
        };
        let mut queue: VecDeque<Action> = actions.into();
        while let Some(action) = queue.pop_front() {
            let now_ms = inner.now_ms();
            match action {
                Action::Send(message) => {
                    if !send(
                        &mut socket,
                        Message::Text(message.encode(None).into()),
                        stall,
                    )
                    .await
                    {
                        break 'connection;
                    }
                }
                Action::Authenticate(identify) => {
                    let answer = lock(&inner.calls).identify(
                        now_ms,
                        &identify,
                        handle.clone(),
                        secret_key,
                        &inner.media,
                        &counters,
                    );
                    match answer {
                        Ok(_) => key = Some((identify.server_id, identify.user_id)),
                        Err(code) => {
                            Counters::bump(&counters.auth_failed_total);
                            inner.warn("identify_refused", &code.reason());
                        }
                    }
                    queue.extend(machine.authenticated(answer));
                }
                Action::Resume(resume) => {
                    let answer = lock(&inner.calls).resume(
                        now_ms,
                        &resume,
                        handle.clone(),
                        &inner.media,
                        &counters,
                    );
                    let answer = match answer {
                        Ok((ssrc, live, k)) => {
                            key = Some(k);
                            Ok((ssrc, live))
                        }
                        Err(code) => {
                            Counters::bump(&counters.auth_failed_total);
                            inner.warn("resume_refused", &code.reason());
                            Err(code)
                        }
                    };
                    queue.extend(machine.resumed(answer));
                }
                Action::SelectProtocol {
                    mode,
                    address,
                    port,
                } => {
                    let Some(k) = key else { continue };
                    let reported = address
                        .parse::<IpAddr>()
                        .ok()
                        .map(|ip| SocketAddr::new(ip, port));
                    lock(&inner.calls).select(
                        now_ms,
                        k,
                        conn_id,
                        mode,
                        reported,
                        &inner.media,
                        &counters,
                    );
                }
                Action::Speaking { speaking } => {
                    if let Some(k) = key {
                        lock(&inner.calls).speaking(now_ms, k, conn_id, speaking, &counters);
                    }
                }
                Action::Ack(seq) => {
                    if let Some(k) = key {
                        lock(&inner.calls).ack(k, conn_id, seq);
                    }
                }
                Action::Close(code) => {
                    Counters::bump(&counters.ws_closed_by_code_total);
                    inner.warn("closed", &code.reason());
                    // Queued frames (READY before a later error) first.
                    while let Ok(text) = rx.try_recv() {
                        if !send(&mut socket, Message::Text(text.into()), stall).await {
                            break;
                        }
                    }
                    send_close(&mut socket, code).await;
                    break 'connection;
                }
            }
        }
    }
    if let Some(k) = key {
        lock(&inner.calls).detach(inner.now_ms(), k, conn_id);
    }
}
