// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:soak`: memory over a long run at full load. Starts `dynamo run in=http
// out=echo`, drives streaming chat completions at a fixed concurrency for --minutes
// (default 10), and samples the server's resident memory (VmRSS from /proc, Linux) every
// --sample-s seconds. Reports the RSS after warm-up, at the end and at its peak, and the
// growth per minute from a least-squares line through the samples after warm-up: flat
// memory is a slope near zero. Also counts requests and failures.
//
// Flags: --minutes M (default 10), --concurrency N (default 32), --sample-s S (default 10),
// --warmup-s S (default 30), --json PATH.

import { chatBody, streamOnce } from "./_frontend_client.ts";
import { startServer } from "./_frontend_proc.ts";
import { checkFlags, flag } from "./_stats.ts";

checkFlags(
  "deno task bench:soak",
  "A long run at fixed concurrency: memory over time.",
  {
    "--minutes M": "how long (default 10)",
    "--concurrency N": "streams in flight (default 32)",
    "--sample-s S": "seconds between samples (default 10)",
    "--warmup-s S": "seconds before the first sample (default 30)",
    "--json PATH": "write the results there",
  },
);

const MINUTES = Number(flag("--minutes") ?? 10);
const CONCURRENCY = Number(flag("--concurrency") ?? 32);
const SAMPLE_S = Number(flag("--sample-s") ?? 10);
const WARMUP_S = Number(flag("--warmup-s") ?? 30);
const jsonPath = flag("--json");
const log = (msg: string) => console.error(`[soak] ${msg}`);

for (const [name, v] of [["--minutes", MINUTES], ["--concurrency", CONCURRENCY]] as const) {
  if (!(v > 0)) throw new Error(`${name} must be > 0, got ${v}`);
}

/** Resident memory of a process in MiB (VmRSS). */
function rssMiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1]);
  if (!Number.isFinite(kb)) throw new Error(`no VmRSS for pid ${pid}`);
  return kb / 1024;
}

/** Least-squares slope of y over x. */
function slope(points: readonly [number, number][]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

const server = await startServer(
  "dynamo",
  ["run", "-A", "cli/main.ts", "run", "in=http", "out=echo", "--http-port", "0"],
  log,
);
try {
  const models = await (await fetch(`${server.url}/v1/models`)).json() as {
    data: { id: string }[];
  };
  const url = `${server.url}/v1/chat/completions`;
  const body = chatBody(models.data[0]!.id);
  const started = performance.now();
  const endAt = started + MINUTES * 60_000;
  let requests = 0;
  let failures = 0;
  let lastError = "";
  const samples: { s: number; rss: number; requests: number }[] = [];
  const sample = () => {
    const s = (performance.now() - started) / 1000;
    samples.push({ s, rss: rssMiB(server.pid), requests });
    log(`${s.toFixed(0)} s: rss ${samples.at(-1)!.rss.toFixed(1)} MiB, ${requests} requests`);
  };
  sample();
  const sampler = setInterval(sample, SAMPLE_S * 1000);
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (performance.now() < endAt) {
      try {
        await streamOnce(url, body);
        requests++;
      } catch (err) {
        failures++;
        lastError = String(err);
      }
    }
  }));
  clearInterval(sampler);
  sample();

  const steady = samples.filter((x) => x.s >= WARMUP_S);
  const first = steady[0] ?? samples[0]!;
  const last = samples.at(-1)!;
  const peak = Math.max(...samples.map((x) => x.rss));
  const perMinute = slope(steady.map((x) => [x.s / 60, x.rss]));
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `\nsoak: ${MINUTES} min at concurrency ${CONCURRENCY}: ${requests} requests ` +
      `(${(requests / seconds).toFixed(0)}/s), ${failures} failed${
        failures ? ` (last: ${lastError})` : ""
      }`,
  );
  console.log(
    `server RSS: ${first.rss.toFixed(1)} MiB after ${WARMUP_S} s warm-up, ` +
      `${last.rss.toFixed(1)} MiB at the end, peak ${peak.toFixed(1)} MiB; ` +
      `trend after warm-up ${perMinute >= 0 ? "+" : ""}${perMinute.toFixed(2)} MiB/min`,
  );
  if (jsonPath) {
    await Deno.writeTextFile(
      jsonPath,
      JSON.stringify(
        { minutes: MINUTES, concurrency: CONCURRENCY, requests, failures, samples, perMinute },
        null,
        2,
      ),
    );
  }
} finally {
  await server.stop();
}
