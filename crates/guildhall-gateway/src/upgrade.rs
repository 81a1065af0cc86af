//! The gateway's HTTP edge: an upgrade is admitted (or refused with
//! Discord's error body and `Retry-After`) before the 101, and what the
//! socket will speak is settled first.

use crate::{Gateway, compress};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use guildhall_common::http::{json_response, not_found};
use guildhall_proto::error::{ErrorBody, ErrorCode};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The gateway fallback: any path that is a WebSocket upgrade is a gateway
/// connection (`/`, `/resume/`, `//`, with any query); anything else is 404.
pub async fn upgrade_or_404(
    State(gateway): State<Arc<Gateway>>,
    RawQuery(query): RawQuery,
    upgrade: Result<
        axum::extract::ws::WebSocketUpgrade,
        axum::extract::ws::rejection::WebSocketUpgradeRejection,
    >,
) -> Response {
    let Ok(upgrade) = upgrade else {
        return not_found().await;
    };
    // What the socket would speak is settled before anything is reserved
    // for it: a query asking for what is not offered is refused with 400.
    let wire = match compress::parse_query(query.as_deref()) {
        Ok(wire) => wire,
        Err(refusal) => {
            gateway
                .counters
                .query_refused_total
                .fetch_add(1, Ordering::Relaxed);
            let body = ErrorBody {
                code: 0,
                message: refusal.message().to_owned(),
                errors: None,
            };
            return json_response(StatusCode::BAD_REQUEST, &body);
        }
    };
    // Reserved before admission counts, so an unidentified socket holds its
    // place (and concurrent upgrades see each other) until it has a session.
    let unattached = gateway.reserve();
    if let Err(retry_after_s) = gateway.admission.admit(gateway.sessions_counted()).await {
        gateway
            .counters
            .refused_upgrades_total
            .fetch_add(1, Ordering::Relaxed);
        let mut response = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &ErrorBody::new(ErrorCode::Overloaded),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
        return response;
    }
    // A zlib-stream or zstd-stream socket's compressor lives as long as the socket, so
    // its place is taken before the 101; none free is a refused upgrade
    // (clients back off from those) rather than a socket that cannot speak.
    let transport = match wire.transport {
        compress::Transport::None => None,
        stream => {
            let max = gateway.shared.limits.gateway_compressors_max;
            let compressor = gateway
                .counters
                .compressors
                .acquire(max)
                .and_then(|permit| compress::Stream::new(stream, permit).ok().flatten());
            match compressor {
                Some(compressor) => Some(compressor),
                None => {
                    gateway
                        .counters
                        .compressed_upgrades_refused_total
                        .fetch_add(1, Ordering::Relaxed);
                    let mut response = json_response(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &ErrorBody::new(ErrorCode::Overloaded),
                    );
                    let retry_after_s = gateway.shared.limits.sessions_full_retry_after_s;
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_s));
                    return response;
                }
            }
        }
    };
    // 4 KiB buffers: a client payload is at most 4 KiB, larger server frames
    // are written through; measured 16.5 KiB RSS per idle session with 4 KiB
    // buffers against 20.5 KiB with 8 KiB (docs/benchmarks.md).
    upgrade
        .read_buffer_size(4 * 1024)
        .write_buffer_size(4 * 1024)
        .max_message_size(64 * 1024)
        .max_frame_size(64 * 1024)
        .on_upgrade(move |socket| gateway.run(socket, unattached, wire, transport))
}
