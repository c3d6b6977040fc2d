/**
 * A client of `toolsafe serve` (docs/gateway.md): submit a tool call under its
 * operation_ref (the `Idempotency-Key`), wait for it (held `?wait=` requests, or the
 * Server-Sent Events stream), read it, correct its input, cancel it; with an operator
 * key approve, reject, resolve and re-drive. Every answer is the step's view
 * (`CallView`, typed from the gateway's OpenAPI document); every refusal is the
 * exception its RFC 9457 problem stands for (`errors.ts`).
 */

import { problemError, ToolsafeError, WaitTimeout } from "./errors.js";
import type {
  ApprovalRequest,
  ApproveAnswer,
  CallView,
  CancelRequest,
  RedriveRequest,
  ResolveRequest,
  SubmitAnswer,
  ToolInfo,
  ToolInput,
  ToolsAnswer,
  ViewAnswer,
} from "./types.js";

/** The longest `?wait=` one request asks for; `settle` asks again until its timeout. */
export const LONGEST_HOLD = 30;
/** A hold the gateway ended early with the step unmoved (`hint: "no_worker"`) is asked
 * again after this pause (seconds), not at once. */
export const EARLY_PAUSE = 1;

export interface ClientOptions {
  /** The gateway, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** A key made by `toolsafe keys create` (agent or operator scope). */
  key?: string;
  /** Another `fetch` (tests, proxies); the global one by default. */
  fetch?: typeof fetch;
}

export interface Submission {
  view: CallView;
  /** `true` for a new step (201), `false` for the stored one (200): a replay. */
  created: boolean;
}

export interface CallOptions {
  signal?: AbortSignal;
}

export interface SettleOptions extends CallOptions {
  /** Seconds to wait for the step to need the agent or end (30 by default). */
  timeout?: number;
}

/** One event of the step's stream (`GET /v1/calls/{ref}/events`). */
export interface StepEvent {
  /** The event row's id (`Last-Event-ID` resumes after it); none for `end`. */
  id: string | undefined;
  /** The event's kind (`submitted`, `succeeded`, …), or `end` at a terminal state. */
  event: string;
  /** Its safe view and `state`, the step's state once the event had happened (`end`: the
   * ref and the final state). */
  data: Record<string, unknown>;
}

export interface EventsOptions extends CallOptions {
  /** Resume after this event id. */
  lastEventId?: string;
  /** Reconnect (with `Last-Event-ID`) when the gateway ends a stream at its
   * `TOOLSAFE_GATEWAY_MAX_WAIT` before the step ended (true by default). */
  follow?: boolean;
}

/** The path of a step: an operation_ref contains `/` and goes in as it is. */
export function callPath(operationRef: string, action?: string): string {
  const encoded = encodeURIComponent(operationRef).replace(/%2F/gi, "/").replace(/%3A/gi, ":");
  return `/v1/calls/${encoded}${action ? `/${action}` : ""}`;
}

const sleep = (seconds: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, seconds * 1000);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });

