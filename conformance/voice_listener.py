"""A second participant in a voice call, written from Discord's voice
documentation alone (Gateway v10 op 4, voice gateway v8, UDP IP discovery,
`aead_aes256_gcm_rtpsize`), to check what the SFU forwards.

Usage: voice_listener.py HOST:PORT BOT_TOKEN GUILD_ID VOICE_CHANNEL_ID SECONDS

Joins the channel, prints {"ready": true, ...} once its UDP path is set up,
then receives for up to SECONDS (or until the other participant has left),
decrypting every RTP packet with its own session key, and prints what it saw
as one JSON line. Exits non-zero if it never got ready.
"""
import asyncio
import json
import socket
import struct
import sys
import time

import aiohttp
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

base, token, guild_id, channel_id, seconds = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])
MODE = "aead_aes256_gcm_rtpsize"
seen = {"ready": False, "received": 0, "decrypted": 0, "failed": 0, "frames": [], "speaking": {}, "left": []}


def emit():
    print(json.dumps(seen), flush=True)


async def heartbeat(ws, interval_s, payload):
    while not ws.closed:
        await asyncio.sleep(interval_s)
        await ws.send_json(payload())


async def main():
    async with aiohttp.ClientSession() as http:
        # Gateway v10: READY, then op 4 → VOICE_STATE_UPDATE + VOICE_SERVER_UPDATE.
        gw = await http.ws_connect(f"ws://{base}/?v=10&encoding=json")
        hello = await gw.receive_json()
        gw_seq = {"s": None}
        asyncio.create_task(heartbeat(gw, hello["d"]["heartbeat_interval"] / 1000, lambda: {"op": 1, "d": gw_seq["s"]}))
        await gw.send_json({"op": 2, "d": {"token": token, "intents": 1 | 128,
                                           "properties": {"os": "linux", "browser": "listener", "device": "listener"}}})
        user_id = session_id = voice_token = endpoint = None
        while True:
            msg = await gw.receive_json()
            gw_seq["s"] = msg.get("s") or gw_seq["s"]
            if msg.get("t") == "READY":
                user_id, session_id = msg["d"]["user"]["id"], msg["d"]["session_id"]
                await gw.send_json({"op": 4, "d": {"guild_id": guild_id, "channel_id": channel_id,
                                                   "self_mute": True, "self_deaf": False}})
            elif msg.get("t") == "VOICE_STATE_UPDATE" and msg["d"]["user_id"] == user_id:
                assert msg["d"]["session_id"] == session_id and msg["d"]["channel_id"] == channel_id, msg
            elif msg.get("t") == "VOICE_SERVER_UPDATE":
                voice_token, endpoint = msg["d"]["token"], msg["d"]["endpoint"]
                assert msg["d"]["guild_id"] == guild_id and endpoint, msg
                break
        seen["endpoint"] = endpoint
        # Voice gateway v8.
        vws = await http.ws_connect(f"wss://{endpoint}/?v=8")
        seq_ack = {"n": -1}
        hello = await vws.receive_json()
        assert hello["op"] == 8, hello
        asyncio.create_task(heartbeat(vws, hello["d"]["heartbeat_interval"] / 1000,
                                      lambda: {"op": 3, "d": {"t": int(time.time() * 1000), "seq_ack": seq_ack["n"]}}))
        await vws.send_json({"op": 0, "d": {"server_id": guild_id, "user_id": user_id, "session_id": session_id,
                                            "token": voice_token, "max_dave_protocol_version": 0}})
        loop = asyncio.get_running_loop()
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.setblocking(False)
        key = None
        while key is None:
            msg = await vws.receive_json()
            seq_ack["n"] = msg.get("seq", seq_ack["n"])
            op, d = msg["op"], msg["d"]
            if op == 2:
                assert MODE in d["modes"], d
                seen["ssrc"] = d["ssrc"]
                udp.connect((d["ip"], d["port"]))
                discovery = struct.pack(">HHI", 1, 70, d["ssrc"]) + bytes(66)
                await loop.sock_sendall(udp, discovery)
                answer = await asyncio.wait_for(loop.sock_recv(udp, 2048), 5)
                assert len(answer) == 74 and answer[1] == 2, answer
                ip = answer[8:answer.index(0, 8)].decode()
                port = struct.unpack(">H", answer[72:74])[0]
                seen["discovered"] = f"{ip}:{port}"
                await vws.send_json({"op": 1, "d": {"protocol": "udp", "data": {"address": ip, "port": port, "mode": MODE}}})
            elif op == 4:
                assert d["mode"] == MODE and len(d["secret_key"]) == 32, d
                seen["dave_protocol_version"] = d.get("dave_protocol_version")
                key = AESGCM(bytes(d["secret_key"]))
        seen["ready"] = True
        emit()

        async def control():
            async for message in vws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    continue
                msg = json.loads(message.data)
                seq_ack["n"] = msg.get("seq", seq_ack["n"])
                if msg["op"] == 5:
                    seen["speaking"][str(msg["d"]["ssrc"])] = msg["d"]["user_id"]
                elif msg["op"] == 13:
                    seen["left"].append(msg["d"]["user_id"])
        watcher = asyncio.create_task(control())
        deadline = time.monotonic() + seconds
        last_packet = None
        while time.monotonic() < deadline:
            if seen["left"] and last_packet and time.monotonic() - last_packet > 1:
                break
            try:
                packet = await asyncio.wait_for(loop.sock_recv(udp, 2048), 0.5)
            except asyncio.TimeoutError:
                continue
            if len(packet) < 12 or packet[1] & 0x7F in range(72, 77):
                continue  # keep-alive echo or RTCP
            seen["received"] += 1
            last_packet = time.monotonic()
            # rtpsize: the header (and the extension's 4-byte head) is the
            # AAD; the 32-bit nonce counter is the packet's last 4 bytes.
            header_len = 12 + 4 * (packet[0] & 0x0F)
            if packet[0] & 0x10:
                header_len += 4
            nonce = packet[-4:] + bytes(8)
            try:
                plain = key.decrypt(nonce, packet[header_len:-4], packet[:header_len])
            except Exception:
                seen["failed"] += 1
                continue
            seen["decrypted"] += 1
            if packet[0] & 0x10:
                ext_words = struct.unpack(">H", packet[14:16])[0]
                plain = plain[4 * ext_words:]
            seen.setdefault("ssrcs", [])
            ssrc = struct.unpack(">I", packet[8:12])[0]
            if ssrc not in seen["ssrcs"]:
                seen["ssrcs"].append(ssrc)
            if plain.startswith(b"guildhall-frame-"):
                seen["frames"].append(int(plain[16:22]))
        watcher.cancel()
        seen["frames"] = sorted(set(seen["frames"]))
        seen["frames_distinct"] = len(seen["frames"])
        seen["frames"] = seen["frames"][:3] + seen["frames"][-3:]
        await gw.send_json({"op": 4, "d": {"guild_id": guild_id, "channel_id": None, "self_mute": False, "self_deaf": False}})
        await asyncio.sleep(0.3)
        await vws.close()
        await gw.close()


try:
    asyncio.run(asyncio.wait_for(main(), seconds + 40))
except Exception as error:  # report what was seen, whatever failed
    seen["error"] = repr(error)
emit()
sys.exit(0 if seen["ready"] else 1)
