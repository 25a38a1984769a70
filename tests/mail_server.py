"""Real mail servers for the connector tests: Dovecot (IMAP) and aiosmtpd (SMTP) on loopback.

Dovecot runs with a throw-away configuration in a directory of its own: plain-text logins
from a passwd file, on a plain and a TLS port (a certificate for :data:`TLS_NAME` from a test
authority), maildirs under ``mail/``, the special-use folders Sent, Trash and Drafts,
all mail stored as the unprivileged ``nobody`` user. The SMTP server (:mod:`tests.smtp_server`)
delivers into those mailboxes with Dovecot's own delivery agent. :meth:`MailServers.stop_imap`
and :meth:`start_imap` take Dovecot away and bring it back with the same mail.

Dovecot is Debian's ``dovecot-imapd``; ``make test`` installs it when missing (``.ci/system-packages``),
as it does Chromium.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tests.children import free_port

__all__ = ["TLS_NAME", "MailServers", "mail_servers"]

TLS_NAME = "mail.example.com"
"""The name the servers' certificate is for (its own test authority signs it: ``MailServers.ca``)."""

_ROOT = Path(__file__).resolve().parent.parent
DOMAIN = "example.test"


def _wait_port(port: int, what: str, log: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{what} did not answer on {port}: {log.read_text()[-2000:] if log.exists() else ''}")


@dataclass
class MailServers:
    """A running Dovecot and SMTP server, and how to reach them."""

    root: Path
    users: dict[str, str]
    imap_port: int
    smtp_port: int
    imaps_port: int = 0
    """IMAP over TLS (a certificate for :data:`TLS_NAME`)."""
    smtps_port: int = 0
    """SMTP over TLS (the same certificate)."""
    submission_port: int = 0
    """SMTP with STARTTLS required before anything else (the same certificate)."""
    smtp: subprocess.Popen[Any] | None = field(default=None, repr=False)
    _smtp_log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def imap_url(self) -> str:
        return f"imap://127.0.0.1:{self.imap_port}"

    @property
    def smtp_url(self) -> str:
        return f"smtp://127.0.0.1:{self.smtp_port}"

    @property
    def ca(self) -> Path:
        """The certificate of the authority that signed the servers' certificate."""
        return self.root / "ca.pem"

    def address(self, user: str) -> str:
        return f"{user}@{DOMAIN}"

    def start_imap(self) -> None:
        dovecot = shutil.which("dovecot") or "/usr/sbin/dovecot"
        subprocess.run([dovecot, "-c", str(self.root / "dovecot.conf")], check=True, timeout=30)
        _wait_port(self.imap_port, "dovecot", self.root / "dovecot.log")

    def stop_imap(self) -> None:
        doveadm = shutil.which("doveadm") or "/usr/bin/doveadm"
        subprocess.run([doveadm, "-c", str(self.root / "dovecot.conf"), "stop"], check=False, timeout=30,
                       capture_output=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.imap_port), timeout=0.2).close()
                time.sleep(0.05)
            except OSError:
                return

    def start_smtp(self) -> None:
        self._smtp_log = (self.root / "smtp.log").open("ab")
        self.smtp = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "tests.smtp_server", str(self.root), str(self.smtp_port), str(self.smtps_port),
             str(self.submission_port)],
            cwd=_ROOT, stdout=self._smtp_log, stderr=subprocess.STDOUT)
        _wait_port(self.smtp_port, "the SMTP server", self.root / "smtp.log")
        _wait_port(self.smtps_port, "the SMTP server (TLS)", self.root / "smtp.log")
        _wait_port(self.submission_port, "the SMTP server (STARTTLS)", self.root / "smtp.log")

    def stop_smtp(self) -> None:
        if self.smtp is not None and self.smtp.poll() is None:
            self.smtp.terminate()
            self.smtp.wait(timeout=10)
        self.smtp = None
        if self._smtp_log is not None:
            self._smtp_log.close()
            self._smtp_log = None

    def deliver(self, user: str, raw: bytes, sender: str = "sam@elsewhere.test") -> None:
        """Put ``raw`` into ``user``'s inbox as the mail server would (Dovecot's delivery agent)."""
        subprocess.run(["/usr/lib/dovecot/dovecot-lda", "-c", str(self.root / "dovecot.conf"), "-d", user,
                        "-f", sender], input=raw, check=True, timeout=30)

    def empty(self, user: str) -> None:
        """Expunge every message of every folder of ``user`` (a test starting from a clean mailbox)."""
        doveadm = shutil.which("doveadm") or "/usr/bin/doveadm"
        subprocess.run([doveadm, "-c", str(self.root / "dovecot.conf"), "expunge", "-u", user, "mailbox", "*", "all"],
                       check=True, timeout=30, capture_output=True)

    def accepted(self) -> list[dict[str, Any]]:
        """What the SMTP server took, in order."""
        path = self.root / "accepted.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def stop_imap_after_next_message(self) -> None:
        """Once the SMTP server has taken the next message, Dovecot stops (the mailbox goes away mid-send)."""
        (self.root / "STOP_IMAP").write_text("1")

    def drop_next_answer(self) -> None:
        """The next message the SMTP server takes, it takes without answering (the connection drops)."""
        (self.root / "FAIL_DATA").write_text("1")


