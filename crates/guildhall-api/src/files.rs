//! Files: uploads on message routes (`multipart/form-data` with
//! `payload_json` and `files[n]`, as Discord's "Uploading Files"
//! documents), the blob store that keeps their bytes, and the CDN route
//! that serves them at Discord's paths.
//!
//! The bytes go to the blob store before the message row is written, so
//! a 200 means both are durable. A failure between the two leaves a blob
//! no row references (a later sweep removes those); never a message
//! whose file is missing.
//!
//! What is pure here (file names, sniffing, matching `attachments` to
//! parts) takes its input as arguments; the edge (reading the body,
//! the blob store, the route) is below it.

use crate::{ApiError, ApiState, AppState};
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use guildhall_proto::error::{ErrorCode, FieldError};
use guildhall_proto::model::Attachment;
use object_store::ObjectStore;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file as the client sent it: the part `files[index]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upload {
    /// The `n` of `files[n]` (what `attachments[].id` names).
    pub index: u64,
    /// The part's file name, as sent (sanitised when it is stored).
    pub filename: String,
    /// The bytes.
    pub bytes: Bytes,
}

/// What one entry of a message's attachments will be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Planned {
    /// A new file: the upload at this position of the request's list.
    New {
        /// Position in the uploads.
        upload: usize,
        /// The stored name (sanitised).
        filename: String,
        /// Alt text.
        description: Option<String>,
        /// Title.
        title: Option<String>,
        /// Shown blurred until clicked (`is_spoiler`, or a name that
        /// starts with `SPOILER_`, as Discord's clients mark it).
        spoiler: bool,
    },
    /// An attachment the message already has, kept (edits only; its
    /// description and spoiler flag may change, as Discord allows).
    Kept(Attachment),
}

/// Discord's safe file name: whitespace becomes `_`, anything outside
/// `[A-Za-z0-9._-]` is dropped, the stem loses its leading dots (no
/// hidden or relative names), an empty stem is `unknown`, and a name over `max_bytes` is
/// cut from the end of its stem so its extension survives.
///
/// ```
/// use guildhall_api::files::sanitize_filename;
/// assert_eq!(sanitize_filename("my cat (1).png", 64), "my_cat_1.png");
/// assert_eq!(sanitize_filename("../../etc/passwd", 64), "unknown.etcpasswd");
/// assert_eq!(sanitize_filename(".bashrc", 64), "unknown.bashrc");
/// assert_eq!(sanitize_filename("日本.txt", 64), "unknown.txt");
/// assert_eq!(sanitize_filename("aaaaaaaaaaaaaaaaaaaa.jpeg", 16), "aaaaaaaaaaa.jpeg");
/// ```
pub fn sanitize_filename(name: &str, max_bytes: usize) -> String {
    let clean: String = name
        .chars()
        .filter_map(|c| match c {
            c if c.is_whitespace() => Some('_'),
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => Some(c),
            _ => None,
        })
        .collect();
    let (stem, extension) = match clean.rfind('.') {
        Some(dot) => (&clean[..dot], &clean[dot..]),
        None => (clean.as_str(), ""),
    };
    let stem = stem.trim_start_matches('.');
    let stem = if stem.is_empty() { "unknown" } else { stem };
    // Everything kept is ASCII, so bytes are characters.
    let extension = if extension.len() > max_bytes / 2 {
        ""
    } else {
        extension
    };
    let room = max_bytes.saturating_sub(extension.len()).max(1);
    format!("{}{extension}", &stem[..stem.len().min(room)])
}

/// The bytes of a file's start that decide its type: at upload and when
/// served (which reads only these), so both always agree.
pub const SNIFF_BYTES: usize = 8192;

/// What the bytes are: the media type sniffed from their first
/// [`SNIFF_BYTES`] (the client's word is never taken: a `.png` that is an
/// executable is served as what it is), with width and height for
/// images, read from their header alone (no decoding, so a
/// decompression bomb costs nothing here). A start that is UTF-8 (but
/// for a character cut at its end) is `text/plain; charset=utf-8`;
/// anything unrecognised is `application/octet-stream`.
///
/// ```
/// use guildhall_api::files::sniff;
/// assert_eq!(sniff(b"hello").0, "text/plain; charset=utf-8");
/// assert_eq!(sniff(&[0xff, 0xfe, 0x00, 0x81]).0, "application/octet-stream");
/// ```
pub fn sniff(bytes: &[u8]) -> (String, Option<(u32, u32)>) {
    let bytes = &bytes[..bytes.len().min(SNIFF_BYTES)];
    if let Some(kind) = infer::get(bytes) {
        let mime = kind.mime_type().to_owned();
        let size = (kind.matcher_type() == infer::MatcherType::Image)
            .then(|| imagesize::blob_size(bytes).ok())
            .flatten()
            .and_then(|size| {
                Some((
                    u32::try_from(size.width).ok()?,
                    u32::try_from(size.height).ok()?,
                ))
            });
        return (mime, size);
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(_) => true,
        // A character cut by the sniff window (at most 3 bytes of it).
        Err(error) => error.error_len().is_none() && bytes.len() - error.valid_up_to() < 4,
    };
    if text {
        return ("text/plain; charset=utf-8".to_owned(), None);
    }
    ("application/octet-stream".to_owned(), None)
}

/// Attachment flag IS_SPOILER.
pub const FLAG_IS_SPOILER: u64 = 1 << 3;

/// Whether a file name marks a spoiler, as Discord's clients name them.
fn spoiler_name(name: &str) -> bool {
    name.starts_with("SPOILER_")
}

/// Bounds for [`plan`].
#[derive(Clone, Copy, Debug)]
pub struct PlanLimits {
    /// Most attachments on a message.
    pub attachments_max: usize,
    /// Longest stored file name, in bytes.
    pub filename_bytes_max: usize,
    /// Longest description or title, in characters.
    pub text_chars_max: usize,
}

