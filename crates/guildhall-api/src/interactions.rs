//! Interactions: a user invokes an application's command, clicks a
//! component of the application's message, or submits a modal it showed
//! (`POST /interactions`, a user token); the application's bot gets
//! INTERACTION_CREATE and answers over HTTP (`POST
//! /interactions/{id}/{token}/callback`, no account, the token), then
//! edits its response and sends followups through the interaction's
//! webhook (`/webhooks/{application_id}/{token}...`, served from
//! `webhooks`' routes).
//!
//! What is checked before an interaction exists: the user is not a bot
//! (20001), the application and its command exist at the version the
//! client names, the user holds the command's `default_member_permissions`
//! (50013), the user is a member who sees the channel and so is the
//! bot (asked of the guild's owner, as every permission check), the
//! options fit the stored command spec, a component is on a message of
//! the application with that `custom_id` and type, a modal submit answers
//! a modal the application showed this user. Nothing is created for a
//! refused body (50035 with every problem).
//!
//! The interaction table ([`Table`]) is pure: it takes `now_ms`, holds
//! every bound (`interactions_max`, pending per application, each user's
//! per-minute window), and its sweep (bounded per pass) forgets expired
//! interactions and turns missed deadlines into INTERACTION_FAILURE for
//! the invoking user's sessions. Tokens are 68 random characters and the
//! creating node's tag, kept as SHA-256 digests and compared in constant
//! time, like webhook tokens.
//!
//! A response message is durable before the callback is answered and
//! carries `interaction_metadata`, `webhook_id` and `application_id` (the
//! application) with the bot as author. An ephemeral one (flag 64) is
//! stored with its one reader and goes to that user's sessions only
//! (never the guild's stream, never history).
//!
//! The table is per node; a callback or webhook call that reaches another
//! api node is passed on to this one (`interaction_forward`: the token
//! names the creating node).
//!
//! The user-side events go to the session the request named
//! (`session_id`), or to every session of the user when it names none
//! this cluster knows.
//!
//! Not here (yet): interactions in direct messages (50001), the
//! ATTACHMENT option, files in a callback passed on from another api node
//! (JSON only), and several sessions of one bot each getting the event.

use crate::webhooks::{check_extras, object_body, refused, string_field};
use crate::{
    ApiError, ApiResult, AppState, Caller, check_content, is_pinned, ok, parse_id, publish_message,
    read_json, store_message, wire_message,
};
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use guildhall_common::state::{now_ms, sf};
use guildhall_common::wire::wire_user;
use guildhall_limits::Limits;
use guildhall_proto::commands::{self, CommandSpec};
use guildhall_proto::components::{self, FLAG_IS_COMPONENTS_V2};
use guildhall_proto::error::ErrorCode;
use guildhall_proto::guilds::GuildError;
use guildhall_proto::interactions::{
    self as ix, CallbackBounds, CallbackInteraction, CallbackResource, CallbackResponse,
    CommandData, ComponentData, Interaction, InteractionData, InteractionGuild, InteractionMember,
    InteractionMetadata, Mention, ModalCreate, Resolved, UserInteractionEvent,
};
use guildhall_proto::model::Message;
use guildhall_store::{ApplicationRow, MessageRow, UserRow};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The locale interactions report (no user or guild locale is kept).
const LOCALE: &str = "en-US";

/// Where an interaction is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Awaiting its initial response.
    Pending,
    /// Answered with this callback type.
    Acknowledged(u8),
    /// Its deadline passed without an answer.
    Failed,
}

/// A modal an interaction's application showed the invoking user.
#[derive(Clone, Debug, PartialEq)]
pub struct ShownModal {
    /// The modal's `custom_id`.
    pub custom_id: String,
    /// Its components as the application sent them.
    pub components: Vec<Value>,
}

/// One interaction as the table holds it.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Id.
    pub id: i64,
    /// The application.
    pub application_id: i64,
    /// Its bot user (the author of its responses).
    pub bot_user_id: i64,
    /// The invoking user.
    pub user_id: i64,
    /// SHA-256 of the token.
    pub token_digest: [u8; 32],
    /// Interaction type.
    pub kind: u8,
    /// The guild.
    pub guild_id: i64,
    /// The channel.
    pub channel_id: i64,
    /// The client's nonce.
    pub nonce: Option<String>,
    /// Created at, Unix ms.
    pub created_ms: u64,
    /// Its phase.
    pub phase: Phase,
    /// The message `@original` names (the response, or for a component's
    /// update the component's message).
    pub original_id: Option<i64>,
    /// The message whose component started it (or started the modal).
    pub source_message_id: Option<i64>,
    /// The modal it answered with.
    pub modal: Option<ShownModal>,
    /// What its messages carry as `interaction_metadata`.
    pub metadata: InteractionMetadata,
    /// The message type of its responses.
    pub message_kind: u8,
    /// An autocomplete's: the type of the option being typed (its
    /// choices must be values of that type).
    pub autocomplete_kind: Option<u8>,
    /// The invoking client's session (`POST /interactions`'
    /// `session_id`): the user-side events go to it alone.
    pub session_id: Option<String>,
}

/// Why the table refused a new interaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `interactions_max` entries are held.
    Full,
    /// The application has `interactions_pending_per_application_max`
    /// interactions awaiting their response.
    ApplicationBusy,
    /// The user spent their minute's window; retry after this many ms.
    UserRate(u64),
    /// `interaction_users_max` users' windows are tracked.
    UsersFull,
}

/// Why a callback was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckError {
    /// No such interaction (or forgotten): 10062.
    Unknown,
    /// The token is not the interaction's: 401 with 50027.
    BadToken,
    /// The initial-response deadline passed: 10062.
    Late,
    /// Already answered: 40060.
    Already,
}

impl From<AckError> for ApiError {
    fn from(error: AckError) -> Self {
        ApiError::Code(match error {
            AckError::Unknown | AckError::Late => ErrorCode::UnknownInteraction,
            AckError::BadToken => ErrorCode::InvalidWebhookToken,
            AckError::Already => ErrorCode::InteractionAlreadyAcknowledged,
        })
    }
}

/// The node's interactions, every bound held. Pure: time is an argument.
#[derive(Debug)]
pub struct Table {
    entries: HashMap<i64, Entry>,
    by_token: HashMap<[u8; 32], i64>,
    /// Ids in creation order (so also expiry and deadline order: every
    /// entry has the same lifetime and deadline).
    expiry: VecDeque<(u64, i64)>,
    /// Pending ids in creation order, for the deadline sweep.
    deadlines: VecDeque<(u64, i64)>,
    pending_per_app: HashMap<i64, usize>,
    windows: HashMap<i64, (u64, u32)>,
    window_order: VecDeque<(u64, i64)>,
    deadline_ms: u64,
    ttl_ms: u64,
    entries_max: usize,
    pending_max: usize,
    per_user_max: u32,
    users_max: usize,
    sweep_max: usize,
}

/// Length of a user's interaction window.
const USER_WINDOW_MS: u64 = 60_000;

