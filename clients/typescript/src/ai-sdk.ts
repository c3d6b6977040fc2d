/**
 * toolsafe tools for the Vercel AI SDK (`ai` 7): one AI SDK `tool()` per registered
 * tool (`GET /v1/tools`), whose `execute` goes through the gateway under a ref made
 * from the SDK's `toolCallId` and the run id the application keeps (`aiSdkRef`), waits
 * for the step, and answers the model with the same mapping as the Python
 * integrations (`mappings.ts`). A step the downstream holds for approval
 * (`awaiting_approval`) goes through the SDK's own approval flow: the approval function
 * asks for `user-approval`, and the decision (a `tool-approval-response`) is recorded
 * in toolsafe by `recordDecisions` before the run resumes. docs/agents.md.
 */

import { jsonSchema, tool } from "ai";
import type { JSONSchema7, JSONValue, ModelMessage, Tool, ToolApprovalStatus } from "ai";

import type { ToolsafeClient } from "./client.js";
import { StepNotFound } from "./errors.js";
import {
  isErrorOutput,
  modelOutput,
  refusalOutput,
  refused,
  type ModelOutput,
} from "./mappings.js";
import { aiSdkRef } from "./refs.js";
import type { CallView, ToolInfo, ToolInput } from "./types.js";

/** Seconds a tool call waits for its step before it answers "in progress". */
export const DEFAULT_WAIT = 30;
const PLAIN_NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** The argument a model sets to correct a step that asked for corrected input
 * (`next_action: correct_input`): that envelope's operation_ref, with the corrected
 * fields. The same as the Python integrations for OpenAI and Anthropic. */
export const REF_ARGUMENT = "operation_ref";
const REF_PROPERTY = {
  type: "string",
  description:
    "Leave out, except to correct a call whose result asked for corrected input " +
    "(next_action correct_input): then that result's operation_ref, with the corrected fields.",
} as const;

/** A tool's input schema that also takes `operation_ref` (optional). */
export function withRefArgument(tool: string, schema: Record<string, unknown>): JSONSchema7 {
  const extended = structuredClone(schema) as JSONSchema7;
  const properties = { ...(extended.properties ?? {}) };
  if (REF_ARGUMENT in properties) {
    throw new TypeError(`tool ${tool} has an input field named ${REF_ARGUMENT}`);
  }
  properties[REF_ARGUMENT] = { ...REF_PROPERTY };
  extended.properties = properties;
  return extended;
}

export interface ToolsafeToolsOptions {
  /** The run or conversation id the application keeps across a replay: with the
   * SDK's `toolCallId` it makes the operation_ref. Required: a tool-call id alone is
   * not unique across runs. */
  runId: string;
  /** The agent key's namespace, when the refs should carry it (the gateway adds it
   * anyway: the same step either way). */
  namespace?: string;
  /** Seconds each call waits for its step (30 by default). */
  wait?: number;
  /** The catalogue, if already fetched; else `GET /v1/tools`. */
  tools?: ToolInfo[];
  /** Only these toolsafe tools. */
  only?: string[];
  /** Told of every submit: the ref, and whether it made the step (`created`) or found
   * the stored one (a replay). */
  onSubmit?: (submitted: Submitted) => void;
}

export interface Submitted {
  tool: string;
  toolCallId: string;
  operationRef: string;
  created: boolean;
  view: CallView;
}

/** The AI SDK name of a toolsafe tool: providers allow only `[A-Za-z0-9_-]`, so
 * `crm.lookup` is offered as `crm_lookup` (as `toolsafe.agents.shared.plain_name`). */
export function plainName(name: string): string {
  const plain = name.replaceAll(".", "_");
  if (!PLAIN_NAME.test(plain)) {
    throw new TypeError(`tool name ${JSON.stringify(name)} cannot be given as a function name`);
  }
  return plain;
}

type ToolsafeTool = Tool<ToolInput, ModelOutput>;
/** The SDK's `ToolResultOutput` (what `toModelOutput` gives the model). */
export type ToolResultOutput = Awaited<ReturnType<NonNullable<ToolsafeTool["toModelOutput"]>>>;
type ApprovalFunction = (
  input: ToolInput,
  options: { toolCallId: string },
) => Promise<ToolApprovalStatus>;

