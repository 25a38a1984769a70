"""A remote side for remote-write tests: a loopback payment service, and a plug-in tool that pays through it.

The service (stdlib ``http.server`` in a thread of the test process, so it outlives a killed
Tollgate process) records every ``POST /payments`` with its ``Idempotency-Key``; ``GET
/payments?key=K`` says whether a payment with that key arrived. ``mode`` makes it fail (500) or
stall past the client's timeout.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field

from tollgate.policies.errors import Unavailable
from tollgate.tools import ActionResult, ActionSpec, ArgsModel, ExecContext, SafeText, ToolSpec, template_preview
from tollgate.tools.registry import Reconciled


class PaymentService:
    """The running service: its URL, what it received, and how it answers."""

    def __init__(self) -> None:
        self.payments: list[dict[str, Any]] = []
        self.mode: Literal["ok", "fail", "stall"] = "ok"
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                if service.mode == "stall":
                    time.sleep(3)
                if service.mode == "fail":
                    self._send(500, {"error": "down"})
                    return
                service.payments.append({**body, "key": self.headers.get("Idempotency-Key")})
                self._send(200, {"id": f"pay_{len(service.payments)}", "status": "paid"})

            def do_GET(self) -> None:  # noqa: N802
                key = parse_qs(urlsplit(self.path).query).get("key", [""])[0]
                found = [p for p in service.payments if p["key"] == key]
                self._send(200, {"found": bool(found)})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def payment_service() -> Iterator[PaymentService]:
    service = PaymentService()
    try:
        yield service
    finally:
        service.close()


class PayArgs(ArgsModel):
    to: SafeText(100)
    amount_cents: int = Field(ge=1, le=1_000_000)


def payments_tool(url: str, *, reconcile: bool = True, crash_after_call: bool = False) -> ToolSpec:
    """A remote-write tool over the service; ``crash_after_call`` SIGKILLs the process once the payment is made."""

    async def pay(ctx: ExecContext, args: PayArgs) -> ActionResult:
        assert ctx.http is not None and ctx.idempotency_key is not None and ctx.conn is None
        response = await ctx.http.post(f"{url}/payments", json={"to": args.to, "amount_cents": args.amount_cents},
                                       headers={"Idempotency-Key": ctx.idempotency_key})
        if response.status != 200:
            raise Unavailable("the payment service")
        if crash_after_call:
            os.kill(os.getpid(), signal.SIGKILL)  # after the remote call, before its outcome is recorded
        paid = json.loads(response.body)
        return ActionResult(tool="payments", action="pay", kind="write", changed=1,
                            summary=f"Paid {args.to}.", item={"id": paid["id"]})

    async def find(ctx: ExecContext, args: PayArgs) -> Reconciled:
        assert ctx.http is not None
        response = await ctx.http.get(f"{url}/payments", params={"key": ctx.idempotency_key or ""})
        if json.loads(response.body)["found"]:
            return Reconciled.done(ActionResult(tool="payments", action="pay", kind="write", changed=1,
                                                summary=f"Paid {args.to}."))
        return Reconciled.not_done()

    return ToolSpec(
        name="payments", description="Payments.", capability_phrase="make payments",
        actions=(ActionSpec(
            name="pay", description="Pay someone (after your approval).", args=PayArgs, tier="confirmation",
            effect="write", idempotent=False, executor=pay, renderer=lambda r: r["summary"],
            preview=template_preview("Pay {to} {amount_cents} cents"), usage_examples=("pay sam 5 euros",),
            reconcile=find if reconcile else None,
        ),),
    )
