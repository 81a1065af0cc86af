//! Interaction requests that reach another api node than the one that
//! created the interaction.
//!
//! An interaction lives in the table of the api node that took its `POST
//! /interactions` (its token, deadline, phase, original response). In a
//! cluster a load balancer sends the bot's callback and its followups to
//! any api node, so the token says where the interaction lives: it ends
//! with `.` and the creating node's tag (the hash of its name, as a
//! session id names its gateway node). An api node that gets a request
//! whose token names another node passes it on over the bus
//! ([`guildhall_proto::bus::interaction_forward_subject`]) and answers
//! what that node's route answered; the creating node runs the route on
//! its own table. The passing node has already applied its edge (rate
//! limits, the body bound), so the receiver runs the route alone.
//!
//! When the creating node is gone its interactions are gone with it:
//! nobody answers and the request is the route's "unknown" (10062 for a
//! callback, 10015 for a webhook route), as for an expired token. A slow
//! node (no answer within `interaction_forward_timeout_ms`) is a 503 with
//! Retry-After: the bot may try again within the interaction's deadline.
//! At most `interaction_forwards_in_flight_max` passed-on requests run at
//! once on a node; past that, 503 at once.

use crate::{ApiError, ApiResult};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use guildhall_cluster::BusError;
use guildhall_proto::bus::{
    ENVELOPE_VERSION, ForwardedRequest, ForwardedResponse, interaction_forward_subject,
};
use guildhall_proto::error::ErrorCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Hex digits of the node tag an interaction token ends with.
const TOKEN_TAG_HEX: usize = 16;
/// Characters of the secret before the tag (a webhook token's 68).
const TOKEN_SECRET_CHARS: usize = 68;

/// Counters of passed-on interaction requests, read by `/metrics`.
#[derive(Debug, Default)]
pub struct ForwardCounters {
    /// Requests this node passed on to the node that created their
    /// interaction.
    pub passed_total: AtomicU64,
    /// Passed-on requests this node ran for another node.
    pub served_total: AtomicU64,
    /// Passed-on requests nobody answered in time, or that were refused
    /// (busy, malformed).
    pub failed_total: AtomicU64,
}

/// The tag of the node named `name`, as its interaction tokens end.
pub fn node_tag(name: &str) -> u64 {
    guildhall_ring::hash::member_id_of(name).0
}

/// A new interaction token for the node named `name`: a webhook token's
/// secret (408 bits from the OS), `.`, the node's tag in hex.
pub fn new_token(name: &str) -> Result<String, getrandom::Error> {
    Ok(format!(
        "{}.{:0width$x}",
        guildhall_common::auth::new_webhook_token()?,
        node_tag(name),
        width = TOKEN_TAG_HEX
    ))
}

/// The node tag `token` ends with, when it has an interaction token's
/// shape (a webhook token, 68 characters and no `.`, has none).
pub fn token_tag(token: &str) -> Option<u64> {
    let (secret, tag) = token.rsplit_once('.')?;
    let hex = tag
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if secret.len() != TOKEN_SECRET_CHARS || tag.len() != TOKEN_TAG_HEX || !hex {
        return None;
    }
    u64::from_str_radix(tag, 16).ok()
}

/// Passes `req` on when `token` is an interaction token of another node:
/// `Ok` with that node's answer (or the failure's), `Err(req)` to run the
/// route here. `unknown` is the route's answer for an interaction that no
/// longer exists.
pub(crate) async fn pass_on(
    node: &crate::ApiState,
    token: &str,
    req: Request,
    unknown: ErrorCode,
) -> Result<Response, Request> {
    let Some(tag) = token_tag(token) else {
        return Err(req);
    };
    if tag == node_tag(&node.node_name) {
        return Err(req);
    }
    node.forwards
        .counters
        .passed_total
        .fetch_add(1, Ordering::Relaxed);
    Ok(match forward(node, tag, req, unknown).await {
        Ok(response) => response,
        Err(error) => {
            node.forwards
                .counters
                .failed_total
                .fetch_add(1, Ordering::Relaxed);
            error.into_response()
        }
    })
}

async fn forward(node: &crate::ApiState, tag: u64, req: Request, unknown: ErrorCode) -> ApiResult {
    let limits = &node.shared.limits;
    let method = req.method().as_str().to_owned();
    // The route is nested under `/api/v{n}`, which nesting strips: the
    // receiver's routes are the same under either version.
    let path = format!(
        "/api/v10{}",
        req.uri()
            .path_and_query()
            .map_or(req.uri().path(), |p| p.as_str())
    );
    let bytes = crate::read_body(
        req.into_body(),
        limits.rest_body_bytes_max,
        limits.rest_body_drain_bytes_max,
    )
    .await
    .map_err(|_| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Code(ErrorCode::EntityTooLarge)
    })?;
    // The routes take JSON only; a body that is not text is not JSON.
    let body = String::from_utf8(bytes.to_vec()).map_err(|_| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Code(ErrorCode::InvalidJson)
    })?;
    let payload = serde_json::to_vec(&ForwardedRequest {
        v: ENVELOPE_VERSION,
        method,
        path,
        body,
    })
    .map_err(|_| ApiError::Internal)?;
    let timeout = Duration::from_millis(limits.interaction_forward_timeout_ms);
    let message = node
        .bus
        .request(&interaction_forward_subject(tag), payload.into(), timeout)
        .await
        .map_err(|error| match error {
            // Nobody serves the tag: the creating node is gone, and its
            // interactions with it.
            BusError::NoResponders => ApiError::Code(unknown),
            _ => {
                guildhall_common::throttled!(
                    warn,
                    "interactions.forward_failed",
                    %error,
                    "an interaction request passed on to its node got no answer"
                );
                ApiError::Overloaded
            }
        })?;
    let answer = ForwardedResponse::decode(&message.payload).map_err(|_| ApiError::Internal)?;
    Ok(response_of(answer))
}

