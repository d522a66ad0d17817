// Loads a model deployment card (without its checksum) and the files it names from a model
// folder, a Hugging Face repo or a GGUF file.

import { REASONING_PARSER_NAMES } from "../parsers/reasoning.ts";
import { TOOL_CALL_PARSER_NAMES } from "../parsers/tool_calls.ts";
import { basename, resolve } from "node:path";
import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import { type CardFile, type ModelDeploymentCard, ModelInput, ModelType } from "../protocols.ts";
import {
  chatTemplateOf,
  configContextLength,
  idsOf,
  isPlainObject,
  lengthOf,
  tokenId,
  tokenText,
  trimModelInfo,
  validateModelInput,
  validateModelType,
} from "./card.ts";
import { sha256Hex } from "./card_files.ts";
import {
  downloadGguf,
  downloadRepo,
  type DownloadRepoOptions,
  HuggingFaceNotFoundError,
  parseGgufRef,
  parseRepoRef,
} from "./huggingface.ts";
import { isGgufFile, readGgufMetadata } from "./gguf.ts";
import { ggufModelFacts } from "./gguf_facts.ts";

/** A model path that cannot be loaded: missing, incomplete, or malformed. */
export class ModelSourceError extends DynamoError {
  /** The model path as given. */
  readonly path: string;
  /** Creates the error for a model path. */
  constructor(path: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.path = path;
  }
}

/** Hub settings for model paths that are repo ids (see {@linkcode downloadRepo}). */
export type HuggingFaceOptions = Omit<DownloadRepoOptions, "revision" | "signal">;

/** Options of {@linkcode loadModelSource}. */
export interface LoadModelOptions {
  /** Default `ModelInput.Tokens`. */
  modelInput?: ModelInput;
  /** Default `ModelType.Chat | ModelType.Completions`. */
  modelType?: ModelType;
  /** Name clients use; default the repo id, the folder name, or the GGUF file stem. */
  modelName?: string;
  /** Max tokens per sequence; default the model's own (config.json, tokenizer, GGUF). */
  contextLength?: number;
  /** KV block size in tokens (default 16). */
  kvCacheBlockSize?: number;
  /** Times a request may migrate to another instance (default 0). */
  migrationLimit?: number;
  /** Free-form data for the worker's users (e.g. LoRA settings). */
  userData?: Record<string, unknown>;
  /**
   * The tool-call parser frontends read this model's chat answers with (the card's
   * `runtime_config.tool_call_parser`): hermes, llama3_json, mistral, pythonic, deepseek_v3,
   * deepseek_v3_1.
   */
  toolCallParser?: string;
  /** The reasoning parser of its chat answers (`runtime_config.reasoning_parser`): basic, qwen3, deepseek_r1. */
  reasoningParser?: string;
  /**
   * Engine-specific facts for frontends (the card's `runtime_config.runtime_data`), e.g.
   * `{engine: "llamacpp", guided_decoding: ["json_object", "json_schema"]}`.
   */
  runtimeData?: Record<string, unknown>;
  /** Where and how to download repo ids. */
  huggingFace?: HuggingFaceOptions;
  /** Cancels the load (and its download). */
  signal?: AbortSignal;
}

/** A card ready to be checksummed, and the bytes of the files it names. */
export interface LoadedModel {
  /** The card, without its checksum. */
  card: Omit<ModelDeploymentCard, "mdcsum">;
  /** tokenizer.json, tokenizer_config.json, config.json, generation_config.json, when present. */
  files: Map<string, Uint8Array>;
  /** The folder or GGUF file on disk (the snapshot folder for repo ids). */
  localPath: string;
  /**
   * tokenizer.json and tokenizer_config.json as parsed while loading, so that a tokenizer built
   * next need not parse them again (`Tokenizer.fromJson`; a large vocabulary's tokenizer.json
   * takes ~90 ms to parse). Set for model folders; absent for GGUF files.
   */
  parsed?: { tokenizer?: Record<string, unknown>; tokenizerConfig?: Record<string, unknown> };
}

