//! Incoming webhooks over REST, as Discord documents them: create, list
//! (per channel, per guild), read, change (name, avatar, a move to another
//! channel of the guild) and delete, each with an account holding
//! MANAGE_WEBHOOKS or with the webhook's token; executing a webhook; and
//! reading, editing and deleting the messages it sent. An application's
//! id with a living interaction's token takes the interaction's path
//! (`interactions`: followups, `@original`).
//!
//! Who may act: the account routes ask the guild's owner (MANAGE_WEBHOOKS
//! on the webhook's channel, or on the guild for the guild's list); the
//! token routes need no account, only the token, compared in constant
//! time. A message a webhook sends takes the path of a user's message
//! (`api::store_message`, then `api::publish_message` through the guild's
//! owner): durable before the answer, MESSAGE_CREATE to the guild's
//! sessions. Every change of a webhook sends WEBHOOKS_UPDATE (intent
//! GUILD_WEBHOOKS). The token routes are rate-limited per webhook and
//! token (`ratelimit`), since nothing else stands in front of them.
//!
//! Not kept: avatar images (no CDN; the avatar is the hash of the data
//! URI, as Discord's avatar field is a hash), `avatar_url` overrides (the
//! URL is never fetched). Components count with `?with_components=true`
//! only, on an execute and an edit, as Discord takes them.

use crate::{
    ApiError, ApiResult, AppState, Caller, check_chars, check_items, guild_channel, ok, parse_id,
    patch, publish_message, publish_plain, read_json, store_message, wire_row,
};
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use guildhall_common::state::sf;
use guildhall_common::wire::wire_user;
use guildhall_proto::audit;
use guildhall_proto::error::ErrorCode;
use guildhall_proto::guilds::GUILD_WIDE;
use guildhall_proto::intents;
use guildhall_proto::model::{User, WEBHOOK_INCOMING, Webhook, WebhooksUpdate};
use guildhall_proto::permissions as perm;
use guildhall_store::{MessageRow, UserRow, WebhookRow, WebhookWrite};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;

/// Message flags a webhook may set: those of any new message
/// (SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2), as
/// Discord documents for execute.
const EXECUTE_FLAGS: u64 = crate::CREATE_FLAGS;

/// Substrings Discord refuses in a webhook's name, case-insensitively.
const NAME_FORBIDDEN: [&str; 2] = ["clyde", "discord"];

/// Image types an avatar data URI may carry (Discord's image data).
const AVATAR_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

fn unknown_webhook() -> ApiError {
    ApiError::Code(ErrorCode::UnknownWebhook)
}

pub(crate) fn refused(node: &crate::ApiState, error: ApiError) -> ApiError {
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    error
}

/// A webhook's (or a `username` override's) name: 1 to
/// `webhook_name_chars_max` characters without Discord's forbidden
/// substrings.
fn check_name(node: &crate::ApiState, field: &'static str, name: &str) -> Result<(), ApiError> {
    check_chars(
        node,
        field,
        name,
        1,
        node.shared.limits.webhook_name_chars_max,
    )?;
    let lower = name.to_lowercase();
    match NAME_FORBIDDEN.iter().find(|bad| lower.contains(**bad)) {
        Some(bad) => Err(refused(
            node,
            ApiError::Field(
                field,
                "USERNAME_INVALID_CONTAINS",
                format!("Username cannot contain \"{bad}\""),
            ),
        )),
        None => Ok(()),
    }
}

/// A string field: absent or null is `None`, anything else but a string is
/// Discord's BASE_TYPE_STRING.
pub(crate) fn string_field(
    node: &crate::ApiState,
    body: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(refused(
            node,
            ApiError::Field(
                field,
                "BASE_TYPE_STRING",
                "Could not interpret the value as string.".into(),
            ),
        )),
    }
}

/// An array field's length: absent or null is 0, each item must be an
/// object, and at most `max` of them.
fn objects_field(
    node: &crate::ApiState,
    body: &Map<String, Value>,
    field: &'static str,
    max: usize,
) -> Result<usize, ApiError> {
    let items = match body.get(field) {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(refused(
                node,
                ApiError::Field(
                    field,
                    "BASE_TYPE_ARRAY",
                    "Could not interpret the value as a list.".into(),
                ),
            ));
        }
    };
    check_items(node, field, items.len(), max)?;
    if items.iter().any(|item| !item.is_object()) {
        return Err(refused(
            node,
            ApiError::Field(
                field,
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.".into(),
            ),
        ));
    }
    Ok(items.len())
}

