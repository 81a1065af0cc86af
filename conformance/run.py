"""Drives the library conformance checks against a running server.

Usage: run.py HOST:PORT DATA_DIR GUILDHALL_BIN NODE_MODULES_DIR
Creates an owner, a guild per library, a bot per library (via the CLI, which
talks to the running server), then runs each library's bot and checks what it
reports. Exits non-zero on any failure, printing what was seen.
"""
import json
import os
import subprocess
import sys
import urllib.request

base, data_dir, guildhall, node_modules = sys.argv[1:5]
here = os.path.dirname(os.path.abspath(__file__))
rest = f"http://{base}/api/v10"


def call(method, path, token=None, body=None):
    request = urllib.request.Request(f"{rest}{path}", method=method, data=None if body is None else json.dumps(body).encode())
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", token)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


owner = call("POST", "/auth/register", body={"username": "conformance", "password": "conformance-password"})
failures = []
ran = 0  # checks run
for library, command in [
    ("discord.py", [sys.executable, os.path.join(here, "discord_py.py")]),
    ("discord.js", ["node", os.path.join(here, "discord_js.js")]),
    ("hikari", [sys.executable, os.path.join(here, "hikari_bot.py")]),
]:
    guild = call("POST", "/guilds", owner["token"], {"name": f"{library} guild"})
    channel = guild["channels"][0]["id"]
    bot = json.loads(subprocess.check_output(
        [guildhall, "bot", "create", "--name", library.replace(".", ""), "--owner", owner["user_id"],
         "--data-dir", data_dir, "--server", f"http://{base}"]))
    call("POST", f"/oauth2/authorize?client_id={bot['application_id']}&scope=bot", owner["token"],
         {"guild_id": guild["id"], "permissions": "0", "authorize": True})
    # PIN_MESSAGES (1 << 51), which @everyone lacks, for the bots that pin;
    # MANAGE_CHANNELS (1 << 4), CREATE_PUBLIC_THREADS (1 << 35) and
    # SEND_MESSAGES_IN_THREADS (1 << 38) for those that start threads and
    # forums.
    bot_user = call("GET", "/users/@me", f"Bot {bot['token']}")
    pinners = call("POST", f"/guilds/{guild['id']}/roles", owner["token"],
                   {"name": "pinners", "permissions": str((1 << 51) | (1 << 4) | (1 << 35) | (1 << 38))})
    call("PUT", f"/guilds/{guild['id']}/members/{bot_user['id']}/roles/{pinners['id']}", owner["token"])
    env = dict(os.environ, NODE_PATH=node_modules)
    result = subprocess.run(command + [base, bot["token"], channel, owner["token"]],
                            capture_output=True, text=True, timeout=90, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    seen = json.loads(lines[-1]) if lines else {}
    ok = result.returncode == 0 and seen.get("got_ping") and seen.get("got_pong") and seen.get("guild") == f"{library} guild"
    # discord.py and discord.js register application commands on start and
    # read them back; hikari's bot does it over zlib-stream and binary frames.
    if library == "discord.py":
        ok = ok and seen.get("synced") == ["Quote", "echo"] and seen.get("fetched_guild") == ["Quote", "echo"] \
            and seen.get("synced_guild") == ["Quote", "echo"] and seen.get("echo_options") == ["text", "times"] \
            and seen.get("compression") == "zstd-stream" and seen.get("compressors") == 1 \
            and seen.get("reply_type") == "MessageType.reply" and seen.get("reply_to") == seen.get("ping_id") \
            and seen.get("reply_resolved") == "!ping" and seen.get("reply_mentions_author") is True \
            and seen.get("reactions") == [["\N{THUMBS UP SIGN}", 1, True]] \
            and seen.get("pins") == [seen.get("pong_id")] and seen.get("pinned_read_back") is True \
            and seen.get("reactions_after") == 0 \
            and seen.get("file_name") == "hello_file.txt" and seen.get("file_size") == 10 \
            and seen.get("file_type") == "text/plain; charset=utf-8" and seen.get("file_description") == "greeting" \
            and seen.get("file_bytes") == "hello file" and seen.get("file_after_edit") == 0 \
            and seen.get("thread_id") == seen.get("sent") and seen.get("thread_archived") is True \
            and seen.get("thread_listed") is True and seen.get("thread_history") == ["in the thread"] \
            and seen.get("forum_type") == "forum" and seen.get("forum_tags") == ["question"] \
            and seen.get("post_tags") == ["question"] and seen.get("post_message") == "first post" \
            and seen.get("post_message_is_thread") is True
    elif library == "discord.js":
        ok = ok and seen.get("synced") == ["Profile", "echo"] and seen.get("fetched") == ["Profile", "echo"] \
            and seen.get("reply_type") == 19 and seen.get("reply_to") == seen.get("ping_id") \
            and seen.get("replied_user") == seen.get("ping_author") \
            and seen.get("file_name") == "hello.txt" and seen.get("file_size") == 13 \
            and seen.get("file_bytes") == "hello from js" and seen.get("file_description") == "js greeting" \
            and seen.get("thread_id") == seen.get("sent") and seen.get("thread_archived") is True \
            and seen.get("forum_type") == 15 and seen.get("forum_tags") == ["question"] \
            and seen.get("post_tags") == [seen.get("post_tag_expected")] and seen.get("post_starter") == "first js post"
    else:
        # Its socket is the one compressing (zlib-stream) while it runs.
        ok = ok and seen.get("unavailable_guilds") == 1 and "general" in seen.get("channels", []) \
            and seen.get("compressors") == 1
    ran += 1
    print(f"{library}: {'ok' if ok else 'FAILED'} {json.dumps(seen)}")
    if not ok:
        failures.append(library)
        print(result.stdout[-2000:], result.stderr[-4000:], sep="\n")
# Webhooks as integrations use them: by id and token, no bot account.
webhook_expected = {
    "discord.py": ("discord_py_webhook.py", lambda seen: seen.get("author") == "Hooky"
                   and seen.get("author_is_webhook") and seen.get("webhook_id")
                   and seen.get("fetched_content") == "waited" and seen.get("edited_content") == "edited"
                   and seen.get("renamed") == "renamed hook" and seen.get("gone") and seen.get("token_ok")
                   and seen.get("hook_file") == ["report.txt", "a report"]),
    "discord.js": ("discord_js_webhook.js", lambda seen: seen.get("author") == "JsHook"
                   and seen.get("webhook_id") == seen.get("created_id") and seen.get("fetched") == "from discord.js"
                   and seen.get("edited") == "edited by discord.js" and seen.get("renamed") == "js renamed"),
}
for library, (script, check) in webhook_expected.items():
    guild = call("POST", "/guilds", owner["token"], {"name": f"{library} webhooks"})
    runner = [sys.executable] if script.endswith(".py") else ["node"]
    result = subprocess.run(runner + [os.path.join(here, script), base, owner["token"], guild["channels"][0]["id"]],
                            capture_output=True, text=True, timeout=90,
                            env=dict(os.environ, NODE_PATH=node_modules))
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    seen = json.loads(lines[-1]) if lines else {}
    ok = result.returncode == 0 and bool(check(seen))
    ran += 1
    print(f"{library} webhooks: {'ok' if ok else 'FAILED'} {json.dumps(seen)}")
    if not ok:
        failures.append(f"{library} webhooks")
        print(result.stdout[-2000:], result.stderr[-4000:], sep="\n")
# Interactions as a user's client creates them (POST /interactions with its
# user token and gateway session): slash commands, a View's button and
# string select, a Modal, an ephemeral response; the library answers.
interaction_expected = {
    "discord.py": ("discord_py_interactions.py", {
        "synced": ["hello", "later", "panel", "secret"], "synced_guild": ["hello", "later", "panel", "secret"],
        # send_message to a guild command
        "hello_option": "world", "hello_scope": "guild", "hello_outcome": "INTERACTION_SUCCESS",
        "hello_seen": True, "hello_metadata": True, "hello_author_is_bot": True, "hello_same_message": True,
        "hello_file": ["greeting.txt", "greeting"],
        # defer, followup.send, edit_original_response to a global command
        "later_scope": "global", "later_deferred": "deferred_channel_message", "later_outcome": "INTERACTION_SUCCESS",
        "thinking_loading": True, "deferred_edited": True, "deferred_loading": False,
        "deferred_same_message": True, "followup_seen": True, "followup_metadata": True,
        # a View: button → edit_message, string select → send_message
        "panel_outcome": "INTERACTION_SUCCESS",
        "panel_components": [[[2, "panel:press"], [2, "panel:form"]], [[3, "panel:pick"]]],
        "button_outcome": "INTERACTION_SUCCESS", "button_content": "pressed by conformance", "button_kept_view": True,
        "select_values": ["b", "c"], "select_outcome": "INTERACTION_SUCCESS", "select_reply": True,
        "select_metadata": True,
        # button → send_modal, the submit → Modal.on_submit
        "form_outcome": "INTERACTION_SUCCESS", "modal_shown": "feedback", "modal_title": "Feedback",
        "modal_component_types": [18, 1], "modal_subject": "the docs", "modal_body": "read them twice",
        "modal_outcome": "INTERACTION_SUCCESS", "modal_reply": True, "modal_metadata": True,
        # ephemeral: the invoker's session only, in nobody's history
        "secret_outcome": "INTERACTION_SUCCESS", "secret_flags": 64, "secret_metadata": True,
        "bystander_joined": True, "secret_in_bystander_history": False, "secret_in_own_history": False,
        "secret_bystander_read": 404,
    }),
    "discord.js": ("discord_js_interactions.js", {
        # rest.put of the global commands and the guild's
        "synced": ["later", "panel", "secret", "survey"], "synced_guild": ["hello"], "guild_command_guild": True,
        # interaction.reply to the guild command, its option read
        "hello_option": "world", "hello_scope": "guild", "hello_outcome": "INTERACTION_SUCCESS",
        "hello_seen": True, "hello_metadata": True, "hello_author_is_bot": True, "hello_same_message": True,
        "hello_file": ["greeting.txt", "greeting"],
        # deferReply, editReply, followUp to a global command
        "later_scope": "global", "later_deferred": True, "later_outcome": "INTERACTION_SUCCESS",
        "thinking_loading": True, "deferred_edited": True, "deferred_loading": False,
        "deferred_same_message": True, "followup_seen": True, "followup_metadata": True,
        # ActionRowBuilder rows: a button (update), a string select (values)
        "panel_outcome": "INTERACTION_SUCCESS",
        "panel_components": [[[2, "panel:press"], [2, "panel:form"]], [[3, "panel:pick"]]],
        "button_outcome": "INTERACTION_SUCCESS", "button_content": "pressed by conformance",
        "button_kept_rows": True, "button_by_owner": True,
        "select_values": ["b", "c"], "select_outcome": "INTERACTION_SUCCESS", "select_reply": True,
        "select_metadata": True,
        # showModal from a button and from a command; fields.getTextInputValue
        "form_outcome": "INTERACTION_SUCCESS", "modal_shown": "feedback", "modal_title": "Feedback",
        "modal_component_types": [18, 1], "feedback_values": ["the docs", "read them twice"],
        "feedback_from_message": True, "modal_outcome": "INTERACTION_SUCCESS", "modal_reply": True,
        "modal_metadata": True,
        "survey_outcome": "INTERACTION_SUCCESS", "survey_values": ["surveys", ""], "survey_from_message": False,
        "survey_submit_outcome": "INTERACTION_SUCCESS", "survey_reply": True,
        # flags: MessageFlags.Ephemeral: the invoker's session and fetchReply only
        "secret_outcome": "INTERACTION_SUCCESS", "secret_flags": 64, "secret_metadata": True,
        "secret_fetched_flags": 64, "secret_fetched_same": True,
        "bystander_joined": True, "secret_in_bystander_history": False, "secret_in_own_history": False,
        "secret_bystander_read": 404,
    }),
}
for library, (script, expected) in interaction_expected.items():
    guild = call("POST", "/guilds", owner["token"], {"name": f"{library} interactions"})
    bot = json.loads(subprocess.check_output(
        [guildhall, "bot", "create", "--name", library.replace(".", "") + "ix", "--owner", owner["user_id"],
         "--data-dir", data_dir, "--server", f"http://{base}"]))
    call("POST", f"/oauth2/authorize?client_id={bot['application_id']}&scope=bot", owner["token"],
         {"guild_id": guild["id"], "permissions": "0", "authorize": True})
    runner = [sys.executable] if script.endswith(".py") else ["node"]
    result = subprocess.run(runner + [os.path.join(here, script), base, bot["token"], guild["channels"][0]["id"],
                                      owner["token"]], capture_output=True, text=True, timeout=90,
                            env=dict(os.environ, NODE_PATH=node_modules))
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    seen = json.loads(lines[-1]) if lines else {}
    wrong = {key: seen.get(key) for key, value in expected.items() if seen.get(key) != value}
    ok = result.returncode == 0 and not wrong
    ran += 1
    print(f"{library} interactions: {'ok' if ok else 'FAILED'} {json.dumps(seen)}")
    if not ok:
        failures.append(f"{library} interactions")
        print(f"unexpected: {json.dumps(wrong)}", result.stdout[-2000:], result.stderr[-4000:], sep="\n")
# Voice: discord.py (PyNaCl, xchacha20) and discord.js (@discordjs/voice,
# aes-256-gcm) join a voice channel and play; a second participant written
# from the voice documentation (voice_listener.py, aes-256-gcm) receives,
# and must decrypt every packet the bot sent, byte for byte. The voice
# gateway is wss:// (the libraries accept nothing else): the server's TLS
# certificate is trusted through SSL_CERT_FILE / NODE_EXTRA_CA_CERTS only.
def sfu_metrics():
    with urllib.request.urlopen(f"http://{base}/metrics", timeout=10) as response:
        values = {}
        for line in response.read().decode().splitlines():
            # The SFU's counters, and the gateway's and voice role's part of
            # a join (refused, unanswered, retried, given up): what a
            # failed run's line shows of where the join stopped.
            if line.startswith(("guildhall_sfu_", "guildhall_voice_")):
                name, value = line.split()[:2]
                values[name] = float(value)
        return values


voice_ca = os.environ["GUILDHALL_VOICE_CA"]
voice_env = dict(os.environ, NODE_PATH=node_modules, SSL_CERT_FILE=voice_ca, NODE_EXTRA_CA_CERTS=voice_ca)
FRAMES = 150  # 3 s of 20 ms packets
voice_runs = [
    ("discord.py voice", "voicepy", lambda bot, guild, channel: [sys.executable, os.path.join(here, "voice_py.py"), base, bot, channel, str(FRAMES)]),
    ("discord.js voice", "voicejs", lambda bot, guild, channel: ["node", os.path.join(here, "voice_js.js"), base, bot, guild, channel, str(FRAMES)]),
]
for name, bot_name, command in voice_runs:
    guild = call("POST", "/guilds", owner["token"], {"name": f"{name} guild"})
    channel = call("POST", f"/guilds/{guild['id']}/channels", owner["token"], {"name": "Voice", "type": 2})["id"]
    bots = {}
    for who in (bot_name, f"{bot_name}listener"):
        bots[who] = json.loads(subprocess.check_output(
            [guildhall, "bot", "create", "--name", who, "--owner", owner["user_id"],
             "--data-dir", data_dir, "--server", f"http://{base}"]))
        call("POST", f"/oauth2/authorize?client_id={bots[who]['application_id']}&scope=bot", owner["token"],
             {"guild_id": guild["id"], "permissions": "0", "authorize": True})
    before = sfu_metrics()
    listener = subprocess.Popen([sys.executable, os.path.join(here, "voice_listener.py"), base,
                                 bots[f"{bot_name}listener"]["token"], guild["id"], channel, str(FRAMES * 0.02 + 40)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=voice_env)
    first = listener.stdout.readline()
    ready = json.loads(first) if first.startswith("{") else {}
    result = subprocess.run(command(bots[bot_name]["token"], guild["id"], channel),
                            capture_output=True, text=True, timeout=120, env=voice_env)
    try:
        out, err = listener.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        listener.kill()
        out, err = listener.communicate()
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    seen = json.loads(lines[-1]) if lines else {}
    heard_lines = [line for line in out.splitlines() if line.startswith("{")]
    heard = json.loads(heard_lines[-1]) if heard_lines else ready
    after = sfu_metrics()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after if k.endswith("_total")}
    ok = result.returncode == 0 and seen.get("connected") and seen.get("played") == FRAMES \
        and ready.get("ready") and heard.get("frames_distinct") == FRAMES and heard.get("failed") == 0 \
        and heard.get("decrypted") == heard.get("received") \
        and delta.get("guildhall_sfu_auth_failures_total", -1) == 0 \
        and delta.get("guildhall_sfu_decrypted_total", 0) >= FRAMES
    ran += 1
    print(f"{name}: {'ok' if ok else 'FAILED'} {json.dumps(seen)} listener={json.dumps(heard)} sfu={json.dumps(delta)}")
    if not ok:
        failures.append(name)
        print(result.stdout[-2000:], result.stderr[-4000:], out[-2000:], err[-4000:], sep="\n")
print(f"{ran - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
