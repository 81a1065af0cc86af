//! The api role: REST v10 (also served under /api/v9).
//!
//! Every response carries Discord's rate-limit headers; every error is
//! Discord's body with its JSON error code, from one [`ApiError`] through one
//! `IntoResponse`. Bodies are read with a size bound and parsed by hand so
//! oversized (413), malformed (50109) and ill-typed (50035) bodies each get
//! their own documented answer. A message is durable before its 200.
//!
//! The role's modules: [`commands`] (application commands), [`interactions`]
//! (`POST /interactions`, callbacks, the interaction's webhook),
//! [`interaction_forward`] (a callback on any api node), [`webhooks`]
//! (incoming webhooks) and [`ratelimit`] (buckets and Discord's headers).
//! Handlers hold [`ApiState`], never the node: the api depends on
//! `guildhall-common` and on no other role, and reaches guild owners,
//! the users role and sessions only through its clients and the bus.

pub mod commands;
pub mod files;
pub mod interaction_forward;
pub mod interactions;
pub mod ratelimit;
pub mod webhooks;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use guildhall_common::auth;
use guildhall_common::state::{now_ms, sf};
use guildhall_common::wire::{wire_channel, wire_user};
use guildhall_proto::Snowflake;
use guildhall_proto::components::{self, FLAG_IS_COMPONENTS_V2};
use guildhall_proto::error::{ErrorBody, ErrorCode, RateLimitedBody};
use guildhall_proto::guilds::Outgoing;
use guildhall_proto::guilds::{Changed, GUILD_WIDE, GuildChange, GuildError};
use guildhall_proto::guilds::{ChannelRecord, ChannelSettings, RoleRecord, ThreadRecord};
use guildhall_proto::intents;
use guildhall_proto::intents::app_flags;
use guildhall_proto::interactions::{FLAG_SUPPRESS_EMBEDS, FLAG_SUPPRESS_NOTIFICATIONS};
use guildhall_proto::mentions;
use guildhall_proto::model::{Message, PartialEmoji, Reaction, ReactionCountDetails};
use guildhall_proto::permissions as perm;
use guildhall_proto::replies;
use guildhall_proto::timestamp::format_unix_ms;
use guildhall_store::{
    ApplicationRow, ChannelRow, GuildRow, InvitePreviewRow, InviteRow, MessageRow, PinRow,
    PinWrite, ReactionWrite, RoleRow, StoreError, UnpinWrite, UserRow,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::to_raw_value;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the api role's handlers share: the node's shared state and the
/// clients of the roles the api calls (guild owners, token lookups,
/// "send to these gateways"), never another role's state.
pub type AppState = Arc<ApiState>;

/// The api role's state.
pub struct ApiState {
    /// Store, limits, ids.
    pub shared: Arc<guildhall_common::state::Shared>,
    /// How the api reaches guild owners (typed calls, confirmed publishes).
    pub guilds: Arc<guildhall_common::guilds::GuildsClient>,
    /// Token lookups (the users role's cache front).
    pub users: Arc<dyn guildhall_common::users::TokenLookups>,
    /// REST counters.
    pub counters: ApiCounters,
    /// REST buckets.
    pub rate: crate::ratelimit::RateLimiter,
    /// Token for operator endpoints (in `DATA_DIR/admin.token`).
    pub admin_token: String,
    /// What the node knows of the cluster (where gateways are, placement).
    pub cluster: Arc<guildhall_common::cluster::ClusterState>,
    /// The bus the roles talk over.
    pub bus: Arc<dyn guildhall_cluster::Bus>,
    /// Password-hashing permits and their memory.
    pub passwords: guildhall_common::auth::Passwords,
    /// This node's name (the tag in interaction tokens names it).
    pub node_name: String,
    /// Interactions created on this node.
    pub interactions: crate::interactions::Interactions,
    /// Interaction requests passed between api nodes.
    pub forwards: crate::interaction_forward::Forwards,
    /// The blob store files are kept in, and where they are served.
    pub files: crate::files::Files,
}

impl ApiState {
    /// The gateways, as the api role reaches sessions.
    pub fn gateways(&self) -> guildhall_common::gateways::Gateways<'_> {
        guildhall_common::gateways::Gateways {
            bus: self.bus.as_ref(),
            cluster: &self.cluster,
            partitions: self.shared.limits.gateway_event_partitions,
        }
    }
}

/// Everything a handler can answer with other than success.
#[derive(Debug)]
pub enum ApiError {
    /// A Discord error code (status follows from it).
    Code(ErrorCode),
    /// 50035 for one field.
    Field(&'static str, &'static str, String),
    /// 400 with a whole body (50035 with nested errors).
    Invalid(ErrorBody),
    /// 401.
    Unauthorized,
    /// 429.
    RateLimited(f64),
    /// 429 with 20016: the channel's slowmode (seconds left).
    Slowmode(f64),
    /// 503 with Retry-After.
    Overloaded,
    /// 500.
    Internal,
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            // Busy, or (only owners write under an epoch) a superseded
            // owner's write: retry later, the new owner serves it.
            StoreError::Busy | StoreError::StaleEpoch => ApiError::Overloaded,
            // The only unique keys a handler can collide on without
            // checking first are usernames (commands map their own).
            StoreError::Conflict(_) => taken(),
            StoreError::Database(e) => {
                guildhall_common::throttled!(error, "api.store_failed", error = %e, "store failed");
                ApiError::Internal
            }
        }
    }
}

impl From<GuildError> for ApiError {
    fn from(error: GuildError) -> Self {
        match error {
            GuildError::UnknownGuild => ApiError::Code(ErrorCode::UnknownGuild),
            GuildError::UnknownChannel => ApiError::Code(ErrorCode::UnknownChannel),
            GuildError::MissingAccess => ApiError::Code(ErrorCode::MissingAccess),
            GuildError::MissingPermissions => ApiError::Code(ErrorCode::MissingPermissions),
            GuildError::UnknownRole => ApiError::Code(ErrorCode::UnknownRole),
            GuildError::UnknownMember => ApiError::Code(ErrorCode::UnknownMember),
            GuildError::InvalidName => ApiError::Field(
                "name",
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 2 and 100 in length.".into(),
            ),
            GuildError::MaxRoles => ApiError::Code(ErrorCode::MaxGuildRoles),
            GuildError::MaxChannels => ApiError::Code(ErrorCode::MaxGuildChannels),
            GuildError::SizeLimit(grown) => ApiError::Field(
                grown.key(),
                "BASE_TYPE_MAX_LENGTH",
                "The guild's roles and channels are at their size limit.".into(),
            ),
            GuildError::MaxOverwrites => ApiError::Field(
                "permission_overwrites",
                "BASE_TYPE_MAX_LENGTH",
                "A channel holds at most channel_overwrites_max overwrites.".into(),
            ),
            GuildError::InvalidOverwrite => ApiError::Field(
                "permission_overwrites",
                "BASE_TYPE_BAD",
                "Each overwrite names one role or member, once.".into(),
            ),
            GuildError::InvalidParent => ApiError::Field(
                "parent_id",
                "CHANNEL_PARENT_INVALID_TYPE",
                "Not a category of this guild (and a category has no parent).".into(),
            ),
            GuildError::Slowmode(wait_ms) => ApiError::Slowmode(wait_ms as f64 / 1_000.0),
            GuildError::Banned => ApiError::Code(ErrorCode::UserBanned),
            GuildError::UnknownBan => ApiError::Code(ErrorCode::UnknownBan),
            GuildError::WrongChannelType => ApiError::Code(ErrorCode::WrongChannelType),
            GuildError::ThreadExists => ApiError::Code(ErrorCode::ThreadExists),
            GuildError::MaxActiveThreads => ApiError::Code(ErrorCode::MaxActiveThreads),
            GuildError::ThreadArchived => ApiError::Code(ErrorCode::ThreadArchived),
            GuildError::UnknownTag(field) => ApiError::Field(
                field.key(),
                "BASE_TYPE_BAD",
                "Names a tag the channel does not have.".into(),
            ),
            GuildError::Overloaded => ApiError::Overloaded,
            GuildError::Store => ApiError::Internal,
        }
    }
}

// Shared with the gateway role (its upgrade refusals and 404s).
pub use guildhall_common::http::{json_response, not_found};

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Code(code) => json_response(
                StatusCode::from_u16(code.status()).unwrap_or(StatusCode::BAD_REQUEST),
                &ErrorBody::new(code),
            ),
            ApiError::Field(field, code, message) => json_response(
                StatusCode::BAD_REQUEST,
                &ErrorBody::invalid_field(field, code, &message),
            ),
            ApiError::Invalid(body) => json_response(StatusCode::BAD_REQUEST, &body),
            ApiError::Unauthorized => json_response(
                StatusCode::UNAUTHORIZED,
                &json!({"message": "401: Unauthorized", "code": 0}),
            ),
            ApiError::RateLimited(retry_after_s) | ApiError::Slowmode(retry_after_s) => {
                let mut body = RateLimitedBody::new(retry_after_s, false);
                if matches!(self, ApiError::Slowmode(_)) {
                    body.message = ErrorCode::Slowmode.message();
                    body.code = ErrorCode::Slowmode.code();
                }
                let mut response = json_response(StatusCode::TOO_MANY_REQUESTS, &body);
                let headers = response.headers_mut();
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(retry_after_s.ceil().max(1.0) as u64),
                );
                // discord.py refuses to retry a 429 without `Via`.
                headers.insert(header::VIA, HeaderValue::from_static("1.1 guildhall"));
                response
            }
            ApiError::Overloaded => {
                let mut response = json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &ErrorBody::new(ErrorCode::Overloaded),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                response
            }
            ApiError::Internal => json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &json!({"message": "500: Internal Server Error", "code": 0}),
            ),
        }
    }
}

pub(crate) type ApiResult = Result<Response, ApiError>;

pub(crate) fn ok(body: &impl serde::Serialize) -> ApiResult {
    Ok(json_response(StatusCode::OK, body))
}

/// A JSON body read with the configured size bound.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        read_json(req, state, state.shared.limits.rest_body_bytes_max)
            .await
            .map(JsonBody)
    }
}

/// Reads a JSON body of at most `limit_bytes`: 413 beyond it, 50109 for
/// JSON that does not parse, 50035 for JSON of the wrong shape. An empty
/// body is `{}`.
pub async fn read_json<T: DeserializeOwned>(
    req: Request,
    state: &AppState,
    limit_bytes: usize,
) -> Result<T, ApiError> {
    let bytes = read_body(
        req.into_body(),
        limit_bytes,
        state.shared.limits.rest_body_drain_bytes_max,
    )
    .await
    .map_err(|_| {
        state
            .counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Code(ErrorCode::EntityTooLarge)
    })?;
    let bytes = if bytes.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        bytes
    };
    serde_json::from_slice(&bytes).map_err(|error| {
        state
            .counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        if error.is_syntax() || error.is_eof() {
            ApiError::Code(ErrorCode::InvalidJson)
        } else {
            ApiError::Field("body", "BASE_TYPE_BAD", error.to_string())
        }
    })
}

/// `value` as a `T`: 50035 at `body` when it has the wrong shape
/// (counted as a bad request), as [`read_json`] answers.
pub(crate) fn from_json_value<T: DeserializeOwned>(
    state: &ApiState,
    value: Value,
) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|error| {
        state
            .counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field("body", "BASE_TYPE_BAD", error.to_string())
    })
}

/// Reads `body` whole if it is at most `limit_bytes`; otherwise reads and
/// discards up to `drain_bytes_max` more before refusing it. A server
/// that answers 413 with most of the body unread closes a socket with
/// data still in its receive buffer, which sends a TCP reset that can
/// destroy the 413 before the client reads it (the client sees a broken
/// connection, not Discord's error body); draining a bounded overrun lets
/// the answer arrive. A body past the drain bound is refused at once.
pub(crate) async fn read_body(
    body: axum::body::Body,
    limit_bytes: usize,
    drain_bytes_max: usize,
) -> Result<Bytes, ()> {
    use axum::body::HttpBody;
    let mut body = body;
    let mut kept = Vec::new();
    let mut seen_bytes = 0usize;
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(frame) = frame else {
            return Err(());
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen_bytes = seen_bytes.saturating_add(data.len());
        if seen_bytes <= limit_bytes {
            kept.extend_from_slice(&data);
        } else if seen_bytes > limit_bytes.saturating_add(drain_bytes_max) {
            return Err(());
        }
    }
    if seen_bytes > limit_bytes {
        return Err(());
    }
    Ok(Bytes::from(kept))
}

/// The authenticated caller.
pub struct Caller(pub UserRow);

/// The token of `Authorization` (`Bot ` and `Bearer ` prefixes stripped).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    Some(
        value
            .strip_prefix("Bot ")
            .or_else(|| value.strip_prefix("Bearer "))
            .unwrap_or(value)
            .trim(),
    )
}

/// What the rate-limit layer found the request's token to be (it keys the
/// request's bucket on the user), so the handler does not look it up again.
#[derive(Clone)]
pub struct TokenLookup(pub guildhall_common::users::TokenAnswer);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Taken, not cloned: nothing after the extractor reads it.
        let lookup = match parts.extensions.remove::<TokenLookup>() {
            Some(TokenLookup(lookup)) => lookup,
            None => {
                let Some(token) = bearer(&parts.headers) else {
                    return Err(ApiError::Unauthorized);
                };
                state.users.by_token(auth::token_digest(token)).await
            }
        };
        match lookup.map_err(|_| ApiError::Overloaded)? {
            Some(user) => Ok(Caller(user)),
            None => {
                state
                    .counters
                    .unauthorized_total
                    .fetch_add(1, Ordering::Relaxed);
                Err(ApiError::Unauthorized)
            }
        }
    }
}

/// Counters of the api role.
#[derive(Debug, Default)]
pub struct ApiCounters {
    /// Requests served.
    pub requests_total: AtomicU64,
    /// 429 answers.
    pub rate_limited_total: AtomicU64,
    /// Requests refused for a bad body.
    pub bad_requests_total: AtomicU64,
    /// Requests refused for a bad token.
    pub unauthorized_total: AtomicU64,
    /// Messages stored.
    pub messages_total: AtomicU64,
    /// Pins whose "pinned a message" notice could not be stored.
    pub pin_notices_failed_total: AtomicU64,
    /// Guild events that could not be handed to the guild owner.
    pub fanout_failed_total: AtomicU64,
    /// Request latency.
    pub request_seconds: guildhall_common::histogram::Histogram,
}

/// Refuses `value` unless it has `min..=max` characters, with Discord's
/// 50035 body on `field` (counted with the other refused bodies).
pub(crate) fn check_chars(
    node: &ApiState,
    field: &'static str,
    value: &str,
    min: usize,
    max: usize,
) -> Result<(), ApiError> {
    if (min..=max).contains(&value.chars().count()) {
        return Ok(());
    }
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    Err(if min == 0 {
        ApiError::Field(
            field,
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {max} or fewer in length."),
        )
    } else {
        ApiError::Field(
            field,
            "BASE_TYPE_BAD_LENGTH",
            format!("Must be between {min} and {max} in length."),
        )
    })
}

/// Refuses an array longer than `max` on `field`, as [`check_chars`] does
/// a string.
pub(crate) fn check_items(
    node: &ApiState,
    field: &'static str,
    len: usize,
    max: usize,
) -> Result<(), ApiError> {
    if len <= max {
        return Ok(());
    }
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    Err(ApiError::Field(
        field,
        "BASE_TYPE_MAX_LENGTH",
        format!("Must be {max} or fewer in length."),
    ))
}

pub(crate) fn parse_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse::<u64>()
        .ok()
        .filter(|v| *v > 0 && *v <= i64::MAX as u64)
        .map(|v| v as i64)
        .ok_or(ApiError::Code(ErrorCode::General))
}

// ----- gateway discovery ----------------------------------------------------

async fn get_gateway(State(node): State<AppState>) -> ApiResult {
    ok(&json!({"url": node.shared.client_gateway_url(&node.cluster)}))
}

/// `GET /gateway/bot`: the URL, the recommended shard count and the
/// caller's session start limit as the store counts it (see
/// `Gateway::count_session_start`). Two small reads, no write.
async fn get_gateway_bot(State(node): State<AppState>, Caller(caller): Caller) -> ApiResult {
    let limits = &node.shared.limits;
    let guilds = node.shared.store.guild_count_of(caller.id).await?;
    // Only bots' IDENTIFYs are counted.
    let starts = if caller.bot {
        node.shared.store.session_starts(caller.id).await?
    } else {
        None
    };
    let (remaining, reset_after_ms) = session_start_remaining(
        starts,
        i64::try_from(guildhall_common::state::now_ms()).unwrap_or(i64::MAX),
        i64::try_from(limits.session_start_window_ms).unwrap_or(i64::MAX),
        limits.session_starts_per_window_max.into(),
    );
    ok(&json!({
        "url": node.shared.client_gateway_url(&node.cluster),
        "shards": recommended_shards(guilds, limits.ready_guilds_max, limits.gateway_shards_max),
        "session_start_limit": {
            "total": limits.session_starts_per_window_max,
            "remaining": remaining,
            "reset_after": reset_after_ms,
            "max_concurrency": limits.identify_concurrency_max,
        },
    }))
}

/// `session_start_limit`'s `remaining` and `reset_after` (ms) for a bot's
/// counted starts at `now_ms`: a window that has ended (or none) leaves
/// the whole total and nothing to wait for.
fn session_start_remaining(
    starts: Option<guildhall_store::SessionStarts>,
    now_ms: i64,
    window_ms: i64,
    total: i64,
) -> (i64, i64) {
    match starts {
        Some(s) if s.window_start_ms.saturating_add(window_ms) > now_ms => (
            (total - s.starts).max(0),
            (s.window_start_ms.saturating_add(window_ms) - now_ms).min(window_ms),
        ),
        _ => (total, 0),
    }
}

/// `shards` of `GET /gateway/bot`: enough that each shard holds about half
/// of `ready_guilds_max` (Discord recommends 1,000 per shard against its
/// 2,500), so the uneven spread of ids over shards stays clear of 4011.
fn recommended_shards(guilds: i64, ready_guilds_max: usize, shards_max: u32) -> u32 {
    let per_shard = (ready_guilds_max / 2).max(1) as u64;
    let shards = u64::try_from(guilds)
        .unwrap_or(0)
        .div_ceil(per_shard)
        .max(1);
    u32::try_from(shards).unwrap_or(u32::MAX).min(shards_max)
}

// ----- accounts -------------------------------------------------------------

#[derive(Deserialize)]
struct Register {
    username: String,
    password: String,
}

#[derive(Deserialize)]
struct Login {
    login: String,
    password: String,
}

fn check_username(name: &str) -> Result<(), ApiError> {
    let ok = (2..=32).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(ApiError::Field(
            "username",
            "USERNAME_INVALID",
            "2-32 characters: a-z, 0-9, _ or .".into(),
        ))
    }
}

async fn issue_token(node: &ApiState, user_id: i64) -> Result<String, ApiError> {
    let token = auth::new_token(user_id, now_ms()).map_err(|_| ApiError::Internal)?;
    node.shared
        .store
        .add_token(&auth::token_digest(&token), user_id, now_ms() as i64)
        .await?;
    Ok(token)
}

/// The answer when every password-hashing permit is in use (or another
/// node-wide bound is reached, such as the interaction table): 429 with
/// `Retry-After`, scope `shared` (the node is busy, not the caller, so it
/// does not count against the caller's invalid requests).
pub(crate) fn hashing_busy() -> Response {
    let mut response = ApiError::RateLimited(1.0).into_response();
    response
        .headers_mut()
        .insert("x-ratelimit-scope", HeaderValue::from_static("shared"));
    response
}

fn taken() -> ApiError {
    ApiError::Field(
        "username",
        "USERNAME_ALREADY_TAKEN",
        "Username is unavailable.".into(),
    )
}

async fn register(State(node): State<AppState>, JsonBody(body): JsonBody<Register>) -> ApiResult {
    check_username(&body.username)?;
    if !(8..=128).contains(&body.password.chars().count()) {
        return Err(ApiError::Field(
            "password",
            "PASSWORD_LENGTH",
            "Must be between 8 and 128 in length.".into(),
        ));
    }
    // A taken name costs one indexed read, not a hash (the insert's
    // uniqueness constraint still decides a race between two registers).
    if node
        .shared
        .store
        .user_by_name(&body.username)
        .await?
        .is_some()
    {
        return Err(taken());
    }
    let hash = match node.passwords.hash(body.password).await {
        Ok(hash) => hash,
        Err(auth::PasswordError::Busy) => return Ok(hashing_busy()),
        Err(auth::PasswordError::Failed) => return Err(ApiError::Internal),
    };
    let id = node.shared.next_id().get() as i64;
    let user = UserRow {
        id,
        username: body.username,
        password_hash: Some(hash),
        bot: false,
        global_name: None,
        created_ms: now_ms() as i64,
    };
    node.shared.store.create_user(&user).await?;
    let token = issue_token(&node, id).await?;
    ok(&json!({"token": token, "user_id": id.to_string()}))
}

async fn login(State(node): State<AppState>, JsonBody(body): JsonBody<Login>) -> ApiResult {
    let invalid = || {
        ApiError::Field(
            "login",
            "INVALID_LOGIN",
            "Login or password is invalid.".into(),
        )
    };
    let user = node
        .shared
        .store
        .user_by_name(&body.login)
        .await?
        .ok_or_else(invalid)?;
    let Some(hash) = user.password_hash.clone() else {
        return Err(invalid());
    };
    let valid = match node.passwords.verify(body.password, hash).await {
        Ok(valid) => valid,
        Err(auth::PasswordError::Busy) => return Ok(hashing_busy()),
        Err(auth::PasswordError::Failed) => return Err(ApiError::Internal),
    };
    if !valid {
        return Err(invalid());
    }
    let token = issue_token(&node, user.id).await?;
    ok(&json!({"token": token, "user_id": user.id.to_string()}))
}

// ----- users and applications -----------------------------------------------

async fn me(Caller(user): Caller) -> ApiResult {
    ok(&wire_user(&user))
}

async fn get_user(
    State(node): State<AppState>,
    _caller: Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let id = parse_id(&id)?;
    match node.shared.store.user(id).await? {
        Some(user) => ok(&wire_user(&user)),
        None => Err(ApiError::Code(ErrorCode::UnknownUser)),
    }
}

/// The application object: what is stored, what follows from it (the
/// guild count through its bot), and Discord's constants for what this
/// server does not have (no team, no redirect URIs, no interactions
/// endpoint, guild install only). `verify_key` is empty: interactions
/// reach bots over the gateway, never signed over HTTP.
async fn application_object(node: &ApiState, app: &ApplicationRow) -> ApiResult {
    let store = &node.shared.store;
    let owner = store.user(app.owner_id).await?.ok_or(ApiError::Internal)?;
    let bot = store
        .user(app.bot_user_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let guilds = store.guild_count_of(app.bot_user_id).await?;
    ok(&json!({
        "id": app.id.to_string(), "name": app.name, "description": app.description, "icon": null,
        "bot_public": true, "bot_require_code_grant": false, "owner": wire_user(&owner),
        "verify_key": "", "flags": app.flags, "bot": wire_user(&bot), "team": null,
        "summary": "", "approximate_guild_count": guilds, "approximate_user_install_count": 0,
        "redirect_uris": [], "interactions_endpoint_url": null,
        "role_connections_verification_url": null, "tags": [],
        "integration_types_config": {"0": {}},
    }))
}

/// The caller's own application: its bot's (Discord's `@me`).
async fn my_application_row(node: &ApiState, user: &UserRow) -> Result<ApplicationRow, ApiError> {
    node.shared
        .store
        .application_by_bot(user.id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplication))
}

async fn my_application(State(node): State<AppState>, Caller(user): Caller) -> ApiResult {
    let app = my_application_row(&node, &user).await?;
    application_object(&node, &app).await
}

/// PATCH /applications/@me: the description, and the `_LIMITED`
/// privileged-intent flags (the only flags Discord lets the API change).
/// The other documented fields (icon, interactions endpoint, install
/// settings, tags, event webhooks) describe things this server does not
/// have, so a request setting one is refused on that field rather than
/// answered as if it had been stored.
async fn edit_my_application(
    State(node): State<AppState>,
    Caller(user): Caller,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let app = my_application_row(&node, &user).await?;
    let Value::Object(body) = body else {
        return Err(ApiError::Field(
            "body",
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.".into(),
        ));
    };
    for field in [
        "icon",
        "cover_image",
        "interactions_endpoint_url",
        "custom_install_url",
        "role_connections_verification_url",
        "install_params",
        "integration_types_config",
        "tags",
        "event_webhooks_url",
        "event_webhooks_status",
        "event_webhooks_types",
    ] {
        if body.get(field).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::Field(
                field,
                "APPLICATION_FIELD_UNSUPPORTED",
                "This server does not support this field.".into(),
            ));
        }
    }
    let description = match body.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            check_chars(
                &node,
                "description",
                text,
                0,
                node.shared.limits.application_description_chars_max,
            )?;
            Some(text.clone())
        }
        Some(_) => {
            return Err(ApiError::Field(
                "description",
                "BASE_TYPE_STRING",
                "Could not interpret the value as string.".into(),
            ));
        }
    };
    let flags = match body.get("flags") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_i64() {
            Some(flags) if flags & !app_flags::DEFAULT == app.flags & !app_flags::DEFAULT => {
                Some(flags)
            }
            _ => {
                return Err(ApiError::Field(
                    "flags",
                    "APPLICATION_FLAGS_INVALID",
                    "Only the limited privileged-intent flags can be changed.".into(),
                ));
            }
        },
    };
    let store = &node.shared.store;
    if let Some(description) = &description {
        store
            .set_application_description(app.id, description)
            .await?;
    }
    if let Some(flags) = flags {
        store.set_application_flags(app.id, flags).await?;
    }
    let app = store.application(app.id).await?.ok_or(ApiError::Internal)?;
    application_object(&node, &app).await
}

/// Query of GET /users/@me/guilds.
#[derive(Deserialize)]
struct UserGuildsQuery {
    before: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
    with_counts: Option<String>,
}

