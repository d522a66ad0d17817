// bench:routing's goals and its chart: the goal at each load and on a trace that shares nothing,
// the edges of each goal, a saved file's rows read back or refused with the field named, and a
// chart whose marks sit where their values say, coloured by whether each goal is met.

import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { routingRow } from "./_routing_test_support.ts";
import {
  groupRows,
  hitGoal,
  meetsGoals,
  p90Goal,
  parseRoutingRows,
  renderRoutingGoals,
} from "./routing_goals.ts";

const row = routingRow;

Deno.test("the goals: 0.6x and 90% at moderate load, a third and 85% near saturation, 1.05x where nothing is shared", () => {
  assert.equal(p90Goal(row("moderate", 0, 0)), 0.6);
  assert.equal(p90Goal(row("saturation", 0, 0)), 1 / 3);
  assert.equal(p90Goal(row("saturation", 0, 0, { ceiling: 0 })), 1.05);
  assert.equal(hitGoal(row("moderate", 0, 0)), 0.9);
  assert.equal(hitGoal(row("saturation", 0, 0)), 0.85);
  assert.equal(hitGoal(row("moderate", 0, 0, { ceiling: 0 })), undefined);
});

Deno.test("meetsGoals holds at each goal's edge and fails just past it", () => {
  // Ceiling 0.5: 90% of it is 0.45, 85% is 0.425.
  assert.ok(meetsGoals(row("moderate", 60, 0.45)));
  assert.ok(!meetsGoals(row("moderate", 60.1, 0.45)), "p90 over 0.6x");
  assert.ok(!meetsGoals(row("moderate", 60, 0.449)), "hit under 90% of the ceiling");
  assert.ok(meetsGoals(row("saturation", 33.3, 0.425)));
  assert.ok(!meetsGoals(row("saturation", 33.4, 0.425)), "p90 not 3x better");
  assert.ok(!meetsGoals(row("saturation", 30, 0.424)), "hit under 85% of the ceiling");
  assert.ok(meetsGoals(row("moderate", 105, 0, { ceiling: 0 })), "nothing shared: within 5%");
  assert.ok(!meetsGoals(row("moderate", 105.1, 0, { ceiling: 0 })));
  // Another mode's figures against the same row.
  const r = row("moderate", 50, 0.5);
  assert.ok(meetsGoals(r) && !meetsGoals(r, r.kvPlain));
});

Deno.test("parseRoutingRows reads a saved file back and names what is wrong in a bad one", () => {
  const rows = [row("moderate", 50, 0.45), row("saturation", 30, 0.43)];
  assert.deepEqual(parseRoutingRows(JSON.stringify({ workers: 8, rows })), rows);
  assert.throws(() => parseRoutingRows("{"), (e) => e instanceof InvalidArgumentError);
  assert.throws(() => parseRoutingRows(JSON.stringify({ workers: 8 })), /no `rows` array/);
  const bad = (patch: Record<string, unknown>) =>
    JSON.stringify({ rows: [rows[0], { ...rows[1], ...patch }] });
  assert.throws(() => parseRoutingRows(bad({ level: "high" })), /row 1: `level`/);
  assert.throws(() => parseRoutingRows(bad({ boundP90: "20" })), /row 1: `boundP90`/);
  assert.throws(() => parseRoutingRows(bad({ kv: { ttft_ms: {} } })), /row 1: `kv`/);
  assert.throws(() => parseRoutingRows(bad({ capacity: { lru: 1 } })), /row 1: `capacity`/);
});

/** The numeric attribute `attr` of the element carrying `data-row="i" data-mark="mark"`. */
function markAttr(svg: string, i: number, mark: string, attr: string): number {
  const element = svg.split("\n").find((l) =>
    l.includes(`data-row="${i}"`) && l.includes(`data-mark="${mark}"`)
  );
  assert.ok(element, `row ${i} has a ${mark} mark`);
  const m = element.match(new RegExp(`\\b${attr}="([-\\d.]+)"`));
  assert.ok(m, `the ${mark} mark of row ${i} has ${attr}`);
  return Number(m[1]);
}

function fill(svg: string, i: number, mark: string): string {
  const element = svg.split("\n").find((l) =>
    l.includes(`data-row="${i}"`) && l.includes(`data-mark="${mark}"`)
  )!;
  return element.match(/fill="([^"]+)"/)![1]!;
}

