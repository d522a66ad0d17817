// `dynamo serve graph.ts:Entry`: resolves the graph of @service classes from the entry
// and runs every service as its own process (`workers` replicas each), restarting
// crashed replicas; `--service-name X` is the child side, serving one service.

import { announceBackends } from "../runtime/backends.ts";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import { HubServer } from "../runtime/hub/mod.ts";
import { registerProcessMetrics } from "../runtime/metrics/process.ts";
import {
  startSystemServer,
  type SystemServer,
  systemServerFromEnv,
} from "../runtime/metrics/system_server.ts";
import {
  ConfigError,
  describeGraph,
  parseConfigFlags,
  parseConfigJson,
  parseConfigYaml,
  resolveGraph,
  serveService,
  SERVICE_CONFIG_ENV,
  type ServiceClass,
  ServiceConfig,
  type ServiceGraph,
} from "../runtime/sdk/mod.ts";
import { serviceMeta } from "../runtime/sdk/service.ts";
import {
  applyRequestPlaneFlag,
  type Command,
  ExitCode,
  type Io,
  parseCommandArgs,
  parseMs,
  REQUEST_PLANE_FLAG,
  REQUEST_PLANE_HELP,
  UsageError,
} from "./_common.ts";

const DEFAULT_READY_TIMEOUT_MS = 60_000;
const SHUTDOWN_GRACE_MS = 30_000;
/** A service process prints this (then JSON) on stdout once its endpoints are registered. */
const READY_MARK = "DYNAMO_SERVE_READY ";
/** Set in service processes `dynamo serve` starts: they stop when its stdin pipe closes. */
const PARENT_ENV = "DYN_SERVE_PARENT";

const usage =
  `Usage: dynamo serve GRAPH.ts:Entry [-f CONFIG.yaml] [--Service.key=value ...] [options]

Resolves the graph of services reachable from Entry through depends() fields (after
link() edits) and starts each service as its own process, 'workers' replicas each, with
their output prefixed [Service.N]. Reports "ready" once every replica has registered its
endpoints, restarts a replica that exits with a growing delay, and on Ctrl-C (SIGINT) or
SIGTERM stops them all gracefully (shutdown hooks run).

Configuration, lowest precedence first: the @service decorator, ${SERVICE_CONFIG_ENV}
(JSON), the YAML file, then --Service.key=value flags (numbers, true/false, JSON values;
--Service.a.b=v nests, --Service.ServiceArgs.workers=2 overrides the decorator).

Backends: ETCD_ENDPOINTS / NATS_SERVER (etcd + NATS) or DYN_HUB (a running hub) are
passed to the services; with none of them set, serve starts a local hub for its services.

Options:
  -f, --file FILE         YAML configuration (top-level keys are service class names)
  --dry-run               print the graph and the effective configuration, start nothing
  --service-name NAME     run only this service of the graph, in this process (what a
                          container runs; 'dynamo serve' runs its replicas this way)
  --ready-timeout-ms N    how long replicas may take to register (default ${DEFAULT_READY_TIMEOUT_MS});
                          with --service-name, how long its endpoints may take to
                          appear in discovery
${REQUEST_PLANE_HELP}
  -h, --help              show this help`;

/** Loads `path:Export` and returns the service class. */
async function loadEntry(
  command: string,
  target: string,
): Promise<{ entry: ServiceClass; path: string }> {
  const at = target.lastIndexOf(":");
  if (at <= 0 || at === target.length - 1) {
    throw new UsageError(
      `expected GRAPH.ts:Entry (a module and the service class it exports), got ${
        JSON.stringify(target)
      }`,
      command,
    );
  }
  const path = target.slice(0, at);
  const name = target.slice(at + 1);
  let mod: Record<string, unknown>;
  try {
    mod = await import(pathToFileURL(resolve(path)).href);
  } catch (err: unknown) {
    throw new UsageError(`cannot import ${path}: ${(err as Error).message}`, "serve");
  }
  const entry = mod[name];
  if (!serviceMeta(entry)) {
    const services = Object.entries(mod).filter(([, v]) => serviceMeta(v)).map(([k]) => k);
    throw new UsageError(
      `${path} exports no @service class named ${name} (services it exports: ${
        services.join(", ") || "none"
      })`,
      command,
    );
  }
  return { entry: entry as ServiceClass, path };
}

