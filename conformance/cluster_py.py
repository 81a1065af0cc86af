"""discord.py, unmodified, on one gateway node of a cluster (cluster stage).

Usage: cluster_py.py REST_HOST:PORT GATEWAY_HOST:PORT TOKEN CHANNEL_ID
Registers a global /hello (`tree.sync()`) and prints READY once
connected; answers the owner's /hello (created through an api-only node,
so the callback, sent to this bot's REST node, is passed on to it over
the bus); on the owner's "!ping" (posted through the api-only node) says
"py says hi", which the discord.js bot on another gateway node answers
with "js says hi"; prints what it saw as JSON.
"""
import asyncio
import json
import sys

import discord
from discord import app_commands

rest, gateway, token, channel_id = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
discord.http.Route.BASE = f"http://{rest}/api/v10"
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = discord.utils.yarl.URL(f"ws://{gateway}/")

intents = discord.Intents.default()
intents.message_content = True
client = discord.Client(intents=intents)
tree = app_commands.CommandTree(client)
seen = {}


@tree.command(name="hello", description="Says hello from the cluster")
async def hello(interaction: discord.Interaction):
    await interaction.response.send_message("hello from the cluster")
    seen["answered"] = True


async def setup_hook():
    seen["synced"] = [c.name for c in await tree.sync()]

client.setup_hook = setup_hook


@client.event
async def on_ready():
    seen.update(user=str(client.user), guild=client.guilds[0].name if client.guilds else None)
    print("READY", flush=True)


@client.event
async def on_message(message):
    if message.channel.id != channel_id:
        return
    if message.content == "!ping":
        seen["got_ping"] = True
        await message.channel.send("py says hi")
    elif message.content == "js says hi":
        seen["got_js"] = str(message.author)
        print(json.dumps(seen), flush=True)
        await client.close()


async def main():
    try:
        await asyncio.wait_for(client.start(token), timeout=60)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)

asyncio.run(main())
