// deno-lint-ignore-file no-console -- a program that prints its events; library code takes a Logger
// Disaggregated serving with llama.cpp, both roles in one process: a decode engine serves the
// model (registered with registerLlm, like llamacpp_worker.ts) and a prefill engine on the same
// GGUF takes long prompts off an in-process queue, computes their KV and moves the sequence
// state into the decode worker's registered memory through the transfer agent (a WRITE and a
// notification); the decode engine imports it and generates. Short prompts, and any remote
// prefill that fails, are prefilled by the decode engine itself.
//
//   deno run -A examples/llm/llamacpp_disagg.ts MODEL.gguf [--max-local-prefill-length N]
//     [--max-num-seqs N] [--prefill-seqs N] [--max-remote-tokens N] [--remote-timeout-ms N]
//
// Prints one JSON line per event: {"ready": id}, {"prefill": report} per request (local or
// remote, and why it fell back), {"prefilled": result} per state the prefill worker wrote.

import { parseArgs } from "node:util";
import { TransferAgent } from "../../native/mod.ts";
import { dynamoWorker, ModelInput, ModelType, registerLlm } from "../../mod.ts";
import {
  DisaggRouter,
  EmbeddedPrefillQueue,
  type RemoteStatePrefillRequest,
  StateInbox,
  StatePrefillWorker,
} from "../../llm/disagg/mod.ts";
import {
  LlamaCppDisagg,
  llamaCppDisaggDecode,
  LlamaCppEngine,
  LlamaCppLoadError,
  modelIdentity,
} from "../../llm/engines/llamacpp/mod.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    "max-local-prefill-length": { type: "string", default: "256" },
    "max-num-seqs": { type: "string", default: "4" },
    "prefill-seqs": { type: "string", default: "1" },
    "max-remote-tokens": { type: "string", default: "2048" },
    "remote-timeout-ms": { type: "string", default: "30000" },
  },
});
const modelPath = positionals[0];
if (modelPath === undefined) {
  console.error(
    "usage: llamacpp_disagg.ts MODEL.gguf [--max-local-prefill-length N] [--max-num-seqs N] " +
      "[--prefill-seqs N] [--max-remote-tokens N] [--remote-timeout-ms N]",
  );
  Deno.exit(2);
}
const report = (x: unknown) => console.log(JSON.stringify(x));

let decodeEngine: LlamaCppEngine;
let prefillEngine: LlamaCppEngine;
try {
  decodeEngine = await LlamaCppEngine.load(modelPath, {
    maxNumSeqs: Number(values["max-num-seqs"]),
  });
  prefillEngine = await LlamaCppEngine.load(modelPath, {
    maxNumSeqs: Number(values["prefill-seqs"]),
  });
} catch (err) {
  if (!(err instanceof LlamaCppLoadError)) throw err;
  console.error(err.message);
  Deno.exit(2);
}
// Hashed once; both roles carry and check the same identity.
const identity = await modelIdentity(modelPath);
const decode = await LlamaCppDisagg.create(decodeEngine, { identity });
const prefill = await LlamaCppDisagg.create(prefillEngine, { identity });

await dynamoWorker(async (runtime) => {
  const component = runtime.namespace("dynamo").component("backend");
  await component.createService();
  const endpoint = component.endpoint("generate");

  using decodeAgent = new TransferAgent(`llamacpp-decode-${runtime.instanceId}`);
  using prefillAgent = new TransferAgent(`llamacpp-prefill-${runtime.instanceId}`);
  // One slot per decode sequence, each sized for the longest prompt sent to the prefill
  // engine (longer ones are prefilled locally).
  const inbox = new StateInbox(decodeAgent, {
    slots: decodeEngine.maxNumSeqs,
    slotBytes: decode.maxStateBytes(Number(values["max-remote-tokens"])),
  });
  const queue = new EmbeddedPrefillQueue<RemoteStatePrefillRequest>({ ackWaitMs: 60_000 });
  const worker = new StatePrefillWorker(prefillAgent, {
    chunkBytes: inbox.chunkBytes,
    maxChunks: inbox.chunksPerSlot,
    produce: (r) => prefill.prefill(r.token_ids),
    // The only decode worker is this process's; across processes this is discovery.
    resolveDecode: () => Promise.resolve(inbox.memoryInfo()),
    logger: runtime.logger,
  });
  const stopPrefill = new AbortController();
  const prefilling = worker.run(queue, {
    signal: stopPrefill.signal,
    onResult: (r) => report({ prefilled: r }),
  });
  const handler = llamaCppDisaggDecode({
    disagg: decode,
    inbox,
    queue,
    router: new DisaggRouter({
      maxLocalPrefillLength: Number(values["max-local-prefill-length"]),
    }),
    remoteTimeoutMs: Number(values["remote-timeout-ms"]),
    onPrefill: (r) => report({ prefill: r }),
    logger: runtime.logger,
  });
  try {
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      modelPath,
      { contextLength: decodeEngine.contextLength },
    );
    report({ ready: runtime.instanceId, agents: [decodeAgent.name, prefillAgent.name] });
    // Resolves at shutdown (Ctrl-C / SIGTERM), once running requests have finished.
    await endpoint.serveEndpoint(handler, { gracefulShutdown: true });
  } finally {
    stopPrefill.abort();
    await prefilling;
    worker.close();
    inbox.close();
    await queue.close();
    await Promise.all([decodeEngine.close(), prefillEngine.close()]);
  }
});
