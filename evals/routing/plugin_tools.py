"""Tools defined only for the plug-in routing set: nothing in the offline picker knows them.

Each is written as a plug-in author would write it with the public tool API (an argument model,
a description, usage examples), the way an MCP server's tool arrives too (the MCP adapter builds
the same kind of argument model from the server's JSON schema). Their executors never run: the
eval only asks which call the picker proposes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tollgate.policies.arguments import ArgsModel, Count, SafeText
from tollgate.tools.registry import ActionResult, ActionSpec, ExecContext, ToolSpec

__all__ = ["PLUGIN_TOOLS"]


async def _never(ctx: ExecContext, args: Any) -> ActionResult:
    raise AssertionError("the routing eval never runs a tool")


def _action(name: str, args: type[ArgsModel], examples: tuple[str, ...], *, writes: bool) -> ActionSpec:
    return ActionSpec(name=name, description=args.__doc__ or name, args=args,
                      tier="confirmation" if writes else "allowlist", effect="write" if writes else "read",
                      executor=_never, renderer=lambda result: "", usage_examples=examples,
                      **({"preview": lambda ctx, a: name} if writes else {}))


class ExpenseAdd(ArgsModel):
    """Log an expense."""

    amount: float = Field(gt=0, le=1_000_000, description="How much was spent.")
    description: SafeText(200) = Field(description="What it was for.")
    currency: Literal["EUR", "USD", "GBP", "CHF"] | None = Field(default=None, description="The currency (default: the owner's).")
    category: Literal["food", "travel", "books", "home", "other"] | None = Field(default=None, description="A category.")


class ExpenseList(ArgsModel):
    """List recent expenses."""

    category: Literal["food", "travel", "books", "home", "other"] | None = None
    limit: Count(1, 50) = 10


class PantryAdd(ArgsModel):
    """Add something to the pantry inventory."""

    item: SafeText(100) = Field(description="What to add.")
    quantity: Count(1, 1000) | None = Field(default=None, description="How many.")


class PantryList(ArgsModel):
    """What is in the pantry."""

    limit: Count(1, 100) = 50


class HabitLog(ArgsModel):
    """Log a habit session."""

    habit: Literal["running", "reading", "meditation", "piano", "yoga"] = Field(description="Which habit.")
    minutes: Count(1, 600) = Field(description="How many minutes.")


class ShoppingAdd(ArgsModel):
    """Put an item on the shared shopping list (an MCP server's tool)."""

    item: SafeText(100) = Field(description="The item.")
    quantity: Count(1, 100) | None = None
    store: Literal["grocery", "pharmacy", "hardware"] | None = None


PLUGIN_TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(name="expenses", description="Your expense log.", capability_phrase="log and list your expenses", actions=(
        _action("add", ExpenseAdd, ("log 12.50 for lunch as an expense", "add an expense of 30 for taxis"), writes=True),
        _action("list", ExpenseList, ("show my expenses", "what did I spend recently?"), writes=False),
    )),
    ToolSpec(name="pantry", description="Your pantry inventory.", capability_phrase="keep your pantry inventory", actions=(
        _action("add", PantryAdd, ("add rice to the pantry", "put 2 tins of tomatoes in the pantry"), writes=True),
        _action("list", PantryList, ("what's in the pantry?", "show the pantry"), writes=False),
    )),
    ToolSpec(name="habits", description="Your habit tracker.", capability_phrase="log your habits", actions=(
        _action("log", HabitLog, ("log 30 minutes of running", "I did 20 minutes of yoga"), writes=True),
    )),
    ToolSpec(name="shopping", description="The household's shared shopping list.",
             capability_phrase="keep the shared shopping list", actions=(
        _action("add_item", ShoppingAdd, ("add milk to the shopping list", "put 3 lemons on the shopping list"), writes=True),
    )),
)
"""The plug-in set's tools."""
