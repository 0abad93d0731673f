"""agy tasks over Legate's MCP front, driven with the official Python `mcp` SDK client over
stdio: health's login check, agy's own MCP permission refusal, a prompt agy never read, its
structured output read with read_result, a canceled task's code, and usage with its quality
flags and the conversation's observed cumulative counters.

Run by crates/legate/tests/agy.rs (which is also the fake agy); not a test on its own. Prints
one JSON report.

    python3 agy_flow.py LEGATE_BIN

LEGATE_HOME (its legate.toml names the agy agents) is passed on to the stdio server.
"""

import asyncio
import json
import sys

import jsonschema

from client import call, is_error, output_schema, stdio_session, structured
from scenarios import wait_until_ready


def code(result):
    return structured(result)["error"]["code"] if is_error(result) else None


async def ended(session, started):
    final, _ = await wait_until_ready(session, started["taskId"])
    return final


async def main(binary):
    out = {}
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "full"}) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}

        health = await call(session, "health", {})
        jsonschema.validate(health, output_schema(tools["health"]))
        out["login"] = {a["name"]: a["loggedIn"] for a in health["agents"]}
        out["loginDetail"] = {a["name"]: a.get("loginDetail") for a in health["agents"]}

        denied = await ended(session, await call(session, "run", {"prompt": "mcp-denied: search the docs", "agent": "agy"}))
        out["mcpDenied"] = denied.get("taskError")

        unread = await ended(session, await call(session, "run", {"prompt": "x" * 300_000, "agent": "agy-deaf"}))
        out["inputFailed"] = unread.get("taskError")

        schema = {"type": "object", "properties": {"summary": {"type": "string"}}}
        shaped = await call(session, "run", {"prompt": "sum up", "agent": "agy", "jsonSchema": schema})
        await ended(session, shaped)
        piece = await call(session, "read_result", {"taskId": shaped["taskId"], "part": "structuredOutput"})
        jsonschema.validate(piece, output_schema(tools["read_result"]))
        out["structured"] = json.loads(piece["text"])
        out["badPart"] = code(await session.call_tool("read_result", {"taskId": shaped["taskId"], "part": "raw"}))

        first = await call(session, "run", {"prompt": "tokens: 120", "agent": "agy"})
        await ended(session, first)
        second = await call(session, "resume", {"contextId": first["contextId"], "prompt": "tokens: 50"})
        await ended(session, second)
        out["noStructured"] = code(
            await session.call_tool("read_result", {"taskId": second["taskId"], "part": "structuredOutput"})
        )
        usage = await call(session, "usage", {"agent": "agy"})
        jsonschema.validate(usage, output_schema(tools["usage"]))
        out["usage"] = usage
        out["secondTaskId"] = second["taskId"]
        out["firstTaskId"] = first["taskId"]
        status = await call(session, "status", {"taskId": second["taskId"]})
        out["secondUsage"] = status["task"].get("usage")

        slow = await call(session, "run", {"prompt": "timeout: hold on", "agent": "agy"})
        await call(session, "wait", {"taskId": slow["taskId"], "timeoutSeconds": 2})
        await call(session, "cancel", {"taskId": slow["taskId"]})
        canceled = await ended(session, slow)
        out["canceled"] = {"state": canceled["state"], "taskError": canceled.get("taskError")}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
