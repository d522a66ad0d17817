// Tracing across processes: the frontend's spans (HTTP request, preprocess, route, request-plane
// hop) and the worker's engine span form one trace with correct parent links, the W3C
// traceparent carried from the HTTP request through the request plane (etcd + NATS, TCP plane)
// into the worker's log lines; and the OTLP export that OTEL_EXPORTER_OTLP_ENDPOINT turns on.

import assert from "node:assert/strict";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace-base";
import {
  builtinTestModel,
  createFrontend,
  createTracing,
  DistributedRuntime,
  echoEngine,
  EmbeddedCluster,
  ModelInput,
  ModelManager,
  ModelType,
  registerLlm,
} from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend, stopChild } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import {
  haveServers,
  type Servers,
  startEtcd,
  startNats,
  startServers,
} from "./_helpers/servers.ts";
import { referencePython } from "./_helpers/reference.ts";
import { EtcdDiscovery } from "../runtime/discovery/etcd.ts";
import {
  ReferenceClient,
  referenceTokensRequest,
  waitForReferenceInstances,
} from "../runtime/reference/mod.ts";
import type { ReportedSpan } from "./_helpers/traced_worker.ts";

const TRACED_WORKER = new URL("./_helpers/traced_worker.ts", import.meta.url).pathname;
const LLM_WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN = "00f067aa0ba902b7";
const TRACEPARENT = `00-${CLIENT_TRACE}-${CLIENT_SPAN}-01`;
// OpenTelemetry's SpanKind numbers.
const SERVER = 1;
const CLIENT = 2;

/** A span's name, ids and parent, from the SDK's in-memory exporter or a worker's report. */
interface SpanLine {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  attributes: Record<string, unknown>;
}

function fromSdk(s: ReadableSpan): SpanLine {
  return {
    name: s.name,
    kind: s.kind,
    traceId: s.spanContext().traceId,
    spanId: s.spanContext().spanId,
    parentSpanId: s.parentSpanContext?.spanId,
    attributes: { ...s.attributes },
  };
}

function one(spans: SpanLine[], name: string, traceId: string): SpanLine {
  const found = spans.filter((s) => s.name === name && s.traceId === traceId);
  assert.equal(
    found.length,
    1,
    `expected one span ${name} in trace ${traceId}, got ${found.length}: ${
      JSON.stringify(spans.map((s) => [s.name, s.traceId]))
    }`,
  );
  return found[0]!;
}

async function chat(base: string, headers: Record<string, string> = {}, stream = false) {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: "user", content: "hello tracing" }],
      max_tokens: 4,
      stream,
    }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `chat answered ${res.status}: ${text}`);
  return text;
}

async function waitForModel(base: string): Promise<void> {
  await eventually(
    async () => {
      const r = await fetch(`${base}/v1/models`);
      const body = await r.json() as { data: { id: string }[] };
      return body.data.some((m) => m.id === MODEL);
    },
    20_000,
    "the worker's model to appear at the frontend",
  );
}

