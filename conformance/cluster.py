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
        and (seen.get("got_js") if name == "discord.py" else seen.get("got_py"))
    print(f"cluster {name}: {'ok' if ok else 'FAILED'} {json.dumps(seen)}")
    if not ok:
        failures.append(name)
        print("\n".join(lines[name][-50:]), process.stderr.read()[-4000:], sep="\n")
print(f"cluster: {2 - len(failures)} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
