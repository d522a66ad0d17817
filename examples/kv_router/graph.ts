// Seed 003's KV-routing skeleton as a `dynamo serve` graph: Processor -> Router -> Worker.
// Workers (mocker engines) publish KV events and load metrics; the Router follows them with
// a KvIndexer and a KvMetricsAggregator and answers "which worker?"; the Processor asks it
// and sends the request to that worker with client.direct().
//
//   deno task dynamo serve examples/kv_router/graph.ts:Processor -f examples/kv_router/config.yaml
//   deno run -A examples/kv_router/client.ts "a prompt"      (with the DYN_HUB line serve prints)

import { z } from "zod";
import {
  asyncOnShutdown,
  asyncOnStart,
  builtinTestModel,
  type Client,
  type Context,
  depends,
  dynamoContext,
  endpoint,
  IncrementalDetokenizer,
  KvEventPublisher,
  KvIndexer,
  KvMetricsAggregator,
  KvMetricsPublisher,
  KvRouter,
  type LLMEngineOutput,
  type Logger,
  MockerEngine,
  type PreprocessedRequest,
  service,
  ServiceConfig,
  Tokenizer,
} from "../../mod.ts";
import { costFunction } from "./cost.ts";

/** Where the graph registers. */
export const NAMESPACE = "kv_router";

const TokenIds = z.array(z.number().int().nonnegative());

// ---------------------------------------------------------------------------------------
// Worker

/** What Worker.generate takes (a wire type): a pre-processed tokens request. */
export const WorkerRequest = z.object({
  token_ids: TokenIds.min(1),
  stop_conditions: z.object({ max_tokens: z.number().int().positive().optional() }).optional(),
});
/** What Worker.generate takes (a wire type). */
export type WorkerRequest = z.infer<typeof WorkerRequest>;

/** What Worker.generate yields: the engine's output plus who produced it. */
export interface WorkerOutput extends LLMEngineOutput {
  worker_id: string;
}

/** Worker configuration (`Worker:` in config.yaml). */
const WorkerConfig = z.object({
  block_size: z.number().int().positive().default(16),
  num_gpu_blocks: z.number().int().positive().default(1024),
  speedup_ratio: z.number().positive().default(10),
  /** Tokens generated when a request sets no max_tokens. */
  default_max_tokens: z.number().int().positive().default(16),
});

/**
 * A simulated vLLM worker (the mocker engine). Its KV cache events go out through a
 * KvEventPublisher and its load through a KvMetricsPublisher, both on this component, so
 * the Router sees what each replica caches and how busy it is.
 */
@service({ dynamo: { namespace: NAMESPACE }, resources: { gpu: 1, cpu: "2", memory: "4Gi" } })
export class Worker {
  readonly #config: z.infer<typeof WorkerConfig>;
  #engine: MockerEngine | undefined;
  #events: KvEventPublisher | undefined;
  #metrics: KvMetricsPublisher | undefined;
  #workerId = "";

  constructor(params: Record<string, unknown> = {}) {
    this.#config = WorkerConfig.parse(params);
  }

  @asyncOnStart
  async init(): Promise<void> {
    const { component, runtime } = dynamoContext;
    this.#workerId = runtime.instanceId;
    const events = new KvEventPublisher(component, { kvBlockSize: this.#config.block_size });
    const metrics = new KvMetricsPublisher();
    await metrics.createEndpoint(component);
    const log = runtime.logger;
    this.#engine = new MockerEngine({
      blockSize: this.#config.block_size,
      numGpuBlocks: this.#config.num_gpu_blocks,
      speedupRatio: this.#config.speedup_ratio,
      defaultMaxTokens: this.#config.default_max_tokens,
      onKvEvent: (data, tier) => {
        events.publish(data, tier).catch((err: unknown) =>
          // The indexer finds a lost event by its id and asks for a resync.
          log.debug("cannot publish a KV event", { error: String(err) })
        );
      },
      onMetrics: (m) =>
        metrics.publish({
          requestActiveSlots: m.request_active_slots,
          requestTotalSlots: m.request_total_slots,
          kvActiveBlocks: m.kv_active_blocks,
          kvTotalBlocks: m.kv_total_blocks,
          numRequestsWaiting: m.num_requests_waiting,
          gpuCacheUsagePerc: m.gpu_cache_usage_perc,
          gpuPrefixCacheHitRate: m.gpu_prefix_cache_hit_rate,
        }),
    });
    this.#events = events;
    this.#metrics = metrics;
    // Publish idle metrics at once: the worker is a routing candidate before its first request.
    const idle = this.#engine.scheduler.metrics();
    metrics.publish({
      requestActiveSlots: idle.request_active_slots,
      requestTotalSlots: idle.request_total_slots,
      kvActiveBlocks: idle.kv_active_blocks,
      kvTotalBlocks: idle.kv_total_blocks,
      numRequestsWaiting: idle.num_requests_waiting,
      gpuCacheUsagePerc: idle.gpu_cache_usage_perc,
      gpuPrefixCacheHitRate: idle.gpu_prefix_cache_hit_rate,
    });
  }