/// Matches the body's `attachments` to the uploaded parts and to what
/// the message already has (`existing`, empty on create), as Discord
/// does: without `attachments`, each part is a new attachment under its
/// own name, in part order; with it, each entry names a part by its `n`
/// (and may rename it and give alt text and a title) or an existing
/// attachment by its id (an edit keeps those it lists and drops the
/// rest). A part no entry names, an entry naming nothing, the same thing
/// named twice, or more than `attachments_max` in all are refused at the
/// field, with nothing stored.
pub fn plan(
    attachments: Option<&Value>,
    uploads: &[Upload],
    existing: &[Attachment],
    limits: PlanLimits,
) -> Result<Vec<Planned>, FieldError> {
    let too_many = || {
        FieldError::at(
            "attachments",
            &[],
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {} or fewer in length.", limits.attachments_max),
        )
    };
    let planned: Vec<Planned> = match attachments {
        None | Some(Value::Null) => {
            let mut order: Vec<usize> = (0..uploads.len()).collect();
            order.sort_by_key(|&i| uploads[i].index);
            let mut kept: Vec<Planned> = existing.iter().cloned().map(Planned::Kept).collect();
            kept.extend(order.into_iter().map(|upload| {
                let filename =
                    sanitize_filename(&uploads[upload].filename, limits.filename_bytes_max);
                Planned::New {
                    upload,
                    spoiler: spoiler_name(&filename),
                    filename,
                    description: None,
                    title: None,
                }
            }));
            kept
        }
        Some(Value::Array(entries)) => {
            let mut planned = Vec::with_capacity(entries.len());
            let mut used_uploads = vec![false; uploads.len()];
            let mut used_existing = vec![false; existing.len()];
            for (i, entry) in entries.iter().enumerate() {
                let at = i.to_string();
                let field = |key: &str, code: &'static str, message: &str| {
                    FieldError::at("attachments", &[at.as_str(), key], code, message)
                };
                let Value::Object(entry) = entry else {
                    return Err(FieldError::at(
                        "attachments",
                        &[at.as_str()],
                        "MODEL_TYPE_CONVERT",
                        "Only dictionaries may be used in a ModelType",
                    ));
                };
                let id = match entry.get("id") {
                    Some(Value::Number(n)) => n.as_u64(),
                    Some(Value::String(s)) => s.parse::<u64>().ok(),
                    _ => None,
                }
                .ok_or_else(|| field("id", "BASE_TYPE_REQUIRED", "This field is required"))?;
                let text = |key: &str| -> Result<Option<String>, FieldError> {
                    match entry.get(key) {
                        None | Some(Value::Null) => Ok(None),
                        Some(Value::String(s)) if s.chars().count() <= limits.text_chars_max => {
                            Ok(Some(s.clone()))
                        }
                        Some(Value::String(_)) => Err(field(
                            key,
                            "BASE_TYPE_MAX_LENGTH",
                            &format!("Must be {} or fewer in length.", limits.text_chars_max),
                        )),
                        Some(_) => Err(field(key, "BASE_TYPE_BAD", "Must be a string.")),
                    }
                };
                let description = text("description")?;
                let title = text("title")?;
                let spoiler = match entry.get("is_spoiler") {
                    None | Some(Value::Null) => None,
                    Some(Value::Bool(b)) => Some(*b),
                    Some(_) => {
                        return Err(field(
                            "is_spoiler",
                            "BASE_TYPE_BOOLEAN",
                            "Must be either true or false.",
                        ));
                    }
                };
                // A name is shortened when stored, not refused.
                let filename = match entry.get("filename") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(field("filename", "BASE_TYPE_BAD", "Must be a string.")),
                };
                if let Some(upload) = uploads.iter().position(|u| u.index == id) {
                    if std::mem::replace(&mut used_uploads[upload], true) {
                        return Err(field(
                            "id",
                            "ATTACHMENT_DUPLICATE",
                            "Each file is named once.",
                        ));
                    }
                    let name = filename.as_deref().unwrap_or(&uploads[upload].filename);
                    let filename = sanitize_filename(name, limits.filename_bytes_max);
                    planned.push(Planned::New {
                        upload,
                        spoiler: spoiler.unwrap_or_else(|| spoiler_name(&filename)),
                        filename,
                        description,
                        title,
                    });
                } else if let Some(kept) = existing.iter().position(|a| a.id.get() == id) {
                    if std::mem::replace(&mut used_existing[kept], true) {
                        return Err(field(
                            "id",
                            "ATTACHMENT_DUPLICATE",
                            "Each file is named once.",
                        ));
                    }
                    let mut attachment = existing[kept].clone();
                    if description.is_some() {
                        attachment.description = description;
                    }
                    if let Some(spoiler) = spoiler {
                        let flags = attachment.flags.unwrap_or(0) & !FLAG_IS_SPOILER;
                        let flags = if spoiler {
                            flags | FLAG_IS_SPOILER
                        } else {
                            flags
                        };
                        attachment.flags = (flags != 0).then_some(flags);
                    }
                    planned.push(Planned::Kept(attachment));
                } else {
                    return Err(field(
                        "id",
                        "ATTACHMENT_NOT_FOUND",
                        "No file part or attachment of this message has this id.",
                    ));
                }
            }
            if let Some(unnamed) = used_uploads.iter().position(|used| !used) {
                return Err(FieldError::at(
                    &format!("files[{}]", uploads[unnamed].index),
                    &[],
                    "ATTACHMENT_NOT_FOUND",
                    "No entry of attachments names this file.",
                ));
            }
            planned
        }
        Some(_) => {
            return Err(FieldError::at(
                "attachments",
                &[],
                "BASE_TYPE_BAD",
                "Must be an array.",
            ));
        }
    };
    if planned.len() > limits.attachments_max {
        return Err(too_many());
    }
    Ok(planned)
}

/// The embed fields that may show a file of the message itself.
const EMBED_FILE_FIELDS: [(&str, &str); 4] = [
    ("image", "url"),
    ("thumbnail", "url"),
    ("author", "icon_url"),
    ("footer", "icon_url"),
];

