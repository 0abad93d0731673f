"""`run` on a git root and the seed's top-level options, over MCP with the official Python SDK.

Run by crates/legate/tests/mcp.rs; not a test on its own.

    python3 run_flow.py LEGATE_BIN PROJECT PLAIN OUTSIDE FAKE_GIT_DIR

PROJECT is a git root (README.md, src/lib.rs, `escape` a link to OUTSIDE), PLAIN a directory in
no git project, FAKE_GIT_DIR holds a `git` that reports version 2.31.0. On revisor:
`workingDirectory` alone on a git root works in a copy and leaves the project untouched;
`workspace: {kind: "shared"}` and `isolateWorktree: false` write in place, `isolateWorktree:
true` copies; top-level `includePaths` narrow the copy and `acceptanceCriteria` are what
`verify` checks; `..`, absolute and linked include paths, contradicting options, `outputSchema`
and `effort` for an agent that takes none are refused and store nothing; the memory a task was
given shows in run, status and result; prompts at the 50,000-character limit in multi-byte
characters pass and one more fails; with the old git on PATH a copy is GIT_UNSUPPORTED. Prints
one JSON line with what it saw and exits 0, or raises.
"""

import asyncio
import json
import os
import sys

from client import call, finish, is_error, stdio_session, structured


async def refused(session, args):
    result = await session.call_tool("run", args)
    assert is_error(result), (args, structured(result))
    return structured(result)["error"]


async def count(session):
    return len((await call(session, "tasks", {"limit": 200}))["tasks"])


async def run(session, args):
    started = await call(session, "run", {"agent": "revisor", **args})
    await finish(session, started["taskId"])
    return started


async def defaults_and_explicit_forms(session, project, plain):
    # The seed's first call: a git root alone is a copy, and the project is untouched.
    copied = await run(session, {"prompt": "write new.txt: from the agent", "workingDirectory": project})
    assert copied["workspace"] == "copy", copied
    assert not os.path.exists(os.path.join(project, "new.txt")), "the project was written"
    preview = await call(session, "preview", {"taskId": copied["taskId"]})
    assert [f["path"] for f in preview["files"]] == ["new.txt"], preview
    status = await call(session, "status", {"taskId": copied["taskId"]})
    assert status["task"]["root"] != project, status

    isolated = await run(
        session, {"prompt": "write iso.txt: x", "workingDirectory": project, "isolateWorktree": True}
    )
    assert isolated["workspace"] == "copy", isolated
    assert not os.path.exists(os.path.join(project, "iso.txt"))

    # In place only when asked for: both explicit forms.
    shared = await run(
        session,
        {"prompt": "write shared.txt: in place", "workingDirectory": project,
         "workspace": {"kind": "shared"}},
    )
    assert shared["workspace"] == "shared", shared
    with open(os.path.join(project, "shared.txt")) as f:
        assert f.read() == "in place"
    legacy = await run(
        session, {"prompt": "write legacy.txt: x", "workingDirectory": project, "isolateWorktree": False}
    )
    assert legacy["workspace"] == "shared", legacy
    assert os.path.exists(os.path.join(project, "legacy.txt"))
    # A directory in no git project keeps today's behaviour: shared.
    outside_git = await run(session, {"prompt": "write plain.txt: x", "workingDirectory": plain})
    assert outside_git["workspace"] == "shared", outside_git
    assert os.path.exists(os.path.join(plain, "plain.txt"))
    # A directory inside a git project but not its root is neither.
    inside = await refused(session, {"prompt": "x", "workingDirectory": os.path.join(project, "src")})
    assert inside["code"] == "INVALID_WORKSPACE", inside
    return copied["taskId"]


async def top_level_options(session, project):
    narrowed = await run(
        session,
        {"prompt": "write src/more.rs: fn g() {}", "workingDirectory": project,
         "includePaths": ["src"],
         "acceptanceCriteria": [{"id": "more", "description": "src/more.rs exists",
                                 "check": {"kind": "file-exists", "path": "src/more.rs"}}]},
    )
    assert narrowed["workspace"] == "copy", narrowed
    root = (await call(session, "status", {"taskId": narrowed["taskId"]}))["task"]["root"]
    assert sorted(os.listdir(os.path.join(root, "src"))) == ["lib.rs", "more.rs"], root
    assert not os.path.exists(os.path.join(root, "README.md")), os.listdir(root)
    preview = await call(session, "preview", {"taskId": narrowed["taskId"]})
    verified = await call(
        session,
        "verify",
        {"taskId": narrowed["taskId"], "expectedSha256": preview["sha256"],
         "reviews": [{"criterionId": "more", "verdict": "passed", "path": "src/more.rs",
                      "line": 1, "quote": "fn g() {}", "explanation": "written"}]},
    )
    assert [c["criterionId"] for c in verified["criteria"]] == ["more"], verified
    assert verified["passed"] is True, verified
    return narrowed["taskId"]


