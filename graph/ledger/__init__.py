"""What was decided and what ran, kept so that they never disagree.

* :mod:`graph.ledger.approvals` — the approvals table and its lifecycle (pending → approved →
  executing → executed | failed, or rejected, expired, superseded).
* :mod:`graph.ledger.effects` — the effects ledger: what each write did, keyed by its idempotency key.
* :mod:`graph.ledger.audit` — the append-only, hash-chained audit log.
* :mod:`graph.ledger.approval_contract` — the checker that the three agree, run by the tests.
"""

__all__: list[str] = []
