"""The Celery configuration that follows from toolsafe's durability rules (DESIGN §4, §8).

``build_config(settings)`` returns a plain dict for ``app.conf.update``; it reads no
environment itself, so two apps with different settings can live in one process.
"""

from __future__ import annotations

from typing import Any, Final

from kombu.entity import Queue

from toolsafe.settings import Settings, filesystem_folder

EXECUTE_QUEUE: Final = "toolsafe.execute"
VERIFY_QUEUE: Final = "toolsafe.verify"
ESCALATION_QUEUE: Final = "toolsafe.escalations"
SWEEP_QUEUE: Final = "toolsafe.sweep"
QUEUES: Final = (EXECUTE_QUEUE, VERIFY_QUEUE, ESCALATION_QUEUE, SWEEP_QUEUE)
# The recovery lane: a lookup of an unknown outcome, and the hint of a step waiting to
# retry (a retry at its not_before, a re-execution a lookup proved safe), go to the verify
# queue, so that they do not wait behind the execute queue's backlog of new submissions.
# Every worker that consumes the verify queue runs both tasks (one app): no new queue to
# forget.
RECOVERY_QUEUE: Final = VERIFY_QUEUE

EXECUTE_TASK: Final = "toolsafe.execute"
VERIFY_TASK: Final = "toolsafe.verify"
ESCALATE_TASK: Final = "toolsafe.escalate"
SWEEP_TASK: Final = "toolsafe.sweep"

ROUTES: Final = {
    EXECUTE_TASK: {"queue": EXECUTE_QUEUE},
    VERIFY_TASK: {"queue": VERIFY_QUEUE},
    ESCALATE_TASK: {"queue": ESCALATION_QUEUE},
    SWEEP_TASK: {"queue": SWEEP_QUEUE},
}


def task_limits(settings: Settings) -> dict[str, tuple[float, float]]:
    """(soft, hard) time limit of every task, in seconds (``Settings.time_limits``; the
    visibility timeout rule of the settings is checked against the same numbers)."""
    limits = settings.time_limits()
    return {
        EXECUTE_TASK: limits["call"],
        VERIFY_TASK: limits["call"],
        ESCALATE_TASK: limits["notify"],
        SWEEP_TASK: limits["sweep"],
    }


def filesystem_transport_options(broker_url: str) -> dict[str, Any]:
    """Folders for Celery's file-system transport, the broker of the embedded demo:
    ``filesystem:///tmp/demo/broker`` keeps queues under that folder, and every process
    given the same URL shares them (no server needed). Other URLs need nothing."""
    folder = filesystem_folder(broker_url)
    if folder is None:
        return {}
    queue = f"{folder}/queue"
    return {
        "data_folder_in": queue,
        "data_folder_out": queue,
        "control_folder": f"{folder}/control",
        "processed_folder": f"{folder}/processed",
        # The transport polls its folder; kombu's default of 1 s would add a second to
        # every hop of a step.
        "polling_interval": 0.1,
    }


def broker_transport(broker_url: str) -> str | None:
    """toolsafe's own transport for a broker URL, where kombu's needs a guard: the file-
    system one can hand out half-written messages; the Redis one kills a worker that
    holds ETA messages when the server is restarted (``toolsafe.broker.redis``)."""
    scheme = broker_url.partition("://")[0]
    if scheme == "filesystem":
        return "toolsafe.broker.filesystem:Transport"
    if scheme in ("redis", "rediss"):
        return "toolsafe.broker.redis:Transport"
    return None


def build_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings for one app (``Settings`` refused unsafe combinations already,
    the visibility timeout rule among them)."""
    transport: dict[str, Any] = {"visibility_timeout": settings.broker.visibility_timeout}
    transport.update(filesystem_transport_options(settings.broker.url))
    return {
        "broker_transport": broker_transport(settings.broker.url),
        "broker_url": settings.broker.url,
        "result_backend": settings.broker.result_backend,
        "broker_transport_options": dict(transport),
        "result_backend_transport_options": dict(transport),
        "broker_connection_retry_on_startup": True,
        # A task's message is acknowledged after it ran, and given back when the worker
        # process dies: a lost worker means a redelivery, never a lost hint (R1 copes).
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        # On a broker connection loss a running task can no longer be acknowledged and
        # its message comes back; Celery 6's default cancels it. The step it held stays
        # in_flight and is verified when its lease expires (R4), so this is safe.
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "worker_eta_task_limit": settings.broker.worker_eta_task_limit,
        # Flower needs both.
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "task_time_limit": settings.calls.time_limit,
        "task_soft_time_limit": settings.calls.soft_time_limit,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "timezone": "UTC",
        "enable_utc": True,
        "task_queues": tuple(Queue(name, routing_key=name) for name in QUEUES),  # type: ignore[no-untyped-call]
        "task_default_queue": EXECUTE_QUEUE,
        "task_routes": dict(ROUTES),
        "task_create_missing_queues": False,
        "worker_hijack_root_logger": True,
        # One log line per broker outage instead of a traceback per sweep (tasks/beat.py).
        "beat_scheduler": "toolsafe.tasks.beat:Scheduler",
        "beat_schedule": {
            "toolsafe-sweep": {
                "task": SWEEP_TASK,
                "schedule": settings.sweep.interval,
                # A sweep that waited this long is superseded by later ones (and a stale
                # sweep would be harmless anyway: it only re-reads the database).
                "options": {
                    "queue": SWEEP_QUEUE,
                    "expires": max(settings.sweep.interval * 2, 60.0),
                },
            }
        },
    }
