// deno-lint-ignore-file no-console -- a test that says why it is skipped
// Our frontend serves reference workers: `dynamo frontend --reference-workers` on real etcd and
// NATS, in front of two ai-dynamo 1.6.1 mocker workers. Their model appears in /v1/models (read
// from their etcd model records, the tokenizer fetched from the worker's system server), chat
// completions stream and complete through our preprocessing, a client that disconnects stops the
// worker's request, `--router-mode kv` follows the workers' own KV events (one on ZeroMQ, one on
// NATS), and a stream whose worker is killed migrates to the other one. Skipped, with a message,
// only where scripts/setup_reference.sh cannot install the reference. And our own workers that
// speak the reference's wire (`dynamo run ... --reference-wire`) are served the same way.

import assert from "node:assert/strict";
import { connect } from "nats";
import OpenAI from "openai";
import {
  decodeReferenceKvEvents,
  parseReferenceKvChannel,
  referenceKvChannelsPrefix,
  referenceKvEventsSubject,
  referenceZmqEnvelope,
} from "../llm/model/reference_kv.ts";
import { ZmqSubscriber } from "../runtime/reference/zmq_sub.ts";
import { EtcdDiscovery } from "../runtime/discovery/etcd.ts";
import {
  ReferenceClient,
  referenceTokensRequest,
  waitForReferenceInstances,
} from "../runtime/reference/mod.ts";
import { frontendUrl, stopChild } from "./_helpers/frontend.ts";
import { spawnDeno } from "./_helpers/process.ts";
import {
  referenceMetric,
  type ReferenceMocker,
  referencePython,
  referenceWorkerId,
  startReferenceMocker,
} from "./_helpers/reference.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
import { builtinTestModel } from "../mod.ts";

const MODEL = "Qwen3-0.6B";
const ENDPOINT = { namespace: "dynamo", component: "backend", endpoint: "generate" };
const CLI = new URL("../cli/main.ts", import.meta.url).pathname;

if (!haveServers()) {
  console.warn("reference_frontend_test skipped: etcd or nats-server not installed");
}
const python = haveServers() ? await referencePython("reference_frontend_test") : undefined;

