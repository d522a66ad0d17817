// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The reference frontend (ai-dynamo 1.6.1, `python -m dynamo.frontend`, started on loopback
// against real etcd and NATS) serves OUR workers: two Deno workers (the echo engine and the
// mocker) registered in the reference's records by `serveReferenceEndpoint` appear in its
// /v1/models, answer its chat completions streamed and not, and a client that hangs up stops
// our engine. Skipped, with a message, only where scripts/setup_reference.sh cannot install the
// reference (PyPI unreachable).

import assert from "node:assert/strict";
import {
  builtinTestModel,
  type Context,
  type DistributedRuntime,
  echoEngine,
  MockerEngine,
  ModelInput,
  ModelType,
  registerLlm,
} from "../mod.ts";
import { Context as RuntimeContext } from "../runtime/context.ts";
import { hashPromptBlocks } from "../llm/engines/mocker/scheduler.ts";
import { ReferenceKvEventPublisher } from "../runtime/reference/kv_events.ts";
import { ReferenceLoadPublisher } from "../runtime/reference/load_metrics.ts";
import {
  type ReferenceEndpointServer,
  referenceModelCard,
  serveReferenceEndpoint,
} from "../runtime/reference/worker.ts";
import { haveServers, startEtcd, startNats } from "./_helpers/servers.ts";
import {
  etcdRuntime,
  listedModels,
  type ReferenceFrontend,
  referencePython,
  startReferenceFrontend,
  startReferenceProcess,
  until,
  untilListed,
} from "./_helpers/reference.ts";

if (!haveServers()) {
  console.warn("reference_serves_ours_test skipped: etcd or nats-server not installed");
}
const python = haveServers() ? await referencePython("reference_serves_ours_test") : undefined;

/** A reference process (`python -m MODULE ...args`) on loopback. */
const startReference = (
  module: string,
  args: string[],
  servers: { ETCD_ENDPOINTS: string; NATS_SERVER: string },
) => startReferenceProcess(python!, module, args, servers);

