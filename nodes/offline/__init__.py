"""The embedded offline picker: tool calls from rules when no model is configured.

:class:`OfflinePicker` is a LangChain chat model that reads the picker prompt like any other
model and answers with one tool call, a reply or a clarifying question. The grammar lives in
small modules: ``text`` and ``spelling`` (normalisation, typos), ``times`` and ``dates`` (natural
times; the long tail through dateparser), ``refs`` and ``pronouns`` (positions, labels, counts,
"it"), ``moods`` (requests that mention a write without asking for one), ``scope`` (requests no
tool serves), ``examples`` (bound functions the grammar does not know, by their usage
examples), one module per kind of item, and ``intents`` (the decision).
"""

from tollgate.nodes.offline.functions import known_function_schemas
from tollgate.nodes.offline.intents import decide
from tollgate.nodes.offline.model import OfflinePicker
from tollgate.nodes.offline.plan import Call, Plan, Reply

__all__ = ["Call", "OfflinePicker", "Plan", "Reply", "decide", "known_function_schemas"]
