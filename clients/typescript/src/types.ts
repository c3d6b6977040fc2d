/**
 * The gateway's wire types, taken from the types generated from its `/openapi.json`
 * (`src/openapi.d.ts`, made by openapi-typescript; `npm run generate`). Nothing here is
 * written by hand: a change of the gateway's models changes these types.
 */

import type { components, paths } from "./openapi.js";

type Schemas = components["schemas"];

export type { components, paths };
/** The step's view. openapi-typescript types the envelope's boolean discriminator `ok`
 * as a string enum (`"true"`/`"false"`, as OpenAPI's discriminator mapping keys are
 * strings); on the wire it is a JSON boolean, so these types say so. */
export type CallView = Omit<Schemas["CallView"], "envelope"> & { envelope: Envelope | null };
export type StepState = Schemas["StepState"];
export type HistoryItem = Schemas["HistoryItem"];
export type ToolInfo = Schemas["ToolInfo"];
export type ToolList = Schemas["ToolList"];
export type ToolSuccess = Omit<Schemas["ToolSuccess_JsonValue_"], "ok"> & { ok: true };
export type ToolError = Omit<Schemas["ToolError"], "ok"> & { ok: false };
export type Envelope = ToolSuccess | ToolError;
export type Problem = Schemas["Problem"];
export type FieldProblem = Schemas["FieldProblem"];
export type JsonValue = Schemas["JsonValue"];
export type ToolInput = Schemas["CallRequest"]["input"];
export type ApprovalRequest = Schemas["ApprovalRequest"];
export type CancelRequest = Schemas["CancelRequest"];
export type ResolveRequest = Schemas["ResolveRequest"];
export type RedriveRequest = Schemas["RedriveRequest"];

type Answer<T> = T extends Schemas["CallView"] ? CallView : never;
/** What `POST /v1/tools/{tool}/calls` answers with (201 new, 200 the same step). */
export type SubmitAnswer = Answer<
  paths["/v1/tools/{tool}/calls"]["post"]["responses"][201]["content"]["application/json"]
>;
/** What `GET /v1/calls/{operation_ref}` answers with. */
export type ViewAnswer = Answer<
  paths["/v1/calls/{operation_ref}"]["get"]["responses"][200]["content"]["application/json"]
>;
/** What `POST /v1/calls/{operation_ref}/approve` answers with. */
export type ApproveAnswer = Answer<
  paths["/v1/calls/{operation_ref}/approve"]["post"]["responses"][200]["content"]["application/json"]
>;
/** What `GET /v1/tools` answers with. */
export type ToolsAnswer = paths["/v1/tools"]["get"]["responses"][200]["content"]["application/json"];
