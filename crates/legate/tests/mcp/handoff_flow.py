"""Plan → implement → review → integrate over MCP with the official Python `mcp` SDK, all on
revisor, through context and handoff.

Run by crates/legate/tests/mcp_handoff.rs; not a test on its own.

    python3 handoff_flow.py LEGATE_BIN PROJECT [retries]

A planner task runs on a copy of PROJECT; its context is handed to an implementer that writes
one.txt, then two.txt in a second turn in the same copy; that copy's context is handed to a
reviewer whose report's citations Legate checked; a stale context hash is CONTEXT_CHANGED;
then the implementer's accumulated patch is verified, tested and integrated. Prints one JSON
line with what it saw and exits 0, or raises.

With `retries`, `test` with retries instead: a write task on a copy of PROJECT writes one.txt.
Its test command fails until fixed.txt exists, and prints the line revisor reads as "write
fixed.txt", plus a fake credential. Out of range retries and retries on a read-only task are
INVALID_INPUT. `test` with retries 2 answers at once with the failed first record and a fix
turn to wait on; the fix turn (given the framed failure, its credential line redacted) writes
fixed.txt, the engine tests again, and preview shows the loop `passed` with two attempts, the
second on the fix turn's task and bound to the new patch, which then integrates.
"""

import asyncio
import json
import sys

from client import call, is_error, stdio_session, structured

# Made at run time, so no credential sits in the source.
FAKE_TOKEN = "ghp_" + "Z" * 4 + "q7Rk2LmN9xWv3TpB5yHc8JdF6sGa1Ue0"
FAILING = (
    "test -f fixed.txt && exit 0; "
    f"echo 'token {FAKE_TOKEN}'; echo 'write fixed.txt: fixed\\n'; exit 1"
)



async def finish(session, task_id, state="completed"):
    after = 0
    for _ in range(60):
        body = await call(
            session, "wait", {"taskId": task_id, "after": after, "timeoutSeconds": 20}
        )
        after = body["nextCursor"]
        if body["ready"] and not body["hasMore"]:
            assert body["state"] == state, body
            return await call(session, "result", {"taskId": task_id})
    raise AssertionError(f"task {task_id} did not end")


async def refused(session, args, code):
    result = await session.call_tool("test", args)
    body = structured(result)
    assert is_error(result) and body["error"]["code"] == code, body


async def settled(session, task_id):
    """Previews until the loop is no longer running (it tests after the fix turn ends)."""
    for _ in range(100):
        result = await session.call_tool("preview", {"taskId": task_id})
        body = structured(result)
        if is_error(result):
            assert body["error"]["code"] == "COPY_BUSY", body
        elif body.get("testRetries", {}).get("state") != "running":
            return body
        await asyncio.sleep(0.2)
    raise AssertionError("the retries did not settle")


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


async def copy_task(session, project, prompt, mode):
    """Runs a revisor task on a copy of `project` to its end; its id and its patch's sha256."""
    args = {"prompt": prompt, "agent": "revisor", "mode": mode}
    started = await call(session, "run", {**args, "workspace": {"kind": "copy", "path": project}})
    await finish(session, started["taskId"], "completed")
    preview = await call(session, "preview", {"taskId": started["taskId"]})
    return started["taskId"], preview["sha256"]


async def retries_flow(session, project):
    await session.initialize()
    first, sha = await copy_task(session, project, "write one.txt: one\\n", "write")
    command = {"executable": "sh", "args": ["-c", FAILING]}
    base = {"taskId": first, "expectedSha256": sha, "command": command}

    await refused(session, {**base, "retries": 4}, "INVALID_INPUT")
    reader, reader_sha = await copy_task(session, project, "read one.txt", "read-only")
    await refused(
        session,
        {"taskId": reader, "expectedSha256": reader_sha, "command": command, "retries": 1},
        "INVALID_INPUT",
    )

    tested = await call(session, "test", {**base, "retries": 2})
    assert not tested["passed"], tested
    loop = tested["retries"]
    assert loop["state"] == "running", loop
    assert loop["retries"] == 2 and len(loop["attempts"]) == 1, loop
    fix = loop["continuationTaskIds"][0]
    await finish(session, fix, "completed")

    preview = await settled(session, fix)
    loop = preview["testRetries"]
    assert loop["state"] == "passed", loop
    assert [a["passed"] for a in loop["attempts"]] == [False, True], loop
    assert loop["attempts"][1]["taskId"] == fix, loop
    assert loop["finalSha256"] == preview["sha256"] != sha, loop
    assert loop["continuationTaskIds"] == [fix], loop
    assert sorted(f["path"] for f in preview["files"]) == ["fixed.txt", "one.txt"], preview
    assert [t["passed"] for t in preview["tests"]] == [False, True], preview["tests"]

    # The fix turn saw the command and its output as data, its credential lines redacted.
    for tool in ("status", "result"):
        text = json.dumps(await call(session, tool, {"taskId": fix}))
        assert FAKE_TOKEN not in text, f"the fake credential reached the fix turn's {tool}"

    final = {"taskId": fix, "expectedSha256": loop["finalSha256"]}
    verified = await call(session, "verify", {**final, "reviews": []})
    assert verified["passed"], verified
    integrated = await call(session, "integrate", final)
    return {
        "fix": fix,
        "attempts": len(loop["attempts"]),
        "integrated": sorted(integrated["files"]),
    }


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    chosen = retries_flow if sys.argv[3:] == ["retries"] else flow
    async with stdio_session(binary) as session:
        report = await chosen(session, project)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
