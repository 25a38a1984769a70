"""The picker's menu: which function schemas the model is offered for one request.

App tags narrow it to their tools; when more functions remain than the menu cap, a BM25
shortlist (``bm25s``) over each function's name, description and usage examples keeps the
most relevant. Narrowing never widens what can run: the tier gate and id validation still
decide, and a call to a registered function outside the menu is refused as not offered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import bm25s

from tollgate.policies.tags import TagVerdict, read_tags
from tollgate.tools.registry import Registry

__all__ = ["Menu", "MenuBuilder"]


@dataclass(frozen=True, slots=True)
class Menu:
    """The functions offered for one request."""

    schemas: list[dict[str, Any]]
    """The closed function schemas, in registry order."""
    names: frozenset[str]
    """Their names."""
    tags: TagVerdict
    """How the request's tags applied."""
    shortlisted: bool
    """Whether the BM25 shortlist cut the menu."""


@dataclass
class MenuBuilder:
    """Builds menus for one registry (the BM25 index is built once, lazily)."""

    registry: Registry
    cap: int
    _schemas: list[dict[str, Any]] = field(default_factory=list)
    _index: bm25s.BM25 | None = None
    version: int = -1
    """The registry's version the menus are built from (a replaced action needs a new builder)."""

    def __post_init__(self) -> None:
        self._schemas = self.registry.function_schemas()
        self.version = self.registry.version

    def _shortlist(self, request: str, candidates: list[int], cap: int) -> list[int]:
        if self._index is None:
            corpus = [
                f"{s['function']['name'].replace('__', ' ').replace('_', ' ')} {s['function']['description']}"
                for s in self._schemas
            ]
            index = bm25s.BM25()
            index.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
            self._index = index
        tokens = bm25s.tokenize([request], stopwords="en", show_progress=False)
        k = len(self._schemas)
        docs, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        allowed = set(candidates)
        ranked = [int(d) for d, score in zip(docs[0], scores[0], strict=True) if int(d) in allowed and score > 0]
        if len(ranked) < cap:  # pad with the registry's order so the menu is never empty
            ranked += [i for i in candidates if i not in ranked][: cap - len(ranked)]
        return sorted(ranked[:cap])

    def build(self, request: str, used: tuple[str, ...] = ()) -> Menu:
        """The menu for a step of the task ``request`` that already used the tools ``used``.

        When the shortlist cuts, the actions of the tools already used come first (a later step
        of a task most often needs a sibling of an earlier call: list mail, then reply), then
        the best BM25 matches of the request and those tools' names.
        """
        tags = read_tags(request, (t.name for t in self.registry.tools))
        candidates = [
            i for i, s in enumerate(self._schemas)
            if not tags.tools or s["function"]["name"].split("__", 1)[0] in tags.tools
        ]
        shortlisted = len(candidates) > self.cap
        if shortlisted:
            kept = [i for i in candidates if self._schemas[i]["function"]["name"].split("__", 1)[0] in used][: self.cap]
            rest = [i for i in candidates if i not in kept]
            query = " ".join((request, *used))
            chosen = sorted(kept + (self._shortlist(query, rest, self.cap - len(kept)) if len(kept) < self.cap else []))
        else:
            chosen = candidates
        schemas = [self._schemas[i] for i in chosen]
        return Menu(schemas, frozenset(s["function"]["name"] for s in schemas), tags, shortlisted)
