// deno-lint-ignore-file no-console -- a program that prints
// Captures the KV events of a reference mocker worker (ai-dynamo 1.6.1) that offloads to host
// memory (`--num-host-blocks`, its model of vLLM's native G2 offload), as golden vectors for
// reading the `storage_tier` of each event: starts etcd and nats-server on free loopback ports and
// one reference mocker with 8 GPU blocks and 32 host blocks, follows its kv-events ZeroMQ channel,
// sends it four prompts of 260 tokens (4 blocks of 64 each; the four do not fit its GPU) and the
// first again, and writes every message as it came to
// tests/golden/reference_1.6.1/kv_events_host_tier.json.
//
//   ./deno run -A scripts/capture_reference_kv_tiers.ts

import { Etcd3 } from "etcd3";
import { ReferenceClient } from "../runtime/reference/client.ts";
import { parseReferenceInstance } from "../runtime/reference/instances.ts";
import { referenceTokensRequest } from "../runtime/reference/request.ts";
import { ZmqSubscriber } from "../runtime/reference/zmq_sub.ts";
import { referencePython, startReferenceMocker } from "../tests/_helpers/reference.ts";
import { startEtcd, startNats } from "../tests/_helpers/servers.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const OUT = `${ROOT}tests/golden/reference_1.6.1/kv_events_host_tier.json`;
const ARGS = ["--num-gpu-blocks-override", "8", "--num-host-blocks", "32"];
/** Prompt p: tokens 1 + 1000p .. 260 + 1000p. */
const PROMPTS = [0, 1, 2, 3, 0];
const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

const python = await referencePython("capture_reference_kv_tiers");
if (!python) Deno.exit(1);
const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
const mocker = await startReferenceMocker(python, { etcd: etcd.url, nats: nats.url }, {
  modelName: "Qwen3-0.6B",
  args: ARGS,
});
const kv = new Etcd3({ hosts: etcd.url });
const client = ReferenceClient.create();
const messages: string[][] = [];
let sub: ZmqSubscriber | undefined;
try {
  let all: Record<string, string> = {};
  const deadline = Date.now() + 120_000;
  const has = (part: string) => Object.keys(all).some((k) => k.includes(part));
  while (!has("/topic/kv-events/") || !has("v1/instances/dynamo/backend/generate/")) {
    if (Date.now() > deadline) {
      throw new Error(`the mocker did not register in 120 s: ${mocker.stderrTail()}`);
    }
    await new Promise((r) => setTimeout(r, 500));
    all = await kv.getAll().prefix("v1/").strings();
  }
  const channel = JSON.parse(Object.entries(all).find(([k]) => k.includes("/topic/kv-events/"))![1])
    .transport.config.endpoint as string;
  sub = await ZmqSubscriber.connect(channel);
  const following = (async () => {
    for await (const parts of sub!) messages.push(parts.map(hex));
  })().catch(() => {});
  await new Promise((r) => setTimeout(r, 1000));
  const key = Object.keys(all).find((k) => k.startsWith("v1/instances/dynamo/backend/generate/"))!;
  const generate = parseReferenceInstance(key, all[key]!);
  for (const p of PROMPTS) {
    const tokenIds = Array.from({ length: 260 }, (_, i) => 1 + p * 1000 + i);
    const request = referenceTokensRequest({
      model: "Qwen3-0.6B",
      tokenIds,
      maxTokens: 2,
      ignoreEos: true,
    });
    for await (const _ of client.generate(generate, request)) { /* run it through */ }
    await new Promise((r) => setTimeout(r, 500));
  }
  await new Promise((r) => setTimeout(r, 1000));
  sub.close();
  await following;
  await Deno.writeTextFile(
    OUT,
    JSON.stringify(
      {
        captured: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
        reference: "ai-dynamo 1.6.1 (PyPI): python -m dynamo.mocker --model-path <builtin test " +
          `model> --model-name Qwen3-0.6B ${ARGS.join(" ")} (kv_cache_block_size 64)`,
        requests: `prompts ${PROMPTS.join(", ")} in turn (prompt p: tokens 1 + 1000p .. ` +
          "260 + 1000p), max_tokens 2, each after the last ended",
        note: "every kv-events ZeroMQ message as it came: topic, publisher id, sequence, " +
          "payload (version 1, u32 length, msgpack envelope whose payload is the router events)",
        messages,
      },
      null,
      2,
    ) + "\n",
  );
  console.log(`wrote ${OUT}: ${messages.length} messages`);
} finally {
  sub?.close();
  await client.close();
  kv.close();
  await mocker.kill();
  await Promise.all([etcd.stop(), nats.stop()]);
}
