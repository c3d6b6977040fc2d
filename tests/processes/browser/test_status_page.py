"""The status page in Chromium against a real ``toolsafe serve``, real workers, real
PostgreSQL and Redis, and the example downstream (naive: a duplicate write would show).

One cluster for the module: steps are put in every state group once, then each test
reads or acts on its own ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.support.gateway.harness import GatewayServer, bearer, gateway_for, make_key
from tests.support.pipeline.harness import WORKER_STARTUP, Cluster, cluster_for, new_ref
from toolsafe.gateway.client import GatewayClient
from toolsafe.recovery.db import make_engine
from toolsafe.recovery.states import StepState
from toolsafe.recovery.store.sql.keys import KeyStore
from toolsafe.tasks.runtime import utcnow

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

S = StepState
INVOICE: dict[str, object] = {"customer_id": "cus_7", "amount_cents": 4200, "currency": "EUR"}
EMAIL: dict[str, object] = {
    "recipient_email": "ana@exmaple.com",
    "subject": "Hi",
    "body": "Thanks.",
}
# Verification with the lookup down stays in `verifying` for the whole module.
ENV = {
    "TOOLSAFE_VERIFY_BUDGET": "600",
    "TOOLSAFE_MAX_LOOKUPS_UNAVAILABLE": "1000",
    "TOOLSAFE_VERIFY_BASE_DELAY": "5",
    "TOOLSAFE_VERIFY_MAX_DELAY": "20",
}
WAIT_MS = 20_000


@dataclass
class Setup:
    cluster: Cluster
    server: GatewayServer
    operator: str
    agent: str
    run: str
    refs: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.server.url

    def page_of(self, name: str) -> str:
        return f"{self.url}/ui/steps/{quote(self.refs[name], safe='/')}"


# name: (tool, input, faults, state it settles in)
PLAN: dict[str, tuple[str, dict[str, object], list[dict[str, object]], StepState]] = {
    "input": ("send_email", EMAIL, [], S.NEEDS_INPUT),
    "retry": ("create_invoice", INVOICE, [{"fault": "rate_limit", "retry_after": 600}],
              S.WAITING_RETRY),
    "verifying": ("create_invoice", INVOICE,
                  [{"fault": "error_after_store", "status": 502},
                   {"fault": "lookup_down", "times": None}], S.VERIFYING),
    "approve": ("create_invoice", INVOICE, [{"fault": "require_approval", "times": None}],
                S.AWAITING_APPROVAL),
    "refused": ("create_invoice", INVOICE, [{"fault": "require_approval", "times": None}],
                S.AWAITING_APPROVAL),
    "reject": ("create_invoice", INVOICE, [{"fault": "require_approval", "times": None}],
               S.AWAITING_APPROVAL),
    "succeeded": ("create_invoice", INVOICE, [], S.SUCCEEDED),
    "escalated": ("create_invoice", INVOICE, [{"fault": "version_conflict"}], S.ESCALATED),
    "resolve": ("create_invoice", INVOICE, [{"fault": "version_conflict"}], S.ESCALATED),
    "failed": ("create_invoice", INVOICE, [{"fault": "require_approval", "times": None}],
               S.AWAITING_APPROVAL),
    "cancelled": ("create_invoice", INVOICE, [{"fault": "rate_limit", "retry_after": 600}],
                  S.WAITING_RETRY),
}  # fmt: skip
GROUP_OF = {
    S.NEEDS_INPUT: "input",
    S.WAITING_RETRY: "retry",
    S.VERIFYING: "verifying",
    S.AWAITING_APPROVAL: "approval",
    S.SUCCEEDED: "terminal",
    S.FAILED: "terminal",
    S.ESCALATED: "terminal",
    S.CANCELLED: "terminal",
}


@pytest.fixture(scope="module")
def setup(pg_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    directory = tmp_path_factory.mktemp("ui")
    with cluster_for(pg_url, redis_url, directory, suffix="ui", env=ENV) as cluster:
        database = cluster.env["TOOLSAFE_DATABASE_URL"]
        operator = make_key(database, "ops", "operator")
        agent = make_key(database, "agent", "agent")
        # The worker and the gateway start side by side (each takes seconds).
        worker = cluster.start_worker("ui", concurrency=2, wait=False)
        with gateway_for(cluster.env, directory) as server:
            worker.wait_ready(WORKER_STARTUP)
            # Agent keys are namespaced by their name: refs start with `agent/`.
            setup = Setup(cluster, server, operator, agent, f"agent/{new_ref('ui')}")
            with GatewayClient(server.url, agent, timeout=30) as client:
                for name, (tool, given, faults, _) in PLAN.items():
                    ref = f"{setup.run}/{name}"
                    setup.refs[name] = ref
                    for fault in faults:
                        cluster.fault(operation_ref=ref, **fault)
                    made = client.submit(tool, given, ref)
                    assert made.operation_ref == ref, made
            store = cluster.client.runtime.store

            def settled() -> bool:
                return all(
                    store.get(setup.refs[name]).state is plan[3] for name, plan in PLAN.items()
                )

            cluster.wait_for(settled, timeout=30, what="every step in its state")
            ops = cluster.client
            ops.reject(setup.refs["failed"], "ops", "amount is wrong")
            ops.cancel(setup.refs["cancelled"], "not needed any more", by="ops")
            yield setup


def _login(
    browser: Browser, setup: Setup, *, javascript: bool = True
) -> tuple[BrowserContext, Page]:
    context = browser.new_context(java_script_enabled=javascript)
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(f"{setup.url}/ui/")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.fill("#key", setup.operator)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Steps")
    return context, page


def _expected(name: str) -> StepState:
    return {"failed": S.FAILED, "cancelled": S.CANCELLED}.get(name, PLAN[name][3])


def test_each_state_group_shows_its_steps(
    setup: Setup, browser: Browser, screenshots: Path
) -> None:
    context, page = _login(browser, setup)
    with context:
        page.goto(f"{setup.url}/ui/?prefix={quote(setup.run + '/', safe='')}")
        for name in PLAN:
            state = _expected(name)
            row = page.locator(f"#group-{GROUP_OF[state]} tr[data-ref='{setup.refs[name]}']")
            expect(row).to_have_count(1)
            expect(row).to_have_attribute("data-state", state.value)
        counts = {
            key: page.locator(f"#group-{key} h2 .count").inner_text() for key in GROUP_OF.values()
        }
        assert counts == {
            "input": "1",
            "retry": "1",
            "verifying": "1",
            "approval": "3",
            "terminal": "5",
        }
        # Success only with evidence; the retry shows not_before and a running countdown.
        done = page.locator(f"tr[data-ref='{setup.refs['succeeded']}']")
        expect(done).to_contain_text("verified:")
        retry = page.locator(f"tr[data-ref='{setup.refs['retry']}'] .countdown")
        expect(retry).to_have_text(re.compile(r"^in \d+m \d\ds$"))
        due = setup.cluster.client.runtime.store.get(setup.refs["retry"]).due_at
        assert due is not None
        expect(retry).to_have_attribute("data-due", due.isoformat())
        page.screenshot(path=str(screenshots / "overview.png"), full_page=True)

        # Live: a step submitted now shows up without a reload (the overview's stream).
        expect(page.locator("#live-status")).to_have_text(re.compile(r"^(live|updated)"))
        fresh = f"{setup.run}/live"
        with GatewayClient(setup.url, setup.agent, timeout=30) as client:
            client.submit("create_invoice", INVOICE, fresh)
        expect(page.locator(f"#group-terminal tr[data-ref='{fresh}']")).to_have_count(1)
        expect(page.locator("#group-terminal h2 .count")).to_have_text("6")

        page.select_option("select[name=group]", "approval")
        page.click(".filters button[type=submit]")
        rows = page.locator("table.steps tbody tr")
        expect(rows).to_have_count(3)
        assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.state)")) == {
            "awaiting_approval"
        }
        page.goto(f"{setup.url}/ui/?tool=send_email&group=input")
        expect(page.locator("table.steps tbody tr")).to_have_count(1)
        expect(page.locator("table.steps tbody tr")).to_have_attribute(
            "data-ref", setup.refs["input"]
        )


def test_a_step_page_tells_its_story(setup: Setup, browser: Browser, screenshots: Path) -> None:
    context, page = _login(browser, setup)
    with context:
        page.goto(setup.page_of("succeeded"))
        expect(page.locator("#outcome")).to_contain_text("Succeeded, confirmed by the downstream")
        kinds = page.locator("ol.timeline li").evaluate_all(
            "items => items.map(i => i.dataset.kind)"
        )
        assert kinds[0] == "submitted" and "claimed" in kinds and "executed" in kinds, kinds
        expect(page.locator("ol.timeline li[data-kind=submitted]")).to_contain_text("by key:agent")
        expect(page.locator("#work tbody tr")).not_to_have_count(0)
        executed = page.locator("ol.timeline li[data-kind=executed] details")
        executed.locator("summary").click()
        expect(executed.locator("pre")).to_contain_text('"commit_state": "committed"')

        page.goto(setup.page_of("input"))
        expect(page.locator("#state")).to_have_text("needs_input")
        expect(page.locator("#input pre")).to_contain_text("[REDACTED:email]")
        expect(page.locator("#input pre")).not_to_contain_text("ana@exmaple.com")

        page.goto(setup.page_of("retry"))
        expect(page.locator("#live .countdown")).to_have_text(re.compile(r"^in \d+m \d\ds$"))
        page.screenshot(path=str(screenshots / "step-waiting-to-retry.png"), full_page=True)


def test_an_approval_on_the_page_reaches_the_downstream_once(
    setup: Setup, browser: Browser, screenshots: Path
) -> None:
    ref = setup.refs["approve"]
    assert setup.cluster.effects(ref) == 0
    context, page = _login(browser, setup)
    with context:
        page.goto(setup.page_of("approve"))
        expect(page.locator("#state")).to_have_text("awaiting_approval")
        form = page.locator("form[data-action=approve]")
        form.locator("input[name=reason]").fill("amount checked against the order")
        form.locator("button").click()
        expect(page.locator(".notice")).to_have_text("approve: recorded")
        # The worker runs it; the page hears of it on its event stream, no reload.
        expect(page.locator("#state")).to_have_text("succeeded", timeout=WAIT_MS)
        expect(page.locator("#outcome")).to_contain_text("confirmed by the downstream")
        page.screenshot(path=str(screenshots / "step-approved.png"), full_page=True)
    assert setup.cluster.effects(ref) == 1
    approvals = [
        event
        for event in setup.cluster.client.runtime.store.events(ref)
        if event.kind == "approved"
    ]
    assert [event.detail["approver"] for event in approvals] == ["status page (key:ops)"]
    assert approvals[0].detail["reason"] == "amount checked against the order"


def test_a_refused_action_shows_its_reason(
    setup: Setup, browser: Browser, screenshots: Path
) -> None:
    context, page = _login(browser, setup)
    with context:
        page.goto(setup.page_of("refused"))
        form = page.locator("form[data-action=approve]")
        form.locator("input[name=reason]").fill("looks fine")
        # Another operator approves first (over the API); this page's form is now stale.
        with httpx.Client(base_url=setup.url, headers=bearer(setup.operator)) as http:
            answer = http.post(
                f"/v1/calls/{setup.refs['refused']}/approve",
                json={"approver": "other", "reason": "me first"},
            )
            assert answer.status_code == 200, answer.text
        form.locator("button").click()
        alert = page.locator("#refusal")
        expect(alert).to_contain_text("approve refused: NOT_AWAITING_APPROVAL")
        expect(alert).to_contain_text("cannot be approved")
        page.screenshot(path=str(screenshots / "refused.png"), full_page=True)
        # Redirected after the post: the page is a GET of the step, so a reload neither
        # posts again nor fails, and the live refresh keeps working.
        expect(page).to_have_url(re.compile(r"/ui/steps/.+\?refused="))
        page.reload()
        expect(page.locator("#refusal")).to_contain_text("approve refused: NOT_AWAITING_APPROVAL")
        expect(page.locator("#live-status")).to_have_text(re.compile(r"^(live|updated)"))
        # The refusal's text cannot be forged: a changed query shows none.
        page.goto(page.url[:-3] + "xyz")
        expect(page.locator("#state")).to_be_visible()
        expect(page.locator("#refusal")).to_have_count(0)

        # A form without this session's token is refused, and says why.
        forged = context.request.post(
            f"{setup.url}/ui/act/cancel/{setup.refs['verifying']}",
            form={"csrf": "forged", "reason": "x"},
        )
        assert forged.status == 403 and "token" in forged.text()
        token = page.locator("form[action='/ui/logout'] input[name=csrf]").get_attribute("value")
        elsewhere = context.request.post(
            f"{setup.url}/ui/act/cancel/{setup.refs['verifying']}",
            form={"csrf": token or "", "reason": "x"},
            headers={"Origin": "http://elsewhere.example"},
        )
        assert elsewhere.status == 403 and "another site" in elsewhere.text()
    assert setup.cluster.client.runtime.store.get(setup.refs["verifying"]).state is S.VERIFYING

    anonymous = browser.new_context()
    with anonymous:
        login = anonymous.new_page()
        login.goto(f"{setup.url}/ui/login")
        login.fill("#key", "tsk_not_a_key")
        login.click("button[type=submit]")
        expect(login.locator("[role=alert]")).to_have_text("the key is unknown or was revoked")


def test_the_lookups_that_failed_show_with_their_code(setup: Setup, browser: Browser) -> None:
    context, page = _login(browser, setup)
    with context:
        page.goto(f"{setup.url}/ui/?prefix={quote(setup.run + '/', safe='')}")
        row = page.locator(f"tr[data-ref='{setup.refs['verifying']}']")
        expect(row).to_contain_text(re.compile(r"\d+ with the lookup unavailable"))
        page.goto(setup.page_of("verifying"))
        expect(page.locator("#lookup-code")).to_have_text("LOOKUP_HTTP_503")
        expect(page.locator("#work .lookup").first).to_have_text(
            "lookup unavailable: LOOKUP_HTTP_503"
        )


def test_without_javascript_an_operator_rejects_and_resolves(
    setup: Setup, browser: Browser, screenshots: Path
) -> None:
    context, page = _login(browser, setup, javascript=False)
    with context:
        page.goto(setup.page_of("reject"))
        form = page.locator("form[data-action=reject]")
        form.locator("input[name=reason]").fill("customer withdrew")
        form.locator("button").click()
        expect(page.locator("#state")).to_have_text("failed")

        page.goto(setup.page_of("resolve"))
        form = page.locator("form[data-action=resolve]")
        form.locator("select[name=to]").select_option("succeeded")
        form.locator("input[name=reason]").fill("found it in the ledger")
        form.locator("button").click()
        # Succeeded only with evidence: the runtime's refusal, on the page.
        expect(page.locator("#refusal")).to_contain_text("resolve refused: EVIDENCE_REQUIRED")
        expect(page.locator("#state")).to_have_text("escalated")
        form = page.locator("form[data-action=resolve]")
        form.locator("select[name=to]").select_option("succeeded")
        form.locator("input[name=evidence]").fill("INV-2041")
        form.locator("input[name=reason]").fill("found it in the ledger")
        form.locator("button").click()
        expect(page.locator("#state")).to_have_text("succeeded")
        expect(page.locator("#group")).to_have_text("terminal: resolved by an operator")
        outcome = page.locator("#outcome")
        expect(outcome).to_contain_text("Resolved by an operator, not verified by the downstream")
        expect(outcome).to_contain_text("Evidence given: INV-2041")
        expect(outcome).not_to_contain_text("confirmed by the downstream")
        page.screenshot(path=str(screenshots / "resolved-by-operator.png"), full_page=True)

        page.goto(f"{setup.url}/ui/?group=succeeded&prefix={quote(setup.run + '/', safe='')}")
        row = page.locator(f"tr[data-ref='{setup.refs['resolve']}']")
        expect(row).to_contain_text("resolved by an operator")
        expect(row).not_to_contain_text("verified:")


def test_revoking_the_key_ends_its_sessions(setup: Setup) -> None:
    database = setup.cluster.env["TOOLSAFE_DATABASE_URL"]
    token = make_key(database, "leaving", "operator")
    with httpx.Client(base_url=setup.url, timeout=30) as http:
        signed_in = http.post("/ui/login", data={"key": token, "next": "/ui/"})
        assert signed_in.status_code == 303 and "HttpOnly" in signed_in.headers["set-cookie"]
        assert "SameSite=strict" in signed_in.headers["set-cookie"]
        assert http.get("/ui/").status_code == 200
        engine = make_engine(database)
        try:
            KeyStore(engine).revoke("leaving", now=utcnow())
        finally:
            engine.dispose()
        after = http.get("/ui/")
        assert after.status_code == 303 and after.headers["location"].startswith("/ui/login")
