// Seed 000's disaggregated serving as a `dynamo serve` graph: DecodeWorker (registers the
// model, hosts the prefill queue, keeps the KV blocks with a prefix cache, generates with
// the mocker) depends on PrefillWorker (pulls remote prefills and writes the uncached
// blocks into the decode worker's shared memory). `queue: jetstream` on both puts the
// queue on JetStream over the runtime's NATS connection.
//
//   deno task build:native
//   deno task dynamo serve examples/disagg/graph.ts:DecodeWorker
//   deno task dynamo frontend --http-port 8000        (with the DYN_HUB line serve prints)

import { z } from "zod";
import { TransferAgent } from "../../native/mod.ts";
import {
  asyncOnShutdown,
  asyncOnStart,
  builtinTestModel,
  type Client,
  type Context,
  depends,
  dynamoContext,
  echoEngine,
  endpoint,
  type LLMEngineOutput,
  MockerEngine,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
  service,
} from "../../mod.ts";
import {
  DecodeKvCache,
  disaggDecodeEngine,
  DisaggRouter,
  EmbeddedPrefillQueue,
  type HostedQueueReply,
  type HostedQueueRequest,
  JetStreamPrefillQueue,
  lookupDecodeMemory,
  mockerDecodeEngine,
  type PrefillQueue,
  prefillQueueHandler,
  PrefillWorker as PrefillEngine,
  publishDecodeMemory,
  RemotePrefillQueue,
  type RemotePrefillRequest,
  runtimeNatsConnection,
  type TokensEngine,
} from "../../llm/disagg/mod.ts";

/** Where the graph registers. */
export const NAMESPACE = "disagg";
const STREAM = `dynamo_prefill_${NAMESPACE}`;

const PrefillConfig = z.object({
  block_bytes: z.number().int().positive().default(4096),
  max_blocks: z.number().int().positive().default(1024),
  delay_ms: z.number().nonnegative().default(0),
  queue: z.enum(["hosted", "jetstream"]).default("hosted"),
});

/** Takes remote prefill requests off the decode workers' queues and writes the blocks. */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "1Gi" } })
export class PrefillWorker {
  readonly #config: z.infer<typeof PrefillConfig>;
  #agent: TransferAgent | undefined;
  #engine: PrefillEngine | undefined;
  #queueClient: Client | undefined;
  #running: Promise<void> | undefined;
  readonly #stop = new AbortController();

  constructor(params: Record<string, unknown> = {}) {
    this.#config = PrefillConfig.parse(params);
  }

  @asyncOnStart
  async init(): Promise<void> {
    const { runtime } = dynamoContext;
    const [, decodeName] = DecodeWorker.dynamoAddress();
    this.#queueClient = await runtime.namespace(NAMESPACE).component(decodeName)
      .endpoint("prefill_queue").client();
    const queue: PrefillQueue<RemotePrefillRequest> = this.#config.queue === "jetstream"
      ? await JetStreamPrefillQueue.open<RemotePrefillRequest>(runtimeNatsConnection(runtime), {
        stream: STREAM,
        ackWaitMs: 10_000,
      })
      : new RemotePrefillQueue(this.#queueClient);
    this.#agent = new TransferAgent(`prefill-${runtime.instanceId}`);
    this.#engine = new PrefillEngine(this.#agent, {
      blockBytes: this.#config.block_bytes,
      maxBlocks: this.#config.max_blocks,
      prefillDelayMs: this.#config.delay_ms,
      resolveDecode: (name) => lookupDecodeMemory(runtime, NAMESPACE, name),
      logger: runtime.logger,
    });
    this.#running = this.#engine.run(queue, {
      signal: this.#stop.signal,
      onResult: (r) => runtime.logger.info("wrote KV blocks", { ...r }),
    });
    this.#running.catch((err: unknown) =>
      runtime.logger.error("prefill loop failed", { error: String(err) })
    );
  }

  /** Only so that decode workers see this one in discovery. */
  @endpoint()
  async *alive(): AsyncGenerator<{ ok: true }> {
    yield { ok: true };
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    this.#stop.abort();
    await this.#running?.catch(() => {});
    this.#engine?.close();
    this.#agent?.close();
    await this.#queueClient?.close();
  }
}