/// GET /users/@me/guilds: the caller's guilds as partial guild objects
/// with their permissions there, paged by id (`after`, or the page just
/// below `before`), at most `user_guilds_per_page_max` (Discord's 200).
/// One store query, whatever the page: no guild is loaded for it.
async fn my_guilds(
    State(node): State<AppState>,
    Caller(user): Caller,
    Query(query): Query<UserGuildsQuery>,
) -> ApiResult {
    let id_of = |raw: &Option<String>| raw.as_deref().map(parse_id).transpose();
    let (after, before) = (id_of(&query.after)?, id_of(&query.before)?);
    let page_max = node.shared.limits.user_guilds_per_page_max;
    let limit = match query.limit {
        None => page_max,
        Some(n) if (1..=page_max as i64).contains(&n) => n as usize,
        Some(_) => {
            return Err(ApiError::Field(
                "limit",
                "NUMBER_TYPE_MAX",
                format!("int value should be between 1 and {page_max}."),
            ));
        }
    };
    let with_counts = matches!(query.with_counts.as_deref(), Some("true" | "True" | "1"));
    let rows = node
        .shared
        .store
        .user_guilds(
            user.id,
            after.unwrap_or(0),
            before.unwrap_or(i64::MAX),
            limit as i64,
            before.is_some() && after.is_none(),
        )
        .await?;
    let guilds: Vec<Value> = rows
        .iter()
        .map(|g| {
            let owner = g.owner_id == user.id;
            let permissions = perm::effective(owner, g.role_permissions as u64);
            let mut guild = json!({
                "id": g.id.to_string(), "name": g.name, "icon": null, "banner": null,
                "owner": owner, "permissions": permissions.to_string(), "features": [],
            });
            if with_counts {
                guild["approximate_member_count"] = json!(g.member_count);
            }
            guild
        })
        .collect();
    ok(&guilds)
}

#[derive(Deserialize)]
struct NewApplication {
    name: String,
}

/// Creates an application and its bot user for `owner`.
pub async fn create_application_for(
    node: &ApiState,
    owner: &UserRow,
    name: &str,
) -> Result<(ApplicationRow, UserRow), ApiError> {
    let name = name.trim();
    check_chars(
        node,
        "name",
        name,
        1,
        node.shared.limits.application_name_chars_max,
    )?;
    let id = node.shared.next_id().get() as i64;
    let slug: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(20)
        .collect();
    let bot = UserRow {
        id,
        username: format!(
            "{}_{}",
            if slug.is_empty() { "bot" } else { &slug },
            id % 100_000
        ),
        password_hash: None,
        bot: true,
        global_name: None,
        created_ms: now_ms() as i64,
    };
    let app = ApplicationRow {
        id,
        name: name.to_owned(),
        owner_id: owner.id,
        bot_user_id: id,
        flags: app_flags::DEFAULT,
        description: String::new(),
    };
    node.shared.store.create_application(&app, &bot).await?;
    Ok((app, bot))
}

async fn create_application(
    State(node): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<NewApplication>,
) -> ApiResult {
    let (app, _) = create_application_for(&node, &owner, &body.name).await?;
    application_object(&node, &app).await
}

async fn owned_application(
    node: &ApiState,
    caller: &UserRow,
    id: &str,
) -> Result<ApplicationRow, ApiError> {
    let app = node
        .shared
        .store
        .application(parse_id(id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplication))?;
    if app.owner_id != caller.id {
        return Err(ApiError::Code(ErrorCode::MissingAccess));
    }
    Ok(app)
}

async fn reset_bot_token(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let app = owned_application(&node, &caller, &id).await?;
    node.shared.store.revoke_tokens(app.bot_user_id).await?;
    node.users.invalidate_user(app.bot_user_id);
    let token = issue_token(&node, app.bot_user_id).await?;
    ok(&json!({"token": token}))
}

#[derive(Deserialize)]
struct EditApplication {
    flags: Option<i64>,
}

/// `GET /applications/{id}`: the application object, for its owner (a
/// user token; anyone else is 50001, an unknown id 10002).
async fn get_application(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let app = owned_application(&node, &caller, &id).await?;
    application_object(&node, &app).await
}

async fn edit_application(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<EditApplication>,
) -> ApiResult {
    let app = owned_application(&node, &caller, &id).await?;
    if let Some(flags) = body.flags {
        node.shared
            .store
            .set_application_flags(app.id, flags)
            .await?;
    }
    let app = node
        .shared
        .store
        .application(app.id)
        .await?
        .ok_or(ApiError::Internal)?;
    application_object(&node, &app).await
}

#[derive(Deserialize)]
struct AuthorizeQuery {
    client_id: String,
    scope: Option<String>,
}

#[derive(Deserialize)]
struct AuthorizeBody {
    guild_id: Value,
    #[serde(default)]
    authorize: bool,
    /// The bot's permissions (its managed role's); absent or "0": none.
    permissions: Option<Value>,
}

fn id_from_value(value: &Value) -> Result<i64, ApiError> {
    match value {
        Value::String(s) => parse_id(s),
        Value::Number(n) => n
            .as_u64()
            .map(|v| v.to_string())
            .map_or(Err(ApiError::Code(ErrorCode::General)), |s| parse_id(&s)),
        _ => Err(ApiError::Field(
            "guild_id",
            "BASE_TYPE_REQUIRED",
            "This field is required".into(),
        )),
    }
}

/// Adds the application's bot to a guild the caller manages
/// (MANAGE_GUILD).
async fn oauth2_authorize(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Query(query): Query<AuthorizeQuery>,
    JsonBody(body): JsonBody<AuthorizeBody>,
) -> ApiResult {
    if !query
        .scope
        .as_deref()
        .unwrap_or("bot")
        .split(' ')
        .any(|s| s == "bot")
        || !body.authorize
    {
        return Err(ApiError::Field(
            "scope",
            "BASE_TYPE_BAD",
            "Only scope=bot with authorize=true is supported.".into(),
        ));
    }
    let app = node
        .shared
        .store
        .application(parse_id(&query.client_id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplication))?;
    let guild_id = id_from_value(&body.guild_id)?;
    // As Discord: whoever manages the guild adds bots, not only its owner.
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::MANAGE_GUILD)
        .await?;
    let bot = node
        .shared
        .store
        .user(app.bot_user_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let permissions = bits(body.permissions.as_ref())?.unwrap_or(0);
    if permissions as u64 & !perm::ALL != 0 {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "permissions",
            "BASE_TYPE_BAD",
            "Names permissions that do not exist.".into(),
        ));
    }
    node.guilds
        .add_member(guild_id, (&bot).into(), false)
        .await?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::AuthorizeBot {
            bot: (&bot).into(),
            role_id: node.shared.next_id().get() as i64,
            permissions,
        },
    )
    .await?;
    ok(&json!({"location": format!("https://discord.com/oauth2/authorized?guild_id={guild_id}")}))
}

// ----- guilds and channels ----------------------------------------------------

#[derive(Deserialize)]
struct NewGuild {
    name: String,
}

/// Creates a guild owned by `owner` with `@everyone` and `#general`.
pub async fn create_guild_for(
    node: &ApiState,
    owner: &UserRow,
    name: &str,
) -> Result<i64, ApiError> {
    let name = name.trim();
    // Discord's lower bound: two characters, not counting the whitespace
    // around them.
    check_chars(
        node,
        "name",
        name,
        2,
        node.shared.limits.guild_name_chars_max,
    )?;
    let id = node.shared.next_id().get() as i64;
    let channel_id = node.shared.next_id().get() as i64;
    let guild = GuildRow {
        id,
        name: name.to_owned(),
        owner_id: owner.id,
        created_ms: now_ms() as i64,
    };
    let everyone = RoleRow {
        bot_id: None,
        id,
        guild_id: id,
        name: "@everyone".into(),
        permissions: perm::EVERYONE_DEFAULT as i64,
        position: 0,
        color: 0,
        hoist: false,
        mentionable: false,
    };
    let general = ChannelRow {
        permission_overwrites: String::new(),
        id: channel_id,
        guild_id: Some(id),
        kind: 0,
        name: "general".into(),
        position: 0,
        topic: None,
        ..ChannelRow::default()
    };
    node.shared
        .store
        .create_guild(&guild, &everyone, &general)
        .await?;
    // The owner's open sessions, on whatever gateway node, learn about the
    // new guild (each subscribes with the guild's owner).
    node.gateways().to_all(
        id,
        guildhall_proto::bus::NodeEventBody::Joined {
            guild_id: id,
            user_id: owner.id,
        },
    );
    Ok(id)
}

async fn create_guild(
    State(node): State<AppState>,
    Caller(owner): Caller,
    JsonBody(body): JsonBody<NewGuild>,
) -> ApiResult {
    let id = create_guild_for(&node, &owner, &body.name).await?;
    let user_id = owner.id;
    let guild = node.guilds.snapshot(id, user_id).await?;
    ok(&guild)
}

async fn get_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    ok(&node.guilds.guild(guild_id, caller.id).await?)
}

async fn guild_channels(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let user_id = caller.id;
    ok(&node.guilds.channels(guild_id, user_id).await?)
}

#[derive(Deserialize)]
struct NewChannel {
    name: String,
    #[serde(default, rename = "type")]
    kind: u8,
    topic: Option<String>,
    /// Raw, so each malformed entry gets its own 50035 at its path.
    permission_overwrites: Option<Value>,
    /// Every other field, checked by `unsupported_channel_fields`.
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

async fn create_channel(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<NewChannel>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let limits = &node.shared.limits;
    check_chars(&node, "name", &body.name, 1, limits.channel_name_chars_max)?;
    if let Some(topic) = &body.topic {
        check_chars(&node, "topic", topic, 0, limits.channel_topic_chars_max)?;
    }
    if !matches!(body.kind, 0 | 2 | 4 | 5 | 15 | 16) {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "type",
            "BASE_TYPE_CHOICES",
            "Value must be one of {0, 2, 4, 5, 15, 16}.".into(),
        ));
    }
    unsupported_fields(&node, &body.rest, UNSUPPORTED_CHANNEL_FIELDS)?;
    let settings = channel_settings(&node, &body.rest, i64::from(body.kind))?;
    let permission_overwrites =
        overwrites_field(&node, body.permission_overwrites.as_ref())?.unwrap_or_default();
    // The owner checks MANAGE_CHANNELS (and MANAGE_ROLES for overwrites)
    // and the guild's channel count, then stores the channel.
    let channel = ChannelRecord {
        id: node.shared.next_id().get() as i64,
        guild_id: Some(guild_id),
        kind: i64::from(body.kind),
        name: body.name,
        position: 0,
        topic: body.topic,
        permission_overwrites,
        settings,
    };
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::CreateChannel { channel },
    )
    .await
}

#[derive(Deserialize)]
struct MembersQuery {
    limit: Option<usize>,
    after: Option<String>,
}

async fn guild_members(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<MembersQuery>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let user_id = caller.id;
    let after = query
        .after
        .as_deref()
        .map(parse_id)
        .transpose()?
        .unwrap_or(0);
    let limit = query
        .limit
        .unwrap_or(1)
        .clamp(1, node.shared.limits.members_per_page_max);
    let members = node
        .guilds
        .members(guild_id, user_id, String::new(), vec![], after, limit)
        .await?;
    ok(&members.members)
}

#[derive(Deserialize)]
struct MemberSearchQuery {
    query: Option<String>,
    limit: Option<String>,
}

/// `GET /guilds/{id}/members/search`: members whose username or nickname
/// starts with `query` (required; case insensitive), `limit` 1 to
/// `members_per_page_max` (default 1), as Discord documents it. The
/// owner scans its members in memory, bounded by the guild's size.
async fn search_guild_members(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<MemberSearchQuery>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let bad = |field: &'static str, code: &'static str, message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message)
    };
    let max = node.shared.limits.members_per_page_max;
    let limit = match query.limit.as_deref() {
        None => 1,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| {
                bad(
                    "limit",
                    "NUMBER_TYPE_COERCE",
                    format!("Must be between 1 and {max}."),
                )
            })?,
    };
    let Some(text) = query.query else {
        return Err(bad(
            "query",
            "BASE_TYPE_REQUIRED",
            "This field is required".into(),
        ));
    };
    let page = node
        .guilds
        .search_members(guild_id, caller.id, text, limit)
        .await?;
    ok(&page.members)
}

async fn guild_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, member)): Path<(String, String)>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let member_id = parse_id(&member)?;
    let user_id = caller.id;
    let members = node
        .guilds
        .members(guild_id, user_id, String::new(), vec![member_id], 0, 1)
        .await?;
    members
        .members
        .into_iter()
        .next()
        .map_or(Err(ApiError::Code(ErrorCode::UnknownMember)), |m| ok(&m))
}

/// GET /users/@me/guilds/{guild.id}/member: the caller's own member
/// object (joined_at, roles, nick), asked of the guild's owner like any
/// member read; a guild the caller is not in is Discord's 10004.
async fn my_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id).map_err(|_| ApiError::Code(ErrorCode::UnknownGuild))?;
    let members = match node
        .guilds
        .members(guild_id, caller.id, String::new(), vec![caller.id], 0, 1)
        .await
    {
        Err(GuildError::MissingAccess) => return Err(ApiError::Code(ErrorCode::UnknownGuild)),
        other => other?,
    };
    members
        .members
        .into_iter()
        .next()
        .map_or(Err(ApiError::Code(ErrorCode::UnknownGuild)), |m| ok(&m))
}

pub(crate) async fn guild_channel(
    node: &ApiState,
    channel_id: &str,
) -> Result<(ChannelRow, i64), ApiError> {
    let channel = node
        .shared
        .store
        .channel(parse_id(channel_id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
    let guild_id = channel
        .guild_id
        .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
    Ok((channel, guild_id))
}

pub(crate) async fn authorize(
    node: &ApiState,
    user_id: i64,
    channel: &ChannelRow,
    guild_id: i64,
    need: u64,
) -> Result<guildhall_proto::guilds::SendGrant, ApiError> {
    let channel_id = channel.id;
    Ok(node
        .guilds
        .authorize(guild_id, user_id, channel_id, need)
        .await?)
}

async fn get_channel(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    authorize(&node, caller.id, &channel, guild_id, perm::VIEW_CHANNEL).await?;
    let mut wire = wire_channel(&channel, true);
    // A thread carries the caller's thread member when they joined it, as
    // the threads topic documents (one keyed read).
    if let Some(fields) = wire.thread.as_mut() {
        fields.member = node
            .shared
            .store
            .thread_member(channel.id, caller.id)
            .await?
            .map(|m| guildhall_common::wire::wire_thread_member(&m, true));
    }
    ok(&wire)
}

// ----- threads --------------------------------------------------------------

/// The fields of a thread's start (`name`, `auto_archive_duration`,
/// `rate_limit_per_user`, `invitable`), checked against Discord's bounds:
/// (name, minutes, seconds, invitable; None: the parent's default). `invitable` false is for private
/// threads (`kind` 12) only; the forum fields (`message`, `applied_tags`)
/// are refused, as no channel here is a forum.
fn thread_fields(
    node: &ApiState,
    body: &serde_json::Map<String, Value>,
    kind: i64,
    forum: bool,
) -> Result<(String, Option<i64>, Option<i64>, bool), ApiError> {
    let bad = |field: &'static str, code: &'static str, message: &str| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message.into())
    };
    let name = match body.get("name") {
        Some(Value::String(name)) => name.clone(),
        None | Some(Value::Null) => {
            return Err(bad("name", "BASE_TYPE_REQUIRED", "This field is required"));
        }
        Some(_) => return Err(bad("name", "BASE_TYPE_BAD", "Must be a string.")),
    };
    check_chars(
        node,
        "name",
        &name,
        1,
        node.shared.limits.channel_name_chars_max,
    )?;
    let minutes = match body.get("auto_archive_duration") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .filter(|m| AUTO_ARCHIVE_MINUTES.contains(m))
                .ok_or_else(|| {
                    bad(
                        "auto_archive_duration",
                        "BASE_TYPE_CHOICES",
                        "Value must be one of {60, 1440, 4320, 10080}.",
                    )
                })?,
        ),
    };
    let seconds = match body.get("rate_limit_per_user") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .filter(|s| (0..=RATE_LIMIT_PER_USER_S_MAX).contains(s))
                .ok_or_else(|| {
                    bad(
                        "rate_limit_per_user",
                        "NUMBER_TYPE_MAX",
                        "int value should be between 0 and 21600.",
                    )
                })?,
        ),
    };
    let invitable = match body.get("invitable") {
        None | Some(Value::Null | Value::Bool(true)) => true,
        Some(Value::Bool(false)) if kind == 12 => false,
        Some(Value::Bool(false)) => {
            return Err(bad(
                "invitable",
                "CHANNEL_TYPE_INVALID",
                "Only private threads have this field.",
            ));
        }
        Some(_) => return Err(bad("invitable", "BASE_TYPE_BAD", "Must be a boolean.")),
    };
    for field in ["message", "applied_tags"] {
        if !forum && body.get(field).is_some_and(|v| !v.is_null()) {
            return Err(bad(
                field,
                "CHANNEL_TYPE_INVALID",
                "Only forum and media channels' threads have this field.",
            ));
        }
    }
    Ok((name, minutes, seconds, invitable))
}

/// Starts `thread` at the guild's owner: 201 with the thread, as Discord
/// answers.
async fn start_thread_at_owner(
    node: &ApiState,
    guild_id: i64,
    actor: i64,
    thread: ThreadRecord,
) -> ApiResult {
    let result = node
        .guilds
        .change(
            guild_id,
            actor,
            GuildChange::CreateThread { thread },
            request_reason(node),
        )
        .await;
    if let Err(
        GuildError::WrongChannelType | GuildError::ThreadExists | GuildError::MaxActiveThreads,
    ) = result
    {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
    }
    match result? {
        Changed::Channel(thread) => {
            let mut response = ok(&thread)?;
            *response.status_mut() = StatusCode::CREATED;
            Ok(response)
        }
        other => changed(other),
    }
}

/// `POST /channels/{id}/threads`: a thread not started from a message;
/// `type` 10, 11 or 12 (default 12, as the API has it since v9) and the
/// parent's kind must match (text: 11 or 12; announcement: 10), else
/// 50024. CREATE_PUBLIC_THREADS or CREATE_PRIVATE_THREADS there.
async fn start_thread(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    form: crate::files::MessageBody<serde_json::Map<String, Value>>,
) -> ApiResult {
    let (parent, guild_id) = guild_channel(&node, &id).await?;
    if matches!(parent.kind, 15 | 16) {
        return start_forum_post(&node, &caller, &parent, guild_id, form).await;
    }
    if !form.uploads.is_empty() {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "attachments",
            "BASE_TYPE_BAD",
            "Only a forum or media post starts with files.".into(),
        ));
    }
    let body = form.body;
    let kind = match body.get("type") {
        None | Some(Value::Null) => 12,
        Some(value) => value
            .as_i64()
            .filter(|k| matches!(k, 10..=12))
            .ok_or_else(|| {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                ApiError::Field(
                    "type",
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {10, 11, 12}.".into(),
                )
            })?,
    };
    let (name, auto_archive_duration, rate_limit_per_user, invitable) =
        thread_fields(&node, &body, kind, false)?;
    let thread = ThreadRecord {
        id: node.shared.next_id().get() as i64,
        parent_id: parent.id,
        kind,
        name,
        auto_archive_duration,
        rate_limit_per_user,
        invitable,
        from_message: false,
        applied_tags: vec![],
    };
    start_thread_at_owner(&node, guild_id, caller.id, thread).await
}

/// `POST /channels/{id}/messages/{message.id}/threads`: a thread started
/// from a message of the channel, sharing its id (a public thread in a
/// text channel, an announcement thread in an announcement channel); a
/// second start from it is 160004.
async fn start_thread_from_message(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, message_id)): Path<(String, String)>,
    JsonBody(body): JsonBody<serde_json::Map<String, Value>>,
) -> ApiResult {
    let (parent, guild_id) = guild_channel(&node, &id).await?;
    let message_id = parse_id(&message_id)?;
    authorize(
        &node,
        caller.id,
        &parent,
        guild_id,
        perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY,
    )
    .await?;
    let message = node
        .shared
        .store
        .message(parent.id, message_id)
        .await?
        .filter(|m| m.visible_to.is_none())
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
    let kind = if parent.kind == 5 { 10 } else { 11 };
    let (name, auto_archive_duration, rate_limit_per_user, invitable) =
        thread_fields(&node, &body, kind, false)?;
    let thread = ThreadRecord {
        id: message.id,
        parent_id: parent.id,
        kind,
        name,
        auto_archive_duration,
        rate_limit_per_user,
        invitable,
        from_message: true,
        applied_tags: vec![],
    };
    start_thread_at_owner(&node, guild_id, caller.id, thread).await
}

/// A post's `applied_tags`: at most 5 snowflakes (None: absent or null).
/// Whether each is one of the forum's tags is the owner's check.
fn applied_tags_field(
    node: &ApiState,
    value: Option<&Value>,
) -> Result<Option<Vec<i64>>, ApiError> {
    /// Discord's bound on a post's applied tags.
    const APPLIED_TAGS_MAX: usize = 5;
    let bad = |message: &str| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field("applied_tags", "BASE_TYPE_BAD", message.into())
    };
    let list = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(bad("Must be an array of snowflakes.")),
    };
    if list.len() > APPLIED_TAGS_MAX {
        return Err(bad("Must be 5 or fewer in length."));
    }
    list.iter()
        .map(|id| id_from_value(id).map_err(|_| bad("Must be an array of snowflakes.")))
        .collect::<Result<Vec<i64>, ApiError>>()
        .map(Some)
}

/// `POST /channels/{forum.id}/threads` in a forum or media channel: a post,
/// as documented. A public thread (type 11) with its first message
/// (`message`: content, embeds, components, allowed mentions, files as
/// `files[n]` beside `payload_json`), which shares the thread's id; the
/// poster needs SEND_MESSAGES in the forum (and ATTACH_FILES for files),
/// whose slowmode applies to posts. `applied_tags` must be the forum's.
/// The message is checked before anything is written; 201 with the
/// thread and its `message`, after THREAD_CREATE and MESSAGE_CREATE.
async fn start_forum_post(
    node: &ApiState,
    author: &UserRow,
    forum: &ChannelRow,
    guild_id: i64,
    form: crate::files::MessageBody<serde_json::Map<String, Value>>,
) -> ApiResult {
    let bad = |field: &'static str, code: &'static str, message: &str| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message.into())
    };
    let body = &form.body;
    match body.get("type") {
        None | Some(Value::Null) => {}
        Some(kind) if kind.as_i64() == Some(11) => {}
        Some(_) => {
            return Err(bad(
                "type",
                "BASE_TYPE_CHOICES",
                "A forum or media post is a public thread (11).",
            ));
        }
    }
    let (name, auto_archive_duration, rate_limit_per_user, _) =
        thread_fields(node, body, 11, true)?;
    let applied_tags = applied_tags_field(node, body.get("applied_tags"))?.unwrap_or_default();
    let first = match body.get("message") {
        Some(Value::Object(first)) => first,
        None | Some(Value::Null) => {
            return Err(bad(
                "message",
                "BASE_TYPE_REQUIRED",
                "This field is required",
            ));
        }
        Some(_) => return Err(bad("message", "BASE_TYPE_BAD", "Must be an object.")),
    };
    if first.get("message_reference").is_some_and(|r| !r.is_null()) {
        return Err(bad(
            "message",
            "BASE_TYPE_BAD",
            "A post's first message is not a reply.",
        ));
    }
    let attachments = first.get("attachments").cloned();
    let new_message: NewMessage = serde_json::from_value(Value::Object(first.clone()))
        .map_err(|error| bad("message", "BASE_TYPE_BAD", &error.to_string()))?;
    let checked = check_new_message(
        node,
        author,
        new_message,
        attachments.as_ref(),
        &form.uploads,
    )?;
    let mut need = perm::SEND_MESSAGES;
    if !checked.planned.is_empty() {
        need |= perm::ATTACH_FILES;
    }
    let grant = node
        .guilds
        .authorize_send(guild_id, author.id, forum.id, need)
        .await?;
    let id = node.shared.next_id().get() as i64;
    let thread = ThreadRecord {
        id,
        parent_id: forum.id,
        kind: 11,
        name,
        auto_archive_duration,
        rate_limit_per_user,
        invitable: true,
        from_message: false,
        applied_tags,
    };
    let result = node
        .guilds
        .change(
            guild_id,
            author.id,
            GuildChange::CreateThread { thread },
            request_reason(node),
        )
        .await;
    if let Err(
        GuildError::WrongChannelType | GuildError::UnknownTag(_) | GuildError::MaxActiveThreads,
    ) = result
    {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
    }
    let thread = match result? {
        Changed::Channel(thread) => thread,
        other => return changed(other),
    };
    let row = ChannelRow {
        id,
        guild_id: Some(guild_id),
        kind: 11,
        parent_id: Some(forum.id),
        ..ChannelRow::default()
    };
    let message = post_message(
        node,
        author,
        &row,
        checked,
        &form.uploads,
        Some((id, grant)),
    )
    .await?;
    let mut answer = serde_json::to_value(&thread).map_err(|_| ApiError::Internal)?;
    // Counted as the post was answered: its first message is in it.
    answer["message_count"] = json!(1);
    answer["total_message_sent"] = json!(1);
    answer["message"] = serde_json::to_value(&message).map_err(|_| ApiError::Internal)?;
    let mut response = ok(&answer)?;
    *response.status_mut() = StatusCode::CREATED;
    Ok(response)
}

/// Joins, leaves, adds or removes a thread member at the guild's owner
/// (`PUT`/`DELETE /channels/{id}/thread-members/@me` and `/{user.id}`):
/// 204, and 204 again when nothing changes, as Discord answers.
async fn thread_member_change(
    node: &ApiState,
    caller: i64,
    thread: &str,
    user: Option<&str>,
    add: bool,
) -> ApiResult {
    let (thread, guild_id) = guild_channel(node, thread).await?;
    let user_id = match user {
        None => caller,
        Some(raw) => parse_id(raw)?,
    };
    change(
        node,
        guild_id,
        caller,
        GuildChange::ThreadMember {
            thread_id: thread.id,
            user_id,
            add,
        },
    )
    .await
}

async fn join_thread(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    thread_member_change(&node, caller.id, &id, None, true).await
}

async fn leave_thread(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    thread_member_change(&node, caller.id, &id, None, false).await
}

async fn add_thread_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult {
    thread_member_change(&node, caller.id, &id, Some(&user), true).await
}

async fn remove_thread_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult {
    thread_member_change(&node, caller.id, &id, Some(&user), false).await
}

#[derive(Deserialize)]
struct ThreadMembersQuery {
    with_member: Option<String>,
    after: Option<String>,
    limit: Option<String>,
}

