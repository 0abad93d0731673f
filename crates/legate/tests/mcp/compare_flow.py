"""A comparison over MCP with the official Python `mcp` SDK, on revisor.

Run by crates/legate/tests/mcp_compare.rs; not a test on its own.

    python3 compare_flow.py LEGATE_BIN PROJECT

An implementer task writes notes.md in a copy of PROJECT; its context is compared on two
targets (revisor with its default model, and revisor-thorough); the same target twice, one
target, and a stale context hash are refused; each review is followed with `wait`; then
`comparison` is complete, not stale, and groups revisor's deterministic findings as
identical. Prints one JSON line with what it saw and exits 0, or raises.
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
            return
    raise AssertionError(f"task {task_id} did not end")


async def refused(session, args, code):
    out = await session.call_tool("compare", args)
    assert is_error(out), structured(out)
    assert structured(out)["error"]["code"] == code, structured(out)


async def flow(session, project):
    await session.initialize()
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"compare", "comparison"} <= set(tools), tools.keys()
    hints = tools["comparison"].annotations.model_dump(by_alias=True)
    assert hints.get("readOnlyHint") is True, hints

    source = await call(
        session,
        "run",
        {
            "prompt": "write notes.md: notes\\n",
            "agent": "revisor",
            "workspace": {"kind": "copy", "path": project},
        },
    )
    await finish(session, source["taskId"])
    ctx = await call(session, "context", {"taskId": source["taskId"]})

    def args(targets, sha=ctx["contextSha256"]):
        return {
            "sourceTaskId": source["taskId"],
            "expectedContextSha256": sha,
            "prompt": "Review the crate.",
            "targets": targets,
        }

    two = [{"agent": "revisor"}, {"agent": "revisor", "model": "revisor-thorough"}]
    await refused(session, args([{"agent": "revisor"}, {"agent": "revisor"}]), "INVALID_INPUT")
    await refused(session, args([{"agent": "revisor"}]), "INVALID_INPUT")
    await refused(session, args(two, "0" * 64), "CONTEXT_CHANGED")

    started = await call(session, "compare", args(two))
    assert len(started["taskIds"]) == 2 and started["startErrors"] == [], started
    for task_id in started["taskIds"]:
        await finish(session, task_id)

    c = await call(session, "comparison", {"comparisonId": started["comparisonId"]})
    assert c["complete"] is True and c["contextStale"] is False, c
    assert [r["contextMatches"] for r in c["reviews"]] == [True, True], c
    assert c["reviews"][1]["model"] == "revisor-thorough", c
    assert c["findings"], c
    assert {f["agreement"] for f in c["findings"]} == {"identical"}, c
    assert all(len(f["reportedBy"]) == 2 for f in c["findings"]), c

    missing = await session.call_tool("comparison", {"comparisonId": "nope"})
    assert structured(missing)["error"]["code"] == "COMPARISON_NOT_FOUND", structured(missing)
    return {
        "comparisonId": started["comparisonId"],
        "complete": c["complete"],
        "agreements": sorted({f["agreement"] for f in c["findings"]}),
        "findings": [[f["path"], f["line"]] for f in c["findings"]],
    }


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, project)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
