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

/**
 * Installs etcd and nats-server with `scripts/install_servers.sh` (apt) unless both are
 * there: for the benchmarks, which a user runs on a fresh machine (the test command installs
 * them before the tests).
 * @throws Error when they cannot be installed
 */
export async function installServersIfMissing(log: (msg: string) => void): Promise<void> {
  if (haveServers()) return;
  log("etcd or nats-server is missing: installing them with apt (first run only)");
  const script = new URL("../../scripts/install_servers.sh", import.meta.url).pathname;
  const { code } = await new Deno.Command("bash", {
    args: [script],
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (code !== 0 || !haveServers()) {
    throw new Error(
      "etcd and nats-server are needed and could not be installed (apt-get install -y etcd-server nats-server)",
    );
  }
}

/**
 * The lowest port the kernel hands out to a bind to port 0 or an outgoing connection (Linux's
 * ephemeral range), or undefined where that cannot be read.
 */
function ephemeralLow(): number | undefined {
  try {
    const low = Number(
      Deno.readTextFileSync("/proc/sys/net/ipv4/ip_local_port_range").split(/\s+/)[0],
    );
    return Number.isInteger(low) && low > 11_000 ? low : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A free TCP port on 127.0.0.1, for a server a test starts with an explicit port. Drawn below
 * the kernel's ephemeral range where it can be read: a port from that range (what a bind to
 * port 0 gives) could be taken, between this check and the server's bind, by any process's
 * bind to port 0 or outgoing connection; a reference mocker took a reference frontend's port
 * that way in a CI run, and a probe of the frontend then reached the mocker.
 */
export function freePort(): number {
  const low = ephemeralLow();
  const drawn = low === undefined ? undefined : freePortIn(10_000, low, 50);
  if (drawn !== undefined) return drawn;
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/**
 * A port in [low, high) that nothing listens on and no test process has handed out (see
 * {@linkcode reservePort}), marked as handed out; undefined after `tries` draws.
 */
export function freePortIn(low: number, high: number, tries: number): number | undefined {
  for (let i = 0; i < tries; i++) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (isFree(port) && reservePort(port)) return port;
  }
  return undefined;
}

/** Whether nothing listens on `port` of 127.0.0.1 now. */
function isFree(port: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port }).close();
    return true;
  } catch {
    return false;
  }
}

/** Where test processes mark the ports they handed out (one empty file per port). */
const RESERVED = `${Deno.env.get("TMPDIR") ?? "/tmp"}/dynamo-test-ports`;
/** Whether this process has made {@linkcode RESERVED} (once, not per port drawn). */
let reservedFolderMade = false;
/** How long a mark holds: longer than any test keeps a server it started. */
const RESERVATION_MS = 15 * 60_000;

/**
 * Marks `port` as handed out, across the test processes running at once: false when another
 * process (or this one) marked it within the last 15 minutes. A port found free stays free
 * only until some process binds it, and tests run in parallel, each drawing ports at random:
 * without the mark two of them could hand out the same one, and the server started second
 * fails to bind, or a client reaches the wrong server.
 *
 * @param port a port just found free
 * @param now the clock (a test's hook)
 * @returns whether this call took the mark
 */
export function reservePort(port: number, now = Date.now()): boolean {
  const path = `${RESERVED}/${port}`;
  try {
    if (!reservedFolderMade) {
      Deno.mkdirSync(RESERVED, { recursive: true });
      reservedFolderMade = true;
    }
    Deno.writeTextFileSync(path, "", { createNew: true });
    return true;
  } catch (err) {
    if (!(err instanceof Deno.errors.AlreadyExists)) return true; // no shared folder: as before
  }
  try {
    const marked = Deno.statSync(path).mtime?.getTime() ?? now;
    if (now - marked < RESERVATION_MS) return false;
    // A stale mark (a run long gone): take it over.
    Deno.utimeSync(path, new Date(now), new Date(now));
    return true;
  } catch {
    return false;
  }
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
  /**
   * Serve clients over TLS with this key pair (`--cert-file`/`--key-file`): the client URL
   * becomes `https://localhost:PORT` (the certificate must name localhost). `caFile` is
   * what the readiness check trusts.
   */
  tls?: {
    certFile: string;
    keyFile: string;
    caFile: string;
    /** Require client certificates signed by `caFile` (`--client-cert-auth`). */
    verifyClients?: boolean;
  };
  /**
   * Turn on password authentication once the server is up: user `root` (role `root`)
   * with this password, then `auth enable` (what `etcdctl user add root` and
   * `etcdctl auth enable` do, through etcd's JSON gateway).
   */
  rootPassword?: string;
}

