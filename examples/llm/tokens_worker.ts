// Seed 001's worker in TypeScript: a Tokens-input engine registered with registerLlm.
// Dynamo pre-processes (chat template + tokenizer); the handler gets token ids and
// yields token ids. The engine here is the echo engine; put yours in its place.
//
//   deno run -A examples/llm/tokens_worker.ts [MODEL_PATH]
//
// MODEL_PATH: a folder with config.json, tokenizer.json, tokenizer_config.json, a Hugging
// Face repo id, or a GGUF file (default: the built-in Qwen3 test model). With
// ETCD_ENDPOINTS and NATS_SERVER set, a `dynamo frontend` elsewhere serves it.

import {
  builtinTestModel,
  type Context,
  dynamoWorker,
  echoEngine,
  EngineShutdownError,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
} from "../../mod.ts";

class RequestHandler {
  #engine = echoEngine({ delayMs: 10 });
  #shuttingDown = false;

  constructor(signal: AbortSignal) {
    signal.addEventListener("abort", () => (this.#shuttingDown = true), { once: true });
  }

  /** The seeds' generate(request, context): context is optional. */
  async *generate(request: PreprocessedRequest, context: Context) {
    for await (const out of this.#engine(request, context)) {
      // Seed 001 "Migrate Ongoing Requests": leave mid-stream and let the frontend move
      // the request to another instance.
      if (this.#shuttingDown) {
        throw new EngineShutdownError("worker shutting down, migrating request");
      }
      if (context.isStopped()) break;
      yield out;
    }
  }
}

await dynamoWorker(async (runtime) => {
  // 1. Register ourselves on the network.
  const component = runtime.namespace("dynamo").component("backend");
  await component.createService();
  const endpoint = component.endpoint("generate");
  const modelPath = Deno.args[0] ?? await builtinTestModel();
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    modelPath,
    {
      migrationLimit: 3,
    },
  );
  // 2. Attach the request handler; resolves at shutdown (Ctrl-C).
  const handler = new RequestHandler(runtime.shutdownSignal);
  await endpoint.serveEndpoint((req: PreprocessedRequest, ctx: Context) =>
    handler.generate(req, ctx)
  );
});
