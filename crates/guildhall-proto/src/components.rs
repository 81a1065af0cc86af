//! Message and modal components as Discord's component reference defines
//! them: the check of a sent component tree against the layout rules of
//! where it is sent (a legacy message, an `IS_COMPONENTS_V2` message, a
//! modal), and the tree as stored and echoed.
//!
//! Every refusal is Discord's 50035 nested at the failing field, all of a
//! body's problems at once (`components.0.components.2.custom_id`). What
//! passes is echoed as sent, reduced to the documented fields of each type
//! (as Discord drops what it does not know), with every component's `id`
//! filled in: the ids the application chose are kept, the others numbered
//! in document order from 1, skipping those taken (the reference's rule).
//!
//! The walk is bounded by the shape itself: each array's length is checked
//! before it is walked, and children are only followed where a type may
//! hold them (container → section → accessory is the deepest), so a body
//! cannot make the check recurse or loop beyond the documented layouts.
//!
//! Not here, because this server has neither: premium buttons (a `sku_id`
//! names an SKU, and this server sells none) and file components (they
//! point at an uploaded attachment, and uploads are not taken). Both are
//! refused on the field rather than stored pointing at nothing.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::commands::Form;
use crate::error::ErrorBody;

/// Message flag `IS_COMPONENTS_V2`: the message is its components only.
pub const FLAG_IS_COMPONENTS_V2: u64 = 1 << 15;

/// Component type `ACTION_ROW`.
pub const ACTION_ROW: u8 = 1;
/// Component type `BUTTON`.
pub const BUTTON: u8 = 2;
/// Component type `STRING_SELECT`.
pub const STRING_SELECT: u8 = 3;
/// Component type `TEXT_INPUT` (modals only).
pub const TEXT_INPUT: u8 = 4;
/// Component type `USER_SELECT`.
pub const USER_SELECT: u8 = 5;
/// Component type `ROLE_SELECT`.
pub const ROLE_SELECT: u8 = 6;
/// Component type `MENTIONABLE_SELECT`.
pub const MENTIONABLE_SELECT: u8 = 7;
/// Component type `CHANNEL_SELECT`.
pub const CHANNEL_SELECT: u8 = 8;
/// Component type `SECTION`.
pub const SECTION: u8 = 9;
/// Component type `TEXT_DISPLAY`.
pub const TEXT_DISPLAY: u8 = 10;
/// Component type `THUMBNAIL`.
pub const THUMBNAIL: u8 = 11;
/// Component type `MEDIA_GALLERY`.
pub const MEDIA_GALLERY: u8 = 12;
/// Component type `FILE`.
pub const FILE: u8 = 13;
/// Component type `SEPARATOR`.
pub const SEPARATOR: u8 = 14;
/// Component type `CONTAINER`.
pub const CONTAINER: u8 = 17;
/// Component type `LABEL` (modals only).
pub const LABEL: u8 = 18;
/// Component type `FILE_UPLOAD` (modals only).
pub const FILE_UPLOAD: u8 = 19;
/// Component type `RADIO_GROUP` (modals only).
pub const RADIO_GROUP: u8 = 21;
/// Component type `CHECKBOX_GROUP` (modals only).
pub const CHECKBOX_GROUP: u8 = 22;
/// Component type `CHECKBOX` (modals only).
pub const CHECKBOX: u8 = 23;

/// Whether components of type `kind` are selects the client fills in
/// (users, roles, mentionables, channels): their values are ids.
pub fn auto_populated(kind: u8) -> bool {
    matches!(
        kind,
        USER_SELECT | ROLE_SELECT | MENTIONABLE_SELECT | CHANNEL_SELECT
    )
}

/// Button style `LINK`: a `url`, no `custom_id`, no interaction.
pub const BUTTON_LINK: u64 = 5;
/// Button style `PREMIUM`: an SKU to buy.
pub const BUTTON_PREMIUM: u64 = 6;

/// Buttons one action row holds (a select fills a row alone).
pub const ROW_BUTTONS_MAX: usize = 5;
/// Text components one section holds.
pub const SECTION_TEXTS_MAX: usize = 3;
/// Items of one media gallery.
pub const GALLERY_ITEMS_MAX: usize = 10;
/// Options of a string select.
pub const SELECT_OPTIONS_MAX: usize = 25;
/// Most values a select lets a user pick (and most default values).
pub const SELECT_VALUES_MAX: u64 = 25;
/// Options of a radio or checkbox group, and files of a file upload.
pub const GROUP_OPTIONS_MAX: usize = 10;
/// Longest text input value, and its `min_length`/`max_length` ceiling.
pub const TEXT_INPUT_CHARS_MAX: u64 = 4_000;
/// Displayable text of all text displays of one message together.
pub const TEXT_DISPLAY_CHARS_TOTAL_MAX: usize = 4_000;
/// Longest media URL.
const URL_CHARS_MAX: usize = 2_048;
/// Longest link button URL.
const LINK_URL_CHARS_MAX: usize = 512;
/// Largest component `id` (a 32-bit integer).
const COMPONENT_ID_MAX: u64 = i32::MAX as u64;
/// Channel types a channel select may filter for.
const CHANNEL_TYPES: [u64; 13] = [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15, 16];

/// Where a component tree is sent: its top-level types and bounds differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// A message without `IS_COMPONENTS_V2`: up to five action rows beside
    /// its content and embeds.
    Legacy,
    /// A message with `IS_COMPONENTS_V2`: layout and content components,
    /// up to the total bound, and nothing else.
    V2,
    /// A modal: labels, text displays and (deprecated) rows of one text
    /// input.
    Modal,
}

impl Surface {
    /// The message surface its flags choose.
    pub fn of_flags(flags: u64) -> Self {
        if flags & FLAG_IS_COMPONENTS_V2 != 0 {
            Self::V2
        } else {
            Self::Legacy
        }
    }
}

/// The bounds a check applies (the limits crate's values, passed in).
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Most components of one message, counted at every depth (Discord's
    /// 40).
    pub components_total_max: usize,
    /// Most action rows of a legacy message (Discord's 5).
    pub legacy_rows_max: usize,
    /// Most top-level components of a modal (Discord's 5).
    pub modal_components_max: usize,
    /// Longest `custom_id` (Discord's 100).
    pub custom_id_chars_max: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            components_total_max: 40,
            legacy_rows_max: 5,
            modal_components_max: 5,
            custom_id_chars_max: 100,
        }
    }
}

