"""``toolsafe mcp`` over stdio with the SDK's own client, on SQLite (the embedded
store) with real workers, Redis and the example downstream (naive: every duplicate
write would show as a second effect)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    RequestParamsMeta,
)

from tests.support.gateway.harness import ROOT
from tests.support.mcp.raw import MODERN, TASKS
from tests.support.mcp.support import kill_mcp_servers, meta, stdio_session, structured, text
from tests.support.pipeline.harness import Cluster, cluster_for
from toolsafe.mcp.client import (
    ToolsafeTasks,
    answer_of,
    cancel_task,
    get_task,
    update_task,
)
from toolsafe.mcp.tasks import CreateTaskResult
from toolsafe.recovery.states import StepState

pytestmark = [pytest.mark.redis, pytest.mark.slow]

INVOICE: dict[str, Any] = {"customer_id": "cus_1", "amount_cents": 100, "currency": "EUR"}
REF = "toolsafe/operation_ref"


@dataclass
class Setup:
    cluster: Cluster
    directory: Path


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("mcp-stdio")
    # The verification budget outlasts the test: a lookup held down by the test ends when
    # the test lifts it, never by the clock of a starved machine.
    budget = {"TOOLSAFE_VERIFY_BUDGET": "600"}
    with cluster_for(
        pg_url, redis_url, directory, suffix="mcp", env=budget, sqlite=True
    ) as cluster:
        cluster.start_worker("mcp", concurrency=2)
        yield Setup(cluster, directory)


def _ref() -> str:
    return f"mcp-t/{uuid.uuid4().hex[:10]}"


async def _settled(
    session: ClientSession, tool: str, arguments: dict[str, Any], ref: str
) -> CallToolResult:
    """Call until the answer is no longer "in progress" (each call waits up to 1 s)."""
    for _ in range(30):
        answer = await session.call_tool(tool, arguments, meta=meta({REF: ref}))
        if "in_progress" not in structured(answer):
            return answer
    raise AssertionError(f"{ref} is still in progress: {text(answer)}")


def test_calls_replays_and_tasks_across_server_restarts(
    setup: Setup,
) -> None:
    """A rate-limited call is "in progress", never an error, until it succeeds. Then the
    host's replay: the model's tool call (same call id, same run) re-issued after the
    server was SIGKILLed mid-call, to a new server process: the same ref, no second
    effect, the stored envelope."""
    cluster = setup.cluster
    ref = _ref()
    cluster.fault(fault="rate_limit", operation_ref=ref, times=1, retry_after=2)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    replayed = {"toolsafe/call_id": "call_Ab12", "toolsafe/session": run_id}
    replayed_ref = f"mcp:{run_id}:call_Ab12"
    cluster.fault(fault="rate_limit", operation_ref=replayed_ref, times=1, retry_after=1)
    email_ref = _ref()

    async def first() -> None:
        async with stdio_session(cluster.env, setup.directory, "--wait", "1") as session:
            listed = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(listed) == {"create_invoice", "send_email"}
            invoice = listed["create_invoice"]
            assert invoice.annotations is not None and invoice.annotations.idempotent_hint
            assert invoice.annotations.read_only_hint is False
            assert invoice.output_schema is not None
            assert invoice.output_schema["type"] == "object"
            assert invoice.input_schema["required"] == ["customer_id", "amount_cents", "currency"]

            answer = await session.call_tool("create_invoice", INVOICE, meta=meta({REF: ref}))
            assert answer.is_error is False, text(answer)
            for _ in range(20):
                if "in_progress" not in structured(answer):
                    break
                assert answer.is_error is False, text(answer)
                body = structured(answer)
                if body["state"] == "waiting_retry":  # (a busy worker may not be there yet)
                    assert body["not_before"], body
                    assert body["last_envelope"]["code"] == "RATE_LIMITED"
                    assert f"operation_ref {ref}" in text(answer) and "not before" in text(answer)
                answer = await session.call_tool("create_invoice", INVOICE, meta=meta({REF: ref}))
            assert answer.is_error is False
            assert structured(answer)["ok"] is True and structured(answer)["operation_ref"] == ref
            assert any(
                entry.to_state == StepState.WAITING_RETRY
                for entry in cluster.client.runtime.store.events(ref)
            )

            # A step that needs input: the same call with the flagged field fixed is the
            # correction, under the same ref.
            wrong = {"recipient_email": "ana@exmaple.com", "subject": "Hi", "body": "x"}
            asked = await _settled(session, "send_email", wrong, email_ref)
            assert asked.is_error is True and structured(asked)["code"] == (
                "INVALID_RECIPIENT_ADDRESS"
            )
            assert (asked.meta or {})["toolsafe/state"] == "needs_input"
            fixed = await _settled(
                session, "send_email", {**wrong, "recipient_email": "ana@example.com"}, email_ref
            )
            assert fixed.is_error is False and structured(fixed)["operation_ref"] == email_ref

            cut = await session.call_tool("create_invoice", INVOICE, meta=meta(replayed))
            assert cut.is_error is False and structured(cut)["operation_ref"] == replayed_ref
            kill_mcp_servers()  # the answer never reaches the model

    anyio.run(first)
    assert cluster.effects(ref) == 1
    assert cluster.effects(email_ref) == 1

    done_ref, approval_ref, unknown_ref, absent_ref = _ref(), _ref(), _ref(), _ref()
    cluster.fault(fault="require_approval", operation_ref=approval_ref, times=1)
    # The write times out after it was stored, and the lookup is down (until the test
    # lifts it): verifying.
    cluster.fault(fault="stall_after_store", operation_ref=unknown_ref, times=1, seconds=3)
    # The connection drops before the write was stored: unknown too, but absent.
    cluster.fault(fault="drop_before_store", operation_ref=absent_ref, times=1)
    lookups_down = [
        cluster.fault(fault="lookup_down", operation_ref=unsure, times=None)
        for unsure in (unknown_ref, absent_ref)
    ]

    async def replay_and_tasks() -> None:
        # The new server speaks the 2026-07-28 protocol, where tasks live: the replay
        # names the same step, whose task is followed to its stored envelope.
        async with stdio_session(cluster.env, setup.directory, tasks=True) as session:
            assert session.protocol_version == "2026-07-28"
            again = await session.call_tool(
                "create_invoice", INVOICE, meta=meta(replayed), allow_claimed=True
            )
            assert isinstance(again, CreateTaskResult) and again.task_id == replayed_ref
            with anyio.fail_after(20):
                while (task := await get_task(session, replayed_ref)).status != "completed":
                    await anyio.sleep(0.1)
            result = answer_of(task)
            assert result is not None and result.is_error is False
            stored = cluster.client.view(replayed_ref)
            assert stored.state is StepState.SUCCEEDED
            assert structured(result) == stored.envelope_json()

            for task_ref in (done_ref, approval_ref, unknown_ref, absent_ref):
                created = await session.call_tool(
                    "create_invoice", INVOICE, meta=meta({REF: task_ref}), allow_claimed=True
                )
                assert isinstance(created, CreateTaskResult), created
                assert created.task_id == task_ref and created.status == "working"
            with anyio.fail_after(20):
                while (task := await get_task(session, approval_ref)).status != "input_required":
                    await anyio.sleep(0.1)
            asking = answer_of(task)
            assert asking is not None and asking.is_error is True
            assert structured(asking)["code"] == "MISSING_APPROVAL"
            # tasks/update is acknowledged and changes nothing: the approval is a
            # person's, never the host's; an unknown task is refused.
            await update_task(session, approval_ref)
            assert (await get_task(session, approval_ref)).status == "input_required"
            with pytest.raises(MCPError, match="no task"):
                await update_task(session, "mcp-t/never-made")
            await cancel_task(session, approval_ref)
            cancelled = answer_of(await get_task(session, approval_ref))
            assert cancelled is not None and cancelled.is_error is True
            assert cluster.client.view(approval_ref).state is StepState.CANCELLED

            # A cancel while the outcome is unknown is acknowledged (SEP-2663: cooperative)
            # and recorded; the task then reports what verification finds: the stored
            # write a success, never "cancelled"; the absent one cancelled, not retried.
            for unsure in (unknown_ref, absent_ref):

                def verifying(ref: str = unsure) -> bool:
                    return cluster.client.view(ref).state is StepState.VERIFYING

                cluster.wait_for(verifying, what="the unknown write is being verified")
                await cancel_task(session, unsure)
                task = await get_task(session, unsure)
                assert task.status == "working", task
                assert "Cancellation requested" in (task.status_message or ""), task
            for fault in lookups_down:  # the lookup is back
                cluster.clear_fault(fault)
            with anyio.fail_after(60):
                while (task := await get_task(session, unknown_ref)).status == "working":
                    await anyio.sleep(0.2)
            assert task.status == "completed", task
            found = answer_of(task)
            assert found is not None and found.is_error is False
            assert structured(found)["ok"] is True
            with anyio.fail_after(60):
                while (task := await get_task(session, absent_ref)).status == "working":
                    await anyio.sleep(0.2)
            assert task.status == "cancelled", task
            gone = answer_of(task)
            assert gone is not None and gone.is_error is True
            assert structured(gone)["commit_state"] == "not_committed"

    anyio.run(replay_and_tasks)
    assert cluster.effects(replayed_ref) == 1
    assert cluster.effects(unknown_ref) == 1
    assert cluster.client.view(unknown_ref).state is StepState.SUCCEEDED
    assert cluster.effects(absent_ref) == 0
    assert cluster.client.view(absent_ref).state is StepState.CANCELLED

    async def after_restart() -> None:
        # Tasks live in the step store: a new server process knows them all.
        async with stdio_session(cluster.env, setup.directory, tasks=True) as session:
            with anyio.fail_after(20):
                while (task := await get_task(session, done_ref)).status != "completed":
                    await anyio.sleep(0.1)
            result = answer_of(task)
            assert result is not None and result.is_error is False
            assert structured(result) == cluster.client.view(done_ref).envelope_json()
            again = answer_of(await get_task(session, replayed_ref))
            assert again is not None and structured(again) == stored_envelope()
            with pytest.raises(MCPError, match="no task"):
                await get_task(session, "mcp-t/never-made")

    def stored_envelope() -> object:
        return cluster.client.view(replayed_ref).envelope_json()

    anyio.run(after_restart)
    assert cluster.effects(done_ref) == 1
    assert cluster.effects(approval_ref) == 0


def test_the_sdks_client_on_the_handshake_and_on_2026_07_28(setup: Setup) -> None:
    """The SDK's ``Client`` as a host uses it: on the handshake (2025-11-25) a call
    waits, bounded; on 2026-07-28 pinned (no handshake, no discover: every request
    carries its protocol version) with the tasks extension declared, ``call_tool``
    follows the task to the step's result. (``mode="auto"``, through ``server/discover``,
    is tested over ``/mcp``, where the server is up before the SDK's 10 s discover
    timeout starts.) Without the extension a client gets no task, and tasks/get says
    which capability it lacks. A success's text names its evidence."""
    cluster = setup.cluster
    refs = {mode: _ref() for mode in ("legacy", "claims", MODERN, "plain")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "toolsafe", "mcp", "--wait", "10"],
        env={**os.environ, **cluster.env},
        cwd=str(ROOT),
    )

    def confirmed(answer: CallToolResult) -> None:
        assert answer.is_error is False, text(answer)
        body = structured(answer)
        assert body["ok"] is True
        assert f"evidence {body['verification']['evidence_ref']}" in text(answer)

    async def settled(client: Client, ref: str) -> CallToolResult:
        for _ in range(10):
            answer = await client.call_tool("create_invoice", INVOICE, meta=meta({REF: ref}))
            if "in_progress" not in structured(answer):
                return answer
        raise AssertionError(f"{ref} is still in progress")

    async def run() -> None:
        async with Client(params, mode="legacy") as client:
            assert client.session.protocol_version == "2025-11-25"
            confirmed(await settled(client, refs["legacy"]))
            # A handshake client naming the extension in _meta gets no task: its
            # protocol has no place for one.
            claims = cast(
                RequestParamsMeta,
                {REF: refs["claims"], CLIENT_CAPABILITIES_META_KEY: {"extensions": {TASKS: {}}}},
            )
            for _ in range(10):
                answer = await client.call_tool("create_invoice", INVOICE, meta=claims)
                assert isinstance(answer, CallToolResult) and answer.is_error is False
                if "in_progress" not in structured(answer):
                    break
            confirmed(answer)
        async with Client(params, mode=MODERN, extensions=[ToolsafeTasks()]) as client:
            assert client.session.protocol_version == MODERN
            confirmed(
                await client.call_tool("create_invoice", INVOICE, meta=meta({REF: refs[MODERN]}))
            )
        async with Client(params, mode=MODERN) as client:
            confirmed(await settled(client, refs["plain"]))
            with pytest.raises(MCPError) as refused:
                await get_task(client.session, refs[MODERN])
            assert refused.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY

    anyio.run(run)
    for ref in refs.values():
        assert cluster.effects(ref) == 1, ref
