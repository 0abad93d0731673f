"""Delivery modes and artifacts over MCP, driven with the official Python `mcp` SDK client
against `legate mcp` on stdio, all on revisor. Run by crates/legate/tests/mcp_delivery.rs;
prints JSON lines, the last one the report, and exits 0, or raises.

    python3 delivery_flow.py LEGATE_BIN

LEGATE_HOME (and LEGATE_LOG) are passed on to the server.
"""

import asyncio
import json
import os
import sys
import tempfile

import jsonschema
from client import call, is_error, stdio_session, structured

SLOW = "run sleep 8\nwrite done.txt: yes"


def report(value):
    print(json.dumps(value), flush=True)


def code(result):
    return structured(result)["error"]["code"] if is_error(result) else None


async def main(binary):
    work = tempfile.mkdtemp()
    async with stdio_session(binary) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}

        def schema(tool):
            t = tools[tool]
            return getattr(t, "output_schema", None) or getattr(t, "outputSchema")

        # A path leaving the workspace is refused before anything runs.
        escaping = await session.call_tool(
            "run",
            {"prompt": "hi", "agent": "revisor", "workingDirectory": work,
             "artifactPaths": ["../../etc/passwd"]},
        )

        # A task in messages delivery: waits return messages, never events.
        started = await call(
            session,
            "run",
            {"prompt": "write out.txt: hello artifact", "agent": "revisor",
             "workingDirectory": work, "deliveryMode": "messages",
             "artifactPaths": ["out.txt"]},
        )
        task_id = started["taskId"]
        after, messages, waits = 0, [], []
        for _ in range(30):
            body = await call(
                session, "wait",
                {"taskId": task_id, "after": after, "timeoutSeconds": 30, "cursorMode": "messages"},
            )
            jsonschema.validate(body, schema("wait"))
            waits.append(body)
            messages.extend(body["messages"])
            after = body["nextCursor"]
            if body["ready"] and not body["hasMore"]:
                break
        result = await call(session, "result", {"taskId": task_id, "includeResult": False})
        jsonschema.validate(result, schema("result"))
        art = result["artifacts"][0]
        piece = await call(
            session, "read_artifact",
            {"taskId": task_id, "name": "out.txt", "expectedSha256": art["sha256"], "limit": 4},
        )
        jsonschema.validate(piece, schema("read_artifact"))
        text, offset = piece["text"], piece["nextOffset"]
        while piece["hasMore"]:
            piece = await call(
                session, "read_artifact",
                {"taskId": task_id, "name": "out.txt", "expectedSha256": art["sha256"],
                 "offset": offset, "limit": 4},
            )
            text += piece["text"]
            offset = piece["nextOffset"]
        stale = await session.call_tool(
            "read_artifact",
            {"taskId": task_id, "name": "out.txt", "expectedSha256": "0" * 64},
        )
        # A cursor of the other mode restarts at 0.
        reset = await call(
            session, "wait",
            {"taskId": task_id, "after": 5, "timeoutSeconds": 1, "cursorMode": "events"},
        )

        # The mode switched during a wait: the wait ends, saying the new mode, before the
        # task does; the next wait with the old cursor's mode restarts at 0 with events.
        slow = await call(
            session, "run",
            {"prompt": SLOW, "agent": "revisor", "deliveryMode": "messages"},
        )
        slow_id = slow["taskId"]
        notified = asyncio.Event()

        async def on_progress(value, total, message):
            notified.set()

        waiting = asyncio.ensure_future(
            call(session, "wait", {"taskId": slow_id, "timeoutSeconds": 60},
                 progress_callback=on_progress)
        )
        # The wait has started when its first notification arrives.
        await notified.wait()
        switched = await call(
            session, "set_delivery_mode", {"taskId": slow_id, "deliveryMode": "events"}
        )
        mid = await waiting
        after_switch = await call(
            session, "wait",
            {"taskId": slow_id, "after": mid["nextCursor"], "timeoutSeconds": 30,
             "cursorMode": "messages"},
        )
        report(
            {
                "escaping": code(escaping),
                "waitKeys": sorted(waits[-1].keys()),
                "hasEvents": any("events" in w for w in waits),
                "kinds": [m["kind"] for m in messages],
                "last": messages[-1],
                "answerSha256": result["answerSha256"],
                "artifact": art,
                "read": text,
                "encoding": piece["encoding"],
                "stale": code(stale),
                "reset": {k: reset.get(k) for k in ("cursorReset", "deliveryMode")},
                "resetMessages": len(reset.get("messages", [])),
                "switched": switched,
                "mid": {k: mid.get(k) for k in ("ready", "deliveryMode", "cursorReset")},
                "afterSwitch": {
                    "cursorReset": after_switch.get("cursorReset"),
                    "deliveryMode": after_switch.get("deliveryMode"),
                    "events": len(after_switch.get("events", [])),
                    "messages": "messages" in after_switch,
                },
            }
        )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