  @endpoint({ request: WorkerRequest })
  async *generate(req: WorkerRequest, context?: Context): AsyncGenerator<WorkerOutput> {
    const request: PreprocessedRequest = {
      model: "mocker",
      token_ids: req.token_ids,
      stop_conditions: req.stop_conditions ?? {},
      sampling_options: {},
      eos_token_ids: [],
    };
    for await (const out of this.#engine!.generate(request, context)) {
      yield { ...out, worker_id: this.#workerId };
    }
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await this.#engine?.close();
    this.#metrics?.close();
    await this.#events?.close();
  }
}

// ---------------------------------------------------------------------------------------
// Router

/** What Router.generate takes (seed 000's `Tokens`). */
export const RouterRequest = z.object({ tokens: TokenIds });
/** What Router.generate takes (a wire type). */
export type RouterRequest = z.infer<typeof RouterRequest>;

/** Router configuration (`Router:` in config.yaml). */
const RouterConfig = z.object({
  /** Tokens per KV block; must be the workers' (default: Worker's block_size, else 16). */
  block_size: z.number().int().positive().optional(),
  /**
   * "custom": seed 000's `_cost_function` (cost.ts) over KvIndexer scores and
   * KvMetricsAggregator metrics; "kv_router": the built-in KvRouter cost
   * (`overlap_score_weight * uncached prefill blocks + decode blocks`, lowest wins).
   */
  cost_function: z.enum(["custom", "kv_router"]).default("custom"),
  overlap_score_weight: z.number().nonnegative().default(1),
  temperature: z.number().nonnegative().default(0),
});

/**
 * A standalone KV router (seed 000's "python-based KV Router"): takes a request's token
 * ids and yields the id of the worker to send it to.
 */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "1Gi" } })
export class Router {
  /** Seed 003: the router depends on the workers, to know which ones exist. */
  worker = depends(Worker);
  readonly #params: z.infer<typeof RouterConfig>;
  #config!: z.infer<typeof RouterConfig> & { block_size: number };
  #workers!: Client;
  #indexer: KvIndexer | undefined;
  #aggregator: KvMetricsAggregator | undefined;
  #kvRouter: KvRouter | undefined;
  #log!: Logger;

  constructor(params: Record<string, unknown> = {}) {
    this.#params = RouterConfig.parse(params);
  }

  @asyncOnStart
  async init(): Promise<void> {
    const { runtime } = dynamoContext;
    this.#log = runtime.logger;
    const parsed = this.#params;
    const [ns, name] = Worker.dynamoAddress();
    const blockSize = parsed.block_size ??
      WorkerConfig.parse(ServiceConfig.getInstance().params(name)).block_size;
    this.#config = { ...parsed, block_size: blockSize };
    // Seed 000: a listener on the workers' component feeds the indexer and the aggregator.
    const kvListener = runtime.namespace(ns).component(name);
    await kvListener.createService();
    const workerEndpoint = kvListener.endpoint("generate");
    this.#workers = await workerEndpoint.client();
    if (this.#config.cost_function === "kv_router") {
      this.#kvRouter = new KvRouter(workerEndpoint, {
        blockSize,
        overlapScoreWeight: this.#config.overlap_score_weight,
        temperature: this.#config.temperature,
        client: this.#workers,
      });
    } else {
      this.#indexer = new KvIndexer(kvListener, blockSize);
      this.#aggregator = new KvMetricsAggregator(kvListener);
    }
    this.#log.info("router ready", { cost_function: this.#config.cost_function, blockSize });
  }

  @endpoint({ request: RouterRequest })
  async *generate(request: RouterRequest, context?: Context): AsyncGenerator<string> {
    await this.#workers.waitForInstances({ signal: context?.signal, timeoutMs: 30_000 });
    if (this.#kvRouter) {
      const { instanceId, overlapBlocks } = await this.#kvRouter.findBestMatch(request.tokens);
      this.#log.info("routed", { worker_id: instanceId, overlap_blocks: overlapBlocks });
      yield instanceId;
      return;
    }
    let scores;
    try {
      // lora_id is a placeholder for LoRA support, not used in this example.
      const loraId = 0;
      scores = await this.#indexer!.findMatchesForRequest(request.tokens, loraId);
    } catch (err: unknown) {
      this.#log.warn("error finding matches", { error: String(err) });
    }
    // Published/aggregated KV metrics.
    const metrics = await this.#aggregator!.getMetrics();
    // (Optional) custom metrics for the cost function; their shape is up to the router.
    const customMetrics = { my_custom_metric: 42 };
    const workerId = costFunction({
      scores,
      metrics,
      tokenLength: request.tokens.length,
      customMetrics,
      workerIds: this.#workers.instanceIds(),
      blockSize: this.#config.block_size,
    }, { log: (msg, fields) => this.#log.debug(msg, fields) });
    this.#log.info("routed", {
      worker_id: workerId,
      overlap_blocks: scores?.scores.get(workerId) ?? 0,
    });
    yield workerId;
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await this.#kvRouter?.close();
    await this.#indexer?.close();
    await this.#aggregator?.close();
    await this.#workers?.close();
  }
}

