"""Single behaviours of Legate's MCP front, driven with the official Python `mcp` SDK client.

Run by crates/legate/tests/mcp.rs; not a test on its own. Each scenario prints JSON lines
with what it saw (the last one is the report) and exits 0, or raises.

    python3 scenarios.py leave URL TOKEN          # HTTP: run; give up on a wait; wait again and
                                                  # print the task id at its first progress
                                                  # notification, then hang (the test kills
                                                  # this process mid-wait)
    python3 scenarios.py follow URL TOKEN TASK    # HTTP: a new session follows TASK to its end
    python3 scenarios.py cancel LEGATE_BIN        # stdio: cancel a running task
    python3 scenarios.py wait-many LEGATE_BIN     # stdio: wait_many over a slow and a quick
                                                  # task, first and all, and hostile id lists
    python3 scenarios.py query-message LEGATE_BIN # stdio: a write context, then send_message
                                                  # into it from a `query` profile server
    python3 scenarios.py queue-zero LEGATE_BIN    # stdio, max_running = 1 and max_queued = 0:
                                                  # a free place takes a task, a full one
                                                  # refuses the next, a cancel frees it
    python3 scenarios.py caller-skill LEGATE_BIN  # stdio: every `tool(arg, …)` the caller-side
                                                  # skill (`legate caller-skill print`) names is
                                                  # a served tool taking those arguments

LEGATE_HOME (and LEGATE_LOG) are passed on to the stdio servers.
"""

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

from client import call, http_session, is_error, stdio_session, structured

# Long enough that the task is still running when the test acts on it (it never waits for
# it to pass: each step waits for an event instead).
SLOW = "run sleep 3\nwrite done.txt: yes"


def report(value):
    print(json.dumps(value), flush=True)


async def wait_until_ready(session, task_id):
    """Waits (30 s per call) until the task ended; its last wait answer and every event."""
    after, events = 0, []
    for _ in range(30):
        body = await call(session, "wait", {"taskId": task_id, "after": after, "timeoutSeconds": 30})
        events.extend(body["events"])
        after = body["nextCursor"]
        if body["ready"] and not body["hasMore"]:
            return body, events
    raise AssertionError(f"task {task_id} did not end")


async def leave(url, token):
    async with http_session(url, token) as session:
        await session.initialize()
        started = await call(session, "run", {"prompt": SLOW, "agent": "revisor"})
        task_id = started["taskId"]

        async def waiting():
            """A wait in flight: the call, and an event set at its first progress notification."""
            notified = asyncio.Event()

            async def on_progress(value, total, message):
                notified.set()

            args = {"taskId": task_id, "timeoutSeconds": 60}
            wait = asyncio.ensure_future(call(session, "wait", args, progress_callback=on_progress))
            await notified.wait()
            return wait

        # First the client gives up on a wait (the SDK sends notifications/cancelled)…
        first = await waiting()
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        # …then, mid-way through another, the test kills this process.
        await waiting()
        report({"taskId": task_id})
        await asyncio.sleep(3600)


async def follow(url, token, task_id):
    async with http_session(url, token) as session:
        await session.initialize()
        status = await call(session, "status", {"taskId": task_id})
        final, events = await wait_until_ready(session, task_id)
        states = [e["state"] for e in events if e["type"] == "status"]
        report(
            {
                "stateWhenFollowed": status["task"]["state"],
                "final": final["state"],
                "taskError": final.get("taskError"),
                "states": states,
            }
        )


