// Child processes for tests: spawn a Deno script, read its stdout as JSON lines, and
// wait for a matching line with a deadline.

/** A child process whose stdout lines are collected. */
export interface ChildHandle {
  readonly child: Deno.ChildProcess;
  readonly lines: unknown[];
  /** Resolves with the first line (past or future) matching `pred`, or fails after `ms`. */
  waitFor<T = Record<string, unknown>>(
    pred: (line: Record<string, unknown>) => boolean,
    ms: number,
    what: string,
  ): Promise<T>;
  /** Sends a signal (ignores an already exited process). */
  kill(signal?: Deno.Signal): void;
  /** Resolves with the exit status. */
  readonly status: Promise<Deno.CommandStatus>;
}

/**
 * Sends SIGTERM to a child, then SIGKILL if it has not exited after `graceMs`; resolves with its
 * exit status. A child that has already exited is not an error.
 *
 * @param child the process
 * @param graceMs how long it may take to exit by itself (default 10 s)
 */
export async function terminate(
  child: Deno.ChildProcess,
  graceMs = 10_000,
): Promise<Deno.CommandStatus> {
  const send = (sig: Deno.Signal) => {
    try {
      child.kill(sig);
    } catch { /* already exited */ }
  };
  send("SIGTERM");
  const timer = setTimeout(() => send("SIGKILL"), graceMs);
  try {
    return await child.status;
  } finally {
    clearTimeout(timer);
  }
}

/** Options of {@linkcode spawnDeno}. */
export interface SpawnDenoOptions {
  /** Receives each line the child writes to stderr (default: stderr is the test's). */
  onStderrLine?: (line: string) => void;
}

/** Calls `onLine` with each line of `stream` (a last line without a newline included). */
export async function eachLine(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  let buf = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    buf += chunk;
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      onLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  }
  if (buf !== "") onLine(buf);
}

/** Spawns `deno run -A script` with extra env; stdout lines parsed as JSON when they are JSON. */
export function spawnDeno(
  script: string,
  env: Record<string, string>,
  args: string[] = [],
  options: SpawnDenoOptions = {},
): ChildHandle {
  const onStderrLine = options.onStderrLine;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, ...args],
    env,
    stdout: "piped",
    stderr: onStderrLine ? "piped" : "inherit",
    stdin: "null",
  }).spawn();
  const lines: unknown[] = [];
  const listeners = new Set<() => void>();
  void eachLine(child.stdout, (line) => {
    try {
      lines.push(JSON.parse(line));
    } catch {
      lines.push({ text: line });
    }
    for (const l of [...listeners]) l();
  }).catch(() => {/* the pipe broke: the child is gone, its status says how */});
  if (onStderrLine) eachLine(child.stderr, onStderrLine).catch(() => {});
  return {
    child,
    lines,
    status: child.status,
    kill(signal = "SIGKILL") {
      try {
        child.kill(signal);
      } catch {
        // already exited
      }
    },
    waitFor(pred, ms, what) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const hit = lines.find((l) =>
            typeof l === "object" && l !== null && pred(l as Record<string, unknown>)
          );
          if (hit !== undefined) {
            cleanup();
            resolve(hit as never);
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(
            new Error(
              `timed out after ${ms} ms waiting for ${what}; lines so far: ${
                JSON.stringify(lines.slice(-5))
              }`,
            ),
          );
        }, ms);
        const cleanup = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
  };
}

/** What a finished process printed. */
export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

const ROOT = new URL("../..", import.meta.url).pathname;

/**
 * Runs `deno run -A ...args` from the repository root to completion; fails the test if
 * it is still running after `timeoutMs`.
 */
export async function runDeno(
  args: string[],
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<RunResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...args],
    cwd: ROOT,
    env,
    stdin: "null",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  const result = {
    code: out.code,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
  if (out.signal !== null) {
    throw new Error(
      `deno run ${
        args.join(" ")
      } was killed by ${out.signal} (deadline ${timeoutMs} ms)\n${result.stderr}`,
    );
  }
  return result;
}
