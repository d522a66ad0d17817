// Process helpers for `bench:frontend`: start a server script that prints its URL, stop it
// with a deadline, and extra client processes.

import type { LoadCommand, LoadResult } from "./_frontend_loadgen.ts";
import { withTimeout } from "./_stats.ts";

/** A server in its own process. */
export interface ServerProcess {
  readonly url: string;
  readonly pid: number;
  stop(): Promise<void>;
}

/**
 * Spawns `deno <args>` in the repository root and waits for a stdout line with `http://HOST:PORT`.
 * @param name label for its forwarded output
 */
export async function startServer(
  name: string,
  args: string[],
  log: (msg: string) => void,
  onStderrLine?: (line: string) => void,
): Promise<ServerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    cwd: new URL("..", import.meta.url).pathname,
    env: { NO_COLOR: "1" },
  }).spawn();
  const forward = async (stream: ReadableStream<Uint8Array>, onLine: (l: string) => void) => {
    let pending = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      pending += text;
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        onLine(line);
      }
    }
  };
  const url = Promise.withResolvers<string>();
  const outDone = forward(child.stdout, (line) => {
    const m = /(http:\/\/[\w.:[\]-]+)/.exec(line);
    if (m) url.resolve(m[1]!);
    else if (line.trim() !== "") log(`[${name}] ${line}`);
  }).catch(() => {});
  const errDone = forward(child.stderr, (line) => {
    onStderrLine?.(line);
    if (line.trim() !== "" && !line.startsWith("npm warn")) log(`[${name}] ${line}`);
  }).catch(() => {});
  child.status.then((s) =>
    url.reject(new Error(`${name} exited (code ${s.code}) before listening`))
  );
  let found: string;
  try {
    found = await withTimeout(url.promise, 60_000, `starting ${name}`);
  } catch (err) {
    child.kill("SIGKILL");
    await child.status;
    throw err;
  }
  let stopping: Promise<void> | undefined;
  return {
    url: found,
    pid: child.pid,
    stop() {
      stopping ??= (async () => {
        try {
          child.kill("SIGTERM");
        } catch {
          // already gone
        }
        try {
          await withTimeout(child.status, 10_000, `${name} shutdown`);
        } catch {
          child.kill("SIGKILL");
          await child.status;
        }
        await Promise.all([outDone, errDone]);
      })();
      return stopping;
    },
  };
}

/** An extra client process (bench/_frontend_loadgen.ts). */
export interface LoadClient {
  run(command: LoadCommand): Promise<LoadResult>;
  stop(): Promise<void>;
}

/** Starts an extra client process; it idles until given a load. */
export function startLoadClient(log: (msg: string) => void): LoadClient {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "bench/_frontend_loadgen.ts"],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    cwd: new URL("..", import.meta.url).pathname,
    env: { NO_COLOR: "1" },
  }).spawn();
  const writer = child.stdin.getWriter();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const errDone = (async () => {
    for await (const text of child.stderr.pipeThrough(new TextDecoderStream())) {
      for (const l of text.split("\n")) {
        if (l.trim() !== "" && !l.startsWith("npm warn")) log(`[client] ${l}`);
      }
    }
  })().catch(() => {});
  let pending = "";
  const nextLine = async (): Promise<string> => {
    for (;;) {
      const nl = pending.indexOf("\n");
      if (nl >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        return line;
      }
      const { value, done } = await lines.read();
      if (done) throw new Error("the client process exited");
      pending += value;
    }
  };
  let stopping: Promise<void> | undefined;
  return {
    async run(command) {
      await writer.write(new TextEncoder().encode(JSON.stringify(command) + "\n"));
      const result = JSON.parse(
        await withTimeout(nextLine(), command.maxMs + 30_000, "client process load"),
      ) as LoadResult;
      if (result.error) throw new Error(`client process: ${result.error}`);
      return result;
    },
    stop() {
      stopping ??= (async () => {
        await writer.close().catch(() => {});
        try {
          await withTimeout(child.status, 10_000, "client process exit");
        } catch {
          child.kill("SIGKILL");
          await child.status;
        }
        await lines.cancel().catch(() => {});
        await errDone;
      })();
      return stopping;
    },
  };
}
