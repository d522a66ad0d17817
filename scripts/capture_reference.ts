// deno-lint-ignore-file no-console -- a program that prints
// Captures what the reference system (ai-dynamo 1.6.1) writes into discovery, as golden
// vectors for interoperating with it: starts etcd and nats-server on free loopback ports, the
// reference frontend and one reference mocker worker (scripts/setup_reference.sh installs them),
// waits until the frontend serves the model and answers one chat, then writes every etcd key and
// value, and the chat answer, to tests/golden/reference_1.6.1/discovery.json.
//
// With tcpflow installed (apt), it also records every loopback TCP flow between the reference's
// processes (not etcd, NATS or HTTP) while it sends one chat streamed and one not, and writes
// them, labelled by the addresses the discovery records advertise, to wire.json: the request
// plane's request and response bytes and the event plane's ZMQ frames, as they crossed.
//
//   ./deno run -A scripts/capture_reference.ts [MODEL_FOLDER]
//
// Every address the reference advertises is pinned to 127.0.0.1 (DYN_TCP_RPC_HOST,
// DYN_EVENT_PLANE_HOST, DYN_TCP_RESPONSE_STREAM_HOST, DYN_SYSTEM_HOST): left alone, it
// advertises the machine's first network interface.

import { Etcd3 } from "etcd3";
import { builtinTestModel } from "../mod.ts";
import { freePort, startEtcd, startNats } from "../tests/_helpers/servers.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const OUT = `${ROOT}tests/golden/reference_1.6.1/discovery.json`;
const WIRE_OUT = `${ROOT}tests/golden/reference_1.6.1/wire.json`;

const setup = await new Deno.Command("bash", {
  args: [`${ROOT}scripts/setup_reference.sh`],
  stderr: "inherit",
}).output();
if (!setup.success) {
  console.error("scripts/setup_reference.sh failed: the reference could not be installed");
  Deno.exit(1);
}
const python = new TextDecoder().decode(setup.stdout).trim();
const modelPath = Deno.args[0] ?? await builtinTestModel();

const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
const httpPort = freePort();
const env = {
  ETCD_ENDPOINTS: etcd.url,
  NATS_SERVER: nats.url,
  DYN_TCP_RPC_HOST: "127.0.0.1",
  DYN_EVENT_PLANE_HOST: "127.0.0.1",
  DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
  DYN_SYSTEM_HOST: "127.0.0.1",
  DYN_LOG: "warn",
};
const flowDir = await Deno.makeTempDir({ prefix: "dynamo-wire-" });
const tcpflow = startTcpflow(flowDir, [etcd.url, nats.url, `:${httpPort}`]);
const spawn = (args: string[]) =>
  new Deno.Command(python, { args, env, stdout: "null", stderr: "piped", stdin: "null" }).spawn();