/**
 * Runs `start` again (fresh ports, fresh data directory) when the server exits before it
 * listens or listens without ever answering healthy: a port found free can be taken by another
 * process before the server binds it, and on a loaded machine a server can stall in start-up
 * (many tests and benches start servers at once on this machine).
 */
async function withFreshPorts(start: () => Promise<ServerProcess>): Promise<ServerProcess> {
  for (let attempt = 1;; attempt++) {
    try {
      return await start();
    } catch (err) {
      if (attempt >= 3 || !/exited before listening|did not become healthy/.test(String(err))) {
        throw err;
      }
    }
  }
}

/** Starts a single-member etcd on free loopback ports (fresh ones if those were taken). */
export function startEtcd(options: StartEtcdOptions = {}): Promise<ServerProcess> {
  return withFreshPorts(() => startEtcdOnce(options));
}

async function startEtcdOnce(options: StartEtcdOptions): Promise<ServerProcess> {
  const port = freePort();
  const peer = freePort();
  const dataDir = await Deno.makeTempDir({ prefix: "dynamo-etcd-" });
  const scheme = options.tls ? "https" : "http";
  const tlsArgs = options.tls
    ? [
      "--cert-file",
      options.tls.certFile,
      "--key-file",
      options.tls.keyFile,
      ...(options.tls.verifyClients
        ? ["--client-cert-auth", "--trusted-ca-file", options.tls.caFile]
        : []),
    ]
    : [];
  // What the readiness check and auth setup present (the server's own pair doubles as a
  // client certificate: it is signed by the same CA and allows client authentication).
  const tlsClient: TlsClient | undefined = options.tls
    ? {
      caCerts: [await Deno.readTextFile(options.tls.caFile)],
      ...(options.tls.verifyClients
        ? {
          cert: await Deno.readTextFile(options.tls.certFile),
          key: await Deno.readTextFile(options.tls.keyFile),
        }
        : {}),
    }
    : undefined;
  let authEnabled = false;
  return spawnServer(
    "etcd",
    // Over TLS the client URL names the host: grpc-js under Deno cannot verify an IP address.
    options.tls ? `https://localhost:${port}` : `http://127.0.0.1:${port}`,
    port,
    () => [
      "--name",
      "test",
      "--data-dir",
      dataDir,
      "--listen-client-urls",
      `${scheme}://127.0.0.1:${port}`,
      "--advertise-client-urls",
      `${scheme}://127.0.0.1:${port}`,
      "--listen-peer-urls",
      `http://127.0.0.1:${peer}`,
      "--initial-advertise-peer-urls",
      `http://127.0.0.1:${peer}`,
      "--initial-cluster",
      `test=http://127.0.0.1:${peer}`,
      ...tlsArgs,
      ...(options.args ?? []),
    ],
    dataDir,
    async (p, child) => {
      await waitForPort(p, "etcd", child);
      // Listening is not serving: wait until etcd answers a read.
      const deadline = Date.now() + 15_000;
      let healthy = false;
      let last = "no answer";
      while (Date.now() < deadline && !healthy) {
        try {
          last = await httpRequest(p, "GET", "/health", undefined, tlsClient);
          healthy = (JSON.parse(last) as { health?: string }).health === "true";
        } catch (err) {
          last = String(err); // not yet
        }
        if (!healthy) await new Promise((r) => setTimeout(r, 50));
      }
      if (!healthy) {
        throw new Error(`etcd did not become healthy within 15 s (last: ${last.slice(0, 200)})`);
      }
      if (options.rootPassword !== undefined && !authEnabled) {
        await enableEtcdAuth(p, options.rootPassword, tlsClient);
        authEnabled = true;
      }
    },
  );
}

/** One HTTP/1.1 request to 127.0.0.1 (over TLS when `tls` is given); the body back. */
/** How the helper itself talks TLS to a server it started. */
interface TlsClient {
  caCerts: string[];
  cert?: string;
  key?: string;
}

