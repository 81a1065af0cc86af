//! Application commands: the validated shape a command is stored in, its
//! wire object, and the parsing of what bots send to create, edit and
//! bulk-overwrite commands, with Discord's documented bounds and its
//! nested 50035 error shape (`options.0.choices.3.name._errors`).
//!
//! Unknown fields are ignored, as Discord ignores them; every known field
//! is checked for its type and bounds, and every problem of a body is
//! reported at once (libraries print the whole `errors` tree).
//!
//! ```
//! use guildhall_proto::commands::{parse_command, Scope};
//! let body = serde_json::json!({"name": "ping", "description": "Replies with pong"});
//! let command = parse_command(&body, Scope::Global).unwrap();
//! assert_eq!(command.kind, 1);
//! let bad = serde_json::json!({"name": "Ping!", "description": ""});
//! let error = serde_json::to_value(parse_command(&bad, Scope::Global).unwrap_err()).unwrap();
//! assert_eq!(error["code"], 50035);
//! assert!(error["errors"]["name"]["_errors"].is_array());
//! assert!(error["errors"]["description"]["_errors"].is_array());
//! ```

use crate::error::{ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// `CHAT_INPUT`: a slash command.
pub const CHAT_INPUT: u8 = 1;
/// `USER`: a context-menu command on a user.
pub const USER: u8 = 2;
/// `MESSAGE`: a context-menu command on a message.
pub const MESSAGE: u8 = 3;
/// `PRIMARY_ENTRY_POINT`: an Activity's entry point.
pub const PRIMARY_ENTRY_POINT: u8 = 4;

/// Option type `SUB_COMMAND`.
pub const SUB_COMMAND: u8 = 1;
/// Option type `SUB_COMMAND_GROUP`.
pub const SUB_COMMAND_GROUP: u8 = 2;
/// Option type `STRING`.
pub const STRING: u8 = 3;
/// Option type `INTEGER`.
pub const INTEGER: u8 = 4;
/// Option type `CHANNEL`.
pub const CHANNEL: u8 = 7;
/// Option type `NUMBER`.
pub const NUMBER: u8 = 10;
/// Option type `ATTACHMENT`, the last one.
pub const ATTACHMENT: u8 = 11;

/// Name length in characters (commands and options).
pub const NAME_CHARS_MAX: usize = 32;
/// Description length in characters (slash commands and options).
pub const DESCRIPTION_CHARS_MAX: usize = 100;
/// Options of a command or subcommand, and choices of an option.
pub const OPTIONS_MAX: usize = 25;
/// Choices of one option.
pub const CHOICES_MAX: usize = 25;
/// Choice name and string value length in characters.
pub const CHOICE_CHARS_MAX: usize = 100;
/// `min_length` / `max_length` of a string option.
pub const STRING_LENGTH_MAX: u64 = 6_000;
/// Combined characters of a slash command's names, descriptions and choice
/// values (the longest localization of each field counts).
pub const COMMAND_CHARS_MAX: usize = 8_000;
/// File types an attachment option may filter for.
pub const FILE_TYPES_MAX: usize = 10;
/// The integer range Discord accepts: ±(2^53 − 1), what a double holds.
pub const INTEGER_ABS_MAX: i64 = (1 << 53) - 1;
/// Channel types Discord defines (0–16, with gaps).
const CHANNEL_TYPES: &[u64] = &[0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 16];

/// The locales a localization dictionary may use (Discord's list).
pub const LOCALES: &[&str] = &[
    "id", "da", "de", "en-GB", "en-US", "es-ES", "es-419", "fr", "hr", "it", "lt", "hu", "nl",
    "no", "pl", "pt-BR", "ro", "fi", "sv-SE", "vi", "tr", "cs", "el", "bg", "ru", "uk", "hi", "th",
    "zh-CN", "ja", "zh-TW", "ko",
];

/// Where a command lives: global commands have contexts and installation
/// types, guild commands do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every guild the application is in, and DMs.
    Global,
    /// One guild.
    Guild,
}

/// A localization dictionary (locale → text).
pub type Localizations = BTreeMap<String, String>;

/// A choice of a string, integer or number option.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// 1–100 characters.
    pub name: String,
    /// Per-locale names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_localizations: Option<Localizations>,
    /// A string (≤ 100 characters), an integer or a double, by option type.
    pub value: Value,
}

/// An option of a command (a parameter, or a subcommand or group).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandOption {
    /// Option type (1–11).
    #[serde(rename = "type")]
    pub kind: u8,
    /// 1–32 characters, naming rules as a slash command's.
    pub name: String,
    /// Per-locale names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_localizations: Option<Localizations>,
    /// 1–100 characters.
    pub description: String,
    /// Per-locale descriptions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description_localizations: Option<Localizations>,
    /// Whether a user must fill it in.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// The only values a user may pick.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub choices: Vec<Choice>,
    /// A subcommand's parameters, or a group's subcommands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<CommandOption>,
    /// Channel types a channel option offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channel_types: Vec<u8>,
    /// Smallest value of an integer or number option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_value: Option<serde_json::Number>,
    /// Largest value of an integer or number option.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_value: Option<serde_json::Number>,
    /// Shortest string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// Longest string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// Whether the bot suggests values as the user types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autocomplete: Option<bool>,
    /// File types an attachment option accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_types: Vec<String>,
}