impl Table {
    /// An empty table under `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            entries: HashMap::new(),
            by_token: HashMap::new(),
            expiry: VecDeque::new(),
            deadlines: VecDeque::new(),
            pending_per_app: HashMap::new(),
            windows: HashMap::new(),
            window_order: VecDeque::new(),
            deadline_ms: limits.interaction_response_deadline_ms,
            ttl_ms: limits.interaction_token_ttl_ms,
            entries_max: limits.interactions_max,
            pending_max: limits.interactions_pending_per_application_max,
            per_user_max: limits.interactions_per_user_per_minute_max,
            users_max: limits.interaction_users_max,
            sweep_max: limits.interaction_sweep_batch_max,
        }
    }

    /// Interactions held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds `entry` if every bound allows it (its user's window counts it).
    pub fn insert(&mut self, entry: Entry, now_ms: u64) -> Result<(), Refusal> {
        if self.entries.len() >= self.entries_max {
            return Err(Refusal::Full);
        }
        let pending = self
            .pending_per_app
            .get(&entry.application_id)
            .copied()
            .unwrap_or(0);
        if pending >= self.pending_max {
            return Err(Refusal::ApplicationBusy);
        }
        match self.windows.get_mut(&entry.user_id) {
            Some((start, count)) if now_ms < *start + USER_WINDOW_MS => {
                if *count >= self.per_user_max {
                    return Err(Refusal::UserRate(*start + USER_WINDOW_MS - now_ms));
                }
                *count += 1;
            }
            Some(window) => {
                *window = (now_ms, 1);
                self.window_order.push_back((now_ms, entry.user_id));
            }
            None => {
                if self.windows.len() >= self.users_max {
                    return Err(Refusal::UsersFull);
                }
                self.windows.insert(entry.user_id, (now_ms, 1));
                self.window_order.push_back((now_ms, entry.user_id));
            }
        }
        *self
            .pending_per_app
            .entry(entry.application_id)
            .or_insert(0) += 1;
        self.expiry.push_back((entry.created_ms, entry.id));
        self.deadlines.push_back((entry.created_ms, entry.id));
        self.by_token.insert(entry.token_digest, entry.id);
        self.entries.insert(entry.id, entry);
        Ok(())
    }

    fn token_ok(entry: &Entry, token: &str) -> bool {
        use subtle::ConstantTimeEq;
        bool::from(guildhall_common::auth::token_digest(token).ct_eq(&entry.token_digest))
    }

    /// The interaction `id` if `token` is its token and its initial
    /// response is still due (nothing changes).
    pub fn due(&self, id: i64, token: &str, now_ms: u64) -> Result<&Entry, AckError> {
        let entry = self
            .entries
            .get(&id)
            .filter(|e| now_ms < e.created_ms + self.ttl_ms)
            .ok_or(AckError::Unknown)?;
        if !Self::token_ok(entry, token) {
            return Err(AckError::BadToken);
        }
        match entry.phase {
            Phase::Acknowledged(_) => Err(AckError::Already),
            Phase::Failed => Err(AckError::Late),
            Phase::Pending if now_ms >= entry.created_ms + self.deadline_ms => Err(AckError::Late),
            Phase::Pending => Ok(entry),
        }
    }

    /// Records the initial response `callback` (exactly once: a second
    /// caller, even a concurrent one, gets [`AckError::Already`]).
    pub fn acknowledge(
        &mut self,
        id: i64,
        token: &str,
        now_ms: u64,
        callback: u8,
    ) -> Result<Entry, AckError> {
        self.due(id, token, now_ms)?;
        let entry = self.entries.get_mut(&id).ok_or(AckError::Unknown)?;
        entry.phase = Phase::Acknowledged(callback);
        let app = entry.application_id;
        let entry = entry.clone();
        self.pending_done(app);
        Ok(entry)
    }

    /// Undoes an acknowledgement whose message could not be stored (the
    /// bot may retry while the deadline allows).
    pub fn revert(&mut self, id: i64) {
        if let Some(entry) = self.entries.get_mut(&id)
            && matches!(entry.phase, Phase::Acknowledged(_))
        {
            entry.phase = Phase::Pending;
            *self
                .pending_per_app
                .entry(entry.application_id)
                .or_insert(0) += 1;
        }
    }

    fn pending_done(&mut self, app: i64) {
        if let Some(count) = self.pending_per_app.get_mut(&app) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.pending_per_app.remove(&app);
            }
        }
    }

    /// Changes the entry `id` (a no-op once it is forgotten).
    pub fn update(&mut self, id: i64, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.entries.get_mut(&id) {
            change(entry);
        }
    }

    /// The interaction of `application_id` whose token is `token`, while
    /// its token lives. The digest is looked up in a map: its timing says
    /// nothing about any token's characters (SHA-256 preimages), and the
    /// entry's digest is then compared in constant time.
    pub fn by_token(&self, application_id: i64, token: &str, now_ms: u64) -> Option<&Entry> {
        let id = self
            .by_token
            .get(&guildhall_common::auth::token_digest(token))?;
        self.entries
            .get(id)
            .filter(|e| e.application_id == application_id && Self::token_ok(e, token))
            .filter(|e| now_ms < e.created_ms + self.ttl_ms)
    }

    /// The interaction `id`, while its token lives.
    pub fn get(&self, id: i64, now_ms: u64) -> Option<&Entry> {
        self.entries
            .get(&id)
            .filter(|e| now_ms < e.created_ms + self.ttl_ms)
    }

    /// One bounded pass: at most `interaction_sweep_batch_max` missed
    /// deadlines become [`Phase::Failed`] (returned, for
    /// INTERACTION_FAILURE), expired interactions and user windows are
    /// forgotten.
    pub fn sweep(&mut self, now_ms: u64) -> Vec<Entry> {
        let mut failed = Vec::new();
        let mut visited = 0;
        while visited < self.sweep_max {
            let Some(&(created_ms, id)) = self.deadlines.front() else {
                break;
            };
            if now_ms < created_ms + self.deadline_ms {
                break;
            }
            self.deadlines.pop_front();
            visited += 1;
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            if entry.phase == Phase::Pending {
                entry.phase = Phase::Failed;
                let app = entry.application_id;
                failed.push(entry.clone());
                self.pending_done(app);
            }
        }
        visited = 0;
        while visited < self.sweep_max {
            let Some(&(created_ms, id)) = self.expiry.front() else {
                break;
            };
            if now_ms < created_ms + self.ttl_ms {
                break;
            }
            self.expiry.pop_front();
            visited += 1;
            if let Some(entry) = self.entries.remove(&id) {
                self.by_token.remove(&entry.token_digest);
                if entry.phase == Phase::Pending {
                    self.pending_done(entry.application_id);
                }
            }
        }
        visited = 0;
        while visited < self.sweep_max {
            let Some(&(start, user)) = self.window_order.front() else {
                break;
            };
            if now_ms < start + USER_WINDOW_MS {
                break;
            }
            self.window_order.pop_front();
            visited += 1;
            if self.windows.get(&user).is_some_and(|(s, _)| *s == start) {
                self.windows.remove(&user);
            }
        }
        failed
    }
}

/// Counters of interactions, read by `/metrics`.
#[derive(Debug, Default)]
pub struct InteractionCounters {
    /// Interactions created.
    pub created_total: AtomicU64,
    /// Creates refused by a bound (table, application, user window).
    pub refused_total: AtomicU64,
    /// Initial responses accepted.
    pub acknowledged_total: AtomicU64,
    /// Interactions whose deadline passed unanswered.
    pub failed_total: AtomicU64,
}

/// The node's interactions: the table behind a lock held only for
/// in-memory steps (never across an await).
#[derive(Debug)]
pub struct Interactions {
    table: Mutex<Table>,
    /// Counters.
    pub counters: InteractionCounters,
}

impl Interactions {
    /// Empty, under `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            table: Mutex::new(Table::new(limits)),
            counters: InteractionCounters::default(),
        }
    }

    /// The table, for one in-memory step.
    pub fn with<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut table)
    }
}

/// One sweep of the node's table, and INTERACTION_FAILURE to the users of
/// the interactions whose deadline it found passed.
pub fn sweep(node: &crate::ApiState) {
    let failed = node.interactions.with(|t| t.sweep(now_ms()));
    for entry in failed {
        node.interactions
            .counters
            .failed_total
            .fetch_add(1, Ordering::Relaxed);
        user_event(node, &entry, "INTERACTION_FAILURE");
    }
}

/// The sweep's task: one per node, every `interaction_sweep_interval_ms`.
pub async fn run_sweeper(node: std::sync::Arc<crate::ApiState>) {
    let interval_ms = node.shared.limits.interaction_sweep_interval_ms.max(1);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sweep(&node);
    }
}

fn user_event(node: &crate::ApiState, entry: &Entry, name: &str) {
    to_invoker(
        node,
        entry.user_id,
        entry.session_id.as_deref(),
        name,
        &UserInteractionEvent {
            id: sf(entry.id),
            nonce: entry.nonce.clone(),
        },
    );
}

/// A user-side event of an interaction (its creation, success or failure,
/// a modal, autocomplete choices): to the session that invoked it, as
/// Discord sends them; to every session of the user when the request named
/// none that this cluster knows.
fn to_invoker(
    node: &crate::ApiState,
    user_id: i64,
    session_id: Option<&str>,
    name: &str,
    data: &impl serde::Serialize,
) {
    if session_id.is_some_and(|session| node.gateways().to_session(user_id, session, name, data)) {
        return;
    }
    node.gateways()
        .to_users_in(None, vec![user_id], 0, name, data);
}

fn owners(guild_id: i64) -> BTreeMap<String, guildhall_proto::Snowflake> {
    [("0".to_owned(), sf(guild_id))].into()
}

fn invalid(node: &crate::ApiState, body: guildhall_proto::error::ErrorBody) -> ApiError {
    refused(node, ApiError::Invalid(body))
}

