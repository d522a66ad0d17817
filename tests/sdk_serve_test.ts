// `dynamo serve` of the hello-world pipeline (Frontend -> Middle x2 -> Backend) as real
// processes, on the local default (a hub the parent starts) and on etcd + NATS: requests
// flow through all three services, both Middle replicas serve, a killed replica is
// restarted, and SIGINT leaves no process behind.

import assert from "node:assert/strict";
import { DistributedRuntime, type DistributedRuntimeOptions } from "../mod.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";
import { spawnDeno } from "./_helpers/process.ts";
import { stopChild } from "./_helpers/frontend.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const GRAPH = "examples/hello_world/graph.ts:Frontend";
const CONFIG = "examples/hello_world/config.yaml";

/** `dynamo serve` as a child process whose output lines are collected. */
class Serve {
  readonly child: Deno.ChildProcess;
  readonly lines: string[] = [];
  readonly #drained: Promise<unknown>;
  #wake = new Set<() => void>();

  constructor(args: string[], env: Record<string, string>) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "cli/main.ts", "serve", ...args],
      cwd: ROOT,
      env: { DYN_LOG: "info", ...env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#drained = Promise.all([this.#drain(this.child.stdout), this.#drain(this.child.stderr)]);
  }

  async #drain(stream: ReadableStream<Uint8Array>): Promise<void> {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      this.lines.push(...lines);
      for (const w of [...this.#wake]) w();
    }
    if (rest) this.lines.push(rest);
  }

  /** The first line (from index `from` on) matching `re`, waiting up to `ms`. */
  async waitFor(re: RegExp, ms: number, from = 0): Promise<RegExpMatchArray> {
    const deadline = Date.now() + ms;
    for (;;) {
      for (let i = from; i < this.lines.length; i++) {
        const m = this.lines[i]!.match(re);
        if (m) return m;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new Error(
          `no line matching ${re} within ${ms} ms; last lines:\n${
            this.lines.slice(-30).join("\n")
          }`,
        );
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(left, 200));
        function done() {
          clearTimeout(t);
          resolve();
        }
        this.#wake.add(done);
      }).finally(() => this.#wake.clear());
    }
  }

  /** pid and instance id of each ready replica line seen so far, by label ("Middle.1"). */
  replicas(): Map<string, { pid: number; instance: string }> {
    const out = new Map<string, { pid: number; instance: string }>();
    for (const l of this.lines) {
      const m = l.match(/^\[serve\] (\w+\.\d+) ready instance=(\w+) pid=(\d+)/);
      if (m) out.set(m[1]!, { instance: m[2]!, pid: Number(m[3]) });
    }
    return out;
  }

  async stop(signal: Deno.Signal, ms: number): Promise<Deno.CommandStatus> {
    this.child.kill(signal);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), ms)));
    const status = await Promise.race([this.child.status, late]);
    clearTimeout(timer);
    if (status === "late") {
      this.kill();
      throw new Error(`dynamo serve did not exit within ${ms} ms of ${signal}`);
    }
    await this.#drained;
    return status;
  }

  kill(): void {
    try {
      this.child.kill("SIGKILL");
    } catch { /* exited */ }
  }
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) [ZX]/.test(stat);
  } catch {
    return false;
  }
}

async function ask(runtime: DistributedRuntime, text: string): Promise<string[]> {
  const client = await runtime.namespace("hello_world").component("Frontend").endpoint("generate")
    .client();
  await client.waitForInstances({ timeoutMs: 10_000 });
  const items: string[] = [];
  for await (const item of await client.generate<string>({ text })) items.push(item);
  return items;
}

/** Which Middle instances served `n` requests. */
async function middles(runtime: DistributedRuntime, n: number): Promise<Set<string>> {
  const seen = new Set<string>();
  for (let i = 0; i < n; i++) {
    const items = await ask(runtime, `req ${i}`);
    assert.deepEqual(
      items.map((s) => s.replace(/Middle\(\w+\)/, "Middle(x)")),
      [
        "Frontend: Middle(x): Backend: req",
        `Frontend: Middle(x): Backend: ${i}-mid-back`,
      ],
    );
    for (const s of items) seen.add(s.match(/Middle\((\w+)\)/)![1]!);
  }
  return seen;
}

