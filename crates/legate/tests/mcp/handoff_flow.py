"""Plan → implement → review → integrate over MCP with the official Python `mcp` SDK, all on
revisor, through context and handoff.

Run by crates/legate/tests/mcp_handoff.rs; not a test on its own.

    python3 handoff_flow.py LEGATE_BIN PROJECT

A planner task runs on a copy of PROJECT; its context is handed to an implementer that writes
one.txt, then two.txt in a second turn in the same copy; that copy's context is handed to a
reviewer whose report's citations Legate checked; a stale context hash is CONTEXT_CHANGED;
then the implementer's accumulated patch is verified, tested and integrated. Prints one JSON
line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, is_error, stdio_session, structured


async def finish(session, task_id):
    after = 0
    for _ in range(60):
        body = await call(
            session, "wait", {"taskId": task_id, "after": after, "timeoutSeconds": 20}
        )
        after = body["nextCursor"]
        if body["ready"] and not body["hasMore"]:
            assert body["state"] == "completed", body
            return await call(session, "result", {"taskId": task_id})
    raise AssertionError(f"task {task_id} did not end")


async def flow(session, project):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"context", "handoff", "roles"} <= names, names

    planned = await call(
        session,
        "run",
        {
            "prompt": "Plan how to add one.txt and two.txt beside README.md.",
            "agent": "revisor",
            "role": "planner",
            "workspace": {"kind": "copy", "path": project},
        },
    )
    plan = await finish(session, planned["taskId"])
    assert plan["report"]["kind"] == "plan", plan
    assert plan["report"]["origin"] == "agent-reported", plan

    ctx = await call(session, "context", {"taskId": planned["taskId"]})
    assert ctx["reports"][0]["taskId"] == planned["taskId"], ctx
    assert ctx["reports"][0]["kind"] == "plan", ctx

    implementing = await call(
        session,
        "handoff",
        {
            "sourceTaskId": planned["taskId"],
            "expectedContextSha256": ctx["contextSha256"],
            "role": "implementer",
            "prompt": "write one.txt: one\\n",
            "decisions": ["one.txt first, then two.txt"],
        },
    )
    assert implementing["mode"] == "write", implementing
    assert implementing["contextId"] != planned["contextId"]
    await finish(session, implementing["taskId"])
    second = await call(
        session,
        "resume",
        {"contextId": implementing["contextId"], "prompt": "write two.txt: two\\n"},
    )
    await finish(session, second["taskId"])

    ctx = await call(session, "context", {"taskId": second["taskId"]})
    assert ctx["decisions"][0]["origin"] == "client-reported", ctx
    assert ctx["reports"][0]["kind"] == "plan", ctx

    stale = await session.call_tool(
        "handoff",
        {
            "sourceTaskId": second["taskId"],
            "expectedContextSha256": "0" * 64,
            "role": "reviewer",
            "prompt": "Review the change.",
        },
    )
    assert is_error(stale), structured(stale)
    assert structured(stale)["error"]["code"] == "CONTEXT_CHANGED", structured(stale)

    reviewing = await call(
        session,
        "handoff",
        {
            "sourceTaskId": second["taskId"],
            "expectedContextSha256": ctx["contextSha256"],
            "role": "reviewer",
            "prompt": "Review one.txt and two.txt.",
        },
    )
    assert reviewing["mode"] == "read-only", reviewing
    review = await finish(session, reviewing["taskId"])
    assert review["report"]["kind"] == "review", review
    assert review["report"]["citationsChecked"] is True, review
    assert review["report"]["findings"], review

    preview = await call(session, "preview", {"taskId": second["taskId"]})
    changed = sorted(f["path"] for f in preview["files"])
    assert changed == ["one.txt", "two.txt"], changed
    sha = preview["sha256"]
    verified = await call(
        session, "verify", {"taskId": second["taskId"], "expectedSha256": sha, "reviews": []}
    )
    assert verified["passed"], verified
    tested = await call(
        session,
        "test",
        {
            "taskId": second["taskId"],
            "expectedSha256": sha,
            "command": {"executable": "cat", "args": ["one.txt", "two.txt"]},
        },
    )
    assert tested["passed"], tested
    integrated = await call(
        session, "integrate", {"taskId": second["taskId"], "expectedSha256": sha}
    )
    return {
        "planner": planned["taskId"],
        "implementer": [implementing["taskId"], second["taskId"]],
        "reviewer": reviewing["taskId"],
        "citationsChecked": review["report"]["citationsChecked"],
        "sha256": sha,
        "integrated": sorted(integrated["files"]),
    }


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, project)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
