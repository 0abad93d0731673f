"""A raw JSON-RPC client of `legate mcp` on stdio, speaking MCP 2026-07-28 (every request
carries its protocol version and client capabilities in `_meta`), for what the official Python
SDK does not model: the Tasks extension (SEP-2663: `resultType: "task"`, `tasks/get`,
`tasks/update`, `tasks/cancel`).

Used by tasks_flow.py; not a test on its own. Standard library only.
"""

import itertools
import json
import os
import queue
import subprocess
import threading
import time

PROTOCOL = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


class RpcError(Exception):
    def __init__(self, error):
        super().__init__(json.dumps(error))
        self.code = error.get("code")
        self.message = error.get("message")
        self.data = error.get("data") or {}


class Raw:
    """One `legate mcp` child; `tasks` says whether requests declare the Tasks extension."""

    def __init__(self, binary, args=(), tasks=True):
        env = dict(os.environ)
        self.proc = subprocess.Popen(
            [binary, "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            bufsize=1,
        )
        self.tasks = tasks
        self.ids = itertools.count(1)
        self.answers = {}
        self.lock = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "id" in msg and ("result" in msg or "error" in msg):
                with self.lock:
                    self.answers[msg["id"]] = msg
                    self.lock.notify_all()
            elif "id" in msg and "method" in msg:
                # A request from the server (a ping): answered empty.
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})

    def _send(self, msg):
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def capabilities(self):
        caps = {"elicitation": {"form": {}}}
        if self.tasks:
            caps["extensions"] = {TASKS: {}}
        return caps

    def request(self, method, params=None, timeout=60, tasks=None):
        params = dict(params or {})
        caps = self.capabilities()
        if tasks is False:
            caps.pop("extensions", None)
        params["_meta"] = {
            **params.get("_meta", {}),
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": caps,
            "io.modelcontextprotocol/clientInfo": {"name": "tasks-flow", "version": "0"},
        }
        rid = next(self.ids)
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        with self.lock:
            if not self.lock.wait_for(lambda: rid in self.answers, timeout):
                raise AssertionError(f"{method} got no answer in {timeout}s")
            msg = self.answers.pop(rid)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    def error(self, method, params=None, **kw):
        try:
            result = self.request(method, params, **kw)
        except RpcError as e:
            return e
        raise AssertionError(f"{method} {params} answered {result}")

    def call(self, name, args, **kw):
        return self.request("tools/call", {"name": name, "arguments": args}, **kw)

    def get(self, task_id):
        return self.request("tasks/get", {"taskId": task_id})

    def until(self, task_id, done, limit=600):
        """Polls `tasks/get` (at its pollIntervalMs) until `done(task)`; every status seen."""
        seen = []
        for _ in range(limit):
            task = self.get(task_id)
            seen.append((task["status"], task.get("statusMessage")))
            if done(task):
                return task, seen
            time.sleep(task.get("pollIntervalMs", 1000) / 1000 / 5)
        raise AssertionError(f"{task_id} never reached the state sought: {seen[-5:]}")

    def ended(self, task_id):
        return self.until(task_id, lambda t: t["status"] in ("completed", "cancelled", "failed"))

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait(timeout=120)

    def kill(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
