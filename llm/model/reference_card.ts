// The one model record registerLlm writes (issue 17): the reference's (ai-dynamo 1.6.1) own
// `v1/mdc/...` record, its card built from the model's files as the reference's workers build
// it, with our card in a field the reference ignores (`dynamo_deno`). The reference frontend
// lists and serves the model from it; our frontend reads our card from that field.

import { join } from "node:path";
import { tmpdir } from "node:os";
import { ID_SLOT, withExactId } from "../../runtime/reference/worker.ts";
import {
  type ReferenceCardFile,
  referenceCardFile,
  referenceCardJson,
} from "../../runtime/reference/worker.ts";
import { type ModelDeploymentCard, ModelInput, ModelType } from "../protocols.ts";
import { writeGgufAsHfFolder } from "./gguf_facts.ts";
import type { LoadedModel } from "./model_source.ts";

/** Where a model record names the endpoint and instance that serve it. */
export interface ModelRecordTarget {
  /** The endpoint's namespace. */
  namespace: string;
  /** The endpoint's component. */
  component: string;
  /** The endpoint's name. */
  endpoint: string;
  /** The instance id, lowercase hex (written as the reference's exact u64). */
  instanceId: string;
}

/** Options of {@linkcode referenceCardOf}. */
export interface ReferenceCardOptions {
  /** The worker publishes KV events in the reference's format (`--reference-wire`). */
  kvEvents?: boolean;
  /** Folder for the files a card must name that are not on disk (default: the OS temp dir). */
  filesDir?: string;
}

/** The reference's model type text of our flags ("Chat | Completions"). */
export function referenceModelTypeText(type: ModelType): string {
  const parts: string[] = [];
  if (type & ModelType.Chat) parts.push("Chat");
  if (type & ModelType.Completions) parts.push("Completions");
  if (type & ModelType.Embedding) parts.push("Embedding");
  return parts.join(" | ");
}

const NAMES = [
  ["config", "config.json"],
  ["tokenizer", "tokenizer.json"],
  ["tokenizerConfig", "tokenizer_config.json"],
  ["generationConfig", "generation_config.json"],
] as const;

async function sameBytes(path: string, bytes: Uint8Array): Promise<boolean> {
  let disk: Uint8Array;
  try {
    disk = await Deno.readFile(path);
  } catch {
    return false;
  }
  if (disk.length !== bytes.length) return false;
  for (let i = 0; i < disk.length; i++) if (disk[i] !== bytes[i]) return false;
  return true;
}

/**
 * The folder whose files the reference card names: the model's own folder when it holds the
 * card's files byte for byte; for a GGUF file, its tokenizer and config written as a Hugging
 * Face folder; else the card's files written out. Written folders are content-addressed (by
 * the files' sha256) under `filesDir`, so workers of one model share one and a restart
 * reuses it. Undefined when the model has no tokenizer file (an upstream model's card).
 */