for (const plane of ["tcp", "nats"] as const) {
  Deno.test({
    name:
      `one trace spans the frontend's and the worker's spans, parents linked, traceparent in the worker's logs (${plane} request plane)`,
    ignore: !haveServers(),
    async fn() {
      const servers: Servers = await startServers();
      const stderr: string[] = [];
      let worker: ChildHandle | undefined;
      let runtime: DistributedRuntime | undefined;
      let models: ModelManager | undefined;
      let server: Deno.HttpServer | undefined;
      try {
        worker = spawnDeno(
          TRACED_WORKER,
          { ...servers.env, DYN_REQUEST_PLANE: plane, DYN_LOG_JSON: "1" },
          [await builtinTestModel()],
          { onStderrLine: (l) => stderr.push(l) },
        );
        await worker.waitFor((l) => typeof l.ready === "string", 30_000, "the worker to serve");

        const exporter = new InMemorySpanExporter();
        const tracing = await createTracing({ serviceName: "frontend", exporters: [exporter] });
        runtime = await DistributedRuntime.connect({
          ...servers.runtimeOptions,
          requestPlane: plane,
          tracing,
        });
        models = new ModelManager(runtime);
        await models.start();
        const frontend = createFrontend({ models, tracing });
        const listening = Promise.withResolvers<Deno.NetAddr>();
        server = Deno.serve(
          { port: 0, hostname: "127.0.0.1", onListen: (a) => listening.resolve(a as Deno.NetAddr) },
          frontend.fetch,
        );
        const base = `http://127.0.0.1:${(await listening.promise).port}`;
        await waitForModel(base);

        // A request that carries its client's trace context, and one that starts its own trace.
        await chat(base, { traceparent: TRACEPARENT, tracestate: "vendor=abc" });
        await chat(base, {}, true);

        await stopChild(worker);
        const report = await worker.waitFor<{ spans: ReportedSpan[] }>(
          (l) => Array.isArray(l.spans),
          5_000,
          "the worker's spans",
        );
        const workerSpans: SpanLine[] = report.spans;
        const frontSpans = exporter.getFinishedSpans().map(fromSdk);

        // The client's trace: HTTP span under the client's span, then the stages under it.
        const http = one(frontSpans, "POST /v1/chat/completions", CLIENT_TRACE);
        assert.equal(http.kind, SERVER);
        assert.equal(http.parentSpanId, CLIENT_SPAN);
        assert.equal(http.attributes["gen_ai.request.model"], MODEL);
        const pre = one(frontSpans, "preprocess", CLIENT_TRACE);
        assert.equal(pre.parentSpanId, http.spanId);
        assert.ok(Number(pre.attributes["gen_ai.usage.input_tokens"]) > 0);
        const route = one(frontSpans, "route", CLIENT_TRACE);
        assert.equal(route.parentSpanId, http.spanId);
        assert.equal(route.attributes["dynamo.router_mode"], "round-robin");
        const hop = one(frontSpans, "request_plane", CLIENT_TRACE);
        assert.equal(hop.parentSpanId, route.spanId);
        assert.equal(hop.kind, CLIENT);
        assert.equal(hop.attributes["dynamo.instance_id"], route.attributes["dynamo.instance_id"]);
        // ... and across the process boundary, the worker's span under the hop.
        const engine = one(workerSpans, "engine", CLIENT_TRACE);
        assert.equal(engine.kind, SERVER);
        assert.equal(engine.parentSpanId, hop.spanId);
        assert.equal(engine.attributes["dynamo.request_id"], http.attributes["dynamo.request_id"]);

        // The request without a traceparent: a trace of its own, still one across both processes.
        const roots = frontSpans.filter((s) =>
          s.name === "POST /v1/chat/completions" && s.traceId !== CLIENT_TRACE
        );
        assert.equal(roots.length, 1, "one more HTTP span, in a new trace");
        const root = roots[0]!;
        assert.equal(root.parentSpanId, undefined);
        const rootHop = one(frontSpans, "request_plane", root.traceId);
        assert.equal(one(workerSpans, "engine", root.traceId).parentSpanId, rootHop.spanId);

        // The worker's log lines for the request name its trace and its span.
        const logs = stderr.flatMap((l) => {
          try {
            return [JSON.parse(l) as Record<string, unknown>];
          } catch {
            return [];
          }
        });
        const traced = logs.filter((l) => l.trace_id === CLIENT_TRACE);
        assert.ok(
          traced.some((l) =>
            l.msg === "request received" && l.span_id === engine.spanId &&
            l.parent_id === hop.spanId
          ),
          `no "request received" line with the trace's ids in the worker's log: ${
            JSON.stringify(logs.slice(-10))
          }`,
        );
        assert.ok(traced.some((l) => l.msg === "request completed" && l.span_id === engine.spanId));
        await tracing.shutdown();
      } finally {
        await server?.shutdown();
        await models?.close();
        await runtime?.shutdown();
        if (worker) await stopChild(worker);
        await servers.stop();
      }
    },
  });
}