// ---------------------------------------------------------------------------------------
// Processor

/** What Processor.generate takes: token ids, or text for the built-in test model's tokenizer. */
export const ProcessorRequest = z.object({
  tokens: TokenIds.min(1).optional(),
  prompt: z.string().min(1).optional(),
  max_tokens: z.number().int().positive().optional(),
}).refine((r) => (r.tokens === undefined) !== (r.prompt === undefined), {
  message: "give either tokens or prompt",
});
/** What Processor.generate takes (a wire type). */
export type ProcessorRequest = z.infer<typeof ProcessorRequest>;

/** What Processor.generate yields. */
export interface ProcessorOutput {
  /** The worker that produced these tokens. */
  worker_id: string;
  token_ids: number[];
  /** The tokens decoded (text prompts only). */
  text?: string;
  /** Prompt tokens the worker found in its prefix cache (first item only). */
  cached_tokens?: number;
  finish_reason?: string | null;
}

/** Processor configuration (`Processor:` in config.yaml). */
const ProcessorConfig = z.object({
  /** "kv": ask the Router; "round_robin" / "random": the worker client's own routing. */
  router: z.enum(["kv", "round_robin", "random"]).default("kv"),
});

/**
 * The entry (seed 003's Processor): tokenizes, asks the Router for a worker, sends the
 * request there with `client.direct(request, workerId)` and streams the tokens back.
 */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "2Gi" } })
export class Processor {
  router = depends(Router);
  worker = depends(Worker);
  readonly #config: z.infer<typeof ProcessorConfig>;
  #workers!: Client;
  #tokenizer: Promise<Tokenizer> | undefined;
  #log!: Logger;

  constructor(params: Record<string, unknown> = {}) {
    this.#config = ProcessorConfig.parse(params);
  }

  @asyncOnStart
  async init(): Promise<void> {
    const { runtime } = dynamoContext;
    this.#log = runtime.logger;
    const [ns, name] = Worker.dynamoAddress();
    // A plain client of the workers, for direct(): depends() clients route round robin.
    this.#workers = await runtime.namespace(ns).component(name).endpoint("generate").client();
  }

  @endpoint({ request: ProcessorRequest })
  async *generate(req: ProcessorRequest, context?: Context): AsyncGenerator<ProcessorOutput> {
    const tokenizer = req.prompt === undefined ? undefined : await this.#loadTokenizer();
    const tokens = req.tokens ?? tokenizer!.encode(req.prompt!);
    const request: WorkerRequest = {
      token_ids: tokens,
      ...(req.max_tokens === undefined ? {} : { stop_conditions: { max_tokens: req.max_tokens } }),
    };
    await this.#workers.waitForInstances({ signal: context?.signal, timeoutMs: 30_000 });
    let workerId = "";
    if (this.#config.router === "kv") {
      // Read the Router's one answer to the end: breaking out would stop our own context.
      for await (const id of this.router.generate({ tokens }, { context })) workerId ||= id;
    }
    let stream;
    if (workerId !== "") {
      // The Router may know a worker before this client does.
      await this.#workers.waitForInstances({ among: [workerId], timeoutMs: 10_000 });
      this.#log.info("sending to the router's worker", { worker_id: workerId });
      stream = await this.#workers.direct<WorkerOutput>(request, workerId, { context });
    } else if (this.#config.router === "random") {
      stream = await this.#workers.random<WorkerOutput>(request, { context });
    } else {
      stream = await this.#workers.generate<WorkerOutput>(request, { context });
    }
    const detokenizer = tokenizer ? new IncrementalDetokenizer(tokenizer) : undefined;
    for await (const out of stream) {
      const item: ProcessorOutput = { worker_id: out.worker_id, token_ids: out.token_ids };
      if (detokenizer) item.text = detokenizer.push(out.token_ids);
      if (out.cached_tokens !== undefined) item.cached_tokens = out.cached_tokens;
      if (out.finish_reason) item.finish_reason = out.finish_reason;
      yield item;
    }
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await this.#workers?.close();
  }

  /** The built-in test model's tokenizer (Qwen3), loaded on the first text prompt. */
  #loadTokenizer(): Promise<Tokenizer> {
    this.#tokenizer ??= (async () => {
      const dir = await builtinTestModel();
      return Tokenizer.fromBytes(
        await Deno.readFile(`${dir}/tokenizer.json`),
        await Deno.readFile(`${dir}/tokenizer_config.json`),
      );
    })();
    this.#tokenizer.catch(() => (this.#tokenizer = undefined));
    return this.#tokenizer;
  }
}