/// A validated command: everything but its ids and version, which the
/// server assigns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// Command type (1–4).
    #[serde(rename = "type")]
    pub kind: u8,
    /// 1–32 characters.
    pub name: String,
    /// Per-locale names.
    #[serde(default)]
    pub name_localizations: Option<Localizations>,
    /// 1–100 characters for slash commands, empty for context menus.
    pub description: String,
    /// Per-locale descriptions.
    #[serde(default)]
    pub description_localizations: Option<Localizations>,
    /// Parameters (slash commands only).
    #[serde(default)]
    pub options: Vec<CommandOption>,
    /// Permission bits a member needs by default, as a decimal string.
    #[serde(default)]
    pub default_member_permissions: Option<String>,
    /// Deprecated; global commands only (default true).
    #[serde(default)]
    pub dm_permission: Option<bool>,
    /// Deprecated `default_permission` (default true).
    pub default_permission: bool,
    /// Age-restricted.
    pub nsfw: bool,
    /// Installation contexts (global only; default `[0]`).
    #[serde(default)]
    pub integration_types: Option<Vec<u8>>,
    /// Interaction contexts (global only; null: every context).
    #[serde(default)]
    pub contexts: Option<Vec<u8>>,
    /// Entry point handler (type 4 only).
    #[serde(default)]
    pub handler: Option<u8>,
}

impl CommandSpec {
    /// The command's wire object.
    pub fn to_wire(
        &self,
        id: i64,
        application_id: i64,
        guild_id: Option<i64>,
        version: i64,
    ) -> Value {
        let mut object = json!({
            "id": id.to_string(),
            "application_id": application_id.to_string(),
            "version": version.to_string(),
            "type": self.kind,
            "name": self.name,
            "name_localizations": self.name_localizations,
            "description": self.description,
            "description_localizations": self.description_localizations,
            "default_member_permissions": self.default_member_permissions,
            "default_permission": self.default_permission,
            "nsfw": self.nsfw,
        });
        if let Some(map) = object.as_object_mut() {
            if !self.options.is_empty() {
                map.insert("options".into(), json!(self.options));
            }
            match guild_id {
                Some(guild_id) => {
                    map.insert("guild_id".into(), json!(guild_id.to_string()));
                }
                None => {
                    map.insert(
                        "dm_permission".into(),
                        json!(self.dm_permission.unwrap_or(true)),
                    );
                    map.insert(
                        "integration_types".into(),
                        json!(self.integration_types.clone().unwrap_or_else(|| vec![0])),
                    );
                    map.insert("contexts".into(), json!(self.contexts));
                }
            }
            if let Some(handler) = self.handler {
                map.insert("handler".into(), json!(handler));
            }
        }
        object
    }
}

/// At most 32 characters of `value` as JSON, for an error message: a
/// refusal never echoes a large body back.
pub(crate) fn shown(value: &Value) -> String {
    value.to_string().chars().take(32).collect()
}

/// Collects every problem of a body under its path, in Discord's nested
/// `_errors` shape.
#[derive(Default)]
pub(crate) struct Form {
    path: Vec<String>,
    errors: Map<String, Value>,
    any: bool,
}

impl Form {
    /// A form whose errors nest under `root` (a field's path in the body).
    pub(crate) fn rooted(root: &[&str]) -> Self {
        Self {
            path: root.iter().map(|s| (*s).to_owned()).collect(),
            ..Self::default()
        }
    }

    /// Enters `segment` (the caller leaves it with [`Form::pop`]): for
    /// walks that hold the form inside a larger borrow.
    pub(crate) fn push(&mut self, segment: String) {
        self.path.push(segment);
    }

    /// Leaves the segment [`Form::push`] entered.
    pub(crate) fn pop(&mut self) {
        self.path.pop();
    }

    /// Whether the segment above the current one is `segment` (an item
    /// of an array field named `segment`).
    pub(crate) fn parent_is(&self, segment: &str) -> bool {
        self.path.len() >= 2 && self.path[self.path.len() - 2] == segment
    }

    pub(crate) fn at<R>(
        &mut self,
        segment: impl Into<String>,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.path.push(segment.into());
        let result = f(self);
        self.path.pop();
        result
    }

    /// Runs `f` on the errors object at the current path (created on the
    /// way), and marks the form as refused.
    fn with_here(&mut self, f: impl FnOnce(&mut Map<String, Value>)) {
        self.any = true;
        let mut node = &mut self.errors;
        for segment in &self.path {
            let entry = node
                .entry(segment.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let Value::Object(next) = entry else { return };
            node = next;
        }
        f(node);
    }

    pub(crate) fn error(&mut self, code: &str, message: impl Into<String>) {
        let error = json!({"code": code, "message": message.into()});
        self.with_here(|node| {
            if let Value::Array(list) = node
                .entry("_errors")
                .or_insert_with(|| Value::Array(vec![]))
            {
                list.push(error);
            }
        });
    }

    /// Merges a refusal's nested errors (checked with an empty root) in
    /// at the current path.
    pub(crate) fn absorb(&mut self, body: ErrorBody) {
        fn merge(into: &mut Map<String, Value>, from: Map<String, Value>) {
            for (key, value) in from {
                match (into.get_mut(&key), value) {
                    (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
                    (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
                    (_, value) => {
                        into.insert(key, value);
                    }
                }
            }
        }
        let Some(Value::Object(errors)) = body.errors else {
            return;
        };
        self.with_here(|node| merge(node, errors));
    }

    pub(crate) fn finish<T>(self, value: T) -> Result<T, ErrorBody> {
        if !self.any {
            return Ok(value);
        }
        let mut body = ErrorBody::new(ErrorCode::InvalidFormBody);
        body.errors = Some(Value::Object(self.errors));
        Err(body)
    }

    pub(crate) fn length(&mut self, text: &str, min: usize, max: usize) -> bool {
        let n = text.chars().count();
        if n < min || n > max {
            self.error(
                "BASE_TYPE_BAD_LENGTH",
                format!("Must be between {min} and {max} in length."),
            );
            return false;
        }
        true
    }

    pub(crate) fn string(&mut self, value: Option<&Value>, required: bool) -> Option<String> {
        match value {
            None | Some(Value::Null) if required => {
                self.error("BASE_TYPE_REQUIRED", "This field is required");
                None
            }
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                self.error(
                    "BASE_TYPE_STRING",
                    "Could not interpret the value as string.",
                );
                None
            }
        }
    }

    /// BASE_TYPE_REQUIRED at the current path.
    pub(crate) fn required(&mut self) {
        self.error("BASE_TYPE_REQUIRED", "This field is required");
    }

    /// A list field: absent or null is `None` (and BASE_TYPE_REQUIRED when
    /// `required`), anything but an array BASE_TYPE_ARRAY.
    pub(crate) fn list<'v>(
        &mut self,
        value: Option<&'v Value>,
        required: bool,
    ) -> Option<&'v [Value]> {
        match value {
            None | Some(Value::Null) => {
                if required {
                    self.required();
                }
                None
            }
            Some(Value::Array(items)) => Some(items),
            Some(_) => {
                self.error(
                    "BASE_TYPE_ARRAY",
                    "Could not interpret the value as a list.",
                );
                None
            }
        }
    }

