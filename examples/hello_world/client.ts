// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Calls the hello-world pipeline's entry, hello_world/Frontend/generate, and prints each
// streamed item as a JSON line. Run it beside `dynamo serve` with the same backend
// environment (ETCD_ENDPOINTS + NATS_SERVER, or the DYN_HUB line serve prints):
// `deno run -A examples/hello_world/client.ts [text]`.

import { type DistributedRuntime, dynamoWorker } from "../../mod.ts";
import { Frontend } from "./graph.ts";

/** Options of {@linkcode runClient}. */
export interface RunClientOptions {
  /** How long to wait for a Frontend instance, in ms (default 10000). */
  timeoutMs?: number;
  /** Called with each streamed item (default: print it as JSON). */
  onItem?: (item: string) => void;
}

/**
 * Waits for a Frontend instance, sends `{text}` and hands each streamed item to `onItem`.
 *
 * @returns the items received
 * @throws {TimeoutError} no Frontend instance appeared within `timeoutMs`
 */
export async function runClient(
  runtime: DistributedRuntime,
  text = "Hello, Dynamo!",
  options: RunClientOptions = {},
): Promise<string[]> {
  const onItem = options.onItem ?? ((item) => console.log(JSON.stringify(item)));
  const [namespace, component] = Frontend.dynamoAddress();
  const client = await runtime.namespace(namespace).component(component).endpoint("generate")
    .client();
  await client.waitForInstances({ timeoutMs: options.timeoutMs ?? 10_000 });
  const items: string[] = [];
  for await (const item of await client.generate<string>({ text })) {
    items.push(item);
    onItem(item);
  }
  return items;
}

if (import.meta.main) {
  const text = Deno.args.length > 0 ? Deno.args.join(" ") : undefined;
  await dynamoWorker((runtime) => runClient(runtime, text));
}
