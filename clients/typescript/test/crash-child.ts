/**
 * The first life of a crashing agent: a model's tool call goes through the AI SDK
 * tools; the moment the gateway has acknowledged the step (committed), this process is
 * SIGKILLed, before the model ever sees an answer. test/ai-sdk.test.ts replays it.
 */

import { generateText, stepCountIs } from "ai";

import { ToolsafeClient } from "@toolsafe/client";
import { toolsafeTools } from "@toolsafe/client/ai-sdk";

import { scriptedModel } from "./support.js";

const [url, key, runId, toolCallId] = process.argv.slice(2) as [string, string, string, string];
const toolsafe = await toolsafeTools(new ToolsafeClient({ baseUrl: url, key }), {
  runId,
  onSubmit: ({ operationRef, created }) => {
    process.stdout.write(`submitted ${operationRef} created=${created}\n`, () => {
      process.kill(process.pid, "SIGKILL");
    });
  },
});
await generateText({
  model: scriptedModel(toolCallId).model,
  tools: toolsafe.tools,
  stopWhen: stepCountIs(3),
  prompt: "Bill cus_7 9.90 EUR",
});
process.stdout.write("the crash did not happen\n");