pub(crate) fn object_body(
    node: &crate::ApiState,
    body: Value,
) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(map) => Ok(map),
        _ => Err(refused(
            node,
            ApiError::Field(
                "body",
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.".into(),
            ),
        )),
    }
}

/// The avatar of a create or change: absent is `None`, null clears it
/// (`Some(None)`), a data URI of an image becomes its hash. The image is
/// not kept (there is no CDN to serve it from); the hash is what Discord's
/// `avatar` field carries, so libraries read the same shape.
fn avatar_field(
    node: &crate::ApiState,
    body: &Map<String, Value>,
) -> Result<Option<Option<String>>, ApiError> {
    let invalid = || {
        refused(
            node,
            ApiError::Field("avatar", "IMAGE_INVALID", "Invalid image data".into()),
        )
    };
    let data = match body.get("avatar") {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(None)),
        Some(Value::String(data)) => data,
        Some(_) => return Err(invalid()),
    };
    let Some((kind, payload)) = data
        .strip_prefix("data:")
        .and_then(|rest| rest.split_once(";base64,"))
    else {
        return Err(invalid());
    };
    let base64 = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=');
    if !AVATAR_TYPES.contains(&kind) || payload.is_empty() || !payload.bytes().all(base64) {
        return Err(invalid());
    }
    let digest = guildhall_common::auth::token_digest(data);
    Ok(Some(Some(
        digest[..16].iter().map(|b| format!("{b:02x}")).collect(),
    )))
}

/// Whether `presented` is `row`'s token, in time independent of where they
/// differ (digests compared with `subtle`, as the admin token is).
fn token_matches(row: &WebhookRow, presented: &str) -> bool {
    use subtle::ConstantTimeEq;
    let presented = guildhall_common::auth::token_digest(presented);
    let expected = guildhall_common::auth::token_digest(&row.token);
    bool::from(presented.ct_eq(&expected))
}

/// The webhook `raw_id` names, if `token` is its token: unknown is 10015,
/// a token that is not this webhook's (another webhook's included) is
/// 401 with 50027, as Discord answers.
async fn by_token(
    node: &crate::ApiState,
    raw_id: &str,
    token: &str,
) -> Result<WebhookRow, ApiError> {
    let id = parse_id(raw_id).map_err(|_| unknown_webhook())?;
    let Some(row) = node.shared.store.webhook(id).await? else {
        // An application's id names its interactions' webhook: a token
        // that is no living interaction's is an invalid token (expired
        // after 15 minutes), as Discord answers.
        if node.shared.store.application(id).await?.is_some() {
            node.counters
                .unauthorized_total
                .fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::Code(ErrorCode::InvalidWebhookToken));
        }
        return Err(unknown_webhook());
    };
    if !token_matches(&row, token) {
        node.counters
            .unauthorized_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Code(ErrorCode::InvalidWebhookToken));
    }
    Ok(row)
}

/// The webhook `raw_id` names, if `caller` holds MANAGE_WEBHOOKS on its
/// channel.
async fn managed(
    node: &crate::ApiState,
    caller: &UserRow,
    raw_id: &str,
) -> Result<WebhookRow, ApiError> {
    let id = parse_id(raw_id).map_err(|_| unknown_webhook())?;
    let row = node
        .shared
        .store
        .webhook(id)
        .await?
        .ok_or_else(unknown_webhook)?;
    node.guilds
        .authorize(
            row.guild_id,
            caller.id,
            row.channel_id,
            perm::MANAGE_WEBHOOKS,
        )
        .await?;
    Ok(row)
}

/// The REST base executing URLs start with: the node's public address
/// (the gateway's, where the REST API is served too) over HTTP(S).
fn rest_base(node: &crate::ApiState) -> String {
    let url = node.shared.gateway_url.trim_end_matches('/');
    if let Some(rest) = url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        url.to_owned()
    }
}

/// The webhook object: the creator only for account callers (`creator`),
/// the token and URL always (both kinds of caller may see the token: one
/// holds MANAGE_WEBHOOKS, the other presented it).
fn wire(node: &crate::ApiState, row: &WebhookRow, creator: Option<&UserRow>) -> Webhook {
    Webhook {
        id: sf(row.id),
        kind: WEBHOOK_INCOMING,
        guild_id: Some(sf(row.guild_id)),
        channel_id: Some(sf(row.channel_id)),
        user: creator.map(wire_user),
        name: Some(row.name.clone()),
        avatar: row.avatar.clone(),
        token: Some(row.token.clone()),
        application_id: row.application_id.map(sf),
        url: Some(format!(
            "{}/api/webhooks/{}/{}",
            rest_base(node),
            row.id,
            row.token
        )),
    }
}