/// Refuses an embed that shows `attachment://NAME` when the message has
/// no file of that name (`names`), at the field, as a 50035.
pub fn check_embed_refs(embeds: &[Value], names: &[&str]) -> Result<(), FieldError> {
    for (i, embed) in embeds.iter().enumerate() {
        for (object, key) in EMBED_FILE_FIELDS {
            let Some(url) = embed[object][key].as_str() else {
                continue;
            };
            if let Some(name) = url.strip_prefix("attachment://")
                && !names.contains(&name)
            {
                return Err(FieldError::at(
                    "embeds",
                    &[&i.to_string(), object, key],
                    "ATTACHMENT_NOT_FOUND",
                    format!("The message has no file named {name}."),
                ));
            }
        }
    }
    Ok(())
}

/// Shows each `attachment://NAME` of `embeds` as that file's URL, and an
/// image's size, as Discord answers it (what is stored keeps the
/// reference, so a new CDN base or a refreshed signature applies).
pub fn resolve_embed_refs(embeds: &mut [Value], attachments: &[Attachment]) {
    for embed in embeds {
        for (object, key) in EMBED_FILE_FIELDS {
            let Some(field) = embed.get_mut(object).and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(name) = field
                .get(key)
                .and_then(Value::as_str)
                .and_then(|url| url.strip_prefix("attachment://"))
            else {
                continue;
            };
            let Some(file) = attachments.iter().find(|a| a.filename == name) else {
                continue;
            };
            field.insert(key.to_owned(), Value::String(file.url.clone()));
            let proxy = if key == "url" {
                "proxy_url"
            } else {
                "proxy_icon_url"
            };
            field.insert(proxy.to_owned(), Value::String(file.proxy_url.clone()));
            if key == "url"
                && let (Some(width), Some(height)) = (file.width, file.height)
            {
                field.insert("width".to_owned(), width.into());
                field.insert("height".to_owned(), height.into());
            }
        }
    }
}

/// The names of what `planned` attaches.
pub fn planned_names(planned: &[Planned]) -> Vec<&str> {
    planned
        .iter()
        .map(|p| match p {
            Planned::New { filename, .. } => filename.as_str(),
            Planned::Kept(a) => a.filename.as_str(),
        })
        .collect()
}

/// A `Range` no byte of the file satisfies (answered 416).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unsatisfiable;

/// The byte range a `Range` header asks of a file of `size` bytes:
/// `Ok(None)` for the whole file (no header, a unit other than bytes, or
/// several ranges, which RFC 9110 lets a server answer whole), `Err` when
/// it cannot be satisfied (416).
///
/// ```
/// use guildhall_api::files::byte_range;
/// assert_eq!(byte_range(Some("bytes=0-3"), 10), Ok(Some(0..4)));
/// assert_eq!(byte_range(Some("bytes=7-"), 10), Ok(Some(7..10)));
/// assert_eq!(byte_range(Some("bytes=-4"), 10), Ok(Some(6..10)));
/// assert_eq!(byte_range(Some("bytes=5-99"), 10), Ok(Some(5..10)));
/// assert!(byte_range(Some("bytes=10-"), 10).is_err());
/// assert_eq!(byte_range(Some("bytes=0-1,4-5"), 10), Ok(None));
/// ```
pub fn byte_range(
    header: Option<&str>,
    size: u64,
) -> Result<Option<std::ops::Range<u64>>, Unsatisfiable> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (first, last) = spec.split_once('-').ok_or(Unsatisfiable)?;
    let (first, last) = (first.trim(), last.trim());
    let range = if first.is_empty() {
        let suffix: u64 = last.parse().map_err(|_| Unsatisfiable)?;
        if suffix == 0 {
            return Err(Unsatisfiable);
        }
        size.saturating_sub(suffix)..size
    } else {
        let first: u64 = first.parse().map_err(|_| Unsatisfiable)?;
        let end = if last.is_empty() {
            size
        } else {
            let last: u64 = last.parse().map_err(|_| Unsatisfiable)?;
            if last < first {
                return Err(Unsatisfiable);
            }
            last.saturating_add(1).min(size)
        };
        first..end
    };
    if range.start >= size || range.is_empty() {
        return Err(Unsatisfiable);
    }
    Ok(Some(range))
}

/// The `ex`, `is` and `hm` of an attachment URL for `path` (the URL's
/// path without its leading `/`), as Discord's CDN URLs carry them: issued
/// at the last multiple of half `ttl_s` (so the same message shows the
/// same URL for that long), expiring `ttl_s` after that, signed with
/// HMAC-SHA-256 under `key`. Pure: the caller reads the clock.
pub fn signed_query(key: &[u8], path: &str, now_s: u64, ttl_s: u64) -> String {
    let half_s = (ttl_s / 2).max(1);
    let issued_s = now_s - now_s % half_s;
    let expires_s = issued_s.saturating_add(ttl_s);
    let hm = hex(&signature(key, path, expires_s, issued_s));
    format!("ex={expires_s:x}&is={issued_s:x}&hm={hm}&")
}

