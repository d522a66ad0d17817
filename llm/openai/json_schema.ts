// JSON schemas of structured output (`response_format`): whether a schema is a valid JSON schema
// at all (ajv's meta-schema check), and the subset that grammar-guided decoding enforces (the
// schema shapes node-llama-cpp turns into a grammar), rewritten into that library's shape.

import { Ajv } from "ajv";

/** A schema keyword (or shape) that guided decoding cannot enforce; `path` says where it is. */
export class UnsupportedSchemaError extends Error {
  /** The error's class name. */
  override name = "UnsupportedSchemaError";
  /** JSON-pointer-like path of the offending part, e.g. `/properties/age/minimum`. */
  readonly path: string;

  /**
   * @param path where in the schema
   * @param message what is not supported there
   */
  constructor(path: string, message: string) {
    super(`${message} (at ${path === "" ? "the schema's root" : path})`);
    this.path = path;
  }
}

let ajv: Ajv | undefined;

/**
 * Checks `schema` against the JSON-schema meta-schema (draft 7; `$defs` and `prefixItems` of
 * later drafts pass as keywords). Nothing is compiled: an untrusted schema runs no code.
 *
 * @param schema the schema a request gave
 * @returns why the schema is invalid, or undefined when it is valid
 * @example
 * ```ts
 * invalidSchemaReason({ type: "objekt" }); // "data/type must be equal to one of the allowed values, ..."
 * ```
 */
export function invalidSchemaReason(schema: unknown): string | undefined {
  if (
    typeof schema !== "boolean" &&
    (typeof schema !== "object" || schema === null || Array.isArray(schema))
  ) {
    return `a schema must be an object or a boolean, got ${
      Array.isArray(schema) ? "an array" : typeof schema
    }`;
  }
  ajv ??= new Ajv({ strict: false, validateSchema: true });
  // validateSchema returns a boolean for a synchronous meta-schema.
  if (ajv.validateSchema(schema as object) === true) return undefined;
  return ajv.errorsText(ajv.errors, { dataVar: "schema" });
}

/** Keywords that only describe: dropped before the grammar is built. */
const ANNOTATIONS = new Set([
  "title",
  "description",
  "$schema",
  "$id",
  "$comment",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
]);
const SCALAR_TYPES = new Set(["string", "number", "integer", "boolean", "null"]);
const STRING_FORMATS = new Set(["date-time", "time", "date"]);
const MAX_DEPTH = 64;

type Schema = Record<string, unknown>;

/**
 * Rewrites a JSON schema into the subset grammar-guided decoding enforces (node-llama-cpp's
 * `GbnfJsonSchema`): `type` (scalar types may be a list), `const`, `enum`, `anyOf`/`oneOf`,
 * `properties`, `required`, `additionalProperties`, `minProperties`, `maxProperties`, `items`,
 * `prefixItems`, `minItems`, `maxItems`, string `minLength`/`maxLength`/`format` (date-time,
 * time, date), and `$ref` to `#/$defs/NAME` (or `#/definitions/NAME`). Annotations (title,
 * description, default, ...) are dropped. An object schema without `properties` allows any
 * properties (JSON schema's default; the library's default would allow none).
 *
 * @param schema a valid JSON schema (see {@linkcode invalidSchemaReason})
 * @returns the schema in the library's shape
 * @throws {UnsupportedSchemaError} a keyword or shape outside the subset, naming where
 * @example
 * ```ts
 * grammarSchema({ type: "object", title: "P", properties: { n: { type: "integer" } } });
 * // { type: "object", properties: { n: { type: "integer" } } }
 * ```
 */
export function grammarSchema(schema: unknown): Record<string, unknown> {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    throw new UnsupportedSchemaError("", "the schema must be an object");
  }
  const root = schema as Schema;
  const defs = { ...asRecord(root.definitions), ...asRecord(root.$defs) };
  const out = convert(root, "", 0, defs);
  const names = Object.keys(defs);
  if (names.length > 0) {
    const converted: Schema = {};
    for (const name of names) {
      converted[name] = convert(defs[name], `/$defs/${name}`, 1, defs);
    }
    out.$defs = converted;
  }
  return out;
}

function asRecord(v: unknown): Schema {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v as Schema : {};
}

