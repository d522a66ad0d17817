// `dynamo bench` results: per-mode summaries, results.json, a table, SVG charts (axes with
// units) and report.html, the page that ties them together.

import type { RequestResult } from "./replay.ts";

/** One router mode's figures (the shape of results.json's `modes` values). */
export interface ModeSummary {
  requests: number;
  failed: number;
  ttft_ms: { p50: number; p90: number; p99: number };
  itl_ms: { p50: number; p90: number };
  output_tokens_per_s: number;
  /** Prompt tokens served from a worker's prefix cache / prompt tokens. */
  prefix_hit_rate: number;
  /**
   * Requests that reported more cached prompt tokens than the requests before them in the trace
   * had shown (given the trace's per-request ceiling): 0 unless a worker counts blocks nobody
   * computed, or requests sent at the same instant were served out of order.
   */
  cached_over_ceiling?: number;
  seconds: number;
  /** The first few failures, for the reader. */
  errors: string[];
}

/** Nearest-rank percentile (`p` in 0..100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  return sortedPercentile([...samples].sort((a, b) => a - b), p);
}

/** Nearest-rank percentile (`p` in 0..100) of samples sorted in ascending order. */
export function sortedPercentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

const round = (x: number, digits = 3) =>
  Number.isFinite(x) ? Number(x.toFixed(digits)) : Number.NaN;

/**
 * Summarizes one mode's replay.
 * @param results the requests' results, in trace order
 * @param seconds the replay's length
 * @param ceilingHits per request, the prompt tokens the trace's ceiling counts as cached (see
 *   `ceilingHitTokens`): when given, the summary counts the requests that reported more
 */
export function summarizeMode(
  results: readonly RequestResult[],
  seconds: number,
  ceilingHits?: readonly number[],
): ModeSummary {
  const ok = results.filter((r) => r.ok);
  const ttft = ok.map((r) => r.ttftMs!).filter((x) => x !== undefined);
  const itl = ok.flatMap((r) => r.itlMs);
  const output = ok.reduce((s, r) => s + r.outputTokens, 0);
  const prompt = ok.reduce((s, r) => s + r.promptTokens, 0);
  const cached = ok.reduce((s, r) => s + (r.cachedTokens ?? 0), 0);
  return {
    requests: results.length,
    failed: results.length - ok.length,
    ttft_ms: {
      p50: round(percentile(ttft, 50)),
      p90: round(percentile(ttft, 90)),
      p99: round(percentile(ttft, 99)),
    },
    itl_ms: { p50: round(percentile(itl, 50)), p90: round(percentile(itl, 90)) },
    output_tokens_per_s: round(output / seconds, 1),
    prefix_hit_rate: round(prompt ? cached / prompt : 0, 4),
    ...(ceilingHits === undefined ? {} : {
      cached_over_ceiling:
        results.filter((r, i) => r.ok && (r.cachedTokens ?? 0) > (ceilingHits[i] ?? 0)).length,
    }),
    seconds: round(seconds, 2),
    errors: results.filter((r) => !r.ok).slice(0, 5).map((r) => r.error ?? "unknown"),
  };
}

