// Optional CORS for browser clients: answers preflight requests itself (before the API-key
// check, which a preflight cannot pass) and marks responses to allowed origins.

/** Options of {@linkcode withCors}. */
export interface CorsOptions {
  /** Origins allowed to call the API from a browser (`"*"`: any). */
  allowOrigins: readonly string[];
}

const ALLOW_METHODS = "GET, POST, OPTIONS";
const ALLOW_HEADERS = "authorization, content-type, x-request-id";

/**
 * Wraps a fetch handler with CORS: `OPTIONS` preflights from an allowed origin get 204 with
 * the allowed methods and headers; other responses to an allowed origin carry
 * `access-control-allow-origin` (and expose `x-request-id`).
 *
 * @param fetch the handler to wrap
 * @param options the allowed origins
 * @returns the wrapped handler
 * @example
 * ```ts
 * const handler = withCors(() => new Response("ok"), { allowOrigins: ["https://app.example"] });
 * ```
 */
export function withCors<A extends unknown[]>(
  fetch: (request: Request, ...rest: A) => Response | Promise<Response>,
  options: CorsOptions,
): (request: Request, ...rest: A) => Promise<Response> {
  const any = options.allowOrigins.includes("*");
  const allowed = new Set(options.allowOrigins);
  const allow = (origin: string | null) =>
    origin === null ? undefined : any ? "*" : allowed.has(origin) ? origin : undefined;
  return async (request, ...rest) => {
    const origin = allow(request.headers.get("origin"));
    if (request.method === "OPTIONS" && request.headers.has("access-control-request-method")) {
      if (origin === undefined) return new Response(null, { status: 403 });
      return new Response(null, {
        status: 204,
        headers: {
          "access-control-allow-origin": origin,
          "access-control-allow-methods": ALLOW_METHODS,
          "access-control-allow-headers": ALLOW_HEADERS,
          "access-control-max-age": "600",
          ...(any ? {} : { vary: "origin" }),
        },
      });
    }
    const response = await fetch(request, ...rest);
    if (origin !== undefined) {
      response.headers.set("access-control-allow-origin", origin);
      response.headers.set("access-control-expose-headers", "x-request-id, retry-after");
      if (!any) response.headers.append("vary", "origin");
    }
    return response;
  };
}
