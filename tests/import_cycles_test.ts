// The project's module graph has no import cycles. One `deno info --json` over a generated
// entry that imports every TypeScript file of the project (entry points, library, tests,
// benchmarks, examples), then Tarjan's strongly connected components over the edges between
// project files (static, type-only and dynamic imports alike; npm: and node: are leaves).

import assert from "node:assert/strict";

/**
 * Cycles known and accepted for now, each named by the project-relative paths of all the
 * modules in it (one strongly connected component) and why it may stay. Empty it, never
 * grow it: a listed cycle that no longer occurs fails the test too, so the list shrinks
 * as cycles are removed.
 */
const ALLOWED_CYCLES: ReadonlyArray<{ why: string; modules: readonly string[] }> = [];

const ROOT = new URL("../", import.meta.url);
const SKIPPED_DIRS = new Set(["node_modules", "dist", "target"]);
const SOURCE = /\.(ts|tsx|mts|js|mjs)$/;

/** One module of `deno info --json`. */
interface InfoModule {
  specifier: string;
  error?: string;
  dependencies?: {
    specifier: string;
    isDynamic?: boolean;
    code?: { specifier?: string };
    type?: { specifier?: string };
  }[];
}

/** The project's source files (as file: URLs), skipping hidden, vendored and built folders. */
async function sourceFiles(dir: URL): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.name.startsWith(".") || entry.isSymlink) continue;
    if (entry.isDirectory) {
      if (!SKIPPED_DIRS.has(entry.name)) {
        out.push(...await sourceFiles(new URL(`${entry.name}/`, dir)));
      }
    } else if (entry.isFile && SOURCE.test(entry.name)) {
      out.push(new URL(entry.name, dir).href);
    }
  }
  return out;
}