    /// An object, else DICT_TYPE_CONVERT.
    pub(crate) fn dict<'v>(&mut self, value: &'v Value) -> Option<&'v Map<String, Value>> {
        let dict = value.as_object();
        if dict.is_none() {
            self.error(
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.",
            );
        }
        dict
    }

    pub(crate) fn boolean(&mut self, value: Option<&Value>) -> Option<bool> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                self.error("BASE_TYPE_BOOLEAN", "Must be either true or false.");
                None
            }
        }
    }

    pub(crate) fn small_int(&mut self, value: Option<&Value>, allowed: &[u64]) -> Option<u8> {
        let n = value?.as_u64().filter(|n| allowed.contains(n));
        if n.is_none() && !value.is_some_and(Value::is_null) {
            let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
            self.error(
                "BASE_TYPE_CHOICES",
                format!("Value must be one of ({}).", list.join(", ")),
            );
        }
        n.map(|n| n as u8)
    }

    fn int_list(&mut self, value: Option<&Value>, allowed: &[u64]) -> Option<Vec<u8>> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let mut out = Vec::new();
                for (i, item) in items.iter().enumerate().take(allowed.len() * 2 + 1) {
                    if let Some(n) = self.at(i.to_string(), |f| f.small_int(Some(item), allowed))
                        && !out.contains(&n)
                    {
                        out.push(n);
                    }
                }
                if items.len() > allowed.len() * 2 + 1 {
                    self.error("BASE_TYPE_BAD_LENGTH", "Too many values.");
                }
                Some(out)
            }
            Some(_) => {
                self.error("BASE_TYPE_ARRAY", "Must be an array.");
                None
            }
        }
    }

    /// A localization dictionary whose values follow `check`.
    fn localizations(
        &mut self,
        value: Option<&Value>,
        check: impl Fn(&mut Self, &str),
    ) -> Option<Localizations> {
        match value {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => {
                let mut out = Localizations::new();
                for (locale, text) in map.iter().take(LOCALES.len() + 1) {
                    self.at(locale.clone(), |f| {
                        if !LOCALES.contains(&locale.as_str()) {
                            f.error("LOCALE_INVALID", "Invalid locale.");
                            return;
                        }
                        if let Some(text) = f.string(Some(text), true) {
                            check(f, &text);
                            out.insert(locale.clone(), text);
                        }
                    });
                }
                if map.len() > LOCALES.len() {
                    self.error("BASE_TYPE_BAD_LENGTH", "Too many locales.");
                }
                Some(out)
            }
            Some(_) => {
                self.error(
                    "DICT_TYPE_CONVERT",
                    "Only dictionaries may be used in a DictType.",
                );
                None
            }
        }
    }
}

/// Whether `name` follows the slash-command naming rule: 1–32 of
/// `[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]`, lowercase where a lowercase
/// form exists. Hand-written rather than a regex crate for one pattern:
/// `char::is_alphabetic` and `is_numeric` are the Unicode letter and
/// number classes, and Devanagari and Thai are two code-point blocks.
pub fn is_valid_chat_input_name(name: &str) -> bool {
    let n = name.chars().count();
    (1..=NAME_CHARS_MAX).contains(&n)
        && name.chars().all(|c| {
            let allowed = matches!(c, '-' | '_' | '\'')
                || c.is_alphabetic()
                || c.is_numeric()
                || ('\u{0900}'..='\u{097F}').contains(&c)
                || ('\u{0E00}'..='\u{0E7F}').contains(&c);
            allowed && c.to_lowercase().eq(std::iter::once(c))
        })
}

fn check_chat_input_name(form: &mut Form, name: &str) {
    if form.length(name, 1, NAME_CHARS_MAX) && !is_valid_chat_input_name(name) {
        form.error(
            "APPLICATION_COMMAND_INVALID_NAME",
            format!("Command name is invalid: {name:.40}"),
        );
    }
}

fn check_description(form: &mut Form, text: &str) {
    form.length(text, 1, DESCRIPTION_CHARS_MAX);
}

/// Counts toward the 8,000-character command size: the longest of a
/// field's default and localized values.
fn longest(default: &str, localized: &Option<Localizations>) -> usize {
    localized
        .iter()
        .flat_map(|map| map.values())
        .map(|v| v.chars().count())
        .chain(std::iter::once(default.chars().count()))
        .max()
        .unwrap_or(0)
}

fn number_of(value: &Value, kind: u8) -> Option<serde_json::Number> {
    let number = value.as_number()?;
    match kind {
        INTEGER => number
            .as_i64()
            .filter(|n| n.abs() <= INTEGER_ABS_MAX)
            .map(serde_json::Number::from),
        _ => number
            .as_f64()
            .filter(|n| n.is_finite() && n.abs() <= (1u64 << 53) as f64)
            .and_then(serde_json::Number::from_f64),
    }
}