const children = [
  spawn(["-m", "dynamo.frontend", "--http-port", String(httpPort)]),
  spawn(["-m", "dynamo.mocker", "--model-path", modelPath, "--model-name", "Qwen3-0.6B"]),
];
try {
  const base = `http://127.0.0.1:${httpPort}`;
  const deadline = Date.now() + 120_000;
  let chat: unknown;
  for (;;) {
    if (Date.now() > deadline) throw new Error("the reference did not serve the model in 120 s");
    try {
      const r = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "Qwen3-0.6B",
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 5,
        }),
      });
      if (r.ok) {
        chat = await r.json();
        break;
      }
      await r.body?.cancel();
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 500));
  }
  // One more chat, streamed, for the wire capture.
  const streamed = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "Qwen3-0.6B",
      messages: [{ role: "user", content: "hello there" }],
      max_tokens: 3,
      stream: true,
    }),
  });
  const sse = await streamed.text();
  const client = new Etcd3({ hosts: etcd.url });
  const keys = await client.getAll().strings();
  client.close();
  const sorted = Object.fromEntries(
    Object.entries(keys).sort(([a], [b]) => a.localeCompare(b)).map((
      [k, v],
    ) => [k, JSON.parse(v)]),
  );
  await Deno.mkdir(new URL(".", `file://${OUT}`), { recursive: true });
  await Deno.writeTextFile(
    OUT,
    JSON.stringify(
      {
        captured: new Date().toISOString(),
        reference: "ai-dynamo 1.6.1 (PyPI): python -m dynamo.frontend + python -m dynamo.mocker",
        etcd: sorted,
        chat,
      },
      null,
      2,
    ) + "\n",
  );
  console.log(`wrote ${OUT}: ${Object.keys(sorted).length} discovery keys`);
  if (tcpflow) {
    await new Promise((r) => setTimeout(r, 1000)); // let the last segments reach tcpflow
    tcpflow.kill("SIGINT");
    await tcpflow.status;
    const flows = await readFlows(flowDir, advertised(sorted));
    await Deno.writeTextFile(
      WIRE_OUT,
      JSON.stringify(
        {
          captured: new Date().toISOString(),
          reference: "ai-dynamo 1.6.1: tcpflow on loopback during two chats (one streamed)",
          note: "bytes in hex, each flow one direction of one TCP connection, in order",
          sse,
          flows,
        },
        null,
        1,
      ) + "\n",
    );
    console.log(`wrote ${WIRE_OUT}: ${flows.length} flows`);
  } else console.log("tcpflow not installed: no wire capture (apt-get install tcpflow)");
} finally {
  for (const c of children) {
    try {
      c.kill("SIGTERM");
    } catch { /* gone */ }
  }
  await Promise.all(children.map((c) => c.status));
  await Promise.all([etcd.stop(), nats.stop()]);
  try {
    tcpflow?.kill("SIGKILL");
  } catch { /* already stopped */ }
  await Deno.remove(flowDir, { recursive: true });
}

/** tcpflow on loopback, every TCP flow but those of the excluded ports, into `dir`. */
function startTcpflow(dir: string, exclude: string[]): Deno.ChildProcess | undefined {
  const ports = exclude.map((u) => /:(\d+)\/?$/.exec(u)?.[1]).filter((p) => p !== undefined);
  const filter = `tcp and not (${ports.map((p) => `port ${p}`).join(" or ")})`;
  try {
    return new Deno.Command("tcpflow", {
      args: ["-i", "lo", "-o", dir, "-S", "enable_report=NO", filter],
      stdout: "null",
      stderr: "null",
    }).spawn();
  } catch {
    return undefined;
  }
}

/** Port -> what the discovery records say listens there. */
function advertised(records: Record<string, unknown>): Map<number, string> {
  const out = new Map<number, string>();
  for (const [key, value] of Object.entries(records)) {
    const text = JSON.stringify(value);
    for (const m of text.matchAll(/127\.0\.0\.1:(\d+)/g)) {
      const kind = key.split("/").slice(0, 2).join("/");
      const topic = /\/topic\/([^/]+)/.exec(key)?.[1];
      const what = topic ? `${kind} ${topic}` : `${kind} ${key.split("/").at(-2)}`;
      // One process serves every endpoint on one port: name them all.
      const port = Number(m[1]);
      const before = out.get(port);
      if (!before?.split(", ").includes(what)) out.set(port, before ? `${before}, ${what}` : what);
    }
  }
  return out;
}

/** The flows tcpflow wrote: `127.000.000.001.PORT-127.000.000.001.PORT` files. */
async function readFlows(dir: string, known: Map<number, string>) {
  const flows = [];
  for await (const e of Deno.readDir(dir)) {
    const m = /^127\.000\.000\.001\.(\d+)-127\.000\.000\.001\.(\d+)/.exec(e.name);
    if (!m || !e.isFile) continue;
    const [from, to] = [Number(m[1]), Number(m[2])];
    const bytes = await Deno.readFile(`${dir}/${e.name}`);
    flows.push({
      from,
      to,
      from_is: known.get(from) ?? null,
      to_is: known.get(to) ?? null,
      length: bytes.length,
      hex: [...bytes.subarray(0, 65536)].map((b) => b.toString(16).padStart(2, "0")).join(""),
    });
  }
  return flows.sort((a, b) => a.to - b.to || a.from - b.from);
}