async def cancel(binary):
    async with stdio_session(binary) as session:
        await session.initialize()
        started = await call(session, "run", {"prompt": "run sleep 30", "agent": "revisor"})
        task_id = started["taskId"]
        # Running for sure: the agent has started its command. One event per wait, since a
        # wait otherwise returns only when the task ends.
        after, running = 0, False
        for _ in range(100):
            body = await call(
                session,
                "wait",
                {"taskId": task_id, "after": after, "timeoutSeconds": 10, "maxEvents": 1},
            )
            after = body["nextCursor"]
            if any(e["type"] == "tool_call" for e in body["events"]):
                running = True
                break
        assert running, "the command never started"
        before = await call(session, "status", {"taskId": task_id})
        answer = await call(session, "cancel", {"taskId": task_id[:8]})
        final, _ = await wait_until_ready(session, task_id)
        again = await session.call_tool("cancel", {"taskId": task_id})
        report(
            {
                "stateBefore": before["task"]["state"],
                "cancel": answer,
                "final": final["state"],
                "taskError": final.get("taskError"),
                "cancelAgain": structured(again)["error"]["code"] if is_error(again) else None,
            }
        )


async def wait_many(binary):
    import jsonschema

    from client import output_schema

    def code(result):
        return structured(result)["error"]["code"] if is_error(result) else None

    async with stdio_session(binary) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        slow = (await call(session, "run", {"prompt": "run sleep 30", "agent": "revisor"}))["taskId"]
        quick = (await call(session, "run", {"prompt": "hello", "agent": "revisor"}))["taskId"]
        first = await call(
            session, "wait_many", {"taskIds": [slow, quick], "mode": "first", "timeoutSeconds": 60}
        )
        jsonschema.validate(first, output_schema(tools["wait_many"]))
        # The slow one still runs: waiting on all of them times out, changing nothing.
        timed = await call(session, "wait_many", {"taskIds": [slow, quick], "timeoutSeconds": 1})
        hostile = {
            "duplicate": code(await session.call_tool("wait_many", {"taskIds": [quick, quick]})),
            "duplicatePrefix": code(
                await session.call_tool("wait_many", {"taskIds": [quick, quick[:8]]})
            ),
            "tooMany": code(await session.call_tool("wait_many", {"taskIds": [quick] * 33})),
            "thousands": code(
                await session.call_tool("wait_many", {"taskIds": [f"t{i}" for i in range(5000)]})
            ),
            "none": code(await session.call_tool("wait_many", {"taskIds": []})),
            "unknown": code(
                await session.call_tool("wait_many", {"taskIds": [quick, "no-such-task"]})
            ),
            "badMode": code(
                await session.call_tool("wait_many", {"taskIds": [quick], "mode": "any"})
            ),
            "badTimeout": code(
                await session.call_tool("wait_many", {"taskIds": [quick], "timeoutSeconds": 0})
            ),
        }
        status = await call(session, "status", {"taskId": slow})
        await call(session, "cancel", {"taskId": slow})
        everything = await call(session, "wait_many", {"taskIds": [slow, quick], "mode": "all"})
        jsonschema.validate(everything, output_schema(tools["wait_many"]))
        report(
            {
                "first": first,
                "timed": timed,
                "hostile": hostile,
                "slowAfterTimeout": status["task"]["state"],
                "all": everything,
            }
        )


async def query_message(binary):
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "full"}) as session:
        await session.initialize()
        started = await call(session, "run", {"prompt": "write a.txt: one", "agent": "revisor"})
        first, _ = await wait_until_ready(session, started["taskId"])
        first_status = await call(session, "status", {"taskId": started["taskId"]})
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "query"}) as session:
        await session.initialize()
        health = await call(session, "health", {"probe": False})
        receipt = await call(
            session,
            "send_message",
            {"contextId": started["contextId"], "messageId": "m-query", "text": "write b.txt: two"},
        )
        task_id = receipt["continuationTaskId"]
        final, _ = await wait_until_ready(session, task_id)
        status = await call(session, "status", {"taskId": task_id})
        result = await call(session, "result", {"taskId": task_id})
        report(
            {
                "firstMode": first_status["task"]["mode"],
                "firstState": first["state"],
                "profile": health["toolProfile"],
                "receipt": receipt,
                "mode": status["task"]["mode"],
                "contextId": status["task"]["contextId"],
                "final": final["state"],
                "refusals": len(result["refusals"]),
                "answer": result["answer"],
            }
        )


