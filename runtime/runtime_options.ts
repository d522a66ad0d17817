// The options a DistributedRuntime is built from, and the in-process state the embedded
// default shares between the runtimes of one process.

import type { Discovery } from "./discovery/types.ts";
import type { EventPlane } from "./events/types.ts";
import { LocalEventBus } from "./events/memory.ts";
import { MemoryStore } from "./discovery/memory.ts";
import type { Logger } from "./logger.ts";
import { MemoryObjectStore } from "./objects/memory.ts";
import type { RouteTrace } from "./route_trace.ts";
import type { RuntimeMetrics } from "./metrics/runtime_metrics.ts";
import type { Tracing } from "./tracing/types.ts";
import { LocalRequestBus } from "./transport/local.ts";
import type { RequestPlane } from "./transport/types.ts";

/** In-process state shared by runtimes of the embedded default (one per "cluster"). */
export class EmbeddedCluster {
  /** The keys and leases every runtime of the cluster sees. */
  readonly store: MemoryStore = new MemoryStore();
  /** Where requests between the cluster's runtimes go. */
  readonly requests: LocalRequestBus = new LocalRequestBus();
  /** The blobs (model files) of the cluster. */
  readonly objects: MemoryObjectStore = new MemoryObjectStore();
  /** Publish/subscribe between the cluster's runtimes. */
  readonly events: LocalEventBus = new LocalEventBus();

  /** @deprecated Use {@linkcode EmbeddedCluster.requests} ("hub" names only `runtime/hub/`). */
  get hub(): LocalRequestBus {
    return this.requests;
  }
}

/** PEM files for a TLS client: the CA to trust, and an optional client key pair. */
export interface TlsFiles {
  /** CA certificate(s) to trust instead of the system roots. */
  caFile?: string;
  /** Client certificate, for servers that verify clients (with `keyFile`). */
  certFile?: string;
  /** Client private key (with `certFile`). */
  keyFile?: string;
  /**
   * Name to verify the server's certificate against (and send as SNI) instead of the
   * endpoint's host: needed for etcd endpoints given as IP addresses. etcd only.
   */
  serverName?: string;
}

/** Options of {@linkcode DistributedRuntime.connect}. */
export interface DistributedRuntimeOptions {
  /** "etcd", "memory" (default), "hub" (a `dynamo hub` server), or a Discovery of your own. */
  discovery?: "etcd" | "memory" | "hub" | Discovery;
  /**
   * "tcp" (workers listen; callers keep persistent multiplexed connections to them; with
   * etcd discovery, events and objects still use NATS), "nats" (requests over NATS,
   * response streams call home over pooled TCP connections), "local" (default), "hub" (a
   * `dynamo hub` server), or a RequestPlane of your own.
   */
  requestPlane?: "tcp" | "nats" | "local" | "hub" | RequestPlane;
  /**
   * Where the runtime's endpoints count their requests (default: a registry of its own). The
   * runtimes of one process may share one, so that one `/metrics` shows them all.
   */
  metrics?: RuntimeMetrics;
  /** Address (`host:port`) of the hub, for the "hub" backends. */
  hubAddress?: string;
  /** The hub's shared token, when it has one. */
  hubToken?: string;
  /** etcd endpoints (default ["http://127.0.0.1:2379"]). */
  etcdEndpoints?: string | string[];
  /** etcd password authentication. */
  etcdAuth?: { username: string; password: string };
  /** etcd over TLS (`https://` endpoints): PEM files read at connect. */
  etcdTls?: TlsFiles;
  /** NATS server(s) (default "nats://127.0.0.1:4222"). */
  natsServer?: string | string[];
  /** NATS credentials. */
  natsAuth?: { user?: string; pass?: string; token?: string };
  /** NATS over TLS: PEM files read at connect; setting it makes TLS required. */
  natsTls?: TlsFiles;
  /** An EventPlane of your own (default: NATS with the "nats" plane, else in-process). */
  events?: EventPlane;
  /** Lease TTL in seconds (default 10). */
  leaseTtlSeconds?: number;
  /**
   * Host the TCP listeners bind and advertise (default "127.0.0.1"): the TCP plane's worker
   * listener, and the NATS and hub planes' response-stream listener.
   */
  tcpHost?: string;
  /** Shared in-process state for memory/local backends (default: a new one). */
  embedded?: EmbeddedCluster;
  /** Deadline for a worker to acknowledge and call back, in ms (default 5000). */
  connectTimeoutMs?: number;
  /**
   * How long a caller waits for a response stream's next frame (an item or a heartbeat)
   * before it gives the worker up as hung, in ms (default 10 000; `DYN_STREAM_IDLE_TIMEOUT_MS`).
   */
  streamIdleTimeoutMs?: number;
  /**
   * How often this runtime's endpoints send a heartbeat on a silent response stream, in ms
   * (default 1000; `DYN_HEARTBEAT_MS`). Keep it well under the callers' idle deadline.
   */
  heartbeatMs?: number;
  /** Where the runtime logs (default: silent). */
  logger?: Logger;
  /**
   * Told of every routing decision of this runtime's clients and of every instance they
   * drop or skip (default: none, and no cost). `DYN_ROUTE_TRACE=1` with `fromEnv`:
   * {@linkcode jsonLinesRouteTrace} on standard error.
   */
  routeTrace?: RouteTrace;
  /**
   * OpenTelemetry tracing (default: off, and nothing of the SDK loaded): the runtime's
   * endpoints trace each request ("engine" spans, children of the caller's), and its
   * clients' requests carry the caller's trace context. `fromEnv` turns it on when
   * `OTEL_EXPORTER_OTLP_ENDPOINT` is set ({@linkcode tracingFromEnv}).
   */
  tracing?: Tracing;
}

/** Options of {@linkcode DistributedRuntime.fromEnv}. */
export interface FromEnvOptions
  extends Omit<DistributedRuntimeOptions, "discovery" | "requestPlane"> {
  /** Environment to read (default `Deno.env.toObject()`). */
  env?: Record<string, string | undefined>;
  /**
   * The service name of the tracing `OTEL_EXPORTER_OTLP_ENDPOINT` turns on, when
   * `OTEL_SERVICE_NAME` is unset (default "dynamo"; `dynamoWorker`: "dynamo-worker").
   */
  tracingServiceName?: string;
}