/// Webhook objects of `rows` with their creators (one store read for all).
async fn wire_all(node: &crate::ApiState, rows: &[WebhookRow]) -> Result<Vec<Webhook>, ApiError> {
    let mut ids: Vec<i64> = rows.iter().map(|r| r.creator_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let creators: HashMap<i64, UserRow> = node
        .shared
        .store
        .users_by_ids(&ids)
        .await?
        .into_iter()
        .map(|u| (u.id, u))
        .collect();
    Ok(rows
        .iter()
        .map(|row| wire(node, row, creators.get(&row.creator_id)))
        .collect())
}

async fn announce(node: &crate::ApiState, guild_id: i64, channel_id: i64) {
    let data = WebhooksUpdate {
        guild_id: sf(guild_id),
        channel_id: sf(channel_id),
    };
    publish_plain(
        node,
        guild_id,
        channel_id,
        "WEBHOOKS_UPDATE",
        intents::GUILD_WEBHOOKS,
        &data,
    )
    .await;
}

fn write_refused(outcome: WebhookWrite) -> ApiError {
    match outcome {
        WebhookWrite::ChannelFull => ApiError::Code(ErrorCode::MaxWebhooks),
        WebhookWrite::GuildFull => ApiError::Code(ErrorCode::MaxGuildWebhooks),
        WebhookWrite::Missing | WebhookWrite::Done => ApiError::Code(ErrorCode::UnknownChannel),
    }
}

// ----- account routes ---------------------------------------------------------

async fn create(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(channel): Path<String>,
    req: Request,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &channel).await?;
    crate::authorize(&node, caller.id, &channel, guild_id, perm::MANAGE_WEBHOOKS).await?;
    let body = object_body(
        &node,
        read_json(req, &node, node.shared.limits.rest_body_bytes_max).await?,
    )?;
    let Some(name) = string_field(&node, &body, "name")? else {
        return Err(refused(
            &node,
            ApiError::Field(
                "name",
                "BASE_TYPE_REQUIRED",
                "This field is required".into(),
            ),
        ));
    };
    check_name(&node, "name", &name)?;
    let avatar = avatar_field(&node, &body)?.flatten();
    // A bot's webhook is its application's (Discord's application-owned
    // webhook: it may send every component).
    let application_id = if caller.bot {
        node.shared
            .store
            .application_by_bot(caller.id)
            .await?
            .map(|app| app.id)
    } else {
        None
    };
    let row = WebhookRow {
        id: node.shared.next_id().get() as i64,
        guild_id,
        channel_id: channel.id,
        creator_id: caller.id,
        name,
        avatar,
        token: guildhall_common::auth::new_webhook_token().map_err(|_| ApiError::Internal)?,
        application_id,
    };
    let limits = &node.shared.limits;
    match node
        .shared
        .store
        .create_webhook(
            &row,
            limits.webhooks_per_channel_max as i64,
            limits.webhooks_per_guild_max as i64,
        )
        .await?
    {
        WebhookWrite::Done => {}
        other => return Err(refused(&node, write_refused(other))),
    }
    announce(&node, guild_id, channel.id).await;
    let changes = webhook_changes(None, Some(&row));
    crate::audit(
        &node,
        guild_id,
        caller.id,
        audit::WEBHOOK_CREATE,
        Some(row.id),
        changes,
        None,
    )
    .await;
    ok(&wire(&node, &row, Some(&caller)))
}

/// An audited webhook change's `changes` (Discord's keys: type, name,
/// channel_id, avatar_hash): each that differs, old and new.
fn webhook_changes(old: Option<&WebhookRow>, new: Option<&WebhookRow>) -> Vec<Value> {
    let fields = |row: Option<&WebhookRow>| -> Vec<(&'static str, Value)> {
        row.map_or_else(Vec::new, |row| {
            vec![
                ("type", serde_json::json!(WEBHOOK_INCOMING)),
                ("name", serde_json::json!(row.name)),
                ("channel_id", serde_json::json!(row.channel_id.to_string())),
                ("avatar_hash", serde_json::json!(row.avatar)),
            ]
        })
    };
    let (old, new) = (fields(old), fields(new));
    let keys = ["type", "name", "channel_id", "avatar_hash"];
    keys.iter()
        .filter_map(|key| {
            let find = |list: &[(&str, Value)]| {
                list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
            };
            let (before, after) = (find(&old), find(&new));
            if before == after {
                return None;
            }
            let mut change = serde_json::json!({"key": key});
            if let Some(before) = before.filter(|v| !v.is_null()) {
                change["old_value"] = before;
            }
            if let Some(after) = after.filter(|v| !v.is_null()) {
                change["new_value"] = after;
            }
            Some(change)
        })
        .collect()
}

