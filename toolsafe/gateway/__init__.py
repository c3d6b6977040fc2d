"""The agent gateway: toolsafe over HTTP (``toolsafe serve``, docs/gateway.md).

``app`` builds the FastAPI application, ``client`` holds the HTTP clients (they need
only httpx), ``cli`` the ``serve`` and ``keys`` commands. Importing this package loads
neither FastAPI nor the database layer.
"""
