"""discord.py, unmodified (with PyNaCl and davey, its `voice` extra), with
only its base URLs changed: `channel.connect()` to a Guildhall voice
channel, then `vc.play()` of an Opus source for several seconds.

Usage: voice_py.py HOST:PORT BOT_TOKEN VOICE_CHANNEL_ID FRAMES
The source yields FRAMES numbered 20 ms Opus packets (the SFU forwards
without decoding, so their bytes are a marker the listener checks).
"""
import asyncio
import json
import sys
import time

import discord
import logging

base, token, channel_id, frames = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
discord.http.Route.BASE = f"http://{base}/api/v10"
discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = discord.utils.yarl.URL(f"ws://{base}/")

# discord.py's own log (stderr, which the runner prints on a failure):
# its voice handshake logs each step, so a failed connect shows where it
# stopped.
discord.utils.setup_logging(level=logging.INFO)
client = discord.Client(intents=discord.Intents.default())
seen = {}


class NumberedOpus(discord.AudioSource):
    """Already-encoded frames, so no Opus library is needed."""

    def __init__(self, count):
        self.count, self.sent = count, 0

    def is_opus(self):
        return True

    def read(self):
        if self.sent >= self.count:
            return b""
        self.sent += 1
        return b"guildhall-frame-%06d" % self.sent + bytes(40)


@client.event
async def on_ready():
    try:
        channel = client.get_channel(channel_id)
        started = time.monotonic()
        vc = await channel.connect(timeout=30, self_deaf=True)
        seen.update(connected=vc.is_connected(), connect_ms=int((time.monotonic() - started) * 1000),
                    mode=vc.mode, endpoint=vc.endpoint, ssrc=vc.ssrc)
        done = asyncio.Event()
        source = NumberedOpus(frames)
        vc.play(source, after=lambda error: client.loop.call_soon_threadsafe(done.set))
        await asyncio.wait_for(done.wait(), frames * 0.02 + 20)
        seen["played"] = source.sent
        me = channel.guild.me
        seen["voice_channel"] = me.voice and me.voice.channel and me.voice.channel.id == channel_id
        await vc.disconnect()
        seen["disconnected"] = not vc.is_connected()
    except Exception as error:
        seen["error"] = repr(error)
    print(json.dumps(seen), flush=True)
    await client.close()


async def main():
    try:
        await asyncio.wait_for(client.start(token), timeout=90)
    except asyncio.TimeoutError:
        print(json.dumps(seen), flush=True)
        sys.exit(1)

asyncio.run(main())
sys.exit(0 if seen.get("played") == frames and seen.get("disconnected") else 1)
