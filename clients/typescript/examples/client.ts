/**
 * The TypeScript client as docs/agents.md and clients/typescript/README.md show it
 * (the region between the `docs:` markers is what they quote; the test checks it).
 * Run by test/gateway.test.ts against a real `toolsafe serve`.
 */

// docs:start client
import { aiSdkRef, ToolsafeClient, modelOutput } from "@toolsafe/client";

export async function createInvoice(gateway: string, key: string, runId: string) {
  const client = new ToolsafeClient({ baseUrl: gateway, key });
  // The ref from the model's tool-call id and the run id your application keeps:
  // a replayed agent submits the same ref and gets the stored step, never a second write.
  const ref = aiSdkRef("call_1", runId);
  const input = { customer_id: "cus_42", amount_cents: 12000, currency: "EUR" };
  const { created } = await client.submit("create_invoice", input, { operationRef: ref });
  const view = await client.wait(ref, { timeout: 60 }); // held ?wait= requests
  return { created, view, answer: modelOutput(view) }; // the envelope, for the model
}
// docs:end client
