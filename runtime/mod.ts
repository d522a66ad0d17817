/**
 * The distributed runtime: namespaces, components, endpoints, clients, contexts, and
 * the discovery and request planes under them.
 * @module
 */

export {
  DistributedRuntime,
  type DistributedRuntimeOptions,
  EmbeddedCluster,
  type FromEnvOptions,
  type TlsFiles,
} from "./distributed_runtime.ts";
export { dynamoWorker, type DynamoWorkerOptions } from "./worker.ts";
export { Component, Endpoint, Namespace, type ServeEndpointOptions } from "./component.ts";
export { Client, type GenerateOptions, type WaitForInstancesOptions } from "./client.ts";
export { Context, type StopReason } from "./context.ts";
export {
  jsonLinesRouteTrace,
  type JsonLinesRouteTraceOptions,
  type RouteTrace,
  type RouteTraceEvent,
} from "./route_trace.ts";
export {
  createTracing,
  type CreateTracingOptions,
  formatTraceparent,
  type OtlpProtocol,
  parseTraceparent,
  type SpanAttribute,
  type SpanExporterLike,
  type SpanKindName,
  type SpanOptions,
  type StartSpanOptions,
  type TraceParent,
  type TraceSpan,
  type Tracing,
  tracingFromEnv,
  type TracingFromEnvOptions,
} from "./tracing/mod.ts";
export type { Handler } from "./serve_request.ts";
export {
  type EndpointErrorType,
  type EndpointStats,
  type KvStatsSample,
  registerProcessMetrics,
  type RequestTally,
  RuntimeMetrics,
  startSystemServer,
  type SystemServer,
  type SystemServerAddress,
  systemServerFromEnv,
  type SystemServerOptions,
} from "./metrics/mod.ts";
export type { ResponseStream } from "./stream.ts";
export * from "./errors.ts";
export {
  createLogger,
  type CreateLoggerOptions,
  type Logger,
  loggerFromSettings,
  type LogLevel,
  type LogSettings,
  logSettingsFromEnv,
  silentLogger,
} from "./logger.ts";
export {
  type Discovery,
  EtcdDiscovery,
  type KeyValue,
  type Lease,
  MemoryDiscovery,
  MemoryStore,
  type PutOptions,
  type WatchEvent,
  type WatchOptions,
} from "./discovery/mod.ts";
export {
  type ConnectionInfo,
  type Frame,
  type FrameConn,
  FrameType,
  LocalHub,
  LocalRequestBus,
  LocalRequestPlane,
  NatsRequestPlane,
  type PendingStream,
  type RawRequestHandler,
  type ReferenceRequestHandler,
  type RequestHeader,
  type RequestMessage,
  type RequestOptions,
  type RequestPayload,
  type RequestPlane,
  type RequestTraceHeaders,
  type Subscription,
  TcpRequestPlane,
  type TcpRequestPlaneOptions,
} from "./transport/mod.ts";
export type { NatsConnection } from "./nats_connection.ts";
export type { BackendsInfo } from "./backends.ts";
export { MemoryObjectStore, NatsObjectStore, type ObjectStore } from "./objects/mod.ts";
