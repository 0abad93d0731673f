"""Long delegations as MCP tasks (the Tasks extension, SEP-2663), over raw JSON-RPC on stdio
(raw.py: the official Python SDK does not model the extension), all on revisor.

Run by crates/legate/tests/mcp_tasks.rs; not a test on its own.

    python3 tasks_flow.py LEGATE_BIN PROJECT

The server is configured with approval mode `ask`. A client that declares the extension gets
`run` answered as a task whose id is Legate's task id; `tasks/get` follows it to `completed`
with the direct answer plus `outcome` equal to `result`'s answer, valid against run's
outputSchema; `group_start` and `compare` likewise (`group_status`, `comparison`). A slow task is canceled with `tasks/cancel` (`cancelled`, idempotent). `test`
runs as an `op-…` task; `integrate` in mode ask stops at `input_required` with a form
elicitation that bad updates leave unanswered and an accept answers. Hostile ids and updates
are refused with stable codes. A new `legate mcp` process reads the finished tasks from the
store; a killed process's op reads `failed` with SERVER_RESTARTED. A client without the
extension, and `--no-tasks`, get today's answers; a query profile reaches no op. Prints one
JSON line with what it saw and exits 0, or raises.
"""

import json
import os
import sys

import jsonschema

from raw import TASKS, Raw, RpcError


def structured(result):
    assert result.get("resultType", "complete") == "complete", result
    return result["structuredContent"]


def schemas(raw):
    tools = raw.request("tools/list")["tools"]
    return {t["name"]: t["outputSchema"] for t in tools}


def started_task(result):
    assert result["resultType"] == "task", result
    assert result["status"] == "working", result
    assert result["pollIntervalMs"] > 0, result
    return result["taskId"]


def code_of(e):
    assert isinstance(e, RpcError), e
    return e.data.get("code")


def run_to_the_end(raw, project, out):
    schema = schemas(raw)
    discovered = raw.request("server/discover")
    assert TASKS in discovered["capabilities"].get("extensions", {}), discovered
    task_id = started_task(
        raw.call("run", {"agent": "revisor", "prompt": "write a.txt: from a task\nrun sleep 1\nread a.txt",
                         "workspace": {"kind": "copy", "path": project}})
    )
    # The task id is Legate's own: the plain tools know it.
    status = structured(raw.call("status", {"taskId": task_id}))
    assert status["task"]["taskId"] == task_id, status
    done, seen = raw.ended(task_id)
    assert done["status"] == "completed", done
    out["runStatuses"] = sorted({s for s, _ in seen})
    out["runMessages"] = [m for s, m in seen if s == "working" and m][:3]
    result = done["result"]
    assert result.get("isError") in (None, False), result
    body = result["structuredContent"]
    jsonschema.validate(body, schema["run"])
    outcome = body["outcome"]
    assert outcome == structured(raw.call("result", {"taskId": task_id})), (outcome,)
    assert outcome["state"] == "completed", outcome
    assert body["taskId"] == task_id and body["agent"] == "revisor", body
    assert body["workspace"] == "copy", body
    out["runOutcome"] = outcome["state"]
    return task_id, body


def resume_to_the_end(raw, out):
    """`resume` answered as a task: the new turn's task id, followed to its end, its result the
    direct answer plus `outcome` (what `result` answers), valid against resume's schema."""
    schema = schemas(raw)
    first = started_task(raw.call("run", {"agent": "revisor", "prompt": "write b.txt: first turn"}))
    done, _ = raw.ended(first)
    context = done["result"]["structuredContent"]["contextId"]
    turn = started_task(raw.call("resume", {"contextId": context, "prompt": "read b.txt"}))
    assert turn != first, turn
    direct = structured(raw.call("status", {"taskId": turn}))
    assert direct["task"]["contextId"] == context, direct
    done, _ = raw.ended(turn)
    assert done["status"] == "completed", done
    body = done["result"]["structuredContent"]
    jsonschema.validate(body, schema["resume"])
    assert body["taskId"] == turn and body["contextId"] == context, body
    assert body["outcome"] == structured(raw.call("result", {"taskId": turn})), body
    assert "first turn" in json.dumps(body["outcome"]), body["outcome"]
    out["resumed"] = body["outcome"]["state"]


