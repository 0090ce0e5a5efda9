"""Small raw-ASGI helpers for the lane server: read a body, send JSON, send SSE."""

import asyncio
import json

JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


async def read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None when it is larger than `limit` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def send_json(send, status: int, body: dict):
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


def sse(data: dict | str) -> bytes:
    """One SSE `data:` event."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n".encode()


def watch_disconnect(receive, on_disconnect) -> asyncio.Task:
    """A task that calls `on_disconnect()` when the client goes away; cancel it when done."""

    async def watch():
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                await on_disconnect()
                return

    return asyncio.create_task(watch())