/** A plain-text table of the modes. */
export function formatTable(modes: Record<string, ModeSummary>): string {
  const head = [
    "mode",
    "requests",
    "failed",
    "TTFT p50 ms",
    "p90",
    "p99",
    "ITL p50 ms",
    "p90",
    "out tok/s",
    "prefix hit",
  ];
  const rows = Object.entries(modes).map(([name, m]) => [
    name,
    String(m.requests),
    String(m.failed),
    m.ttft_ms.p50.toFixed(1),
    m.ttft_ms.p90.toFixed(1),
    m.ttft_ms.p99.toFixed(1),
    m.itl_ms.p50.toFixed(2),
    m.itl_ms.p90.toFixed(2),
    m.output_tokens_per_s.toFixed(0),
    `${(m.prefix_hit_rate * 100).toFixed(1)}%`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    "| " + cells.map((c, i) => i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))
      .join(" | ") +
    " |";
  return [
    line(head),
    "| " + widths.map((w, i) => i === 0 ? "-".repeat(w) : "-".repeat(w - 1) + ":").join(" | ") +
    " |",
    ...rows.map(line),
  ].join("\n");
}

const COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948"];

/** `s` with the characters XML gives a meaning to escaped, for SVG text and attributes. */
export function escapeXml(s: string): string {
  return s.replace(
    /[<>&"]/g,
    (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]!,
  );
}

/** A bar chart: TTFT p50/p90/p99 and prefix hit rate per mode. */
export function renderChart(
  modes: Record<string, ModeSummary>,
  title: string,
  ceiling?: number,
): string {
  const names = Object.keys(modes);
  const panels: { label: string; unit: string; value: (m: ModeSummary) => number }[] = [
    { label: "TTFT p50", unit: "ms", value: (m) => m.ttft_ms.p50 },
    { label: "TTFT p90", unit: "ms", value: (m) => m.ttft_ms.p90 },
    { label: "TTFT p99", unit: "ms", value: (m) => m.ttft_ms.p99 },
    { label: "prefix hit rate", unit: "%", value: (m) => m.prefix_hit_rate * 100 },
  ];
  const pw = 240;
  const ph = 200;
  const top = 50;
  const left = 40;
  const width = pw * panels.length + 20;
  const height = top + ph + 70;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  panels.forEach((panel, p) => {
    const x0 = 10 + p * pw;
    const values = names.map((n) => panel.value(modes[n]!));
    const hitPanel = panel.unit === "%" && ceiling !== undefined;
    const dataMax = Math.max(
      ...values.filter(Number.isFinite),
      hitPanel ? ceiling * 100 : 0,
      1e-9,
    );
    // The y axis ends on a round tick (a share ends at 100%).
    const yt = panel.unit === "%" ? [0, 20, 40, 60, 80, 100] : ticks(dataMax, 4);
    const max = yt.at(-1)!;
    if (hitPanel) {
      // The trace's ceiling: what a perfect, unbounded cache would hit.
      const y = top + ph - (ceiling * 100 / max) * (ph - 20);
      parts.push(
        `<line x1="${x0 + left}" y1="${y.toFixed(1)}" x2="${x0 + pw - 20}" y2="${
          y.toFixed(1)
        }" stroke="#c00" stroke-dasharray="4 3"/>`,
        `<text x="${x0 + pw - 20}" y="${
          (y - 3).toFixed(1)
        }" text-anchor="end" fill="#c00">ceiling ${(ceiling * 100).toFixed(1)}%</text>`,
      );
    }
    const bw = (pw - left - 30) / Math.max(1, names.length);
    const yOf = (v: number) => top + ph - (v / max) * (ph - 20);
    parts.push(
      `<text x="${x0 + pw / 2}" y="${
        top - 8
      }" text-anchor="middle" font-weight="bold">${panel.label} (${panel.unit})</text>`,
      `<line x1="${x0 + left}" y1="${top + ph}" x2="${x0 + pw - 20}" y2="${
        top + ph
      }" stroke="#333"/>`,
      `<line x1="${x0 + left}" y1="${top + ph}" x2="${x0 + left}" y2="${
        yOf(max).toFixed(1)
      }" stroke="#333"/>`,
      `<text x="${x0 + 10}" y="${top + ph / 2}" text-anchor="middle" transform="rotate(-90 ${
        x0 + 10
      } ${top + ph / 2})">${panel.unit}</text>`,
    );
    for (const t of yt) {
      parts.push(
        `<line x1="${x0 + left - 4}" y1="${yOf(t).toFixed(1)}" x2="${x0 + left}" y2="${
          yOf(t).toFixed(1)
        }" stroke="#333"/>`,
        `<text x="${x0 + left - 6}" y="${(yOf(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`,
      );
    }
    values.forEach((v, i) => {
      const h = Number.isFinite(v) ? (v / max) * (ph - 20) : 0;
      const x = x0 + left + 5 + i * bw;
      parts.push(
        `<rect x="${x.toFixed(1)}" y="${(top + ph - h).toFixed(1)}" width="${
          (bw - 8).toFixed(1)
        }" height="${h.toFixed(1)}" fill="${COLORS[i % COLORS.length]}"/>`,
        `<text x="${(x + (bw - 8) / 2).toFixed(1)}" y="${
          (top + ph - h - 4).toFixed(1)
        }" text-anchor="middle">${Number.isFinite(v) ? v.toFixed(v >= 100 ? 0 : 1) : "n/a"}</text>`,
        `<text x="${(x + (bw - 8) / 2).toFixed(1)}" y="${top + ph + 14}" text-anchor="middle">${
          escapeXml(names[i]!)
        }</text>`,
      );
    });
  });
  parts.push("</svg>");
  return parts.join("\n") + "\n";
}

/** The raw samples of one mode, for distribution charts. */
export interface ModeSamples {
  /** TTFT of each successful request, ms. */
  ttft: number[];
  /** Every inter-token latency, ms. */
  itl: number[];
}

/** The TTFT and ITL samples of one mode's results. */
export function modeSamples(results: readonly RequestResult[]): ModeSamples {
  const ok = results.filter((r) => r.ok);
  return {
    ttft: ok.map((r) => r.ttftMs).filter((x): x is number => x !== undefined),
    itl: ok.flatMap((r) => r.itlMs),
  };
}

/** Round tick steps: 1, 2 or 5 times a power of ten, about `n` of them up to `max`. */
function ticks(max: number, n = 5): number[] {
  if (!(max > 0)) return [0];
  const raw = max / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw)!;
  const out: number[] = [0];
  while (out.at(-1)! < max) out.push(Number((out.length * step).toPrecision(6)));
  return out;
}

interface Series {
  name: string;
  points: [number, number][];
}

/** One line panel with axes, ticks, labels and a legend. */
function linePanel(
  x0: number,
  y0: number,
  w: number,
  h: number,
  series: Series[],
  labels: { title: string; x: string; y: string; yMax?: number },
): string[] {
  const left = 46;
  const bottom = 34;
  const pw = w - left - 10;
  const ph = h - bottom - 24;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const xMax = Math.max(...xs.filter(Number.isFinite), 1e-9);
  const yMax = labels.yMax ?? Math.max(...ys.filter(Number.isFinite), 1e-9);
  const xt = ticks(xMax);
  const yt = ticks(yMax, 4);
  const xEnd = xt.at(-1)!;
  const yEnd = labels.yMax ?? yt.at(-1)!;
  const X = (v: number) => x0 + left + (v / xEnd) * pw;
  const Y = (v: number) => y0 + 24 + ph - (v / yEnd) * ph;
  const out = [
    `<text x="${x0 + w / 2}" y="${y0 + 14}" text-anchor="middle" font-weight="bold">${
      escapeXml(labels.title)
    }</text>`,
    `<line x1="${X(0)}" y1="${Y(0)}" x2="${X(xEnd)}" y2="${Y(0)}" stroke="#333"/>`,
    `<line x1="${X(0)}" y1="${Y(0)}" x2="${X(0)}" y2="${Y(yEnd)}" stroke="#333"/>`,
    `<text x="${x0 + left + pw / 2}" y="${y0 + h - 4}" text-anchor="middle">${
      escapeXml(labels.x)
    }</text>`,
    `<text x="${x0 + 10}" y="${y0 + 24 + ph / 2}" text-anchor="middle" transform="rotate(-90 ${
      x0 + 10
    } ${y0 + 24 + ph / 2})">${escapeXml(labels.y)}</text>`,
  ];
  for (const t of xt) {
    out.push(
      `<line x1="${X(t).toFixed(1)}" y1="${Y(0)}" x2="${X(t).toFixed(1)}" y2="${
        Y(0) + 4
      }" stroke="#333"/>`,
      `<text x="${X(t).toFixed(1)}" y="${Y(0) + 15}" text-anchor="middle">${t}</text>`,
    );
  }
  for (const t of yt.filter((v) => v <= yEnd)) {
    out.push(
      `<line x1="${X(0) - 4}" y1="${Y(t).toFixed(1)}" x2="${X(xEnd)}" y2="${
        Y(t).toFixed(1)
      }" stroke="#eee"/>`,
      `<text x="${X(0) - 6}" y="${(Y(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`,
    );
  }
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.filter((p) => p[0] <= xEnd).map((p, k) =>
      `${k === 0 ? "M" : "L"}${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`
    ).join("");
    out.push(
      `<path d="${d}" fill="none" stroke="${color}" stroke-width="1.5"/>`,
      `<rect x="${x0 + w - 120}" y="${y0 + 30 + i * 14}" width="10" height="10" fill="${color}"/>`,
      `<text x="${x0 + w - 106}" y="${y0 + 39 + i * 14}">${escapeXml(s.name)}</text>`,
    );
  });
  return out;
}

