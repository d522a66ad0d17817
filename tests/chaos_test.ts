// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Worker crashes under load (issue: reliability): streaming chat requests through
// `dynamo frontend` to echo workers on etcd + NATS while a chaos loop SIGKILLs a random
// worker every 2 s and starts a fresh one. With migrationLimit 3 no request may fail and
// every answer must be exactly the echo of its prompt. The frontend's routing trace
// (DYN_ROUTE_TRACE=1) shows that no request goes to a killed instance once the frontend
// has seen it die (a broken stream, a missed acknowledgement, or discovery dropping it),
// and that restarted workers come back under new instance ids.
//
// Size: at least CHAOS_REQUESTS (default 400; more until 3 workers were killed) at CHAOS_CONCURRENCY (default 32) over CHAOS_WORKERS
// (default 4) worker processes; the full size is
// `CHAOS_REQUESTS=2000 CHAOS_CONCURRENCY=64 deno task test:chaos`.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { builtinTestModel } from "../mod.ts";
import { eventually } from "./_helpers/backends.ts";
import { frontendUrl, spawnFrontend, stopChild as stop } from "./_helpers/frontend.ts";
import { type ChildHandle, spawnDeno } from "./_helpers/process.ts";
import { type RouteTraceLine, routeViolations } from "./_helpers/route_trace.ts";
import { haveServers, startServers } from "./_helpers/servers.ts";

const WORKER = new URL("./_helpers/llm_worker.ts", import.meta.url).pathname;
const MODEL = "Qwen3-0.6B";
const REQUESTS = Number(Deno.env.get("CHAOS_REQUESTS") ?? 400);
const CONCURRENCY = Number(Deno.env.get("CHAOS_CONCURRENCY") ?? 32);
const WORKERS = Number(Deno.env.get("CHAOS_WORKERS") ?? 4);
const KILL_EVERY_MS = 2_000;
/** Requests keep coming (past CHAOS_REQUESTS if need be) until this many kills happened. */
const MIN_KILLS = 3;

const WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"];
const PROMPTS = 9;
/** Prompt `i`: one of 9 prompts of 12-20 words, so answers differ and streams take a while. */
function promptOf(i: number): string {
  const p = i % PROMPTS;
  return Array.from({ length: 12 + p }, (_, k) => WORDS[(p + k * 7) % WORDS.length]).join(" ");
}

/** The streamed answer to a chat request with one user message. */
async function chat(client: OpenAI, prompt: string): Promise<{ text: string; finish: string }> {
  const stream = await client.chat.completions.create({
    model: MODEL,
    messages: [{ role: "user", content: prompt }],
    stream: true,
  });
  let text = "";
  let finish: string | null = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? "";
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  if (finish === null) throw new Error("the stream ended without a finish_reason");
  return { text, finish };
}

