"""discord.py's webhook client, unmodified, with only its base URL changed.

Usage: discord_py_webhook.py HOST:PORT OWNER_TOKEN CHANNEL_ID
The owner creates a webhook over REST; discord.py then drives it by id and
token as a bot-less integration does (fetch, send with and without wait,
fetch/edit/delete its message, edit, delete) and parses every answer into
its models. Prints one JSON line of what it saw.
"""
import asyncio
import io
import json
import sys
import urllib.request

import aiohttp
import discord

base, owner_token, channel_id = sys.argv[1], sys.argv[2], sys.argv[3]
discord.http.Route.BASE = f"http://{base}/api/v10"


def owner_call(method, path, body=None):
    request = urllib.request.Request(f"http://{base}/api/v10{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("authorization", owner_token)
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


async def main():
    created = owner_call("POST", f"/channels/{channel_id}/webhooks", {"name": "py hook"})
    seen = {}
    async with aiohttp.ClientSession() as session:
        webhook = discord.Webhook.partial(int(created["id"]), created["token"], session=session)
        fetched = await webhook.fetch(prefer_auth=False)
        seen.update(name=fetched.name, type=str(fetched.type), channel=str(fetched.channel_id),
                    token_ok=fetched.token == created["token"])
        await webhook.send("no wait")
        message = await webhook.send("waited", username="Hooky", wait=True)
        seen.update(webhook_id=str(message.webhook_id), author=message.author.name,
                    author_is_webhook=message.author.id == webhook.id, content=message.content)
        again = await webhook.fetch_message(message.id)
        edited = await webhook.edit_message(message.id, content="edited")
        seen.update(fetched_content=again.content, edited_content=edited.content)
        await webhook.delete_message(message.id)
        with_file = await webhook.send("report", wait=True, file=discord.File(
            io.BytesIO(b"all good"), filename="report.txt", description="a report"))
        seen.update(hook_file=[with_file.attachments[0].filename, with_file.attachments[0].description])
        renamed = await fetched.edit(name="renamed hook", prefer_auth=False)
        seen.update(renamed=renamed.name)
        await fetched.delete(prefer_auth=False)
        try:
            await webhook.fetch(prefer_auth=False)
            seen.update(gone=False)
        except discord.NotFound as error:
            seen.update(gone=error.code == 10015)
    print(json.dumps(seen))


asyncio.run(main())
