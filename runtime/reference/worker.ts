// A worker the reference system (ai-dynamo 1.6.1) can call: registers an endpoint and its model
// in etcd in the reference's own records (`v1/instances/...`, `v1/mdc/...`), takes requests on a
// TCP listener in the reference's request framing (./serve_requests.ts: acknowledges each, dials
// the caller's call-home address and streams the engine's outputs back as the reference's
// annotated items, ending with its final item and sentinel; the caller's "stop" or "kill" on the
// response connection, or the connection closing, stops the engine).

import type { RuntimeInternals } from "../component.ts";
import type { DistributedRuntime } from "../distributed_runtime.ts";
import { InvalidArgumentError, ProtocolError } from "../errors.ts";
import { type Logger, silentLogger } from "../logger.ts";
import type { Handler } from "../serve_request.ts";
import { encodeInstanceRecord } from "../names.ts";
import { TcpRequestPlane } from "../transport/tcp.ts";
import { referenceRequestServer } from "./serve_requests.ts";
import { REFERENCE_INSTANCES_PREFIX } from "./instances.ts";
import { REFERENCE_MODELS_PREFIX } from "./models.ts";

/**
 * What the reference's records need of a runtime: the id its records carry (the lease id), its
 * discovery, its request plane, and keys on its lease. A {@linkcode DistributedRuntime} is one;
 * {@linkcode referenceRuntimeOf} makes one from an endpoint's runtime.
 */
export type ReferenceRuntime = Pick<
  DistributedRuntime,
  "leaseId" | "discovery" | "plane" | "internals"
>;

/**
 * The runtime behind a component or endpoint, as the reference's records need it; the worker
 * id is the runtime's instance id (its first lease's id, kept across lease losses, as the
 * project's own records keep it).
 *
 * @param rt `component.runtimeInternals`
 * @returns the view
 */
export function referenceRuntimeOf(rt: RuntimeInternals): ReferenceRuntime {
  return { leaseId: rt.instanceId, discovery: rt.discovery, plane: rt.plane, internals: rt };
}

/** Options of {@linkcode serveReferenceEndpoint}. */
export interface ServeReferenceEndpointOptions {
  /** The runtime whose etcd lease the records live on (etcd discovery). */
  runtime: ReferenceRuntime;
  /** The endpoint's namespace. */
  namespace: string;
  /** The endpoint's component. */
  component: string;
  /** The endpoint's name. */
  endpoint: string;
  /** The engine: a PreprocessedRequest in, LLMEngineOutputs out (the project's engines). */
  handler: Handler<Record<string, unknown>, Record<string, unknown>>;
  /** The model card JSON (see {@linkcode referenceModelCard}); without one, no model record. */
  card?: Record<string, unknown>;
  /**
   * Address to listen on and advertise. Unset on a runtime with the TCP request plane: its
   * listener (the port our callers use too). Else `DYN_TCP_RPC_HOST`, else 127.0.0.1.
   */
  hostname?: string;
  /** Deadline to dial the caller back (ms, default 5,000). */
  callHomeTimeoutMs?: number;
  /** Where the server logs (default: silent). */
  logger?: Logger;
  /**
   * An endpoint that is not an LLM engine (e.g. a worker's KV-state query): the handler takes
   * the request body as decoded and its outputs go out as each item's data, unwrapped; msgpack
   * integers beyond 32 bits are bigint both ways.
   */
  raw?: boolean;
}

/** A running reference-compatible endpoint. */
export interface ReferenceEndpointServer {
  /** `host:port` of the request listener. */
  readonly address: string;
  /** The instance id (the lease id, in hex) the records carry. */
  readonly instanceId: string;
  /** Requests being served now. */
  readonly inflight: number;
  /** Removes the records, stops taking requests, stops those in flight. */
  close(): Promise<void>;
}

/**
 * Serves `handler` as a reference worker endpoint: records in etcd under the runtime's lease,
 * requests on a TCP listener.
 *
 * @param options runtime, names, engine, model card, listen address
 * @returns the server (close it before the runtime shuts down)
 * @throws {InvalidArgumentError} the runtime does not use etcd discovery
 */
