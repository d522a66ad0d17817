// `dynamo run in=http out=ENGINE [MODEL]`: frontend and engine in one process on the
// embedded runtime. The README's first command.

import { announceBackends } from "../runtime/backends.ts";
import {
  builtinTestModel,
  checkUpstream,
  DistributedRuntime,
  echoEngine,
  EmbeddedCluster,
  type Endpoint,
  type Logger,
  type MockerEngineOptions,
  type MockerWorkers,
  type ModelDeploymentCard,
  ModelInput,
  ModelType,
  openaiUpstream,
  registerLlm,
  startMockerWorkers,
} from "../mod.ts";
import {
  type Command,
  ExitCode,
  type Io,
  loggerFromEnv,
  parseCommandArgs,
  parseMs,
  UsageError,
} from "./_common.ts";
import { HTTP_FLAGS, parseHttpFlags } from "./frontend.ts";
import { serveFrontend, untilSignal } from "./_http.ts";
import { huggingFaceOptionsFromEnv } from "./_huggingface.ts";
import { downloadGguf, parseGgufRef } from "../llm/model/huggingface.ts";
import { REASONING_PARSER_NAMES } from "../llm/parsers/reasoning.ts";
import { TOOL_CALL_PARSER_NAMES } from "../llm/parsers/tool_calls.ts";

const usage = `Usage: dynamo run in=http out=ENGINE [MODEL] [options]

Runs the OpenAI frontend and an engine in one process on the embedded runtime.

Engines:
  out=echo                 tokens in, the prompt's tokens back (MODEL: a folder with
                           config.json, tokenizer.json, tokenizer_config.json, a Hugging
                           Face repo id, or a GGUF file; default: a built-in test model
                           made of the real Qwen3 tokenizer files)
  out=openai:http://H:P    forward to an OpenAI-compatible server you already run (vLLM,
                           SGLang, llama.cpp); MODEL is the model name to ask it for
  out=mocker               simulated vLLM workers (KV cache, batching, timing model;
                           pseudo-random tokens) for routing and scale tests; MODEL as
                           for echo
  out=llamacpp             llama.cpp in this process on MODEL, a .gguf file or
                           hf://ORG/NAME/FILE.gguf (downloaded into the Hugging Face
                           cache); tokenizer and chat template from the GGUF; CPU
                           unless --n-gpu-layers

Options:
  --http-port N            port (default 8000; 0 picks a free one)
  --http-host HOST         interface (default 127.0.0.1)
  --router-mode MODE       round-robin (default), random, or kv (KV-cache aware)
  --kv-overlap-score-weight W
                           kv: weight of uncached prefill blocks (default: none, the
                           cost is the predicted TTFT)
  --router-temperature T   kv: 0 (default) cheapest worker; above 0 samples
  --kv-queued-prefill-weight Q
                           kv: weight of prompts queued for prefill on a worker
  --router-load-bound F, --active-decode-blocks-threshold F,
  --active-prefill-tokens-threshold N, --router-replica-sync
                           kv: bounded load, busy thresholds, replica sync (see
                           'dynamo help frontend')
  --max-inflight N         generation requests handled at once, streams until their
                           last byte (default 1024; env DYN_HTTP_MAX_INFLIGHT); past it
                           and the queue: 429 with Retry-After
  --max-queued N           requests that may wait for a slot (default 0;
                           env DYN_HTTP_MAX_QUEUED)
  --queue-timeout-ms MS    longest wait in that queue (default 1000;
                           env DYN_HTTP_QUEUE_TIMEOUT_MS)
  --api-key KEY            require \`Authorization: Bearer KEY\` on every route but
                           /health, /live and /metrics (prefer env DYN_HTTP_API_KEY:
                           flags show in ps)
  --cors-allow-origin LIST origins browsers may call the API from, comma-separated, or *
                           (default: none; env DYN_HTTP_CORS_ALLOW_ORIGIN)
  --dyn-tool-call-parser NAME
                           read tool calls out of chat answers (${
  TOOL_CALL_PARSER_NAMES.join(", ")
});
                           without one, requests with \`tools\` get a 400 (out=openai:
                           the upstream server parses)
  --dyn-reasoning-parser NAME
                           split reasoning into \`reasoning_content\`
                           (${REASONING_PARSER_NAMES.join(", ")})
  --model-name NAME        name clients use (default: from MODEL)
  --context-length N       override the model's context length
  --migration-limit N      migrations per request (default 0)
  --delay-ms N             echo: pause per token (default 0)
  --model-path PATH        openai: card source (tokenizer, context length) instead of
                           the built-in test model
  --num-workers N          mocker, llamacpp: workers in this process (default 1); with
                           --router-mode kv, prompts go where their prefix is cached
  --speedup-ratio X        mocker: simulated time runs X times faster (default 1)
  --block-size N           mocker, llamacpp: tokens per KV block (default 16)
  --num-gpu-blocks N       mocker: KV blocks per worker (default 16384)
  --max-num-seqs N         mocker: running sequences per worker (default 256);
                           llamacpp: sequences in the context (default 4)
  --n-gpu-layers N         llamacpp: layers offloaded to a GPU (default 0)
  --embedding              llamacpp: also serve /v1/embeddings with the model
  --max-num-batched-tokens N
                           mocker: tokens per forward pass (default 8192)
  -h, --help               show this help`;