/** The local module graph: each project module and the project modules it imports. */
async function projectGraph(): Promise<{ graph: Map<string, Set<string>>; errors: string[] }> {
  const files = (await sourceFiles(ROOT)).sort();
  const dir = await Deno.makeTempDir({ prefix: "import_cycles_" });
  try {
    const entry = `${dir}/all.ts`;
    await Deno.writeTextFile(entry, files.map((f) => `import ${JSON.stringify(f)};\n`).join(""));
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", "--config", new URL("deno.json", ROOT).pathname, entry],
      stdout: "piped",
      stderr: "piped",
      env: { NO_COLOR: "1" },
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.ok(out.success, `deno info failed: ${stderr}`);
    const info = JSON.parse(new TextDecoder().decode(out.stdout)) as { modules: InfoModule[] };
    const local = (s: string | undefined): s is string => !!s?.startsWith(ROOT.href);
    const graph = new Map<string, Set<string>>();
    const errors: string[] = [];
    for (const m of info.modules) {
      if (!local(m.specifier)) continue;
      if (m.error) errors.push(`${rel(m.specifier)}: ${m.error}`);
      const deps = new Set<string>();
      for (const d of m.dependencies ?? []) {
        for (const target of [d.code?.specifier, d.type?.specifier]) {
          if (local(target)) deps.add(target);
        }
      }
      graph.set(m.specifier, deps);
    }
    assert.equal(
      files.filter((f) => !graph.has(f)).join(", "),
      "",
      "deno info left out project files",
    );
    return { graph, errors };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Tarjan's algorithm: the strongly connected components that are cycles (more than one
 * module, or one that imports itself), each sorted, in a stable order.
 */
function findCycles(graph: ReadonlyMap<string, ReadonlySet<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || graph.get(v)?.has(v)) cycles.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return cycles.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** The shortest loop from `start` back to it inside `component` (breadth-first). */
function cyclePath(
  graph: ReadonlyMap<string, ReadonlySet<string>>,
  component: readonly string[],
  start: string = component[0]!,
): string[] {
  const members = new Set(component);
  const parent = new Map<string, string>();
  const queue = [start];
  for (let i = 0; i < queue.length; i++) {
    const v = queue[i]!;
    for (const w of graph.get(v) ?? []) {
      if (w === start) {
        const path: string[] = [];
        for (let u = v; u !== start; u = parent.get(u)!) path.unshift(u);
        return [start, ...path, start];
      }
      if (members.has(w) && !parent.has(w)) {
        parent.set(w, v);
        queue.push(w);
      }
    }
  }
  return [start];
}

function rel(url: string): string {
  return url.startsWith(ROOT.href) ? url.slice(ROOT.href.length) : url;
}

Deno.test("findCycles and cyclePath report each cycle of a small graph, and only cycles", () => {
  const graph = new Map<string, Set<string>>([
    ["a", new Set(["b"])],
    ["b", new Set(["c"])],
    ["c", new Set(["a", "d"])],
    ["d", new Set(["e"])],
    ["e", new Set()],
    ["f", new Set(["f"])],
  ]);
  const cycles = findCycles(graph);
  assert.deepEqual(cycles, [["a", "b", "c"], ["f"]]);
  assert.deepEqual(cyclePath(graph, cycles[0]!), ["a", "b", "c", "a"]);
  assert.deepEqual(cyclePath(graph, cycles[0]!, "c"), ["c", "a", "b", "c"]);
  assert.deepEqual(cyclePath(graph, cycles[1]!), ["f", "f"]);
  assert.deepEqual(findCycles(new Map([["x", new Set(["y"])], ["y", new Set()]])), []);
});

Deno.test("the project's modules import each other without cycles", async () => {
  const { graph, errors } = await projectGraph();
  assert.equal(
    errors.length,
    0,
    `deno info could not load (the graph is incomplete):\n${errors.join("\n")}`,
  );
  const allowed = new Map(ALLOWED_CYCLES.map((c) => [[...c.modules].sort().join(" "), c]));
  const found: string[] = [];
  const seen = new Set<string>();
  for (const component of findCycles(graph)) {
    const key = component.map(rel).join(" ");
    seen.add(key);
    if (allowed.has(key)) continue;
    // Loops until every module of the component is on one: a component may hold several
    // cycles that share a module, and each needs its own fix.
    const covered = new Set<string>();
    const loops: string[] = [];
    for (const start of component) {
      if (covered.has(start)) continue;
      const loop = cyclePath(graph, component, start);
      for (const m of loop) covered.add(m);
      loops.push(`  ${loop.map(rel).join(" -> ")}`);
    }
    found.push(`modules ${component.map(rel).join(", ")}:\n${loops.join("\n")}`);
  }
  if (found.length > 0) {
    assert.fail(
      `${found.length} import cycle(s) among the project's ${graph.size} modules:\n` +
        `${found.join("\n")}\nBreak each by moving what both sides need into a module of its ` +
        "own (a types.ts), or by inverting one import.",
    );
  }
  const stale = [...allowed.keys()].filter((k) => !seen.has(k));
  assert.equal(
    stale.length,
    0,
    `ALLOWED_CYCLES lists cycles that are gone, remove them:\n${stale.join("\n")}`,
  );
});

Deno.test("a plane's backends import its types.ts, never a mod.ts, and types.ts imports no backend", async () => {
  const { graph } = await projectGraph();
  const plane = /^runtime\/(discovery|events|objects|transport|hub)\/([^/]+)$/;
  const wrong: string[] = [];
  for (const [module, deps] of graph) {
    const m = plane.exec(rel(module));
    if (!m || m[2] === "mod.ts" || m[2]!.endsWith("_test.ts")) continue;
    for (const dep of deps) {
      const to = rel(dep);
      const backendOrMod = to.endsWith("/mod.ts") ||
        (m[2] === "types.ts" && !to.endsWith("/types.ts"));
      if (backendOrMod) wrong.push(`${rel(module)} -> ${to}`);
    }
  }
  assert.equal(
    wrong.length,
    0,
    `plane modules that import a mod.ts or a backend:\n${wrong.join("\n")}`,
  );
});