/// Whether `query` (an attachment URL's) holds a signature of `path`
/// under `key` that has not expired at `now_s`.
///
/// ```
/// use guildhall_api::files::{signed_query, signature_holds};
/// let query = signed_query(b"key", "attachments/1/2/a.png", 1_000, 100);
/// assert!(signature_holds(b"key", "attachments/1/2/a.png", Some(&query), 1_049));
/// assert!(!signature_holds(b"key", "attachments/1/2/a.png", Some(&query), 1_100));
/// assert!(!signature_holds(b"other", "attachments/1/2/a.png", Some(&query), 1_049));
/// assert!(!signature_holds(b"key", "attachments/1/2/b.png", Some(&query), 1_049));
/// assert!(!signature_holds(b"key", "attachments/1/2/a.png", None, 1_049));
/// ```
pub fn signature_holds(key: &[u8], path: &str, query: Option<&str>, now_s: u64) -> bool {
    let (mut expires_s, mut issued_s, mut hm) = (None, None, None);
    for pair in query.unwrap_or_default().split('&') {
        match pair.split_once('=') {
            Some(("ex", v)) => expires_s = u64::from_str_radix(v, 16).ok(),
            Some(("is", v)) => issued_s = u64::from_str_radix(v, 16).ok(),
            Some(("hm", v)) => hm = unhex(v),
            _ => {}
        }
    }
    let (Some(expires_s), Some(issued_s), Some(hm)) = (expires_s, issued_s, hm) else {
        return false;
    };
    if expires_s <= now_s {
        return false;
    }
    // Constant-time comparison of the signature.
    hmac::Mac::verify_slice(mac_of(key, path, expires_s, issued_s), &hm).is_ok()
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

fn mac_of(key: &[u8], path: &str, expires_s: u64, issued_s: u64) -> HmacSha256 {
    use hmac::Mac;
    // HMAC takes a key of any length, so this never fails.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(format!("{path}\n{expires_s:x}\n{issued_s:x}").as_bytes());
    mac
}

fn signature(key: &[u8], path: &str, expires_s: u64, issued_s: u64) -> Vec<u8> {
    hmac::Mac::finalize(mac_of(key, path, expires_s, issued_s))
        .into_bytes()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || text.len() > 128 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Where a file's bytes are kept: one object per attachment, named by
/// the same path its CDN URL has.
pub fn attachment_key(channel_id: i64, attachment_id: u64, filename: &str) -> String {
    format!("attachments/{channel_id}/{attachment_id}/{filename}")
}

/// Counters of the upload path (rendered on `/metrics`).
#[derive(Default)]
pub struct FileCounters {
    /// Requests refused because the node's upload memory was taken.
    pub uploads_refused_total: AtomicU64,
    /// Files stored.
    pub files_stored_total: AtomicU64,
    /// Bytes of files stored.
    pub file_bytes_stored_total: AtomicU64,
    /// Blob store operations that failed (answered 503 or 404).
    pub blob_errors_total: AtomicU64,
    /// Files served by the CDN route.
    pub files_served_total: AtomicU64,
    /// Files deleted from the blob store after their message went.
    pub blobs_deleted_total: AtomicU64,
    /// Files left in the blob store: the delete queue was full.
    pub blob_deletes_dropped_total: AtomicU64,
}

/// The api role's files: the blob store, the upload memory bound, and
/// the base of the URLs files are served at.
pub struct Files {
    blobs: Arc<dyn ObjectStore>,
    /// Upload bytes in memory, over every request (`upload_memory_bytes_max`).
    memory: Arc<tokio::sync::Semaphore>,
    /// `scheme://host[:port]` the CDN routes are reached at.
    cdn_base: String,
    /// Files whose message is gone (`blob_delete_queue_max`).
    deletes: tokio::sync::mpsc::Sender<Doomed>,
    /// The key attachment URLs are signed with (every api node's same).
    signing_key: Vec<u8>,
    /// How long a URL is valid (`attachment_url_ttl_ms`), in seconds.
    url_ttl_s: u64,
    /// What the upload path did.
    pub counters: Arc<FileCounters>,
}

impl Files {
    /// Files kept in the directory `dir` (created if missing): embedded
    /// mode's blob store, through `object_store`'s local backend, which
    /// writes each object to a temporary file and renames it into place,
    /// so a reader never sees half a file.
    pub fn local(
        dir: &std::path::Path,
        cdn_base: String,
        signing_key: &[u8],
        limits: &guildhall_limits::Limits,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
            .map_err(std::io::Error::other)?;
        Ok(Self::over(Arc::new(store), cdn_base, signing_key, limits))
    }

    /// Files kept in `blobs`, their URLs signed with `signing_key`.
    pub fn over(
        blobs: Arc<dyn ObjectStore>,
        cdn_base: String,
        signing_key: &[u8],
        limits: &guildhall_limits::Limits,
    ) -> Self {
        let counters = Arc::new(FileCounters::default());
        let (deletes, queue) = tokio::sync::mpsc::channel(limits.blob_delete_queue_max);
        tokio::spawn(delete_blobs(blobs.clone(), queue, counters.clone()));
        Self {
            blobs,
            memory: Arc::new(tokio::sync::Semaphore::new(limits.upload_memory_bytes_max)),
            cdn_base: cdn_base.trim_end_matches('/').to_owned(),
            deletes,
            signing_key: signing_key.to_vec(),
            url_ttl_s: limits.attachment_url_ttl_ms / 1000,
            counters,
        }
    }

    /// Deletes, in the background, the files of a message's attachments
    /// (as stored) once the message (or the attachment) is gone. A full
    /// queue leaves them, counted.
    pub fn forget(&self, channel_id: i64, stored: Option<&str>) {
        self.forget_these(channel_id, &read_stored(stored));
    }

    /// [`Files::forget`] for attachments already read.
    pub fn forget_these(&self, channel_id: i64, attachments: &[Attachment]) {
        for attachment in attachments {
            let key = attachment_key(channel_id, attachment.id.get(), &attachment.filename);
            self.doom(Doomed::Key(key));
        }
    }

    /// Deletes, in the background, every file of a channel that was
    /// deleted (its messages went with it in the store).
    pub fn forget_channel(&self, channel_id: i64) {
        self.doom(Doomed::Channel(channel_id));
    }

    fn doom(&self, doomed: Doomed) {
        if self.deletes.try_send(doomed).is_err() {
            self.counters
                .blob_deletes_dropped_total
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The URL a stored attachment is served at, signed now.
    pub fn attachment_url(&self, channel_id: i64, attachment: &Attachment) -> String {
        self.signed_url(&attachment_key(
            channel_id,
            attachment.id.get(),
            &attachment.filename,
        ))
    }

    /// `path` (no leading `/`) under the CDN base, signed now.
    fn signed_url(&self, path: &str) -> String {
        let now_s = guildhall_common::state::now_ms() / 1000;
        let query = signed_query(&self.signing_key, path, now_s, self.url_ttl_s);
        format!("{}/{path}?{query}", self.cdn_base)
    }

    /// Stores `bytes` under `key`; a blob store that fails is 503 with
    /// `Retry-After` (the caller stores nothing else).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), ApiError> {
        let path = object_store::path::Path::from(key);
        let size = bytes.len() as u64;
        match self
            .blobs
            .put_opts(&path, bytes.into(), object_store::PutOptions::default())
            .await
        {
            Ok(_) => {
                self.counters
                    .files_stored_total
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .file_bytes_stored_total
                    .fetch_add(size, Ordering::Relaxed);
                Ok(())
            }
            Err(error) => {
                self.counters
                    .blob_errors_total
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, key, "blob store put failed");
                Err(ApiError::Overloaded)
            }
        }
    }

    /// The object under `key` (with `range`, that part of it; `head`,
    /// its metadata only), `None` if there is none.
    async fn open(
        &self,
        key: &str,
        range: Option<std::ops::Range<u64>>,
        head: bool,
    ) -> Result<Option<object_store::GetResult>, ApiError> {
        let path = object_store::path::Path::from(key);
        let options = object_store::GetOptions {
            range: range.map(object_store::GetRange::from),
            head,
            ..Default::default()
        };
        match self.blobs.get_opts(&path, options).await {
            Ok(got) => Ok(Some(got)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(error) => {
                self.counters
                    .blob_errors_total
                    .fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, key, "blob store get failed");
                Err(ApiError::Overloaded)
            }
        }
    }

    /// The bytes of `range` under `key`, read whole (small reads only).
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, ApiError> {
        let Some(got) = self.open(key, Some(range), false).await? else {
            return Err(ApiError::Overloaded);
        };
        got.bytes().await.map_err(|error| {
            self.counters
                .blob_errors_total
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%error, key, "blob store read failed");
            ApiError::Overloaded
        })
    }
}

/// What the background task deletes.
#[derive(Debug)]
enum Doomed {
    /// One file.
    Key(String),
    /// Every file of a deleted channel.
    Channel(i64),
}

/// Deletes the files named on `queue`, one at a time (deletes are never
/// urgent; one task keeps them from competing with uploads). A file
/// already gone counts as deleted; a failure is logged and left.
async fn delete_blobs(
    blobs: Arc<dyn ObjectStore>,
    mut queue: tokio::sync::mpsc::Receiver<Doomed>,
    counters: Arc<FileCounters>,
) {
    use futures_util::StreamExt;
    while let Some(doomed) = queue.recv().await {
        let paths: Vec<object_store::path::Path> = match doomed {
            Doomed::Key(key) => vec![object_store::path::Path::from(key.as_str())],
            Doomed::Channel(channel_id) => {
                let prefix = object_store::path::Path::from(format!("attachments/{channel_id}"));
                blobs
                    .list(Some(&prefix))
                    .filter_map(|meta| async move { meta.ok().map(|m| m.location) })
                    .collect()
                    .await
            }
        };
        let mut done =
            blobs.delete_stream(futures_util::stream::iter(paths.into_iter().map(Ok)).boxed());
        while let Some(result) = done.next().await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                    counters.blobs_deleted_total.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    counters.blob_errors_total.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, "blob store delete failed");
                }
            }
        }
    }
}

