//! Interactions: the Interaction object a bot receives (INTERACTION_CREATE),
//! what a user's client sends to create one (`POST /interactions`), the
//! callback a bot answers with, the `?with_response` body, the
//! `interaction_metadata` of a response message, and the events the
//! invoking user's sessions get (INTERACTION_CREATE / SUCCESS / FAILURE,
//! INTERACTION_MODAL_CREATE, APPLICATION_COMMAND_AUTOCOMPLETE_RESPONSE).
//!
//! Parsing is pure and reports every problem of a body at once, in
//! Discord's nested 50035 shape (`data.options.0.value._errors`), like
//! [`crate::commands`]. Option values are checked against the command spec
//! the application registered: an option the spec does not have, a value
//! of the wrong type, a required option missing, a value outside the
//! choices or bounds, each refuses the interaction before anything exists.
//!
//! ```
//! use guildhall_proto::interactions::{parse_callback, CallbackBounds};
//! let ok = parse_callback(&serde_json::json!({"type": 5}), &CallbackBounds::default()).unwrap();
//! assert_eq!(ok.kind, 5);
//! let bad = parse_callback(&serde_json::json!({"type": 10}), &CallbackBounds::default()).unwrap_err();
//! assert_eq!(bad.code, 50035);
//! ```

use crate::Snowflake;
use crate::commands::{self, CommandOption, CommandSpec, Form};
use crate::error::ErrorBody;
use crate::model::{Member, Message, User};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Interaction type `PING` (HTTP endpoints only: never created here).
pub const PING: u8 = 1;
/// Interaction type `APPLICATION_COMMAND`.
pub const APPLICATION_COMMAND: u8 = 2;
/// Interaction type `MESSAGE_COMPONENT`.
pub const MESSAGE_COMPONENT: u8 = 3;
/// Interaction type `APPLICATION_COMMAND_AUTOCOMPLETE`.
pub const AUTOCOMPLETE: u8 = 4;
/// Interaction type `MODAL_SUBMIT`.
pub const MODAL_SUBMIT: u8 = 5;

/// Context `GUILD`.
pub const CONTEXT_GUILD: u8 = 0;
/// Context `BOT_DM`.
pub const CONTEXT_BOT_DM: u8 = 1;
/// Context `PRIVATE_CHANNEL`.
pub const CONTEXT_PRIVATE_CHANNEL: u8 = 2;

/// Callback `PONG`.
pub const PONG: u8 = 1;
/// Callback `CHANNEL_MESSAGE_WITH_SOURCE`.
pub const CHANNEL_MESSAGE_WITH_SOURCE: u8 = 4;
/// Callback `DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE`.
pub const DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: u8 = 5;
/// Callback `DEFERRED_UPDATE_MESSAGE`.
pub const DEFERRED_UPDATE_MESSAGE: u8 = 6;
/// Callback `UPDATE_MESSAGE`.
pub const UPDATE_MESSAGE: u8 = 7;
/// Callback `APPLICATION_COMMAND_AUTOCOMPLETE_RESULT`.
pub const AUTOCOMPLETE_RESULT: u8 = 8;
/// Callback `MODAL`.
pub const MODAL: u8 = 9;

/// Message flag `SUPPRESS_EMBEDS`: no embeds are shown.
pub const FLAG_SUPPRESS_EMBEDS: u64 = 1 << 2;
/// Message flag `SUPPRESS_NOTIFICATIONS`: no push notification.
pub const FLAG_SUPPRESS_NOTIFICATIONS: u64 = 1 << 12;
/// Message flag `EPHEMERAL`: only the invoking user sees the message.
pub const FLAG_EPHEMERAL: u64 = 1 << 6;
/// Message flag `LOADING`: a deferred response ("is thinking…").
pub const FLAG_LOADING: u64 = 1 << 7;
/// Flags a response or followup may set: SUPPRESS_EMBEDS, EPHEMERAL,
/// SUPPRESS_NOTIFICATIONS and IS_COMPONENTS_V2 (Discord also allows
/// IS_VOICE_MESSAGE, an uploaded audio attachment with its duration and
/// waveform, which this server does not keep, so it is refused).
pub const RESPONSE_FLAGS: u64 = FLAG_SUPPRESS_EMBEDS
    | FLAG_EPHEMERAL
    | FLAG_SUPPRESS_NOTIFICATIONS
    | crate::components::FLAG_IS_COMPONENTS_V2;

/// Message type of a slash command's response (`CHAT_INPUT_COMMAND`).
pub const MESSAGE_CHAT_INPUT_COMMAND: u8 = 20;
/// Message type of a context-menu command's response.
pub const MESSAGE_CONTEXT_MENU_COMMAND: u8 = 23;

/// Component type `ACTION_ROW` (the component types are
/// [`crate::components`]').
pub const COMPONENT_ACTION_ROW: u8 = crate::components::ACTION_ROW;
/// Component type `BUTTON`.
pub const COMPONENT_BUTTON: u8 = crate::components::BUTTON;
/// Component type `STRING_SELECT`.
pub const COMPONENT_STRING_SELECT: u8 = crate::components::STRING_SELECT;
/// Component type `TEXT_INPUT` (modals only).
pub const COMPONENT_TEXT_INPUT: u8 = crate::components::TEXT_INPUT;
/// Component type `LABEL` (modals: one inner `component`).
pub const COMPONENT_LABEL: u8 = crate::components::LABEL;

/// Deepest component nesting walked (container → section → accessory is
/// three; anything deeper is not a layout Discord accepts).
const COMPONENT_DEPTH_MAX: u8 = 4;

/// The interaction as the application receives it (INTERACTION_CREATE).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Interaction {
    /// Id.
    pub id: Snowflake,
    /// The application it is for.
    pub application_id: Snowflake,
    /// Interaction type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The data of its type.
    pub data: InteractionData,
    /// The guild it was created in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
    /// The partial guild (`id`, `features`, `locale`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild: Option<InteractionGuild>,
    /// The channel it was created in (partial).
    pub channel: Value,
    /// The channel's id.
    pub channel_id: Snowflake,
    /// The invoking member (guild interactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<InteractionMember>,
    /// The invoking user (interactions outside a guild).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
    /// The continuation token.
    pub token: String,
    /// Always 1.
    pub version: u8,
    /// The message of a component (or of the component a modal came from).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Box<Message>>,
    /// The application's permissions in the channel, a decimal string.
    pub app_permissions: String,
    /// The invoking user's locale.
    pub locale: String,
    /// The guild's locale (guild interactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_locale: Option<String>,
    /// Entitlements (none exist here).
    pub entitlements: Vec<Value>,
    /// `{"0": guild id}` for a guild install, `{"1": user id}` for a user
    /// install.
    pub authorizing_integration_owners: BTreeMap<String, Snowflake>,
    /// Where it was triggered (0 guild, 1 bot DM, 2 private channel).
    pub context: u8,
    /// The largest attachment, in bytes.
    pub attachment_size_limit: u64,
}

