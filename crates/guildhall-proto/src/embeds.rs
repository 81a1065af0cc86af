//! Rich embeds as Discord's message resource documents them: what a
//! message may carry, checked against the documented limits and reduced to
//! the documented fields, so what is stored and echoed is exactly an embed
//! object (`type` "rich" unless given). Pure: the caller stores the result.
//!
//! The limits are Discord's (the "Embed Limits" table), not this server's
//! capacity bounds: libraries check against the same numbers before
//! sending, and a server that allowed more would store messages Discord's
//! clients could not show.

use crate::error::FieldError;
use serde_json::{Map, Value, json};

/// `title` characters.
pub const TITLE_CHARS_MAX: usize = 256;
/// `description` characters.
pub const DESCRIPTION_CHARS_MAX: usize = 4096;
/// Fields per embed.
pub const FIELDS_MAX: usize = 25;
/// A field's `name` characters.
pub const FIELD_NAME_CHARS_MAX: usize = 256;
/// A field's `value` characters.
pub const FIELD_VALUE_CHARS_MAX: usize = 1024;
/// `footer.text` characters.
pub const FOOTER_TEXT_CHARS_MAX: usize = 2048;
/// `author.name` characters.
pub const AUTHOR_NAME_CHARS_MAX: usize = 256;
/// Characters of titles, descriptions, field names and values, footer
/// texts and author names over all of a message's embeds.
pub const TOTAL_CHARS_MAX: usize = 6000;
/// A URL's characters (Discord's URL fields take 2048).
pub const URL_CHARS_MAX: usize = 2048;
/// Largest `color` (24-bit RGB).
pub const COLOR_MAX: u64 = 0xFF_FFFF;

/// A refusal under `embeds` (`path` below it, e.g. `["0", "title"]`).
fn at(path: &[&str], code: &'static str, message: impl Into<String>) -> FieldError {
    FieldError::at("embeds", path, code, message)
}

