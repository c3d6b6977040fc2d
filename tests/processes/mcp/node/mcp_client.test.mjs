// The official MCP TypeScript SDK's client against toolsafe's /mcp, as a TypeScript
// agent service would use it. Run by tests/processes/mcp/test_http.py, which starts the
// gateway, the workers and the downstream and checks the downstream's effects after.
import assert from "node:assert/strict";
import { test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.env.TOOLSAFE_MCP_URL);
const key = process.env.TOOLSAFE_KEY;
const prefix = process.env.TOOLSAFE_REF_PREFIX;
const INVOICE = { customer_id: "cus_1", amount_cents: 100, currency: "EUR" };

// docs:start mcp-typescript
async function connected() {
  const client = new Client({ name: "toolsafe-ts-test", version: "1.0.0" });
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  await client.connect(transport);
  return client;
}

async function settled(client, name, args, ref) {
  for (let attempt = 0; attempt < 10; attempt += 1) {
    const answer = await client.callTool({ name, arguments: args, _meta: { "toolsafe/operation_ref": ref } });
    if (!answer.structuredContent?.in_progress) return answer;
  }
  throw new Error(`${ref} is still in progress`);
}
// docs:end mcp-typescript

test("tools, a call, its replay and a refused input", async () => {
  const client = await connected();
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((tool) => tool.name).sort(), ["create_invoice", "send_email"]);

    const ref = `${prefix}/ts-call`;
    const done = await settled(client, "create_invoice", INVOICE, ref);
    assert.equal(done.isError, false);
    assert.equal(done.structuredContent.ok, true);
    assert.equal(done.structuredContent.operation_ref, `team-a/${ref}`);
    // A host that forwards only the text still has the evidence id, and the envelope.
    const evidence = done.structuredContent.verification.evidence_ref;
    assert.match(done.content[0].text, new RegExp(`evidence ${evidence}`));
    assert.deepEqual(JSON.parse(done.content.at(-1).text), done.structuredContent);

    const replay = await settled(client, "create_invoice", INVOICE, ref);
    assert.deepEqual(replay.structuredContent, done.structuredContent);

    const refused = await client.callTool({
      name: "create_invoice",
      arguments: { customer_id: "cus_1" },
      _meta: { "toolsafe/operation_ref": `${prefix}/ts-refused` },
    });
    assert.equal(refused.isError, true);
    assert.match(refused.content[0].text, /INVALID_INPUT/);
    assert.match(refused.content[0].text, /Nothing was sent/);
  } finally {
    await client.close();
  }
});
