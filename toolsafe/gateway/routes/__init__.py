"""The gateway's routers, one per resource: tools, calls, call actions, call events."""
