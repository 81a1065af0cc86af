"""discord.py, unmodified, answering interactions a user creates.

Usage: discord_py_interactions.py HOST:PORT BOT_TOKEN CHANNEL_ID OWNER_TOKEN
The bot registers its commands with `tree.sync()` (globally and for the
guild). The owner then acts as Discord's own client does: a gateway session
of its own (its `session_id` goes into every `POST /interactions`, and
INTERACTION_SUCCESS, INTERACTION_MODAL_CREATE and MESSAGE_CREATE arrive on
it) and plain HTTP with its user token. It invokes slash commands (type 2),
clicks a button and picks from a string select of the bot's
`discord.ui.View` (type 3), and submits the `discord.ui.Modal` a button
opened (type 5); discord.py's callbacks answer with `send_message`,
`defer` + `followup.send` + `edit_original_response`, `edit_message` and
`send_modal`. What the owner then reads back over REST (and what a second
member may not read: the ephemeral response) is printed as one JSON line.
"""
import asyncio
import io
import json
import secrets
import sys

import aiohttp
import discord
from discord import app_commands

base, token, channel_id, owner_token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rest = f"http://{base}/api/v10"
discord.http.Route.BASE = rest
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = discord.utils.yarl.URL(f"ws://{base}/")

client = discord.Client(intents=discord.Intents.default())
tree = app_commands.CommandTree(client)
seen = {}
LOADING, EPHEMERAL = 128, 64


class Feedback(discord.ui.Modal, title="Feedback"):
    # A label around a text input (the current form) and a bare text input
    # (which discord.py wraps in an action row).
    subject = discord.ui.Label(text="Subject", component=discord.ui.TextInput(custom_id="feedback:subject",
                                                                              max_length=40))
    body = discord.ui.TextInput(label="Body", custom_id="feedback:body", style=discord.TextStyle.paragraph,
                                required=False)

    async def on_submit(self, interaction: discord.Interaction):
        seen.update(modal_subject=self.subject.component.value, modal_body=self.body.value)
        await interaction.response.send_message(f"thanks for {self.subject.component.value}")


class Panel(discord.ui.View):
    @discord.ui.button(label="Press", custom_id="panel:press", style=discord.ButtonStyle.primary)
    async def press(self, interaction: discord.Interaction, button: discord.ui.Button):
        seen["button_user"] = str(interaction.user.id)
        await interaction.response.edit_message(content=f"pressed by {interaction.user.name}")

    @discord.ui.select(custom_id="panel:pick", min_values=1, max_values=2, options=[
        discord.SelectOption(label="Alpha", value="a"), discord.SelectOption(label="Beta", value="b"),
        discord.SelectOption(label="Gamma", value="c")])
    async def pick(self, interaction: discord.Interaction, select: discord.ui.Select):
        seen["select_values"] = select.values
        await interaction.response.send_message(f"picked {','.join(select.values)}")

    @discord.ui.button(label="Feedback", custom_id="panel:form")
    async def form(self, interaction: discord.Interaction, button: discord.ui.Button):
        await interaction.response.send_modal(Feedback(custom_id="feedback"))
        seen["modal_sent"] = True


def scope(interaction):
    return "guild" if interaction.data.get("guild_id") == str(interaction.guild_id) else "global"


@tree.command(description="Says hello")
@app_commands.describe(text="Whom to greet")
async def hello(interaction: discord.Interaction, text: str):
    # A guild command's data names its guild; a global one's does not.
    seen.update(hello_option=text, hello_scope=scope(interaction))
    # With a file, as bots answer with one (multipart, payload_json).
    response = await interaction.response.send_message(
        f"hello {text}", file=discord.File(io.BytesIO(b"greeting"), filename="greeting.txt"))
    seen["hello_response_id"] = str(response.message_id)


@tree.command(description="Thinks, then answers")
async def later(interaction: discord.Interaction):
    await interaction.response.defer()
    seen.update(later_scope=scope(interaction), later_deferred=interaction.response.type.name)
    followup = await interaction.followup.send("followup", wait=True)
    original = await interaction.edit_original_response(content="edited original")
    seen.update(followup_id=str(followup.id), original_id=str(original.id))