Deno.test("in one process: a malformed traceparent starts a new trace, a failed request's span says so", async () => {
  const exporter = new InMemorySpanExporter();
  const tracing = await createTracing({ serviceName: "one-process", exporters: [exporter] });
  const cluster = new EmbeddedCluster();
  const worker = await DistributedRuntime.connect({ embedded: cluster, tracing });
  const front = await DistributedRuntime.connect({ embedded: cluster, tracing });
  const models = new ModelManager(front);
  try {
    const endpoint = worker.namespace("one").component("backend").endpoint("generate");
    const serving = endpoint.serveEndpoint(echoEngine());
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat,
      endpoint,
      await builtinTestModel(),
    );
    await models.start();
    const app = createFrontend({ models, tracing });
    const post = (body: unknown, traceparent: string) =>
      app.fetch(
        new Request("http://x/v1/chat/completions", {
          method: "POST",
          headers: { "content-type": "application/json", traceparent },
          body: JSON.stringify(body),
        }),
      );
    await eventually(
      async () =>
        (await (await app.fetch(new Request("http://x/v1/models"))).text()).includes(MODEL),
      10_000,
      "the model to appear",
    );
    const ok = await post(
      { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 },
      "00-not-a-traceparent-01",
    );
    assert.equal(ok.status, 200, await ok.text());
    const missing = await post(
      { model: "no-such-model", messages: [{ role: "user", content: "hi" }] },
      TRACEPARENT,
    );
    assert.equal(missing.status, 404);
    await missing.body?.cancel();
    await eventually(
      () => Promise.resolve(exporter.getFinishedSpans().some((s) => s.name === "engine")),
      5_000,
      "the engine span to end",
    );

    const spans = exporter.getFinishedSpans();
    const http = spans.find((s) => s.name === "POST /v1/chat/completions" && s.status.code !== 2);
    assert.ok(http, "the served request's HTTP span");
    assert.equal(http.parentSpanContext, undefined, "a malformed traceparent is no parent");
    const lines = spans.map(fromSdk).filter((s) => s.traceId === http.spanContext().traceId);
    const hop = one(lines, "request_plane", http.spanContext().traceId);
    assert.equal(one(lines, "engine", hop.traceId).parentSpanId, hop.spanId);
    // The 404: a span in the client's trace, marked failed.
    const failed = spans.find((s) => s.spanContext().traceId === CLIENT_TRACE);
    assert.ok(failed, "the failed request's HTTP span");
    assert.equal(failed.parentSpanContext?.spanId, CLIENT_SPAN);
    assert.equal(failed.status.code, 2);
    assert.match(failed.status.message ?? "", /no-such-model/);
    await worker.shutdown();
    await serving;
  } finally {
    await models.close();
    await front.shutdown();
    await worker.shutdown();
    await tracing.shutdown();
  }
});

/** OTLP/HTTP JSON as a collector receives it (the parts read here). */
interface OtlpExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: { stringValue?: string } }[] };
    scopeSpans: {
      spans: { name: string; traceId: string; spanId: string; parentSpanId?: string }[];
    }[];
  }[];
}

Deno.test({
  name: "OTEL_EXPORTER_OTLP_ENDPOINT sends the frontend's and the worker's spans to a collector",
  ignore: !haveServers(),
  async fn() {
    // The collector: records what arrives at /v1/traces.
    const received: { path: string; type: string | null; body: OtlpExport }[] = [];
    const listening = Promise.withResolvers<Deno.NetAddr>();
    const collector = Deno.serve(
      { port: 0, hostname: "127.0.0.1", onListen: (a) => listening.resolve(a as Deno.NetAddr) },
      async (req) => {
        const path = new URL(req.url).pathname;
        received.push({ path, type: req.headers.get("content-type"), body: await req.json() });
        return Response.json({});
      },
    );
    const endpoint = `http://127.0.0.1:${(await listening.promise).port}`;
    const servers = await startServers();
    const children: ChildHandle[] = [];
    try {
      const otel = (service?: string) => ({
        ...servers.env,
        DYN_LOG: "warn",
        OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
        ...(service === undefined ? {} : { OTEL_SERVICE_NAME: service }),
      });
      const worker = spawnDeno(LLM_WORKER, otel(), [await builtinTestModel()]);
      children.push(worker);
      const front = spawnFrontend(otel("test-frontend"));
      children.push(front);
      const base = await frontendUrl(front);
      await worker.waitFor((l) => typeof l.ready === "string", 30_000, "the worker to serve");
      await waitForModel(base);
      await chat(base, { traceparent: TRACEPARENT }, true);
      // A graceful stop exports what is left.
      await Promise.all(children.map((c) => stopChild(c)));

      const byService = new Map<string, OtlpExport["resourceSpans"][number]["scopeSpans"]>();
      for (const r of received) {
        assert.equal(r.path, "/v1/traces");
        assert.match(r.type ?? "", /^application\/json/);
        for (const rs of r.body.resourceSpans) {
          const name = rs.resource.attributes.find((a) => a.key === "service.name")?.value
            .stringValue ?? "";
          byService.set(name, [...(byService.get(name) ?? []), ...rs.scopeSpans]);
        }
      }
      const spansOf = (service: string) =>
        (byService.get(service) ?? []).flatMap((s) => s.spans)
          .filter((s) => s.traceId === CLIENT_TRACE);
      const frontSpans = spansOf("test-frontend");
      // Named by OTEL_SERVICE_NAME, or (the worker) by dynamoWorker's default.
      const workerSpans = spansOf("dynamo-worker");
      const http = frontSpans.find((s) => s.name === "POST /v1/chat/completions");
      assert.ok(http, `no HTTP span from test-frontend; services: ${[...byService.keys()]}`);
      assert.equal(http.parentSpanId, CLIENT_SPAN);
      const hop = frontSpans.find((s) => s.name === "request_plane");
      assert.ok(hop, "no request_plane span from test-frontend");
      const engine = workerSpans.find((s) => s.name === "engine");
      assert.ok(engine, `no engine span from dynamo-worker; services: ${[...byService.keys()]}`);
      assert.equal(engine.parentSpanId, hop.spanId);
    } finally {
      for (const c of children) await stopChild(c);
      await servers.stop();
      await collector.shutdown();
    }
  },
});