/** Files of a model folder that a card carries. */
export const CARD_FILES = [
  "config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "generation_config.json",
] as const;
const REQUIRED_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json"];

function checkOptions(o: LoadModelOptions): void {
  const positiveInt = (name: string, v: unknown) => {
    if (v !== undefined && (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1)) {
      throw new InvalidArgumentError(`${name} must be a whole number >= 1, got ${String(v)}`);
    }
  };
  positiveInt("contextLength", o.contextLength);
  positiveInt("kvCacheBlockSize", o.kvCacheBlockSize);
  const m = o.migrationLimit;
  if (m !== undefined && (typeof m !== "number" || !Number.isSafeInteger(m) || m < 0)) {
    throw new InvalidArgumentError(`migrationLimit must be a whole number >= 0, got ${String(m)}`);
  }
  if (o.modelName !== undefined && (typeof o.modelName !== "string" || o.modelName.trim() === "")) {
    throw new InvalidArgumentError(
      `modelName must be a non-empty string, got ${JSON.stringify(o.modelName)}`,
    );
  }
  for (
    const [key, known] of [
      ["toolCallParser", TOOL_CALL_PARSER_NAMES],
      ["reasoningParser", REASONING_PARSER_NAMES],
    ] as const
  ) {
    const name = o[key];
    if (name !== undefined && !known.includes(name)) {
      throw new InvalidArgumentError(
        `${key} must be one of ${known.join(", ")}, got ${JSON.stringify(name)}`,
      );
    }
  }
  const u = o.userData;
  if (u !== undefined) {
    if (u === null || typeof u !== "object" || Array.isArray(u)) {
      throw new InvalidArgumentError(`userData must be an object, got ${JSON.stringify(u)}`);
    }
    try {
      JSON.stringify(u);
    } catch (err) {
      throw new InvalidArgumentError(
        `userData must be JSON-serializable: ${(err as Error).message}`,
      );
    }
  }
}

/**
 * Loads a model's card facts and files from a local folder, a Hugging Face repo id
 * (`org/name`, `hf://org/name`, optionally `@revision`; downloaded into the cache), a
 * `.gguf` file, or one GGUF file of a repo (`hf://org/name[@revision]/file.gguf`). An existing local path wins over a repo id of the same shape.
 *
 * @param modelPath folder, repo id, or GGUF file
 * @param options card settings and Hugging Face download settings
 * @returns the card (without mdcsum), the files' bytes, and the local path
 * @throws {InvalidArgumentError} bad options
 * @throws {ModelSourceError} missing path or files, unreadable JSON, no context length
 * @throws {HuggingFaceError} the download failed
 * @throws {GgufError} a corrupt GGUF file
 *
 * @example
 * ```ts
 * const { card, files } = await loadModelSource("/data/models/Qwen3-0.6B", {});
 * console.log(card.display_name, card.context_length, [...files.keys()]);
 * ```
 */
export async function loadModelSource(
  modelPath: string,
  options: LoadModelOptions = {},
): Promise<LoadedModel> {
  options.signal?.throwIfAborted();
  if (typeof modelPath !== "string" || modelPath === "") {
    throw new InvalidArgumentError(
      `modelPath must be a folder, a Hugging Face repo id or a GGUF file, got ${
        JSON.stringify(modelPath)
      }`,
    );
  }
  validateModelInput(options.modelInput ?? ModelInput.Tokens);
  validateModelType(options.modelType ?? (ModelType.Chat | ModelType.Completions));
  checkOptions(options);

  let stat: Deno.FileInfo | undefined;
  try {
    stat = await Deno.stat(modelPath);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) {
      throw new ModelSourceError(modelPath, `cannot read ${modelPath}: ${(err as Error).message}`, {
        cause: err,
      });
    }
  }
  if (stat?.isDirectory) {
    const dir = resolve(modelPath);
    return await loadFolder(modelPath, dir, basename(dir), dir, options);
  }
  if (stat?.isFile) {
    if (!(await isGgufFile(modelPath))) {
      throw new ModelSourceError(
        modelPath,
        `${modelPath} is a file but not a GGUF model (no GGUF magic); pass a model folder, ` +
          `a Hugging Face repo id or a .gguf file`,
      );
    }
    return await loadGguf(modelPath, options);
  }
  if (parseGgufRef(modelPath)) {
    const path = await downloadGguf(modelPath, { ...options.huggingFace, signal: options.signal });
    return await loadGguf(path, options);
  }
  const ref = parseRepoRef(modelPath);
  if (!ref) {
    throw new ModelSourceError(
      modelPath,
      `no such file or folder: ${modelPath} (and it is not a Hugging Face repo id "org/name")`,
    );
  }
  let dir: string;
  try {
    dir = await downloadRepo(ref.repoId, {
      ...options.huggingFace,
      revision: ref.revision,
      signal: options.signal,
    });
  } catch (err) {
    if (err instanceof HuggingFaceNotFoundError && !modelPath.startsWith("hf://")) {
      throw new ModelSourceError(
        modelPath,
        `${modelPath} is neither a local file or folder nor a Hugging Face repo: ${err.message}`,
        { cause: err },
      );
    }
    throw err;
  }
  const source = ref.revision ? `${ref.repoId}@${ref.revision}` : ref.repoId;
  return await loadFolder(modelPath, dir, ref.repoId, source, options);
}