async def hostile_calls(session, project, outside):
    before = await count(session)
    codes = {}
    for name, paths in [
        ("dotdot", ["../" + os.path.basename(outside)]),
        ("dotdot-inner", ["src/../../etc"]),
        ("absolute", [outside]),
        ("link", ["escape"]),
        ("through-link", ["escape/secret.txt"]),
    ]:
        e = await refused(
            session, {"prompt": "x", "agent": "revisor", "workingDirectory": project, "includePaths": paths}
        )
        codes[name] = e["code"]
    for args in [
        {"workspace": {"kind": "copy"}, "includePaths": ["src"]},
        {"workspace": {"kind": "copy", "path": project}, "acceptanceCriteria": []},
        {"workspace": {"kind": "shared"}, "isolateWorktree": True},
        {"workspace": {"kind": "copy"}, "isolateWorktree": False},
        {"isolateWorktree": False, "includePaths": ["src"]},
        {"workspace": {"kind": "shared", "includePaths": ["src"]}},
        {"jsonSchema": {"type": "object"}, "outputSchema": {"type": "object"}},
    ]:
        e = await refused(session, {"prompt": "x", "agent": "revisor", "workingDirectory": project, **args})
        assert e["code"] == "INVALID_INPUT", (args, e)
    schema = await refused(session, {"prompt": "x", "agent": "revisor", "outputSchema": {"type": "object"}})
    assert schema["code"] == "INVALID_INPUT" and "agy" in schema["message"], schema
    effort = await refused(session, {"prompt": "x", "agent": "revisor", "effort": "high"})
    assert effort["code"] == "INVALID_INPUT" and "effort" in effort["message"], effort
    bad_effort = await session.call_tool("run", {"prompt": "x", "effort": "extreme"})
    assert is_error(bad_effort), structured(bad_effort)
    assert await count(session) == before, "a refused run stored a task"
    assert not os.path.exists(os.path.join(outside, "x")), "the outside was written"
    return codes


async def memory_shown(session, project, without):
    written = await call(
        session,
        "memory_write",
        {"projectPath": project, "specialist": "reviewer", "text": "Keep src small.", "expectedSha256": None},
    )
    expected = [{"specialist": "reviewer", "sha256": written["sha256"], "bytes": 15}]
    started = await call(
        session,
        "run",
        {"prompt": "write m.txt: m", "agent": "revisor", "workingDirectory": project,
         "memory": [{"specialist": "reviewer", "sha256": written["sha256"]}]},
    )
    assert started["memory"] == expected, started
    await finish(session, started["taskId"])
    status = await call(session, "status", {"taskId": started["taskId"]})
    assert status["task"]["memory"] == expected, status
    result = await call(session, "result", {"taskId": started["taskId"], "includeResult": False})
    assert result["memory"] == expected, result
    assert "Keep src small." not in json.dumps([started, status, result])
    # Continuing the conversation keeps (and shows) the same snapshots.
    resumed = await call(session, "resume", {"contextId": started["contextId"], "prompt": "read m.txt"})
    assert resumed["memory"] == expected, resumed
    await finish(session, resumed["taskId"])
    # A task given none says nothing of memory.
    plain = await call(session, "status", {"taskId": without})
    return started["taskId"], "memory" not in plain["task"]


async def prompt_limit(session):
    before = await count(session)
    for char in ["é", "€", "😀"]:
        e = await refused(session, {"prompt": char * 50001, "agent": "revisor"})
        assert e["code"] == "INVALID_INPUT" and "50000" in e["message"], e
    assert await count(session) == before
    at_limit = await call(session, "run", {"prompt": "😀" * 50000, "agent": "revisor"})
    await call(session, "cancel", {"taskId": at_limit["taskId"]})
    return at_limit["taskId"]


async def old_git(binary, project, plain, fake_dir):
    env = {"PATH": fake_dir + os.pathsep + os.environ.get("PATH", "")}
    async with stdio_session(binary, env) as session:
        await session.initialize()
        before = await count(session)
        for args in [{"workingDirectory": project}, {"workingDirectory": project, "isolateWorktree": True},
                     {"workspace": {"kind": "copy", "path": project}}]:
            e = await refused(session, {"prompt": "write g.txt: g", "agent": "revisor", **args})
            assert e["code"] == "GIT_UNSUPPORTED" and "2.31" in e["message"], e
        assert await count(session) == before
        # What needs no copy still runs.
        shared = await run(session, {"prompt": "write g.txt: g", "workingDirectory": plain})
        assert shared["workspace"] == "shared", shared
        return e["code"]


async def main():
    binary, project, plain, outside, fake_dir = sys.argv[1:6]
    report = {}
    async with stdio_session(binary) as session:
        await session.initialize()
        report["copyTask"] = await defaults_and_explicit_forms(session, project, plain)
        report["narrowedTask"] = await top_level_options(session, project)
        report["hostile"] = await hostile_calls(session, project, outside)
        report["memoryTask"], report["noMemoryShown"] = await memory_shown(session, project, report["copyTask"])
        report["atLimitTask"] = await prompt_limit(session)
    report["oldGit"] = await old_git(binary, project, plain, fake_dir)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