fn response_of(answer: ForwardedResponse) -> Response {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let json = !answer.body.is_empty();
    let mut response = (status, answer.body).into_response();
    let headers = response.headers_mut();
    headers.remove(header::CONTENT_TYPE);
    if json {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    if let Some(value) = answer
        .retry_after
        .and_then(|v| HeaderValue::from_str(&v).ok())
    {
        headers.insert(header::RETRY_AFTER, value);
    }
    response
}

/// This node's side: counters and the permits of the requests it serves.
#[derive(Debug)]
pub struct Forwards {
    /// Counters.
    pub counters: ForwardCounters,
    in_flight: Arc<Semaphore>,
}

impl Forwards {
    /// Bounded by `interaction_forwards_in_flight_max`.
    pub fn new(limits: &guildhall_limits::Limits) -> Self {
        Self {
            counters: ForwardCounters::default(),
            in_flight: Arc::new(Semaphore::new(limits.interaction_forwards_in_flight_max)),
        }
    }
}

/// The answer of a node too busy to run a passed-on request.
fn busy() -> ForwardedResponse {
    let body = serde_json::to_string(&guildhall_proto::error::ErrorBody::new(
        ErrorCode::Overloaded,
    ))
    .unwrap_or_default();
    ForwardedResponse {
        v: ENVELOPE_VERSION,
        status: 503,
        retry_after: Some("1".into()),
        body,
    }
}

fn answer(node: &crate::ApiState, reply: &str, response: &ForwardedResponse) {
    if let Ok(bytes) = serde_json::to_vec(response) {
        let _ = node.bus.publish(reply, None, bytes.into());
    }
}

/// Serves the interaction requests other api nodes pass on to this one:
/// each runs through `routes` (the REST routes without the edge's
/// layers) in a task holding one of the node's permits.
pub async fn serve(
    node: Arc<crate::ApiState>,
    routes: axum::Router,
) -> Result<tokio::task::JoinHandle<()>, BusError> {
    let limits = &node.shared.limits;
    let overflow = serde_json::to_vec(&busy()).unwrap_or_default();
    let mut requests = node
        .bus
        .subscribe_shedding(
            &interaction_forward_subject(node_tag(&node.node_name)),
            None,
            limits.bus_subscription_messages_max,
            overflow.into(),
        )
        .await?;
    Ok(tokio::spawn(async move {
        while let Some(message) = requests.next().await {
            let Some(reply) = message.reply.clone() else {
                continue;
            };
            if message.expired() {
                continue;
            }
            let counters = &node.forwards.counters;
            let request = match ForwardedRequest::decode(
                &message.payload,
                node.shared.limits.rest_body_bytes_max,
            ) {
                Ok(request) => request,
                Err(error) => {
                    counters.failed_total.fetch_add(1, Ordering::Relaxed);
                    guildhall_common::throttled!(
                        warn,
                        "interactions.forward_malformed",
                        %error,
                        "a passed-on interaction request was refused"
                    );
                    continue;
                }
            };
            let Ok(permit) = node.forwards.in_flight.clone().try_acquire_owned() else {
                counters.failed_total.fetch_add(1, Ordering::Relaxed);
                answer(&node, &reply, &busy());
                continue;
            };
            counters.served_total.fetch_add(1, Ordering::Relaxed);
            let node = node.clone();
            let routes = routes.clone();
            tokio::spawn(async move {
                let response = run(&node, routes, request).await;
                answer(&node, &reply, &response);
                drop(permit);
            });
        }
    }))
}

/// Runs `request` through `routes` and captures the answer.
async fn run(
    node: &crate::ApiState,
    mut routes: axum::Router,
    request: ForwardedRequest,
) -> ForwardedResponse {
    use tower_service::Service;
    let internal = || ForwardedResponse {
        v: ENVELOPE_VERSION,
        status: 500,
        retry_after: None,
        body: r#"{"message": "500: Internal Server Error", "code": 0}"#.into(),
    };
    let built = axum::http::Request::builder()
        .method(request.method.as_str())
        .uri(request.path.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(request.body));
    let Ok(built) = built else {
        return internal();
    };
    let ready = std::future::poll_fn(|cx| {
        <axum::Router as Service<axum::http::Request<Body>>>::poll_ready(&mut routes, cx)
    });
    if ready.await.is_err() {
        return internal();
    }
    let Ok(response) = routes.call(built).await;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    // What fits one bus message; a message's answer is far below it.
    let max = node.shared.limits.bus_payload_bytes_max / 2;
    let Ok(bytes) = axum::body::to_bytes(response.into_body(), max).await else {
        return internal();
    };
    ForwardedResponse {
        v: ENVELOPE_VERSION,
        status,
        retry_after,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_their_node_and_webhook_tokens_name_none() {
        let token = new_token("api-1").unwrap();
        assert_eq!(token_tag(&token), Some(node_tag("api-1")));
        assert_ne!(token_tag(&token), Some(node_tag("api-2")));
        let webhook = guildhall_common::auth::new_webhook_token().unwrap();
        assert_eq!(token_tag(&webhook), None);
        assert_eq!(token_tag("short.0123456789abcdef"), None);
        let upper = format!("{}.0123456789ABCDEF", "a".repeat(68));
        assert_eq!(token_tag(&upper), None);
    }
}
