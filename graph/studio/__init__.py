"""What ``langgraph dev`` and LangGraph Studio load (``langgraph.json``).

* :mod:`graph.studio.platform` — the compiled graph and the checkpointer the platform attaches.
* :mod:`web.studio_auth` — the HTTP API's authenticator, for Studio's requests.
"""

__all__: list[str] = []
