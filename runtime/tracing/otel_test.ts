import assert from "node:assert/strict";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import { InvalidArgumentError } from "../errors.ts";
import { createTracing, tracingFromEnv } from "./otel.ts";

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const SPAN = "b7ad6b7169203331";

Deno.test("createTracing: a span under a traceparent, its child under it, tracestate carried on", async () => {
  const exporter = new InMemorySpanExporter();
  const tracing = await createTracing({ serviceName: "unit", exporters: [exporter] });
  try {
    const root = tracing.startSpan("root", {
      kind: "server",
      traceparent: `00-${TRACE}-${SPAN}-01`,
      tracestate: "congo=t61rcWkgMzE",
    });
    assert.equal(root.traceId, TRACE);
    assert.equal(root.traceparent, `00-${TRACE}-${root.spanId}-01`);
    assert.equal(root.tracestate, "congo=t61rcWkgMzE");
    const child = root.child("child", { attributes: { n: 3 } });
    assert.equal(child.traceId, TRACE);
    child.fail(new Error("boom"));
    child.end();
    child.end(); // a second end is ignored
    root.end();
    const spans = exporter.getFinishedSpans();
    assert.deepEqual(spans.map((s) => s.name), ["child", "root"]);
    const [c, r] = spans;
    assert.equal(r!.parentSpanContext?.spanId, SPAN);
    assert.equal(c!.parentSpanContext?.spanId, root.spanId);
    assert.equal(c!.attributes.n, 3);
    assert.equal(c!.status.code, 2); // ERROR
    assert.equal(r!.resource.attributes["service.name"], "unit");
  } finally {
    await tracing.shutdown();
  }
});

Deno.test("createTracing: a malformed traceparent starts a new trace", async () => {
  const exporter = new InMemorySpanExporter();
  const tracing = await createTracing({ serviceName: "unit", exporters: [exporter] });
  try {
    const span = tracing.startSpan("root", { traceparent: "00-nothex-01" });
    span.end();
    assert.notEqual(span.traceId, TRACE);
    assert.match(span.traceId, /^[0-9a-f]{32}$/);
    assert.equal(exporter.getFinishedSpans()[0]!.parentSpanContext, undefined);
  } finally {
    await tracing.shutdown();
  }
});

Deno.test("createTracing refuses an empty service name and a non-http OTLP URL", async () => {
  await assert.rejects(createTracing({ serviceName: " " }), InvalidArgumentError);
  await assert.rejects(
    createTracing({ serviceName: "x", otlpTracesUrl: "grpc://collector:4317" }),
    /otlpTracesUrl must be an http\(s\) URL/,
  );
});

Deno.test("tracingFromEnv: off without an endpoint or with OTEL_SDK_DISABLED, bad values named", async () => {
  assert.equal(await tracingFromEnv({}), undefined);
  assert.equal(
    await tracingFromEnv({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318",
      OTEL_SDK_DISABLED: "true",
    }),
    undefined,
  );
  await assert.rejects(
    tracingFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "localhost:4318" }),
    /OTEL_EXPORTER_OTLP_ENDPOINT must be an http\(s\) URL, got "localhost:4318"/,
  );
  await assert.rejects(
    tracingFromEnv({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318",
      OTEL_EXPORTER_OTLP_HEADERS: "novalue",
    }),
    /OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs/,
  );
  const tracing = await tracingFromEnv({
    OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318/",
    OTEL_SERVICE_NAME: "named",
  });
  assert.equal(tracing?.serviceName, "named");
  await tracing?.shutdown();
});

Deno.test("tracingFromEnv: OTEL_EXPORTER_OTLP_PROTOCOL picks JSON or protobuf, and refuses gRPC", async () => {
  await assert.rejects(
    tracingFromEnv({
      OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4317",
      OTEL_EXPORTER_OTLP_PROTOCOL: "grpc",
    }),
    /OTEL_EXPORTER_OTLP_PROTOCOL must be "http\/json" or "http\/protobuf" \(OTLP over HTTP; gRPC is not supported\), got "grpc"/,
  );
  // What arrives at a collector for each protocol.
  const got: { type: string | null; body: Uint8Array }[] = [];
  const listening = Promise.withResolvers<Deno.NetAddr>();
  const collector = Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen: (a) => listening.resolve(a as Deno.NetAddr) },
    async (req) => {
      got.push({
        type: req.headers.get("content-type"),
        body: new Uint8Array(await req.arrayBuffer()),
      });
      return new Response(null, { status: 200 });
    },
  );
  try {
    const base = `http://127.0.0.1:${(await listening.promise).port}`;
    for (const protocol of ["http/protobuf", "http/json"]) {
      const tracing = await tracingFromEnv({
        OTEL_EXPORTER_OTLP_ENDPOINT: base,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: protocol,
      });
      assert.ok(tracing);
      tracing.startSpan("work", { traceparent: `00-${TRACE}-${SPAN}-01` }).end();
      await tracing.shutdown();
    }
    assert.equal(got.length, 2, "one export per protocol");
    const [proto, json] = got;
    assert.equal(proto!.type, "application/x-protobuf");
    // Protobuf carries the trace id as its 16 raw bytes.
    const raw = Uint8Array.from(TRACE.match(/../g)!.map((h) => parseInt(h, 16)));
    assert.ok(
      proto!.body.some((_, i) => raw.every((b, j) => proto!.body[i + j] === b)),
      "the protobuf body holds the trace id",
    );
    assert.match(json!.type ?? "", /^application\/json/);
    assert.match(new TextDecoder().decode(json!.body), new RegExp(TRACE));
  } finally {
    await collector.shutdown();
  }
});
