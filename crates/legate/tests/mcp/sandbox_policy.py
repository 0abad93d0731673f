"""The test sandbox policy through the official Python `mcp` SDK client, over stdio.

Run by crates/legate/tests/mcp_sandbox.rs; not a test on its own. Prints one JSON report
line and exits 0, or raises.

    python3 sandbox_policy.py LEGATE_BIN auto ROOT   # get, a stale set, a set, a refused root
    python3 sandbox_policy.py LEGATE_BIN ask ROOT    # a client that declines the form, then
                                                     # one that accepts it with confirm: true

LEGATE_HOME (and LEGATE_LOG) are passed on to the server; ROOT is an existing directory
outside it, used as a write root.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

from client import call, is_error, server_env, structured


def error_code(result):
    assert is_error(result), f"expected an error, got {structured(result)}"
    return structured(result)["error"]["code"]


async def main():
    binary, mode, root = sys.argv[1], sys.argv[2], sys.argv[3]
    answers = []  # what the form is answered next, oldest first
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        action, content = answers.pop(0) if answers else ("cancel", None)
        return types.ElicitResult(action=action, content=content)

    env = server_env({"LEGATE_APPROVAL_MODE": mode})
    params = StdioServerParameters(command=binary, args=["mcp"], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=on_elicit) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            got = await call(session, "get_sandbox_policy", {})
            sha = got["sha256"]
            stale = await session.call_tool(
                "set_sandbox_policy", {"expectedSha256": "0" * 64, "policy": {}}
            )
            home = await session.call_tool(
                "set_sandbox_policy",
                {"expectedSha256": sha, "policy": {"writeRoots": [os.environ["LEGATE_HOME"]]}},
            )
            proposal = {
                "expectedSha256": sha,
                "policy": {"writeRoots": [root], "network": True, "maxOutputChars": 2000},
            }
            report = {
                "tools": sorted(n for n in names if "sandbox" in n),
                "default": got["policy"],
                "sha256": sha,
                "stale": error_code(stale),
                "home": error_code(home),
            }
            if mode == "ask":
                answers.append(("decline", None))
                declined = await session.call_tool("set_sandbox_policy", proposal)
                report["declined"] = error_code(declined)
                report["afterDecline"] = (await call(session, "get_sandbox_policy", {}))["sha256"]
                answers.append(("accept", {"confirm": True}))
            changed = await call(session, "set_sandbox_policy", proposal)
            again = await call(session, "get_sandbox_policy", {})
            report.update(
                {
                    "asked": len(asked),
                    "message": asked[0] if asked else None,
                    "set": changed,
                    "again": again,
                }
            )
            print(json.dumps(report), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