async fn list_channel(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(channel): Path<String>,
) -> ApiResult {
    let (channel, guild_id) = guild_channel(&node, &channel).await?;
    crate::authorize(&node, caller.id, &channel, guild_id, perm::MANAGE_WEBHOOKS).await?;
    let rows = node.shared.store.channel_webhooks(channel.id).await?;
    ok(&wire_all(&node, &rows).await?)
}

async fn list_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(guild): Path<String>,
) -> ApiResult {
    let guild_id = parse_id(&guild)?;
    node.guilds
        .authorize(guild_id, caller.id, GUILD_WIDE, perm::MANAGE_WEBHOOKS)
        .await?;
    let rows = node.shared.store.guild_webhooks(guild_id).await?;
    ok(&wire_all(&node, &rows).await?)
}

async fn get_webhook(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let row = managed(&node, &caller, &id).await?;
    let creator = node.shared.store.user(row.creator_id).await?;
    ok(&wire(&node, &row, creator.as_ref()))
}

/// A change of `row` from `body` (name, avatar, and with an account
/// caller `channel_id`), stored and announced.
async fn apply_change(
    node: &crate::ApiState,
    row: WebhookRow,
    body: Value,
    mover: Option<&UserRow>,
) -> Result<WebhookRow, ApiError> {
    let body = object_body(node, body)?;
    let mut new = row.clone();
    if let Some(name) = string_field(node, &body, "name")? {
        check_name(node, "name", &name)?;
        new.name = name;
    }
    if let Some(avatar) = avatar_field(node, &body)? {
        new.avatar = avatar;
    }
    if let Some(raw) = body.get("channel_id").filter(|v| !v.is_null()) {
        // Moving needs an account (the token routes take no channel_id)
        // with MANAGE_WEBHOOKS on the target channel too.
        let Some(mover) = mover else {
            return Err(refused(
                node,
                ApiError::Field(
                    "channel_id",
                    "WEBHOOK_FIELD_UNSUPPORTED",
                    "channel_id cannot be changed with a webhook token.".into(),
                ),
            ));
        };
        let target: Option<i64> = patch::<String>(Some(raw))
            .ok()
            .flatten()
            .flatten()
            .and_then(|s| parse_id(&s).ok())
            .or_else(|| raw.as_i64().filter(|v| *v > 0));
        let target = target.ok_or_else(|| {
            refused(
                node,
                ApiError::Field(
                    "channel_id",
                    "NUMBER_TYPE_COERCE",
                    "Value is not snowflake.".into(),
                ),
            )
        })?;
        let channel = node
            .shared
            .store
            .channel(target)
            .await?
            .filter(|c| c.guild_id == Some(row.guild_id))
            .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
        node.guilds
            .authorize(row.guild_id, mover.id, channel.id, perm::MANAGE_WEBHOOKS)
            .await?;
        new.channel_id = channel.id;
    }
    let per_channel_max = node.shared.limits.webhooks_per_channel_max as i64;
    match node
        .shared
        .store
        .update_webhook(&new, per_channel_max)
        .await?
    {
        WebhookWrite::Done => {}
        WebhookWrite::Missing if new.channel_id == row.channel_id => return Err(unknown_webhook()),
        other => return Err(refused(node, write_refused(other))),
    }
    announce(node, new.guild_id, row.channel_id).await;
    if new.channel_id != row.channel_id {
        announce(node, new.guild_id, new.channel_id).await;
    }
    Ok(new)
}

async fn edit_webhook(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
    req: Request,
) -> ApiResult {
    let row = managed(&node, &caller, &id).await?;
    let body = read_json(req, &node, node.shared.limits.rest_body_bytes_max).await?;
    let old = row.clone();
    let row = apply_change(&node, row, body, Some(&caller)).await?;
    let changes = webhook_changes(Some(&old), Some(&row));
    if !changes.is_empty() {
        crate::audit(
            &node,
            row.guild_id,
            caller.id,
            audit::WEBHOOK_UPDATE,
            Some(row.id),
            changes,
            None,
        )
        .await;
    }
    let creator = node.shared.store.user(row.creator_id).await?;
    ok(&wire(&node, &row, creator.as_ref()))
}

