// The request plane's interface, the response stream's connection, and the frames and
// request header they carry; every backend implements these.

/** Frame kinds on a response stream. */
export const FrameType = {
  /** worker -> caller, first frame on TCP: which stream this is (stream id, UTF-8). */
  Handshake: 1,
  /** worker -> caller: `{error?}`; the request was accepted, or failed before its first item. */
  Prologue: 2,
  /** worker -> caller: one item, JSON. */
  Data: 3,
  /** worker -> caller: the stream is complete. */
  Sentinel: 4,
  /** worker -> caller: the handler failed mid-stream, `{message, name}`. */
  Error: 5,
  /** caller -> worker: `"stop"` or `"kill"`. */
  Control: 6,
  /** worker -> caller: nothing to send yet, but alive (sent on a silent stream every beat). */
  Heartbeat: 7,
} as const;

/** One frame. */
export interface Frame {
  /** Which frame this is ({@linkcode FrameType}). */
  type: number;
  /** The frame's bytes (JSON for Data, Prologue and Error frames). */
  payload: Uint8Array;
  /**
   * A Data frame's item itself, on connections that carry values (`carriesValues`):
   * the in-process plane skips JSON and hands the object over.
   */
  value?: unknown;
}

/**
 * One response stream's duplex connection. Frames arrive in order; `receive()` gives
 * `null` once the other side closed (or the connection broke).
 */
export interface FrameConn {
  /**
   * Queues a frame. Returns a promise while the connection's buffer is over its high-water
   * mark (await it: that is the backpressure). Throws once the connection is closed.
   */
  send(frame: Frame): Promise<void> | void;
  /** Next frame, or `null` when the stream's connection is closed. */
  receive(): Promise<Frame | null>;
  /** Flushes what was sent, then closes. */
  end(): Promise<void>;
  /** Closes at once, dropping unsent frames. */
  close(): void;
  /** True once the connection is closed (by either side). */
  readonly closed: boolean;
  /** True when Data frames may carry `value` instead of JSON bytes (same process). */
  readonly carriesValues?: boolean;
  /**
   * Queues a Data frame whose payload is `json`, already JSON text, as UTF-8 (where a
   * connection can encode it straight into its output buffer); otherwise like `send`.
   */
  sendDataText?(json: string): Promise<void> | void;
}

/** Where a worker sends a request's response stream; travels in the request header. */
export type ConnectionInfo =
  | { tcp: { address: string; stream_id: string } }
  | { mux: { stream_id: string } }
  | { local: { stream_id: string } };

/** A reserved, not yet connected, response stream on the caller. */
export interface PendingStream {
  /** What the worker needs to connect back: travels in the request header. */
  readonly connectionInfo: ConnectionInfo;
  /** Resolves with the worker's connection (after its handshake). */
  readonly connection: Promise<FrameConn>;
  /** Gives up the reservation; a later dial is refused. */
  cancel(): void;
}

/** Control header of a request; wire names follow the reference system. */
export interface RequestHeader {
  /** The request id (the caller's context id). */
  id: string;
  /** Always "single_in": one request in. */
  request_type: "single_in";
  /** Always "many_out": a stream of responses out. */
  response_type: "many_out";
  /** Where the worker sends the response stream. */
  connection_info: ConnectionInfo;
  /**
   * The caller's W3C trace context, only when tracing is on: the same names the reference
   * system puts in its request headers. Untrusted: a malformed value is ignored.
   */
  headers?: RequestTraceHeaders;
}

/** Trace context that travels with a request ({@linkcode RequestHeader.headers}). */
export interface RequestTraceHeaders {
  /** The caller's span as a W3C `traceparent` value. */
  traceparent: string;
  /** The W3C `tracestate` of the trace, when it has one. */
  tracestate?: string;
}

/** A request as values: what in-process planes hand over without encoding. */
export interface RequestMessage {
  /** The request's control header. */
  header: RequestHeader;
  /** The request body. */
  body: unknown;
}

/** A request on the wire: encoded bytes, or the values themselves on an in-process plane. */
export type RequestPayload = Uint8Array | RequestMessage;

/** A handler of raw requests arriving on a subject. */
export type RawRequestHandler = (payload: RequestPayload) => void;

/** A live subscription. */
export interface Subscription {
  /** Stops receiving; requests already delivered are not affected. */
  unsubscribe(): Promise<void>;
  /** `host:port` callers connect to, on planes where the worker listens (TCP). */
  readonly address?: string;
}

/** Options of {@linkcode RequestPlane.request}. */
export interface RequestOptions {
  /** Deadline for the acknowledgement in ms (default 5000). */
  timeoutMs?: number;
  /** Cancels waiting for the acknowledgement. */
  signal?: AbortSignal;
  /**
   * The response stream reserved for this request ({@linkcode RequestPlane.expectStream}):
   * planes that carry a request and its stream on one connection attach it there.
   */
  streamId?: string;
}

/** Requests in, acknowledgements back, and the response streams' connections. */
export interface RequestPlane {
  /** Which backend this is. */
  readonly kind: "nats" | "tcp" | "local" | "hub";
  /** True when requests may be sent as values ({@linkcode RequestMessage}), in process. */
  readonly carriesValues?: boolean;
  /**
   * True when `request()` takes a {@linkcode RequestMessage} and encodes it itself, straight
   * into its connection's buffer (no array of its own per request); it encodes the message
   * before it returns, so later changes to it do not reach the wire.
   */
  readonly encodesRequests?: boolean;
  /** Delivers every request sent to `subject` to `handler`; the plane acknowledges it. */
  serve(subject: string, handler: RawRequestHandler): Promise<Subscription>;
  /**
   * Sends a request and resolves once some server acknowledged it.
   * @throws {NoInstancesError} nobody serves `subject`
   * @throws {TimeoutError} no acknowledgement in time
   */
  request(subject: string, payload: RequestPayload, options?: RequestOptions): Promise<void>;
  /** Caller side: reserves a response stream. */
  expectStream(streamId: string): PendingStream;
  /** Worker side: connects to the caller for a response stream (handshake done). */
  dial(info: ConnectionInfo): Promise<FrameConn>;
  /** Stops serving and closes the plane's connections. */
  close(): Promise<void>;
}