def _certificates(root: Path) -> None:
    """A test authority (``ca.pem``) and a certificate for :data:`TLS_NAME` it signed (``cert.pem``, ``key.pem``)."""
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Tollgate test mail authority")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(days=1))
          .not_valid_after(now + timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (root / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (root / "cert.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (root / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                     serialization.NoEncryption()))


def _config(root: Path, imap_port: int, imaps_port: int, capability: str | None) -> str:
    return (f"imap_capability = {capability}\n" if capability else "") + f"""base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = yes
ssl_cert = <{root}/cert.pem
ssl_key = <{root}/key.pem
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{root}/mail/%u
first_valid_uid = 1
passdb {{
  driver = passwd-file
  args = {root}/users
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={root}/mail/%u
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
    auto = subscribe
  }}
  mailbox Trash {{
    special_use = \\Trash
    auto = subscribe
  }}
  mailbox Drafts {{
    special_use = \\Drafts
    auto = subscribe
  }}
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps_port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
service stats {{
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""


@contextmanager
def mail_servers(users: dict[str, str], *, imap_capability: str | None = None) -> Iterator[MailServers]:
    """Dovecot and an SMTP server for ``users`` (name -> password), storing in a directory of their own.

    ``imap_capability`` replaces what Dovecot announces after login (a server without MOVE, say).

    Not under pytest's directory: its sockets need a short path, and Dovecot's mail user must be
    able to reach the maildirs (pytest's directories are the test user's alone).
    """
    if shutil.which("dovecot") is None and not Path("/usr/sbin/dovecot").exists():
        raise AssertionError("Dovecot is missing: `make system-packages` (part of `make test`) installs dovecot-imapd")
    root = Path(tempfile.mkdtemp(prefix="tg-mail-"))
    root.chmod(0o755)
    for sub in ("run", "state", "mail"):
        (root / sub).mkdir(exist_ok=True)
    shutil.chown(root / "mail", "nobody", "nogroup")
    (root / "users").write_text("".join(f"{name}:{{PLAIN}}{password}::::::\n" for name, password in users.items()))
    servers = MailServers(root=root, users=users, imap_port=free_port(), smtp_port=free_port(),
                          imaps_port=free_port(), smtps_port=free_port(), submission_port=free_port())
    _certificates(root)
    (root / "dovecot.conf").write_text(_config(root, servers.imap_port, servers.imaps_port, imap_capability))
    servers.start_imap()
    try:
        servers.start_smtp()
        yield servers
    finally:
        servers.stop_smtp()
        servers.stop_imap()
        shutil.rmtree(root, ignore_errors=True)