/**
 * Configuration with seed 004's precedence: env JSON < YAML file < flags.
 * @throws {UsageError} unreadable or malformed configuration
 */
export async function loadServeConfig(
  command: string,
  file: string | undefined,
  cli: ReturnType<typeof parseConfigFlags>["config"],
): Promise<ServiceConfig> {
  try {
    const raw = Deno.env.get(SERVICE_CONFIG_ENV);
    const env = raw ? parseConfigJson(raw) : undefined;
    let yaml;
    if (file !== undefined) {
      let text: string;
      try {
        text = await Deno.readTextFile(file);
      } catch (err: unknown) {
        throw new ConfigError(`cannot read ${file}: ${(err as Error).message}`);
      }
      yaml = parseConfigYaml(text, file);
    }
    return ServiceConfig.fromLayers({ env, yaml, cli });
  } catch (err: unknown) {
    if (err instanceof ConfigError) throw new UsageError(err.message, command);
    throw err;
  }
}

/**
 * Splits `--Service.key=value` overrides from the rest of a command line.
 * @throws {UsageError} a malformed override
 */
export function splitOverrides(
  command: string,
  args: string[],
): ReturnType<typeof parseConfigFlags> {
  try {
    return parseConfigFlags(args);
  } catch (err: unknown) {
    if (err instanceof ConfigError) throw new UsageError(err.message, command);
    throw err;
  }
}

/** Resolves the graph of `GRAPH.ts:Entry` with its configuration. */
export async function loadGraph(
  command: string,
  target: string,
  config: ServiceConfig,
): Promise<ServiceGraph> {
  const { entry } = await loadEntry(command, target);
  ServiceConfig.setInstance(config);
  return resolveGraph(entry, { config });
}

async function run(args: string[], io: Io): Promise<number> {
  const { config: cli, rest } = splitOverrides("serve", args);
  const { values, positionals } = parseCommandArgs("serve", rest, {
    file: { type: "string", short: "f" },
    "dry-run": { type: "boolean" },
    "service-name": { type: "string" },
    "ready-timeout-ms": { type: "string" },
    ...REQUEST_PLANE_FLAG,
    help: { type: "boolean", short: "h" },
  });
  applyRequestPlaneFlag("serve", values["request-plane"]);
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length !== 1) {
    throw new UsageError(
      `needs one GRAPH.ts:Entry, got ${positionals.length} argument(s)`,
      "serve",
    );
  }
  const target = positionals[0]!;
  const readyTimeoutMs = values["ready-timeout-ms"] === undefined
    ? DEFAULT_READY_TIMEOUT_MS
    : parseMs("serve", "ready-timeout-ms", values["ready-timeout-ms"]);
  const config = await loadServeConfig("serve", values.file, cli);
  const graph = await loadGraph("serve", target, config);
  if (values["dry-run"]) {
    io.out(describeGraph(graph, config));
    return ExitCode.Ok;
  }
  for (const w of graph.warnings) io.err(`dynamo serve: warning: ${w}`);
  const name = values["service-name"];
  if (name !== undefined) return await serveOne(graph, name, config, io, readyTimeoutMs);
  return await supervise(graph, target, config, io, readyTimeoutMs);
}

/**
 * Signals this close together are one request. A terminal's Ctrl-C reaches the whole process
 * group, and wrappers in it (npx, `deno task`, a shell) forward it once more: without this, one
 * Ctrl-C through `npx ... task dynamo serve` read as two and killed every service at once.
 */
const SAME_SIGNAL_MS = 1000;

/** Counts stop requests, taking the copies of one signal that arrive together as one. */
class SignalCounter {
  #count = 0;
  #last = -Infinity;

  /** Records a signal; returns how many distinct requests there have been so far. */
  count(): number {
    const now = performance.now();
    if (now - this.#last >= SAME_SIGNAL_MS) {
      this.#count++;
      this.#last = now;
    }
    return this.#count;
  }
}