export async function serveReferenceEndpoint(
  options: ServeReferenceEndpointOptions,
): Promise<ReferenceEndpointServer> {
  const { runtime, namespace, component, endpoint } = options;
  const log = options.logger ?? silentLogger;
  if (runtime.discovery.kind !== "etcd") {
    throw new InvalidArgumentError(
      "a reference worker registers in etcd: connect the runtime with etcd discovery",
    );
  }
  const instanceId = runtime.leaseId;
  const path = `${instanceId}/${namespace}/${component}/${endpoint}`;
  let closed = false;
  const raw = options.raw ?? false;
  // Requests come in on the runtime's TCP request-plane listener, which tells the reference's
  // framing from ours by a connection's first bytes: one port for both kinds of caller. On
  // another plane (or asked for another address), a TCP plane of its own listens.
  const shared = runtime.plane instanceof TcpRequestPlane && options.hostname === undefined;
  const plane = shared ? runtime.plane as TcpRequestPlane : new TcpRequestPlane({
    hostname: options.hostname ?? Deno.env.get("DYN_TCP_RPC_HOST") ?? "127.0.0.1",
    logger: log,
  });
  const server = referenceRequestServer({
    path,
    handler: options.handler as Handler<never, unknown>,
    validate: (request: unknown) => {
      const r = request as Record<string, unknown> | null;
      if (typeof r !== "object" || r === null || Array.isArray(r)) {
        throw new ProtocolError("request body is not an object");
      }
      if (
        !raw && (!Array.isArray(r.token_ids) ||
          !r.token_ids.every((t) => Number.isInteger(t) && t >= 0))
      ) {
        throw new ProtocolError("request body is not a PreprocessedRequest with token_ids");
      }
      return r;
    },
    mapOutput: raw ? undefined : (out: unknown) => referenceOutput(out as Record<string, unknown>),
    raw,
    callHomeTimeoutMs: options.callHomeTimeoutMs,
    logger: log,
  });
  const sub = await plane.serveReference(path, server.handle);

  const decimalId = BigInt(`0x${instanceId}`).toString();
  const advertised = sub.address;
  const instanceKey =
    `${REFERENCE_INSTANCES_PREFIX}${namespace}/${component}/${endpoint}/${instanceId}`;
  await runtime.internals.registerKey(
    instanceKey,
    encodeInstanceRecord({
      type: "Endpoint",
      component,
      endpoint,
      namespace,
      instance_id: instanceId,
      transport: { tcp: `${advertised}/${path}` },
      device_type: "cpu",
      request_plane_codec: "msgpack",
      // Our facts, which the reference ignores: this worker speaks the reference's wire only.
      dynamo_deno: { instance_id: instanceId, wire: "reference" },
    }),
  );
  const modelKey = `${REFERENCE_MODELS_PREFIX}${namespace}/${component}/${endpoint}/${instanceId}`;
  if (options.card) {
    await runtime.internals.registerKey(
      modelKey,
      withExactId({
        type: "Model",
        namespace,
        component,
        endpoint,
        instance_id: ID_SLOT,
        card_json: options.card,
      }, decimalId),
    );
  }
  log.info("serving reference endpoint", { endpoint: path, address: advertised });

  return {
    address: advertised,
    instanceId,
    get inflight() {
      return server.live.size;
    },
    async close() {
      if (closed) return;
      closed = true;
      await runtime.internals.unregisterKey(instanceKey).catch(() => {});
      if (options.card) await runtime.internals.unregisterKey(modelKey).catch(() => {});
      await sub.unsubscribe();
      if (!shared) await plane.close();
      server.close();
      for (const ctx of server.live) ctx.kill();
    },
  };
}

/** Where {@linkcode withExactId} writes the id. */
export const ID_SLOT = "\u0000instance_id\u0000";

/** JSON with the u64 instance id written exactly (beyond 2^53, so not as a JS number). */
export function withExactId(record: Record<string, unknown>, decimal: string): string {
  return JSON.stringify(record).replaceAll(JSON.stringify(ID_SLOT), decimal);
}

/** One of our engine outputs as the reference's LLMEngineOutput (every field present). */
export function referenceOutput(out: Record<string, unknown>): Record<string, unknown> {
  const o: Record<string, unknown> = {
    token_ids: Array.isArray(out.token_ids) ? out.token_ids : [],
    tokens: null,
    text: typeof out.text === "string" ? out.text : null,
    output_type: "text",
    cum_log_probs: null,
    log_probs: Array.isArray(out.log_probs) ? out.log_probs : null,
    top_logprobs: Array.isArray(out.top_logprobs) ? out.top_logprobs : null,
    finish_reason: typeof out.finish_reason === "string" ? out.finish_reason : null,
    index: null,
  };
  if (out.completion_usage && typeof out.completion_usage === "object") {
    o.completion_usage = out.completion_usage;
  }
  return o;
}

/** What {@linkcode referenceModelCard} describes. */
export interface ReferenceModelCardInit {
  /** Folder with config.json, tokenizer.json, tokenizer_config.json (generation_config.json). */
  modelPath: string;
  /** The served model name. */
  displayName: string;
  /** Longest context (default: the config's max_position_embeddings). */
  contextLength?: number;
  /** Tokens per KV block (default 16). */
  kvCacheBlockSize?: number;
  /** Migrations per request the frontend may make (default 0). */
  migrationLimit?: number;
  /** KV blocks of the engine, as the reference's runtime_config reports them (default null). */
  totalKvBlocks?: number;
  /** The worker publishes KV events (`ReferenceKvEventPublisher`), for the reference's KV router. */
  kvEvents?: boolean;
  /** What the model serves, the reference's text (default "Chat | Completions"). */
  modelType?: string;
  /** What the worker takes: "Tokens" (default) or "Text". */
  modelInput?: "Tokens" | "Text";
  /** The tool-call parser the frontend applies (the reference's names; default none). */
  toolCallParser?: string;
  /** The reasoning parser the frontend applies (the reference's names; default none). */
  reasoningParser?: string;
  /** Engine facts for the frontend (`runtime_config.runtime_data`; default `{}`). */
  runtimeData?: Record<string, unknown>;
}

