import assert from "node:assert/strict";
import { test } from "node:test";

import { aiSdkRef, operationRefFor, refPart } from "@toolsafe/client";

import { harness } from "./support.js";

test("the ref rule is toolsafe.agents' operation_ref_for, part for part", (t) => {
  const h = harness(t);
  if (!h) return;
  assert.ok(h.refCases.length >= 5, "the harness sends the cases Python computed");
  for (const [scope, call, namespace, expected] of h.refCases) {
    assert.equal(aiSdkRef(call, scope, namespace ?? undefined), expected, `${scope} ${call}`);
  }
});

test("kept and hashed parts, and the refusals", () => {
  assert.equal(aiSdkRef("call_abc123", "run_81"), "ai_sdk:run_81:call_abc123");
  assert.equal(aiSdkRef("call_1", "conv-9", "acme"), "acme/ai_sdk:conv-9:call_1");
  const odd = refPart("thread/with spaces:and colons");
  assert.match(odd, /^threadwithspacesand\.[0-9a-f]{20}$/);
  assert.notEqual(refPart(odd), odd); // a kept part has no dot: the forms cannot collide
  assert.match(refPart("..."), /^h\./);
  assert.throws(() => aiSdkRef("call_1", ""), /needs the run, thread or session id/);
  assert.throws(() => aiSdkRef("", "run"), /needs the tool-call id/);
  assert.throws(() => operationRefFor("openai", "r", "c", "bad/ns"), /namespace/);
});
