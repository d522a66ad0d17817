// deno-lint-ignore-file no-console -- a program that prints
// Captures what the reference system (ai-dynamo 1.6.1) writes into discovery, as golden
// vectors for interoperating with it: starts etcd and nats-server on free loopback ports, the
// reference frontend and one reference mocker worker (scripts/setup_reference.sh installs them),
// waits until the frontend serves the model and answers one chat, then writes every etcd key and
// value, and the chat answer, to tests/golden/reference_1.6.1/discovery.json.
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
} finally {
  for (const c of children) {
    try {
      c.kill("SIGTERM");
    } catch { /* gone */ }
  }
  await Promise.all(children.map((c) => c.status));
  await Promise.all([etcd.stop(), nats.stop()]);
}