Deno.test({
  name: "the reference frontend serves our echo and mocker workers; a hang-up stops our engine",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const runtimes: DistributedRuntime[] = [];
    const servers: ReferenceEndpointServer[] = [];
    const mocker = new MockerEngine({ speedupRatio: 10 });
    let frontend: ReferenceFrontend | undefined;
    // The echo worker's engine, watched: when a request's context stops, and how it ended.
    const echo = echoEngine({ delayMs: 30 });
    const ended: { id: string; stopped: boolean; tokens: number }[] = [];
    const watchedEcho = async function* (req: Record<string, unknown>, ctx: Context) {
      let tokens = 0;
      try {
        for await (const out of echo(req as never, ctx)) {
          tokens += out.token_ids.length;
          yield out as unknown as Record<string, unknown>;
        }
      } finally {
        ended.push({ id: ctx.id, stopped: ctx.isStopped(), tokens });
      }
    };
    try {
      const modelPath = await builtinTestModel();
      for (
        const [name, handler] of [
          ["echo-model", watchedEcho],
          ["mocker-model", mocker.handler as never],
        ] as const
      ) {
        const runtime = await etcdRuntime(etcd, nats);
        runtimes.push(runtime);
        servers.push(
          await serveReferenceEndpoint({
            runtime,
            namespace: "dynamo",
            component: name === "echo-model" ? "echo" : "mocker",
            endpoint: "generate",
            handler,
            card: await referenceModelCard({ modelPath, displayName: name }),
          }),
        );
      }
      frontend = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
      );
      const base = frontend.base;
      const ids = await until(
        "both models in the reference frontend's /v1/models",
        90_000,
        async () => {
          const names = (await listedModels(base)).sort();
          return names.length === 2 ? names : undefined;
        },
      );
      assert.deepEqual(ids, ["echo-model", "mocker-model"]);

      const chat = (
        model: string,
        content: string,
        extra: Record<string, unknown> = {},
        signal?: AbortSignal,
      ) =>
        fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          signal,
          body: JSON.stringify({ model, messages: [{ role: "user", content }], ...extra }),
        });

      // Not streamed: the echo engine answers with the prompt's own tokens.
      const whole = await chat("echo-model", "one two three", { max_tokens: 40 });
      const body = await whole.json();
      assert.equal(whole.status, 200, JSON.stringify(body));
      assert.match(body.choices[0].message.content, /one two three/);
      assert.ok(body.usage.completion_tokens > 0);

      // Streamed, from the mocker: chunks, then [DONE].
      const streamed = await chat("mocker-model", "hello there", { stream: true, max_tokens: 12 });
      assert.equal(streamed.status, 200);
      const text = await streamed.text();
      const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
      assert.equal(events.at(-1), "data: [DONE]");
      const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
      // (On a loaded machine the mocker may hand several tokens over in one output: one chunk.)
      assert.ok(chunks.some((c) => c.choices?.[0]?.delta?.content), text);
      assert.ok(chunks.some((c) => c.choices?.[0]?.finish_reason), text);

      // A client that hangs up mid-stream: our engine's request is stopped, not run out.
      const before = ended.length;
      const hangUp = new AbortController();
      const long = await chat(
        "echo-model",
        Array.from({ length: 150 }, (_, i) => `word${i}`).join(" "),
        { stream: true, max_tokens: 400 },
        hangUp.signal,
      );
      const reader = long.body!.getReader();
      await reader.read();
      await until(
        "our echo worker to be serving the long request",
        10_000,
        () => Promise.resolve(servers[0]!.inflight > 0 ? true : undefined),
      );
      hangUp.abort();
      await reader.cancel().catch(() => {});
      const end = await until(
        "our engine to see the hang-up",
        15_000,
        () => Promise.resolve(ended.length > before ? ended[ended.length - 1] : undefined),
      );
      assert.equal(end.stopped, true, "the engine's context was not stopped");
      assert.ok(end.tokens < 150, `the engine ran on to ${end.tokens} tokens after the hang-up`);
      assert.equal(servers[0]!.inflight, 0);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${frontend?.log()}`);
      throw err;
    } finally {
      await frontend?.stop();
      for (const s of servers) await s.close();
      await mocker.close();
      for (const rt of runtimes) await rt.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "the reference frontend serves a plain registerLlm + serveEndpoint worker: one instance record, one model record, one port",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    let runtime: DistributedRuntime | undefined;
    let frontend: ReferenceFrontend | undefined;
    let serving: Promise<void> | undefined;
    const echo = echoEngine({ delayMs: 30 });
    const ended: { stopped: boolean; tokens: number }[] = [];
    let inflight = 0;
    try {
      runtime = await etcdRuntime(etcd, nats);
      const endpoint = runtime.namespace("dynamo").component("plain").endpoint("generate");
      // Our own endpoint and record, no reference adapter: the TCP-plane listener takes the
      // reference frontend's framing at the record's address and path.
      serving = endpoint.serveEndpoint(async function* (req: Record<string, unknown>, ctx) {
        let tokens = 0;
        inflight++;
        try {
          for await (const out of echo(req as never, ctx)) {
            tokens += out.token_ids.length;
            yield out;
          }
        } finally {
          inflight--;
          ended.push({ stopped: ctx.isStopped(), tokens });
        }
      });
      const client = await endpoint.client();
      await client.waitForInstances({ timeoutMs: 10_000 });
      // registerLlm writes the one model record: the reference's, our card in dynamo_deno
      // (which the reference frontend must tolerate).
      await registerLlm(
        ModelInput.Tokens,
        ModelType.Chat | ModelType.Completions,
        endpoint,
        await builtinTestModel(),
        { modelName: "plain-model" },
      );
      const record = JSON.parse(
        (await runtime.discovery.get(`v1/mdc/dynamo/plain/generate/${runtime.instanceId}`))!,
      );
      assert.equal(record.type, "Model");
      assert.equal(record.dynamo_deno.display_name, "plain-model");
      frontend = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
      );
      const base = frontend.base;
      await untilListed(base, "plain-model");
      const chat = (content: string, extra: Record<string, unknown>, signal?: AbortSignal) =>
        fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          signal,
          body: JSON.stringify({
            model: "plain-model",
            messages: [{ role: "user", content }],
            ...extra,
          }),
        });
      const whole = await chat("one two three", { max_tokens: 40 });
      const body = await whole.json();
      assert.equal(whole.status, 200, JSON.stringify(body));
      assert.match(body.choices[0].message.content, /one two three/);
      const streamed = await chat("four five", { stream: true, max_tokens: 40 });
      const text = await streamed.text();
      assert.equal(streamed.status, 200, text);
      assert.ok(text.trimEnd().endsWith("data: [DONE]"), text);
      assert.match(text, /four/);
      // A hang-up reaches our handler's context through the reference's "stop".
      const before = ended.length;
      const hangUp = new AbortController();
      const long = await chat(
        Array.from({ length: 150 }, (_, i) => `word${i}`).join(" "),
        { stream: true, max_tokens: 400 },
        hangUp.signal,
      );
      const reader = long.body!.getReader();
      await reader.read();
      await until(
        "our handler serving the long request",
        10_000,
        () => Promise.resolve(inflight > 0 ? true : undefined),
      );
      hangUp.abort();
      await reader.cancel().catch(() => {});
      const end = await until(
        "our handler to see the hang-up",
        15_000,
        () => Promise.resolve(ended.length > before ? ended[ended.length - 1] : undefined),
      );
      assert.equal(end.stopped, true, "the handler's context was not stopped");
      assert.ok(end.tokens < 150, `the handler ran on to ${end.tokens} tokens`);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${frontend?.log()}`);
      throw err;
    } finally {
      await frontend?.stop();
      await runtime?.shutdown();
      await serving;
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "a mixed fleet behind the reference frontend: its mocker and our worker both serve",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const modelPath = await builtinTestModel();
    const MODEL = "Qwen3-0.6B";
    const processes: ReturnType<typeof startReference>[] = [];
    let runtime: DistributedRuntime | undefined;
    let ours: ReferenceEndpointServer | undefined;
    let served = 0;
    const echo = echoEngine();
    try {
      processes.push(
        startReference(
          "dynamo.mocker",
          ["--model-path", modelPath, "--model-name", MODEL],
          servers,
        ),
      );
      runtime = await etcdRuntime(etcd, nats);
      ours = await serveReferenceEndpoint({
        runtime,
        namespace: "dynamo",
        component: "backend",
        endpoint: "generate",
        handler: async function* (req: Record<string, unknown>, ctx: Context) {
          served++;
          for await (const out of echo(req as never, ctx)) yield out as never;
        },
        card: await referenceModelCard({ modelPath, displayName: MODEL, kvCacheBlockSize: 64 }),
      });
      const front = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        servers,
      );
      processes.push(front);
      const base = front.base;
      // Both instances known: the reference mocker's and ours, on the same endpoint.
      await untilListed(base, MODEL);
      const N = 12;
      let ok = 0;
      // Requests go round-robin once both instances are in the frontend's list; retry until
      // ours has taken some (the mocker may register a moment later than the model appears).
      await until("requests on both workers", 60_000, async () => {
        const res = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: MODEL,
            messages: [{ role: "user", content: "one two three" }],
            max_tokens: 8,
          }),
        });
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body));
        ok++;
        return ok >= N && served > 0 && served < ok ? true : undefined;
      });
      assert.ok(served > 0 && served < ok, `ours served ${served} of ${ok}`);
    } catch (err) {
      for (const p of processes) console.error(`reference log (tail):\n${p.log()}`);
      throw err;
    } finally {
      for (const p of processes.reverse()) await p.stop();
      await ours?.close();
      await runtime?.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "the reference frontend serves our llama.cpp engine (a GGUF, its tokenizer as an HF folder)",
  ignore: python === undefined,
  fn: async () => {
    const { LlamaCppEngine } = await import("../llm/engines/llamacpp/mod.ts");
    const { tinyLlamaGguf } = await import("./_helpers/tiny_gguf.ts");
    const { writeGgufAsHfFolder } = await import("../llm/model/gguf_facts.ts");
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const gguf = await tinyLlamaGguf();
    const folder = await writeGgufAsHfFolder(gguf, await Deno.makeTempDir());
    const engine = await LlamaCppEngine.load(gguf, { maxNumSeqs: 2 });
    let runtime: DistributedRuntime | undefined;
    let ours: ReferenceEndpointServer | undefined;
    let front: ReferenceFrontend | undefined;
    try {
      runtime = await etcdRuntime(etcd, nats);
      ours = await serveReferenceEndpoint({
        runtime,
        namespace: "dynamo",
        component: "llamacpp",
        endpoint: "generate",
        handler: engine.handler as never,
        card: await referenceModelCard({ modelPath: folder, displayName: "tiny-llama" }),
      });
      front = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        servers,
      );
      const base = front.base;
      await untilListed(base, "tiny-llama");
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "tiny-llama",
          messages: [{ role: "user", content: "hello" }],
          max_tokens: 6,
          stream: true,
        }),
      });
      const text = await res.text();
      assert.equal(res.status, 200, text);
      const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
      assert.equal(events.at(-1), "data: [DONE]", text);
      const usage = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)))
        .find((c) => c.usage)?.usage;
      const finish = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)))
        .find((c) => c.choices?.[0]?.finish_reason)?.choices[0].finish_reason;
      assert.ok(finish === "length" || finish === "stop", text);
      if (usage) assert.ok(usage.completion_tokens >= 1 && usage.completion_tokens <= 6, text);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      await ours?.close();
      await engine.close();
      await runtime?.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
      await Deno.remove(folder, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "dynamo run in=dyn://... out=mocker --num-workers 2: two workers of a reference deployment, KV events and load in its formats",
  ignore: python === undefined,
  fn: async () => {
    const { EtcdDiscovery } = await import("../runtime/discovery/etcd.ts");
    const { listReferenceInstances } = await import("../runtime/reference/mod.ts");
    const { spawnDeno } = await import("./_helpers/process.ts");
    const { stopChild } = await import("./_helpers/frontend.ts");
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const worker = spawnDeno(
      new URL("../cli/main.ts", import.meta.url).pathname,
      { ...servers, DYN_LOG: "warn", DYN_TCP_RPC_HOST: "127.0.0.1" },
      [
        "run",
        "in=dyn://dynamo.backend.generate",
        "out=mocker",
        await builtinTestModel(),
        "--num-workers",
        "2",
        "--speedup-ratio",
        "20",
        "--model-name",
        "cli-mocker",
      ],
    );
    let front: ReferenceFrontend | undefined;
    try {
      await worker.waitFor(
        (l) => typeof l.text === "string" && l.text.includes("dynamo worker serving"),
        60_000,
        "the mocker workers to serve",
      );
      // Two instances, in the reference's own record format.
      const instances = await listReferenceInstances(discovery, {
        namespace: "dynamo",
        component: "backend",
        endpoint: "generate",
      });
      assert.equal(instances.length, 2, JSON.stringify(instances));
      // And each publishes its KV events on a ZeroMQ channel the reference's router finds.
      const channels = await discovery.list(
        "v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv-events/",
      );
      assert.equal(channels.length, 2, JSON.stringify(channels));
      // And its load on a kv_metrics channel, for the reference frontend's busy checks.
      const loads = await discovery.list(
        "v1/event_channels/namespace/dynamo/component/backend/endpoint/generate/topic/kv_metrics/",
      );
      assert.equal(loads.length, 2, JSON.stringify(loads));
      for (const c of [...channels, ...loads]) {
        assert.match(JSON.parse(c.value).transport.config.endpoint, /^tcp:\/\/127\.0\.0\.1:\d+$/);
      }
      front = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        servers,
      );
      const base = front.base;
      await untilListed(base, "cli-mocker");
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: "cli-mocker",
            messages: [{ role: "user", content: `question ${i}` }],
            max_tokens: 5,
          }),
        });
        const body = await res.json();
        assert.equal(res.status, 200, JSON.stringify(body));
        assert.ok(body.usage.completion_tokens >= 1, JSON.stringify(body));
      }
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      await stopChild(worker);
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "dynamo run in=dyn://... out=echo and out=mocker, no --reference-wire: the reference frontend lists them and streams their answers",
  ignore: python === undefined,
  fn: async () => {
    const { spawnDeno } = await import("./_helpers/process.ts");
    const { stopChild } = await import("./_helpers/frontend.ts");
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const model = await builtinTestModel();
    // Plain workers of ours: registerLlm's record and serveEndpoint's listener, nothing else.
    const plain = (component: string, out: string, name: string, extra: string[] = []) =>
      spawnDeno(
        new URL("../cli/main.ts", import.meta.url).pathname,
        { ...servers, DYN_LOG: "warn", DYN_TCP_RPC_HOST: "127.0.0.1" },
        ["run", `in=dyn://dynamo.${component}.generate`, `out=${out}`, model, "--model-name", name]
          .concat(extra),
      );
    const workers = [
      plain("plainecho", "echo", "cli-plain"),
      plain("plainmock", "mocker", "cli-plain-mocker"),
    ];
    let front: ReferenceFrontend | undefined;
    try {
      for (const worker of workers) {
        await worker.waitFor(
          (l) => typeof l.text === "string" && l.text.includes("dynamo worker serving"),
          60_000,
          "the plain worker to serve",
        );
      }
      front = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        servers,
      );
      const base = front.base;
      const stream = async (name: string, content: string, maxTokens: number) => {
        await untilListed(base, name);
        const res = await fetch(`${base}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({
            model: name,
            messages: [{ role: "user", content }],
            stream: true,
            max_tokens: maxTokens,
          }),
        });
        const text = await res.text();
        assert.equal(res.status, 200, text);
        const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
        assert.equal(events[events.length - 1], "data: [DONE]", text);
        const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
        return {
          chunks: chunks.filter((c) => c.choices?.[0]?.delta?.content).length,
          content: chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join(""),
          usage: chunks.find((c) => c.usage)?.usage,
        };
      };
      const echoed = await stream("cli-plain", "alpha beta gamma", 400);
      assert.match(echoed.content, /alpha beta gamma/);
      assert.ok(echoed.chunks > 3, `one chunk per echoed token expected, got ${echoed.chunks}`);
      const mocked = await stream("cli-plain-mocker", "delta epsilon", 12);
      assert.ok(mocked.chunks >= 2, `the mocker streamed ${JSON.stringify(mocked)}`);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      for (const worker of workers) await stopChild(worker);
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name:
    "a text-input model with no files (an upstream's card) is listed by the reference frontend, which sends it the OpenAI request",
  ignore: python === undefined,
  fn: async () => {
    const { bareUpstreamCard } = await import("../llm/engines/openai_upstream.ts");
    const { publishModelCard } = await import("../llm/model/register.ts");
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    let runtime: DistributedRuntime | undefined;
    let frontend: ReferenceFrontend | undefined;
    let serving: Promise<void> | undefined;
    const seen: Record<string, unknown>[] = [];
    try {
      runtime = await etcdRuntime(etcd, nats);
      const endpoint = runtime.namespace("dynamo").component("upstream").endpoint("generate");
      // A text-input engine (as out=openai's): the OpenAI request in, OpenAI chunks out.
      serving = endpoint.serveEndpoint(async function* (req: Record<string, unknown>) {
        seen.push(req);
        const messages = req.messages as { content: string }[];
        const base = { id: "c1", object: "chat.completion.chunk", created: 1, model: "up-model" };
        for (const word of messages[0]!.content.split(" ")) {
          yield { ...base, choices: [{ index: 0, delta: { content: `${word} ` } }] };
        }
        yield { ...base, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] };
      });
      await publishModelCard(
        endpoint,
        bareUpstreamCard({
          baseUrl: "http://127.0.0.1:9/v1",
          upstreamModel: "up",
          modelName: "up-model",
        }),
      );
      const record = JSON.parse(
        (await runtime.discovery.get(`v1/mdc/dynamo/upstream/generate/${runtime.instanceId}`))!,
      );
      assert.equal(record.card_json.model_input, "Text");
      assert.equal(record.card_json.tokenizer, null);
      frontend = await startReferenceFrontend(
        python!,
        ["--router-mode", "round-robin"],
        { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url },
      );
      const base = frontend.base;
      await untilListed(base, "up-model");
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "up-model",
          messages: [{ role: "user", content: "red green blue" }],
          stream: true,
        }),
      });
      const text = await res.text();
      assert.equal(res.status, 200, text);
      const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
      assert.equal(events[events.length - 1], "data: [DONE]", text);
      const content = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)))
        .map((c) => c.choices?.[0]?.delta?.content ?? "").join("");
      assert.equal(content, "red green blue ");
      assert.equal(seen.length, 1);
      assert.deepEqual(seen[0]!.messages, [{ role: "user", content: "red green blue" }]);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${frontend?.log()}`);
      throw err;
    } finally {
      await frontend?.stop();
      await runtime?.shutdown();
      await serving?.catch(() => {});
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

/** Ten KV blocks (16 tokens each) of prompt per seed, no block shared between seeds. */
const kvPrompt = (seed: number) => Array.from({ length: 160 }, (_, i) => 1000 + seed * 200 + i);

/** Our mocker workers of one reference endpoint, each with its KV events in the reference's format. */
interface KvMockerFleet {
  runtimes: DistributedRuntime[];
  engines: MockerEngine[];
  publishers: ReferenceKvEventPublisher[];
  /** Requests each worker took. */
  served: number[];
  /** Per worker: true to publish its events as lost (for a gap). */
  lose: boolean[];
  /** Runs a prompt on one worker's engine directly (no frontend: only its KV events tell). */
  computeOn(worker: number, tokens: number[]): Promise<void>;
  /** Sends a prompt through the frontend at `base` and checks that `worker` served it. */
  routesTo(base: string, worker: number, tokens: number[], what: string): Promise<void>;
  close(): Promise<void>;
}

/**
 * `n` mocker workers serving `kv-mocker` at dynamo/backend/generate, publishing KV events (the
 * engines' cache as `cache` says: default the mocker's).
 */
async function kvMockerFleet(
  n: number,
  etcd: { url: string },
  nats: { url: string },
  modelPath: string,
  cache: { numGpuBlocks?: number; hostBlocks?: number } = {},
): Promise<KvMockerFleet> {
  const fleet: KvMockerFleet = {
    runtimes: [],
    engines: [],
    publishers: [],
    served: Array(n).fill(0),
    lose: Array(n).fill(false),
    async computeOn(worker, tokens) {
      for await (
        const _ of fleet.engines[worker]!.handler({
          model: "kv-mocker",
          token_ids: tokens,
          stop_conditions: { max_tokens: 1 },
          sampling_options: {},
          eos_token_ids: [],
        } as never, new RuntimeContext())
      ) { /* run it through */ }
    },
    async routesTo(base, worker, tokens, what) {
      const before = [...fleet.served];
      const res = await fetch(`${base}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "kv-mocker", prompt: tokens, max_tokens: 2 }),
      });
      const body = await res.json();
      assert.equal(res.status, 200, JSON.stringify(body));
      assert.equal(
        fleet.served[worker]! - before[worker]!,
        1,
        `${what}, cached on worker ${worker}, went elsewhere (served ${fleet.served})`,
      );
    },
    async close() {
      for (const c of closers) await c();
      for (const e of fleet.engines) await e.close();
      for (const rt of fleet.runtimes) await rt.shutdown();
    },
  };
  const closers: (() => Promise<void>)[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const runtime = await etcdRuntime(etcd, nats);
      fleet.runtimes.push(runtime);
      const target = { namespace: "dynamo", component: "backend", endpoint: "generate" };
      // The publisher starts once the worker serves; the engine reaches it through this.
      const events: { pub?: ReferenceKvEventPublisher } = {};
      const engine = new MockerEngine({
        speedupRatio: 20,
        blockSize: 16,
        ...cache,
        onKvEvent: (data, tier) =>
          fleet.lose[i] ? events.pub?.publishLost(data, tier) : events.pub?.publish(data, tier),
      });
      fleet.engines.push(engine);
      const server = await serveReferenceEndpoint({
        runtime,
        ...target,
        handler: async function* (req: Record<string, unknown>, ctx: Context) {
          fleet.served[i]!++;
          for await (const out of engine.handler(req as never, ctx)) yield out as never;
        },
        card: await referenceModelCard({
          modelPath,
          displayName: "kv-mocker",
          kvCacheBlockSize: 16,
          kvEvents: true,
        }),
      });
      const pub = await ReferenceKvEventPublisher.start({ runtime, ...target });
      events.pub = pub;
      fleet.publishers.push(pub);
      closers.push(() => pub.close());
      closers.push(() => server.close());
    }
  } catch (err) {
    await fleet.close();
    throw err;
  }
  return fleet;
}

Deno.test({
  name: "the reference's KV router routes by our workers' KV events (ZeroMQ, its format)",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const modelPath = await builtinTestModel();
    let fleet: KvMockerFleet | undefined;
    let front: ReferenceFrontend | undefined;
    try {
      fleet = await kvMockerFleet(2, etcd, nats, modelPath);
      const { publishers } = fleet;
      front = await startReferenceFrontend(
        python!,
        ["--router-mode", "kv"],
        servers,
      );
      const base = front.base;
      await untilListed(base, "kv-mocker");
      await until(
        "the reference router to follow both workers' event channels",
        30_000,
        () => Promise.resolve(publishers.every((p) => p.subscribers > 0) ? true : undefined),
      );
      // Each prompt is computed on one worker directly, not through the frontend: only the
      // KV events can tell the router where it is cached.
      for (const [worker, seed] of [[1, 1], [0, 2]] as const) {
        await fleet.computeOn(worker, kvPrompt(seed));
      }
      await new Promise((r) => setTimeout(r, 1000)); // the events on their way
      for (const [worker, seed] of [[1, 1], [0, 2], [1, 1], [0, 2]] as const) {
        await fleet.routesTo(base, worker, kvPrompt(seed), `prompt ${seed}`);
      }
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      await fleet?.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "the reference's KV router recovers our workers' KV state through their query",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const modelPath = await builtinTestModel();
    const fleet = await kvMockerFleet(2, etcd, nats, modelPath);
    const { runtimes, publishers, lose } = fleet;
    let front: ReferenceFrontend | undefined;
    const computeOn = (worker: number, tokens: number[]) => fleet.computeOn(worker, tokens);
    const prompt = kvPrompt;
    const routesTo = (base: string, worker: number, seed: number) =>
      fleet.routesTo(base, worker, prompt(seed), `prompt ${seed}`);
    try {
      // Before any router follows them: these events reach nobody.
      await computeOn(1, prompt(1));
      await computeOn(0, prompt(2));
      assert.ok(publishers.every((p) => p.lastEventId > 0 && p.subscribers === 0));
      front = await startReferenceFrontend(
        python!,
        ["--router-mode", "kv"],
        servers,
      );
      const base = front.base;
      await untilListed(base, "kv-mocker");
      await until(
        "the reference router to query both workers' KV state",
        30_000,
        () => Promise.resolve(publishers.every((p) => p.queriesServed > 0) ? true : undefined),
      );
      // The reference router's request: all the worker holds (no start), for recovery.
      for (const [i, p] of publishers.entries()) {
        assert.deepEqual(p.lastQuery, {
          worker_id: BigInt(`0x${runtimes[i]!.leaseId}`),
          dp_rank: 0,
          start_event_id: null,
          end_event_id: null,
          supports_tree_dump_failed: true,
          kind: "recovery",
        });
      }
      await new Promise((r) => setTimeout(r, 500)); // the answers applied
      for (const [worker, seed] of [[1, 1], [0, 2], [1, 1], [0, 2]] as const) {
        await routesTo(base, worker, seed);
      }
      // A gap: worker 0 caches a prompt whose events are lost, then one whose events are sent;
      // the router sees the ids jump, asks for the missing ones, and knows both.
      const queried = publishers[0]!.queriesServed;
      const firstLost = publishers[0]!.lastEventId + 1;
      lose[0] = true;
      await computeOn(0, prompt(3));
      lose[0] = false;
      await computeOn(0, prompt(4));
      await until(
        "the reference router to query worker 0 after the gap",
        30_000,
        () => Promise.resolve(publishers[0]!.queriesServed > queried ? true : undefined),
      );
      // Asked from the first missing id on.
      assert.equal(publishers[0]!.lastQuery?.start_event_id, firstLost);
      await new Promise((r) => setTimeout(r, 500));
      for (const seed of [3, 4, 3]) await routesTo(base, 0, seed);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      await fleet?.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "the reference frontend reads our workers' load (kv_metrics) and skips a busy one",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    const modelPath = await builtinTestModel();
    const runtimes: DistributedRuntime[] = [];
    const closers: (() => Promise<void>)[] = [];
    const loads: ReferenceLoadPublisher[] = [];
    const served = [0, 0];
    const reported = [
      { activeDecodeBlocks: 0, activePrefillTokens: 0, kvUsedBlocks: 0 },
      { activeDecodeBlocks: 0, activePrefillTokens: 0, kvUsedBlocks: 0 },
    ];
    let front: ReferenceFrontend | undefined;
    const reporting = setInterval(() => loads.forEach((l, i) => l.publish(reported[i])), 100);
    try {
      for (let i = 0; i < 2; i++) {
        const runtime = await etcdRuntime(etcd, nats);
        runtimes.push(runtime);
        const target = { namespace: "dynamo", component: "backend", endpoint: "generate" };
        const echo = echoEngine({ delayMs: 1 });
        const server = await serveReferenceEndpoint({
          runtime,
          ...target,
          handler: async function* (req: Record<string, unknown>, ctx: Context) {
            served[i]!++;
            for await (const out of await echo(req as never, ctx)) yield out as never;
          },
          card: await referenceModelCard({
            modelPath,
            displayName: "busy-echo",
            kvCacheBlockSize: 16,
            totalKvBlocks: 100,
          }),
        });
        const load = await ReferenceLoadPublisher.start({ runtime, ...target });
        loads.push(load);
        closers.push(() => load.close());
        closers.push(() => server.close());
      }
      front = await startReferenceFrontend(
        python!,
        [
          "--router-mode",
          "round-robin",
          "--active-decode-blocks-threshold",
          "0.5",
        ],
        servers,
      );
      const base = front.base;
      await untilListed(base, "busy-echo");
      await until(
        "the reference frontend to follow both workers' kv_metrics",
        30_000,
        () => Promise.resolve(loads.every((l) => l.subscribers > 0) ? true : undefined),
      );
      const send = async (n: number) => {
        const before = [...served];
        for (let k = 0; k < n; k++) {
          const res = await fetch(`${base}/v1/chat/completions`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({
              model: "busy-echo",
              messages: [{ role: "user", content: `hello ${k}` }],
              max_tokens: 2,
            }),
          });
          const body = await res.json();
          assert.equal(res.status, 200, JSON.stringify(body));
        }
        return served.map((s, i) => s - before[i]!);
      };
      // Worker 0 says 90 of its 100 blocks are taken by running requests: past 0.5, busy.
      reported[0] = { activeDecodeBlocks: 90, activePrefillTokens: 0, kvUsedBlocks: 90 };
      await new Promise((r) => setTimeout(r, 1000));
      assert.deepEqual(await send(6), [0, 6], "a busy worker took requests");
      // Its load gone, it takes its turn again.
      reported[0] = { activeDecodeBlocks: 0, activePrefillTokens: 0, kvUsedBlocks: 0 };
      await new Promise((r) => setTimeout(r, 1000));
      const after = await send(6);
      assert.ok(after[0]! >= 2, `worker 0 did not come back: ${after}`);
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      clearInterval(reporting);
      await front?.stop();
      for (const c of closers) await c();
      for (const rt of runtimes) await rt.shutdown();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});

Deno.test({
  name: "the reference's KV router follows our workers' host-memory tier (storage_tier events)",
  ignore: python === undefined,
  fn: async () => {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const servers = { ETCD_ENDPOINTS: etcd.url, NATS_SERVER: nats.url };
    // 24 GPU blocks: seven prompts of 10 blocks on one worker send the first four to its host
    // tier.
    const fleet = await kvMockerFleet(2, etcd, nats, await builtinTestModel(), {
      numGpuBlocks: 24,
      hostBlocks: 256,
    });
    let front: ReferenceFrontend | undefined;
    try {
      front = await startReferenceFrontend(python!, ["--router-mode", "kv"], servers);
      await untilListed(front.base, "kv-mocker");
      await until(
        "the reference router to follow both workers' event channels",
        30_000,
        () => Promise.resolve(fleet.publishers.every((p) => p.subscribers > 0) ? true : undefined),
      );
      for (const seed of [1, 2, 3, 4, 5, 6, 7]) await fleet.computeOn(1, kvPrompt(seed));
      const bm = fleet.engines[1]!.blockManager;
      for (const seed of [1, 2, 3, 4]) {
        const hashes = hashPromptBlocks(kvPrompt(seed), 16).map((b) => b.sequenceHash);
        assert.equal(bm.matchPrefix(hashes), 0, `prompt ${seed} is off worker 1's GPU`);
        assert.equal(bm.heldPrefix(hashes), 10, `prompt ${seed} is in worker 1's host memory`);
      }
      await new Promise((r) => setTimeout(r, 1000)); // the events on their way
      // Its router read the moves (stored in host_pinned, then removed from the device): prompts
      // held only in worker 1's host memory go to worker 1 (without the host-tier events, the
      // router places each as a prompt nobody holds: the four would all meet worker 1 by chance).
      for (const seed of [1, 2, 3, 4]) {
        await fleet.routesTo(front.base, 1, kvPrompt(seed), `prompt ${seed} (host memory)`);
      }
    } catch (err) {
      console.error(`reference frontend log (tail):\n${front?.log()}`);
      throw err;
    } finally {
      await front?.stop();
      await fleet.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
