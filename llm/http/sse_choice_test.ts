import assert from "node:assert/strict";
import fc from "fast-check";
import { choiceJson } from "./sse_choice.ts";

Deno.test("choiceJson writes what JSON.stringify writes for the choice object", () => {
  fc.assert(
    fc.property(
      fc.boolean(),
      fc.nat(8),
      fc.oneof(
        fc.string(),
        fc.string({ unit: "binary" }),
        fc.constantFrom("", '"\\\n\u0000\u2028'),
      ),
      fc.constantFrom(null, "stop", "length", "content_filter"),
      fc.boolean(),
      (chat, index, text, reason, first) => {
        const object = chat
          ? {
            index,
            delta: first
              ? { role: "assistant", content: text }
              : text === ""
              ? {}
              : { content: text },
            logprobs: null,
            finish_reason: reason,
          }
          : { index, text, logprobs: null, finish_reason: reason };
        assert.equal(
          choiceJson(chat, index, text, reason as never, first),
          JSON.stringify(object),
        );
      },
    ),
    { numRuns: 1000, seed: 5 },
  );
});
