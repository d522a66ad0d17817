// The frontend's `--router-mode kv` end to end: `dynamo run out=mocker` with four mocker
// workers, token-id prompts sharing a long prefix, and the prefix-cache hits each worker
// reports as usage.prompt_tokens_details.cached_tokens; plus the kv flags' checks.

import assert from "node:assert/strict";
import OpenAI from "openai";
import { frontendUrl, stopChild as stop } from "./_helpers/frontend.ts";
import { type ChildHandle, runDeno, spawnDeno } from "./_helpers/process.ts";
import { parseDecisionLog } from "../llm/kv_router/decision_log.ts";

const CLI = new URL("../cli/main.ts", import.meta.url).pathname;
const WORKERS = 4;
/** The mockers' KV block size (passed as --block-size). */
const BLOCK = 16;
const PREFIX_TOKENS = 64 * BLOCK;
/** Requests after the first that share its prefix. */
const FOLLOWERS = 8;

/** The shared prefix, then `i`'s own block: no two suffixes share a token. */
function prompt(i: number): number[] {
  const prefix = Array.from({ length: PREFIX_TOKENS }, (_, k) => 1000 + k);
  const suffix = Array.from({ length: BLOCK }, (_, k) => 20_000 + i * BLOCK + k);
  return [...prefix, ...suffix];
}

function startMocker(routerArgs: string[]): ChildHandle {
  return spawnDeno(CLI, { DYN_LOG: "warn" }, [
    "run",
    "in=http",
    "out=mocker",
    "--http-port",
    "0",
    "--num-workers",
    String(WORKERS),
    "--block-size",
    String(BLOCK),
    "--speedup-ratio",
    "1000",
    ...routerArgs,
  ]);
}

/** cached_tokens of one streamed completion (0 when the usage chunk leaves it out). */
async function cachedTokens(client: OpenAI, model: string, tokens: number[]): Promise<number> {
  const stream = await client.completions.create({
    model,
    prompt: tokens,
    max_tokens: 2,
    stream: true,
    stream_options: { include_usage: true },
  });
  let usage: OpenAI.Completions.CompletionUsage | undefined;
  for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
  assert.ok(usage, "the stream ended without a usage chunk");
  assert.equal(usage.prompt_tokens, tokens.length);
  return usage.prompt_tokens_details?.cached_tokens ?? 0;
}

/**
 * One request with the prefix, then FOLLOWERS sharing it, one at a time (so load is equal
 * and only the cache tells the workers apart); returns each follower's cached tokens.
 */
