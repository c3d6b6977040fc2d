/**
 * What the tests share: the gateway the pytest harness started (environment), and a
 * scripted AI SDK model (`MockLanguageModelV4` from `ai/test`) that calls one tool and
 * then answers with what the tool gave it.
 */

import type { TestContext } from "node:test";
import { MockLanguageModelV4 } from "ai/test";
import type { JSONValue } from "ai";

import { ToolsafeClient } from "@toolsafe/client";

export interface Harness {
  url: string;
  agentKey: string;
  operatorKey: string;
  namespace: string;
  run: string;
  refCases: [string, string, string | null, string][];
  inProgressFields: string[];
}

/** The gateway of tests/processes/gateway/test_typescript_client.py, or `undefined`
 * (the test is skipped: it needs the pytest harness, which asserts none is skipped). */
export function harness(t: TestContext): Harness | undefined {
  const env = process.env;
  if (!env.TOOLSAFE_URL || !env.TOOLSAFE_AGENT_KEY || !env.TOOLSAFE_OPERATOR_KEY) {
    t.skip("needs the gateway of tests/processes/gateway/test_typescript_client.py");
    return undefined;
  }
  return {
    url: env.TOOLSAFE_URL,
    agentKey: env.TOOLSAFE_AGENT_KEY,
    operatorKey: env.TOOLSAFE_OPERATOR_KEY,
    namespace: env.TOOLSAFE_NAMESPACE ?? "",
    run: env.TOOLSAFE_RUN ?? "ts-run",
    refCases: JSON.parse(env.TOOLSAFE_REF_CASES ?? "[]"),
    inProgressFields: JSON.parse(env.TOOLSAFE_IN_PROGRESS_FIELDS ?? "[]"),
  };
}

export function agent(h: Harness): ToolsafeClient {
  return new ToolsafeClient({ baseUrl: h.url, key: h.agentKey });
}

export function operator(h: Harness): ToolsafeClient {
  return new ToolsafeClient({ baseUrl: h.url, key: h.operatorKey });
}

export const INVOICE = { customer_id: "cus_7", amount_cents: 990, currency: "EUR" };

const USAGE = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

export interface ToolResultSeen {
  toolCallId: string;
  toolName: string;
  output: { type: string; value?: JSONValue; reason?: string };
}

/** A model that calls `toolName` once (with `toolCallId`) and then says what it got;
 * `seen` collects the tool results the SDK sent back to it. */
export function scriptedModel(toolCallId: string, toolName = "create_invoice", input = INVOICE) {
  const seen: ToolResultSeen[] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      const results: ToolResultSeen[] = [];
      for (const message of options.prompt) {
        if (message.role !== "tool") continue;
        for (const part of message.content) {
          if (part.type === "tool-result") {
            results.push(part as unknown as ToolResultSeen);
          }
        }
      }
      if (results.length === 0) {
        return {
          content: [{ type: "tool-call", toolCallId, toolName, input: JSON.stringify(input) }],
          finishReason: { unified: "tool-calls", raw: "tool_calls" },
          usage: USAGE,
          warnings: [],
        };
      }
      seen.push(...results);
      return {
        content: [{ type: "text", text: `the tool said: ${JSON.stringify(results[0]?.output)}` }],
        finishReason: { unified: "stop", raw: "stop" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, seen };
}

export type Step =
  | { toolCallId: string; toolName: string; input: Record<string, unknown> }
  | { text: string };

/** A model that takes `steps` in turn, each given the tool results sent back so far
 * (the last step repeats); `seen` is what it received at each turn. */
export function steppedModel(steps: ((results: ToolResultSeen[]) => Step)[]) {
  const seen: ToolResultSeen[][] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (options) => {
      const results: ToolResultSeen[] = [];
      for (const message of options.prompt) {
        if (message.role !== "tool") continue;
        for (const part of message.content) {
          if (part.type === "tool-result") results.push(part as unknown as ToolResultSeen);
        }
      }
      seen.push(results);
      const step = (steps[seen.length - 1] ?? steps.at(-1))!(results);
      if ("text" in step) {
        return {
          content: [{ type: "text", text: step.text }],
          finishReason: { unified: "stop", raw: "stop" },
          usage: USAGE,
          warnings: [],
        };
      }
      return {
        content: [{ type: "tool-call", ...step, input: JSON.stringify(step.input) }],
        finishReason: { unified: "tool-calls", raw: "tool_calls" },
        usage: USAGE,
        warnings: [],
      };
    },
  });
  return { model, seen };
}