/** One file a reference card names: its path, blake3 checksum and size. */
export interface ReferenceCardFile {
  /** Path on the worker's machine (or a URL its system server answers). */
  path: string;
  /** `blake3:<hex>` of the bytes. */
  checksum: string;
  /** Bytes. */
  size: number;
}

/**
 * The file entry of a reference card for `bytes` stored at `path`.
 *
 * @param path where the file lies
 * @param bytes its content
 * @returns path, blake3 checksum and size
 */
export async function referenceCardFile(
  path: string,
  bytes: Uint8Array,
): Promise<ReferenceCardFile> {
  const { blake3 } = await import("@noble/hashes/blake3");
  const hex = Array.from(blake3(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
  return { path, checksum: `blake3:${hex}`, size: bytes.length };
}

/**
 * The reference's model card (`card_json` of a `v1/mdc/` record) for a local model folder:
 * each file by path, size and blake3 checksum, as the reference's workers write it.
 *
 * @param init the folder, the served name, context and KV settings
 * @returns the card JSON
 * @throws {Deno.errors.NotFound} a required file is missing
 */
export async function referenceModelCard(
  init: ReferenceModelCardInit,
): Promise<Record<string, unknown>> {
  const dir = init.modelPath.replace(/\/+$/, "");
  const file = async (name: string, required = true) => {
    const path = `${dir}/${name}`;
    let bytes: Uint8Array;
    try {
      bytes = await Deno.readFile(path);
    } catch (err) {
      if (!required && err instanceof Deno.errors.NotFound) return undefined;
      throw err;
    }
    return await referenceCardFile(path, bytes);
  };
  return referenceCardJson({
    ...init,
    sourcePath: dir,
    config: await file("config.json"),
    tokenizer: await file("tokenizer.json"),
    tokenizerConfig: await file("tokenizer_config.json"),
    generationConfig: await file("generation_config.json", false),
  });
}

/** What {@linkcode referenceCardJson} describes: the card's facts and the files it names. */
export interface ReferenceCardJsonInit extends Omit<ReferenceModelCardInit, "modelPath"> {
  /** Where the worker loaded the model from (`source_path`). */
  sourcePath: string;
  /** config.json (`model_info`; none: null). */
  config?: ReferenceCardFile;
  /** tokenizer.json (`tokenizer`; none: null). */
  tokenizer?: ReferenceCardFile;
  /** tokenizer_config.json (`prompt_formatter`; none: null). */
  tokenizerConfig?: ReferenceCardFile;
  /** generation_config.json (`gen_config`; none: null). */
  generationConfig?: ReferenceCardFile;
}

/**
 * The reference's model card JSON from its facts and the files it names (read from the
 * config's path for `architectural_max_context_length`). A file that is not there leaves its
 * section null.
 *
 * @param init the served name, source, files, context and KV settings
 * @returns the card JSON
 */
export async function referenceCardJson(
  init: ReferenceCardJsonInit,
): Promise<Record<string, unknown>> {
  let architectural = 0;
  if (init.config) {
    const configJson = JSON.parse(await Deno.readTextFile(init.config.path)) as Record<
      string,
      unknown
    >;
    architectural = Number(configJson.max_position_embeddings ?? 0) || 0;
  }
  return {
    display_name: init.displayName,
    slug: init.displayName.toLowerCase().replace(/[^a-z0-9]+/g, "_"),
    source_path: init.sourcePath,
    model_info: init.config ? { hf_config_json: init.config } : null,
    tokenizer: init.tokenizer ? { hf_tokenizer_json: init.tokenizer } : null,
    prompt_formatter: init.tokenizerConfig
      ? { hf_tokenizer_config_json: init.tokenizerConfig }
      : null,
    gen_config: init.generationConfig ? { hf_generation_config_json: init.generationConfig } : null,
    architectural_max_context_length: architectural,
    context_length: init.contextLength ?? 0,
    kv_cache_block_size: init.kvCacheBlockSize ?? 16,
    migration_limit: init.migrationLimit ?? 0,
    model_type: init.modelType ?? "Chat | Completions",
    model_input: init.modelInput ?? "Tokens",
    worker_type: "aggregated",
    needs: [],
    runtime_config: {
      context_length: init.contextLength ?? 0,
      total_kv_blocks: init.totalKvBlocks ?? null,
      max_num_seqs: null,
      max_num_batched_tokens: null,
      tool_call_parser: init.toolCallParser ?? null,
      reasoning_parser: init.reasoningParser ?? null,
      tool_call_arguments_format: "json_string",
      structural_tag_mode: "off",
      structural_tag_scope: "auto",
      structural_tag_schema: "auto",
      exclude_tools_when_tool_choice_none: true,
      data_parallel_start_rank: 0,
      data_parallel_size: 1,
      enable_local_indexer: false,
      kv_event_publishing_enabled: init.kvEvents ?? false,
      runtime_data: init.runtimeData ?? {},
      enable_eagle: false,
    },
    media_decoder: null,
    media_fetcher: null,
  };
}
