// Tracing on the OpenTelemetry SDK: a tracer provider with OTLP/HTTP export and any exporters
// given (the SDK's in-memory one in tests). The SDK is imported here, on first use, so that a
// process with tracing off never loads it.

import type { SpanExporter, SpanProcessor } from "@opentelemetry/sdk-trace-base";
import { InvalidArgumentError } from "../errors.ts";
import { parseTraceparent } from "./traceparent.ts";
import type {
  SpanAttribute,
  SpanKindName,
  SpanOptions,
  StartSpanOptions,
  TraceSpan,
  Tracing,
} from "./types.ts";

type Api = typeof import("@opentelemetry/api");
type OtelSpan = import("@opentelemetry/api").Span;
type OtelTracer = import("@opentelemetry/api").Tracer;

/**
 * An OpenTelemetry SDK span exporter, such as the SDK's `InMemorySpanExporter` (typed here by
 * its shape, so that naming it loads nothing).
 */
export interface SpanExporterLike {
  /** Exports finished spans (the SDK's `ReadableSpan`s) and reports the result. */
  export(spans: unknown[], resultCallback: (result: { code: number; error?: Error }) => void): void;
  /** Exports what is pending and stops. */
  shutdown(): Promise<void>;
}

/** How spans travel to an OTLP collector over HTTP: JSON or protobuf bodies. */
export type OtlpProtocol = "http/json" | "http/protobuf";

/** Options of {@linkcode createTracing}. */
export interface CreateTracingOptions {
  /** The service the spans belong to (`service.name`), e.g. "dynamo-frontend". */
  serviceName: string;
  /** OTLP/HTTP traces URL (e.g. `http://collector:4318/v1/traces`): spans are batched there. */
  otlpTracesUrl?: string;
  /** Headers of the OTLP requests (e.g. an API key). */
  otlpHeaders?: Record<string, string>;
  /** The OTLP requests' encoding (default "http/json"). */
  otlpProtocol?: OtlpProtocol;
  /** More exporters, each sent every span as it ends (the SDK's `InMemorySpanExporter` in tests). */
  exporters?: readonly SpanExporterLike[];
}

/**
 * Creates tracing on the OpenTelemetry SDK (loaded by this call).
 *
 * @param options service name, OTLP endpoint and exporters
 * @returns the tracing, to hand to the runtime (`tracing`) and the frontend
 * @throws {InvalidArgumentError} an empty service name or an OTLP URL that is not http(s)
 * @example
 * ```ts ignore
 * const tracing = await createTracing({
 *   serviceName: "dynamo-frontend",
 *   otlpTracesUrl: "http://127.0.0.1:4318/v1/traces",
 * });
 * const span = tracing.startSpan("work");
 * span.end();
 * await tracing.shutdown();
 * ```
 */
export async function createTracing(options: CreateTracingOptions): Promise<Tracing> {
  if (typeof options.serviceName !== "string" || options.serviceName.trim() === "") {
    throw new InvalidArgumentError(
      `tracing needs a service name, got ${JSON.stringify(options.serviceName)}`,
    );
  }
  if (options.otlpTracesUrl !== undefined) checkOtlpUrl(options.otlpTracesUrl, "otlpTracesUrl");
  const protocol = options.otlpProtocol ?? "http/json";
  if (protocol !== "http/json" && protocol !== "http/protobuf") {
    throw new InvalidArgumentError(
      `otlpProtocol must be "http/json" or "http/protobuf", got ${JSON.stringify(protocol)}`,
    );
  }
  const [api, sdk, resources] = await Promise.all([
    import("@opentelemetry/api"),
    import("@opentelemetry/sdk-trace-base"),
    import("@opentelemetry/resources"),
  ]);
  const processors: SpanProcessor[] = (options.exporters ?? []).map((e) =>
    new sdk.SimpleSpanProcessor(e as SpanExporter)
  );
  if (options.otlpTracesUrl !== undefined) {
    const { OTLPTraceExporter } = protocol === "http/json"
      ? await import("@opentelemetry/exporter-trace-otlp-http")
      : await import("@opentelemetry/exporter-trace-otlp-proto");
    processors.push(
      new sdk.BatchSpanProcessor(
        new OTLPTraceExporter({ url: options.otlpTracesUrl, headers: options.otlpHeaders }),
      ),
    );
  }
  const provider = new sdk.BasicTracerProvider({
    resource: resources.resourceFromAttributes({ "service.name": options.serviceName }),
    spanProcessors: processors,
  });
  return new OtelTracing(api, provider, options.serviceName);
}

/** Options of {@linkcode tracingFromEnv}. */
export interface TracingFromEnvOptions {
  /** Service name when `OTEL_SERVICE_NAME` is unset (default "dynamo"). */
  defaultServiceName?: string;
}

/**
 * Tracing as the OpenTelemetry environment variables ask: on when `OTEL_EXPORTER_OTLP_ENDPOINT`
 * (the collector's base URL; spans go to `<it>/v1/traces`) or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
 * (the full URL) is set, named by `OTEL_SERVICE_NAME`, with `OTEL_EXPORTER_OTLP_HEADERS`
 * (`k=v,k2=v2`), encoded as `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) says:
 * `http/json` (the default) or `http/protobuf` (`grpc` is refused: no gRPC exporter here); off
 * when neither endpoint is set or `OTEL_SDK_DISABLED=true`. Off loads nothing.
 *
 * @param env the environment
 * @returns the tracing, or undefined when off
 * @throws {InvalidArgumentError} an endpoint that is not an http(s) URL, malformed headers, or a
 *   protocol other than http/json and http/protobuf
 */
