// A real Prometheus server for tests: installed through scripts/install_prometheus.sh when
// missing, started on a free loopback port with its storage in a temp folder and a 1 s
// scrape interval, queried through its HTTP API, and stopped (folder removed) afterwards.

import { terminate } from "./process.ts";
import { findBinary, freePort } from "./servers.ts";

const INSTALL = new URL("../../scripts/install_prometheus.sh", import.meta.url).pathname;

/**
 * The `prometheus` binary, installed with apt-get when missing; undefined (with why) when it
 * cannot be had.
 */
export async function ensurePrometheus(): Promise<{ path?: string; why?: string }> {
  const found = findBinary("prometheus");
  if (found) return { path: found };
  const out = await new Deno.Command("bash", { args: [INSTALL], stdout: "piped", stderr: "piped" })
    .output();
  const path = findBinary("prometheus");
  if (path) return { path };
  const err = new TextDecoder().decode(out.stderr).trim().split("\n").slice(-3).join(" | ");
  return { why: `prometheus is not installed and apt-get could not install it: ${err}` };
}

/** A scrape job: its name and `host:port` targets. */
export interface ScrapeJob {
  job: string;
  targets: string[];
}

/** One series of an instant query's answer. */
export interface PromSample {
  metric: Record<string, string>;
  value: [number, string];
}

/** A running Prometheus. */
export interface Prometheus {
  readonly url: string;
  /** An instant query at now (`/api/v1/query`); throws unless the answer is a success. */
  query(expr: string): Promise<PromSample[]>;
  /**
   * Queries until `accept` takes the answer, at most `ms`; throws with the last answer
   * (scrapes come every second, so a fresh fact takes a scrape or two to show).
   */
  until(
    expr: string,
    accept: (r: PromSample[]) => boolean,
    ms: number,
    what: string,
  ): Promise<PromSample[]>;
  /** Everything it logged so far. */
  log(): string;
  stop(): Promise<void>;
}

/**
 * Starts Prometheus scraping `jobs` every second.
 * @throws {Error} it exits or does not get ready within 30 s
 */
export async function startPrometheus(binary: string, jobs: ScrapeJob[]): Promise<Prometheus> {
  const dir = await Deno.makeTempDir({ prefix: "dynamo_prometheus_" });
  const port = freePort();
  const config = [
    "global:",
    "  scrape_interval: 1s",
    "  scrape_timeout: 1s",
    "  evaluation_interval: 1s",
    "scrape_configs:",
    ...jobs.flatMap((j) => [
      `  - job_name: ${JSON.stringify(j.job)}`,
      "    static_configs:",
      `      - targets: ${JSON.stringify(j.targets)}`,
    ]),
  ].join("\n");
  await Deno.writeTextFile(`${dir}/prometheus.yml`, config + "\n");
  const child = new Deno.Command(binary, {
    args: [
      `--config.file=${dir}/prometheus.yml`,
      `--storage.tsdb.path=${dir}/data`,
      `--web.listen-address=127.0.0.1:${port}`,
      "--log.level=warn",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s.pipeThrough(new TextDecoderStream())) text += chunk;
  };
  const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]).catch(() => {});
  let exited = false;
  child.status.then(() => exited = true);
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    await terminate(child); // an exited child is no error
    await pumped;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`prometheus exited before it was ready:\n${text}`);
    }
    const ready = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2000) })
      .then(async (r) => (await r.body?.cancel(), r.ok), () => false);
    if (ready) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus was not ready within 30 s:\n${text}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  const query = async (expr: string): Promise<PromSample[]> => {
    const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`, {
      signal: AbortSignal.timeout(10_000),
    });
    const body = await res.json() as {
      status: string;
      error?: string;
      data?: { resultType: string; result: PromSample[] };
    };
    if (body.status !== "success" || !body.data) {
      throw new Error(`query ${expr} failed (${res.status}): ${body.error ?? "no data"}`);
    }
    if (body.data.resultType !== "vector") {
      throw new Error(`query ${expr} answered a ${body.data.resultType}, not a vector`);
    }
    return body.data.result;
  };
  return {
    url,
    query,
    async until(expr, accept, ms, what) {
      const end = Date.now() + ms;
      let last: PromSample[] = [];
      for (;;) {
        last = await query(expr);
        if (accept(last)) return last;
        if (Date.now() > end) {
          throw new Error(
            `timed out after ${ms} ms waiting for ${what}; ${expr} answered ${
              JSON.stringify(last)
            }`,
          );
        }
        await new Promise((r) => setTimeout(r, 250));
      }
    },
    log: () => text,
    stop,
  };
}