async function cardFolder(
  loaded: LoadedModel,
  card: Pick<ModelDeploymentCard, "files">,
  filesDir: string,
): Promise<string | undefined> {
  if (!loaded.files.has("tokenizer.json")) return undefined;
  const local = loaded.localPath;
  let isDir = false;
  try {
    isDir = (await Deno.stat(local)).isDirectory;
  } catch { /* not on disk (an upstream model) */ }
  if (isDir && (await Deno.stat(join(local, "config.json")).catch(() => undefined))) {
    let same = true;
    for (const [name, bytes] of loaded.files) {
      if (!(await sameBytes(join(local, name), bytes))) {
        same = false;
        break;
      }
    }
    if (same) return local;
  }
  const sums = Object.keys(card.files).sort().map((n) => `${n}:${card.files[n]!.sha256}`);
  const digest = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(sums.join("\n"))),
  );
  const hash = Array.from(digest.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("");
  const dir = join(filesDir, "dynamo-reference-card-files", hash);
  if (await Deno.stat(join(dir, "tokenizer.json")).catch(() => undefined)) return dir;
  // Written next to the final folder, then renamed into place: a reader never sees half.
  await Deno.mkdir(join(filesDir, "dynamo-reference-card-files"), { recursive: true });
  const tmp = await Deno.makeTempDir({ dir: join(filesDir, "dynamo-reference-card-files") });
  try {
    if (/\.gguf$/i.test(local) && !isDir) {
      await writeGgufAsHfFolder(local, tmp);
    } else {
      for (const [name, bytes] of loaded.files) await Deno.writeFile(join(tmp, name), bytes);
    }
    await Deno.rename(tmp, dir).catch(async (err) => {
      // Another worker wrote it first: theirs stays.
      if (!(await Deno.stat(join(dir, "tokenizer.json")).catch(() => undefined))) throw err;
    });
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
  return dir;
}

/**
 * The reference's card (`card_json`) for a model we loaded: the files it names by path,
 * blake3 and size, as the reference's workers write them (see `cardFolder` for where they
 * lie), and our card's name, type, input, context, KV block size, migration limit and parsers.
 * A model with no tokenizer file (an upstream server's model, which takes text) gets a card
 * that names no files.
 *
 * @param loaded the model as loaded (its files and where it came from)
 * @param card our card of it
 * @param options KV events, where files not on disk are written
 * @returns the card JSON
 */
export async function referenceCardOf(
  loaded: LoadedModel,
  card: Omit<ModelDeploymentCard, "mdcsum">,
  options: ReferenceCardOptions = {},
): Promise<Record<string, unknown>> {
  // Best effort: where the files cannot be written out (a read-only temp dir), the reference's
  // card names none; our own card, which our frontend reads, does not depend on it.
  const dir = await cardFolder(loaded, card, options.filesDir ?? tmpdir()).catch(() => undefined);
  const files: Partial<Record<(typeof NAMES)[number][0], ReferenceCardFile>> = {};
  if (dir !== undefined) {
    for (const [field, name] of NAMES) {
      const path = join(dir, name);
      const bytes = await Deno.readFile(path).catch(() => undefined);
      if (bytes) files[field] = await referenceCardFile(path, bytes);
    }
  }
  const runtime = card.runtime_config ?? {};
  return await referenceCardJson({
    displayName: card.display_name,
    sourcePath: dir ?? card.source_path,
    ...files,
    contextLength: card.context_length,
    kvCacheBlockSize: card.kv_cache_block_size,
    migrationLimit: card.migration_limit,
    kvEvents: options.kvEvents,
    modelType: referenceModelTypeText(card.model_type),
    modelInput: card.model_input === ModelInput.Text ? "Text" : "Tokens",
    toolCallParser: runtime.tool_call_parser,
    reasoningParser: runtime.reasoning_parser,
    runtimeData: runtime.runtime_data,
  });
}

/**
 * The model record's JSON: the reference's `Model` record (the u64 instance id exact), its
 * card `cardJson`, and our card in `dynamo_deno`, which the reference ignores.
 *
 * @param target the endpoint and instance serving the model
 * @param cardJson the reference's card ({@linkcode referenceCardOf})
 * @param card our card
 * @returns the JSON text to store under the model card key
 */
export function encodeModelRecord(
  target: ModelRecordTarget,
  cardJson: Record<string, unknown>,
  card: ModelDeploymentCard,
): string {
  const hex = /^[0-9a-f]{1,16}$/.test(target.instanceId);
  const record = {
    type: "Model",
    namespace: target.namespace,
    component: target.component,
    endpoint: target.endpoint,
    instance_id: hex ? ID_SLOT : target.instanceId,
    card_json: cardJson,
    dynamo_deno: card,
  };
  return hex
    ? withExactId(record, BigInt(`0x${target.instanceId}`).toString())
    : JSON.stringify(record);
}

/**
 * Our card in a model record's value: `dynamo_deno` of the reference-shaped record, or the
 * whole value in the earlier records (our plain card). Undefined for a reference worker's
 * record (no card of ours).
 *
 * @param value the record's JSON, parsed
 * @returns our card, if the record holds one
 */
export function ourCardOf(value: unknown): ModelDeploymentCard | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const v = value as Record<string, unknown>;
  if (v.type === "Model" && typeof v.card_json === "object") {
    const ours = v.dynamo_deno;
    return typeof ours === "object" && ours !== null && !Array.isArray(ours)
      ? ours as ModelDeploymentCard
      : undefined;
  }
  return v as unknown as ModelDeploymentCard;
}
