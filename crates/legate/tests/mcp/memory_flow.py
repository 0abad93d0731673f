"""The private-memory tools over MCP with the official Python `mcp` SDK, on revisor.

Run by crates/legate/tests/mcp_memory.rs; not a test on its own.

    python3 memory_flow.py LEGATE_BIN PROJECT

On a `full` server: memory_list (metadata, no text), memory_write creating with null and
replacing with the current sha256 (a stale or repeated null is MEMORY_CHANGED), memory_read in
pieces bound to the sha256, a text with a credential refused (INPUT_SECRET_DETECTED) without
its value in the error, `run` on a copy with the entry selected (its snapshot in the task) and
a stale selection refused, memory_remove of only the matching version. On a `query` server:
memory_list and memory_read are offered, memory_write and memory_remove are not. Prints one
JSON line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, finish, is_error, stdio_session, structured


async def refused(session, name, args):
    result = await session.call_tool(name, args)
    assert is_error(result), (name, structured(result))
    return structured(result)["error"]


async def full(session, project):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"memory_list", "memory_read", "memory_write", "memory_remove"} <= names, names

    empty = await call(session, "memory_list", {"projectPath": project})
    assert empty["entries"] == [], empty
    assert empty["limits"] == {"maxEntries": 100, "maxBytes": 1048576, "maxEntryBytes": 65536}, empty

    note = "The parser lives in README.md; é😀 keep it small."
    created = await call(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "reviewer", "text": note, "expectedSha256": None},
    )
    sha = created["sha256"]
    assert len(sha) == 64 and created["replaced"] is False, created
    again = await refused(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "reviewer", "text": "x", "expectedSha256": None},
    )
    assert again["code"] == "MEMORY_CHANGED", again

    listed = await call(session, "memory_list", {"projectPath": project, "specialist": "reviewer"})
    assert [e["sha256"] for e in listed["entries"]] == [sha], listed
    assert note not in json.dumps(listed), listed

    text, offset = "", 0
    while True:
        piece = await call(
            session,
            "memory_read",
            {"projectPath": project, "specialist": "reviewer", "expectedSha256": sha,
             "offset": offset, "limit": 7},
        )
        text += piece["text"]
        offset = piece["nextOffset"]
        if not piece["hasMore"]:
            break
    assert text == note, text

    key = "AKIA" + "Q3ZL7RTX2WNVD6KM"
    leak = await refused(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "ops", "text": f"deploy with {key}",
         "expectedSha256": None},
    )
    assert leak["code"] == "INPUT_SECRET_DETECTED", leak
    assert key not in leak["message"], leak
    prompt_leak = await refused(session, "run", {"prompt": f"use {key}", "agent": "revisor"})
    assert prompt_leak["code"] == "INPUT_SECRET_DETECTED", prompt_leak
    assert key not in prompt_leak["message"], prompt_leak

    started = await call(
        session,
        "run",
        {"prompt": "write one.txt: one\\n", "agent": "revisor",
         "workspace": {"kind": "copy", "path": project},
         "memory": [{"specialist": "reviewer", "sha256": sha}]},
    )
    await finish(session, started["taskId"])
    preview = await call(session, "preview", {"taskId": started["taskId"]})
    assert [f["path"] for f in preview["files"]] == ["one.txt"], preview

    replaced = await call(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "reviewer", "text": "newer", "expectedSha256": sha},
    )
    assert replaced["replaced"] is True, replaced
    stale = await refused(
        session,
        "run",
        {"prompt": "hello", "agent": "revisor",
         "workspace": {"kind": "copy", "path": project},
         "memory": [{"specialist": "reviewer", "sha256": sha}]},
    )
    assert stale["code"] == "MEMORY_CHANGED", stale
    old = await refused(
        session,
        "memory_remove",
        {"projectPath": project, "specialist": "reviewer", "expectedSha256": sha},
    )
    assert old["code"] == "MEMORY_CHANGED", old
    await call(
        session,
        "memory_remove",
        {"projectPath": project, "specialist": "reviewer", "expectedSha256": replaced["sha256"]},
    )
    gone = await refused(
        session,
        "memory_read",
        {"projectPath": project, "specialist": "reviewer", "expectedSha256": replaced["sha256"]},
    )
    assert gone["code"] == "MEMORY_NOT_FOUND", gone
    # One entry for the query server to read.
    kept = await call(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "planner", "text": "plan first", "expectedSha256": None},
    )
    return {"sha256": sha, "taskId": started["taskId"], "kept": kept["sha256"]}


async def query(session, project, kept):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert {"memory_list", "memory_read"} <= names, names
    assert not ({"memory_write", "memory_remove"} & names), names
    piece = await call(
        session,
        "memory_read",
        {"projectPath": project, "specialist": "planner", "expectedSha256": kept},
    )
    assert piece["text"] == "plan first", piece
    # A tool outside the profile is refused at the protocol level, before any argument is read.
    try:
        result = await session.call_tool(
            "memory_write",
            {"projectPath": project, "specialist": "planner", "text": "x", "expectedSha256": kept},
        )
    except Exception as e:  # the SDK raises the JSON-RPC error
        assert "no tool named" in str(e), e
    else:
        assert is_error(result), structured(result)
    return sorted(n for n in names if n.startswith("memory_"))


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await full(session, project)
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "query"}) as session:
        report["queryTools"] = await query(session, project, report["kept"])
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
