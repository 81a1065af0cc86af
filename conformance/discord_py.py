"""discord.py, unmodified, with only its base URLs changed."""
import asyncio
import json
import sys
import urllib.request

import discord

base, token, channel_id, owner_token = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
discord.http.Route.BASE = f"http://{base}/api/v10"
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = discord.utils.yarl.URL(f"ws://{base}/")

intents = discord.Intents.default()
intents.message_content = True
intents.members = True
client = discord.Client(intents=intents)
seen = {}


def owner_post(content):
    request = urllib.request.Request(f"http://{base}/api/v10/channels/{channel_id}/messages", method="POST",
                                     data=json.dumps({"content": content}).encode())
    request.add_header("authorization", owner_token)
    request.add_header("content-type", "application/json")
    urllib.request.urlopen(request, timeout=10).read()


@client.event
async def on_ready():
    guild = client.guilds[0]
    seen.update(user=str(client.user), guild=guild.name, members=len(guild.members),
                channels=[c.name for c in guild.channels])
    sent = await client.get_channel(channel_id).send("hello from discord.py")
    seen["sent"] = str(sent.id)
    await asyncio.get_running_loop().run_in_executor(None, owner_post, "!ping")


@client.event
async def on_message(message):
    if message.content == "!ping":
        seen["got_ping"] = True
        await message.channel.send("pong")
    elif message.content == "pong":
        seen["got_pong"] = True
        print(json.dumps(seen), flush=True)
        await client.close()


async def main():
    try:
        await asyncio.wait_for(client.start(token), timeout=60)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)

asyncio.run(main())
