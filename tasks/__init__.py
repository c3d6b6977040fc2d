"""Celery wiring: the app, the tasks, the sweeper, the client API and the CLI."""
