/**
 * The gateway's RFC 9457 problems as exceptions, the same split as the Python HTTP
 * clients (`toolsafe.gateway.client.raise_problem`): the refusals an agent can act on
 * get their own class, everything else is a `GatewayError` with `status` and `code`.
 */

import type { FieldProblem, Problem } from "./types.js";

/** `InvalidInput.code`: the input fails the tool's model, is too large, not an object,
 * not JSON, or nests too deep (`toolsafe.adapters.errors.INPUT_CODES`). */
export const INPUT_CODES = [
  "INVALID_INPUT",
  "INPUT_TOO_LARGE",
  "INPUT_NOT_AN_OBJECT",
  "INPUT_NOT_JSON",
  "INPUT_TOO_DEEP",
] as const;

/** Every problem the gateway answered with: its HTTP status, stable `code`, `detail`,
 * the problem document itself and, for 429 and 503, the `Retry-After` seconds. */
export class ToolsafeError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly problem: Partial<Problem> & Record<string, unknown>;
  readonly operationRef: string | undefined;
  readonly retryAfter: number | undefined;

  constructor(
    status: number,
    problem: Partial<Problem> & Record<string, unknown>,
    retryAfter?: number,
  ) {
    const code = typeof problem.code === "string" ? problem.code : `HTTP_${status}`;
    const detail = typeof problem.detail === "string" ? problem.detail : `HTTP ${status}`;
    super(`${code}: ${detail}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.problem = problem;
    this.operationRef = typeof problem.operation_ref === "string" ? problem.operation_ref : undefined;
    this.retryAfter = retryAfter;
  }
}

/** 422: the tool's input was refused before anything was stored; `errors` names every
 * field and its code. */
export class InvalidInput extends ToolsafeError {
  get tool(): string {
    return typeof this.problem.tool === "string" ? this.problem.tool : "";
  }
  get errors(): FieldProblem[] {
    return Array.isArray(this.problem.errors) ? (this.problem.errors as FieldProblem[]) : [];
  }
  get fields(): string[] {
    return this.errors.map((item) => item.field);
  }
}

/** 404 `UNKNOWN_TOOL`. */
export class UnknownTool extends ToolsafeError {}
/** 404 `STEP_NOT_FOUND` (also another namespace's step). */
export class StepNotFound extends ToolsafeError {}
/** 409 `OPERATION_REF_CONFLICT`: the ref names a step with another tool or input. */
export class OperationRefConflict extends ToolsafeError {}
/** 422 `INVALID_OPERATION_REF`. */
export class InvalidOperationRef extends ToolsafeError {}
/** 409 with the runtime's refusal code (`IDENTICAL_INPUT`, `NOT_AWAITING_APPROVAL`, …). */
export class TransitionRefused extends ToolsafeError {}
/** Any other problem: 401, 403, 413, 429, 431, 503, … (`status`, `code`). */
export class GatewayError extends ToolsafeError {}

/** `wait` ran out with the step still in toolsafe's hands (it is not an error of the
 * step: toolsafe finishes it by itself). */
export class WaitTimeout extends Error {
  readonly operationRef: string;
  readonly state: string;
  readonly timeout: number;

  constructor(operationRef: string, state: string, timeout: number) {
    super(`step ${operationRef} is still ${state} after ${timeout} s`);
    this.name = "WaitTimeout";
    this.operationRef = operationRef;
    this.state = state;
    this.timeout = timeout;
  }
}

/** The exception a problem answer stands for. */
export function problemError(
  status: number,
  body: unknown,
  retryAfterHeader?: string | null,
): ToolsafeError {
  const problem =
    body !== null && typeof body === "object" && !Array.isArray(body)
      ? (body as Record<string, unknown>)
      : {};
  const seconds = retryAfterHeader ? Number(retryAfterHeader) : NaN;
  const retryAfter = Number.isFinite(seconds) ? seconds : undefined;
  const code = typeof problem.code === "string" ? problem.code : `HTTP_${status}`;
  if ((INPUT_CODES as readonly string[]).includes(code)) {
    return new InvalidInput(status, problem, retryAfter);
  }
  switch (code) {
    case "UNKNOWN_TOOL":
      return new UnknownTool(status, problem, retryAfter);
    case "STEP_NOT_FOUND":
      return new StepNotFound(status, problem, retryAfter);
    case "OPERATION_REF_CONFLICT":
      return new OperationRefConflict(status, problem, retryAfter);
    case "INVALID_OPERATION_REF":
      return new InvalidOperationRef(status, problem, retryAfter);
  }
  if (status === 409) {
    return new TransitionRefused(status, problem, retryAfter);
  }
  return new GatewayError(status, problem, retryAfter);
}