export class ToolsafeClient {
  readonly baseUrl: string;
  readonly #key: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.#key = options.key;
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  async #request(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
    signal?: AbortSignal,
  ): Promise<Response> {
    const all: Record<string, string> = { Accept: "application/json", ...headers };
    if (this.#key) all.Authorization = `Bearer ${this.#key}`;
    if (body !== undefined) all["Content-Type"] = "application/json";
    const init: RequestInit = { method, headers: all };
    if (body !== undefined) init.body = JSON.stringify(body);
    if (signal) init.signal = signal;
    const response = await this.#fetch(`${this.baseUrl}${path}`, init);
    if (response.status >= 400) {
      let problem: unknown = {};
      try {
        problem = await response.json();
      } catch {
        problem = {};
      }
      throw problemError(response.status, problem, response.headers.get("Retry-After"));
    }
    return response;
  }

  async #json<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    return (await (await this.#request(method, path, body, {}, signal)).json()) as T;
  }

  /** `GET /v1/tools`: every registered tool, its description and input JSON Schema. */
  async tools(options: CallOptions = {}): Promise<ToolInfo[]> {
    return (await this.#json<ToolsAnswer>("GET", "/v1/tools", undefined, options.signal)).tools;
  }

  /**
   * Submit a tool call under `operationRef` (the `Idempotency-Key`). The same ref with
   * the same input is the same step (`created: false`): a replay never writes twice.
   * Without a ref the gateway makes one (it is in the view).
   */
  async submit(
    tool: string,
    input: ToolInput,
    options: CallOptions & { operationRef?: string } = {},
  ): Promise<Submission> {
    const headers: Record<string, string> = {};
    if (options.operationRef !== undefined) headers["Idempotency-Key"] = options.operationRef;
    const response = await this.#request(
      "POST",
      `/v1/tools/${encodeURIComponent(tool)}/calls`,
      { input },
      headers,
      options.signal,
    );
    const view: SubmitAnswer = (await response.json()) as SubmitAnswer;
    return { view, created: response.status === 201 };
  }

  /** The step's view as it is. */
  async view(operationRef: string, options: CallOptions = {}): Promise<CallView> {
    return this.#json<ViewAnswer>("GET", callPath(operationRef), undefined, options.signal);
  }

  /**
   * The view once the step needs the agent (input, approval) or is terminal, or as it
   * is when `timeout` runs out: held `?wait=` requests of at most `LONGEST_HOLD` s
   * (the gateway wakes them at the commit of the change).
   */
  async settle(operationRef: string, options: SettleOptions = {}): Promise<CallView> {
    const timeout = options.timeout ?? 30;
    const deadline = performance.now() / 1000 + timeout;
    let pause = 0;
    for (;;) {
      if (pause > 0) await sleep(pause, options.signal);
      const asked = performance.now() / 1000;
      const hold = Math.max(0, Math.min(LONGEST_HOLD, deadline - asked));
      const query = hold > 0 ? `?wait=${hold.toFixed(3)}` : "";
      const view = await this.#json<ViewAnswer>(
        "GET",
        callPath(operationRef) + query,
        undefined,
        options.signal,
      );
      const now = performance.now() / 1000;
      if (view.needs_agent || now >= deadline) return view;
      pause = now - asked >= EARLY_PAUSE ? 0 : Math.max(0, Math.min(EARLY_PAUSE, deadline - now));
    }
  }

  /** `settle`, but a step still in toolsafe's hands at the timeout is `WaitTimeout`. */
  async wait(operationRef: string, options: SettleOptions = {}): Promise<CallView> {
    const view = await this.settle(operationRef, options);
    if (!view.needs_agent) {
      throw new WaitTimeout(operationRef, view.state, options.timeout ?? 30);
    }
    return view;
  }

  /**
   * The step's changes as they are committed (Server-Sent Events), until its terminal
   * state (the last event yielded is `end`). With `follow` (the default) a stream the
   * gateway closed at its wait limit is opened again after the last event seen.
   */
  async *events(operationRef: string, options: EventsOptions = {}): AsyncGenerator<StepEvent> {
    let last = options.lastEventId;
    for (;;) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (last !== undefined) headers["Last-Event-ID"] = last;
      const response = await this.#request(
        "GET",
        callPath(operationRef, "events"),
        undefined,
        headers,
        options.signal,
      );
      if (!response.body) throw new ToolsafeError(response.status, { code: "NO_STREAM" });
      let ended = false;
      for await (const event of parseEventStream(response.body)) {
        if (event.id !== undefined) last = event.id;
        yield event;
        if (event.event === "end") {
          ended = true;
          break;
        }
      }
      if (ended || options.follow === false) return;
    }
  }

  /** Corrected input for a step in `needs_input`, under the same operation_ref. */
  async provideInput(
    operationRef: string,
    input: ToolInput,
    options: CallOptions = {},
  ): Promise<CallView> {
    return this.#json("POST", callPath(operationRef, "input"), { input }, options.signal);
  }

  async cancel(
    operationRef: string,
    body: { reason: string; by?: string; whenPossible?: boolean },
    options: CallOptions = {},
  ): Promise<CallView> {
    const request: CancelRequest = {
      reason: body.reason,
      by: body.by ?? null,
      when_possible: body.whenPossible ?? false,
    };
    return this.#json("POST", callPath(operationRef, "cancel"), request, options.signal);
  }

  /** Approve a step awaiting approval (operator keys). Approving an approved step
   * answers with it as it is. */
  async approve(
    operationRef: string,
    body: { reason: string; approver?: string },
    options: CallOptions = {},
  ): Promise<CallView> {
    const request: ApprovalRequest = { reason: body.reason, approver: body.approver ?? null };
    return this.#json<ApproveAnswer>(
      "POST",
      callPath(operationRef, "approve"),
      request,
      options.signal,
    );
  }

  /** Reject a step awaiting approval: it fails (operator keys). */
  async reject(
    operationRef: string,
    body: { reason: string; approver?: string },
    options: CallOptions = {},
  ): Promise<CallView> {
    const request: ApprovalRequest = { reason: body.reason, approver: body.approver ?? null };
    return this.#json("POST", callPath(operationRef, "reject"), request, options.signal);
  }

  /** Close an escalated step (operator keys; see docs/lifecycle.md). */
  async resolve(
    operationRef: string,
    body: ResolveRequest,
    options: CallOptions = {},
  ): Promise<CallView> {
    return this.#json("POST", callPath(operationRef, "resolve"), body, options.signal);
  }

  /** Send an escalated step back to pending (operator keys). */
  async redrive(
    operationRef: string,
    body: RedriveRequest,
    options: CallOptions = {},
  ): Promise<CallView> {
    return this.#json("POST", callPath(operationRef, "redrive"), body, options.signal);
  }
}

/** Server-Sent Events (the WHATWG format) from a response body. */
export async function* parseEventStream(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<StepEvent> {
  const decoder = new TextDecoder();
  let buffer = "";
  let id: string | undefined;
  let event = "message";
  let data: string[] = [];
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let newline: number;
      while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
        if (line === "") {
          if (data.length > 0) {
            yield { id, event, data: JSON.parse(data.join("\n")) as Record<string, unknown> };
          }
          id = undefined;
          event = "message";
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (field === "id") id = value;
        else if (field === "event") event = value;
        else if (field === "data") data.push(value);
      }
    }
  } finally {
    // A consumer that stops early closes the connection (the gateway counts the wait).
    await reader.cancel().catch(() => undefined);
  }
}
