// A real engine as a worker: llama.cpp in this process on a GGUF file, registered with
// registerLlm as a Tokens model. The card's tokenizer and chat template come from the GGUF, so
// the frontend's preprocessing is the engine's own; its KV events and load let a frontend with
// `--router-mode kv` send each prompt to the worker caching its prefix.
//
//   deno run -A examples/llm/llamacpp_worker.ts MODEL.gguf [--n-gpu-layers N] [--max-num-seqs N]
//                                   [--block-size N]
//
// With ETCD_ENDPOINTS and NATS_SERVER set (or DYN_HUB), a `dynamo frontend` elsewhere serves it.

import { parseArgs } from "node:util";
import { dynamoWorker } from "../../mod.ts";
import { LlamaCppLoadError, runLlamaCppWorker } from "../../llm/engines/llamacpp/mod.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    "n-gpu-layers": { type: "string", default: "0" },
    "max-num-seqs": { type: "string", default: "4" },
    "block-size": { type: "string", default: "16" },
  },
});
const modelPath = positionals[0];
if (modelPath === undefined) {
  // deno-lint-ignore no-console
  console.error(
    "usage: llamacpp_worker.ts MODEL.gguf [--n-gpu-layers N] [--max-num-seqs N] [--block-size N]",
  );
  Deno.exit(2);
}

await dynamoWorker(async (runtime) => {
  const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
  try {
    // Loads the GGUF, serves it, publishes its KV events and load (for `--router-mode kv`),
    // and registers it as a Tokens model.
    const worker = await runLlamaCppWorker(endpoint, modelPath, {
      nGpuLayers: Number(values["n-gpu-layers"]),
      maxNumSeqs: Number(values["max-num-seqs"]),
      kvBlockSize: Number(values["block-size"]),
    });
    // Resolves at shutdown (Ctrl-C / SIGTERM), once running requests have finished.
    await worker.serving;
  } catch (err) {
    if (!(err instanceof LlamaCppLoadError)) throw err;
    // deno-lint-ignore no-console
    console.error(err.message);
    Deno.exit(2);
  }
});