/// `POST /attachments/refresh-urls`'s body.
#[derive(serde::Deserialize)]
pub struct RefreshUrls {
    attachment_urls: Vec<String>,
}

/// `POST /attachments/refresh-urls`: each attachment URL (of this server,
/// expired or not, with any base) signed afresh; a URL that names no
/// attachment path is answered as it was given.
pub async fn refresh_urls(
    State(node): State<AppState>,
    crate::Caller(_caller): crate::Caller,
    crate::JsonBody(body): crate::JsonBody<RefreshUrls>,
) -> crate::ApiResult {
    let max = node.shared.limits.attachment_refresh_urls_max;
    if body.attachment_urls.len() > max {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        return Err(ApiError::Field(
            "attachment_urls",
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {max} or fewer in length."),
        ));
    }
    let filename_max = node.shared.limits.attachment_filename_bytes_max;
    let refreshed: Vec<Value> = body
        .attachment_urls
        .into_iter()
        .map(|original| {
            let refreshed = attachment_path(&original, filename_max)
                .map_or_else(|| original.clone(), |path| node.files.signed_url(&path));
            serde_json::json!({"original": original, "refreshed": refreshed})
        })
        .collect();
    crate::ok(&serde_json::json!({ "refreshed_urls": refreshed }))
}

/// The `attachments/{channel}/{id}/{name}` path an attachment URL names.
fn attachment_path(url: &str, filename_max: usize) -> Option<String> {
    let start = url.find("/attachments/")?;
    let path = url[start + 1..].split(['?', '#']).next()?;
    let mut parts = path.split('/').skip(1);
    let (channel, id, name) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || channel.parse::<i64>().is_err()
        || id.parse::<u64>().is_err()
        || sanitize_filename(name, filename_max) != name
    {
        return None;
    }
    Some(path.to_owned())
}

/// A message body as JSON or as `multipart/form-data`: the JSON (from
/// `payload_json`, or from the form's other fields) and the files, whose
/// bytes hold their share of the node's upload memory until the request
/// is answered.
pub struct MessageBody<T> {
    /// The JSON body.
    pub body: T,
    /// The body's `attachments` (raw, for [`plan`]).
    pub attachments: Option<Value>,
    /// The files, in part order.
    pub uploads: Vec<Upload>,
    /// The memory the request's bytes hold.
    _memory: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<T: DeserializeOwned> FromRequest<AppState> for MessageBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        read_message_body(req, state).await
    }
}

/// Reads a message body, JSON or multipart (see [`MessageBody`]).
pub(crate) async fn read_message_body<T: DeserializeOwned>(
    req: Request,
    state: &AppState,
) -> Result<MessageBody<T>, ApiError> {
    let boundary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("multipart/form-data"))
        })
        .map(multer::parse_boundary);
    let Some(boundary) = boundary else {
        let value: Value =
            crate::read_json(req, state, state.shared.limits.rest_body_bytes_max).await?;
        let attachments = value.get("attachments").cloned();
        return Ok(MessageBody {
            body: crate::from_json_value(state, value)?,
            attachments,
            uploads: Vec::new(),
            _memory: None,
        });
    };
    let boundary = boundary.map_err(|_| bad_form(state, "The multipart boundary is missing."))?;
    let (bytes, memory) = read_upload(req.into_body(), state).await?;
    let (value, uploads) = parse_form(state, bytes, boundary).await?;
    let attachments = value.get("attachments").cloned();
    Ok(MessageBody {
        body: crate::from_json_value(state, value)?,
        attachments,
        uploads,
        _memory: memory,
    })
}

