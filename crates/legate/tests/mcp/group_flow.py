"""A workflow over MCP with the official Python `mcp` SDK, all on revisor: group_create (a
cyclic definition refused, the good one stored, the same id and definition read back),
group_start, group_wait with a progress token until ready, group_status, groups,
workflow_result, peer_receipts (the implementer's peer message to the synthesis, paged,
without its body; a bad limit refused) and group_cancel of an ended group. Then the attacks:
a node whose answer carries two peer messages under one id (the group pauses on
PEER_MESSAGE_CONFLICT with that node `held`; a resume drops the second, and its answer says
so; the first stands and is delivered, and the group completes), and a
read-only node flooding blockers (every group_wait page stays within its limit, one message
per task; cursors of another group, a cursor past the end and a limit out of range are
refused).

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


def holds(cid, kind, path, text=None):
    check = {"kind": kind, "path": path}
    if text is not None:
        check["text"] = text
    return {"id": cid, "description": f"{path} checked", "check": check}


def definition(project, cyclic=False):
    return {
        "workingDirectory": project,
        "title": "plan, implement, synthesise",
        "nodes": [
            {"id": "plan", "role": "planner", "agent": "revisor",
             "prompt": "Plan a change to README.md.",
             "acceptanceCriteria": [holds("readme", "file-exists", "README.md")],
             "dependsOn": ["synth"] if cyclic else []},
            {"id": "impl", "agent": "revisor", "dependsOn": ["plan"], "fileSources": "plan",
             "acceptanceCriteria": [holds("a", "file-contains", "a.txt", "a")],
             "prompt": f"write note.txt: {ENVELOPE}\nwrite a.txt: a\nread note.txt"},
            {"id": "synth", "role": "planner", "agent": "revisor", "dependsOn": ["impl"],
             "acceptanceCriteria": [holds("readme", "file-exists", "README.md")],
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
        "synthTask": next(n for n in status["nodes"] if n["id"] == "synth")["taskId"],
        "progress": len(progress),
        "receipts": len(receipts),
        "cancelAfterEnd": (structured(canceled).get("error") or {}).get("code")
        or structured(canceled).get("state"),
    }


def envelope(message_id, to, text):
    body = json.dumps({"messageId": message_id, "toNode": to, "text": text})
    return f"<legate-peer-message>{body}</legate-peer-message>"


async def wait_ready(session, group, cursors=None, pages=None):
    """group_wait with the cursors passed back until ready and nothing more to read."""
    for _ in range(60):
        args = {"groupId": group, "timeoutSeconds": 20}
        if cursors is not None:
            args["cursors"] = cursors
        waited = await call(session, "group_wait", args)
        if pages is not None:
            pages.append(waited)
        cursors = waited["cursors"]
        if waited["ready"] and not waited["hasMoreMessages"]:
            return waited
    raise AssertionError(f"group {group} never settled: {waited}")


async def started(session, definition):
    """group_create then group_start; the group's id and definition hash."""
    created = await call(session, "group_create", {"definition": definition})
    group, sha = created["groupId"], created["definitionSha256"]
    await call(session, "group_start", {"groupId": group, "definitionSha256": sha})
    return group, sha


async def paused_on(session, definition, reason):
    """Starts `definition`, waits until it settles, and checks it paused on `reason`."""
    group, sha = await started(session, definition)
    status = (await wait_ready(session, group))["status"]
    assert status["state"] == "paused", status
    assert status["pauseReason"] == reason, status
    return group, sha, status


