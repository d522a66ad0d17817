// Admission in front of the OpenAI fetch handler: an optional API key on every route but
// the probes, and a bound on generation requests in flight (a short wait queue, then 429).

import { createHash, timingSafeEqual } from "node:crypto";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { RequestError } from "../openai/errors.ts";
import type { FrontendMetrics } from "./metrics.ts";

/** Options of {@linkcode guardFrontend}. */
export interface GuardOptions {
  /**
   * Generation requests (`POST /v1/chat/completions`, `/v1/completions`, `/v1/responses`,
   * `/v1/embeddings`) handled at once, each counted from its arrival until the last byte of
   * its response is sent or its client goes away (default 1024). A client that uploads its body slowly holds its slot
   * meanwhile: the body has no read deadline of its own.
   */
  maxInflight?: number;
  /** Requests that may wait for a slot once `maxInflight` is reached (default 0: none). */
  maxQueued?: number;
  /** How long a request waits in the queue before it is refused, in ms (default 1000). */
  queueTimeoutMs?: number;
  /** What `Retry-After` tells a refused client, in whole seconds (default 1). */
  retryAfterS?: number;
  /**
   * When set, every route but `/health`, `/live` and `/metrics` needs
   * `Authorization: Bearer <apiKey>`. The probes stay open for orchestrators, and
   * `/metrics` for scrapers: it carries counts and timings, never prompts or keys.
   */
  apiKey?: string;
  /** Where rejections are counted and the queue's depth is read from. */
  metrics?: FrontendMetrics;
}

/** What `Deno.serve` tells a handler about a request; only `completed` is read. */
export type GuardRequestInfo = Pick<Deno.ServeHandlerInfo, "completed">;

/** The guarded frontend: a `Deno.serve` handler and its live counts. */
export interface Guard {
  /** The handler to serve: checks the key, admits or refuses, then calls the frontend. */
  fetch(request: Request, info: GuardRequestInfo): Promise<Response>;
  /** Generation requests admitted and not finished. */
  readonly inflight: number;
  /** Generation requests waiting for a slot. */
  readonly queued: number;
  /** The limits in force, defaults filled in. */
  readonly limits: { maxInflight: number; maxQueued: number; queueTimeoutMs: number };
}

/** Why a request was refused (the `reason` label of the rejection counter). */
export type RejectReason = "overloaded" | "queue_timeout" | "unauthorized";

const GENERATION_PATHS = new Set([
  "/v1/chat/completions",
  "/v1/completions",
  "/v1/responses",
  "/v1/embeddings",
]);
const OPEN_PATHS = new Set(["/health", "/live", "/metrics"]);
const JSON_TYPE = "application/json";

interface Waiter {
  admit(): void;
}

/**
 * Wraps the frontend's fetch handler with the API-key check and admission control.
 * A request holds its slot until `info.completed` settles, so a stream counts until its
 * last byte is written or its client disconnects.
 *
 * @param handler The frontend's fetch handler (`createFrontend(...).fetch`).
 * @param options Limits, the key, and the metrics.
 * @returns The guarded handler for `Deno.serve`.
 * @throws {InvalidArgumentError} a limit that is not a whole number in range, or a key that
 * is not one or more visible ASCII characters
 * @example
 * ```ts
 * const frontend = createFrontend({ models });
 * const guard = guardFrontend(frontend.fetch, { maxInflight: 256, metrics: frontend.metrics });
 * Deno.serve({ port: 8000 }, guard.fetch);
 * ```
 */