const ROOT = new URL("..", import.meta.url).pathname;

Deno.test("tracing off loads nothing of the OpenTelemetry SDK: the library and the CLI import it only dynamically", async () => {
  for (const entry of ["mod.ts", "cli/main.ts"]) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", entry],
      cwd: ROOT,
      stdout: "piped",
      stderr: "null",
      signal: AbortSignal.timeout(60_000),
    }).output();
    assert.equal(out.code, 0, `deno info ${entry} failed`);
    const graph = JSON.parse(new TextDecoder().decode(out.stdout)) as {
      modules: {
        specifier: string;
        dependencies?: { specifier: string; code?: unknown; isDynamic?: boolean }[];
      }[];
    };
    const edges = graph.modules.flatMap((m) =>
      (m.dependencies ?? [])
        .filter((d) => d.specifier.startsWith("@opentelemetry/") && d.code !== undefined)
        .map((d) => ({ from: m.specifier, to: d.specifier, dynamic: d.isDynamic === true }))
    );
    assert.ok(edges.length > 0, `${entry} does not reach the SDK at all: the check is void`);
    const loadedStatically = edges.filter((e) => !e.dynamic);
    assert.deepEqual(loadedStatically, [], `${entry} imports the SDK statically`);
  }
});

const referencePy = haveServers()
  ? await referencePython("tracing_test (the reference interop test)")
  : undefined;

Deno.test({
  name:
    "a reference (ai-dynamo 1.6.1) worker takes our traceparent from the request headers into its log lines",
  ignore: referencePy === undefined,
  async fn() {
    const [etcd, nats] = await Promise.all([startEtcd(), startNats()]);
    const mocker = new Deno.Command(referencePy!, {
      args: [
        "-m",
        "dynamo.mocker",
        "--model-path",
        await builtinTestModel(),
        "--model-name",
        MODEL,
      ],
      env: {
        ETCD_ENDPOINTS: etcd.url,
        NATS_SERVER: nats.url,
        DYN_TCP_RPC_HOST: "127.0.0.1",
        DYN_EVENT_PLANE_HOST: "127.0.0.1",
        DYN_TCP_RESPONSE_STREAM_HOST: "127.0.0.1",
        DYN_SYSTEM_HOST: "127.0.0.1",
        DYN_LOG: "info",
        DYN_LOGGING_JSONL: "1",
      },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const output = Promise.all([
      new Response(mocker.stdout).text(),
      new Response(mocker.stderr).text(),
    ])
      .then((parts) => parts.join("\n"));
    const discovery = new EtcdDiscovery({ endpoints: [etcd.url] });
    const client = ReferenceClient.create({ ackTimeoutMs: 5_000, idleTimeoutMs: 15_000 });
    let stopped = false;
    const stop = async () => {
      if (stopped) return;
      stopped = true;
      mocker.kill("SIGTERM");
      const timer = setTimeout(() => mocker.kill("SIGKILL"), 10_000);
      await mocker.status;
      clearTimeout(timer);
    };
    try {
      const [worker] = await waitForReferenceInstances(discovery, {
        namespace: "dynamo",
        component: "backend",
        endpoint: "generate",
      }, { timeoutMs: 40_000 });
      const request = referenceTokensRequest({
        model: MODEL,
        tokenIds: [9707, 11, 1879, 0],
        maxTokens: 3,
        ignoreEos: true,
      });
      // A malformed traceparent is refused before anything is sent.
      await assert.rejects(
        client.generate(worker!, request, { traceparent: "00-xyz-01" }).next(),
        /traceparent must be a W3C traceparent/,
      );
      let tokens = 0;
      for await (const out of client.generate(worker!, request, { traceparent: TRACEPARENT })) {
        tokens += out.token_ids.length;
      }
      assert.equal(tokens, 3);
      await stop();
      const lines = (await output).split("\n").flatMap((l) => {
        try {
          return [JSON.parse(l) as Record<string, unknown>];
        } catch {
          return [];
        }
      });
      const received = lines.find((l) => l.message === "request received");
      assert.ok(received, `no "request received" line: ${(await output).slice(-1500)}`);
      assert.equal(received.trace_id, CLIENT_TRACE);
      assert.equal(received.parent_id, CLIENT_SPAN);
    } finally {
      await client.close();
      await stop();
      await discovery.close();
      await Promise.all([etcd.stop(), nats.stop()]);
    }
  },
});
