"""The step status page (``/ui/``): the article's groups, each step's story, and the
operator's actions, server-rendered for operators signed in with an operator key
(docs/status-page.md)."""

from toolsafe.gateway.ui.routes import install

__all__ = ["install"]
