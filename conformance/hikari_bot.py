"""hikari, unmodified, with only its REST base URL changed.

The gateway URL comes from `GET /gateway/bot`, as for any hikari bot.
hikari asks for `compress=zlib-stream` (zstd only where a zstd module is
installed, which the conformance venv does not do), and sends its payloads
in binary frames.
"""
import asyncio
import json
import sys
import urllib.request

import hikari

base, token, channel_id, owner_token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
bot = hikari.GatewayBot(
    token,
    rest_url=f"http://{base}/api/v10",
    intents=hikari.Intents.ALL_UNPRIVILEGED | hikari.Intents.MESSAGE_CONTENT,
    banner=None,
)
seen = {}


def owner_post(content):
    request = urllib.request.Request(f"http://{base}/api/v10/channels/{channel_id}/messages", method="POST",
                                     data=json.dumps({"content": content}).encode())
    request.add_header("authorization", owner_token)
    request.add_header("content-type", "application/json")
    urllib.request.urlopen(request, timeout=10).read()


@bot.listen()
async def on_ready(event: hikari.ShardReadyEvent) -> None:
    seen.update(user=str(event.my_user), unavailable_guilds=len(event.unavailable_guilds))


def compressors():
    """The server's live deflate compressors: 1 while hikari's zlib-stream socket is open."""
    with urllib.request.urlopen(f"http://{base}/metrics", timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("guildhall_gateway_compressors "):
                return int(line.split()[1])
    return None


@bot.listen()
async def on_guild(event: hikari.GuildAvailableEvent) -> None:
    seen.update(guild=event.guild.name, channels=sorted(c.name for c in event.channels.values()))
    seen["compressors"] = await asyncio.get_running_loop().run_in_executor(None, compressors)
    sent = await bot.rest.create_message(channel_id, "hello from hikari")
    seen["sent"] = str(sent.id)
    await asyncio.get_running_loop().run_in_executor(None, owner_post, "!ping")


@bot.listen()
async def on_message(event: hikari.GuildMessageCreateEvent) -> None:
    if event.content == "!ping":
        seen["got_ping"] = True
        await event.message.respond("pong")
    elif event.content == "pong" and event.is_bot:
        seen["got_pong"] = True
        print(json.dumps(seen), flush=True)
        await bot.close()


async def main():
    try:
        await asyncio.wait_for(bot.start(), timeout=60)
        await asyncio.wait_for(bot.join(), timeout=60)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)

asyncio.run(main())