/** An empirical CDF as points (at most ~200), x clipped at the samples' p99. */
function cdf(samples: readonly number[]): [number, number][] {
  if (samples.length === 0) return [];
  const sorted = [...samples].sort((a, b) => a - b);
  const stride = Math.max(1, Math.floor(sorted.length / 200));
  const out: [number, number][] = [];
  for (let i = 0; i < sorted.length; i += stride) out.push([sorted[i]!, (i + 1) / sorted.length]);
  out.push([sorted.at(-1)!, 1]);
  return out;
}

/**
 * TTFT and ITL distributions per mode (cumulative share of requests against ms, up to the
 * slowest mode's p99), side by side.
 */
export function renderDistributions(samples: Record<string, ModeSamples>, title: string): string {
  const w = 440;
  const h = 280;
  const clip = (pick: (s: ModeSamples) => number[]) =>
    Math.max(...Object.values(samples).map((s) => percentile(pick(s), 99)).filter(Number.isFinite));
  const series = (pick: (s: ModeSamples) => number[]): Series[] => {
    const max = clip(pick);
    return Object.entries(samples).map(([name, s]) => ({
      name,
      points: cdf(pick(s)).filter((p) => p[0] <= max),
    }));
  };
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * w + 20}" height="${
      h + 40
    }" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    ...linePanel(10, 30, w, h, series((s) => s.ttft), {
      title: "time to first token (CDF, to p99)",
      x: "ms",
      y: "share of requests",
      yMax: 1,
    }),
    ...linePanel(20 + w, 30, w, h, series((s) => s.itl), {
      title: "inter-token latency (CDF, to p99)",
      x: "ms",
      y: "share of tokens",
      yMax: 1,
    }),
    "</svg>",
  ];
  return parts.join("\n") + "\n";
}

