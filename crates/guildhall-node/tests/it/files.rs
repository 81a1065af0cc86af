//! Files on messages: `multipart/form-data` uploads with `payload_json`
//! and `files[n]`, the Attachment object in the answer, the gateway and
//! history, the CDN route serving the bytes back, edits that keep or
//! drop attachments, and bad input refused with nothing stored.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::{Client, TestNode};
use guildhall_limits::Limits;
use serde_json::{Value, json};

const BOUNDARY: &str = "guildhall-test-boundary-7d1f";

/// One part: (name, file name, bytes).
pub(crate) type Part<'a> = (&'a str, Option<&'a str>, &'a [u8]);

/// A `multipart/form-data` body of `parts`, built by hand so a test can
/// also send what no client library would.
pub(crate) fn multipart(parts: &[Part<'_>]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, filename, bytes) in parts {
        body.extend_from_slice(format!("--{BOUNDARY}\r\n").as_bytes());
        match filename {
            Some(filename) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// (status, JSON) of a multipart request; `token` `None` sends none.
pub(crate) async fn send_form(
    node: &TestNode,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Vec<u8>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = node
        .http
        .request(method, format!("{}{path}", node.base))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(body);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bot {token}"));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The smallest PNG header: a 3 x 2 image as far as its header says.
fn png_3x2() -> Vec<u8> {
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];
    png.extend_from_slice(&[0, 0, 0, 13]);
    png.extend_from_slice(b"IHDR");
    png.extend_from_slice(&3u32.to_be_bytes());
    png.extend_from_slice(&2u32.to_be_bytes());
    png.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
    png
}

#[tokio::test]
async fn files_are_uploaded_announced_served_and_edited_away() {
    let limits = Limits {
        attachment_bytes_max: 4096,
        upload_request_bytes_max: 16 * 1024,
        message_attachments_max: 3,
        ..Limits::default()
    };
    let node = TestNode::with_limits(limits).await;
    let (owner, _) = node.register("owner").await;
    let (guild_id, channel) = node.guild(&owner, "files").await;
    let code = node.invite(&owner, &channel).await;
    let (member, member_id) = node.register("member").await;
    let (status, _) = node
        .call("POST", &format!("/invites/{code}"), Some(&member), None)
        .await;
    assert_eq!(status, 200);
    let mut watcher = Client::connect(&node.ws).await;
    // GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT
    watcher.identify(&member, 1 | (1 << 9) | (1 << 15)).await;
    let path = format!("/channels/{channel}/messages");

    // Two files, the first named by `attachments` with alt text, the
    // second under a new name.
    let png = png_3x2();
    let payload = json!({
        "content": "look",
        "attachments": [
            {"id": 0, "description": "a cat", "title": "Cat"},
            {"id": "1", "filename": "notes 2.txt"}
        ]
    })
    .to_string();
    let (status, message) = send_form(
        &node,
        "POST",
        &path,
        Some(&owner),
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("my cat.png"), &png),
            ("files[1]", Some("x.bin"), b"hello world"),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["content"], "look");
    let attachments = message["attachments"].as_array().unwrap().clone();
    assert_eq!(attachments.len(), 2, "{message}");
    let cat = &attachments[0];
    assert_eq!(cat["filename"], "my_cat.png");
    assert_eq!(cat["description"], "a cat");
    assert_eq!(cat["title"], "Cat");
    assert_eq!(cat["content_type"], "image/png");
    assert_eq!(cat["size"], png.len());
    assert_eq!(
        (cat["width"].clone(), cat["height"].clone()),
        (json!(3), json!(2))
    );
    let cat_id = cat["id"].as_str().unwrap();
    let cat_url = cat["url"].as_str().unwrap();
    let unsigned = format!(
        "{}/attachments/{channel}/{cat_id}/my_cat.png",
        node.base.trim_end_matches("/api/v10")
    );
    assert!(cat_url.starts_with(&format!("{unsigned}?ex=")), "{cat_url}");
    assert!(
        cat_url.contains("&is=") && cat_url.contains("&hm="),
        "{cat_url}"
    );
    assert_eq!(cat["proxy_url"], cat["url"]);
    let notes = &attachments[1];
    assert_eq!(notes["filename"], "notes_2.txt");
    assert_eq!(notes["content_type"], "text/plain; charset=utf-8");
    assert_eq!(notes["size"], 11);
    assert!(notes.get("width").is_none(), "{notes}");

    // The gateway and the history carry the same attachments.
    let created = watcher.dispatch("MESSAGE_CREATE").await;
    assert_eq!(created["d"]["attachments"], message["attachments"]);
    let history = node.history(&member, &channel).await;
    assert_eq!(history[0]["attachments"], message["attachments"]);

    // The CDN serves the bytes, typed by what they are.
    let served = node.http.get(cat_url).send().await.unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.headers()["content-type"], "image/png");
    assert_eq!(served.headers()["etag"], format!("\"{cat_id}\""));
    assert_eq!(served.bytes().await.unwrap().as_ref(), png.as_slice());
    let notes_url = notes["url"].as_str().unwrap();
    let served = node.http.get(notes_url).send().await.unwrap();
    assert_eq!(served.text().await.unwrap(), "hello world");
    // One range of it (206), a range past its end (416), HEAD, and a
    // revalidation by ETag (304), as browsers and media players ask.
    let part = node
        .http
        .get(notes_url)
        .header("range", "bytes=6-")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(part.headers()["content-range"], "bytes 6-10/11");
    assert_eq!(part.headers()["content-type"], "text/plain; charset=utf-8");
    assert_eq!(part.text().await.unwrap(), "world");
    let past = node
        .http
        .get(notes_url)
        .header("range", "bytes=11-")
        .send()
        .await
        .unwrap();
    assert_eq!(past.status(), 416);
    assert_eq!(past.headers()["content-range"], "bytes */11");
    let head = node.http.head(cat_url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["content-length"],
        png.len().to_string().as_str()
    );
    assert_eq!(head.headers()["accept-ranges"], "bytes");
    let again = node
        .http
        .get(cat_url)
        .header("if-none-match", format!("\"{cat_id}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 304);
    // Unsigned, forged or signed for another file: nothing.
    for refused in [
        unsigned.clone(),
        cat_url.replace("&hm=", "&hm=00"),
        notes_url.replace("notes_2.txt", "my_cat.png"),
    ] {
        let answer = node.http.get(&refused).send().await.unwrap();
        assert_eq!(answer.status(), 404, "{refused}");
    }
    // refresh-urls signs any of this server's attachment URLs afresh.
    let (status, refreshed) = node
        .call(
            "POST",
            "/attachments/refresh-urls",
            Some(&member),
            Some(json!({"attachment_urls": [unsigned, "https://elsewhere.example/x.png"]})),
        )
        .await;
    assert_eq!(status, 200, "{refreshed}");
    let renewed = refreshed["refreshed_urls"][0]["refreshed"]
        .as_str()
        .unwrap();
    assert_eq!(
        refreshed["refreshed_urls"][0]["original"],
        unsigned.as_str()
    );
    assert_eq!(node.http.get(renewed).send().await.unwrap().status(), 200);
    assert_eq!(
        refreshed["refreshed_urls"][1]["refreshed"],
        "https://elsewhere.example/x.png"
    );
    let (status, _) = node
        .call(
            "POST",
            "/attachments/refresh-urls",
            None,
            Some(json!({"attachment_urls": []})),
        )
        .await;
    assert_eq!(status, 401);
    // A name that is not the stored one, or another channel, is nothing.
    let wrong = cat_url.replace("my_cat.png", "other.png");
    assert_eq!(node.http.get(wrong).send().await.unwrap().status(), 404);

    // An edit that lists the first keeps it alone, and adds a new part.
    let message_id = message["id"].as_str().unwrap();
    let payload = json!({"attachments": [{"id": cat_id}, {"id": 0}]}).to_string();
    let (status, edited) = send_form(
        &node,
        "PATCH",
        &format!("{path}/{message_id}"),
        Some(&owner),
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("more.txt"), b"more"),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    let names: Vec<&str> = edited["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["filename"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["my_cat.png", "more.txt"]);
    assert_eq!(edited["attachments"][0], message["attachments"][0]);
    let update = watcher.dispatch("MESSAGE_UPDATE").await;
    assert_eq!(update["d"]["attachments"], edited["attachments"]);
    // The file the edit dropped is deleted from the blob store.
    let notes_gone = notes_url.to_owned();
    crate::common::until("the dropped file deleted", 200, async || {
        node.http.get(&notes_gone).send().await.unwrap().status() == 404
    })
    .await;
    assert_eq!(
        node.http.get(cat_url).send().await.unwrap().status(),
        200,
        "the kept file stays"
    );
    // A JSON edit with `attachments: []` drops them all; content stays.
    let (status, edited) = node
        .call(
            "PATCH",
            &format!("{path}/{message_id}"),
            Some(&owner),
            Some(json!({"attachments": []})),
        )
        .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["attachments"], json!([]));
    assert_eq!(edited["content"], "look");

    // Deleting a message deletes its files; a bulk delete too.
    let (status, doomed) = send_form(
        &node,
        "POST",
        &path,
        Some(&owner),
        multipart(&[("files[0]", Some("doomed.txt"), b"doomed")]),
    )
    .await;
    assert_eq!(status, 200, "{doomed}");
    let doomed_url = doomed["attachments"][0]["url"].as_str().unwrap().to_owned();
    assert_eq!(
        node.http.get(&doomed_url).send().await.unwrap().status(),
        200
    );
    let (status, _) = node
        .call(
            "DELETE",
            &format!("{path}/{}", doomed["id"].as_str().unwrap()),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 204);
    crate::common::until("a deleted message's file deleted", 200, async || {
        node.http.get(&doomed_url).send().await.unwrap().status() == 404
    })
    .await;
    let mut bulk = Vec::new();
    for name in ["one.txt", "two.txt"] {
        let (status, sent) = send_form(
            &node,
            "POST",
            &path,
            Some(&owner),
            multipart(&[("files[0]", Some(name), b"bulk")]),
        )
        .await;
        assert_eq!(status, 200, "{sent}");
        bulk.push(sent);
    }
    let (status, _) = node
        .call(
            "POST",
            &format!("{path}/bulk-delete"),
            Some(&owner),
            Some(json!({"messages": [bulk[0]["id"], bulk[1]["id"]]})),
        )
        .await;
    assert_eq!(status, 204);
    for sent in &bulk {
        let url = sent["attachments"][0]["url"].as_str().unwrap().to_owned();
        crate::common::until("a bulk-deleted message's file deleted", 200, async || {
            node.http.get(&url).send().await.unwrap().status() == 404
        })
        .await;
    }
    assert!(node.metric("guildhall_blobs_deleted_total").await >= 4);

    // Deleting a channel deletes its files.
    let (status, doomed_channel) = node
        .call(
            "POST",
            &format!("/guilds/{guild_id}/channels"),
            Some(&owner),
            Some(json!({"name": "doomed"})),
        )
        .await;
    assert_eq!(status, 200, "{doomed_channel}");
    let doomed_channel = doomed_channel["id"].as_str().unwrap();
    let (status, sent) = send_form(
        &node,
        "POST",
        &format!("/channels/{doomed_channel}/messages"),
        Some(&owner),
        multipart(&[("files[0]", Some("in-channel.txt"), b"x")]),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let in_channel = sent["attachments"][0]["url"].as_str().unwrap().to_owned();
    let (status, _) = node
        .call(
            "DELETE",
            &format!("/channels/{doomed_channel}"),
            Some(&owner),
            None,
        )
        .await;
    assert_eq!(status, 200);
    crate::common::until("a deleted channel's files deleted", 200, async || {
        node.http.get(&in_channel).send().await.unwrap().status() == 404
    })
    .await;

    // A message of files alone, as form fields without payload_json.
    let (status, bare) = send_form(
        &node,
        "POST",
        &path,
        Some(&member),
        multipart(&[("files[0]", Some("only.txt"), b"only")]),
    )
    .await;
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["content"], "");
    assert_eq!(bare["attachments"][0]["filename"], "only.txt");
    let (status, fields) = send_form(
        &node,
        "POST",
        &path,
        Some(&member),
        multipart(&[("content", None, b"123"), ("files[0]", Some("f.txt"), b"f")]),
    )
    .await;
    assert_eq!(status, 200, "{fields}");
    assert_eq!(fields["content"], "123");

    // Bad input: Discord's error, and nothing stored.
    let stored = node.history(&owner, &channel).await.len();
    let big = vec![b'a'; 5000];
    let refusals: Vec<(Vec<u8>, u16, Value)> = vec![
        // A file over attachment_bytes_max.
        (
            multipart(&[("files[0]", Some("big.txt"), &big)]),
            413,
            json!(40005),
        ),
        // More files than message_attachments_max.
        (
            multipart(&[
                ("files[0]", Some("a"), b"a"),
                ("files[1]", Some("b"), b"b"),
                ("files[2]", Some("c"), b"c"),
                ("files[3]", Some("d"), b"d"),
            ]),
            400,
            json!(50035),
        ),
        // A part that no entry of `attachments` names.
        (
            multipart(&[
                ("payload_json", None, br#"{"attachments":[{"id":0}]}"#),
                ("files[0]", Some("a"), b"a"),
                ("files[1]", Some("b"), b"b"),
            ]),
            400,
            json!(50035),
        ),
        // An entry naming no part.
        (
            multipart(&[
                ("payload_json", None, br#"{"attachments":[{"id":5}]}"#),
                ("files[0]", Some("a"), b"a"),
            ]),
            400,
            json!(50035),
        ),
        // payload_json that is not JSON.
        (
            multipart(&[
                ("payload_json", None, b"{not json"),
                ("files[0]", Some("a"), b"a"),
            ]),
            400,
            json!(50109),
        ),
        // A body that is not multipart at all under the multipart type.
        (b"garbage without a boundary".to_vec(), 400, json!(50035)),
    ];
    for (body, status_wanted, code) in refusals {
        let (status, answer) = send_form(&node, "POST", &path, Some(&member), body).await;
        assert_eq!(status, status_wanted, "{answer}");
        assert_eq!(answer["code"], code, "{answer}");
    }
    let (status, answer) = send_form(
        &node,
        "POST",
        &path,
        Some(&member),
        multipart(&[
            (
                "payload_json",
                None,
                br#"{"attachments":[{"id":0},{"id":1}]}"#,
            ),
            ("files[0]", Some("a"), b"a"),
            ("files[1]", Some("b"), b"b"),
        ])
        .into_iter()
        .take(40)
        .collect(),
    )
    .await;
    assert_eq!(status, 400, "a truncated body: {answer}");
    // Unauthenticated: refused before the body is read.
    let (status, _) = send_form(
        &node,
        "POST",
        &path,
        None,
        multipart(&[("files[0]", Some("a"), b"a")]),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(node.history(&owner, &channel).await.len(), stored);

    // Without ATTACH_FILES in the channel, text still goes and files not.
    let attach = guildhall_proto::permissions::ATTACH_FILES.to_string();
    let (status, body) = node
        .call(
            "PUT",
            &format!("/channels/{channel}/permissions/{member_id}"),
            Some(&owner),
            Some(json!({"type": 1, "deny": attach})),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, answer) = send_form(
        &node,
        "POST",
        &path,
        Some(&member),
        multipart(&[("files[0]", Some("a"), b"a")]),
    )
    .await;
    assert_eq!(
        (status, answer["code"].clone()),
        (403, json!(50013)),
        "{answer}"
    );
    let (status, _) = node
        .post_message(&member, &channel, json!({"content": "text"}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn webhooks_take_files_and_embeds_show_the_messages_own() {
    let node = TestNode::start().await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "hooks").await;
    let (status, hook) = node
        .call(
            "POST",
            &format!("/channels/{channel}/webhooks"),
            Some(&owner),
            Some(json!({"name": "poster"})),
        )
        .await;
    assert_eq!(status, 200, "{hook}");
    let execute = format!(
        "/webhooks/{}/{}?wait=true",
        hook["id"].as_str().unwrap(),
        hook["token"].as_str().unwrap()
    );
    let png = png_3x2();
    let payload = json!({
        "content": "from a hook",
        "embeds": [{"title": "t", "image": {"url": "attachment://card.png"}}],
        "attachments": [{"id": 0, "description": "card", "is_spoiler": true}]
    })
    .to_string();
    let (status, message) = send_form(
        &node,
        "POST",
        &execute,
        None,
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("card.png"), &png),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{message}");
    let file = &message["attachments"][0];
    assert_eq!(file["filename"], "card.png");
    assert_eq!(file["flags"], 8, "IS_SPOILER: {file}");
    // The embed shows the message's own file, as Discord rewrites it.
    let image = &message["embeds"][0]["image"];
    assert_eq!(image["url"], file["url"]);
    assert_eq!(image["proxy_url"], file["proxy_url"]);
    assert_eq!(
        (image["width"].clone(), image["height"].clone()),
        (json!(3), json!(2))
    );
    let served = node
        .http
        .get(file["url"].as_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(served.bytes().await.unwrap().as_ref(), png.as_slice());

    // The webhook edits its message's files like a user: keep none, add one.
    let message_id = message["id"].as_str().unwrap();
    let edit = execute.replace("?wait=true", &format!("/messages/{message_id}"));
    let payload = json!({"embeds": [], "attachments": [{"id": 0}]}).to_string();
    let (status, edited) = send_form(
        &node,
        "PATCH",
        &edit,
        None,
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("second.txt"), b"2"),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["attachments"].as_array().unwrap().len(), 1);
    assert_eq!(edited["attachments"][0]["filename"], "second.txt");

    // An embed naming a file the message does not have is refused.
    let payload = json!({
        "embeds": [{"image": {"url": "attachment://missing.png"}}],
    })
    .to_string();
    let stored = node.history(&owner, &channel).await.len();
    let (status, answer) = send_form(
        &node,
        "POST",
        &execute,
        None,
        multipart(&[
            ("payload_json", None, payload.as_bytes()),
            ("files[0]", Some("present.png"), &png),
        ]),
    )
    .await;
    assert_eq!(
        (status, answer["code"].clone()),
        (400, json!(50035)),
        "{answer}"
    );
    assert!(
        answer["errors"]["embeds"]["0"]["image"]["url"].is_object(),
        "{answer}"
    );
    let (status, answer) = node
        .post_message(
            &owner,
            &channel,
            json!({"content": "x", "embeds": [{"thumbnail": {"url": "attachment://nope.png"}}]}),
        )
        .await;
    assert_eq!(
        (status, answer["code"].clone()),
        (400, json!(50035)),
        "{answer}"
    );
    assert_eq!(node.history(&owner, &channel).await.len(), stored);
}

#[tokio::test]
async fn attachment_urls_expire_and_are_refreshed() {
    let node = TestNode::with_limits(Limits {
        attachment_url_ttl_ms: 2_000,
        ..Limits::default()
    })
    .await;
    let (owner, _) = node.register("owner").await;
    let (_, channel) = node.guild(&owner, "expiring").await;
    let (status, message) = send_form(
        &node,
        "POST",
        &format!("/channels/{channel}/messages"),
        Some(&owner),
        multipart(&[("files[0]", Some("brief.txt"), b"brief")]),
    )
    .await;
    assert_eq!(status, 200, "{message}");
    let url = message["attachments"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    // Valid for one to two seconds after it was shown, then refused.
    crate::common::until("the URL to expire", 100, async || {
        node.http.get(&url).send().await.unwrap().status() == 404
    })
    .await;
    let (status, refreshed) = node
        .call(
            "POST",
            "/attachments/refresh-urls",
            Some(&owner),
            Some(json!({"attachment_urls": [url]})),
        )
        .await;
    assert_eq!(status, 200, "{refreshed}");
    let renewed = refreshed["refreshed_urls"][0]["refreshed"]
        .as_str()
        .unwrap();
    let served = node.http.get(renewed).send().await.unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(served.text().await.unwrap(), "brief");
}