/// A thread the caller may view, read from the store: (row, guild); a
/// channel that is not a thread is 50024.
async fn viewed_thread(
    node: &ApiState,
    caller: i64,
    id: &str,
) -> Result<(ChannelRow, i64), ApiError> {
    let (thread, guild_id) = guild_channel(node, id).await?;
    authorize(node, caller, &thread, guild_id, perm::VIEW_CHANNEL).await?;
    if !guildhall_store::THREAD_KINDS.contains(&thread.kind) {
        return Err(ApiError::Code(ErrorCode::WrongChannelType));
    }
    Ok((thread, guild_id))
}

/// Thread member rows as the wire has them, with their guild member
/// objects when asked (`with_member`; one call to the guild's owner).
async fn wire_thread_members(
    node: &ApiState,
    caller: i64,
    guild_id: i64,
    rows: &[guildhall_store::ThreadMemberRow],
    with_member: bool,
) -> Result<Vec<guildhall_proto::model::ThreadMember>, ApiError> {
    let mut members = HashMap::new();
    if with_member && !rows.is_empty() {
        let ids: Vec<i64> = rows.iter().map(|r| r.user_id).collect();
        let page = node
            .guilds
            .members(guild_id, caller, String::new(), ids, 0, rows.len())
            .await?;
        for member in page.members {
            if let Some(user) = &member.user {
                members.insert(user.id.get() as i64, member);
            }
        }
    }
    Ok(rows
        .iter()
        .map(|row| {
            let mut wire = guildhall_common::wire::wire_thread_member(row, true);
            wire.member = members.remove(&row.user_id).map(Box::new);
            wire
        })
        .collect())
}

fn truthy(value: Option<&str>) -> bool {
    matches!(value, Some("true" | "True" | "1"))
}

/// `GET /channels/{id}/thread-members/{user.id}`: their thread member
/// (with `with_member`, their guild member), or 10007.
async fn get_thread_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
    Query(query): Query<ThreadMembersQuery>,
) -> ApiResult {
    let (thread, guild_id) = viewed_thread(&node, caller.id, &id).await?;
    let user_id = parse_id(&user)?;
    let rows: Vec<_> = node
        .shared
        .store
        .thread_member(thread.id, user_id)
        .await?
        .into_iter()
        .collect();
    let with_member = truthy(query.with_member.as_deref());
    let mut members = wire_thread_members(&node, caller.id, guild_id, &rows, with_member).await?;
    members
        .pop()
        .map_or(Err(ApiError::Code(ErrorCode::UnknownMember)), |m| ok(&m))
}

/// `GET /channels/{id}/thread-members`: by user id above `after`, at most
/// `limit` (1 to `thread_members_page_max`, default that).
async fn list_thread_members(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<ThreadMembersQuery>,
) -> ApiResult {
    let (thread, guild_id) = viewed_thread(&node, caller.id, &id).await?;
    let bad = |field: &'static str, message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, "NUMBER_TYPE_COERCE", message)
    };
    let max = node.shared.limits.thread_members_page_max;
    let limit = match query.limit.as_deref() {
        None => max,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| bad("limit", format!("Must be between 1 and {max}.")))?,
    };
    let after = match query.after.as_deref() {
        None => 0,
        Some(raw) => parse_id(raw).map_err(|_| bad("after", "Value is not snowflake.".into()))?,
    };
    let rows = node
        .shared
        .store
        .thread_members(thread.id, after, limit as i64)
        .await?;
    let with_member = truthy(query.with_member.as_deref());
    ok(&wire_thread_members(&node, caller.id, guild_id, &rows, with_member).await?)
}

/// `GET /guilds/{id}/threads/active`: the guild's active threads the
/// caller can view (private ones they joined or moderate), newest first,
/// and the caller's thread member of each they joined.
async fn active_threads(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let mut threads = node.guilds.active_threads(guild_id, caller.id).await?;
    threads.sort_by_key(|t| std::cmp::Reverse(t.id.get()));
    let members: Vec<guildhall_proto::model::ThreadMember> = threads
        .iter_mut()
        .filter_map(|t| {
            let mut member = t.thread.as_mut()?.member.take()?;
            member.id = Some(t.id);
            member.user_id = Some(sf(caller.id));
            Some(member)
        })
        .collect();
    ok(&json!({"threads": threads, "members": members}))
}

#[derive(Deserialize)]
struct ArchivedThreadsQuery {
    before: Option<String>,
    limit: Option<String>,
}

/// Which archived threads a list names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ArchivedList {
    /// `/threads/archived/public`: public (or announcement) threads.
    Public,
    /// `/threads/archived/private`: every private thread (moderators).
    Private,
    /// `/users/@me/threads/archived/private`: private threads the caller
    /// joined, by id.
    Joined,
}

/// The three archived-thread lists of a channel, as documented: newest
/// archive first (joined private ones: highest id first), `before` an ISO
/// 8601 time (a thread id for the joined list), `limit` 1 to
/// `archived_threads_page_max` (default 50 or that bound), with the
/// caller's thread member of each thread they joined and `has_more`.
async fn archived_threads(
    node: &ApiState,
    caller: i64,
    id: &str,
    list: ArchivedList,
    query: ArchivedThreadsQuery,
) -> ApiResult {
    let (parent, guild_id) = guild_channel(node, id).await?;
    let need = match list {
        ArchivedList::Private => perm::READ_MESSAGE_HISTORY | perm::MANAGE_THREADS,
        _ => perm::READ_MESSAGE_HISTORY,
    };
    authorize(node, caller, &parent, guild_id, perm::VIEW_CHANNEL | need).await?;
    let kinds: &[i64] = match (list, parent.kind) {
        (ArchivedList::Public, 0 | 15 | 16) => &[11],
        (ArchivedList::Public, 5) => &[10],
        (ArchivedList::Private | ArchivedList::Joined, 0) => &[12],
        _ => return Err(ApiError::Code(ErrorCode::WrongChannelType)),
    };
    let bad = |field: &'static str, code: &'static str, message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message)
    };
    let max = node.shared.limits.archived_threads_page_max;
    let limit = match query.limit.as_deref() {
        None => max.min(50),
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| {
                bad(
                    "limit",
                    "NUMBER_TYPE_MAX",
                    format!("Must be between 1 and {max}."),
                )
            })?,
    };
    // One more than asked says whether there are more.
    let asked = limit as i64 + 1;
    let store = &node.shared.store;
    let mut rows = match list {
        ArchivedList::Joined => {
            let before = match query.before.as_deref() {
                None => i64::MAX,
                Some(raw) => parse_id(raw).map_err(|_| {
                    bad(
                        "before",
                        "NUMBER_TYPE_COERCE",
                        "Value is not snowflake.".into(),
                    )
                })?,
            };
            store
                .joined_archived_threads(parent.id, caller, before, asked)
                .await?
        }
        _ => {
            let before_ms = match query.before.as_deref() {
                None => i64::MAX,
                Some(raw) => parse_timestamp_us(raw)
                    .map(|us| us.div_euclid(1_000))
                    .ok_or_else(|| {
                        bad(
                            "before",
                            "DATE_TIME_TYPE_PARSE",
                            "Could not parse the time. It should be an ISO 8601 timestamp.".into(),
                        )
                    })?,
            };
            store
                .archived_threads(parent.id, kinds, before_ms, asked)
                .await?
        }
    };
    let has_more = rows.len() > limit;
    rows.truncate(limit);
    // The caller's membership of each: one lookup per thread, at most
    // `archived_threads_page_max` of them.
    let mut members = vec![];
    for row in &rows {
        if let Some(member) = store.thread_member(row.id, caller).await? {
            members.push(guildhall_common::wire::wire_thread_member(&member, true));
        }
    }
    let threads: Vec<_> = rows.iter().map(|row| wire_channel(row, true)).collect();
    ok(&json!({"threads": threads, "members": members, "has_more": has_more}))
}

async fn archived_public_threads(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<ArchivedThreadsQuery>,
) -> ApiResult {
    archived_threads(&node, caller.id, &id, ArchivedList::Public, query).await
}

async fn archived_private_threads(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<ArchivedThreadsQuery>,
) -> ApiResult {
    archived_threads(&node, caller.id, &id, ArchivedList::Private, query).await
}

async fn joined_archived_threads(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<ArchivedThreadsQuery>,
) -> ApiResult {
    archived_threads(&node, caller.id, &id, ArchivedList::Joined, query).await
}

// ----- messages -------------------------------------------------------------

#[derive(Deserialize)]
struct NewMessage {
    #[serde(default)]
    content: String,
    #[serde(default)]
    tts: bool,
    nonce: Option<Value>,
    #[serde(default)]
    embeds: Vec<Value>,
    /// Buttons and menus (bots only): kept with the message, so a click
    /// on one becomes a component interaction matched against them.
    #[serde(default)]
    components: Vec<Value>,
    /// Makes the message a reply (`guildhall_proto::replies`); kept raw so
    /// each malformed field gets its own 50035 nested at the field.
    message_reference: Option<Value>,
    /// Who may be mentioned (`guildhall_proto::mentions`); raw for the
    /// same reason.
    allowed_mentions: Option<Value>,
    /// SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS, IS_COMPONENTS_V2
    /// ([`CREATE_FLAGS`]); raw so a bad value is a 50035 on the field.
    flags: Option<Value>,
}

/// What the author may mention beyond users: `@everyone`/`@here` and
/// roles that are not mentionable need MENTION_EVERYONE.
pub(crate) enum MentionRights {
    /// A direct message: `@everyone` and roles mean nothing there.
    Dm,
    /// The author's permissions in the guild, known already.
    Known(u64),
    /// A webhook: what its body allows.
    Webhook,
    /// Asked of the guild's owner, and only when the content needs it.
    Ask {
        /// The author.
        user_id: i64,
        /// The message's channel.
        channel_id: i64,
    },
}

/// How an edit rebuilds a message's mentions.
pub(crate) struct Mentioning {
    /// The edit's `allowed_mentions` (or the defaults).
    pub(crate) allowed: mentions::Allowed,
    /// What the author may mention.
    pub(crate) rights: MentionRights,
    /// Who asks for the guild's roles (the author, or a webhook's
    /// creator).
    pub(crate) actor_id: i64,
}

/// The `allowed_mentions` of a body: the defaults of `context` when
/// absent; a refusal is Discord's 50035 nested at the field.
pub(crate) fn allowed_mentions(
    node: &ApiState,
    value: Option<&Value>,
    context: mentions::Context,
) -> Result<mentions::Allowed, ApiError> {
    mentions::parse_allowed(value, context).map_err(|error| invalid_form(node, &error))
}

/// Who `content` mentions under `allowed`, as stored with the message
/// (`None`: nobody): users that exist (one store read for all of them),
/// roles of the guild that are mentionable or that the author may mention
/// anyway, and `@everyone` only with MENTION_EVERYONE. `replied_author`:
/// the author of the message replied to.
pub(crate) async fn mentions_of(
    node: &ApiState,
    guild_id: Option<i64>,
    content: &str,
    mentioning: &Mentioning,
    replied_author: Option<i64>,
) -> Result<Option<String>, ApiError> {
    let found = mentions::in_content(content);
    let asked = mentions::resolve(
        &found,
        &mentioning.allowed,
        true,
        replied_author.and_then(|id| u64::try_from(id).ok()),
    );
    // The author's MENTION_EVERYONE, asked of the owner only when the
    // content mentions @everyone or a role (`resolve` was given `true` so
    // that this is known first; it is applied below).
    let needs_rights = asked.everyone || !asked.roles.is_empty();
    let may_everyone = match (guild_id, &mentioning.rights) {
        (None, _) | (_, MentionRights::Dm) => false,
        (Some(_), MentionRights::Webhook) => true,
        (Some(_), MentionRights::Known(bits)) => bits & perm::MENTION_EVERYONE != 0,
        (
            Some(guild_id),
            MentionRights::Ask {
                user_id,
                channel_id,
            },
        ) if needs_rights => {
            let grant = node
                .guilds
                .authorize(guild_id, *user_id, *channel_id, 0)
                .await?;
            grant.permissions & perm::MENTION_EVERYONE != 0
        }
        (Some(_), MentionRights::Ask { .. }) => false,
    };
    let ids: Vec<i64> = asked
        .users
        .iter()
        .filter_map(|id| i64::try_from(*id).ok())
        .collect();
    let mut stored = mentions::Stored::default();
    if !ids.is_empty() {
        let rows = node.shared.store.users_by_ids(&ids).await?;
        // In the order they were mentioned, as Discord lists them.
        for id in &ids {
            if let Some(row) = rows.iter().find(|r| r.id == *id) {
                stored.users.push(wire_user(row));
            }
        }
        stored.replied_user = replied_author
            .filter(|id| rows.iter().any(|r| r.id == *id) && mentioning.allowed.replied_user)
            .map(sf);
    }
    if let Some(guild_id) = guild_id
        && !asked.roles.is_empty()
        && !matches!(mentioning.rights, MentionRights::Dm)
    {
        let roles = match node.guilds.roles(guild_id, mentioning.actor_id).await {
            Ok(roles) => roles,
            // A webhook whose creator left the guild mentions no roles.
            Err(_) if matches!(mentioning.rights, MentionRights::Webhook) => vec![],
            Err(error) => return Err(error.into()),
        };
        for id in &asked.roles {
            if roles
                .iter()
                .any(|r| r.id.get() == *id && (r.mentionable || may_everyone))
                && let Some(id) = guildhall_proto::Snowflake::new(*id)
            {
                stored.roles.push(id);
            }
        }
    }
    stored.everyone = asked.everyone && guild_id.is_some() && may_everyone;
    if stored.is_empty() {
        return Ok(None);
    }
    Ok(serde_json::to_string(&stored).ok())
}

/// A message body's `embeds`: at most `message_embeds_max`, each checked
/// against Discord's embed limits and reduced to the documented fields
/// (`guildhall_proto::embeds`), as the JSON stored with the message;
/// `None` for none. A refusal is Discord's 50035 nested at the field.
pub(crate) fn checked_embeds(
    node: &ApiState,
    embeds: &[Value],
) -> Result<Option<String>, ApiError> {
    check_items(
        node,
        "embeds",
        embeds.len(),
        node.shared.limits.message_embeds_max,
    )?;
    if embeds.is_empty() {
        return Ok(None);
    }
    guildhall_proto::embeds::normalize(embeds)
        .map(|kept| Some(Value::Array(kept).to_string()))
        .map_err(|error| invalid_form(node, &error))
}

/// What an edit changes: each `None` leaves the field as it is;
/// `Some(None)` clears embeds or components.
#[derive(Default)]
pub(crate) struct Edit {
    pub(crate) content: Option<String>,
    /// Checked embeds as stored.
    pub(crate) embeds: Option<Option<String>>,
    /// Checked components as stored (`components::check` under the flags
    /// the message will have).
    pub(crate) components: Option<Option<String>>,
    /// The flags as they will stand ([`edited_flags`]).
    pub(crate) flags: Option<u64>,
    /// The attachments as they will stand, stored (`files::stored`).
    pub(crate) attachments: Option<Option<String>>,
}

/// Applies `edit` to `row` and stores it, if the edit changes anything.
/// What the edit leaves must still be a message ([`check_message_state`]:
/// 50006, or a components-v2 message that kept its content). A user's
/// message and a webhook's are edited alike.
pub(crate) async fn edit_row(
    node: &ApiState,
    row: &mut MessageRow,
    edit: Edit,
    mentioning: Option<&Mentioning>,
) -> Result<(), ApiError> {
    let flags_changed = edit.flags.is_some_and(|f| f as i64 != row.flags);
    if edit.content.is_none()
        && edit.embeds.is_none()
        && edit.components.is_none()
        && edit.attachments.is_none()
        && !flags_changed
    {
        return Ok(());
    }
    if let Some(flags) = edit.flags {
        row.flags = flags as i64;
    }
    let v2 = row.flags as u64 & FLAG_IS_COMPONENTS_V2 != 0;
    // Discord rebuilds the mentions from the new text, under the edit's
    // allowances: the content, or a components-v2 message's text displays.
    let text_changed = edit.content.is_some() || (v2 && edit.components.is_some());
    if let Some(content) = edit.content {
        row.content = content;
    }
    if let Some(embeds) = edit.embeds {
        row.embeds = embeds;
    }
    if let Some(components) = edit.components {
        row.components = components;
    }
    let before = row.attachments.clone();
    if let Some(attachments) = edit.attachments {
        row.attachments = attachments;
    }
    check_message_state(
        node,
        row.flags as u64,
        &row.content,
        row.embeds.is_some(),
        row.components.is_some(),
        row.attachments.is_some(),
    )?;
    check_stored_embed_refs(node, row)?;
    if text_changed && let Some(mentioning) = mentioning {
        // A reply's author stays mentioned if they were.
        let replied = row
            .mentions
            .as_deref()
            .and_then(|m| serde_json::from_str::<mentions::Stored>(m).ok())
            .and_then(|m| m.replied_user)
            .and_then(|id| i64::try_from(id.get()).ok());
        let text = mention_text(row);
        row.mentions = mentions_of(node, row.guild_id, &text, mentioning, replied).await?;
    }
    row.edited_ms = Some(now_ms() as i64);
    if !node.shared.store.update_message(row).await? {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    forget_dropped(node, before.as_deref(), row);
    Ok(())
}

/// Deletes the files an edit dropped (those of `before`, the stored
/// attachments, that `row` no longer names), once the row is written.
pub(crate) fn forget_dropped(node: &ApiState, before: Option<&str>, row: &MessageRow) {
    if before == row.attachments.as_deref() {
        return;
    }
    let kept = crate::files::read_stored(row.attachments.as_deref());
    let dropped: Vec<_> = crate::files::read_stored(before)
        .into_iter()
        .filter(|old| kept.iter().all(|k| k.id != old.id))
        .collect();
    node.files.forget_these(row.channel_id, &dropped);
}

/// Refuses a message whose embeds show `attachment://` names it has no
/// file of (50035 at the embed's field).
pub(crate) fn check_stored_embed_refs(node: &ApiState, row: &MessageRow) -> Result<(), ApiError> {
    let Some(embeds) = row.embeds.as_deref() else {
        return Ok(());
    };
    let embeds: Vec<Value> = serde_json::from_str(embeds).unwrap_or_default();
    let attachments = crate::files::read_stored(row.attachments.as_deref());
    let names: Vec<&str> = attachments.iter().map(|a| a.filename.as_str()).collect();
    crate::files::check_embed_refs(&embeds, &names).map_err(|error| invalid_form(node, &error))
}

// ----- flags and components, as every message route takes them --------------

/// Flags a new message may set: SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS
/// and IS_COMPONENTS_V2. Discord also allows IS_VOICE_MESSAGE, which is
/// an uploaded audio attachment with its duration and waveform, which
/// this server does not keep, so it is refused rather than stored on a
/// message without them.
pub(crate) const CREATE_FLAGS: u64 =
    FLAG_SUPPRESS_EMBEDS | FLAG_SUPPRESS_NOTIFICATIONS | FLAG_IS_COMPONENTS_V2;

/// A body's `flags`: an integer within `allowed`, else 50035 on `flags`
/// with `refusal` as its message.
pub(crate) fn flags_field(
    node: &ApiState,
    value: Option<&Value>,
    allowed: u64,
    refusal: &str,
) -> Result<Option<u64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(flags) if flags & !allowed == 0 => Ok(Some(flags)),
            _ => {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                Err(ApiError::Field(
                    "flags",
                    "MESSAGE_FLAGS_INVALID",
                    refusal.to_owned(),
                ))
            }
        },
    }
}

/// The flags an edit leaves: SUPPRESS_EMBEDS as the edit says,
/// IS_COMPONENTS_V2 set if either has it (it cannot be unset), every
/// other bit as stored. Libraries send the message's whole flags back
/// with one bit changed (discord.py's `suppress`), so the other bits of
/// an edit are read as unchanged rather than refused.
pub(crate) fn edited_flags(stored: u64, given: Option<u64>) -> u64 {
    match given {
        None => stored,
        Some(given) => {
            (stored & !FLAG_SUPPRESS_EMBEDS)
                | (given & FLAG_SUPPRESS_EMBEDS)
                | (given & FLAG_IS_COMPONENTS_V2)
        }
    }
}

/// The component bounds of the limits.
pub(crate) fn component_bounds(node: &ApiState) -> components::Bounds {
    let limits = &node.shared.limits;
    components::Bounds {
        components_total_max: limits.message_components_max,
        custom_id_chars_max: limits.component_custom_id_chars_max,
        modal_components_max: limits.interaction_modal_components_max,
        ..components::Bounds::default()
    }
}

/// A body's `components` (at `root` in the body), checked for a message
/// with `flags` (`components::check`): the tree as stored, `None` when it
/// is empty.
pub(crate) fn checked_components(
    node: &ApiState,
    raw: &Value,
    flags: u64,
    root: &[&str],
) -> Result<Option<Vec<Value>>, ApiError> {
    let kept = components::check(
        raw,
        components::Surface::of_flags(flags),
        &component_bounds(node),
        root,
    )
    .map_err(|body| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Invalid(body)
    })?;
    Ok((!kept.is_empty()).then_some(kept))
}

/// A channel message's `components` from `author` (a create's or an
/// edit's), checked as [`checked_components`] does. Discord refuses
/// components from user accounts (50035); an empty list is none, from
/// anyone.
fn authored_components(
    node: &ApiState,
    author: &UserRow,
    raw: &Value,
    flags: u64,
) -> Result<Option<Vec<Value>>, ApiError> {
    if !author.bot && raw.as_array().is_some_and(|items| !items.is_empty()) {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "components",
            "COMPONENT_USER_ACCOUNT",
            "Only bots may send components.".into(),
        ));
    }
    checked_components(node, raw, flags, &["components"])
}

/// What a message must hold as it will stand. A components-v2 message is
/// its components only (content or embeds are Discord's 50035
/// MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2 on the field) and
/// has some (50006); any other has content, an embed or a component.
pub(crate) fn check_message_state(
    node: &ApiState,
    flags: u64,
    content: &str,
    has_embeds: bool,
    has_components: bool,
    has_files: bool,
) -> Result<(), ApiError> {
    if flags & FLAG_IS_COMPONENTS_V2 == 0 {
        return check_content(node, content, has_embeds || has_components || has_files);
    }
    let legacy = if !content.is_empty() {
        Some("content")
    } else if has_embeds {
        Some("embeds")
    } else {
        None
    };
    if let Some(field) = legacy {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            field,
            "MESSAGE_CANNOT_USE_LEGACY_FIELDS_WITH_COMPONENTS_V2",
            format!("The '{field}' field cannot be used when using MessageFlags.IS_COMPONENTS_V2"),
        ));
    }
    if !has_components {
        return Err(ApiError::Code(ErrorCode::EmptyMessage));
    }
    Ok(())
}

/// The text a stored message's mentions are read from: its content, or a
/// components-v2 message's text displays.
pub(crate) fn mention_text(row: &MessageRow) -> String {
    if row.flags as u64 & FLAG_IS_COMPONENTS_V2 == 0 {
        return row.content.clone();
    }
    row.components
        .as_deref()
        .and_then(|c| serde_json::from_str::<Vec<Value>>(c).ok())
        .map(|c| components::text_of(&c))
        .unwrap_or_default()
}

pub(crate) fn check_content(
    node: &ApiState,
    content: &str,
    has_embeds: bool,
) -> Result<(), ApiError> {
    if content.trim().is_empty() && !has_embeds {
        return Err(ApiError::Code(ErrorCode::EmptyMessage));
    }
    check_chars(
        node,
        "content",
        content,
        0,
        node.shared.limits.message_content_chars_max,
    )
}

pub(crate) fn wire_message(
    files: &crate::files::Files,
    row: &MessageRow,
    author: &UserRow,
    member: Option<guildhall_proto::model::Member>,
) -> Message {
    // A webhook's message shows the webhook as its author, under the name
    // and avatar it was posted with (`author_id` is the creator, kept only
    // for the key to users).
    // An interaction's response carries the application's id as
    // `webhook_id`, but its author is the application's bot (`author_id`).
    let (author, member) = match row.webhook_id.filter(|_| row.interaction_id.is_none()) {
        Some(webhook_id) => (
            guildhall_proto::model::User::webhook(
                sf(webhook_id),
                row.author_name.clone().unwrap_or_default(),
                row.author_avatar.clone(),
            ),
            None,
        ),
        None => (wire_user(author), member),
    };
    wire_row(files, row, author, member)
}

/// The message of `row` with `author` (a user's, or a webhook's) and
/// `member`.
pub(crate) fn wire_row(
    files: &crate::files::Files,
    row: &MessageRow,
    author: guildhall_proto::model::User,
    member: Option<guildhall_proto::model::Member>,
) -> Message {
    let mentioned: mentions::Stored = row
        .mentions
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or_default();
    let attachments = crate::files::shown(files, row.channel_id, row.attachments.as_deref());
    let mut embeds: Vec<Value> = row
        .embeds
        .as_deref()
        .and_then(|e| serde_json::from_str(e).ok())
        .unwrap_or_default();
    if !attachments.is_empty() {
        crate::files::resolve_embed_refs(&mut embeds, &attachments);
    }
    Message {
        id: sf(row.id),
        channel_id: sf(row.channel_id),
        guild_id: row.guild_id.map(sf),
        author,
        member,
        content: row.content.clone(),
        timestamp: format_unix_ms(sf(row.id).unix_ms()),
        edited_timestamp: row.edited_ms.map(|ms| format_unix_ms(ms as u64)),
        tts: row.tts,
        mention_everyone: mentioned.everyone,
        mentions: mentioned.users,
        mention_roles: mentioned.roles,
        attachments,
        embeds,
        // A pin is a fact about the channel, not the row: readers that
        // render a stored message set it from the store (`pinned_in`).
        pinned: false,
        kind: u8::try_from(row.kind).unwrap_or(0),
        flags: row.flags as u64,
        components: row
            .components
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default(),
        nonce: None,
        webhook_id: row.webhook_id.map(sf),
        application_id: row.application_id.map(sf),
        interaction_metadata: row
            .interaction_metadata
            .as_deref()
            .and_then(|m| serde_json::from_str(m).ok()),
        message_reference: match (
            row.reference_kind,
            row.reference_message_id,
            row.reference_channel_id,
        ) {
            (Some(kind), Some(message_id), Some(channel_id)) => {
                Some(guildhall_proto::model::MessageReference {
                    kind: u8::try_from(kind).unwrap_or(replies::KIND_DEFAULT),
                    message_id: sf(message_id),
                    channel_id: sf(channel_id),
                    guild_id: row.reference_guild_id.map(sf),
                })
            }
            _ => None,
        },
        // Filled in by `with_referenced` where the referenced message is
        // read; absent means "not fetched", as Discord's docs define it.
        referenced_message: None,
        // Reactions are rows of their own and `me` depends on the reader:
        // readers that render for one caller set them (`reactions_in`).
        reactions: None,
    }
}

