// `bench:routing`'s rows and the goals they are held to (issue 18): one place that says what a
// row is, whether it meets its goals, and a chart that shows every row against them at a glance.

import { InvalidArgumentError } from "../../runtime/errors.ts";
import { escapeXml, type ModeSummary } from "./report.ts";
import type { CapacityHitRates } from "./capacity.ts";

/** One trace at one load, every mode's figures: a line of `bench/results/routing.json`. */
export interface RoutingRow {
  trace: string;
  level: "moderate" | "saturation";
  /** The arrival-rate factor the row ran at. */
  load: number;
  /** The trace's prefix-reuse ceiling: the share of prompt tokens an unbounded cache hits. */
  ceiling: number;
  rr: ModeSummary;
  kv: ModeSummary;
  /** The same router with workers that neither announce their passes nor fetch from peers. */
  kvPlain: ModeSummary;
  /** p90 of the per-request TTFT lower bounds (ms): no router can have a lower p90. */
  boundP90: number;
  /** The shared-cache oracle fleet placed by round-robin. */
  oracleRr: ModeSummary;
  /** The shared-cache oracle fleet placed by the KV router's policy. */
  oracleKv: ModeSummary;
  /** Hit rates of one cache of the fleet's size: Belady's eviction (a bound) and LRU. */
  capacity: CapacityHitRates;
}

/**
 * A row's p90 TTFT goal as a ratio to round-robin's p90: 0.6 at moderate load, a third near
 * saturation, and within 5% (1.05) on a trace that shares nothing.
 */
export function p90Goal(row: Pick<RoutingRow, "ceiling" | "level">): number {
  if (row.ceiling === 0) return 1.05;
  return row.level === "moderate" ? 0.6 : 1 / 3;
}

/**
 * A row's hit-rate goal as a share of the trace's ceiling (90% at moderate load, 85% near
 * saturation), or undefined for a trace that shares nothing.
 */
export function hitGoal(row: Pick<RoutingRow, "ceiling" | "level">): number | undefined {
  if (row.ceiling === 0) return undefined;
  return row.level === "moderate" ? 0.9 : 0.85;
}

/** Whether `kv` (default: the row's KV router) meets both of the row's goals. */
export function meetsGoals(row: RoutingRow, kv: ModeSummary = row.kv): boolean {
  return meetsP90(row, kv) && meetsHit(row, kv);
}

function meetsP90(row: RoutingRow, kv: ModeSummary): boolean {
  return kv.ttft_ms.p90 <= p90Goal(row) * row.rr.ttft_ms.p90;
}

function meetsHit(row: RoutingRow, kv: ModeSummary): boolean {
  const goal = hitGoal(row);
  return goal === undefined || kv.prefix_hit_rate >= goal * row.ceiling;
}

function isSummary(x: unknown): x is ModeSummary {
  const m = x as ModeSummary | null;
  return typeof m === "object" && m !== null && typeof m.prefix_hit_rate === "number" &&
    typeof m.ttft_ms === "object" && m.ttft_ms !== null && typeof m.ttft_ms.p90 === "number";
}

/**
 * The rows of a saved `bench:routing --json` file.
 * @throws {InvalidArgumentError} when the text is not such a file (says which row and field)
 */
export function parseRoutingRows(text: string): RoutingRow[] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new InvalidArgumentError(`not JSON: ${(e as Error).message}`);
  }
  return routingRowsOf(doc);
}

/**
 * The rows of a saved `bench:routing --json` file already parsed from JSON.
 * @throws {InvalidArgumentError} when it is not such a file (says which row and field)
 */
export function routingRowsOf(doc: unknown): RoutingRow[] {
  const rows = (doc as { rows?: unknown } | null)?.rows;
  if (!Array.isArray(rows)) throw new InvalidArgumentError("no `rows` array");
  rows.forEach((r, i) => {
    const row = r as Partial<RoutingRow> | null;
    const bad = (field: string) =>
      new InvalidArgumentError(`row ${i}: \`${field}\` is missing or of the wrong type`);
    if (typeof row !== "object" || row === null) throw bad("(the row)");
    if (typeof row.trace !== "string") throw bad("trace");
    if (row.level !== "moderate" && row.level !== "saturation") throw bad("level");
    for (const f of ["load", "ceiling", "boundP90"] as const) {
      if (typeof row[f] !== "number") throw bad(f);
    }
    for (const f of ["rr", "kv", "kvPlain", "oracleRr", "oracleKv"] as const) {
      if (!isSummary(row[f])) throw bad(f);
    }
    const c = row.capacity;
    if (typeof c?.belady !== "number" || typeof c.lru !== "number") throw bad("capacity");
  });
  return rows as RoutingRow[];
}

