"""The embedded broker: a kombu file-system transport that needs no server."""
