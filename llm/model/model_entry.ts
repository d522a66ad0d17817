// The model entry as the frontend reads it from discovery: one schema is the door for what
// workers wrote under `v1/models/`; past it, entries are typed and bounded.

import { z } from "zod";
import { keyInstanceId } from "../../runtime/keys.ts";
import { type ModelEntry, ModelInput } from "../protocols.ts";

/** A namespace, component or endpoint name (as `validateName` accepts). */
const name = z.string().max(1024).regex(/^[A-Za-z0-9_-]+$/, "not a valid name");
const text = z.string().max(4096);

/** The value under a model entry key. */
export const modelEntryValueSchema: z.ZodType<ModelEntry> = z.object({
  name: text.min(1),
  endpoint: z.object({ namespace: name, component: name, name }),
  model_type: z.number().int().min(0).max(0xffff),
  model_input: z.enum([ModelInput.Tokens, ModelInput.Text]),
  card_key: text.min(1),
  mdcsum: text,
});

/** A model entry and the instance that published it. */
export interface ModelEntryRecord {
  instanceId: string;
  entry: ModelEntry;
}

/**
 * A model entry watched under `v1/models/`: the key is `{ns}/{component}/{endpoint}/{id}`.
 */
export const modelEntrySchema: z.ZodType<
  ModelEntryRecord,
  { key: string; value: unknown }
> = z.object({
  key: z.string().max(4096).regex(
    /^[^/]+\/[^/]+\/[^/]+\/[^/]+$/,
    "expected NS/COMPONENT/ENDPOINT/ID",
  ),
  value: modelEntryValueSchema,
}).transform(({ key, value }) => ({ instanceId: keyInstanceId(key), entry: value }));
