//! REST error bodies: `{"code": INT, "message": STR, "errors": {...}}` with
//! Discord's JSON error codes, and the 429 body. One enum, one mapping to
//! status and body (the server's single `IntoResponse` uses it).

use serde::Serialize;

/// Discord's JSON error codes used by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// 0: general error (with 401 Unauthorized, 404 not found routes, 405).
    General,
    /// 10026 Unknown ban.
    UnknownBan,
    /// 40007 The user is banned from this guild.
    UserBanned,
    /// 500000 Failed to ban users (a bulk ban that banned nobody).
    FailedToBanUsers,
    /// 10003 Unknown channel.
    UnknownChannel,
    /// 10004 Unknown guild.
    UnknownGuild,
    /// 10006 Unknown invite.
    UnknownInvite,
    /// 10007 Unknown member.
    UnknownMember,
    /// 10008 Unknown message.
    UnknownMessage,
    /// 10011 Unknown role.
    UnknownRole,
    /// 10013 Unknown user.
    UnknownUser,
    /// 10002 Unknown application.
    UnknownApplication,
    /// 40001 Unauthorized.
    Unauthorized,
    /// 30005 Maximum number of guild roles reached (250).
    MaxGuildRoles,
    /// 30013 Maximum number of guild channels reached (500).
    MaxGuildChannels,
    /// 50024 Cannot execute action on this channel type.
    WrongChannelType,
    /// 160004 A thread has already been created for this message.
    ThreadExists,
    /// 160006 Maximum number of active threads reached.
    MaxActiveThreads,
    /// 50083 Tried to perform an operation on an archived thread.
    ThreadArchived,
    /// 50008 Cannot send messages in a non-text channel.
    NotTextChannel,
    /// 50034 A message provided was too old to bulk delete.
    BulkDeleteTooOld,
    /// 50001 Missing access.
    MissingAccess,
    /// 50006 Cannot send an empty message.
    EmptyMessage,
    /// 50013 Missing permissions.
    MissingPermissions,
    /// 50035 Invalid form body.
    InvalidFormBody,
    /// 50109 The request body contains invalid JSON.
    InvalidJson,
    /// 40005 Request entity too large.
    EntityTooLarge,
    /// 130000 API resource overloaded.
    Overloaded,
    /// 10063 Unknown application command.
    UnknownApplicationCommand,
    /// 10066 Unknown application command permissions.
    UnknownApplicationCommandPermissions,
    /// 20012 You are not authorized to perform this action on this
    /// application.
    NotApplicationOwner,
    /// 30032 Maximum number of application commands reached.
    MaxApplicationCommands,
    /// 10015 Unknown webhook.
    UnknownWebhook,
    /// 50027 Invalid webhook token (401, as Discord answers a token that
    /// is not the webhook's).
    InvalidWebhookToken,
    /// 30007 Maximum number of webhooks reached (per channel).
    MaxWebhooks,
    /// 30058 Maximum number of webhooks per guild reached.
    MaxGuildWebhooks,
    /// 30016 Maximum number of invites reached (per guild).
    MaxInvites,
    /// 20016 The channel's slowmode holds the sender (429).
    Slowmode,
    /// 10062: the interaction is unknown, or its initial response is late.
    UnknownInteraction,
    /// 40060: the interaction already has its initial response.
    InteractionAlreadyAcknowledged,
    /// 20001: a bot token on a route for users only.
    BotsCannotUse,
    /// 50003: a guild-only action (a moderator's removal) asked of a DM.
    CannotExecuteOnDm,
    /// 50005: an edit of a message another user wrote (403).
    CannotEditOthersMessage,
}

impl ErrorCode {
    /// The numeric code.
    pub fn code(self) -> u32 {
        match self {
            ErrorCode::General => 0,
            ErrorCode::UnknownBan => 10026,
            ErrorCode::UserBanned => 40007,
            ErrorCode::FailedToBanUsers => 500000,
            ErrorCode::UnknownApplication => 10002,
            ErrorCode::UnknownChannel => 10003,
            ErrorCode::UnknownGuild => 10004,
            ErrorCode::UnknownInvite => 10006,
            ErrorCode::UnknownMember => 10007,
            ErrorCode::UnknownMessage => 10008,
            ErrorCode::UnknownRole => 10011,
            ErrorCode::UnknownUser => 10013,
            ErrorCode::Unauthorized => 40001,
            ErrorCode::EntityTooLarge => 40005,
            ErrorCode::MaxGuildRoles => 30005,
            ErrorCode::MaxGuildChannels => 30013,
            ErrorCode::WrongChannelType => 50024,
            ErrorCode::ThreadExists => 160004,
            ErrorCode::MaxActiveThreads => 160006,
            ErrorCode::ThreadArchived => 50083,
            ErrorCode::NotTextChannel => 50008,
            ErrorCode::BulkDeleteTooOld => 50034,
            ErrorCode::MissingAccess => 50001,
            ErrorCode::EmptyMessage => 50006,
            ErrorCode::MissingPermissions => 50013,
            ErrorCode::InvalidFormBody => 50035,
            ErrorCode::InvalidJson => 50109,
            ErrorCode::Overloaded => 130000,
            ErrorCode::UnknownApplicationCommand => 10063,
            ErrorCode::UnknownApplicationCommandPermissions => 10066,
            ErrorCode::NotApplicationOwner => 20012,
            ErrorCode::MaxApplicationCommands => 30032,
            ErrorCode::UnknownWebhook => 10015,
            ErrorCode::InvalidWebhookToken => 50027,
            ErrorCode::MaxWebhooks => 30007,
            ErrorCode::MaxGuildWebhooks => 30058,
            ErrorCode::MaxInvites => 30016,
            ErrorCode::Slowmode => 20016,
            ErrorCode::UnknownInteraction => 10062,
            ErrorCode::InteractionAlreadyAcknowledged => 40060,
            ErrorCode::BotsCannotUse => 20001,
            ErrorCode::CannotExecuteOnDm => 50003,
            ErrorCode::CannotEditOthersMessage => 50005,
        }
    }

