// CPU time from /proc (Linux), for the benchmarks to see who saturates: a process's own
// seconds and the whole machine's busy seconds.

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