@tree.command(description="Shows a panel")
async def panel(interaction: discord.Interaction):
    await interaction.response.send_message("panel", view=Panel())
    seen["panel_sent"] = True


@tree.command(description="Answers only you")
async def secret(interaction: discord.Interaction):
    await interaction.response.send_message("for your eyes only", ephemeral=True)


class User:
    """The owner as Discord's client: a gateway session and plain HTTP."""

    def __init__(self, http, user_token):
        self.http, self.token, self.events, self.changed = http, user_token, [], asyncio.Event()

    async def call(self, method, path, body=None, token=None):
        async with self.http.request(method, f"{rest}{path}", json=body,
                                     headers={"authorization": token or self.token}) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text else None)

    async def connect(self):
        self.ws = await self.http.ws_connect(f"ws://{base}/?v=10&encoding=json")
        hello = await self.ws.receive_json()
        await self.ws.send_json({"op": 2, "d": {"token": self.token, "intents": 1 | 1 << 9 | 1 << 15,
                                                "properties": {"os": "linux", "browser": "conformance",
                                                               "device": "conformance"}}})
        self.seq = None
        ready = await self.next("READY")
        self.session_id, self.id = ready["session_id"], ready["user"]["id"]
        asyncio.create_task(self.heartbeat(hello["d"]["heartbeat_interval"] / 1000))

    async def heartbeat(self, interval_s):
        while not self.ws.closed:
            await asyncio.sleep(interval_s)
            await self.ws.send_json({"op": 1, "d": self.seq})

    async def next(self, name):
        while True:
            msg = await self.ws.receive_json()
            self.seq = msg.get("s") or self.seq
            if msg.get("t") == name:
                asyncio.create_task(self.read())
                return msg["d"]

    async def read(self):
        async for frame in self.ws:
            msg = json.loads(frame.data)
            self.seq = msg.get("s") or self.seq
            if msg.get("op") == 0:
                self.events.append((msg["t"], msg["d"]))
                self.changed.set()

    async def wait_for(self, match, timeout=15):
        """The first event `match(name, data)` accepts, seen or to come."""
        async def scan():
            while True:
                for name, data in self.events:
                    if match(name, data):
                        return name, data
                self.changed.clear()
                await self.changed.wait()
        return await asyncio.wait_for(scan(), timeout)

    async def interact(self, kind, data, application_id, guild_id, message_id=None):
        """POST /interactions; the outcome the session hears of, and the interaction's id."""
        nonce = str(secrets.randbelow(10 ** 18))
        body = {"type": kind, "application_id": str(application_id), "guild_id": str(guild_id),
                "channel_id": str(channel_id), "session_id": self.session_id, "nonce": nonce, "data": data}
        if message_id:
            body["message_id"] = str(message_id)
        status, answer = await self.call("POST", "/interactions", body)
        if status != 204:
            return f"HTTP {status} {answer}", None
        created = (await self.wait_for(lambda n, d: n == "INTERACTION_CREATE" and d.get("nonce") == nonce))[1]
        name, _ = await self.wait_for(lambda n, d: n in ("INTERACTION_SUCCESS", "INTERACTION_FAILURE")
                                      and d.get("nonce") == nonce)
        return name, created["id"]

    async def message(self, content):
        """The channel's message with this content, read as history (REST)."""
        _, history = await self.call("GET", f"/channels/{channel_id}/messages?limit=50")
        return next((m for m in history if m["content"] == content), None)


async def until(key, timeout=10):
    """The bot's side is done with a step (its view or modal is stored
    once its callback's HTTP answer is back, after the user heard of it)."""
    for _ in range(int(timeout / 0.05)):
        if key in seen:
            return
        await asyncio.sleep(0.05)


