// The shipped Grafana dashboard against a real Prometheus: a frontend (KV router, API key)
// and two mocker workers with system servers, as three processes on a hub; Prometheus
// scrapes all three every second while real requests run, then every panel's query of
// dashboards/dynamo.json must answer data through /api/v1/query. Along the way, the counts
// the frontend and the workers report must match the requests sent. And `dynamo run` (no
// Prometheus needed) shows its in-process workers' series on the frontend's /metrics.

import assert from "node:assert/strict";
import { HubServer } from "../runtime/hub/mod.ts";
import { frontendUrl, stopChild } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { ensurePrometheus, type PromSample, startPrometheus } from "./_helpers/prometheus.ts";
import { freePort } from "./_helpers/servers.ts";
import { MODEL, startDynamoRun } from "./_helpers/dynamo_run.ts";

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const WORKER = new URL("./_helpers/mocker_worker.ts", import.meta.url).pathname;
const DASHBOARD = new URL("../dashboards/dynamo.json", import.meta.url);
const KEY = "metrics-test-key";
/** Grafana's `$__rate_interval`, as the test's queries use it (load runs within it). */
const RATE_INTERVAL = "1m";

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string; refId: string }[];
}

const prometheus = await ensurePrometheus();

/** Prompts long enough for several KV blocks (16 tokens each), distinct from the start. */
const PROMPTS = Array.from(
  { length: 6 },
  (_, i) =>
    `prompt ${i}: ` + Array.from({ length: 40 }, (_, j) => `w${(i * 7 + j) % 23}`).join(" "),
);

async function complete(url: string, model: string, prompt: string, stream: boolean) {
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model, prompt, max_tokens: 8, stream }),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  assert.equal(res.status, 200, `completion failed: ${text}`);
}

function finiteValues(r: PromSample[]): number[] {
  return r.map((s) => Number(s.value[1])).filter((v) => Number.isFinite(v));
}