fn bad_form(node: &ApiState, message: &str) -> ApiError {
    node.counters
        .bad_requests_total
        .fetch_add(1, Ordering::Relaxed);
    ApiError::Field("body", "MULTIPART_MALFORMED", message.to_owned())
}

/// Reads a multipart body of at most `upload_request_bytes_max` (413 with
/// 40005 past it, after draining a bounded overrun as JSON bodies are),
/// taking its bytes from the node's upload memory as they arrive; a
/// request that would pass that bound is refused with 503.
async fn read_upload(
    body: axum::body::Body,
    node: &ApiState,
) -> Result<(Bytes, Option<tokio::sync::OwnedSemaphorePermit>), ApiError> {
    use axum::body::HttpBody;
    let limits = &node.shared.limits;
    let mut body = body;
    let mut kept: Vec<u8> = Vec::new();
    let mut memory: Option<tokio::sync::OwnedSemaphorePermit> = None;
    let mut seen_bytes = 0usize;
    let too_large = || {
        node.counters
            .bad_requests_total
            .fetch_add(1, Ordering::Relaxed);
        ApiError::Code(ErrorCode::EntityTooLarge)
    };
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(frame) = frame else {
            return Err(bad_form(node, "The body ended early."));
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen_bytes = seen_bytes.saturating_add(data.len());
        if seen_bytes <= limits.upload_request_bytes_max {
            let share = u32::try_from(data.len()).unwrap_or(u32::MAX);
            let Ok(permit) = node.files.memory.clone().try_acquire_many_owned(share) else {
                node.files
                    .counters
                    .uploads_refused_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Overloaded);
            };
            match &mut memory {
                Some(held) => held.merge(permit),
                None => memory = Some(permit),
            }
            kept.extend_from_slice(&data);
        } else if seen_bytes
            > limits
                .upload_request_bytes_max
                .saturating_add(limits.rest_body_drain_bytes_max)
        {
            return Err(too_large());
        }
    }
    if seen_bytes > limits.upload_request_bytes_max {
        return Err(too_large());
    }
    Ok((Bytes::from(kept), memory))
}

/// The parts of a multipart body: `payload_json` (the whole JSON body),
/// `files[n]` (the files), and any other field as a top-level JSON key
/// (its text parsed as JSON when it parses, else kept as a string;
/// `content`, `nonce` and `username` always strings), which Discord
/// takes when there is no `payload_json`.
async fn parse_form(
    node: &ApiState,
    bytes: Bytes,
    boundary: String,
) -> Result<(Value, Vec<Upload>), ApiError> {
    let limits = &node.shared.limits;
    let stream = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(bytes) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut payload: Option<Value> = None;
    let mut fields = Map::new();
    let mut uploads: Vec<Upload> = Vec::new();
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(_) => return Err(bad_form(node, "The multipart body is malformed.")),
        };
        let name = field.name().unwrap_or_default().to_owned();
        let filename = field.file_name().map(str::to_owned);
        let data = field
            .bytes()
            .await
            .map_err(|_| bad_form(node, "The multipart body is malformed."))?;
        if let Some(index) = file_index(&name) {
            if uploads.len() >= limits.message_attachments_max {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Field(
                    "attachments",
                    "BASE_TYPE_MAX_LENGTH",
                    format!(
                        "Must be {} or fewer in length.",
                        limits.message_attachments_max
                    ),
                ));
            }
            if data.len() > limits.attachment_bytes_max {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::Code(ErrorCode::EntityTooLarge));
            }
            if uploads.iter().any(|u| u.index == index) {
                return Err(bad_form(node, "A file part is sent twice."));
            }
            uploads.push(Upload {
                index,
                filename: filename.unwrap_or_default(),
                bytes: data,
            });
            continue;
        }
        if data.len() > limits.rest_body_bytes_max {
            node.counters
                .bad_requests_total
                .fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::Code(ErrorCode::EntityTooLarge));
        }
        if name == "payload_json" {
            let value: Value = serde_json::from_slice(&data).map_err(|_| {
                node.counters
                    .bad_requests_total
                    .fetch_add(1, Ordering::Relaxed);
                ApiError::Code(ErrorCode::InvalidJson)
            })?;
            if !value.is_object() {
                return Err(bad_form(node, "payload_json must be a JSON object."));
            }
            payload = Some(value);
            continue;
        }
        let Ok(text) = String::from_utf8(data.to_vec()) else {
            return Err(bad_form(node, "A form field is not UTF-8."));
        };
        let value = match name.as_str() {
            "content" | "nonce" | "username" => Value::String(text),
            _ => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        };
        fields.insert(name, value);
    }
    // Discord: with payload_json, the other non-file fields are not read.
    Ok((payload.unwrap_or(Value::Object(fields)), uploads))
}

/// The `n` of a file part's name: `files[n]`, or `file` (an older
/// client's single file, as `files[0]`).
fn file_index(name: &str) -> Option<u64> {
    if name == "file" {
        return Some(0);
    }
    name.strip_prefix("files[")?.strip_suffix(']')?.parse().ok()
}

/// Stores the new files of `planned` under `channel_id` and answers the
/// message's attachments (without URLs) in order. Each file's type and
/// size are read from its bytes.
pub(crate) async fn store_planned(
    node: &ApiState,
    channel_id: i64,
    planned: Vec<Planned>,
    uploads: &[Upload],
) -> Result<Vec<Attachment>, ApiError> {
    let mut attachments = Vec::with_capacity(planned.len());
    for entry in planned {
        match entry {
            Planned::Kept(attachment) => attachments.push(attachment),
            Planned::New {
                upload,
                filename,
                description,
                title,
                spoiler,
            } => {
                let bytes = uploads[upload].bytes.clone();
                let (content_type, size) = sniff(&bytes);
                let id = node.shared.next_id();
                node.files
                    .put(
                        &attachment_key(channel_id, id.get(), &filename),
                        bytes.clone(),
                    )
                    .await?;
                attachments.push(Attachment {
                    id,
                    filename,
                    title,
                    description,
                    content_type: Some(content_type),
                    size: bytes.len() as u64,
                    url: String::new(),
                    proxy_url: String::new(),
                    width: size.map(|(w, _)| w),
                    height: size.map(|(_, h)| h),
                    flags: spoiler.then_some(FLAG_IS_SPOILER),
                });
            }
        }
    }
    Ok(attachments)
}

