"""A foreign A2A agent for Legate's federation tests, written against the official Python
`a2a-sdk` (its DefaultRequestHandler, InMemoryTaskStore, TaskUpdater and Starlette routes).

It is not a Legate: its card declares no Legate extension, so Legate must treat it as
unsupervised. It answers every message by streaming one working update, one text artifact and
a completed status; a message containing `!ask` ends input-required with a question instead.
It requires `Authorization: Bearer <token>` on everything but its card.

Usage: python foreign_a2a_agent.py TOKEN
Binds 127.0.0.1 on a port the kernel picks and prints `listening http://127.0.0.1:PORT` once
it accepts connections. Stops on SIGTERM or when its stdin closes.
"""

import asyncio
import socket
import sys

import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse

from a2a.helpers.proto_helpers import new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Task,
    TaskState,
    TaskStatus,
)

CARD_PATH = "/.well-known/agent-card.json"


class EchoExecutor(AgentExecutor):
    """Answers with what it was told: the same work for every task, nothing it could be
    asked permission for."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input()
        if context.current_task is None:
            await event_queue.enqueue_event(
                Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                    history=[context.message] if context.message else [],
                )
            )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.start_work(
            updater.new_agent_message([new_text_part("foreign agent: working")])
        )
        if "!ask" in text:
            await updater.requires_input(
                updater.new_agent_message([new_text_part("which file do you mean?")])
            )
            return
        await updater.add_artifact(
            [new_text_part(f"foreign agent received: {text}")], name="answer"
        )
        await updater.complete(
            updater.new_agent_message([new_text_part(f"foreign agent received: {text}")])
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.cancel()


class Bearer(BaseHTTPMiddleware):
    def __init__(self, app, token: str):
        super().__init__(app)
        self.expected = f"Bearer {token}"

    async def dispatch(self, request, call_next):
        if request.url.path != CARD_PATH and request.headers.get("authorization") != self.expected:
            return JSONResponse({"error": "unauthenticated"}, status_code=401)
        return await call_next(request)


def main() -> None:
    token = sys.argv[1]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    card = AgentCard(
        name="Foreign Echo",
        description="An A2A agent built on the official Python SDK; not a Legate.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=base, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="echo",
                name="Echo",
                description="Says what it was told.",
                tags=["test"],
            )
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=EchoExecutor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/")
    app = Starlette(routes=routes)
    app.add_middleware(Bearer, token=token)

    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)

    async def run() -> None:
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if serving.done():
                serving.result()
                return
            await asyncio.sleep(0.01)
        print(f"listening {base}", flush=True)
        loop = asyncio.get_running_loop()
        # The test holds our stdin: when it goes away (the test ended, however), stop.
        await loop.run_in_executor(None, sys.stdin.read)
        server.should_exit = True
        await serving

    asyncio.run(run())


if __name__ == "__main__":
    main()
