// Starts real etcd and nats-server processes on free loopback ports for tests, and stops
// them (and their data folders) afterwards. Tests skip the real-backend cases with a
// clear message when the binaries are missing.

/** A running server process. */
export interface ServerProcess {
  /** Client URL, e.g. "http://127.0.0.1:40123" or "nats://127.0.0.1:40124". */
  readonly url: string;
  readonly port: number;
  /** Kills the process (SIGKILL) and waits for it. Its data stays, so it can restart. */
  kill(): Promise<void>;
  /** Starts it again on the same port with the same data. */
  restart(): Promise<void>;
  /** Kills it and removes its data. */
  stop(): Promise<void>;
}

/** Finds binaries on PATH (and sbin folders, where Debian puts nats-server). */
export function findBinary(name: string): string | undefined {
  const dirs = [
    ...(Deno.env.get("PATH") ?? "").split(":"),
    "/usr/sbin",
    "/usr/local/sbin",
    "/sbin",
  ];
  for (const d of dirs) {
    try {
      const p = `${d}/${name}`;
      if (Deno.statSync(p).isFile) return p;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** True when both etcd and nats-server are installed. */
export function haveServers(): boolean {
  return findBinary("etcd") !== undefined && findBinary("nats-server") !== undefined;
}

/** A free TCP port on 127.0.0.1. */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

async function waitForPort(
  port: number,
  what: string,
  child: Deno.ChildProcess,
  timeoutMs = 15_000,
) {
  const deadline = Date.now() + timeoutMs;
  let exited = false;
  child.status.then(() => (exited = true));
  while (Date.now() < deadline) {
    if (exited) throw new Error(`${what} exited before listening on port ${port}`);
    try {
      const c = await Deno.connect({ hostname: "127.0.0.1", port });
      c.close();
      return;
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  throw new Error(`${what} did not listen on port ${port} within ${timeoutMs} ms`);
}

function spawnServer(
  name: string,
  url: string,
  port: number,
  args: () => string[],
  dataDir: string,
  ready: (port: number, child: Deno.ChildProcess) => Promise<void>,
): Promise<ServerProcess> {
  const bin = findBinary(name);
  if (!bin) {
    throw new Error(`${name} is not installed (apt-get install -y etcd-server nats-server)`);
  }
  let child: Deno.ChildProcess | undefined;
  const start = async () => {
    child = new Deno.Command(bin, { args: args(), stdout: "null", stderr: "null", stdin: "null" })
      .spawn();
    await ready(port, child);
  };
  const kill = async () => {
    if (!child) return;
    try {
      child.kill("SIGKILL");
    } catch {
      // already exited
    }
    await child.status;
    child = undefined;
  };
  const server: ServerProcess = {
    url,
    port,
    kill,
    restart: start,
    async stop() {
      await kill();
      await Deno.remove(dataDir, { recursive: true }).catch(() => {});
    },
  };
  return start().then(() => server, async (err) => {
    await server.stop();
    throw err;
  });
}

/** Options of {@linkcode startEtcd}. */
export interface StartEtcdOptions {
  /** Extra command-line flags. */
  args?: string[];
}

/** Starts a single-member etcd on free loopback ports. */
export async function startEtcd(options: StartEtcdOptions = {}): Promise<ServerProcess> {
  const port = freePort();
  const peer = freePort();
  const dataDir = await Deno.makeTempDir({ prefix: "dynamo-etcd-" });
  return spawnServer(
    "etcd",
    `http://127.0.0.1:${port}`,
    port,
    () => [
      "--name",
      "test",
      "--data-dir",
      dataDir,
      "--listen-client-urls",
      `http://127.0.0.1:${port}`,
      "--advertise-client-urls",
      `http://127.0.0.1:${port}`,
      "--listen-peer-urls",
      `http://127.0.0.1:${peer}`,
      "--initial-advertise-peer-urls",
      `http://127.0.0.1:${peer}`,
      "--initial-cluster",
      `test=http://127.0.0.1:${peer}`,
      ...(options.args ?? []),
    ],
    dataDir,
    async (p, child) => {
      await waitForPort(p, "etcd", child);
      // Listening is not serving: wait until etcd answers a read.
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline) {
        try {
          const r = await fetch(`http://127.0.0.1:${p}/health`);
          const body = await r.json() as { health?: string };
          if (body.health === "true") return;
        } catch {
          // not yet
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error("etcd did not become healthy within 15 s");
    },
  );
}

/** Options of {@linkcode startNats}. */
export interface StartNatsOptions {
  /** Enable JetStream (default true). */
  jetstream?: boolean;
  /** Extra command-line flags. */
  args?: string[];
}

/** Starts nats-server on a free loopback port. */
export async function startNats(options: StartNatsOptions = {}): Promise<ServerProcess> {
  const port = freePort();
  const dataDir = await Deno.makeTempDir({ prefix: "dynamo-nats-" });
  return spawnServer(
    "nats-server",
    `nats://127.0.0.1:${port}`,
    port,
    () => [
      "-a",
      "127.0.0.1",
      "-p",
      String(port),
      ...(options.jetstream === false ? [] : ["-js", "-sd", dataDir]),
      ...(options.args ?? []),
    ],
    dataDir,
    (p, child) => waitForPort(p, "nats-server", child),
  );
}

/** Both servers, for tests of the etcd + NATS backends. */
export interface Servers {
  etcd: ServerProcess;
  nats: ServerProcess;
  /** The environment that points a worker process (`DistributedRuntime.fromEnv`) at them. */
  env: { ETCD_ENDPOINTS: string; NATS_SERVER: string };
  /** `DistributedRuntime.connect` options for them. */
  runtimeOptions: {
    discovery: "etcd";
    requestPlane: "nats";
    etcdEndpoints: string;
    natsServer: string;
  };
  stop(): Promise<void>;
}

/** Starts etcd and NATS side by side. */
export async function startServers(): Promise<Servers> {
  const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  return {
    etcd,
    nats,
    env: { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
    runtimeOptions: {
      discovery: "etcd",
      requestPlane: "nats",
      etcdEndpoints: etcd.url,
      natsServer: nats.url,
    },
    stop: async () => void (await Promise.all([etcd.stop(), nats.stop()])),
  };
}
