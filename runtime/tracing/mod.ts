/**
 * Tracing: OpenTelemetry spans for a request's stages, with the W3C trace context carried
 * from the HTTP request through the request plane to the worker. Off unless a {@linkcode Tracing}
 * is given (or the OpenTelemetry environment variables ask for one); off loads no SDK.
 *
 * @module
 */

export type {
  SpanAttribute,
  SpanKindName,
  SpanOptions,
  StartSpanOptions,
  TraceSpan,
  Tracing,
} from "./types.ts";
export { formatTraceparent, parseTraceparent, type TraceParent } from "./traceparent.ts";
export {
  createTracing,
  type CreateTracingOptions,
  type OtlpProtocol,
  type SpanExporterLike,
  tracingFromEnv,
  type TracingFromEnvOptions,
} from "./otel.ts";
