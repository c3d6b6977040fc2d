"""Celery wiring only: the app and its tasks, the publisher, the pipeline that claims a
step, calls its adapter and carries out the runtime's Decision, the sweeper, escalation
notices, the in-process client and the safe views.

Users import the public face, ``toolsafe``; Celery finds the app with
``celery -A toolsafe``.
"""