export function guardFrontend(
  handler: (request: Request) => Promise<Response>,
  options: GuardOptions = {},
): Guard {
  const maxInflight = wholeNumber("maxInflight", options.maxInflight ?? 1024, 1);
  const maxQueued = wholeNumber("maxQueued", options.maxQueued ?? 0, 0);
  const queueTimeoutMs = wholeNumber("queueTimeoutMs", options.queueTimeoutMs ?? 1000, 0);
  const retryAfter = String(wholeNumber("retryAfterS", options.retryAfterS ?? 1, 0));
  const keyDigest = options.apiKey === undefined ? undefined : digestOfKey(options.apiKey);
  const metrics = options.metrics;

  let inflight = 0;
  // Insertion order is arrival order: the first waiter gets the next free slot.
  const waiters = new Set<Waiter>();
  metrics?.trackAdmission(() => ({ admitted: inflight, queued: waiters.size }));

  function release(): void {
    for (const next of waiters) {
      // The slot passes straight to the longest waiter: `inflight` stays the same.
      waiters.delete(next);
      next.admit();
      return;
    }
    inflight--;
  }

  /** Waits for a slot; false when the deadline passes or the client goes away first. */
  function wait(signal: AbortSignal): Promise<boolean> {
    const { promise, resolve } = Promise.withResolvers<boolean>();
    const leave = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", leave);
      waiters.delete(waiter);
      resolve(false);
    };
    const waiter: Waiter = {
      admit() {
        clearTimeout(timer);
        signal.removeEventListener("abort", leave);
        resolve(true);
      },
    };
    const timer = setTimeout(leave, queueTimeoutMs);
    signal.addEventListener("abort", leave, { once: true });
    waiters.add(waiter);
    return promise;
  }

  function refuse(reason: RejectReason, message: string, code: string): Response {
    metrics?.rejected.inc({ reason });
    return errorResponse(new RequestError(429, message, { code }), {
      "retry-after": retryAfter,
    });
  }

  async function admitted(request: Request, info: GuardRequestInfo): Promise<Response> {
    let released = false;
    const done = () => {
      if (released) return;
      released = true;
      release();
    };
    info.completed.then(done, done);
    try {
      return await handler(request);
    } catch (err) {
      done();
      throw err;
    }
  }

  /** A generation request: a slot now, a place in the queue, or a refusal. */
  async function admit(request: Request, info: GuardRequestInfo): Promise<Response> {
    if (inflight < maxInflight) {
      inflight++;
    } else if (waiters.size >= maxQueued) {
      return refuse(
        "overloaded",
        `The server is at its limit of ${maxInflight} requests in flight` +
          (maxQueued > 0 ? ` and ${maxQueued} waiting` : "") +
          `; retry after ${retryAfter} s.`,
        "overloaded",
      );
    } else if (!(await wait(request.signal))) {
      return refuse(
        "queue_timeout",
        `No slot freed up within ${queueTimeoutMs} ms; retry after ${retryAfter} s.`,
        "queue_timeout",
      );
    }
    return await admitted(request, info);
  }

  return {
    limits: { maxInflight, maxQueued, queueTimeoutMs },
    get inflight() {
      return inflight;
    },
    get queued() {
      return waiters.size;
    },
    fetch(request, info) {
      // Without a key only POSTs can need a decision: the rest skips the path parsing.
      if (keyDigest === undefined && request.method !== "POST") return handler(request);
      const path = routePath(request.url);
      if (keyDigest !== undefined && !OPEN_PATHS.has(path)) {
        const refusal = checkKey(request.headers.get("authorization"), keyDigest);
        if (refusal !== undefined) {
          metrics?.rejected.inc({ reason: "unauthorized" });
          return Promise.resolve(errorResponse(refusal, { "www-authenticate": "Bearer" }));
        }
      }
      if (request.method !== "POST" || !GENERATION_PATHS.has(path)) return handler(request);
      return admit(request, info);
    },
  };
}

/** The refusal for a missing or wrong key, or undefined when the key is right. */
function checkKey(header: string | null, keyDigest: Uint8Array): RequestError | undefined {
  // RFC 7235: the scheme is case-insensitive. Headers arrive trimmed.
  if (header === null || header.length < 7 || header.slice(0, 7).toLowerCase() !== "bearer ") {
    return new RequestError(
      401,
      "Missing API key: send it as the header `Authorization: Bearer <key>`.",
      { code: "invalid_api_key" },
    );
  }
  // Comparing digests takes the same time whatever the presented key's length or content.
  const presented = createHash("sha256").update(header.slice(7).trim()).digest();
  if (timingSafeEqual(presented, keyDigest)) return undefined;
  // The presented key is never echoed: it may be another service's secret.
  return new RequestError(401, "Incorrect API key provided.", { code: "invalid_api_key" });
}

function digestOfKey(key: string): Uint8Array {
  if (typeof key !== "string" || !/^[\x21-\x7e]+$/.test(key)) {
    // The message never holds the key itself.
    throw new InvalidArgumentError(
      `apiKey must be 1 or more visible ASCII characters without spaces (got ${
        typeof key === "string" ? `${key.length} characters` : typeof key
      })`,
    );
  }
  return createHash("sha256").update(key).digest();
}

function wholeNumber(name: string, value: number, min: number): number {
  if (!Number.isSafeInteger(value) || value < min) {
    throw new InvalidArgumentError(`${name} must be a whole number >= ${min}, got ${value}`);
  }
  return value;
}

function errorResponse(err: RequestError, headers: Record<string, string>): Response {
  return new Response(JSON.stringify(err.toJSON()), {
    status: err.status,
    headers: { "content-type": JSON_TYPE, ...headers },
  });
}

/**
 * The path the frontend routes on: no query or fragment, no trailing slashes, dot segments
 * resolved. The same rules as the frontend's own router, so a request cannot reach a
 * generation route without being counted, nor a guarded route as if it were a probe.
 */
export function routePath(url: string): string {
  const scheme = url.indexOf("://");
  const start = url.indexOf("/", scheme === -1 ? 0 : scheme + 3);
  if (start === -1) return "/";
  let end = url.length;
  for (let i = start; i < url.length; i++) {
    const c = url.charCodeAt(i);
    if (c === 63 /* ? */ || c === 35 /* # */) {
      end = i;
      break;
    }
  }
  while (end > start + 1 && url.charCodeAt(end - 1) === 47 /* / */) end--;
  const path = url.slice(start, end);
  return path.includes(".") || path.includes("%")
    ? new URL(url).pathname.replace(/\/+$/, "") || "/"
    : path;
}