async fn remove(node: &crate::ApiState, row: &WebhookRow) -> ApiResult {
    if !node.shared.store.delete_webhook(row.id).await? {
        return Err(unknown_webhook());
    }
    announce(node, row.guild_id, row.channel_id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn delete_webhook(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    let row = managed(&node, &caller, &id).await?;
    let answer = remove(&node, &row).await?;
    let changes = webhook_changes(Some(&row), None);
    crate::audit(
        &node,
        row.guild_id,
        caller.id,
        audit::WEBHOOK_DELETE,
        Some(row.id),
        changes,
        None,
    )
    .await;
    Ok(answer)
}

// ----- token routes -----------------------------------------------------------

async fn get_with_token(
    State(node): State<AppState>,
    Path((id, token)): Path<(String, String)>,
) -> ApiResult {
    let row = by_token(&node, &id, &token).await?;
    ok(&wire(&node, &row, None))
}

async fn edit_with_token(
    State(node): State<AppState>,
    Path((id, token)): Path<(String, String)>,
    req: Request,
) -> ApiResult {
    let row = by_token(&node, &id, &token).await?;
    let body = read_json(req, &node, node.shared.limits.rest_body_bytes_max).await?;
    let row = apply_change(&node, row, body, None).await?;
    ok(&wire(&node, &row, None))
}

async fn delete_with_token(
    State(node): State<AppState>,
    Path((id, token)): Path<(String, String)>,
) -> ApiResult {
    let row = by_token(&node, &id, &token).await?;
    remove(&node, &row).await
}

/// Query of execute and of the message routes.
#[derive(Deserialize)]
struct ExecuteQuery {
    wait: Option<String>,
    thread_id: Option<String>,
    with_components: Option<String>,
}

impl ExecuteQuery {
    /// Discord's boolean query strings.
    fn wait(&self) -> bool {
        matches!(self.wait.as_deref(), Some("true" | "True" | "1"))
    }

    /// `with_components`: whether the body's `components` count at all
    /// (Discord ignores them otherwise).
    fn with_components(&self) -> bool {
        matches!(self.with_components.as_deref(), Some("true" | "True" | "1"))
    }

    /// The thread `thread_id` names, which must be one started in the
    /// webhook's channel (None without it); any other id is an unknown
    /// channel, Discord's answer.
    async fn thread(
        &self,
        node: &crate::ApiState,
        webhook: &WebhookRow,
    ) -> Result<Option<i64>, ApiError> {
        let Some(raw) = &self.thread_id else {
            return Ok(None);
        };
        let unknown = || ApiError::Code(ErrorCode::UnknownChannel);
        let id = parse_id(raw).map_err(|_| unknown())?;
        let thread = node.shared.store.channel(id).await?.ok_or_else(unknown)?;
        if guildhall_store::THREAD_KINDS.contains(&thread.kind)
            && thread.parent_id == Some(webhook.channel_id)
        {
            Ok(Some(thread.id))
        } else {
            Err(unknown())
        }
    }

    /// The message a message route names, which must be in the thread
    /// `thread_id` names when it names one.
    async fn message(
        &self,
        node: &crate::ApiState,
        webhook: &WebhookRow,
        raw_message: &str,
    ) -> Result<MessageRow, ApiError> {
        let thread = self.thread(node, webhook).await?;
        let row = sent_by(node, webhook, raw_message).await?;
        match thread {
            Some(thread) if row.channel_id != thread => {
                Err(ApiError::Code(ErrorCode::UnknownMessage))
            }
            _ => Ok(row),
        }
    }
}

/// The `components` an execute stores, as Discord takes them: none
/// without `?with_components=true` (ignored, as Discord does); with it,
/// checked for a message with `flags` (`components::check`: the layout
/// rules of a legacy or a components-v2 message), and for a webhook no
/// application owns only non-interactive ones (link buttons, layout and
/// content components: nothing with a `custom_id`), else 50035 on
/// `components`. `None` for none.
fn sent_components(
    node: &crate::ApiState,
    webhook: &WebhookRow,
    body: &Map<String, Value>,
    with_components: bool,
    flags: u64,
) -> Result<Option<Vec<Value>>, ApiError> {
    let Some(raw) = body
        .get("components")
        .filter(|v| with_components && !v.is_null())
    else {
        return Ok(None);
    };
    let Some(kept) = crate::checked_components(node, raw, flags, &["components"])? else {
        return Ok(None);
    };
    if webhook.application_id.is_none() && guildhall_proto::components::interactive(&kept) {
        return Err(refused(
            node,
            ApiError::Field(
                "components",
                "COMPONENT_INTERACTIVE_NOT_ALLOWED",
                "A webhook no application owns can only send non-interactive components.".into(),
            ),
        ));
    }
    Ok(Some(kept))
}

/// What an execute or a message edit carries beyond its content.
pub(crate) struct Extras {
    pub(crate) embeds: usize,
    /// The checked embeds as stored: `None` when the body has no
    /// `embeds`, `Some(None)` when it clears them (`null` or `[]`).
    pub(crate) embeds_json: Option<Option<String>>,
    /// `allowed_mentions`, or a webhook's defaults (user mentions only).
    pub(crate) allowed: guildhall_proto::mentions::Allowed,
}

/// Checks the fields an executed or edited message shares: embeds and
/// allowed_mentions (components are checked under the message's flags,
/// `api::checked_components`); refuses the fields of features this
/// server lacks (polls, forum posts) on that field rather than
/// answering as if they had been sent.
pub(crate) fn check_extras(
    node: &crate::ApiState,
    body: &Map<String, Value>,
) -> Result<Extras, ApiError> {
    let limits = &node.shared.limits;
    for field in ["poll", "thread_name", "applied_tags"] {
        let present = match body.get(field) {
            None | Some(Value::Null) => false,
            Some(Value::Array(items)) => !items.is_empty(),
            Some(_) => true,
        };
        if present {
            return Err(refused(
                node,
                ApiError::Field(
                    field,
                    "WEBHOOK_FIELD_UNSUPPORTED",
                    "This server does not support this field.".into(),
                ),
            ));
        }
    }
    let embeds = objects_field(node, body, "embeds", limits.message_embeds_max)?;
    let embeds_json = match body.get("embeds") {
        None => None,
        Some(Value::Array(items)) => Some(crate::checked_embeds(node, items)?),
        Some(_) => Some(None),
    };
    if body
        .get("allowed_mentions")
        .is_some_and(|v| !v.is_null() && !v.is_object())
    {
        return Err(refused(
            node,
            ApiError::Field(
                "allowed_mentions",
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.".into(),
            ),
        ));
    }
    let allowed = crate::allowed_mentions(
        node,
        body.get("allowed_mentions"),
        guildhall_proto::mentions::Context::WebhookOrInteraction,
    )?;
    Ok(Extras {
        embeds,
        embeds_json,
        allowed,
    })
}

async fn execute(
    State(node): State<AppState>,
    Path((id, token)): Path<(String, String)>,
    Query(query): Query<ExecuteQuery>,
    req: Request,
) -> ApiResult {
    let req =
        match crate::interaction_forward::pass_on(&node, &token, req, ErrorCode::UnknownWebhook)
            .await
        {
            Ok(answered) => return Ok(answered),
            Err(req) => req,
        };
    if let Some(entry) = crate::interactions::token_entry(&node, &id, &token) {
        // An interaction's followup (`thread_id` is ignored, as Discord
        // documents for interaction followups).
        let entry = entry?;
        let form = crate::files::read_message_body::<Value>(req, &node).await?;
        return crate::interactions::followup(&node, &entry, form.body, form.uploads).await;
    }
    let webhook = by_token(&node, &id, &token).await?;
    let thread = query.thread(&node, &webhook).await?;
    let limits = &node.shared.limits;
    let mut form = crate::files::read_message_body::<Value>(req, &node).await?;
    let body = object_body(&node, std::mem::take(&mut form.body))?;
    let content = string_field(&node, &body, "content")?.unwrap_or_default();
    let extras = check_extras(&node, &body)?;
    let planned = crate::files::plan(
        form.attachments.as_ref(),
        &form.uploads,
        &[],
        crate::plan_limits(&node),
    )
    .map_err(|error| crate::invalid_form(&node, &error))?;
    let flags = crate::flags_field(
        &node,
        body.get("flags"),
        EXECUTE_FLAGS,
        "Only SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2 can be set.",
    )?
    .unwrap_or(0);
    let components = sent_components(&node, &webhook, &body, query.with_components(), flags)?;
    crate::check_message_state(
        &node,
        flags,
        &content,
        extras.embeds > 0,
        components.is_some(),
        !planned.is_empty(),
    )?;
    if let Some(Value::Array(embeds)) = body.get("embeds") {
        crate::files::check_embed_refs(embeds, &crate::files::planned_names(&planned))
            .map_err(|error| crate::invalid_form(&node, &error))?;
    }
    // A components-v2 message mentions whom its text displays mention.
    let text = match &components {
        Some(kept) if flags & guildhall_proto::components::FLAG_IS_COMPONENTS_V2 != 0 => {
            guildhall_proto::components::text_of(kept)
        }
        _ => content.clone(),
    };
    let components = components.map(|kept| Value::Array(kept).to_string());
    let username = string_field(&node, &body, "username")?;
    if let Some(username) = &username {
        check_name(&node, "username", username)?;
    }
    if let Some(url) = string_field(&node, &body, "avatar_url")? {
        check_chars(
            &node,
            "avatar_url",
            &url,
            0,
            limits.webhook_avatar_url_chars_max,
        )?;
    }
    let tts = match body.get("tts") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(tts)) => *tts,
        Some(_) => {
            return Err(refused(
                &node,
                ApiError::Field(
                    "tts",
                    "BASE_TYPE_BOOLEAN",
                    "Must be either true or false.".into(),
                ),
            ));
        }
    };
    let mentioning = crate::Mentioning {
        allowed: extras.allowed.clone(),
        rights: crate::MentionRights::Webhook,
        actor_id: webhook.creator_id,
    };
    let mentioned =
        crate::mentions_of(&node, Some(webhook.guild_id), &text, &mentioning, None).await?;
    let channel_id = thread.unwrap_or(webhook.channel_id);
    // The files are durable before the row that names them is written.
    let attachments =
        crate::files::store_planned(&node, channel_id, planned, &form.uploads).await?;
    let row = MessageRow {
        id: node.shared.next_id().get() as i64,
        channel_id,
        guild_id: Some(webhook.guild_id),
        author_id: webhook.creator_id,
        content,
        tts,
        edited_ms: None,
        webhook_id: Some(webhook.id),
        author_name: Some(username.unwrap_or_else(|| webhook.name.clone())),
        author_avatar: webhook.avatar.clone(),
        kind: 0,
        // Within EXECUTE_FLAGS, so a u64 of at most a few bits.
        flags: flags as i64,
        components,
        application_id: webhook.application_id,
        interaction_id: None,
        interaction_metadata: None,
        embeds: extras.embeds_json.clone().flatten(),
        visible_to: None,
        reference_kind: None,
        reference_message_id: None,
        reference_channel_id: None,
        reference_guild_id: None,
        mentions: mentioned,
        attachments: crate::files::stored(&attachments),
    };
    store_message(&node, &row).await?;
    if let Some(thread) = thread {
        node.shared.store.count_thread_message(thread).await?;
    }
    let message = webhook_message(&node.files, &row);
    // The webhook's id as the "author" exempt from content blanking: no
    // session belongs to it, so nobody gets the content through it.
    publish_message(
        &node,
        "MESSAGE_CREATE",
        webhook.guild_id,
        &message,
        webhook.id,
    )
    .await;
    if query.wait() {
        ok(&message)
    } else {
        Ok(StatusCode::NO_CONTENT.into_response())
    }
}

