"""Streams one task through the official Python A2A SDK (a2a-sdk >= 1.0) and prints a JSON
summary on stdout: the kinds of the frames, the first frame's task id, the final state, the
answer artifact's data part. Usage: stream.py BASE_URL TOKEN PROMPT"""

import asyncio
import json
import sys

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict


async def main(url: str, token: str, prompt: str) -> None:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    client = await ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create_from_url(url)
    request = SendMessageRequest(message=new_text_message(prompt, role=Role.ROLE_USER))
    kinds, first_task, final_state, data = [], None, None, None
    async for frame in client.send_message(request):
        kind = frame.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task" and first_task is None:
            first_task = frame.task.id
        elif kind == "status_update":
            final_state = TaskState.Name(frame.status_update.status.state)
        elif kind == "artifact_update":
            for part in frame.artifact_update.artifact.parts:
                if part.HasField("data"):
                    data = MessageToDict(part.data)
    await client.close()
    await http.aclose()
    print(json.dumps({"kinds": kinds, "task": first_task, "state": final_state, "data": data}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
