/**
 * operation_refs that survive a replay: the same rule as `toolsafe.agents.shared`
 * (docs/agents.md#refs-that-survive-a-replay), so a TypeScript agent and a Python one
 * name the same step for the same tool call.
 *
 *     [<namespace>/]<stack>:<scope>:<call>
 *
 * A part made only of letters, digits, `_` and `-`, at most 40 characters, is kept as
 * it is; any other part becomes a readable prefix, a dot and 20 hex digits of its
 * SHA-256 (kept parts never contain a dot, so the two forms cannot collide).
 */

import { createHash } from "node:crypto";

export const STACKS = ["openai", "anthropic", "pydantic_ai", "langgraph", "mcp", "ai_sdk"] as const;
export type Stack = (typeof STACKS)[number];

export const MAX_PART = 40;
const HASH_CHARS = 20;
const KEPT = /^[A-Za-z0-9][A-Za-z0-9_-]*$/;
const UNSAFE = /[^A-Za-z0-9_-]+/g;
const NAMESPACE = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$/;

/** One part of a ref: `value` when it is short and plain, else prefix.hash. */
export function refPart(value: string): string {
  if (typeof value !== "string" || value === "") {
    throw new TypeError("a ref part must be non-empty text");
  }
  if (value.length <= MAX_PART && KEPT.test(value)) {
    return value;
  }
  const digest = createHash("sha256").update(value, "utf8").digest("hex").slice(0, HASH_CHARS);
  const prefix = value
    .replace(UNSAFE, "")
    .replace(/^[_-]+/, "")
    .slice(0, MAX_PART - HASH_CHARS - 1);
  return `${prefix || "h"}.${digest}`;
}

/**
 * The operation_ref of one tool call of a framework: `scope` is the run, thread or
 * session id, `call` the tool-call id, `namespace` the gateway key's namespace (the
 * gateway adds it anyway; given here, the ref is the same either way).
 */
export function operationRefFor(
  stack: Stack,
  scope: string,
  call: string,
  namespace?: string,
): string {
  if (!STACKS.includes(stack)) {
    throw new TypeError(`unknown stack ${JSON.stringify(stack)}; one of ${STACKS.join(", ")}`);
  }
  if (!scope) {
    throw new TypeError(
      `a ${stack} operation_ref needs the run, thread or session id: a tool-call id ` +
        "alone is not unique across runs",
    );
  }
  if (!call) {
    throw new TypeError(`a ${stack} operation_ref needs the tool-call id`);
  }
  const ref = `${stack}:${refPart(scope)}:${refPart(call)}`;
  if (namespace === undefined) {
    return ref;
  }
  if (!NAMESPACE.test(namespace)) {
    throw new TypeError(`namespace ${JSON.stringify(namespace)}: 1-100 letters, digits and _ . : -`);
  }
  return `${namespace}/${ref}`;
}

/**
 * The Vercel AI SDK: the `toolCallId` an AI SDK tool's `execute` (and its approval
 * function) is given, scoped by the run or conversation id the application keeps
 * across a replay. Python: `toolsafe.agents.ai_sdk.ai_sdk_ref`.
 */
export function aiSdkRef(toolCallId: string, runId: string, namespace?: string): string {
  return operationRefFor("ai_sdk", runId, toolCallId, namespace);
}

/** OpenAI (`tool_calls[].id`, `call_id`) scoped by the run or conversation id. */
export function openaiRef(callId: string, runId: string, namespace?: string): string {
  return operationRefFor("openai", runId, callId, namespace);
}

/** Anthropic Messages: the `tool_use` block's `id`, scoped by the conversation. */
export function anthropicRef(toolUseId: string, conversationId: string, namespace?: string): string {
  return operationRefFor("anthropic", conversationId, toolUseId, namespace);
}