/** Polls `read` every 200 ms until `ok` holds, or fails after `ms` saying what was expected. */
async function until<T>(
  read: () => Promise<T>,
  ok: (v: T) => boolean,
  ms: number,
  what: string,
): Promise<T> {
  const deadline = Date.now() + ms;
  let last: T | undefined;
  let error: unknown;
  for (;;) {
    try {
      last = await read();
      if (ok(last)) return last;
    } catch (err) {
      error = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${ms} ms waiting until ${what}; last: ${JSON.stringify(last)}` +
          (error ? `, error: ${error}` : ""),
      );
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

function chat(base: string, body: Record<string, unknown>, signal?: AbortSignal) {
  return fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: "user", content: "Tell me about interop." }],
      ignore_eos: true,
      ...body,
    }),
    signal,
  });
}

/** Reads SSE `data:` payloads of a response as they come. */
async function* sse(res: Response): AsyncGenerator<string> {
  let buf = "";
  for await (const chunk of res.body!.pipeThrough(new TextDecoderStream())) {
    buf += chunk;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) yield line.slice(6);
      }
    }
  }
}

/** Four KV blocks (64 tokens each) of prompt per seed, no block shared between seeds. */
const tokensPrompt = (seed: number) => Array.from({ length: 260 }, (_, i) => 1000 + seed * 300 + i);

/** Sends `tokenIds` straight to one reference worker (no router of ours), to its end. */
async function computeOn(
  client: ReferenceClient,
  instance: Parameters<ReferenceClient["generate"]>[0],
  tokenIds: number[],
): Promise<void> {
  const request = referenceTokensRequest({ model: MODEL, tokenIds, maxTokens: 1 });
  for await (const _ of client.generate(instance, request)) { /* run it through */ }
}

/** Starts `dynamo frontend --router-mode kv` on the servers and waits for the workers' model. */
async function kvFrontend(
  servers: { etcd: string; nats: string },
  env: Record<string, string> = {},
  onStderrLine?: (line: string) => void,
): Promise<{ frontend: ReturnType<typeof spawnDeno>; base: string }> {
  const frontend = spawnDeno(
    CLI,
    { ETCD_ENDPOINTS: servers.etcd, NATS_SERVER: servers.nats, ...env },
    ["frontend", "--http-port", "0", "--http-host", "127.0.0.1", "--router-mode", "kv"],
    { onStderrLine },
  );
  try {
    const base = await frontendUrl(frontend, 60_000);
    await until(
      async () => (await (await fetch(`${base}/v1/models`)).json()).data.length,
      (n) => n === 1,
      30_000,
      "the model in the frontend's /v1/models",
    );
    return { frontend, base };
  } catch (err) {
    await stopChild(frontend);
    throw err;
  }
}

/** Which worker served one completion of `prompt` through the frontend (by their own counters). */
async function servedBy(base: string, mockers: ReferenceMocker[], prompt: number[]) {
  const served = () =>
    Promise.all(mockers.map((m) => referenceMetric(m, "dynamo_component_requests_total")));
  const before = await served();
  const res = await fetch(`${base}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 2 }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  await res.text();
  const after = await served();
  return after.findIndex((n, i) => n > before[i]!);
}

/** The worker with a request in flight now (each worker's own gauge). */
async function busyWorker(mockers: ReferenceMocker[]): Promise<ReferenceMocker | undefined> {
  const busy = [];
  for (const m of mockers) {
    if (await referenceMetric(m, "dynamo_component_inflight_requests") > 0) busy.push(m);
  }
  return busy.length === 1 ? busy[0] : undefined;
}

Deno.test({
  name: "our frontend serves two reference mocker workers",
  ignore: python === undefined,
  fn: async (t) => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { etcd: etcd.url, nats: nats.url };
    // One worker publishes its KV events on NATS, the other on ZeroMQ (1.6.1's default).
    const mockers = await Promise.all([
      startReferenceMocker(python!, servers, { modelName: MODEL, args: ["--event-plane", "nats"] }),
      startReferenceMocker(python!, servers, { modelName: MODEL }),
    ]);
    const frontendLog: string[] = [];
    const startFrontend = (...flags: string[]) =>
      spawnDeno(
        CLI,
        { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
        ["frontend", "--http-port", "0", "--http-host", "127.0.0.1", ...flags],
        { onStderrLine: (l) => frontendLog.push(l) },
      );
    const frontend = startFrontend(
      "--reference-workers",
      "--reference-migration-limit",
      "3",
    );
    // No --reference-workers: reference workers' models are served without it (the flag stays
    // accepted, as the frontend above shows).
    const kvFrontend = startFrontend("--router-mode", "kv");
    const events = await connect({ servers: nats.url.replace(/^nats:\/\//, "") });
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const diagnose = () =>
      `\nfrontend log: ${frontendLog.slice(-20).join("\n")}` +
      mockers.map((m, i) => `\nmocker ${i} stderr: ${m.stderrTail().slice(-1500)}`).join("");
    try {
      await waitForReferenceInstances(discovery, ENDPOINT, { count: 2, timeoutMs: 90_000 })
        .catch((err) => {
          throw new Error(`${err.message}${diagnose()}`);
        });
      const base = await frontendUrl(frontend, 60_000);

      await t.step("/v1/models lists the reference workers' model", async () => {
        const models = await until(
          async () => (await (await fetch(`${base}/v1/models`)).json()).data as { id: string }[],
          (data) => data.some((m) => m.id === MODEL),
          30_000,
          `${MODEL} in /v1/models`,
        );
        assert.deepEqual(models.map((m) => m.id), [MODEL]);
      });

      await t.step("a chat completion comes back whole, max_tokens long", async () => {
        const res = await chat(base, { max_tokens: 12 });
        const text = await res.text();
        assert.equal(res.status, 200, `${text}${diagnose()}`);
        const body = JSON.parse(text);
        assert.equal(body.model, MODEL);
        assert.equal(body.choices[0].finish_reason, "length");
        assert.equal(typeof body.choices[0].message.content, "string");
        assert.ok(body.choices[0].message.content.length > 0, "some text");
        assert.equal(body.usage.completion_tokens, 12);
        assert.ok(body.usage.prompt_tokens > 5, `prompt tokens ${body.usage.prompt_tokens}`);
      });

      await t.step("a streamed chat completion ends with usage and [DONE]", async () => {
        const res = await chat(base, {
          max_tokens: 10,
          stream: true,
          stream_options: { include_usage: true },
        });
        assert.equal(res.status, 200);
        const payloads = [];
        for await (const p of sse(res)) payloads.push(p);
        assert.equal(payloads.at(-1), "[DONE]");
        const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p));
        const content = chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("");
        assert.ok(content.length > 0, "streamed text");
        assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === "length"));
        assert.equal(chunks.at(-1).usage.completion_tokens, 10);
      });

      await t.step("the official openai client gets a chat whole and streamed", async () => {
        const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
        const whole = await client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "Tell me about interop." }],
          max_tokens: 8,
        });
        assert.equal(whole.choices[0]!.finish_reason, "length");
        assert.ok((whole.choices[0]!.message.content ?? "").length > 0, "some text");
        assert.equal(whole.usage?.completion_tokens, 8);
        const stream = await client.chat.completions.create({
          model: MODEL,
          messages: [{ role: "user", content: "Tell me about interop." }],
          max_tokens: 8,
          stream: true,
          stream_options: { include_usage: true },
        });
        let text = "";
        let finish: string | null | undefined;
        let usage;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta?.content ?? "";
          finish ??= chunk.choices[0]?.finish_reason;
          usage ??= chunk.usage ?? undefined;
        }
        assert.ok(text.length > 0, "streamed text");
        assert.equal(finish, "length");
        assert.equal(usage?.completion_tokens, 8);
      });

      await t.step("requests go to both reference workers", async () => {
        for (let i = 0; i < 4; i++) await (await chat(base, { max_tokens: 2 })).text();
        for (const m of mockers) {
          const n = await referenceMetric(m, "dynamo_component_requests_total");
          assert.ok(n >= 1, `worker ${m.systemUrl} served ${n} requests`);
        }
      });

      await t.step("a client that disconnects stops the worker's request", async () => {
        // 20000 tokens take the mocker about two minutes (6 ms a token here): an end within
        // the deadline below is the stop, not the length.
        const client = new AbortController();
        const res = await chat(base, { max_tokens: 20_000, stream: true }, client.signal);
        assert.equal(res.status, 200);
        const reading = sse(res);
        await reading.next();
        await reading.next();
        const worker = await until(
          () => busyWorker(mockers),
          (m) => m !== undefined,
          10_000,
          "one worker with the request in flight",
        );
        client.abort();
        await reading.return(undefined).catch(() => {});
        await until(
          () => referenceMetric(worker!, "dynamo_component_inflight_requests"),
          (n) => n === 0,
          15_000,
          `the worker at ${worker!.systemUrl} to stop the request`,
        );
      });

      await t.step(
        "--router-mode kv sends a cached prompt to the worker that cached it (ZeroMQ and NATS events)",
        async () => {
          const kvBase = await frontendUrl(kvFrontend, 60_000);
          await until(
            async () => (await (await fetch(`${kvBase}/v1/models`)).json()).data.length,
            (n) => n === 1,
            30_000,
            "the model in the kv frontend's /v1/models",
          );
          const ask = async (prompt: string) => {
            const res = await fetch(`${kvBase}/v1/chat/completions`, {
              method: "POST",
              headers: { "content-type": "application/json" },
              body: JSON.stringify({
                model: MODEL,
                messages: [{ role: "user", content: prompt }],
                max_tokens: 2,
              }),
            });
            assert.equal(res.status, 200, await res.clone().text());
            await res.text();
          };
          const served = () =>
            Promise.all(mockers.map((m) => referenceMetric(m, "dynamo_component_requests_total")));
          // What the frontend's router hears: who stored blocks, on either event plane.
          const stored = new Set<string>();
          const note = (envelope: Uint8Array) => {
            for (const e of decodeReferenceKvEvents(envelope)) {
              if (typeof e.data === "object" && "stored" in e.data) stored.add(e.workerId);
            }
          };
          const endpoint = { namespace: "dynamo", component: "backend", name: "generate" };
          const natsSub = events.subscribe(referenceKvEventsSubject(endpoint));
          const zmqSubs = [];
          for (const { value } of await discovery.list(referenceKvChannelsPrefix(endpoint))) {
            const channel = parseReferenceKvChannel(JSON.parse(value));
            if (channel.kind === "zmq") zmqSubs.push(await ZmqSubscriber.connect(channel.endpoint));
          }
          assert.equal(zmqSubs.length, 1, "one worker publishes on ZeroMQ");
          // ZeroMQ's slow joiner: a publisher drops what it sends before it has taken in a new
          // subscription, and nothing says when it has; give it a moment before the first event.
          await new Promise((r) => setTimeout(r, 1_000));
          const listening = Promise.all([
            (async () => {
              for await (const m of natsSub) note(m.data);
            })(),
            ...zmqSubs.map(async (sub) => {
              for await (const parts of sub) note(referenceZmqEnvelope(parts));
            }),
          ]);
          try {
            await events.flush();
            const holders = [];
            // Several KV blocks (64 tokens each) of prompt, no block shared between the two.
            for (const words of ["fact about routing", "note on caching"]) {
              const prompt = Array.from({ length: 60 }, (_, i) => `${words} ${i}`).join("; ");
              const before = await served();
              await ask(prompt);
              const first = await served();
              const holder = first.findIndex((n, i) => n > before[i]!);
              assert.ok(holder >= 0, "one worker served the first request");
              const holderId = await referenceWorkerId(mockers[holder]!);
              await until(
                () => Promise.resolve(stored.has(holderId)),
                (seen) => seen,
                10_000,
                `a stored-blocks event of worker ${holderId}`,
              );
              // The frontend hears the same event on its own subscription, a moment later on a
              // loaded machine (the first of the four once went elsewhere, the rest then split).
              await new Promise((r) => setTimeout(r, 500));
              for (let i = 0; i < 4; i++) await ask(prompt);
              const after = await served();
              assert.equal(
                after[holder]! - first[holder]!,
                4,
                `all four went to the holder (worker ${holder}, ${holderId})` + diagnose(),
              );
              assert.equal(after[1 - holder]! - first[1 - holder]!, 0, "none to the other");
              holders.push(holder);
            }
            assert.notEqual(holders[0], holders[1], "cold prompts go in turn: both planes heard");
          } finally {
            natsSub.unsubscribe();
            for (const sub of zmqSubs) sub.close();
            await listening;
          }
        },
      );

      await t.step("a stream whose worker is killed finishes on the other one", async () => {
        // About 9 s of tokens: still in flight when its worker is found and killed.
        const res = await chat(base, {
          max_tokens: 1500,
          stream: true,
          stream_options: { include_usage: true },
        });
        assert.equal(res.status, 200);
        const reading = sse(res);
        const payloads: string[] = [];
        for (let i = 0; i < 3; i++) payloads.push((await reading.next()).value!);
        const worker = await until(
          () => busyWorker(mockers),
          (m) => m !== undefined,
          10_000,
          "one worker with the request in flight",
        );
        const other = mockers.find((m) => m !== worker)!;
        const before = await referenceMetric(other, "dynamo_component_requests_total");
        await worker!.kill();
        for await (const p of reading) payloads.push(p);
        assert.equal(payloads.at(-1), "[DONE]", `${payloads.slice(-3).join("\n")}${diagnose()}`);
        const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p));
        assert.ok(!chunks.some((c) => c.error), "no error chunk");
        assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === "length"));
        assert.equal(chunks.at(-1).usage.completion_tokens, 1500, "all tokens, across workers");
        const after = await referenceMetric(other, "dynamo_component_requests_total");
        assert.ok(after > before, "the other worker took the rest of the request");
      });
    } finally {
      await Promise.all([stopChild(frontend), stopChild(kvFrontend)]);
      await events.close();
      await Promise.all(mockers.map((m) => m.kill()));
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "our frontend serves our own workers that speak the reference wire (--reference-wire)",
  ignore: !haveServers(),
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const worker = spawnDeno(
      CLI,
      { ...servers, DYN_LOG: "warn", DYN_TCP_RPC_HOST: "127.0.0.1" },
      [
        "run",
        "in=dyn://dynamo.backend.generate",
        "out=mocker",
        await builtinTestModel(),
        "--speedup-ratio",
        "20",
        "--model-name",
        "wire-mocker",
        "--reference-wire",
      ],
    );
    const frontend = spawnDeno(CLI, servers, [
      "frontend",
      "--http-port",
      "0",
      "--http-host",
      "127.0.0.1",
      "--reference-workers",
    ]);
    try {
      await worker.waitFor(
        (l) => typeof l.text === "string" && l.text.includes("dynamo worker serving"),
        60_000,
        "the reference-wire worker to serve",
      );
      const base = await frontendUrl(frontend, 60_000);
      await until(
        async () => (await (await fetch(`${base}/v1/models`)).json()).data as { id: string }[],
        (data) => data.some((m) => m.id === "wire-mocker"),
        30_000,
        "wire-mocker in /v1/models",
      );
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "wire-mocker",
          messages: [{ role: "user", content: "hi" }],
          max_tokens: 8,
          ignore_eos: true,
        }),
      });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(body.usage.completion_tokens, 8);
      assert.equal(body.choices[0].finish_reason, "length");
    } finally {
      await Promise.all([stopChild(frontend), stopChild(worker)]);
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "a mixed fleet behind our frontend: a reference mocker and our --reference-wire worker both serve",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const env = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const theirs = await startReferenceMocker(python!, { etcd: etcd.url, nats: nats.url }, {
      modelName: MODEL,
    });
    const ours = spawnDeno(CLI, { ...env, DYN_LOG: "warn", DYN_TCP_RPC_HOST: "127.0.0.1" }, [
      "run",
      "in=dyn://dynamo.backend.generate",
      "out=mocker",
      await builtinTestModel(),
      "--speedup-ratio",
      "20",
      "--block-size",
      "64",
      "--model-name",
      MODEL,
      "--reference-wire",
    ]);
    const frontend = spawnDeno(CLI, { ...env, DYN_LOG: "warn" }, [
      "frontend",
      "--http-port",
      "0",
      "--http-host",
      "127.0.0.1",
    ]);
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    try {
      await waitForReferenceInstances(discovery, ENDPOINT, { count: 2, timeoutMs: 90_000 });
      const base = await frontendUrl(frontend, 60_000);
      await until(
        async () =>
          (await (await fetch(`${base}/health`)).json()) as {
            models?: { name: string; instances: number }[];
          },
        (h) => h.models?.find((m) => m.name === MODEL)?.instances === 2,
        30_000,
        `${MODEL} with both instances in /health`,
      );
      const before = await referenceMetric(theirs, "dynamo_component_requests_total");
      const N = 8;
      for (let i = 0; i < N; i++) {
        const res = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: MODEL,
            messages: [{ role: "user", content: `question ${i}` }],
            max_tokens: 4,
          }),
        });
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body));
      }
      const theirsServed = await referenceMetric(theirs, "dynamo_component_requests_total") -
        before;
      // Round-robin over the two: each served some, so ours served the rest.
      assert.ok(
        theirsServed > 0 && theirsServed < N,
        `the reference mocker served ${theirsServed} of ${N}`,
      );
    } finally {
      await Promise.all([stopChild(frontend), stopChild(ours)]);
      await theirs.kill();
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "our kv router sends a prompt to the reference worker holding it in host memory (storage tiers)",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { etcd: etcd.url, nats: nats.url };
    // Workers of 8 GPU blocks that offload to host memory: four prompts of 4 blocks each evict
    // the first two from the GPU, and the host keeps them.
    const args = ["--num-gpu-blocks-override", "8", "--num-host-blocks", "64"];
    const mockers = await Promise.all([
      startReferenceMocker(python!, servers, { modelName: MODEL, args }),
      startReferenceMocker(python!, servers, { modelName: MODEL, args }),
    ]);
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const client = ReferenceClient.create();
    let frontend: ReturnType<typeof spawnDeno> | undefined;
    try {
      const instances = await waitForReferenceInstances(discovery, ENDPOINT, {
        count: 2,
        timeoutMs: 90_000,
      });
      let base: string;
      ({ frontend, base } = await kvFrontend(servers));
      // ZeroMQ's slow joiner: the router's subscriptions need a moment before the first event.
      await new Promise((r) => setTimeout(r, 1_000));
      const ids = await Promise.all(mockers.map((m) => referenceWorkerId(m)));
      const holder = instances.find((i) => i.instanceId === ids[1])!;
      for (const seed of [1, 2, 3, 4]) await computeOn(client, holder, tokensPrompt(seed));
      // Give the events time to reach the frontend's router.
      await new Promise((r) => setTimeout(r, 1_000));
      // Prompts 1 and 2 are in worker 1's host memory only; each goes there.
      for (const seed of [1, 2]) {
        assert.equal(
          await servedBy(base, mockers, tokensPrompt(seed)),
          1,
          `the prompt (seed ${seed}) went elsewhere`,
        );
      }
    } finally {
      if (frontend) await stopChild(frontend);
      await client.close();
      await Promise.all(mockers.map((m) => m.kill()));
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "our kv router asks reference workers for the KV state they cached before it started",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { etcd: etcd.url, nats: nats.url };
    const mockers = await Promise.all([
      startReferenceMocker(python!, servers, { modelName: MODEL }),
      startReferenceMocker(python!, servers, { modelName: MODEL }),
    ]);
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const client = ReferenceClient.create();
    const frontendLog: string[] = [];
    let frontend: ReturnType<typeof spawnDeno> | undefined;
    try {
      const instances = await waitForReferenceInstances(discovery, ENDPOINT, {
        count: 2,
        timeoutMs: 90_000,
      });
      const ids = await Promise.all(mockers.map((m) => referenceWorkerId(m)));
      // Cached on each worker directly, before any router of ours exists: only the workers'
      // answers to the KV-state query can tell it where.
      for (const [mocker, seed] of [[1, 1], [0, 2]] as const) {
        const instance = instances.find((i) => i.instanceId === ids[mocker])!;
        await computeOn(client, instance, tokensPrompt(seed));
      }
      let base: string;
      ({ frontend, base } = await kvFrontend(
        servers,
        { DYN_LOG: "debug" },
        (l) => frontendLog.push(l),
      ));
      for (const [mocker, seed] of [[1, 1], [0, 2], [0, 2], [1, 1]] as const) {
        assert.equal(
          await servedBy(base, mockers, tokensPrompt(seed)),
          mocker,
          `the prompt (seed ${seed}) cached on worker ${mocker} went elsewhere` +
            `\n${frontendLog.filter((l) => /recover|KV state/.test(l)).slice(-6).join("\n")}`,
        );
      }
      assert.ok(
        frontendLog.some((l) => l.includes("reference worker KV state recovered")),
        "the frontend's log names no recovery",
      );
    } finally {
      if (frontend) await stopChild(frontend);
      await client.close();
      await Promise.all(mockers.map((m) => m.kill()));
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "our frontend on the NATS request plane serves reference mocker workers on theirs: listed, streamed, a hang-up stops them",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { etcd: etcd.url, nats: nats.url };
    const onNats = { DYN_REQUEST_PLANE: "nats" };
    const mockers = await Promise.all(
      [0, 1].map(() => startReferenceMocker(python!, servers, { modelName: MODEL, env: onNats })),
    );
    const frontendLog: string[] = [];
    const frontend = spawnDeno(
      CLI,
      { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url, ...onNats },
      ["frontend", "--http-port", "0", "--http-host", "127.0.0.1"],
      { onStderrLine: (l) => frontendLog.push(l) },
    );
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const diagnose = () =>
      `\nfrontend log: ${frontendLog.slice(-20).join("\n")}` +
      mockers.map((m, i) => `\nmocker ${i} stderr: ${m.stderrTail().slice(-1500)}`).join("");
    try {
      const workers = await waitForReferenceInstances(discovery, ENDPOINT, {
        count: 2,
        timeoutMs: 90_000,
      });
      // Their records name NATS subjects, not TCP addresses.
      assert.ok(workers.every((w) => w.natsSubject?.startsWith("dynamo_backend.generate-")));
      const base = await frontendUrl(frontend, 60_000);
      await until(
        async () => (await (await fetch(`${base}/v1/models`)).json()).data as { id: string }[],
        (data) => data.some((m) => m.id === MODEL),
        30_000,
        `${MODEL} in /v1/models`,
      );
      for (let i = 0; i < 4; i++) {
        const res = await chat(base, { max_tokens: 6, stream: true });
        assert.equal(res.status, 200, diagnose());
        const payloads = [];
        for await (const p of sse(res)) payloads.push(p);
        assert.equal(payloads.at(-1), "[DONE]", diagnose());
        const chunks = payloads.slice(0, -1).map((p) => JSON.parse(p));
        assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === "length"), diagnose());
      }
      for (const m of mockers) {
        const n = await referenceMetric(m, "dynamo_component_requests_total");
        assert.ok(n >= 1, `worker ${m.systemUrl} served ${n} requests`);
      }
      // A client hanging up: the worker's request stops (20,000 tokens would take minutes).
      const client = new AbortController();
      const res = await chat(base, { max_tokens: 20_000, stream: true }, client.signal);
      assert.equal(res.status, 200);
      const reading = sse(res);
      await reading.next();
      const worker = await until(
        () => busyWorker(mockers),
        (m) => m !== undefined,
        10_000,
        "one worker with the request in flight",
      );
      client.abort();
      await reading.return(undefined).catch(() => {});
      await until(
        () => referenceMetric(worker!, "dynamo_component_inflight_requests"),
        (n) => n === 0,
        15_000,
        `the worker at ${worker!.systemUrl} to stop the request`,
      );
    } catch (err) {
      throw new Error(`${(err as Error).message}${diagnose()}`, { cause: err });
    } finally {
      await stopChild(frontend);
      await Promise.all(mockers.map((m) => m.kill()));
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