fn field(
    node: &crate::ApiState,
    field: &'static str,
    code: &'static str,
    message: &str,
) -> ApiError {
    refused(node, ApiError::Field(field, code, message.to_owned()))
}

// ----- POST /interactions ----------------------------------------------------

/// What the type-specific checks produce.
struct Checked {
    data: InteractionData,
    message: Option<Box<Message>>,
    source_message_id: Option<i64>,
    metadata_extra: MetadataExtra,
    message_kind: u8,
}

#[derive(Default)]
struct MetadataExtra {
    name: Option<String>,
    command_type: Option<u8>,
    target_user: Option<guildhall_proto::model::User>,
    target_message_id: Option<i64>,
    interacted_message_id: Option<i64>,
    triggering: Option<InteractionMetadata>,
}

async fn create(State(node): State<AppState>, Caller(caller): Caller, req: Request) -> ApiResult {
    if caller.bot {
        return Err(refused(&node, ApiError::Code(ErrorCode::BotsCannotUse)));
    }
    let limits = &node.shared.limits;
    let body: Value = read_json(req, &node, limits.rest_body_bytes_max).await?;
    let request =
        ix::parse_create(&body, limits.message_nonce_chars_max).map_err(|e| invalid(&node, e))?;
    let store = &node.shared.store;
    let app = store
        .application(request.application_id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownApplication))?;
    let channel = store
        .channel(request.channel_id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownChannel))?;
    // Direct messages have no guild owner to ask, and user installs are
    // not modelled: interactions happen in guilds.
    let Some(guild_id) = channel.guild_id else {
        return Err(ApiError::Code(ErrorCode::MissingAccess));
    };
    if request.guild_id.is_some_and(|g| g != guild_id) {
        return Err(ApiError::Code(ErrorCode::UnknownChannel));
    }
    // Both must be members who see the channel: the user to invoke, the
    // bot because the application is installed in the guild through it.
    let grant = node
        .guilds
        .authorize(guild_id, caller.id, channel.id, 0)
        .await?;
    let bot_grant = node
        .guilds
        .authorize(guild_id, app.bot_user_id, channel.id, 0)
        .await
        .map_err(|_| ApiError::Code(ErrorCode::UnknownApplication))?;
    let now = now_ms();
    let checked = match request.kind {
        ix::APPLICATION_COMMAND | ix::AUTOCOMPLETE => {
            check_command(
                &node,
                &app,
                (guild_id, grant.permissions),
                channel.id,
                &request,
            )
            .await?
        }
        ix::MESSAGE_COMPONENT => check_component(&node, &app, &caller, &channel, &request).await?,
        _ => check_modal(&node, &app, &caller, &request, now).await?,
    };
    let id = node.shared.next_id().get() as i64;
    // The token names this node: a callback that reaches another api node
    // is passed on here (`interaction_forward`).
    let token =
        crate::interaction_forward::new_token(&node.node_name).map_err(|_| ApiError::Internal)?;
    let user = wire_user(&caller);
    let extra = checked.metadata_extra;
    let metadata = InteractionMetadata {
        id: sf(id),
        kind: request.kind,
        user: user.clone(),
        authorizing_integration_owners: owners(guild_id),
        original_response_message_id: None,
        interacted_message_id: extra.interacted_message_id.map(sf),
        triggering_interaction_metadata: extra.triggering.map(Box::new),
        name: extra.name,
        command_type: extra.command_type,
        target_user: extra.target_user,
        target_message_id: extra.target_message_id.map(sf),
    };
    let mut member = grant.member.clone();
    member.user = Some(user);
    let autocomplete_kind = match &checked.data {
        InteractionData::Command(data) if request.kind == ix::AUTOCOMPLETE => {
            data.options.as_deref().and_then(ix::focused_kind)
        }
        _ => None,
    };
    let interaction = Interaction {
        id: sf(id),
        application_id: sf(app.id),
        kind: request.kind,
        data: checked.data,
        guild_id: Some(sf(guild_id)),
        guild: Some(InteractionGuild {
            id: sf(guild_id),
            features: vec![],
            locale: LOCALE.into(),
        }),
        channel: serde_json::to_value(guildhall_common::wire::wire_channel(&channel, false))
            .unwrap_or(Value::Null),
        channel_id: sf(channel.id),
        member: Some(InteractionMember {
            member,
            permissions: grant.permissions.to_string(),
        }),
        user: None,
        token: token.clone(),
        version: 1,
        message: checked.message,
        app_permissions: bot_grant.permissions.to_string(),
        locale: LOCALE.into(),
        guild_locale: Some(LOCALE.into()),
        entitlements: vec![],
        authorizing_integration_owners: owners(guild_id),
        context: ix::CONTEXT_GUILD,
        // What a response's file may weigh here (`attachment_bytes_max`).
        attachment_size_limit: limits.attachment_bytes_max as u64,
    };
    let entry = Entry {
        id,
        application_id: app.id,
        bot_user_id: app.bot_user_id,
        user_id: caller.id,
        token_digest: guildhall_common::auth::token_digest(&token),
        kind: request.kind,
        guild_id,
        channel_id: channel.id,
        nonce: request.nonce.clone(),
        created_ms: now,
        phase: Phase::Pending,
        original_id: None,
        source_message_id: checked.source_message_id,
        modal: None,
        metadata,
        message_kind: checked.message_kind,
        autocomplete_kind,
        session_id: request.session_id.clone(),
    };
    // A sweep with every create: a node whose sweeper lags still frees
    // room before refusing for want of it.
    sweep(&node);
    let counters = &node.interactions.counters;
    if let Err(refusal) = node.interactions.with(|t| t.insert(entry, now)) {
        counters.refused_total.fetch_add(1, Ordering::Relaxed);
        guildhall_common::throttled!(
            warn,
            "interactions.refused",
            ?refusal,
            application = app.id,
            "interaction refused by a bound"
        );
        return match refusal {
            Refusal::UserRate(retry_ms) => Err(ApiError::RateLimited(retry_ms as f64 / 1000.0)),
            // Not the caller's doing: scope `shared`, not counted against
            // their invalid requests.
            Refusal::Full | Refusal::ApplicationBusy | Refusal::UsersFull => {
                Ok(crate::hashing_busy())
            }
        };
    }
    counters.created_total.fetch_add(1, Ordering::Relaxed);
    node.gateways().to_users_in(
        Some(guild_id),
        vec![app.bot_user_id],
        0,
        "INTERACTION_CREATE",
        &interaction,
    );
    to_invoker(
        &node,
        caller.id,
        request.session_id.as_deref(),
        "INTERACTION_CREATE",
        &UserInteractionEvent {
            id: sf(id),
            nonce: request.nonce,
        },
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn check_command(
    node: &crate::ApiState,
    app: &ApplicationRow,
    (guild_id, permissions): (i64, u64),
    channel_id: i64,
    request: &ix::CreateRequest,
) -> Result<Checked, ApiError> {
    let sent = ix::parse_command_data(&request.data).map_err(|e| invalid(node, e))?;
    let store = &node.shared.store;
    let row = match store.command(app.id, guild_id, sent.id).await? {
        Some(row) => row,
        None => store
            .command(app.id, 0, sent.id)
            .await?
            .ok_or(ApiError::Code(ErrorCode::UnknownApplicationCommand))?,
    };
    if row.version != sent.version
        || row.name != sent.name
        || sent.kind.is_some_and(|k| i64::from(k) != row.kind)
    {
        return Err(field(
            node,
            "version",
            "APPLICATION_COMMAND_OUTDATED",
            "This command is outdated, please try again in a few minutes.",
        ));
    }
    let spec: CommandSpec = serde_json::from_str(&row.spec).map_err(|_| ApiError::Internal)?;
    // The command's `default_member_permissions` (Discord's client hides
    // it from members without them; a client that sends it anyway is
    // refused, or bots relying on the gate would run admin commands for
    // anyone).
    if !commands::member_may_use(spec.default_member_permissions.as_deref(), permissions) {
        return Err(refused(node, ApiError::Code(ErrorCode::MissingPermissions)));
    }
    let autocomplete = request.kind == ix::AUTOCOMPLETE;
    if autocomplete && spec.kind != commands::CHAT_INPUT {
        return Err(field(
            node,
            "type",
            "INTERACTION_TYPE_INVALID",
            "Only slash commands autocomplete.",
        ));
    }
    let mut resolved = Resolved::default();
    let mut extra = MetadataExtra {
        name: Some(spec.name.clone()),
        command_type: Some(spec.kind),
        ..MetadataExtra::default()
    };
    let mut options = None;
    let mut target_id = None;
    let mut mentions = Vec::new();
    if spec.kind == commands::CHAT_INPUT {
        let (checked, found) =
            ix::check_options(&spec, &request.data, autocomplete).map_err(|e| invalid(node, e))?;
        options = Some(checked);
        mentions = found;
    } else if matches!(spec.kind, commands::USER | commands::MESSAGE) {
        let Some(target) = sent.target_id else {
            return Err(field(
                node,
                "target_id",
                "BASE_TYPE_REQUIRED",
                "This field is required",
            ));
        };
        target_id = Some(sf(target));
        if spec.kind == commands::USER {
            mentions.push(Mention::User(target));
        } else {
            let message = store
                .message(channel_id, target)
                .await?
                .filter(|m| m.visible_to.is_none())
                .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
            let author = store
                .user(message.author_id)
                .await?
                .ok_or(ApiError::Internal)?;
            let mut wire = wire_message(&node.files, &message, &author, None);
            wire.pinned = is_pinned(node, &message).await?;
            resolved.messages.insert(target.to_string(), wire);
            extra.target_message_id = Some(target);
        }
    }
    resolve(node, (guild_id, app.bot_user_id), &mentions, &mut resolved).await?;
    if spec.kind == commands::USER {
        extra.target_user = resolved.users.values().next().cloned();
    }
    let message_kind = if spec.kind == commands::CHAT_INPUT {
        ix::MESSAGE_CHAT_INPUT_COMMAND
    } else {
        ix::MESSAGE_CONTEXT_MENU_COMMAND
    };
    Ok(Checked {
        data: InteractionData::Command(CommandData {
            id: sf(row.id),
            name: row.name.clone(),
            kind: spec.kind,
            resolved: (!resolved.is_empty()).then_some(resolved),
            options,
            guild_id: (row.guild_id != 0).then(|| sf(row.guild_id)),
            target_id,
        }),
        message: None,
        source_message_id: None,
        metadata_extra: extra,
        message_kind,
    })
}

/// Users, their members, roles and channels the options name, into
/// `resolved`; one that does not exist (a channel of another guild, a role
/// of none, a mentionable that is neither) refuses the interaction. Members
/// are asked of the guild's owner one by one, roles as `asker` (the
/// application's bot, a member): members without `user`, `deaf` and
/// `mute` but with their `permissions`, as Discord resolves them.
async fn resolve(
    node: &crate::ApiState,
    (guild_id, asker): (i64, i64),
    mentions: &[Mention],
    resolved: &mut Resolved,
) -> Result<(), ApiError> {
    let store = &node.shared.store;
    let mut user_ids: Vec<i64> = mentions
        .iter()
        .filter_map(|m| match m {
            Mention::User(id) | Mention::Mentionable(id) => Some(*id),
            _ => None,
        })
        .collect();
    user_ids.sort_unstable();
    user_ids.dedup();
    let users = store.users_by_ids(&user_ids).await?;
    for mention in mentions {
        match mention {
            Mention::User(id) if !users.iter().any(|u| u.id == *id) => {
                return Err(field(node, "options", "USER_UNKNOWN", "Unknown user."));
            }
            Mention::Channel(id) => {
                let channel = store
                    .channel(*id)
                    .await?
                    .filter(|c| c.guild_id == Some(guild_id))
                    .ok_or_else(|| field(node, "options", "CHANNEL_UNKNOWN", "Unknown channel."))?;
                resolved.channels.insert(
                    id.to_string(),
                    serde_json::to_value(guildhall_common::wire::wire_channel(&channel, false))
                        .unwrap_or(Value::Null),
                );
            }
            _ => {}
        }
    }
    for user in &users {
        resolved.users.insert(user.id.to_string(), wire_user(user));
    }
    // One guild call per user (an interaction names at most 25 options):
    // the member and its permissions, which Discord's resolved members
    // carry. A user who is no member (or sees nothing of the guild) has
    // none.
    for user in &users {
        let grant = node
            .guilds
            .authorize(guild_id, user.id, guildhall_proto::guilds::GUILD_WIDE, 0)
            .await;
        let grant = match grant {
            Ok(grant) => grant,
            Err(GuildError::MissingAccess) => continue,
            Err(error) => return Err(error.into()),
        };
        let mut value = serde_json::to_value(&grant.member).unwrap_or(Value::Null);
        if let Some(fields) = value.as_object_mut() {
            for absent in ["user", "deaf", "mute"] {
                fields.remove(absent);
            }
            fields.insert(
                "permissions".into(),
                Value::String(grant.permissions.to_string()),
            );
        }
        resolved.members.insert(user.id.to_string(), value);
    }
    let role_ids: Vec<i64> = mentions
        .iter()
        .filter_map(|m| match m {
            Mention::Role(id) => Some(*id),
            Mention::Mentionable(id) if !users.iter().any(|u| u.id == *id) => Some(*id),
            _ => None,
        })
        .collect();
    if !role_ids.is_empty() {
        let roles = node.guilds.roles(guild_id, asker).await?;
        for id in role_ids {
            let Some(role) = roles.iter().find(|r| r.id.get() as i64 == id) else {
                let (code, message) = if mentions.contains(&Mention::Role(id)) {
                    ("ROLE_UNKNOWN", "Unknown role.")
                } else {
                    ("MENTIONABLE_UNKNOWN", "Unknown user or role.")
                };
                return Err(field(node, "options", code, message));
            };
            resolved.roles.insert(
                id.to_string(),
                serde_json::to_value(role).unwrap_or(Value::Null),
            );
        }
    }
    Ok(())
}

/// `(custom_id, values)` of every submitted component of a modal that
/// carries `values` (rows and labels walked; the shape was checked).
fn submitted_values(components: &[Value]) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> = components.iter().collect();
    // Bounded by the checked submission (at most 25 inputs, 4 deep).
    while let Some(item) = stack.pop() {
        if let (Some(id), Some(values)) = (
            item.get("custom_id").and_then(Value::as_str),
            item.get("values").and_then(Value::as_array),
        ) {
            let values = values
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect();
            out.push((id.to_owned(), values));
        }
        if let Some(Value::Array(inner)) = item.get("components") {
            stack.extend(inner.iter());
        }
        if let Some(inner) = item.get("component") {
            stack.push(inner);
        }
    }
    out
}

