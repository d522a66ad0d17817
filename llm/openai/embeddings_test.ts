import assert from "node:assert/strict";
import { embeddingBase64, MAX_EMBEDDING_INPUTS, validateEmbeddingRequest } from "./embeddings.ts";
import { RequestError } from "./errors.ts";

Deno.test("validateEmbeddingRequest takes every input form and defaults the encoding", () => {
  for (const input of ["a", ["a", "b"], [1, 2, 3], [[1], [2, 3]]]) {
    const req = validateEmbeddingRequest({ model: "m", input, user: "u", extra: 1 });
    assert.deepEqual(req, { model: "m", input, encoding_format: "float", user: "u" });
  }
  assert.equal(
    validateEmbeddingRequest({ model: "m", input: "a", encoding_format: "base64" })
      .encoding_format,
    "base64",
  );
});

Deno.test("validateEmbeddingRequest names the parameter at fault", () => {
  const cases: [unknown, string | null][] = [
    [[], null],
    [{ input: "a" }, "model"],
    [{ model: "m" }, "input"],
    [{ model: "m", input: [{}] }, "input"],
    [{ model: "m", input: [1, 2.5] }, "input"],
    [{ model: "m", input: [[1], []] }, "input[1]"],
    [{ model: "m", input: ["a", ""] }, "input[1]"],
    [{ model: "m", input: Array(MAX_EMBEDDING_INPUTS + 1).fill("a") }, "input"],
    [{ model: "m", input: "a", encoding_format: "int8" }, "encoding_format"],
    [{ model: "m", input: "a", dimensions: 3 }, "dimensions"],
    [{ model: "m", input: "a", user: 3 }, "user"],
  ];
  for (const [body, param] of cases) {
    assert.throws(() => validateEmbeddingRequest(body), (err: unknown) => {
      assert.ok(err instanceof RequestError);
      assert.equal(err.status, 400);
      assert.equal(err.param, param, JSON.stringify(body).slice(0, 80));
      return true;
    });
  }
});

Deno.test("embeddingBase64 writes little-endian float32 bytes", () => {
  const text = embeddingBase64([1, -2.5, 0.1]);
  const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  assert.equal(bytes.length, 12);
  assert.equal(view.getFloat32(0, true), 1);
  assert.equal(view.getFloat32(4, true), -2.5);
  assert.equal(view.getFloat32(8, true), Math.fround(0.1));
});