export async function tracingFromEnv(
  env: Record<string, string | undefined>,
  options: TracingFromEnvOptions = {},
): Promise<Tracing | undefined> {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === "true") return undefined;
  const full = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  let url: string;
  if (full) {
    url = checkOtlpUrl(full, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  } else if (base) {
    checkOtlpUrl(base, "OTEL_EXPORTER_OTLP_ENDPOINT");
    url = `${base.replace(/\/+$/, "")}/v1/traces`;
  } else {
    return undefined;
  }
  return await createTracing({
    serviceName: env.OTEL_SERVICE_NAME?.trim() || (options.defaultServiceName ?? "dynamo"),
    otlpTracesUrl: url,
    otlpHeaders: parseOtlpHeaders(env.OTEL_EXPORTER_OTLP_HEADERS),
    otlpProtocol: otlpProtocolFromEnv(env),
  });
}

function otlpProtocolFromEnv(env: Record<string, string | undefined>): OtlpProtocol {
  for (const name of ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"]) {
    const value = env[name]?.trim();
    if (!value) continue;
    if (value === "http/json" || value === "http/protobuf") return value;
    throw new InvalidArgumentError(
      `${name} must be "http/json" or "http/protobuf" (OTLP over HTTP; gRPC is not supported), got ${
        JSON.stringify(value)
      }`,
    );
  }
  return "http/json";
}

function checkOtlpUrl(value: string, name: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(`${name} must be an http(s) URL, got ${JSON.stringify(value)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new InvalidArgumentError(`${name} must be an http(s) URL, got ${JSON.stringify(value)}`);
  }
  return value;
}

/** `k=v,k2=v2` (values URL-encoded, as the OpenTelemetry spec writes them). */
function parseOtlpHeaders(value: string | undefined): Record<string, string> | undefined {
  if (!value?.trim()) return undefined;
  const headers: Record<string, string> = {};
  for (const pair of value.split(",")) {
    const at = pair.indexOf("=");
    const key = pair.slice(0, at).trim();
    if (at <= 0 || key === "") {
      throw new InvalidArgumentError(
        `OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs separated by commas, got ${
          JSON.stringify(pair)
        }`,
      );
    }
    headers[key] = decodeURIComponent(pair.slice(at + 1).trim());
  }
  return headers;
}

interface Provider {
  getTracer(name: string): OtelTracer;
  forceFlush(): Promise<void>;
  shutdown(): Promise<void>;
}

class OtelTracing implements Tracing {
  readonly serviceName: string;
  readonly #api: Api;
  readonly #provider: Provider;
  readonly #tracer: OtelTracer;

  constructor(api: Api, provider: Provider, serviceName: string) {
    this.#api = api;
    this.#provider = provider;
    this.#tracer = provider.getTracer("dynamo");
    this.serviceName = serviceName;
  }

  startSpan(name: string, options: StartSpanOptions = {}): TraceSpan {
    const api = this.#api;
    let parent = api.ROOT_CONTEXT;
    const p = parseTraceparent(options.traceparent);
    if (p !== undefined) {
      parent = api.trace.setSpanContext(api.ROOT_CONTEXT, {
        traceId: p.traceId,
        spanId: p.spanId,
        traceFlags: p.flags,
        isRemote: true,
        ...(options.tracestate ? { traceState: api.createTraceState(options.tracestate) } : {}),
      });
    }
    return startIn(api, this.#tracer, name, options, parent);
  }

  forceFlush(): Promise<void> {
    return this.#provider.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.#provider.shutdown();
  }
}

const KINDS: Record<SpanKindName, number> = { internal: 0, server: 1, client: 2 };

function startIn(
  api: Api,
  tracer: OtelTracer,
  name: string,
  options: SpanOptions,
  parent: import("@opentelemetry/api").Context,
): TraceSpan {
  const span = tracer.startSpan(
    name,
    { kind: KINDS[options.kind ?? "internal"], attributes: options.attributes },
    parent,
  );
  return new SdkSpan(api, tracer, span);
}

class SdkSpan implements TraceSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly #api: Api;
  readonly #tracer: OtelTracer;
  readonly #span: OtelSpan;
  readonly #flags: number;
  #ended = false;

  constructor(api: Api, tracer: OtelTracer, span: OtelSpan) {
    this.#api = api;
    this.#tracer = tracer;
    this.#span = span;
    const sc = span.spanContext();
    this.traceId = sc.traceId;
    this.spanId = sc.spanId;
    this.#flags = sc.traceFlags;
  }

  get traceparent(): string {
    return `00-${this.traceId}-${this.spanId}-${this.#flags & 1 ? "01" : "00"}`;
  }

  get tracestate(): string | undefined {
    return this.#span.spanContext().traceState?.serialize() || undefined;
  }

  child(name: string, options: SpanOptions = {}): TraceSpan {
    const api = this.#api;
    return startIn(
      api,
      this.#tracer,
      name,
      options,
      api.trace.setSpan(api.ROOT_CONTEXT, this.#span),
    );
  }

  setAttribute(key: string, value: SpanAttribute): void {
    if (this.#ended) return;
    this.#span.setAttribute(key, value);
  }

  fail(err: unknown): void {
    if (this.#ended) return;
    const e = err instanceof Error ? err : new Error(String(err));
    this.#span.recordException(e);
    this.#span.setStatus({
      code: this.#api.SpanStatusCode.ERROR,
      message: `${e.name}: ${e.message}`,
    });
  }

  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#span.end();
  }
}