Deno.test({
  name: `chaos: ${REQUESTS} streams at concurrency ${CONCURRENCY}, a worker SIGKILLed every 2 s`,
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = { ...servers.env, DYN_LOG: "warn", DYN_LEASE_TTL: "3" };
    const trace: RouteTraceLine[] = [];
    /** Killed instance id -> when (epoch ms on the monotonic clock, as the trace's `t`). */
    const killed = new Map<string, number>();
    const readyId = (w: ChildHandle) => {
      const line = w.lines.find((l) => typeof l === "object" && l !== null && "ready" in l);
      return (line as { ready?: string } | undefined)?.ready;
    };
    const modelPath = await builtinTestModel();

    const workers: ChildHandle[] = [];
    const all: ChildHandle[] = [];
    const startWorker = () => {
      const w = spawnDeno(WORKER, env, [modelPath, "--delay-ms", "15", "--migration-limit", "3"]);
      workers.push(w);
      all.push(w);
      return w;
    };
    let front: ChildHandle | undefined;
    let chaos: Promise<void> | undefined;
    let running = true;
    try {
      front = spawnFrontend({ ...env, DYN_ROUTE_TRACE: "1" }, {
        onStderrLine: (line) => {
          if (line.startsWith('{"route_trace"')) trace.push(JSON.parse(line));
          else console.error(line);
        },
      });
      const base = await frontendUrl(front);
      const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
      for (let i = 0; i < WORKERS; i++) startWorker();
      await Promise.all(
        workers.map((w) => w.waitFor((l) => "ready" in l, 30_000, "a worker to register")),
      );
      await eventually(
        async () => (await client.models.list()).data.some((m) => m.id === MODEL),
        10_000,
        "the model appears",
      );
      // Each prompt's answer with no worker dying: what every chaos answer must equal.
      const expected: { text: string; finish: string }[] = [];
      for (let p = 0; p < PROMPTS; p++) expected.push(await chat(client, promptOf(p)));

      // The chaos loop: every 2 s, SIGKILL a random live (registered) worker and start a
      // fresh one.
      let kills = 0;
      chaos = (async () => {
        while (running) {
          await new Promise((r) => setTimeout(r, KILL_EVERY_MS));
          if (!running) break;
          const ready = workers.filter((w) => readyId(w) !== undefined);
          if (ready.length === 0) continue;
          const victim = ready[Math.floor(Math.random() * ready.length)]!;
          workers.splice(workers.indexOf(victim), 1);
          killed.set(readyId(victim)!, performance.timeOrigin + performance.now());
          victim.kill("SIGKILL");
          kills++;
          startWorker();
        }
      })();

      const failures: string[] = [];
      let done = 0;
      let next = 0;
      const one = async (i: number) => {
        try {
          const got = await chat(client, promptOf(i));
          const want = expected[i % PROMPTS]!;
          if (got.text !== want.text || got.finish !== want.finish) {
            failures.push(
              `request ${i}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`,
            );
          }
        } catch (err) {
          failures.push(`request ${i}: ${err instanceof Error ? err.message : String(err)}`);
        }
        done++;
      };
      const started = performance.now();
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          while ((next < REQUESTS || kills < MIN_KILLS) && next < REQUESTS * 10) {
            await one(next++);
          }
        }),
      );
      const seconds = (performance.now() - started) / 1000;
      running = false;
      await chaos;
      console.log(
        `chaos: ${done} requests in ${seconds.toFixed(1)} s, ${kills} workers SIGKILLed, ` +
          `${failures.length} failed`,
      );
      assert.ok(kills >= MIN_KILLS, `the run should outlast ${MIN_KILLS} kills (it had ${kills})`);
      assert.deepEqual(failures.slice(0, 10), [], `${failures.length} of ${done} failed`);
      const metrics = await (await fetch(`${base}/metrics`)).text();
      assert.match(metrics, /dynamo_frontend_model_migration_total\{[^}]*\} [1-9]/);

      // Every restarted worker registered under an instance id of its own, and took requests.
      const ids = all.map(readyId).filter((id) => id !== undefined);
      assert.equal(new Set(ids).size, ids.length, `instance ids repeat: ${ids.join(", ")}`);
      const restarted = new Set(all.slice(WORKERS).map(readyId));
      assert.ok(
        trace.some((l) => l.route_trace === "route" && restarted.has(l.instance)),
        "no request went to a restarted worker",
      );
      // Discovery drops every killed instance (its lease expires): the frontend sees it.
      await eventually(
        () =>
          [...killed.keys()].every((id) =>
            trace.some((l) => l.route_trace === "gone" && l.instance === id)
          ),
        15_000,
        "the frontend's discovery to drop every killed instance",
      );
      const check = routeViolations(trace, killed);
      console.log(
        `chaos: ${check.routes} routing decisions checked, ${check.routedBeforeNoticed} sent ` +
          `to a killed instance before its death was seen, ${check.violations.length} after`,
      );
      assert.deepEqual(
        check.violations.slice(0, 10),
        [],
        `${check.violations.length} request(s) routed to an instance after its death was seen`,
      );
    } finally {
      running = false;
      await chaos?.catch(() => {});
      for (const w of all) w.kill("SIGKILL");
      await Promise.all(all.map((w) => w.status));
      if (front) await stop(front);
      await servers.stop();
    }
  },
});
