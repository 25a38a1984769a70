"""What an operator sees of a running Tollgate: traces, metrics and logs.

* :mod:`graph.observe.scope`: the turn a piece of work belongs to (owner, thread, turn, approval).
* :mod:`graph.observe.tracing`: OpenTelemetry spans per turn, node, tool call and model call,
  exported over OTLP/HTTP when the standard ``OTEL_EXPORTER_OTLP_*`` variables say where.
* :mod:`graph.observe.metrics`: Prometheus metrics (``/metrics`` for the admin scope, or a port of their own).
* :mod:`graph.observe.logs`: log lines with time, level and the scope's ids; JSON when asked.

None of them ever records an argument value, a message's text or a credential: spans and log
lines carry names, ids, tiers, outcomes, counts and durations only.
"""