fn webhook_message(
    files: &crate::files::Files,
    row: &MessageRow,
) -> guildhall_proto::model::Message {
    let author = User::webhook(
        sf(row.webhook_id.unwrap_or(row.author_id)),
        row.author_name.clone().unwrap_or_default(),
        row.author_avatar.clone(),
    );
    wire_row(files, row, author, None)
}

/// A message `webhook` sent: any other message (of another webhook, of a
/// user, or none) is 10008.
async fn sent_by(
    node: &crate::ApiState,
    webhook: &WebhookRow,
    raw_message: &str,
) -> Result<MessageRow, ApiError> {
    let id = parse_id(raw_message).map_err(|_| ApiError::Code(ErrorCode::UnknownMessage))?;
    node.shared
        .store
        .webhook_message(webhook.id, id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))
}

async fn get_message(
    State(node): State<AppState>,
    Path((id, token, message)): Path<(String, String, String)>,
    Query(query): Query<ExecuteQuery>,
    req: Request,
) -> ApiResult {
    let req =
        match crate::interaction_forward::pass_on(&node, &token, req, ErrorCode::UnknownWebhook)
            .await
        {
            Ok(answered) => return Ok(answered),
            Err(req) => req,
        };
    drop(req);
    if let Some(entry) = crate::interactions::token_entry(&node, &id, &token) {
        return crate::interactions::get(&node, &entry?, &message).await;
    }
    let webhook = by_token(&node, &id, &token).await?;
    let row = query.message(&node, &webhook, &message).await?;
    let mut message = webhook_message(&node.files, &row);
    message.pinned = crate::is_pinned(&node, &row).await?;
    ok(&message)
}

