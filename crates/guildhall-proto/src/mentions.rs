//! Who a message mentions: the mentions in its content (`<@id>`, `<@!id>`,
//! `<@&id>`, `@everyone`, `@here`), limited by the body's
//! `allowed_mentions` (Discord's Allowed Mentions object, with its
//! defaults per context) and by what the author may do. The result fills
//! the message's `mentions`, `mention_roles` and `mention_everyone`.
//! Pure: which users and roles exist, and the author's permissions, are
//! the caller's to supply.
//!
//! Field codes: `MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE` is what Discord
//! answers for `parse` naming a type whose id list is also given (seen in
//! discord.js and discord.py error reports; the docs describe the rule,
//! not the code); `BASE_TYPE_CHOICES`, `BASE_TYPE_MAX_LENGTH`,
//! `NUMBER_TYPE_COERCE`, `BOOLEAN_TYPE_CONVERT` and `MODEL_TYPE_CONVERT`
//! are Discord's generic form-body codes.

use crate::Snowflake;
use crate::error::FieldError;
use crate::model::User;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Ids in `allowed_mentions.users` or `.roles` (Discord: "max 100").
pub const ALLOWED_IDS_MAX: usize = 100;

/// Distinct users, and distinct roles, taken from one message's content.
/// Content is at most 2,000 characters and a mention at least 21, so about
/// 95 fit; this bounds what a crafted body can make the server look up.
pub const CONTENT_MENTIONS_MAX: usize = 100;

/// Which ids of one kind may be mentioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every one in the content (`parse` names the kind).
    All,
    /// Only these (the id list), which may be none.
    Only(Vec<u64>),
}

impl Scope {
    fn admits(&self, id: u64) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(ids) => ids.contains(&id),
        }
    }
}

/// What a body allows to be mentioned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowed {
    /// User mentions.
    pub users: Scope,
    /// Role mentions.
    pub roles: Scope,
    /// `@everyone` and `@here`.
    pub everyone: bool,
    /// For a reply, the author of the message replied to.
    pub replied_user: bool,
}

/// Where a message is posted from: the defaults differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Context {
    /// A user's or bot's message: everything is parsed, and a reply
    /// mentions the author replied to.
    Message,
    /// A webhook's or an interaction's message: user mentions only.
    WebhookOrInteraction,
}

impl Allowed {
    /// The allowances when a body carries no `allowed_mentions`.
    pub fn default_for(context: Context) -> Self {
        match context {
            Context::Message => Self {
                users: Scope::All,
                roles: Scope::All,
                everyone: true,
                replied_user: true,
            },
            Context::WebhookOrInteraction => Self {
                users: Scope::All,
                roles: Scope::Only(vec![]),
                everyone: false,
                replied_user: false,
            },
        }
    }
}

/// A refusal under `allowed_mentions` (`path` below it).
fn at(path: &[&str], code: &'static str, message: impl Into<String>) -> FieldError {
    FieldError::at("allowed_mentions", path, code, message)
}

fn ids(object: &serde_json::Map<String, Value>, key: &str) -> Result<Option<Vec<u64>>, FieldError> {
    let list = match object.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(at(&[key], "LIST_TYPE_CONVERT", "Must be an array."));
        }
    };
    if list.len() > ALLOWED_IDS_MAX {
        return Err(at(
            &[key],
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {ALLOWED_IDS_MAX} or fewer in length."),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, item) in list.iter().enumerate() {
        let id = match item {
            Value::String(s) => s.parse::<u64>().ok().filter(|id| *id > 0),
            Value::Number(n) => n.as_u64().filter(|id| *id > 0),
            _ => None,
        };
        match id {
            Some(id) => out.push(id),
            None => {
                let index = i.to_string();
                return Err(at(
                    &[key, index.as_str()],
                    "NUMBER_TYPE_COERCE",
                    format!(
                        "Value \"{}\" is not snowflake.",
                        item.as_str()
                            .map_or_else(|| item.to_string(), str::to_owned)
                    ),
                ));
            }
        }
    }
    Ok(Some(out))
}

/// The body's `allowed_mentions` (absent or `null`: the defaults of
/// `context`), checked as Discord checks it.
pub fn parse_allowed(value: Option<&Value>, context: Context) -> Result<Allowed, FieldError> {
    let object = match value {
        None | Some(Value::Null) => return Ok(Allowed::default_for(context)),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(at(
                &[],
                "MODEL_TYPE_CONVERT",
                "Only dictionaries may be used in a ModelType",
            ));
        }
    };
    let mut parse_users = false;
    let mut parse_roles = false;
    let mut everyone = false;
    match object.get("parse") {
        None | Some(Value::Null) => {}
        Some(Value::Array(kinds)) => {
            for (i, kind) in kinds.iter().enumerate() {
                match kind.as_str() {
                    Some("users") => parse_users = true,
                    Some("roles") => parse_roles = true,
                    Some("everyone") => everyone = true,
                    _ => {
                        let index = i.to_string();
                        return Err(at(
                            &["parse", index.as_str()],
                            "BASE_TYPE_CHOICES",
                            "Value must be one of {'everyone', 'roles', 'users'}.",
                        ));
                    }
                }
            }
        }
        Some(_) => {
            return Err(at(&["parse"], "LIST_TYPE_CONVERT", "Must be an array."));
        }
    }
    let users = ids(object, "users")?;
    let roles = ids(object, "roles")?;
    // "parse" and an id list of the same kind are mutually exclusive; an
    // empty or null list is no conflict (the docs say so).
    for (parsed, list, kind) in [
        (parse_users, &users, "users"),
        (parse_roles, &roles, "roles"),
    ] {
        if parsed && list.as_ref().is_some_and(|l| !l.is_empty()) {
            return Err(at(
                &[],
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                format!("parse:[\"{kind}\"] and {kind}: [ids...] are mutually exclusive."),
            ));
        }
    }
    let replied_user = match object.get("replied_user") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(at(
                &["replied_user"],
                "BOOLEAN_TYPE_CONVERT",
                "Must be either true or false.",
            ));
        }
    };
    let scope = |parsed: bool, list: Option<Vec<u64>>| {
        if parsed {
            Scope::All
        } else {
            Scope::Only(list.unwrap_or_default())
        }
    };
    Ok(Allowed {
        users: scope(parse_users, users),
        roles: scope(parse_roles, roles),
        everyone,
        replied_user,
    })
}

