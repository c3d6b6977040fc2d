"""kombu transports with toolsafe's guards: the embedded file-system broker that needs no
server, and Redis that survives a hard restart of its server."""