fn parse_choice(form: &mut Form, value: &Value, kind: u8) -> Option<Choice> {
    let Value::Object(map) = value else {
        form.error(
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        );
        return None;
    };
    let name = form.at("name", |f| {
        let name = f.string(map.get("name"), true)?;
        f.length(&name, 1, CHOICE_CHARS_MAX).then_some(name)
    });
    let name_localizations = form.at("name_localizations", |f| {
        f.localizations(map.get("name_localizations"), |f, text| {
            f.length(text, 1, CHOICE_CHARS_MAX);
        })
    });
    let value = form.at("value", |f| match (kind, map.get("value")) {
        (_, None | Some(Value::Null)) => {
            f.error("BASE_TYPE_REQUIRED", "This field is required");
            None
        }
        (STRING, Some(Value::String(s))) => f
            .length(s, 1, CHOICE_CHARS_MAX)
            .then(|| Value::String(s.clone())),
        (STRING, Some(_)) => {
            f.error(
                "BASE_TYPE_STRING",
                "Could not interpret the value as string.",
            );
            None
        }
        (_, Some(v)) => {
            let number = number_of(v, kind).map(Value::Number);
            if number.is_none() {
                f.error(
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{v:.40}\" is not a valid number in range."),
                );
            }
            number
        }
    });
    Some(Choice {
        name: name?,
        name_localizations,
        value: value?,
    })
}

/// Parses one option at `depth` (0: the command's own options, 1: inside
/// a subcommand or group, 2: inside a group's subcommand).
fn parse_option(form: &mut Form, value: &Value, depth: u8) -> Option<CommandOption> {
    let Value::Object(map) = value else {
        form.error(
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        );
        return None;
    };
    let all_types: Vec<u64> = (1..=u64::from(ATTACHMENT)).collect();
    let kind = form.at("type", |f| match map.get("type") {
        None | Some(Value::Null) => {
            f.error("BASE_TYPE_REQUIRED", "This field is required");
            None
        }
        v => f.small_int(v, &all_types),
    });
    let name = form.at("name", |f| {
        let name = f.string(map.get("name"), true)?;
        check_chat_input_name(f, &name);
        Some(name)
    });
    let name_localizations = form.at("name_localizations", |f| {
        f.localizations(map.get("name_localizations"), check_chat_input_name)
    });
    let description = form.at("description", |f| {
        let text = f.string(map.get("description"), true)?;
        check_description(f, &text);
        Some(text)
    });
    let description_localizations = form.at("description_localizations", |f| {
        f.localizations(map.get("description_localizations"), check_description)
    });
    let kind = kind?;
    let subcommand = matches!(kind, SUB_COMMAND | SUB_COMMAND_GROUP);
    let valued = matches!(kind, STRING | INTEGER | NUMBER);
    let required = form.at("required", |f| f.boolean(map.get("required")));
    if subcommand && required == Some(true) {
        form.at("required", |f| {
            f.error(
                "APPLICATION_COMMAND_OPTION_REQUIRED_INVALID",
                "Subcommands cannot be required.",
            )
        });
    }
    let present = |key: &str| map.get(key).is_some_and(|v| !v.is_null());
    let not_for = |form: &mut Form, key: &str, ok: bool| {
        if present(key) && !ok {
            form.at(key.to_owned(), |f| {
                f.error(
                    "APPLICATION_COMMAND_OPTION_INVALID_FIELD",
                    format!("This field is not allowed for option type {kind}."),
                );
            });
        }
    };
    not_for(form, "choices", valued);
    not_for(form, "options", subcommand);
    not_for(form, "channel_types", kind == CHANNEL);
    not_for(form, "min_value", matches!(kind, INTEGER | NUMBER));
    not_for(form, "max_value", matches!(kind, INTEGER | NUMBER));
    not_for(form, "min_length", kind == STRING);
    not_for(form, "max_length", kind == STRING);
    not_for(form, "autocomplete", valued);
    not_for(form, "file_types", kind == ATTACHMENT);
    let choices = if valued {
        form.at("choices", |f| match map.get("choices") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(items)) => {
                if items.len() > CHOICES_MAX {
                    f.error(
                        "BASE_TYPE_MAX_LENGTH",
                        format!("Must be {CHOICES_MAX} or fewer in length."),
                    );
                }
                items
                    .iter()
                    .take(CHOICES_MAX)
                    .enumerate()
                    .filter_map(|(i, c)| f.at(i.to_string(), |f| parse_choice(f, c, kind)))
                    .collect()
            }
            Some(_) => {
                f.error("BASE_TYPE_ARRAY", "Must be an array.");
                vec![]
            }
        })
    } else {
        vec![]
    };
    let autocomplete = if valued {
        form.at("autocomplete", |f| f.boolean(map.get("autocomplete")))
    } else {
        None
    };
    if autocomplete == Some(true) && !choices.is_empty() {
        form.at("autocomplete", |f| {
            f.error(
                "APPLICATION_COMMAND_AUTOCOMPLETE_CHOICES",
                "Autocomplete cannot be set when choices are present.",
            )
        });
    }
    let options = if subcommand {
        if depth >= 2 || (depth == 1 && kind == SUB_COMMAND_GROUP) {
            form.error(
                "APPLICATION_COMMAND_OPTION_NESTING",
                "Subcommand groups may only hold subcommands, and subcommands only parameters.",
            );
            vec![]
        } else {
            form.at("options", |f| {
                parse_options(f, map.get("options"), depth + 1, kind == SUB_COMMAND_GROUP)
            })
        }
    } else {
        vec![]
    };
    let channel_types = if kind == CHANNEL {
        form.at("channel_types", |f| {
            f.int_list(map.get("channel_types"), CHANNEL_TYPES)
        })
        .unwrap_or_default()
    } else {
        vec![]
    };
    let (min_value, max_value) = if matches!(kind, INTEGER | NUMBER) {
        let bound = |f: &mut Form, key: &str| {
            f.at(key.to_owned(), |f| match map.get(key) {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let n = number_of(v, kind);
                    if n.is_none() {
                        f.error(
                            "NUMBER_TYPE_COERCE",
                            format!("Value \"{v:.40}\" is not a valid number in range."),
                        );
                    }
                    n
                }
            })
        };
        let min = bound(form, "min_value");
        let max = bound(form, "max_value");
        if let (Some(a), Some(b)) = (&min, &max)
            && a.as_f64() > b.as_f64()
        {
            form.at("max_value", |f| {
                f.error(
                    "NUMBER_TYPE_MIN",
                    "Must be greater than or equal to min_value.",
                )
            });
        }
        (min, max)
    } else {
        (None, None)
    };
    let (min_length, max_length) = if kind == STRING {
        let bound = |f: &mut Form, key: &str, low: u64| {
            f.at(key.to_owned(), |f| match map.get(key) {
                None | Some(Value::Null) => None,
                Some(v) => {
                    let n = v.as_u64().filter(|n| (low..=STRING_LENGTH_MAX).contains(n));
                    if n.is_none() {
                        f.error(
                            "NUMBER_TYPE_MAX",
                            format!("Must be between {low} and {STRING_LENGTH_MAX}."),
                        );
                    }
                    n
                }
            })
        };
        let min = bound(form, "min_length", 0);
        let max = bound(form, "max_length", 1);
        if let (Some(a), Some(b)) = (min, max)
            && a > b
        {
            form.at("max_length", |f| {
                f.error(
                    "NUMBER_TYPE_MIN",
                    "Must be greater than or equal to min_length.",
                )
            });
        }
        (min, max)
    } else {
        (None, None)
    };
    let file_types = if kind == ATTACHMENT {
        form.at("file_types", |f| match map.get("file_types") {
            None | Some(Value::Null) => vec![],
            Some(Value::Array(items)) if items.len() <= FILE_TYPES_MAX => items
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    f.at(i.to_string(), |f| {
                        let text = f.string(Some(v), true)?;
                        f.length(&text, 1, 32).then_some(text)
                    })
                })
                .collect(),
            Some(_) => {
                f.error(
                    "BASE_TYPE_MAX_LENGTH",
                    format!("Must be an array of {FILE_TYPES_MAX} or fewer."),
                );
                vec![]
            }
        })
    } else {
        vec![]
    };
    Some(CommandOption {
        kind,
        name: name?,
        name_localizations,
        description: description?,
        description_localizations,
        required: required.unwrap_or(false) && !subcommand,
        choices,
        options,
        channel_types,
        min_value,
        max_value,
        min_length,
        max_length,
        autocomplete,
        file_types,
    })
}