async def roles(binary):
    """The query profile's `roles` and a planner `run`, each answer validated against the
    schema the tool announced."""
    import jsonschema

    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "query"}) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}

        def schema(tool, kind):
            t = tools[tool]
            return getattr(t, kind, None) or getattr(t, {"output_schema": "outputSchema", "input_schema": "inputSchema"}[kind])

        listed = await call(session, "roles", {})
        jsonschema.validate(listed, schema("roles", "output_schema"))
        run_input = schema("run", "input_schema")
        # A reviewer cites real lines, so it reviews a directory with a file in it.
        work = tempfile.mkdtemp()
        with open(os.path.join(work, "lib.rs"), "w") as f:
            f.write("fn f() {\n    x.unwrap();\n}\n")
        args = {
            "prompt": "write a.txt: no\nWhat is here?",
            "role": "security-review",
            "workingDirectory": work,
        }
        jsonschema.validate(args, run_input)
        started = await call(session, "run", args)
        jsonschema.validate(started, schema("run", "output_schema"))
        final, _ = await wait_until_ready(session, started["taskId"])
        status = await call(session, "status", {"taskId": started["taskId"]})
        jsonschema.validate(status, schema("status", "output_schema"))
        result = await call(session, "result", {"taskId": started["taskId"]})
        jsonschema.validate(result, schema("result", "output_schema"))
        unknown = await session.call_tool("run", {"prompt": "hi", "role": "architect"})
        report(
            {
                "names": [r["name"] for r in listed["roles"]],
                "custom": listed["roles"][-1],
                "roleEnum": run_input["properties"]["role"].get("enum"),
                "mode": started["mode"],
                "role": status["task"]["role"],
                "roleBase": status["task"]["roleBase"],
                "final": final["state"],
                "report": result.get("report"),
                "unknown": structured(unknown)["error"]["code"] if is_error(unknown) else None,
            }
        )


async def queue_zero(binary):
    async with stdio_session(binary) as session:
        await session.initialize()
        first = await call(session, "run", {"prompt": "run sleep 30", "agent": "revisor"})
        refused = await session.call_tool("run", {"prompt": "read a.txt", "agent": "revisor"})
        await call(session, "cancel", {"taskId": first["taskId"]})
        ended, _ = await wait_until_ready(session, first["taskId"])
        again = await call(session, "run", {"prompt": "write a.txt: a", "agent": "revisor"})
        final, _ = await wait_until_ready(session, again["taskId"])
        report(
            {
                "first": first["state"],
                "refused": structured(refused)["error"]["code"] if is_error(refused) else None,
                "firstEnded": ended["state"],
                "again": final["state"],
            }
        )


async def caller_skill(binary):
    text = subprocess.run(
        [binary, "caller-skill", "print"], check=True, capture_output=True, text=True
    ).stdout
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "full"}) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
    calls, missing = 0, []
    for match in re.finditer(r"`([a-z_]+)\(([^)`]*)\)`", text):
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",") if a.strip()]
        calls += 1
        tool = tools.get(name)
        if tool is None:
            missing.append(name)
            continue
        schema = getattr(tool, "input_schema", None) or getattr(tool, "inputSchema")
        known = schema.get("properties", {})
        missing.extend(f"{name}.{arg}" for arg in args if arg not in known)
    report({"calls": calls, "tools": len({m.group(1) for m in re.finditer(r"`([a-z_]+)\(", text)}),
            "missing": missing})


async def main():
    scenario, args = sys.argv[1], sys.argv[2:]
    if scenario == "leave":
        await leave(*args)
    elif scenario == "follow":
        await follow(*args)
    elif scenario == "cancel":
        await cancel(*args)
    elif scenario == "wait-many":
        await wait_many(*args)
    elif scenario == "query-message":
        await query_message(*args)
    elif scenario == "roles":
        await roles(*args)
    elif scenario == "queue-zero":
        await queue_zero(*args)
    elif scenario == "caller-skill":
        await caller_skill(*args)
    else:
        raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    asyncio.run(main())
