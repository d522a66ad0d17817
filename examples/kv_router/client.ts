// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Sends prompts to the KV-routing graph's entry, kv_router/Processor/generate, and prints
// each streamed item as a JSON line. Run it beside `dynamo serve` with the same backend
// environment (the DYN_HUB line serve prints, or ETCD_ENDPOINTS + NATS_SERVER):
//
//   deno run -A examples/kv_router/client.ts "some text" ["more text" ...]
//   deno run -A examples/kv_router/client.ts --tokens 1,2,3,...,64 --max-tokens 4
//
// Each argument is one request, sent after the previous one finished, so prompts that
// share a prefix show which worker cached it (`worker_id`, `cached_tokens`).

import { parseArgs } from "node:util";
import { type DistributedRuntime, dynamoWorker } from "../../mod.ts";
import { Processor, type ProcessorOutput, type ProcessorRequest } from "./graph.ts";

/** Options of {@linkcode runClient}. */
export interface RunClientOptions {
  /** How long to wait for a Processor instance, in ms (default 30000). */
  timeoutMs?: number;
  /** Called with each streamed item (default: print it as JSON). */
  onItem?: (item: ProcessorOutput) => void;
}

/**
 * Waits for a Processor instance, then sends the requests one after another.
 *
 * @returns the items of each request
 * @throws {TimeoutError} no Processor instance appeared within `timeoutMs`
 */
export async function runClient(
  runtime: DistributedRuntime,
  requests: readonly ProcessorRequest[],
  options: RunClientOptions = {},
): Promise<ProcessorOutput[][]> {
  const onItem = options.onItem ?? ((item) => console.log(JSON.stringify(item)));
  const [namespace, component] = Processor.dynamoAddress();
  const client = await runtime.namespace(namespace).component(component).endpoint("generate")
    .client();
  try {
    await client.waitForInstances({ timeoutMs: options.timeoutMs ?? 30_000 });
    const out: ProcessorOutput[][] = [];
    for (const request of requests) {
      const items: ProcessorOutput[] = [];
      for await (const item of await client.generate<ProcessorOutput>(request)) {
        items.push(item);
        onItem(item);
      }
      out.push(items);
    }
    return out;
  } finally {
    await client.close();
  }
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    args: Deno.args,
    options: {
      tokens: { type: "string", multiple: true },
      "max-tokens": { type: "string" },
    },
    allowPositionals: true,
  });
  const maxTokens = values["max-tokens"] === undefined ? undefined : Number(values["max-tokens"]);
  const extra = maxTokens === undefined ? {} : { max_tokens: maxTokens };
  const requests: ProcessorRequest[] = [
    ...(values.tokens ?? []).map((t) => ({ tokens: t.split(",").map(Number), ...extra })),
    ...positionals.map((prompt) => ({ prompt, ...extra })),
  ];
  if (requests.length === 0) {
    const shared = "You are a helpful assistant. Answer briefly and precisely. ".repeat(4);
    requests.push({ prompt: `${shared}What is KV caching?`, ...extra });
    requests.push({ prompt: `${shared}Why route by prefix?`, ...extra });
  }
  await dynamoWorker((runtime) => runClient(runtime, requests));
}
