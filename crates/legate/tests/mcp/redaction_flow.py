"""Credential redaction over MCP, driven with the official Python `mcp` SDK client against
`legate mcp` on stdio, on revisor: the agent reads a file of credentials in a shared
directory, quotes it (answer and tool output) and recites it in 5-byte pieces (answer and
reasoning interleaved). Run by crates/legate/tests/mcp_redaction.rs, which checks that no
credential is in anything printed here, nor in the server's log (this process's stderr).

    python3 redaction_flow.py LEGATE_BIN SHARED_DIR

Prints every answer of run, wait, events, status, result and read_result as one JSON line
each, the last line the report ({"taskId": ...}), and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, stdio_session


def report(value):
    print(json.dumps(value), flush=True)


async def main(binary, shared):
    async with stdio_session(binary) as session:
        await session.initialize()
        started = await call(
            session,
            "run",
            {"prompt": "read notes.txt\nrecite notes.txt", "agent": "revisor",
             "workingDirectory": shared},
        )
        report(started)
        task_id = started["taskId"]
        after = 0
        for _ in range(60):
            body = await call(
                session, "wait", {"taskId": task_id, "after": after, "timeoutSeconds": 30},
            )
            report(body)
            after = body["nextCursor"]
            if body["ready"] and not body["hasMore"]:
                break
        report(await call(session, "events", {"taskId": task_id, "after": 0}))
        report(await call(session, "status", {"taskId": task_id}))
        result = await call(session, "result", {"taskId": task_id, "includeResult": True})
        report(result)
        report(await call(session, "read_result", {"taskId": task_id}))
        report({"taskId": task_id, "state": result.get("state")})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
