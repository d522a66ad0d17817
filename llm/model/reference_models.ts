// Models of reference (ai-dynamo 1.6.1) workers, served by our frontend: their deployment
// records under `v1/mdc/` read as model entries, their cards turned into ours (from the local
// files the card names), and our PreprocessedRequest / LLMEngineOutput translated to theirs.

import { dirname } from "node:path";
import { z } from "zod";
import { DynamoError } from "../../runtime/errors.ts";
import type { ReferenceCodec } from "../../runtime/reference/endpoint_client.ts";
import { ReferenceRecordError } from "../../runtime/reference/errors.ts";
import { parseReferenceModel, type ReferenceModel } from "../../runtime/reference/models.ts";
import {
  type ReferenceEngineOutput,
  type ReferencePreprocessedRequest,
  referenceTokensRequest,
} from "../../runtime/reference/request.ts";
import { REASONING_PARSER_NAMES } from "../parsers/reasoning.ts";
import { TOOL_CALL_PARSER_NAMES } from "../parsers/tool_calls.ts";
import { Preprocessor } from "../preprocess/preprocessor.ts";
import { Tokenizer } from "../preprocess/tokenizer.ts";
import {
  type FinishReason,
  type LLMEngineOutput,
  MODEL_CARD_PREFIX,
  type ModelDeploymentCard,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
} from "../protocols.ts";
import { computeMdcsum } from "./card.ts";
import type { ModelEntryRecord } from "./model_entry.ts";
import { loadModelSource } from "./model_source.ts";

/** How the frontend serves reference workers' models. */
export interface ReferenceWorkersOptions {
  /**
   * Migrations per request for reference models whose card sets fewer (1.6.1 workers publish
   * 0: the reference frontend takes the limit as its own `--migration-limit` flag). Default 0.
   */
  migrationLimit?: number;
  /** Address the workers call home to with their answers (default 127.0.0.1). */
  callHomeHostname?: string;
  /** Deadline to fetch each model file a worker serves by URL (ms, default 30,000). */
  fetchTimeoutMs?: number;
}

const FLAGS: Record<string, number> = {
  Chat: ModelType.Chat,
  Completions: ModelType.Completions,
  Embedding: ModelType.Embedding,
};

/**
 * The reference's model type text ("Chat | Completions") as our flags; flags we do not serve
 * are left out.
 *
 * @param text the card's `model_type`
 * @returns the flags (0 when none is served)
 */
export function referenceModelType(text: string): ModelType {
  let flags = 0;
  for (const part of text.split("|")) flags |= FLAGS[part.trim()] ?? 0;
  return flags;
}

/**
 * True for the value of a reference worker's model record. Ours under `v1/mdc/` are not: the
 * reference-shaped ones carry our card in `dynamo_deno`, the earlier ones are plain cards.
 */
export function isReferenceModelRecord(value: unknown): boolean {
  return typeof value === "object" && value !== null &&
    (value as { type?: unknown }).type === "Model" &&
    typeof (value as { card_json?: unknown }).card_json === "object" &&
    (value as { dynamo_deno?: unknown }).dynamo_deno === undefined;
}

/**
 * A reference model record watched under `v1/mdc/`, as a model entry whose card key is the
 * record's own key. Our own records share the prefix and fail this schema (the watch skips
 * them: our workers are listed once, from their `v1/models/` entries): the earlier plain cards
 * are not model records, the reference-shaped ones carry our card in `dynamo_deno`.
 */
export const referenceModelEntrySchema: z.ZodType<
  ModelEntryRecord,
  { key: string; value: unknown }
> = z.object({ key: z.string().max(4096), value: z.unknown() }).transform(({ key, value }) => {
  const full = MODEL_CARD_PREFIX + key;
  if (typeof value === "object" && value !== null && "dynamo_deno" in value) {
    throw new ReferenceRecordError(full, "a worker of ours (its v1/models entry lists it)");
  }
  const model = parseReferenceModel(full, JSON.stringify(value));
  const input = model.modelInput === "Tokens"
    ? ModelInput.Tokens
    : model.modelInput === "Text"
    ? ModelInput.Text
    : undefined;
  if (input === undefined) {
    throw new ReferenceRecordError(full, `unknown model_input ${JSON.stringify(model.modelInput)}`);
  }
  const type = referenceModelType(model.modelType);
  if (type === 0) {
    throw new ReferenceRecordError(full, `model_type ${model.modelType} serves nothing we serve`);
  }
  return {
    instanceId: model.instanceId,
    entry: {
      name: model.name,
      endpoint: { namespace: model.namespace, component: model.component, name: model.endpoint },
      model_type: type,
      model_input: input,
      card_key: full,
      mdcsum: "",
    },
  };
});

