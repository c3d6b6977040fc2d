/**
 * `@toolsafe/client`: toolsafe's agent gateway from TypeScript (docs/gateway.md,
 * docs/agents.md). The client (`ToolsafeClient`), the replay-stable refs
 * (`aiSdkRef`, …), the model-facing mapping of a step (`modelOutput`), the problems as
 * exceptions, and the Vercel AI SDK tools (`@toolsafe/client/ai-sdk`).
 */

export * from "./client.js";
export * from "./errors.js";
export * from "./mappings.js";
export * from "./refs.js";
export type * from "./types.js";