const DecodeConfig = z.object({
  model_path: z.string().optional(),
  max_local_prefill_length: z.number().int().nonnegative().default(1000),
  max_prefill_queue_size: z.number().int().nonnegative().default(64),
  remote_timeout_ms: z.number().int().positive().default(5000),
  block_bytes: z.number().int().positive().default(4096),
  num_blocks: z.number().int().positive().default(2048),
  block_size: z.number().int().positive().default(16),
  engine: z.enum(["mocker", "echo"]).default("mocker"),
  speedup_ratio: z.number().positive().default(1),
  queue: z.enum(["hosted", "jetstream"]).default("hosted"),
});

/** Registers the model; prefills long prompts remotely, short ones itself; generates. */
@service({ dynamo: { namespace: NAMESPACE }, resources: { cpu: "1", memory: "2Gi" } })
export class DecodeWorker {
  prefill = depends(PrefillWorker);
  readonly #config: z.infer<typeof DecodeConfig>;
  #agent: TransferAgent | undefined;
  #kv: DecodeKvCache | undefined;
  #queue: PrefillQueue<RemotePrefillRequest> | undefined;
  #mocker: MockerEngine | undefined;
  #prefillClient: Client | undefined;
  #decode: TokensEngine | undefined;
  #queueHandler: ReturnType<typeof prefillQueueHandler> | undefined;

  constructor(params: Record<string, unknown> = {}) {
    this.#config = DecodeConfig.parse(params);
  }

  @asyncOnStart
  async init(): Promise<void> {
    const { runtime, component } = dynamoContext;
    const c = this.#config;
    const [, prefillName] = PrefillWorker.dynamoAddress();
    const prefillClient = await runtime.namespace(NAMESPACE).component(prefillName)
      .endpoint("alive").client();
    this.#prefillClient = prefillClient;
    this.#agent = new TransferAgent(`decode-${runtime.instanceId}`);
    const kv = new DecodeKvCache(this.#agent, {
      numBlocks: c.num_blocks,
      blockBytes: c.block_bytes,
    });
    this.#kv = kv;
    this.#queue = c.queue === "jetstream"
      ? await JetStreamPrefillQueue.open<RemotePrefillRequest>(runtimeNatsConnection(runtime), {
        stream: STREAM,
        ackWaitMs: 10_000,
      })
      : new EmbeddedPrefillQueue<RemotePrefillRequest>({ ackWaitMs: 10_000 });
    // Same block size, so the mocker's prefix cache names blocks as the byte cache does.
    this.#mocker = c.engine === "mocker"
      ? new MockerEngine({
        blockSize: c.block_size,
        numGpuBlocks: c.num_blocks,
        speedupRatio: c.speedup_ratio,
        logger: runtime.logger,
      })
      : undefined;
    this.#decode = disaggDecodeEngine({
      router: new DisaggRouter({
        maxLocalPrefillLength: c.max_local_prefill_length,
        maxPrefillQueueSize: c.max_prefill_queue_size,
      }),
      queue: this.#queue,
      kv,
      engine: this.#mocker ? mockerDecodeEngine(this.#mocker) : echoEngine(),
      blockSize: c.block_size,
      remoteTimeoutMs: c.remote_timeout_ms,
      remoteAvailable: () => prefillClient.instanceIds().length > 0,
      onPrefill: (r) => runtime.logger.info("prefilled", { ...r }),
      logger: runtime.logger,
    });
    this.#queueHandler = prefillQueueHandler(this.#queue, kv.memoryInfo(), runtime.instanceId);
    await publishDecodeMemory(runtime, NAMESPACE, kv.memoryInfo());
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      component.endpoint("generate"),
      c.model_path ?? await builtinTestModel(),
      { kvCacheBlockSize: c.block_size },
    );
  }

  @endpoint()
  async *generate(req: PreprocessedRequest, ctx: Context): AsyncGenerator<LLMEngineOutput> {
    yield* this.#decode!(req, ctx);
  }

  @endpoint({ name: "prefill_queue" })
  async *prefillQueue(req: HostedQueueRequest, ctx: Context): AsyncGenerator<HostedQueueReply> {
    yield* this.#queueHandler!(req, ctx);
  }

  @asyncOnShutdown
  async close(): Promise<void> {
    await this.#mocker?.close();
    await this.#queue?.close();
    await this.#prefillClient?.close();
    this.#kv?.close();
    this.#agent?.close();
  }
}
