// `dynamo run in=http out=ENGINE [MODEL]`: frontend and engine in one process on the
// embedded runtime. The README's first command.

import { announceBackends, backendsInfo } from "../runtime/backends.ts";
import {
  bareUpstreamCard,
  builtinTestModel,
  checkUpstream,
  DistributedRuntime,
  echoEngine,
  EmbeddedCluster,
  type Endpoint,
  type LoadedModel,
  type Logger,
  type MockerWorkerOptions,
  type MockerWorkers,
  type ModelDeploymentCard,
  ModelInput,
  ModelType,
  openaiUpstream,
  publishModelCard,
  registerLlm,
  runMockerWorker,
  RuntimeMetrics,
  startMockerWorkers,
  tracingFromEnv,
  UpstreamError,
  upstreamModelCard,
} from "../mod.ts";
import {
  applyRequestPlaneFlag,
  type Command,
  ExitCode,
  type Io,
  loggerFromEnv,
  parseCommandArgs,
  parseMs,
  REQUEST_PLANE_FLAG,
  UsageError,
} from "./_common.ts";
import { HTTP_FLAGS, parseHttpFlags } from "./frontend.ts";
import { rejectReferenceOnlyFlags } from "./_reference_flags.ts";
import { serveFrontend, untilSignal } from "./_http.ts";
import { huggingFaceOptionsFromEnv } from "./_huggingface.ts";
import { downloadGguf, parseGgufRef } from "../llm/model/huggingface.ts";
import { REASONING_PARSER_NAMES } from "../llm/parsers/reasoning.ts";
import { TOOL_CALL_PARSER_NAMES } from "../llm/parsers/tool_calls.ts";

const usage = `Usage: dynamo run in=http out=ENGINE [MODEL] [options]
       dynamo run in=dyn://NAMESPACE.COMPONENT.ENDPOINT out=ENGINE [MODEL] [options]

in=http (default): runs the OpenAI frontend and an engine in one process on the embedded
runtime. in=dyn://NAMESPACE.COMPONENT.ENDPOINT: a worker only, as the reference's runner
does it: registers MODEL on the network (etcd + NATS from ETCD_ENDPOINTS / NATS_SERVER, or
DYN_HUB) at that endpoint and serves it until SIGINT/SIGTERM; a frontend anywhere
('dynamo frontend') serves it.

Engines:
  out=echo                 tokens in, the prompt's tokens back (MODEL: a folder with
                           config.json, tokenizer.json, tokenizer_config.json, a Hugging
                           Face repo id, or a GGUF file; default: a built-in test model
                           made of the real Qwen3 tokenizer files)
  out=openai:http://H:P    forward to an OpenAI-compatible server you already run (vLLM,
                           SGLang, llama.cpp); MODEL is the model name to ask it for
                           (default: the one model its /v1/models lists); more servers
                           of the same model with --upstream
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
  --active-prefill-tokens-threshold N, --router-replica-sync,
  --router-decision-log PATH
                           kv: bounded load, busy thresholds, replica sync, a log of
                           every routing decision (see 'dynamo help frontend')
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
  --request-plane P        in=dyn://: tcp (default) or nats (env DYN_REQUEST_PLANE)
  --reference-wire         accepted for old scripts; what it did is the default now:
                           every in=dyn:// worker writes the reference's (ai-dynamo
                           1.6.1) records, takes its request framing on the TCP plane,
                           and on etcd publishes KV events and load in its formats
  --delay-ms N             echo: pause per token (default 0)
  --model-path PATH        openai: card source (tokenizer, context length: a model
                           folder, repo id or GGUF); without it the card comes from the
                           upstream's /v1/models (name, context length where reported;
                           the tokenizer of the folder it names when that is here, else
                           unknown: token counts from the upstream's usage)
  --upstream URL           openai: one more upstream server of the model (repeatable);
                           each request goes to the reachable one with the fewest
                           requests in flight; one that cannot be reached is passed over
                           until its /v1/models answers (checked every 5 s); /health is
                           503 only while none answers
  --num-workers N          mocker, llamacpp: workers in this process (default 1); with
                           --router-mode kv, prompts go where their prefix is cached
  --speedup-ratio X        mocker: simulated time runs X times faster (default 1)
  --block-size N           mocker, llamacpp: tokens per KV block (default 16)
  --num-gpu-blocks N       mocker: KV blocks per worker (default 16384)
  --host-kv-blocks N       mocker: KV blocks in each worker's host-memory tier, where
                           blocks evicted from the GPU go and are loaded back from
                           (0.042 ms per block) instead of computed (default 4 per GPU
                           block; 0: none)
  --max-num-seqs N         mocker: running sequences per worker (default 256);
                           llamacpp: sequences in the context (default 4)
  --n-gpu-layers N         llamacpp: layers offloaded to a GPU (default 0)
  --embedding              llamacpp: also serve /v1/embeddings with the model
  --max-num-batched-tokens N
                           mocker: tokens per forward pass (default 8192)
  --kv-fetch-ms-per-block MS|off
                           mocker: a worker loads a prompt's prefix cached on another
                           worker when a KV router says so, taking MS simulated ms per
                           KV block (default 0.084: 2 MiB blocks over 25 GB/s); off:
                           workers compute what they lack
  -h, --help               show this help`;