/** Where the reference card names each file our loader reads (section, field, our name). */
const CARD_FILES = [
  ["tokenizer", "hf_tokenizer_json", "tokenizer.json"],
  ["prompt_formatter", "hf_tokenizer_config_json", "tokenizer_config.json"],
  ["model_info", "hf_config_json", "config.json"],
  ["gen_config", "hf_generation_config_json", "generation_config.json"],
] as const;

/** Largest file fetched from a worker (the tokenizer of a big vocabulary is tens of MB). */
const MAX_FETCHED_FILE = 64 * 1024 * 1024;

function fileOf(card: Record<string, unknown>, section: string, field: string) {
  const s = card[section] as Record<string, unknown> | null | undefined;
  const f = typeof s === "object" && s !== null ? s[field] : undefined;
  if (typeof f !== "object" || f === null) return undefined;
  const { path, size } = f as { path?: unknown; size?: unknown };
  if (typeof path !== "string" || path.length === 0) return undefined;
  return { path, size: Number.isSafeInteger(size) ? size as number : undefined };
}

/**
 * A worker that runs its system server names its files by URL (`/v1/metadata/...` on that
 * server): they are fetched into a temporary folder, each within a deadline and its card size.
 */
async function fetchCardFiles(
  name: string,
  files: { path: string; size: number | undefined; as: string }[],
  timeoutMs: number,
): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dynamo-reference-card-" });
  try {
    for (const f of files) {
      const res = await fetch(f.path, { signal: AbortSignal.timeout(timeoutMs) }).catch((err) => {
        throw new DynamoError(`reference model ${name}: cannot fetch ${f.path}: ${err.message}`);
      });
      if (!res.ok) {
        await res.body?.cancel();
        throw new DynamoError(`reference model ${name}: ${f.path} answered ${res.status}`);
      }
      const bytes = new Uint8Array(await res.arrayBuffer());
      if (bytes.length > MAX_FETCHED_FILE || (f.size !== undefined && bytes.length !== f.size)) {
        throw new DynamoError(
          `reference model ${name}: ${f.path} is ${bytes.length} bytes, its card says ${f.size}`,
        );
      }
      await Deno.writeFile(`${dir}/${f.as}`, bytes);
    }
    return dir;
  } catch (err) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
}

/**
 * Our card, tokenizer and preprocessor for a reference model. The reference card names its
 * tokenizer files by URL when the worker runs its system server (they are fetched; their size
 * is checked, their blake3 checksum is not), else by path on the worker's machine (they are
 * read from there: this frontend must then see the same folder).
 *
 * @param key the record's etcd key
 * @param value the record's JSON text
 * @param options the migration limit to apply
 * @returns the card, tokenizer and preprocessor (the loader's ModelPipeline)
 * @throws {ReferenceRecordError} a record that is not a reference model record
 * @throws {DynamoError} the files the card names cannot be read here
 */
