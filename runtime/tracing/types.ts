// The tracing interface the request path calls: a span per stage, W3C trace context between
// processes. No OpenTelemetry import here: with tracing off, nothing of the SDK is loaded.

/** What a span stands for: a server side, a client side (a hop to another process), or work inside one. */
export type SpanKindName = "server" | "client" | "internal";

/** A span attribute's value. */
export type SpanAttribute = string | number | boolean;

/** Options of {@linkcode TraceSpan.child} and {@linkcode Tracing.startSpan}. */
export interface SpanOptions {
  /** The span's kind (default "internal"). */
  kind?: SpanKindName;
  /** Attributes set when the span starts. */
  attributes?: Record<string, SpanAttribute>;
}

/** Options of {@linkcode Tracing.startSpan}. */
export interface StartSpanOptions extends SpanOptions {
  /**
   * The parent as a W3C `traceparent` value (from an HTTP header or a request-plane envelope).
   * Missing or malformed: the span starts a new trace (the W3C rule: a bad header is ignored).
   */
  traceparent?: string | null;
  /** The W3C `tracestate` that came with `traceparent`, carried on unchanged. */
  tracestate?: string | null;
}

/** One span of a request. `end()` may be called more than once; the first call counts. */
export interface TraceSpan {
  /** The trace's id: 32 lowercase hex digits. */
  readonly traceId: string;
  /** This span's id: 16 lowercase hex digits. */
  readonly spanId: string;
  /** This span as a W3C `traceparent` value, for the next hop's header. */
  readonly traceparent: string;
  /** The W3C `tracestate` carried with this trace, if any. */
  readonly tracestate: string | undefined;
  /** Starts a child span of this one. */
  child(name: string, options?: SpanOptions): TraceSpan;
  /** Sets an attribute. */
  setAttribute(key: string, value: SpanAttribute): void;
  /** Marks the span failed, recording the error. */
  fail(err: unknown): void;
  /** Ends the span. */
  end(): void;
}

/** Where spans come from and go to (an OpenTelemetry tracer provider and its exporters). */
export interface Tracing {
  /** The service name spans are exported under (`service.name`). */
  readonly serviceName: string;
  /** Starts a span: a child of `options.traceparent`, or the root of a new trace. */
  startSpan(name: string, options?: StartSpanOptions): TraceSpan;
  /** Exports every ended span not yet exported. */
  forceFlush(): Promise<void>;
  /** Exports what is left and stops; spans started later are dropped. */
  shutdown(): Promise<void>;
}
