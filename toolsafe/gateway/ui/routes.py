"""The status page's routes under ``/ui``: login and logout, the overview, a step's page
and the operator actions (forms with a CSRF token and a reason). Every page reads and
works without JavaScript; ``streams.py`` has the event streams its script listens to."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool

from toolsafe.adapters.errors import ToolsafeError
from toolsafe.celeryconfig import QUEUES
from toolsafe.gateway.auth import NAMESPACE_SEPARATOR, source_of
from toolsafe.gateway.state import Gateway
from toolsafe.gateway.throttle import Throttled
from toolsafe.gateway.ui import present
from toolsafe.gateway.ui.session import Session, Sessions
from toolsafe.recovery import reasons as R
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.states import RESOLUTION_TARGETS, WAITING, StepState
from toolsafe.recovery.store import StepNotFound
from toolsafe.recovery.store.overview import Count, OverviewPort, StepFilter
from toolsafe.tasks.liveness import queue_depths
from toolsafe.tasks.views import build_view, redacted_input, safe_envelope

router = APIRouter(prefix="/ui", include_in_schema=False)

PER_GROUP: Final = 10
PAGE: Final = 50
ACTIONS: Final = ("approve", "reject", "resolve", "redrive", "cancel")
STATIC: Final = {"ui.js": "text/javascript", "ui.css": "text/css"}

templates = Environment(
    loader=PackageLoader("toolsafe.gateway.ui", "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.filters["json"] = lambda value: json.dumps(value, indent=2, sort_keys=True, default=str)
templates.filters["at"] = lambda value: (
    value.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(value, datetime) else ""
)
templates.globals["present"] = present
templates.filters["q"] = lambda value: quote(str(value), safe="/")


class UiState:
    """The page's share of the gateway: sessions and the overview's queries."""

    def __init__(self, gateway: Gateway, sessions: Sessions, overview: OverviewPort) -> None:
        self.gateway = gateway
        self.sessions = sessions
        self.overview = overview


def ui_state(request: Request) -> UiState:
    found: UiState = request.app.state.ui
    return found


def _render(
    request: Request,
    name: str,
    session: Session | None,
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    ui = ui_state(request)
    csrf = ui.sessions.csrf_token(session) if session is not None else ""
    html = templates.get_template(name).render(
        session=session,
        csrf=csrf,
        development=ui.sessions.development,
        now=ui.gateway.client.runtime.now(),  # due times are the database's
        **context,
    )
    response = HTMLResponse(html, status_code=status)
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; frame-ancestors 'none'"
    )
    return response


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/ui/login?{urlencode({'next': target})}", status_code=303)


def _same_origin(request: Request) -> bool:
    """A form posted from another site is refused before its token is even read."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


async def _form(request: Request) -> dict[str, str]:
    body = (await request.body()).decode("utf-8", errors="replace")
    return {key: values[-1] for key, values in parse_qs(body, keep_blank_values=True).items()}


# ---------------------------------------------------------------------- login and out


@router.get("/login")
def login_page(request: Request, next: str = "/ui/") -> Response:
    return _render(request, "login.html", None, next=_safe_next(next), error=None)


@router.post("/login")
async def login(request: Request) -> Response:
    ui = ui_state(request)
    form = await _form(request)
    target = _safe_next(form.get("next", "/ui/"))
    if not _same_origin(request):
        return _render(request, "login.html", None, 403, next=target, error=CROSS_SITE)
    try:
        found = await ui.sessions.sign_in(form.get("key", ""), source_of(request.client))
    except Throttled as refused:  # the limits on bad keys, as on /v1 (docs/gateway.md)
        error = (
            "too many failed checks of this key from this address: "
            f"try again in {refused.retry_after} s"
        )
        page = _render(request, "login.html", None, 429, next=target, error=error)
        page.headers["Retry-After"] = str(refused.retry_after)
        return page
    if isinstance(found, str):
        return _render(request, "login.html", None, 401, next=target, error=found)
    response = RedirectResponse(target, status_code=303)
    ui.sessions.set_cookie(response, request, found)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    ui = ui_state(request)
    session = await run_in_threadpool(ui.sessions.of, request)
    form = await _form(request)
    if session is not None and not ui.sessions.csrf_ok(session, form.get("csrf")):
        return _render(request, "error.html", session, 403, message=STALE_FORM)
    response = RedirectResponse("/ui/login", status_code=303)
    ui.sessions.clear_cookie(response, request)
    return response


CROSS_SITE: Final = "the form was sent from another site; open the status page and try again"
STALE_FORM: Final = (
    "the form's token does not belong to this session (it expired, or the form came from "
    "elsewhere): reload the page and try again"
)


