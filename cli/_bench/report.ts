// `dynamo bench` results: per-mode summaries, results.json, a table, and an SVG chart.

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
  seconds: number;
  /** The first few failures, for the reader. */
  errors: string[];
}

/** Nearest-rank percentile (`p` in 0..100) of unsorted samples. */
export function percentile(samples: readonly number[], p: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

const round = (x: number, digits = 3) =>
  Number.isFinite(x) ? Number(x.toFixed(digits)) : Number.NaN;

/** Summarizes one mode's replay. */
export function summarizeMode(results: readonly RequestResult[], seconds: number): ModeSummary {
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

function escapeXml(s: string): string {
  return s.replace(
    /[<>&"]/g,
    (c) => ({ "<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;" })[c]!,
  );
}

/** A bar chart: TTFT p50/p90/p99 and prefix hit rate per mode. */
export function renderChart(modes: Record<string, ModeSummary>, title: string): string {
  const names = Object.keys(modes);
  const panels: { label: string; unit: string; value: (m: ModeSummary) => number }[] = [
    { label: "TTFT p50", unit: "ms", value: (m) => m.ttft_ms.p50 },
    { label: "TTFT p90", unit: "ms", value: (m) => m.ttft_ms.p90 },
    { label: "TTFT p99", unit: "ms", value: (m) => m.ttft_ms.p99 },
    { label: "prefix hit rate", unit: "%", value: (m) => m.prefix_hit_rate * 100 },
  ];
  const pw = 220;
  const ph = 200;
  const top = 50;
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
    const max = Math.max(...values.filter(Number.isFinite), 1e-9);
    const bw = (pw - 40) / Math.max(1, names.length);
    parts.push(
      `<text x="${x0 + pw / 2}" y="${
        top - 8
      }" text-anchor="middle" font-weight="bold">${panel.label} (${panel.unit})</text>`,
      `<line x1="${x0 + 10}" y1="${top + ph}" x2="${x0 + pw - 20}" y2="${
        top + ph
      }" stroke="#333"/>`,
    );
    values.forEach((v, i) => {
      const h = Number.isFinite(v) ? (v / max) * (ph - 20) : 0;
      const x = x0 + 15 + i * bw;
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