/// Parses an options array at `depth`; `only_subcommands`: inside a group.
fn parse_options(
    form: &mut Form,
    value: Option<&Value>,
    depth: u8,
    only_subcommands: bool,
) -> Vec<CommandOption> {
    let items = match value {
        None | Some(Value::Null) => return vec![],
        Some(Value::Array(items)) => items,
        Some(_) => {
            form.error("BASE_TYPE_ARRAY", "Must be an array.");
            return vec![];
        }
    };
    if items.len() > OPTIONS_MAX {
        form.error(
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {OPTIONS_MAX} or fewer in length."),
        );
    }
    // Kept with their index in the body, so an error names the option the
    // bot sent even when an earlier one did not parse.
    let options: Vec<(usize, CommandOption)> = items
        .iter()
        .take(OPTIONS_MAX)
        .enumerate()
        .filter_map(|(i, o)| {
            form.at(i.to_string(), |f| parse_option(f, o, depth))
                .map(|o| (i, o))
        })
        .collect();
    let subcommands = options
        .iter()
        .filter(|(_, o)| matches!(o.kind, SUB_COMMAND | SUB_COMMAND_GROUP))
        .count();
    if only_subcommands && options.iter().any(|(_, o)| o.kind != SUB_COMMAND) {
        form.error(
            "APPLICATION_COMMAND_OPTION_NESTING",
            "A subcommand group may only hold subcommands.",
        );
    } else if subcommands != 0 && subcommands != options.len() {
        form.error(
            "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID",
            "Subcommands and subcommand groups cannot be mixed with other options.",
        );
    }
    let mut seen = std::collections::HashSet::new();
    let mut optional_seen = false;
    for (i, option) in &options {
        if !seen.insert(option.name.as_str()) {
            form.at(i.to_string(), |f| {
                f.at("name", |f| {
                    f.error(
                        "APPLICATION_COMMAND_OPTION_NAME_ALREADY_EXISTS",
                        "Option names must be unique.",
                    )
                })
            });
        }
        if option.required && optional_seen {
            form.at(i.to_string(), |f| {
                f.at("required", |f| {
                    f.error(
                        "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID",
                        "Required options must be placed before non-required options.",
                    )
                })
            });
        }
        optional_seen |= !option.required;
    }
    options.into_iter().map(|(_, o)| o).collect()
}

/// The 8,000-character size of a slash command.
fn chars_of(spec: &CommandSpec) -> usize {
    fn option_chars(option: &CommandOption) -> usize {
        longest(&option.name, &option.name_localizations)
            + longest(&option.description, &option.description_localizations)
            + option
                .choices
                .iter()
                .map(|c| {
                    longest(&c.name, &c.name_localizations)
                        + c.value
                            .as_str()
                            .map_or_else(|| c.value.to_string().len(), |s| s.chars().count())
                })
                .sum::<usize>()
            + option.options.iter().map(option_chars).sum::<usize>()
    }
    longest(&spec.name, &spec.name_localizations)
        + longest(&spec.description, &spec.description_localizations)
        + spec.options.iter().map(option_chars).sum::<usize>()
}

