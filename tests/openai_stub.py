"""A small OpenAI-compatible server on loopback, answering ``/v1/chat/completions`` from a script.

Real sockets, real HTTP: Tollgate's Chat Completions client under test cannot tell it
from a provider. Each request takes the next scripted step: a JSON completion, an SSE stream of
chunks, an error status, or a hang (for timeouts). A completion asked for as a stream
(``"stream": true``) is sent as a provider streams it: its text, then each tool call, as SSE
chunks. Every request body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Step", "StubServer", "hang", "sse_text", "status", "stub_server", "text", "tool_call"]


@dataclass
class Step:
    """One scripted response."""

    kind: str
    status: int = 200
    body: dict[str, Any] | None = None
    chunks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _completion(message: dict[str, Any], usage: dict[str, int] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-stub", "object": "chat.completion", "created": 0, "model": "stub-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
    }
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage["in"], "completion_tokens": usage["out"],
                         "total_tokens": usage["in"] + usage["out"]}
    return body


def tool_call(name: str, args: dict[str, Any] | str, *, usage: dict[str, int] | None = None) -> Step:
    """A completion with one tool call (``args`` as a dict, or a raw string for malformed JSON)."""
    arguments = args if isinstance(args, str) else json.dumps(args)
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{abs(hash((name, arguments))) % 10**8}", "type": "function",
         "function": {"name": name, "arguments": arguments}}]}
    return Step("json", body=_completion(message, usage))


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _usage_chunk(usage: dict[str, int]) -> dict[str, Any]:
    return {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
            "choices": [], "usage": usage}


def _streamed(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON completion as the SSE chunks a provider streams for it."""
    choice = body["choices"][0]
    message = choice["message"]
    chunks = [_chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        chunks.append(_chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks.append(_chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                              "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        chunks.append(_chunk({"tool_calls": [{"index": index,
                                              "function": {"arguments": call["function"]["arguments"]}}]}))
    chunks.append(_chunk({}, choice["finish_reason"]))
    if "usage" in body:
        chunks.append(_usage_chunk(body["usage"]))
    return chunks


def text(content: str, *, usage: dict[str, int] | None = None) -> Step:
    """A completion with text and no tool call."""
    return Step("json", body=_completion({"role": "assistant", "content": content}, usage))


def sse_text(deltas: list[str], *, reasoning: list[str] | None = None, usage: dict[str, int] | None = None,
             seconds: float = 0.0) -> Step:
    """A streamed completion: optional reasoning deltas, then content deltas (``seconds`` apart), then usage."""
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [_chunk({"reasoning_content": r}) for r in reasoning or []]
    chunks += [_chunk({"content": d}) for d in deltas]
    chunks.append(_chunk({}, "stop"))
    if usage is not None:
        chunks.append(_usage_chunk({"prompt_tokens": usage["in"], "completion_tokens": usage["out"],
                                    "total_tokens": usage["in"] + usage["out"]}))
    return Step("sse", chunks=chunks, seconds=seconds)


def status(code: int) -> Step:
    """An error response with ``code``."""
    return Step("status", status=code, body={"error": {"message": f"stub error {code}", "type": "server_error"}})


def hang(seconds: float) -> Step:
    """Sleep before answering (longer than the client's timeout)."""
    return Step("hang", seconds=seconds)


class StubServer:
    """The running stub: its base URL, its script and what it received."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests.append(body)
                    step = stub.steps.pop(0) if stub.steps else status(599)
                if body.get("stream") and step.kind == "json" and step.status == 200 and step.body:
                    step = Step("sse", chunks=_streamed(step.body))
                try:
                    stub._answer(self, step)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def push(self, *steps: Step) -> None:
        """Append scripted steps."""
        with self._lock:
            self.steps.extend(steps)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, step: Step) -> None:
        if step.kind == "hang":
            time.sleep(step.seconds)
            step = text("too late")
        if step.kind == "sse":
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.end_headers()
            for index, chunk in enumerate(step.chunks):
                if index and step.seconds and chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    time.sleep(step.seconds)  # a model producing its tokens one after another
                handler.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                handler.wfile.flush()
            handler.wfile.write(b"data: [DONE]\n\n")
            return
        payload = json.dumps(step.body or {}).encode()
        handler.send_response(step.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def stub_server() -> Iterator[StubServer]:
    """Run a stub for the duration of the block."""
    server = StubServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
