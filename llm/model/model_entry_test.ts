// The model entry schema: what registerLlm writes passes; anything a frontend could not
// route is refused at the door.

import assert from "node:assert/strict";
import { ModelInput, ModelType } from "../protocols.ts";
import { modelEntrySchema } from "./model_entry.ts";

const entry = {
  name: "Qwen/Qwen3-0.6B",
  endpoint: { namespace: "ns", component: "backend", name: "generate" },
  model_type: ModelType.Chat | ModelType.Completions,
  model_input: ModelInput.Tokens,
  card_key: "v1/mdc/ns/backend/generate/694d",
  mdcsum: "abc",
};
const parse = (value: unknown, key = "ns/backend/generate/694d") =>
  modelEntrySchema.safeParse({ key, value });

Deno.test("a model entry as registerLlm writes it parses, with its instance id", () => {
  const r = parse({ ...entry, extra: { nested: true } });
  assert.ok(r.success);
  assert.deepEqual(r.data, { instanceId: "694d", entry });
});

Deno.test("model entries a frontend cannot route are refused", () => {
  const bad: [string, unknown, string?][] = [
    ["no name", { ...entry, name: "" }],
    ["name not a string", { ...entry, name: 42 }],
    ["endpoint name that is not a name", {
      ...entry,
      endpoint: { ...entry.endpoint, namespace: "no spaces!" },
    }],
    ["unknown model input", { ...entry, model_input: "pixels" }],
    ["model type not an integer", { ...entry, model_type: 1.5 }],
    ["huge name", { ...entry, name: "x".repeat(100_000) }],
    ["array", [entry]],
    ["prototype key only", JSON.parse('{"__proto__": {"name": "m"}}')],
    ["key not NS/COMPONENT/ENDPOINT/ID", entry, "694d"],
  ];
  for (const [what, value, key] of bad) assert.equal(parse(value, key).success, false, what);
});
