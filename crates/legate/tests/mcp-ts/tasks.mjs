// The official TypeScript Tasks requester (@modelcontextprotocol/ext-tasks over
// @modelcontextprotocol/client, MCP 2026-07-28) against `legate mcp` on stdio.
//
// Run by crates/legate/tests/mcp_tasks_ts.rs from a directory whose node_modules holds the
// packages of package.json; not a test on its own.
//
//     node tasks.mjs LEGATE_BIN
//
// Delegates to revisor as a task and follows it to its end, cancels another, and reads the
// finished one back from a new `legate mcp` process (resumeTask with the serialized
// reference). Prints one JSON line with what it saw and exits 0, or throws.

import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

const PROTOCOL = "2026-07-28";
const CLIENT_INFO = { name: "legate-tasks-ts", version: "0.0.0" };
const ENDPOINT = "legate-stdio";

function assert(cond, message) {
  if (!cond) throw new Error(`assertion failed: ${message}`);
}

// rawDispatch: the SDK's codecs reject task-shaped answers, so the requester sends task
// traffic itself on the same transport and takes its responses before the Client sees them.
function rawChannel(transport) {
  const pending = new Map();
  let next = 0;
  const clientHandler = transport.onmessage;
  transport.onmessage = (message, extra) => {
    if (message && typeof message.id === "string" && pending.has(message.id)) {
      const resolve = pending.get(message.id);
      pending.delete(message.id);
      resolve(
        "error" in message
          ? { kind: "error", error: message.error }
          : { kind: "result", result: message.result },
      );
      return;
    }
    clientHandler?.(message, extra);
  };
  return async (request) => {
    const id = `raw-${++next}`;
    const answer = new Promise((resolve) => pending.set(id, resolve));
    await transport.send({ jsonrpc: "2.0", id, method: request.method, params: request.params ?? {} });
    return answer;
  };
}

async function open(legate) {
  const client = new Client(CLIENT_INFO, {
    capabilities: {},
    versionNegotiation: { mode: { pin: PROTOCOL } },
  });
  const transport = new StdioClientTransport({ command: legate, args: ["mcp"], env: process.env, stderr: "ignore" });
  await client.connect(transport);
  assert(client.getProtocolEra() === "modern", `era ${client.getProtocolEra()}`);
  const session = createTaskSessionFromClient(client, {
    endpointId: ENDPOINT,
    rawDispatch: rawChannel(transport),
    v2RequestFraming: { protocolVersion: PROTOCOL, clientInfo: CLIENT_INFO, clientCapabilities: {} },
  });
  return { client, session };
}

function structured(result) {
  assert(result && result.structuredContent, `no structured content: ${JSON.stringify(result)}`);
  return result.structuredContent;
}

async function main() {
  const legate = process.argv[2];
  const out = {};
  const first = await open(legate);
  assert(first.session.capabilities.execution, "the session sees no task execution");

  const run = await first.session.callTool("run", {
    agent: "revisor",
    prompt: "write t.txt: from TypeScript\nrun sleep 1\nread t.txt",
  });
  assert(run.kind === "task", `run answered ${run.kind}`);
  const reference = run.serializeReference();
  const statuses = new Set();
  const { outcome } = await run.settle({ onEvent: (e) => e.type === "task" && statuses.add(e.task.status) });
  assert(outcome.status === "completed", `outcome ${outcome.status}`);
  const body = structured(outcome.result);
  assert(body.taskId === run.handle.taskId, "the task id is Legate's");
  assert(body.outcome.state === "completed", `state ${body.outcome.state}`);
  assert(body.outcome.answer.includes("from TypeScript"), "the answer quotes the file");
  out.run = { taskId: body.taskId, state: body.outcome.state, statuses: [...statuses].sort() };

  const slow = await first.session.callTool("run", { agent: "revisor", prompt: "run sleep 30" });
  assert(slow.kind === "task", `slow answered ${slow.kind}`);
  await slow.cancel();
  const canceled = await slow.settle();
  assert(canceled.outcome.status === "cancelled", `slow ${canceled.outcome.status}`);
  out.canceled = canceled.outcome.status;
  await first.session.close();
  await first.client.close();

  // A new process answers from the store.
  const second = await open(legate);
  const again = await second.session.resumeTask(reference);
  const read = await again.settle();
  assert(read.outcome.status === "completed", `read back ${read.outcome.status}`);
  const readBody = structured(read.outcome.result);
  assert(JSON.stringify(readBody) === JSON.stringify(body), "the result read back differs");
  out.readBack = readBody.outcome.state;
  const view = await second.session.task(slow.handle.taskId).snapshot();
  out.canceledReadBack = view.status;
  await second.session.close();
  await second.client.close();
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e?.stack ?? e);
  process.exit(1);
});
