// The records and items a reference-compatible worker writes, against the golden vectors
// captured from the reference's own processes (tests/golden/reference_1.6.1/).

import assert from "node:assert/strict";
import { builtinTestModel } from "../../llm/model/test_model.ts";
import { referenceModelCard, referenceOutput } from "./worker.ts";

const GOLDEN = new URL("../../tests/golden/reference_1.6.1/discovery.json", import.meta.url);

Deno.test("referenceModelCard: the reference's card fields, and its blake3 checksums byte for byte", async () => {
  const golden = JSON.parse(await Deno.readTextFile(GOLDEN)) as {
    etcd: Record<string, { type?: string; card_json?: Record<string, unknown> }>;
  };
  const theirs = Object.values(golden.etcd).find((r) => r.type === "Model")!.card_json!;
  const ours = await referenceModelCard({
    modelPath: await builtinTestModel(),
    displayName: theirs.display_name as string,
  });
  assert.deepEqual(Object.keys(ours).sort(), Object.keys(theirs).sort());
  // The same files give the same checksums (the built-in model is what the capture served).
  for (const key of ["model_info", "tokenizer", "prompt_formatter", "gen_config"]) {
    const pick = (card: Record<string, unknown>) =>
      Object.values(card[key] as Record<string, { checksum: string; size: number }>)[0]!;
    assert.equal(pick(ours).checksum, pick(theirs).checksum, key);
    assert.equal(pick(ours).size, pick(theirs).size, key);
  }
  assert.deepEqual(
    Object.keys(ours.runtime_config as object).sort(),
    Object.keys(theirs.runtime_config as object).sort(),
  );
});

Deno.test("referenceOutput: every field of the reference's LLMEngineOutput, ours carried over", () => {
  const out = referenceOutput({
    token_ids: [5, 6],
    finish_reason: "length",
    log_probs: [-0.5, -1],
  });
  assert.deepEqual(Object.keys(out).sort(), [
    "cum_log_probs",
    "finish_reason",
    "index",
    "log_probs",
    "output_type",
    "text",
    "token_ids",
    "tokens",
    "top_logprobs",
  ]);
  assert.deepEqual(out.token_ids, [5, 6]);
  assert.equal(out.finish_reason, "length");
  assert.deepEqual(out.log_probs, [-0.5, -1]);
  assert.deepEqual(referenceOutput({ token_ids: "x" }).token_ids, []);
});
