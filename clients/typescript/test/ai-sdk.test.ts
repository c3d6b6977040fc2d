import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import { generateText, stepCountIs } from "ai";

import { aiSdkRef, type Envelope } from "@toolsafe/client";
import { toolsafeTools, type Submitted } from "@toolsafe/client/ai-sdk";

import { approveAndResume, runAgent } from "../examples/vercel-ai.js";
import { agent, harness, operator, scriptedModel, steppedModel } from "./support.js";

function envelopeOf(seen: ReturnType<typeof scriptedModel>["seen"]): Envelope {
  assert.equal(seen.length, 1, JSON.stringify(seen));
  const [result] = seen;
  assert.ok(result && (result.output.type === "json" || result.output.type === "error-json"));
  return result.output.value as unknown as Envelope;
}

test("a model's tool call: one write, and its envelope goes back to the model", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-bill`;
  const { model, seen } = scriptedModel("call_bill");
  const { result } = await runAgent(model, h.url, h.agentKey, runId);
  const envelope = envelopeOf(seen);
  assert.ok(envelope.ok === true, JSON.stringify(envelope));
  assert.equal(envelope.operation_ref, `${h.namespace}/${aiSdkRef("call_bill", runId)}`);
  assert.equal(envelope.commit_state, "committed");
  assert.ok(envelope.verification.evidence_ref);
  assert.equal(seen[0]?.output.type, "json");
  assert.match(result.text, /the tool said/);
  const step = await agent(h).view(aiSdkRef("call_bill", runId));
  assert.equal(step.state, "succeeded");
});

test("crash and replay: the same toolCallId and run id get the stored envelope", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-crash`;
  const child = fileURLToPath(new URL("./crash-child.js", import.meta.url));
  const died = spawnSync(process.execPath, [child, h.url, h.agentKey, runId, "call_crash"], {
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(died.signal, "SIGKILL", died.stdout + died.stderr);
  assert.match(died.stdout, /created=true/);

  // The replayed agent: a new process, the same run id, the same tool-call id.
  const submits: Submitted[] = [];
  const toolsafe = await toolsafeTools(agent(h), {
    runId,
    onSubmit: (submitted) => submits.push(submitted),
  });
  const { model, seen } = scriptedModel("call_crash");
  await generateText({ model, tools: toolsafe.tools, stopWhen: stepCountIs(3), prompt: "again" });
  const envelope = envelopeOf(seen);
  assert.ok(envelope.ok === true, JSON.stringify(envelope));
  // Every submit of the replay (the approval check's and execute's) found the stored step.
  assert.ok(submits.length >= 1);
  for (const submitted of submits) {
    assert.equal(submitted.operationRef, aiSdkRef("call_crash", runId));
    assert.equal(submitted.created, false);
  }

  // Once more after the success: the very same envelope.
  const again = scriptedModel("call_crash");
  await generateText({ model: again.model, tools: toolsafe.tools, stopWhen: stepCountIs(3), prompt: "x" });
  assert.deepEqual(envelopeOf(again.seen), envelope);
});

test("approval: the SDK's approval request, decided through toolsafe's approve", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-appr`; // the harness made the downstream require approval
  const first = scriptedModel("call_appr");
  const run = await runAgent(first.model, h.url, h.agentKey, runId);
  assert.equal(first.seen.length, 0, "nothing executed before the approval");
  const requests = run.result.content.filter((part) => part.type === "tool-approval-request");
  assert.equal(requests.length, 1, JSON.stringify(run.result.content));
  assert.equal(requests[0]?.toolCall.toolCallId, "call_appr");
  const ref = aiSdkRef("call_appr", runId);
  const waiting = await agent(h).view(ref);
  assert.equal(waiting.state, "awaiting_approval");
  assert.ok(waiting.envelope && waiting.envelope.ok === false);
  assert.equal(waiting.envelope.code, "MISSING_APPROVAL");

  const second = scriptedModel("call_appr");
  await approveAndResume(second.model, run, operator(h), true);
  const envelope = envelopeOf(second.seen);
  assert.ok(envelope.ok === true, JSON.stringify(envelope));
  const done = await agent(h).view(ref);
  assert.equal(done.state, "succeeded");
  const approved = (done.history ?? []).find((item) => item.kind === "approved");
  assert.ok(approved, JSON.stringify(done.history));
});

test("denial: the SDK's denial rejects the step, and nothing is written", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-deny`;
  const first = scriptedModel("call_deny");
  const run = await runAgent(first.model, h.url, h.agentKey, runId);
  const second = scriptedModel("call_deny");
  await approveAndResume(second.model, run, operator(h), false);
  assert.equal(second.seen.length, 1);
  assert.equal(second.seen[0]?.output.type, "execution-denied");
  const step = await agent(h).view(aiSdkRef("call_deny", runId));
  assert.equal(step.state, "failed");
  assert.ok(step.envelope && step.envelope.ok === false);
});