/** The child side: serves one service of the graph until a signal (or the parent) stops it. */
async function serveOne(
  graph: ServiceGraph,
  name: string,
  config: ServiceConfig,
  io: Io,
  readyTimeoutMs: number,
): Promise<number> {
  const node = graph.get(name);
  if (!node) {
    throw new UsageError(
      `no service ${name} in the graph of ${graph.entry} (services: ${
        graph.services.map((s) => s.name).join(", ")
      })`,
      "serve",
    );
  }
  // The probes and metrics of a deployed service (`dynamo deploy` sets DYN_SYSTEM_PORT).
  const system = systemServerFromEnv(Deno.env.toObject());
  const runtime = await DistributedRuntime.fromEnv();
  announceBackends(runtime, runtime.logger, "service");
  let registered = false;
  let server: SystemServer | undefined;
  if (system) {
    registerProcessMetrics(runtime.metrics.registry);
    try {
      server = await startSystemServer({
        ...system,
        registry: runtime.metrics.registry,
        notReady: () =>
          runtime.shutdownSignal.aborted
            ? "shutting down"
            : registered
            ? undefined
            : "the service is not registered yet",
      });
    } catch (err) {
      await runtime.shutdown();
      throw err;
    }
    runtime.logger.info("system server listening", { url: server.url });
  }
  // The parent forwards SIGTERM after a terminal's SIGINT reached us too: two signals are
  // one shutdown; a third exits at once. Copies of one Ctrl-C (see SAME_SIGNAL_MS) count once.
  const signals = new SignalCounter();
  const onSignal = () => {
    if (signals.count() >= 3) Deno.exit(ExitCode.Interrupted);
    runtime.shutdown().catch((err) =>
      runtime.logger.error("shutdown failed", { error: String(err) })
    );
  };
  const sigs: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"];
  for (const s of sigs) Deno.addSignalListener(s, onSignal);
  if (Deno.env.get(PARENT_ENV) === "1") {
    // Our stdin is a pipe from `dynamo serve`: its end means the parent is gone.
    (async () => {
      for await (const _ of Deno.stdin.readable) { /* nothing is sent */ }
    })().catch(() => {}).finally(() => {
      if (!runtime.shutdownSignal.aborted) {
        runtime.logger.warn("dynamo serve (parent) is gone: shutting down");
        onSignal();
      }
    });
  }
  try {
    // Its own deadline for registering: a container runs this with no parent to time out.
    const serving = await serveService(node.cls, runtime, {
      config,
      node,
      registerTimeoutMs: readyTimeoutMs || undefined,
    });
    registered = true;
    io.out(READY_MARK + JSON.stringify({ service: name, instance_id: runtime.instanceId }));
    await serving.done;
    return ExitCode.Ok;
  } finally {
    for (const s of sigs) Deno.removeSignalListener(s, onSignal);
    await runtime.shutdown();
    await server?.close();
  }
}

/** How to start `dynamo serve` again: the compiled binary, or deno running cli/main.ts. */
function selfCommand(): { cmd: string; args: string[] } {
  if (import.meta.url.includes("/deno-compile-")) return { cmd: Deno.execPath(), args: [] };
  const main = decodeURIComponent(new URL("./main.ts", import.meta.url).pathname);
  return { cmd: Deno.execPath(), args: ["run", "-A", main] };
}

/** Writes each line of `stream` through `write` with `prefix`; calls `onLine` first. */
async function pump(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => boolean,
): Promise<void> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    const lines = (rest + chunk).split("\n");
    rest = lines.pop()!;
    for (const l of lines) onLine(l);
  }
  if (rest) onLine(rest);
}

/** One replica process of a service, restarted when it exits unexpectedly. */
class Replica {
  readonly label: string;
  child: Deno.ChildProcess | undefined;
  ready = false;
  #readyWaiters: (() => void)[] = [];
  #failures = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #exited: Promise<void> = Promise.resolve();
  stopping = false;