/// The checked embeds, reduced to the documented fields, or the first
/// error. `embeds` holds at most the caller's count bound already.
pub fn normalize(embeds: &[Value]) -> Result<Vec<Value>, FieldError> {
    let mut total_chars = 0usize;
    let mut out = Vec::with_capacity(embeds.len());
    for (i, embed) in embeds.iter().enumerate() {
        let index = i.to_string();
        let Some(embed) = embed.as_object() else {
            return Err(at(
                &path(&index, &[]),
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType.",
            ));
        };
        let mut kept = Map::new();
        let kind = optional_string(embed, "type", 64, &path(&index, &["type"]))?;
        kept.insert(
            "type".into(),
            Value::String(kind.unwrap_or("rich").to_owned()),
        );
        for (key, max) in [
            ("title", TITLE_CHARS_MAX),
            ("description", DESCRIPTION_CHARS_MAX),
        ] {
            if let Some(text) = optional_string(embed, key, max, &path(&index, &[key]))? {
                total_chars += text.chars().count();
                kept.insert(key.into(), Value::String(text.to_owned()));
            }
        }
        if let Some(url) = optional_url(embed, "url", &path(&index, &["url"]))? {
            kept.insert("url".into(), Value::String(url.to_owned()));
        }
        if let Some(timestamp) =
            optional_string(embed, "timestamp", 64, &path(&index, &["timestamp"]))?
        {
            if !looks_like_iso8601(timestamp) {
                return Err(at(
                    &path(&index, &["timestamp"]),
                    "DATE_TYPE_PARSE",
                    format!("Could not parse {timestamp}. Should be ISO8601."),
                ));
            }
            kept.insert("timestamp".into(), Value::String(timestamp.to_owned()));
        }
        match embed.get("color") {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some_and(|c| c <= COLOR_MAX) => {
                kept.insert("color".into(), Value::Number(n.clone()));
            }
            Some(Value::Number(_)) => {
                return Err(at(
                    &path(&index, &["color"]),
                    "NUMBER_TYPE_MAX",
                    format!("int value should be less than or equal to {COLOR_MAX}."),
                ));
            }
            Some(_) => {
                return Err(at(
                    &path(&index, &["color"]),
                    "NUMBER_TYPE_COERCE",
                    "Value is not int.",
                ));
            }
        }
        // Objects of one required text (or none) and URLs.
        if let Some(footer) = optional_object(embed, "footer", &path(&index, &["footer"]))? {
            let mut f = Map::new();
            let text = required_string(
                footer,
                "text",
                FOOTER_TEXT_CHARS_MAX,
                &path(&index, &["footer", "text"]),
            )?;
            total_chars += text.chars().count();
            f.insert("text".into(), Value::String(text.to_owned()));
            if let Some(url) =
                optional_url(footer, "icon_url", &path(&index, &["footer", "icon_url"]))?
            {
                f.insert("icon_url".into(), Value::String(url.to_owned()));
            }
            kept.insert("footer".into(), Value::Object(f));
        }
        if let Some(author) = optional_object(embed, "author", &path(&index, &["author"]))? {
            let mut a = Map::new();
            let name = required_string(
                author,
                "name",
                AUTHOR_NAME_CHARS_MAX,
                &path(&index, &["author", "name"]),
            )?;
            total_chars += name.chars().count();
            a.insert("name".into(), Value::String(name.to_owned()));
            for key in ["url", "icon_url"] {
                if let Some(url) = optional_url(author, key, &path(&index, &["author", key]))? {
                    a.insert(key.into(), Value::String(url.to_owned()));
                }
            }
            kept.insert("author".into(), Value::Object(a));
        }
        for key in ["image", "thumbnail", "video"] {
            if let Some(media) = optional_object(embed, key, &path(&index, &[key]))? {
                let url = match optional_url(media, "url", &path(&index, &[key, "url"]))? {
                    Some(url) => url,
                    None => {
                        return Err(at(
                            &path(&index, &[key, "url"]),
                            "BASE_TYPE_REQUIRED",
                            "This field is required",
                        ));
                    }
                };
                kept.insert(key.into(), json!({"url": url}));
            }
        }
        if let Some(provider) = optional_object(embed, "provider", &path(&index, &["provider"]))? {
            let mut p = Map::new();
            if let Some(name) = optional_string(
                provider,
                "name",
                AUTHOR_NAME_CHARS_MAX,
                &path(&index, &["provider", "name"]),
            )? {
                p.insert("name".into(), Value::String(name.to_owned()));
            }
            if let Some(url) = optional_url(provider, "url", &path(&index, &["provider", "url"]))? {
                p.insert("url".into(), Value::String(url.to_owned()));
            }
            kept.insert("provider".into(), Value::Object(p));
        }
        match embed.get("fields") {
            None | Some(Value::Null) => {}
            Some(Value::Array(fields)) => {
                if fields.len() > FIELDS_MAX {
                    return Err(at(
                        &path(&index, &["fields"]),
                        "BASE_TYPE_MAX_LENGTH",
                        format!("Must be {FIELDS_MAX} or fewer in length."),
                    ));
                }
                let mut kept_fields = Vec::with_capacity(fields.len());
                for (j, field) in fields.iter().enumerate() {
                    let j = j.to_string();
                    let Some(field) = field.as_object() else {
                        return Err(at(
                            &path(&index, &["fields", &j]),
                            "DICT_TYPE_CONVERT",
                            "Only dictionaries may be used in a DictType.",
                        ));
                    };
                    let name = required_string(
                        field,
                        "name",
                        FIELD_NAME_CHARS_MAX,
                        &path(&index, &["fields", &j, "name"]),
                    )?;
                    let value = required_string(
                        field,
                        "value",
                        FIELD_VALUE_CHARS_MAX,
                        &path(&index, &["fields", &j, "value"]),
                    )?;
                    total_chars += name.chars().count() + value.chars().count();
                    let mut f = Map::new();
                    f.insert("name".into(), Value::String(name.to_owned()));
                    f.insert("value".into(), Value::String(value.to_owned()));
                    match field.get("inline") {
                        None | Some(Value::Null) => {}
                        Some(Value::Bool(inline)) => {
                            f.insert("inline".into(), Value::Bool(*inline));
                        }
                        Some(_) => {
                            return Err(at(
                                &path(&index, &["fields", &j, "inline"]),
                                "BASE_TYPE_BAD",
                                "Must be either true or false.",
                            ));
                        }
                    }
                    kept_fields.push(Value::Object(f));
                }
                kept.insert("fields".into(), Value::Array(kept_fields));
            }
            Some(_) => {
                return Err(at(
                    &path(&index, &["fields"]),
                    "BASE_TYPE_ARRAY",
                    "Could not interpret the value as a list.",
                ));
            }
        }
        out.push(Value::Object(kept));
    }
    if total_chars > TOTAL_CHARS_MAX {
        return Err(at(
            &[],
            "MAX_EMBED_SIZE_EXCEEDED",
            format!("Embed size exceeds maximum size of {TOTAL_CHARS_MAX}"),
        ));
    }
    Ok(out)
}