def metadata_ok(message, kind, user_id, interaction_id, **extra):
    meta = (message or {}).get("interaction_metadata") or {}
    return meta.get("type") == kind and meta.get("user", {}).get("id") == user_id \
        and meta.get("id") == interaction_id and all(meta.get(k) == v for k, v in extra.items())


async def as_user(guild):
    app_id = client.application_id
    async with aiohttp.ClientSession() as http:
        user = User(http, owner_token)
        await user.connect()
        # What the client knows of the commands: the guild's (the copy of
        # the global tree) and the global ones, with id and version.
        _, guild_commands = await user.call("GET", f"/applications/{app_id}/guilds/{guild.id}/commands")
        _, global_commands = await user.call("GET", f"/applications/{app_id}/commands")
        by_name = {c["name"]: c for c in guild_commands}
        global_by_name = {c["name"]: c for c in global_commands}

        def command(c, options=()):
            return {"id": c["id"], "name": c["name"], "type": 1, "version": c["version"], "options": list(options)}

        # A guild command: send_message.
        outcome, hello_id = await user.interact(
            2, command(by_name["hello"], [{"type": 3, "name": "text", "value": "world"}]), app_id, guild.id)
        await until("hello_response_id")
        reply = await user.message("hello world")
        seen.update(hello_outcome=outcome, hello_seen=bool(reply),
                    hello_metadata=metadata_ok(reply, 2, user.id, hello_id, name="hello", command_type=1),
                    hello_author_is_bot=(reply or {}).get("author", {}).get("id") == str(client.user.id),
                    hello_same_message=(reply or {}).get("id") == seen.get("hello_response_id"))
        files = (reply or {}).get("attachments") or []
        if files:
            async with http.get(files[0]["url"]) as served:
                seen["hello_file"] = [files[0]["filename"], await served.text()]

        # A global command: defer, a followup, then the original edited.
        outcome, later_id = await user.interact(2, command(global_by_name["later"]), app_id, guild.id)
        await user.wait_for(lambda n, d: n == "MESSAGE_UPDATE" and d.get("content") == "edited original")
        await until("original_id")
        original, followup = await user.message("edited original"), await user.message("followup")
        # First "thinking…": an empty message flagged LOADING.
        _, thinking = await user.wait_for(lambda n, d: n == "MESSAGE_CREATE"
                                          and (d.get("interaction_metadata") or {}).get("id") == later_id)
        seen.update(later_outcome=outcome, deferred_edited=bool(original),
                    thinking_loading=bool(thinking["flags"] & LOADING) and thinking["content"] == ""
                    and thinking["id"] == (original or {}).get("id"),
                    deferred_loading=bool((original or {}).get("flags", 0) & LOADING),
                    deferred_same_message=(original or {}).get("id") == seen.get("original_id"),
                    followup_seen=followup is not None and followup["id"] == seen.get("followup_id"),
                    followup_metadata=metadata_ok(followup, 2, user.id, later_id,
                                                  original_response_message_id=(original or {}).get("id")))

        # A View: a button (edit_message), a string select (send_message),
        # a button opening a Modal whose submit answers.
        outcome, _ = await user.interact(2, command(by_name["panel"]), app_id, guild.id)
        await until("panel_sent")
        panel = await user.message("panel")
        seen.update(panel_outcome=outcome, panel_components=[
            [(c["type"], c.get("custom_id")) for c in row["components"]] for row in (panel or {}).get("components", [])])
        outcome, press_id = await user.interact(3, {"component_type": 2, "custom_id": "panel:press"},
                                                app_id, guild.id, panel["id"])
        _, pressed = await user.call("GET", f"/channels/{channel_id}/messages/{panel['id']}")
        seen.update(button_outcome=outcome, button_content=pressed.get("content"),
                    button_kept_view=len(pressed.get("components", [])) == 2)
        outcome, pick_id = await user.interact(3, {"component_type": 3, "custom_id": "panel:pick",
                                                   "values": ["b", "c"]}, app_id, guild.id, panel["id"])
        picked = await user.message("picked b,c")
        seen.update(select_outcome=outcome, select_reply=bool(picked),
                    select_metadata=metadata_ok(picked, 3, user.id, pick_id, interacted_message_id=panel["id"]))
        outcome, form_id = await user.interact(3, {"component_type": 2, "custom_id": "panel:form"},
                                               app_id, guild.id, panel["id"])
        _, shown = await user.wait_for(lambda n, d: n == "INTERACTION_MODAL_CREATE" and d.get("id") == form_id)
        seen.update(form_outcome=outcome, modal_shown=shown["custom_id"], modal_title=shown["title"],
                    modal_component_types=[c["type"] for c in shown["components"]])
        await until("modal_sent")
        # The client's submit mirrors what was shown: a label's component,
        # an action row's components.
        values = {"feedback:subject": "the docs", "feedback:body": "read them twice"}
        submitted = []
        for item in shown["components"]:
            if item["type"] == 18:
                inner = item["component"]
                submitted.append({"type": 18, "component": {"type": inner["type"], "custom_id": inner["custom_id"],
                                                            "value": values[inner["custom_id"]]}})
            else:
                submitted.append({"type": 1, "components": [
                    {"type": c["type"], "custom_id": c["custom_id"], "value": values[c["custom_id"]]}
                    for c in item["components"]]})
        outcome, submit_id = await user.interact(5, {"id": form_id, "custom_id": shown["custom_id"],
                                                     "components": submitted}, app_id, guild.id)
        thanks = await user.message("thanks for the docs")
        seen.update(modal_outcome=outcome, modal_reply=bool(thanks),
                    modal_metadata=metadata_ok(thanks, 5, user.id, submit_id) and
                    thanks["interaction_metadata"].get("triggering_interaction_metadata", {}).get("id") == form_id)

        # Ephemeral: the invoker's session gets it; history has it for
        # nobody; a second member cannot read it.
        outcome, secret_id = await user.interact(2, command(by_name["secret"]), app_id, guild.id)
        _, secret_message = await user.wait_for(lambda n, d: n == "MESSAGE_CREATE"
                                                and d.get("content") == "for your eyes only")
        name = f"bystander{secrets.randbelow(10 ** 6)}"
        _, other = await user.call("POST", "/auth/register", {"username": name, "password": "bystander-password"})
        _, invite = await user.call("POST", f"/channels/{channel_id}/invites", {})
        joined, _ = await user.call("POST", f"/invites/{invite['code']}", token=other["token"])
        other_status, other_history = await user.call("GET", f"/channels/{channel_id}/messages?limit=50",
                                                      token=other["token"])
        other_read, _ = await user.call("GET", f"/channels/{channel_id}/messages/{secret_message['id']}",
                                        token=other["token"])
        _, own_history = await user.call("GET", f"/channels/{channel_id}/messages?limit=50")
        seen.update(secret_outcome=outcome, secret_flags=secret_message.get("flags"),
                    secret_metadata=metadata_ok(secret_message, 2, user.id, secret_id, name="secret"),
                    bystander_joined=joined == 200 and other_status == 200
                    and any(m["content"] == "hello world" for m in other_history),
                    secret_in_bystander_history=any(m["id"] == secret_message["id"] for m in other_history),
                    secret_in_own_history=any(m["id"] == secret_message["id"] for m in own_history),
                    secret_bystander_read=other_read)
        await user.ws.close()


@client.event
async def on_ready():
    guild = client.guilds[0]
    try:
        synced = await tree.sync()
        tree.copy_global_to(guild=guild)
        synced_guild = await tree.sync(guild=guild)
        seen.update(synced=sorted(c.name for c in synced), synced_guild=sorted(c.name for c in synced_guild))
        await as_user(guild)
    except Exception as error:  # reported, not raised: the JSON line still prints
        seen["error"] = repr(error)
    print(json.dumps(seen), flush=True)
    await client.close()


async def main():
    try:
        await asyncio.wait_for(client.start(token), timeout=80)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)
    if "error" in seen:
        sys.exit(1)

asyncio.run(main())
