// Blobs on the hub: the hub keeps them in memory for every process that connects.

import type { ObjectStore } from "../objects/types.ts";
import type { HubConnection } from "./connection.ts";

/** Deadline of one blob transfer in ms: blobs (tokenizer files) may be tens of MiB. */
const BLOB_TIMEOUT_MS = 60_000;

/**
 * An {@linkcode ObjectStore} kept by the hub. Uses the connection without holding a
 * reference: it lives as long as the runtime's discovery and request plane.
 *
 * @example
 * ```ts
 * const objects = new HubObjectStore(hub);
 * await objects.put("sha256/abc:tokenizer.json", bytes);
 * ```
 */
export class HubObjectStore implements ObjectStore {
  readonly kind = "hub";
  readonly #hub: HubConnection;

  constructor(hub: HubConnection) {
    this.#hub = hub;
  }

  async put(name: string, data: Uint8Array): Promise<void> {
    await this.#hub.call({ op: "oput", name }, data, { timeoutMs: BLOB_TIMEOUT_MS });
  }

  async get(name: string): Promise<Uint8Array | undefined> {
    const { msg, bytes } = await this.#hub.call({ op: "oget", name }, undefined, {
      timeoutMs: BLOB_TIMEOUT_MS,
    });
    return msg.found === true ? bytes.slice() : undefined;
  }

  async has(name: string): Promise<boolean> {
    const { msg } = await this.#hub.call({ op: "ohas", name });
    return msg.found === true;
  }
}
