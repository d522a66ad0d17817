// A real engine as a worker: llama.cpp in this process on a GGUF file, registered with
// registerLlm as a Tokens model. The card's tokenizer and chat template come from the GGUF, so
// the frontend's preprocessing is the engine's own.
//
//   deno run -A examples/llm/llamacpp_worker.ts MODEL.gguf [--n-gpu-layers N] [--max-num-seqs N]
//
// With ETCD_ENDPOINTS and NATS_SERVER set (or DYN_HUB), a `dynamo frontend` elsewhere serves it.

import { parseArgs } from "node:util";
import { type Context, dynamoWorker, ModelInput, ModelType, registerLlm } from "../../mod.ts";
import { LlamaCppEngine, LlamaCppLoadError } from "../../llm/engines/llamacpp/mod.ts";
import type { PreprocessedRequest } from "../../llm/protocols.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    "n-gpu-layers": { type: "string", default: "0" },
    "max-num-seqs": { type: "string", default: "4" },
  },
});
const modelPath = positionals[0];
if (modelPath === undefined) {
  // deno-lint-ignore no-console
  console.error("usage: llamacpp_worker.ts MODEL.gguf [--n-gpu-layers N] [--max-num-seqs N]");
  Deno.exit(2);
}

let engine: LlamaCppEngine;
try {
  engine = await LlamaCppEngine.load(modelPath, {
    nGpuLayers: Number(values["n-gpu-layers"]),
    maxNumSeqs: Number(values["max-num-seqs"]),
  });
} catch (err) {
  if (!(err instanceof LlamaCppLoadError)) throw err;
  // deno-lint-ignore no-console
  console.error(err.message);
  Deno.exit(2);
}

await dynamoWorker(async (runtime) => {
  const component = runtime.namespace("dynamo").component("backend");
  await component.createService();
  const endpoint = component.endpoint("generate");
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    modelPath,
    {
      contextLength: engine.contextLength,
    },
  );
  try {
    // Resolves at shutdown (Ctrl-C / SIGTERM), once running requests have finished.
    await endpoint.serveEndpoint(
      (req: PreprocessedRequest, ctx: Context) => engine.generate(req, ctx),
      { gracefulShutdown: true },
    );
  } finally {
    await engine.close();
  }
});
