#!/usr/bin/env bash
# Opt-in conformance check of Legate's MCP front (not part of CI: it needs the npm registry).
#
# Builds `legate`, starts `legate serve --mcp` on a free loopback port with a throwaway
# LEGATE_HOME, then runs against it:
#   1. the MCP Inspector CLI (@modelcontextprotocol/inspector --cli), with the bearer token:
#      tools/list (the full profile, which must list exactly the tools of the table in
#      docs/fronts/mcp.md) and two tools/calls;
#   2. the @modelcontextprotocol/conformance server scenarios that apply to a server without
#      the suite's fixture tools: server-initialize, ping, tools-list, dns-rebinding-protection.
#      That runner cannot send headers, so it talks to a tiny local proxy that adds the token
#      and forwards every other header (Host and Origin included) unchanged.
# Node 22 and both tools are installed from npm into $LEGATE_MCP_TOOLS (default:
# $CARGO_TARGET_DIR/mcp-conformance-tools) on first use. Exits non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CARGO_TARGET_DIR:=$(cd .. && pwd)/target}"
export CARGO_TARGET_DIR
TOOLS="${LEGATE_MCP_TOOLS:-$CARGO_TARGET_DIR/mcp-conformance-tools}"
CONFORMANCE_VERSION=0.1.16
INSPECTOR_VERSION=2.12.0
SCENARIOS=(server-initialize ping tools-list dns-rebinding-protection)

echo "== building legate"
cargo build -q -p legate
LEGATE="$CARGO_TARGET_DIR/debug/legate"

echo "== node 22, the Inspector and the conformance runner (npm, into $TOOLS)"
mkdir -p "$TOOLS"
if [ ! -x "$TOOLS/node_modules/.bin/conformance" ] || [ ! -x "$TOOLS/node_modules/.bin/mcp-inspector" ] \
  || [ ! -x "$TOOLS/node_modules/.bin/node" ]; then
  (cd "$TOOLS" && npm install --no-save --no-audit --no-fund --silent \
    node@22 "@modelcontextprotocol/conformance@$CONFORMANCE_VERSION" \
    "@modelcontextprotocol/inspector@$INSPECTOR_VERSION")
fi
NODE="$TOOLS/node_modules/.bin/node"
echo "node $("$NODE" --version)"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== legate serve --mcp"
LEGATE_HOME="$WORK/home" LEGATE_MCP_PROFILE=full "$LEGATE" serve --mcp --port 0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
PIDS+=($!)
for _ in $(seq 100); do grep -q 'http://' "$WORK/serve.out" 2>/dev/null && break; sleep 0.1; done
URL="$(head -1 "$WORK/serve.out" | grep -o 'http://[^ ]*')"
TOKEN="$(cat "$WORK/home/mcp-token")"
UPSTREAM="${URL#http://}"
UPSTREAM="${UPSTREAM%/mcp}"
echo "serving at $URL"

FAILED=0
check() { # name, then a command that must succeed
  local name="$1"
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; FAILED=1; fi
}

echo "== MCP Inspector CLI"
inspector() {
  "$NODE" "$TOOLS/node_modules/.bin/mcp-inspector" --cli "$URL" --transport http \
    --header "Authorization: Bearer $TOKEN" "$@"
}
inspector --method tools/list >"$WORK/tools.json" 2>"$WORK/inspector.err" || true
# The full profile lists every tool, so the listing must name exactly the tools of the
# reference table in docs/fronts/mcp.md ("## Tools"): no count is written down here.
check "inspector tools/list lists every tool docs/fronts/mcp.md documents, each with an outputSchema" \
  "$NODE" -e '
    const fs = require("fs");
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const doc = fs.readFileSync(process.argv[2], "utf8");
    const section = doc.split(/^## /m).find(s => s.startsWith("Tools\n")) || "";
    const documented = [...section.matchAll(/^\| `([a-z_]+)`/gm)].map(m => m[1]).sort();
    const tools = r.tools || [];
    const listed = tools.map(t => t.name).sort();
    console.log(`listed ${listed.length} tools; the docs name ${documented.length}`);
    if (documented.length === 0 || JSON.stringify(listed) !== JSON.stringify(documented)
        || !tools.every(t => t.outputSchema && t.outputSchema.type === "object")) {
      console.error("listed:     " + listed.join(" "));
      console.error("documented: " + documented.join(" "));
      console.error(JSON.stringify(r).slice(0, 500)); process.exit(1);
    }' "$WORK/tools.json" docs/fronts/mcp.md
inspector --method tools/call --tool-name agents >"$WORK/agents.json" 2>>"$WORK/inspector.err" || true
check "inspector tools/call agents answers structured content" \
  "$NODE" -e '
    const fs = require("fs");
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    if (r.isError || !r.structuredContent || !Array.isArray(r.structuredContent.agents)) {
      console.error(JSON.stringify(r).slice(0, 500)); process.exit(1);
    }' "$WORK/agents.json"
inspector --method tools/call --tool-name status --tool-arg taskId=nope-nope >"$WORK/status.json" 2>>"$WORK/inspector.err" || true
check "inspector tools/call with a bad id answers isError with a code" \
  "$NODE" -e '
    const fs = require("fs");
    const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    if (!r.isError || r.structuredContent.error.code !== "TASK_NOT_FOUND") {
      console.error(JSON.stringify(r).slice(0, 500)); process.exit(1);
    }' "$WORK/status.json"

echo "== token proxy for the conformance runner"
"$NODE" -e '
  const http = require("http");
  const [upHost, upPort] = [process.argv[1].replace(/:\d+$/, ""), +process.argv[1].split(":").pop()];
  const token = process.argv[2];
  const server = http.createServer((req, res) => {
    const headers = { ...req.headers, authorization: "Bearer " + token };
    const up = http.request({ host: upHost, port: upPort, method: req.method, path: req.url, headers }, (r) => {
      res.writeHead(r.statusCode, r.headers);
      r.pipe(res);
    });
    up.on("error", (e) => { res.writeHead(502); res.end(String(e)); });
    req.pipe(up);
  });
  server.listen(0, "127.0.0.1", () => console.log(server.address().port));
' "$UPSTREAM" "$TOKEN" >"$WORK/proxy.out" &
PIDS+=($!)
for _ in $(seq 50); do [ -s "$WORK/proxy.out" ] && break; sleep 0.1; done
PROXY="http://localhost:$(head -1 "$WORK/proxy.out")/mcp"

echo "== @modelcontextprotocol/conformance $CONFORMANCE_VERSION against $PROXY"
for scenario in "${SCENARIOS[@]}"; do
  check "conformance $scenario" \
    bash -c 'cd "$1" && "$2" "$3" server --url "$4" --scenario "$5"' _ \
    "$WORK" "$NODE" "$TOOLS/node_modules/.bin/conformance" "$PROXY" "$scenario"
done

if [ "$FAILED" -ne 0 ]; then
  echo "some checks failed; server log:"
  tail -20 "$WORK/serve.err" || true
  exit 1
fi
echo "all MCP conformance checks passed"
