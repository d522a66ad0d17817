// Blobs in a Map, shared by the runtimes of one embedded cluster.

import type { ObjectStore } from "./types.ts";

/** An in-process {@linkcode ObjectStore}. */
export class MemoryObjectStore implements ObjectStore {
  readonly kind = "memory";
  readonly #blobs = new Map<string, Uint8Array>();

  put(name: string, data: Uint8Array): Promise<void> {
    this.#blobs.set(name, data.slice());
    return Promise.resolve();
  }

  get(name: string): Promise<Uint8Array | undefined> {
    return Promise.resolve(this.#blobs.get(name)?.slice());
  }

  has(name: string): Promise<boolean> {
    return Promise.resolve(this.#blobs.has(name));
  }
}
