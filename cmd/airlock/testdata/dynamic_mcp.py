"""An MCP server for the serve tests: each instance has its own random
name, and its tool list grows when asked, which it announces with
notifications/tools/list_changed.

usage: dynamic_mcp.py
"""
import json
import os
import sys

instance = os.urandom(8).hex()
tools = ["whoami", "grow"]


def text(s):
    return {"content": [{"type": "text", "text": s}]}


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def answer(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "dynamic", "version": "1"}}
    if method == "tools/list":
        return {"tools": [{"name": n, "description": n, "inputSchema": {"type": "object"}} for n in tools]}
    if method == "ping":
        return {}
    if method == "tools/call":
        name = params.get("name")
        if name == "whoami":
            return text("instance " + instance)
        if name == "grow":
            tools.extend(["extra", "forbidden"])
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
            return text("grown")
        if name in ("extra", "forbidden"):
            return text(name + " called")
    raise KeyError(method)


for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue  # a notification
    try:
        out = {"jsonrpc": "2.0", "id": msg["id"], "result": answer(msg)}
    except KeyError:
        out = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "unknown"}}
    send(out)
