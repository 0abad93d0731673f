"""Drives Legate's MCP front with the official Python `mcp` SDK client.

Run by crates/legate/tests/mcp.rs; not a test on its own.

    python3 client.py stdio PROTOCOL LEGATE_BIN
    python3 client.py http PROTOCOL URL TOKEN

PROTOCOL is the MCP revision the client offers in `initialize` (2025-06-18 or 2025-11-25).
Over the chosen transport the client lists the tools, delegates a task to revisor, waits for
it with a progress token (collecting every notification), and reads the answer once whole
and once in pieces. It prints one JSON line with what it saw and exits 0, or raises.
Works with the SDK's 1.x and 2.x lines.
"""

import asyncio
import contextlib
import hashlib
import json
import os
import sys

import mcp.client.session as client_session
from mcp import ClientSession

# The exact text revisor writes and quotes back: emoji (surrogate pairs in UTF-16), accents,
# and enough of it to need several pieces.
LINE = "😀 café € naïve " * 40
PROMPT = f"write notes.md: {LINE}\nrun sleep 1\nread notes.md\nWhat is in this workspace?"


def structured(result):
    value = getattr(result, "structured_content", None)
    if value is None:
        value = getattr(result, "structuredContent", None)
    return value


def is_error(result):
    value = getattr(result, "is_error", None)
    if value is None:
        value = getattr(result, "isError", None)
    return bool(value)


def output_schema(tool):
    value = getattr(tool, "output_schema", None)
    if value is None:
        value = getattr(tool, "outputSchema", None)
    return value


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def call(session, name, args, **kwargs):
    result = await session.call_tool(name, args, **kwargs)
    body = structured(result)
    assert not is_error(result), f"{name} failed: {body}"
    assert body is not None, f"{name} returned no structured content"
    return body


async def finish(session, task_id):
    """Waits for `task_id` to end completed, following `wait`'s cursor; its last answer."""
    after = 0
    for _ in range(60):
        body = await call(session, "wait", {"taskId": task_id, "after": after, "timeoutSeconds": 20})
        after = body["nextCursor"]
        if body["ready"] and not body["hasMore"]:
            assert body["state"] == "completed", body
            return body
    raise AssertionError(f"task {task_id} did not end")


async def exercise(session, protocol):
    init = await session.initialize()
    negotiated = getattr(init, "protocol_version", None) or getattr(init, "protocolVersion")
    assert negotiated == protocol, f"asked for {protocol}, got {negotiated}"

    tools = (await session.list_tools()).tools
    names = sorted(t.name for t in tools)
    assert len(names) == 50, names
    assert all(output_schema(t) for t in tools), "every tool has an outputSchema"

    started = await call(session, "run", {"prompt": PROMPT, "agent": "revisor"})
    task_id = started["taskId"]

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    after, waits, state = 0, 0, None
    while True:
        waits += 1
        assert waits < 30, "the task did not end"
        body = await call(
            session,
            "wait",
            {"taskId": task_id, "after": after, "timeoutSeconds": 20},
            progress_callback=on_progress,
        )
        after = body["nextCursor"]
        state = body["state"]
        if body["ready"] and not body["hasMore"]:
            break
    assert state == "completed", state
    assert progress, "no progress notification arrived while waiting"
    values = [p["progress"] for p in progress]
    assert sorted(values) == values and len(set(values)) == len(values), values

    small = await call(session, "result", {"taskId": task_id, "includeResult": False})
    assert small["ready"] is True and small.get("answer") is None

    whole = await call(session, "read_result", {"taskId": task_id, "limit": 50000})
    assert not whole["hasMore"]
    single = whole["text"]
    assert "😀" in single, single
    assert sha256(single) == whole["contentSha256"]

    pieces, offset, joined = 0, 0, []
    while True:
        piece = await call(
            session,
            "read_result",
            {
                "taskId": task_id,
                "offset": offset,
                "limit": 97,
                "expectedContentSha256": whole["contentSha256"],
            },
        )
        joined.append(piece["text"])
        pieces += 1
        if not piece["hasMore"]:
            break
        offset = piece["nextOffset"]
    assert pieces > 2, pieces
    assert sha256("".join(joined)) == sha256(single) == whole["contentSha256"]

    bad = await session.call_tool("status", {"taskId": "ffffffff-none"})
    assert is_error(bad) and structured(bad)["error"]["code"] == "TASK_NOT_FOUND"

    return {
        "protocol": negotiated,
        "taskId": task_id,
        "tools": len(names),
        "progress": len(progress),
        "pieces": pieces,
        "sha256": whole["contentSha256"],
    }


def server_env(extra=None):
    """What `legate mcp` needs from this process's environment. The SDK starts a stdio server
    with only HOME, PATH and a few more, so LEGATE_HOME (the test's throwaway state directory)
    must be passed on explicitly or the server would use ~/.legate."""
    env = {k: os.environ[k] for k in ("LEGATE_HOME", "LEGATE_LOG") if k in os.environ}
    env.update(extra or {})
    return env


@contextlib.asynccontextmanager
async def stdio_session(binary, extra_env=None):
    """A session with `binary mcp`, started by the SDK (not yet initialized)."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=binary, args=["mcp"], env=server_env(extra_env))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            yield session


@contextlib.asynccontextmanager
async def http_session(url, token):
    """A session with `legate serve --mcp` at `url`, with the bearer token (not yet initialized)."""
    headers = {"Authorization": f"Bearer {token}"}
    try:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=headers, timeout=60)
        transport = streamable_http_client(url, http_client=client)
    except ImportError:
        from mcp.client.streamable_http import streamablehttp_client

        transport = streamablehttp_client(url, headers=headers)
    async with transport as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            yield session


async def main():
    mode, protocol = sys.argv[1], sys.argv[2]
    # The SDK offers its newest handshake revision; offer the one under test instead.
    client_session.LATEST_HANDSHAKE_VERSION = protocol
    if mode == "stdio":
        opened = stdio_session(sys.argv[3])
    elif mode == "http":
        opened = http_session(sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode}")
    async with opened as session:
        report = await exercise(session, protocol)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