async function httpRequest(
  port: number,
  method: string,
  path: string,
  body: string | undefined,
  tls: TlsClient | undefined,
): Promise<string> {
  if (!tls) {
    const r = await fetch(`http://127.0.0.1:${port}${path}`, { method, body });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status}: ${text}`);
    return text;
  }
  // fetch cannot be told to trust a CA without --unstable flags: speak HTTP/1.1 by hand.
  const conn = await Deno.connectTls({ hostname: "127.0.0.1", port, ...tls });
  try {
    const payload = body ?? "";
    await conn.write(
      new TextEncoder().encode(
        `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nConnection: close\r\n` +
          `Content-Type: application/json\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`,
      ),
    );
    const raw = await new Response(conn.readable).text();
    const [head = "", rest = ""] = raw.split("\r\n\r\n", 2);
    if (!/^HTTP\/1\.1 2\d\d/.test(head)) throw new Error(`${method} ${path}: ${head}`);
    // Chunked or not, the JSON object is what lies between the outer braces.
    return rest.slice(rest.indexOf("{"), rest.lastIndexOf("}") + 1);
  } finally {
    try {
      conn.close();
    } catch {
      // closed by the readable's end
    }
  }
}

async function enableEtcdAuth(
  port: number,
  rootPassword: string,
  tls: TlsClient | undefined,
): Promise<void> {
  const call = (path: string, body: unknown) =>
    httpRequest(port, "POST", `/v3/auth/${path}`, JSON.stringify(body), tls);
  await call("role/add", { name: "root" });
  await call("user/add", { name: "root", password: rootPassword });
  await call("user/grant", { user: "root", role: "root" });
  await call("enable", {});
}

/** Options of {@linkcode startNats}. */
export interface StartNatsOptions {
  /** Enable JetStream (default true). */
  jetstream?: boolean;
  /** Extra command-line flags. */
  args?: string[];
  /** Require this user and password (`--user`/`--pass`). */
  user?: { user: string; pass: string };
  /** Require this token (`--auth`). */
  token?: string;
  /**
   * Require TLS with this key pair (`--tls --tlscert --tlskey`); with `verifyClientsCa`,
   * also a client certificate signed by that CA (`--tlsverify --tlscacert`).
   */
  tls?: { certFile: string; keyFile: string; verifyClientsCa?: string };
}

/** Starts nats-server on a free loopback port (a fresh one if that was taken). */
export function startNats(options: StartNatsOptions = {}): Promise<ServerProcess> {
  return withFreshPorts(() => startNatsOnce(options));
}

async function startNatsOnce(options: StartNatsOptions): Promise<ServerProcess> {
  const port = freePort();
  const dataDir = await Deno.makeTempDir({ prefix: "dynamo-nats-" });
  const authArgs = [
    ...(options.user ? ["--user", options.user.user, "--pass", options.user.pass] : []),
    ...(options.token !== undefined ? ["--auth", options.token] : []),
    ...(options.tls
      ? ["--tls", "--tlscert", options.tls.certFile, "--tlskey", options.tls.keyFile]
      : []),
    ...(options.tls?.verifyClientsCa
      ? ["--tlsverify", "--tlscacert", options.tls.verifyClientsCa]
      : []),
  ];
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
      ...authArgs,
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
  /**
   * The environment that points a worker process (`DistributedRuntime.fromEnv`) at them,
   * with the request plane of {@link testRequestPlane}.
   */
  env: { ETCD_ENDPOINTS: string; NATS_SERVER: string; DYN_REQUEST_PLANE: "tcp" | "nats" };
  /**
   * `DistributedRuntime.connect` options for them: the request plane of
   * {@link testRequestPlane}, as `DistributedRuntime.fromEnv` picks with `env` (events and
   * objects on NATS).
   */
  runtimeOptions: {
    discovery: "etcd";
    requestPlane: "tcp" | "nats";
    etcdEndpoints: string;
    natsServer: string;
  };
  stop(): Promise<void>;
}

/**
 * The request plane tests on etcd + NATS run on: `DYN_REQUEST_PLANE` of the test process
 * (`tcp`, the default, or `nats`), so `DYN_REQUEST_PLANE=nats deno task test:chaos` runs the
 * chaos suite on the NATS plane.
 */
export function testRequestPlane(): "tcp" | "nats" {
  const chosen = Deno.env.get("DYN_REQUEST_PLANE")?.trim() || "tcp";
  if (chosen !== "tcp" && chosen !== "nats") {
    throw new Error(`DYN_REQUEST_PLANE must be "tcp" or "nats", got ${JSON.stringify(chosen)}`);
  }
  return chosen;
}

/** Starts etcd and NATS side by side. */
export async function startServers(): Promise<Servers> {
  const requestPlane = testRequestPlane();
  const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
  return {
    etcd,
    nats,
    env: { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url, DYN_REQUEST_PLANE: requestPlane },
    runtimeOptions: {
      discovery: "etcd",
      requestPlane,
      etcdEndpoints: etcd.url,
      natsServer: nats.url,
    },
    stop: async () => void (await Promise.all([etcd.stop(), nats.stop()])),
  };
}