/// Parses one command into `form`.
fn parse_into(form: &mut Form, body: &Value, scope: Scope) -> Option<CommandSpec> {
    let Value::Object(map) = body else {
        form.error(
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        );
        return None;
    };
    let kind = form.at("type", |f| match map.get("type") {
        None | Some(Value::Null) => Some(CHAT_INPUT),
        v => f.small_int(v, &[1, 2, 3, 4]),
    })?;
    if kind == PRIMARY_ENTRY_POINT && scope == Scope::Guild {
        form.at("type", |f| {
            f.error(
                "APPLICATION_COMMAND_ENTRY_POINT_GUILD",
                "Entry point commands cannot be guild commands.",
            )
        });
    }
    let name_check = move |f: &mut Form, name: &str| {
        if kind == CHAT_INPUT {
            check_chat_input_name(f, name);
        } else {
            f.length(name, 1, NAME_CHARS_MAX);
        }
    };
    let name = form.at("name", |f| {
        let name = f.string(map.get("name"), true)?;
        name_check(f, &name);
        Some(name)
    });
    let name_localizations = form.at("name_localizations", |f| {
        f.localizations(map.get("name_localizations"), name_check)
    });
    let description = form.at("description", |f| {
        let text = f.string(map.get("description"), kind == CHAT_INPUT)?;
        if kind == CHAT_INPUT {
            check_description(f, &text);
        } else if !text.is_empty() && kind != PRIMARY_ENTRY_POINT {
            f.error(
                "APPLICATION_COMMAND_CONTEXT_MENU_DESCRIPTION",
                "Context menu commands cannot have a description.",
            );
        }
        Some(text)
    });
    let description_localizations = form.at("description_localizations", |f| {
        f.localizations(map.get("description_localizations"), check_description)
    });
    let options = if kind == CHAT_INPUT {
        form.at("options", |f| {
            parse_options(f, map.get("options"), 0, false)
        })
    } else {
        if map
            .get("options")
            .is_some_and(|o| o.as_array().is_some_and(|a| !a.is_empty()))
        {
            form.at("options", |f| {
                f.error(
                    "APPLICATION_COMMAND_OPTIONS_INVALID",
                    "Only slash commands can have options.",
                )
            });
        }
        vec![]
    };
    let default_member_permissions = form.at("default_member_permissions", |f| {
        match map.get("default_member_permissions") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.parse::<u64>().is_ok() => {
                Some(s.parse::<u64>().map(|v| v.to_string()).unwrap_or_default())
            }
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().map(|v| v.to_string()),
            Some(v) => {
                f.error(
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{v:.40}\" is not snowflake."),
                );
                None
            }
        }
    });
    let dm_permission = form.at("dm_permission", |f| f.boolean(map.get("dm_permission")));
    let default_permission = form
        .at("default_permission", |f| {
            f.boolean(map.get("default_permission"))
        })
        .unwrap_or(true);
    let nsfw = form
        .at("nsfw", |f| f.boolean(map.get("nsfw")))
        .unwrap_or(false);
    let (integration_types, contexts) = match scope {
        Scope::Global => (
            form.at("integration_types", |f| {
                f.int_list(map.get("integration_types"), &[0, 1])
            }),
            form.at("contexts", |f| f.int_list(map.get("contexts"), &[0, 1, 2])),
        ),
        // Guild commands have no contexts: Discord ignores them there.
        Scope::Guild => (None, None),
    };
    let handler = if kind == PRIMARY_ENTRY_POINT {
        Some(
            form.at("handler", |f| f.small_int(map.get("handler"), &[1, 2]))
                .unwrap_or(1),
        )
    } else {
        None
    };
    let spec = CommandSpec {
        kind,
        name: name?,
        name_localizations,
        description: description.unwrap_or_default(),
        description_localizations,
        options,
        default_member_permissions,
        dm_permission: if scope == Scope::Global {
            dm_permission
        } else {
            None
        },
        default_permission,
        nsfw,
        integration_types,
        contexts,
        handler,
    };
    if kind == CHAT_INPUT && chars_of(&spec) > COMMAND_CHARS_MAX {
        form.error(
            "APPLICATION_COMMAND_TOO_LARGE",
            format!("Command exceeds maximum size ({COMMAND_CHARS_MAX})"),
        );
    }
    Some(spec)
}

/// Parses a create (POST) body.
pub fn parse_command(body: &Value, scope: Scope) -> Result<CommandSpec, ErrorBody> {
    let mut form = Form::default();
    let spec = parse_into(&mut form, body, scope);
    match spec {
        Some(spec) => form.finish(spec),
        None => {
            form.any = true;
            form.finish(CommandSpec::empty())
        }
    }
}

/// Parses an edit (PATCH) body over `existing`: the fields given replace
/// the old ones whole, the type cannot change, and the result is checked
/// as a new command would be.
pub fn parse_patch(
    body: &Value,
    existing: &CommandSpec,
    scope: Scope,
) -> Result<CommandSpec, ErrorBody> {
    let Value::Object(patch) = body else {
        return parse_command(body, scope);
    };
    let mut merged = match serde_json::to_value(existing) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    for (key, value) in patch {
        if key != "type" {
            merged.insert(key.clone(), value.clone());
        }
    }
    merged.insert("type".into(), json!(existing.kind));
    parse_command(&Value::Object(merged), scope)
}

/// One entry of a bulk overwrite: the id the bot gave (if any) and the
/// command.
pub type OverwriteEntry = (Option<i64>, CommandSpec);

/// Parses a bulk overwrite (PUT) body: a list of commands, names unique
/// per type. Errors are reported under each entry's index.
pub fn parse_overwrite(
    body: &Value,
    scope: Scope,
    entries_max: usize,
) -> Result<Vec<OverwriteEntry>, ErrorBody> {
    let mut form = Form::default();
    let Value::Array(items) = body else {
        form.error("BASE_TYPE_ARRAY", "Must be an array.");
        return form.finish(vec![]);
    };
    if items.len() > entries_max {
        form.error(
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {entries_max} or fewer in length."),
        );
        return form.finish(vec![]);
    }
    let mut out: Vec<OverwriteEntry> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        form.at(i.to_string(), |f| {
            let id = item.get("id").and_then(|v| {
                v.as_str()
                    .and_then(|s| s.parse::<i64>().ok())
                    .or_else(|| v.as_i64())
            });
            if let Some(spec) = parse_into(f, item, scope) {
                if out
                    .iter()
                    .any(|(_, o)| o.kind == spec.kind && o.name == spec.name)
                {
                    f.at("name", |f| {
                        f.error(
                            "APPLICATION_COMMANDS_DUPLICATE_NAME",
                            format!(
                                "Application command names must be unique: {:.40}",
                                spec.name
                            ),
                        )
                    });
                }
                out.push((id, spec));
            }
        });
    }
    form.finish(out)
}

