import assert from "node:assert/strict";
import fc from "fast-check";
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { counterSeries, gaugeSeries, histogramSeries } from "./fast_series.ts";

function metricsOf(registry: Registry) {
  const registers = [registry];
  registry.setDefaultLabels({ dynamo_namespace: "ns" });
  return {
    h: new Histogram({
      name: "h_seconds",
      help: "h",
      labelNames: ["model"],
      buckets: [0.001, 0.01, 0.1, 1, 2.5],
      registers,
    }),
    c: new Counter({ name: "c_total", help: "c", labelNames: ["model", "status"], registers }),
    g: new Gauge({ name: "g", help: "g", labelNames: ["model"], registers }),
  };
}

Deno.test("fast series expose exactly what prom-client's own children expose", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.record({
          model: fc.constantFrom("a", "b"),
          value: fc.oneof(
            fc.constantFrom(0, 0.001, 0.01, 1, 2.5, 3, 1e9),
            fc.double({ min: 0, max: 5, noNaN: true }),
          ),
          op: fc.constantFrom("observe", "inc", "up", "down"),
        }),
        { maxLength: 60 },
      ),
      async (ops) => {
        const stock = new Registry();
        const fast = new Registry();
        const s = metricsOf(stock);
        const f = metricsOf(fast);
        for (const { model, value, op } of ops) {
          const labels = { model };
          if (op === "observe") {
            s.h.labels(labels).observe(value);
            histogramSeries(f.h, labels).observe(value);
          } else if (op === "inc") {
            s.c.labels({ model, status: "ok" }).inc();
            counterSeries(f.c, { model, status: "ok" }).inc();
          } else if (op === "up") {
            s.g.labels(labels).inc();
            gaugeSeries(f.g, labels).inc();
          } else {
            s.g.labels(labels).dec();
            gaugeSeries(f.g, labels).dec();
          }
        }
        assert.equal(await fast.metrics(), await stock.metrics());
      },
    ),
    { numRuns: 200, seed: 11 },
  );
});

Deno.test("a fast series keeps counting after its metric is reset, from zero", async () => {
  const registry = new Registry();
  const { h, c } = metricsOf(registry);
  const ttft = histogramSeries(h, { model: "a" });
  const done = counterSeries(c, { model: "a", status: "ok" });
  ttft.observe(0.5);
  done.inc();
  registry.resetMetrics();
  ttft.observe(0.005);
  done.inc();
  const text = await registry.metrics();
  assert.match(text, /h_seconds_count\{dynamo_namespace="ns",model="a"\} 1\n/);
  assert.match(text, /h_seconds_sum\{dynamo_namespace="ns",model="a"\} 0.005\n/);
  assert.match(text, /h_seconds_bucket\{le="0.01",dynamo_namespace="ns",model="a"\} 1\n/);
  assert.match(text, /c_total\{model="a",status="ok",dynamo_namespace="ns"\} 1\n/);
});

Deno.test("a fast histogram refuses a value that is not a finite number", () => {
  const { h } = metricsOf(new Registry());
  assert.throws(() => histogramSeries(h, { model: "a" }).observe(NaN), TypeError);
});