def cancel_one(raw, out):
    task_id = started_task(raw.call("run", {"agent": "revisor", "prompt": "run sleep 30"}))
    raw.until(task_id, lambda t: t["status"] == "working")
    assert raw.request("tasks/cancel", {"taskId": task_id}) in ({}, {"resultType": "complete"})
    done, _ = raw.ended(task_id)
    assert done["status"] == "cancelled", done
    # Idempotent: an ended task's cancel is acknowledged, and nothing changes.
    raw.request("tasks/cancel", {"taskId": task_id})
    assert raw.get(task_id)["status"] == "cancelled"
    status = structured(raw.call("status", {"taskId": task_id}))
    assert status["task"]["state"] == "canceled", status
    out["canceled"] = done["status"]
    return task_id


def test_and_integrate(raw, copy_id, project, out):
    schema = schemas(raw)
    sha = structured(raw.call("preview", {"taskId": copy_id}))["sha256"]
    op = started_task(raw.call("test", {"taskId": copy_id, "expectedSha256": sha,
                                        "command": {"executable": "cat", "args": ["a.txt"]}}))
    assert op.startswith("op-"), op
    done, _ = raw.ended(op)
    assert done["status"] == "completed", done
    tested = done["result"]["structuredContent"]
    jsonschema.validate(tested, schema["test"])
    assert tested["passed"] is True and "outcome" not in tested, tested
    out["testOp"] = tested["passed"]

    verified = structured(raw.call("verify", {"taskId": copy_id, "expectedSha256": sha, "reviews": []}))
    assert verified["passed"], verified
    op2 = started_task(raw.call("integrate", {"taskId": copy_id, "expectedSha256": sha}))
    asking, _ = raw.until(op2, lambda t: t["status"] != "working")
    assert asking["status"] == "input_required", asking
    (key, request), = asking["inputRequests"].items()
    assert request["method"] == "elicitation/create", request
    assert request["params"]["mode"] == "form", request
    assert "confirm" in request["params"]["requestedSchema"]["properties"], request
    assert not os.path.exists(os.path.join(project, "a.txt"))
    # Bad updates change nothing.
    bad = [
        {"nope": {"action": "accept", "content": {"confirm": True}}},
        {key: {"action": "maybe"}},
        {key: "yes"},
        {},
        {key: {"action": "accept", "content": {"confirm": True}}, "extra": {"action": "accept"}},
    ]
    codes = []
    for responses in bad:
        e = raw.error("tasks/update", {"taskId": op2, "inputResponses": responses})
        assert e.code == -32602, e
        codes.append(code_of(e))
    assert raw.get(op2)["status"] == "input_required"
    assert not os.path.exists(os.path.join(project, "a.txt"))
    out["badUpdates"] = sorted(set(codes))
    raw.request("tasks/update", {"taskId": op2, "inputResponses": {
        key: {"action": "accept", "content": {"confirm": True}}}})
    done, _ = raw.ended(op2)
    assert done["status"] == "completed", done
    integrated = done["result"]["structuredContent"]
    jsonschema.validate(integrated, schema["integrate"])
    with open(os.path.join(project, "a.txt")) as f:
        assert f.read() == "from a task"
    out["integrated"] = integrated["files"]
    # Answering again: the op waits on nothing now.
    e = raw.error("tasks/update", {"taskId": op2, "inputResponses": {
        key: {"action": "accept", "content": {"confirm": True}}}})
    out["updateEnded"] = code_of(e)
    return op, op2


def compare_to_the_end(raw, source, out):
    schema = schemas(raw)
    ctx = structured(raw.call("context", {"taskId": source}))
    two = [{"agent": "revisor"}, {"agent": "revisor", "model": "revisor-thorough"}]
    comparison = started_task(raw.call("compare", {
        "sourceTaskId": source, "expectedContextSha256": ctx["contextSha256"],
        "prompt": "Review the change.", "targets": two}))
    done, _ = raw.ended(comparison)
    assert done["status"] == "completed", done
    body = done["result"]["structuredContent"]
    jsonschema.validate(body, schema["compare"])
    assert body["comparisonId"] == comparison, body
    assert body["outcome"] == structured(raw.call("comparison", {"comparisonId": comparison})), body
    out["compared"] = len(body["outcome"]["reviews"])


