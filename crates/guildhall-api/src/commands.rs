//! Application commands over REST: global and guild commands, create (an
//! upsert by name, as Discord's POST is), read, edit, delete and bulk
//! overwrite, and the command-permission reads.
//!
//! The rules of a command (names, option trees, choices, bounds, the
//! 8,000-character size) are `guildhall_proto::commands`'s; this module
//! adds who may act (the application's bot or its owner, and for a guild
//! scope only where the bot is a member), how many commands a scope holds
//! (`application_commands_*_max`), and storage. Commands are stored as the
//! validated spec, so what a bot registered is what it reads back.

use crate::{ApiError, ApiResult, AppState, Caller, ok, parse_id, read_json};
use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use guildhall_proto::commands::{self, CommandSpec, Scope};
use guildhall_proto::error::ErrorCode;
use guildhall_store::{ApplicationRow, CommandRow, CommandUpsert, StoreError, UserRow};
use serde_json::Value;

/// The application `raw_id` names, if the caller may manage its commands:
/// its bot, or the user who owns it.
async fn application(
    node: &crate::ApiState,
    caller: &UserRow,
    raw_id: &str,
) -> Result<ApplicationRow, ApiError> {
    let app = node
        .shared
        .store
        .application(parse_id(raw_id)?)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplication))?;
    if caller.id != app.bot_user_id && caller.id != app.owner_id {
        return Err(ApiError::Code(ErrorCode::NotApplicationOwner));
    }
    Ok(app)
}

/// A guild scope: the application's bot must be in the guild (Discord
/// answers 50001 to an application not authorised there).
async fn guild_scope(
    node: &crate::ApiState,
    app: &ApplicationRow,
    raw_guild: &str,
) -> Result<i64, ApiError> {
    let guild_id = parse_id(raw_guild)?;
    if !node
        .shared
        .store
        .is_member(guild_id, app.bot_user_id)
        .await?
    {
        return Err(ApiError::Code(ErrorCode::MissingAccess));
    }
    Ok(guild_id)
}

fn scope_of(guild_id: i64) -> Scope {
    if guild_id == 0 {
        Scope::Global
    } else {
        Scope::Guild
    }
}

/// The most commands of `kind` a scope may hold.
fn kind_max(node: &crate::ApiState, kind: u8) -> usize {
    let limits = &node.shared.limits;
    match kind {
        commands::CHAT_INPUT => limits.application_commands_chat_input_max,
        commands::PRIMARY_ENTRY_POINT => 1,
        _ => limits.application_commands_context_menu_max,
    }
}

fn wire(row: &CommandRow) -> Result<Value, ApiError> {
    let spec: CommandSpec = serde_json::from_str(&row.spec).map_err(|error| {
        guildhall_common::throttled!(error, "commands.corrupt_spec", command = row.id, %error, "stored command does not decode");
        ApiError::Internal
    })?;
    let guild = (row.guild_id != 0).then_some(row.guild_id);
    Ok(spec.to_wire(row.id, row.application_id, guild, row.version))
}

fn row_of(
    node: &crate::ApiState,
    app: &ApplicationRow,
    guild_id: i64,
    id: Option<i64>,
    spec: &CommandSpec,
) -> Result<CommandRow, ApiError> {
    Ok(CommandRow {
        id: id.unwrap_or_else(|| node.shared.next_id().get() as i64),
        application_id: app.id,
        guild_id,
        kind: i64::from(spec.kind),
        name: spec.name.clone(),
        spec: serde_json::to_string(spec).map_err(|_| ApiError::Internal)?,
        version: node.shared.next_id().get() as i64,
    })
}

async fn list(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
) -> ApiResult {
    let app = application(node, caller, app).await?;
    let guild_id = match guild {
        Some(guild) => guild_scope(node, &app, guild).await?,
        None => 0,
    };
    let rows = node.shared.store.commands(app.id, guild_id).await?;
    ok(&rows.iter().map(wire).collect::<Result<Vec<_>, _>>()?)
}

async fn create(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
    body: Value,
) -> ApiResult {
    let app = application(node, caller, app).await?;
    let guild_id = match guild {
        Some(guild) => guild_scope(node, &app, guild).await?,
        None => 0,
    };
    let spec = commands::parse_command(&body, scope_of(guild_id)).map_err(ApiError::Invalid)?;
    let row = row_of(node, &app, guild_id, None, &spec)?;
    let max = kind_max(node, spec.kind) as i64;
    match node.shared.store.upsert_command(&row, max).await? {
        CommandUpsert::Created(row) => Ok((StatusCode::CREATED, ok(&wire(&row)?)?).into_response()),
        CommandUpsert::Updated(row) => ok(&wire(&row)?),
        CommandUpsert::Full => Err(ApiError::Code(ErrorCode::MaxApplicationCommands)),
    }
}