async def conflict(session, project):
    """Two peer messages under one id: held and paused; a resume drops the second."""
    twice = envelope("dup", "hear", "one") + " " + envelope("dup", "hear", "two")
    definition = {
        "workingDirectory": project,
        "nodes": [
            {"id": "talk", "agent": "revisor", "prompt": f"write note.txt: {twice}\nread note.txt"},
            {"id": "hear", "agent": "revisor", "role": "planner", "dependsOn": ["talk"],
             "prompt": "Summarise note.txt."},
        ],
        "peerRoutes": [{"from": "talk", "to": "hear"}],
    }
    group, sha, status = await paused_on(session, definition, "PEER_MESSAGE_CONFLICT")
    nodes = {n["id"]: n for n in status["nodes"]}
    assert nodes["talk"]["state"] == "held", status
    assert nodes["talk"]["error"] == "PEER_MESSAGE_CONFLICT", status
    assert nodes["hear"]["state"] == "pending", status
    # Until a resume nothing moves: the receipt of the first message only, still queued.
    page = await call(session, "peer_receipts", {"groupId": group})
    assert [r["state"] for r in page["receipts"]] == ["queued"], page
    # A resume records the same answer again: the envelope that conflicts is dropped (the
    # recorded message stands), and the group goes on to deliver it.
    resumed = await call(session, "group_start", {"groupId": group, "definitionSha256": sha})
    assert resumed["state"] == "running", resumed
    # The answer says what the resume dropped: the envelope's id and sender, never its text.
    dropped = resumed["droppedPeerMessages"]
    assert len(dropped) == 1, resumed
    assert dropped[0]["nodeId"] == "talk", dropped
    assert dropped[0]["taskId"] == nodes["talk"]["taskId"], (dropped, nodes)
    assert '"dup"' in dropped[0]["reason"] and "two" not in dropped[0]["reason"], dropped
    again = await wait_ready(session, group)
    assert again["status"]["state"] == "completed", again
    nodes = {n["id"]: n for n in again["status"]["nodes"]}
    assert nodes["talk"]["state"] == "succeeded", again
    # The first message was `hear`'s second turn.
    assert nodes["hear"]["state"] == "succeeded" and len(nodes["hear"]["taskIds"]) == 2, again
    page = await call(session, "peer_receipts", {"groupId": group})
    receipts = page["receipts"]
    assert len(receipts) == 1 and receipts[0]["state"] == "sent", page
    return {"conflictNode": "held", "conflictResumed": again["status"]["state"]}


async def flood(session, project, other_group):
    """A read-only node whose every write is refused: a blocker each, read four at a time."""
    writes = "\n".join(f"write f{i}.txt: x" for i in range(30))
    definition = {
        "workingDirectory": project,
        "nodes": [
            {"id": "flood", "agent": "revisor", "role": "planner", "prompt": writes},
            {"id": "quiet", "agent": "revisor", "role": "planner",
             "prompt": "Summarise the README.md."},
        ],
    }
    group, _ = await started(session, definition)
    pages = []
    last = await wait_ready(session, group, {}, pages)
    seen = []
    for page in pages:
        assert len(page["messages"]) <= 4, page
        tasks = [m["taskId"] for m in page["messages"]]
        assert len(tasks) == len(set(tasks)), page
        for m in page["messages"]:
            assert m["message"]["kind"] in ("question", "blocker"), m
            seen.append((m["taskId"], m["message"]["seq"]))
    assert len(seen) == len(set(seen)), seen
    assert len(seen) >= 10, seen
    assert sum(1 for p in pages if p["hasMoreMessages"]) >= 1, pages
    # No answer of a node travels in a page.
    assert "Summarise" not in json.dumps(pages), pages

    async def refused(args):
        out = await session.call_tool("group_wait", {"groupId": group, "timeoutSeconds": 1,
                                                     **args})
        assert is_error(out), structured(out)
        return structured(out)["error"]["code"]

    flood_task = next(n for n in last["status"]["nodes"] if n["id"] == "flood")["taskId"]
    codes = {
        "otherGroup": await refused({"cursors": {other_group: 0}}),
        "negativeLimit": await refused({"limit": -1}),
        "hugeLimit": await refused({"limit": 1000000}),
        "zeroLimit": await refused({"limit": 0}),
        "pastTheEnd": await refused({"cursors": {flood_task: 10**12}}),
        "negativeCursor": await refused({"cursors": {flood_task: -5}}),
    }
    assert set(codes.values()) == {"INVALID_INPUT"}, codes
    return {"floodMessages": len(seen), "floodPages": len(pages), "refusedCodes": codes}


