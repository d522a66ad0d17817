// Seed 000's disaggregated serving, decode side: registers the model, keeps its KV blocks
// in shared memory, hosts the prefill queue, and per request prefills locally or waits
// for a prefill worker to write the blocks (then checks every byte) before generating.
//
//   deno run -A examples/disagg/decode_worker.ts [MODEL_PATH] [--max-local-prefill-length N]
//     [--queue hosted|jetstream]
//
// The prefill queue is hosted by this worker behind an endpoint (any backend), or a
// JetStream work queue (`--queue jetstream`, NATS_SERVER set).
//
// Reports one JSON line per event on stdout: {"ready": id}, {"prefill": {...}},
// {"prefill_workers": [ids]} when the prefill workers in discovery change.

import { parseArgs } from "node:util";
import { connect as connectNats, type NatsConnection } from "nats";
import { TransferAgent } from "../../native/mod.ts";
import {
  builtinTestModel,
  type Context,
  dynamoWorker,
  echoEngine,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
} from "../../mod.ts";
import {
  DecodeKvCache,
  disaggDecodeEngine,
  DisaggRouter,
  EmbeddedPrefillQueue,
  JetStreamPrefillQueue,
  type PrefillQueue,
  prefillQueueHandler,
  publishDecodeMemory,
  type RemotePrefillRequest,
} from "../../llm/disagg/mod.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    "max-local-prefill-length": { type: "string", default: "1000" },
    "max-prefill-queue-size": { type: "string", default: "64" },
    "remote-timeout-ms": { type: "string", default: "5000" },
    "block-bytes": { type: "string", default: "4096" },
    "num-blocks": { type: "string", default: "2048" },
    "block-size": { type: "string", default: "16" },
    "delay-ms": { type: "string", default: "0" },
    namespace: { type: "string", default: "dynamo" },
    queue: { type: "string", default: "hosted" },
  },
});
const report = (x: unknown) => console.log(JSON.stringify(x));

await dynamoWorker(async (runtime) => {
  const ns = runtime.namespace(values.namespace!);
  const component = ns.component("decode");
  await component.createService();
  const endpoint = component.endpoint("generate");
  const prefillClient = await ns.component("prefill").endpoint("alive").client();

  using agent = new TransferAgent(`decode-${runtime.instanceId}`);
  const kv = new DecodeKvCache(agent, {
    numBlocks: Number(values["num-blocks"]),
    blockBytes: Number(values["block-bytes"]),
  });
  let nc: NatsConnection | undefined;
  let queue: PrefillQueue<RemotePrefillRequest>;
  if (values.queue === "jetstream") {
    nc = await connectNats({ servers: Deno.env.get("NATS_SERVER") ?? "nats://127.0.0.1:4222" });
    queue = await JetStreamPrefillQueue.open<RemotePrefillRequest>(nc, {
      stream: `dynamo_prefill_${values.namespace}`,
      ackWaitMs: 10_000,
    });
  } else {
    queue = new EmbeddedPrefillQueue<RemotePrefillRequest>({ ackWaitMs: 10_000 });
  }
  // Published once: prefill workers read it when they first see a request from us.
  await publishDecodeMemory(runtime, values.namespace!, kv.memoryInfo());
  const router = new DisaggRouter({
    maxLocalPrefillLength: Number(values["max-local-prefill-length"]),
    maxPrefillQueueSize: Number(values["max-prefill-queue-size"]),
  });
  const decode = disaggDecodeEngine({
    router,
    queue,
    kv,
    engine: echoEngine({ delayMs: Number(values["delay-ms"]) }),
    blockSize: Number(values["block-size"]),
    remoteTimeoutMs: Number(values["remote-timeout-ms"]),
    // No prefill worker in discovery: do not queue at all.
    remoteAvailable: () => prefillClient.instanceIds().length > 0,
    onPrefill: (r) => report({ prefill: r }),
  });

  const serving = Promise.all([
    endpoint.serveEndpoint((req: PreprocessedRequest, ctx: Context) => decode(req, ctx)),
    component.endpoint("prefill_queue").serveEndpoint(
      prefillQueueHandler(queue, kv.memoryInfo(), runtime.instanceId),
    ),
  ]);
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    positionals[0] ?? await builtinTestModel(),
  );
  report({ ready: runtime.instanceId, agent: agent.name });
  // Say when the set of prefill workers changes (tests wait on it).
  let seen = "";
  const watch = setInterval(() => {
    const now = prefillClient.instanceIds().join(",");
    if (now !== seen) report({ prefill_workers: now === "" ? [] : now.split(",") });
    seen = now;
  }, 50);
  try {
    await serving;
  } finally {
    clearInterval(watch);
    await queue.close();
    await nc?.close();
    await prefillClient.close();
    kv.close();
  }
});