async fn existing(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
    command: &str,
) -> Result<(ApplicationRow, CommandRow), ApiError> {
    let app = application(node, caller, app).await?;
    let guild_id = match guild {
        Some(guild) => guild_scope(node, &app, guild).await?,
        None => 0,
    };
    let id = parse_id(command).map_err(|_| ApiError::Code(ErrorCode::UnknownApplicationCommand))?;
    let row = node
        .shared
        .store
        .command(app.id, guild_id, id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplicationCommand))?;
    Ok((app, row))
}

fn duplicate_name(spec: &CommandSpec) -> ApiError {
    ApiError::Field(
        "name",
        "APPLICATION_COMMANDS_DUPLICATE_NAME",
        format!(
            "Application command names must be unique: {:.40}",
            spec.name
        ),
    )
}

async fn edit(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
    command: &str,
    body: Value,
) -> ApiResult {
    let (app, row) = existing(node, caller, app, guild, command).await?;
    let old: CommandSpec = serde_json::from_str(&row.spec).map_err(|_| ApiError::Internal)?;
    let spec =
        commands::parse_patch(&body, &old, scope_of(row.guild_id)).map_err(ApiError::Invalid)?;
    let updated = row_of(node, &app, row.guild_id, Some(row.id), &spec)?;
    match node.shared.store.update_command(&updated).await {
        Ok(true) => ok(&wire(&updated)?),
        Ok(false) => Err(ApiError::Code(ErrorCode::UnknownApplicationCommand)),
        Err(StoreError::Conflict(_)) => Err(duplicate_name(&spec)),
        Err(error) => Err(error.into()),
    }
}

async fn delete(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
    command: &str,
) -> ApiResult {
    let (app, row) = existing(node, caller, app, guild, command).await?;
    if node
        .shared
        .store
        .delete_command(app.id, row.guild_id, row.id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::Code(ErrorCode::UnknownApplicationCommand))
    }
}

/// PUT: the scope's commands become exactly `body`'s. A command keeps its
/// id when the bot names it by id or by (type, name), and its version when
/// nothing of it changed, so a bot that syncs on every start (discord.py's
/// `tree.sync()`) changes nothing it did not change.
async fn overwrite(
    node: &crate::ApiState,
    caller: &UserRow,
    app: &str,
    guild: Option<&str>,
    body: Value,
) -> ApiResult {
    let app = application(node, caller, app).await?;
    let guild_id = match guild {
        Some(guild) => guild_scope(node, &app, guild).await?,
        None => 0,
    };
    let entries_max = kind_max(node, commands::CHAT_INPUT) + 2 * kind_max(node, commands::USER) + 1;
    let entries = commands::parse_overwrite(&body, scope_of(guild_id), entries_max)
        .map_err(ApiError::Invalid)?;
    for kind in [
        commands::CHAT_INPUT,
        commands::USER,
        commands::MESSAGE,
        commands::PRIMARY_ENTRY_POINT,
    ] {
        if entries.iter().filter(|(_, s)| s.kind == kind).count() > kind_max(node, kind) {
            return Err(ApiError::Code(ErrorCode::MaxApplicationCommands));
        }
    }
    let old = node.shared.store.commands(app.id, guild_id).await?;
    let mut rows = Vec::with_capacity(entries.len());
    for (given_id, spec) in &entries {
        let kept = old
            .iter()
            .find(|o| Some(o.id) == *given_id && o.kind == i64::from(spec.kind))
            .or_else(|| {
                old.iter()
                    .find(|o| o.kind == i64::from(spec.kind) && o.name == spec.name)
            });
        let mut row = row_of(node, &app, guild_id, kept.map(|o| o.id), spec)?;
        if let Some(kept) = kept
            && kept.spec == row.spec
        {
            row.version = kept.version;
        }
        rows.push(row);
    }
    match node
        .shared
        .store
        .replace_commands(app.id, guild_id, &rows)
        .await
    {
        Ok(()) => ok(&rows.iter().map(wire).collect::<Result<Vec<_>, _>>()?),
        // Two entries naming one kept id under different names.
        Err(StoreError::Conflict(_)) => Err(ApiError::Field(
            "id",
            "APPLICATION_COMMANDS_DUPLICATE_ID",
            "Application command ids must be unique.".into(),
        )),
        Err(error) => Err(error.into()),
    }
}

