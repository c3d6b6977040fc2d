import assert from "node:assert/strict";
import { test } from "node:test";

import {
  aiSdkRef,
  envelopeText,
  GatewayError,
  InvalidInput,
  modelOutput,
  OperationRefConflict,
  refusalOutput,
  StepNotFound,
  ToolsafeClient,
  UnknownTool,
  type StepEvent,
} from "@toolsafe/client";

import { createInvoice } from "../examples/client.js";
import { agent, harness, INVOICE, operator } from "./support.js";

test("tools: names, descriptions and input schemas", async (t) => {
  const h = harness(t);
  if (!h) return;
  const tools = await agent(h).tools();
  const invoice = tools.find((tool) => tool.name === "create_invoice");
  assert.ok(invoice && invoice.writes && invoice.description.length > 0);
  assert.equal(invoice.input_schema.type, "object");
});

test("the documented example: one write, and its replay is the stored step", async (t) => {
  const h = harness(t);
  if (!h) return;
  const run = `${h.run}-client`;
  const first = await createInvoice(h.url, h.agentKey, run);
  assert.equal(first.created, true);
  assert.equal(first.view.state, "succeeded");
  assert.equal(first.view.operation_ref, `${h.namespace}/${aiSdkRef("call_1", run)}`);
  const envelope = first.view.envelope;
  assert.ok(envelope && envelope.ok === true, JSON.stringify(first.view));
  assert.equal(typeof envelope.ok, "boolean"); // the wire's boolean, as the types say
  assert.deepEqual(first.answer, envelope);
  assert.equal(envelopeText(envelope), JSON.stringify(envelope));
  const replay = await createInvoice(h.url, h.agentKey, run);
  assert.equal(replay.created, false);
  assert.deepEqual(replay.view.envelope, envelope);
});

test("events: the step's changes as SSE, ending at its terminal state", async (t) => {
  const h = harness(t);
  if (!h) return;
  const client = agent(h);
  const ref = aiSdkRef("call_sse", `${h.run}-sse`);
  const { created } = await client.submit("create_invoice", INVOICE, { operationRef: ref });
  assert.equal(created, true);
  const events: StepEvent[] = [];
  for await (const event of client.events(ref, { signal: AbortSignal.timeout(30_000) })) {
    events.push(event);
  }
  const last = events.at(-1);
  assert.equal(last?.event, "end");
  assert.equal(last?.data.state, "succeeded");
  assert.equal(events[0]?.event, "submitted");
  assert.ok(events.some((event) => event.data.state === "succeeded" && event.event !== "end"));
  // Resumed after its last event: only the end.
  const id = events.at(-2)?.id;
  assert.ok(id);
  const rest: StepEvent[] = [];
  for await (const event of client.events(ref, { lastEventId: id })) rest.push(event);
  assert.deepEqual(
    rest.map((event) => event.event),
    ["end"],
  );
  // The long-poll agrees.
  const view = await client.wait(ref, { timeout: 5 });
  assert.equal(view.state, "succeeded");
  assert.deepEqual(modelOutput(view), view.envelope);
});

test("problems become the exceptions they stand for", async (t) => {
  const h = harness(t);
  if (!h) return;
  const client = agent(h);
  const ref = aiSdkRef("call_bad", `${h.run}-problems`);
  const bad = { ...INVOICE, amount_cents: "lots" };
  const invalid = await client
    .submit("create_invoice", bad, { operationRef: ref })
    .catch((error: unknown) => error);
  assert.ok(invalid instanceof InvalidInput, String(invalid));
  assert.equal(invalid.status, 422);
  assert.deepEqual(invalid.fields, ["amount_cents"]);
  assert.deepEqual(refusalOutput(invalid, ref), {
    status: "refused",
    code: "INVALID_INPUT",
    message: "nothing was sent; correct amount_cents",
    fields: ["amount_cents"],
  });

  await client.submit("create_invoice", INVOICE, { operationRef: ref });
  const conflict = await client
    .submit("create_invoice", { ...INVOICE, amount_cents: 991 }, { operationRef: ref })
    .catch((error: unknown) => error);
  assert.ok(conflict instanceof OperationRefConflict, String(conflict));
  assert.equal(conflict.status, 409);
  assert.equal(conflict.problem.type, "urn:toolsafe:problem:operation-ref-conflict");

  const unknown = await client.submit("no_such_tool", {}).catch((error: unknown) => error);
  assert.ok(unknown instanceof UnknownTool && unknown.status === 404, String(unknown));
  const missing = await client.view(`${h.run}/nothing-here`).catch((error: unknown) => error);
  assert.ok(missing instanceof StepNotFound && missing.code === "STEP_NOT_FOUND");

  // Agents do not approve; no key is no access.
  const forbidden = await client
    .approve(ref, { reason: "mine", approver: "me" })
    .catch((error: unknown) => error);
  assert.ok(forbidden instanceof GatewayError, String(forbidden));
  assert.equal(forbidden.status, 403);
  assert.equal(forbidden.code, "FORBIDDEN");
  const anonymous = await new ToolsafeClient({ baseUrl: h.url })
    .tools()
    .catch((error: unknown) => error);
  assert.ok(anonymous instanceof GatewayError && anonymous.code === "UNAUTHENTICATED");
  await client.wait(ref, { timeout: 30 });
  // An operator sees the agent's step under its full ref.
  const view = await operator(h).view(`${h.namespace}/${ref}`);
  assert.equal(view.state, "succeeded");
});