/// The mentions written in a message's content, in order of first
/// appearance, each kind at most [`CONTENT_MENTIONS_MAX`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InContent {
    /// `<@id>` and `<@!id>`.
    pub users: Vec<u64>,
    /// `<@&id>`.
    pub roles: Vec<u64>,
    /// `@everyone` or `@here`.
    pub everyone: bool,
}

/// Reads the mentions in `content`.
pub fn in_content(content: &str) -> InContent {
    let mut found = InContent {
        everyone: content.contains("@everyone") || content.contains("@here"),
        ..InContent::default()
    };
    for rest in content.split("<@").skip(1) {
        let (role, digits) = match rest.strip_prefix('&') {
            Some(after) => (true, after),
            None => (false, rest.strip_prefix('!').unwrap_or(rest)),
        };
        let Some((id, _)) = digits.split_once('>') else {
            continue;
        };
        let Some(id) = id.parse::<u64>().ok().filter(|id| *id > 0) else {
            continue;
        };
        let list = if role {
            &mut found.roles
        } else {
            &mut found.users
        };
        if list.len() < CONTENT_MENTIONS_MAX && !list.contains(&id) {
            list.push(id);
        }
    }
    found
}

/// What a message mentions, before the caller keeps only users and roles
/// that exist (and roles that may be mentioned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mentioned {
    /// Users, the replied-to author last when added for the reply.
    pub users: Vec<u64>,
    /// Roles.
    pub roles: Vec<u64>,
    /// `mention_everyone`.
    pub everyone: bool,
}

/// Applies `allowed` to `content`'s mentions. `may_mention_everyone`: the
/// author holds MENTION_EVERYONE where the message is posted (false in a
/// direct message, where `@everyone` means nothing). `replied_author`: the
/// author of the message replied to, mentioned when `replied_user` allows
/// it.
pub fn resolve(
    content: &InContent,
    allowed: &Allowed,
    may_mention_everyone: bool,
    replied_author: Option<u64>,
) -> Mentioned {
    let mut users: Vec<u64> = content
        .users
        .iter()
        .copied()
        .filter(|id| allowed.users.admits(*id))
        .collect();
    if let Some(author) = replied_author
        && allowed.replied_user
        && !users.contains(&author)
    {
        users.push(author);
    }
    Mentioned {
        users,
        roles: content
            .roles
            .iter()
            .copied()
            .filter(|id| allowed.roles.admits(*id))
            .collect(),
        everyone: content.everyone && allowed.everyone && may_mention_everyone,
    }
}

/// A message's mentions as stored with it (and rebuilt when its content
/// is edited): what its `mentions`, `mention_roles` and
/// `mention_everyone` show.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    /// `mentions`: the users, as they were when mentioned.
    #[serde(default)]
    pub users: Vec<User>,
    /// `mention_roles`.
    #[serde(default)]
    pub roles: Vec<Snowflake>,
    /// `mention_everyone`.
    #[serde(default)]
    pub everyone: bool,
    /// The replied-to author, when the reply mentioned them (an edit keeps
    /// them mentioned unless its `allowed_mentions` says otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replied_user: Option<Snowflake>,
}

