"""discord.py, unmodified, with only its base URLs changed."""
import asyncio
import io
import json
import sys
import urllib.request

import discord
from discord import app_commands

base, token, channel_id, owner_token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
discord.http.Route.BASE = f"http://{base}/api/v10"
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = discord.utils.yarl.URL(f"ws://{base}/")

intents = discord.Intents.default()
intents.message_content = True
intents.members = True
client = discord.Client(intents=intents)
tree = app_commands.CommandTree(client)
seen = {}


@tree.command(description="Replies with pong")
@app_commands.describe(text="What to echo", times="How often")
async def echo(interaction: discord.Interaction, text: str, times: app_commands.Range[int, 1, 5] = 1):
    await interaction.response.send_message(text * times)


@tree.context_menu(name="Quote")
async def quote(interaction: discord.Interaction, message: discord.Message):
    await interaction.response.send_message(message.content)


def owner_post(content):
    request = urllib.request.Request(f"http://{base}/api/v10/channels/{channel_id}/messages", method="POST",
                                     data=json.dumps({"content": content}).encode())
    request.add_header("authorization", owner_token)
    request.add_header("content-type", "application/json")
    urllib.request.urlopen(request, timeout=10).read()


def compressors():
    """The server's live compressors: 1 while this bot's socket is open."""
    with urllib.request.urlopen(f"http://{base}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("guildhall_gateway_compressors "):
                return int(line.split()[1])
    return None


@client.event
async def on_ready():
    guild = client.guilds[0]
    # With zstandard installed, discord.py asks for zstd-stream.
    seen.update(compression=discord.utils._ActiveDecompressionContext.COMPRESSION_TYPE,
                compressors=await asyncio.get_running_loop().run_in_executor(None, compressors))
    seen.update(user=str(client.user), guild=guild.name, members=len(guild.members),
                channels=[c.name for c in guild.channels])
    # Registration as bots do it on start: the global tree, then a copy of
    # it for the guild, then read back.
    synced = await tree.sync()
    tree.copy_global_to(guild=guild)
    synced_guild = await tree.sync(guild=guild)
    fetched = await tree.fetch_commands(guild=guild)
    seen.update(synced=sorted(c.name for c in synced), synced_guild=sorted(c.name for c in synced_guild),
                fetched_guild=sorted(c.name for c in fetched),
                echo_options=[o.name for o in next(c for c in synced if c.name == "echo").options])
    sent = await client.get_channel(channel_id).send("hello from discord.py")
    seen["sent"] = str(sent.id)
    # A file, as bots send them (multipart, payload_json, files[0]), read
    # back from the URL the message names; then edited away.
    with_file = await client.get_channel(channel_id).send(
        "a file", file=discord.File(io.BytesIO(b"hello file"), filename="hello file.txt", description="greeting"))
    attachment = with_file.attachments[0]
    seen.update(file_name=attachment.filename, file_size=attachment.size, file_type=attachment.content_type,
                file_description=attachment.description, file_bytes=(await attachment.read()).decode())
    edited = await with_file.edit(attachments=[])
    seen.update(file_after_edit=len(edited.attachments))
    # Threads as bots use them: one started from a message, talked in,
    # archived and read back archived; a forum with a tag, and a post in
    # it carrying the tag and its first message.
    thread = await sent.create_thread(name="py thread")
    await thread.send("in the thread")
    archived = await thread.edit(archived=True)
    listed = [t.id async for t in client.get_channel(channel_id).archived_threads(limit=10)]
    seen.update(thread_id=str(thread.id), thread_archived=archived.archived,
                thread_listed=thread.id in listed,
                thread_history=[m.content async for m in archived.history(limit=5)])
    forum = await guild.create_forum(name="py-forum", available_tags=[discord.ForumTag(name="question")])
    post = await forum.create_thread(name="py post", content="first post", applied_tags=[forum.available_tags[0]])
    seen.update(forum_type=str(forum.type), forum_tags=[t.name for t in forum.available_tags],
                post_tags=[t.name for t in post.thread.applied_tags], post_message=post.message.content,
                post_message_is_thread=post.message.id == post.thread.id)
    await asyncio.get_running_loop().run_in_executor(None, owner_post, "!ping")


@client.event
async def on_message(message):
    if message.content == "!ping":
        seen["got_ping"] = True
        seen["ping_id"] = str(message.id)
        # A reply, as bots answer: message_reference, and the author
        # mentioned (discord.py's default allowed_mentions.replied_user).
        await message.reply("pong")
    elif message.content == "pong":
        seen["got_pong"] = True
        seen["pong_id"] = str(message.id)
        reference = message.reference
        resolved = reference.resolved if reference else None
        seen.update(reply_type=str(message.type),
                    reply_to=str(reference.message_id) if reference else None,
                    reply_resolved=resolved.content if isinstance(resolved, discord.Message) else None,
                    reply_mentions_author=isinstance(resolved, discord.Message)
                    and resolved.author.id in [user.id for user in message.mentions])
        # Reactions and pins as bots use them: the reaction read back from
        # the message, the pin found in the channel's pins, then undone.
        await message.add_reaction("\N{THUMBS UP SIGN}")
        fetched = await message.channel.fetch_message(message.id)
        seen["reactions"] = [[str(r.emoji), r.count, r.me] for r in fetched.reactions]
        await message.pin()
        seen["pins"] = [str(m.id) async for m in message.channel.pins(limit=10)]
        seen["pinned_read_back"] = (await message.channel.fetch_message(message.id)).pinned
        await message.unpin()
        await message.remove_reaction("\N{THUMBS UP SIGN}", client.user)
        seen["reactions_after"] = len((await message.channel.fetch_message(message.id)).reactions)
        print(json.dumps(seen), flush=True)
        await client.close()


async def main():
    try:
        await asyncio.wait_for(client.start(token), timeout=60)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)

asyncio.run(main())
