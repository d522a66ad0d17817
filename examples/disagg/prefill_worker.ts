// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Seed 000's disaggregated serving, prefill side: pulls remote prefill requests from the
// decode workers' queues, computes the KV blocks the decode worker does not have cached
// (the mocker's deterministic fill), writes them into its shared memory in one batched
// WRITE and notifies it.
//
//   deno run -A examples/disagg/prefill_worker.ts [--queue hosted|jetstream]
//
// `--queue jetstream` uses the runtime's own NATS connection (its credentials and TLS).
//
// Reports one JSON line per event on stdout: {"ready": id}, {"prefilling": id},
// {"prefilled": {...}}.

import { parseArgs } from "node:util";
import { TransferAgent } from "../../native/mod.ts";
import { dynamoWorker } from "../../mod.ts";
import {
  JetStreamPrefillQueue,
  lookupDecodeMemory,
  type PrefillQueue,
  PrefillWorker,
  RemotePrefillQueue,
  type RemotePrefillRequest,
  runtimeNatsConnection,
} from "../../llm/disagg/mod.ts";
import { exitOnDynamoError } from "./_exit.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "block-bytes": { type: "string", default: "4096" },
    "max-blocks": { type: "string", default: "1024" },
    "delay-ms": { type: "string", default: "0" },
    namespace: { type: "string", default: "dynamo" },
    queue: { type: "string", default: "hosted" },
  },
});
const report = (x: unknown) => console.log(JSON.stringify(x));
if (values.queue !== "hosted" && values.queue !== "jetstream") {
  throw new Error(`--queue must be hosted or jetstream, got ${values.queue}`);
}

await dynamoWorker(async (runtime) => {
  const ns = runtime.namespace(values.namespace!);
  const component = ns.component("prefill");
  await component.createService();
  const queueClient = await ns.component("decode").endpoint("prefill_queue").client();
  const queue: PrefillQueue<RemotePrefillRequest> = values.queue === "jetstream"
    ? await JetStreamPrefillQueue.open<RemotePrefillRequest>(runtimeNatsConnection(runtime), {
      stream: `dynamo_prefill_${values.namespace}`,
      ackWaitMs: 10_000,
    })
    : new RemotePrefillQueue(queueClient);

  using agent = new TransferAgent(`prefill-${runtime.instanceId}`);
  const worker = new PrefillWorker(agent, {
    blockBytes: Number(values["block-bytes"]),
    maxBlocks: Number(values["max-blocks"]),
    prefillDelayMs: Number(values["delay-ms"]),
    resolveDecode: (name) => lookupDecodeMemory(runtime, values.namespace!, name),
  });
  // An endpoint only so that decode workers see this one in discovery.
  const alive = component.endpoint("alive").serveEndpoint(async function* () {
    yield { ok: true };
  });
  const running = worker.run(queue, {
    signal: runtime.shutdownSignal,
    onStart: (id) => report({ prefilling: id }),
    onResult: (r) => report({ prefilled: r }),
  });
  report({ ready: runtime.instanceId, agent: agent.name });
  try {
    await Promise.all([alive, running]);
  } finally {
    worker.close();
    await queueClient.close();
  }
}).catch(exitOnDynamoError);