async function shareOnePrefix(routerArgs: string[]): Promise<number[]> {
  const run = startMocker(routerArgs);
  try {
    const base = await frontendUrl(run);
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
    const models = await client.models.list();
    assert.equal(models.data.length, 1, "one model served");
    const model = models.data[0]!.id;
    assert.equal(await cachedTokens(client, model, prompt(0)), 0, "a cold cache serves nothing");
    const cached: number[] = [];
    for (let i = 1; i <= FOLLOWERS; i++) cached.push(await cachedTokens(client, model, prompt(i)));
    return cached;
  } finally {
    await stop(run);
  }
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

Deno.test(
  "router mode kv sends every request sharing a cached prefix to the worker holding it; round-robin does not",
  async () => {
    const dir = await Deno.makeTempDir();
    const logPath = `${dir}/decisions.jsonl`;
    const kv = await shareOnePrefix([
      "--router-mode",
      "kv",
      "--kv-overlap-score-weight",
      "1",
      "--router-temperature",
      "0",
      "--router-decision-log",
      logPath,
    ]);
    // Each follower finds the whole shared prefix cached (its own last block is new).
    assert.deepEqual(
      kv,
      kv.map(() => PREFIX_TOKENS),
      `kv routing: cached tokens per request ${JSON.stringify(kv)}`,
    );
    // The decision log: one line per request, every worker weighed, the holder chosen.
    const decisions = parseDecisionLog(await Deno.readTextFile(logPath));
    await Deno.remove(dir, { recursive: true });
    assert.equal(decisions.length, 1 + FOLLOWERS);
    const holder = decisions[0]!.instance;
    for (const d of decisions.slice(1)) {
      assert.equal(d.instance, holder, "every follower went to the prefix's holder");
      assert.equal(d.overlap_blocks, PREFIX_TOKENS / BLOCK);
      assert.equal(d.prompt_tokens, PREFIX_TOKENS + BLOCK);
      assert.equal(d.candidates.length, WORKERS);
      for (const c of d.candidates) {
        assert.equal(c.overlap_blocks, c.instance === holder ? PREFIX_TOKENS / BLOCK : 0);
        assert.ok(typeof c.cost === "number", "every idle worker is eligible and has a cost");
      }
      const chosen = d.candidates.find((c) => c.instance === holder)!;
      assert.equal(chosen.cost, Math.min(...d.candidates.map((c) => c.cost!)));
    }
    // Round-robin over 4 workers: the next 3 requests land on workers that never saw the
    // prefix.
    const rr = await shareOnePrefix(["--router-mode", "round-robin"]);
    assert.ok(
      sum(rr) < sum(kv),
      `round-robin should hit the cache less than kv: rr ${JSON.stringify(rr)}, kv ${
        JSON.stringify(kv)
      }`,
    );
    assert.ok(rr.some((c) => c === 0), `round-robin missed no cache: ${JSON.stringify(rr)}`);
  },
);

Deno.test(
  "--kv-overlap-score-weight 0 makes the kv router ignore cached prefixes",
  async () => {
    // Weight 0 leaves only decode load in the cost, equal on idle workers: ties go at random,
    // so the prefix's worker is picked 1 time in 4. All 8 followers hitting it by chance
    // is (1/4)^8, about 1.5e-5.
    const cached = await shareOnePrefix([
      "--router-mode",
      "kv",
      "--kv-overlap-score-weight",
      "0",
    ]);
    assert.ok(
      sum(cached) < FOLLOWERS * PREFIX_TOKENS,
      `weight 0 still routed every request to the cached prefix: ${JSON.stringify(cached)}`,
    );
  },
);

Deno.test("a text model under router mode kv goes round-robin, and says so once", async () => {
  // A stand-in OpenAI upstream: `out=openai:` registers a Text-input model, which the KV
  // router cannot route (it has no token ids).
  const upstream = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, () => {
    const chunk = {
      id: "cmpl-1",
      object: "text_completion",
      created: 0,
      model: "up",
      choices: [{ index: 0, text: "hi", logprobs: null, finish_reason: "stop" }],
    };
    return new Response(`data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`, {
      headers: { "content-type": "text/event-stream" },
    });
  });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      CLI,
      "run",
      "in=http",
      `out=openai:http://127.0.0.1:${upstream.addr.port}`,
      "up",
      "--http-port",
      "0",
      "--router-mode",
      "kv",
    ],
    env: { DYN_LOG: "info" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const stderr = new Response(child.stderr).text();
  try {
    let out = "";
    const deadline = AbortSignal.timeout(15_000);
    let url: string | undefined;
    while (url === undefined) {
      deadline.throwIfAborted();
      const { value, done } = await stdout.read();
      if (done) throw new Error(`dynamo run exited before listening; stdout: ${out}`);
      out += value;
      url = /listening on (\S+)/.exec(out)?.[1];
    }
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
    for (let i = 0; i < 3; i++) {
      const r = await client.completions.create({ model: "up", prompt: "hello" });
      assert.equal(r.choices[0]!.text, "hi");
    }
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await stdout.cancel().catch(() => {});
    await upstream.shutdown();
  }
  const log = await stderr;
  const warnings = log.split("\n").filter((l) => l.includes("router mode kv does not apply"));
  assert.equal(warnings.length, 1, `one fallback warning expected; stderr:\n${log}`);
  assert.match(warnings[0]!, /WARN.*model=up.*model takes text/);
});

Deno.test("bad router flags exit 2 with a message naming the flag", async (t) => {
  const cases: [string[], RegExp][] = [
    [["--router-mode", "kv", "--kv-overlap-score-weight=-1"], /--kv-overlap-score-weight.*"-1"/],
    [["--router-mode", "kv", "--kv-overlap-score-weight", "-1"], /--kv-overlap-score-weight/],
    [["--router-mode", "kv", "--router-temperature", "abc"], /--router-temperature.*"abc"/],
    [
      ["--router-mode", "kv", "--kv-queued-prefill-weight", "Infinity"],
      /--kv-queued-prefill-weight.*"Infinity"/,
    ],
    [["--router-mode", "bogus"], /--router-mode.*"bogus"/],
    [["--router-temperature", "0.5"], /--router-temperature applies to --router-mode kv only/],
    [["--router-mode", "kv", "--router-load-bound", "0.5"], /--router-load-bound must be >= 1/],
    [
      ["--router-mode", "kv", "--active-decode-blocks-threshold", "1.5"],
      /--active-decode-blocks-threshold must be a fraction/,
    ],
    [["--router-replica-sync"], /--router-replica-sync applies to --router-mode kv only/],
    [["--router-decision-log", "d.jsonl"], /--router-decision-log applies to --router-mode kv/],
  ];
  for (const [flags, message] of cases) {
    await t.step(flags.join(" "), async () => {
      const r = await runDeno([CLI, "run", "in=http", "out=mocker", ...flags], {
        DYN_LOG: "warn",
      }, 15_000);
      assert.equal(r.code, 2, `exit code; stderr:\n${r.stderr}`);
      assert.match(r.stderr, message);
    });
  }
});