/// Checks `components` (the body's raw field) sent to `surface`; `root`
/// is the path of the field in the body (`["components"]`, or
/// `["data", "components"]` in a callback). Returns the tree as stored.
pub fn check(
    components: &Value,
    surface: Surface,
    bounds: &Bounds,
    root: &[&str],
) -> Result<Vec<Value>, ErrorBody> {
    let mut check = Check {
        form: Form::rooted(root),
        surface,
        bounds,
        count: 0,
        custom_ids: HashSet::new(),
        ids: HashSet::new(),
        text_chars: 0,
    };
    let Some(items) = check.form.list(Some(components), true) else {
        return check.form.finish(vec![]);
    };
    let (top, max): (&[u8], usize) = match surface {
        Surface::Legacy => (&[ACTION_ROW], bounds.legacy_rows_max),
        Surface::V2 => (
            &[
                ACTION_ROW,
                SECTION,
                TEXT_DISPLAY,
                MEDIA_GALLERY,
                FILE,
                SEPARATOR,
                CONTAINER,
            ],
            bounds.components_total_max,
        ),
        Surface::Modal => (
            &[ACTION_ROW, TEXT_DISPLAY, LABEL],
            bounds.modal_components_max,
        ),
    };
    let min = usize::from(surface == Surface::Modal);
    if !check.length_ok(items.len(), min, max) {
        return check.form.finish(vec![]);
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Some(kept) = check.form_at(i, |c| c.component(item, top)) {
            out.push(Value::Object(kept));
        }
    }
    if check.count > bounds.components_total_max {
        check.form.error(
            "BASE_TYPE_MAX_LENGTH",
            format!(
                "Must be {} or fewer in length (components at every depth).",
                bounds.components_total_max
            ),
        );
    }
    if check.text_chars > TEXT_DISPLAY_CHARS_TOTAL_MAX {
        check.form.error(
            "BASE_TYPE_MAX_LENGTH",
            format!(
                "The text of all text displays must be {TEXT_DISPLAY_CHARS_TOTAL_MAX} or fewer in length."
            ),
        );
    }
    let ids = std::mem::take(&mut check.ids);
    let mut out = check.form.finish(out)?;
    number(&mut out, &ids);
    Ok(out)
}

/// Whether a checked tree holds anything a user can interact with (a
/// component with a `custom_id`: link and premium buttons have none).
pub fn interactive(components: &[Value]) -> bool {
    let mut found = false;
    visit(components, &mut |c| found |= c.contains_key("custom_id"));
    found
}

/// The text of a checked tree's text displays, one per line: what a
/// components-v2 message says, and so what its mentions are read from.
pub fn text_of(components: &[Value]) -> String {
    let mut lines: Vec<String> = Vec::new();
    visit(components, &mut |c| {
        if c.get("type").and_then(Value::as_u64) == Some(u64::from(TEXT_DISPLAY))
            && let Some(text) = c.get("content").and_then(Value::as_str)
        {
            lines.push(text.to_owned());
        }
    });
    lines.join("\n")
}

/// Calls `f` on every component of a checked tree, in document order.
fn visit(items: &[Value], f: &mut impl FnMut(&Map<String, Value>)) {
    for item in items {
        let Some(map) = item.as_object() else {
            continue;
        };
        f(map);
        if let Some(Value::Array(inner)) = map.get("components") {
            visit(inner, f);
        }
        for key in ["accessory", "component"] {
            if let Some(inner) = map.get(key) {
                visit(std::slice::from_ref(inner), f);
            }
        }
    }
}

/// Gives every component without an id (or with 0) the next unused one.
fn number(items: &mut [Value], taken: &HashSet<u64>) {
    fn walk(items: &mut [Value], taken: &HashSet<u64>, next: &mut u64) {
        for item in items {
            let Some(map) = item.as_object_mut() else {
                continue;
            };
            if map.get("id").and_then(Value::as_u64).unwrap_or(0) == 0 {
                *next += 1;
                while taken.contains(next) {
                    *next += 1;
                }
                map.insert("id".into(), json!(*next));
            }
            if let Some(Value::Array(inner)) = map.get_mut("components") {
                walk(inner, taken, next);
            }
            for key in ["accessory", "component"] {
                if let Some(inner) = map.get_mut(key) {
                    walk(std::slice::from_mut(inner), taken, next);
                }
            }
        }
    }
    let mut next = 0;
    walk(items, taken, &mut next);
}

struct Check<'a> {
    form: Form,
    surface: Surface,
    bounds: &'a Bounds,
    /// Components seen, at every depth.
    count: usize,
    custom_ids: HashSet<String>,
    /// The ids the application chose.
    ids: HashSet<u64>,
    /// Characters of the text displays seen.
    text_chars: usize,
}

/// A select's kind, for its defaults and its fields.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Select {
    String,
    User,
    Role,
    Mentionable,
    Channel,
}

