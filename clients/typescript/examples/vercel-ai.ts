/**
 * The Vercel AI SDK tools as docs/agents.md and clients/typescript/README.md show them
 * (the regions between the `docs:` markers are what they quote; the test checks it).
 * Run by test/ai-sdk.test.ts with the AI SDK's mock model against a real gateway.
 */

// docs:start vercel-ai
import { generateText, stepCountIs, type LanguageModel, type ModelMessage } from "ai";
import { ToolsafeClient } from "@toolsafe/client";
import { toolsafeTools } from "@toolsafe/client/ai-sdk";

export async function runAgent(model: LanguageModel, gateway: string, key: string, runId: string) {
  const client = new ToolsafeClient({ baseUrl: gateway, key }); // an agent key
  // runId: the run or conversation id your application keeps across a replay; with the
  // SDK's toolCallId it makes each call's operation_ref (ai_sdk:<runId>:<toolCallId>).
  const toolsafe = await toolsafeTools(client, { runId });
  const messages: ModelMessage[] = [{ role: "user", content: "Bill cus_7 9.90 EUR" }];
  const result = await generateText({
    model,
    tools: toolsafe.tools,
    toolApproval: toolsafe.toolApproval, // a step awaiting approval asks the SDK's approver
    stopWhen: stepCountIs(5),
    messages,
  });
  return { toolsafe, result, messages: [...messages, ...result.response.messages] };
}
// docs:end vercel-ai

// docs:start vercel-ai-approval
export async function approveAndResume(
  model: LanguageModel,
  run: Awaited<ReturnType<typeof runAgent>>,
  operator: ToolsafeClient, // a client with an operator key
  approved: boolean,
) {
  const requests = run.result.content.filter((part) => part.type === "tool-approval-request");
  const messages: ModelMessage[] = [
    ...run.messages,
    {
      role: "tool",
      content: requests.map((request) => ({
        type: "tool-approval-response" as const,
        approvalId: request.approvalId,
        approved,
        reason: approved ? "customer confirmed by phone" : "not this customer",
      })),
    },
  ];
  // toolsafe first (approve or reject the step, recorded with the approver), then the SDK.
  await run.toolsafe.recordDecisions(operator, messages, { approver: "alice" });
  return generateText({
    model,
    tools: run.toolsafe.tools,
    toolApproval: run.toolsafe.toolApproval,
    stopWhen: stepCountIs(5),
    messages,
  });
}
// docs:end vercel-ai-approval
