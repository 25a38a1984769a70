"""The chat model for a configured provider: the Chat Completions API over aiohttp, as a LangChain model.

Every OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp, a LiteLLM proxy) speaks the same
small protocol: one ``POST {base_url}/chat/completions`` of JSON, answered with one JSON
completion or, with ``"stream": true``, with server-sent ``data:`` lines ending in ``[DONE]``.

Why not the OpenAI SDK through ``langchain-openai``, as before: on a server with many turns in
flight the model calls were the largest part of its CPU, most of it not the HTTP exchange (the
SDK walks every request against its typed parameters and builds a pydantic model per chunk,
LangChain converts each chunk twice; measured in ``bench/README.md``). This client sends the
request as built and reads each chunk once.

What it promises:

* Failures are :class:`ProviderError`, named by a secret-free ``kind`` (``http_503``,
  ``rate_limited``, ``timeout``, ``connection``, ``bad_answer``) and marked ``retryable`` (a
  rate limit, a server error, a timeout, a refused or dropped connection) or not (any other
  status, an answer that is not the protocol's). Neither the key nor the server's error text
  is ever in one.
* Tool calls come back as LangChain tool calls; arguments that are not a JSON object are an
  invalid tool call (never repaired), streamed or not.
* Non-standard ``reasoning_content`` (or ``reasoning``) deltas, which vLLM, Ollama and
  llama.cpp send for reasoning models, are kept in ``additional_kwargs["reasoning_content"]``.
* Usage is asked for when streaming and reported as ``usage_metadata``.
* ``timeout`` bounds connecting and each wait for the next bytes (a stream that keeps
  answering is never cut); a cancelled call closes its connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import aiohttp
import httpx
import orjson
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, convert_to_openai_messages
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, PrivateAttr, SecretStr

from tollgate.graph.models.tool_calls import parsed_calls

__all__ = ["ChatCompletionsModel", "ProviderError"]

_MAX_ANSWER = 32 * 1024 * 1024
"""Bytes of one answer at most: a server that never stops is refused, not read into memory forever."""
_CONNECTIONS = 1000
"""Connections per provider at once: the OpenAI SDK's own default, so a busy server's calls never queue here."""


class ProviderError(Exception):
    """A failed call to a provider, named by ``kind`` (never the key, never the server's own words)."""

    def __init__(self, kind: str, *, retryable: bool) -> None:
        super().__init__(f"the model provider failed: {kind}")
        self.kind = kind
        """``http_<status>``, ``rate_limited``, ``timeout``, ``connection`` or ``bad_answer``."""
        self.retryable = retryable
        """Whether the same provider may be asked again (rate limits, server errors, timeouts, connections)."""


def _status_error(status: int) -> ProviderError:
    if status == 429:
        return ProviderError("rate_limited", retryable=True)
    return ProviderError(f"http_{status}", retryable=status >= 500)


def _bad_answer() -> ProviderError:
    return ProviderError("bad_answer", retryable=False)


def _usage(block: Any) -> dict[str, int] | None:
    if not isinstance(block, dict):
        return None
    given, made = int(block.get("prompt_tokens") or 0), int(block.get("completion_tokens") or 0)
    return {"input_tokens": given, "output_tokens": made, "total_tokens": int(block.get("total_tokens") or given + made)}


def _reasoning(part: dict[str, Any]) -> dict[str, Any]:
    reasoning = part.get("reasoning_content") or part.get("reasoning")
    return {"reasoning_content": reasoning} if isinstance(reasoning, str) and reasoning else {}


def _message(body: Any) -> AIMessage:
    """A whole completion's answer; ``bad_answer`` when ``body`` is not one."""
    try:
        choice = body["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content")
        raw = []
        for call in message.get("tool_calls") or []:
            name, arguments = _name_and_arguments(call)
            raw.append((name or "", arguments or "", call.get("id")))
        calls, invalid = parsed_calls(raw)
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _bad_answer() from exc
    return AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid,
                     additional_kwargs=_reasoning(message), usage_metadata=_usage(body.get("usage")),  # type: ignore[arg-type]
                     response_metadata={"model_name": body.get("model", ""), "finish_reason": choice.get("finish_reason")})