/// What an auto-populated select's `values` name: snowflakes, each a
/// user, role, user-or-role or channel by the menu's type; anything else
/// is 50035 on `data.values`.
fn select_mentions(
    node: &crate::ApiState,
    found: &ix::FoundComponent,
    values: &[String],
) -> Result<Vec<Mention>, ApiError> {
    let mut mentions = Vec::with_capacity(values.len());
    for value in values {
        let Some(id) = value.parse::<i64>().ok().filter(|id| *id > 0) else {
            return Err(field(
                node,
                "values",
                "NUMBER_TYPE_COERCE",
                "Each value is a snowflake.",
            ));
        };
        mentions.push(match found.kind {
            components::USER_SELECT => Mention::User(id),
            components::ROLE_SELECT => Mention::Role(id),
            components::MENTIONABLE_SELECT => Mention::Mentionable(id),
            _ => Mention::Channel(id),
        });
    }
    Ok(mentions)
}

async fn check_component(
    node: &crate::ApiState,
    app: &ApplicationRow,
    caller: &UserRow,
    channel: &guildhall_store::ChannelRow,
    request: &ix::CreateRequest,
) -> Result<Checked, ApiError> {
    let limits = &node.shared.limits;
    let data = ix::parse_component_data(&request.data, limits.component_custom_id_chars_max)
        .map_err(|e| invalid(node, e))?;
    let Some(message_id) = request.message_id else {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    };
    let row = node
        .shared
        .store
        .message(channel.id, message_id)
        .await?
        .filter(|m| m.visible_to.is_none_or(|reader| reader == caller.id))
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
    // Only the application's own messages carry its components.
    if row.author_id != app.bot_user_id {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    let components: Vec<Value> = row
        .components
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    let Some(found) = ix::find_component(&components, &data.custom_id) else {
        return Err(field(
            node,
            "custom_id",
            "COMPONENT_CUSTOM_ID_UNKNOWN",
            "The message has no component with this custom_id.",
        ));
    };
    if found.kind != data.component_type {
        return Err(field(
            node,
            "component_type",
            "COMPONENT_TYPE_MISMATCH",
            "The component is of another type.",
        ));
    }
    if found.component.get("disabled").and_then(Value::as_bool) == Some(true) {
        return Err(field(
            node,
            "custom_id",
            "COMPONENT_DISABLED",
            "The component is disabled.",
        ));
    }
    let values = match found.kind {
        ix::COMPONENT_BUTTON => None,
        _ => {
            let values = data.values.clone().unwrap_or_default();
            ix::check_select(&found, &values).map_err(|e| invalid(node, e))?;
            Some(values)
        }
    };
    // An auto-populated select's values are ids: what they name is
    // resolved (and must exist, in this guild, of the channel types the
    // menu offers), as Discord resolves them for the application.
    let resolved = match (found.kind, &values, channel.guild_id) {
        (kind, Some(values), Some(guild_id)) if components::auto_populated(kind) => {
            let mentions = select_mentions(node, &found, values)?;
            let mut resolved = Resolved::default();
            resolve(node, (guild_id, app.bot_user_id), &mentions, &mut resolved).await?;
            let offered: Vec<u64> = found
                .component
                .get("channel_types")
                .and_then(Value::as_array)
                .map(|t| t.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let outside = resolved.channels.values().any(|c| {
                !offered.is_empty()
                    && !c
                        .get("type")
                        .and_then(Value::as_u64)
                        .is_some_and(|t| offered.contains(&t))
            });
            if outside {
                return Err(field(
                    node,
                    "values",
                    "CHANNEL_TYPE_INVALID",
                    "The menu does not offer channels of this type.",
                ));
            }
            (!resolved.is_empty()).then_some(resolved)
        }
        _ => None,
    };
    let author = node
        .shared
        .store
        .user(row.author_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let mut message = wire_message(&node.files, &row, &author, None);
    message.pinned = is_pinned(node, &row).await?;
    Ok(Checked {
        data: InteractionData::Component(ComponentData {
            custom_id: data.custom_id,
            component_type: found.kind,
            values,
            resolved,
        }),
        message: Some(Box::new(message)),
        source_message_id: Some(row.id),
        metadata_extra: MetadataExtra {
            interacted_message_id: Some(row.id),
            ..MetadataExtra::default()
        },
        message_kind: 0,
    })
}

async fn check_modal(
    node: &crate::ApiState,
    app: &ApplicationRow,
    caller: &UserRow,
    request: &ix::CreateRequest,
    now: u64,
) -> Result<Checked, ApiError> {
    let unknown = || {
        field(
            node,
            "id",
            "MODAL_UNKNOWN",
            "No modal of this interaction was shown to you.",
        )
    };
    let origin = request
        .data
        .get("id")
        .and_then(|v| match v {
            Value::String(s) => s.parse::<i64>().ok(),
            other => other.as_i64(),
        })
        .ok_or_else(unknown)?;
    // The modal the application showed this user, from the interaction
    // that showed it (its token still living).
    let Some((modal, source, triggering, (source_channel, guild_id))) =
        node.interactions.with(|t| {
            t.get(origin, now)
                .filter(|e| e.user_id == caller.id && e.application_id == app.id)
                .and_then(|e| {
                    e.modal.clone().map(|m| {
                        (
                            m,
                            e.source_message_id,
                            e.metadata.clone(),
                            (e.channel_id, e.guild_id),
                        )
                    })
                })
        })
    else {
        return Err(unknown());
    };
    let mut data = ix::check_modal_submit(&request.data, &modal.custom_id, &modal.components)
        .map_err(|e| invalid(node, e))?;
    // The modal's auto-populated selects picked ids: resolved as a
    // message's selects are (each must exist, in the guild).
    let mut mentions = Vec::new();
    for (custom_id, values) in submitted_values(&data.components) {
        if let Some(found) = ix::find_component(&modal.components, &custom_id)
            .filter(|f| components::auto_populated(f.kind))
        {
            mentions.extend(select_mentions(node, &found, &values)?);
        }
    }
    if !mentions.is_empty() {
        let mut resolved = Resolved::default();
        resolve(node, (guild_id, app.bot_user_id), &mentions, &mut resolved).await?;
        data.resolved = (!resolved.is_empty()).then_some(resolved);
    }
    // A modal a component showed carries the message that component is
    // on, as it is now ("for components or modals triggered by
    // components, the message they were attached to").
    let mut message = None;
    if let Some(source) = source {
        let store = &node.shared.store;
        if let Some(row) = store
            .message(source_channel, source)
            .await?
            .filter(|m| m.visible_to.is_none_or(|reader| reader == caller.id))
        {
            let author = store.user(row.author_id).await?.ok_or(ApiError::Internal)?;
            let mut wire = wire_message(&node.files, &row, &author, None);
            wire.pinned = is_pinned(node, &row).await?;
            message = Some(Box::new(wire));
        }
    }
    Ok(Checked {
        data: InteractionData::Modal(data),
        message,
        source_message_id: source,
        metadata_extra: MetadataExtra {
            interacted_message_id: source,
            triggering: Some(triggering),
            ..MetadataExtra::default()
        },
        message_kind: 0,
    })
}

// ----- the callback ------------------------------------------------------------

#[derive(Deserialize)]
struct CallbackQuery {
    with_response: Option<String>,
}

/// A message's parts as a response, a followup or an edit carries them.
pub(crate) struct Parts {
    content: Option<String>,
    tts: bool,
    flags: Option<u64>,
    /// `None`: unchanged; `Some(None)`: cleared.
    components: Option<Option<String>>,
    /// A components-v2 message's text (its text displays): what its
    /// mentions are read from.
    text: Option<String>,
    /// `None`: unchanged; `Some(None)`: cleared.
    embeds: Option<Option<String>>,
    /// Who the content may mention (an interaction's default: users).
    allowed: guildhall_proto::mentions::Allowed,
    /// The body's `attachments` (raw; an edit plans them against the
    /// message's own).
    attachments: Option<Value>,
    /// The files sent with it.
    uploads: Vec<crate::files::Upload>,
    /// A new message's attachments, planned (checked before the
    /// interaction is acknowledged).
    planned: Vec<crate::files::Planned>,
}

/// Checks a message body as webhooks check theirs (content, embeds,
/// allowed_mentions, refused fields), its components under the flags the
/// message will have (`stored_flags`, an edited message's, with the
/// body's), and the flags a response may set. `creating`: the message
/// must hold something ([`crate::check_message_state`]). `root`: where
/// the message sits in the body (`["data"]` in a callback), for the
/// components' errors.
pub(crate) fn message_parts(
    node: &crate::ApiState,
    body: &Map<String, Value>,
    creating: bool,
    stored_flags: u64,
    root: &[&str],
    uploads: Vec<crate::files::Upload>,
) -> Result<Parts, ApiError> {
    let extras = check_extras(node, body)?;
    let attachments = body.get("attachments").cloned();
    let planned = if creating {
        let planned = crate::files::plan(
            attachments.as_ref(),
            &uploads,
            &[],
            crate::plan_limits(node),
        )
        .map_err(|error| crate::invalid_form(node, &error))?;
        if let Some(Value::Array(embeds)) = body.get("embeds") {
            crate::files::check_embed_refs(embeds, &crate::files::planned_names(&planned))
                .map_err(|error| crate::invalid_form(node, &error))?;
        }
        planned
    } else {
        Vec::new()
    };
    let content = match body.get("content") {
        Some(Value::Null) if !creating => Some(String::new()),
        _ => string_field(node, body, "content")?,
    };
    let flags = crate::flags_field(
        node,
        body.get("flags"),
        ix::RESPONSE_FLAGS,
        "Only SUPPRESS_EMBEDS, EPHEMERAL, SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2 can be set.",
    )?;
    let surface = stored_flags | flags.unwrap_or(0);
    let v2 = surface & FLAG_IS_COMPONENTS_V2 != 0;
    let mut path = root.to_vec();
    path.push("components");
    let components = match body.get("components") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(raw) => Some(crate::checked_components(node, raw, surface, &path)?),
    };
    let has_components = components.as_ref().is_some_and(Option::is_some);
    if creating {
        crate::check_message_state(
            node,
            surface,
            content.as_deref().unwrap_or_default(),
            extras.embeds > 0,
            has_components,
            !planned.is_empty(),
        )?;
    } else if let Some(content) = &content {
        // An edit: what it sets must fit the message it edits.
        if v2 {
            crate::check_message_state(node, surface, content, extras.embeds > 0, true, false)?;
        } else {
            check_content(node, content, extras.embeds > 0 || has_components)
                .map_err(|e| refused(node, e))?;
        }
    }
    let text = components
        .as_ref()
        .and_then(Option::as_ref)
        .filter(|_| v2)
        .map(|kept| guildhall_proto::components::text_of(kept));
    let tts = body.get("tts").and_then(Value::as_bool).unwrap_or(false);
    Ok(Parts {
        content,
        tts,
        flags,
        components: components.map(|c| c.map(|kept| Value::Array(kept).to_string())),
        text,
        embeds: extras.embeds_json,
        allowed: extras.allowed,
        attachments,
        uploads,
        planned,
    })
}

/// How a response's content mentions: under its `allowed_mentions`, with
/// the bot's own permissions in the channel (asked only when the content
/// needs them).
fn mentioning(entry: &Entry, allowed: guildhall_proto::mentions::Allowed) -> crate::Mentioning {
    crate::Mentioning {
        allowed,
        rights: crate::MentionRights::Ask {
            user_id: entry.bot_user_id,
            channel_id: entry.channel_id,
        },
        actor_id: entry.bot_user_id,
    }
}

/// The author of the application's messages.
async fn bot_of(node: &crate::ApiState, entry: &Entry) -> Result<UserRow, ApiError> {
    node.shared
        .store
        .user(entry.bot_user_id)
        .await?
        .ok_or(ApiError::Internal)
}

/// Announces `message` (a response's or followup's): to the guild's
/// sessions, or, ephemeral, to the invoking user's sessions only.
async fn announce(
    node: &crate::ApiState,
    entry: &Entry,
    row: &MessageRow,
    name: &str,
    message: &Message,
) {
    if row.visible_to.is_some() {
        node.gateways()
            .to_users_in(Some(entry.guild_id), vec![entry.user_id], 0, name, message);
    } else {
        publish_message(node, name, entry.guild_id, message, entry.bot_user_id).await;
    }
}

/// A new message answering `entry` (a response or a followup).
async fn post_message(
    node: &crate::ApiState,
    entry: &Entry,
    parts: Parts,
    extra_flags: u64,
    followup: bool,
) -> Result<(MessageRow, Message), ApiError> {
    let flags = parts.flags.unwrap_or(0) | extra_flags;
    let content = parts.content.unwrap_or_default();
    let mentioned = crate::mentions_of(
        node,
        Some(entry.guild_id),
        parts.text.as_deref().unwrap_or(&content),
        &mentioning(entry, parts.allowed),
        None,
    )
    .await?;
    let mut metadata = entry.metadata.clone();
    if followup {
        metadata.original_response_message_id = entry.original_id.map(sf);
    }
    // The files are durable before the row that names them is written.
    let attachments =
        crate::files::store_planned(node, entry.channel_id, parts.planned, &parts.uploads).await?;
    let row = MessageRow {
        tts: parts.tts,
        webhook_id: Some(entry.application_id),
        kind: i64::from(entry.message_kind),
        flags: flags as i64,
        components: parts.components.flatten(),
        application_id: Some(entry.application_id),
        interaction_id: Some(entry.id),
        interaction_metadata: serde_json::to_string(&metadata).ok(),
        embeds: parts.embeds.flatten(),
        visible_to: (flags & ix::FLAG_EPHEMERAL != 0).then_some(entry.user_id),
        reference_kind: None,
        reference_message_id: None,
        reference_channel_id: None,
        reference_guild_id: None,
        mentions: mentioned,
        attachments: crate::files::stored(&attachments),
        ..MessageRow::plain(
            node.shared.next_id().get() as i64,
            entry.channel_id,
            Some(entry.guild_id),
            entry.bot_user_id,
            content,
        )
    };
    store_message(node, &row).await?;
    let bot = bot_of(node, entry).await?;
    let message = wire_message(&node.files, &row, &bot, None);
    announce(node, entry, &row, "MESSAGE_CREATE", &message).await;
    Ok((row, message))
}

/// Applies `parts` to the message `id` of the entry's channel, stores it
/// and announces MESSAGE_UPDATE. `done_loading`: a deferred response's
/// edit clears LOADING.
async fn update_message(
    node: &crate::ApiState,
    entry: &Entry,
    id: i64,
    parts: Parts,
) -> Result<Message, ApiError> {
    let store = &node.shared.store;
    let mut row = store
        .message(entry.channel_id, id)
        .await?
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
    // Only the flags a response may set change; EPHEMERAL stays what it
    // was (a message does not change audience), IS_COMPONENTS_V2 once set
    // stays, LOADING ends.
    let kept = row.flags as u64 & (ix::FLAG_EPHEMERAL | FLAG_IS_COMPONENTS_V2);
    let set = parts
        .flags
        .map_or(row.flags as u64 & ix::RESPONSE_FLAGS, |f| {
            f & !ix::FLAG_EPHEMERAL
        });
    row.flags = ((set & !ix::FLAG_EPHEMERAL) | kept) as i64;
    let text_changed = parts.content.is_some() || parts.text.is_some();
    if let Some(content) = parts.content {
        row.content = content;
    }
    if let Some(components) = parts.components {
        row.components = components;
    }
    if let Some(embeds) = parts.embeds {
        row.embeds = embeds;
    }
    let before = row.attachments.clone();
    if let Some(attachments) =
        crate::files::edited(node, &row, parts.attachments.as_ref(), &parts.uploads).await?
    {
        row.attachments = attachments;
    }
    crate::check_stored_embed_refs(node, &row)?;
    if text_changed {
        // Rebuilt from the new text, as Discord rebuilds them.
        row.mentions = crate::mentions_of(
            node,
            Some(entry.guild_id),
            &crate::mention_text(&row),
            &mentioning(entry, parts.allowed),
            None,
        )
        .await?;
    }
    row.edited_ms = Some(now_ms() as i64);
    if !store.update_message(&row).await? {
        return Err(ApiError::Code(ErrorCode::UnknownMessage));
    }
    crate::forget_dropped(node, before.as_deref(), &row);
    let bot = store.user(row.author_id).await?.ok_or(ApiError::Internal)?;
    let mut message = wire_message(&node.files, &row, &bot, None);
    // An edit leaves a pin as it was, and the update says so.
    message.pinned = is_pinned(node, &row).await?;
    announce(node, entry, &row, "MESSAGE_UPDATE", &message).await;
    Ok(message)
}

async fn callback(
    State(node): State<AppState>,
    Path((raw_id, token)): Path<(String, String)>,
    Query(query): Query<CallbackQuery>,
    req: Request,
) -> ApiResult {
    let req = match crate::interaction_forward::pass_on(
        &node,
        &token,
        req,
        ErrorCode::UnknownInteraction,
    )
    .await
    {
        Ok(answered) => return Ok(answered),
        Err(req) => req,
    };
    let id = parse_id(&raw_id).map_err(|_| ApiError::Code(ErrorCode::UnknownInteraction))?;
    let limits = &node.shared.limits;
    let mut form = crate::files::read_message_body::<Value>(req, &node).await?;
    let body = std::mem::take(&mut form.body);
    // The token first: a caller without it learns nothing of the body's
    // rules or the interaction's state.
    let entry = node
        .interactions
        .with(|t| t.due(id, &token, now_ms()).cloned())
        .map_err(|e| {
            if e == AckError::BadToken {
                node.counters
                    .unauthorized_total
                    .fetch_add(1, Ordering::Relaxed);
            }
            ApiError::from(e)
        })?;
    let bounds = CallbackBounds {
        custom_id_chars_max: limits.component_custom_id_chars_max,
        modal_title_chars_max: limits.interaction_modal_title_chars_max,
        modal_components_max: limits.interaction_modal_components_max,
        autocomplete_choices_max: limits.interaction_autocomplete_choices_max,
    };
    let callback = ix::parse_callback(&body, &bounds).map_err(|e| invalid(&node, e))?;
    if !ix::callback_allowed(entry.kind, callback.kind, entry.source_message_id.is_some()) {
        return Err(invalid(
            &node,
            ix::callback_not_allowed(entry.kind, callback.kind),
        ));
    }
    if let (Some(choices), Some(kind)) = (&callback.choices, entry.autocomplete_kind) {
        ix::check_choices(choices, kind).map_err(|e| invalid(&node, e))?;
    }
    // The message is checked before the interaction is acknowledged: a
    // refused body leaves it answerable.
    let object = object_body(&node, Value::Object(callback.data.clone()))?;
    let parts = match callback.kind {
        ix::CHANNEL_MESSAGE_WITH_SOURCE => Some(message_parts(
            &node,
            &object,
            true,
            0,
            &["data"],
            std::mem::take(&mut form.uploads),
        )?),
        ix::UPDATE_MESSAGE => {
            // The components of the message it updates, under its flags.
            let stored = match entry.source_message_id {
                Some(source) => node
                    .shared
                    .store
                    .message(entry.channel_id, source)
                    .await?
                    .map_or(0, |m| m.flags as u64),
                None => 0,
            };
            Some(message_parts(
                &node,
                &object,
                false,
                stored,
                &["data"],
                std::mem::take(&mut form.uploads),
            )?)
        }
        ix::DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE => {
            let flags = match object.get("flags").and_then(Value::as_u64) {
                Some(flags) if flags & !ix::RESPONSE_FLAGS == 0 => flags,
                None => 0,
                Some(_) => {
                    return Err(field(
                        &node,
                        "flags",
                        "MESSAGE_FLAGS_INVALID",
                        "Only EPHEMERAL can be set on a deferred response.",
                    ));
                }
            };
            Some(Parts {
                content: Some(String::new()),
                tts: false,
                flags: Some(flags & ix::FLAG_EPHEMERAL),
                components: None,
                text: None,
                embeds: None,
                allowed: guildhall_proto::mentions::Allowed::default_for(
                    guildhall_proto::mentions::Context::WebhookOrInteraction,
                ),
                attachments: None,
                uploads: Vec::new(),
                planned: Vec::new(),
            })
        }
        _ => None,
    };
    let entry = node
        .interactions
        .with(|t| t.acknowledge(id, &token, now_ms(), callback.kind))?;
    let answered = respond(&node, &entry, &callback, parts).await;
    let (message, response_message_id) = match answered {
        Ok(done) => done,
        Err(error) => {
            node.interactions.with(|t| t.revert(id));
            return Err(error);
        }
    };
    node.interactions
        .counters
        .acknowledged_total
        .fetch_add(1, Ordering::Relaxed);
    user_event(&node, &entry, "INTERACTION_SUCCESS");
    if !matches!(query.with_response.as_deref(), Some("true" | "True" | "1")) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let flags = message.as_ref().map_or(0, |m| m.flags);
    ok(&CallbackResponse {
        interaction: CallbackInteraction {
            id: sf(entry.id),
            kind: entry.kind,
            response_message_id: response_message_id.map(sf),
            response_message_loading: response_message_id.map(|_| flags & ix::FLAG_LOADING != 0),
            response_message_ephemeral: response_message_id
                .map(|_| flags & ix::FLAG_EPHEMERAL != 0),
        },
        resource: Some(CallbackResource {
            kind: callback.kind,
            message: message.filter(|_| {
                matches!(
                    callback.kind,
                    ix::CHANNEL_MESSAGE_WITH_SOURCE | ix::UPDATE_MESSAGE
                )
            }),
        }),
    })
}

/// Carries out an acknowledged callback: the message it creates or
/// updates (stored before the answer), the modal or choices it shows.
async fn respond(
    node: &crate::ApiState,
    entry: &Entry,
    callback: &ix::Callback,
    parts: Option<Parts>,
) -> Result<(Option<Message>, Option<i64>), ApiError> {
    match (callback.kind, parts) {
        (ix::CHANNEL_MESSAGE_WITH_SOURCE, Some(parts)) => {
            let (row, message) = post_message(node, entry, parts, 0, false).await?;
            node.interactions
                .with(|t| t.update(entry.id, |e| e.original_id = Some(row.id)));
            Ok((Some(message), Some(row.id)))
        }
        (ix::DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE, Some(parts)) => {
            // Discord's "thinking…": an empty message flagged LOADING,
            // which @original's edit fills in.
            let (row, message) = post_message(node, entry, parts, ix::FLAG_LOADING, false).await?;
            node.interactions
                .with(|t| t.update(entry.id, |e| e.original_id = Some(row.id)));
            Ok((Some(message), Some(row.id)))
        }
        (ix::UPDATE_MESSAGE, Some(parts)) => {
            let source = entry
                .source_message_id
                .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
            let message = update_message(node, entry, source, parts).await?;
            node.interactions
                .with(|t| t.update(entry.id, |e| e.original_id = Some(source)));
            Ok((Some(message), Some(source)))
        }
        (ix::DEFERRED_UPDATE_MESSAGE, _) => {
            let source = entry.source_message_id;
            node.interactions
                .with(|t| t.update(entry.id, |e| e.original_id = source));
            Ok((None, None))
        }
        (ix::AUTOCOMPLETE_RESULT, _) => {
            to_invoker(
                node,
                entry.user_id,
                entry.session_id.as_deref(),
                "APPLICATION_COMMAND_AUTOCOMPLETE_RESPONSE",
                &ix::AutocompleteResponse {
                    id: sf(entry.id),
                    nonce: entry.nonce.clone(),
                    choices: callback.choices.clone().unwrap_or_default(),
                },
            );
            Ok((None, None))
        }
        (ix::MODAL, _) => {
            let Some((custom_id, title, components)) = callback.modal.clone() else {
                return Err(ApiError::Internal);
            };
            let app_name = node
                .shared
                .store
                .application(entry.application_id)
                .await?
                .map(|a| a.name)
                .unwrap_or_default();
            node.interactions.with(|t| {
                t.update(entry.id, |e| {
                    e.modal = Some(ShownModal {
                        custom_id: custom_id.clone(),
                        components: components.clone(),
                    });
                })
            });
            to_invoker(
                node,
                entry.user_id,
                entry.session_id.as_deref(),
                "INTERACTION_MODAL_CREATE",
                &ModalCreate {
                    id: sf(entry.id),
                    nonce: entry.nonce.clone(),
                    channel_id: sf(entry.channel_id),
                    application: json!({"id": entry.application_id.to_string(), "name": app_name}),
                    custom_id,
                    title,
                    components,
                },
            );
            Ok((None, None))
        }
        _ => Err(ApiError::Internal),
    }
}

// ----- the interaction's webhook -----------------------------------------------

/// The living, acknowledged interaction of application `raw_id` whose
/// token is `token`: `None` when no interaction has that token (the
/// caller then treats the id as a webhook's); a pending or failed one is
/// 10015, as Discord answers a token without its initial response.
pub(crate) fn token_entry(
    node: &crate::ApiState,
    raw_id: &str,
    token: &str,
) -> Option<Result<Entry, ApiError>> {
    let id = parse_id(raw_id).ok()?;
    let entry = node
        .interactions
        .with(|t| t.by_token(id, token, now_ms()).cloned())?;
    Some(match entry.phase {
        Phase::Acknowledged(_) => Ok(entry),
        Phase::Pending | Phase::Failed => Err(ApiError::Code(ErrorCode::UnknownWebhook)),
    })
}

/// The message `raw` names for `entry`: `@original`, or one of its
/// followups (any other message is 10008).
async fn message_for(
    node: &crate::ApiState,
    entry: &Entry,
    raw: &str,
) -> Result<MessageRow, ApiError> {
    let store = &node.shared.store;
    if raw == "@original" {
        let id = entry
            .original_id
            .ok_or(ApiError::Code(ErrorCode::UnknownMessage))?;
        return store
            .message(entry.channel_id, id)
            .await?
            .ok_or(ApiError::Code(ErrorCode::UnknownMessage));
    }
    let id = parse_id(raw).map_err(|_| ApiError::Code(ErrorCode::UnknownMessage))?;
    store
        .message(entry.channel_id, id)
        .await?
        .filter(|m| m.interaction_id == Some(entry.id))
        .ok_or(ApiError::Code(ErrorCode::UnknownMessage))
}

/// POST `/webhooks/{application_id}/{token}`: a followup (`wait` is
/// always true; EPHEMERAL allowed).
pub(crate) async fn followup(
    node: &crate::ApiState,
    entry: &Entry,
    body: Value,
    uploads: Vec<crate::files::Upload>,
) -> ApiResult {
    let body = object_body(node, body)?;
    let parts = message_parts(node, &body, true, 0, &[], uploads)?;
    let (_, message) = post_message(node, entry, parts, 0, true).await?;
    ok(&message)
}

/// GET of `@original` or a followup.
pub(crate) async fn get(node: &crate::ApiState, entry: &Entry, raw: &str) -> ApiResult {
    let row = message_for(node, entry, raw).await?;
    let author = node
        .shared
        .store
        .user(row.author_id)
        .await?
        .ok_or(ApiError::Internal)?;
    let mut message = wire_message(&node.files, &row, &author, None);
    message.pinned = is_pinned(node, &row).await?;
    ok(&message)
}

/// PATCH of `@original` or a followup (a deferred response's edit clears
/// LOADING and fills it in).
pub(crate) async fn edit(
    node: &crate::ApiState,
    entry: &Entry,
    raw: &str,
    body: Value,
    uploads: Vec<crate::files::Upload>,
) -> ApiResult {
    let row = message_for(node, entry, raw).await?;
    let body = object_body(node, body)?;
    let parts = message_parts(node, &body, false, row.flags as u64, &[], uploads)?;
    ok(&update_message(node, entry, row.id, parts).await?)
}

/// DELETE of `@original` or a followup.
pub(crate) async fn delete(node: &crate::ApiState, entry: &Entry, raw: &str) -> ApiResult {
    let row = message_for(node, entry, raw).await?;
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
    if row.visible_to.is_some() {
        let data = json!({"id": row.id.to_string(), "channel_id": row.channel_id.to_string(), "guild_id": entry.guild_id.to_string()});
        node.gateways().to_users_in(
            Some(entry.guild_id),
            vec![entry.user_id],
            0,
            "MESSAGE_DELETE",
            &data,
        );
    } else {
        crate::publish_message_delete(node, entry.guild_id, row.channel_id, row.id).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The routes, relative to `/api/v10`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/interactions", post(create))
        .route("/interactions/{id}/{token}/callback", post(callback))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn entry(id: i64, app: i64, user: i64, token: &str, now: u64) -> Entry {
        Entry {
            id,
            application_id: app,
            bot_user_id: 99,
            user_id: user,
            token_digest: guildhall_common::auth::token_digest(token),
            kind: ix::APPLICATION_COMMAND,
            guild_id: 1,
            channel_id: 2,
            nonce: None,
            created_ms: now,
            phase: Phase::Pending,
            original_id: None,
            source_message_id: None,
            modal: None,
            metadata: InteractionMetadata {
                id: sf(id),
                kind: ix::APPLICATION_COMMAND,
                user: guildhall_proto::model::User::webhook(sf(user), "u".into(), None),
                authorizing_integration_owners: BTreeMap::new(),
                original_response_message_id: None,
                interacted_message_id: None,
                triggering_interaction_metadata: None,
                name: None,
                command_type: None,
                target_user: None,
                target_message_id: None,
            },
            message_kind: 20,
            autocomplete_kind: None,
            session_id: None,
        }
    }

    fn limits() -> Limits {
        Limits {
            interactions_max: 4,
            interactions_pending_per_application_max: 2,
            interactions_per_user_per_minute_max: 3,
            interaction_sweep_batch_max: 10,
            ..Limits::default()
        }
    }

    #[test]
    fn acknowledged_once_within_the_deadline() {
        let mut table = Table::new(&limits());
        table.insert(entry(1, 10, 100, "t1", 0), 0).unwrap();
        assert_eq!(
            table.acknowledge(1, "bad", 10, 4).unwrap_err(),
            AckError::BadToken
        );
        assert!(table.acknowledge(1, "t1", 10, 4).is_ok());
        assert_eq!(
            table.acknowledge(1, "t1", 11, 4).unwrap_err(),
            AckError::Already
        );
        table.insert(entry(2, 10, 100, "t2", 0), 0).unwrap();
        assert_eq!(
            table.acknowledge(2, "t2", 3_000, 4).unwrap_err(),
            AckError::Late
        );
        assert_eq!(
            table.acknowledge(3, "t3", 0, 4).unwrap_err(),
            AckError::Unknown
        );
        // The token serves the acknowledged one until it expires.
        assert!(table.by_token(10, "t1", 899_999).is_some());
        assert!(table.by_token(11, "t1", 10).is_none());
        assert!(table.by_token(10, "t1", 900_000).is_none());
    }

    #[test]
    fn every_bound_refuses() {
        let mut table = Table::new(&limits());
        table.insert(entry(1, 10, 100, "a", 0), 0).unwrap();
        table.insert(entry(2, 10, 101, "b", 0), 0).unwrap();
        assert_eq!(
            table.insert(entry(3, 10, 102, "c", 0), 0).unwrap_err(),
            Refusal::ApplicationBusy
        );
        table.insert(entry(3, 11, 100, "c", 0), 0).unwrap();
        table.insert(entry(4, 11, 100, "d", 0), 0).unwrap();
        assert_eq!(
            table.insert(entry(5, 12, 103, "e", 0), 0).unwrap_err(),
            Refusal::Full
        );
        // The deadline frees the pending places, expiry the table.
        let failed = table.sweep(3_000);
        assert_eq!(failed.len(), 4);
        assert_eq!(table.len(), 4);
        table.sweep(900_000);
        assert!(table.is_empty());
        let mut table = Table::new(&limits());
        for id in 0..3 {
            table
                .insert(entry(id, 20 + id, 100, &id.to_string(), 0), 0)
                .unwrap();
        }
        assert_eq!(
            table.insert(entry(9, 30, 100, "z", 5), 5).unwrap_err(),
            Refusal::UserRate(59_995)
        );
    }

    /// Random creates, callbacks and sweeps over time (seed printed; rerun
    /// with `GUILDHALL_TEST_SEED`): the table never holds more than its
    /// bounds, an interaction is acknowledged at most once and only before
    /// its deadline, and every unanswered one fails exactly once.
    #[test]
    fn random_schedules_keep_every_bound() {
        use rand::{Rng, SeedableRng};
        let seed = std::env::var("GUILDHALL_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        println!("seed {seed}");
        let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
        let limits = Limits {
            interactions_max: 40,
            interactions_pending_per_application_max: 8,
            interactions_per_user_per_minute_max: 10,
            interaction_users_max: 6,
            interaction_sweep_batch_max: 3,
            interaction_response_deadline_ms: 3_000,
            interaction_token_ttl_ms: 20_000,
            ..Limits::default()
        };
        let mut table = Table::new(&limits);
        let mut now = 0u64;
        let mut next_id = 1i64;
        let mut acked: HashMap<i64, u64> = HashMap::new();
        let mut failed: std::collections::HashSet<i64> = std::collections::HashSet::new();
        let mut created: HashMap<i64, u64> = HashMap::new();
        for _ in 0..20_000 {
            now += rng.random_range(0..200);
            match rng.random_range(0..10) {
                0..=3 => {
                    let id = next_id;
                    next_id += 1;
                    let e = entry(
                        id,
                        rng.random_range(1..4),
                        rng.random_range(1..9),
                        &id.to_string(),
                        now,
                    );
                    if table.insert(e, now).is_ok() {
                        created.insert(id, now);
                    }
                }
                4..=6 if next_id > 1 => {
                    let id = rng.random_range(1..next_id);
                    if table.acknowledge(id, &id.to_string(), now, 4).is_ok() {
                        assert!(acked.insert(id, now).is_none(), "acknowledged twice");
                        assert!(now < created[&id] + 3_000, "acknowledged late");
                        assert!(!failed.contains(&id));
                    }
                }
                _ => {
                    for e in table.sweep(now) {
                        assert!(failed.insert(e.id), "failed twice");
                        assert!(!acked.contains_key(&e.id));
                    }
                }
            }
            assert!(table.len() <= limits.interactions_max);
            assert!(table.windows.len() <= limits.interaction_users_max);
            for count in table.pending_per_app.values() {
                assert!(*count <= limits.interactions_pending_per_application_max);
            }
        }
        // Drained: every interaction was answered or failed, never both.
        now += 1_000_000;
        loop {
            let more = table.sweep(now);
            if more.is_empty() && table.is_empty() && table.windows.is_empty() {
                break;
            }
            for e in more {
                assert!(failed.insert(e.id), "failed twice");
            }
        }
        for id in created.keys() {
            assert!(
                acked.contains_key(id) != failed.contains(id),
                "interaction {id}"
            );
        }
        assert!(table.pending_per_app.is_empty());
    }

    #[test]
    fn sweeps_are_bounded() {
        let mut table = Table::new(&Limits {
            interaction_sweep_batch_max: 2,
            ..Limits::default()
        });
        for id in 0..5 {
            table
                .insert(entry(id, 10 + id, 100 + id, &id.to_string(), 0), 0)
                .unwrap();
        }
        assert_eq!(table.sweep(3_000).len(), 2);
        assert_eq!(table.sweep(3_000).len(), 2);
        assert_eq!(table.sweep(3_000).len(), 1);
        // An unswept expired entry still answers as gone.
        assert!(table.get(0, 900_000).is_none());
    }
}
