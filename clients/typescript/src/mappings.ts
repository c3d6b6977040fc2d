/**
 * What the model is told about a step, the same mapping as the Python integrations
 * (`toolsafe.integrations._calls.model_output`, `toolsafe.agents.shared.in_progress`,
 * `toolsafe.agents.shared.envelope_text`): the envelope once the step has one that
 * agrees with its state, the in-progress answer while toolsafe still works on it (never
 * an error), and `{"status": "refused", …}` for a call toolsafe did not take.
 */

import {
  InvalidInput,
  OperationRefConflict,
  StepNotFound,
  TransitionRefused,
} from "./errors.js";
import type { CallView, Envelope } from "./types.js";

/** How a step ends one model tool call. */
export type Turn = "final" | "needs_input" | "awaiting_approval" | "in_progress";

/** toolsafe still owns this call and will finish it by itself (`InProgress`). */
export interface InProgressAnswer {
  in_progress: true;
  operation_ref: string;
  tool: string;
  state: string;
  not_before: string | null;
  last_envelope: Envelope | null;
  agent_message: string;
}

/** A call toolsafe did not take: nothing was stored or sent. */
export interface RefusedAnswer {
  status: "refused";
  code: string;
  message: string;
  operation_ref?: string;
  fields?: string[];
}

/** A step that needs the agent but carries no envelope (a defence only: the runtime
 * builds an envelope for every such state). */
export interface StateAnswer {
  operation_ref: string;
  state: string;
  message: string;
}

export type ModelOutput = Envelope | InProgressAnswer | RefusedAnswer | StateAnswer;

/** The integrations' own refusal code for a ref that is no step of this tool. */
export const NOT_THIS_CALL = "NOT_THIS_CALL";
const NOT_THIS_CALL_TEXT =
  "the operation_ref a tool call names is not a step of this tool in this run, thread or session";

export function turnOf(view: CallView): Turn {
  if (view.terminal) return "final";
  if (view.state === "needs_input") return "needs_input";
  if (view.state === "awaiting_approval") return "awaiting_approval";
  return "in_progress";
}

/** The envelope as compact JSON text (`envelope_text`): what a text channel carries. */
export function envelopeText(envelope: Envelope): string {
  return JSON.stringify(envelope);
}

/** The in-progress answer for a step that does not need the agent yet. */
export function inProgress(view: CallView): InProgressAnswer {
  if (view.needs_agent) {
    throw new TypeError(`step ${view.operation_ref} is ${view.state}: answer with its envelope`);
  }
  return {
    in_progress: true,
    operation_ref: view.operation_ref,
    tool: view.tool,
    state: view.state,
    not_before: view.state === "waiting_retry" ? view.due_at : null,
    last_envelope: view.envelope,
    agent_message: view.text,
  };
}

/** One line for a text channel; the model reads it as "wait", never as a failure. */
export function inProgressText(answer: InProgressAnswer): string {
  const when = answer.not_before ? `, not before ${answer.not_before}` : "";
  return (
    `Still in progress (operation_ref ${answer.operation_ref}, state ${answer.state}${when}): ` +
    `${answer.agent_message} toolsafe finishes it by itself; ask again with the same ` +
    "operation_ref instead of making a new call."
  );
}

/** What the model is given for a step. */
export function modelOutput(view: CallView): ModelOutput {
  if (turnOf(view) !== "in_progress" && view.envelope) {
    return view.envelope;
  }
  if (view.needs_agent) {
    return { operation_ref: view.operation_ref, state: view.state, message: view.text };
  }
  return inProgress(view);
}

export function refused(
  code: string,
  message: string,
  operationRef?: string,
): RefusedAnswer {
  const answer: RefusedAnswer = { status: "refused", code, message };
  if (operationRef !== undefined) answer.operation_ref = operationRef;
  return answer;
}

/** The model's answer for an expected refusal (nothing was sent); anything else is
 * thrown again (a gateway that is down is no answer for the model). */
export function refusalOutput(error: unknown, operationRef?: string): RefusedAnswer {
  if (error instanceof InvalidInput) {
    const fields = error.fields;
    return {
      ...refused(error.code, `nothing was sent; correct ${fields.join(", ") || "the input"}`),
      fields,
    };
  }
  if (error instanceof TransitionRefused || error instanceof OperationRefConflict) {
    return refused(error.code, error.detail, operationRef);
  }
  if (error instanceof StepNotFound) {
    return refused(NOT_THIS_CALL, NOT_THIS_CALL_TEXT, operationRef);
  }
  throw error;
}

/** Whether an answer is an error for the model: exactly an envelope with `ok: false`
 * (as `isError` / `is_error` in the MCP and Anthropic mappings). */
export function isErrorOutput(output: ModelOutput): boolean {
  return "ok" in output && output.ok === false;
}
