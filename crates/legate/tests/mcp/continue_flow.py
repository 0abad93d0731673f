"""`continue` of a task cut by a restart, over MCP with the official Python SDK.

Run by crates/legate/tests/continue_task.rs; not a test on its own.

    python3 continue_flow.py LEGATE_BIN CUT_TASK_ID

CUT_TASK_ID is a task whose `legate` was killed mid-turn (SIGKILL) on the scripted agent. A new
`legate mcp` finds it failed with SERVER_RESTARTED and nothing else started; `continue` starts
a continuation in the same context that resumes the agent's session and says so in its
events, ends completed; a second `continue` answers the same continuation; a continue of a
completed task, of an unknown one, and with a field the tool does not take are refused and
store nothing. Prints one JSON line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, finish, is_error, stdio_session, structured


async def refused(session, args):
    result = await session.call_tool("continue", args)
    assert is_error(result), (args, structured(result))
    return structured(result)["error"]["code"]


async def count(session):
    return len((await call(session, "tasks", {"limit": 200}))["tasks"])


async def flow(session, cut_id):
    await session.initialize()
    tools = {t.name for t in (await session.list_tools()).tools}
    assert "continue" in tools, sorted(tools)
    cut = (await call(session, "status", {"taskId": cut_id}))["task"]
    assert cut["state"] == "failed" and cut["error"]["code"] == "SERVER_RESTARTED", cut
    # The restart alone started nothing.
    before = await count(session)

    started = await call(session, "continue", {"taskId": cut_id})
    assert started["continuedFrom"] == cut_id, started
    assert started["contextId"] == cut["contextId"], (started, cut)
    assert started["taskId"] != cut_id, started
    await finish(session, started["taskId"])
    done = (await call(session, "status", {"taskId": started["taskId"]}))["task"]
    events = (await call(session, "events", {"taskId": started["taskId"], "limit": 1000}))["events"]
    sessions = [e for e in events if e["type"] == "session"]
    notices = [e for e in events if e["type"] == "notice"
               and (e.get("detail") or {}).get("event") == "continued"]

    again = await call(session, "continue", {"taskId": cut_id})
    refusals = {
        "completed": await refused(session, {"taskId": started["taskId"]}),
        "unknown": await refused(session, {"taskId": "00000000-0000-4000-8000-000000000000"}),
        "extra": await refused(session, {"taskId": cut_id, "prompt": "do something else"}),
    }
    return {
        "before": before,
        "after": await count(session),
        "same": again["taskId"] == started["taskId"],
        "state": done["state"],
        "sessionId": done.get("sessionId"),
        "cutSessionId": cut.get("sessionId"),
        "sessions": sessions,
        "notices": len(notices),
        "refusals": refusals,
    }


async def main():
    binary, cut_id = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, cut_id)
    print(json.dumps(report))


asyncio.run(main())