async function readOptional(path: string): Promise<Uint8Array | undefined> {
  try {
    return await Deno.readFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

function parseJson(modelPath: string, file: string, bytes: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder().decode(bytes));
  } catch (err) {
    throw new ModelSourceError(
      modelPath,
      `${file} is not valid JSON: ${(err as Error).message}`,
      { cause: err },
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new ModelSourceError(modelPath, `${file} must hold a JSON object`);
  }
  return value as Record<string, unknown>;
}

function filesRecord(files: Map<string, Uint8Array>): Record<string, CardFile> {
  const out: Record<string, CardFile> = {};
  for (const [name, bytes] of [...files].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)) {
    out[name] = { sha256: sha256Hex(bytes), bytes: bytes.length };
  }
  return out;
}

function baseCard(
  options: LoadModelOptions,
  displayName: string,
  source: string,
  contextLength: number,
): Omit<ModelDeploymentCard, "mdcsum" | "files" | "eos_token_ids"> {
  const card: Omit<ModelDeploymentCard, "mdcsum" | "files" | "eos_token_ids"> = {
    display_name: options.modelName ?? displayName,
    source_path: source,
    model_type: options.modelType ?? (ModelType.Chat | ModelType.Completions),
    model_input: options.modelInput ?? ModelInput.Tokens,
    context_length: contextLength,
    kv_cache_block_size: options.kvCacheBlockSize ?? 16,
    migration_limit: options.migrationLimit ?? 0,
  };
  if (options.userData !== undefined) {
    card.user_data = JSON.parse(JSON.stringify(options.userData));
  }
  if (options.toolCallParser !== undefined || options.reasoningParser !== undefined) {
    card.runtime_config = {
      ...(options.toolCallParser === undefined ? {} : { tool_call_parser: options.toolCallParser }),
      ...(options.reasoningParser === undefined
        ? {}
        : { reasoning_parser: options.reasoningParser }),
    };
  }
  if (options.runtimeData !== undefined) {
    card.runtime_config = {
      ...card.runtime_config,
      runtime_data: JSON.parse(JSON.stringify(options.runtimeData)),
    };
  }
  return card;
}