    /// Discord's message for the code.
    pub fn message(self) -> &'static str {
        match self {
            ErrorCode::General => "404: Not Found",
            ErrorCode::UnknownBan => "Unknown Ban",
            ErrorCode::UserBanned => "The user is banned from this guild.",
            ErrorCode::FailedToBanUsers => "Failed to ban users",
            ErrorCode::UnknownApplication => "Unknown Application",
            ErrorCode::UnknownChannel => "Unknown Channel",
            ErrorCode::UnknownGuild => "Unknown Guild",
            ErrorCode::UnknownInvite => "Unknown Invite",
            ErrorCode::UnknownMember => "Unknown Member",
            ErrorCode::UnknownMessage => "Unknown Message",
            ErrorCode::UnknownRole => "Unknown Role",
            ErrorCode::UnknownUser => "Unknown User",
            ErrorCode::Unauthorized => "401: Unauthorized",
            ErrorCode::EntityTooLarge => "Request entity too large",
            ErrorCode::MaxGuildRoles => "Maximum number of guild roles reached (250)",
            ErrorCode::MaxGuildChannels => "Maximum number of guild channels reached (500)",
            ErrorCode::WrongChannelType => "Cannot execute action on this channel type",
            ErrorCode::ThreadExists => "A thread has already been created for this message",
            ErrorCode::MaxActiveThreads => "Maximum number of active threads reached",
            ErrorCode::NotTextChannel => "Cannot send messages in a non-text channel",
            ErrorCode::ThreadArchived => {
                "Tried to perform an operation on an archived thread, such as editing a message or adding a user to the thread"
            }
            ErrorCode::BulkDeleteTooOld => "A message provided was too old to bulk delete",
            ErrorCode::MissingAccess => "Missing Access",
            ErrorCode::EmptyMessage => "Cannot send an empty message",
            ErrorCode::MissingPermissions => "Missing Permissions",
            ErrorCode::InvalidFormBody => "Invalid Form Body",
            ErrorCode::InvalidJson => "The request body contains invalid JSON.",
            ErrorCode::Overloaded => {
                "API resource is currently overloaded. Try again a little later."
            }
            ErrorCode::UnknownApplicationCommand => "Unknown application command",
            ErrorCode::UnknownApplicationCommandPermissions => {
                "Unknown application command permissions"
            }
            ErrorCode::NotApplicationOwner => {
                "You are not authorized to perform this action on this application"
            }
            ErrorCode::MaxApplicationCommands => "Maximum number of application commands reached",
            ErrorCode::UnknownWebhook => "Unknown Webhook",
            ErrorCode::InvalidWebhookToken => "Invalid Webhook Token",
            ErrorCode::MaxWebhooks => "Maximum number of webhooks reached (15)",
            ErrorCode::MaxGuildWebhooks => "Maximum number of webhooks per guild reached (1000)",
            ErrorCode::MaxInvites => "Maximum number of invites reached (1000)",
            ErrorCode::Slowmode => "This action cannot be performed due to slowmode rate limit.",
            ErrorCode::UnknownInteraction => "Unknown interaction",
            ErrorCode::InteractionAlreadyAcknowledged => {
                "Interaction has already been acknowledged."
            }
            ErrorCode::BotsCannotUse => "Bots cannot use this endpoint",
            ErrorCode::CannotExecuteOnDm => "Cannot execute action on a DM channel",
            ErrorCode::CannotEditOthersMessage => "Cannot edit a message authored by another user",
        }
    }

    /// The HTTP status Discord answers with.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::Unauthorized | ErrorCode::InvalidWebhookToken => 401,
            ErrorCode::MissingAccess
            | ErrorCode::UserBanned
            | ErrorCode::MissingPermissions
            | ErrorCode::NotApplicationOwner
            | ErrorCode::BotsCannotUse
            | ErrorCode::CannotExecuteOnDm
            | ErrorCode::CannotEditOthersMessage => 403,
            ErrorCode::General
            | ErrorCode::UnknownBan
            | ErrorCode::UnknownApplication
            | ErrorCode::UnknownChannel
            | ErrorCode::UnknownGuild
            | ErrorCode::UnknownInvite
            | ErrorCode::UnknownMember
            | ErrorCode::UnknownMessage
            | ErrorCode::UnknownRole
            | ErrorCode::UnknownUser
            | ErrorCode::UnknownApplicationCommand
            | ErrorCode::UnknownApplicationCommandPermissions
            | ErrorCode::UnknownWebhook
            | ErrorCode::UnknownInteraction => 404,
            ErrorCode::EntityTooLarge => 413,
            ErrorCode::EmptyMessage
            | ErrorCode::FailedToBanUsers
            | ErrorCode::InvalidFormBody
            | ErrorCode::InvalidJson
            | ErrorCode::MaxApplicationCommands
            | ErrorCode::MaxGuildRoles
            | ErrorCode::MaxGuildChannels
            | ErrorCode::WrongChannelType
            | ErrorCode::ThreadExists
            | ErrorCode::MaxActiveThreads
            | ErrorCode::ThreadArchived
            | ErrorCode::NotTextChannel
            | ErrorCode::BulkDeleteTooOld
            | ErrorCode::MaxWebhooks
            | ErrorCode::MaxGuildWebhooks
            | ErrorCode::MaxInvites
            | ErrorCode::InteractionAlreadyAcknowledged => 400,
            ErrorCode::Overloaded => 503,
            ErrorCode::Slowmode => 429,
        }
    }
}

