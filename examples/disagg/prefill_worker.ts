// Seed 000's disaggregated serving, prefill side: pulls remote prefill requests from the
// decode workers' queues, computes the KV blocks (the mocker's deterministic fill), writes
// them into the decode worker's shared memory in one batched WRITE and notifies it.
//
//   deno run -A examples/disagg/prefill_worker.ts [--queue hosted|jetstream]
//
// Reports one JSON line per event on stdout: {"ready": id}, {"prefilling": id},
// {"prefilled": {...}}.

import { parseArgs } from "node:util";
import { connect as connectNats, type NatsConnection } from "nats";
import { TransferAgent } from "../../native/mod.ts";
import { dynamoWorker } from "../../mod.ts";
import {
  JetStreamPrefillQueue,
  lookupDecodeMemory,
  type PrefillQueue,
  PrefillWorker,
  RemotePrefillQueue,
  type RemotePrefillRequest,
} from "../../llm/disagg/mod.ts";

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

await dynamoWorker(async (runtime) => {
  const ns = runtime.namespace(values.namespace!);
  const component = ns.component("prefill");
  await component.createService();
  const queueClient = await ns.component("decode").endpoint("prefill_queue").client();
  let nc: NatsConnection | undefined;
  let queue: PrefillQueue<RemotePrefillRequest>;
  if (values.queue === "jetstream") {
    nc = await connectNats({ servers: Deno.env.get("NATS_SERVER") ?? "nats://127.0.0.1:4222" });
    queue = await JetStreamPrefillQueue.open<RemotePrefillRequest>(nc, {
      stream: `dynamo_prefill_${values.namespace}`,
      ackWaitMs: 10_000,
    });
  } else {
    queue = new RemotePrefillQueue(queueClient);
  }

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
    await nc?.close();
    await queueClient.close();
  }
});
