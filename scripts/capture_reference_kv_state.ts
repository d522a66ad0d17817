// deno-lint-ignore-file no-console -- a program that prints
// Captures, from a running reference mocker worker (ai-dynamo 1.6.1), the formats of its KV-state
// query and of its load metrics, as golden vectors (scripts/capture_reference.ts captures the
// rest): starts etcd and nats-server on free loopback ports and one reference mocker, follows its
// kv_metrics and forward-pass-metrics ZeroMQ channels, sends it one 130-token request, then asks
// its `worker_kv_query_source_<id>` endpoint (the recovery target of its EventSource record) for
// its KV state three ways (a tree dump, the events from id 1, a start past its last event), and
// writes the request and response bodies as they crossed to
// tests/golden/reference_1.6.1/kv_state.json and the first metrics messages with load to
// tests/golden/reference_1.6.1/load_metrics.json.
//
//   ./deno run -A scripts/capture_reference_kv_state.ts

import { encode } from "@msgpack/msgpack";
import { Etcd3 } from "etcd3";
import { ReferenceClient } from "../runtime/reference/client.ts";
import { parseReferenceInstance } from "../runtime/reference/instances.ts";
import { referenceTokensRequest } from "../runtime/reference/request.ts";
import { ZmqSubscriber } from "../runtime/reference/zmq_sub.ts";
import { referencePython, startReferenceMocker } from "../tests/_helpers/reference.ts";
import { startEtcd, startNats } from "../tests/_helpers/servers.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const STATE_OUT = `${ROOT}tests/golden/reference_1.6.1/kv_state.json`;
const LOAD_OUT = `${ROOT}tests/golden/reference_1.6.1/load_metrics.json`;
const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

const python = await referencePython("capture_reference_kv_state");
if (!python) Deno.exit(1);
const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
const mocker = await startReferenceMocker(python, { etcd: etcd.url, nats: nats.url }, {
  modelName: "Qwen3-0.6B",
});
const kv = new Etcd3({ hosts: etcd.url });
const subs: ZmqSubscriber[] = [];
const client = ReferenceClient.create();
try {
  let all: Record<string, string> = {};
  const deadline = Date.now() + 120_000;
  const has = (part: string) => Object.keys(all).some((k) => k.includes(part));
  while (!has("worker_kv_query_source_") || !has("/topic/kv_metrics/") || !has("forward-pass")) {
    if (Date.now() > deadline) throw new Error("the mocker did not register in 120 s");
    await new Promise((r) => setTimeout(r, 500));
    all = await kv.getAll().prefix("v1/").strings();
  }
  const channel = (topic: string) =>
    JSON.parse(Object.entries(all).find(([k]) => k.includes(`/topic/${topic}/`))![1])
      .transport.config.endpoint as string;
  // The first message of each channel that carries load (or the last one seen).
  const metrics: Record<string, string[]> = {};
  const loaded: Record<string, (parts: Uint8Array[]) => boolean> = {
    kv_metrics: (p) => !hex(p[3]!).endsWith("ae6b765f757365645f626c6f636b7300"), // kv_used_blocks 0
    "forward-pass-metrics": (p) =>
      new TextDecoder().decode(p[3]!).includes("num_prefill") &&
      p[3]!.length > 0 && metrics["forward-pass-metrics"] === undefined,
  };
  for (const topic of Object.keys(loaded)) {
    const sub = await ZmqSubscriber.connect(channel(topic));
    subs.push(sub);
    (async () => {
      for await (const parts of sub) {
        if (metrics[topic] === undefined || loaded[topic]!(parts)) metrics[topic] = parts.map(hex);
      }
    })().catch(() => {});
  }
  await new Promise((r) => setTimeout(r, 1000));
  const genKey = Object.keys(all).find((k) =>
    k.startsWith("v1/instances/dynamo/backend/generate/")
  )!;
  const queryKey = Object.keys(all).find((k) =>
    k.startsWith("v1/instances/") && k.includes("worker_kv_query_source_")
  )!;
  const generate = parseReferenceInstance(genKey, all[genKey]!);
  const query = parseReferenceInstance(queryKey, all[queryKey]!);
  const tokens = Array.from({ length: 130 }, (_, i) => i + 1);
  const request = referenceTokensRequest({
    model: "Qwen3-0.6B",
    tokenIds: tokens,
    maxTokens: 3,
    ignoreEos: true,
  });
  for await (const _ of client.generate(generate, request)) { /* run it through */ }
  await new Promise((r) => setTimeout(r, 1000));
  const workerId = BigInt(`0x${generate.instanceId}`);
  const answers: Record<string, unknown> = {};
  for (
    const [name, start] of [["tree_dump", null], ["events", 1], ["too_new", 50]] as const
  ) {
    const body = {
      worker_id: workerId,
      dp_rank: 0,
      start_event_id: start,
      end_event_id: null,
      supports_tree_dump_failed: true,
      kind: "recovery",
    };
    const items = [];
    for await (const item of client.call(query, body)) items.push(hex(item.bytes));
    answers[name] = {
      request_hex: hex(encode(body, { useBigInt64: true })),
      response_items_hex: items,
    };
  }
  const reference =
    "ai-dynamo 1.6.1 (PyPI): python -m dynamo.mocker --model-path <builtin test model> " +
    "--model-name Qwen3-0.6B (kv_cache_block_size 64), one request of tokens 1..130, max_tokens 3";
  const captured = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  await Deno.writeTextFile(
    STATE_OUT,
    JSON.stringify(
      {
        captured,
        reference,
        event_source_json: Object.entries(all).find(([k]) => k.startsWith("v1/event_sources/"))![1],
        instance_id: generate.instanceId,
        query_endpoint: query.endpoint,
        note: "each request is ours (msgpack, named), which the reference worker accepted; " +
          "each response item is the body it sent back: {data: WorkerKvQueryResponse, " +
          "complete_final}",
        ...answers,
      },
      null,
      2,
    ) + "\n",
  );
  await new Promise((r) => setTimeout(r, 1000));
  await Deno.writeTextFile(
    LOAD_OUT,
    JSON.stringify(
      {
        captured,
        reference,
        instance_id: generate.instanceId,
        note: "one ZeroMQ message of each channel: topic, publisher id, sequence, payload " +
          "(version 1, u32 length, msgpack envelope whose payload is the metrics in msgpack)",
        kv_metrics: { parts_hex: metrics.kv_metrics },
        forward_pass_metrics: { parts_hex: metrics["forward-pass-metrics"] },
      },
      null,
      2,
    ) + "\n",
  );
  console.log(`wrote ${STATE_OUT} and ${LOAD_OUT}`);
} finally {
  for (const s of subs) s.close();
  await client.close();
  kv.close();
  await mocker.kill();
  await Promise.all([etcd.stop(), nats.stop()]);
}