/// A REST error body.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ErrorBody {
    /// JSON error code.
    pub code: u32,
    /// Human-readable message.
    pub message: String,
    /// Per-field errors (50035), Discord's nested `_errors` shape.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<serde_json::Value>,
}

impl ErrorBody {
    /// The body for `code`.
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code: code.code(),
            message: code.message().to_owned(),
            errors: None,
        }
    }

    /// A 50035 body saying `field` failed with `field_code` and `message`
    /// (for example `BASE_TYPE_MAX_LENGTH`).
    ///
    /// ```
    /// use guildhall_proto::error::ErrorBody;
    /// let body = ErrorBody::invalid_field("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.");
    /// let json = serde_json::to_value(&body).unwrap();
    /// assert_eq!(json["code"], 50035);
    /// assert_eq!(json["errors"]["content"]["_errors"][0]["code"], "BASE_TYPE_MAX_LENGTH");
    /// ```
    pub fn invalid_field(field: &str, field_code: &str, message: &str) -> Self {
        let mut body = Self::new(ErrorCode::InvalidFormBody);
        body.errors = Some(serde_json::json!({
            field: {"_errors": [{"code": field_code, "message": message}]}
        }));
        body
    }
}

/// The 429 body (discord.py refuses to retry without `retry_after`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RateLimitedBody {
    /// "You are being rate limited."
    pub message: &'static str,
    /// Seconds, fractional.
    pub retry_after: f64,
    /// Whether the global limit was hit.
    pub global: bool,
    /// Always 0.
    pub code: u32,
}

impl RateLimitedBody {
    /// A 429 body.
    pub fn new(retry_after_s: f64, global: bool) -> Self {
        Self {
            message: "You are being rate limited.",
            retry_after: retry_after_s,
            global,
            code: 0,
        }
    }
}

/// A form field Discord refuses (50035): the keys from the body's
/// top-level field down to the failing one (array indices as strings),
/// Discord's field code and message. Embeds, replies and allowed mentions
/// all refuse this way, nested exactly as deep as the failing field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Keys from the top-level field down, e.g. `["embeds", "0", "title"]`.
    pub path: Vec<String>,
    /// Discord's field error code (`BASE_TYPE_MAX_LENGTH`, ...).
    pub code: &'static str,
    /// Its message.
    pub message: String,
}

impl FieldError {
    /// The field `root`, then `path` below it.
    pub fn at(root: &str, path: &[&str], code: &'static str, message: impl Into<String>) -> Self {
        Self {
            path: std::iter::once(root)
                .chain(path.iter().copied())
                .map(str::to_owned)
                .collect(),
            code,
            message: message.into(),
        }
    }

    /// The `errors` object of the 50035 body.
    ///
    /// ```
    /// use guildhall_proto::error::FieldError;
    /// let e = FieldError::at("embeds", &["0", "title"], "BASE_TYPE_MAX_LENGTH", "Too long.");
    /// assert_eq!(e.errors()["embeds"]["0"]["title"]["_errors"][0]["code"], "BASE_TYPE_MAX_LENGTH");
    /// ```
    pub fn errors(&self) -> serde_json::Value {
        let mut value =
            serde_json::json!({"_errors": [{"code": self.code, "message": self.message}]});
        for key in self.path.iter().rev() {
            value = serde_json::json!({ key.as_str(): value });
        }
        value
    }

    /// The whole 50035 body.
    pub fn body(&self) -> ErrorBody {
        let mut body = ErrorBody::new(ErrorCode::InvalidFormBody);
        body.errors = Some(self.errors());
        body
    }
}
