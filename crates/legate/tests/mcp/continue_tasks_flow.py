"""`continue` answered as an MCP task (the Tasks extension), over raw JSON-RPC on stdio
(raw.py: the official Python SDK does not model the extension).

Run by crates/legate/tests/continue_task.rs; not a test on its own.

    python3 continue_tasks_flow.py LEGATE_BIN CUT_TASK_ID

CUT_TASK_ID is a task whose `legate` was killed mid-turn (SIGKILL) on the scripted agent. A
client that declares the extension calls `continue` on it and is answered with a task whose id
is the continuation's; `tasks/get` follows it to `completed` with `continue`'s direct answer
plus `outcome` equal to `result`'s answer, valid against continue's outputSchema. A second
`continue` as a task, and one from a client without the extension, name the same
continuation. A `continue` of a task that was not cut is today's tool error, not a task. Prints
one JSON line with what it saw and exits 0, or raises.
"""

import json
import sys

import jsonschema

from raw import TASKS, Raw


def main():
    binary, cut_id = sys.argv[1], sys.argv[2]
    raw = Raw(binary)
    schema = {t["name"]: t["outputSchema"] for t in raw.request("tools/list")["tools"]}
    discovered = raw.request("server/discover")
    assert TASKS in discovered["capabilities"].get("extensions", {}), discovered

    started = raw.call("continue", {"taskId": cut_id})
    assert started["resultType"] == "task", started
    assert started["status"] == "working", started
    task_id = started["taskId"]
    assert task_id != cut_id, started
    done, _ = raw.ended(task_id)
    assert done["status"] == "completed", done
    result = done["result"]
    assert result.get("isError") in (None, False), result
    body = result["structuredContent"]
    jsonschema.validate(body, schema["continue"])
    assert body["taskId"] == task_id and body["continuedFrom"] == cut_id, body
    outcome = body["outcome"]
    assert outcome == raw.call("result", {"taskId": task_id})["structuredContent"], outcome

    again = raw.call("continue", {"taskId": cut_id})
    assert again["resultType"] == "task", again
    assert raw.get(again["taskId"])["status"] == "completed", again
    plain = raw.call("continue", {"taskId": cut_id}, tasks=False)
    assert plain.get("resultType", "complete") == "complete", plain
    assert "outcome" not in plain["structuredContent"], plain

    refused = raw.call("continue", {"taskId": task_id})
    assert refused.get("resultType", "complete") == "complete", refused
    assert refused.get("isError") is True, refused
    raw.close()
    print(json.dumps({
        "taskId": task_id,
        "again": again["taskId"],
        "plain": plain["structuredContent"]["taskId"],
        "outcome": outcome["state"],
        "notContinuable": refused["structuredContent"]["error"]["code"],
    }), flush=True)


if __name__ == "__main__":
    main()