async fn body_of(req: Request, node: &AppState) -> Result<Value, ApiError> {
    read_json(
        req,
        node,
        node.shared.limits.application_commands_body_bytes_max,
    )
    .await
}

async fn list_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(app): Path<String>,
) -> ApiResult {
    list(&node, &caller, &app, None).await
}

async fn create_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(app): Path<String>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    create(&node, &caller, &app, None, body).await
}

async fn overwrite_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path(app): Path<String>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    overwrite(&node, &caller, &app, None, body).await
}

async fn get_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, command)): Path<(String, String)>,
) -> ApiResult {
    let (_, row) = existing(&node, &caller, &app, None, &command).await?;
    ok(&wire(&row)?)
}

async fn edit_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, command)): Path<(String, String)>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    edit(&node, &caller, &app, None, &command, body).await
}

async fn delete_global(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, command)): Path<(String, String)>,
) -> ApiResult {
    delete(&node, &caller, &app, None, &command).await
}

async fn list_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild)): Path<(String, String)>,
) -> ApiResult {
    list(&node, &caller, &app, Some(&guild)).await
}

async fn create_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild)): Path<(String, String)>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    create(&node, &caller, &app, Some(&guild), body).await
}

async fn overwrite_guild(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild)): Path<(String, String)>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    overwrite(&node, &caller, &app, Some(&guild), body).await
}

async fn get_guild_command(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild, command)): Path<(String, String, String)>,
) -> ApiResult {
    let (_, row) = existing(&node, &caller, &app, Some(&guild), &command).await?;
    ok(&wire(&row)?)
}

async fn edit_guild_command(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild, command)): Path<(String, String, String)>,
    req: Request,
) -> ApiResult {
    let body = body_of(req, &node).await?;
    edit(&node, &caller, &app, Some(&guild), &command, body).await
}

async fn delete_guild_command(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild, command)): Path<(String, String, String)>,
) -> ApiResult {
    delete(&node, &caller, &app, Some(&guild), &command).await
}

/// The permission overwrites of every command of the application in the
/// guild. None can be set yet (editing them takes an OAuth2 Bearer token,
/// which this server does not issue), so the list is empty, which is what
/// Discord answers for a guild that never set any.
async fn guild_permissions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild)): Path<(String, String)>,
) -> ApiResult {
    let app = application(&node, &caller, &app).await?;
    guild_scope(&node, &app, &guild).await?;
    ok(&Vec::<Value>::new())
}

/// One command's permission overwrites: Discord answers 10066 for a
/// command that has none (after checking that the command exists).
async fn command_permissions(
    State(node): State<AppState>,
    Caller(caller): Caller,
    Path((app, guild, command)): Path<(String, String, String)>,
) -> ApiResult {
    let app_row = application(&node, &caller, &app).await?;
    let guild_id = guild_scope(&node, &app_row, &guild).await?;
    let id =
        parse_id(&command).map_err(|_| ApiError::Code(ErrorCode::UnknownApplicationCommand))?;
    let store = &node.shared.store;
    // A guild's permissions may name a global command or one of its own.
    let known = store.command(app_row.id, guild_id, id).await?.is_some()
        || store.command(app_row.id, 0, id).await?.is_some();
    if !known {
        return Err(ApiError::Code(ErrorCode::UnknownApplicationCommand));
    }
    Err(ApiError::Code(
        ErrorCode::UnknownApplicationCommandPermissions,
    ))
}

/// The routes, relative to `/api/v10`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/applications/{id}/commands",
            get(list_global).post(create_global).put(overwrite_global),
        )
        .route(
            "/applications/{id}/commands/{command}",
            get(get_global).patch(edit_global).delete(delete_global),
        )
        .route(
            "/applications/{id}/guilds/{guild}/commands",
            get(list_guild).post(create_guild).put(overwrite_guild),
        )
        .route(
            "/applications/{id}/guilds/{guild}/commands/permissions",
            get(guild_permissions),
        )
        .route(
            "/applications/{id}/guilds/{guild}/commands/{command}",
            get(get_guild_command)
                .patch(edit_guild_command)
                .delete(delete_guild_command),
        )
        .route(
            "/applications/{id}/guilds/{guild}/commands/{command}/permissions",
            get(command_permissions),
        )
}