/// The partial guild of an interaction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct InteractionGuild {
    /// Id.
    pub id: Snowflake,
    /// Features (none here).
    pub features: Vec<String>,
    /// Preferred locale.
    pub locale: String,
}

/// The invoking member: a member with `user` and `permissions`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct InteractionMember {
    /// The member.
    #[serde(flatten)]
    pub member: Member,
    /// Their permissions in the channel, a decimal string.
    pub permissions: String,
}

/// The data of an interaction, by type.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum InteractionData {
    /// APPLICATION_COMMAND and APPLICATION_COMMAND_AUTOCOMPLETE.
    Command(CommandData),
    /// MESSAGE_COMPONENT.
    Component(ComponentData),
    /// MODAL_SUBMIT.
    Modal(ModalData),
}

/// The data of a command (or autocomplete) interaction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CommandData {
    /// The command's id.
    pub id: Snowflake,
    /// Its name.
    pub name: String,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// Entities the options name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Resolved>,
    /// The options with their values (chat input only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<DataOption>>,
    /// The guild the command is registered in (guild commands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guild_id: Option<Snowflake>,
    /// The user or message a context-menu command targets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_id: Option<Snowflake>,
}

/// One option with its value, or a subcommand with its options.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DataOption {
    /// Name.
    pub name: String,
    /// Option type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The value (options that are not subcommands).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// Nested options (subcommands and groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<DataOption>>,
    /// The option being typed (autocomplete only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focused: Option<bool>,
}

/// Entities an interaction names, keyed by id.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Resolved {
    /// Users.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub users: BTreeMap<String, User>,
    /// Members (without `user`, `deaf`, `mute`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub members: BTreeMap<String, Value>,
    /// Roles.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub roles: BTreeMap<String, Value>,
    /// Channels (partial).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub channels: BTreeMap<String, Value>,
    /// Messages.
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub messages: BTreeMap<String, Message>,
}

impl Resolved {
    /// Whether it names nothing (then it is left out).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
            && self.members.is_empty()
            && self.roles.is_empty()
            && self.channels.is_empty()
            && self.messages.is_empty()
    }
}

/// The data of a component interaction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ComponentData {
    /// The component's `custom_id`.
    pub custom_id: String,
    /// Its type.
    pub component_type: u8,
    /// What a select menu selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
    /// The users (with their members), roles and channels a user, role,
    /// mentionable or channel select selected.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<Resolved>,
}

/// The data of a modal submit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModalData {
    /// The modal's `custom_id`.
    pub custom_id: String,
    /// The submitted values, as the client sent them (checked against the
    /// modal shown).
    pub components: Vec<Value>,
    /// What the modal's user, role, mentionable and channel selects
    /// picked.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub resolved: Option<Resolved>,
}

/// `interaction_metadata` of a message that answers an interaction.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InteractionMetadata {
    /// The interaction's id.
    pub id: Snowflake,
    /// Its type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The invoking user.
    pub user: User,
    /// Who authorised the application (as in the interaction).
    pub authorizing_integration_owners: BTreeMap<String, Snowflake>,
    /// The interaction's original response (on followups).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_response_message_id: Option<Snowflake>,
    /// The message of the component (component interactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interacted_message_id: Option<Snowflake>,
    /// The interaction that showed the modal (modal submits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub triggering_interaction_metadata: Option<Box<InteractionMetadata>>,
    /// The command's name (command interactions; deprecated but read by
    /// libraries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The command type (command interactions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_type: Option<u8>,
    /// The user a USER command targeted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_user: Option<User>,
    /// The message a MESSAGE command targeted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_message_id: Option<Snowflake>,
}

/// The body of a callback answered `?with_response=true`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CallbackResponse {
    /// The interaction.
    pub interaction: CallbackInteraction,
    /// What the callback created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<CallbackResource>,
}

/// The interaction of a [`CallbackResponse`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallbackInteraction {
    /// Id.
    pub id: Snowflake,
    /// Interaction type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The response message, if one was created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_message_id: Option<Snowflake>,
    /// Whether it is loading (a deferred response).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_message_loading: Option<bool>,
    /// Whether it is ephemeral.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_message_ephemeral: Option<bool>,
}

/// The resource of a [`CallbackResponse`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CallbackResource {
    /// Callback type.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The message created or updated (types 4 and 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// INTERACTION_CREATE, INTERACTION_SUCCESS and INTERACTION_FAILURE as the
/// invoking user's sessions get them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct UserInteractionEvent {
    /// The interaction.
    pub id: Snowflake,
    /// The client's nonce, echoed.
    pub nonce: Option<String>,
}

/// INTERACTION_MODAL_CREATE: the modal the application answered with, to
/// the invoking user's sessions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ModalCreate {
    /// The interaction that showed it (a modal submit names it).
    pub id: Snowflake,
    /// The client's nonce.
    pub nonce: Option<String>,
    /// The channel.
    pub channel_id: Snowflake,
    /// The application (`id`, `name`).
    pub application: Value,
    /// The modal's `custom_id`.
    pub custom_id: String,
    /// Its title.
    pub title: String,
    /// Its components.
    pub components: Vec<Value>,
}

/// APPLICATION_COMMAND_AUTOCOMPLETE_RESPONSE, to the invoking user's
/// sessions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AutocompleteResponse {
    /// The interaction.
    pub id: Snowflake,
    /// The client's nonce.
    pub nonce: Option<String>,
    /// The choices.
    pub choices: Vec<Value>,
}

// ----- what a user sends ----------------------------------------------------

/// A parsed `POST /interactions` body (the `data` is checked by type
/// afterwards, against what the server holds).
#[derive(Clone, Debug, PartialEq)]
pub struct CreateRequest {
    /// Interaction type (2 to 5).
    pub kind: u8,
    /// The application.
    pub application_id: i64,
    /// The guild, if given.
    pub guild_id: Option<i64>,
    /// The channel.
    pub channel_id: i64,
    /// The message of a component.
    pub message_id: Option<i64>,
    /// The session to send the accompanying events to.
    pub session_id: Option<String>,
    /// The client's nonce.
    pub nonce: Option<String>,
    /// The data, as sent.
    pub data: Map<String, Value>,
}