impl Check<'_> {
    fn form_at<R>(&mut self, segment: impl ToString, f: impl FnOnce(&mut Self) -> R) -> R {
        self.form.push(segment.to_string());
        let result = f(self);
        self.form.pop();
        result
    }

    fn length_ok(&mut self, n: usize, min: usize, max: usize) -> bool {
        if n < min || n > max {
            let message = if min == 0 {
                format!("Must be {max} or fewer in length.")
            } else {
                format!("Must be between {min} and {max} in length.")
            };
            let code = if min == 0 {
                "BASE_TYPE_MAX_LENGTH"
            } else {
                "BASE_TYPE_BAD_LENGTH"
            };
            self.form.error(code, message);
            return false;
        }
        true
    }

    /// One component, whose type must be among `allowed`.
    fn component(&mut self, item: &Value, allowed: &[u8]) -> Option<Map<String, Value>> {
        let map = self.form.dict(item)?;
        self.count += 1;
        let kind = self.form_at("type", |c| match map.get("type") {
            None | Some(Value::Null) => {
                c.form.required();
                None
            }
            Some(value) => {
                let kind = value
                    .as_u64()
                    .and_then(|k| u8::try_from(k).ok())
                    .filter(|k| allowed.contains(k));
                if kind.is_none() {
                    let list: Vec<String> = allowed.iter().map(ToString::to_string).collect();
                    c.form.error(
                        "UNION_TYPE_CHOICES",
                        format!(
                            "Value of field \"type\" must be one of ({}).",
                            list.join(", ")
                        ),
                    );
                }
                kind
            }
        })?;
        let mut out = Map::new();
        out.insert("type".into(), json!(kind));
        self.id(map, &mut out);
        match kind {
            ACTION_ROW => self.row(map, &mut out),
            BUTTON => self.button(map, &mut out),
            STRING_SELECT => self.select(map, &mut out, Select::String),
            USER_SELECT => self.select(map, &mut out, Select::User),
            ROLE_SELECT => self.select(map, &mut out, Select::Role),
            MENTIONABLE_SELECT => self.select(map, &mut out, Select::Mentionable),
            CHANNEL_SELECT => self.select(map, &mut out, Select::Channel),
            TEXT_INPUT => self.text_input(map, &mut out),
            SECTION => self.section(map, &mut out),
            TEXT_DISPLAY => self.text_display(map, &mut out),
            THUMBNAIL => self.thumbnail(map, &mut out),
            MEDIA_GALLERY => self.gallery(map, &mut out),
            FILE => self.file(map, &mut out),
            SEPARATOR => self.separator(map, &mut out),
            CONTAINER => self.container(map, &mut out),
            LABEL => self.label(map, &mut out),
            FILE_UPLOAD => self.file_upload(map, &mut out),
            RADIO_GROUP => self.group(map, &mut out, true),
            CHECKBOX_GROUP => self.group(map, &mut out, false),
            CHECKBOX => self.checkbox(map, &mut out),
            _ => {}
        }
        Some(out)
    }

    fn id(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let Some(value) = map.get("id").filter(|v| !v.is_null()) else {
            return;
        };
        self.form_at("id", |c| match value.as_u64() {
            Some(0) => {}
            Some(id) if id <= COMPONENT_ID_MAX => {
                if c.ids.insert(id) {
                    out.insert("id".into(), json!(id));
                } else {
                    c.form.error(
                        "COMPONENT_ID_DUPLICATED",
                        "Component id cannot be duplicated",
                    );
                }
            }
            _ => c.form.error(
                "NUMBER_TYPE_MAX",
                format!("int value should be less than or equal to {COMPONENT_ID_MAX}."),
            ),
        });
    }

    /// An optional string of `min..=max` characters, kept as sent.
    fn text(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        key: &str,
        required: bool,
        (min, max): (usize, usize),
    ) -> Option<String> {
        self.form_at(key, |c| {
            let text = c.form.string(map.get(key), required)?;
            if !c.form.length(&text, min, max) {
                return None;
            }
            out.insert(key.into(), json!(text));
            Some(text)
        })
    }

    fn boolean(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, key: &str) {
        if let Some(b) = self.form_at(key, |c| c.form.boolean(map.get(key))) {
            out.insert(key.into(), json!(b));
        }
    }

    /// An optional integer in `min..=max`, kept as sent.
    fn int(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        key: &str,
        (min, max): (u64, u64),
    ) -> Option<u64> {
        let value = map.get(key).filter(|v| !v.is_null())?;
        self.form_at(key, |c| {
            let Some(n) = value.as_i64() else {
                c.form.error(
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{}\" is not int.", crate::commands::shown(value)),
                );
                return None;
            };
            if n < min as i64 {
                c.form.error(
                    "NUMBER_TYPE_MIN",
                    format!("int value should be greater than or equal to {min}."),
                );
                return None;
            }
            if n as u64 > max {
                c.form.error(
                    "NUMBER_TYPE_MAX",
                    format!("int value should be less than or equal to {max}."),
                );
                return None;
            }
            out.insert(key.into(), json!(n));
            Some(n as u64)
        })
    }

    /// A required `custom_id`, unique within the message or modal.
    fn custom_id(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let max = self.bounds.custom_id_chars_max;
        if let Some(id) = self.text(map, out, "custom_id", true, (1, max))
            && !self.custom_ids.insert(id)
        {
            self.form_at("custom_id", |c| {
                c.form.error(
                    "COMPONENT_CUSTOM_ID_DUPLICATED",
                    "Component custom id cannot be duplicated",
                )
            });
        }
    }

    /// `disabled`: a message's components may be disabled; a modal's
    /// cannot be (the reference: using it in a modal is an error).
    fn disabled(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        if self.surface == Surface::Modal {
            if map.get("disabled").is_some_and(|v| !v.is_null()) {
                self.form_at("disabled", |c| {
                    c.form.error(
                        "COMPONENT_DISABLED_IN_MODAL",
                        "Modals can not have disabled components.",
                    )
                });
            }
        } else {
            self.boolean(map, out, "disabled");
        }
    }

    /// `required` and `min_values` of a modal's input: `min_values` 0 only
    /// when not required. In a message `required` means nothing and is
    /// dropped, as Discord ignores it.
    fn required(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        min: Option<u64>,
    ) {
        if self.surface != Surface::Modal {
            return;
        }
        self.boolean(map, out, "required");
        let required = out.get("required").and_then(Value::as_bool) != Some(false);
        if required && min == Some(0) {
            self.form_at("min_values", |c| {
                c.form.error(
                    "NUMBER_TYPE_MIN",
                    "int value should be greater than or equal to 1 (the input is required).",
                )
            });
        }
    }

    /// A child array under `key`: `min..=max` components of `allowed`.
    fn children(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        key: &str,
        allowed: &[u8],
        (min, max): (usize, usize),
    ) -> Vec<Value> {
        let kept = self.form_at(key, |c| {
            let Some(items) = c.form.list(map.get(key), true) else {
                return vec![];
            };
            if !c.length_ok(items.len(), min, max) {
                return vec![];
            }
            let mut kept = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                if let Some(child) = c.form_at(i, |c| c.component(item, allowed)) {
                    kept.push(Value::Object(child));
                }
            }
            kept
        });
        out.insert(key.into(), Value::Array(kept.clone()));
        kept
    }

    /// One required component under `key`, of `allowed`.
    fn child(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        key: &str,
        allowed: &[u8],
    ) {
        let kept = self.form_at(key, |c| match map.get(key) {
            None | Some(Value::Null) => {
                c.form.required();
                None
            }
            Some(item) => c.component(item, allowed),
        });
        if let Some(kept) = kept {
            out.insert(key.into(), Value::Object(kept));
        }
    }

    fn row(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        if self.surface == Surface::Modal {
            // The deprecated modal row: one text input.
            self.children(map, out, "components", &[TEXT_INPUT], (1, 1));
            return;
        }
        let allowed = [
            BUTTON,
            STRING_SELECT,
            USER_SELECT,
            ROLE_SELECT,
            MENTIONABLE_SELECT,
            CHANNEL_SELECT,
        ];
        let kept = self.children(map, out, "components", &allowed, (1, ROW_BUTTONS_MAX));
        // A select is as wide as the row: alone in it. Every component
        // past what fits is refused, as Discord lists them.
        let select_at = kept
            .iter()
            .position(|c| c.get("type").and_then(Value::as_u64) != Some(u64::from(BUTTON)));
        if let Some(at) = select_at
            && kept.len() > 1
        {
            self.form_at("components", |c| {
                for i in (0..kept.len()).filter(|i| *i != at) {
                    c.form_at(i, |c| {
                        c.form.error(
                            "COMPONENT_LAYOUT_WIDTH_EXCEEDED",
                            "The specified component exceeds the maximum width",
                        )
                    });
                }
            });
        }
    }

    fn emoji(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let Some(value) = map.get("emoji").filter(|v| !v.is_null()) else {
            return;
        };
        self.form_at("emoji", |c| {
            let Some(emoji) = c.form.dict(value) else {
                return;
            };
            let id = match emoji.get("id") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if s.parse::<u64>().is_ok() => Some(s.clone()),
                Some(Value::Number(n)) if n.as_u64().is_some() => Some(n.to_string()),
                Some(_) => {
                    c.form_at("id", |c| {
                        c.form
                            .error("BUTTON_COMPONENT_INVALID_EMOJI", "Invalid emoji")
                    });
                    return;
                }
            };
            let name = emoji
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| (1..=32).contains(&n.chars().count()));
            if id.is_none() && name.is_none() {
                c.form
                    .error("BUTTON_COMPONENT_INVALID_EMOJI", "Invalid emoji");
                return;
            }
            let mut kept = Map::new();
            kept.insert("id".into(), id.map_or(Value::Null, Value::String));
            kept.insert("name".into(), name.map_or(Value::Null, |n| json!(n)));
            if let Some(animated) = emoji.get("animated").and_then(Value::as_bool) {
                kept.insert("animated".into(), json!(animated));
            }
            out.insert("emoji".into(), Value::Object(kept));
        });
    }

    fn button(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let style = self.form_at("style", |c| match map.get("style") {
            None | Some(Value::Null) => {
                c.form.required();
                None
            }
            Some(v) => c.form.small_int(Some(v), &[1, 2, 3, 4, 5, 6]),
        });
        let Some(style) = style.map(u64::from) else {
            return;
        };
        out.insert("style".into(), json!(style));
        let present = |key: &str| map.get(key).is_some_and(|v| !v.is_null());
        match style {
            BUTTON_LINK => {
                if present("custom_id") {
                    self.form_at("custom_id", |c| {
                        c.form.error(
                            "BUTTON_COMPONENT_CUSTOM_ID_URL_MUTUALLY_EXCLUSIVE",
                            "A custom id and url cannot both be specified",
                        )
                    });
                }
                if present("url") {
                    self.form_at("url", |c| {
                        if let Some(url) = c.form.string(map.get("url"), true)
                            && c.form.length(&url, 1, LINK_URL_CHARS_MAX)
                            && c.scheme(&url, &["http", "https", "discord"])
                        {
                            out.insert("url".into(), json!(url));
                        }
                    });
                } else {
                    self.form_at("url", |c| {
                        c.form
                            .error("BUTTON_COMPONENT_URL_REQUIRED", "A url is required")
                    });
                }
            }
            BUTTON_PREMIUM => {
                // Premium buttons sell an SKU; this server has none to sell.
                self.form_at("sku_id", |c| {
                    c.form.error(
                        "BUTTON_COMPONENT_INVALID_SKU",
                        "This server has no SKUs: premium buttons cannot be sent.",
                    )
                });
                return;
            }
            _ => {
                if present("url") {
                    self.form_at("url", |c| {
                        c.form.error(
                            "BUTTON_COMPONENT_CUSTOM_ID_URL_MUTUALLY_EXCLUSIVE",
                            "A custom id and url cannot both be specified",
                        )
                    });
                }
                if present("sku_id") {
                    self.form_at("sku_id", |c| {
                        c.form.error(
                            "BUTTON_COMPONENT_INVALID_SKU",
                            "Only premium buttons can have a sku_id.",
                        )
                    });
                }
                if present("custom_id") {
                    self.custom_id(map, out);
                } else {
                    self.form_at("custom_id", |c| {
                        c.form.error(
                            "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED",
                            "A custom id is required",
                        )
                    });
                }
            }
        }
        self.text(map, out, "label", false, (0, 80));
        self.emoji(map, out);
        self.disabled(map, out);
    }

    /// Whether `url` has one of `schemes` (else the error, on the field
    /// the caller is at).
    fn scheme(&mut self, url: &str, schemes: &[&str]) -> bool {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
        if scheme.as_deref().is_some_and(|s| schemes.contains(&s)) {
            return true;
        }
        let list: Vec<String> = schemes.iter().map(|s| format!("'{s}'")).collect();
        self.form.error(
            "URL_TYPE_INVALID_SCHEME",
            format!(
                "Scheme \"{}\" is not supported. Scheme must be one of ({}).",
                scheme
                    .unwrap_or_default()
                    .chars()
                    .take(16)
                    .collect::<String>(),
                list.join(", ")
            ),
        );
        false
    }

    /// `min_values` and `max_values` within `0..=ceiling` and
    /// `1..=ceiling`, the first at most the second; `(min, max)` as they
    /// stand, Discord's default of 1 each (`max_default` for groups).
    fn value_counts(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        ceiling: u64,
        max_default: u64,
    ) -> (u64, u64) {
        let min = self.int(map, out, "min_values", (0, ceiling));
        let max = self.int(map, out, "max_values", (1, ceiling));
        let (min_v, max_v) = (min.unwrap_or(1), max.unwrap_or(max_default));
        if min_v > max_v {
            self.form_at("min_values", |c| {
                c.form.error(
                    "NUMBER_TYPE_MAX",
                    format!("min_values value should be less than or equal to {max_v}."),
                )
            });
        }
        self.required(map, out, min);
        (min_v, max_v)
    }

    fn select(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, kind: Select) {
        self.custom_id(map, out);
        self.text(map, out, "placeholder", false, (0, 150));
        let (min, max) = self.value_counts(map, out, SELECT_VALUES_MAX, 1);
        self.disabled(map, out);
        match kind {
            Select::String => {
                let options = self.options(map, out, (1, SELECT_OPTIONS_MAX), true);
                if !options.is_empty() {
                    if max > options.len() as u64 {
                        self.form_at("options", |c| {
                            c.form.error(
                                "BASE_TYPE_MIN_LENGTH",
                                format!("Must be {max} or more in length."),
                            )
                        });
                    }
                    let defaults = options.iter().filter(|o| o.1).count() as u64;
                    if defaults > max {
                        self.form_at("options", |c| {
                            c.form.error(
                                "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES",
                                "The specified number of default values exceeds the specified maximum values",
                            )
                        });
                    }
                }
            }
            _ => {
                if kind == Select::Channel {
                    self.channel_types(map, out);
                }
                self.defaults(map, out, kind, (min, max));
            }
        }
    }

    /// A string select's (`with_emoji`) or a group's options:
    /// `(value, default)` of each kept one.
    fn options(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        (min, max): (usize, usize),
        with_emoji: bool,
    ) -> Vec<(String, bool)> {
        let mut seen = Vec::new();
        let kept = self.form_at("options", |c| {
            let items = match c.form.list(map.get("options"), true) {
                Some(items) => items,
                None => return vec![],
            };
            if !c.length_ok(items.len(), min, max) {
                return vec![];
            }
            let mut kept = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                c.form_at(i, |c| {
                    let Some(option) = c.form.dict(item) else {
                        return;
                    };
                    let mut o = Map::new();
                    c.text(option, &mut o, "label", true, (1, 100));
                    let value = c.text(option, &mut o, "value", true, (1, 100));
                    c.text(option, &mut o, "description", false, (0, 100));
                    if with_emoji {
                        c.emoji(option, &mut o);
                    }
                    c.boolean(option, &mut o, "default");
                    let default = o.get("default").and_then(Value::as_bool) == Some(true);
                    if let Some(value) = value {
                        if seen.iter().any(|(v, _)| *v == value) {
                            c.form_at("value", |c| {
                                c.form.error(
                                    "SELECT_COMPONENT_OPTION_VALUE_DUPLICATED",
                                    "The specified option value is already used",
                                )
                            });
                        }
                        seen.push((value, default));
                    }
                    kept.push(Value::Object(o));
                });
            }
            kept
        });
        out.insert("options".into(), Value::Array(kept));
        seen
    }

    fn channel_types(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let Some(value) = map.get("channel_types").filter(|v| !v.is_null()) else {
            return;
        };
        self.form_at("channel_types", |c| {
            let Some(items) = c.form.list(Some(value), false) else {
                return;
            };
            if !c.length_ok(items.len(), 0, CHANNEL_TYPES.len()) {
                return;
            }
            let mut kept = Vec::new();
            for (i, item) in items.iter().enumerate() {
                if let Some(t) = c.form_at(i, |c| c.form.small_int(Some(item), &CHANNEL_TYPES)) {
                    kept.push(json!(t));
                }
            }
            out.insert("channel_types".into(), Value::Array(kept));
        });
    }

    /// An auto-populated select's `default_values`: `{id, type}` of the
    /// select's kinds, as many as `min..=max` allows.
    fn defaults(
        &mut self,
        map: &Map<String, Value>,
        out: &mut Map<String, Value>,
        kind: Select,
        (min, max): (u64, u64),
    ) {
        let Some(value) = map.get("default_values").filter(|v| !v.is_null()) else {
            return;
        };
        let types: &[&str] = match kind {
            Select::User => &["user"],
            Select::Role => &["role"],
            Select::Mentionable => &["user", "role"],
            Select::Channel => &["channel"],
            Select::String => &[],
        };
        self.form_at("default_values", |c| {
            let Some(items) = c.form.list(Some(value), false) else {
                return;
            };
            if items.len() as u64 > max {
                c.form.error(
                    "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES",
                    "The specified number of default values exceeds the specified maximum values",
                );
                return;
            }
            if !items.is_empty() && (items.len() as u64) < min {
                c.form.error(
                    "BASE_TYPE_BAD_LENGTH",
                    format!("Must be between {min} and {max} in length."),
                );
                return;
            }
            let mut kept = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                c.form_at(i, |c| {
                    let id = item.get("id").and_then(|id| match id {
                        Value::String(s) => s.parse::<u64>().ok(),
                        Value::Number(n) => n.as_u64(),
                        _ => None,
                    });
                    let Some(id) = id.filter(|id| *id > 0) else {
                        c.form_at("id", |c| {
                            c.form
                                .error("NUMBER_TYPE_COERCE", "Value is not snowflake.")
                        });
                        return;
                    };
                    let t = item.get("type").and_then(Value::as_str);
                    let Some(t) = t.filter(|t| types.contains(t)) else {
                        let list: Vec<String> = types.iter().map(|t| format!("'{t}'")).collect();
                        c.form_at("type", |c| {
                            c.form.error(
                                "BASE_TYPE_CHOICES",
                                format!("Value must be one of {{{}}}.", list.join(", ")),
                            )
                        });
                        return;
                    };
                    kept.push(json!({"id": id.to_string(), "type": t}));
                });
            }
            out.insert("default_values".into(), Value::Array(kept));
        });
    }

    fn text_input(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.custom_id(map, out);
        let style = self.form_at("style", |c| match map.get("style") {
            None | Some(Value::Null) => {
                c.form.required();
                None
            }
            Some(v) => c.form.small_int(Some(v), &[1, 2]),
        });
        if let Some(style) = style {
            out.insert("style".into(), json!(style));
        }
        // `label` on the input is deprecated in favour of the Label
        // around it, and still required in the old action row form.
        let in_row = self.form.parent_is("components");
        self.text(map, out, "label", in_row, (1, 45));
        let min = self.int(map, out, "min_length", (0, TEXT_INPUT_CHARS_MAX));
        let max = self.int(map, out, "max_length", (1, TEXT_INPUT_CHARS_MAX));
        if let (Some(min), Some(max)) = (min, max)
            && min > max
        {
            self.form_at("min_length", |c| {
                c.form.error(
                    "NUMBER_TYPE_MAX",
                    format!("min_length value should be less than or equal to {max}."),
                )
            });
        }
        self.boolean(map, out, "required");
        let cap = max.unwrap_or(TEXT_INPUT_CHARS_MAX) as usize;
        self.text(map, out, "value", false, (0, cap));
        self.text(map, out, "placeholder", false, (0, 100));
    }

    fn section(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.children(
            map,
            out,
            "components",
            &[TEXT_DISPLAY],
            (1, SECTION_TEXTS_MAX),
        );
        self.child(map, out, "accessory", &[BUTTON, THUMBNAIL]);
    }

    fn text_display(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        if let Some(text) = self.text(map, out, "content", true, (1, TEXT_DISPLAY_CHARS_TOTAL_MAX))
        {
            self.text_chars += text.chars().count();
        }
    }

    /// An unfurled media item under `key`: only `url` is the sender's
    /// (the rest Discord fills in); http(s), or an uploaded attachment,
    /// which this server does not take.
    fn media(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, key: &str) {
        self.form_at(key, |c| {
            let media = match map.get(key) {
                None | Some(Value::Null) => return c.form.required(),
                Some(media) => match c.form.dict(media) {
                    Some(media) => media,
                    None => return,
                },
            };
            c.form_at("url", |c| {
                let Some(url) = c.form.string(media.get("url"), true) else {
                    return;
                };
                if !c.form.length(&url, 1, URL_CHARS_MAX) {
                    return;
                }
                if url.starts_with("attachment://") {
                    c.form
                        .error("ATTACHMENT_NOT_FOUND", "Attachment data not found");
                    return;
                }
                if c.scheme(&url, &["http", "https"]) {
                    out.insert(key.into(), json!({"url": url}));
                }
            });
        });
    }

    /// `description` of a media item: nullable, at most 1024 characters.
    fn alt_text(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        match map.get("description") {
            Some(Value::Null) => {
                out.insert("description".into(), Value::Null);
            }
            Some(_) => {
                self.text(map, out, "description", false, (0, 1_024));
            }
            None => {}
        }
    }

    fn thumbnail(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.media(map, out, "media");
        self.alt_text(map, out);
        self.boolean(map, out, "spoiler");
    }

    fn gallery(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let kept = self.form_at("items", |c| {
            let items = match c.form.list(map.get("items"), true) {
                Some(items) => items,
                None => return vec![],
            };
            if !c.length_ok(items.len(), 1, GALLERY_ITEMS_MAX) {
                return vec![];
            }
            let mut kept = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                c.form_at(i, |c| {
                    let Some(item) = c.form.dict(item) else {
                        return;
                    };
                    let mut o = Map::new();
                    c.media(item, &mut o, "media");
                    c.alt_text(item, &mut o);
                    c.boolean(item, &mut o, "spoiler");
                    kept.push(Value::Object(o));
                });
            }
            kept
        });
        out.insert("items".into(), Value::Array(kept));
    }

    fn file(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        // A file component shows an uploaded attachment
        // (`attachment://name` only), which components do not resolve
        // here yet: whatever it names is not found.
        self.form_at("file", |c| {
            c.form_at("url", |c| {
                let url = map
                    .get("file")
                    .and_then(|f| f.get("url"))
                    .and_then(Value::as_str);
                match url {
                    None => c.form.required(),
                    Some(url) if url.starts_with("attachment://") => c
                        .form
                        .error("ATTACHMENT_NOT_FOUND", "Attachment data not found"),
                    Some(_) => c.form.error(
                        "URL_TYPE_INVALID_SCHEME",
                        "Scheme must be one of ('attachment').",
                    ),
                }
            })
        });
        self.boolean(map, out, "spoiler");
    }

    fn separator(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.boolean(map, out, "divider");
        if let Some(spacing) = self.form_at("spacing", |c| {
            map.get("spacing")
                .filter(|v| !v.is_null())
                .and_then(|v| c.form.small_int(Some(v), &[1, 2]))
        }) {
            out.insert("spacing".into(), json!(spacing));
        }
    }

    fn container(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        let allowed = [
            ACTION_ROW,
            TEXT_DISPLAY,
            SECTION,
            MEDIA_GALLERY,
            SEPARATOR,
            FILE,
        ];
        let total = self.bounds.components_total_max;
        self.children(map, out, "components", &allowed, (1, total));
        match map.get("accent_color") {
            Some(Value::Null) => {
                out.insert("accent_color".into(), Value::Null);
            }
            Some(_) => {
                self.int(map, out, "accent_color", (0, 0xFF_FF_FF));
            }
            None => {}
        }
        self.boolean(map, out, "spoiler");
    }

    fn label(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.text(map, out, "label", true, (1, 45));
        self.text(map, out, "description", false, (0, 100));
        self.child(
            map,
            out,
            "component",
            &[
                TEXT_INPUT,
                STRING_SELECT,
                USER_SELECT,
                ROLE_SELECT,
                MENTIONABLE_SELECT,
                CHANNEL_SELECT,
                FILE_UPLOAD,
                RADIO_GROUP,
                CHECKBOX_GROUP,
                CHECKBOX,
            ],
        );
    }

    fn file_upload(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.custom_id(map, out);
        self.value_counts(map, out, GROUP_OPTIONS_MAX as u64, 1);
        let Some(value) = map.get("file_types").filter(|v| !v.is_null()) else {
            return;
        };
        self.form_at("file_types", |c| {
            let Some(items) = c.form.list(Some(value), false) else {
                return;
            };
            if !c.length_ok(items.len(), 0, GROUP_OPTIONS_MAX) {
                return;
            }
            let mut kept = Vec::new();
            for (i, item) in items.iter().enumerate() {
                c.form_at(i, |c| {
                    let t = item.as_str().unwrap_or_default();
                    let known = matches!(t, "image" | "video" | "audio")
                        || (t.len() > 1
                            && t.len() <= 16
                            && t.starts_with('.')
                            && t[1..].chars().all(|ch| ch.is_ascii_alphanumeric()));
                    if known {
                        kept.push(json!(t));
                    } else {
                        c.form.error(
                            "BASE_TYPE_CHOICES",
                            "Value must be image, video, audio or a dot-prefixed extension.",
                        );
                    }
                });
            }
            out.insert("file_types".into(), Value::Array(kept));
        });
    }

    /// A radio group (`radio`: 2 to 10 options, one default at most) or a
    /// checkbox group (1 to 10 options, `min_values`/`max_values`).
    fn group(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>, radio: bool) {
        self.custom_id(map, out);
        let options = self.options(
            map,
            out,
            (if radio { 2 } else { 1 }, GROUP_OPTIONS_MAX),
            false,
        );
        let defaults = options.iter().filter(|o| o.1).count() as u64;
        if radio {
            self.boolean(map, out, "required");
            if defaults > 1 {
                self.form_at("options", |c| {
                    c.form.error(
                        "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES",
                        "A radio group has one default at most.",
                    )
                });
            }
            return;
        }
        let n = options.len().max(1) as u64;
        let (_, max) = self.value_counts(map, out, GROUP_OPTIONS_MAX as u64, n);
        if !options.is_empty() && max > n {
            self.form_at("max_values", |c| {
                c.form.error(
                    "NUMBER_TYPE_MAX",
                    format!("int value should be less than or equal to {n}."),
                )
            });
        }
        if defaults > max {
            self.form_at("options", |c| {
                c.form.error(
                    "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES",
                    "The specified number of default values exceeds the specified maximum values",
                )
            });
        }
    }

    fn checkbox(&mut self, map: &Map<String, Value>, out: &mut Map<String, Value>) {
        self.custom_id(map, out);
        self.boolean(map, out, "default");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(components: Value) -> Result<Vec<Value>, ErrorBody> {
        check(
            &components,
            Surface::Legacy,
            &Bounds::default(),
            &["components"],
        )
    }

    fn v2(components: Value) -> Result<Vec<Value>, ErrorBody> {
        check(
            &components,
            Surface::V2,
            &Bounds::default(),
            &["components"],
        )
    }

    fn modal(components: Value) -> Result<Vec<Value>, ErrorBody> {
        check(
            &components,
            Surface::Modal,
            &Bounds::default(),
            &["data", "components"],
        )
    }

    /// The first error code at `path` of a refusal.
    fn code_at(result: Result<Vec<Value>, ErrorBody>, path: &[&str]) -> String {
        let body = result.expect_err("refused");
        assert_eq!(body.code, 50035);
        let mut node = body.errors.clone().expect("errors");
        for key in path {
            node = node
                .get(*key)
                .unwrap_or_else(|| panic!("no {key} in {node}"))
                .clone();
        }
        node["_errors"][0]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no _errors in {node}"))
            .to_owned()
    }

    fn button(id: &str) -> Value {
        json!({"type": 2, "style": 1, "label": "Go", "custom_id": id})
    }

    #[test]
    fn a_legacy_row_of_buttons_is_kept_with_numbered_ids() {
        let kept = legacy(json!([{"type": 1, "components": [
            button("a"),
            {"type": 2, "style": 5, "label": "Docs", "url": "https://example.com", "extra": 1},
        ]}]))
        .unwrap();
        assert_eq!(
            kept,
            vec![json!({"type": 1, "id": 1, "components": [
                {"type": 2, "id": 2, "style": 1, "label": "Go", "custom_id": "a"},
                {"type": 2, "id": 3, "style": 5, "label": "Docs", "url": "https://example.com"},
            ]})]
        );
    }

    #[test]
    fn chosen_ids_are_kept_and_skipped_and_duplicates_refused() {
        let kept = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 1, "custom_id": "a", "id": 2},
            {"type": 2, "style": 1, "custom_id": "b", "id": 0},
        ]}]))
        .unwrap();
        assert_eq!(kept[0]["id"], 1);
        assert_eq!(kept[0]["components"][0]["id"], 2);
        assert_eq!(kept[0]["components"][1]["id"], 3);
        let dup = legacy(json!([{"type": 1, "id": 7, "components": [
            {"type": 2, "style": 1, "custom_id": "a", "id": 7},
        ]}]));
        assert_eq!(
            code_at(dup, &["components", "0", "components", "0", "id"]),
            "COMPONENT_ID_DUPLICATED"
        );
    }

    #[test]
    fn button_styles_decide_their_fields() {
        let no_id =
            legacy(json!([{"type": 1, "components": [{"type": 2, "style": 1, "label": "x"}]}]));
        assert_eq!(
            code_at(no_id, &["components", "0", "components", "0", "custom_id"]),
            "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED"
        );
        let no_url =
            legacy(json!([{"type": 1, "components": [{"type": 2, "style": 5, "label": "x"}]}]));
        assert_eq!(
            code_at(no_url, &["components", "0", "components", "0", "url"]),
            "BUTTON_COMPONENT_URL_REQUIRED"
        );
        let both = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 5, "url": "https://a.b", "custom_id": "c"}
        ]}]));
        assert_eq!(
            code_at(both, &["components", "0", "components", "0", "custom_id"]),
            "BUTTON_COMPONENT_CUSTOM_ID_URL_MUTUALLY_EXCLUSIVE"
        );
        let scheme = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 5, "url": "javascript://alert(1)"}
        ]}]));
        assert_eq!(
            code_at(scheme, &["components", "0", "components", "0", "url"]),
            "URL_TYPE_INVALID_SCHEME"
        );
        let premium = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 6, "sku_id": "1"}
        ]}]));
        assert_eq!(
            code_at(premium, &["components", "0", "components", "0", "sku_id"]),
            "BUTTON_COMPONENT_INVALID_SKU"
        );
        let style =
            legacy(json!([{"type": 1, "components": [{"type": 2, "style": 9, "custom_id": "a"}]}]));
        assert_eq!(
            code_at(style, &["components", "0", "components", "0", "style"]),
            "BASE_TYPE_CHOICES"
        );
        let long = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 1, "custom_id": "a", "label": "x".repeat(81)}
        ]}]));
        assert_eq!(
            code_at(long, &["components", "0", "components", "0", "label"]),
            "BASE_TYPE_BAD_LENGTH"
        );
    }

    #[test]
    fn rows_hold_five_buttons_or_one_select() {
        let six: Vec<Value> = (0..6).map(|i| button(&format!("b{i}"))).collect();
        let wide = legacy(json!([{"type": 1, "components": six}]));
        assert_eq!(
            code_at(wide, &["components", "0", "components"]),
            "BASE_TYPE_BAD_LENGTH"
        );
        let mixed = legacy(json!([{"type": 1, "components": [
            button("a"),
            {"type": 5, "custom_id": "u"},
        ]}]));
        assert_eq!(
            code_at(mixed, &["components", "0", "components", "0"]),
            "COMPONENT_LAYOUT_WIDTH_EXCEEDED"
        );
        let empty = legacy(json!([{"type": 1, "components": []}]));
        assert_eq!(
            code_at(empty, &["components", "0", "components"]),
            "BASE_TYPE_BAD_LENGTH"
        );
        let input = legacy(
            json!([{"type": 1, "components": [{"type": 4, "custom_id": "t", "style": 1, "label": "L"}]}]),
        );
        assert_eq!(
            code_at(input, &["components", "0", "components", "0", "type"]),
            "UNION_TYPE_CHOICES"
        );
        let rows: Vec<Value> = (0..6)
            .map(|i| json!({"type": 1, "components": [button(&format!("r{i}"))]}))
            .collect();
        assert_eq!(
            code_at(legacy(json!(rows)), &["components"]),
            "BASE_TYPE_MAX_LENGTH"
        );
    }

    #[test]
    fn custom_ids_are_unique_across_the_message() {
        let dup = legacy(json!([
            {"type": 1, "components": [button("same")]},
            {"type": 1, "components": [button("same")]},
        ]));
        assert_eq!(
            code_at(dup, &["components", "1", "components", "0", "custom_id"]),
            "COMPONENT_CUSTOM_ID_DUPLICATED"
        );
        let long = legacy(json!([{"type": 1, "components": [button(&"x".repeat(101))]}]));
        assert_eq!(
            code_at(long, &["components", "0", "components", "0", "custom_id"]),
            "BASE_TYPE_BAD_LENGTH"
        );
    }

    #[test]
    fn string_selects_check_options_counts_and_defaults() {
        let select = |extra: Value| {
            let mut s = json!({"type": 3, "custom_id": "s", "options": [
                {"label": "A", "value": "a"}, {"label": "B", "value": "b"},
            ]});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            legacy(json!([{"type": 1, "components": [s]}]))
        };
        assert!(select(json!({})).is_ok());
        assert_eq!(
            code_at(
                select(json!({"max_values": 3})),
                &["components", "0", "components", "0", "options"]
            ),
            "BASE_TYPE_MIN_LENGTH"
        );
        assert_eq!(
            code_at(
                select(json!({"min_values": 2, "max_values": 1})),
                &["components", "0", "components", "0", "min_values"]
            ),
            "NUMBER_TYPE_MAX"
        );
        assert_eq!(
            code_at(
                select(json!({"max_values": 26})),
                &["components", "0", "components", "0", "max_values"]
            ),
            "NUMBER_TYPE_MAX"
        );
        let dup = select(
            json!({"options": [{"label": "A", "value": "a"}, {"label": "B", "value": "a"}]}),
        );
        assert_eq!(
            code_at(
                dup,
                &[
                    "components",
                    "0",
                    "components",
                    "0",
                    "options",
                    "1",
                    "value"
                ]
            ),
            "SELECT_COMPONENT_OPTION_VALUE_DUPLICATED"
        );
        let defaults = select(json!({"options": [
            {"label": "A", "value": "a", "default": true}, {"label": "B", "value": "b", "default": true}
        ]}));
        assert_eq!(
            code_at(defaults, &["components", "0", "components", "0", "options"]),
            "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES"
        );
        let none = select(json!({"options": []}));
        assert_eq!(
            code_at(none, &["components", "0", "components", "0", "options"]),
            "BASE_TYPE_BAD_LENGTH"
        );
        // `required` means nothing in a message and is not kept.
        let kept = select(json!({"required": false})).unwrap();
        assert!(kept[0]["components"][0].get("required").is_none());
    }

    #[test]
    fn auto_selects_check_default_values_against_their_kind() {
        let kept = legacy(json!([{"type": 1, "components": [
            {"type": 7, "custom_id": "m", "max_values": 2, "default_values": [
                {"id": "10", "type": "user"}, {"id": 11, "type": "role"}
            ]}
        ]}]))
        .unwrap();
        assert_eq!(
            kept[0]["components"][0]["default_values"],
            json!([{"id": "10", "type": "user"}, {"id": "11", "type": "role"}])
        );
        let wrong = legacy(json!([{"type": 1, "components": [
            {"type": 6, "custom_id": "r", "default_values": [{"id": "10", "type": "user"}]}
        ]}]));
        assert_eq!(
            code_at(
                wrong,
                &[
                    "components",
                    "0",
                    "components",
                    "0",
                    "default_values",
                    "0",
                    "type"
                ]
            ),
            "BASE_TYPE_CHOICES"
        );
        let many = legacy(json!([{"type": 1, "components": [
            {"type": 5, "custom_id": "u", "default_values": [{"id": "1", "type": "user"}, {"id": "2", "type": "user"}]}
        ]}]));
        assert_eq!(
            code_at(
                many,
                &["components", "0", "components", "0", "default_values"]
            ),
            "SELECT_COMPONENT_TOO_MANY_DEFAULT_VALUES"
        );
        let channel = legacy(json!([{"type": 1, "components": [
            {"type": 8, "custom_id": "c", "channel_types": [0, 99]}
        ]}]));
        assert_eq!(
            code_at(
                channel,
                &["components", "0", "components", "0", "channel_types", "1"]
            ),
            "BASE_TYPE_CHOICES"
        );
    }

    #[test]
    fn layout_components_need_the_v2_flag() {
        let text = json!([{"type": 10, "content": "hello"}]);
        assert_eq!(
            code_at(legacy(text.clone()), &["components", "0", "type"]),
            "UNION_TYPE_CHOICES"
        );
        assert_eq!(
            v2(text).unwrap(),
            vec![json!({"type": 10, "id": 1, "content": "hello"})]
        );
    }

    #[test]
    fn a_v2_message_nests_sections_and_containers() {
        let kept = v2(json!([{
            "type": 17, "accent_color": 0xFF0000, "spoiler": false, "components": [
                {"type": 9, "components": [{"type": 10, "content": "Title"}],
                 "accessory": {"type": 11, "media": {"url": "https://a.b/c.png", "proxy_url": "x"}}},
                {"type": 14, "divider": true, "spacing": 2},
                {"type": 12, "items": [{"media": {"url": "https://a.b/d.png"}, "description": null}]},
                {"type": 1, "components": [button("go")]},
            ]
        }]))
        .unwrap();
        let container = &kept[0];
        assert_eq!(container["id"], 1);
        assert_eq!(container["accent_color"], 0xFF0000);
        let section = &container["components"][0];
        assert_eq!(section["id"], 2);
        assert_eq!(section["components"][0]["id"], 3);
        assert_eq!(
            section["accessory"],
            json!({"type": 11, "id": 4, "media": {"url": "https://a.b/c.png"}})
        );
        assert_eq!(
            container["components"][1],
            json!({"type": 14, "id": 5, "divider": true, "spacing": 2})
        );
        assert_eq!(
            container["components"][2]["items"][0]["description"],
            Value::Null
        );
        assert_eq!(container["components"][3]["id"], 7);
        assert_eq!(container["components"][3]["components"][0]["id"], 8);
        assert!(interactive(&kept));
        assert_eq!(text_of(&kept), "Title");
    }

    #[test]
    fn v2_shapes_are_checked() {
        let thumb_top = v2(json!([{"type": 11, "media": {"url": "https://a.b"}}]));
        assert_eq!(
            code_at(thumb_top, &["components", "0", "type"]),
            "UNION_TYPE_CHOICES"
        );
        let no_accessory = v2(json!([{"type": 9, "components": [{"type": 10, "content": "x"}]}]));
        assert_eq!(
            code_at(no_accessory, &["components", "0", "accessory"]),
            "BASE_TYPE_REQUIRED"
        );
        let four = v2(json!([{"type": 9, "accessory": button("b"), "components": [
            {"type": 10, "content": "1"}, {"type": 10, "content": "2"},
            {"type": 10, "content": "3"}, {"type": 10, "content": "4"},
        ]}]));
        assert_eq!(
            code_at(four, &["components", "0", "components"]),
            "BASE_TYPE_BAD_LENGTH"
        );
        let color = v2(
            json!([{"type": 17, "accent_color": 0x1000000, "components": [{"type": 10, "content": "x"}]}]),
        );
        assert_eq!(
            code_at(color, &["components", "0", "accent_color"]),
            "NUMBER_TYPE_MAX"
        );
        let file = v2(json!([{"type": 13, "file": {"url": "attachment://a.pdf"}}]));
        assert_eq!(
            code_at(file, &["components", "0", "file", "url"]),
            "ATTACHMENT_NOT_FOUND"
        );
        let media = v2(json!([{"type": 12, "items": [{"media": {"url": "ftp://a.b"}}]}]));
        assert_eq!(
            code_at(media, &["components", "0", "items", "0", "media", "url"]),
            "URL_TYPE_INVALID_SCHEME"
        );
        let empty_gallery = v2(json!([{"type": 12, "items": []}]));
        assert_eq!(
            code_at(empty_gallery, &["components", "0", "items"]),
            "BASE_TYPE_BAD_LENGTH"
        );
    }

    #[test]
    fn a_v2_message_holds_forty_components_and_4000_characters() {
        let forty: Vec<Value> = (0..40)
            .map(|i| json!({"type": 10, "content": format!("t{i}")}))
            .collect();
        assert_eq!(v2(json!(forty)).unwrap().len(), 40);
        let nested = json!([{"type": 17, "components":
            (0..40).map(|i| json!({"type": 10, "content": format!("t{i}")})).collect::<Vec<_>>()}]);
        assert_eq!(code_at(v2(nested), &["components"]), "BASE_TYPE_MAX_LENGTH");
        let long = json!([{"type": 10, "content": "x".repeat(2_500)}, {"type": 10, "content": "y".repeat(2_500)}]);
        assert_eq!(code_at(v2(long), &["components"]), "BASE_TYPE_MAX_LENGTH");
    }

    #[test]
    fn modals_take_labels_with_inputs_and_refuse_disabled() {
        let kept = modal(json!([
            {"type": 10, "content": "Tell us"},
            {"type": 18, "label": "Name", "component": {"type": 4, "custom_id": "name", "style": 1, "max_length": 20}},
            {"type": 18, "label": "Pick", "component": {"type": 3, "custom_id": "pick", "required": false, "min_values": 0,
                "options": [{"label": "A", "value": "a"}]}},
            {"type": 1, "components": [{"type": 4, "custom_id": "old", "style": 2, "label": "Old"}]},
        ]))
        .unwrap();
        assert_eq!(kept[1]["component"]["max_length"], 20);
        assert_eq!(kept[2]["component"]["required"], false);
        let disabled = modal(json!([{"type": 18, "label": "P", "component":
            {"type": 3, "custom_id": "p", "disabled": true, "options": [{"label": "A", "value": "a"}]}}]));
        assert_eq!(
            code_at(
                disabled,
                &["data", "components", "0", "component", "disabled"]
            ),
            "COMPONENT_DISABLED_IN_MODAL"
        );
        let min0 = modal(json!([{"type": 18, "label": "P", "component":
            {"type": 3, "custom_id": "p", "min_values": 0, "options": [{"label": "A", "value": "a"}]}}]));
        assert_eq!(
            code_at(
                min0,
                &["data", "components", "0", "component", "min_values"]
            ),
            "NUMBER_TYPE_MIN"
        );
        let row_label =
            modal(json!([{"type": 1, "components": [{"type": 4, "custom_id": "t", "style": 1}]}]));
        assert_eq!(
            code_at(
                row_label,
                &["data", "components", "0", "components", "0", "label"]
            ),
            "BASE_TYPE_REQUIRED"
        );
        let button_in_modal = modal(json!([{"type": 18, "label": "B", "component": button("b")}]));
        assert_eq!(
            code_at(
                button_in_modal,
                &["data", "components", "0", "component", "type"]
            ),
            "UNION_TYPE_CHOICES"
        );
        let value = modal(json!([{"type": 18, "label": "N", "component":
            {"type": 4, "custom_id": "n", "style": 1, "max_length": 3, "value": "four"}}]));
        assert_eq!(
            code_at(value, &["data", "components", "0", "component", "value"]),
            "BASE_TYPE_BAD_LENGTH"
        );
        assert_eq!(
            code_at(modal(json!([])), &["data", "components"]),
            "BASE_TYPE_BAD_LENGTH"
        );
    }

    #[test]
    fn modal_groups_are_checked() {
        let radio_one = modal(json!([{"type": 18, "label": "R", "component":
            {"type": 21, "custom_id": "r", "options": [{"label": "A", "value": "a"}]}}]));
        assert_eq!(
            code_at(
                radio_one,
                &["data", "components", "0", "component", "options"]
            ),
            "BASE_TYPE_BAD_LENGTH"
        );
        let checks = modal(json!([{"type": 18, "label": "C", "component":
            {"type": 22, "custom_id": "c", "max_values": 3, "options": [{"label": "A", "value": "a"}, {"label": "B", "value": "b"}]}}]));
        assert_eq!(
            code_at(
                checks,
                &["data", "components", "0", "component", "max_values"]
            ),
            "NUMBER_TYPE_MAX"
        );
        assert!(modal(json!([{"type": 18, "label": "Ok?", "component": {"type": 23, "custom_id": "ok", "default": true}}])).is_ok());
        let upload = modal(json!([{"type": 18, "label": "F", "component":
            {"type": 19, "custom_id": "f", "file_types": ["image", ".pdf", "exe"]}}]));
        assert_eq!(
            code_at(
                upload,
                &["data", "components", "0", "component", "file_types", "2"]
            ),
            "BASE_TYPE_CHOICES"
        );
    }

    #[test]
    fn non_objects_and_missing_types_are_refused_where_they_are() {
        assert_eq!(
            code_at(legacy(json!({"type": 1})), &["components"]),
            "BASE_TYPE_ARRAY"
        );
        assert_eq!(
            code_at(legacy(json!([3])), &["components", "0"]),
            "DICT_TYPE_CONVERT"
        );
        assert_eq!(
            code_at(
                legacy(json!([{"components": []}])),
                &["components", "0", "type"]
            ),
            "BASE_TYPE_REQUIRED"
        );
        let link_only = legacy(json!([{"type": 1, "components": [
            {"type": 2, "style": 5, "url": "https://a.b", "label": "x"}
        ]}]))
        .unwrap();
        assert!(!interactive(&link_only));
    }
}
