import assert from "node:assert/strict";
import { grammarSchema, invalidSchemaReason, UnsupportedSchemaError } from "./json_schema.ts";

Deno.test("invalidSchemaReason accepts JSON schemas and says what is wrong with others", () => {
  assert.equal(
    invalidSchemaReason({ type: "object", properties: { a: { type: "string" } } }),
    undefined,
  );
  assert.equal(invalidSchemaReason(true), undefined);
  assert.match(invalidSchemaReason({ type: "objekt" }) ?? "", /type/);
  assert.match(invalidSchemaReason({ required: "a" }) ?? "", /required must be array/);
  assert.match(invalidSchemaReason("object") ?? "", /object or a boolean, got string/);
  assert.match(invalidSchemaReason([]) ?? "", /got an array/);
});

Deno.test("grammarSchema rewrites the enforceable subset into node-llama-cpp's shape", () => {
  assert.deepEqual(
    grammarSchema({
      $schema: "https://json-schema.org/draft/2020-12/schema",
      title: "T",
      type: "object",
      properties: {
        a: { anyOf: [{ type: "string", maxLength: 3 }, { type: "null" }], default: null },
        b: { $ref: "#/definitions/B" },
        c: { type: "array", items: { type: ["integer", "null"] }, minItems: 1 },
        d: { type: "string", enum: ["x", "y"] },
      },
      required: ["a"],
      definitions: { B: { type: "boolean", description: "kept out" } },
    }),
    {
      type: "object",
      properties: {
        a: { oneOf: [{ type: "string", maxLength: 3 }, { type: "null" }] },
        b: { $ref: "#/$defs/B" },
        c: { type: "array", items: { type: ["integer", "null"] }, minItems: 1 },
        d: { enum: ["x", "y"] },
      },
      required: ["a"],
      $defs: { B: { type: "boolean" } },
    },
  );
  // JSON schema's default: an object without properties takes any.
  assert.deepEqual(grammarSchema({ type: "object" }), {
    type: "object",
    additionalProperties: true,
  });
});

Deno.test("grammarSchema names what guided decoding cannot enforce and where", () => {
  const cases: [unknown, RegExp, string][] = [
    [{ type: "integer", minimum: 0 }, /`minimum` is not supported/, "/minimum"],
    [
      { type: "object", properties: { z: { type: "string", pattern: "^a" } } },
      /`pattern`/,
      "/properties/z/pattern",
    ],
    [{ type: "string", format: "email" }, /"email" is not supported/, "/format"],
    [{ $ref: "#/$defs/nope" }, /must point to/, "/$ref"],
    [{ description: "no type" }, /must give `type`/, ""],
    [{ type: ["object", "null"] }, /lists may only name/, "/type"],
    [{ type: "array", items: true }, /must be an object/, "/items"],
    ["object", /must be an object/, ""],
  ];
  for (const [schema, message, path] of cases) {
    assert.throws(() => grammarSchema(schema), (err: unknown) => {
      assert.ok(err instanceof UnsupportedSchemaError);
      assert.match(err.message, message);
      assert.equal(err.path, path);
      return true;
    });
  }
  let deep: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < 100; i++) deep = { type: "array", items: deep };
  assert.throws(() => grammarSchema(deep), /nested deeper than 64/);
});