fn snowflake(form: &mut Form, value: Option<&Value>, required: bool) -> Option<i64> {
    match value {
        None | Some(Value::Null) => {
            if required {
                form.error("BASE_TYPE_REQUIRED", "This field is required");
            }
            None
        }
        Some(value) => {
            let parsed = match value {
                Value::String(s) => s.parse::<u64>().ok(),
                Value::Number(n) => n.as_u64(),
                _ => None,
            }
            .filter(|v| *v > 0 && *v <= i64::MAX as u64);
            if parsed.is_none() {
                form.error("NUMBER_TYPE_COERCE", "Value is not snowflake.");
            }
            parsed.map(|v| v as i64)
        }
    }
}

/// Parses a user's `POST /interactions` body; `nonce_chars_max` bounds the
/// nonce (Discord's 25, as for messages).
pub fn parse_create(body: &Value, nonce_chars_max: usize) -> Result<CreateRequest, ErrorBody> {
    let mut form = Form::default();
    let Some(map) = body.as_object() else {
        form.error(
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        );
        return Err(form.finish(()).err().unwrap_or_else(empty_error));
    };
    let kind = form.at("type", |f| {
        if map.get("type").is_none_or(Value::is_null) {
            f.error("BASE_TYPE_REQUIRED", "This field is required");
            return None;
        }
        f.small_int(
            map.get("type"),
            &[
                u64::from(APPLICATION_COMMAND),
                u64::from(MESSAGE_COMPONENT),
                u64::from(AUTOCOMPLETE),
                u64::from(MODAL_SUBMIT),
            ],
        )
    });
    let application_id = form.at("application_id", |f| {
        snowflake(f, map.get("application_id"), true)
    });
    let guild_id = form.at("guild_id", |f| snowflake(f, map.get("guild_id"), false));
    let channel_id = form.at("channel_id", |f| snowflake(f, map.get("channel_id"), true));
    let message_id = form.at("message_id", |f| {
        snowflake(f, map.get("message_id"), kind == Some(MESSAGE_COMPONENT))
    });
    let session_id = form.at("session_id", |f| {
        let id = f.string(map.get("session_id"), false)?;
        f.length(&id, 1, 64).then_some(id)
    });
    let nonce = form.at("nonce", |f| {
        let nonce = f.string(map.get("nonce"), false)?;
        f.length(&nonce, 0, nonce_chars_max).then_some(nonce)
    });
    let data = form.at("data", |f| match map.get("data") {
        Some(Value::Object(data)) => Some(data.clone()),
        None | Some(Value::Null) => {
            f.error("BASE_TYPE_REQUIRED", "This field is required");
            None
        }
        Some(_) => {
            f.error(
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.",
            );
            None
        }
    });
    let (Some(kind), Some(application_id), Some(channel_id), Some(data)) =
        (kind, application_id, channel_id, data)
    else {
        return Err(form.finish(()).err().unwrap_or_else(empty_error));
    };
    form.finish(CreateRequest {
        kind,
        application_id,
        guild_id,
        channel_id,
        message_id,
        session_id,
        nonce,
        data,
    })
}

fn empty_error() -> ErrorBody {
    ErrorBody::new(crate::error::ErrorCode::InvalidFormBody)
}

/// The command a command (or autocomplete) interaction names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentCommand {
    /// Its id.
    pub id: i64,
    /// Its name.
    pub name: String,
    /// Its type, if given.
    pub kind: Option<u8>,
    /// The version the client knows.
    pub version: i64,
    /// The target of a context-menu command.
    pub target_id: Option<i64>,
}

/// The command `data` names (the options are checked separately, against
/// the stored spec, by [`check_options`]).
pub fn parse_command_data(data: &Map<String, Value>) -> Result<SentCommand, ErrorBody> {
    let mut form = Form::default();
    let (id, name, kind, version, target_id) = form.at("data", |f| {
        let id = f.at("id", |f| snowflake(f, data.get("id"), true));
        let name = f.at("name", |f| f.string(data.get("name"), true));
        let kind = f.at("type", |f| f.small_int(data.get("type"), &[1, 2, 3, 4]));
        let version = f.at("version", |f| snowflake(f, data.get("version"), true));
        let target = f.at("target_id", |f| snowflake(f, data.get("target_id"), false));
        (id, name, kind, version, target)
    });
    match (id, name, version) {
        (Some(id), Some(name), Some(version)) => form.finish(SentCommand {
            id,
            name,
            kind,
            version,
            target_id,
        }),
        _ => Err(form.finish(()).err().unwrap_or_else(empty_error)),
    }
}

/// An option value that names an entity, for `resolved`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mention {
    /// A user (USER, or MENTIONABLE naming a user).
    User(i64),
    /// A channel.
    Channel(i64),
    /// A role.
    Role(i64),
    /// A MENTIONABLE: a user or a role, whichever exists.
    Mentionable(i64),
}

/// Option type `BOOLEAN`.
const BOOLEAN: u8 = 5;
/// Option type `USER`.
const OPTION_USER: u8 = 6;
/// Option type `ROLE`.
const ROLE: u8 = 8;
/// Option type `MENTIONABLE`.
const MENTIONABLE: u8 = 9;

/// Checks the options of a command interaction against the command the
/// application registered: names, types, required options, choices,
/// bounds, the subcommand structure. `autocomplete`: one option is
/// `focused` (its value is the partial text, always a string), required
/// options may be missing and choices are not enforced. Returns the
/// options as the bot will read them and the entities to resolve.
pub fn check_options(
    spec: &CommandSpec,
    data: &Map<String, Value>,
    autocomplete: bool,
) -> Result<(Vec<DataOption>, Vec<Mention>), ErrorBody> {
    let mut form = Form::default();
    let mut mentions = Vec::new();
    let mut focused = 0usize;
    let options = form.at("data", |f| {
        f.at("options", |f| {
            walk_options(
                f,
                &spec.options,
                data.get("options"),
                autocomplete,
                &mut mentions,
                &mut focused,
            )
        })
    });
    if autocomplete && focused != 1 {
        form.at("data", |f| {
            f.at("options", |f| {
                f.error(
                    "INTERACTION_AUTOCOMPLETE_FOCUS",
                    "Exactly one option must be focused.",
                )
            })
        });
    }
    form.finish((options, mentions))
}

