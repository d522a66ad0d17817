// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Seed 000's disaggregated serving, decode side: registers the model, keeps its KV blocks
// in shared memory with a prefix cache, hosts the prefill queue, and per request holds the
// cached prefix, prefills the rest locally or waits for a prefill worker to write it
// (then checks every byte of every block) before the mocker (or echo) engine generates.
//
//   deno run -A examples/disagg/decode_worker.ts [MODEL_PATH] [--max-local-prefill-length N]
//     [--queue hosted|jetstream] [--engine mocker|echo]
//
// The prefill queue is hosted by this worker behind an endpoint (any backend), or a
// JetStream work queue on the runtime's NATS connection (`--queue jetstream`, the runtime
// on NATS: NATS_SERVER set, with its NATS_USER/NATS_PASSWORD/NATS_TOKEN and NATS_TLS_*).
//
// Reports one JSON line per event on stdout: {"ready": id}, {"prefill": {...}},
// {"prefill_workers": [ids]} when the prefill workers in discovery change.

import { parseArgs } from "node:util";
import { TransferAgent } from "../../native/mod.ts";
import {
  builtinTestModel,
  type Context,
  dynamoWorker,
  echoEngine,
  MockerEngine,
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
  mockerDecodeEngine,
  type PrefillQueue,
  prefillQueueHandler,
  publishDecodeMemory,
  type RemotePrefillRequest,
  runtimeNatsConnection,
  type TokensEngine,
} from "../../llm/disagg/mod.ts";
import { exitOnDynamoError } from "./_exit.ts";

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
    "speedup-ratio": { type: "string", default: "1" },
    namespace: { type: "string", default: "dynamo" },
    queue: { type: "string", default: "hosted" },
    engine: { type: "string", default: "mocker" },
  },
});
const report = (x: unknown) => console.log(JSON.stringify(x));
if (values.engine !== "mocker" && values.engine !== "echo") {
  throw new Error(`--engine must be mocker or echo, got ${values.engine}`);
}
if (values.queue !== "hosted" && values.queue !== "jetstream") {
  throw new Error(`--queue must be hosted or jetstream, got ${values.queue}`);
}

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
  const queue: PrefillQueue<RemotePrefillRequest> = values.queue === "jetstream"
    ? await JetStreamPrefillQueue.open<RemotePrefillRequest>(runtimeNatsConnection(runtime), {
      stream: `dynamo_prefill_${values.namespace}`,
      ackWaitMs: 10_000,
    })
    : new EmbeddedPrefillQueue<RemotePrefillRequest>({ ackWaitMs: 10_000 });
  const blockSize = Number(values["block-size"]);
  // The mocker's prefix cache uses the decode worker's block size, so both name a
  // prompt's blocks by the same sequence hashes.
  const mocker = values.engine === "mocker"
    ? new MockerEngine({
      blockSize,
      numGpuBlocks: Number(values["num-blocks"]),
      speedupRatio: Number(values["speedup-ratio"]),
      logger: runtime.logger,
    })
    : undefined;
  const engine: TokensEngine = mocker
    ? mockerDecodeEngine(mocker)
    : echoEngine({ delayMs: Number(values["delay-ms"]) });
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
    engine,
    blockSize,
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
    { kvCacheBlockSize: blockSize },
  );
  report({ ready: runtime.instanceId, agent: agent.name, engine: values.engine });
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
    await mocker?.close();
    await queue.close();
    await prefillClient.close();
    kv.close();
  }
}).catch(exitOnDynamoError);