/** Requests on each worker over time, one panel per mode (simulated replays record them). */
export function renderLoad(loads: Record<string, number[][]>, title: string): string {
  const w = 440;
  const h = 240;
  const names = Object.keys(loads);
  const yMax = Math.max(1, ...Object.values(loads).flatMap((l) => l.flatMap((s) => s.slice(1))));
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${names.length * (w + 10) + 10}" height="${
      h + 40
    }" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  names.forEach((name, i) => {
    const samples = loads[name]!;
    const workers = (samples[0]?.length ?? 1) - 1;
    const series: Series[] = Array.from({ length: workers }, (_, k) => ({
      name: `worker ${k}`,
      points: samples.map((s) => [s[0]! / 1000, s[k + 1]!] as [number, number]),
    }));
    parts.push(
      ...linePanel(10 + i * (w + 10), 30, w, h, series, {
        title: `${name}: requests on each worker`,
        x: "seconds",
        y: "running + waiting",
        yMax,
      }),
    );
  });
  parts.push("</svg>");
  return parts.join("\n") + "\n";
}

/** Output tokens per second over the run, one series per mode (from each request's start). */
export function throughputSeries(
  results: readonly RequestResult[],
  seconds: number,
  bins = 60,
): [number, number][] {
  if (!(seconds > 0)) return [];
  const binS = seconds / bins;
  const tokens = new Array<number>(bins).fill(0);
  for (const r of results) {
    if (!r.ok || r.startMs === undefined || r.ttftMs === undefined) continue;
    // Tokens are spread evenly over the chunks that carried them.
    const chunks = 1 + r.itlMs.length;
    const weight = r.outputTokens > 0 ? r.outputTokens / chunks : 1;
    let t = r.startMs + r.ttftMs;
    for (let k = 0; k < chunks; k++) {
      if (k > 0) t += r.itlMs[k - 1]!;
      const bin = Math.min(bins - 1, Math.max(0, Math.floor(t / 1000 / binS)));
      tokens[bin]! += weight;
    }
  }
  return tokens.map((n, i) => [Number(((i + 0.5) * binS).toFixed(3)), n / binS]);
}