/// The users seen so far while building a response, so a page of
/// messages by a few authors reads each author once.
type Authors = HashMap<i64, UserRow>;

/// The user `id` from `authors`, read from the store the first time.
async fn author_of<'a>(
    node: &ApiState,
    authors: &'a mut Authors,
    id: i64,
) -> Result<Option<&'a UserRow>, ApiError> {
    if !authors.contains_key(&id)
        && let Some(user) = node.shared.store.user(id).await?
    {
        authors.insert(user.id, user);
    }
    Ok(authors.get(&id))
}

/// `message` (the wire form of `row`) with its `referenced_message` as the
/// referenced message is now: the message object, or `null` once it was
/// deleted. Only a reply (reference type DEFAULT) has one. The referenced
/// message is built without its own `referenced_message`, so the object is
/// one level deep as Discord sends it. `page` holds rows already read (a
/// history page), looked at before the store; `page_pins`, when given, are
/// the pinned ids among them ([`pinned_in`] over the page), else the
/// referenced message's `pinned` is read from the store.
pub(crate) async fn with_referenced(
    node: &ApiState,
    row: &MessageRow,
    mut message: Message,
    page: &[MessageRow],
    page_pins: Option<&HashSet<i64>>,
    authors: &mut Authors,
) -> Result<Message, ApiError> {
    let (Some(kind), Some(channel_id), Some(message_id)) = (
        row.reference_kind,
        row.reference_channel_id,
        row.reference_message_id,
    ) else {
        return Ok(message);
    };
    // Discord returns `referenced_message` for replies only (a pin
    // notice's reference names the pinned message without it).
    if kind != i64::from(replies::KIND_DEFAULT)
        || row.kind != i64::from(replies::MESSAGE_TYPE_REPLY)
    {
        return Ok(message);
    }
    let (target, known_pins) = match page
        .iter()
        .find(|m| m.id == message_id && m.channel_id == channel_id)
    {
        Some(target) => (Some(target.clone()), page_pins),
        None => (
            node.shared.store.message(channel_id, message_id).await?,
            None,
        ),
    };
    let referenced = match target {
        // Ephemeral messages are never referenced (creation refuses
        // them); one found here is shown as gone rather than leaked.
        Some(target) if target.visible_to.is_none() => {
            let pinned = match known_pins {
                Some(pins) => pins.contains(&target.id),
                None => is_pinned(node, &target).await?,
            };
            author_of(node, authors, target.author_id)
                .await?
                .map(|author| {
                    let mut referenced = wire_message(&node.files, &target, author, None);
                    referenced.pinned = pinned;
                    Box::new(referenced)
                })
        }
        _ => None,
    };
    message.referenced_message = Some(referenced);
    Ok(message)
}

/// The pinned ids among the messages of `channel_id` with ids in
/// `first_id..=last_id` (a page's range): one read of the channel's pins,
/// which are bounded by `pins_per_channel_max`.
async fn pinned_in(
    node: &ApiState,
    channel_id: i64,
    first_id: i64,
    last_id: i64,
) -> Result<HashSet<i64>, ApiError> {
    Ok(node
        .shared
        .store
        .pinned_between(channel_id, first_id, last_id)
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect())
}

/// Whether `row` is pinned now (the `pinned` of a message read alone).
pub(crate) async fn is_pinned(node: &ApiState, row: &MessageRow) -> Result<bool, ApiError> {
    Ok(pinned_in(node, row.channel_id, row.id, row.id)
        .await?
        .contains(&row.id))
}

/// The reactions of the messages `ids` of `channel_id` (a page, bounded by
/// its own limit) as `viewer` sees them, by message id: one read of the
/// store, at most `reactions_per_message_max` emoji a message. A message
/// without reactions has no entry, so its `reactions` stays absent, as
/// Discord omits it. Nothing is a super reaction here: burst counts are 0.
async fn reactions_in(
    node: &ApiState,
    channel_id: i64,
    ids: &[i64],
    viewer: i64,
) -> Result<HashMap<i64, Vec<Reaction>>, ApiError> {
    let per_message_max = node.shared.limits.reactions_per_message_max as i64;
    let mut out: HashMap<i64, Vec<Reaction>> = HashMap::new();
    for counted in node
        .shared
        .store
        .message_reactions(channel_id, ids, viewer, per_message_max)
        .await?
    {
        let count = u64::try_from(counted.count).unwrap_or(0);
        out.entry(counted.message_id).or_default().push(Reaction {
            count,
            count_details: ReactionCountDetails {
                burst: 0,
                normal: count,
            },
            me: counted.me,
            me_burst: false,
            emoji: partial_emoji(&counted.emoji),
            burst_colors: vec![],
        });
    }
    Ok(out)
}

/// The partial emoji of a stored reaction key: `name:id` is a custom emoji
/// (`emoji_of` stores no other key with a colon), anything else a unicode
/// emoji named by itself.
fn partial_emoji(key: &str) -> PartialEmoji {
    match key
        .split_once(':')
        .and_then(|(name, id)| Some((name, Snowflake::new(id.parse().ok()?)?)))
    {
        Some((name, id)) => PartialEmoji {
            id: Some(id),
            name: Some(name.to_owned()),
        },
        None => PartialEmoji {
            id: None,
            name: Some(key.to_owned()),
        },
    }
}

/// A refused form field (embeds, a reference, allowed mentions): Discord's
/// 50035 nested at the field, counted as a bad request.
pub(crate) fn invalid_form(
    node: &ApiState,
    error: &guildhall_proto::error::FieldError,
) -> ApiError {
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    ApiError::Invalid(error.body())
}

pub(crate) async fn publish_message(
    node: &ApiState,
    name: &str,
    guild_id: i64,
    message: &Message,
    author_id: i64,
) {
    let (Ok(data), Ok(blanked)) = (to_raw_value(message), to_raw_value(&message.blanked())) else {
        return;
    };
    // Users mentioned in the content see it even without MESSAGE_CONTENT.
    let mut content_exempt: Vec<i64> = mentions::in_content(&message.content)
        .users
        .into_iter()
        .filter_map(|id| i64::try_from(id).ok())
        .collect();
    content_exempt.push(author_id);
    publish(
        node,
        guild_id,
        Outgoing {
            publish_id: 0,
            name: name.to_owned(),
            required_intent: intents::GUILD_MESSAGES,
            data,
            blanked: Some(blanked),
            content_exempt,
            // The owner shows it only to members who may view the channel.
            channel_id: message.channel_id.get() as i64,
            channel_permissions: 0,
        },
    )
    .await;
}

/// Hands an event to the guild's owner for fanout and waits for the
/// owner's confirmation; an owner that does not confirm (its process died
/// or paused since the commit) leaves the event held for redelivery to the
/// guild's next owner (`GuildDirectory::publish`). What it reports is
/// durable already, so a refused hand-off (unknown guild, outbox full)
/// loses no data, only the live dispatch; it is counted.
async fn publish(node: &ApiState, guild_id: i64, event: Outgoing) {
    if node.guilds.publish(guild_id, event).await.is_err() {
        node.counters
            .fanout_failed_total
            .fetch_add(1, Ordering::Relaxed);
    }
}

/// Encodes `data` once as dispatch `name` and publishes it to the guild's
/// members who may view `channel_id` (every event published here belongs
/// to a channel: reactions, typing, pins, deletes, webhooks).
pub(crate) async fn publish_plain(
    node: &ApiState,
    guild_id: i64,
    channel_id: i64,
    name: &str,
    required_intent: u64,
    data: &impl serde::Serialize,
) {
    publish_holding(node, guild_id, channel_id, 0, name, required_intent, data).await;
}

/// [`publish_plain`] to the members who also hold `channel_permissions`
/// in the channel (the invite events go to MANAGE_CHANNELS only).
async fn publish_holding(
    node: &ApiState,
    guild_id: i64,
    channel_id: i64,
    channel_permissions: u64,
    name: &str,
    required_intent: u64,
    data: &impl serde::Serialize,
) {
    if let Ok(data) = to_raw_value(data) {
        publish(
            node,
            guild_id,
            Outgoing {
                publish_id: 0,
                name: name.to_owned(),
                required_intent,
                data,
                blanked: None,
                content_exempt: vec![],
                channel_id,
                channel_permissions,
            },
        )
        .await;
    }
}

/// The bounds a message's attachments are planned under.
pub(crate) fn plan_limits(node: &ApiState) -> crate::files::PlanLimits {
    let limits = &node.shared.limits;
    crate::files::PlanLimits {
        attachments_max: limits.message_attachments_max,
        filename_bytes_max: limits.attachment_filename_bytes_max,
        text_chars_max: limits.attachment_text_chars_max,
    }
}

async fn create_message(
    State(node): State<AppState>,
    Caller(author): Caller,
    Path(id): Path<String>,
    form: crate::files::MessageBody<NewMessage>,
) -> ApiResult {
    let channel = node
        .shared
        .store
        .channel(parse_id(&id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
    // Categories hold channels, forum and media channels hold posts:
    // none holds messages of its own.
    if matches!(channel.kind, 4 | 15 | 16) {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Code(ErrorCode::NotTextChannel));
    }
    let checked = check_new_message(
        &node,
        &author,
        form.body,
        form.attachments.as_ref(),
        &form.uploads,
    )?;
    let message = post_message(&node, &author, &channel, checked, &form.uploads, None).await?;
    ok(&message)
}

/// A new message's body as checked by [`check_new_message`]: what
/// [`post_message`] stores and announces.
struct CheckedMessage {
    content: String,
    tts: bool,
    nonce: Option<Value>,
    flags: u64,
    embeds: Option<String>,
    /// Embeds as sent (their `attachment://` names are resolved when
    /// stored).
    reference: Option<replies::ReferenceRequest>,
    allowed: mentions::Allowed,
    components: Option<String>,
    planned: Vec<crate::files::Planned>,
    /// The text mentions are read from (a components-v2 message's text
    /// displays).
    text: String,
}

/// Checks a new message's body against Discord's rules and bounds before
/// anything is asked or stored: flags, embeds, the reply, allowed
/// mentions, components, files (`attachments` matched to `uploads`), the
/// content rules and the nonce.
fn check_new_message(
    node: &ApiState,
    author: &UserRow,
    body: NewMessage,
    attachments: Option<&Value>,
    uploads: &[crate::files::Upload],
) -> Result<CheckedMessage, ApiError> {
    let flags = flags_field(
        node,
        body.flags.as_ref(),
        CREATE_FLAGS,
        "Only SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2 can be set.",
    )?
    .unwrap_or(0);
    let embeds = checked_embeds(node, &body.embeds)?;
    let reference = replies::parse(body.message_reference.as_ref())
        .map_err(|error| invalid_form(node, &error))?;
    let allowed = allowed_mentions(
        node,
        body.allowed_mentions.as_ref(),
        mentions::Context::Message,
    )?;
    let components = authored_components(node, author, &Value::Array(body.components), flags)?;
    let planned = crate::files::plan(attachments, uploads, &[], plan_limits(node))
        .map_err(|error| invalid_form(node, &error))?;
    crate::files::check_embed_refs(&body.embeds, &crate::files::planned_names(&planned))
        .map_err(|error| invalid_form(node, &error))?;
    check_message_state(
        node,
        flags,
        &body.content,
        embeds.is_some(),
        components.is_some(),
        !planned.is_empty(),
    )?;
    // A components-v2 message mentions whom its text displays mention.
    let text = match &components {
        Some(kept) if flags & FLAG_IS_COMPONENTS_V2 != 0 => components::text_of(kept),
        _ => body.content.clone(),
    };
    let components = components.map(|kept| Value::Array(kept).to_string());
    match &body.nonce {
        None | Some(Value::Null | Value::Number(_)) => {}
        Some(Value::String(nonce)) => check_chars(
            node,
            "nonce",
            nonce,
            0,
            node.shared.limits.message_nonce_chars_max,
        )?,
        Some(_) => {
            node.counters
                .bad_requests_total
                .fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::Field(
                "nonce",
                "BASE_TYPE_BAD",
                "Must be an integer or a string.".into(),
            ));
        }
    }
    Ok(CheckedMessage {
        content: body.content,
        tts: body.tts,
        nonce: body.nonce,
        flags,
        embeds,
        reference,
        allowed,
        components,
        planned,
        text,
    })
}

/// Posts a checked message in `channel` as `author`: authorized there
/// (SEND_MESSAGES, with READ_MESSAGE_HISTORY for a reply and ATTACH_FILES
/// for files; slowmode applies), unless `granted` (a forum post's first
/// message, authorized in its forum) carries the grant and the id to use;
/// its files stored, then the row, then MESSAGE_CREATE.
async fn post_message(
    node: &ApiState,
    author: &UserRow,
    channel: &ChannelRow,
    checked: CheckedMessage,
    uploads: &[crate::files::Upload],
    granted: Option<(i64, guildhall_proto::guilds::SendGrant)>,
) -> Result<Message, ApiError> {
    let CheckedMessage {
        content,
        tts,
        nonce,
        flags,
        embeds,
        reference,
        allowed,
        components,
        planned,
        text,
    } = checked;
    // Who may post decides who hears of it: the guild's owner fans out a
    // guild message; a direct message goes to both participants' sessions.
    enum Audience {
        Guild(i64),
        Dm(Vec<i64>),
    }
    // Discord: replying needs READ_MESSAGE_HISTORY as well, and a file
    // ATTACH_FILES.
    let mut need = perm::SEND_MESSAGES;
    if reference.is_some() {
        need |= perm::READ_MESSAGE_HISTORY;
    }
    if !planned.is_empty() {
        need |= perm::ATTACH_FILES;
    }
    let (id, granted) = granted.unzip();
    let (audience, member, rights) = match (channel.guild_id, granted) {
        (Some(guild_id), Some(grant)) => (
            Audience::Guild(guild_id),
            Some(grant.member),
            MentionRights::Known(grant.permissions),
        ),
        (Some(guild_id), None) => {
            let grant = node
                .guilds
                .authorize_send(guild_id, author.id, channel.id, need)
                .await?;
            (
                Audience::Guild(guild_id),
                Some(grant.member),
                MentionRights::Known(grant.permissions),
            )
        }
        (None, _) => (
            Audience::Dm(dm_of(node, author, channel).await?),
            None,
            MentionRights::Dm,
        ),
    };
    let target = match reference {
        Some(request) => replied_to(node, channel, &request).await?,
        None => None,
    };
    // A webhook's message has no user to ping (its author_id is the
    // webhook's creator).
    let replied_author = target
        .as_ref()
        .filter(|t| t.webhook_id.is_none())
        .map(|t| t.author_id);
    let mentioning = Mentioning {
        allowed,
        rights,
        actor_id: author.id,
    };
    let mentioned = mentions_of(node, channel.guild_id, &text, &mentioning, replied_author).await?;
    // The files are durable before the row that names them is written.
    let attachments = crate::files::store_planned(node, channel.id, planned, uploads).await?;
    let row = MessageRow {
        id: id.unwrap_or_else(|| node.shared.next_id().get() as i64),
        channel_id: channel.id,
        guild_id: channel.guild_id,
        author_id: author.id,
        content,
        tts,
        edited_ms: None,
        webhook_id: None,
        author_name: None,
        author_avatar: None,
        // A reference that resolved to nothing (fail_if_not_exists false)
        // is a plain message, as Discord posts it.
        kind: if target.is_some() {
            i64::from(replies::MESSAGE_TYPE_REPLY)
        } else {
            0
        },
        // Within CREATE_FLAGS: a few low bits.
        flags: flags as i64,
        components,
        application_id: None,
        interaction_id: None,
        interaction_metadata: None,
        embeds,
        visible_to: None,
        reference_kind: target.as_ref().map(|_| i64::from(replies::KIND_DEFAULT)),
        reference_message_id: target.as_ref().map(|t| t.id),
        reference_channel_id: target.as_ref().map(|t| t.channel_id),
        reference_guild_id: target.as_ref().and_then(|t| t.guild_id),
        mentions: mentioned,
        attachments: crate::files::stored(&attachments),
    };
    store_message(node, &row).await?;
    if guildhall_store::THREAD_KINDS.contains(&channel.kind) {
        // Counted after the message is durable; a crash between leaves
        // the count one short, never the message lost.
        node.shared.store.count_thread_message(channel.id).await?;
    }
    let mut message = wire_message(&node.files, &row, author, member);
    if let Some(target) = target {
        // The target as just read, not read again: the reply shows what
        // was replied to.
        let mut authors = Authors::new();
        message = with_referenced(node, &row, message, &[target], None, &mut authors).await?;
    }
    message.nonce = nonce;
    match audience {
        Audience::Guild(guild_id) => {
            publish_message(node, "MESSAGE_CREATE", guild_id, &message, author.id).await
        }
        Audience::Dm(members) => node.gateways().to_users_in(
            None,
            members,
            intents::DIRECT_MESSAGES,
            "MESSAGE_CREATE",
            &message,
        ),
    }
    Ok(message)
}

/// The message a reply in `channel` refers to, checked against what
/// `request` names: a given channel or guild must be the reply's own
/// (replies stay in their channel), and the message must exist there and
/// be visible to everyone (an ephemeral message is nobody's to reply to).
/// An unknown message is refused unless `fail_if_not_exists` is false,
/// then `None`: the message is posted as a plain one. Only reads.
async fn replied_to(
    node: &ApiState,
    channel: &ChannelRow,
    request: &replies::ReferenceRequest,
) -> Result<Option<MessageRow>, ApiError> {
    let same = |given: Option<guildhall_proto::Snowflake>, own: Option<i64>| {
        given.is_none_or(|given| i64::try_from(given.get()).ok() == own)
    };
    if !same(request.channel_id, Some(channel.id)) || !same(request.guild_id, channel.guild_id) {
        return Err(invalid_form(node, &replies::other_channel()));
    }
    // An id beyond i64 cannot be a stored message.
    let target = match i64::try_from(request.message_id.get()) {
        Ok(id) => node.shared.store.message(channel.id, id).await?,
        Err(_) => None,
    }
    .filter(|target| target.visible_to.is_none());
    if target.is_none() && request.fail_if_not_exists {
        return Err(invalid_form(node, &replies::unknown_message()));
    }
    Ok(target)
}

/// Stores a message durably (group commit) and counts it: every message,
/// a user's or a webhook's, is stored through here before it is announced.
pub(crate) async fn store_message(node: &ApiState, row: &MessageRow) -> Result<(), ApiError> {
    node.shared.store.insert_message(row).await?;
    node.counters.messages_total.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[derive(Deserialize)]
struct HistoryQuery {
    limit: Option<i64>,
    before: Option<String>,
}

/// A channel whose messages `caller` may read: a guild channel with
/// VIEW_CHANNEL and READ_MESSAGE_HISTORY, or a DM the caller is in (50001
/// for anyone else).
async fn readable_channel(
    node: &ApiState,
    caller: &UserRow,
    channel_id: &str,
) -> Result<ChannelRow, ApiError> {
    let need = perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY;
    Ok(channel_audience(node, caller, channel_id, need).await?.0)
}

async fn list_messages(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> ApiResult {
    let channel = readable_channel(&node, &caller, &id).await?;
    let limit = query
        .limit
        .unwrap_or(50)
        .clamp(1, node.shared.limits.messages_per_page_max as i64);
    let before = query.before.as_deref().map(parse_id).transpose()?;
    let rows = node
        .shared
        .store
        .messages(channel.id, before, limit)
        .await?;
    // The page is newest first: its ids span last..=first.
    let pins = match (rows.last(), rows.first()) {
        (Some(oldest), Some(newest)) => pinned_in(&node, channel.id, oldest.id, newest.id).await?,
        _ => HashSet::new(),
    };
    let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
    let mut reactions = reactions_in(&node, channel.id, &ids, caller.id).await?;
    let mut authors = Authors::new();
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(mut message) = author_of(&node, &mut authors, row.author_id)
            .await?
            .map(|author| wire_message(&node.files, row, author, None))
        else {
            continue;
        };
        message.pinned = pins.contains(&row.id);
        message.reactions = reactions.remove(&row.id);
        // A reply to a message on the same page is resolved from the page.
        out.push(with_referenced(&node, row, message, &rows, Some(&pins), &mut authors).await?);
    }
    ok(&out)
}

/// 50083 for a message action in an archived thread: its messages are not
/// edited or reacted to until a message or an edit unarchives it (only
/// deletes pass, as the threads topic documents; the owner refuses the
/// other actions that need a permission of their own).
fn unarchived(node: &ApiState, channel: &ChannelRow) -> Result<(), ApiError> {
    if guildhall_store::THREAD_KINDS.contains(&channel.kind) && channel.archived {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Code(ErrorCode::ThreadArchived));
    }
    Ok(())
}

async fn message_of(
    node: &ApiState,
    caller: &UserRow,
    channel_id: &str,
    message_id: &str,
    need: u64,
) -> Result<(ChannelRow, ChannelAudience, MessageRow), ApiError> {
    let (channel, audience) = channel_audience(node, caller, channel_id, need).await?;
    let row = visible_message(node, caller, &channel, message_id).await?;
    // An ephemeral message is read by its one reader and acted on by
    // nobody through these routes (a reaction would announce it to the
    // whole guild): unknown, as Discord answers.
    if row.visible_to.is_some() {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    Ok((channel, audience, row))
}

/// The message `message_id` of `channel` as `caller` may see it (the
/// caller's access to the channel already checked).
async fn visible_message(
    node: &ApiState,
    caller: &UserRow,
    channel: &ChannelRow,
    message_id: &str,
) -> Result<MessageRow, ApiError> {
    node.shared
        .store
        .message(channel.id, parse_id(message_id)?)
        .await?
        // An ephemeral message exists for its one reader only.
        .filter(|row| row.visible_to.is_none_or(|reader| reader == caller.id))
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))
}

/// `GET /channels/{id}/messages/{message}`, in a guild channel or a DM
/// (whose members read it without permissions, as its history).
async fn get_message(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
) -> ApiResult {
    let channel = readable_channel(&node, &caller, &channel).await?;
    let row = visible_message(&node, &caller, &channel, &message).await?;
    let author = node
        .shared
        .store
        .user(row.author_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let mut message = wire_message(&node.files, &row, &author, None);
    message.pinned = is_pinned(&node, &row).await?;
    message.reactions = reactions_in(&node, row.channel_id, &[row.id], caller.id)
        .await?
        .remove(&row.id);
    ok(&with_referenced(&node, &row, message, &[], None, &mut Authors::new()).await?)
}

#[derive(Deserialize)]
struct EditMessage {
    content: Option<String>,
    /// How the new content's mentions are read (`guildhall_proto::mentions`).
    allowed_mentions: Option<Value>,
    /// Replaces the embeds when present (`null` or `[]` clears them).
    #[serde(default, deserialize_with = "present")]
    embeds: Option<Option<Vec<Value>>>,
    /// Replaces the components when present (`null` or `[]` clears them).
    #[serde(default, deserialize_with = "present")]
    components: Option<Option<Value>>,
    /// SUPPRESS_EMBEDS (set or unset) and IS_COMPONENTS_V2 (set only);
    /// other bits read as unchanged ([`edited_flags`]).
    flags: Option<Value>,
}

/// A field that may be absent (outer `None`) or `null` (inner `None`).
fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

async fn edit_message(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
    form: crate::files::MessageBody<EditMessage>,
) -> ApiResult {
    let body = form.body;
    // New files need ATTACH_FILES, as on a new message.
    let need = if form.uploads.is_empty() {
        perm::VIEW_CHANNEL
    } else {
        perm::VIEW_CHANNEL | perm::ATTACH_FILES
    };
    let (channel_row, audience, mut row) =
        message_of(&node, &caller, &channel, &message, need).await?;
    unarchived(&node, &channel_row)?;
    // A webhook's message is stored with its creator as `author_id`, but
    // only the webhook edits it (through its token).
    if row.author_id != caller.id || row.webhook_id.is_some() {
        return Err(ApiError::Code(ErrorCode::CannotEditOthersMessage));
    }
    // A pin notice is its pinner's, but nobody's to edit (Discord's 50021).
    if row.kind == MESSAGE_TYPE_CHANNEL_PINNED_MESSAGE {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Invalid(ErrorBody {
            code: SYSTEM_MESSAGE_CODE,
            message: "Cannot execute action on a system message".into(),
            errors: None,
        }));
    }
    let embeds = match body.embeds {
        Some(embeds) => Some(checked_embeds(&node, &embeds.unwrap_or_default())?),
        None => None,
    };
    let given = flags_field(
        &node,
        body.flags.as_ref(),
        u64::MAX >> 1,
        "Flags are a non-negative integer.",
    )?;
    let flags = edited_flags(row.flags as u64, given);
    let components = match body.components {
        None => None,
        Some(None) => Some(None),
        Some(Some(raw)) => Some(
            authored_components(&node, &caller, &raw, flags)?
                .map(|kept| Value::Array(kept).to_string()),
        ),
    };
    let mentioning = Mentioning {
        allowed: allowed_mentions(
            &node,
            body.allowed_mentions.as_ref(),
            mentions::Context::Message,
        )?,
        rights: if row.guild_id.is_some() {
            MentionRights::Ask {
                user_id: caller.id,
                channel_id: row.channel_id,
            }
        } else {
            MentionRights::Dm
        },
        actor_id: caller.id,
    };
    let attachments =
        crate::files::edited(&node, &row, form.attachments.as_ref(), &form.uploads).await?;
    edit_row(
        &node,
        &mut row,
        Edit {
            content: body.content,
            embeds,
            components,
            flags: Some(flags),
            attachments,
        },
        Some(&mentioning),
    )
    .await?;
    let mut message = wire_message(&node.files, &row, &caller, None);
    // An edit leaves a pin as it was, and the update says so.
    message.pinned = is_pinned(&node, &row).await?;
    // An edited reply still shows what it replies to.
    let message = with_referenced(&node, &row, message, &[], None, &mut Authors::new()).await?;
    audience
        .announce_message(&node, "MESSAGE_UPDATE", &message, caller.id)
        .await;
    ok(&message)
}

