"""A loopback OpenAI-compatible model for P8: ``/v1/chat/completions`` with a real model's latency.

``python -m bench.model_server --port N [--ttft 1.0]`` serves on 127.0.0.1. Each request waits
``ttft`` seconds (a model's time to first token), then answers like the deterministic benchmark
model: a request whose last message is a tool result gets text, any other a call of the offered
function whose name ends in ``list`` (``{"range": "today"}``), or, for a request that starts
"add a task to ...", of ``tasks__create`` with the rest as its title (P9's write). ``stream: true`` gets the answer
as SSE chunks, text a few words per chunk. It stands in for a model and nothing else; both
sides of P8 talk to the same server. Prints ``ready`` when it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

from aiohttp import web

__all__ = ["build_app"]

_REPLY = "Here is your day: three events, the first at nine."


def _function(body: dict[str, Any]) -> str | None:
    names = [t.get("function", {}).get("name", "") for t in body.get("tools") or []]
    return next((n for n in names if n.endswith("list")), names[0] if names else None)


_WRITE = "add a task to "


def _message(body: dict[str, Any]) -> dict[str, Any]:
    messages = body.get("messages") or []
    name = _function(body)
    if (messages and messages[-1].get("role") == "tool") or name is None:
        return {"role": "assistant", "content": _REPLY}
    asked = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    arguments: dict[str, Any] = {"range": "today"}
    if isinstance(asked, str) and asked.startswith(_WRITE):
        name, arguments = "tasks__create", {"title": asked.removeprefix(_WRITE)}
    call = {"id": "call_" + uuid.uuid4().hex[:12], "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _chunks(message: dict[str, Any], model: str) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        return [chunk({"role": "assistant", "tool_calls": [{"index": 0, **call}]}), chunk({}, "tool_calls")]
    words = message["content"].split(" ")
    parts = [" ".join(words[i:i + 3]) + " " for i in range(0, len(words), 3)]
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in parts), chunk({}, "stop")]


def build_app(ttft: float) -> web.Application:
    """The model's HTTP app."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(ttft)
        message = _message(body)
        model = str(body.get("model", "bench-model"))
        if not body.get("stream"):
            return web.json_response({
                "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            })
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for part in _chunks(message, model):
            await response.write(b"data: " + json.dumps(part).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    app.router.add_get("/ok", ok)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.model_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft", type=float, default=1.0, help="seconds before each answer")
    args = parser.parse_args()
    print("ready", flush=True)
    web.run_app(build_app(args.ttft), host="127.0.0.1", port=args.port, print=None, backlog=4096,
                access_log=None)


if __name__ == "__main__":
    main()