/** The rows of one trace family (seeds together) at one load, summed up. */
export interface RowGroup {
  /** The trace's name without its seed ("multi-tenant", "mooncake (first 3000)"). */
  group: string;
  level: RoutingRow["level"];
  rows: number;
  /** Rows meeting both goals. */
  met: number;
  /** The KV router's p90 TTFT as a ratio to round-robin's: mean and worst (highest). */
  p90: { mean: number; worst: number };
  /** Its hit rate as a share of the ceiling: mean and worst (lowest); absent: nothing shared. */
  hit?: { mean: number; worst: number };
}

/** A trace's name without its seed. */
function groupName(trace: string): string {
  return trace.replace(/ seed \d+$/, "");
}

/**
 * The rows summed up per trace family and load, in the order each family first appears.
 * @param rows bench:routing's rows
 * @returns one group per family and load
 */
export function groupRows(rows: readonly RoutingRow[]): RowGroup[] {
  const groups = new Map<string, RoutingRow[]>();
  for (const r of rows) {
    const key = `${groupName(r.trace)}\u0000${r.level}`;
    const members = groups.get(key);
    if (members) members.push(r);
    else groups.set(key, [r]);
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return [...groups.values()].map((members) => {
    const first = members[0]!;
    const p90 = members.map((r) => r.kv.ttft_ms.p90 / r.rr.ttft_ms.p90);
    const shared = members.filter((r) => r.ceiling > 0);
    const hits = shared.map((r) => r.kv.prefix_hit_rate / r.ceiling);
    return {
      group: groupName(first.trace),
      level: first.level,
      rows: members.length,
      met: members.filter((r) => meetsGoals(r)).length,
      p90: { mean: mean(p90), worst: Math.max(...p90) },
      ...(hits.length > 0 ? { hit: { mean: mean(hits), worst: Math.min(...hits) } } : {}),
    };
  });
}

const MET = "#2e7d32";
const MISSED = "#c62828";
const GREY = "#888";

/** A coordinate as the SVG writes it. */
const px = (v: number) => v.toFixed(1);
// The marks of one row, centred on (x, y), each tagged with its row and kind.
const tag = (i: number, mark: string) => `data-row="${i}" data-mark="${mark}"`;
const tick = (x: number, y: number, i: number, mark: string) =>
  `<line x1="${px(x)}" y1="${y - 6}" x2="${px(x)}" y2="${y + 6}" stroke="#000" stroke-width="2" ${
    tag(i, mark)
  }/>`;
const square = (x: number, y: number, i: number, mark: string) =>
  `<rect x="${px(x - 3)}" y="${y - 3}" width="6" height="6" fill="${GREY}" ${tag(i, mark)}/>`;
const ring = (x: number, y: number, i: number, mark: string) =>
  `<circle cx="${px(x)}" cy="${y}" r="4" fill="none" stroke="${GREY}" ${tag(i, mark)}/>`;
const dot = (x: number, y: number, i: number, mark: string, met: boolean, title: string) =>
  `<circle cx="${px(x)}" cy="${y}" r="4" fill="${met ? MET : MISSED}" ${
    tag(i, mark)
  }><title>${title}</title></circle>`;

/**
 * A dot chart of every row against its goals, one line per row: on the left the KV router's p90
 * TTFT as a ratio to round-robin's (lower is better) with the per-request bound and the
 * shared-cache oracle beside it, on the right its prefix hit rate as a share of the trace's
 * ceiling with round-robin's and one fleet-sized LRU cache's; each goal a dark tick on its line,
 * the KV dot green where that goal is met and red where not, and a last column saying whether the
 * row meets both.
 * @param rows the rows, in the order to draw them (a line between traces of different names)
 * @param title the chart's title
 * @returns an SVG document
 */
export function renderRoutingGoals(rows: readonly RoutingRow[], title: string): string {
  const rowH = 16;
  const labelW = 300;
  const panelW = 330;
  const top = 92;
  const gap = 50;
  const statusW = 70;
  const height = top + rows.length * rowH + 40;
  const width = labelW + 2 * panelW + gap + statusW + 20;
  // Left panel: ratio to round-robin's p90, 0 .. at least 1.1 (round-robin is 1 by definition).
  const ratios = rows.flatMap((r) => [
    r.kv.ttft_ms.p90 / r.rr.ttft_ms.p90,
    r.boundP90 / r.rr.ttft_ms.p90,
    Math.min(r.oracleRr.ttft_ms.p90, r.oracleKv.ttft_ms.p90) / r.rr.ttft_ms.p90,
  ]).filter(Number.isFinite);
  const ratioMax = Math.ceil(Math.max(1.1, ...ratios) * 5) / 5;
  const x1 = labelW;
  const x2 = labelW + panelW + gap;
  const inner = panelW - 20;
  const xRatio = (v: number) => x1 + 10 + (Math.min(v, ratioMax) / ratioMax) * inner;
  const xShare = (v: number) => x2 + 10 + Math.min(Math.max(v, 0), 1) * inner;
  const yOf = (i: number) => top + i * rowH + rowH / 2;
  const bottom = top + rows.length * rowH;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">${escapeXml(title)}</text>`,
    // The legend.
    `<circle cx="16" cy="38" r="4" fill="${MET}"/><circle cx="28" cy="38" r="4" fill="${MISSED}"/>`,
    `<text x="38" y="42">KV router (green: goal met, red: missed)</text>`,
    `<line x1="262" y1="32" x2="262" y2="44" stroke="#000" stroke-width="2"/>`,
    `<text x="270" y="42">goal</text>`,
    `<rect x="312" y="35" width="6" height="6" fill="${GREY}"/>`,
    `<text x="324" y="42">bound (left) / round-robin (right)</text>`,
    `<circle cx="530" cy="38" r="4" fill="none" stroke="${GREY}"/>`,
    `<text x="540" y="42">shared-cache oracle (left) / one fleet-sized LRU cache (right)</text>`,
    `<text x="${x1 + panelW / 2}" y="66" text-anchor="middle" font-weight="bold">` +
    `p90 TTFT / round-robin's p90 (lower is better)</text>`,
    `<text x="${x2 + panelW / 2}" y="66" text-anchor="middle" font-weight="bold">` +
    `prefix hit rate / the trace's ceiling</text>`,
    `<text x="${x2 + panelW + 10}" y="66" font-weight="bold">both goals</text>`,
  ];
  // Axes with ticks, and faint grid lines down the rows.
  const axis = (x: (v: number) => number, ticks: number[], label: (v: number) => string) => {
    for (const t of ticks) {
      parts.push(
        `<line x1="${px(x(t))}" y1="${top}" x2="${px(x(t))}" y2="${bottom}" stroke="#eee"/>`,
        `<text x="${px(x(t))}" y="${top - 6}" text-anchor="middle">${label(t)}</text>`,
        `<text x="${px(x(t))}" y="${bottom + 14}" text-anchor="middle">${label(t)}</text>`,
      );
    }
  };
  const ratioTicks = Array.from({ length: Math.round(ratioMax / 0.2) + 1 }, (_, i) => i * 0.2);
  axis(xRatio, ratioTicks, (v) => `${v.toFixed(1)}x`);
  axis(xShare, [0, 0.2, 0.4, 0.6, 0.8, 1], (v) => `${Math.round(v * 100)}%`);
  // Round-robin's own p90, 1x.
  parts.push(
    `<line x1="${px(xRatio(1))}" y1="${top}" x2="${
      px(xRatio(1))
    }" y2="${bottom}" stroke="${GREY}" stroke-dasharray="3 3"/>`,
  );
  rows.forEach((r, i) => {
    const y = yOf(i);
    if (i > 0 && groupName(rows[i - 1]!.trace) !== groupName(r.trace)) {
      parts.push(
        `<line x1="10" y1="${top + i * rowH}" x2="${width - 10}" y2="${
          top + i * rowH
        }" stroke="#bbb"/>`,
      );
    }
    const ok = meetsGoals(r);
    parts.push(
      `<text x="10" y="${y + 4}">${escapeXml(`${r.trace}, ${r.level}`)}</text>`,
      `<text x="${x2 + panelW + 10}" y="${y + 4}" fill="${ok ? MET : MISSED}" ${tag(i, "status")}>${
        ok ? "met" : "missed"
      }</text>`,
    );
    // Left: goal tick, bound square, oracle ring, KV dot.
    const rr = r.rr.ttft_ms.p90;
    const oracle = Math.min(r.oracleRr.ttft_ms.p90, r.oracleKv.ttft_ms.p90) / rr;
    const kv = r.kv.ttft_ms.p90 / rr;
    parts.push(
      tick(xRatio(p90Goal(r)), y, i, "p90-goal"),
      square(xRatio(r.boundP90 / rr), y, i, "bound"),
      ring(xRatio(oracle), y, i, "oracle"),
      dot(xRatio(kv), y, i, "kv-p90", meetsP90(r, r.kv), `${kv.toFixed(3)}x`),
    );
    // Right: the hit rates as shares of the ceiling, or a note where nothing is shared.
    const goal = hitGoal(r);
    if (goal === undefined) {
      parts.push(`<text x="${x2 + 10}" y="${y + 4}" fill="${GREY}">nothing shared</text>`);
      return;
    }
    const share = (hit: number) => hit / r.ceiling;
    const kvShare = share(r.kv.prefix_hit_rate);
    parts.push(
      tick(xShare(goal), y, i, "hit-goal"),
      square(xShare(share(r.rr.prefix_hit_rate)), y, i, "rr-hit"),
      ring(xShare(share(r.capacity.lru)), y, i, "lru-hit"),
      dot(xShare(kvShare), y, i, "kv-hit", meetsHit(r, r.kv), `${(kvShare * 100).toFixed(1)}%`),
    );
  });
  const met = rows.filter((r) => meetsGoals(r)).length;
  parts.push(
    `<text x="10" y="${height - 8}">${met} of ${rows.length} rows meet both goals.</text>`,
    "</svg>",
  );
  return parts.join("\n") + "\n";
}
