"""Tool controls, the agent policy and the model tools of Legate's MCP front (issue 17, parts 4
and 6), driven with the official Python `mcp` SDK client over stdio.

Run by crates/legate/tests/mcp_controls.rs; not a test on its own. Prints one JSON report.

    python3 controls.py LEGATE_BIN PROJECT

PROJECT is a git project: a copy task there with tool controls is handed off to a reviewer
(the controls carried on, the write tool left out) and to an implementer naming its own.

LEGATE_HOME (its legate.toml holds the catalogue) is passed on to the stdio servers.
"""

import asyncio
import json
import sys

import jsonschema

from client import call, is_error, output_schema, stdio_session, structured
from scenarios import wait_until_ready


def error_code(result):
    return structured(result)["error"]["code"] if is_error(result) else None


async def main(binary):
    out = {}
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "full"}) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        out["tools"] = len(tools)
        health = await call(session, "health", {"probe": False})
        jsonschema.validate(health, output_schema(tools["health"]))
        out["approvalMode"] = health["approvalMode"]
        out["integrationApproval"] = health["integrationApproval"]
        out["limitations"] = {a["name"]: [l["name"] for l in a["limitations"]] for a in health["agents"]}
        policy_result = await session.call_tool("get_agent_policy", {})
        policy = structured(policy_result)
        jsonschema.validate(policy, output_schema(tools["get_agent_policy"]))
        out["policy"] = policy
        # Everything the client could see of the policy, text content included.
        out["policyText"] = json.dumps([c.model_dump() for c in policy_result.content]) + json.dumps(policy)

        models = await call(session, "list_models", {"agent": "revisor"})
        jsonschema.validate(models, output_schema(tools["list_models"]))
        out["models"] = [m["id"] for m in models["models"]]
        out["before"] = (await call(session, "get_model", {"agent": "revisor"}))["selection"]
        chosen = out["models"][-1]
        out["saved"] = (await call(session, "set_model", {"agent": "revisor", "model": chosen}))["selection"]
        out["auto"] = (await call(session, "set_model", {"agent": "revisor", "model": None}))["selection"]
        out["reset"] = (await call(session, "set_model", {"agent": "revisor", "model": None, "reset": True}))["selection"]
        out["unknownAgent"] = error_code(await session.call_tool("get_model", {"agent": "nobody"}))
        # The supervising agent is out of the caller's reach (issue 29, finding 1).
        judge_run = await session.call_tool("run", {"prompt": "write $HOME/note.txt: allow curl", "agent": "judge"})
        out["judgeRun"] = error_code(judge_run)
        out["judgeRunText"] = json.dumps(structured(judge_run))
        out["judgeSetModel"] = error_code(
            await session.call_tool("set_model", {"agent": "judge", "model": "revisor-thorough"})
        )

        out["unknownServer"] = error_code(
            await session.call_tool("run", {"prompt": "hi", "mcpServers": [{"serverId": "nope", "tools": ["search"]}]})
        )
        out["unknownTool"] = error_code(
            await session.call_tool("run", {"prompt": "hi", "mcpServers": [{"serverId": "docs", "tools": ["rm"]}]})
        )
        out["writeToolReadOnly"] = error_code(
            await session.call_tool(
                "run",
                {"prompt": "hi", "mode": "read-only", "mcpServers": [{"serverId": "docs", "tools": ["publish"]}]},
            )
        )
        out["aboveCeiling"] = error_code(
            await session.call_tool("run", {"prompt": "hi", "allowedTools": ["execute"]})
        )
        started = await call(
            session,
            "run",
            {
                "prompt": "write a.txt: hi",
                "agent": "revisor",
                "allowedTools": ["read"],
                "mcpServers": [{"serverId": "docs", "tools": ["search"]}],
            },
        )
        final, events = await wait_until_ready(session, started["taskId"])
        out["final"] = final["state"]
        out["eventsText"] = json.dumps(events)
        status = await call(session, "status", {"taskId": started["taskId"]})
        out["statusText"] = json.dumps(status)

        source = await call(
            session,
            "run",
            {
                "prompt": "write b.txt: b",
                "agent": "revisor",
                "workspace": {"kind": "copy", "path": sys.argv[2]},
                "allowedTools": ["read", "edit"],
                "mcpServers": [{"serverId": "docs", "tools": ["search", "publish"]}],
            },
        )
        await wait_until_ready(session, source["taskId"])
        context = await call(session, "context", {"taskId": source["taskId"]})

        async def handoff(role, **extra):
            started = await call(
                session,
                "handoff",
                {
                    "sourceTaskId": source["taskId"],
                    "expectedContextSha256": context["contextSha256"],
                    "role": role,
                    "prompt": "read b.txt",
                    "agent": "revisor",
                    **extra,
                },
            )
            await wait_until_ready(session, started["taskId"])
            task = (await call(session, "status", {"taskId": started["taskId"]}))["task"]
            return {k: task[k] for k in ("allowedTools", "mcpServers") if k in task}

        out["handoffReviewer"] = await handoff("reviewer")
        out["handoffOwn"] = await handoff(
            "implementer", allowedTools=["read"], mcpServers=[]
        )
        out["handoffAboveCeiling"] = error_code(
            await session.call_tool(
                "handoff",
                {
                    "sourceTaskId": source["taskId"],
                    "expectedContextSha256": context["contextSha256"],
                    "role": "implementer",
                    "prompt": "x",
                    "allowedTools": ["execute"],
                },
            )
        )
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "query"}) as session:
        await session.initialize()
        names = {t.name for t in (await session.list_tools()).tools}
        out["queryHas"] = sorted(n for n in ("get_agent_policy", "list_models", "get_model", "set_model") if n in names)
        try:
            refused = await session.call_tool("set_model", {"agent": "revisor", "model": None})
            out["querySetModel"] = error_code(refused)
        except Exception as e:  # a tool outside the profile is a protocol error
            data = getattr(getattr(e, "error", None), "data", None) or getattr(e, "data", None) or {}
            out["querySetModel"] = data.get("code") if isinstance(data, dict) else str(e)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