async def criteria(session, project):
    """Workflow steps need criteria; a path outside the copy is refused; a failing check
    holds its step and releases none of its dependents."""
    def workflow(first_criteria):
        first = {"id": "first", "agent": "revisor", "prompt": "write b.txt: b"}
        if first_criteria is not None:
            first["acceptanceCriteria"] = first_criteria
        return {
            "workingDirectory": project,
            "nodes": [
                first,
                {"id": "last", "agent": "revisor", "role": "planner", "dependsOn": ["first"],
                 "prompt": "Summarise b.txt.",
                 "acceptanceCriteria": [holds("readme", "file-exists", "README.md")]},
            ],
            "workflow": {"finalNode": "last"},
        }

    async def refused(definition):
        out = await session.call_tool("group_create", {"definition": definition})
        assert is_error(out), structured(out)
        return structured(out)["error"]["code"]

    codes = {
        "noCriteria": await refused(workflow(None)),
        "outside": await refused(workflow([holds("x", "file-exists", "../../etc/passwd")])),
        "absolute": await refused(workflow([holds("x", "file-exists", "/etc/passwd")])),
    }
    wrong = workflow([holds("wrong", "file-contains", "b.txt", "not what was written")])
    group, sha, status = await paused_on(session, wrong, "VERIFICATION_REQUIRED")
    assert "wrong" in status["pauseMessage"], status
    nodes = {n["id"]: n for n in status["nodes"]}
    assert nodes["first"]["state"] == "held", status
    assert nodes["last"]["state"] == "pending" and not nodes["last"]["taskIds"], status
    resumed = await call(session, "group_start", {"groupId": group, "definitionSha256": sha})
    assert resumed["state"] == "paused", resumed
    await call(session, "group_cancel", {"groupId": group})
    return {"criteriaRefusals": codes, "criteriaHeld": nodes["first"]["state"]}


async def roles(session, project):
    """Role `scribe` (configured by mcp_groups.rs) gives allowedTools ["read"] and
    artifactPaths ["b.txt"]: a node that names nothing gets both (its write refused, b.txt
    missing); a node naming its own allowedTools keeps them (b.txt collected). A role whose
    default passes the configured ceiling is refused at admission."""
    definition = {
        "workingDirectory": project,
        "nodes": [
            {"id": "narrow", "agent": "revisor", "role": "scribe", "prompt": "write b.txt: b"},
            {"id": "own", "agent": "revisor", "role": "scribe", "prompt": "write b.txt: b",
             "allowedTools": ["read", "edit"]},
        ],
    }
    group, _ = await started(session, definition)
    pages = []
    last = await wait_ready(session, group, {}, pages)
    assert last["status"]["state"] == "completed", last
    tasks = {n["id"]: n["taskId"] for n in last["status"]["nodes"]}
    blockers = [m for p in pages for m in p["messages"] if m["node"] == "narrow"]
    assert any("edit" in m["message"]["text"] for m in blockers), pages
    assert not any(m["node"] == "own" for p in pages for m in p["messages"]), pages
    narrow = await call(session, "result", {"taskId": tasks["narrow"]})
    own = await call(session, "result", {"taskId": tasks["own"]})
    assert [(a["name"], a["state"]) for a in narrow["artifacts"]] == [("b.txt", "missing")], narrow
    assert [(a["name"], a["state"]) for a in own["artifacts"]] == [("b.txt", "collected")], own

    over = {
        "workingDirectory": project,
        "nodes": [{"id": "runs", "agent": "revisor", "role": "runner", "prompt": "read README.md"}],
    }
    group, _, status = await paused_on(session, over, "TOOL_NOT_ALLOWED")
    assert not status["nodes"][0]["taskIds"], status
    await call(session, "group_cancel", {"groupId": group})
    return {"roleDefaults": "applied", "ceiling": status["pauseReason"]}


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, project)
        report.update(await conflict(session, project))
        other_task = report["synthTask"]
        report.update(await flood(session, project, other_task))
        report.update(await criteria(session, project))
        report.update(await roles(session, project))
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