fn walk_options(
    form: &mut Form,
    spec: &[CommandOption],
    given: Option<&Value>,
    autocomplete: bool,
    mentions: &mut Vec<Mention>,
    focused: &mut usize,
) -> Vec<DataOption> {
    let items: &[Value] = match given {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(_) => {
            form.error(
                "BASE_TYPE_ARRAY",
                "Could not interpret the value as a list.",
            );
            return vec![];
        }
    };
    if items.len() > commands::OPTIONS_MAX {
        form.error(
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {} or fewer in length.", commands::OPTIONS_MAX),
        );
        return vec![];
    }
    let subcommands = spec
        .iter()
        .any(|o| matches!(o.kind, commands::SUB_COMMAND | commands::SUB_COMMAND_GROUP));
    if subcommands && items.len() != 1 {
        form.error(
            "APPLICATION_COMMAND_SUBCOMMAND_REQUIRED",
            "Exactly one subcommand must be given.",
        );
        return vec![];
    }
    let mut out = Vec::with_capacity(items.len());
    let mut seen: Vec<&str> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        form.at(index.to_string(), |f| {
            let Some(map) = item.as_object() else {
                f.error(
                    "DICT_TYPE_CONVERT",
                    "Only dictionaries may be used in a DictType.",
                );
                return;
            };
            let Some(name) = f.at("name", |f| f.string(map.get("name"), true)) else {
                return;
            };
            let Some(option) = spec.iter().find(|o| o.name == name) else {
                f.at("name", |f| {
                    f.error(
                        "APPLICATION_COMMAND_OPTION_UNKNOWN",
                        "The command has no option of this name.",
                    )
                });
                return;
            };
            if seen.contains(&option.name.as_str()) {
                f.at("name", |f| {
                    f.error(
                        "APPLICATION_COMMAND_OPTION_DUPLICATE",
                        "Each option may be given once.",
                    )
                });
                return;
            }
            seen.push(option.name.as_str());
            if let Some(kind) = map.get("type").filter(|v| !v.is_null())
                && kind.as_u64() != Some(u64::from(option.kind))
            {
                f.at("type", |f| {
                    f.error(
                        "APPLICATION_COMMAND_OPTION_TYPE_MISMATCH",
                        format!("The option is of type {}.", option.kind),
                    )
                });
                return;
            }
            if matches!(
                option.kind,
                commands::SUB_COMMAND | commands::SUB_COMMAND_GROUP
            ) {
                let nested = f.at("options", |f| {
                    walk_options(
                        f,
                        &option.options,
                        map.get("options"),
                        autocomplete,
                        mentions,
                        focused,
                    )
                });
                out.push(DataOption {
                    name: option.name.clone(),
                    kind: option.kind,
                    value: None,
                    options: Some(nested),
                    focused: None,
                });
                return;
            }
            let is_focused =
                autocomplete && map.get("focused").and_then(Value::as_bool) == Some(true);
            if is_focused {
                *focused += 1;
                // The partial text being typed: always a string, unchecked
                // beyond its length (it is not a value yet).
                let value = f.at("value", |f| {
                    let text = f.string(map.get("value"), true)?;
                    f.length(&text, 0, commands::STRING_LENGTH_MAX as usize)
                        .then_some(text)
                });
                if let Some(text) = value {
                    out.push(DataOption {
                        name: option.name.clone(),
                        kind: option.kind,
                        value: Some(Value::String(text)),
                        options: None,
                        focused: Some(true),
                    });
                }
                return;
            }
            let value = f.at("value", |f| {
                check_value(f, option, map.get("value"), autocomplete, mentions)
            });
            if let Some(value) = value {
                out.push(DataOption {
                    name: option.name.clone(),
                    kind: option.kind,
                    value: Some(value),
                    options: None,
                    focused: None,
                });
            }
        });
    }
    if !autocomplete && !subcommands {
        for option in spec.iter().filter(|o| o.required) {
            if !seen.contains(&option.name.as_str()) {
                form.error(
                    "APPLICATION_COMMAND_OPTION_REQUIRED",
                    format!("Option \"{:.32}\" is required.", option.name),
                );
            }
        }
    }
    out
}

fn check_value(
    form: &mut Form,
    option: &CommandOption,
    value: Option<&Value>,
    autocomplete: bool,
    mentions: &mut Vec<Mention>,
) -> Option<Value> {
    let Some(value) = value.filter(|v| !v.is_null()) else {
        form.error("BASE_TYPE_REQUIRED", "This field is required");
        return None;
    };
    let checked = match option.kind {
        commands::STRING => {
            let Some(text) = value.as_str() else {
                form.error(
                    "BASE_TYPE_STRING",
                    "Could not interpret the value as string.",
                );
                return None;
            };
            let n = text.chars().count() as u64;
            let min = option.min_length.unwrap_or(0);
            let max = option.max_length.unwrap_or(commands::STRING_LENGTH_MAX);
            if n < min || n > max {
                form.error(
                    "BASE_TYPE_BAD_LENGTH",
                    format!("Must be between {min} and {max} in length."),
                );
                return None;
            }
            value.clone()
        }
        commands::INTEGER | commands::NUMBER => {
            let number = if option.kind == commands::INTEGER {
                value
                    .as_i64()
                    .filter(|v| v.abs() <= commands::INTEGER_ABS_MAX)
                    .map(|v| v as f64)
            } else {
                value.as_f64().filter(|v| v.is_finite())
            };
            let Some(number) = number else {
                form.error(
                    "NUMBER_TYPE_COERCE",
                    if option.kind == commands::INTEGER {
                        "Value is not a valid integer."
                    } else {
                        "Value is not a valid number."
                    },
                );
                return None;
            };
            if let Some(min) = option
                .min_value
                .as_ref()
                .and_then(serde_json::Number::as_f64)
                && number < min
            {
                form.error(
                    "NUMBER_TYPE_MIN",
                    format!("Value must be greater than or equal to {min}."),
                );
                return None;
            }
            if let Some(max) = option
                .max_value
                .as_ref()
                .and_then(serde_json::Number::as_f64)
                && number > max
            {
                form.error(
                    "NUMBER_TYPE_MAX",
                    format!("Value must be less than or equal to {max}."),
                );
                return None;
            }
            value.clone()
        }
        BOOLEAN => {
            if !value.is_boolean() {
                form.error("BASE_TYPE_BOOLEAN", "Must be either true or false.");
                return None;
            }
            value.clone()
        }
        OPTION_USER | commands::CHANNEL | ROLE | MENTIONABLE => {
            let id = snowflake(form, Some(value), true)?;
            mentions.push(match option.kind {
                OPTION_USER => Mention::User(id),
                commands::CHANNEL => Mention::Channel(id),
                ROLE => Mention::Role(id),
                _ => Mention::Mentionable(id),
            });
            Value::String(id.to_string())
        }
        // ATTACHMENT: an uploaded file's id; uploads are not served here.
        _ => {
            form.error(
                "APPLICATION_COMMAND_OPTION_UNSUPPORTED",
                "Attachments are not supported by this server.",
            );
            return None;
        }
    };
    if !autocomplete
        && !option.choices.is_empty()
        && !option.choices.iter().any(|c| c.value == checked)
    {
        form.error(
            "BASE_TYPE_CHOICES",
            "Value must be one of the option's choices.",
        );
        return None;
    }
    Some(checked)
}

