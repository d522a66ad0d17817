// Builds model deployment cards from a model folder, a Hugging Face repo or a GGUF file,
// checksums them, and fetches their content-addressed files back from the object store.

import { basename, resolve } from "node:path";
import { createHash } from "node:crypto";
import { DynamoError, InvalidArgumentError } from "../../runtime/errors.ts";
import type { ObjectStore } from "../../runtime/objects/mod.ts";
import { type CardFile, type ModelDeploymentCard, ModelInput, ModelType } from "../protocols.ts";
import {
  downloadRepo,
  type DownloadRepoOptions,
  HuggingFaceNotFoundError,
  parseRepoRef,
} from "./huggingface.ts";
import { ggufModelFacts, isGgufFile, readGgufMetadata } from "./gguf.ts";

/** A model path that cannot be loaded: missing, incomplete, or malformed. */
export class ModelSourceError extends DynamoError {
  /** The model path as given. */
  readonly path: string;
  constructor(path: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.path = path;
  }
}

/** A card's file is missing from the object store, or its bytes do not match the card. */
export class CardFileError extends DynamoError {
  /** File name in the card ("tokenizer.json", ...). */
  readonly file: string;
  readonly sha256: string;
  constructor(file: string, sha256: string, message: string) {
    super(message);
    this.file = file;
    this.sha256 = sha256;
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
  /** Where and how to download repo ids. */
  huggingFace?: HuggingFaceOptions;
  signal?: AbortSignal;
}

/** A card ready to be checksummed, and the bytes of the files it names. */
export interface LoadedModel {
  card: Omit<ModelDeploymentCard, "mdcsum">;
  /** tokenizer.json, tokenizer_config.json, config.json, generation_config.json, when present. */
  files: Map<string, Uint8Array>;
  /** The folder or GGUF file on disk (the snapshot folder for repo ids). */
  localPath: string;
}

/** Files of a model folder that a card carries. */
export const CARD_FILES = [
  "config.json",
  "tokenizer.json",
  "tokenizer_config.json",
  "generation_config.json",
] as const;
const REQUIRED_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json"];

/** Object-store name of a card file. */
export function cardObjectName(sha256: string): string {
  return `sha256/${sha256}`;
}

/** sha256 of bytes, lowercase hex. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

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
 * (`org/name`, `hf://org/name`, optionally `@revision`; downloaded into the cache), or a
 * `.gguf` file. An existing local path wins over a repo id of the same shape.
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

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

/** A usable length: a positive safe integer (tokenizers write 1e30 to mean "none"). */
function lengthOf(v: unknown): number | undefined {
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
function tokenText(v: unknown): string | undefined {
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

function idsOf(v: unknown): number[] {
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
  return { card, files, localPath: dir };
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
 * const mdcsum = computeMdcsum(loaded.card);
 * ```
 */
export function computeMdcsum(
  card: Omit<ModelDeploymentCard, "mdcsum"> | ModelDeploymentCard,
): string {
  const { mdcsum: _, ...rest } = card as ModelDeploymentCard;
  return sha256Hex(canonicalJson(rest));
}

/** Options of {@linkcode fetchCardFiles}. */
export interface FetchCardFilesOptions {
  /** Only these files (default all the card names). */
  only?: string[];
  signal?: AbortSignal;
}

/**
 * Fetches a card's files from the object store (`sha256/{hash}`) and checks their hashes.
 * For frontends, which build tokenizers from them.
 *
 * @param objects the runtime's object store (`runtime.objects`)
 * @param card a card read from discovery
 * @returns file name to bytes
 * @throws {CardFileError} a file is missing from the store or its bytes do not match
 *
 * @example
 * ```ts
 * const files = await fetchCardFiles(runtime.objects, card);
 * const tokenizer = JSON.parse(new TextDecoder().decode(files.get("tokenizer.json")));
 * ```
 */
export async function fetchCardFiles(
  objects: ObjectStore,
  card: Pick<ModelDeploymentCard, "display_name" | "files">,
  options: FetchCardFilesOptions = {},
): Promise<Map<string, Uint8Array>> {
  const out = new Map<string, Uint8Array>();
  const entries = Object.entries(card.files ?? {}).filter(([name]) =>
    options.only === undefined || options.only.includes(name)
  );
  await Promise.all(entries.map(async ([name, file]) => {
    options.signal?.throwIfAborted();
    const bytes = await objects.get(cardObjectName(file.sha256));
    if (bytes === undefined) {
      throw new CardFileError(
        name,
        file.sha256,
        `${name} (sha256 ${file.sha256}) of model "${card.display_name}" is not in the ` +
          `${objects.kind} object store; the worker that registered it must upload it first`,
      );
    }
    const actual = sha256Hex(bytes);
    if (actual !== file.sha256 || bytes.length !== file.bytes) {
      throw new CardFileError(
        name,
        file.sha256,
        `${name} of model "${card.display_name}" is corrupt in the ${objects.kind} object ` +
          `store: sha256 ${actual} (${bytes.length} bytes), expected ${file.sha256} ` +
          `(${file.bytes} bytes)`,
      );
    }
    out.set(name, bytes);
  }));
  return out;
}