/// `index` then `rest`: a path under `embeds`.
fn path<'a>(index: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut path = vec![index];
    path.extend_from_slice(rest);
    path
}

fn optional_string<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    max_chars: usize,
    path: &[&str],
) -> Result<Option<&'a str>, FieldError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.chars().count() <= max_chars => Ok(Some(text)),
        Some(Value::String(_)) => Err(at(
            path,
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {max_chars} or fewer in length."),
        )),
        Some(_) => Err(at(
            path,
            "BASE_TYPE_STRING",
            "Could not interpret the value as string.",
        )),
    }
}

fn required_string<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    max_chars: usize,
    path: &[&str],
) -> Result<&'a str, FieldError> {
    match optional_string(object, key, max_chars, path)? {
        Some(text) if !text.trim().is_empty() => Ok(text),
        _ => Err(at(path, "BASE_TYPE_REQUIRED", "This field is required")),
    }
}

/// An http(s) or `attachment://` URL, as Discord's embed URL fields take.
fn optional_url<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &[&str],
) -> Result<Option<&'a str>, FieldError> {
    let Some(url) = optional_string(object, key, URL_CHARS_MAX, path)? else {
        return Ok(None);
    };
    let rest = ["https://", "http://", "attachment://"]
        .iter()
        .find_map(|scheme| url.strip_prefix(scheme));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.contains(char::is_whitespace) => Ok(Some(url)),
        _ => Err(at(path, "URL_TYPE_INVALID_URL", "Not a well formed URL.")),
    }
}

fn optional_object<'a>(
    object: &'a Map<String, Value>,
    key: &str,
    path: &[&str],
) -> Result<Option<&'a Map<String, Value>>, FieldError> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(inner)) => Ok(Some(inner)),
        Some(_) => Err(at(
            path,
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType.",
        )),
    }
}

