"""The ``loop_reads`` feature's port: a step and its events read on an event loop,
without a thread (the gateway's view). A backend that has it opens one per event loop
(``Backend.loop_reads()``); the reads return what ``StorePort.get`` and
``StorePort.events`` return, and ``aclose`` releases their connections."""

from __future__ import annotations

from typing import Protocol

from toolsafe.recovery.records import EventRecord, StepRecord

__all__ = ["LoopReadsPort"]


class LoopReadsPort(Protocol):
    async def get(self, operation_ref: str) -> StepRecord:
        """The step (``StorePort.get``); ``StepNotFound`` when there is none."""
        ...

    async def events(self, operation_ref: str) -> list[EventRecord]:
        """The step's events, oldest first (``StorePort.events``)."""
        ...

    async def aclose(self) -> None:
        """Release the connections; the reads are not used again after."""
        ...