async fn edit_message(
    State(node): State<AppState>,
    Path((id, token, message)): Path<(String, String, String)>,
    Query(query): Query<ExecuteQuery>,
    req: Request,
) -> ApiResult {
    let req =
        match crate::interaction_forward::pass_on(&node, &token, req, ErrorCode::UnknownWebhook)
            .await
        {
            Ok(answered) => return Ok(answered),
            Err(req) => req,
        };
    if let Some(entry) = crate::interactions::token_entry(&node, &id, &token) {
        let entry = entry?;
        let form = crate::files::read_message_body::<Value>(req, &node).await?;
        return crate::interactions::edit(&node, &entry, &message, form.body, form.uploads).await;
    }
    let webhook = by_token(&node, &id, &token).await?;
    let mut row = query.message(&node, &webhook, &message).await?;
    let mut form = crate::files::read_message_body::<Value>(req, &node).await?;
    let body = object_body(&node, std::mem::take(&mut form.body))?;
    let extras = check_extras(&node, &body)?;
    // Null clears the content, as every field of this route is nullable.
    let content = match body.get("content") {
        None => None,
        Some(Value::Null) => Some(String::new()),
        Some(_) => string_field(&node, &body, "content")?,
    };
    // SUPPRESS_EMBEDS set or unset, IS_COMPONENTS_V2 set only.
    let given = crate::flags_field(
        &node,
        body.get("flags"),
        u64::MAX >> 1,
        "Flags are a non-negative integer.",
    )?;
    let flags = crate::edited_flags(row.flags as u64, given);
    // With `?with_components=true` the edit's `components` replace the
    // message's (null or `[]` clears them), under execute's rule and the
    // flags the message will have.
    let components = if query.with_components() && body.contains_key("components") {
        Some(
            sent_components(&node, &webhook, &body, true, flags)?
                .map(|kept| Value::Array(kept).to_string()),
        )
    } else {
        None
    };
    let mentioning = crate::Mentioning {
        allowed: extras.allowed,
        rights: crate::MentionRights::Webhook,
        actor_id: webhook.creator_id,
    };
    let attachments =
        crate::files::edited(&node, &row, form.attachments.as_ref(), &form.uploads).await?;
    crate::edit_row(
        &node,
        &mut row,
        crate::Edit {
            content,
            embeds: extras.embeds_json,
            components,
            flags: Some(flags),
            attachments,
        },
        Some(&mentioning),
    )
    .await?;
    let mut message = webhook_message(&node.files, &row);
    // An edit leaves a pin as it was, and the update says so.
    message.pinned = crate::is_pinned(&node, &row).await?;
    publish_message(
        &node,
        "MESSAGE_UPDATE",
        webhook.guild_id,
        &message,
        webhook.id,
    )
    .await;
    ok(&message)
}

