"""Handing a message to the owner's SMTP server, at the address the egress gate checked.

:class:`Submission` connects a socket to the pinned address and gives it to ``aiosmtplib`` with
the account's host name, so TLS (implicit, or STARTTLS before the login) is verified for that
name. What can go wrong is told apart, because it decides whether a message may have gone out:
before the server has the message (it cannot be reached: :class:`ServerAway`; the login or the
certificate is refused), the server refusing it (:class:`SendRefused`: nothing was sent), and
the connection ending before the server answered (:class:`AnswerLost`: it may have taken it).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import parseaddr
from typing import Literal

import aiosmtplib

from tollgate.policies.errors import EgressDenied, ErrorCode, TollgateError
from tollgate.tools.connectors.errors import AccountRefused, ServerAway, certificate_refused

__all__ = ["AnswerLost", "SendRefused", "Submission"]

_SERVER = "mail server"


class SendRefused(TollgateError):
    """The SMTP server refused the message (a recipient, the sender, the content): nothing was sent."""

    code: ErrorCode = "unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"the mail server refused to send the message ({reason}); nothing was sent")


class AnswerLost(Exception):
    """The connection ended after the message was handed over and before the server answered."""


class Submission:
    """The owner's outgoing server: ``host:port`` at ``address``, with its security and login."""

    def __init__(self, address: str, host: str, port: int, security: Literal["tls", "starttls", "none"],
                 tls: ssl.SSLContext, username: str, password: str, timeout: float) -> None:
        self._address, self._host, self._port, self._security = address, host, port, security
        self._tls, self._username, self._password, self._timeout = tls, username, password, timeout

    async def connect(self) -> aiosmtplib.SMTP:
        """A logged-in SMTP session: :class:`AccountRefused`, :class:`EgressDenied` (``certificate_refused``)
        or :class:`ServerAway` otherwise, nothing sent in any case."""
        family = socket.AF_INET6 if ":" in self._address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self._timeout):
                await asyncio.get_running_loop().sock_connect(sock, (self._address, self._port))
        except (OSError, TimeoutError):
            sock.close()
            raise ServerAway(_SERVER) from None
        smtp = aiosmtplib.SMTP(hostname=self._host, sock=sock, use_tls=self._security == "tls",
                               start_tls=self._security == "starttls", tls_context=self._tls, timeout=self._timeout)
        try:
            await smtp.connect()
            await smtp.login(self._username, self._password)
        except aiosmtplib.SMTPAuthenticationError:
            smtp.close()
            raise AccountRefused(_SERVER) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError, ssl.SSLError) as exc:
            smtp.close()
            if certificate_refused(exc):
                raise EgressDenied("certificate_refused") from None
            raise ServerAway(_SERVER) from None
        return smtp

    @staticmethod
    async def quit(smtp: aiosmtplib.SMTP) -> None:
        """End the session politely, or just close it."""
        try:
            await smtp.quit()
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            smtp.close()

    async def deliver(self, smtp: aiosmtplib.SMTP, message: EmailMessage, sender: str,
                      to: Sequence[str]) -> tuple[str, ...]:
        """Hand ``message`` over ``smtp`` (then closed); the recipients refused while the others were taken.

        :class:`SendRefused` when the server takes it for nobody, :class:`AnswerLost` when the
        connection ends before its answer.
        """
        try:
            errors, _ = await smtp.send_message(message, sender=parseaddr(sender)[1] or sender, recipients=list(to))
        except (aiosmtplib.SMTPRecipientsRefused, aiosmtplib.SMTPSenderRefused, aiosmtplib.SMTPDataError) as exc:
            smtp.close()
            raise SendRefused(str(getattr(exc, "code", "") or "refused")) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError):
            smtp.close()
            raise AnswerLost() from None
        await self.quit(smtp)
        return tuple(str(address).replace("\x00", "")[:200] for address in errors)
