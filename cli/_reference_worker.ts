// `dynamo run in=dyn://NS.COMPONENT.ENDPOINT out=ENGINE --reference-wire`: our engines as
// workers of a reference (ai-dynamo 1.6.1) deployment, through serveReferenceEndpoint: the
// reference's etcd records and request framing, so its frontend and router serve them.

import { basename, join } from "node:path";
import type { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import type { Logger } from "../runtime/logger.ts";
import {
  type ReferenceKvEventData,
  ReferenceKvEventPublisher,
} from "../runtime/reference/kv_events.ts";
import { ReferenceLoadPublisher } from "../runtime/reference/load_metrics.ts";
import {
  type ReferenceEndpointServer,
  referenceModelCard,
  serveReferenceEndpoint,
} from "../runtime/reference/worker.ts";
import { echoEngine } from "../llm/engines/echo.ts";
import { MockerEngine, type MockerEngineOptions } from "../llm/engines/mocker/engine.ts";
import { writeGgufAsHfFolder } from "../llm/model/gguf_facts.ts";
import { UsageError } from "./_common.ts";

/** What {@linkcode serveReferenceWorkers} starts. */
export interface ReferenceWorkersOptions {
  engine: "echo" | "mocker" | "llamacpp";
  numWorkers: number;
  /** The first worker's runtime; `another` makes one per further worker (own lease). */
  runtime: DistributedRuntime;
  another: () => Promise<DistributedRuntime>;
  target: { namespace: string; component: string; endpoint: string };
  /** A local model folder (echo, mocker) or a `.gguf` file (llamacpp). */
  modelPath: string;
  modelName?: string;
  contextLength?: number;
  migrationLimit?: number;
  kvBlockSize?: number;
  echoDelayMs: number;
  mocker?: MockerEngineOptions;
  llama?: { nGpuLayers?: number; maxNumSeqs?: number; contextLength?: number };
  logger: Logger;
}

/** Workers started by {@linkcode serveReferenceWorkers}. */
export interface ReferenceWorkers {
  /** Runtimes made for workers past the first (the caller shuts them down). */
  readonly runtimes: readonly DistributedRuntime[];
  /** Removes the records, stops the engines. */
  close(): Promise<void>;
}

/**
 * Starts `numWorkers` workers of `engine` in the reference's wire format.
 *
 * @throws {UsageError} a model path the reference's card cannot describe
 */
export async function serveReferenceWorkers(
  o: ReferenceWorkersOptions,
): Promise<ReferenceWorkers> {
  const servers: ReferenceEndpointServer[] = [];
  const closers: (() => Promise<void>)[] = [];
  const runtimes: DistributedRuntime[] = [];
  let folder = o.modelPath;
  let tmp: string | undefined;
  try {
    if (o.engine === "llamacpp") {
      // The reference reads a tokenizer only from a Hugging Face folder: write the GGUF's.
      tmp = await Deno.makeTempDir({ prefix: "dynamo-reference-card-" });
      folder = await writeGgufAsHfFolder(o.modelPath, tmp);
    } else if (!(await isDirectory(folder))) {
      throw new UsageError(
        `--reference-wire needs a local model folder (config.json, tokenizer.json, ` +
          `tokenizer_config.json) for the reference's card, got ${JSON.stringify(folder)}`,
        "run",
      );
    }
    const displayName = o.modelName ??
      basename(o.modelPath).replace(/\.gguf$/i, "");
    const card = await referenceModelCard({
      modelPath: folder,
      displayName,
      contextLength: o.contextLength,
      migrationLimit: o.migrationLimit,
      kvCacheBlockSize: o.kvBlockSize ?? o.mocker?.blockSize,
      kvEvents: o.engine !== "echo",
    });
    const llamaModule = o.engine === "llamacpp"
      ? await import(new URL("../llm/engines/llamacpp/mod.ts", import.meta.url).href) as {
        LlamaCppEngine: {
          load(path: string, options: Record<string, unknown>): Promise<{
            handler: unknown;
            close(): Promise<void>;
          }>;
        };
      }
      : undefined;
    for (let i = 0; i < o.numWorkers; i++) {
      const runtime = i === 0 ? o.runtime : await o.another();
      if (runtime !== o.runtime) runtimes.push(runtime);
      let handler: unknown;
      // KV events in the reference's format, for its KV router (the publisher starts once the
      // engine is built and before the worker serves: its query answers hold every event).
      let events: ReferenceKvEventPublisher | undefined;
      const onKvEvent = (data: ReferenceKvEventData) => events?.publish(data);
      if (o.engine === "echo") handler = echoEngine({ delayMs: o.echoDelayMs });
      else if (o.engine === "mocker") {
        const engine = new MockerEngine({ ...o.mocker, onKvEvent });
        closers.push(() => engine.close());
        handler = engine.handler;
      } else {
        const engine = await llamaModule!.LlamaCppEngine.load(o.modelPath, {
          ...o.llama,
          kvBlockSize: o.kvBlockSize,
          onKvEvent,
          logger: o.logger,
        });
        closers.push(() => engine.close());
        handler = engine.handler;
      }
      if (o.engine !== "echo") {
        events = await ReferenceKvEventPublisher.start({ runtime, ...o.target, logger: o.logger });
        const started = events;
        closers.push(() => started.close());
      }
      // Its load in the reference's kv_metrics, for the reference frontend's busy checks and
      // for routers that weigh load (ours over reference workers).
      const load = await ReferenceLoadPublisher.start({
        runtime,
        ...o.target,
        blockSize: o.kvBlockSize ?? o.mocker?.blockSize ?? 16,
        logger: o.logger,
      });
      closers.push(() => load.close());
      servers.push(
        await serveReferenceEndpoint({
          runtime,
          ...o.target,
          handler: load.track(handler as never) as never,
          card,
          logger: o.logger,
        }),
      );
    }
    o.logger.info("reference-wire workers registered", {
      model: displayName,
      workers: o.numWorkers,
      engine: o.engine,
    });
  } catch (err) {
    await closeAll();
    await Promise.allSettled(runtimes.map((rt) => rt.shutdown()));
    throw err;
  }
  async function closeAll() {
    for (const s of servers) await s.close().catch(() => {});
    for (const c of closers) await c().catch(() => {});
    if (tmp) await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
  return { runtimes, close: closeAll };
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(join(path, "."))).isDirectory;
  } catch {
    return false;
  }
}