/** Output throughput over time, one line per mode. */
export function renderThroughput(
  series: Record<string, [number, number][]>,
  title: string,
): string {
  const w = 900;
  const h = 300;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w + 20}" height="${
      h + 40
    }" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    ...linePanel(
      10,
      30,
      w,
      h,
      Object.entries(series).map(([name, points]) => ({ name, points })),
      { title: "output throughput over time", x: "seconds since start", y: "output tokens/s" },
    ),
    "</svg>",
  ].join("\n") + "\n";
}

/** Prefix hit rate per mode against the ceiling a perfect, unbounded cache would reach. */
export function renderHitRate(
  modes: Record<string, ModeSummary>,
  ceiling: number,
  title: string,
): string {
  const names = Object.keys(modes);
  const w = 440;
  const h = 260;
  const left = 50;
  const top = 40;
  const ph = h - 70;
  const pw = w - left - 20;
  const Y = (pct: number) => top + ph - (pct / 100) * ph;
  const bw = pw / Math.max(1, names.length);
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    `<line x1="${left}" y1="${Y(0)}" x2="${left + pw}" y2="${Y(0)}" stroke="#333"/>`,
    `<line x1="${left}" y1="${Y(0)}" x2="${left}" y2="${Y(100)}" stroke="#333"/>`,
    `<text x="14" y="${top + ph / 2}" text-anchor="middle" transform="rotate(-90 14 ${
      top + ph / 2
    })">prompt tokens from cache (%)</text>`,
  ];
  for (const t of [0, 20, 40, 60, 80, 100]) {
    parts.push(
      `<line x1="${left - 4}" y1="${Y(t)}" x2="${left + pw}" y2="${Y(t)}" stroke="#eee"/>`,
      `<text x="${left - 6}" y="${Y(t) + 4}" text-anchor="end">${t}</text>`,
    );
  }
  names.forEach((name, i) => {
    const pct = modes[name]!.prefix_hit_rate * 100;
    const x = left + 8 + i * bw;
    const share = ceiling > 0 ? ` (${(pct / (ceiling * 100) * 100).toFixed(0)}% of ceiling)` : "";
    parts.push(
      `<rect x="${x.toFixed(1)}" y="${Y(pct).toFixed(1)}" width="${(bw - 16).toFixed(1)}" height="${
        (Y(0) - Y(pct)).toFixed(1)
      }" fill="${COLORS[i % COLORS.length]}"/>`,
      `<text x="${(x + (bw - 16) / 2).toFixed(1)}" y="${
        (Y(pct) - 4).toFixed(1)
      }" text-anchor="middle">${pct.toFixed(1)}%</text>`,
      `<text x="${(x + (bw - 16) / 2).toFixed(1)}" y="${Y(0) + 14}" text-anchor="middle">${
        escapeXml(name)
      }</text>`,
      `<text x="${(x + (bw - 16) / 2).toFixed(1)}" y="${Y(0) + 27}" text-anchor="middle">${
        escapeXml(share.trim())
      }</text>`,
    );
  });
  const yc = Y(ceiling * 100);
  parts.push(
    `<line x1="${left}" y1="${yc.toFixed(1)}" x2="${left + pw}" y2="${
      yc.toFixed(1)
    }" stroke="#c00" stroke-dasharray="4 3"/>`,
    `<text x="${left + pw}" y="${(yc - 3).toFixed(1)}" text-anchor="end" fill="#c00">ceiling ${
      (ceiling * 100).toFixed(1)
    }%</text>`,
    "</svg>",
  );
  return parts.join("\n") + "\n";
}

