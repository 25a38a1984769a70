"""A loopback OpenAI-compatible model for P8: ``/v1/chat/completions`` with a real model's latency.

``python -m bench.model_server --port N [--ttft 1.0] [--chunk-seconds 0] [--reply-words 0]`` serves on 127.0.0.1.
Each request waits ``ttft`` seconds (a model's time to first token), then answers like the deterministic benchmark
model: a request whose last message is a tool result gets text, any other a call of the offered
function whose name ends in ``list`` (``{"range": "today"}``), or, for a request that starts
"add a task to ...", of ``tasks__create`` with the rest as its title (P9's write). ``stream: true`` gets the answer
as SSE chunks, text a few words per chunk (``words_per_chunk``; a reply of ``reply_words`` words, the sentence below
repeated, when given), ``chunk_seconds`` apart (a model generating its
answer as it streams it; an unstreamed answer takes as long in all). It stands in for a model
and nothing else; both sides of P8 talk to the same server. Prints ``ready`` when it listens.
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


def _reply(words: int) -> str:
    if words <= 0:
        return _REPLY
    sentence = _REPLY.split(" ")
    return " ".join(sentence[i % len(sentence)] for i in range(words))


def _message(body: dict[str, Any], reply: str = _REPLY) -> dict[str, Any]:
    messages = body.get("messages") or []
    name = _function(body)
    if (messages and messages[-1].get("role") == "tool") or name is None:
        return {"role": "assistant", "content": reply}
    asked = next((m.get("content") for m in reversed(messages) if m.get("role") == "user"), None)
    arguments: dict[str, Any] = {"range": "today"}
    if isinstance(asked, str) and asked.startswith(_WRITE):
        name, arguments = "tasks__create", {"title": asked.removeprefix(_WRITE)}
    call = {"id": "call_" + uuid.uuid4().hex[:12], "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def _chunks(message: dict[str, Any], model: str, per_chunk: int = 3) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    if message.get("tool_calls"):
        call = message["tool_calls"][0]
        return [chunk({"role": "assistant", "tool_calls": [{"index": 0, **call}]}), chunk({}, "tool_calls")]
    words = message["content"].split(" ")
    parts = [" ".join(words[i:i + per_chunk]) + " " for i in range(0, len(words), per_chunk)]
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": p}) for p in parts), chunk({}, "stop")]


def build_app(ttft: float, chunk_seconds: float = 0.0, reply_words: int = 0, words_per_chunk: int = 3) -> web.Application:
    """The model's HTTP app."""
    reply = _reply(reply_words)

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        await asyncio.sleep(ttft)
        message = _message(body, reply)
        model = str(body.get("model", "bench-model"))
        chunks = _chunks(message, model, words_per_chunk)
        if not body.get("stream"):
            if chunk_seconds:
                await asyncio.sleep(chunk_seconds * (len(chunks) - 1))
            return web.json_response({
                "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            })
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, part in enumerate(chunks):
            if i and chunk_seconds:
                await asyncio.sleep(chunk_seconds)
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
    parser.add_argument("--chunk-seconds", type=float, default=0.0, help="seconds between a streamed answer's chunks")
    parser.add_argument("--reply-words", type=int, default=0, help="words of the text reply (0: the short sentence)")
    parser.add_argument("--words-per-chunk", type=int, default=3, help="words of text in each streamed chunk")
    args = parser.parse_args()
    print("ready", flush=True)
    web.run_app(build_app(args.ttft, args.chunk_seconds, args.reply_words, args.words_per_chunk), host="127.0.0.1", port=args.port, print=None, backlog=4096,
                access_log=None)


if __name__ == "__main__":
    main()