/// `YYYY-MM-DDTHH:MM:SS` with optional fraction and zone: the shape
/// Discord parses (a full calendar check is the reader's).
fn looks_like_iso8601(text: &str) -> bool {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        range
            .clone()
            .all(|i| b.get(i).is_some_and(u8::is_ascii_digit))
    };
    b.len() >= 19
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (b[10] == b'T' || b[10] == b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_full_embed_is_kept_with_its_documented_fields_only() {
        let embed = json!({
            "title": "t", "description": "d", "url": "https://example.com/a",
            "timestamp": "2026-12-01T10:00:00.000Z", "color": 0xFF_FFFF,
            "footer": {"text": "f", "icon_url": "https://example.com/i.png", "proxy_icon_url": "x"},
            "image": {"url": "https://example.com/img.png", "width": 5},
            "thumbnail": {"url": "attachment://t.png"},
            "author": {"name": "a", "url": "http://example.com"},
            "fields": [{"name": "n", "value": "v", "inline": true}, {"name": "m", "value": "w"}],
            "unknown": 1,
        });
        let out = normalize(&[embed]).unwrap();
        assert_eq!(
            out[0],
            json!({
                "type": "rich", "title": "t", "description": "d", "url": "https://example.com/a",
                "timestamp": "2026-12-01T10:00:00.000Z", "color": 0xFF_FFFF,
                "footer": {"text": "f", "icon_url": "https://example.com/i.png"},
                "image": {"url": "https://example.com/img.png"},
                "thumbnail": {"url": "attachment://t.png"},
                "author": {"name": "a", "url": "http://example.com"},
                "fields": [{"name": "n", "value": "v", "inline": true}, {"name": "m", "value": "w"}],
            })
        );
    }

    fn refused(embeds: Value) -> (Value, &'static str) {
        let error = normalize(embeds.as_array().unwrap()).unwrap_err();
        (error.errors(), error.code)
    }

    #[test]
    fn each_documented_limit_is_refused_at_its_path() {
        let long = |n: usize| "x".repeat(n);
        let cases = [
            (
                json!([{"title": long(257)}]),
                json!(["embeds", "0", "title"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{}, {"description": long(4097)}]),
                json!(["embeds", "1", "description"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"fields": vec![json!({"name": "n", "value": "v"}); 26]}]),
                json!(["embeds", "0", "fields"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"fields": [{"name": long(257), "value": "v"}]}]),
                json!(["embeds", "0", "fields", "0", "name"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"fields": [{"name": "n", "value": long(1025)}]}]),
                json!(["embeds", "0", "fields", "0", "value"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"fields": [{"name": "n"}]}]),
                json!(["embeds", "0", "fields", "0", "value"]),
                "BASE_TYPE_REQUIRED",
            ),
            (
                json!([{"footer": {"text": long(2049)}}]),
                json!(["embeds", "0", "footer", "text"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"author": {"name": long(257)}}]),
                json!(["embeds", "0", "author", "name"]),
                "BASE_TYPE_MAX_LENGTH",
            ),
            (
                json!([{"author": {}}]),
                json!(["embeds", "0", "author", "name"]),
                "BASE_TYPE_REQUIRED",
            ),
            (
                json!([{"color": 0x100_0000}]),
                json!(["embeds", "0", "color"]),
                "NUMBER_TYPE_MAX",
            ),
            (
                json!([{"color": "red"}]),
                json!(["embeds", "0", "color"]),
                "NUMBER_TYPE_COERCE",
            ),
            (
                json!([{"url": "javascript:alert(1)"}]),
                json!(["embeds", "0", "url"]),
                "URL_TYPE_INVALID_URL",
            ),
            (
                json!([{"image": {}}]),
                json!(["embeds", "0", "image", "url"]),
                "BASE_TYPE_REQUIRED",
            ),
            (
                json!([{"timestamp": "yesterday"}]),
                json!(["embeds", "0", "timestamp"]),
                "DATE_TYPE_PARSE",
            ),
            (
                json!([{"title": 5}]),
                json!(["embeds", "0", "title"]),
                "BASE_TYPE_STRING",
            ),
            (json!([5]), json!(["embeds", "0"]), "DICT_TYPE_CONVERT"),
        ];
        for (embeds, path, code) in cases {
            let (errors, got) = refused(embeds.clone());
            assert_eq!(got, code, "{embeds}");
            let mut at = &errors;
            for key in path.as_array().unwrap() {
                at = &at[key.as_str().unwrap()];
            }
            assert_eq!(at["_errors"][0]["code"], code, "{errors}");
        }
    }

    #[test]
    fn the_total_counts_over_all_embeds_in_characters() {
        // 4 × 1500 = 6000 characters of 2-byte text: allowed; one more is not.
        let part = "é".repeat(1500);
        let at_limit: Vec<Value> = (0..4).map(|_| json!({"description": part})).collect();
        assert!(normalize(&at_limit).is_ok());
        let mut over = at_limit;
        over.push(json!({"title": "x"}));
        let error = normalize(&over).unwrap_err();
        assert_eq!(error.code, "MAX_EMBED_SIZE_EXCEEDED");
        assert_eq!(
            error.errors()["embeds"]["_errors"][0]["code"],
            "MAX_EMBED_SIZE_EXCEEDED"
        );
    }
}