/// What an edit makes of `row`'s attachments: `None` when it names none
/// and sends no file (they stay), else the attachments as they will
/// stand, stored (`attachments` lists what stays and names new parts;
/// without it new parts are added to what the message has). New files
/// are stored before the row is.
pub(crate) async fn edited(
    node: &ApiState,
    row: &guildhall_store::MessageRow,
    attachments: Option<&Value>,
    uploads: &[Upload],
) -> Result<Option<Option<String>>, ApiError> {
    if attachments.is_none() && uploads.is_empty() {
        return Ok(None);
    }
    let existing = read_stored(row.attachments.as_deref());
    let planned = plan(
        attachments.filter(|a| !a.is_null()),
        uploads,
        &existing,
        crate::plan_limits(node),
    )
    .map_err(|error| crate::invalid_form(node, &error))?;
    let kept = store_planned(node, row.channel_id, planned, uploads).await?;
    Ok(Some(stored(&kept)))
}

/// The stored form of a message's attachments (`None`: none).
pub(crate) fn stored(attachments: &[Attachment]) -> Option<String> {
    if attachments.is_empty() {
        return None;
    }
    serde_json::to_string(attachments).ok()
}

/// A message's attachments as [`stored`] wrote them (without URLs).
pub(crate) fn read_stored(stored: Option<&str>) -> Vec<Attachment> {
    stored
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

/// A stored message's attachments with their URLs.
pub(crate) fn shown(files: &Files, channel_id: i64, stored: Option<&str>) -> Vec<Attachment> {
    let mut attachments = read_stored(stored);
    for attachment in &mut attachments {
        attachment.url = files.attachment_url(channel_id, attachment);
        attachment.proxy_url = attachment.url.clone();
    }
    attachments
}

/// `GET /attachments/{channel}/{attachment}/{filename}` (and HEAD): a
/// file, as Discord's CDN serves it (to anyone holding an unexpired URL
/// this server signed), with its sniffed type, an ETag (an attachment never changes),
/// `Accept-Ranges` and one `Range` honoured (206, or 416 past its end).
/// The body streams from the blob store: serving a file holds none of it
/// in memory beyond the blob store's read buffer.
pub async fn serve_attachment(
    State(node): State<AppState>,
    Path((channel, attachment, filename)): Path<(String, String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: axum::http::HeaderMap,
) -> Response {
    let (Ok(channel), Ok(attachment)) = (channel.parse::<i64>(), attachment.parse::<u64>()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    // Names are stored sanitised; any other name is not a stored one.
    if sanitize_filename(&filename, node.shared.limits.attachment_filename_bytes_max) != filename {
        return StatusCode::NOT_FOUND.into_response();
    }
    let key = attachment_key(channel, attachment, &filename);
    // Only a URL this server signed, before it expired, is served (as
    // Discord's CDN refuses an expired or forged one).
    let now_s = guildhall_common::state::now_ms() / 1000;
    if !signature_holds(&node.files.signing_key, &key, query.as_deref(), now_s) {
        return (
            StatusCode::NOT_FOUND,
            "This content is no longer available.",
        )
            .into_response();
    }
    match serve(&node, &key, attachment, &headers).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn serve(
    node: &ApiState,
    key: &str,
    attachment: u64,
    headers: &axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let files = &node.files;
    let Some(meta) = files.open(key, None, true).await? else {
        return Ok(StatusCode::NOT_FOUND.into_response());
    };
    let size = meta.meta.size;
    let etag = format!("\"{attachment}\"");
    let mut response = Response::new(axum::body::Body::empty());
    let out = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        out.insert(header::ETAG, value);
    }
    out.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    out.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    // A browser shows text and images inline, never as a page of this
    // origin that could run script.
    out.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag))
    {
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        return Ok(response);
    }
    let sniffed = if size == 0 {
        Bytes::new()
    } else {
        files.read(key, 0..size.min(SNIFF_BYTES as u64)).await?
    };
    let (content_type, _) = sniff(&sniffed);
    if let Ok(value) = HeaderValue::from_str(&content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    let asked = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let range = match byte_range(asked, size) {
        Ok(range) => range,
        Err(Unsatisfiable) => {
            *response.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
            return Ok(response);
        }
    };
    let body_range = range.clone().unwrap_or(0..size);
    if let Some(range) = &range {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        let value = format!("bytes {}-{}/{size}", range.start, range.end - 1);
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().insert(header::CONTENT_RANGE, value);
        }
    }
    response.headers_mut().insert(
        header::CONTENT_LENGTH,
        HeaderValue::from(body_range.end - body_range.start),
    );
    if size > 0 {
        let Some(got) = files.open(key, Some(body_range), false).await? else {
            return Ok(StatusCode::NOT_FOUND.into_response());
        };
        *response.body_mut() = axum::body::Body::from_stream(got.into_stream());
    }
    files
        .counters
        .files_served_total
        .fetch_add(1, Ordering::Relaxed);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(index: u64, name: &str) -> Upload {
        Upload {
            index,
            filename: name.to_owned(),
            bytes: Bytes::from_static(b"x"),
        }
    }

    const LIMITS: PlanLimits = PlanLimits {
        attachments_max: 3,
        filename_bytes_max: 64,
        text_chars_max: 8,
    };

    fn new_names(planned: &[Planned]) -> Vec<(usize, String, Option<String>)> {
        planned
            .iter()
            .map(|p| match p {
                Planned::New {
                    upload,
                    filename,
                    description,
                    ..
                } => (*upload, filename.clone(), description.clone()),
                Planned::Kept(a) => (usize::MAX, a.filename.clone(), None),
            })
            .collect()
    }

    #[test]
    fn parts_without_attachments_are_attached_in_order_of_their_index() {
        let uploads = [upload(1, "b c.png"), upload(0, "a.txt")];
        let planned = plan(None, &uploads, &[], LIMITS).unwrap();
        assert_eq!(
            new_names(&planned),
            [
                (1, "a.txt".to_owned(), None),
                (0, "b_c.png".to_owned(), None)
            ]
        );
    }

    #[test]
    fn attachments_name_parts_by_index_and_rename_them() {
        let uploads = [upload(0, "a.txt"), upload(1, "b.txt")];
        let body = serde_json::json!([
            {"id": "1", "description": "alt"},
            {"id": 0, "filename": "renamed.txt"},
        ]);
        let planned = plan(Some(&body), &uploads, &[], LIMITS).unwrap();
        assert_eq!(
            new_names(&planned),
            [
                (1, "b.txt".to_owned(), Some("alt".to_owned())),
                (0, "renamed.txt".to_owned(), None)
            ]
        );
    }

    #[test]
    fn bad_attachment_lists_are_refused_at_the_field() {
        let uploads = [upload(0, "a.txt"), upload(1, "b.txt")];
        let refused = |body: Value| plan(Some(&body), &uploads, &[], LIMITS).unwrap_err();
        // A part nobody names.
        let e = refused(serde_json::json!([{"id": 0}]));
        assert_eq!(e.path, ["files[1]"]);
        // An entry naming nothing.
        let e = refused(serde_json::json!([{"id": 0}, {"id": 1}, {"id": 7}]));
        assert_eq!(e.path, ["attachments", "2", "id"]);
        // Twice the same part.
        let e = refused(serde_json::json!([{"id": 0}, {"id": 0}]));
        assert_eq!(e.code, "ATTACHMENT_DUPLICATE");
        // Alt text past the bound.
        let e = refused(serde_json::json!([{"id": 0, "description": "123456789"}, {"id": 1}]));
        assert_eq!(e.path, ["attachments", "0", "description"]);
        // Not a list.
        assert_eq!(refused(serde_json::json!({})).path, ["attachments"]);
    }

    #[test]
    fn an_edit_keeps_what_it_lists_and_the_bound_counts_both() {
        let kept = |id: u64, name: &str| Attachment {
            id: guildhall_proto::Snowflake::new(id).unwrap(),
            filename: name.to_owned(),
            title: None,
            description: None,
            content_type: None,
            size: 1,
            url: String::new(),
            proxy_url: String::new(),
            height: None,
            width: None,
            flags: None,
        };
        let existing = [kept(900, "old.txt"), kept(901, "gone.txt")];
        let uploads = [upload(0, "new.txt")];
        let body = serde_json::json!([{"id": "900"}, {"id": 0}]);
        let planned = plan(Some(&body), &uploads, &existing, LIMITS).unwrap();
        assert_eq!(planned[0], Planned::Kept(existing[0].clone()));
        assert_eq!(new_names(&planned)[1].1, "new.txt");
        let body = serde_json::json!([{"id": "901", "description": "new alt", "is_spoiler": true}]);
        let planned = plan(Some(&body), &[], &existing, LIMITS).unwrap();
        let Planned::Kept(changed) = &planned[0] else {
            panic!("{planned:?}")
        };
        assert_eq!(changed.description.as_deref(), Some("new alt"));
        assert_eq!(changed.flags, Some(FLAG_IS_SPOILER));
        let spoiled = plan(None, &[upload(0, "SPOILER_x.png")], &[], LIMITS).unwrap();
        assert!(matches!(spoiled[0], Planned::New { spoiler: true, .. }));
        let four = [upload(0, "a"), upload(1, "b")];
        let e = plan(None, &four, &existing, LIMITS).unwrap_err();
        assert_eq!(e.code, "BASE_TYPE_MAX_LENGTH");
    }

    #[test]
    fn embeds_show_the_messages_own_files() {
        let mut file = Attachment {
            id: guildhall_proto::Snowflake::new(5).unwrap(),
            filename: "cat.png".to_owned(),
            title: None,
            description: None,
            content_type: None,
            size: 1,
            url: "http://cdn/attachments/1/5/cat.png".to_owned(),
            proxy_url: "http://cdn/attachments/1/5/cat.png".to_owned(),
            height: Some(2),
            width: Some(3),
            flags: None,
        };
        let embeds = vec![serde_json::json!({
            "image": {"url": "attachment://cat.png"},
            "footer": {"text": "f", "icon_url": "attachment://cat.png"},
            "thumbnail": {"url": "https://elsewhere/x.png"},
        })];
        assert!(check_embed_refs(&embeds, &["cat.png"]).is_ok());
        let e = check_embed_refs(&embeds, &["dog.png"]).unwrap_err();
        assert_eq!(e.path, ["embeds", "0", "image", "url"]);
        let mut shown = embeds.clone();
        resolve_embed_refs(&mut shown, std::slice::from_ref(&file));
        assert_eq!(shown[0]["image"]["url"], file.url.as_str());
        assert_eq!(shown[0]["image"]["width"], 3);
        assert_eq!(shown[0]["footer"]["proxy_icon_url"], file.url.as_str());
        assert_eq!(shown[0]["thumbnail"]["url"], "https://elsewhere/x.png");
        file.filename = "other.png".to_owned();
        let mut unresolved = embeds.clone();
        resolve_embed_refs(&mut unresolved, &[file]);
        assert_eq!(unresolved, embeds);
    }

    #[test]
    fn images_are_sized_from_their_header() {
        // The smallest PNG header: signature, IHDR of 3 x 2.
        let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
        png.extend_from_slice(&[0, 0, 0, 13]);
        png.extend_from_slice(b"IHDR");
        png.extend_from_slice(&3u32.to_be_bytes());
        png.extend_from_slice(&2u32.to_be_bytes());
        png.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(sniff(&png), ("image/png".to_owned(), Some((3, 2))));
    }
}