async function loadFolder(
  modelPath: string,
  dir: string,
  defaultName: string,
  source: string,
  options: LoadModelOptions,
): Promise<LoadedModel> {
  const files = new Map<string, Uint8Array>();
  for (const name of CARD_FILES) {
    const bytes = await readOptional(`${dir}/${name}`);
    if (bytes) files.set(name, bytes);
  }
  const missing = REQUIRED_FILES.filter((f) => !files.has(f));
  if (missing.length > 0) {
    throw new ModelSourceError(
      modelPath,
      `model folder ${dir} is missing ${missing.join(", ")} ` +
        `(a model folder needs config.json, tokenizer.json and tokenizer_config.json)`,
    );
  }
  const config = parseJson(modelPath, "config.json", files.get("config.json")!);
  const tokenizer = parseJson(modelPath, "tokenizer.json", files.get("tokenizer.json")!);
  const tokConfig = parseJson(
    modelPath,
    "tokenizer_config.json",
    files.get("tokenizer_config.json")!,
  );
  const genBytes = files.get("generation_config.json");
  const genConfig = genBytes ? parseJson(modelPath, "generation_config.json", genBytes) : undefined;

  const contextLength = options.contextLength ?? configContextLength(config) ??
    lengthOf(tokConfig.model_max_length);
  if (contextLength === undefined) {
    throw new ModelSourceError(
      modelPath,
      `cannot tell the context length of ${dir}: config.json has no max_position_embeddings ` +
        `and tokenizer_config.json no model_max_length; pass contextLength`,
    );
  }

  const eosToken = tokenText(tokConfig.eos_token);
  const bosToken = tokenText(tokConfig.bos_token);
  const eos: number[] = [];
  const addIds = (ids: number[]) => {
    for (const id of ids) if (!eos.includes(id)) eos.push(id);
  };
  addIds(idsOf(config.eos_token_id));
  if (isPlainObject(config.text_config)) addIds(idsOf(config.text_config.eos_token_id));
  if (genConfig) addIds(idsOf(genConfig.eos_token_id));
  if (eosToken !== undefined) {
    const id = tokenId(tokenizer, eosToken);
    if (id !== undefined) addIds([id]);
  }

  let chatTemplate = chatTemplateOf(tokConfig);
  if (chatTemplate === undefined) {
    const jinja = await readOptional(`${dir}/chat_template.jinja`);
    if (jinja) chatTemplate = new TextDecoder().decode(jinja);
  }
  if (chatTemplate === undefined) {
    const json = await readOptional(`${dir}/chat_template.json`);
    if (json) chatTemplate = chatTemplateOf(parseJson(modelPath, "chat_template.json", json));
  }

  const card: Omit<ModelDeploymentCard, "mdcsum"> = {
    ...baseCard(options, defaultName, source, contextLength),
    model_info: trimModelInfo(config),
    files: filesRecord(files),
    eos_token_ids: eos,
  };
  if (chatTemplate !== undefined) card.chat_template = chatTemplate;
  if (bosToken !== undefined) card.bos_token = bosToken;
  if (eosToken !== undefined) card.eos_token = eosToken;
  return { card, files, localPath: dir, parsed: { tokenizer, tokenizerConfig: tokConfig } };
}

async function loadGguf(modelPath: string, options: LoadModelOptions): Promise<LoadedModel> {
  const path = resolve(modelPath);
  const { metadata } = await readGgufMetadata(path);
  const facts = ggufModelFacts(path, metadata);
  const contextLength = options.contextLength ?? facts.contextLength;
  if (contextLength === undefined) {
    throw new ModelSourceError(
      modelPath,
      `cannot tell the context length of ${modelPath}: no ${
        facts.architecture ?? "{general.architecture}"
      }.context_length in its metadata; pass contextLength`,
    );
  }
  const encoder = new TextEncoder();
  const files = new Map<string, Uint8Array>();
  if (facts.tokenizerJson) {
    files.set("tokenizer.json", encoder.encode(JSON.stringify(facts.tokenizerJson)));
  }
  files.set(
    "tokenizer_config.json",
    encoder.encode(JSON.stringify(facts.tokenizerConfig, null, 2)),
  );
  const card: Omit<ModelDeploymentCard, "mdcsum"> = {
    ...baseCard(options, facts.displayName, path, contextLength),
    model_info: trimModelInfo(metadata, (k) => k.startsWith("tokenizer.")),
    files: filesRecord(files),
    eos_token_ids: facts.eosTokenIds,
  };
  if (facts.chatTemplate !== undefined) card.chat_template = facts.chatTemplate;
  if (facts.bosToken !== undefined) card.bos_token = facts.bosToken;
  if (facts.eosToken !== undefined) card.eos_token = facts.eosToken;
  return { card, files, localPath: path };
}