impl Stored {
    /// Whether it mentions anything (nothing is stored for nothing).
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.roles.is_empty() && !self.everyone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_mentions_are_read_once_each() {
        let found = in_content("hi <@12> <@!12> <@&7> <@34> <@x> <@&> @here <@5");
        assert_eq!(found.users, vec![12, 34]);
        assert_eq!(found.roles, vec![7]);
        assert!(found.everyone);
        assert_eq!(in_content("plain").users, Vec::<u64>::new());
    }

    #[test]
    fn defaults_differ_by_context() {
        let message = parse_allowed(None, Context::Message).unwrap();
        assert_eq!(message, Allowed::default_for(Context::Message));
        let content = in_content("@everyone <@1> <@&2>");
        let all = resolve(&content, &message, true, Some(9));
        assert_eq!(
            (all.users, all.roles, all.everyone),
            (vec![1, 9], vec![2], true)
        );
        let hook = parse_allowed(Some(&Value::Null), Context::WebhookOrInteraction).unwrap();
        let some = resolve(&content, &hook, true, None);
        assert_eq!(
            (some.users, some.roles, some.everyone),
            (vec![1], vec![], false)
        );
    }

    #[test]
    fn the_docs_examples_hold() {
        let content = in_content("@here Hello <@&1234> and <@5678>");
        let none = parse_allowed(Some(&json!({"parse": []})), Context::Message).unwrap();
        assert_eq!(
            resolve(&content, &none, true, Some(1)),
            Mentioned::default()
        );
        let users_roles = parse_allowed(
            Some(&json!({"parse": ["users", "roles"], "users": []})),
            Context::Message,
        )
        .unwrap();
        let m = resolve(&content, &users_roles, true, None);
        assert_eq!(
            (m.users, m.roles, m.everyone),
            (vec![5678], vec![1234], false)
        );
        let content = in_content("@everyone <@1234> <@5678> <@&789>");
        let listed = parse_allowed(
            Some(&json!({"parse": ["everyone"], "users": ["1234", "5678"]})),
            Context::Message,
        )
        .unwrap();
        let m = resolve(&content, &listed, true, None);
        assert_eq!(
            (m.users, m.roles, m.everyone),
            (vec![1234, 5678], vec![], true)
        );
        let absent =
            parse_allowed(Some(&json!({"users": ["123", "456"]})), Context::Message).unwrap();
        assert_eq!(
            resolve(&in_content("<@123> memes"), &absent, true, None).users,
            vec![123]
        );
    }

    #[test]
    fn everyone_needs_the_permission() {
        let all = Allowed::default_for(Context::Message);
        assert!(!resolve(&in_content("@everyone"), &all, false, None).everyone);
    }

    #[test]
    fn bad_allowances_are_refused_at_their_field() {
        let refused = |v: Value| parse_allowed(Some(&v), Context::Message).unwrap_err();
        let e = refused(json!({"parse": ["users"], "users": ["1"]}));
        assert_eq!(e.code, "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE");
        assert_eq!(
            e.errors()["allowed_mentions"]["_errors"][0]["code"],
            "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE"
        );
        let e = refused(json!({"parse": ["users", "channels"]}));
        assert_eq!(
            e.errors()["allowed_mentions"]["parse"]["1"]["_errors"][0]["code"],
            "BASE_TYPE_CHOICES"
        );
        let many: Vec<String> = (1..=101).map(|i| i.to_string()).collect();
        assert_eq!(refused(json!({"users": many})).code, "BASE_TYPE_MAX_LENGTH");
        assert_eq!(
            refused(json!({"roles": ["1", "x"]})).errors()["allowed_mentions"]["roles"]["1"]["_errors"]
                [0]["code"],
            "NUMBER_TYPE_COERCE"
        );
        assert_eq!(
            refused(json!({"replied_user": "yes"})).code,
            "BOOLEAN_TYPE_CONVERT"
        );
        assert_eq!(refused(json!("users")).code, "MODEL_TYPE_CONVERT");
        assert_eq!(refused(json!({"parse": "users"})).code, "LIST_TYPE_CONVERT");
    }

    #[test]
    fn a_reply_mentions_its_author_only_when_allowed() {
        let content = in_content("thanks");
        let off = parse_allowed(Some(&json!({"parse": ["users"]})), Context::Message).unwrap();
        assert!(resolve(&content, &off, false, Some(4)).users.is_empty());
        let on = parse_allowed(
            Some(&json!({"parse": [], "replied_user": true})),
            Context::Message,
        )
        .unwrap();
        assert_eq!(resolve(&content, &on, false, Some(4)).users, vec![4]);
    }
}
