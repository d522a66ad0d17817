// Typed failures of the distributed runtime, classified once where the cause is known.
// Every class sets `name`, so errors that cross a process boundary keep their identity.

/** Base class of every error the runtime throws. */
export class DynamoError extends Error {
  /**
   * Creates the error, its `name` set to the class name.
   * @param message what went wrong, with the offending value where there is one
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A bad argument or option: the message says what was wrong and what came in. */
export class InvalidArgumentError extends DynamoError {}

/**
 * The response stream ended without its end-of-stream sentinel: the worker died, its
 * connection broke, or it shut down without finishing. Callers may migrate the request.
 */
export class StreamIncompleteError extends DynamoError {
  /** Items the caller had received on this stream before it broke. */
  readonly itemsReceived: number;
  /** Creates the error with the count of items received before the break. */
  constructor(message: string, itemsReceived = 0, options?: ErrorOptions) {
    super(message, options);
    this.itemsReceived = itemsReceived;
  }
}

/**
 * A stream's worker sent nothing, not even a heartbeat, for the idle deadline: it is stopped,
 * hung or cut off without its connection closing. Migratable, like a stream that broke.
 */
export class StreamStalledError extends StreamIncompleteError {
  /** The idle deadline that passed (ms). */
  readonly idleTimeoutMs: number;
  /** Creates the error for a stream that was silent past `idleTimeoutMs`. */
  constructor(message: string, itemsReceived: number, idleTimeoutMs: number) {
    super(message, itemsReceived);
    this.idleTimeoutMs = idleTimeoutMs;
  }
}

/** No instance of the endpoint is known, or the chosen one is gone. */
export class NoInstancesError extends DynamoError {
  /** The endpoint, as `namespace/component/endpoint`. */
  readonly endpoint: string;
  /** The instance that was asked for, when one was. */
  readonly instanceId: string | undefined;
  /** Creates the error for an endpoint and, when one was asked for, an instance. */
  constructor(endpoint: string, instanceId?: string) {
    super(
      instanceId === undefined
        ? `no instances of ${endpoint} are available`
        : `instance ${instanceId} of ${endpoint} is not available`,
    );
    this.endpoint = endpoint;
    this.instanceId = instanceId;
  }
}

/**
 * Thrown by a handler that must stop before finishing (the seeds' `GeneratorExit`): the
 * caller sees the stream as incomplete and may migrate the request to another instance.
 */
export class EngineShutdownError extends DynamoError {}

/** The remote handler threw: its message and error class are carried over. */
export class RemoteError extends DynamoError {
  /** `name` of the error the handler threw (e.g. "TypeError"). */
  readonly remoteName: string;
  /** Creates the error from the handler's message and error name. */
  constructor(message: string, remoteName: string) {
    super(message);
    this.remoteName = remoteName;
  }
}

/**
 * An upstream HTTP server (an OpenAI-compatible engine behind a worker) answered with an
 * error status. The status travels with the error across the request plane, so the
 * frontend answers a client error with the same status and anything else with 502.
 */
export class UpstreamError extends DynamoError {
  /** The upstream's HTTP status (502 when it failed mid-stream). */
  readonly status: number;
  /**
   * Creates the error for an upstream's error status.
   * @param message the upstream's own error message
   */
  constructor(status: number, message: string, options?: ErrorOptions) {
    super(message, options);
    this.status = status;
  }
}

/** The request was cancelled by the caller (signal aborted or context stopped). */
export class CancelledError extends DynamoError {
  /** Creates the error. */
  constructor(message = "request cancelled", options?: ErrorOptions) {
    super(message, options);
  }
}

/** A wait ran past its deadline. */
export class TimeoutError extends DynamoError {}

/** A frame or envelope did not follow the wire protocol. */
export class ProtocolError extends DynamoError {}

/** The runtime (or the endpoint) has shut down and accepts no more work. */
export class RuntimeShutdownError extends DynamoError {}

/** All runtime errors, for `instanceof` checks by name. */
export const errors = {
  DynamoError,
  InvalidArgumentError,
  StreamIncompleteError,
  NoInstancesError,
  EngineShutdownError,
  RemoteError,
  UpstreamError,
  CancelledError,
  TimeoutError,
  ProtocolError,
  RuntimeShutdownError,
} as const;