function parseIntFlag(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    throw new UsageError(
      `--${name} must be a whole number >= ${min}, got ${JSON.stringify(value)}`,
      "run",
    );
  }
  return n;
}

async function run(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommandArgs("run", args, {
    ...HTTP_FLAGS,
    "model-name": { type: "string" },
    "context-length": { type: "string" },
    "migration-limit": { type: "string" },
    "delay-ms": { type: "string" },
    "model-path": { type: "string" },
    "num-workers": { type: "string" },
    "speedup-ratio": { type: "string" },
    "block-size": { type: "string" },
    "num-gpu-blocks": { type: "string" },
    "max-num-seqs": { type: "string" },
    "max-num-batched-tokens": { type: "string" },
    "n-gpu-layers": { type: "string" },
    embedding: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  let input = "http";
  let output: string | undefined;
  const rest: string[] = [];
  for (const p of positionals) {
    if (p.startsWith("in=")) input = p.slice(3);
    else if (p.startsWith("out=")) output = p.slice(4);
    else rest.push(p);
  }
  if (input !== "http") throw new UsageError(`only in=http is supported, got in=${input}`, "run");
  if (output === undefined) {
    throw new UsageError(
      "needs out=echo, out=mocker, out=llamacpp or out=openai:http://HOST:PORT",
      "run",
    );
  }
  if (rest.length > 1) throw new UsageError(`at most one MODEL, got ${rest.join(" ")}`, "run");
  if (values.embedding && output !== "llamacpp") {
    throw new UsageError(`--embedding is for out=llamacpp, got out=${output}`, "run");
  }
  const http = parseHttpFlags("run", values, { host: "127.0.0.1" });
  const contextLength = parseIntFlag("context-length", values["context-length"], 1);
  const migrationLimit = parseIntFlag("migration-limit", values["migration-limit"], 0);
  const delayMs = values["delay-ms"] === undefined
    ? 0
    : parseMs("run", "delay-ms", values["delay-ms"]);
  const logger = loggerFromEnv("run");

  let handler;
  let modelInput: ModelInput;
  let modelPath: string;
  let modelName = values["model-name"];
  let mocker: { numWorkers: number; engine: MockerEngineOptions } | undefined;
  let checkHealth: (() => Promise<string | undefined>) | undefined;
  let llama: { numWorkers: number; engine: LlamaCppWorkerOptions } | undefined;
  if (output === "echo") {
    handler = echoEngine({ delayMs });
    modelInput = ModelInput.Tokens;
    modelPath = rest[0] ?? await builtinTestModel();
  } else if (output.startsWith("openai:")) {
    const baseUrl = output.slice("openai:".length);
    if (!/^https?:\/\/[^/]+/.test(baseUrl)) {
      throw new UsageError(
        `out=openai: needs a URL like openai:http://127.0.0.1:8001, got ${output}`,
        "run",
      );
    }
    handler = openaiUpstream({ baseUrl, upstreamModel: rest[0], logger });
    checkHealth = () => checkUpstream({ baseUrl });
    modelInput = ModelInput.Text;
    modelPath = values["model-path"] ?? await builtinTestModel();
    modelName ??= rest[0];
  } else if (output === "mocker") {
    mocker = parseMockerFlags(values);
    modelInput = ModelInput.Tokens;
    modelPath = rest[0] ?? await builtinTestModel();
  } else if (output === "llamacpp") {
    if (rest[0] === undefined) {
      throw new UsageError(
        "out=llamacpp needs MODEL, a .gguf file or hf://ORG/NAME/FILE.gguf",
        "run",
      );
    }
    // One GGUF file of a Hub repo: downloaded once (progress on stderr), then a local file
    // for the engine and the card alike.
    const local = parseGgufRef(rest[0])
      ? await downloadGguf(rest[0], huggingFaceOptionsFromEnv())
      : rest[0];
    llama = {
      numWorkers: parseIntFlag("num-workers", values["num-workers"], 1) ?? 1,
      engine: {
        nGpuLayers: parseIntFlag("n-gpu-layers", values["n-gpu-layers"], 0),
        maxNumSeqs: parseIntFlag("max-num-seqs", values["max-num-seqs"], 1),
        kvBlockSize: parseIntFlag("block-size", values["block-size"], 1),
        contextLength,
        logger,
        embedding: values.embedding === true,
      },
    };
    modelInput = ModelInput.Tokens;
    modelPath = local;
  } else {
    throw new UsageError(
      `unknown engine out=${output} (engines: echo, mocker, llamacpp, openai:URL)`,
      "run",
    );
  }

  const signals = untilSignal();
  const embedded = new EmbeddedCluster();
  const runtime = await DistributedRuntime.connect({
    discovery: "memory",
    requestPlane: "local",
    logger,
    embedded,
  });
  announceBackends(runtime, logger, "process", true);
  let mockers: MockerWorkers | undefined;
  const workerRuntimes: DistributedRuntime[] = [];
  try {
    if (llama) {
      // Loaded only here: node-llama-cpp costs ~140 ms to import, other engines skip it.
      // Not a literal specifier, so that `deno bundle` leaves node-llama-cpp (native binaries
      // for every platform) out of the bundle; the bundle serves every engine but this one.
      const engineModule = new URL("../llm/engines/llamacpp/mod.ts", import.meta.url).href;
      const { runLlamaCppWorker, LlamaCppLoadError } = await import(
        engineModule
      ) as LlamaCppModule;
      // Each worker is its own runtime (own instance id, own KV events) on the shared cluster.
      for (let i = 0; i < llama.numWorkers; i++) {
        const rt = await DistributedRuntime.connect({ logger, embedded });
        workerRuntimes.push(rt);
        const endpoint = rt.namespace("dynamo").component("backend").endpoint("generate");
        try {
          const worker = await runLlamaCppWorker(endpoint, modelPath, {
            ...llama.engine,
            register: { modelName, migrationLimit },
          });
          worker.serving.catch((err) => logger.error("engine stopped", { error: String(err) }));
          if (i === 0) {
            logger.info("model registered", {
              model: worker.card.display_name,
              workers: llama.numWorkers,
              context: worker.card.context_length,
            });
          }
        } catch (err) {
          if (!(err instanceof LlamaCppLoadError)) throw err;
          io.err(`dynamo run: ${err.message}`);
          return ExitCode.Usage;
        }
      }
      return await serveUntilSignal();
    }
    if (mocker) {
      // Each mocker worker is its own runtime (own instance id) on the shared cluster.
      mockers = await startMockerWorkers(mocker.numWorkers, {
        // Load metrics at most every 100 ms per worker: enough for aggregators, cheap at scale.
        metricsIntervalMs: 100,
        ...mocker.engine,
        logger,
        embedded,
        connect: { logger },
        component: "backend",
        modelPath,
        register: {
          modelName,
          contextLength,
          migrationLimit,
          huggingFace: huggingFaceOptionsFromEnv(),
        },
      });
      const card = mockers.workers[0]!.card;
      logger.info("mocker workers registered", {
        model: card.display_name,
        workers: mocker.numWorkers,
        context: card.context_length,
      });
      return await serveUntilSignal();
    }
    const component = runtime.namespace("dynamo").component("backend");
    await component.createService();
    const endpoint = component.endpoint("generate");
    const serving = endpoint.serveEndpoint(handler as never, { gracefulShutdown: true });
    serving.catch((err) => logger.error("engine stopped", { error: String(err) }));
    const card = await registerLlm(
      modelInput,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      modelPath,
      {
        modelName,
        contextLength,
        migrationLimit,
        huggingFace: huggingFaceOptionsFromEnv(),
        // Named in the frontend's errors (e.g. no guided decoding for `response_format`).
        ...(output === "echo" ? { runtimeData: { engine: "echo" } } : {}),
      },
    );
    logger.info("model registered", {
      model: card.display_name,
      input: modelInput,
      context: card.context_length,
    });
    return await serveUntilSignal();
  } finally {
    signals.dispose();
    await mockers?.shutdown();
    // A worker's runtime shutdown waits for its requests, then its engine closes.
    await Promise.all(workerRuntimes.map((rt) => rt.shutdown()));
    await runtime.shutdown();
  }

  async function serveUntilSignal(): Promise<number> {
    const frontend = await serveFrontend(runtime, { ...http, logger, checkHealth }, io);
    await signals.signalled;
    logger.info("shutting down");
    await frontend.shutdown();
    return ExitCode.Ok;
  }
}

/**
 * What `dynamo run` uses of llm/engines/llamacpp/mod.ts, which it imports only for
 * out=llamacpp (a structural type: a type import would make bundlers follow the module).
 */
interface LlamaCppModule {
  runLlamaCppWorker(
    endpoint: Endpoint,
    modelPath: string,
    options: LlamaCppWorkerOptions,
  ): Promise<{ readonly card: ModelDeploymentCard; readonly serving: Promise<void> }>;
  LlamaCppLoadError: abstract new (...args: never[]) => Error;
}

/** The options `dynamo run` gives a llama.cpp worker. */
interface LlamaCppWorkerOptions {
  nGpuLayers?: number;
  maxNumSeqs?: number;
  kvBlockSize?: number;
  contextLength?: number;
  logger?: Logger;
  embedding?: boolean;
  register?: { modelName?: string; migrationLimit?: number };
}

function parseMockerFlags(
  values: Record<string, string | boolean | undefined>,
): { numWorkers: number; engine: MockerEngineOptions } {
  const int = (name: string, min: number) => parseIntFlag(name, values[name] as string, min);
  const speedup = values["speedup-ratio"] as string | undefined;
  const speedupRatio = speedup === undefined ? undefined : Number(speedup);
  if (speedupRatio !== undefined && !(speedupRatio > 0 && Number.isFinite(speedupRatio))) {
    throw new UsageError(
      `--speedup-ratio must be a positive number, got ${JSON.stringify(speedup)}`,
      "run",
    );
  }
  return {
    numWorkers: int("num-workers", 1) ?? 1,
    engine: {
      speedupRatio,
      blockSize: int("block-size", 1),
      numGpuBlocks: int("num-gpu-blocks", 1),
      maxNumSeqs: int("max-num-seqs", 1),
      maxNumBatchedTokens: int("max-num-batched-tokens", 1),
    },
  };
}

/** The `run` subcommand. */
export const runCommand: Command = {
  name: "run",
  summary:
    "frontend + engine in one process (in=http out=echo | out=mocker | out=llamacpp | out=openai:URL)",
  usage,
  run,
};