function parseIntFlag(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === "" || !Number.isInteger(n) || n < min) {
    throw new UsageError(
      `--${name} must be a whole number >= ${min}, got ${JSON.stringify(value)}`,
      "run",
    );
  }
  return n;
}

/** The names of an `in=dyn://NAMESPACE.COMPONENT.ENDPOINT` input. */
export interface DynInput {
  namespace: string;
  component: string;
  endpoint: string;
}

/**
 * Parses `dyn://NAMESPACE.COMPONENT.ENDPOINT` (the reference runner's worker input).
 * @throws {UsageError} not three names of letters, digits, '_' or '-'
 */
export function parseDynInput(input: string): DynInput {
  const names = input.slice("dyn://".length).split(".");
  if (names.length !== 3 || !names.every((n) => /^[A-Za-z0-9_-]+$/.test(n))) {
    throw new UsageError(
      `in=${input}: expected dyn://NAMESPACE.COMPONENT.ENDPOINT, three names of letters, ` +
        "digits, '_' or '-' (e.g. in=dyn://dynamo.backend.generate)",
      "run",
    );
  }
  const [namespace, component, endpoint] = names as [string, string, string];
  return { namespace, component, endpoint };
}

async function run(args: string[], io: Io): Promise<number> {
  const flags = {
    ...HTTP_FLAGS,
    ...REQUEST_PLANE_FLAG,
    "model-name": { type: "string" },
    "context-length": { type: "string" },
    "migration-limit": { type: "string" },
    "delay-ms": { type: "string" },
    "model-path": { type: "string" },
    upstream: { type: "string", multiple: true },
    "num-workers": { type: "string" },
    "speedup-ratio": { type: "string" },
    "kv-fetch-ms-per-block": { type: "string" },
    "block-size": { type: "string" },
    "num-gpu-blocks": { type: "string" },
    "host-kv-blocks": { type: "string" },
    "max-num-seqs": { type: "string" },
    "max-num-batched-tokens": { type: "string" },
    "n-gpu-layers": { type: "string" },
    "reference-wire": { type: "boolean" },
    embedding: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  } as const;
  rejectReferenceOnlyFlags("run", args, flags);
  const { values, positionals } = parseCommandArgs("run", args, flags);
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
  if (input !== "http" && !input.startsWith("dyn://")) {
    throw new UsageError(
      `in= must be http or dyn://NAMESPACE.COMPONENT.ENDPOINT, got in=${input}`,
      "run",
    );
  }
  const worker = input === "http" ? undefined : parseDynInput(input);
  const target = worker ?? { namespace: "dynamo", component: "backend", endpoint: "generate" };
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
  if (values["reference-wire"] && (!worker || output.startsWith("openai"))) {
    throw new UsageError(
      "--reference-wire applies to in=dyn:// workers with out=echo, out=mocker or out=llamacpp",
      "run",
    );
  }
  if (worker) applyRequestPlaneFlag("run", values["request-plane"]);
  else if (values["request-plane"] !== undefined) {
    throw new UsageError("--request-plane applies to in=dyn:// workers only", "run");
  }
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
  let mocker: { numWorkers: number; engine: MockerWorkerOptions } | undefined;
  let checkHealth: (() => Promise<string | undefined>) | undefined;
  let llama: { numWorkers: number; engine: LlamaCppWorkerOptions } | undefined;
  let upstream: { baseUrls: string[]; model?: string; modelPath?: string } | undefined;
  // The context length an upstream reports, over its model folder's own.
  let upstreamContext: number | undefined;
  if (values.upstream !== undefined && !output.startsWith("openai")) {
    throw new UsageError("--upstream applies to out=openai only", "run");
  }
  if (output === "echo") {
    handler = echoEngine({ delayMs });
    modelInput = ModelInput.Tokens;
    modelPath = rest[0] ?? await builtinTestModel();
  } else if (output === "openai" || output.startsWith("openai:")) {
    const baseUrls = [
      ...(output === "openai" ? [] : [output.slice("openai:".length)]),
      ...(values.upstream ?? []),
    ];
    if (baseUrls.length === 0) {
      throw new UsageError("out=openai needs a URL (out=openai:URL or --upstream URL)", "run");
    }
    for (const url of baseUrls) {
      if (!/^https?:\/\/[^/]+/.test(url)) {
        throw new UsageError(
          `out=openai: needs URLs like http://127.0.0.1:8001, got ${JSON.stringify(url)}`,
          "run",
        );
      }
    }
    upstream = { baseUrls, model: rest[0], modelPath: values["model-path"] };
    checkHealth = () => checkUpstream({ baseUrl: baseUrls });
    modelInput = ModelInput.Text;
    modelPath = values["model-path"] ?? "";
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

  // OTEL_EXPORTER_OTLP_ENDPOINT set: the frontend's and the engines' spans, one tracing.
  const tracing = await tracingFromEnv(Deno.env.toObject(), { defaultServiceName: "dynamo-run" });
  const signals = untilSignal();
  const embedded = new EmbeddedCluster();
  // One registry for every runtime of the process: the frontend's /metrics shows the workers'.
  const metrics = new RuntimeMetrics();
  const runtime = worker
    ? await DistributedRuntime.fromEnv({ logger, metrics, tracing })
    : await DistributedRuntime.connect({
      discovery: "memory",
      requestPlane: "local",
      logger,
      embedded,
      metrics,
      tracing,
    });
  if (worker && backendsInfo(runtime).process_local) {
    signals.dispose();
    await runtime.shutdown();
    throw new UsageError(
      "in=dyn:// registers a worker on the network: set ETCD_ENDPOINTS and NATS_SERVER " +
        "(or DYN_HUB); without them no frontend could reach it",
      "run",
    );
  }
  announceBackends(runtime, logger, worker ? "worker" : "process", !worker);
  /** Another runtime for one more worker (own instance id): on the network, or embedded. */
  const workerRuntime = () =>
    worker
      ? DistributedRuntime.fromEnv({ logger, metrics, tracing })
      : DistributedRuntime.connect({ logger, embedded, metrics, tracing });
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
        const rt = i === 0 && worker ? runtime : await workerRuntime();
        if (rt !== runtime) workerRuntimes.push(rt);
        const endpoint = rt.namespace(target.namespace).component(target.component)
          .endpoint(target.endpoint);
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
    if (mocker && worker) {
      // Each mocker worker is its own runtime (own lease and instance id) on the network.
      const register = {
        modelName,
        contextLength,
        migrationLimit,
        huggingFace: huggingFaceOptionsFromEnv(),
      };
      for (let i = 0; i < mocker.numWorkers; i++) {
        const rt = i === 0 ? runtime : await workerRuntime();
        if (rt !== runtime) workerRuntimes.push(rt);
        const endpoint = rt.namespace(target.namespace).component(target.component)
          .endpoint(target.endpoint);
        const started = await runMockerWorker(endpoint, {
          metricsIntervalMs: 100,
          ...mocker.engine,
          logger,
          modelPath,
          register,
        });
        if (i === 0) {
          logger.info("mocker workers registered", {
            model: started.card.display_name,
            workers: mocker.numWorkers,
            context: started.card.context_length,
          });
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
        connect: { logger, metrics, tracing },
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
    const component = runtime.namespace(target.namespace).component(target.component);
    await component.createService();
    const endpoint = component.endpoint(target.endpoint);
    if (upstream) {
      const card = await upstreamCard(upstream, { modelName, contextLength, migrationLimit });
      if (card === undefined) return ExitCode.Failure;
      handler = openaiUpstream({
        baseUrl: upstream.baseUrls,
        upstreamModel: upstream.model ?? card.upstreamModel,
        logger,
      });
      modelName = card.modelName;
      if (card.modelPath !== undefined) {
        modelPath = card.modelPath;
        upstreamContext = card.contextLength;
      } else if (card.loaded) {
        const serving = endpoint.serveEndpoint(handler, { gracefulShutdown: true });
        serving.catch((err) => logger.error("engine stopped", { error: String(err) }));
        const published = await publishModelCard(endpoint, card.loaded);
        logger.info("model registered", {
          model: published.display_name,
          input: modelInput,
          upstreams: upstream.baseUrls.length,
          context: published.context_length || "unknown",
          tokenizer: "unknown (token counts from the upstream's usage)",
        });
        return await serveUntilSignal();
      }
    }
    const serving = endpoint.serveEndpoint(handler as never, { gracefulShutdown: true });
    serving.catch((err) => logger.error("engine stopped", { error: String(err) }));
    const card = await registerLlm(
      modelInput,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      modelPath,
      {
        modelName,
        contextLength: contextLength ?? upstreamContext,
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
    await tracing?.shutdown().catch((err) =>
      logger.warn("exporting the last spans failed", { error: String(err) })
    );
  }

  /**
   * out=openai's card: from --model-path when given (tokenizer known), else from the
   * upstreams' /v1/models; when none answers, a card naming MODEL with no tokenizer and no
   * context length (said in the log), so that the frontend starts and /health tells.
   */
  async function upstreamCard(
    up: { baseUrls: string[]; model?: string; modelPath?: string },
    o: { modelName?: string; contextLength?: number; migrationLimit?: number },
  ): Promise<
    {
      loaded?: LoadedModel;
      modelName?: string;
      upstreamModel?: string;
      modelPath?: string;
      contextLength?: number;
    } | undefined
  > {
    if (up.modelPath !== undefined) return { modelName: o.modelName ?? up.model };
    try {
      const loaded = await upstreamModelCard({
        baseUrl: up.baseUrls,
        upstreamModel: up.model,
        ...o,
      });
      const said = loaded.card.user_data?.upstream as { model: string; root?: string };
      const modelName = loaded.card.display_name;
      // A server that loaded its model from a folder this machine has (vLLM's `root`, or an
      // id that is a path): that folder's tokenizer and template describe the model.
      const local = await modelFolder([said.root, said.model]);
      if (local !== undefined) {
        logger.info("upstream model folder found here: its tokenizer describes the model", {
          model: modelName,
          path: local,
        });
        const contextLength = loaded.card.context_length || undefined;
        return { modelName, upstreamModel: said.model, modelPath: local, contextLength };
      }
      return { loaded, modelName, upstreamModel: said.model };
    } catch (err) {
      if (!(err instanceof UpstreamError)) throw err;
      if (err.status !== 502 || up.model === undefined) {
        io.err(
          `dynamo run: ${err.message}${
            err.status === 502 ? " (name MODEL to start before the upstream does)" : ""
          }`,
        );
        return undefined;
      }
      logger.warn("upstream model list unreadable: card without tokenizer or context length", {
        model: o.modelName ?? up.model,
        error: err.message,
      });
      const loaded = bareUpstreamCard({ baseUrl: up.baseUrls, upstreamModel: up.model, ...o });
      return { modelName: loaded.card.display_name, upstreamModel: up.model, loaded };
    }
  }

  async function serveUntilSignal(): Promise<number> {
    if (worker) {
      const path = `${target.namespace}/${target.component}/${target.endpoint}`;
      io.out(`dynamo worker serving ${path} (Ctrl-C stops it)`);
      await signals.signalled;
      logger.info("shutting down: draining in-flight requests");
      return ExitCode.Ok;
    }
    const frontend = await serveFrontend(
      runtime,
      { ...http, logger, checkHealth, workerMetrics: metrics.registry },
      io,
    );
    await signals.signalled;
    logger.info("shutting down");
    await frontend.shutdown();
    return ExitCode.Ok;
  }
}

/** The first of `paths` that is a model folder (config.json and the tokenizer files). */
async function modelFolder(paths: (string | undefined)[]): Promise<string | undefined> {
  for (const path of paths) {
    if (path === undefined || !path.startsWith("/")) continue;
    const files = ["config.json", "tokenizer.json", "tokenizer_config.json"];
    const found = await Promise.all(
      files.map((f) => Deno.stat(`${path}/${f}`).then((s) => s.isFile, () => false)),
    );
    if (found.every(Boolean)) return path;
  }
  return undefined;
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
  values: Record<string, string | boolean | string[] | undefined>,
): { numWorkers: number; engine: MockerWorkerOptions } {
  const int = (name: string, min: number) => parseIntFlag(name, values[name] as string, min);
  const fetch = values["kv-fetch-ms-per-block"] as string | undefined;
  const fetchMs = fetch === undefined ? undefined : fetch === "off" ? null : Number(fetch);
  if (typeof fetchMs === "number" && !(fetchMs >= 0 && fetchMs < Infinity) || fetch === "") {
    throw new UsageError(
      `--kv-fetch-ms-per-block must be a number of ms >= 0 or "off", got ${JSON.stringify(fetch)}`,
      "run",
    );
  }
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
      hostBlocks: int("host-kv-blocks", 0),
      maxNumSeqs: int("max-num-seqs", 1),
      maxNumBatchedTokens: int("max-num-batched-tokens", 1),
      kvFetchMsPerBlock: fetchMs,
    },
  };
}

/** The `run` subcommand. */
export const runCommand: Command = {
  name: "run",
  summary:
    "frontend + engine in one process (in=http out=echo | out=mocker | out=llamacpp | out=openai:URL), or a worker (in=dyn://NS.COMPONENT.ENDPOINT)",
  usage,
  run,
};