/// The component `data` of a component interaction.
pub fn parse_component_data(
    data: &Map<String, Value>,
    custom_id_chars_max: usize,
) -> Result<ComponentData, ErrorBody> {
    let mut form = Form::default();
    let parsed = form.at("data", |f| {
        let custom_id = f.at("custom_id", |f| {
            let id = f.string(data.get("custom_id"), true)?;
            f.length(&id, 1, custom_id_chars_max).then_some(id)
        });
        // Either `component_type` or `type` (the userdoccers' sendable
        // data takes both names).
        let raw = data
            .get("component_type")
            .filter(|v| !v.is_null())
            .or_else(|| data.get("type"));
        let kind = f.at("component_type", |f| {
            if raw.is_none_or(Value::is_null) {
                f.error("BASE_TYPE_REQUIRED", "This field is required");
                return None;
            }
            f.small_int(raw, &[2, 3, 5, 6, 7, 8])
        });
        let values = f.at("values", |f| match data.get("values") {
            None | Some(Value::Null) => Some(None),
            Some(Value::Array(items)) if items.len() <= 25 => {
                let strings: Option<Vec<String>> = items
                    .iter()
                    .map(|v| v.as_str().map(str::to_owned))
                    .collect();
                match strings {
                    Some(strings) => Some(Some(strings)),
                    None => {
                        f.error(
                            "BASE_TYPE_STRING",
                            "Could not interpret the value as string.",
                        );
                        None
                    }
                }
            }
            Some(_) => {
                f.error("BASE_TYPE_ARRAY", "Must be a list of at most 25 strings.");
                None
            }
        });
        (custom_id, kind, values)
    });
    match parsed {
        (Some(custom_id), Some(component_type), Some(values)) => form.finish(ComponentData {
            resolved: None,
            custom_id,
            component_type,
            values,
        }),
        _ => Err(form.finish(()).err().unwrap_or_else(empty_error)),
    }
}

/// A component found in a message's (or a modal's) component tree.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundComponent {
    /// Its type.
    pub kind: u8,
    /// The component as stored.
    pub component: Value,
}

/// The interactive component with `custom_id` in `components` (action rows,
/// sections, containers and labels walked, to a bounded depth).
pub fn find_component(components: &[Value], custom_id: &str) -> Option<FoundComponent> {
    fn walk(items: &[Value], custom_id: &str, depth: u8) -> Option<FoundComponent> {
        if depth > COMPONENT_DEPTH_MAX {
            return None;
        }
        for item in items {
            if item.get("custom_id").and_then(Value::as_str) == Some(custom_id) {
                let kind = item.get("type").and_then(Value::as_u64)?;
                return Some(FoundComponent {
                    kind: u8::try_from(kind).ok()?,
                    component: item.clone(),
                });
            }
            if let Some(Value::Array(inner)) = item.get("components")
                && let Some(found) = walk(inner, custom_id, depth + 1)
            {
                return Some(found);
            }
            for key in ["accessory", "component"] {
                if let Some(inner) = item.get(key)
                    && let Some(found) = walk(std::slice::from_ref(inner), custom_id, depth + 1)
                {
                    return Some(found);
                }
            }
        }
        None
    }
    walk(components, custom_id, 0)
}

/// Checks a select menu's `values` against the stored menu: a string
/// select's values are among its options, and the count is within its
/// `min_values`..`max_values` (Discord's defaults 1 and 1).
pub fn check_select(found: &FoundComponent, values: &[String]) -> Result<(), ErrorBody> {
    let mut form = Form::default();
    let min = found
        .component
        .get("min_values")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    let max = found
        .component
        .get("max_values")
        .and_then(Value::as_u64)
        .unwrap_or(1) as usize;
    form.at("data", |f| {
        f.at("values", |f| {
            if values.len() < min || values.len() > max {
                f.error(
                    "BASE_TYPE_BAD_LENGTH",
                    format!("Must be between {min} and {max} in length."),
                );
            }
            if found.kind == COMPONENT_STRING_SELECT {
                let options = found
                    .component
                    .get("options")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                let known = |v: &String| {
                    options
                        .iter()
                        .any(|o| o.get("value").and_then(Value::as_str) == Some(v.as_str()))
                };
                if !values.iter().all(known) {
                    f.error(
                        "BASE_TYPE_CHOICES",
                        "Value must be one of the menu's options.",
                    );
                }
            }
        })
    });
    form.finish(())
}

