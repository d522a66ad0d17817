// Which workers a component has in discovery: the KV indexers forget a worker's blocks
// when its last instance under the component leaves.

import { z } from "zod";
import type { Component, RuntimeInternals } from "../../runtime/component.ts";
import { watchPrefix } from "../../runtime/discovery/watch_prefix.ts";
import { instancePrefix } from "../../runtime/keys.ts";
import { instanceRecordValueSchema } from "../../runtime/names.ts";

/** An instance record under a component's prefix: the key is `{endpoint}/{instance id}`. */
const componentInstanceSchema = z.object({
  key: z.string().max(2048).regex(/^[^/]+\/[^/]+$/, "expected ENDPOINT/INSTANCE_ID"),
  value: instanceRecordValueSchema,
}).transform(({ key }) => {
  const slash = key.indexOf("/");
  return { endpoint: key.slice(0, slash), worker: key.slice(slash + 1) };
});

/** What an {@linkcode InstanceWatch} reports. */
export interface InstanceWatchCallbacks {
  /** The worker's last instance under the component left. */
  left: (worker: string) => void;
  /** An instance of the worker was put (after the first listing). */
  joined: (worker: string) => void;
}

/**
 * Watches a component's instances in discovery and reports workers (instance ids) whose
 * last instance left.
 */
export class InstanceWatch {
  /** Resolves at the first listing (or when the watch ends first). */
  readonly synced: Promise<void>;
  /** Resolves when the watch ended (`signal` aborted). */
  readonly done: Promise<void>;
  /** Worker -> its endpoints under the component. */
  readonly #instances = new Map<string, Set<string>>();

  constructor(
    rt: RuntimeInternals,
    component: Component,
    signal: AbortSignal,
    callbacks: InstanceWatchCallbacks,
  ) {
    const prefix = instancePrefix(component.namespace.name, component.name);
    const synced = Promise.withResolvers<void>();
    this.synced = synced.promise;
    this.done = (async () => {
      try {
        if (signal.aborted) return;
        const events = watchPrefix(rt.discovery, prefix, {
          schema: componentInstanceSchema,
          signal,
          logger: rt.logger.child({ component: component.path }),
          what: "instance record",
        });
        for await (const ev of events) {
          if (ev.type === "synced") {
            const listed = new Map<string, Set<string>>();
            for (const { worker, endpoint } of ev.records.values()) {
              let eps = listed.get(worker);
              if (!eps) listed.set(worker, eps = new Set());
              eps.add(endpoint);
            }
            for (const id of this.#instances.keys()) if (!listed.has(id)) callbacks.left(id);
            this.#instances.clear();
            for (const [id, eps] of listed) this.#instances.set(id, eps);
            synced.resolve();
          } else if (ev.type === "put") {
            const { worker, endpoint } = ev.value;
            let eps = this.#instances.get(worker);
            if (!eps) this.#instances.set(worker, eps = new Set());
            eps.add(endpoint);
            callbacks.joined(worker);
          } else {
            const { worker, endpoint } = ev.previous;
            const eps = this.#instances.get(worker);
            if (!eps) continue;
            eps.delete(endpoint);
            if (eps.size === 0) {
              this.#instances.delete(worker);
              callbacks.left(worker);
            }
          }
        }
      } finally {
        synced.resolve();
      }
    })();
  }
}
