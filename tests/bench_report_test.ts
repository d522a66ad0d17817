// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `dynamo bench` writes report.html, and headless Chromium renders it: no console error,
// exception or failed load, every chart there with its axes and units, and a screenshot
// that is neither empty nor blank. A broken page is caught by the same checks.

import assert from "node:assert/strict";
import { join } from "node:path";
import { capturePage, ensureChromium, type PageCapture } from "./_helpers/chromium.ts";
import { decodePng, type Pixels } from "./_helpers/png.ts";
import { runDeno } from "./_helpers/process.ts";

const chromium = await ensureChromium();
if (!chromium.path) console.log(`bench report: browser tests skipped: ${chromium.why}`);

/** Share of pixels that are not (near) white, and how many distinct colours there are. */
function ink(p: Pixels): { share: number; colours: number } {
  let inked = 0;
  const colours = new Set<number>();
  for (let i = 0; i < p.rgba.length; i += 4) {
    const [r, g, b] = [p.rgba[i]!, p.rgba[i + 1]!, p.rgba[i + 2]!];
    if (r < 240 || g < 240 || b < 240) inked++;
    colours.add(((r >> 4) << 8) | ((g >> 4) << 4) | (b >> 4));
  }
  return { share: inked / (p.width * p.height), colours: colours.size };
}

/** Whether some pixel is within 24 of the colour (a chart series drawn in it). */
function hasColour(p: Pixels, hex: string): boolean {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  for (let i = 0; i < p.rgba.length; i += 4) {
    if (
      Math.abs(p.rgba[i]! - r!) < 24 && Math.abs(p.rgba[i + 1]! - g!) < 24 &&
      Math.abs(p.rgba[i + 2]! - b!) < 24
    ) return true;
  }
  return false;
}

const PAGE_FACTS = `(() => ({
  svgs: document.querySelectorAll("figure svg").length,
  rows: document.querySelectorAll("tbody tr").length,
  paths: document.querySelectorAll("svg path").length,
  text: document.body.innerText,
  svgText: [...document.querySelectorAll("svg text")].map((t) => t.textContent).join("|"),
  zeroSized: [...document.querySelectorAll("figure svg")]
    .filter((s) => s.getBoundingClientRect().width === 0 || s.getBoundingClientRect().height === 0)
    .length,
}))()`;

interface PageFacts {
  svgs: number;
  rows: number;
  paths: number;
  text: string;
  svgText: string;
  zeroSized: number;
}

Deno.test({
  name: "dynamo bench's report.html renders in headless Chromium with every chart and no error",
  ignore: !chromium.path,
  fn: async () => {
    const out = await Deno.makeTempDir({ prefix: "dynamo-bench-report-" });
    try {
      const run = await runDeno(
        [
          "cli/main.ts",
          "bench",
          "--synthetic",
          "multi-tenant,seed=3",
          "--simulate",
          "--workers",
          "4",
          "--max-requests",
          "150",
          "--out",
          out,
        ],
        {},
        120_000,
      );
      assert.equal(run.code, 0, `dynamo bench failed:\n${run.stdout}\n${run.stderr}`);
      assert.match(run.stdout, /wrote .*report\.html/);
      const page: PageCapture = await capturePage(
        chromium.path!,
        `file://${join(out, "report.html")}`,
        { evaluate: PAGE_FACTS, timeoutMs: 90_000 },
      );
      assert.deepEqual(page.errors, [], "the page logged errors");
      const facts = page.value as PageFacts;
      assert.equal(facts.svgs, 5, "chart, distributions, throughput, hit rate, load");
      assert.equal(facts.zeroSized, 0, "a chart rendered with no size");
      assert.equal(facts.rows, 3, "one table row per router mode");
      assert.ok(facts.paths >= 3 * 3, `expected CDF and throughput lines, got ${facts.paths}`);
      for (const label of ["kv", "round-robin", "random"]) {
        assert.match(facts.text, new RegExp(label));
      }
      // Axes with units on every kind of chart.
      for (
        const label of [
          "share of requests",
          "share of tokens",
          "output tokens/s",
          "seconds since start",
          "prompt tokens from cache (%)",
          "TTFT p90 (ms)",
          "ceiling",
        ]
      ) assert.ok(facts.svgText.includes(label), `no "${label}" on the charts`);
      const pixels = decodePng(page.png);
      assert.ok(pixels.width >= 900 && pixels.height >= 1500, `${pixels.width}x${pixels.height}`);
      const { share, colours } = ink(pixels);
      assert.ok(share > 0.03, `the screenshot is nearly blank (${(share * 100).toFixed(2)}% ink)`);
      assert.ok(colours > 20, `the screenshot has only ${colours} colours`);
      for (const c of ["#4e79a7", "#f28e2b", "#59a14f", "#c00000"]) {
        assert.ok(hasColour(pixels, c), `no pixel of the series colour ${c}`);
      }
    } finally {
      await Deno.remove(out, { recursive: true });
    }
  },
});

Deno.test({
  name: "a page that throws, logs an error or draws nothing fails the same checks",
  ignore: !chromium.path,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "dynamo-bench-broken-" });
    try {
      const file = join(dir, "broken.html");
      await Deno.writeTextFile(
        file,
        '<!doctype html><html><body style="background:white">' +
          '<img src="missing.svg"><script>console.error("chart data missing");' +
          'throw new Error("boom")</script></body></html>',
      );
      const page = await capturePage(chromium.path!, `file://${file}`, { evaluate: PAGE_FACTS });
      assert.ok(page.errors.some((e) => e.includes("chart data missing")), page.errors.join("\n"));
      assert.ok(page.errors.some((e) => e.includes("boom")), page.errors.join("\n"));
      assert.ok(page.errors.some((e) => e.includes("missing.svg")), page.errors.join("\n"));
      assert.equal((page.value as PageFacts).svgs, 0);
      assert.ok(ink(decodePng(page.png)).share < 0.01, "an empty page should read as blank");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
