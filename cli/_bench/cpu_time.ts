// CPU time from /proc (Linux): a process's own seconds and the whole machine's busy seconds, for
// `dynamo bench` and the benchmarks to see who saturates.

let ticksPerSecond: number | undefined;

/** Clock ticks per second of /proc/PID/stat times (`getconf CLK_TCK`, 100 if unknown). */
export async function clockTicks(): Promise<number> {
  if (ticksPerSecond !== undefined) return ticksPerSecond;
  try {
    const out = await new Deno.Command("getconf", { args: ["CLK_TCK"], stdout: "piped" }).output();
    const n = Number(new TextDecoder().decode(out.stdout).trim());
    ticksPerSecond = Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    ticksPerSecond = 100;
  }
  return ticksPerSecond;
}

/** User + system CPU seconds of a process (own process: "self"); NaN off Linux. */
export function cpuSeconds(pid: number | "self"): number {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const utime = Number(fields[11]);
    const stime = Number(fields[12]);
    return (utime + stime) / (ticksPerSecond ?? 100);
  } catch {
    return Number.NaN;
  }
}

/** CPU seconds the whole machine spent busy (all cores, all processes); NaN off Linux. */
export function machineBusySeconds(): number {
  try {
    const line = Deno.readTextFileSync("/proc/stat").split("\n", 1)[0]!;
    // cpu user nice system idle iowait irq softirq steal guest guest_nice
    const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = f.reduce((s, x) => s + x, 0);
    return (total - f[3]! - f[4]!) / (ticksPerSecond ?? 100);
  } catch {
    return Number.NaN;
  }
}

/** CPU use of a live replay: the server process's and the whole machine's, in cores. */
export interface ReplayCpu {
  /** The server process (frontend and mockers), all threads; 1 = one core all the time. */
  server_cores: number;
  /** Every process on the machine, the load generator and other work included. */
  machine_cores: number;
}

/**
 * Server CPU, in cores over the whole replay, above which a live replay measures the server's
 * own queueing as well as the routing: its frontend and every mocker share one JavaScript
 * thread, and the average hides the bursts. On a 2-core machine (`multi-tenant` seed 1, kv,
 * live against the simulator's figures; BENCHMARKS.md): 0.21 and 0.32 cores, the live TTFT
 * p50 3-4 ms above the simulated (the process and HTTP time); 0.44 cores, 7 ms; 0.45 cores at a
 * higher load, 20 ms (+54%).
 */
export const SERVER_BUSY_CORES = 0.35;
/** Share of all the machine's cores busy above which the machine itself was the bottleneck. */
export const MACHINE_BUSY_SHARE = 0.85;

/**
 * Warnings for the modes whose live replay was CPU-bound, with what to do about it.
 *
 * @param cpu CPU use per mode (NaN figures, off Linux, give no warning)
 * @param cores the machine's cores
 * @returns one line per such mode
 */
export function cpuWarnings(cpu: Record<string, ReplayCpu>, cores: number): string[] {
  const lines: string[] = [];
  for (const [mode, c] of Object.entries(cpu)) {
    const server = c.server_cores > SERVER_BUSY_CORES;
    const machine = c.machine_cores > MACHINE_BUSY_SHARE * cores;
    if (!server && !machine) continue;
    const what = server
      ? `the server process was busy ${c.server_cores.toFixed(2)} of a core`
      : `the machine was busy ${c.machine_cores.toFixed(2)} of its ${cores} cores`;
    lines.push(
      `warning: ${mode}: ${what} during the replay, so its TTFTs include waits for the CPU ` +
        `(the frontend and every mocker share one thread): slow the engine (--engine-speedup ` +
        `0.25 with --speedup a quarter as high keeps the load) or replay with --simulate`,
    );
  }
  return lines;
}