Deno.test({
  name: "every panel of the Grafana dashboard answers data from a real Prometheus under load",
  ignore: prometheus.path === undefined,
  async fn() {
    const dashboard = JSON.parse(await Deno.readTextFile(DASHBOARD)) as { panels: Panel[] };
    const panels = dashboard.panels.filter((p) => p.type !== "row");
    assert.ok(panels.length >= 20, `the dashboard has ${panels.length} panels`);
    for (const p of panels) {
      assert.ok(p.targets?.length, `panel "${p.title}" has a query`);
    }

    const hub = await HubServer.start();
    const children: ChildHandle[] = [];
    let prom: Awaited<ReturnType<typeof startPrometheus>> | undefined;
    try {
      const env = { ...hub.env(), ETCD_ENDPOINTS: "", NATS_SERVER: "", DYN_LOG: "warn" };
      const systemPorts = [freePort(), freePort()];
      const workers = systemPorts.map((port) =>
        spawnDeno(WORKER, {
          ...env,
          DYN_SYSTEM_PORT: String(port),
          DYN_SYSTEM_HOST: "127.0.0.1",
        })
      );
      children.push(...workers);
      const frontend = spawnDeno(CLI, { ...env, DYN_HTTP_API_KEY: KEY }, [
        "frontend",
        "--http-port",
        "0",
        "--http-host",
        "127.0.0.1",
        "--router-mode",
        "kv",
      ]);
      children.push(frontend);
      const ids = await Promise.all(
        workers.map((w) =>
          w.waitFor<{ ready: string }>((l) => typeof l.ready === "string", 60_000, "a worker")
        ),
      );
      const url = await frontendUrl(frontend, 60_000);

      // The workers' system servers: /live, /health, and their own series before any load.
      for (const port of systemPorts) {
        const live = await fetch(`http://127.0.0.1:${port}/live`);
        assert.equal(live.status, 200, await live.text());
        const health = await fetch(`http://127.0.0.1:${port}/health`);
        assert.deepEqual(await health.json(), { status: "ready" });
        const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
        assert.match(text, /^dynamo_component_requests_total\{.*dynamo_endpoint="generate"/m);
      }

      prom = await startPrometheus(prometheus.path!, [
        { job: "dynamo-frontend", targets: [new URL(url).host] },
        { job: "dynamo-workers", targets: systemPorts.map((p) => `127.0.0.1:${p}`) },
      ]);

      // Wait for the model (both workers) behind the frontend.
      let model = "";
      const deadline = Date.now() + 30_000;
      while (!model) {
        const res = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) });
        const body = await res.json() as { models?: { name: string; instances: number }[] };
        const m = body.models?.find((m) => m.instances >= 2);
        if (m) model = m.name;
        else if (Date.now() > deadline) {
          throw new Error(`no model on 2 workers: ${JSON.stringify(body)}`);
        } else await new Promise((r) => setTimeout(r, 200));
      }

      // Load: each prompt twice (the second time its blocks are cached on a worker),
      // streamed and not; and one request without the key (a rejection). Prometheus sees
      // the first round before the second starts, so that rates have an increase to show
      // (a series is born with its first request).
      // What Prometheus scraped matches what was sent: every request counted once at the
      // frontend and once on a worker's generate endpoint.
      const total = (r: PromSample[]) => r.reduce((n, s) => n + Number(s.value[1]), 0);
      let sent = 0;
      for (const round of [0, 1]) {
        await Promise.all(PROMPTS.map((p, i) => complete(url, model, p, (i + round) % 2 === 0)));
        sent += PROMPTS.length;
        if (round === 0) {
          const refused = await fetch(`${url}/v1/models`);
          await refused.body?.cancel();
          assert.equal(refused.status, 401);
        }
        await prom.until(
          'sum(dynamo_frontend_requests_total{status="success"})',
          (r) => total(r) === sent,
          30_000,
          `${sent} successful requests at the frontend`,
        );
        await prom.until(
          'sum(dynamo_component_requests_total{dynamo_endpoint="generate"})',
          (r) => total(r) === sent,
          30_000,
          `${sent} requests on the workers`,
        );
      }
      const perWorker = await prom.query(
        'sum by (worker_id) (dynamo_component_kvstats_total_blocks{dynamo_component="backend"})',
      );
      assert.deepEqual(
        perWorker.map((s) => s.metric.worker_id).sort(),
        [...ids.map((l) => l.ready)].sort(),
      );
      const decisions = await prom.query("sum(dynamo_frontend_router_decisions_total)");
      assert.equal(total(decisions), sent, "one KV routing decision per request");
      const hits = await prom.query("sum(dynamo_frontend_router_cached_blocks_total)");
      assert.ok(total(hits) > 0, "the repeated prompts were routed to the workers caching them");

      // Every query of every panel answers at least one series with a number.
      const empty: string[] = [];
      for (const panel of panels) {
        for (const target of panel.targets!) {
          const expr = target.expr.replaceAll("$__rate_interval", RATE_INTERVAL);
          try {
            await prom.until(
              expr,
              (r) => finiteValues(r).length > 0,
              10_000,
              `data for panel "${panel.title}"`,
            );
          } catch (err) {
            empty.push(`${panel.title} [${target.refId}]: ${(err as Error).message}`);
          }
        }
      }
      assert.deepEqual(empty, [], "panels without data");
    } finally {
      await prom?.stop();
      await Promise.all(children.map((c) => stopChild(c)));
      await hub.close();
    }
  },
});

Deno.test("dynamo run shows its in-process workers' metrics on the frontend's /metrics", async () => {
  const run = await startDynamoRun(["out=mocker", "--num-workers", "2", "--speedup-ratio", "50"]);
  try {
    for (const stream of [false, true]) {
      const res = await fetch(`${run.url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, prompt: PROMPTS[0], max_tokens: 4, stream }),
        signal: AbortSignal.timeout(30_000),
      });
      assert.equal(res.status, 200, await res.text());
    }
    const text = await (await fetch(`${run.url}/metrics`)).text();
    // Each metric family once: the workers' registry comes after the frontend's, not mixed in.
    const families = [...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!);
    assert.equal(new Set(families).size, families.length, "no metric family twice");
    assert.match(
      text,
      /^dynamo_component_requests_total\{dynamo_namespace="dynamo",dynamo_component="backend",dynamo_endpoint="generate"\} 2$/m,
    );
    assert.match(text, /^dynamo_frontend_requests_total\{.*status="success".*\} 1$/m);
    const workers = new Set(
      [...text.matchAll(/^dynamo_component_kvstats_total_blocks\{.*worker_id="([^"]+)"\}/gm)]
        .map((m) => m[1]),
    );
    assert.equal(workers.size, 2, `both workers' KV stats:\n${text}`);
    assert.match(text, /^process_resident_memory_bytes(\{[^}]*\})? \d/m);
  } finally {
    await run.stop();
  }
});

if (prometheus.path === undefined) {
  Deno.test({
    name: "Grafana dashboard check skipped: no Prometheus",
    ignore: true,
    fn() {},
  });
  // deno-lint-ignore no-console -- say why the check did not run
  console.error(`tests/prometheus_test.ts: skipped: ${prometheus.why}`);
}