function convert(node: unknown, path: string, depth: number, defs: Schema): Schema {
  if (depth > MAX_DEPTH) {
    throw new UnsupportedSchemaError(path, `schemas nested deeper than ${MAX_DEPTH} levels`);
  }
  if (typeof node !== "object" || node === null || Array.isArray(node)) {
    throw new UnsupportedSchemaError(
      path,
      `a sub-schema must be an object (true/false schemas are not supported)`,
    );
  }
  const s = node as Schema;
  const unsupported = (key: string, why = "is not supported by guided decoding") =>
    new UnsupportedSchemaError(`${path}/${key}`, `\`${key}\` ${why}`);
  const sub = (v: unknown, key: string) => convert(v, `${path}/${key}`, depth + 1, defs);
  const out: Schema = {};
  const handled = new Set<string>();
  const take = (key: string) => {
    handled.add(key);
    return s[key];
  };
  if (s.$ref !== undefined) {
    const ref = take("$ref");
    const m = typeof ref === "string" ? /^#\/(?:\$defs|definitions)\/([^/]+)$/.exec(ref) : null;
    if (m === null || !(m[1]! in defs)) {
      throw unsupported("$ref", `must point to \`#/$defs/NAME\` of the root schema, got ${ref}`);
    }
    out.$ref = `#/$defs/${m[1]}`;
  } else if (s.const !== undefined) {
    const c = take("const");
    if (c !== null && typeof c === "object") throw unsupported("const", "must be a scalar");
    out.const = c;
    handled.add("type");
  } else if (s.enum !== undefined) {
    const e = take("enum");
    if (!Array.isArray(e) || e.some((v) => v !== null && typeof v === "object")) {
      throw unsupported("enum", "must list scalars");
    }
    out.enum = e;
    handled.add("type");
  } else if (s.anyOf !== undefined || s.oneOf !== undefined) {
    const key = s.anyOf !== undefined ? "anyOf" : "oneOf";
    const list = take(key);
    if (!Array.isArray(list) || list.length === 0) {
      throw unsupported(key, "must be a non-empty list");
    }
    out.oneOf = list.map((v, i) => convert(v, `${path}/${key}/${i}`, depth + 1, defs));
  } else {
    const type = take("type");
    if (Array.isArray(type)) {
      if (type.length === 0 || type.some((t) => !SCALAR_TYPES.has(t))) {
        throw unsupported("type", "lists may only name string, number, integer, boolean, null");
      }
      out.type = type;
    } else if (type === "object") {
      out.type = "object";
      const props = take("properties");
      if (props !== undefined) {
        const converted: Schema = {};
        for (const [k, v] of Object.entries(asRecord(props))) {
          converted[k] = convert(v, `${path}/properties/${k}`, depth + 1, defs);
        }
        out.properties = converted;
      }
      const required = take("required");
      if (required !== undefined) out.required = required;
      const extra = take("additionalProperties");
      if (typeof extra === "boolean") out.additionalProperties = extra;
      else if (extra !== undefined) out.additionalProperties = sub(extra, "additionalProperties");
      else if (props === undefined) out.additionalProperties = true;
      for (const k of ["minProperties", "maxProperties"]) {
        if (s[k] !== undefined) out[k] = take(k);
      }
    } else if (type === "array") {
      out.type = "array";
      if (s.items !== undefined) out.items = sub(take("items"), "items");
      if (s.prefixItems !== undefined) {
        const list = take("prefixItems");
        if (!Array.isArray(list)) throw unsupported("prefixItems", "must be a list");
        out.prefixItems = list.map((v, i) =>
          convert(v, `${path}/prefixItems/${i}`, depth + 1, defs)
        );
      }
      for (const k of ["minItems", "maxItems"]) if (s[k] !== undefined) out[k] = take(k);
    } else if (type === "string") {
      out.type = "string";
      const format = take("format");
      if (format !== undefined) {
        if (typeof format !== "string" || !STRING_FORMATS.has(format)) {
          throw unsupported(
            "format",
            `${JSON.stringify(format)} is not supported (date-time, time, date are)`,
          );
        }
        out.format = format;
      } else {
        for (const k of ["minLength", "maxLength"]) if (s[k] !== undefined) out[k] = take(k);
      }
    } else if (typeof type === "string" && SCALAR_TYPES.has(type)) {
      out.type = type;
    } else if (type === undefined) {
      throw new UnsupportedSchemaError(
        path,
        "a schema must give `type`, `const`, `enum`, `anyOf` or `$ref`",
      );
    } else {
      throw unsupported("type", `${JSON.stringify(type)} is not a JSON schema type`);
    }
  }
  for (const key of Object.keys(s)) {
    if (handled.has(key) || ANNOTATIONS.has(key)) continue;
    // Definitions are converted once, from the root.
    if ((key === "$defs" || key === "definitions") && path === "") continue;
    throw unsupported(key);
  }
  return out;
}