/** What {@linkcode renderReportHtml} puts on the page. */
export interface ReportPage {
  title: string;
  /** Run parameters shown above the table (trace, workers, speedup, ...). */
  facts: Record<string, string | number>;
  modes: Record<string, ModeSummary>;
  /** The charts, in order: a caption and an SVG document each. */
  charts: { caption: string; svg: string }[];
}

function escapeHtml(s: string): string {
  return escapeXml(s).replace(/'/g, "&#39;");
}

/** One self-contained HTML page: the run's facts, the table of modes, and every chart. */
export function renderReportHtml(page: ReportPage): string {
  const head = [
    "mode",
    "requests",
    "failed",
    "TTFT p50 (ms)",
    "TTFT p90 (ms)",
    "TTFT p99 (ms)",
    "ITL p50 (ms)",
    "ITL p90 (ms)",
    "output tokens/s",
    "prefix hit rate",
  ];
  const rows = Object.entries(page.modes).map(([name, m]) => [
    name,
    String(m.requests),
    String(m.failed),
    m.ttft_ms.p50.toFixed(1),
    m.ttft_ms.p90.toFixed(1),
    m.ttft_ms.p99.toFixed(1),
    m.itl_ms.p50.toFixed(2),
    m.itl_ms.p90.toFixed(2),
    m.output_tokens_per_s.toFixed(0),
    `${(m.prefix_hit_rate * 100).toFixed(1)}%`,
  ]);
  const facts = Object.entries(page.facts).map(([k, v]) =>
    `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(String(v))}</dd>`
  );
  return [
    "<!doctype html>",
    '<html lang="en">',
    "<head>",
    '<meta charset="utf-8">',
    `<title>${escapeHtml(page.title)}</title>`,
    "<style>",
    "body { font-family: sans-serif; margin: 16px; color: #222; background: white; }",
    "table { border-collapse: collapse; margin: 12px 0; }",
    "th, td { border: 1px solid #ccc; padding: 3px 8px; }",
    "td { text-align: right; } td:first-child { text-align: left; }",
    "dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }",
    "dt { font-weight: bold; } dd { margin: 0; }",
    "figure { margin: 16px 0; overflow-x: auto; } figcaption { font-size: 13px; color: #555; }",
    "</style>",
    "</head>",
    "<body>",
    `<h1>${escapeHtml(page.title)}</h1>`,
    `<dl>${facts.join("")}</dl>`,
    "<table>",
    `<thead><tr>${head.map((h) => `<th>${escapeHtml(h)}</th>`).join("")}</tr></thead>`,
    "<tbody>",
    ...rows.map((r) => `<tr>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join("")}</tr>`),
    "</tbody>",
    "</table>",
    ...page.charts.map((c) =>
      `<figure>\n${c.svg.trim()}\n<figcaption>${escapeHtml(c.caption)}</figcaption>\n</figure>`
    ),
    "</body>",
    "</html>",
    "",
  ].join("\n");
}
