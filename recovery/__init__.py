"""The deterministic recovery runtime and its durable step store (no Celery here)."""
