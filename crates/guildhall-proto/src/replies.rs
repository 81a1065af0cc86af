//! A create-message body's `message_reference` (Discord's Message
//! Reference object, "Create Message"): checked field by field, each
//! refusal a 50035 nested at `message_reference` as Discord nests it.
//! Pure: whether the message exists is the caller's question.
//!
//! Field codes: `MESSAGE_REFERENCE_UNKNOWN_MESSAGE` is what Discord answers
//! today for an unknown message (seen in discord.js and discord.py error
//! logs; it replaced `REPLIES_UNKNOWN_MESSAGE`, same message);
//! `REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL` ("Cannot reply to a message in
//! a different channel") is the code Discord-compatible servers and bots
//! handle for a cross-channel reply; neither the docs nor the OpenAPI
//! spec list field codes, so neither is confirmed from Discord itself.
//! `NUMBER_TYPE_COERCE`, `BASE_TYPE_CHOICES`, `BASE_TYPE_REQUIRED`,
//! `BOOLEAN_TYPE_CONVERT` and `MODEL_TYPE_CONVERT` are Discord's generic
//! form-body codes.

use crate::Snowflake;
use crate::error::FieldError;
use serde_json::Value;

/// `type` DEFAULT: a reply (`referenced_message`).
pub const KIND_DEFAULT: u8 = 0;
/// `type` FORWARD: a forward (`message_snapshots`; not served here).
pub const KIND_FORWARD: u8 = 1;
/// The message type of a reply.
pub const MESSAGE_TYPE_REPLY: u8 = 19;

/// The reference a create body asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReferenceRequest {
    /// Reference type (only [`KIND_DEFAULT`] passes [`parse`]).
    pub kind: u8,
    /// The message replied to.
    pub message_id: Snowflake,
    /// Its channel, if given (must be the reply's).
    pub channel_id: Option<Snowflake>,
    /// Its guild, if given (must be the reply's).
    pub guild_id: Option<Snowflake>,
    /// Refuse (true, the default) or post a plain message (false) when the
    /// referenced message does not exist.
    pub fail_if_not_exists: bool,
}

/// A refusal under `message_reference` (`path` below it; empty: the
/// object itself).
fn at(path: &[&str], code: &'static str, message: impl Into<String>) -> FieldError {
    FieldError::at("message_reference", path, code, message)
}

/// The referenced message does not exist (or is not visible here).
pub fn unknown_message() -> FieldError {
    at(&[], "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message")
}

/// The reference names another channel or guild than the reply's.
pub fn other_channel() -> FieldError {
    at(
        &[],
        "REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL",
        "Cannot reply to a message in a different channel",
    )
}

/// A snowflake field: absent or `null` is `None`; a string or integer
/// that is not a positive u64 is refused as Discord refuses it.
fn snowflake(
    object: &serde_json::Map<String, Value>,
    key: &'static str,
) -> Result<Option<Snowflake>, FieldError> {
    let refused = |shown: String| {
        at(
            &[key],
            "NUMBER_TYPE_COERCE",
            format!("Value \"{shown}\" is not snowflake."),
        )
    };
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(raw)) => raw.parse().map(Some).map_err(|_| refused(raw.clone())),
        Some(Value::Number(number)) => number
            .as_u64()
            .and_then(Snowflake::new)
            .map(Some)
            .ok_or_else(|| refused(number.to_string())),
        Some(other) => Err(refused(other.to_string())),
    }
}

