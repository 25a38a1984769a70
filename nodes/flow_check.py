"""The flow check of the tier gate: an outbound read that carries what the model was shown asks first.

:mod:`policies.flow` decides; this module gathers what it decides over, from the server's own
records only: what the thread read (:mod:`nodes.shown`), the user's own words, and the outbound
values already sent this turn.
"""

from __future__ import annotations

from tollgate.graph.services import Services
from tollgate.graph.state import Plan, TurnState
from tollgate.policies.dlp import strings_in
from tollgate.policies.flow import Carried, carried
from tollgate.policies.provenance import Shown

__all__ = ["carried_by", "flow_warning", "is_outbound", "outbound_values"]


def _sends_everything(svc: Services, plan: Plan) -> bool:
    spec = svc.registry.action(plan["tool"], plan["action"])
    tool = svc.registry.tool(plan["tool"])
    return spec is not None and (spec.remote or tool is None or not tool.database)


def is_outbound(svc: Services, plan: Plan) -> bool:
    """Whether ``plan`` is a read whose arguments leave Tollgate (a tool with no database of its
    own, an action declared remote, or one that marks ``outbound_fields``); writes ask for approval anyway."""
    spec = svc.registry.action(plan["tool"], plan["action"])
    return spec is not None and not spec.writes and (bool(spec.outbound_fields) or _sends_everything(svc, plan))


def outbound_values(svc: Services, plan: Plan) -> list[str]:
    """The strings an outbound call sends: every argument's, or those of its ``outbound_fields``."""
    spec = svc.registry.action(plan["tool"], plan["action"])
    if spec is not None and spec.outbound_fields and not _sends_everything(svc, plan):
        return strings_in([plan["args"].get(name) for name in spec.outbound_fields])
    return strings_in(plan["args"])


def carried_by(svc: Services, plan: Plan, shown: Shown, state: TurnState) -> Carried:
    """What ``plan`` would carry out, judged with the outbound values already sent this turn."""
    return carried(outbound_values(svc, plan), shown, state.get("outbound") or [])


def flow_warning(plan: Plan) -> str:
    """The approval card's warning for an outbound call the flow check sent to approval."""
    flow = plan.get("flow") or {}
    what = []
    if flow.get("sources"):
        what.append("text copied from what " + ", ".join(flow["sources"]) + " returned")
    if flow.get("contacts"):
        what.append("an e-mail address or phone number you did not type")
    if not what:
        return ""
    return (f"⚠ Outbound data: this sends {' and '.join(what)} to {plan['tool']}, outside Tollgate. "
            "Approve only if you mean to share it.")
