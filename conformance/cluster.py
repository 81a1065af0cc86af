"""The cluster stage: unmodified discord.py and discord.js bots on two
different gateway nodes of a real cluster exchange messages, and the
owner's message that starts the exchange is posted through an api-only
node.

Usage: cluster.py API_ONLY GW_API_A GW_API_B API_DATA_DIR GUILDHALL_BIN NODE_MODULES_DIR
(each node as HOST:PORT; API_DATA_DIR holds the api-only node's admin token).
"""
import json
import os
import subprocess
import sys
import threading
import urllib.request

api, node_a, node_b, data_dir, guildhall, node_modules = sys.argv[1:7]
here = os.path.dirname(os.path.abspath(__file__))


def call(base, method, path, token=None, body=None):
    request = urllib.request.Request(f"http://{base}/api/v10{path}", method=method,
                                     data=None if body is None else json.dumps(body).encode())
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", token)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


owner = call(api, "POST", "/auth/register", body={"username": "clusterowner", "password": "cluster-password"})
guild = call(api, "POST", "/guilds", owner["token"], {"name": "cluster guild"})
channel = guild["channels"][0]["id"]
bots = {}
for name in ["clusterpy", "clusterjs"]:
    bots[name] = json.loads(subprocess.check_output(
        [guildhall, "bot", "create", "--name", name, "--owner", owner["user_id"],
         "--data-dir", data_dir, "--server", f"http://{api}"]))
    call(api, "POST", f"/oauth2/authorize?client_id={bots[name]['application_id']}&scope=bot", owner["token"],
         {"guild_id": guild["id"], "permissions": "0", "authorize": True})

env = dict(os.environ, NODE_PATH=node_modules)
processes = {
    "discord.py": subprocess.Popen([sys.executable, os.path.join(here, "cluster_py.py"), node_a, node_a,
                                    bots["clusterpy"]["token"], channel],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env),
    "discord.js": subprocess.Popen(["node", os.path.join(here, "cluster_js.js"), node_b,
                                    bots["clusterjs"]["token"], channel],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env),
}
ready = {name: threading.Event() for name in processes}
lines = {name: [] for name in processes}


def read(name):
    for line in processes[name].stdout:
        lines[name].append(line.rstrip("\n"))
        if line.startswith("READY"):
            ready[name].set()


readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in processes]
for reader in readers:
    reader.start()
for name, event in ready.items():
    if not event.wait(60):
        print(f"{name} never got READY")
# The owner runs discord.py's /hello through the api-only node, which
# holds the interaction; the bot answers through its own REST node
# (gateway-api-1), which passes the callback on over NATS.
interaction_ok = False
try:
    py_bot = bots["clusterpy"]
    commands = call(api, "GET", f"/applications/{py_bot['application_id']}/commands", f"Bot {py_bot['token']}")
    hello = next(c for c in commands if c["name"] == "hello")
    call(api, "POST", "/interactions", owner["token"], {
        "type": 2, "application_id": py_bot["application_id"], "guild_id": guild["id"], "channel_id": channel,
        "session_id": "cluster", "nonce": "hello-1",
        "data": {"id": hello["id"], "name": "hello", "type": 1, "version": hello["version"]}})
    for _ in range(80):
        history = call(api, "GET", f"/channels/{channel}/messages?limit=5", owner["token"])
        answer = next((m for m in history if m["content"] == "hello from the cluster"), None)
        if answer:
            interaction_ok = answer.get("interaction_metadata", {}).get("name") == "hello"
            break
        threading.Event().wait(0.25)
except Exception as error:  # reported below with the bots' output
    print(f"cluster interaction: {error!r}")
print(f"cluster interaction: {'ok' if interaction_ok else 'FAILED'}")
# Posted through the api-only node: it reaches both gateway nodes.
call(api, "POST", f"/channels/{channel}/messages", owner["token"], {"content": "!ping"})
failures = []
for name, process in processes.items():
    try:
        process.wait(timeout=70)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
for reader in readers:
    reader.join(5)
for name, process in processes.items():
    seen = next((json.loads(line) for line in reversed(lines[name]) if line.startswith("{")), {})
    ok = process.returncode == 0 and seen.get("guild") == "cluster guild" and seen.get("got_ping") \
        and (seen.get("got_js") and seen.get("answered") if name == "discord.py" else seen.get("got_py"))
    if name == "discord.py" and not interaction_ok:
        ok = False
    print(f"cluster {name}: {'ok' if ok else 'FAILED'} {json.dumps(seen)}")
    if not ok:
        failures.append(name)
        print("\n".join(lines[name][-50:]), process.stderr.read()[-4000:], sep="\n")
print(f"cluster: {2 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
