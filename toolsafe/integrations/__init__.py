"""The agent-SDK integrations, one module per stack, each an optional extra
(docs/agents.md): ``openai_agents`` (``toolsafe[openai-agents]``), ``pydantic_ai``
(``toolsafe[pydantic-ai]``), ``langgraph`` (``toolsafe[langgraph]``) and ``anthropic``
(``toolsafe[anthropic]``). Import the module of your stack; this package imports none of
them, so no SDK is loaded that you did not ask for. Each builds on its stack's SDK-free
pieces in :mod:`toolsafe.agents` (``toolsafe.agents.openai``, ``.pydantic_ai``,
``.langgraph``, ``.anthropic``), which need no SDK."""
