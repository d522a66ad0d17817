// The OpenAI error object and the error that carries it to the HTTP layer.

/** The body of an OpenAI error response. */
export interface OpenAIErrorBody {
  /** What went wrong: the message, OpenAI error type, field at fault and code. */
  error: {
    message: string;
    type: string;
    param: string | null;
    code: string | null;
  };
}

/** Options of {@linkcode RequestError}. */
export interface RequestErrorOptions extends ErrorOptions {
  /** OpenAI error type; default from the status (`invalid_request_error` for 4xx). */
  type?: string;
  /** The request field at fault (`"temperature"`, `"messages[2].content"`). */
  param?: string | null;
  /** Machine-readable code (`"context_length_exceeded"`, `"model_not_found"`). */
  code?: string | null;
}

/**
 * A request the server refuses, with the HTTP status and the OpenAI error object to answer
 * with. Thrown by validation and preprocessing; the HTTP layer turns it into a response.
 *
 * @example
 * ```ts
 * const err = new RequestError(400, "`temperature` must be between 0 and 2, got 3", {
 *   param: "temperature",
 * });
 * err.toJSON().error.type; // "invalid_request_error"
 * ```
 */
export class RequestError extends Error {
  /** The error's class name. */
  override name = "RequestError";
  /** HTTP status: 400, 404, 413, 503, ... */
  readonly status: number;
  /** OpenAI error type. */
  readonly type: string;
  /** The request field at fault, or null. */
  readonly param: string | null;
  /** Machine-readable code, or null. */
  readonly code: string | null;

  /**
   * Creates the error for an HTTP status and a message for the client.
   * @param status HTTP status.
   * @param message What was wrong, for the client.
   * @param options type, param, code and cause.
   */
  constructor(status: number, message: string, options: RequestErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = status;
    this.type = options.type ?? defaultErrorType(status);
    this.param = options.param ?? null;
    this.code = options.code ?? null;
  }

  /**
   * The 404 for a model nobody serves.
   *
   * @param model The requested model name.
   * @returns The error.
   */
  static modelNotFound(model: string): RequestError {
    return new RequestError(404, `The model \`${model}\` does not exist.`, {
      param: "model",
      code: "model_not_found",
    });
  }

  /**
   * The 413 for a request body over the limit.
   *
   * @param limitBytes The limit in bytes.
   * @returns The error.
   */
  static bodyTooLarge(limitBytes: number): RequestError {
    return new RequestError(413, `Request body is larger than the limit of ${limitBytes} bytes.`, {
      code: "request_too_large",
    });
  }

  /**
   * The error as the JSON body of an OpenAI error response.
   * @returns The OpenAI error object: `{error: {message, type, param, code}}`.
   */
  toJSON(): OpenAIErrorBody {
    return {
      error: { message: this.message, type: this.type, param: this.param, code: this.code },
    };
  }
}

function defaultErrorType(status: number): string {
  if (status === 401) return "authentication_error";
  if (status === 403) return "permission_error";
  if (status === 429) return "rate_limit_error";
  if (status >= 500) return status === 503 ? "service_unavailable" : "server_error";
  return "invalid_request_error";
}