/// A modal submit's `data`: the interaction that showed the modal, its
/// `custom_id`, and the submitted `(custom_id, value)` pairs, checked
/// against `shown` (the modal's components as the application sent them):
/// every submitted field exists in the modal, is of its type, and every
/// required text input is submitted within its length bounds.
pub fn check_modal_submit(
    data: &Map<String, Value>,
    shown_custom_id: &str,
    shown: &[Value],
) -> Result<ModalData, ErrorBody> {
    let mut form = Form::default();
    let mut submitted: Vec<(String, Value)> = Vec::new();
    let custom_id = form.at("data", |f| {
        let custom_id = f.at("custom_id", |f| f.string(data.get("custom_id"), true));
        if custom_id.as_deref().is_some_and(|id| id != shown_custom_id) {
            f.at("custom_id", |f| {
                f.error("MODAL_UNKNOWN", "This is not the modal that was shown.")
            });
        }
        f.at("components", |f| match data.get("components") {
            Some(Value::Array(items)) => collect_submitted(f, items, 0, &mut submitted),
            _ => f.error(
                "BASE_TYPE_ARRAY",
                "Could not interpret the value as a list.",
            ),
        });
        custom_id
    });
    form.at("data", |f| {
        f.at("components", |f| {
            for (id, value) in &submitted {
                match find_component(shown, id) {
                    Some(found) if found.kind == COMPONENT_TEXT_INPUT => {
                        let text = value.as_str().unwrap_or_default();
                        let n = text.chars().count() as u64;
                        let min = found
                            .component
                            .get("min_length")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                        let max = found
                            .component
                            .get("max_length")
                            .and_then(Value::as_u64)
                            .unwrap_or(4_000);
                        if !value.is_string() || n < min || n > max {
                            f.error(
                                "BASE_TYPE_BAD_LENGTH",
                                format!("Must be between {min} and {max} in length."),
                            );
                        }
                    }
                    Some(_) => {}
                    None => f.error(
                        "MODAL_COMPONENT_UNKNOWN",
                        format!("The modal has no component \"{id:.100}\"."),
                    ),
                }
            }
            for required in required_inputs(shown, 0) {
                if !submitted.iter().any(|(id, _)| *id == required) {
                    f.error(
                        "BASE_TYPE_REQUIRED",
                        format!("\"{required:.100}\" is required."),
                    );
                }
            }
        })
    });
    let components = data
        .get("components")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match custom_id {
        Some(custom_id) => form.finish(ModalData {
            custom_id,
            components,
            resolved: None,
        }),
        None => Err(form.finish(()).err().unwrap_or_else(empty_error)),
    }
}

fn collect_submitted(form: &mut Form, items: &[Value], depth: u8, out: &mut Vec<(String, Value)>) {
    if depth > COMPONENT_DEPTH_MAX || out.len() > 25 {
        form.error("BASE_TYPE_MAX_LENGTH", "Too many components.");
        return;
    }
    for item in items {
        if let Some(id) = item.get("custom_id").and_then(Value::as_str) {
            let value = item
                .get("value")
                .or_else(|| item.get("values"))
                .cloned()
                .unwrap_or(Value::Null);
            out.push((id.to_owned(), value));
        }
        if let Some(Value::Array(inner)) = item.get("components") {
            collect_submitted(form, inner, depth + 1, out);
        }
        if let Some(inner) = item.get("component") {
            collect_submitted(form, std::slice::from_ref(inner), depth + 1, out);
        }
    }
}

fn required_inputs(items: &[Value], depth: u8) -> Vec<String> {
    let mut out = Vec::new();
    if depth > COMPONENT_DEPTH_MAX {
        return out;
    }
    for item in items {
        if item.get("type").and_then(Value::as_u64) == Some(u64::from(COMPONENT_TEXT_INPUT))
            && item.get("required").and_then(Value::as_bool) != Some(false)
            && let Some(id) = item.get("custom_id").and_then(Value::as_str)
        {
            out.push(id.to_owned());
        }
        if let Some(Value::Array(inner)) = item.get("components") {
            out.extend(required_inputs(inner, depth + 1));
        }
        if let Some(inner) = item.get("component") {
            out.extend(required_inputs(std::slice::from_ref(inner), depth + 1));
        }
    }
    out
}

// ----- what a bot answers ---------------------------------------------------

/// Bounds of a callback body (the limits crate's values, passed in).
#[derive(Clone, Copy, Debug)]
pub struct CallbackBounds {
    /// Longest `custom_id`.
    pub custom_id_chars_max: usize,
    /// Longest modal title.
    pub modal_title_chars_max: usize,
    /// Most top-level components of a modal.
    pub modal_components_max: usize,
    /// Most autocomplete choices.
    pub autocomplete_choices_max: usize,
}

impl Default for CallbackBounds {
    fn default() -> Self {
        Self {
            custom_id_chars_max: 100,
            modal_title_chars_max: 45,
            modal_components_max: 5,
            autocomplete_choices_max: 25,
        }
    }
}

/// A parsed callback: its type and its `data` (for message types, checked
/// as a message by the caller, which owns the message bounds).
#[derive(Clone, Debug, PartialEq)]
pub struct Callback {
    /// Callback type.
    pub kind: u8,
    /// The data (an empty object when absent).
    pub data: Map<String, Value>,
    /// For MODAL: `(custom_id, title, components)`.
    pub modal: Option<(String, String, Vec<Value>)>,
    /// For APPLICATION_COMMAND_AUTOCOMPLETE_RESULT: the choices.
    pub choices: Option<Vec<Value>>,
}

/// Parses a callback body. Type 10 (PREMIUM_REQUIRED, deprecated and for
/// monetised applications), 11 (IFRAME_MODAL) and 12 (LAUNCH_ACTIVITY,
/// for embedded activities) are refused on `type`, as are the removed
/// types 2 and 3: this server has neither monetisation nor activities.
pub fn parse_callback(body: &Value, bounds: &CallbackBounds) -> Result<Callback, ErrorBody> {
    let mut form = Form::default();
    let Some(map) = body.as_object() else {
        form.error(
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        );
        return Err(form.finish(()).err().unwrap_or_else(empty_error));
    };
    let kind = form.at("type", |f| {
        if map.get("type").is_none_or(Value::is_null) {
            f.error("BASE_TYPE_REQUIRED", "This field is required");
            return None;
        }
        f.small_int(map.get("type"), &[1, 4, 5, 6, 7, 8, 9])
    });
    let data = form.at("data", |f| match map.get("data") {
        None | Some(Value::Null) => Some(Map::new()),
        Some(Value::Object(data)) => Some(data.clone()),
        Some(_) => {
            f.error(
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.",
            );
            None
        }
    });
    let (Some(kind), Some(data)) = (kind, data) else {
        return Err(form.finish(()).err().unwrap_or_else(empty_error));
    };
    let mut modal = None;
    let mut choices = None;
    if kind == MODAL {
        modal = form.at("data", |f| {
            let custom_id = f.at("custom_id", |f| {
                let id = f.string(data.get("custom_id"), true)?;
                f.length(&id, 1, bounds.custom_id_chars_max).then_some(id)
            });
            let title = f.at("title", |f| {
                let title = f.string(data.get("title"), true)?;
                f.length(&title, 1, bounds.modal_title_chars_max)
                    .then_some(title)
            });
            // The modal's components under the modal's layout rules, their
            // problems nested under `data.components` with the others.
            let components = match crate::components::check(
                data.get("components").unwrap_or(&Value::Null),
                crate::components::Surface::Modal,
                &crate::components::Bounds {
                    custom_id_chars_max: bounds.custom_id_chars_max,
                    modal_components_max: bounds.modal_components_max,
                    ..crate::components::Bounds::default()
                },
                &[],
            ) {
                Ok(kept) => Some(kept),
                Err(body) => {
                    f.at("components", |f| f.absorb(body));
                    None
                }
            };
            Some((custom_id?, title?, components?))
        });
    }
    if kind == AUTOCOMPLETE_RESULT {
        choices = form.at("data", |f| {
            f.at("choices", |f| match data.get("choices") {
                Some(Value::Array(items)) if items.len() <= bounds.autocomplete_choices_max => {
                    let valid = items.iter().all(|c| {
                        c.get("name")
                            .and_then(Value::as_str)
                            .is_some_and(|n| (1..=commands::CHOICE_CHARS_MAX).contains(&n.chars().count()))
                            && c.get("value").is_some_and(|v| v.is_string() || v.is_number())
                    });
                    if valid {
                        Some(items.clone())
                    } else {
                        f.error(
                            "APPLICATION_COMMAND_OPTION_CHOICE_INVALID",
                            "Each choice needs a name (1-100 characters) and a string or number value.",
                        );
                        None
                    }
                }
                None | Some(Value::Null) => Some(vec![]),
                Some(_) => {
                    f.error(
                        "BASE_TYPE_MAX_LENGTH",
                        format!(
                            "Must be {} or fewer in length.",
                            bounds.autocomplete_choices_max
                        ),
                    );
                    None
                }
            })
        });
    }
    form.finish(Callback {
        kind,
        data,
        modal,
        choices,
    })
}