Deno.test("renderRoutingGoals puts each mark where its value says and colours the KV dots by their goal", () => {
  const rows = [
    row("moderate", 0, 0, { trace: "a seed 1" }), // KV at 0x and 0% of the ceiling
    row("moderate", 50, 0.25, { trace: "a seed 2" }), // 0.5x, 50%: p90 met, hit missed
    row("saturation", 100, 0.5, { trace: "b <c> seed 1" }), // 1x, 100%: p90 missed, hit met
  ];
  const svg = renderRoutingGoals(rows, "t & u");
  assert.match(svg, /^<svg [^>]*>/);
  assert.match(svg, /<\/svg>\n$/);
  assert.match(svg, /t &amp; u/);
  assert.match(svg, /b &lt;c&gt; seed 1, saturation/, "labels are escaped");
  // The ratio axis is linear from 0: 0.5x halfway between 0x and 1x.
  const at0 = markAttr(svg, 0, "kv-p90", "cx");
  const at1 = markAttr(svg, 2, "kv-p90", "cx");
  assert.ok(at1 > at0);
  assert.ok(Math.abs(markAttr(svg, 1, "kv-p90", "cx") - (at0 + at1) / 2) < 0.2);
  // The goal ticks: 0.6x at moderate load, a third near saturation.
  const goal = (i: number) => markAttr(svg, i, "p90-goal", "x1");
  assert.ok(Math.abs(goal(0) - (at0 + 0.6 * (at1 - at0))) < 0.2);
  assert.ok(Math.abs(goal(2) - (at0 + (at1 - at0) / 3)) < 0.2);
  // The bound (20 ms of round-robin's 100: 0.2x) and the better oracle placement (0.5x).
  assert.ok(Math.abs(markAttr(svg, 0, "bound", "x") + 3 - (at0 + 0.2 * (at1 - at0))) < 0.2);
  assert.ok(Math.abs(markAttr(svg, 0, "oracle", "cx") - (at0 + 0.5 * (at1 - at0))) < 0.2);
  // The hit axis: shares of the ceiling, 0% to 100%.
  const h0 = markAttr(svg, 0, "kv-hit", "cx");
  const h1 = markAttr(svg, 2, "kv-hit", "cx");
  assert.ok(h1 > h0 && h0 > at1);
  assert.ok(Math.abs(markAttr(svg, 1, "kv-hit", "cx") - (h0 + h1) / 2) < 0.2);
  assert.ok(Math.abs(markAttr(svg, 0, "hit-goal", "x1") - (h0 + 0.9 * (h1 - h0))) < 0.2);
  assert.ok(Math.abs(markAttr(svg, 0, "lru-hit", "cx") - (h0 + 0.75 * (h1 - h0))) < 0.2);
  assert.ok(Math.abs(markAttr(svg, 0, "rr-hit", "x") + 3 - (h0 + 0.5 * (h1 - h0))) < 0.2);
  // Colours: green where a goal is met, red where not; the status column says both.
  assert.equal(fill(svg, 1, "kv-p90"), fill(svg, 2, "kv-hit"));
  assert.notEqual(fill(svg, 1, "kv-p90"), fill(svg, 1, "kv-hit"));
  assert.equal(fill(svg, 1, "kv-hit"), fill(svg, 2, "kv-p90"));
  assert.match(svg, /data-row="0" data-mark="status">missed</);
  assert.match(svg, /data-row="1" data-mark="status">missed</);
  assert.match(svg, /data-row="2" data-mark="status">missed</);
  assert.match(svg, /0 of 3 rows meet both goals/);
  // A row that meets both, and one that shares nothing.
  const ok = renderRoutingGoals([
    row("moderate", 50, 0.45),
    row("saturation", 90, 0, { ceiling: 0 }),
  ], "t");
  assert.match(ok, /data-row="0" data-mark="status">met</);
  assert.match(ok, /data-row="1" data-mark="status">met</);
  assert.match(ok, /nothing shared/);
  assert.doesNotMatch(ok, /data-row="1" data-mark="kv-hit"/);
  assert.match(ok, /2 of 2 rows meet both goals/);
});

Deno.test("groupRows sums seeds of one trace up per load: mean and worst, rows met", () => {
  const groups = groupRows([
    row("moderate", 50, 0.5, { trace: "a seed 1" }), // 0.5x, 100%: met
    row("saturation", 30, 0.5, { trace: "a seed 1" }),
    row("moderate", 70, 0.4, { trace: "a seed 2" }), // 0.7x, 80%: missed
    row("moderate", 95, 0, { trace: "n seed 1", ceiling: 0 }),
    row("moderate", 40, 0.5, { trace: "mooncake (first 10)" }),
  ]);
  assert.deepEqual(groups.map((g) => `${g.group} ${g.level} ${g.met}/${g.rows}`), [
    "a moderate 1/2",
    "a saturation 1/1",
    "n moderate 1/1",
    "mooncake (first 10) moderate 1/1",
  ]);
  const [a] = groups;
  assert.ok(Math.abs(a!.p90.mean - 0.6) < 1e-12 && Math.abs(a!.p90.worst - 0.7) < 1e-12);
  assert.ok(Math.abs(a!.hit!.mean - 0.9) < 1e-12 && Math.abs(a!.hit!.worst - 0.8) < 1e-12);
  assert.equal(groups[2]!.hit, undefined, "nothing shared");
});
