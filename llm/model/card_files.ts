// Card files in the object store: content-addressed names, and fetching them back with
// their hashes checked.

import { createHash } from "node:crypto";
import { DynamoError } from "../../runtime/errors.ts";
import type { ObjectStore } from "../../runtime/objects/mod.ts";
import type { ModelDeploymentCard } from "../protocols.ts";

/** A card's file is missing from the object store, or its bytes do not match the card. */
export class CardFileError extends DynamoError {
  /** File name in the card ("tokenizer.json", ...). */
  readonly file: string;
  /** sha256 (hex) the card gives for the file. */
  readonly sha256: string;
  /** Creates the error for one file of a card. */
  constructor(file: string, sha256: string, message: string) {
    super(message);
    this.file = file;
    this.sha256 = sha256;
  }
}

/** Object-store name of a card file. */
export function cardObjectName(sha256: string): string {
  return `sha256/${sha256}`;
}

/** sha256 of bytes, lowercase hex. */
export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** Options of {@linkcode fetchCardFiles}. */
export interface FetchCardFilesOptions {
  /** Only these files (default all the card names). */
  only?: string[];
  /** Stops the fetches. */
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
 * ```ts ignore
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
