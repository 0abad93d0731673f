"""agy's tool controls over Legate's MCP front, driven with the official Python `mcp` SDK
client over stdio: an agy task in a copy under `allowedTools`, `mcpServers` or a configured
ceiling gets a PreToolUse hook that refuses what the task may not do, and the files Legate
staged for it never reach the patch.

Run by crates/legate/tests/agy.rs (which is also the fake agy, whose `tools:` scenario asks
the staged hooks before each call); not a test on its own. Prints one JSON report.

    python3 agy_tools_flow.py LEGATE_BIN PROJECT select|ceiling

LEGATE_HOME (its legate.toml names the agy agent, and the catalogue or the ceiling) is
passed on to the stdio server.
"""

import asyncio
import json
import sys

from client import call, is_error, stdio_session, structured
from scenarios import wait_until_ready


def code(result):
    return structured(result)["error"]["code"] if is_error(result) else None


async def task(session, project, prompt, **extra):
    args = {"prompt": prompt, "agent": "agy", "workspace": {"kind": "copy", "path": project}}
    args.update(extra)
    started = await call(session, "run", args)
    final, _ = await wait_until_ready(session, started["taskId"])
    result = await call(session, "result", {"taskId": started["taskId"]})
    preview = await call(session, "preview", {"taskId": started["taskId"], "includePatch": True})
    return {
        "taskId": started["taskId"],
        "state": final["state"],
        "answer": result.get("answer") or "",
        "changed": sorted(f["path"] for f in preview["files"]),
        "patch": preview.get("patch") or "",
    }


async def select(session, project):
    out = {}
    out["readOnly"] = await task(
        session,
        project,
        "tools: view_file README.md; write_to_file new.txt hello; view_file /etc/hostname; "
        "view_file sub/../README.md; view_file .agents/mcp_config.json; "
        "call_mcp_tool docs/search; call_mcp_tool docs/publish; call_mcp_tool web/get",
        allowedTools=["read"],
        mcpServers=[{"serverId": "docs", "tools": ["search"]}],
    )
    policy_dir = sys.argv[4] if len(sys.argv) > 4 else ""
    out["writer"] = await task(
        session,
        project,
        "tools: write_to_file .agents/hooks.json {}; write_to_file .agents/mcp_config.json {}; "
        f"write_to_file {policy_dir}/forged.json {{}}; write_to_file ../escape.txt x; "
        "write_to_file .AGENTS/hooks.json {}; write_to_file ok.txt fine",
        allowedTools=["read", "edit"],
    )
    # A tool agy would run without asking its hooks rewrites the hooks file: the turn fails.
    tampered = await call(
        session,
        "run",
        {"prompt": "write-outside: .agents/hooks.json", "agent": "agy", "allowedTools": ["read"],
         "workspace": {"kind": "copy", "path": project}},
    )
    final, _ = await wait_until_ready(session, tampered["taskId"])
    out["tampered"] = {"state": final["state"], "taskError": final.get("taskError"), "answer": (await call(session, "result", {"taskId": tampered["taskId"]})).get("answer")}
    sandboxed = await session.call_tool(
        "run", {"prompt": "tools: view_file x", "agent": "agy", "allowedTools": ["read"]}
    )
    out["sandbox"] = {"code": code(sandboxed), "message": structured(sandboxed).get("error", {}).get("message")}
    return out


async def ceiling(session, project):
    out = {}
    out["underCeiling"] = await task(
        session, project, "tools: view_file README.md; write_to_file new.txt hello"
    )
    sandboxed = await session.call_tool("run", {"prompt": "hello", "agent": "agy"})
    out["sandbox"] = code(sandboxed)
    return out


async def main(binary, project, phase):
    async with stdio_session(binary, {"LEGATE_MCP_PROFILE": "full"}) as session:
        await session.initialize()
        out = await (select if phase == "select" else ceiling)(session, project)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
