// `POST /v1/embeddings`: the request (validated here, the door for its untrusted body) and the
// response in OpenAI's shape.

import { RequestError } from "./errors.ts";
import { firstNonTokenId } from "./validate.ts";

/** Most inputs in one embedding request (OpenAI's limit). */
export const MAX_EMBEDDING_INPUTS = 2048;

/** A validated `POST /v1/embeddings` body. */
export interface EmbeddingRequest {
  /** Name of the embedding model. */
  model: string;
  /** A text, texts, a token-id list, or token-id lists. */
  input: string | string[] | number[] | number[][];
  /** How vectors are written: JSON numbers (default) or base64 of little-endian float32. */
  encoding_format: "float" | "base64";
  /** The end user (accepted, not used). */
  user?: string;
}

/** One vector of an embedding response. */
export interface EmbeddingObject {
  /** Always "embedding". */
  object: "embedding";
  /** The input's position. */
  index: number;
  /** The vector, or its float32 bytes in base64. */
  embedding: number[] | string;
}

/** The response of `POST /v1/embeddings`. */
export interface EmbeddingResponse {
  /** Always "list". */
  object: "list";
  /** One vector per input, in order. */
  data: EmbeddingObject[];
  /** The model that answered. */
  model: string;
  /** Tokens read. */
  usage: { prompt_tokens: number; total_tokens: number };
}

function bad(param: string, message: string): RequestError {
  return new RequestError(400, message, { param });
}

function describe(v: unknown): string {
  if (Array.isArray(v)) return "an array";
  if (v === null) return "null";
  return typeof v === "string" ? JSON.stringify(v.slice(0, 40)) : typeof v;
}

function tokenList(v: unknown, param: string): number[] {
  if (!Array.isArray(v) || v.length === 0) {
    throw bad(param, `\`${param}\` must be a non-empty array of token ids, got ${describe(v)}`);
  }
  const i = firstNonTokenId(v);
  if (i >= 0) {
    throw bad(param, `\`${param}[${i}]\` must be a token id (an integer >= 0), got ${v[i]}`);
  }
  return v as number[];
}

/**
 * Checks a `POST /v1/embeddings` body. Unknown fields are ignored.
 *
 * @param body the parsed JSON body
 * @returns the typed request (`encoding_format` defaulted to "float")
 * @throws {RequestError} 400 naming the parameter: no model, an empty or malformed input, more
 *   than {@linkcode MAX_EMBEDDING_INPUTS} inputs, an unknown encoding, `dimensions` (not supported)
 * @example
 * ```ts
 * validateEmbeddingRequest({ model: "m", input: ["a", "b"] }).encoding_format; // "float"
 * ```
 */
export function validateEmbeddingRequest(body: unknown): EmbeddingRequest {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new RequestError(400, `the request body must be a JSON object, got ${describe(body)}`);
  }
  const b = body as Record<string, unknown>;
  if (typeof b.model !== "string" || b.model === "") {
    throw bad("model", `\`model\` must be a non-empty string, got ${describe(b.model)}`);
  }
  const input = b.input;
  const shape =
    "`input` must be a string, an array of strings, an array of token ids, or an array of token-id arrays";
  if (input === undefined) throw bad("input", "`input` is required");
  if (typeof input === "string") {
    if (input === "") throw bad("input", "`input` must not be empty");
  } else if (!Array.isArray(input) || input.length === 0) {
    throw bad(
      "input",
      `${shape}, got ${Array.isArray(input) ? "an empty array" : describe(input)}`,
    );
  } else if (input.length > MAX_EMBEDDING_INPUTS) {
    throw bad(
      "input",
      `\`input\` may hold at most ${MAX_EMBEDDING_INPUTS} inputs, got ${input.length}`,
    );
  } else if (typeof input[0] === "string") {
    input.forEach((s, i) => {
      if (typeof s !== "string" || s === "") {
        throw bad(`input[${i}]`, `\`input[${i}]\` must be a non-empty string, got ${describe(s)}`);
      }
    });
  } else if (typeof input[0] === "number") {
    tokenList(input, "input");
  } else if (Array.isArray(input[0])) {
    input.forEach((ids, i) => tokenList(ids, `input[${i}]`));
  } else {
    throw bad("input", `${shape}, got an array of ${describe(input[0])}`);
  }
  const encoding = b.encoding_format ?? "float";
  if (encoding !== "float" && encoding !== "base64") {
    throw bad(
      "encoding_format",
      `\`encoding_format\` must be "float" or "base64", got ${describe(encoding)}`,
    );
  }
  if (b.dimensions !== undefined && b.dimensions !== null) {
    throw bad(
      "dimensions",
      "`dimensions` is not supported: this server returns the model's own vector size",
    );
  }
  if (b.user !== undefined && b.user !== null && typeof b.user !== "string") {
    throw bad("user", `\`user\` must be a string, got ${describe(b.user)}`);
  }
  return {
    model: b.model,
    input: input as EmbeddingRequest["input"],
    encoding_format: encoding,
    ...(typeof b.user === "string" ? { user: b.user } : {}),
  };
}

/**
 * A vector as OpenAI's base64 encoding writes it: its float32 values, little-endian.
 *
 * @param vector the numbers
 * @returns base64 of the float32 bytes
 */
export function embeddingBase64(vector: readonly number[]): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  vector.forEach((x, i) => view.setFloat32(i * 4, x, true));
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}
