"""Every gateway error as RFC 9457 ``application/problem+json``, from one handler.

``code`` is the stable identifier: a refusal's own code (``IDENTICAL_INPUT``, the one
the CLI prints), or one of :data:`CODES` for what the gateway itself refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError as BrokerError
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from starlette.exceptions import HTTPException

from toolsafe.adapters.errors import INPUT_TOO_LARGE, ToolsafeError, UnknownToolError
from toolsafe.gateway.models import FieldProblem, Problem
from toolsafe.recovery.outcomes import TransitionRefused
from toolsafe.recovery.store import InvalidOperationRef, OperationRefConflict, StepNotFound
from toolsafe.tasks.client import InvalidInput, WaitTimeout

log = logging.getLogger("toolsafe.gateway")

MEDIA_TYPE: Final = "application/problem+json"
RETRY_AFTER_UNAVAILABLE: Final = 2

# The gateway's own codes, with what each means; refusals of the runtime, the store and
# the client keep theirs (TransitionRefused.code, UNKNOWN_TOOL, INVALID_INPUT, ...).
GATEWAY_CODES: Final[Mapping[str, str]] = {
    "UNAUTHENTICATED": "no key, or a key that is unknown, wrong or revoked",
    "FORBIDDEN": "the key's scope does not allow this action (agents do not approve)",
    "NOT_FOUND": "no such route",
    "STEP_NOT_FOUND": "no step under this operation_ref that the key may see",
    "METHOD_NOT_ALLOWED": "the route does not take this HTTP method",
    "NOT_ACCEPTABLE": "the client accepts no media type the gateway answers with",
    "OPERATION_REF_CONFLICT": "the Idempotency-Key names a step with another tool or input",
    "BODY_TOO_LARGE": "the request body is over TOOLSAFE_GATEWAY_MAX_BODY_BYTES",
    "UNSUPPORTED_MEDIA_TYPE": "the request body is not application/json",
    "INVALID_REQUEST": "the request is malformed (parameters, JSON, headers)",
    "INVALID_OPERATION_REF": "the Idempotency-Key is not a usable operation_ref",
    "TOO_MANY_WAITS": "too many requests hold a wait or a stream at once",
    "TOO_MANY_BAD_KEYS": "too many failed key checks for this key id from this address",
    "TOO_MANY_KEY_CHECKS": "too many key verifications are running or waiting at once",
    "HEADERS_TOO_LARGE": "the request headers are over TOOLSAFE_GATEWAY_MAX_HEADER_BYTES",
    "INTERNAL": "the gateway failed; nothing it acknowledged is lost",
    "STORE_UNAVAILABLE": "the step store cannot be reached; retry after Retry-After",
    "SCHEMA_MISSING": "the database has no toolsafe schema: run `toolsafe migrate` first",
    "BROKER_UNAVAILABLE": "the broker cannot be reached; retry after Retry-After",
    "HTTP_<status>": "an answer without a problem code, named by its HTTP status (clients)",
}
"""The gateway's vocabulary; ``HTTP_<status>`` is built by its clients."""

CODES: Final = {
    "UNAUTHENTICATED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "UNKNOWN_TOOL": 404,
    "STEP_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "NOT_ACCEPTABLE": 406,
    "OPERATION_REF_CONFLICT": 409,
    "BODY_TOO_LARGE": 413,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "INVALID_REQUEST": 422,
    "INVALID_INPUT": 422,
    "INVALID_OPERATION_REF": 422,
    "TOO_MANY_WAITS": 429,
    "TOO_MANY_BAD_KEYS": 429,
    "TOO_MANY_KEY_CHECKS": 429,
    "HEADERS_TOO_LARGE": 431,
    "INTERNAL": 500,
    "STORE_UNAVAILABLE": 503,
    "BROKER_UNAVAILABLE": 503,
}
"""The HTTP status of each code the gateway answers with itself."""
REFUSAL_STATUS: Final = 409


class ApiProblem(Exception):
    """Raised by routes and dependencies; rendered by :func:`problem_response`."""

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        status: int | None = None,
        operation_ref: str | None = None,
        errors: list[FieldProblem] | None = None,
        headers: Mapping[str, str] | None = None,
        tool: str | None = None,
    ) -> None:
        super().__init__(code, detail)
        self.code = code
        self.detail = detail
        self.status = status if status is not None else CODES[code]
        self.operation_ref = operation_ref
        self.errors = errors
        self.headers = dict(headers or {})
        self.tool = tool


KEY_LIMIT: Final = "too many failed key checks, or key checks at once; retry after Retry-After"
WAIT_OR_KEY_LIMIT: Final = "too many requests hold a wait, or " + KEY_LIMIT[len("too many ") :]


def documented(description: str) -> dict[str, Any]:
    """An error response for the OpenAPI document: a problem, as problem+json."""
    schema = {"$ref": "#/components/schemas/Problem"}
    return {
        "model": Problem,
        "description": description,
        "content": {MEDIA_TYPE: {"schema": schema}},
    }


def instance_of(path: str | None) -> str | None:
    """RFC 9457 ``instance`` for a request: its path as a relative URI reference (the
    decoded path percent-encoded again, so a ref with odd characters stays a URI)."""
    return None if path is None else quote(path, safe="/:@!$&'()*+,;=")