/// The body's `message_reference`: `None` when absent or `null`, else the
/// checked request. Forwards (`type` 1) are refused: this server does not
/// build `message_snapshots` yet, and posting one as a plain message would
/// drop what the sender meant to share.
pub fn parse(value: Option<&Value>) -> Result<Option<ReferenceRequest>, FieldError> {
    let object = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(object)) => object,
        Some(_) => {
            return Err(at(
                &[],
                "MODEL_TYPE_CONVERT",
                "Only dictionaries may be used in a ModelType.",
            ));
        }
    };
    // An unset type is DEFAULT (the docs: "If `type` is unset, `DEFAULT`
    // can be assumed").
    let kind = match object.get("type") {
        None | Some(Value::Null) => KIND_DEFAULT,
        Some(value) => match value.as_u64() {
            Some(0) => KIND_DEFAULT,
            Some(1) => {
                return Err(at(
                    &["type"],
                    "BASE_TYPE_CHOICES",
                    "Value must be one of (0,): forwards are not supported by this server.",
                ));
            }
            _ => {
                return Err(at(
                    &["type"],
                    "BASE_TYPE_CHOICES",
                    format!("Value must be one of ({KIND_DEFAULT}, {KIND_FORWARD})."),
                ));
            }
        },
    };
    let message_id = snowflake(object, "message_id")?.ok_or_else(|| {
        at(
            &["message_id"],
            "BASE_TYPE_REQUIRED",
            "This field is required",
        )
    })?;
    let channel_id = snowflake(object, "channel_id")?;
    let guild_id = snowflake(object, "guild_id")?;
    let fail_if_not_exists = match object.get("fail_if_not_exists") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(fail)) => *fail,
        Some(_) => {
            return Err(at(
                &["fail_if_not_exists"],
                "BOOLEAN_TYPE_CONVERT",
                "Must be either true or false.",
            ));
        }
    };
    Ok(Some(ReferenceRequest {
        kind,
        message_id,
        channel_id,
        guild_id,
        fail_if_not_exists,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id(raw: u64) -> Snowflake {
        Snowflake::new(raw).unwrap()
    }

    #[test]
    fn only_message_id_is_required() {
        let got = parse(Some(&json!({"message_id": "42"}))).unwrap().unwrap();
        assert_eq!(
            got,
            ReferenceRequest {
                kind: KIND_DEFAULT,
                message_id: id(42),
                channel_id: None,
                guild_id: None,
                fail_if_not_exists: true,
            }
        );
        let got = parse(Some(&json!({"type": 0, "message_id": 42, "channel_id": "7", "guild_id": "9", "fail_if_not_exists": false})))
            .unwrap()
            .unwrap();
        assert_eq!(got.channel_id, Some(id(7)));
        assert_eq!(got.guild_id, Some(id(9)));
        assert!(!got.fail_if_not_exists);
        assert_eq!(parse(None), Ok(None));
        assert_eq!(parse(Some(&Value::Null)), Ok(None));
    }

    #[test]
    fn refusals_nest_at_message_reference() {
        let errors = |v: Value| parse(Some(&v)).unwrap_err().errors();
        assert_eq!(
            errors(json!({"message_id": "abc"})),
            json!({"message_reference": {"message_id": {"_errors": [{"code": "NUMBER_TYPE_COERCE", "message": "Value \"abc\" is not snowflake."}]}}})
        );
        assert_eq!(
            errors(json!({}))["message_reference"]["message_id"]["_errors"][0]["code"],
            "BASE_TYPE_REQUIRED"
        );
        assert_eq!(
            errors(json!({"type": 7, "message_id": "1"}))["message_reference"]["type"]["_errors"]
                [0]["code"],
            "BASE_TYPE_CHOICES"
        );
        assert_eq!(
            errors(json!({"type": 1, "message_id": "1", "channel_id": "2"}))["message_reference"]["type"]
                ["_errors"][0]["code"],
            "BASE_TYPE_CHOICES"
        );
        assert_eq!(
            errors(json!({"message_id": "1", "channel_id": "0"}))["message_reference"]["channel_id"]
                ["_errors"][0]["code"],
            "NUMBER_TYPE_COERCE"
        );
        assert_eq!(
            errors(json!({"message_id": "1", "fail_if_not_exists": "no"}))["message_reference"]["fail_if_not_exists"]
                ["_errors"][0]["code"],
            "BOOLEAN_TYPE_CONVERT"
        );
        assert_eq!(
            errors(json!("1"))["message_reference"]["_errors"][0]["code"],
            "MODEL_TYPE_CONVERT"
        );
        assert_eq!(
            unknown_message().errors(),
            json!({"message_reference": {"_errors": [{"code": "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "message": "Unknown message"}]}})
        );
    }
}