async function exercise(
  serve: Serve,
  connect: () => Promise<DistributedRuntime>,
): Promise<void> {
  await serve.waitFor(/^\[serve\] ready: 3 services, 4 processes/, 90_000);
  const before = serve.replicas();
  assert.deepEqual([...before.keys()].sort(), ["Backend.0", "Frontend.0", "Middle.0", "Middle.1"]);
  const runtime = await connect();
  try {
    // Round robin at Frontend's Middle client: both replicas serve within a few requests.
    const seen = await middles(runtime, 6);
    assert.deepEqual(
      [...seen].sort(),
      [before.get("Middle.0")!.instance, before.get("Middle.1")!.instance].sort(),
      "both Middle replicas should serve traffic",
    );

    // Kill one replica: it is restarted under a new instance id and serves again.
    const victim = before.get("Middle.0")!;
    const mark = serve.lines.length;
    Deno.kill(victim.pid, "SIGKILL");
    await serve.waitFor(
      /^\[serve\] Middle\.0 exited signal=SIGKILL; restarting in \d+ ms/,
      10_000,
      mark,
    );
    const again = await serve.waitFor(
      /^\[serve\] Middle\.0 ready instance=(\w+) pid=(\d+)/,
      60_000,
      mark,
    );
    const fresh = again[1]!;
    assert.notEqual(fresh, victim.instance);
    let served = false;
    for (let i = 0; i < 20 && !served; i++) served = (await middles(runtime, 1)).has(fresh);
    assert.ok(served, "the restarted Middle replica should serve traffic");
  } finally {
    await runtime.shutdown();
  }

  // Ctrl-C: every replica stops gracefully and no process is left.
  const pids = [...serve.replicas().values()].map((r) => r.pid);
  const status = await serve.stop("SIGINT", 60_000);
  assert.equal(status.code, 0, serve.lines.slice(-30).join("\n"));
  for (const label of ["Frontend.0", "Middle.0", "Middle.1", "Backend.0"]) {
    assert.ok(
      serve.lines.some((l) => l.startsWith(`[serve] ${label} exited code=0`)),
      `${label} should exit 0 after a graceful stop:\n${serve.lines.slice(-30).join("\n")}`,
    );
  }
  assert.ok(serve.lines.some((l) => /\[Middle\.1\].*service stopped/.test(l)));
  for (const pid of [...pids, serve.child.pid]) assert.ok(!alive(pid), `pid ${pid} still runs`);
}

Deno.test({
  name: "dynamo serve runs the hello-world pipeline on the local default (a hub it starts)",
  sanitizeResources: false,
  async fn() {
    const serve = new Serve([GRAPH, "-f", CONFIG], {
      ETCD_ENDPOINTS: "",
      NATS_SERVER: "",
      DYN_HUB: "",
    });
    try {
      const hub = await serve.waitFor(
        /clients join with DYN_HUB=(\S+) DYN_HUB_TOKEN=(\S+)/,
        60_000,
      );
      await exercise(
        serve,
        () => DistributedRuntime.fromEnv({ env: { DYN_HUB: hub[1]!, DYN_HUB_TOKEN: hub[2]! } }),
      );
    } finally {
      serve.kill();
      await serve.child.status;
    }
  },
});

Deno.test({
  name: "dynamo serve runs the hello-world pipeline on etcd + NATS",
  ignore: !haveServers(),
  sanitizeResources: false,
  async fn() {
    const servers = await startServers();
    const serve = new Serve([GRAPH, "-f", CONFIG], { ...servers.env, DYN_LEASE_TTL: "3" });
    try {
      await exercise(
        serve,
        () =>
          DistributedRuntime.connect(
            servers.runtimeOptions as DistributedRuntimeOptions,
          ),
      );
    } finally {
      serve.kill();
      await serve.child.status;
      await servers.stop();
    }
  },
});

Deno.test({
  name:
    "dynamo serve --service-name (one service, as a deployed pod runs): /live, then /health once registered, and /metrics on DYN_SYSTEM_PORT",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    let url: string | undefined;
    const child = spawnDeno(
      new URL("../cli/main.ts", import.meta.url).pathname,
      {
        ...servers.env,
        DYN_LOG: "info",
        DYN_SYSTEM_PORT: "0",
        DYN_SYSTEM_HOST: "127.0.0.1",
      },
      ["serve", "examples/hello_world/graph.ts:Frontend", "--service-name", "Backend"],
      {
        onStderrLine: (line) => {
          url ??= /system server listening url=(\S+)/.exec(line)?.[1];
        },
      },
    );
    try {
      const deadline = Date.now() + 60_000;
      while (url === undefined) {
        assert.ok(Date.now() < deadline, "no 'system server listening' line within 60 s");
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal((await fetch(`${url}/live`)).status, 200);
      let health = await fetch(`${url}/health`);
      while (health.status !== 200) {
        await health.body?.cancel();
        assert.equal(health.status, 503);
        assert.ok(Date.now() < deadline, "/health did not turn 200 within 60 s");
        await new Promise((r) => setTimeout(r, 200));
        health = await fetch(`${url}/health`);
      }
      assert.deepEqual(await health.json(), { status: "ready" });
      const metrics = await (await fetch(`${url}/metrics`)).text();
      assert.match(metrics, /dynamo_component_requests_total/);
    } finally {
      await stopChild(child);
      await servers.stop();
    }
  },
});
