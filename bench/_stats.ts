// Small statistics and timing helpers for the benchmarks: percentiles, summaries, and
// an interleaved latency runner (cases take turns, so drift on a noisy machine hits all).

/** Summary of latency samples, in milliseconds. */
export interface Summary {
  n: number;
  min: number;
  p50: number;
  p90: number;
  p99: number;
  mean: number;
  max: number;
}

/** Nearest-rank percentile of an ascending array (`p` in 0..100). */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

/** Summarizes samples (ms). */
export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  let sum = 0;
  for (const s of sorted) sum += s;
  return {
    n: sorted.length,
    min: sorted[0] ?? Number.NaN,
    p50: percentile(sorted, 50),
    p90: percentile(sorted, 90),
    p99: percentile(sorted, 99),
    mean: sorted.length ? sum / sorted.length : Number.NaN,
    max: sorted[sorted.length - 1] ?? Number.NaN,
  };
}

/** One latency case: `once()` does one complete operation. */
export interface LatencyCase {
  name: string;
  once: () => Promise<void>;
  /** Called once warm-up is over, before the first timed iteration. */
  startRecording?: () => void;
}

/** Options of {@linkcode measureInterleaved}. */
export interface MeasureInterleavedOptions {
  /** Untimed iterations per case before measuring. */
  warmup: number;
  /** Timed iterations per case, in total over all rounds. */
  iterations: number;
  /** Rounds; in each, every case runs iterations/rounds times, in turn. */
  rounds: number;
  /** Time cap per case and round (ms); a round stops early past it. */
  maxRoundMs: number;
  /** Time cap for the whole measurement (ms); later rounds are skipped past it. */
  maxTotalMs: number;
  /**
   * A case's warm-up or round still running this long past `maxRoundMs` (one operation that
   * never ends) fails the measurement (default 10,000 ms). One deadline per case and round, not
   * a timer per operation: arming and clearing one per operation costs a few microseconds,
   * which a hop of tens of microseconds would carry and its raw baselines would not.
   */
  hangMs?: number;
}

/**
 * `work` unless it is still running `ms` from now: then an Error naming `what`.
 */
export function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still running after ${ms} ms`)), ms);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

/**
 * Measures each case's per-operation latency (ms), interleaving the cases in rounds.
 * @returns samples by case name
 */
export async function measureInterleaved(
  cases: readonly LatencyCase[],
  options: MeasureInterleavedOptions,
): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  const end = performance.now() + options.maxTotalMs;
  const guard = options.maxRoundMs + (options.hangMs ?? 10_000);
  for (const c of cases) {
    out.set(c.name, []);
    const deadline = performance.now() + options.maxRoundMs;
    await withTimeout(
      (async () => {
        for (let i = 0; i < options.warmup && performance.now() < deadline; i++) await c.once();
      })(),
      guard,
      `${c.name} warm-up`,
    );
  }
  for (const c of cases) c.startRecording?.();
  const perRound = Math.ceil(options.iterations / options.rounds);
  for (let r = 0; r < options.rounds && performance.now() < end; r++) {
    for (const c of cases) {
      const samples = out.get(c.name)!;
      const deadline = performance.now() + options.maxRoundMs;
      await withTimeout(
        (async () => {
          for (let i = 0; i < perRound && performance.now() < deadline; i++) {
            const t0 = performance.now();
            await c.once();
            samples.push(performance.now() - t0);
          }
        })(),
        guard,
        `${c.name}, round ${r + 1}`,
      );
    }
  }
  return out;
}

/** Runs `fn` with `concurrency` loops in flight for `count` operations or `maxMs`. */
export async function measureConcurrent(
  fn: () => Promise<void>,
  concurrency: number,
  count: number,
  maxMs: number,
): Promise<{ ops: number; seconds: number; perSecond: number }> {
  let started = 0;
  let done = 0;
  const t0 = performance.now();
  const deadline = t0 + maxMs;
  const loop = async () => {
    while (started < count && performance.now() < deadline) {
      started++;
      await fn();
      done++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, loop));
  const seconds = (performance.now() - t0) / 1000;
  return { ops: done, seconds, perSecond: done / seconds };
}

/** Formats a number of ms with 3 decimals. */
export function ms(x: number): string {
  return Number.isFinite(x) ? x.toFixed(3) : "-";
}

/** Formats a rate with thousands separators. */
export function rate(x: number): string {
  return Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "-";
}

/**
 * Checks a command line against the flags a benchmark takes, each given as `--name` (a switch)
 * or `--name VALUE` (one value follows) with its help text.
 *
 * @param args the command line
 * @param flags the flags and their help
 * @returns `"help"` for `--help` or `-h`, else the first problem found, or undefined
 */
export function flagProblem(
  args: readonly string[],
  flags: Readonly<Record<string, string>>,
): string | undefined {
  const takesValue = new Map<string, boolean>();
  for (const spec of Object.keys(flags)) {
    const [name, value] = spec.split(" ");
    takesValue.set(name!, value !== undefined);
  }
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--help" || a === "-h") return "help";
    const value = takesValue.get(a);
    if (value === undefined) return `unknown flag ${JSON.stringify(a)}`;
    if (!value) continue;
    const next = args[i + 1];
    if (next === undefined || next.startsWith("--")) return `${a} needs a value`;
    i++;
  }
  return undefined;
}

/**
 * Checks `Deno.args` against the flags a benchmark takes (see {@linkcode flagProblem}): prints
 * the usage and exits 0 on `--help`, and 2 (with the problem and the usage) on an unknown flag
 * or a missing value, before any work starts.
 *
 * @param program how it is run (`deno task bench:router`)
 * @param about one line on what it measures
 * @param flags `--name` or `--name VALUE` -> help text
 */
export function checkFlags(
  program: string,
  about: string,
  flags: Readonly<Record<string, string>>,
): void {
  const problem = flagProblem(Deno.args, flags);
  if (problem === undefined) return;
  const width = Math.max(...Object.keys(flags).map((k) => k.length)) + 2;
  const usage = `${program} [flags]\n\n${about}\n\n` +
    Object.entries(flags).map(([k, v]) => `  ${k.padEnd(width)}${v}`).join("\n");
  if (problem === "help") {
    // deno-lint-ignore no-console -- a program's usage
    console.log(usage);
    Deno.exit(0);
  }
  // deno-lint-ignore no-console -- a program's usage
  console.error(`${program}: ${problem}\n\n${usage}`);
  Deno.exit(2);
}

/** The values after each `--name` on the command line (a flag given more than once). */
export function flagValues(name: string): string[] {
  const out: string[] = [];
  Deno.args.forEach((a, i) => {
    if (a === name && i + 1 < Deno.args.length) out.push(Deno.args[i + 1]!);
  });
  return out;
}

/** The value after `--name` on the command line, if any. */
export function flag(name: string): string | undefined {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
}

/** Deterministic pseudo-random numbers in [0, 1) (xorshift32), so runs compare. */
export function seededRandom(seed: number): () => number {
  let s = seed;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}
