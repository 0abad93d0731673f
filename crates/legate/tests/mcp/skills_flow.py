"""Client skills over MCP with the official Python `mcp` SDK, on revisor.

Run by crates/legate/tests/mcp_skills.rs; not a test on its own.

    python3 skills_flow.py LEGATE_BIN PROJECT

`run` on a copy of PROJECT with a client skill: the answer lists the staged skills by name,
directory and sha256 (Legate's bundled packs first), never their text; the agent reads and
quotes the skill, edits it and plants another under .agents/skills/; the preview and the
patch hold only one.txt (and `preview` with `includePatch` answers that same patch inline). The same name with other files is SKILL_CONFLICT, and skills on a
sandbox are refused. Prints one JSON line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import sys

from client import call, is_error, stdio_session, structured

SKILL = {
    "name": "Review-Style",
    "content": "quote-me: check every claim against the real files\n",
    "resources": [{"path": "references/check.md", "content": "reference line\n"}],
}


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
    started = await call(
        session,
        "run",
        {
            "prompt": "read .agents/skills/review-style/SKILL.md\n"
            "replace .agents/skills/review-style/SKILL.md: quote-me => tampered\n"
            "write .agents/skills/planted/SKILL.md: planted\n"
            "write one.txt: one\\n",
            "agent": "revisor",
            "workspace": {"kind": "copy", "path": project},
            "skills": [SKILL],
        },
    )
    answer = json.dumps(started)
    assert "quote-me" not in answer and "reference line" not in answer, answer
    result = await finish(session, started["taskId"])
    preview = await call(session, "preview", {"taskId": started["taskId"]})
    patch = await call(
        session,
        "read_patch",
        {"taskId": started["taskId"], "expectedSha256": preview["sha256"]},
    )
    # The seed's `includePatch`: the same patch inline, bound to the same sha256.
    inline = await call(session, "preview", {"taskId": started["taskId"], "includePatch": True})

    other = dict(SKILL, name="review-style", content="other files\n")
    conflict = await session.call_tool(
        "run",
        {
            "prompt": "read one.txt",
            "agent": "revisor",
            "workspace": {"kind": "copy", "path": project},
            "skills": [SKILL, other],
        },
    )
    sandboxed = await session.call_tool(
        "run", {"prompt": "read one.txt", "agent": "revisor", "skills": [SKILL]}
    )
    return {
        "skills": started["skills"],
        "quoted": "quote-me: check every claim" in (result.get("answer") or ""),
        "changed": sorted(f["path"] for f in preview["files"]),
        "patchMentionsSkills": ".agents" in patch["text"] or "planted" in patch["text"],
        "plainPreviewHasPatch": "patch" in preview,
        "inlinePatchIsTheReadOne": inline.get("patch") == patch["text"] and not patch["hasMore"]
        and inline["sha256"] == preview["sha256"],
        "conflict": structured(conflict)["error"]["code"] if is_error(conflict) else None,
        "sandbox": structured(sandboxed)["error"]["code"] if is_error(sandboxed) else None,
    }


async def main():
    binary, project = sys.argv[1], sys.argv[2]
    async with stdio_session(binary) as session:
        report = await flow(session, project)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
