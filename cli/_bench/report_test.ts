// The bench report's figures: throughput over time counts every output token once, in the
// bin where it arrived; the charts carry axes with units; the page escapes what it shows.

import assert from "node:assert/strict";
import type { RequestResult } from "./replay.ts";
import {
  renderChart,
  renderHitRate,
  renderReportHtml,
  renderThroughput,
  summarizeMode,
  throughputSeries,
} from "./report.ts";

function result(startMs: number, ttftMs: number, itlMs: number[], outputTokens: number) {
  return {
    ok: true,
    ttftMs,
    itlMs,
    promptTokens: 32,
    outputTokens,
    cachedTokens: 16,
    latencyMs: ttftMs + itlMs.reduce((a, b) => a + b, 0),
    startMs,
  } satisfies RequestResult;
}

Deno.test("throughputSeries puts each token in the bin where it arrived, as tokens per second", () => {
  const results: RequestResult[] = [
    result(0, 100, [200, 200], 3), // tokens at 0.1 s, 0.3 s, 0.5 s
    result(1000, 500, [], 1), // one token at 1.5 s
    { ...result(0, 10, [], 5), ok: false }, // failed: not counted
    { ...result(0, 10, [], 5), startMs: undefined }, // no start: not placed
  ];
  const series = throughputSeries(results, 2, 4); // bins of 0.5 s
  assert.deepEqual(series.map((p) => p[0]), [0.25, 0.75, 1.25, 1.75]);
  assert.deepEqual(series.map((p) => p[1]), [2 / 0.5, 1 / 0.5, 0, 1 / 0.5]);
  const total = series.reduce((s, p) => s + p[1] * 0.5, 0);
  assert.equal(total, 4);
  // Chunks of several tokens (a live stream) spread their tokens over the chunks.
  const chunked = throughputSeries([result(0, 100, [800], 10)], 1, 2);
  assert.deepEqual(chunked.map((p) => p[1] * 0.5), [5, 5]);
  assert.deepEqual(throughputSeries(results, 0), []);
});

Deno.test("summarizeMode counts the requests that report more cached tokens than the ceiling gives them", () => {
  const results: RequestResult[] = [
    result(0, 10, [], 1), // 16 cached where the ceiling gives 16: fine
    result(0, 10, [], 1), // 16 where it gives 0: over
    { ...result(0, 10, [], 1), ok: false }, // failed: not counted
    { ...result(0, 10, [], 1), cachedTokens: undefined }, // none reported: fine
  ];
  const m = summarizeMode(results, 1, [16, 0, 0, 0]);
  assert.equal(m.cached_over_ceiling, 1);
  assert.equal(summarizeMode(results, 1, [16, 16, 0, 0]).cached_over_ceiling, 0);
  assert.equal(summarizeMode(results, 1).cached_over_ceiling, undefined, "no ceiling, no count");
});

Deno.test("the charts have y axes with ticks and units, and the ceiling on the hit rate", () => {
  const modes = {
    kv: summarizeMode([result(0, 40, [5, 5], 3)], 1),
    "round-robin": summarizeMode([result(0, 80, [6, 6], 3)], 1),
  };
  const bars = renderChart(modes, "t", 0.75);
  assert.match(bars, /TTFT p50 \(ms\)/);
  assert.match(bars, /rotate\(-90[^>]*>ms</);
  assert.match(bars, />100<\/text>/); // the % panel's axis ends at 100
  assert.match(bars, /ceiling 75\.0%/);
  const hit = renderHitRate(modes, 0.75, "hit rate");
  assert.match(hit, /prompt tokens from cache \(%\)/);
  assert.match(hit, /50\.0%/);
  assert.match(hit, /67% of ceiling/);
  const tput = renderThroughput({ kv: throughputSeries([result(0, 100, [100], 2)], 1, 4) }, "x");
  assert.match(tput, /output tokens\/s/);
  assert.match(tput, /seconds since start/);
  assert.match(tput, /<path d="M/);
});

Deno.test("renderReportHtml escapes names and embeds every chart in order", () => {
  const modes = { "<kv>": summarizeMode([result(0, 40, [5], 2)], 1) };
  const html = renderReportHtml({
    title: "a & b",
    facts: { trace: "<script>alert(1)</script>" },
    modes,
    charts: [
      { caption: "first", svg: '<svg id="one"></svg>' },
      { caption: "second", svg: '<svg id="two"></svg>' },
    ],
  });
  assert.ok(!html.includes("<script>"));
  assert.match(html, /&lt;script&gt;/);
  assert.match(html, /<td>&lt;kv&gt;<\/td>/);
  assert.match(html, /<title>a &amp; b<\/title>/);
  assert.ok(html.indexOf('id="one"') < html.indexOf('id="two"'));
});