/// The type of the option being typed in an autocomplete's options.
pub fn focused_kind(options: &[DataOption]) -> Option<u8> {
    options.iter().find_map(|o| {
        if o.focused == Some(true) {
            Some(o.kind)
        } else {
            o.options.as_deref().and_then(focused_kind)
        }
    })
}

/// Checks an autocomplete result's `choices` against the type of the
/// option being typed (`kind`): a STRING option's values are strings of
/// 1 to 100 characters, an INTEGER's integers within Discord's ±2^53, a
/// NUMBER's numbers (the bot's answer becomes the user's value, so a
/// choice of the wrong type would be a value the command cannot take).
/// Refusals at `data.choices.{i}.value`.
pub fn check_choices(choices: &[Value], kind: u8) -> Result<(), ErrorBody> {
    const SAFE_INTEGER_MAX: i64 = (1 << 53) - 1;
    let mut form = Form::default();
    form.at("data", |f| {
        f.at("choices", |f| {
            for (i, choice) in choices.iter().enumerate() {
                let value = choice.get("value").unwrap_or(&Value::Null);
                f.at(i.to_string(), |f| {
                    f.at("value", |f| match kind {
                        commands::STRING => {
                            if let Some(text) = f.string(Some(value), true) {
                                f.length(&text, 1, commands::CHOICE_CHARS_MAX);
                            }
                        }
                        commands::INTEGER => {
                            let ok = value.as_i64().is_some_and(|n| {
                                (-SAFE_INTEGER_MAX..=SAFE_INTEGER_MAX).contains(&n)
                            });
                            if !ok {
                                f.error(
                                    "NUMBER_TYPE_COERCE",
                                    format!("Value \"{}\" is not int.", commands::shown(value)),
                                );
                            }
                        }
                        commands::NUMBER if !value.is_number() => {
                            f.error(
                                "NUMBER_TYPE_COERCE",
                                format!(
                                    "Value \"{}\" is not a valid number.",
                                    commands::shown(value)
                                ),
                            );
                        }
                        _ => {}
                    })
                });
            }
        })
    });
    form.finish(())
}

/// Whether callback `callback` may answer an interaction of type `kind`
/// (Discord's "allowed by" column; `from_component`: a modal submit whose
/// modal a component showed may update that component's message).
pub fn callback_allowed(kind: u8, callback: u8, from_component: bool) -> bool {
    match callback {
        CHANNEL_MESSAGE_WITH_SOURCE | DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE => {
            matches!(kind, APPLICATION_COMMAND | MESSAGE_COMPONENT | MODAL_SUBMIT)
        }
        DEFERRED_UPDATE_MESSAGE | UPDATE_MESSAGE => {
            kind == MESSAGE_COMPONENT || (kind == MODAL_SUBMIT && from_component)
        }
        AUTOCOMPLETE_RESULT => kind == AUTOCOMPLETE,
        MODAL => matches!(kind, APPLICATION_COMMAND | MESSAGE_COMPONENT),
        _ => false,
    }
}

