"""A model's tool calls from their raw parts: arguments that are a whole JSON object, or an invalid call.

One rule for every way an answer arrives (a whole completion, or a stream's chunks merged): a
call's arguments are parsed as they were sent, never repaired, and a call whose arguments are
not a JSON object is an invalid tool call, which the picker refuses back to the model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from langchain_core.messages.tool import InvalidToolCall, ToolCall, invalid_tool_call, tool_call

__all__ = ["parsed_calls"]


def parsed_calls(raw: Iterable[tuple[str, str, str | None]]) -> tuple[list[ToolCall], list[InvalidToolCall]]:
    """The calls of ``raw`` (each its name, its arguments' text, its id): those whose arguments
    are a JSON object (no text: no arguments), and the others, as invalid calls."""
    calls: list[ToolCall] = []
    invalid: list[InvalidToolCall] = []
    for name, arguments, call_id in raw:
        try:
            # The standard library's parser, not orjson: it keeps an integer of any size exact
            # (orjson reads one past 64 bits as a float, changing the value the model sent).
            args = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # not JSON, or nested past what the parser takes
            args = None
        if isinstance(args, dict):
            calls.append(tool_call(name=name, args=args, id=call_id))
        else:
            invalid.append(invalid_tool_call(name=name, args=arguments, id=call_id, error="arguments are not a JSON object"))
    return calls, invalid