  constructor(
    readonly service: string,
    readonly index: number,
    readonly spawnArgs: { cmd: string; args: string[]; env: Record<string, string> },
    readonly io: Io,
  ) {
    this.label = `${service}.${index}`;
  }

  #log(msg: string): void {
    this.io.err(`[serve] ${this.label} ${msg}`);
  }

  /** Starts the process; a spawn that fails is retried like a crash (never throws). */
  start(): void {
    const started = Date.now();
    this.ready = false;
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(this.spawnArgs.cmd, {
        args: this.spawnArgs.args,
        env: this.spawnArgs.env,
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
    } catch (err: unknown) {
      // Out of processes or file descriptors, or the binary is gone: this runs in a timer
      // on restarts, where a throw would take the whole of `dynamo serve` down.
      const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      this.#restartLater(started, `could not start ${this.spawnArgs.cmd} (${why})`);
      return;
    }
    this.child = child;
    this.#log(`started pid=${child.pid}`);
    const prefix = `[${this.label}] `;
    const out = pump(child.stdout, (line) => {
      if (line.startsWith(READY_MARK)) {
        let instance = "?";
        try {
          instance = String(JSON.parse(line.slice(READY_MARK.length)).instance_id);
        } catch { /* keep "?" */ }
        this.ready = true;
        this.#log(`ready instance=${instance} pid=${child.pid}`);
        for (const w of this.#readyWaiters.splice(0)) w();
        return true;
      }
      this.io.out(prefix + line);
      return true;
    });
    const err = pump(child.stderr, (line) => (this.io.err(prefix + line), true));
    this.#exited = (async () => {
      const status = await child.status;
      await Promise.allSettled([out, err]);
      try {
        await child.stdin.close();
      } catch { /* already closed */ }
      if (this.child === child) this.child = undefined;
      this.ready = false;
      const how = status.signal ? `signal=${status.signal}` : `code=${status.code}`;
      this.#restartLater(started, `exited ${how}`);
    })();
  }

  /**
   * Starts it again after a delay that doubles with each quick failure (at most 10 s; no
   * limit on attempts, as a supervisor should), unless it is being stopped.
   */
  #restartLater(started: number, what: string): void {
    if (this.stopping) {
      this.#log(what);
      return;
    }
    if (Date.now() - started > 10_000) this.#failures = 0;
    const delay = Math.min(500 * 2 ** this.#failures, 10_000);
    this.#failures++;
    this.#log(`${what}; restarting in ${delay} ms`);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (!this.stopping) this.start();
    }, delay);
  }

  /** Resolves when this replica is (next) ready. */
  whenReady(): Promise<void> {
    if (this.ready) return Promise.resolve();
    return new Promise((r) => this.#readyWaiters.push(r));
  }

  /** Stops it: SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs: number, signal: Deno.Signal = "SIGTERM"): Promise<void> {
    this.stopping = true;
    clearTimeout(this.#timer);
    const child = this.child;
    if (!child) return;
    try {
      child.kill(signal);
    } catch { /* already exited */ }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), graceMs)));
    if (await Promise.race([this.#exited.then(() => "done" as const), late]) === "late") {
      this.#log(`did not stop within ${graceMs} ms: killing it`);
      try {
        child.kill("SIGKILL");
      } catch { /* already exited */ }
    }
    clearTimeout(timer);
    await this.#exited;
  }
}