/** What the SDK gives the model for an answer: `error-json` exactly when the envelope
 * says `ok: false` (the in-progress answer and refusals are `json`). */
export function toModelOutput(output: ModelOutput): ToolResultOutput {
  const value = output as unknown as JSONValue;
  return isErrorOutput(output) ? { type: "error-json", value } : { type: "json", value };
}

export class ToolsafeTools {
  readonly client: ToolsafeClient;
  readonly runId: string;
  readonly namespace: string | undefined;
  readonly wait: number;
  /** AI SDK name → toolsafe tool. */
  readonly names: ReadonlyMap<string, ToolInfo>;
  /** The tools, for `generateText({ tools })` / `streamText`. */
  readonly tools: Record<string, ToolsafeTool>;
  /** The per-tool approval functions, for `generateText({ toolApproval })`: a step
   * awaiting approval in toolsafe asks the SDK for `user-approval`. */
  readonly toolApproval: Record<string, ApprovalFunction>;
  readonly #onSubmit: ((submitted: Submitted) => void) | undefined;

  constructor(client: ToolsafeClient, catalogue: ToolInfo[], options: ToolsafeToolsOptions) {
    if (!options.runId) {
      throw new TypeError("toolsafeTools needs runId: the run or conversation id kept across a replay");
    }
    this.client = client;
    this.runId = options.runId;
    this.namespace = options.namespace;
    this.wait = options.wait ?? DEFAULT_WAIT;
    this.#onSubmit = options.onSubmit;
    const names = new Map<string, ToolInfo>();
    for (const info of catalogue) {
      if (options.only && !options.only.includes(info.name)) continue;
      const name = plainName(info.name);
      const other = names.get(name);
      if (other) {
        throw new TypeError(`tools ${other.name} and ${info.name} would both be called ${name}`);
      }
      names.set(name, info);
    }
    this.names = names;
    this.tools = {};
    this.toolApproval = {};
    for (const [name, info] of names) {
      const approval: ApprovalFunction = (input, { toolCallId }) =>
        this.approvalStatus(info.name, input, toolCallId);
      this.toolApproval[name] = approval;
      this.tools[name] = tool({
        description: info.description,
        inputSchema: jsonSchema<ToolInput>(withRefArgument(info.name, info.input_schema)),
        // The tool-level form of the same function (deprecated in ai 7 in favour of
        // `toolApproval`, which takes precedence when given).
        needsApproval: async (input, { toolCallId }) => {
          const status = await approval(input, { toolCallId });
          return typeof status === "object" && status.type === "user-approval";
        },
        execute: (input, { toolCallId, abortSignal }) =>
          this.call(info.name, input, toolCallId, abortSignal),
        toModelOutput: ({ output }) => toModelOutput(output),
      });
    }
  }

  /** The operation_ref of one of the SDK's tool calls in this run. */
  refFor(toolCallId: string): string {
    return aiSdkRef(toolCallId, this.runId, this.namespace);
  }