impl CommandSpec {
    fn empty() -> Self {
        Self {
            kind: CHAT_INPUT,
            name: String::new(),
            name_localizations: None,
            description: String::new(),
            description_localizations: None,
            options: vec![],
            default_member_permissions: None,
            dm_permission: None,
            default_permission: true,
            nsfw: false,
            integration_types: None,
            contexts: None,
            handler: None,
        }
    }
}

/// Whether a member holding `permissions` (their effective bits in the
/// channel: every bit for an owner or an administrator) may use a command
/// whose `default_member_permissions` is `required`, as Discord documents
/// it: none lets everyone, `"0"` administrators only, other bits a member
/// holding all of them (administrators always). A value that does not
/// read as bits (stored specs are checked, so none should) is taken as
/// `"0"`: closed rather than open.
pub fn member_may_use(required: Option<&str>, permissions: u64) -> bool {
    const ADMINISTRATOR: u64 = 1 << 3;
    let administrator = permissions & ADMINISTRATOR != 0;
    match required.map(str::parse::<u64>) {
        None => true,
        Some(Ok(0) | Err(_)) => administrator,
        Some(Ok(bits)) => administrator || permissions & bits == bits,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn default_member_permissions_gate_who_may_use_a_command() {
        const MANAGE_GUILD: u64 = 1 << 5;
        const KICK: u64 = 1 << 1;
        assert!(member_may_use(None, 0));
        assert!(!member_may_use(Some("0"), MANAGE_GUILD));
        assert!(
            member_may_use(Some("0"), u64::MAX),
            "owner or administrator"
        );
        assert!(member_may_use(Some("0"), 1 << 3));
        let both = (MANAGE_GUILD | KICK).to_string();
        assert!(
            !member_may_use(Some(&both), MANAGE_GUILD),
            "one of two bits"
        );
        assert!(member_may_use(Some(&both), MANAGE_GUILD | KICK | 1));
        assert!(!member_may_use(Some("not bits"), MANAGE_GUILD));
    }

    fn errors(body: Value, scope: Scope) -> Value {
        serde_json::to_value(parse_command(&body, scope).unwrap_err()).unwrap()["errors"].clone()
    }

    #[test]
    fn names_follow_the_slash_command_rule() {
        for ok in [
            "ping",
            "a",
            "über",
            "日本語",
            "my-cmd_1",
            "it's",
            "हिन्दी",
            "ไทย",
            &"x".repeat(32),
        ] {
            assert!(is_valid_chat_input_name(ok), "{ok}");
        }
        for bad in [
            "",
            "Ping",
            "has space",
            "emoji👍",
            "dot.",
            &"x".repeat(33),
            "ÜBER",
        ] {
            assert!(!is_valid_chat_input_name(bad), "{bad}");
        }
    }

    #[test]
    fn a_full_command_round_trips_through_the_wire_object() {
        let body = json!({
            "name": "settings", "description": "Change settings",
            "name_localizations": {"de": "einstellungen"},
            "default_member_permissions": "8", "nsfw": true, "contexts": [0, 1], "integration_types": [0, 1],
            "options": [
                {"type": 2, "name": "user", "description": "User settings", "options": [
                    {"type": 1, "name": "color", "description": "Pick a colour", "options": [
                        {"type": 3, "name": "value", "description": "Colour", "required": true,
                         "choices": [{"name": "Red", "value": "red", "name_localizations": {"fr": "Rouge"}}]},
                        {"type": 4, "name": "shade", "description": "Shade", "min_value": 0, "max_value": 10},
                        {"type": 10, "name": "alpha", "description": "Alpha", "min_value": 0.0, "max_value": 1.0},
                        {"type": 7, "name": "where", "description": "Channel", "channel_types": [0, 5]},
                        {"type": 3, "name": "hint", "description": "Hint", "autocomplete": true, "min_length": 1, "max_length": 50},
                        {"type": 11, "name": "file", "description": "File", "file_types": ["image", ".pdf"]}
                    ]}
                ]},
                {"type": 1, "name": "reset", "description": "Reset all"}
            ]
        });
        let spec = parse_command(&body, Scope::Global).unwrap();
        let wire = spec.to_wire(5, 6, None, 7);
        assert_eq!(wire["id"], "5");
        assert_eq!(wire["application_id"], "6");
        assert_eq!(wire["version"], "7");
        assert_eq!(wire["default_member_permissions"], "8");
        assert_eq!(wire["contexts"], json!([0, 1]));
        assert_eq!(wire["integration_types"], json!([0, 1]));
        assert_eq!(wire["dm_permission"], true);
        let leaf = &wire["options"][0]["options"][0]["options"];
        assert_eq!(leaf[0]["required"], true);
        assert_eq!(leaf[0]["choices"][0]["name_localizations"]["fr"], "Rouge");
        assert_eq!(leaf[1]["max_value"], 10);
        assert_eq!(leaf[3]["channel_types"], json!([0, 5]));
        assert_eq!(leaf[4]["autocomplete"], true);
        assert_eq!(leaf[5]["file_types"], json!(["image", ".pdf"]));
        // What is stored parses back to the same command.
        let stored = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<CommandSpec>(&stored).unwrap(), spec);
        let guild = spec.to_wire(5, 6, Some(9), 7);
        assert_eq!(guild["guild_id"], "9");
        assert!(guild.get("contexts").is_none());
    }

    #[test]
    fn every_problem_is_reported_under_its_path() {
        let e = errors(
            json!({"name": "ok", "description": "d", "options": [
                {"type": 3, "name": "a", "description": "x", "choices": [{"name": "", "value": 5}]},
                {"type": 12, "name": "b", "description": "x"},
                {"type": 4, "name": "a", "description": "x", "min_value": 5, "max_value": 1, "required": true},
            ]}),
            Scope::Global,
        );
        assert!(
            e["options"]["0"]["choices"]["0"]["name"]["_errors"].is_array(),
            "{e}"
        );
        assert!(
            e["options"]["0"]["choices"]["0"]["value"]["_errors"].is_array(),
            "{e}"
        );
        assert!(e["options"]["1"]["type"]["_errors"].is_array(), "{e}");
        assert!(e["options"]["2"]["max_value"]["_errors"].is_array(), "{e}");
        assert!(e["options"]["2"]["name"]["_errors"].is_array(), "{e}");
        assert!(e["options"]["2"]["required"]["_errors"].is_array(), "{e}");
    }

    #[test]
    fn structural_rules_hold() {
        // Subcommands mixed with parameters.
        let e = errors(
            json!({"name": "x", "description": "d", "options": [
                {"type": 1, "name": "sub", "description": "s"}, {"type": 3, "name": "p", "description": "p"}]}),
            Scope::Global,
        );
        assert!(e["options"]["_errors"].is_array(), "{e}");
        // A group inside a subcommand.
        let e = errors(
            json!({"name": "x", "description": "d", "options": [
                {"type": 1, "name": "sub", "description": "s", "options": [{"type": 2, "name": "g", "description": "g"}]}]}),
            Scope::Global,
        );
        assert!(
            e.to_string().contains("APPLICATION_COMMAND_OPTION_NESTING"),
            "{e}"
        );
        // Autocomplete with choices; choices on a boolean.
        let e = errors(
            json!({"name": "x", "description": "d", "options": [
                {"type": 3, "name": "a", "description": "a", "autocomplete": true, "choices": [{"name": "n", "value": "v"}]},
                {"type": 5, "name": "b", "description": "b", "choices": [{"name": "n", "value": "v"}]}]}),
            Scope::Global,
        );
        assert!(
            e["options"]["0"]["autocomplete"]["_errors"].is_array(),
            "{e}"
        );
        assert!(e["options"]["1"]["choices"]["_errors"].is_array(), "{e}");
        // Too many options, too many choices.
        let many: Vec<Value> = (0..26)
            .map(|i| json!({"type": 3, "name": format!("o{i}"), "description": "d"}))
            .collect();
        let e = errors(
            json!({"name": "x", "description": "d", "options": many}),
            Scope::Global,
        );
        assert!(e["options"]["_errors"].is_array(), "{e}");
        // Context menus: any case and spaces, no description, no options.
        let spec =
            parse_command(&json!({"type": 2, "name": "Show Profile"}), Scope::Guild).unwrap();
        assert_eq!(spec.description, "");
        let e = errors(
            json!({"type": 3, "name": "Quote", "description": "no"}),
            Scope::Global,
        );
        assert!(e["description"]["_errors"].is_array(), "{e}");
        // Entry points are global only.
        let e = errors(json!({"type": 4, "name": "launch"}), Scope::Guild);
        assert!(e["type"]["_errors"].is_array(), "{e}");
        // Bad locale, integer out of range.
        let e = errors(
            json!({"name": "x", "description": "d", "name_localizations": {"xx": "y"},
                "options": [{"type": 4, "name": "n", "description": "n", "max_value": 9_007_199_254_740_993u64}]}),
            Scope::Global,
        );
        assert!(e["name_localizations"]["xx"]["_errors"].is_array(), "{e}");
        assert!(e["options"]["0"]["max_value"]["_errors"].is_array(), "{e}");
    }

    #[test]
    fn the_size_limit_counts_the_longest_localization() {
        let choices: Vec<Value> = (0..25)
            .map(|i| json!({"name": "n".repeat(100), "value": format!("{i}{}", "v".repeat(90))}))
            .collect();
        let options: Vec<Value> = (0..4)
            .map(|i| json!({"type": 3, "name": format!("o{i}"), "description": "d", "choices": choices}))
            .collect();
        let body = json!({"name": "big", "description": "d", "options": options});
        let e = serde_json::to_value(parse_command(&body, Scope::Global).unwrap_err()).unwrap();
        assert_eq!(
            e["errors"]["_errors"][0]["code"], "APPLICATION_COMMAND_TOO_LARGE",
            "{e}"
        );
    }

    #[test]
    fn bulk_overwrite_refuses_duplicate_names_per_type() {
        let body = json!([
            {"name": "ping", "description": "p"},
            {"name": "ping", "description": "again"},
            {"type": 2, "name": "ping"},
        ]);
        let e =
            serde_json::to_value(parse_overwrite(&body, Scope::Global, 131).unwrap_err()).unwrap();
        assert!(e["errors"]["1"]["name"]["_errors"].is_array(), "{e}");
        assert!(e["errors"].get("2").is_none(), "{e}");
        let ok = parse_overwrite(
            &json!([{"id": "42", "name": "a", "description": "b"}]),
            Scope::Guild,
            131,
        )
        .unwrap();
        assert_eq!(ok[0].0, Some(42));
        assert!(parse_overwrite(&json!({"name": "a"}), Scope::Guild, 131).is_err());
    }

    #[test]
    fn a_patch_replaces_fields_and_keeps_the_type() {
        let spec = parse_command(&json!({"name": "a", "description": "b"}), Scope::Global).unwrap();
        let patched = parse_patch(
            &json!({"description": "new", "type": 2}),
            &spec,
            Scope::Global,
        )
        .unwrap();
        assert_eq!(patched.kind, CHAT_INPUT);
        assert_eq!(patched.description, "new");
        assert!(parse_patch(&json!({"name": "Bad Name"}), &spec, Scope::Global).is_err());
    }
}
