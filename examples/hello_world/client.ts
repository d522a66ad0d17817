// Port of seed 000's "Client Example": calls the worker's endpoint and prints each item.
// Run alone with ETCD_ENDPOINTS and NATS_SERVER set, after worker.ts: `deno run -A
// examples/hello_world/client.ts [text]`.

import { type DistributedRuntime, dynamoWorker } from "../../mod.ts";
import { COMPONENT, ENDPOINT, NAMESPACE, type ResponseType } from "./worker.ts";

/** Options of {@linkcode runClient}. */
export interface RunClientOptions {
  /** How long to wait for a worker instance, in ms (default 10000). */
  timeoutMs?: number;
  /** Called with each streamed item (default: print it as JSON). */
  onItem?: (item: ResponseType) => void;
}

/**
 * Waits for a worker instance, sends `{text}` and hands each streamed item to `onItem`.
 *
 * @returns the items received
 * @throws {TimeoutError} no worker instance appeared within `timeoutMs`
 */
export async function runClient(
  runtime: DistributedRuntime,
  text = "Hello, Dynamo!",
  options: RunClientOptions = {},
): Promise<ResponseType[]> {
  const onItem = options.onItem ?? ((item) => console.log(JSON.stringify(item)));
  const client = await runtime.namespace(NAMESPACE).component(COMPONENT).endpoint(ENDPOINT)
    .client();
  await client.waitForInstances({ timeoutMs: options.timeoutMs ?? 10_000 });
  const items: ResponseType[] = [];
  for await (const item of await client.generate<ResponseType>({ text })) {
    items.push(item);
    onItem(item);
  }
  return items;
}

if (import.meta.main) {
  const text = Deno.args.length > 0 ? Deno.args.join(" ") : undefined;
  await dynamoWorker((runtime) => runClient(runtime, text));
}