/// The 50035 body for a callback type the interaction does not allow.
pub fn callback_not_allowed(kind: u8, callback: u8) -> ErrorBody {
    ErrorBody::invalid_field(
        "type",
        "INTERACTION_CALLBACK_TYPE_INVALID",
        &format!("Callback type {callback} cannot answer an interaction of type {kind}."),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn spec() -> CommandSpec {
        commands::parse_command(
            &json!({"name": "roll", "description": "Rolls", "options": [
                {"type": 4, "name": "sides", "description": "Sides", "required": true, "min_value": 2, "max_value": 100},
                {"type": 3, "name": "colour", "description": "Colour", "choices": [{"name": "Red", "value": "red"}]},
                {"type": 6, "name": "who", "description": "Who"},
            ]}),
            commands::Scope::Global,
        )
        .unwrap()
    }

    fn data(options: Value) -> Map<String, Value> {
        json!({"options": options}).as_object().unwrap().clone()
    }

    #[test]
    fn options_are_checked_against_the_spec() {
        let (options, mentions) = check_options(
            &spec(),
            &data(
                json!([{"name": "sides", "type": 4, "value": 6}, {"name": "who", "value": "42"}]),
            ),
            false,
        )
        .unwrap();
        assert_eq!(options.len(), 2);
        assert_eq!(mentions, [Mention::User(42)]);
        for (bad, path) in [
            (json!([{"name": "sides", "value": 1}]), "0"),
            (json!([{"name": "sides", "value": "six"}]), "0"),
            (
                json!([{"name": "nope", "value": 1}, {"name": "sides", "value": 3}]),
                "0",
            ),
            (
                json!([{"name": "sides", "value": 3}, {"name": "colour", "value": "blue"}]),
                "1",
            ),
            (json!([{"name": "sides", "type": 3, "value": 3}]), "0"),
        ] {
            let error = check_options(&spec(), &data(bad.clone()), false).unwrap_err();
            let errors = error.errors.unwrap();
            assert!(
                errors["data"]["options"][path].is_object(),
                "{bad}: {errors}"
            );
        }
        let missing = check_options(&spec(), &data(json!([])), false).unwrap_err();
        assert!(missing.errors.unwrap()["data"]["options"]["_errors"].is_array());
    }

    #[test]
    fn autocomplete_needs_one_focused_option_and_no_required_ones() {
        let (options, _) = check_options(
            &spec(),
            &data(json!([{"name": "colour", "value": "bl", "focused": true}])),
            true,
        )
        .unwrap();
        assert_eq!(options[0].focused, Some(true));
        assert!(check_options(&spec(), &data(json!([])), true).is_err());
    }

    #[test]
    fn autocomplete_choices_are_values_of_the_focused_option() {
        let nested = vec![DataOption {
            name: "sub".into(),
            kind: commands::SUB_COMMAND,
            value: None,
            options: Some(vec![DataOption {
                name: "n".into(),
                kind: commands::INTEGER,
                value: Some(json!("4")),
                options: None,
                focused: Some(true),
            }]),
            focused: None,
        }];
        assert_eq!(focused_kind(&nested), Some(commands::INTEGER));
        let ints = [
            json!({"name": "four", "value": 4}),
            json!({"name": "big", "value": 1u64 << 60}),
        ];
        let refused = check_choices(&ints, commands::INTEGER).unwrap_err();
        assert!(refused.errors.unwrap()["data"]["choices"]["1"]["value"].is_object());
        assert!(check_choices(&ints[..1], commands::INTEGER).is_ok());
        assert!(check_choices(&[json!({"name": "half", "value": 2.5})], commands::NUMBER).is_ok());
        assert!(
            check_choices(&[json!({"name": "half", "value": "2.5"})], commands::NUMBER).is_err()
        );
        assert!(check_choices(&[json!({"name": "s", "value": ""})], commands::STRING).is_err());
    }

    #[test]
    fn components_are_found_in_rows_and_selects_checked() {
        let components = vec![json!({"type": 1, "components": [
            {"type": 2, "style": 1, "label": "Go", "custom_id": "go"},
            {"type": 3, "custom_id": "pick", "options": [{"label": "A", "value": "a"}], "max_values": 1},
        ]})];
        assert_eq!(find_component(&components, "go").unwrap().kind, 2);
        let pick = find_component(&components, "pick").unwrap();
        assert!(check_select(&pick, &["a".into()]).is_ok());
        assert!(check_select(&pick, &["z".into()]).is_err());
        assert!(find_component(&components, "gone").is_none());
    }

    #[test]
    fn modal_submits_match_the_modal_shown() {
        let shown = vec![json!({"type": 1, "components": [
            {"type": 4, "custom_id": "name", "style": 1, "label": "Name", "max_length": 5},
        ]})];
        let ok = json!({"custom_id": "m", "components": [{"type": 1, "components": [{"type": 4, "custom_id": "name", "value": "Ada"}]}]});
        assert!(check_modal_submit(ok.as_object().unwrap(), "m", &shown).is_ok());
        let long = json!({"custom_id": "m", "components": [{"type": 1, "components": [{"type": 4, "custom_id": "name", "value": "Adalovelace"}]}]});
        assert!(check_modal_submit(long.as_object().unwrap(), "m", &shown).is_err());
        let other = json!({"custom_id": "x", "components": [{"type": 4, "custom_id": "name", "value": "A"}]});
        assert!(check_modal_submit(other.as_object().unwrap(), "m", &shown).is_err());
        let missing = json!({"custom_id": "m", "components": []});
        assert!(check_modal_submit(missing.as_object().unwrap(), "m", &shown).is_err());
    }

    #[test]
    fn callbacks_refuse_unsupported_types_and_check_their_data() {
        let bounds = CallbackBounds::default();
        for kind in [2, 3, 10, 11, 12, 13, 99] {
            assert!(
                parse_callback(&json!({"type": kind}), &bounds).is_err(),
                "{kind}"
            );
        }
        let modal = parse_callback(
            &json!({"type": 9, "data": {"custom_id": "m", "title": "T", "components": [
                {"type": 18, "label": "Q", "component": {"type": 4, "custom_id": "q", "style": 1}}]}}),
            &bounds,
        )
        .unwrap();
        let (custom_id, _, components) = modal.modal.unwrap();
        assert_eq!(custom_id, "m");
        assert_eq!(components[0]["component"]["id"], 2);
        // An empty row is refused where it is, under `data.components`.
        let empty_row = parse_callback(
            &json!({"type": 9, "data": {"custom_id": "m", "title": "T", "components": [{"type": 1, "components": []}]}}),
            &bounds,
        )
        .unwrap_err();
        assert_eq!(
            empty_row.errors.unwrap()["data"]["components"]["0"]["components"]["_errors"][0]["code"],
            "BASE_TYPE_BAD_LENGTH"
        );
        assert!(
            parse_callback(
                &json!({"type": 9, "data": {"custom_id": "m", "title": "T", "components": []}}),
                &bounds
            )
            .is_err()
        );
        let choices: Vec<Value> = (0..26).map(|i| json!({"name": "n", "value": i})).collect();
        assert!(
            parse_callback(&json!({"type": 8, "data": {"choices": choices}}), &bounds).is_err()
        );
        assert!(callback_allowed(MESSAGE_COMPONENT, UPDATE_MESSAGE, false));
        assert!(!callback_allowed(
            APPLICATION_COMMAND,
            UPDATE_MESSAGE,
            false
        ));
        assert!(!callback_allowed(
            AUTOCOMPLETE,
            CHANNEL_MESSAGE_WITH_SOURCE,
            false
        ));
    }

    #[test]
    fn create_bodies_report_every_problem() {
        let ok = parse_create(
            &json!({"type": 2, "application_id": "1", "channel_id": 2, "data": {}, "nonce": "n"}),
            25,
        )
        .unwrap();
        assert_eq!((ok.kind, ok.application_id, ok.channel_id), (2, 1, 2));
        let bad = parse_create(&json!({"type": 1, "channel_id": "x"}), 25).unwrap_err();
        let errors = bad.errors.unwrap();
        for field in ["type", "application_id", "channel_id", "data"] {
            assert!(errors[field]["_errors"].is_array(), "{field}: {errors}");
        }
        let component = parse_create(
            &json!({"type": 3, "application_id": "1", "channel_id": "2", "data": {}}),
            25,
        )
        .unwrap_err();
        assert!(component.errors.unwrap()["message_id"].is_object());
    }
}