async fn delete_message(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
) -> ApiResult {
    let (channel_row, audience, row) =
        message_of(&node, &caller, &channel, &message, perm::VIEW_CHANNEL).await?;
    // A webhook's message is nobody's own (its `author_id` is the creator).
    if row.author_id != caller.id || row.webhook_id.is_some() {
        // Another's message takes MANAGE_MESSAGES, which nobody holds in
        // a DM (50003 there, as Discord answers).
        let guild_id = audience.guild_only()?;
        authorize(
            &node,
            caller.id,
            &channel_row,
            guild_id,
            perm::MANAGE_MESSAGES,
        )
        .await?;
    }
    node.shared
        .store
        .delete_message(row.channel_id, row.id)
        .await?;
    node.files
        .forget(row.channel_id, row.attachments.as_deref());
    match &audience {
        ChannelAudience::Guild { guild_id, .. } => {
            publish_message_delete(&node, *guild_id, row.channel_id, row.id).await;
            // Discord logs a moderator's delete of another's message.
            if row.author_id != caller.id && row.webhook_id.is_none() {
                let options = json!({"channel_id": row.channel_id.to_string(), "count": "1"});
                audit(
                    &node,
                    *guild_id,
                    caller.id,
                    guildhall_proto::audit::MESSAGE_DELETE,
                    Some(row.author_id),
                    vec![],
                    Some(options),
                )
                .await;
            }
        }
        ChannelAudience::Dm(members) => {
            let data = json!({"id": row.id.to_string(), "channel_id": row.channel_id.to_string()});
            node.gateways().to_users_in(
                None,
                members.clone(),
                intents::DIRECT_MESSAGES,
                "MESSAGE_DELETE",
                &data,
            );
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// MESSAGE_DELETE of a guild message, to the guild's sessions (a user's
/// delete and a webhook's alike).
pub(crate) async fn publish_message_delete(
    node: &ApiState,
    guild_id: i64,
    channel_id: i64,
    message_id: i64,
) {
    let data = json!({"id": message_id.to_string(), "channel_id": channel_id.to_string(), "guild_id": guild_id.to_string()});
    publish_plain(
        node,
        guild_id,
        channel_id,
        "MESSAGE_DELETE",
        intents::GUILD_MESSAGES,
        &data,
    )
    .await;
}

async fn typing(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    let grant = authorize(&node, caller.id, &channel, guild_id, perm::SEND_MESSAGES).await?;
    let mut member = serde_json::to_value(grant.member).unwrap_or_default();
    member["user"] = serde_json::to_value(wire_user(&caller)).unwrap_or_default();
    let data = json!({
        "channel_id": channel.id.to_string(), "guild_id": guild_id.to_string(),
        "user_id": caller.id.to_string(), "timestamp": now_ms() / 1000, "member": member,
    });
    publish_plain(
        &node,
        guild_id,
        channel.id,
        "TYPING_START",
        intents::GUILD_MESSAGE_TYPING,
        &data,
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- changes: channels, roles, members -----------------------------------------

fn changed(result: Changed) -> ApiResult {
    match result {
        Changed::Channel(channel) => ok(&channel),
        Changed::Role(role) => ok(&role),
        Changed::Roles(roles) => ok(&roles),
        Changed::Member(member) => ok(&member),
        Changed::Guild(guild) => ok(&guild),
        Changed::Banned { banned, failed } => {
            if banned.is_empty() {
                return Err(ApiError::Code(ErrorCode::FailedToBanUsers));
            }
            let ids = |list: Vec<i64>| -> Vec<String> { list.iter().map(i64::to_string).collect() };
            ok(&json!({"banned_users": ids(banned), "failed_users": ids(failed)}))
        }
        Changed::Nothing => Ok(StatusCode::NO_CONTENT.into_response()),
    }
}

async fn change(node: &ApiState, guild_id: i64, actor: i64, change: GuildChange) -> ApiResult {
    let result = node
        .guilds
        .change(guild_id, actor, change, request_reason(node))
        .await;
    if let Err(
        GuildError::MaxRoles
        | GuildError::MaxChannels
        | GuildError::SizeLimit(_)
        | GuildError::MaxOverwrites
        | GuildError::InvalidOverwrite
        | GuildError::InvalidParent
        | GuildError::ThreadArchived
        | GuildError::UnknownTag(_)
        | GuildError::WrongChannelType,
    ) = result
    {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
    }
    changed(result?)
}

/// Absent, null, or a value: PATCH semantics for nullable fields.
pub(crate) fn patch<T: DeserializeOwned>(
    value: Option<&Value>,
) -> Result<Option<Option<T>>, ApiError> {
    match value {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(v) => serde_json::from_value(v.clone())
            .map(|t| Some(Some(t)))
            .map_err(|e| ApiError::Field("body", "BASE_TYPE_BAD", e.to_string())),
    }
}

fn bits(value: Option<&Value>) -> Result<Option<i64>, ApiError> {
    let bad = || {
        ApiError::Field(
            "permissions",
            "BASE_TYPE_BAD",
            "Must be a decimal string.".into(),
        )
    };
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => s.parse::<u64>().map(|v| Some(v as i64)).map_err(|_| bad()),
        Some(Value::Number(n)) => n.as_u64().map(|v| Some(v as i64)).ok_or_else(bad),
        Some(_) => Err(bad()),
    }
}

async fn patch_channel(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    if guildhall_store::THREAD_KINDS.contains(&channel.kind) {
        return patch_thread(&node, caller.id, &channel, guild_id, &body).await;
    }
    let limits = &node.shared.limits;
    let name: Option<String> = patch(body.get("name"))?.flatten();
    if let Some(name) = &name {
        check_chars(&node, "name", name, 1, limits.channel_name_chars_max)?;
    }
    let topic = patch::<String>(body.get("topic"))?;
    if let Some(Some(topic)) = &topic {
        check_chars(&node, "topic", topic, 0, limits.channel_topic_chars_max)?;
    }
    let position = patch::<i64>(body.get("position"))?.flatten();
    let mut settings = ChannelSettings::default();
    if let Some(fields) = body.as_object() {
        unsupported_fields(&node, fields, UNSUPPORTED_CHANNEL_FIELDS)?;
        let kind = match fields.get("type") {
            None | Some(Value::Null) => channel.kind,
            Some(Value::Number(n)) if n.as_i64() == Some(channel.kind) => channel.kind,
            // Discord converts text and announcement channels into each
            // other and nothing else.
            Some(Value::Number(n))
                if matches!((channel.kind, n.as_i64()), (0, Some(5)) | (5, Some(0))) =>
            {
                settings.kind = n.as_i64();
                n.as_i64().unwrap_or(channel.kind)
            }
            Some(_) => {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Field(
                    "type",
                    "CHANNEL_TYPE_INVALID",
                    "Only text and announcement channels change type, into each other.".into(),
                ));
            }
        };
        settings = ChannelSettings {
            kind: settings.kind,
            ..channel_settings(&node, fields, kind)?
        };
    }
    // Null clears them, as an empty list does.
    let permission_overwrites = match body.get("permission_overwrites") {
        Some(Value::Null) => Some(vec![]),
        value => overwrites_field(&node, value)?,
    };
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::UpdateChannel {
            channel_id: channel.id,
            name,
            topic,
            position,
            permission_overwrites,
            settings,
        },
    )
    .await
}

/// The documented fields of a guild channel's PATCH that a thread's does
/// not have.
const THREADLESS_CHANNEL_FIELDS: &[&str] = &[
    "topic",
    "position",
    "nsfw",
    "bitrate",
    "user_limit",
    "permission_overwrites",
    "parent_id",
    "rtc_region",
    "video_quality_mode",
    "default_auto_archive_duration",
    "default_thread_rate_limit_per_user",
    "available_tags",
    "default_reaction_emoji",
    "default_sort_order",
    "default_forum_layout",
];

/// `PATCH /channels/{thread.id}`: the thread fields Discord documents
/// (`name`, `archived`, `auto_archive_duration`, `locked`, `invitable`,
/// `rate_limit_per_user`, `flags`, `applied_tags`), checked against its
/// bounds; any other field with a value is 50035 at the field, as a
/// thread has no topic, overwrites or position of its own. Who may
/// change what is the owner's decision (`GuildChange::UpdateThread`).
async fn patch_thread(
    node: &ApiState,
    caller: i64,
    thread: &ChannelRow,
    guild_id: i64,
    body: &Value,
) -> ApiResult {
    let bad = |field: &'static str, code: &'static str, message: &str| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message.into())
    };
    let Some(fields) = body.as_object() else {
        return Err(bad("body", "BASE_TYPE_BAD", "Must be an object."));
    };
    let flag = |field: &'static str| match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(value)) => Ok(Some(*value)),
        Some(_) => Err(bad(field, "BASE_TYPE_BAD", "Must be a boolean.")),
    };
    let mut patch = guildhall_proto::guilds::ThreadPatch {
        archived: flag("archived")?,
        locked: flag("locked")?,
        invitable: flag("invitable")?,
        ..Default::default()
    };
    if patch.invitable.is_some() && thread.kind != 12 {
        return Err(bad(
            "invitable",
            "CHANNEL_TYPE_INVALID",
            "Only private threads have this field.",
        ));
    }
    match fields.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => {
            check_chars(
                node,
                "name",
                name,
                1,
                node.shared.limits.channel_name_chars_max,
            )?;
            patch.name = Some(name.clone());
        }
        Some(_) => return Err(bad("name", "BASE_TYPE_BAD", "Must be a string.")),
    }
    match fields.get("auto_archive_duration") {
        None | Some(Value::Null) => {}
        Some(value) => {
            patch.auto_archive_duration = Some(
                value
                    .as_i64()
                    .filter(|m| AUTO_ARCHIVE_MINUTES.contains(m))
                    .ok_or_else(|| {
                        bad(
                            "auto_archive_duration",
                            "BASE_TYPE_CHOICES",
                            "Value must be one of {60, 1440, 4320, 10080}.",
                        )
                    })?,
            );
        }
    }
    match fields.get("rate_limit_per_user") {
        None | Some(Value::Null) => {}
        Some(value) => {
            patch.rate_limit_per_user = Some(
                value
                    .as_i64()
                    .filter(|s| (0..=RATE_LIMIT_PER_USER_S_MAX).contains(s))
                    .ok_or_else(|| {
                        bad(
                            "rate_limit_per_user",
                            "NUMBER_TYPE_MAX",
                            "int value should be between 0 and 21600.",
                        )
                    })?,
            );
        }
    }
    // The other documented channel fields: a thread has none of its own
    // (keys no channel has are ignored, as Discord ignores them).
    patch.applied_tags = applied_tags_field(node, fields.get("applied_tags"))?;
    for field in THREADLESS_CHANNEL_FIELDS
        .iter()
        .copied()
        .chain(["flags", "type"])
    {
        let Some(value) = fields.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let unused = match field {
            // PINNED (a forum post's) is not kept yet.
            "flags" => value.as_i64() == Some(0),
            "type" => value.as_i64() == Some(thread.kind),
            _ => false,
        };
        if !unused {
            return Err(bad(
                field,
                "CHANNEL_TYPE_INVALID",
                "A thread does not have this field.",
            ));
        }
    }
    change(
        node,
        guild_id,
        caller,
        GuildChange::UpdateThread {
            thread_id: thread.id,
            patch,
        },
    )
    .await
}

/// Discord's bounds on slowmode, seconds (6 hours).
const RATE_LIMIT_PER_USER_S_MAX: i64 = 21_600;
/// A voice channel's bitrate bounds, bits per second (Discord's, for a
/// guild without boosts; a stage channel's maximum is 64,000).
const BITRATE_MIN: i64 = 8_000;
/// See [`BITRATE_MIN`].
const BITRATE_MAX: i64 = 96_000;
/// A stage channel's highest bitrate.
const STAGE_BITRATE_MAX: i64 = 64_000;
/// Most participants a voice channel's `user_limit` names (stage: 10,000).
const VOICE_USER_LIMIT_MAX: i64 = 99;
/// See [`VOICE_USER_LIMIT_MAX`].
const STAGE_USER_LIMIT_MAX: i64 = 10_000;
/// The auto-archive durations Discord accepts, minutes.
const AUTO_ARCHIVE_MINUTES: [i64; 4] = [60, 1_440, 4_320, 10_080];

/// The documented channel fields of a create or PATCH body beyond name,
/// topic, position and overwrites, each checked against Discord's bounds
/// and against the type `kind` the channel will have: a field the type
/// does not have, given a value other than its unused one, is 50035 at
/// the field, never dropped. Null leaves a field as it is (`parent_id`:
/// out of its category).
fn channel_settings(
    node: &ApiState,
    body: &serde_json::Map<String, Value>,
    kind: i64,
) -> Result<ChannelSettings, ApiError> {
    let bad = |field: &'static str, code: &'static str, message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, code, message)
    };
    let voice = matches!(kind, 2 | 13);
    // An integer field: Some(value) within `range`, for channel types
    // where `applies`, else 50035 unless it holds its `unused` value.
    let int = |field: &'static str,
               range: std::ops::RangeInclusive<i64>,
               applies: bool,
               unused: i64|
     -> Result<Option<i64>, ApiError> {
        let value = match body.get(field) {
            None | Some(Value::Null) => return Ok(None),
            Some(value) => value
                .as_i64()
                .ok_or_else(|| bad(field, "NUMBER_TYPE_COERCE", "Value is not int.".into()))?,
        };
        if !applies {
            if value == unused {
                return Ok(Some(unused));
            }
            return Err(bad(
                field,
                "CHANNEL_TYPE_INVALID",
                "This channel type does not have this field.".into(),
            ));
        }
        if !range.contains(&value) {
            return Err(bad(
                field,
                "NUMBER_TYPE_MAX",
                format!(
                    "int value should be between {} and {}.",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(Some(value))
    };
    let nsfw = match body.get("nsfw") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(false)) => Some(false),
        Some(Value::Bool(true)) if kind != 4 => Some(true),
        Some(Value::Bool(true)) => {
            return Err(bad(
                "nsfw",
                "CHANNEL_TYPE_INVALID",
                "A category is not age-restricted itself.".into(),
            ));
        }
        Some(_) => return Err(bad("nsfw", "BASE_TYPE_BAD", "Must be a boolean.".into())),
    };
    let parent_id = match body.get("parent_id") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(_) if kind == 4 => {
            return Err(bad(
                "parent_id",
                "CHANNEL_PARENT_INVALID_TYPE",
                "A category has no parent.".into(),
            ));
        }
        Some(value) => Some(Some(id_from_value(value).map_err(|_| {
            bad(
                "parent_id",
                "NUMBER_TYPE_COERCE",
                "Value is not snowflake.".into(),
            )
        })?)),
    };
    let stage = kind == 13;
    let forum = matches!(kind, 15 | 16);
    let not_here = |field: &'static str| {
        bad(
            field,
            "CHANNEL_TYPE_INVALID",
            "This channel type does not have this field.".into(),
        )
    };
    let mut minted_tags = vec![];
    let available_tags = match body.get("available_tags") {
        None | Some(Value::Null) => None,
        Some(value) if forum => Some(forum_tags(node, value, &mut minted_tags)?),
        Some(value) if value.as_array().is_some_and(|tags| tags.is_empty()) => None,
        Some(_) => return Err(not_here("available_tags")),
    };
    let archive = int(
        "default_auto_archive_duration",
        60..=10_080,
        matches!(kind, 0 | 5 | 15 | 16),
        0,
    )?;
    if let Some(minutes) = archive
        && minutes != 0
        && !AUTO_ARCHIVE_MINUTES.contains(&minutes)
    {
        return Err(bad(
            "default_auto_archive_duration",
            "BASE_TYPE_CHOICES",
            "Value must be one of {60, 1440, 4320, 10080}.".into(),
        ));
    }
    Ok(ChannelSettings {
        kind: None,
        nsfw,
        rate_limit_per_user: int(
            "rate_limit_per_user",
            0..=RATE_LIMIT_PER_USER_S_MAX,
            matches!(kind, 0 | 2 | 13 | 15 | 16),
            0,
        )?,
        parent_id,
        bitrate: int(
            "bitrate",
            BITRATE_MIN..=if stage {
                STAGE_BITRATE_MAX
            } else {
                BITRATE_MAX
            },
            voice,
            0,
        )?,
        user_limit: int(
            "user_limit",
            0..=if stage {
                STAGE_USER_LIMIT_MAX
            } else {
                VOICE_USER_LIMIT_MAX
            },
            voice,
            0,
        )?,
        video_quality_mode: int("video_quality_mode", 1..=2, voice, 0)?,
        default_auto_archive_duration: archive,
        default_thread_rate_limit_per_user: int(
            "default_thread_rate_limit_per_user",
            0..=RATE_LIMIT_PER_USER_S_MAX,
            matches!(kind, 0 | 5 | 15 | 16),
            0,
        )?,
        default_sort_order: match body.get("default_sort_order") {
            None => None,
            Some(Value::Null) if forum => Some(None),
            Some(value) if forum && matches!(value.as_i64(), Some(0 | 1)) => Some(value.as_i64()),
            Some(Value::Null) => None,
            Some(_) if forum => {
                return Err(bad(
                    "default_sort_order",
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {0, 1}.".into(),
                ));
            }
            Some(_) => return Err(not_here("default_sort_order")),
        },
        default_forum_layout: int("default_forum_layout", 0..=2, kind == 15, 0)?,
        default_reaction_emoji: match body.get("default_reaction_emoji") {
            None => None,
            Some(Value::Null) if forum => Some(None),
            Some(Value::Null) => None,
            Some(value) if forum => Some(Some(default_reaction(value).ok_or_else(|| {
                bad(
                    "default_reaction_emoji",
                    "BASE_TYPE_BAD",
                    "Name one of emoji_id (a snowflake) or emoji_name.".into(),
                )
            })?)),
            Some(_) => return Err(not_here("default_reaction_emoji")),
        },
        available_tags,
        minted_tags,
    })
}

/// A forum's `default_reaction_emoji` object: exactly one of `emoji_id`
/// (a snowflake) and `emoji_name` (a non-empty string).
fn default_reaction(value: &Value) -> Option<guildhall_proto::model::DefaultReaction> {
    forum_emoji(value.as_object()?).filter(|r| r.emoji_id.is_some() || r.emoji_name.is_some())
}

/// The emoji of a forum object (a tag, the default reaction): at most one
/// of `emoji_id` (a snowflake) and `emoji_name` (a non-empty string),
/// null or absent for none; None when malformed or both are given.
fn forum_emoji(
    object: &serde_json::Map<String, Value>,
) -> Option<guildhall_proto::model::DefaultReaction> {
    let emoji_id = match object.get("emoji_id") {
        None | Some(Value::Null) => None,
        Some(id) => Some(sf(id_from_value(id).ok()?)),
    };
    let emoji_name = match object.get("emoji_name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if !name.is_empty() => Some(name.clone()),
        Some(_) => return None,
    };
    (emoji_id.is_none() || emoji_name.is_none()).then_some(
        guildhall_proto::model::DefaultReaction {
            emoji_id,
            emoji_name,
        },
    )
}

/// Discord's bound on a forum's tags.
const FORUM_TAGS_MAX: usize = 20;
/// Discord's bound on a tag's name, characters.
const FORUM_TAG_NAME_CHARS_MAX: usize = 20;

/// A forum's `available_tags`, whole: at most [`FORUM_TAGS_MAX`] tags,
/// each a name of 1 to [`FORUM_TAG_NAME_CHARS_MAX`] characters, at most
/// one emoji, `moderated` a boolean. A tag without an id is new: its id is
/// minted here and listed in `minted` (the owner accepts no other id it
/// does not hold).
fn forum_tags(
    node: &ApiState,
    value: &Value,
    minted: &mut Vec<i64>,
) -> Result<Vec<guildhall_proto::model::ForumTag>, ApiError> {
    let bad = |message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field("available_tags", "BASE_TYPE_BAD", message)
    };
    let list = value
        .as_array()
        .ok_or_else(|| bad("Must be an array of tags.".into()))?;
    if list.len() > FORUM_TAGS_MAX {
        return Err(bad(format!("Must be {FORUM_TAGS_MAX} or fewer in length.")));
    }
    let mut tags = Vec::with_capacity(list.len());
    for (index, tag) in list.iter().enumerate() {
        let object = tag
            .as_object()
            .ok_or_else(|| bad(format!("Tag {index} must be an object.")))?;
        let name = match object.get("name") {
            Some(Value::String(name))
                if (1..=FORUM_TAG_NAME_CHARS_MAX).contains(&name.chars().count()) =>
            {
                name.clone()
            }
            _ => {
                return Err(bad(format!(
                    "Tag {index}'s name must be 1 to {FORUM_TAG_NAME_CHARS_MAX} characters."
                )));
            }
        };
        let moderated = match object.get("moderated") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(moderated)) => *moderated,
            Some(_) => return Err(bad(format!("Tag {index}'s moderated must be a boolean."))),
        };
        let emoji = forum_emoji(object).ok_or_else(|| {
            bad(format!(
                "Tag {index}'s emoji is at most one of emoji_id (a snowflake) and emoji_name."
            ))
        })?;
        let id = match object.get("id") {
            None | Some(Value::Null) => {
                let id = node.shared.next_id().get() as i64;
                minted.push(id);
                id
            }
            Some(id) => id_from_value(id)
                .map_err(|_| bad(format!("Tag {index}'s id is not a snowflake.")))?,
        };
        tags.push(guildhall_proto::model::ForumTag {
            id: sf(id),
            name,
            moderated,
            emoji_id: emoji.emoji_id,
            emoji_name: emoji.emoji_name,
        });
    }
    Ok(tags)
}

/// Channel fields this server does not act on yet, with the value that
/// means "not used" (what libraries send when the caller set nothing).
const UNSUPPORTED_CHANNEL_FIELDS: &[(&str, &str)] = &[
    // No voice region but the automatic one exists here.
    ("rtc_region", "null"),
    ("flags", "0"),
    ("archived", "null"),
    ("locked", "null"),
    ("invitable", "null"),
    ("auto_archive_duration", "null"),
    ("applied_tags", "null"),
];

/// Refuses, with 50035 naming the field, any of `table`'s fields that
/// holds a value other than null or its "not used" value (the JSON beside
/// it): the server does not act on them yet, and a 200 that dropped them
/// would lie.
fn unsupported_fields(
    node: &ApiState,
    body: &serde_json::Map<String, Value>,
    table: &[(&'static str, &str)],
) -> Result<(), ApiError> {
    for (field, unused) in table {
        let Some(value) = body.get(*field) else {
            continue;
        };
        let unused: Value = serde_json::from_str(unused).unwrap_or(Value::Null);
        if value.is_null() || *value == unused {
            continue;
        }
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            field,
            "UNSUPPORTED",
            "This server does not support this field yet.".into(),
        ));
    }
    Ok(())
}

/// A 50035 at a nested path (`permission_overwrites.0.allow`), counted.
fn nested_field(node: &ApiState, path: &[&str], code: &str, message: &str) -> ApiError {
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    let mut errors = json!({"_errors": [{"code": code, "message": message}]});
    for key in path.iter().rev() {
        errors = json!({ *key: errors });
    }
    let mut body = ErrorBody::new(ErrorCode::InvalidFormBody);
    body.errors = Some(errors);
    ApiError::Invalid(body)
}

/// One permission overwrite from a request (an entry of
/// `permission_overwrites` at `path`, or `PUT
/// /channels/{id}/permissions/{overwrite.id}`'s body with the path's id):
/// `type` 0 (role) or 1 (member), `allow` and `deny` decimal strings (or
/// integers) of documented permissions, absent or null meaning "0".
fn overwrite_from(
    node: &ApiState,
    value: &Value,
    id: Option<i64>,
    path: &[&str],
) -> Result<guildhall_proto::model::PermissionOverwrite, ApiError> {
    let at = |field: &'static str| -> Vec<&str> {
        let mut full = path.to_vec();
        full.push(field);
        full
    };
    let Some(object) = value.as_object() else {
        return Err(nested_field(
            node,
            path,
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        ));
    };
    let id = match id {
        Some(id) => id,
        None => object
            .get("id")
            .and_then(|v| match v {
                Value::String(s) => s.parse::<u64>().ok(),
                Value::Number(n) => n.as_u64(),
                _ => None,
            })
            .filter(|v| *v > 0 && *v <= i64::MAX as u64)
            .map(|v| v as i64)
            .ok_or_else(|| {
                nested_field(
                    node,
                    &at("id"),
                    "NUMBER_TYPE_COERCE",
                    "Value is not snowflake.",
                )
            })?,
    };
    let kind = match object.get("type").and_then(Value::as_u64) {
        Some(kind @ (0 | 1)) => kind as u8,
        _ => {
            return Err(nested_field(
                node,
                &at("type"),
                "BASE_TYPE_CHOICES",
                "Value must be one of {0, 1}.",
            ));
        }
    };
    let bits_at = |field: &'static str| -> Result<String, ApiError> {
        let parsed = match object.get(field) {
            None | Some(Value::Null) => Some(0),
            Some(Value::String(s)) => perm::parse_bits(s),
            Some(Value::Number(n)) => n.as_u64().filter(|b| b & !perm::ALL == 0),
            Some(_) => None,
        };
        parsed.map(|b| b.to_string()).ok_or_else(|| {
            nested_field(
                node,
                &at(field),
                "BASE_TYPE_BAD",
                "Must be a decimal string of documented permission bits.",
            )
        })
    };
    Ok(guildhall_proto::model::PermissionOverwrite {
        id: sf(id),
        kind,
        allow: bits_at("allow")?,
        deny: bits_at("deny")?,
    })
}