/** The parent side: starts every replica, waits for readiness, supervises, shuts down. */
async function supervise(
  graph: ServiceGraph,
  target: string,
  config: ServiceConfig,
  io: Io,
  readyTimeoutMs: number,
): Promise<number> {
  const env = Deno.env.toObject();
  let hub: HubServer | undefined;
  let backendEnv: Record<string, string> = {};
  if (!env.ETCD_ENDPOINTS && !env.NATS_SERVER && !env.DYN_HUB) {
    hub = await HubServer.start({ hostname: "127.0.0.1", port: 0, token: crypto.randomUUID() });
    backendEnv = hub.env();
    // Clients of the pipeline need this line to join (the token keeps other local users out).
    io.err(
      `[serve] local hub: clients join with ${
        Object.entries(backendEnv).map(([k, v]) => `${k}=${v}`).join(" ")
      } (set ETCD_ENDPOINTS and NATS_SERVER to use etcd + NATS instead)`,
    );
  } else {
    io.err(
      env.ETCD_ENDPOINTS || env.NATS_SERVER
        ? `[serve] backends: etcd + NATS (from ETCD_ENDPOINTS / NATS_SERVER)`
        : `[serve] backends: the hub at DYN_HUB=${env.DYN_HUB}`,
    );
  }
  const self = selfCommand();
  const childEnv: Record<string, string> = {
    ...backendEnv,
    [SERVICE_CONFIG_ENV]: JSON.stringify(config.toJSON()),
    [PARENT_ENV]: "1",
  };
  // Several service processes on one machine cannot share a fixed system port: each takes a
  // free one (and logs it) instead.
  const systemPort = Deno.env.get("DYN_SYSTEM_PORT")?.trim();
  if (systemPort && systemPort !== "0" && systemPort !== "-1") childEnv.DYN_SYSTEM_PORT = "0";
  const replicas: Replica[] = [];
  for (const node of graph.services) {
    for (let i = 0; i < node.workers; i++) {
      replicas.push(
        new Replica(node.name, i, {
          cmd: self.cmd,
          args: [
            ...self.args,
            "serve",
            target,
            "--service-name",
            node.name,
            "--ready-timeout-ms",
            String(readyTimeoutMs),
          ],
          env: childEnv,
        }, io),
      );
    }
  }

  const stop = Promise.withResolvers<Deno.Signal>();
  const signals = new SignalCounter();
  const onSignal = (signal: Deno.Signal) => () => {
    const n = signals.count();
    if (n === 1) {
      // Replicas the same Ctrl-C reached exit on their own: that is not a crash to restart.
      for (const r of replicas) r.stopping = true;
      stop.resolve(signal);
    } else {
      io.err(`[serve] second signal: killing every service now`);
      for (const r of replicas) void r.stop(0, "SIGKILL").catch(() => {});
    }
  };
  const sigs: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"];
  const handlers = sigs.map((s) => [s, onSignal(s)] as const);
  for (const [s, h] of handlers) Deno.addSignalListener(s, h);

  let code: number = ExitCode.Ok;
  try {
    for (const r of replicas) r.start();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const deadline = new Promise<"timeout">((r) =>
      timer = setTimeout(() => r("timeout"), readyTimeoutMs)
    );
    const outcome = await Promise.race([
      Promise.all(replicas.map((r) => r.whenReady())).then(() => "ready" as const),
      deadline,
      stop.promise.then(() => "stopped" as const),
    ]);
    clearTimeout(timer);
    if (outcome === "timeout") {
      const late = replicas.filter((r) => !r.ready).map((r) => r.label);
      io.err(`[serve] not ready within ${readyTimeoutMs} ms: ${late.join(", ")}; stopping`);
      code = ExitCode.Failure;
    } else if (outcome === "ready") {
      io.err(
        `[serve] ready: ${graph.services.length} services, ${replicas.length} processes ` +
          `(entry ${graph.get(graph.entry)!.namespace}/${graph.entry})`,
      );
      const signal = await stop.promise;
      io.err(`[serve] ${signal}: shutting down`);
    } else {
      io.err(`[serve] interrupted before ready: shutting down`);
    }
  } finally {
    // Dependents first, so they stop calling services that are going away.
    const order = [...graph.services].reverse();
    for (const node of order) {
      await Promise.all(
        replicas.filter((r) => r.service === node.name).map((r) => r.stop(SHUTDOWN_GRACE_MS)),
      );
    }
    for (const [s, h] of handlers) Deno.removeSignalListener(s, h);
    await hub?.close();
    io.err(`[serve] stopped`);
  }
  return code;
}

/** `dynamo serve`. */
export const serveCommand: Command = {
  name: "serve",
  summary: "run a graph of @service classes, one process per replica",
  usage,
  run,
};