def _name_and_arguments(call: Any) -> tuple[Any, Any]:
    """A tool call's function name and arguments' text, as sent (``None`` where missing)."""
    function = call.get("function") or {}
    return function.get("name"), function.get("arguments")


def _chunk(data: Any) -> AIMessageChunk | None:
    """One streamed chunk as a message chunk (``None`` for one that carries nothing)."""
    if not isinstance(data, dict) or "error" in data:
        raise _bad_answer()
    usage = _usage(data.get("usage"))
    choices = data.get("choices") or []
    if not choices:
        return AIMessageChunk(content="", usage_metadata=usage) if usage else None  # type: ignore[arg-type]
    try:
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content")
        pieces = []
        for call in delta.get("tool_calls") or []:
            name, arguments = _name_and_arguments(call)
            pieces.append(tool_call_chunk(name=name, args=arguments, id=call.get("id"), index=call.get("index")))
    except (AttributeError, TypeError) as exc:
        raise _bad_answer() from exc
    finish = choice.get("finish_reason")
    return AIMessageChunk(content=content, tool_call_chunks=pieces, additional_kwargs=_reasoning(delta),
                          usage_metadata=usage,  # type: ignore[arg-type]
                          response_metadata={"finish_reason": finish, "model_name": data.get("model", "")} if finish else {})