/// A channel body's `permission_overwrites` (None: absent), each entry
/// checked where it stands, at most `channel_overwrites_max` of them.
fn overwrites_field(
    node: &ApiState,
    value: Option<&Value>,
) -> Result<Option<Vec<guildhall_proto::model::PermissionOverwrite>>, ApiError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(list) = value.as_array() else {
        return Err(nested_field(
            node,
            &["permission_overwrites"],
            "BASE_TYPE_BAD",
            "Must be an array.",
        ));
    };
    let max = node.shared.limits.channel_overwrites_max;
    if list.len() > max {
        return Err(nested_field(
            node,
            &["permission_overwrites"],
            "BASE_TYPE_MAX_LENGTH",
            &format!("Must be {max} or fewer in length."),
        ));
    }
    let indexes: Vec<String> = (0..list.len()).map(|i| i.to_string()).collect();
    list.iter()
        .zip(&indexes)
        .map(|(entry, index)| {
            overwrite_from(
                node,
                entry,
                None,
                &["permission_overwrites", index.as_str()],
            )
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `PUT /channels/{id}/permissions/{overwrite.id}`: sets one overwrite
/// (MANAGE_ROLES there; only bits the caller holds). 204, CHANNEL_UPDATE.
async fn put_overwrite(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, overwrite_id)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    let overwrite_id = parse_id(&overwrite_id)?;
    let overwrite = overwrite_from(&node, &body, Some(overwrite_id), &[])?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::SetOverwrite {
            channel_id: channel.id,
            overwrite,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /channels/{id}/permissions/{overwrite.id}`: 204, with
/// CHANNEL_UPDATE if there was one to remove.
async fn delete_overwrite(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, overwrite_id)): Path<(String, String)>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    let overwrite_id = parse_id(&overwrite_id)?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::DeleteOverwrite {
            channel_id: channel.id,
            overwrite_id,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn delete_channel(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    let delete = if guildhall_store::THREAD_KINDS.contains(&channel.kind) {
        GuildChange::DeleteThread {
            thread_id: channel.id,
        }
    } else {
        GuildChange::DeleteChannel {
            channel_id: channel.id,
        }
    };
    let answer = change(&node, guild_id, caller.id, delete).await;
    if answer.is_ok() {
        // Its messages are gone; their files go too. (Its threads' files
        // and a whole guild's wait for the sweep.)
        node.files.forget_channel(channel.id);
    }
    answer
}

async fn patch_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    match patch::<String>(body.get("name"))?.flatten() {
        Some(name) => {
            // Trimmed once, as creation trims: the name checked is the
            // name stored.
            let name = name.trim().to_owned();
            check_chars(
                &node,
                "name",
                &name,
                2,
                node.shared.limits.guild_name_chars_max,
            )?;
            change(
                &node,
                guild_id,
                caller.id,
                GuildChange::UpdateGuild { name },
            )
            .await
        }
        None => get_guild(State(node), Caller(caller), Path(id)).await,
    }
}

async fn delete_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    change(&node, parse_id(&id)?, caller.id, GuildChange::DeleteGuild).await
}

async fn patch_me(
    State(node): State<AppState>,
    Caller(caller): Caller,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let username = patch::<String>(body.get("username"))?.flatten();
    if let Some(name) = &username {
        check_username(name)?;
    }
    let global_name = patch::<String>(body.get("global_name"))?;
    if global_name
        .as_ref()
        .and_then(|g| g.as_ref())
        .is_some_and(|g| g.chars().count() > 32)
    {
        return Err(ApiError::Field(
            "global_name",
            "BASE_TYPE_MAX_LENGTH",
            "Must be 32 or fewer in length.".into(),
        ));
    }
    node.shared
        .store
        .update_user(
            caller.id,
            username.as_deref(),
            global_name.as_ref().map(|g| g.as_deref()),
        )
        .await?;
    // Cached rows (token lookups, member loads) show the old name otherwise.
    node.users.invalidate_user(caller.id);
    let user = node
        .shared
        .store
        .user(caller.id)
        .await?
        .ok_or(ApiError::Internal)?;
    let wire = wire_user(&user);
    node.gateways()
        .to_users_in(None, vec![user.id], 0, "USER_UPDATE", &wire);
    ok(&wire)
}

/// One entry of a bulk position body: its id and its fields.
type PositionEntry<'a> = (i64, &'a serde_json::Map<String, Value>);

/// The entries of a bulk position body: an array of objects with a
/// distinct `id` each, at most `max`; else 50035.
fn position_entries<'a>(
    node: &ApiState,
    body: &'a Value,
    max: usize,
) -> Result<Vec<PositionEntry<'a>>, ApiError> {
    let bad = |message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field("_root", "BASE_TYPE_BAD", message)
    };
    let entries = body
        .as_array()
        .ok_or_else(|| bad("Must be an array of objects with ids.".into()))?;
    if entries.len() > max {
        return Err(bad(format!("Must be {max} or fewer in length.")));
    }
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let fields = entry
            .as_object()
            .ok_or_else(|| bad("Must be an array of objects with ids.".into()))?;
        let id = fields
            .get("id")
            .and_then(|v| id_from_value(v).ok())
            .ok_or_else(|| bad("Every entry needs a snowflake id.".into()))?;
        if out.iter().any(|(seen, _)| *seen == id) {
            return Err(bad("Each id may appear once.".into()));
        }
        out.push((id, fields));
    }
    Ok(out)
}

/// `PATCH /guilds/{id}/channels`: positions, categories (`parent_id`)
/// and `lock_permissions` of several channels at once; MANAGE_CHANNELS
/// (and MANAGE_ROLES to sync overwrites); all or none; 204 and
/// CHANNEL_UPDATE for each.
async fn channel_positions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let entries = position_entries(&node, &body, node.shared.limits.guild_channels_max)?;
    let mut moves = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let position = patch::<i64>(fields.get("position"))?.flatten();
        let parent_id = match fields.get("parent_id") {
            None => None,
            Some(Value::Null) => Some(None),
            Some(value) => Some(Some(id_from_value(value).map_err(|_| {
                ApiError::Field(
                    "parent_id",
                    "NUMBER_TYPE_COERCE",
                    "Value is not snowflake.".into(),
                )
            })?)),
        };
        let lock_permissions = patch::<bool>(fields.get("lock_permissions"))?
            .flatten()
            .unwrap_or(false);
        moves.push(guildhall_proto::guilds::ChannelMove {
            id,
            position,
            parent_id,
            lock_permissions,
        });
    }
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::ChannelPositions { moves },
    )
    .await
}

/// `PATCH /guilds/{id}/roles`: reorders roles (MANAGE_ROLES, each below
/// the caller's highest role, before and after); answers every role,
/// GUILD_ROLE_UPDATE for each that moved.
async fn role_positions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let entries = position_entries(&node, &body, node.shared.limits.guild_roles_max)?;
    let mut moves = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        let Some(position) = patch::<i64>(fields.get("position"))?.flatten() else {
            continue;
        };
        moves.push((id, position));
    }
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::RolePositions { moves },
    )
    .await
}

async fn list_roles(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let user_id = caller.id;
    ok(&node.guilds.roles(guild_id, user_id).await?)
}

async fn create_role(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let name = patch::<String>(body.get("name"))?
        .flatten()
        .unwrap_or_else(|| "new role".into());
    check_chars(
        &node,
        "name",
        &name,
        1,
        node.shared.limits.role_name_chars_max,
    )?;
    let role = RoleRecord {
        id: node.shared.next_id().get() as i64,
        guild_id,
        name,
        permissions: bits(body.get("permissions"))?.unwrap_or(0),
        position: 0,
        color: patch::<i64>(body.get("color"))?.flatten().unwrap_or(0),
        hoist: patch::<bool>(body.get("hoist"))?.flatten().unwrap_or(false),
        mentionable: patch::<bool>(body.get("mentionable"))?
            .flatten()
            .unwrap_or(false),
    };
    change(&node, guild_id, caller.id, GuildChange::CreateRole { role }).await
}

async fn patch_role(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, role)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let name = patch::<String>(body.get("name"))?.flatten();
    if let Some(name) = &name {
        check_chars(
            &node,
            "name",
            name,
            1,
            node.shared.limits.role_name_chars_max,
        )?;
    }
    let update = GuildChange::UpdateRole {
        role_id: parse_id(&role)?,
        name,
        permissions: bits(body.get("permissions"))?,
        color: patch::<i64>(body.get("color"))?.flatten(),
        hoist: patch::<bool>(body.get("hoist"))?.flatten(),
        mentionable: patch::<bool>(body.get("mentionable"))?.flatten(),
    };
    change(&node, guild_id, caller.id, update).await
}

async fn delete_role(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, role)): Path<(String, String)>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::DeleteRole {
            role_id: parse_id(&role)?,
        },
    )
    .await
}

async fn patch_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, member)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let member_id = if member == "@me" {
        caller.id
    } else {
        parse_id(&member)?
    };
    let limits = &node.shared.limits;
    let nick = patch::<String>(body.get("nick"))?;
    // An empty nickname clears it, as null does.
    let nick = nick.map(|n| n.filter(|n| !n.is_empty()));
    if let Some(Some(nick)) = &nick {
        check_chars(&node, "nick", nick, 1, limits.nick_chars_max)?;
    }
    let timeout = timeout_field(&node, body.get("communication_disabled_until"))?;
    unsupported_member_fields(&node, &body)?;
    let roles = match patch::<Vec<String>>(body.get("roles"))?.flatten() {
        Some(ids) => Some({
            // A member cannot hold more roles than a guild has.
            check_items(&node, "roles", ids.len(), limits.guild_roles_max)?;
            ids.iter()
                .map(|r| parse_id(r))
                .collect::<Result<Vec<_>, _>>()?
        }),
        None => None,
    };
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::UpdateMember {
            communication_disabled_until_ms: timeout,
            member_id,
            nick,
            roles,
        },
    )
    .await
}

/// How far ahead a timeout may end (Discord's 28 days).
const MEMBER_TIMEOUT_MS_MAX: u64 = 28 * 86_400 * 1_000;

/// A member body's `communication_disabled_until`: absent (None), null
/// (lift: Some(None)) or an RFC 3339 time at most 28 days ahead (a past
/// time is stored and means no timeout).
fn timeout_field(node: &ApiState, value: Option<&Value>) -> Result<Option<Option<i64>>, ApiError> {
    let bad = |message: &str| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(
            "communication_disabled_until",
            "BASE_TYPE_BAD",
            message.to_owned(),
        )
    };
    let text = match value {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(None)),
        Some(Value::String(text)) => text,
        Some(_) => return Err(bad("Must be an ISO 8601 timestamp or null.")),
    };
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map_err(|_| bad("Must be an ISO 8601 timestamp or null."))?;
    let until_ms = i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
        .map_err(|_| bad("Must be an ISO 8601 timestamp or null."))?;
    if until_ms > (now_ms() + MEMBER_TIMEOUT_MS_MAX) as i64 {
        return Err(bad("Must be at most 28 days in the future."));
    }
    Ok(Some(Some(until_ms)))
}

/// Member fields this server does not act on yet (server mute and
/// deafen, moving between voice channels, member flags), with the value
/// that means "not used" (see `unsupported_fields`).
const UNSUPPORTED_MEMBER_FIELDS: &[(&str, &str)] =
    &[("mute", "false"), ("deaf", "false"), ("flags", "0")];

fn unsupported_member_fields(node: &ApiState, body: &Value) -> Result<(), ApiError> {
    let Some(fields) = body.as_object() else {
        return Ok(());
    };
    // Any `channel_id`, null included (null disconnects from voice), is
    // an action this server does not take yet.
    if fields.contains_key("channel_id") {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "channel_id",
            "UNSUPPORTED",
            "This server does not move members between voice channels yet.".into(),
        ));
    }
    unsupported_fields(node, fields, UNSUPPORTED_MEMBER_FIELDS)
}

async fn kick_member(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, member)): Path<(String, String)>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::RemoveMember {
            member_id: parse_id(&member)?,
        },
    )
    .await
}

// ----- audit log ---------------------------------------------------------------

tokio::task_local! {
    /// The request's `X-Audit-Log-Reason`, percent-decoded (as libraries
    /// encode it): set for the whole handler by [`audit_reason_scope`], so
    /// every guild change a route makes carries it without each handler
    /// reading the header.
    static AUDIT_REASON: Option<String>;
}

/// Middleware: runs the request with its audit log reason in scope.
async fn audit_reason_scope(request: Request, next: axum::middleware::Next) -> Response {
    let reason = request.headers().get("x-audit-log-reason").map(|raw| {
        percent_encoding::percent_decode(raw.as_bytes())
            .decode_utf8_lossy()
            .into_owned()
    });
    AUDIT_REASON.scope(reason, next.run(request)).await
}

/// The moderator's reason for this request, cut to
/// `audit_reason_chars_max` characters (Discord's 512); None when absent
/// or blank.
/// Records an audit log entry for an action the api took (the guild's
/// owner stores and announces it) with the request's reason. The action
/// is done already: a failure is logged (rate-limited), not answered.
pub(crate) async fn audit(
    node: &ApiState,
    guild_id: i64,
    actor: i64,
    action_type: u8,
    target_id: Option<i64>,
    changes: Vec<Value>,
    options: Option<Value>,
) {
    let call = guildhall_proto::guilds::GuildCall::Audit {
        actor,
        action_type,
        target_id,
        changes,
        options,
        reason: request_reason(node),
    };
    if let Err(error) = node.guilds.audit(guild_id, call).await {
        guildhall_common::throttled!(warn, "api.audit_failed", guild_id, %error, "an audit log entry was not recorded");
    }
}

/// `changes` of an invite's audit entry: its settings as new values
/// (created) or old ones (deleted).
fn invite_changes(invite: &InviteRow, created: bool) -> Vec<Value> {
    let side = if created { "new_value" } else { "old_value" };
    [
        ("code", json!(invite.code)),
        ("channel_id", json!(invite.channel_id.to_string())),
        ("inviter_id", json!(invite.inviter_id.to_string())),
        ("uses", json!(invite.uses)),
        ("max_uses", json!(invite.max_uses)),
        ("max_age", json!(invite.max_age_s)),
        ("temporary", json!(invite.temporary)),
    ]
    .into_iter()
    .map(|(key, value)| json!({"key": key, side: value}))
    .collect()
}

pub(crate) fn request_reason(node: &ApiState) -> Option<String> {
    let raw = AUDIT_REASON.try_with(Clone::clone).ok().flatten()?;
    let reason: String = raw
        .chars()
        .take(node.shared.limits.audit_reason_chars_max)
        .collect();
    (!reason.trim().is_empty()).then_some(reason)
}

#[derive(Deserialize)]
struct AuditQuery {
    user_id: Option<String>,
    action_type: Option<String>,
    before: Option<String>,
    after: Option<String>,
    limit: Option<String>,
}

/// `GET /guilds/{id}/audit-logs`: VIEW_AUDIT_LOG; newest first below
/// `before`, oldest first above `after`, filtered by `user_id` and
/// `action_type`, `limit` 1 to `audit_log_page_max` (default 50), with
/// the users the page names.
async fn audit_logs(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<AuditQuery>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let bad = |field: &'static str, message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(field, "NUMBER_TYPE_COERCE", message)
    };
    let max = node.shared.limits.audit_log_page_max;
    let limit = match query.limit.as_deref() {
        None => 50.min(max),
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| bad("limit", format!("Must be between 1 and {max}.")))?,
    };
    let snowflake = |raw: Option<&str>, field: &'static str| -> Result<i64, ApiError> {
        raw.map_or(Ok(0), |raw| {
            parse_id(raw).map_err(|_| bad(field, "Value is not snowflake.".into()))
        })
    };
    let user_id = snowflake(query.user_id.as_deref(), "user_id")?;
    let before = snowflake(query.before.as_deref(), "before")?;
    let after = snowflake(query.after.as_deref(), "after")?;
    let action_type = match query.action_type.as_deref() {
        None => 0,
        Some(raw) => raw
            .parse::<u8>()
            .ok()
            .filter(|a| *a > 0)
            .ok_or_else(|| bad("action_type", "Value is not a valid action type.".into()))?,
    };
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::VIEW_AUDIT_LOG)
        .await?;
    let rows = node
        .shared
        .store
        .audit_entries(
            guild_id,
            user_id,
            i64::from(action_type),
            before,
            after,
            limit as i64,
        )
        .await?;
    let mut named: Vec<i64> = vec![];
    let entries: Vec<Value> = rows
        .iter()
        .map(|row| {
            named.push(row.user_id);
            let entry = guildhall_proto::audit::AuditEntry {
                id: row.id,
                guild_id: row.guild_id,
                user_id: row.user_id,
                target_id: row.target_id,
                action_type: u8::try_from(row.action_type).unwrap_or(0),
                changes: serde_json::from_str(&row.changes).unwrap_or_default(),
                options: row
                    .options
                    .as_deref()
                    .and_then(|o| serde_json::from_str(o).ok()),
                reason: row.reason.clone(),
            };
            if matches!(entry.action_type, 20..=28) {
                named.extend(entry.target_id);
            }
            entry.to_wire()
        })
        .collect();
    named.sort_unstable();
    named.dedup();
    let users: Vec<_> = node
        .shared
        .store
        .users_by_ids(&named)
        .await?
        .iter()
        .map(wire_user)
        .collect();
    ok(&json!({
        "audit_log_entries": entries,
        "users": users,
        "integrations": [],
        "webhooks": [],
        "guild_scheduled_events": [],
        "threads": [],
        "application_commands": [],
        "auto_moderation_rules": [],
    }))
}

// ----- bans -------------------------------------------------------------------

/// The oldest message id a ban deletes from (0: none), from
/// `delete_message_seconds` (0 to 604,800) or the deprecated
/// `delete_message_days` (0 to 7).
fn ban_delete_since(node: &ApiState, body: &Value) -> Result<i64, ApiError> {
    let bad = |field: &'static str, max: u64| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field(
            field,
            "NUMBER_TYPE_MAX",
            format!("Must be an integer between 0 and {max}."),
        )
    };
    let seconds = match (
        body.get("delete_message_seconds").filter(|v| !v.is_null()),
        body.get("delete_message_days").filter(|v| !v.is_null()),
    ) {
        (Some(v), _) => v
            .as_u64()
            .filter(|s| *s <= 604_800)
            .ok_or_else(|| bad("delete_message_seconds", 604_800))?,
        (None, Some(v)) => v
            .as_u64()
            .filter(|d| *d <= 7)
            .map(|d| d * 86_400)
            .ok_or_else(|| bad("delete_message_days", 7))?,
        (None, None) => 0,
    };
    if seconds == 0 {
        return Ok(0);
    }
    let since_ms = now_ms()
        .saturating_sub(seconds * 1_000)
        .max(guildhall_proto::snowflake::DISCORD_EPOCH_MS);
    Ok(((since_ms - guildhall_proto::snowflake::DISCORD_EPOCH_MS) << 22).max(1) as i64)
}

/// A ban object: `{reason, user}`.
fn wire_ban(ban: &guildhall_store::BanRow, user: &UserRow) -> Value {
    json!({"reason": ban.reason, "user": wire_user(user)})
}

/// `PUT /guilds/{id}/bans/{user}`: BAN_MEMBERS, above the target; 204.
async fn put_ban(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let delete_since_id = ban_delete_since(&node, &body)?;
    let user = node
        .shared
        .store
        .user(parse_id(&user)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownUser))?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::Ban {
            user: (&user).into(),
            delete_since_id,
            reason: request_reason(&node),
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE /guilds/{id}/bans/{user}`: 204, or 10026 if not banned.
async fn delete_ban(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let user = node
        .shared
        .store
        .user(parse_id(&user)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownBan))?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::Unban {
            user: (&user).into(),
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /guilds/{id}/bans/{user}`: BAN_MEMBERS; 10026 if not banned.
async fn get_ban(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((id, user)): Path<(String, String)>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let user_id = parse_id(&user)?;
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::BAN_MEMBERS)
        .await?;
    let ban = node
        .shared
        .store
        .ban(guild_id, user_id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownBan))?;
    let user = node
        .shared
        .store
        .user(user_id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownBan))?;
    ok(&wire_ban(&ban, &user))
}

#[derive(Deserialize)]
struct BansQuery {
    limit: Option<String>,
    before: Option<String>,
    after: Option<String>,
}

/// `GET /guilds/{id}/bans`: BAN_MEMBERS; ascending by user id, `limit`
/// 1 to `bans_page_max` (default that), `before` winning over `after`.
async fn list_bans(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    Query(query): Query<BansQuery>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let max = node.shared.limits.bans_page_max;
    let limit = match query.limit.as_deref() {
        None => max,
        Some(raw) => raw
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=max).contains(l))
            .ok_or_else(|| {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                ApiError::Field(
                    "limit",
                    "NUMBER_TYPE_MAX",
                    format!("Must be between 1 and {max}."),
                )
            })?,
    };
    let cursor = |raw: Option<&str>, field: &'static str| -> Result<i64, ApiError> {
        match raw {
            None => Ok(0),
            Some(raw) => parse_id(raw).map_err(|_| {
                ApiError::Field(
                    field,
                    "NUMBER_TYPE_COERCE",
                    "Value is not snowflake.".into(),
                )
            }),
        }
    };
    let before = cursor(query.before.as_deref(), "before")?;
    let after = cursor(query.after.as_deref(), "after")?;
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::BAN_MEMBERS)
        .await?;
    let bans = node
        .shared
        .store
        .bans(guild_id, after, before, limit as i64)
        .await?;
    let ids: Vec<i64> = bans.iter().map(|b| b.user_id).collect();
    let users: HashMap<i64, UserRow> = node
        .shared
        .store
        .users_by_ids(&ids)
        .await?
        .into_iter()
        .map(|u| (u.id, u))
        .collect();
    let page: Vec<Value> = bans
        .iter()
        .filter_map(|ban| users.get(&ban.user_id).map(|user| wire_ban(ban, user)))
        .collect();
    ok(&page)
}

/// `POST /guilds/{id}/bulk-ban`: up to `bulk_ban_users_max` users (BAN_MEMBERS
/// and MANAGE_GUILD); 200 with who was banned and who was not, 500000 if
/// nobody was.
async fn bulk_ban(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<Value>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let max = node.shared.limits.bulk_ban_users_max;
    let bad = |message: String| {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Field("user_ids", "BASE_TYPE_BAD", message)
    };
    let Some(list) = body.get("user_ids").and_then(Value::as_array) else {
        return Err(bad(
            "This field is required and is an array of snowflakes.".into()
        ));
    };
    if list.is_empty() || list.len() > max {
        return Err(bad(format!("Must be between 1 and {max} in length.")));
    }
    let mut ids = Vec::with_capacity(list.len());
    for value in list {
        let id = match value {
            Value::String(raw) => parse_id(raw).ok(),
            Value::Number(n) => n.as_i64().filter(|v| *v > 0),
            _ => None,
        }
        .ok_or_else(|| bad("Value is not snowflake.".into()))?;
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    let delete_since_id = ban_delete_since(&node, &body)?;
    let found = node.shared.store.users_by_ids(&ids).await?;
    let missing: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !found.iter().any(|u| u.id == *id))
        .collect();
    let users = found.iter().map(Into::into).collect();
    let result = node
        .guilds
        .change(
            guild_id,
            caller.id,
            GuildChange::BulkBan {
                users,
                delete_since_id,
                reason: request_reason(&node),
            },
            request_reason(&node),
        )
        .await?;
    match result {
        Changed::Banned { banned, mut failed } => {
            failed.extend(missing);
            changed(Changed::Banned { banned, failed })
        }
        other => changed(other),
    }
}

async fn leave_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    change(
        &node,
        guild_id,
        caller.id,
        GuildChange::RemoveMember {
            member_id: caller.id,
        },
    )
    .await
}

async fn member_role(
    node: &ApiState,
    caller: &UserRow,
    (id, member, role): (String, String, String),
    add: bool,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    let change_ = GuildChange::MemberRole {
        member_id: parse_id(&member)?,
        role_id: parse_id(&role)?,
        add,
    };
    change(node, guild_id, caller.id, change_).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn add_member_role(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(p): Path<(String, String, String)>,
) -> ApiResult {
    member_role(&node, &caller, p, true).await
}

async fn remove_member_role(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(p): Path<(String, String, String)>,
) -> ApiResult {
    member_role(&node, &caller, p, false).await
}

// ----- reactions and bulk delete ------------------------------------------------

/// Discord's JSON codes the routes below answer with that
/// `guildhall_proto::error::ErrorCode` does not name yet; all are 400s,
/// as Discord sends them.
const UNKNOWN_EMOJI_CODE: u32 = 10014;
const MAX_PINS_CODE: u32 = 30003;
const MAX_REACTIONS_CODE: u32 = 30010;

/// Editing a system message (a pin notice).
const SYSTEM_MESSAGE_CODE: u32 = 50021;

/// Message type 6, CHANNEL_PINNED_MESSAGE: the notice a pin posts.
const MESSAGE_TYPE_CHANNEL_PINNED_MESSAGE: i64 = 6;

/// Pinning and unpinning (Discord's PIN_MESSAGES, 1 << 51, which the
/// reference requires of both instead of MANAGE_MESSAGES). Owners and
/// administrators hold it as they hold every bit.
const PIN_MESSAGES: u64 = 1 << 51;

/// 10014 Unknown Emoji: an emoji path segment that is not one.
fn unknown_emoji() -> ApiError {
    ApiError::Invalid(ErrorBody {
        code: UNKNOWN_EMOJI_CODE,
        message: "Unknown Emoji".into(),
        errors: None,
    })
}

/// The stored key and the partial emoji object of a path's `{emoji}`;
/// 10014 for one that cannot be an emoji (empty, over 64 characters, or a
/// custom `name:id` without a name or a snowflake id).
fn emoji_of(raw: &str) -> Result<(String, Value), ApiError> {
    // Unicode emoji arrive percent-encoded; custom ones as name:id.
    let decoded = percent_decode(raw);
    if decoded.is_empty() || decoded.chars().count() > 64 {
        return Err(unknown_emoji());
    }
    let value = match decoded.split_once(':') {
        Some((name, id)) if !name.is_empty() && parse_id(id).is_ok() => {
            json!({"id": id, "name": name})
        }
        Some(_) => return Err(unknown_emoji()),
        None => json!({"id": null, "name": decoded}),
    };
    Ok((decoded, value))
}

/// Decodes `%XX` sequences (paths carry emoji percent-encoded); invalid
/// sequences are kept as they are. By hand: one decoding direction for one
/// path segment does not justify a URL crate.
fn percent_decode(raw: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            b'A'..=b'F' => Some(b - b'A' + 10),
            _ => None,
        }
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex(*hi).zip(hex(*lo)).map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::{
        admin_token_matches, emoji_of, parse_timestamp_us, percent_decode, recommended_shards,
        session_start_remaining,
    };
    use guildhall_proto::timestamp::format_unix_ms;
    use guildhall_store::SessionStarts;

    /// (starts, now): remaining and reset_after over a 1,000 ms window of
    /// a total of 5.
    #[test]
    fn session_start_limit_counts_down_within_the_window() {
        let at = |starts, window_start_ms| SessionStarts {
            starts,
            window_start_ms,
        };
        let cases = [
            (None, 500, (5, 0)),
            (Some(at(1, 100)), 100, (4, 1_000)),
            (Some(at(3, 100)), 600, (2, 500)),
            (Some(at(5, 100)), 1_099, (0, 1)),
            // One refused IDENTIFY is counted one above the total.
            (Some(at(6, 100)), 500, (0, 600)),
            // The window has ended: everything again.
            (Some(at(6, 100)), 1_100, (5, 0)),
        ];
        for (starts, now_ms, expected) in cases {
            assert_eq!(
                session_start_remaining(starts, now_ms, 1_000, 5),
                expected,
                "{starts:?} at {now_ms}"
            );
        }
    }

    #[test]
    fn recommended_shards_keep_each_at_half_the_ready_limit() {
        for (guilds, expected) in [(0, 1), (1, 1), (1_250, 1), (1_251, 2), (10_000, 8)] {
            assert_eq!(
                recommended_shards(guilds, 2_500, 65_536),
                expected,
                "{guilds}"
            );
        }
        assert_eq!(recommended_shards(1_000_000, 2, 16), 16);
    }

    #[test]
    fn admin_token_comparison() {
        let token = "MQ.AAAA.secret";
        assert!(admin_token_matches(Some(token), token));
        for wrong in [
            "",
            "M",
            "MQ.AAAA.secreT",
            "MQ.AAAA.secret ",
            "xQ.AAAA.secret",
        ] {
            assert!(!admin_token_matches(Some(wrong), token), "{wrong:?}");
        }
        assert!(!admin_token_matches(None, token));
    }

    /// Every timestamp shape clients send for `before`: ours, discord.py's
    /// `isoformat()`, discord.js's `toISOString()`, other offsets; and
    /// what is refused.
    #[test]
    fn timestamps_parse_to_unix_microseconds() {
        let cases = [
            (
                "2024-01-01T00:00:00.000000+00:00",
                Some(1_704_067_200_000_000),
            ),
            ("2024-01-01T00:00:00.123Z", Some(1_704_067_200_123_000)),
            ("2024-01-01T00:00:00Z", Some(1_704_067_200_000_000)),
            (
                "2024-01-01T00:00:00.1234567+00:00",
                Some(1_704_067_200_123_456),
            ),
            ("2024-01-01T01:30:00.000+01:30", Some(1_704_067_200_000_000)),
            ("2023-12-31T23:00:00-01:00", Some(1_704_067_200_000_000)),
            ("2000-02-29T00:00:00+00:00", Some(951_782_400_000_000)),
            ("2024-01-01 00:00:00+00:00", Some(1_704_067_200_000_000)),
            ("1970-01-01T00:00:00+00:00", Some(0)),
            ("2023-02-29T00:00:00+00:00", None),
            ("2024-13-01T00:00:00+00:00", None),
            ("2024-01-01T24:00:00+00:00", None),
            ("2024-01-01T00:00:00", None),
            ("2024-01-01T00:00:00.+00:00", None),
            ("2024-01-01", None),
            ("yesterday", None),
            ("", None),
            ("２024-01-01T00:00:00Z", None),
        ];
        for (raw, expected) in cases {
            assert_eq!(parse_timestamp_us(raw), expected, "{raw:?}");
        }
        // What the server formats parses back to the same instant.
        for ms in [0_u64, 1_420_070_400_123, 4_102_444_799_999] {
            assert_eq!(
                parse_timestamp_us(&format_unix_ms(ms)),
                Some(ms as i64 * 1_000)
            );
        }
    }

    #[test]
    fn emoji_segments() {
        assert_eq!(emoji_of("%F0%9F%91%8D").unwrap().1["name"], "👍");
        let (key, custom) = emoji_of("blob:123").unwrap();
        assert_eq!(
            (key.as_str(), custom["id"].as_str()),
            ("blob:123", Some("123"))
        );
        for bad in ["", "blob:", ":123", "blob:x1", "blob:0", &"x".repeat(65)] {
            assert!(emoji_of(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%F0%9F%91%8D"), "👍");
        assert_eq!(percent_decode("blob:123"), "blob:123");
        assert_eq!(percent_decode("bad%zz%4"), "bad%zz%4");
    }
}

async fn reaction(
    node: &ApiState,
    caller: UserRow,
    (channel, message, emoji): (String, String, String),
    add: bool,
) -> ApiResult {
    // Adding needs the history (Discord's Create Reaction); taking one's
    // own back needs nothing more than seeing the channel.
    let need = if add {
        perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY
    } else {
        perm::VIEW_CHANNEL
    };
    let (channel_row, audience, row) = message_of(node, &caller, &channel, &message, need).await?;
    unarchived(node, &channel_row)?;
    let (key, emoji) = emoji_of(&emoji)?;
    // A timed-out member keeps reading, and reacts with nothing (not even
    // an emoji someone else already chose).
    if add
        && matches!(
            audience,
            ChannelAudience::Guild {
                timed_out: true,
                ..
            }
        )
    {
        return Err(ApiError::Code(ErrorCode::MissingPermissions));
    }
    let changed = if add {
        let emoji_max = node.shared.limits.reactions_per_message_max;
        // A DM's members react freely; in a guild the first to react
        // with an emoji needs ADD_REACTIONS.
        let may_add_emoji = match &audience {
            ChannelAudience::Guild { permissions, .. } => permissions & perm::ADD_REACTIONS != 0,
            ChannelAudience::Dm(_) => true,
        };
        match node
            .shared
            .store
            .add_reaction(
                row.channel_id,
                row.id,
                &key,
                caller.id,
                emoji_max as i64,
                may_add_emoji,
            )
            .await?
        {
            ReactionWrite::NewEmojiForbidden => {
                return Err(ApiError::Code(ErrorCode::MissingPermissions));
            }
            ReactionWrite::Added => true,
            // Deleted since `message_of` read it: nothing to announce, as
            // for a reaction that was there already.
            ReactionWrite::AlreadyThere | ReactionWrite::Missing => false,
            ReactionWrite::Full => {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Invalid(ErrorBody {
                    code: MAX_REACTIONS_CODE,
                    message: format!("Maximum number of reactions reached ({emoji_max})"),
                    errors: None,
                }));
            }
        }
    } else {
        node.shared
            .store
            .remove_reaction(row.channel_id, row.id, &key, caller.id)
            .await?
    };
    if changed {
        let name = if add {
            "MESSAGE_REACTION_ADD"
        } else {
            "MESSAGE_REACTION_REMOVE"
        };
        let mut data = json!({
            "user_id": caller.id.to_string(), "channel_id": channel_row.id.to_string(),
            "message_id": row.id.to_string(), "emoji": emoji, "burst": false, "type": 0,
        });
        if add {
            data["message_author_id"] = json!(row.webhook_id.unwrap_or(row.author_id).to_string());
            // A guild's reaction carries the reactor's member; a DM has none.
            if let ChannelAudience::Guild { member, .. } = &audience {
                let mut member = serde_json::to_value(member).unwrap_or_default();
                member["user"] = serde_json::to_value(wire_user(&caller)).unwrap_or_default();
                data["member"] = member;
            }
        }
        audience
            .announce_reaction(node, row.channel_id, name, data)
            .await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn add_reaction(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(p): Path<(String, String, String)>,
) -> ApiResult {
    reaction(&node, caller, p, true).await
}

async fn remove_reaction(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(p): Path<(String, String, String)>,
) -> ApiResult {
    reaction(&node, caller, p, false).await
}

/// MESSAGE_REACTION_REMOVE of `user_id`'s `emoji` by a moderator.
async fn publish_reaction_removed(
    node: &ApiState,
    audience: &ChannelAudience,
    row: &MessageRow,
    user_id: i64,
    emoji: &Value,
) {
    let data = json!({
        "user_id": user_id.to_string(), "channel_id": row.channel_id.to_string(),
        "message_id": row.id.to_string(), "emoji": emoji, "burst": false, "type": 0,
    });
    audience
        .announce_reaction(node, row.channel_id, "MESSAGE_REACTION_REMOVE", data)
        .await;
}

#[derive(Deserialize)]
struct ReactionsQuery {
    after: Option<String>,
    limit: Option<i64>,
    #[serde(rename = "type")]
    kind: Option<i64>,
}

/// Discord's reaction types: normal and burst (super) reactions.
const REACTION_TYPE_NORMAL: i64 = 0;
const REACTION_TYPE_BURST: i64 = 1;

/// `GET .../reactions/{emoji}`: the users who reacted, by id ascending,
/// after `after`, at most `limit` (default 25, Discord's).
async fn reaction_users(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message, emoji)): Path<(String, String, String)>,
    Query(query): Query<ReactionsQuery>,
) -> ApiResult {
    let (channel_row, _, row) = message_of(
        &node,
        &caller,
        &channel,
        &message,
        perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY,
    )
    .await?;
    let (key, _) = emoji_of(&emoji)?;
    let kind = query.kind.unwrap_or(REACTION_TYPE_NORMAL);
    if kind == REACTION_TYPE_BURST {
        // Nobody can super-react here, so nobody has.
        return ok(&Vec::<Value>::new());
    }
    if kind != REACTION_TYPE_NORMAL {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "type",
            "ENUM_TYPE_COERCE",
            format!("Value \"{kind}\" is not a valid enum value."),
        ));
    }
    // "0" is "from the start" (no user id is 0); libraries that always
    // send `after` start from it.
    let after = match query.after.as_deref() {
        None | Some("0") => 0,
        Some(raw) => parse_id(raw)?,
    };
    let limit = query
        .limit
        .unwrap_or(25)
        .clamp(1, node.shared.limits.reaction_users_per_page_max as i64);
    let users = node
        .shared
        .store
        .reaction_users(channel_row.id, row.id, &key, after, limit)
        .await?;
    ok(&users.iter().map(wire_user).collect::<Vec<_>>())
}

/// `DELETE .../reactions/{emoji}/{user_id}`: another user's reaction,
/// removed by one who may manage messages.
async fn remove_user_reaction(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message, emoji, user)): Path<(String, String, String, String)>,
) -> ApiResult {
    let (channel_row, audience, row) = message_of(
        &node,
        &caller,
        &channel,
        &message,
        perm::VIEW_CHANNEL | perm::MANAGE_MESSAGES,
    )
    .await?;
    let (key, emoji) = emoji_of(&emoji)?;
    let user_id = parse_id(&user)?;
    let removed = node
        .shared
        .store
        .remove_reaction(channel_row.id, row.id, &key, user_id)
        .await?;
    if removed {
        publish_reaction_removed(&node, &audience, &row, user_id, &emoji).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE .../reactions/{emoji}`: every reaction with one emoji.
async fn remove_emoji_reactions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message, emoji)): Path<(String, String, String)>,
) -> ApiResult {
    let (channel_row, audience, row) = message_of(
        &node,
        &caller,
        &channel,
        &message,
        perm::VIEW_CHANNEL | perm::MANAGE_MESSAGES,
    )
    .await?;
    let (key, emoji) = emoji_of(&emoji)?;
    let removed = node
        .shared
        .store
        .remove_emoji_reactions(channel_row.id, row.id, &key)
        .await?;
    // Nothing removed is nothing to announce, as for one reaction.
    if removed {
        let data = json!({
            "channel_id": row.channel_id.to_string(), "message_id": row.id.to_string(),
            "emoji": emoji,
        });
        audience
            .announce_reaction(&node, row.channel_id, "MESSAGE_REACTION_REMOVE_EMOJI", data)
            .await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `DELETE .../reactions`: every reaction of the message.
async fn remove_all_reactions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
) -> ApiResult {
    let (channel_row, audience, row) = message_of(
        &node,
        &caller,
        &channel,
        &message,
        perm::VIEW_CHANNEL | perm::MANAGE_MESSAGES,
    )
    .await?;
    let removed = node
        .shared
        .store
        .remove_all_reactions(channel_row.id, row.id)
        .await?;
    if removed {
        let data = json!({
            "channel_id": row.channel_id.to_string(), "message_id": row.id.to_string(),
        });
        audience
            .announce_reaction(&node, row.channel_id, "MESSAGE_REACTION_REMOVE_ALL", data)
            .await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- pins -----------------------------------------------------------------

/// Where a channel's events go and what the caller may do there: a guild
/// channel's through the guild's owner, with the caller's permissions; a
/// DM's to its members' sessions. A DM has no permissions: its members
/// read, react, pin and edit or delete their own messages, and moderate
/// nothing.
enum ChannelAudience {
    /// The guild, and the caller's permissions and member there (read
    /// once, before any write: an event after a write never waits on, or
    /// fails for, a second look at the guild).
    Guild {
        guild_id: i64,
        permissions: u64,
        member: Box<guildhall_proto::model::Member>,
        /// A timeout runs: the caller only reads.
        timed_out: bool,
    },
    /// The DM's members.
    Dm(Vec<i64>),
}

impl ChannelAudience {
    fn guild_id(&self) -> Option<i64> {
        match self {
            ChannelAudience::Guild { guild_id, .. } => Some(*guild_id),
            ChannelAudience::Dm(_) => None,
        }
    }

    /// The guild, for an action only a guild has (a moderator's); 50003
    /// in a DM, as Discord answers.
    fn guild_only(&self) -> Result<i64, ApiError> {
        self.guild_id()
            .ok_or(ApiError::Code(ErrorCode::CannotExecuteOnDm))
    }

    /// A reaction event (`data` without `guild_id`): to the guild's
    /// sessions with GUILD_MESSAGE_REACTIONS and the guild's id added, or
    /// to the DM's members with DIRECT_MESSAGE_REACTIONS.
    async fn announce_reaction(
        &self,
        node: &ApiState,
        channel_id: i64,
        name: &str,
        mut data: Value,
    ) {
        match self {
            ChannelAudience::Guild { guild_id, .. } => {
                data["guild_id"] = json!(guild_id.to_string());
                publish_plain(
                    node,
                    *guild_id,
                    channel_id,
                    name,
                    intents::GUILD_MESSAGE_REACTIONS,
                    &data,
                )
                .await;
            }
            ChannelAudience::Dm(members) => node.gateways().to_users_in(
                None,
                members.clone(),
                intents::DIRECT_MESSAGE_REACTIONS,
                name,
                &data,
            ),
        }
    }

    /// A message event (MESSAGE_UPDATE): through the guild's owner (which
    /// hides content from sessions without MESSAGE_CONTENT), or to the
    /// DM's members with DIRECT_MESSAGES.
    async fn announce_message(
        &self,
        node: &ApiState,
        name: &str,
        message: &Message,
        author_id: i64,
    ) {
        match self {
            ChannelAudience::Guild { guild_id, .. } => {
                publish_message(node, name, *guild_id, message, author_id).await;
            }
            ChannelAudience::Dm(members) => {
                node.gateways().to_users_in(
                    None,
                    members.clone(),
                    intents::DIRECT_MESSAGES,
                    name,
                    message,
                );
            }
        }
    }
}

/// The channel `channel_id` names, if the caller may see it and has
/// `need` there: a guild channel's permissions; a DM needs membership,
/// and refuses MANAGE_MESSAGES with 50003 (nobody moderates a DM).
async fn channel_audience(
    node: &ApiState,
    caller: &UserRow,
    channel_id: &str,
    need: u64,
) -> Result<(ChannelRow, ChannelAudience), ApiError> {
    let channel = node
        .shared
        .store
        .channel(parse_id(channel_id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
    let audience = match channel.guild_id {
        Some(guild_id) => {
            let grant = authorize(node, caller.id, &channel, guild_id, need).await?;
            ChannelAudience::Guild {
                guild_id,
                permissions: grant.permissions,
                member: Box::new(grant.member),
                timed_out: grant.timed_out,
            }
        }
        None => {
            let members = dm_of(node, caller, &channel).await?;
            if need & perm::MANAGE_MESSAGES != 0 {
                return Err(ApiError::Code(ErrorCode::CannotExecuteOnDm));
            }
            ChannelAudience::Dm(members)
        }
    };
    Ok((channel, audience))
}

/// A pin or unpin of `message_id`, announced as Discord does: the
/// message's MESSAGE_UPDATE with its new `pinned` (discord.py's
/// `on_message_edit` and every message cache read it from there), then
/// CHANNEL_PINS_UPDATE with the channel's newest pin time (null: none
/// left). GUILD_MESSAGES / GUILDS carry them in a guild, DIRECT_MESSAGES
/// in a DM. A message that cannot be rendered now (deleted since, its
/// author gone) has no update to show; the pins update still goes out.
async fn publish_pins_update(
    node: &ApiState,
    channel: &ChannelRow,
    audience: &ChannelAudience,
    message_id: i64,
    pinned: bool,
    newest_ms: Option<i64>,
) {
    if let Ok(Some(row)) = node.shared.store.message(channel.id, message_id).await
        && let Ok(Some(author)) = node.shared.store.user(row.author_id).await
    {
        let mut message = wire_message(&node.files, &row, &author, None);
        // As the store has it now, not as this request left it: a pin and
        // an unpin that race each announce the state that stands.
        message.pinned = is_pinned(node, &row).await.unwrap_or(pinned);
        if let Ok(message) =
            with_referenced(node, &row, message, &[], None, &mut Authors::new()).await
        {
            audience
                .announce_message(node, "MESSAGE_UPDATE", &message, row.author_id)
                .await;
        }
    }
    let last_pin_timestamp = newest_ms.map(|ms| format_unix_ms(ms as u64));
    match audience {
        ChannelAudience::Guild { guild_id, .. } => {
            let data = json!({
                "guild_id": guild_id.to_string(), "channel_id": channel.id.to_string(),
                "last_pin_timestamp": last_pin_timestamp,
            });
            publish_plain(
                node,
                *guild_id,
                channel.id,
                "CHANNEL_PINS_UPDATE",
                intents::GUILDS,
                &data,
            )
            .await;
        }
        ChannelAudience::Dm(members) => {
            let data = json!({
                "channel_id": channel.id.to_string(), "last_pin_timestamp": last_pin_timestamp,
            });
            node.gateways().to_users_in(
                None,
                members.clone(),
                intents::DIRECT_MESSAGES,
                "CHANNEL_PINS_UPDATE",
                &data,
            );
        }
    }
}

/// Discord's "pinned a message" notice: a CHANNEL_PINNED_MESSAGE (type 6)
/// message by the pinner, empty, whose `message_reference` names the
/// pinned message, posted after the pin like any message (durable, then
/// MESSAGE_CREATE). The pin stands whatever becomes of the notice: one
/// that cannot be stored now is counted and logged, and the pin is not
/// undone for it.
async fn pin_notice(
    node: &ApiState,
    caller: &UserRow,
    channel: &ChannelRow,
    audience: &ChannelAudience,
    message_id: i64,
) {
    let row = MessageRow {
        kind: MESSAGE_TYPE_CHANNEL_PINNED_MESSAGE,
        reference_kind: Some(i64::from(replies::KIND_DEFAULT)),
        reference_message_id: Some(message_id),
        reference_channel_id: Some(channel.id),
        reference_guild_id: channel.guild_id,
        ..MessageRow::plain(
            node.shared.next_id().get() as i64,
            channel.id,
            channel.guild_id,
            caller.id,
            String::new(),
        )
    };
    if let Err(error) = store_message(node, &row).await {
        node.counters
            .pin_notices_failed_total
            .fetch_add(1, Ordering::Relaxed);
        guildhall_common::throttled!(
            warn,
            "api.pin_notice_failed",
            channel_id = channel.id,
            ?error,
            "pin notice not stored"
        );
        return;
    }
    // A guild's message carries its author's member, as every other.
    let member = match audience {
        ChannelAudience::Guild { member, .. } => Some((**member).clone()),
        ChannelAudience::Dm(_) => None,
    };
    let message = wire_message(&node.files, &row, caller, member);
    audience
        .announce_message(node, "MESSAGE_CREATE", &message, caller.id)
        .await;
}

/// `PUT /channels/{id}/messages/pins/{message}` (and the deprecated
/// `/channels/{id}/pins/{message}`). Pinning a pinned message changes
/// nothing and announces nothing.
async fn pin(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
) -> ApiResult {
    let (channel, audience) =
        channel_audience(&node, &caller, &channel, perm::VIEW_CHANNEL | PIN_MESSAGES).await?;
    let message_id = parse_id(&message)?;
    let pins_max = node.shared.limits.pins_per_channel_max as i64;
    match node
        .shared
        .store
        .pin_message(channel.id, message_id, now_ms() as i64, pins_max)
        .await?
    {
        PinWrite::Pinned(pinned_ms) => {
            publish_pins_update(
                &node,
                &channel,
                &audience,
                message_id,
                true,
                Some(pinned_ms),
            )
            .await;
            pin_notice(&node, &caller, &channel, &audience, message_id).await;
            pin_audit(&node, &caller, &channel, &audience, message_id, true).await;
        }
        PinWrite::AlreadyPinned => {}
        PinWrite::Missing => return Err(ApiError::Code(ErrorCode::UnknownMessage)),
        PinWrite::Full => {
            node.counters
                .bad_requests_total
                .fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::Invalid(ErrorBody {
                code: MAX_PINS_CODE,
                message: format!("Maximum number of pins reached for the channel ({pins_max})"),
                errors: None,
            }));
        }
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A guild pin or unpin's audit entry (target: the message's author).
async fn pin_audit(
    node: &ApiState,
    caller: &UserRow,
    channel: &ChannelRow,
    audience: &ChannelAudience,
    message_id: i64,
    pinned: bool,
) {
    let ChannelAudience::Guild { guild_id, .. } = audience else {
        return;
    };
    let author = match node.shared.store.message(channel.id, message_id).await {
        Ok(Some(row)) => Some(row.author_id),
        _ => None,
    };
    let action = if pinned {
        guildhall_proto::audit::MESSAGE_PIN
    } else {
        guildhall_proto::audit::MESSAGE_UNPIN
    };
    let options =
        json!({"channel_id": channel.id.to_string(), "message_id": message_id.to_string()});
    audit(
        node,
        *guild_id,
        caller.id,
        action,
        author,
        vec![],
        Some(options),
    )
    .await;
}

/// `DELETE /channels/{id}/messages/pins/{message}` (and the deprecated
/// `/channels/{id}/pins/{message}`). Unpinning a message that is not
/// pinned changes nothing and announces nothing.
async fn unpin(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((channel, message)): Path<(String, String)>,
) -> ApiResult {
    let (channel, audience) =
        channel_audience(&node, &caller, &channel, perm::VIEW_CHANNEL | PIN_MESSAGES).await?;
    let message_id = parse_id(&message)?;
    // An ephemeral message is another reader's: unknown, as on every route.
    let visible = node
        .shared
        .store
        .message(channel.id, message_id)
        .await?
        .is_some_and(|row| row.visible_to.is_none_or(|reader| reader == caller.id));
    if !visible {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    match node
        .shared
        .store
        .unpin_message(channel.id, message_id)
        .await?
    {
        UnpinWrite::Unpinned(newest_ms) => {
            publish_pins_update(&node, &channel, &audience, message_id, false, newest_ms).await;
            pin_audit(&node, &caller, &channel, &audience, message_id, false).await;
        }
        UnpinWrite::NotPinned => {}
        UnpinWrite::Missing => return Err(ApiError::Code(ErrorCode::UnknownMessage)),
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// A channel's pins, newest first, pinned before `before_ms`, at most
/// `limit` (already within `pins_per_page_max`), rendered with
/// `pinned: true`; empty for a guild member without READ_MESSAGE_HISTORY,
/// as Discord documents.
async fn pins_page(
    node: &ApiState,
    caller: &UserRow,
    channel_id: &str,
    before_ms: Option<i64>,
    limit: i64,
) -> Result<Vec<(PinRow, Message)>, ApiError> {
    let (channel, audience) =
        channel_audience(node, caller, channel_id, perm::VIEW_CHANNEL).await?;
    if let ChannelAudience::Guild { permissions, .. } = audience
        && permissions & perm::READ_MESSAGE_HISTORY == 0
    {
        return Ok(vec![]);
    }
    let pins = node.shared.store.pins(channel.id, before_ms, limit).await?;
    let page: Vec<MessageRow> = pins.iter().map(|pin| pin.message.clone()).collect();
    let pinned: HashSet<i64> = page.iter().map(|row| row.id).collect();
    let ids: Vec<i64> = page.iter().map(|row| row.id).collect();
    let mut reactions = reactions_in(node, channel.id, &ids, caller.id).await?;
    let mut authors = Authors::new();
    let mut out = Vec::with_capacity(pins.len());
    for pin in pins {
        let Some(mut message) = author_of(node, &mut authors, pin.message.author_id)
            .await?
            .map(|author| wire_message(&node.files, &pin.message, author, None))
        else {
            continue;
        };
        message.pinned = true;
        message.reactions = reactions.remove(&pin.message.id);
        // A reply to another pin is resolved from the page (whose pins
        // are all the page's pinned ids); anything else from the store.
        let message = with_referenced(
            node,
            &pin.message,
            message,
            &page,
            Some(&pinned),
            &mut authors,
        )
        .await?;
        out.push((pin, message));
    }
    Ok(out)
}

/// `GET /channels/{id}/pins` (deprecated): the newest
/// `pins_per_page_max` pins (Discord's first 50) as messages.
async fn legacy_pins(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(channel): Path<String>,
) -> ApiResult {
    let limit = node.shared.limits.pins_per_page_max as i64;
    let page = pins_page(&node, &caller, &channel, None, limit).await?;
    ok(&page
        .into_iter()
        .map(|(_, message)| message)
        .collect::<Vec<_>>())
}

#[derive(Deserialize)]
struct PinsQuery {
    before: Option<String>,
    limit: Option<i64>,
}

/// `GET /channels/{id}/messages/pins`: `{items: [{pinned_at, message}],
/// has_more}`, newest pin first, pinned before `before` (an ISO 8601
/// timestamp), at most `limit` (1-50, default 50).
async fn list_pins(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(channel): Path<String>,
    Query(query): Query<PinsQuery>,
) -> ApiResult {
    let page_max = node.shared.limits.pins_per_page_max as i64;
    let limit = query.limit.unwrap_or(page_max).clamp(1, page_max);
    let before_ms = match query.before.as_deref() {
        None => None,
        // Pins are kept to the millisecond: "before 12.3456 s" includes a
        // pin at 12.345 s, so the bound is the next millisecond up.
        Some(raw) => match parse_timestamp_us(raw) {
            Some(us) => Some(us.div_euclid(1_000) + i64::from(us.rem_euclid(1_000) != 0)),
            None => {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Field(
                    "before",
                    "DATE_TYPE_PARSE",
                    format!("Could not interpret \"{raw}\" as a date. Should be ISO8601."),
                ));
            }
        },
    };
    // One more than asked says whether there is more.
    let mut page = pins_page(&node, &caller, &channel, before_ms, limit + 1).await?;
    let has_more = page.len() as i64 > limit;
    page.truncate(limit as usize);
    let items: Vec<Value> = page
        .into_iter()
        .map(|(pin, message)| {
            json!({"pinned_at": format_unix_ms(pin.pinned_ms as u64), "message": message})
        })
        .collect();
    ok(&json!({"items": items, "has_more": has_more}))
}

/// Unix microseconds of an ISO 8601 date-time with an offset:
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` (`T` or a space; digits
/// of the fraction beyond microseconds are dropped). `None` for anything
/// else, a time without an offset included (its zone is unknown). By hand,
/// as `guildhall_proto::timestamp` formats: one shape does not justify a
/// date-time crate.
fn parse_timestamp_us(raw: &str) -> Option<i64> {
    fn number(digits: &[u8]) -> Option<i64> {
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0_i64, |n, d| n * 10 + i64::from(d - b'0')),
        )
    }
    let b = raw.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (number(&b[0..4])?, number(&b[5..7])?, number(&b[8..10])?);
    let (hour, minute, second) = (
        number(&b[11..13])?,
        number(&b[14..16])?,
        number(&b[17..19])?,
    );
    let mut rest = &b[19..];
    let mut micros = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        let kept = &fraction[..digits.min(6)];
        micros = number(kept)? * 10_i64.pow(6 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset_s = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (number(&[*h1, *h2])?, number(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let offset = h * 3_600 + m * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=month_days).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Howard Hinnant's days_from_civil (the inverse of the formatter's).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    Some(seconds * 1_000_000 + micros)
}

/// Oldest message bulk delete takes: Discord's two weeks (a protocol rule,
/// not a bound on this server's resources).
const BULK_DELETE_AGE_MS: u64 = 14 * 24 * 3_600 * 1_000;

#[derive(Deserialize)]
struct BulkDelete {
    messages: Vec<String>,
}

async fn bulk_delete(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<BulkDelete>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    if !(2..=100).contains(&body.messages.len()) {
        return Err(ApiError::Field(
            "messages",
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 2 and 100 in length.".into(),
        ));
    }
    authorize(&node, caller.id, &channel, guild_id, perm::MANAGE_MESSAGES).await?;
    let ids = body
        .messages
        .iter()
        .map(|m| parse_id(m))
        .collect::<Result<Vec<_>, _>>()?;
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() != ids.len() {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "messages",
            "BASE_TYPE_BAD",
            "Duplicate message ids.".into(),
        ));
    }
    // Discord refuses the whole request if any id is older than two weeks
    // (the age is in the id itself).
    let oldest_ms = now_ms().saturating_sub(BULK_DELETE_AGE_MS);
    if ids.iter().any(|id| sf(*id).unix_ms() < oldest_ms) {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Code(ErrorCode::BulkDeleteTooOld));
    }
    // Ids that are not messages of this channel (of another channel or
    // guild, or none) count toward the 2-100 but are left alone, as
    // Discord documents; only what was deleted is announced.
    let deleted = node
        .shared
        .store
        .delete_messages_with_files(channel.id, &ids)
        .await?;
    if deleted.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    for (_, attachments) in &deleted {
        node.files.forget(channel.id, attachments.as_deref());
    }
    let deleted: Vec<String> = deleted.iter().map(|(id, _)| id.to_string()).collect();
    let data = json!({"ids": deleted, "channel_id": channel.id.to_string(), "guild_id": guild_id.to_string()});
    publish_plain(
        &node,
        guild_id,
        channel.id,
        "MESSAGE_DELETE_BULK",
        intents::GUILD_MESSAGES,
        &data,
    )
    .await;
    let options = json!({"count": deleted.len().to_string()});
    audit(
        &node,
        guild_id,
        caller.id,
        guildhall_proto::audit::MESSAGE_BULK_DELETE,
        Some(channel.id),
        vec![],
        Some(options),
    )
    .await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- direct messages ------------------------------------------------------

async fn dm_json(node: &ApiState, channel: &ChannelRow, viewer: i64) -> Result<Value, ApiError> {
    let mut recipients = Vec::new();
    for user_id in node.shared.store.dm_members(channel.id).await? {
        if user_id != viewer
            && let Some(user) = node.shared.store.user(user_id).await?
        {
            recipients.push(wire_user(&user));
        }
    }
    Ok(
        json!({"id": channel.id.to_string(), "type": 1, "last_message_id": null, "flags": 0, "recipients": recipients}),
    )
}

#[derive(Deserialize)]
struct NewDm {
    recipient_id: Value,
}

async fn create_dm(
    State(node): State<AppState>,
    Caller(caller): Caller,
    JsonBody(body): JsonBody<NewDm>,
) -> ApiResult {
    let recipient = id_from_value(&body.recipient_id)?;
    node.shared
        .store
        .user(recipient)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownUser))?;
    let channel = node
        .shared
        .store
        .dm_channel(caller.id, recipient, node.shared.next_id().get() as i64)
        .await?;
    ok(&dm_json(&node, &channel, caller.id).await?)
}

/// A DM channel the caller is in: its members.
async fn dm_of(
    node: &ApiState,
    caller: &UserRow,
    channel: &ChannelRow,
) -> Result<Vec<i64>, ApiError> {
    let members = node.shared.store.dm_members(channel.id).await?;
    if members.contains(&caller.id) {
        Ok(members)
    } else {
        Err(ApiError::Code(ErrorCode::MissingAccess))
    }
}

// ----- invites --------------------------------------------------------------

/// Discord's bounds on an invite's settings (part of the documented
/// contract, not tunables): at most 7 days of age, at most 100 uses.
const INVITE_MAX_AGE_S_MAX: i64 = 604_800;
/// See [`INVITE_MAX_AGE_S_MAX`].
const INVITE_MAX_USES_MAX: i64 = 100;
/// An invite's age when the request does not say (24 hours).
const INVITE_MAX_AGE_S_DEFAULT: i64 = 86_400;

/// `POST /channels/{id}/invites`'s body. The voice channel targets are
/// refused (50035), not dropped: nobody can stream or run an embedded
/// application here, which they require.
#[derive(Deserialize)]
struct NewInvite {
    max_age: Option<i64>,
    max_uses: Option<i64>,
    #[serde(default)]
    temporary: bool,
    #[serde(default)]
    unique: bool,
    /// Every other field, checked by `UNSUPPORTED_INVITE_FIELDS`.
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

const UNSUPPORTED_INVITE_FIELDS: &[(&str, &str)] = &[
    ("target_type", "null"),
    ("target_user_id", "null"),
    ("target_application_id", "null"),
    ("target_users_file", "null"),
    ("role_ids", "[]"),
];

/// An invite's wire object from what the caller has read: its guild's
/// name and its channel's (type, name). `metadata` adds the
/// invite metadata object's fields (uses, max_uses, max_age, temporary,
/// created_at), which the guild's managers see.
fn wire_invite(
    invite: &InviteRow,
    guild_name: &str,
    channel: (i64, &str),
    inviter: Option<&UserRow>,
    metadata: bool,
) -> Value {
    let mut value = json!({
        "type": 0, "code": invite.code,
        "guild": {"id": invite.guild_id.to_string(), "name": guild_name, "icon": null, "splash": null, "banner": null,
                  "description": null, "features": [], "verification_level": 0, "vanity_url_code": null, "nsfw_level": 0},
        "channel": {"id": invite.channel_id.to_string(), "type": channel.0, "name": channel.1},
        "inviter": inviter.map(wire_user),
        "expires_at": invite.expires_ms.map(|ms| format_unix_ms(ms.max(0) as u64)),
    });
    if metadata {
        value["uses"] = json!(invite.uses);
        value["max_uses"] = json!(invite.max_uses);
        value["max_age"] = json!(invite.max_age_s);
        value["temporary"] = json!(invite.temporary);
        value["created_at"] = json!(format_unix_ms(invite.created_ms.max(0) as u64));
    }
    value
}

/// The invite object of `code`, unexpired. Two indexed reads whatever the
/// guild's size: the member count is the one the store keeps with every
/// join and leave, rather than the guild owner's (asking the owner would
/// load the whole guild, members and all, for an unauthenticated request)
/// or a count over the members (which grows with them).
async fn invite_json(
    node: &ApiState,
    code: &str,
    with_counts: bool,
    metadata: bool,
) -> Result<Value, ApiError> {
    let preview = live_invite(node, code).await?;
    invite_value(node, &preview, with_counts, metadata).await
}

/// The unexpired invite `code` with what its preview shows (one indexed
/// read); 10006 if there is none.
async fn live_invite(node: &ApiState, code: &str) -> Result<InvitePreviewRow, ApiError> {
    node.shared
        .store
        .invite_preview(code)
        .await?
        .filter(|p| !p.invite.expired(now_ms() as i64))
        .ok_or(ApiError::Code(ErrorCode::UnknownInvite))
}

/// [`invite_json`] of a preview already read.
async fn invite_value(
    node: &ApiState,
    preview: &InvitePreviewRow,
    with_counts: bool,
    metadata: bool,
) -> Result<Value, ApiError> {
    let invite = &preview.invite;
    let inviter = node.shared.store.user(invite.inviter_id).await?;
    let mut value = wire_invite(
        invite,
        &preview.guild_name,
        (preview.channel_kind, &preview.channel_name),
        inviter.as_ref(),
        metadata,
    );
    if with_counts {
        value["approximate_member_count"] = json!(preview.member_count);
        value["approximate_presence_count"] = json!(0);
    }
    Ok(value)
}

/// `with_counts` and `with_expiration` (the latter always honoured:
/// `expires_at` is in every invite, as Discord now documents).
#[derive(Deserialize)]
struct InviteQuery {
    #[serde(default)]
    with_counts: bool,
    #[serde(default)]
    #[allow(dead_code)]
    with_expiration: bool,
}

/// What INVITE_CREATE carries.
fn invite_create_event(invite: &InviteRow, inviter: &UserRow) -> Value {
    json!({
        "channel_id": invite.channel_id.to_string(), "code": invite.code,
        "created_at": format_unix_ms(invite.created_ms.max(0) as u64),
        "guild_id": invite.guild_id.to_string(), "inviter": wire_user(inviter),
        "max_age": invite.max_age_s, "max_uses": invite.max_uses,
        "temporary": invite.temporary, "uses": invite.uses,
        "expires_at": invite.expires_ms.map(|ms| format_unix_ms(ms.max(0) as u64)),
    })
}

/// Announces a deleted (or used-up) invite to the channel's managers.
async fn announce_invite_delete(node: &ApiState, invite: &InviteRow) {
    let data = json!({
        "channel_id": invite.channel_id.to_string(),
        "guild_id": invite.guild_id.to_string(),
        "code": invite.code,
    });
    publish_holding(
        node,
        invite.guild_id,
        invite.channel_id,
        perm::MANAGE_CHANNELS,
        "INVITE_DELETE",
        intents::GUILD_INVITES,
        &data,
    )
    .await;
}

/// `max_age` or `max_uses` within 0..=`max`.
fn invite_bound(
    node: &ApiState,
    field: &'static str,
    value: Option<i64>,
    default: i64,
    max: i64,
) -> Result<i64, ApiError> {
    let value = value.unwrap_or(default);
    if (0..=max).contains(&value) {
        return Ok(value);
    }
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    Err(if value < 0 {
        ApiError::Field(
            field,
            "NUMBER_TYPE_MIN",
            "int value should be greater than or equal to 0.".into(),
        )
    } else {
        ApiError::Field(
            field,
            "NUMBER_TYPE_MAX",
            format!("int value should be less than or equal to {max}."),
        )
    })
}

/// `POST /channels/{id}/invites`: CREATE_INSTANT_INVITE. Without
/// `unique`, an unexpired invite of the caller's to the channel with the
/// same settings is answered instead of a new one (as Discord does). A
/// guild holds at most `guild_invites_max` invites (expired ones are
/// pruned first; 30016 when still full).
async fn create_invite(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<NewInvite>,
) -> ApiResult {
    unsupported_fields(&node, &body.rest, UNSUPPORTED_INVITE_FIELDS)?;
    let max_age_s = invite_bound(
        &node,
        "max_age",
        body.max_age,
        INVITE_MAX_AGE_S_DEFAULT,
        INVITE_MAX_AGE_S_MAX,
    )?;
    let max_uses = invite_bound(&node, "max_uses", body.max_uses, 0, INVITE_MAX_USES_MAX)?;
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    authorize(
        &node,
        caller.id,
        &channel,
        guild_id,
        perm::CREATE_INSTANT_INVITE,
    )
    .await?;
    let now = now_ms() as i64;
    let mut invite = InviteRow {
        code: String::new(),
        guild_id,
        channel_id: channel.id,
        inviter_id: caller.id,
        uses: 0,
        max_uses,
        created_ms: now,
        max_age_s,
        expires_ms: (max_age_s > 0).then(|| now.saturating_add(max_age_s * 1_000)),
        temporary: body.temporary,
        ..InviteRow::default()
    };
    let store = &node.shared.store;
    if !body.unique
        && let Some(existing) = store.similar_invite(&invite, now).await?
    {
        return ok(&invite_json(&node, &existing.code, false, true).await?);
    }
    let max = node.shared.limits.guild_invites_max as i64;
    if store.prune_invites(guild_id, now).await? >= max {
        return Err(ApiError::Code(ErrorCode::MaxInvites));
    }
    invite.code = auth::new_code().map_err(|_| ApiError::Internal)?;
    store.create_invite(&invite).await?;
    let value = invite_json(&node, &invite.code, false, true).await?;
    audit(
        &node,
        guild_id,
        caller.id,
        guildhall_proto::audit::INVITE_CREATE,
        None,
        invite_changes(&invite, true),
        None,
    )
    .await;
    publish_holding(
        &node,
        guild_id,
        channel.id,
        perm::MANAGE_CHANNELS,
        "INVITE_CREATE",
        intents::GUILD_INVITES,
        &invite_create_event(&invite, &caller),
    )
    .await;
    ok(&value)
}

/// Invite objects with metadata for `rows`: one read for the guild, one
/// per distinct channel (at most the guild's channels) and one for the
/// inviters, whatever the number of invites.
async fn wire_invites(
    node: &ApiState,
    guild_id: i64,
    rows: &[InviteRow],
) -> Result<Value, ApiError> {
    let store = &node.shared.store;
    let guild = store.guild(guild_id).await?;
    let mut channels: HashMap<i64, ChannelRow> = HashMap::new();
    for row in rows {
        if !channels.contains_key(&row.channel_id)
            && let Some(channel) = store.channel(row.channel_id).await?
        {
            channels.insert(channel.id, channel);
        }
    }
    let mut inviter_ids: Vec<i64> = rows.iter().map(|r| r.inviter_id).collect();
    inviter_ids.sort_unstable();
    inviter_ids.dedup();
    let inviters: HashMap<i64, UserRow> = store
        .users_by_ids(&inviter_ids)
        .await?
        .into_iter()
        .map(|u| (u.id, u))
        .collect();
    let listed: Vec<Value> = rows
        .iter()
        .filter_map(|row| {
            let channel = channels.get(&row.channel_id)?;
            Some(wire_invite(
                row,
                guild.as_ref().map_or("", |g| g.name.as_str()),
                (channel.kind, &channel.name),
                inviters.get(&row.inviter_id),
                true,
            ))
        })
        .collect();
    Ok(Value::Array(listed))
}

/// `GET /channels/{id}/invites`: MANAGE_CHANNELS; the channel's
/// unexpired invites with metadata.
async fn channel_invites(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &id).await?;
    authorize(&node, caller.id, &channel, guild_id, perm::MANAGE_CHANNELS).await?;
    let max = node.shared.limits.guild_invites_max as i64;
    let rows = node
        .shared
        .store
        .invites(guild_id, channel.id, now_ms() as i64, max)
        .await?;
    ok(&wire_invites(&node, guild_id, &rows).await?)
}

/// `GET /guilds/{id}/invites`: MANAGE_GUILD; the guild's unexpired
/// invites with metadata (at most `guild_invites_max`, the cap on them).
async fn guild_invites(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&id)?;
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::MANAGE_GUILD)
        .await?;
    let max = node.shared.limits.guild_invites_max as i64;
    let rows = node
        .shared
        .store
        .invites(guild_id, 0, now_ms() as i64, max)
        .await?;
    ok(&wire_invites(&node, guild_id, &rows).await?)
}

/// `GET /invites/{code}`: anyone, unauthenticated callers included (one
/// or two indexed reads).
async fn get_invite(
    State(node): State<AppState>,
    Path(code): Path<String>,
    Query(query): Query<InviteQuery>,
) -> ApiResult {
    ok(&invite_json(&node, &code, query.with_counts, false).await?)
}

/// `DELETE /invites/{code}`: MANAGE_CHANNELS on its channel or
/// MANAGE_GUILD; answers the invite; INVITE_DELETE.
async fn delete_invite(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(code): Path<String>,
) -> ApiResult {
    let store = &node.shared.store;
    let preview = live_invite(&node, &code).await?;
    let invite = &preview.invite;
    let guilds = &node.guilds;
    let in_channel = guilds
        .authorize(
            invite.guild_id,
            caller.id,
            invite.channel_id,
            perm::MANAGE_CHANNELS,
        )
        .await;
    if in_channel.is_err() {
        guilds
            .authorize(invite.guild_id, caller.id, GUILD_WIDE, perm::MANAGE_GUILD)
            .await?;
    }
    let value = invite_value(&node, &preview, false, true).await?;
    if store.delete_invite(&code).await? {
        announce_invite_delete(&node, invite).await;
        audit(
            &node,
            invite.guild_id,
            caller.id,
            guildhall_proto::audit::INVITE_DELETE,
            None,
            invite_changes(invite, false),
            None,
        )
        .await;
    }
    ok(&value)
}

/// `POST /invites/{code}`: joins the guild. A banned user is refused
/// (40007) before a use is counted; an invite is gone once expired or
/// used up (the last use deletes it, INVITE_DELETE).
async fn accept_invite(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(code): Path<String>,
) -> ApiResult {
    let store = &node.shared.store;
    let now = now_ms() as i64;
    let preview = live_invite(&node, &code).await?;
    let invite = &preview.invite;
    if store.ban(invite.guild_id, caller.id).await?.is_some() {
        return Err(GuildError::Banned.into());
    }
    let value = invite_value(&node, &preview, false, false).await?;
    let uses = store
        .use_invite(&code, now)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownInvite))?;
    if invite.max_uses > 0 && uses >= invite.max_uses && store.delete_invite(&code).await? {
        announce_invite_delete(&node, invite).await;
    }
    node.guilds
        .add_member(invite.guild_id, (&caller).into(), invite.temporary)
        .await?;
    ok(&value)
}

// ----- operator endpoints -------------------------------------------------------

#[derive(Deserialize)]
struct AdminBot {
    name: String,
    owner: Value,
}

/// Whether `presented` is the admin token, in time independent of where
/// (or whether) they differ: a byte-by-byte `==` stops at the first
/// difference, so response times would let a caller find the token one byte
/// at a time. Both sides are hashed first so the comparison also runs over a
/// fixed length (the token's length leaks nothing), and the digests are
/// compared with `subtle`'s constant-time equality (`subtle` is already in
/// the dependency tree through the password hasher, so it costs no new
/// crate).
fn admin_token_matches(presented: Option<&str>, admin_token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some(presented) = presented else {
        return false;
    };
    let presented = auth::token_digest(presented);
    let expected = auth::token_digest(admin_token);
    bool::from(presented.ct_eq(&expected))
}

/// `guildhall bot create` talks to this with the admin token from the data
/// directory, so it works while the server runs.
async fn admin_create_bot(
    State(node): State<AppState>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<AdminBot>,
) -> ApiResult {
    if !admin_token_matches(bearer(&headers), &node.admin_token) {
        return Err(ApiError::Unauthorized);
    }
    let owner_id = id_from_value(&body.owner)?;
    let owner = node
        .shared
        .store
        .user(owner_id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownUser))?;
    let (app, bot) = create_application_for(&node, &owner, &body.name).await?;
    let token = issue_token(&node, bot.id).await?;
    ok(
        &json!({"application_id": app.id.to_string(), "user_id": bot.id.to_string(), "token": token}),
    )
}

/// Gives Discord's error body to the answers axum makes itself: a path
/// segment that does not parse (400), a method the route lacks (405), a
/// body of the wrong media type (415). They come as plain text, and client
/// libraries parse every error body as JSON (discord.js throws on a body
/// it cannot parse, losing the status). Headers (`Allow`, `Retry-After`)
/// are kept.
pub async fn discord_error_bodies(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    let body = if matches!(status.as_u16(), 400 | 415 | 422) {
        ErrorBody::new(ErrorCode::InvalidFormBody)
    } else {
        ErrorBody {
            code: ErrorCode::General.code(),
            message: format!(
                "{}: {}",
                status.as_u16(),
                status.canonical_reason().unwrap_or("Error")
            ),
            errors: None,
        }
    };
    let fresh = json_response(status, &body);
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in fresh.headers() {
        parts.headers.insert(name, value.clone());
    }
    Response::from_parts(parts, fresh.into_body())
}

/// The REST routes, relative to `/api/v10` (and `/api/v9`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/gateway", get(get_gateway))
        .route("/gateway/bot", get(get_gateway_bot))
        .route("/attachments/refresh-urls", post(files::refresh_urls))
        .route("/auth/register", post(register))
        .route("/auth/login", post(login))
        .route("/users/@me", get(me).patch(patch_me))
        .route("/users/{id}", get(get_user))
        .route("/users/@me/channels", post(create_dm))
        .route("/users/@me/guilds/{id}", axum::routing::delete(leave_guild))
        .route("/users/@me/guilds/{id}/member", get(my_member))
        .route("/oauth2/applications/@me", get(my_application))
        .route(
            "/applications/@me",
            get(my_application).patch(edit_my_application),
        )
        .route("/users/@me/guilds", get(my_guilds))
        .route("/oauth2/authorize", post(oauth2_authorize))
        .route("/applications", post(create_application))
        .route(
            "/applications/{id}",
            get(get_application).patch(edit_application),
        )
        .route("/applications/{id}/bot/reset", post(reset_bot_token))
        .route("/guilds", post(create_guild))
        .route(
            "/guilds/{id}",
            get(get_guild).patch(patch_guild).delete(delete_guild),
        )
        .route(
            "/guilds/{id}/channels",
            get(guild_channels)
                .post(create_channel)
                .patch(channel_positions),
        )
        .route("/guilds/{id}/members", get(guild_members))
        .route("/guilds/{id}/members/search", get(search_guild_members))
        .route("/guilds/{id}/threads/active", get(active_threads))
        .route("/channels/{id}/threads", post(start_thread))
        .route("/channels/{id}/thread-members", get(list_thread_members))
        .route(
            "/channels/{id}/threads/archived/public",
            get(archived_public_threads),
        )
        .route(
            "/channels/{id}/threads/archived/private",
            get(archived_private_threads),
        )
        .route(
            "/channels/{id}/users/@me/threads/archived/private",
            get(joined_archived_threads),
        )
        .route(
            "/channels/{id}/thread-members/@me",
            axum::routing::put(join_thread).delete(leave_thread),
        )
        .route(
            "/channels/{id}/thread-members/{user}",
            get(get_thread_member)
                .put(add_thread_member)
                .delete(remove_thread_member),
        )
        .route(
            "/channels/{id}/messages/{message}/threads",
            post(start_thread_from_message),
        )
        .route(
            "/guilds/{id}/members/{user}",
            get(guild_member).patch(patch_member).delete(kick_member),
        )
        .route(
            "/guilds/{id}/members/{user}/roles/{role}",
            axum::routing::put(add_member_role).delete(remove_member_role),
        )
        .route("/guilds/{id}/audit-logs", get(audit_logs))
        .route("/guilds/{id}/bans", get(list_bans))
        .route(
            "/guilds/{id}/bans/{user}",
            get(get_ban).put(put_ban).delete(delete_ban),
        )
        .route("/guilds/{id}/bulk-ban", post(bulk_ban))
        .route(
            "/guilds/{id}/roles",
            get(list_roles).post(create_role).patch(role_positions),
        )
        .route(
            "/guilds/{id}/roles/{role}",
            axum::routing::patch(patch_role).delete(delete_role),
        )
        .route(
            "/channels/{id}",
            get(get_channel).patch(patch_channel).delete(delete_channel),
        )
        .route(
            "/channels/{id}/permissions/{overwrite}",
            axum::routing::put(put_overwrite).delete(delete_overwrite),
        )
        .route("/channels/{id}/messages/bulk-delete", post(bulk_delete))
        .route(
            "/channels/{id}/messages/{message}/reactions/{emoji}/@me",
            axum::routing::put(add_reaction).delete(remove_reaction),
        )
        .route(
            "/channels/{id}/messages/{message}/reactions/{emoji}/{user}",
            axum::routing::delete(remove_user_reaction),
        )
        .route(
            "/channels/{id}/messages/{message}/reactions/{emoji}",
            get(reaction_users).delete(remove_emoji_reactions),
        )
        .route(
            "/channels/{id}/messages/{message}/reactions",
            axum::routing::delete(remove_all_reactions),
        )
        .route("/channels/{id}/messages/pins", get(list_pins))
        .route(
            "/channels/{id}/messages/pins/{message}",
            axum::routing::put(pin).delete(unpin),
        )
        .route("/channels/{id}/pins", get(legacy_pins))
        .route(
            "/channels/{id}/pins/{message}",
            axum::routing::put(pin).delete(unpin),
        )
        .route(
            "/channels/{id}/messages",
            get(list_messages).post(create_message),
        )
        .route(
            "/channels/{id}/messages/{message}",
            get(get_message).patch(edit_message).delete(delete_message),
        )
        .route("/channels/{id}/typing", post(typing))
        .route(
            "/channels/{id}/invites",
            get(channel_invites).post(create_invite),
        )
        .route("/guilds/{id}/invites", get(guild_invites))
        .route(
            "/invites/{code}",
            get(get_invite).post(accept_invite).delete(delete_invite),
        )
        .route("/admin/bots", post(admin_create_bot))
        .merge(crate::commands::routes())
        .merge(crate::interactions::routes())
        .merge(crate::webhooks::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn(audit_reason_scope))
}