  async #submitAndSettle(
    tool: string,
    input: ToolInput,
    toolCallId: string,
    signal?: AbortSignal,
  ): Promise<CallView> {
    const operationRef = this.refFor(toolCallId);
    const options = signal ? { operationRef, signal } : { operationRef };
    const { view, created } = await this.client.submit(tool, input, options);
    this.#onSubmit?.({ tool, toolCallId, operationRef, created, view });
    if (view.needs_agent) return view;
    return this.client.settle(operationRef, signal ? { timeout: this.wait, signal } : { timeout: this.wait });
  }

  /**
   * `execute`: submit (a replay finds the stored step), wait, tell the model. A call
   * that names an `operation_ref` corrects that step instead (its input under the same
   * ref; a replayed correction finds the step moved on and answers with it as it is).
   */
  async call(
    tool: string,
    args: ToolInput,
    toolCallId: string,
    signal?: AbortSignal,
  ): Promise<ModelOutput> {
    const { [REF_ARGUMENT]: correcting, ...input } = args;
    if (correcting !== undefined && (typeof correcting !== "string" || correcting === "")) {
      return {
        ...refused("INVALID_INPUT", `nothing was sent; correct ${REF_ARGUMENT}`),
        fields: [REF_ARGUMENT],
      };
    }
    const ref = correcting ?? this.refFor(toolCallId);
    try {
      if (correcting !== undefined) {
        return modelOutput(await this.#correct(tool, correcting, input, signal));
      }
      return modelOutput(await this.#submitAndSettle(tool, input, toolCallId, signal));
    } catch (error) {
      return refusalOutput(error, ref);
    }
  }

  async #correct(
    tool: string,
    ref: string,
    input: ToolInput,
    signal?: AbortSignal,
  ): Promise<CallView> {
    const options = signal ? { signal } : {};
    let view = await this.client.view(ref, options);
    if (view.tool !== tool) {
      throw new StepNotFound(404, { code: "STEP_NOT_FOUND", operation_ref: ref });
    }
    if (view.state === "needs_input") {
      view = await this.client.provideInput(ref, input, options);
    }
    if (view.needs_agent) return view;
    return this.client.settle(ref, { ...options, timeout: this.wait });
  }

  /**
   * The approval function: submit and wait as `execute` would (the same ref, so
   * `execute` then finds this step); a step awaiting approval asks for `user-approval`
   * with the step's text as the reason shown to the approver, anything else needs none.
   */
  async approvalStatus(
    tool: string,
    input: ToolInput,
    toolCallId: string,
  ): Promise<ToolApprovalStatus> {
    if (REF_ARGUMENT in input) {
      return "not-applicable"; // a correction: `execute` answers with the step
    }
    let view: CallView;
    try {
      view = await this.#submitAndSettle(tool, input, toolCallId);
    } catch {
      return "not-applicable"; // `execute` answers the refusal
    }
    if (view.state === "awaiting_approval") {
      return { type: "user-approval", reason: view.text };
    }
    return "not-applicable";
  }

  /**
   * Record in toolsafe the decisions of the SDK's approval flow found in `messages`
   * (each `tool-approval-response` of a toolsafe tool, matched to its request and tool
   * call): approve or reject the step through `operator` (a client with an operator
   * key), before the messages go back to `generateText`. The step is found through
   * this tools' own client (its key's namespace), so any process can record them. Returns the steps' views. A
   * decision already recorded (a replay of this call) answers with the step as it is.
   */
  async recordDecisions(
    operator: ToolsafeClient,
    messages: ModelMessage[],
    decision: { approver: string; reason?: string },
  ): Promise<CallView[]> {
    const requests = new Map<string, string>();
    const toolNames = new Map<string, string>();
    for (const message of messages) {
      if (message.role !== "assistant" || typeof message.content === "string") continue;
      for (const part of message.content) {
        if (part.type === "tool-call") toolNames.set(part.toolCallId, part.toolName);
        if (part.type === "tool-approval-request") requests.set(part.approvalId, part.toolCallId);
      }
    }
    const views: CallView[] = [];
    for (const message of messages) {
      if (message.role !== "tool") continue;
      for (const part of message.content) {
        if (part.type !== "tool-approval-response") continue;
        const toolCallId = requests.get(part.approvalId);
        if (toolCallId === undefined) continue;
        const name = toolNames.get(toolCallId);
        if (name === undefined || !this.names.has(name)) continue;
        // The step's full ref, namespace included, as the agent key reads it: an
        // operator key without a namespace names it so.
        const ref = (await this.client.view(this.refFor(toolCallId))).operation_ref;
        const body = {
          approver: decision.approver,
          reason:
            part.reason ??
            decision.reason ??
            (part.approved ? "approved in the AI SDK approval flow" : "denied in the AI SDK approval flow"),
        };
        views.push(part.approved ? await operator.approve(ref, body) : await operator.reject(ref, body));
      }
    }
    return views;
  }
}

/** The toolsafe tools for the AI SDK (`GET /v1/tools` unless `options.tools`). */
export async function toolsafeTools(
  client: ToolsafeClient,
  options: ToolsafeToolsOptions,
): Promise<ToolsafeTools> {
  const catalogue = options.tools ?? (await client.tools());
  return new ToolsafeTools(client, catalogue, options);
}