def group_to_the_end(raw, project, out):
    schema = schemas(raw)
    definition = {"workingDirectory": project, "title": "one node",
                  "nodes": [{"id": "one", "agent": "revisor", "prompt": "write g.txt: g"}]}
    created = structured(raw.call("group_create", {"definition": definition}))
    group = started_task(raw.call("group_start", {"groupId": created["groupId"],
                                                  "definitionSha256": created["definitionSha256"]}))
    assert group == created["groupId"], group
    done, _ = raw.ended(group)
    assert done["status"] == "completed", done
    body = done["result"]["structuredContent"]
    jsonschema.validate(body, schema["group_start"])
    assert body["outcome"] == structured(raw.call("group_status", {"groupId": group})), body
    out["group"] = body["outcome"]["state"]


def hostile(raw, plain_task, out):
    codes = {}
    for name, tid in [("unknown", "no-such-task"), ("forgedOp", "op-../../etc/passwd"),
                      ("empty", ""), ("plainTask", plain_task), ("huge", "x" * 100000)]:
        e = raw.error("tasks/get", {"taskId": tid})
        assert e.code == -32602, (name, e)
        codes[name] = code_of(e)
        e = raw.error("tasks/cancel", {"taskId": tid})
        assert e.code == -32602, (name, e)
    e = raw.error("tasks/get", {"taskid": "x"})
    codes["malformed"] = e.code
    # Without declaring the extension, tasks/* is refused: -32021.
    e = raw.error("tasks/get", {"taskId": plain_task}, tasks=False)
    codes["undeclared"] = e.code
    out["hostile"] = codes


def main():
    binary, project = sys.argv[1], sys.argv[2]
    out = {}
    raw = Raw(binary)
    run_id, run_body = run_to_the_end(raw, project, out)
    canceled = cancel_one(raw, out)
    resume_to_the_end(raw, out)
    group_to_the_end(raw, project, out)
    compare_to_the_end(raw, run_id, out)
    test_op, integrate_op = test_and_integrate(raw, run_id, project, out)
    # A client that does not declare tasks gets today's answer, and `wait` stays.
    plain = structured(raw.call("run", {"agent": "revisor", "prompt": "read a.txt"}, tasks=False))
    assert "taskId" in plain and "outcome" not in plain, plain
    waited = structured(raw.call("wait", {"taskId": plain["taskId"], "timeoutSeconds": 30}, tasks=False))
    assert "ready" in waited, waited
    hostile(raw, plain["taskId"], out)
    # An op left running when its process dies.
    slow_copy = started_task(raw.call("run", {"agent": "revisor", "prompt": "write s.txt: s",
                                              "workspace": {"kind": "copy", "path": project}}))
    raw.ended(slow_copy)
    sha = structured(raw.call("preview", {"taskId": slow_copy}))["sha256"]
    orphan = started_task(raw.call("test", {"taskId": slow_copy, "expectedSha256": sha,
                                            "command": {"executable": "sleep", "args": ["60"]}}))
    raw.kill()

    # A new process answers from the store.
    again = Raw(binary)
    done = again.get(run_id)
    assert done["status"] == "completed", done
    body = done["result"]["structuredContent"]
    assert {k: v for k, v in body.items() if k != "outcome"} == {
        k: v for k, v in run_body.items() if k != "outcome"}, body
    assert body["outcome"] == structured(again.call("result", {"taskId": run_id})), body
    assert again.get(canceled)["status"] == "cancelled"
    assert again.get(test_op)["result"]["structuredContent"]["passed"] is True
    assert again.get(integrate_op)["status"] == "completed"
    lost = again.get(orphan)
    assert lost["status"] == "failed", lost
    assert lost["error"]["data"]["code"] == "SERVER_RESTARTED", lost
    out["restarted"] = lost["error"]["data"]["code"]
    # The orphan stays failed: nothing re-runs it.
    assert again.get(orphan)["status"] == "failed"
    again.close()

    # --no-tasks: no extension, plain answers, tasks/* not offered.
    off = Raw(binary, ["--no-tasks"])
    discovered = off.request("server/discover")
    assert TASKS not in discovered["capabilities"].get("extensions", {}), discovered
    plain = structured(off.call("run", {"agent": "revisor", "prompt": "read a.txt"}))
    assert "taskId" in plain, plain
    out["noTasks"] = off.error("tasks/get", {"taskId": run_id}).code
    off.close()

    # A query profile reaches no op of a tool it does not offer.
    query = Raw(binary, ["--profile", "query"])
    e = query.error("tasks/get", {"taskId": integrate_op})
    out["queryOp"] = code_of(e)
    query.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
