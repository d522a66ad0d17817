// An extra client process for `bench:frontend --clients N`: reads one JSON `LoadCommand`
// per stdin line, drives that load with `fetch`, and answers with one JSON `LoadResult`
// line on stdout. Exits when stdin closes.

import { streamOnce } from "./_frontend_client.ts";
import { clockTicks, cpuSeconds } from "../cli/_bench/cpu_time.ts";
import { measureConcurrent } from "./_stats.ts";

/** One load to drive. */
export interface LoadCommand {
  url: string;
  body: string;
  concurrency: number;
  requests: number;
  maxMs: number;
  /** Chunks every answer must have. */
  chunks: number;
}

/** What one load did. */
export interface LoadResult {
  ops: number;
  seconds: number;
  /** CPU seconds this process used meanwhile. */
  cpu: number;
  error?: string;
}

/** Runs one load in this process. */
export async function runLoad(cmd: LoadCommand): Promise<LoadResult> {
  const cpu0 = cpuSeconds("self");
  const res = await measureConcurrent(
    async () => {
      const t = await streamOnce(cmd.url, cmd.body);
      if (t.chunks !== cmd.chunks) throw new Error(`${t.chunks} chunks, not ${cmd.chunks}`);
    },
    cmd.concurrency,
    cmd.requests,
    cmd.maxMs,
  );
  return { ops: res.ops, seconds: res.seconds, cpu: cpuSeconds("self") - cpu0 };
}

if (import.meta.main) {
  await clockTicks();
  const encoder = new TextEncoder();
  let pending = "";
  for await (const text of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      let result: LoadResult;
      try {
        result = await runLoad(JSON.parse(line) as LoadCommand);
      } catch (err) {
        result = { ops: 0, seconds: 0, cpu: 0, error: String(err) };
      }
      await Deno.stdout.write(encoder.encode(JSON.stringify(result) + "\n"));
    }
  }
  Deno.exit(0);
}
