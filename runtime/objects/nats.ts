// Blobs in a NATS JetStream object-store bucket (the server needs JetStream: `-js`).

import type { ObjectStore as JsObjectStore } from "nats";
import type { NatsConnection } from "../nats_connection.ts";
import { DynamoError } from "../errors.ts";
import type { ObjectStore } from "./types.ts";

/** Object names may hold only what NATS subjects allow; anything else is hex-escaped. */
function safeName(name: string): string {
  return name.replace(
    /[^A-Za-z0-9_.-]/g,
    (c) => `=${c.charCodeAt(0).toString(16).padStart(2, "0")}`,
  );
}

/** An {@linkcode ObjectStore} on a JetStream object-store bucket. */
export class NatsObjectStore implements ObjectStore {
  readonly kind = "nats";
  readonly #nc: NatsConnection;
  readonly #bucket: string;
  #store: Promise<JsObjectStore> | undefined;

  /**
   * Creates a store on `nc`'s JetStream.
   * @param bucket bucket name (default "dynamo_objects"), created on first use
   */
  constructor(nc: NatsConnection, bucket = "dynamo_objects") {
    this.#nc = nc;
    this.#bucket = bucket;
  }

  #open(): Promise<JsObjectStore> {
    this.#store ??= this.#nc.jetstream().views.os(this.#bucket).catch((err) => {
      this.#store = undefined;
      throw new DynamoError(
        `cannot open the NATS object store "${this.#bucket}" (is JetStream enabled, nats-server -js?): ${
          (err as Error).message
        }`,
        { cause: err },
      );
    });
    return this.#store;
  }

  async put(name: string, data: Uint8Array): Promise<void> {
    const os = await this.#open();
    await os.putBlob({ name: safeName(name) }, data);
  }

  async get(name: string): Promise<Uint8Array | undefined> {
    const os = await this.#open();
    return (await os.getBlob(safeName(name))) ?? undefined;
  }

  async has(name: string): Promise<boolean> {
    const os = await this.#open();
    const info = await os.info(safeName(name));
    return info !== null && !info.deleted;
  }
}
