"""A workflow over MCP with the official Python `mcp` SDK, all on revisor: group_create (a
cyclic definition refused, the good one stored, the same id and definition read back),
group_start, group_wait with a progress token until ready, group_status, groups,
workflow_result, peer_receipts (the implementer's peer message to the synthesis, paged,
without its body; a bad limit refused) and group_cancel of an ended group.

Run by crates/legate/tests/mcp_groups.rs; not a test on its own.

    python3 group_flow.py LEGATE_BIN PROJECT

Prints one JSON line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, is_error, stdio_session, structured

ENVELOPE = (
    '<legate-peer-message>{"messageId":"impl-note-1","toNode":"synth",'
    '"text":"impl wrote a.txt"}</legate-peer-message>'
)


def definition(project, cyclic=False):
    return {
        "workingDirectory": project,
        "title": "plan, implement, synthesise",
        "nodes": [
            {"id": "plan", "role": "planner", "agent": "revisor",
             "prompt": "Plan a change to README.md.",
             "dependsOn": ["synth"] if cyclic else []},
            {"id": "impl", "agent": "revisor", "dependsOn": ["plan"], "fileSources": "plan",
             "prompt": f"write note.txt: {ENVELOPE}\nwrite a.txt: a\nread note.txt"},
            {"id": "synth", "role": "planner", "agent": "revisor", "dependsOn": ["impl"],
             "prompt": "Summarise the change to README.md."},
        ],
        "peerRoutes": [{"from": "impl", "to": "synth"}],
        "workflow": {"finalNode": "synth"},
    }


async def flow(session, project):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    wanted = {"group_create", "group_start", "group_status", "group_wait", "group_cancel",
              "groups", "workflow_result", "peer_receipts"}
    assert wanted <= names, names

    refused = await session.call_tool("group_create", {"definition": definition(project, True)})
    assert is_error(refused), structured(refused)
    assert structured(refused)["error"]["code"] == "WORKFLOW_INVALID", structured(refused)

    created = await call(session, "group_create", {"definition": definition(project)})
    group, sha = created["groupId"], created["definitionSha256"]
    again = await call(session, "group_create",
                       {"definition": definition(project), "groupId": group})
    assert again["definitionSha256"] == sha and again["existing"], again

    started = await call(session, "group_start", {"groupId": group, "definitionSha256": sha})
    assert started["state"] == "running", started

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    for _ in range(20):
        waited = await call(session, "group_wait", {"groupId": group, "timeoutSeconds": 30},
                            progress_callback=on_progress)
        if waited["ready"]:
            break
    assert waited["status"]["state"] == "completed", waited
    for p in progress:
        assert "nodes succeeded" in p["message"], progress
        assert "Plan a change" not in p["message"], progress
    # No intermediate result travels in a wait's answer.
    assert "Summarise" not in json.dumps(waited), waited

    status = await call(session, "group_status", {"groupId": group})
    listed = await call(session, "groups", {})
    assert any(g["groupId"] == group for g in listed["groups"]), listed

    result = await call(session, "workflow_result", {"groupId": group})
    assert result["finalNode"] == "synth", result

    page = await call(session, "peer_receipts", {"groupId": group, "limit": 1})
    receipts = page["receipts"]
    assert len(receipts) == 1, page
    assert receipts[0]["from"] == "impl" and receipts[0]["to"] == "synth", page
    assert receipts[0]["state"] == "sent", page
    assert receipts[0]["origin"] == "agent-reported", page
    assert "text" not in receipts[0], page
    after = await call(session, "peer_receipts",
                       {"groupId": group, "after": page["nextCursor"]})
    assert after["receipts"] == [] and not after["hasMore"], after
    bad = await session.call_tool("peer_receipts", {"groupId": group, "limit": 21})
    assert is_error(bad) and structured(bad)["error"]["code"] == "INVALID_INPUT", structured(bad)
    unknown = await session.call_tool("peer_receipts", {"groupId": "no-such-group"})
    assert structured(unknown)["error"]["code"] == "GROUP_NOT_FOUND", structured(unknown)

    canceled = await session.call_tool("group_cancel", {"groupId": group})
    return {
        "groupId": group,
        "state": status["state"],
        "synthTasks": len(next(n for n in status["nodes"] if n["id"] == "synth")["taskIds"]),
        "progress": len(progress),
        "receipts": len(receipts),
        "cancelAfterEnd": (structured(canceled).get("error") or {}).get("code")
        or structured(canceled).get("state"),
    }


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, project)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