export async function loadReferencePipeline(
  key: string,
  value: string,
  options: ReferenceWorkersOptions = {},
): Promise<{ card: ModelDeploymentCard; tokenizer: Tokenizer; preprocessor: Preprocessor }> {
  const model: ReferenceModel = parseReferenceModel(key, value);
  const c = model.card;
  const named = CARD_FILES.flatMap(([section, field, as]) => {
    const f = fileOf(c, section, field);
    return f ? [{ ...f, as }] : [];
  });
  const tokenizerJson = named.find((f) => f.as === "tokenizer.json");
  const remote = named.filter((f) => /^https?:\/\//.test(f.path));
  const source = typeof c.source_path === "string" ? c.source_path : undefined;
  let dir = tokenizerJson !== undefined ? dirname(tokenizerJson.path) : source;
  if (dir === undefined) {
    throw new DynamoError(
      `reference model ${model.name} (${key}): its card names no tokenizer file or source path`,
    );
  }
  let fetched: string | undefined;
  if (remote.length > 0) {
    fetched = dir = await fetchCardFiles(model.name, remote, options.fetchTimeoutMs ?? 30_000);
  }
  const parser = (v: unknown, known: readonly string[]) =>
    typeof v === "string" && known.includes(v) ? v : undefined;
  const runtime = (c.runtime_config ?? {}) as Record<string, unknown>;
  const contextLength = Number.isInteger(c.context_length) && (c.context_length as number) > 0
    ? c.context_length as number
    : undefined;
  const cardLimit = Number.isInteger(c.migration_limit) ? c.migration_limit as number : 0;
  let loaded;
  try {
    loaded = await loadModelSource(dir, {
      modelName: model.name,
      modelType: referenceModelType(model.modelType),
      kvCacheBlockSize: model.kvCacheBlockSize,
      migrationLimit: Math.max(0, cardLimit, options.migrationLimit ?? 0),
      contextLength,
      toolCallParser: parser(runtime.tool_call_parser, TOOL_CALL_PARSER_NAMES),
      reasoningParser: parser(runtime.reasoning_parser, REASONING_PARSER_NAMES),
    });
  } catch (err) {
    throw new DynamoError(
      `reference model ${model.name} (${key}): cannot read the model files its card names ` +
        `(${dir}); the frontend must see the worker's model folder, or the worker must serve ` +
        `them (its system server, DYN_SYSTEM_PORT): ${(err as Error).message}`,
      { cause: err },
    );
  } finally {
    if (fetched !== undefined) await Deno.remove(fetched, { recursive: true }).catch(() => {});
  }
  const card = { ...loaded.card, mdcsum: computeMdcsum(loaded.card) };
  // The JSON loading parsed, when it did (parsing it again took as long as building the card).
  const parsed = loaded.parsed;
  const tokenizer = parsed?.tokenizer !== undefined
    ? Tokenizer.fromJson(parsed.tokenizer, parsed.tokenizerConfig ?? {})
    : Tokenizer.fromBytes(
      loaded.files.get("tokenizer.json")!,
      loaded.files.get("tokenizer_config.json"),
    );
  return { card, tokenizer, preprocessor: new Preprocessor({ card, tokenizer }) };
}

const FINISH: Record<string, FinishReason> = {
  stop: "stop",
  length: "length",
  eos: "eos",
  cancelled: "cancelled",
  content_filter: "content_filter",
  error: "error",
};

/**
 * Our PreprocessedRequest as the reference's: every field the reference frontend sends, ours
 * filled in where both have them.
 *
 * @param request our request (from the preprocess stage)
 * @returns the reference request (its `token_ids` is the request's own array)
 */
export function toReferenceRequest(request: PreprocessedRequest): ReferencePreprocessedRequest {
  const stop = request.stop_conditions;
  const s = request.sampling_options;
  const out = referenceTokensRequest({
    model: request.model,
    tokenIds: [],
    maxTokens: stop.max_tokens ?? 0,
    eosTokenIds: request.eos_token_ids,
    ignoreEos: stop.ignore_eos,
    temperature: s.temperature,
  });
  // Our request's ids themselves, not a copy: the wire request is encoded at once and dropped.
  out.token_ids = request.token_ids;
  out.stop_conditions.max_tokens = stop.max_tokens ?? null;
  if (stop.stop_token_ids_hidden !== undefined) {
    out.stop_conditions.stop_token_ids_hidden = [...stop.stop_token_ids_hidden];
  }
  out.stop_conditions.min_tokens = stop.min_tokens ?? null;
  for (
    const f of [
      "n",
      "top_p",
      "top_k",
      "min_p",
      "presence_penalty",
      "frequency_penalty",
      "repetition_penalty",
      "seed",
    ] as const
  ) {
    if (s[f] !== undefined) out.sampling_options[f] = s[f];
  }
  const logprobs = request.output_options?.logprobs;
  if (typeof logprobs === "number") out.output_options.logprobs = logprobs;
  // mdc_sum stays null: ours is a checksum of our card, not of the reference's.
  return out;
}

/**
 * A reference output as ours: tokens, finish reason (unknown reasons read as "error"), log
 * probabilities when sent, and the prompt tokens its prefix cache served (from its usage).
 *
 * @param out one LLMEngineOutput of a reference worker
 * @returns our output
 */
export function fromReferenceOutput(out: ReferenceEngineOutput): LLMEngineOutput {
  const mapped: LLMEngineOutput = { token_ids: out.token_ids };
  if (out.finish_reason !== null) mapped.finish_reason = FINISH[out.finish_reason] ?? "error";
  if (typeof out.text === "string" && out.text !== "") mapped.text = out.text;
  if (Array.isArray(out.log_probs)) mapped.log_probs = out.log_probs as number[];
  // The worker's prefix-cache hits, for the answer's usage.prompt_tokens_details.cached_tokens.
  const details = (out.completion_usage as { prompt_tokens_details?: { cached_tokens?: unknown } })
    ?.prompt_tokens_details;
  const cached = details?.cached_tokens;
  if (typeof cached === "number" && Number.isInteger(cached) && cached >= 0) {
    mapped.cached_tokens = cached;
  }
  return mapped;
}

/** The codec our route stage sends reference workers with. */
export const REFERENCE_LLM_CODEC: ReferenceCodec<LLMEngineOutput> = {
  toRequest(request: unknown): ReferencePreprocessedRequest {
    const r = request as PreprocessedRequest;
    if (
      typeof r !== "object" || r === null || !Array.isArray(r.token_ids) ||
      typeof r.stop_conditions !== "object"
    ) {
      throw new DynamoError("a reference worker takes a preprocessed tokens request");
    }
    return toReferenceRequest(r);
  },
  fromOutput: fromReferenceOutput,
  isLast: (item) => item.finish_reason !== undefined && item.finish_reason !== null,
};
