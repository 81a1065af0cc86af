//! What the roles that answer HTTP (the api, the gateway's upgrade) answer
//! alike: JSON bodies with exactly Discord's content type, and Discord's 404.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;

/// JSON with exactly `application/json` (a charset suffix crashes
/// discord.py at login).
pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Discord's 404 body (the api's unknown routes, and a gateway path that is
/// not a WebSocket upgrade).
pub async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &serde_json::json!({"message": "404: Not Found", "code": 0}),
    )
}

/// The address a client is counted and rate-limited under: an IPv4
/// address, or an IPv6 /64 (one host gets a whole /64, so counting single
/// IPv6 addresses would count nothing).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}