# Server-sent events parsed here rather than by a library: the one for aiohttp is unmaintained,
# and the protocol's part a completion stream uses is its ``data:`` lines and the blank line
# that ends each event (https://html.spec.whatwg.org/multipage/server-sent-events.html).
async def _events(lines: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """The JSON ``data`` of each event of a completion stream, until ``[DONE]`` or the stream's end."""
    data: list[bytes] = []
    async for raw in lines:
        line = raw.rstrip(b"\r\n")
        if line.startswith(b"data:"):
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            continue
        if line or not data:
            continue  # a comment, another field, or a blank line with no event
        payload, data = b"\n".join(data), []
        if payload == b"[DONE]":
            return
        yield _json(payload)
    if data and b"\n".join(data) != b"[DONE]":  # a last event the stream ended without its blank line
        yield _json(b"\n".join(data))


def _json(payload: bytes) -> Any:
    """``payload`` parsed; ``bad_answer`` when it is not JSON."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise _bad_answer() from exc


class ChatCompletionsModel(BaseChatModel):
    """An OpenAI-compatible endpoint's model; :meth:`aclose` closes its connections."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    base_url: str
    """The endpoint's base URL, ending in ``/v1`` for most servers."""
    model: str
    """The model the endpoint serves."""
    api_key: SecretStr | None = None
    """Sent as a bearer token; local servers accept any."""
    timeout: float = 30.0
    """Seconds to connect, and to wait for each next part of the answer."""

    _session: aiohttp.ClientSession | None = PrivateAttr(default=None)
    _loop: asyncio.AbstractEventLoop | None = PrivateAttr(default=None)
    _closed: bool = PrivateAttr(default=False)

    @property
    def _llm_type(self) -> str:
        return "chat-completions"

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` closed it (it makes no calls afterwards)."""
        return self._closed

    @property
    def _url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def _headers(self) -> dict[str, str]:
        key = self.api_key.get_secret_value() if self.api_key is not None else "not-needed"
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": "application/json"}

    @staticmethod
    def tool_schemas(tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], *,
                     strict: bool | None = None) -> list[dict[str, Any]]:
        """``tools`` in the API's function format (strict mode marked on each, with ``strict``)."""
        formatted = []
        for tool in tools:
            schema = convert_to_openai_tool(tool, strict=strict)
            if strict is not None and schema.get("type") == "function":
                schema = {**schema, "function": {**schema["function"], "strict": strict}}
            formatted.append(schema)
        return formatted

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool], *,
                   strict: bool | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind ``tools`` in the API's function format (see :meth:`tool_schemas`)."""
        return self.bind(tools=self.tool_schemas(tools, strict=strict), **kwargs)

    def _body(self, messages: list[BaseMessage], stop: list[str] | None, stream: bool, kwargs: dict[str, Any]) -> bytes:
        body: dict[str, Any] = {"model": self.model, "messages": convert_to_openai_messages(messages, text_format="string"),
                                **kwargs}
        if stop:
            body["stop"] = stop
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return orjson.dumps(body)

    def _client(self) -> aiohttp.ClientSession:
        """This loop's session (a session belongs to the loop it was made on)."""
        if self._closed:
            raise ProviderError("connection", retryable=False)
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            timeout = aiohttp.ClientTimeout(total=None, connect=self.timeout, sock_read=self.timeout)
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=_CONNECTIONS), timeout=timeout)
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        """Close the connections; later calls fail as ``connection`` (not retried)."""
        self._closed = True
        if self._session is not None and not self._session.closed and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    async def _post(self, body: bytes) -> aiohttp.ClientResponse:
        """The answer's response, status 200 (the caller releases it)."""
        try:
            response = await self._client().post(self._url, data=body, headers=self._headers())
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise ProviderError("timeout", retryable=True) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError("connection", retryable=True) from exc
        if response.status != 200:
            response.release()
            raise _status_error(response.status)
        return response

    @staticmethod
    async def _read(reading: Any) -> Any:
        try:
            return await reading
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise ProviderError("timeout", retryable=True) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise ProviderError("connection", retryable=True) from exc

    async def _parts(self, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The answer's bytes as they arrive; ``bad_answer`` past :data:`_MAX_ANSWER`."""
        seen = 0
        while part := await self._read(response.content.readany()):
            seen += len(part)
            if seen > _MAX_ANSWER:
                raise _bad_answer()
            yield part

    async def _lines(self, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """The stream's lines as they arrive (not aiohttp's ``readline``: it refuses a line over
        64 KiB, which one chunk of a long tool call's arguments can be)."""
        buffer = bytearray()
        async for part in self._parts(response):
            searched, start = len(buffer), 0  # a long line's earlier parts are not searched again
            buffer += part
            while (end := buffer.find(b"\n", searched)) >= 0:
                yield bytes(buffer[start:end])
                start = searched = end + 1
            del buffer[:start]
        if buffer:
            yield bytes(buffer)

    async def aanswer(self, messages: list[BaseMessage], *, stop: list[str] | None = None,
                      **params: Any) -> AIMessage:
        """The whole answer to ``messages``; ``params`` go into the request as they are (``tools``
        in the API's format: :meth:`tool_schemas`). Raises :class:`ProviderError`.

        No LangChain run of its own (no callbacks, no tracing): for a caller that is one already,
        as :class:`~graph.models.resilient.ResilientChatModel` is."""
        response = await self._post(self._body(messages, stop, False, params))
        try:
            raw = b"".join([part async for part in self._parts(response)])
        finally:
            response.release()
        return _message(_json(raw))

    async def astream_answer(self, messages: list[BaseMessage], *, stop: list[str] | None = None,
                             **params: Any) -> AsyncIterator[AIMessageChunk]:
        """The answer to ``messages`` as it streams, as :meth:`aanswer` (no run of its own)."""
        response = await self._post(self._body(messages, stop, True, params))
        try:
            async for data in _events(self._lines(response)):
                message = _chunk(data)
                if message is not None:
                    yield message
        finally:
            # A stream read to its end leaves its connection to the pool; one cut short closes it.
            response.close() if not response.content.at_eof() else response.release()

    def answer(self, messages: list[BaseMessage], *, stop: list[str] | None = None, **params: Any) -> AIMessage:
        """:meth:`aanswer` for synchronous callers (scripts, notebooks), over httpx."""
        try:
            response = httpx.post(self._url, content=self._body(messages, stop, False, params), headers=self._headers(),
                                  timeout=self.timeout)
        except httpx.TimeoutException as exc:
            raise ProviderError("timeout", retryable=True) from exc
        except httpx.TransportError as exc:
            raise ProviderError("connection", retryable=True) from exc
        if response.status_code != 200:
            raise _status_error(response.status_code)
        return _message(_json(response.content))

    async def _agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=await self.aanswer(messages, stop=stop, **kwargs))])

    async def _astream(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        async for message in self.astream_answer(messages, stop=stop, **kwargs):
            yield ChatGenerationChunk(message=message)

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages, stop=stop, **kwargs))])
