// The prefill queue across processes on any request plane (hub, NATS, TCP): the decode
// worker hosts an EmbeddedPrefillQueue behind an endpoint, prefill workers pull from it
// (dequeue is a long poll, ack goes back to the same instance). The same endpoint hands
// out the decode worker's memory info, which it thereby publishes once per peer.

import type { Client } from "../../runtime/client.ts";
import type { Context } from "../../runtime/context.ts";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import type { DecodeMemoryInfo, RemotePrefillRequest } from "./protocol.ts";
import type { DequeueOptions, PrefillQueue, QueuedItem } from "./queue.ts";

/** Requests to a hosted queue endpoint (wire type). */
export type HostedQueueRequest =
  | { op: "dequeue"; timeout_ms: number }
  | { op: "ack"; id: string; deliveries: number }
  | { op: "size" }
  | { op: "memory" };

/** Replies of a hosted queue endpoint (wire type). */
export type HostedQueueReply =
  | { item: null }
  | { item: { id: string; deliveries: number; data: RemotePrefillRequest }; instance_id: string }
  | { acked: boolean }
  | { size: number }
  | { memory: DecodeMemoryInfo };

/**
 * The decode worker's handler for the queue endpoint.
 *
 * @param queue the local queue the decode engine enqueues into
 * @param memory this worker's published KV memory
 * @param instanceId this worker's instance id (prefill workers ack here)
 * @returns a handler for `endpoint.serveEndpoint`
 * @example
 * ```ts ignore
 * await component.endpoint("prefill_queue").serveEndpoint(
 *   prefillQueueHandler(queue, kv.memoryInfo(), runtime.instanceId));
 * ```
 */
export function prefillQueueHandler(
  queue: PrefillQueue<RemotePrefillRequest>,
  memory: DecodeMemoryInfo,
  instanceId: string,
): (req: HostedQueueRequest, ctx: Context) => AsyncGenerator<HostedQueueReply> {
  // Deliveries handed out, by id: an ack finds the delivery it acknowledges.
  const delivered = new Map<string, QueuedItem<RemotePrefillRequest>>();
  return async function* (req: HostedQueueRequest, ctx: Context) {
    switch (req?.op) {
      case "dequeue": {
        const item = await queue.dequeue({
          // From another process: anything but a finite number is no wait at all.
          timeoutMs: Number.isFinite(req.timeout_ms)
            ? Math.min(Math.max(0, req.timeout_ms), 30_000)
            : 0,
          signal: ctx.signal,
        });
        if (!item) {
          yield { item: null };
          return;
        }
        // A redelivery supersedes the earlier one, whose ack would fail anyway.
        delivered.delete(`${item.id}/${item.deliveries - 1}`);
        delivered.set(`${item.id}/${item.deliveries}`, item);
        yield {
          item: { id: item.id, deliveries: item.deliveries, data: item.data },
          instance_id: instanceId,
        };
        return;
      }
      case "ack": {
        const key = `${req.id}/${req.deliveries}`;
        const item = delivered.get(key);
        delivered.delete(key);
        yield { acked: item ? await item.ack() : false };
        return;
      }
      case "size":
        yield { size: await queue.size() };
        return;
      case "memory":
        yield { memory };
        return;
      default:
        throw new InvalidArgumentError(
          `unknown prefill queue op ${JSON.stringify((req as { op?: unknown } | null)?.op)}`,
        );
    }
  };
}

/** Decode agents remembered (for resolveDecode), at most. */
const MAX_AGENTS = 10_000;

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

async function first<T>(stream: AsyncIterable<T>): Promise<T | undefined> {
  for await (const x of stream) return x;
  return undefined;
}

/**
 * The prefill worker's view of hosted queues: dequeues from any decode instance
 * (round robin), acks at the one that delivered, and fetches a decode worker's memory
 * info from the instance that queued its requests.
 */
export class RemotePrefillQueue implements PrefillQueue<RemotePrefillRequest> {
  readonly #client: Client;
  readonly #agents = new Map<string, string>();

  /**
   * Creates a queue whose items go to the decode workers behind `client`.
   * @param client a client of the decode workers' queue endpoint
   */
  constructor(client: Client) {
    this.#client = client;
  }

  enqueue(): Promise<void> {
    return Promise.reject(
      new InvalidArgumentError("RemotePrefillQueue is consume-only; decode enqueues locally"),
    );
  }

  async dequeue(
    options: DequeueOptions = {},
  ): Promise<QueuedItem<RemotePrefillRequest> | undefined> {
    options.signal?.throwIfAborted();
    if (this.#client.instanceIds().length === 0) {
      await new Promise((r) => setTimeout(r, Math.min(options.timeoutMs ?? 200, 200)));
      return undefined;
    }
    const reply = await first(
      await this.#client.generate<HostedQueueReply>(
        { op: "dequeue", timeout_ms: options.timeoutMs ?? 1000 },
        { signal: options.signal },
      ),
    );
    // The reply is from another process: only its envelope is read here (an item whose id
    // or delivery count is malformed cannot be acked, so it is skipped; its host redelivers
    // it to no avail until it expires). The request itself goes to the prefill worker's door.
    if (
      typeof reply !== "object" || reply === null || !("item" in reply) ||
      typeof reply.item !== "object" || reply.item === null || !("instance_id" in reply)
    ) {
      return undefined;
    }
    const { id, deliveries, data } = reply.item as Record<string, unknown>;
    const instance = reply.instance_id;
    if (
      typeof id !== "string" || id.length > 1024 || !Number.isSafeInteger(deliveries) ||
      typeof instance !== "string" || !this.#client.instanceIds().includes(instance)
    ) {
      return undefined;
    }
    const agent = (data as { engine_agent?: unknown } | null)?.engine_agent;
    if (typeof agent === "string" && agent.length <= 1024) {
      this.#agents.delete(agent); // most recent last: the oldest is dropped past the limit
      this.#agents.set(agent, instance);
      if (this.#agents.size > MAX_AGENTS) this.#agents.delete(this.#agents.keys().next().value!);
    }
    return {
      id,
      deliveries: deliveries as number,
      data: data as RemotePrefillRequest,
      ack: async () => {
        const r = await first(
          await this.#client.direct<unknown>({ op: "ack", id, deliveries }, instance),
        );
        return isObject(r) && r.acked === true;
      },
    };
  }

  async size(): Promise<number> {
    let total = 0;
    for (const id of this.#client.instanceIds()) {
      const r = await first(await this.#client.direct<unknown>({ op: "size" }, id));
      if (isObject(r) && Number.isSafeInteger(r.size) && (r.size as number) >= 0) {
        total += r.size as number;
      }
    }
    return total;
  }

  /**
   * The memory info of the decode worker whose agent queued a request we took.
   *
   * @throws {InvalidArgumentError} no request from that agent was taken yet
   */
  async resolveDecode(agentName: string): Promise<DecodeMemoryInfo> {
    const instance = this.#agents.get(agentName);
    if (!instance) {
      throw new InvalidArgumentError(`no decode instance known for agent ${agentName}`);
    }
    const r = await first(await this.#client.direct<unknown>({ op: "memory" }, instance));
    // Checked by the prefill worker (checkDecodeMemoryInfo) before use.
    if (!isObject(r) || !isObject(r.memory)) {
      throw new InvalidArgumentError(`no memory info from ${instance}`);
    }
    return r.memory as unknown as DecodeMemoryInfo;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}