async fn delete_message(
    State(node): State<AppState>,
    Path((id, token, message)): Path<(String, String, String)>,
    Query(query): Query<ExecuteQuery>,
    req: Request,
) -> ApiResult {
    let req =
        match crate::interaction_forward::pass_on(&node, &token, req, ErrorCode::UnknownWebhook)
            .await
        {
            Ok(answered) => return Ok(answered),
            Err(req) => req,
        };
    drop(req);
    if let Some(entry) = crate::interactions::token_entry(&node, &id, &token) {
        return crate::interactions::delete(&node, &entry?, &message).await;
    }
    let webhook = by_token(&node, &id, &token).await?;
    let row = query.message(&node, &webhook, &message).await?;
    if !node
        .shared
        .store
        .delete_message(row.channel_id, row.id)
        .await?
    {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    node.files
        .forget(row.channel_id, row.attachments.as_deref());
    let guild_id = row.guild_id.unwrap_or(webhook.guild_id);
    crate::publish_message_delete(&node, guild_id, row.channel_id, row.id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The routes, relative to `/api/v10`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/channels/{id}/webhooks", get(list_channel).post(create))
        .route("/guilds/{id}/webhooks", get(list_guild))
        .route(
            "/webhooks/{id}",
            get(get_webhook).patch(edit_webhook).delete(delete_webhook),
        )
        .route(
            "/webhooks/{id}/{token}",
            get(get_with_token)
                .patch(edit_with_token)
                .delete(delete_with_token)
                .post(execute),
        )
        .route(
            "/webhooks/{id}/{token}/messages/{message}",
            get(get_message).patch(edit_message).delete(delete_message),
        )
}