def _safe_next(target: str) -> str:
    """Only a path of this page: never another site (``//evil``), never elsewhere."""
    if target.startswith("/ui/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/"


# ---------------------------------------------------------------------- static


@router.get("/static/{name}")
def static(name: str) -> Response:
    if name not in STATIC:
        return Response("not found", status_code=404, media_type="text/plain")
    text = resources.files("toolsafe.gateway.ui").joinpath("static", name).read_text("utf-8")
    return Response(text, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


# ---------------------------------------------------------------------- the overview


def _filter(session: Session, tool: str, prefix: str, group: str) -> StepFilter:
    principal = session.principal
    scoped = principal.scoped(prefix) if principal.namespace is not None else prefix
    states = present.FILTERS.get(group)
    return StepFilter(
        tool=tool or None,
        prefix=scoped or None,
        states=frozenset(states) if states is not None else None,
    )


def _sum(counts: dict[StepState, Count], states: tuple[StepState, ...]) -> Count:
    return Count(
        sum(counts[state].value for state in states),
        any(counts[state].capped for state in states),
    )


@router.get("/", response_model=None)
def overview(
    request: Request,
    tool: str = "",
    group: str = "",
    prefix: str = "",
    before: str = "",
) -> Response:
    ui = ui_state(request)
    session = ui.sessions.of(request)
    if session is None:
        return _to_login(request)
    group = group if group in present.FILTERS else ""
    where = _filter(session, tool, prefix, group)
    counts = ui.overview.counts(StepFilter(tool=where.tool, prefix=where.prefix))
    sections: list[dict[str, Any]] = []
    cursor: int | None = None
    if group:
        steps, cursor = ui.overview.page(
            where, before=int(before) if before.isdigit() else None, limit=PAGE, sizes=counts
        )
        sections.append(
            {
                "key": group,
                "title": present.FILTER_TITLES[group],
                "count": _sum(counts, present.FILTERS[group]),
                "steps": steps,
                "more": False,
            }
        )
    else:
        for item in present.GROUPS:
            count = _sum(counts, item.states)
            steps, more = [], None
            if count.value:
                steps, more = ui.overview.page(
                    StepFilter(tool=where.tool, prefix=where.prefix, states=frozenset(item.states)),
                    limit=PER_GROUP,
                    sizes=counts,
                )
            sections.append(
                {
                    "key": item.key,
                    "title": item.title,
                    "hint": item.hint,
                    "count": count,
                    "steps": steps,
                    "more": more is not None,
                }
            )
    query = {"tool": tool, "group": group, "prefix": prefix}
    total = _sum(counts, tuple(StepState))
    elsewhere = _in_namespaces(ui, session, where) if prefix and not total.value else []
    return _render(
        request,
        "overview.html",
        session,
        elsewhere=elsewhere,
        workers=ui.gateway.live_workers(),
        queues=_queues(ui),
        tools=ui.gateway.client.runtime.registry.tools(),
        counts=counts,
        total=total,
        sections=sections,
        selected=query,
        filtered=group,
        next_page=(
            f"/ui/?{urlencode({**query, 'before': cursor})}" if cursor is not None else None
        ),
        first_page=f"/ui/?{urlencode(query)}" if before else None,
        link=lambda **changes: f"/ui/?{urlencode({**query, 'before': '', **changes})}",
    )


def _queues(ui: UiState) -> dict[str, int] | None:
    """The broker's queue depths, ``None`` if it cannot be asked (or there is no app)."""
    try:
        app = ui.gateway.client.app
    except TypeError:
        return None
    return queue_depths(app, QUEUES)


def _in_namespaces(ui: UiState, session: Session, where: StepFilter) -> list[tuple[str, int]]:
    """For a prefix no step has: the same prefix inside each key's namespace that does
    (an agent key's refs start with ``<namespace>/``), with how many steps it finds."""
    keys = ui.gateway.authenticator.keys
    if keys is None or session.principal.namespace is not None or where.prefix is None:
        return []
    found = []
    for namespace in sorted({key.namespace for key in keys.list() if key.namespace}):
        candidate = f"{namespace}{NAMESPACE_SEPARATOR}{where.prefix}"
        counts = ui.overview.counts(StepFilter(tool=where.tool, prefix=candidate))
        count = _sum(counts, tuple(StepState)).value
        if count:
            found.append((candidate, count))
    return found


# ---------------------------------------------------------------------- a step


def _step_context(ui: UiState, ref: str) -> dict[str, Any]:
    store = ui.gateway.client.runtime.store
    step = store.get(ref)
    events = store.events(ref)
    view = build_view(step, events)
    stops = present.timeline(events)
    failures = [
        present.lookup_result(event.detail)
        for event in events
        if event.kind == "looked_up" and present.lookup_result(event.detail).startswith("lookup")
    ]
    return {
        "failed_lookup": failures[-1].removeprefix("lookup unavailable: ") if failures else None,
        "step": step,
        "view": view,
        "group": present.group_title(step),
        "envelope": safe_envelope(step.last_envelope),
        "evidence": present.evidence_of(step),
        "stops": stops,
        "work": [stop for stop in stops if stop.event.kind in WORK_KINDS],
        "input": redacted_input(step.input),
        "actions": _actions_for(step.state),
        "last_event": events[-1].id if events else 0,
        "resolution_targets": sorted(state.value for state in RESOLUTION_TARGETS),
    }


WORK_KINDS: Final = frozenset({"claimed", "executed", "looked_up", "lease_expired"})


def _actions_for(state: StepState) -> tuple[str, ...]:
    if state is StepState.AWAITING_APPROVAL:
        return ("approve", "reject", "cancel")
    if state is StepState.ESCALATED:
        return ("resolve", "redrive")
    if state in WAITING:
        return ("cancel",)
    return ()


def step_ref(session: Session, ref: str) -> str | None:
    try:
        return session.principal.existing(ref)
    except StepNotFound:
        return None


@router.get("/steps/{operation_ref:path}", response_model=None)
def step_page(request: Request, operation_ref: str, done: str = "", refused: str = "") -> Response:
    ui = ui_state(request)
    session = ui.sessions.of(request)
    if session is None:
        return _to_login(request)
    ref = step_ref(session, operation_ref)
    try:
        if ref is None:
            raise StepNotFound(operation_ref)
        context = _step_context(ui, ref)
    except StepNotFound:
        return _render(
            request, "error.html", session, 404, message=f"no step {operation_ref!r} to show"
        )
    notice = f"{done}: recorded" if done in ACTIONS else None
    return _render(
        request, "step.html", session, notice=notice, refusal=_refusal(ui, session, refused),
        **context,
    )  # fmt: skip


def _refusal(ui: UiState, session: Session, sealed: str) -> dict[str, str] | None:
    """The refused action a redirect carries (signed for this session), else ``None``."""
    text = ui.sessions.unseal(session, sealed) if sealed else None
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return None
    if not isinstance(found, dict) or found.get("action") not in ACTIONS:
        return None
    return {key: str(found.get(key, "")) for key in ("action", "code", "message")}


def _carry_out(
    ui: UiState, action: str, ref: str, form: dict[str, str], by: str
) -> Callable[[], Any]:
    client = ui.gateway.client
    reason = form.get("reason", "").strip()
    if not reason:
        raise TransitionRefused(R.REASON_REQUIRED, f"{action} needs a reason (it is recorded)")
    if action == "approve":
        return lambda: client.approve(ref, by, reason)
    if action == "reject":
        return lambda: client.reject(ref, by, reason)
    if action == "cancel":
        return lambda: client.cancel(ref, reason, by=by)
    if action == "redrive":
        return lambda: client.redrive(ref, by, reason)
    to = form.get("to", "")
    if to not in {state.value for state in RESOLUTION_TARGETS}:
        raise TransitionRefused(
            R.INVALID_RESOLUTION, f"resolve to succeeded or failed, not {to or 'nothing'}"
        )
    evidence = form.get("evidence", "").strip() or None
    confirmed = form.get("confirm_not_written") == "yes"
    return lambda: client.resolve(
        ref, to, by, reason, evidence=evidence, confirm_not_written=confirmed
    )


@router.post("/act/{action}/{operation_ref:path}", response_model=None)
async def act(request: Request, action: str, operation_ref: str) -> Response:
    ui = ui_state(request)
    session = await run_in_threadpool(ui.sessions.of, request)
    if session is None:
        return _to_login(request)
    form = await _form(request)
    if not _same_origin(request):
        return _render(request, "error.html", session, 403, message=CROSS_SITE)
    if not ui.sessions.csrf_ok(session, form.get("csrf")):
        return _render(request, "error.html", session, 403, message=STALE_FORM)
    ref = step_ref(session, operation_ref)
    if action not in ACTIONS or ref is None:
        return _render(request, "error.html", session, 404, message="no such action or step")
    by = session.principal.by("status page")
    try:
        work = _carry_out(ui, action, ref, form, by)
        await run_in_threadpool(work)
    except StepNotFound:
        return _render(request, "error.html", session, 404, message=f"no step {ref!r}")
    except ToolsafeError as error:
        code = getattr(error, "code", type(error).__name__)
        message = getattr(error, "message", str(error))
        # Redirect after the post (303): the page the browser shows is a GET, so its
        # live refresh and a reload work, and a reload never posts the action again.
        note = json.dumps({"action": action, "code": str(code), "message": str(message)})
        query = urlencode({"refused": ui.sessions.seal(session, note)})
        return RedirectResponse(f"/ui/steps/{quote(ref, safe='/')}?{query}", status_code=303)
    return RedirectResponse(f"/ui/steps/{quote(ref, safe='/')}?done={action}", status_code=303)