test("needs input: the model corrects the call under the same ref", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-input`;
  const email = { recipient_email: "ana@mail.invalid", subject: "Your invoice" };
  const { model, seen } = steppedModel([
    () => ({ toolCallId: "call_em1", toolName: "send_email", input: email }),
    (results) => {
      const flagged = results[0]?.output.value as { operation_ref: string };
      const fixed = { ...email, recipient_email: "ana@mail.example.org" };
      return {
        toolCallId: "call_em2",
        toolName: "send_email",
        input: { ...fixed, operation_ref: flagged.operation_ref },
      };
    },
    () => ({ text: "Sent." }),
  ]);
  const toolsafe = await toolsafeTools(agent(h), { runId });
  const result = await generateText({
    model,
    tools: toolsafe.tools,
    toolApproval: toolsafe.toolApproval,
    stopWhen: stepCountIs(5),
    prompt: "Mail ana",
  });
  assert.equal(result.text, "Sent.");
  const ref = `${h.namespace}/${aiSdkRef("call_em1", runId)}`;
  const flagged = seen[1]?.[0];
  assert.equal(flagged?.output.type, "error-json"); // ok: false is an error for the model
  const envelope = flagged?.output.value as unknown as Envelope;
  assert.ok(envelope.ok === false && envelope.next_action === "correct_input");
  assert.equal(envelope.operation_ref, ref);
  const corrected = seen[2]?.find((r) => r.toolCallId === "call_em2");
  assert.equal(corrected?.output.type, "json");
  const answer = corrected?.output.value as unknown as Envelope;
  assert.ok(answer.ok === true && answer.operation_ref === ref, JSON.stringify(answer));
});

test("in progress: a step toolsafe still works on is no error, and no retry of the SDK's", async (t) => {
  const h = harness(t);
  if (!h) return;
  const runId = `${h.run}-slow`; // the harness rate-limits its first attempt
  const toolsafe = await toolsafeTools(agent(h), { runId, wait: 0.2 });
  const first = scriptedModel("call_slow");
  await generateText({ model: first.model, tools: toolsafe.tools, stopWhen: stepCountIs(3), prompt: "x" });
  assert.equal(first.seen[0]?.output.type, "json");
  const answer = first.seen[0]?.output.value as Record<string, unknown>;
  assert.equal(answer.in_progress, true, JSON.stringify(answer));
  assert.deepEqual(Object.keys(answer), h.inProgressFields); // toolsafe.agents.InProgress
  assert.ok(["pending", "in_flight", "waiting_retry"].includes(String(answer.state)));
  assert.equal(answer.operation_ref, `${h.namespace}/${aiSdkRef("call_slow", runId)}`);

  // toolsafe retries by itself; the same call asked again later gets the envelope.
  const done = await agent(h).wait(aiSdkRef("call_slow", runId), { timeout: 60 });
  assert.equal(done.state, "succeeded");
  const later = scriptedModel("call_slow");
  await generateText({ model: later.model, tools: toolsafe.tools, stopWhen: stepCountIs(3), prompt: "x" });
  assert.deepEqual(envelopeOf(later.seen), done.envelope);
});
