// deno-lint-ignore-file no-console -- a test helper that says why a test is skipped
// Reference (ai-dynamo 1.6.1) processes for interop tests: the venv scripts/setup_reference.sh
// installs, and a mocker worker started on loopback against a test's etcd and NATS.

import { builtinTestModel, DistributedRuntime } from "../../mod.ts";
import { terminate } from "./process.ts";
import { freePort, freePortIn } from "./servers.ts";

const ROOT = new URL("../../", import.meta.url).pathname;

/**
 * The reference venv's python, installing it first; undefined (with a warning naming `test`)
 * when it cannot be installed (PyPI unreachable).
 */
export async function referencePython(test: string): Promise<string | undefined> {
  const setup = await new Deno.Command("bash", {
    args: [`${ROOT}scripts/setup_reference.sh`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!setup.success) {
    console.warn(
      `${test} skipped: scripts/setup_reference.sh could not install ai-dynamo 1.6.1 ` +
        `(PyPI unreachable?): ${new TextDecoder().decode(setup.stderr).slice(-400)}`,
    );
    return undefined;
  }
  return new TextDecoder().decode(setup.stdout).trim();
}

/** A running reference mocker worker. */
export interface ReferenceMocker {
  readonly child: Deno.ChildProcess;
  /** Its system server (metrics, model files), `http://127.0.0.1:PORT`. */
  readonly systemUrl: string;
  /** The last lines it wrote to stderr, for failure messages. */
  stderrTail(): string;
  /** SIGKILL (ignores an exited process) and waits for the exit. */
  kill(): Promise<void>;
}

/**
 * A free loopback TCP port below 32768: the reference reads DYN_SYSTEM_PORT as an i16, and the
 * kernel's own free ports are above that.
 */
export function freeShortPort(): number {
  const port = freePortIn(20_000, 32_000, 200);
  if (port !== undefined) return port;
  throw new Error("no free port in 20000..32000 after 200 tries");
}

/** Starts `python -m dynamo.mocker` for the built-in test model, on loopback. */
export async function startReferenceMocker(
  python: string,
  servers: { etcd: string; nats: string },
  options: { modelName: string; args?: string[]; env?: Record<string, string> },
): Promise<ReferenceMocker> {
  const systemPort = freeShortPort();
  const child = new Deno.Command(python, {
    args: [
      "-m",
      "dynamo.mocker",
      "--model-path",
      await builtinTestModel(),
      "--model-name",
      options.modelName,
      ...(options.args ?? []),
    ],
    env: {
      ETCD_ENDPOINTS: servers.etcd,
      NATS_SERVER: servers.nats,
      DYN_TCP_RPC_HOST: "127.0.0.1",
      DYN_EVENT_PLANE_HOST: "127.0.0.1",
      DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
      DYN_SYSTEM_HOST: "127.0.0.1",
      DYN_SYSTEM_PORT: String(systemPort),
      DYN_LOG: "warn",
      ...options.env,
    },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let tail = "";
  const reading = child.stderr.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({
      write(chunk) {
        tail = (tail + chunk).slice(-4000);
      },
    }),
  ).catch(() => {});
  return {
    child,
    systemUrl: `http://127.0.0.1:${systemPort}`,
    stderrTail: () => tail,
    async kill() {
      try {
        child.kill("SIGKILL");
      } catch { /* exited */ }
      await child.status;
      await reading;
    },
  };
}

/** A reference worker's gauge or counter of its `generate` endpoint, from its /metrics. */
export async function referenceMetric(
  mocker: ReferenceMocker,
  name: "dynamo_component_inflight_requests" | "dynamo_component_requests_total",
): Promise<number> {
  const res = await fetch(`${mocker.systemUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
  const text = await res.text();
  const line = text.split("\n").find((l) =>
    l.startsWith(`${name}{`) && l.includes('dynamo_endpoint="generate"')
  );
  if (line === undefined) throw new Error(`${mocker.systemUrl}/metrics has no ${name}`);
  return Number(line.slice(line.lastIndexOf(" ") + 1));
}

/** A reference worker's instance id (lowercase hex), from the labels of its /metrics. */
export async function referenceWorkerId(mocker: ReferenceMocker): Promise<string> {
  const res = await fetch(`${mocker.systemUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
  const m = /dynamo_endpoint="generate"[^}]*worker_id="([0-9a-f]+)"/.exec(await res.text());
  if (!m) throw new Error(`${mocker.systemUrl}/metrics names no worker_id of generate`);
  return m[1]!;
}

/** Environment that keeps reference processes on loopback. */
export const LOOPBACK = {
  DYN_TCP_RPC_HOST: "127.0.0.1",
  DYN_EVENT_PLANE_HOST: "127.0.0.1",
  DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
  DYN_SYSTEM_HOST: "127.0.0.1",
  DYN_HTTP_HOST: "127.0.0.1",
  // REFERENCE_LOG=debug (and REFERENCE_LOG_TAIL=400000) shows what the reference processes did.
  DYN_LOG: Deno.env.get("REFERENCE_LOG") ?? "warn",
};

/** A reference process started by {@linkcode startReferenceProcess}. */
export interface ReferenceProcess {
  readonly child: Deno.ChildProcess;
  /** The tail of its stderr. */
  log(): string;
  /** SIGTERM, then SIGKILL after 10 s; waits for the exit. */
  stop(): Promise<void>;
}

/**
 * A reference process (`python -m MODULE ...args`) on loopback, its stderr's tail kept; `watch`
 * sees each piece of its stderr as it comes.
 */
export function startReferenceProcess(
  python: string,
  module: string,
  args: string[],
  servers: { ETCD_ENDPOINTS: string; NATS_SERVER: string } & Record<string, string>,
  watch?: (chunk: string) => void,
): ReferenceProcess {
  const child = new Deno.Command(python, {
    args: ["-m", module, ...args],
    env: { ...LOOPBACK, ...servers },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let tail = "";
  (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      tail = (tail + chunk).slice(-(Number(Deno.env.get("REFERENCE_LOG_TAIL")) || 4000));
      watch?.(chunk);
    }
  })().catch(() => {});
  return {
    child,
    log: () => tail,
    async stop() {
      await terminate(child);
    },
  };
}

/** A reference frontend started by {@linkcode startReferenceFrontend}. */
export interface ReferenceFrontend extends ReferenceProcess {
  /** Its HTTP port on loopback. */
  readonly port: number;
  /** `http://127.0.0.1:PORT` */
  readonly base: string;
}

/** The frontend's log line just before it binds its HTTP port (logged at info). */
const HTTP_STARTING = "Starting HTTP(S) service";
/** What it logs when another process holds that port, just before it exits. */
const PORT_TAKEN = /already in use/;

/**
 * Starts `python -m dynamo.frontend ...args --http-port PORT` on a free loopback port; resolves
 * once it holds that port. A port found free stays free only until someone binds it, and the
 * frontend takes seconds to start: when another process took the port first (the frontend
 * says "already in use" and exits), it starts again on a fresh one, up to three times. Holding
 * the port is told by its log (the line before the bind, with no bind failure after it) and a
 * connection to the port, not by the connection alone, which any process on the port answers.
 * `options.port` draws each attempt's port (a test's hook; {@linkcode freePort} by default).
 */
export async function startReferenceFrontend(
  python: string,
  args: string[],
  servers: { ETCD_ENDPOINTS: string; NATS_SERVER: string } & Record<string, string>,
  options: { deadlineMs?: number; port?: () => number } = {},
): Promise<ReferenceFrontend> {
  const { deadlineMs = 90_000, port: nextPort = freePort } = options;
  for (let attempt = 1;; attempt++) {
    const port = nextPort();
    let seen = "";
    const front = startReferenceProcess(
      python,
      "dynamo.frontend",
      [...args, "--http-port", String(port)],
      {
        ...servers,
        DYN_LOG: `${
          servers.DYN_LOG ?? LOOPBACK.DYN_LOG
        },dynamo_llm::http::service::service_v2=info`,
      },
      (chunk) => {
        if (seen.length < 65_536) seen += chunk;
      },
    );
    let exited = false;
    front.child.status.then(() => (exited = true));
    const started = await until(
      `the reference frontend to bind port ${port}`,
      deadlineMs,
      async () => {
        if (exited || PORT_TAKEN.test(seen)) return "gone";
        if (!seen.includes(HTTP_STARTING)) return undefined;
        try {
          (await Deno.connect({ hostname: "127.0.0.1", port })).close();
        } catch {
          return undefined;
        }
        // The bind fails within milliseconds of the line before it; give it time to say so.
        await new Promise((r) => setTimeout(r, 300));
        return exited || PORT_TAKEN.test(seen) ? "gone" : "bound";
      },
    ).catch(async (err) => {
      await front.stop();
      throw new Error(`${err.message}\nreference frontend log (tail):\n${front.log()}`);
    });
    if (started === "bound") return { ...front, port, base: `http://127.0.0.1:${port}` };
    await front.stop();
    if (attempt >= 3 || !PORT_TAKEN.test(seen)) {
      throw new Error(
        `the reference frontend exited before it served (attempt ${attempt}):\n${front.log()}`,
      );
    }
  }
}

/**
 * Polls `probe` every 250 ms until it returns a value; throws after `ms`, a probe still running
 * then included (a probe that hangs, such as a fetch to a port some other process answers,
 * must not keep a test waiting past its deadline).
 */
export async function until<T>(
  what: string,
  ms: number,
  probe: () => Promise<T | undefined>,
): Promise<T> {
  const deadline = Date.now() + ms;
  let last: unknown;
  for (;;) {
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error("the probe was still running at the deadline")),
          Math.max(0, deadline - Date.now()) + 1_000,
        );
      });
      const got = await Promise.race([probe(), late]);
      if (got !== undefined) return got;
    } catch (err) {
      last = err;
    } finally {
      clearTimeout(timer);
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${ms} ms waiting for ${what} (last error: ${last})`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

/** A runtime of ours on the test's etcd + NATS (its lease holds our workers' records). */
export function etcdRuntime(
  etcd: { url: string },
  nats: { url: string },
): Promise<DistributedRuntime> {
  return DistributedRuntime.connect({
    discovery: "etcd",
    requestPlane: "tcp",
    etcdEndpoints: etcd.url,
    natsServer: nats.url,
  });
}

/** The model names a frontend at `base` lists. */
export async function listedModels(base: string): Promise<string[]> {
  const list = await (await fetch(`${base}/v1/models`)).json();
  return (list.data as { id: string }[]).map((m) => m.id);
}

/** Waits until the frontend at `base` lists `model`. */
export function untilListed(base: string, model: string): Promise<true> {
  return until(
    `${model} in the reference frontend's /v1/models`,
    90_000,
    async () => (await listedModels(base)).includes(model) ? true : undefined,
  );
}