def problem_response(problem: ApiProblem, instance: str | None = None) -> JSONResponse:
    """The problem as ``application/problem+json``; ``instance`` is the request's path."""
    instance = instance_of(instance)
    body = Problem(
        type=f"urn:toolsafe:problem:{problem.code.lower().replace('_', '-')}",
        title=HTTPStatus(problem.status).phrase,
        status=problem.status,
        detail=problem.detail,
        code=problem.code,
        instance=instance,
        operation_ref=problem.operation_ref,
        errors=problem.errors,
        tool=problem.tool,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=problem.status,
        media_type=MEDIA_TYPE,
        headers=problem.headers,
    )


def from_error(error: Exception) -> ApiProblem:
    """The problem for an exception the client, the store or the framework raised."""
    if isinstance(error, ApiProblem):
        return error
    if isinstance(error, InvalidInput):
        errors = [FieldProblem(field=field, code=code) for field, code in error.errors]
        # The client's own code: INVALID_INPUT (the adapter's model) or one of the input
        # refusals before any adapter reads it; too large is 413 like a body too large.
        status = 413 if error.code == INPUT_TOO_LARGE else 422
        return ApiProblem(error.code, str(error), status=status, errors=errors, tool=error.tool)
    if isinstance(error, UnknownToolError):
        return ApiProblem("UNKNOWN_TOOL", str(error), tool=error.tool)
    if isinstance(error, StepNotFound):
        return ApiProblem("STEP_NOT_FOUND", str(error), operation_ref=error.operation_ref)
    if isinstance(error, OperationRefConflict):
        return ApiProblem("OPERATION_REF_CONFLICT", str(error), operation_ref=error.operation_ref)
    if isinstance(error, InvalidOperationRef):
        return ApiProblem("INVALID_OPERATION_REF", str(error))
    if isinstance(error, TransitionRefused):
        return ApiProblem(error.code, error.message, status=REFUSAL_STATUS)
    if isinstance(error, WaitTimeout):  # pragma: no cover - the routes answer with the view
        return ApiProblem("INTERNAL", str(error))
    if isinstance(error, DataError):
        # A value the database cannot hold (a NUL character in a string, say).
        return ApiProblem(
            "INVALID_REQUEST",
            "the store refused a value of the request (a NUL character, for instance)",
            status=422,
        )
    if isinstance(error, DBAPIError) and (
        error.connection_invalidated or isinstance(error, OperationalError)
    ):
        # The driver's text names host and port, never a password; keep it out anyway.
        return ApiProblem(
            "STORE_UNAVAILABLE",
            "the step store cannot be reached; nothing was acknowledged, retry with the "
            "same Idempotency-Key",
            headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE)},
        )
    if isinstance(error, BrokerError):
        return ApiProblem(
            "BROKER_UNAVAILABLE",
            "the broker cannot be reached; retry later",
            headers={"Retry-After": str(RETRY_AFTER_UNAVAILABLE)},
        )
    if isinstance(error, ToolsafeError):
        return ApiProblem("INVALID_REQUEST", str(error), status=422)
    return ApiProblem("INTERNAL", "an internal error; it was logged")


def _validation(error: RequestValidationError) -> ApiProblem:
    errors = []
    for item in error.errors():
        location = [str(part) for part in item.get("loc", ())]
        code = str(item.get("type", "invalid")).upper().replace(".", "_").replace("-", "_")
        errors.append(FieldProblem(field=".".join(location) or "request", code=code))
    shown = ", ".join(f"{item.field} ({item.code})" for item in errors)
    return ApiProblem("INVALID_REQUEST", f"the request is invalid: {shown}", errors=errors)


_HTTP_CODES: Final = {
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    406: "NOT_ACCEPTABLE",
    413: "BODY_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
}


def install(app: FastAPI) -> None:
    """The one exception handler, for every kind of error the app can meet."""

    async def handle(request: Request, error: Exception) -> JSONResponse:
        if isinstance(error, RequestValidationError):
            problem = _validation(error)
        elif isinstance(error, HTTPException):
            code = _HTTP_CODES.get(error.status_code, "INVALID_REQUEST")
            problem = ApiProblem(
                code,
                str(error.detail),
                status=error.status_code,
                headers=dict(error.headers or {}),
            )
        else:
            problem = from_error(error)
        if problem.status >= 500:
            log.warning(
                "%s %s: %s (%s)",
                request.method,
                request.url.path,
                problem.code,
                type(error).__name__,
                exc_info=problem.code == "INTERNAL",
                extra={"event": "gateway_error", "code": problem.code},
            )
        return problem_response(problem, request.url.path)

    # The named kinds are answered inside the app; ``Exception`` is the last resort.
    handlers: dict[Any, Any] = {
        Exception: handle,
        ToolsafeError: handle,
        DBAPIError: handle,
        BrokerError: handle,
        HTTPException: handle,
        RequestValidationError: handle,
        ApiProblem: handle,
    }
    for kind, handler in handlers.items():
        app.add_exception_handler(kind, handler)
