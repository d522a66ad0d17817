// Model deployment card facts: checks of its model input and type, what it reads from
// config.json and tokenizer files, and its checksum (mdcsum).

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { type ModelDeploymentCard, ModelInput, ModelType } from "../protocols.ts";
import { sha256Hex } from "./card_files.ts";

// Kept here for importers that know the card files by this module.

/**
 * Checks a model input value.
 * @throws {InvalidArgumentError} not one of ModelInput's values
 */
export function validateModelInput(value: unknown): ModelInput {
  const allowed = Object.values(ModelInput) as unknown[];
  if (!allowed.includes(value)) {
    throw new InvalidArgumentError(
      `modelInput must be ModelInput.Tokens or ModelInput.Text (${
        allowed.map((v) => JSON.stringify(v)).join(" or ")
      }), got ${JSON.stringify(value)}`,
    );
  }
  return value as ModelInput;
}

const ALL_TYPE_BITS = Object.values(ModelType).reduce((a, b) => a | b, 0);

/**
 * Checks a model type: a non-zero combination of ModelType flags.
 * @throws {InvalidArgumentError} anything else
 */
export function validateModelType(value: unknown): ModelType {
  if (
    typeof value !== "number" || !Number.isInteger(value) || value <= 0 ||
    (value & ~ALL_TYPE_BITS) !== 0
  ) {
    throw new InvalidArgumentError(
      `modelType must be ModelType.Chat, .Completions, .Embedding, .Backend or a combination ` +
        `with "|", got ${typeof value === "number" ? value : JSON.stringify(value)}`,
    );
  }
  return value;
}

/** Whether a parsed JSON value is an object (not an array or null). */
export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** A usable length: a positive safe integer (tokenizers write 1e30 to mean "none"). */
export function lengthOf(v: unknown): number | undefined {
  return typeof v === "number" && Number.isSafeInteger(v) && v > 0 && v < 2 ** 32 ? v : undefined;
}

/** The context length config.json declares, under the names models use for it. */
export function configContextLength(config: Record<string, unknown>): number | undefined {
  for (const k of ["max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"]) {
    const v = lengthOf(config[k]);
    if (v !== undefined) return v;
  }
  const text = config.text_config;
  return isPlainObject(text) ? lengthOf(text.max_position_embeddings) : undefined;
}

/** A special token as tokenizer_config.json writes it: a string or `{content}`. */
export function tokenText(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (isPlainObject(v) && typeof v.content === "string") return v.content;
  return undefined;
}

/** Token id of `token` in a tokenizer.json: its added tokens first, then its vocab. */
export function tokenId(tokenizer: Record<string, unknown>, token: string): number | undefined {
  const added = tokenizer.added_tokens;
  if (Array.isArray(added)) {
    for (const t of added) {
      if (isPlainObject(t) && t.content === token && typeof t.id === "number") return t.id;
    }
  }
  const model = tokenizer.model;
  if (isPlainObject(model)) {
    const vocab = model.vocab;
    if (isPlainObject(vocab) && Object.hasOwn(vocab, token) && typeof vocab[token] === "number") {
      return vocab[token];
    }
    if (Array.isArray(vocab)) { // Unigram: [[piece, score], ...], the index is the id
      const i = vocab.findIndex((e) => Array.isArray(e) && e[0] === token);
      if (i >= 0) return i;
    }
  }
  return undefined;
}

/** The valid token ids of a config value: one id or a list of them. */
export function idsOf(v: unknown): number[] {
  const list = Array.isArray(v) ? v : [v];
  return list.filter((x): x is number =>
    typeof x === "number" && Number.isSafeInteger(x) && x >= 0
  );
}

/** The chat template of tokenizer_config.json: a string, or the "default" of a named list. */
export function chatTemplateOf(tokenizerConfig: Record<string, unknown>): string | undefined {
  const t = tokenizerConfig.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const d = t.find((e) => isPlainObject(e) && e.name === "default");
    if (d && typeof d.template === "string") return d.template;
  }
  return undefined;
}

/**
 * config.json (or GGUF metadata) reduced to what is small: scalars, short strings, short
 * arrays of scalars, and small nested objects.
 */
export function trimModelInfo(
  info: Record<string, unknown>,
  skip: (key: string) => boolean = () => false,
  depth = 0,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const scalar = (v: unknown): unknown => {
    if (v === null || typeof v === "boolean") return v;
    if (typeof v === "number") return Number.isFinite(v) ? v : undefined;
    if (typeof v === "bigint") {
      return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)
        ? Number(v)
        : v.toString();
    }
    if (typeof v === "string") return v.length <= 1024 ? v : undefined;
    return undefined;
  };
  for (const [k, v] of Object.entries(info)) {
    if (skip(k)) continue;
    let kept: unknown;
    if (Array.isArray(v)) {
      if (v.length <= 64) {
        const items = v.map(scalar);
        if (items.every((x, i) => x !== undefined || v[i] === undefined)) kept = items;
      }
    } else if (isPlainObject(v)) {
      if (depth < 2) {
        const nested = trimModelInfo(v, () => false, depth + 1);
        if (Object.keys(nested).length > 0) kept = nested;
      }
    } else {
      kept = scalar(v);
    }
    if (kept !== undefined) {
      Object.defineProperty(out, k, {
        value: kept,
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return out;
}

/** JSON with object keys sorted at every level and undefined members left out. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v) => {
    if (isPlainObject(v)) {
      const sorted: Record<string, unknown> = {};
      for (const k of Object.keys(v).sort()) {
        Object.defineProperty(sorted, k, {
          value: v[k],
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return sorted;
    }
    return v;
  });
}

/**
 * The card's checksum: sha256 (hex) of its canonical JSON without `mdcsum`. Equal cards
 * have equal sums, whatever the order of their keys.
 *
 * @example
 * ```ts
 * import { builtinTestModel, computeMdcsum, loadModelSource } from "../../mod.ts";
 * const loaded = await loadModelSource(await builtinTestModel());
 * const mdcsum = computeMdcsum(loaded.card);
 * ```
 */
export function computeMdcsum(
  card: Omit<ModelDeploymentCard, "mdcsum"> | ModelDeploymentCard,
): string {
  const { mdcsum: _, ...rest } = card as ModelDeploymentCard;
  return sha256Hex(canonicalJson(rest));
}
