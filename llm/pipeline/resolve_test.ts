import assert from "node:assert/strict";
import { RequestError } from "../openai/errors.ts";
import { resolveModel } from "./resolve.ts";

Deno.test("resolveModel() finds a served model and answers 404 model_not_found otherwise", () => {
  const models = new Map([["m", { name: "m" }]]);
  assert.deepEqual(resolveModel(models, "m"), { name: "m" });
  assert.throws(
    () => resolveModel(models, "other"),
    (e: unknown) =>
      e instanceof RequestError && e.status === 404 && e.toJSON().error.code === "model_not_found",
  );
});
