// A worker's system server: a small HTTP server with `/metrics` (the runtime's Prometheus
// registry), `/health` and `/live`, started when the environment asks for it as the
// reference's does (`DYN_SYSTEM_PORT`, `DYN_SYSTEM_HOST`, `DYN_SYSTEM_ENABLED`).

import { InvalidArgumentError } from "../errors.ts";
import type { MetricsRegistry } from "./metric_types.ts";

/** Where the system server listens. */
export interface SystemServerAddress {
  /** Interface to bind (default `0.0.0.0`, as the reference). */
  hostname: string;
  /** Port; 0 picks a free one. */
  port: number;
}

/**
 * The system server's address from the environment, or undefined when it is off.
 *
 * `DYN_SYSTEM_PORT`: a port turns it on (0 picks a free one; -1, the default, leaves it off).
 * `DYN_SYSTEM_ENABLED`: `true`/`1` turns it on (on `DYN_SYSTEM_PORT`, else a free port),
 * `false`/`0` keeps it off whatever the port. `DYN_SYSTEM_HOST`: the interface (default
 * `0.0.0.0`).
 *
 * @param env the environment to read
 * @returns the address to listen on, or undefined
 * @throws {InvalidArgumentError} a port that is not a whole number from -1 to 65535, or a
 *   `DYN_SYSTEM_ENABLED` that is not true/false/1/0
 * @example
 * ```ts
 * systemServerFromEnv({ DYN_SYSTEM_PORT: "8081" }); // { hostname: "0.0.0.0", port: 8081 }
 * systemServerFromEnv({}); // undefined
 * ```
 */
export function systemServerFromEnv(
  env: Record<string, string | undefined>,
): SystemServerAddress | undefined {
  const rawEnabled = env.DYN_SYSTEM_ENABLED?.trim().toLowerCase();
  let enabled: boolean | undefined;
  if (rawEnabled) {
    if (rawEnabled === "true" || rawEnabled === "1") enabled = true;
    else if (rawEnabled === "false" || rawEnabled === "0") enabled = false;
    else {
      throw new InvalidArgumentError(
        `DYN_SYSTEM_ENABLED must be true, false, 1 or 0, got ${
          JSON.stringify(env.DYN_SYSTEM_ENABLED)
        }`,
      );
    }
  }
  const rawPort = env.DYN_SYSTEM_PORT?.trim();
  let port = -1;
  if (rawPort) {
    port = Number(rawPort);
    if (!/^-?\d+$/.test(rawPort) || port < -1 || port > 65535) {
      throw new InvalidArgumentError(
        `DYN_SYSTEM_PORT must be a port from 0 to 65535 (or -1: off), got ${
          JSON.stringify(rawPort)
        }`,
      );
    }
  }
  if (enabled === false || (enabled === undefined && port < 0)) return undefined;
  const hostname = env.DYN_SYSTEM_HOST?.trim() || "0.0.0.0";
  return { hostname, port: Math.max(port, 0) };
}

/** Options of {@linkcode startSystemServer}. */
export interface SystemServerOptions extends SystemServerAddress {
  /** What `/metrics` renders. */
  registry: MetricsRegistry;
  /** Why the process is not ready (`/health` answers 503 with it), or undefined when it is. */
  notReady?: () => string | undefined;
}

/** A running system server. */
export interface SystemServer {
  /** `http://host:port` it listens on. */
  readonly url: string;
  /** Stops listening (requests being answered finish). */
  close(): Promise<void>;
}

/**
 * Starts a system server: `GET /metrics` (Prometheus text), `GET /health` (200
 * `{"status":"ready"}`, or 503 `{"status":"notready","message":...}`), `GET /live` (200);
 * anything else is a 404, another method a 405.
 *
 * @param options where to listen, the registry, the readiness check
 * @returns the server once it listens
 * @throws {Deno.errors.AddrInUse} the port is taken
 * @example
 * ```ts ignore
 * const server = await startSystemServer({ hostname: "127.0.0.1", port: 0, registry });
 * console.log(await (await fetch(`${server.url}/metrics`)).text());
 * await server.close();
 * ```
 */
export async function startSystemServer(options: SystemServerOptions): Promise<SystemServer> {
  const { registry, notReady } = options;
  const json = (body: unknown, status = 200) =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "content-type": "application/json" },
    });
  const handler = async (request: Request): Promise<Response> => {
    const path = new URL(request.url).pathname;
    if (path !== "/metrics" && path !== "/health" && path !== "/live") {
      return json({ error: `no route ${path}; try /metrics, /health or /live` }, 404);
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      return json({ error: `method ${request.method} not allowed on ${path}; use GET` }, 405);
    }
    if (path === "/metrics") {
      return new Response(await registry.metrics(), {
        headers: { "content-type": registry.contentType },
      });
    }
    if (path === "/live") return json({ status: "live" });
    const problem = notReady?.();
    return problem === undefined
      ? json({ status: "ready" })
      : json({ status: "notready", message: problem }, 503);
  };
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const server = Deno.serve({
    hostname: options.hostname,
    port: options.port,
    onListen: (addr) => listening.resolve(addr as Deno.NetAddr),
  }, handler);
  const addr = await Promise.race([
    listening.promise,
    server.finished.then(() => {
      throw new Error("the system server stopped before it listened");
    }),
  ]);
  const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
  return {
    url: `http://${host}:${addr.port}`,
    close: () => server.shutdown(),
  };
}
