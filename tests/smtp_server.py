"""A real SMTP server for the mail connector tests: aiosmtpd, delivering into Dovecot.

Run as ``python -m tests.smtp_server ROOT PORT TLS_PORT STARTTLS_PORT``: it serves
``127.0.0.1:PORT`` in plain text, ``TLS_PORT`` over TLS and ``STARTTLS_PORT`` with STARTTLS required
(ROOT/cert.pem and key.pem), with AUTH PLAIN and LOGIN against ROOT/users (the Dovecot passwd file the tests write) and hands each accepted
message to Dovecot's own delivery agent (``dovecot-lda``) for each local recipient, as a
provider's mail server would. Every accepted message is also appended to ROOT/accepted.jsonl
(its Message-ID and recipients), so a test can count what the server took. ``FAIL_DATA`` in
ROOT makes the next DATA drop the connection after the message was taken (a send whose answer
never arrives); ``STOP_IMAP`` makes it stop Dovecot once it has taken the next message. Recipients
at ``refused.test`` are refused (550).
"""

from __future__ import annotations

import json
import signal
import ssl
import subprocess
import sys
import threading
from email.parser import BytesHeaderParser
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

_LDA = "/usr/lib/dovecot/dovecot-lda"


def _users(root: Path) -> dict[str, str]:
    out = {}
    for line in (root / "users").read_text().splitlines():
        name, _, rest = line.partition(":")
        out[name] = rest.split(":", 1)[0].removeprefix("{PLAIN}")
    return out


class _Deliver:
    def __init__(self, root: Path) -> None:
        self.root = root

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,  # noqa: N802
                          rcpt_options: list[str]) -> str:
        if address.endswith("@refused.test"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's hook name
        raw = envelope.original_content or envelope.content
        head = BytesHeaderParser().parsebytes(raw)
        users = _users(self.root)
        for rcpt in envelope.rcpt_tos:
            local = rcpt.partition("@")[0]
            if local in users:
                subprocess.run([_LDA, "-c", str(self.root / "dovecot.conf"), "-d", local, "-f", envelope.mail_from],
                               input=raw, check=True, timeout=30)
        with (self.root / "accepted.jsonl").open("a") as out:
            out.write(json.dumps({"message_id": str(head.get("Message-ID", "")), "to": envelope.rcpt_tos}) + "\n")
        flag = self.root / "FAIL_DATA"
        if flag.exists():
            flag.unlink()
            server.transport.abort()  # taken, but the client never hears so
        away = self.root / "STOP_IMAP"
        if away.exists():
            away.unlink()
            subprocess.run(["doveadm", "-c", str(self.root / "dovecot.conf"), "stop"], check=False, timeout=30)
        return "250 OK queued"


def _authenticator(root: Path) -> Any:
    def check(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
        if isinstance(data, LoginPassword):
            user, password = data.login.decode(), data.password.decode()
            if _users(root).get(user) == password:
                return AuthResult(success=True)
        return AuthResult(success=False, handled=False)
    return check


def main() -> None:
    root, port, tls_port, starttls_port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(root / "cert.pem", root / "key.pem")
    controllers = [
        Controller(_Deliver(root), hostname="127.0.0.1", port=port, authenticator=_authenticator(root),
                   auth_require_tls=False, auth_required=True),
        # aiosmtpd counts only STARTTLS as TLS: on the implicit-TLS port AUTH must be allowed explicitly.
        Controller(_Deliver(root), hostname="127.0.0.1", port=tls_port, authenticator=_authenticator(root),
                   auth_require_tls=False, auth_required=True, ssl_context=tls),
        Controller(_Deliver(root), hostname="127.0.0.1", port=starttls_port, authenticator=_authenticator(root),
                   auth_required=True, tls_context=tls, require_starttls=True),
    ]
    for controller in controllers:
        controller.start()
    print("ready", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    for controller in controllers:
        controller.stop()


if __name__ == "__main__":
    main()
