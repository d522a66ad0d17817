import assert from "node:assert/strict";
import { within } from "../../../tests/_helpers/backends.ts";
import { Context } from "../../../runtime/context.ts";
import { DistributedRuntime } from "../../../runtime/distributed_runtime.ts";
import { EngineShutdownError, InvalidArgumentError } from "../../../runtime/errors.ts";
import { computeBlockHashes, computeLocalHashes } from "../../kv_router/hashing.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../../protocols.ts";
import { hashPromptBlocks } from "./scheduler.ts";
import { MockerEngine, type MockerEngineOptions, MockerSchedulingError } from "./engine.ts";
import type { ForwardPassMetrics, KvCacheEventData, StorageTier } from "./kv_types.ts";
import { TieredIndex } from "../../kv_router/tiered_index.ts";
import { decodeTimeMs, prefillTimeMs } from "./timing.ts";
import { syntheticLogprob, syntheticTopLogprobs } from "../synthetic_logprobs.ts";

const req = (
  token_ids: number[],
  extra: Partial<PreprocessedRequest> = {},
): PreprocessedRequest => ({
  model: "m",
  token_ids,
  stop_conditions: {},
  sampling_options: {},
  eos_token_ids: [],
  ...extra,
});
const prompt = (n: number, base = 1) => Array.from({ length: n }, (_, i) => base + i);

/** An engine on a simulated clock: each sleep advances it and yields one macrotask. */
function simulated(options: MockerEngineOptions = {}) {
  let clock = 0;
  const engine = new MockerEngine({
    now: () => clock,
    sleep: (ms) => {
      clock += ms;
      return new Promise((resolve) => setTimeout(resolve, 0));
    },
    ...options,
  });
  return { engine, now: () => clock };
}

async function collect(
  stream: AsyncIterable<LLMEngineOutput>,
  onItem?: (item: LLMEngineOutput) => void,
): Promise<LLMEngineOutput[]> {
  const out: LLMEngineOutput[] = [];
  for await (const item of stream) {
    out.push(item);
    onItem?.(item);
  }
  return out;
}

/** Resolves when `check` holds; fails after `ms` with what was expected. */
async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

Deno.test("the mocker yields max_tokens tokens and ends with finish_reason length", async () => {
  const { engine } = simulated();
  const out = await collect(
    engine.generate(req(prompt(40), { stop_conditions: { max_tokens: 12 } }), new Context()),
  );
  const ids = out.flatMap((o) => o.token_ids);
  assert.equal(ids.length, 12);
  assert.equal(out.at(-1)?.finish_reason, "length");
  assert.ok(out.slice(0, -1).every((o) => !o.finish_reason));
  assert.ok(ids.every((t) => Number.isInteger(t) && t >= 256 && t < 32000));
  assert.equal(engine.blockManager.activeBlocks, 0);
});

Deno.test("without max_tokens the mocker stops after defaultMaxTokens with finish_reason stop", async () => {
  const { engine } = simulated({ defaultMaxTokens: 5 });
  const out = await collect(engine.generate(req(prompt(3))));
  assert.equal(out.flatMap((o) => o.token_ids).length, 5);
  assert.equal(out.at(-1)?.finish_reason, "stop");
});

Deno.test("generated tokens are deterministic, avoid eos ids, and a migrated request continues them", async () => {
  const { engine } = simulated({ vocabSize: 260 }); // four candidate ids: 256..259
  const p = prompt(20);
  const eos = {
    eos_token_ids: [256],
    stop_conditions: { max_tokens: 10, stop_token_ids_hidden: [257] },
  };
  const first = (await collect(engine.generate(req(p, eos)))).flatMap((o) => o.token_ids);
  const again = (await collect(engine.generate(req(p, eos)))).flatMap((o) => o.token_ids);
  assert.deepEqual(again, first);
  assert.ok(first.every((t) => t === 258 || t === 259), `no eos or stop ids in ${first}`);
  const rest = await collect(engine.generate(req([...p, ...first.slice(0, 4)], {
    ...eos,
    stop_conditions: { max_tokens: 6, stop_token_ids_hidden: [257] },
    migrated_tokens: 4,
  })));
  assert.deepEqual([...first.slice(0, 4), ...rest.flatMap((o) => o.token_ids)], first);
});

Deno.test("a sampling seed picks another answer, the same for the same seed, migrations included", async () => {
  const { engine } = simulated();
  const p = prompt(20);
  const tokens = async (seed: number | undefined, max = 10) =>
    (await collect(engine.generate(req(p, {
      sampling_options: seed === undefined ? {} : { seed },
      stop_conditions: { max_tokens: max },
    })))).flatMap((o) => o.token_ids);
  const unseeded = await tokens(undefined);
  const seeded = await tokens(42);
  assert.deepEqual(await tokens(42), seeded, "same seed, same tokens");
  assert.notDeepEqual(seeded, unseeded, "a seed changes the answer");
  assert.notDeepEqual(await tokens(43), seeded, "another seed, another answer");
  assert.notDeepEqual(await tokens(-42), seeded, "negative seeds are their own");
  assert.notDeepEqual(await tokens(2 ** 40 + 42), seeded, "the seed's high bits count");
  const rest = await collect(engine.generate(req([...p, ...seeded.slice(0, 4)], {
    sampling_options: { seed: 42 },
    stop_conditions: { max_tokens: 6 },
    migrated_tokens: 4,
  })));
  assert.deepEqual([...seeded.slice(0, 4), ...rest.flatMap((o) => o.token_ids)], seeded);
});

Deno.test("simulated time advances by the prefill pass and one decode pass per further token", async () => {
  const { engine, now } = simulated({ numGpuBlocks: 100, speedupRatio: 4 });
  await collect(engine.generate(req(prompt(32), { stop_conditions: { max_tokens: 3 } })));
  // Pass 1 prefills 32 tokens (2 blocks) and emits token 1; passes 2 and 3 decode with a
  // third block allocated for token 33.
  const expected = (prefillTimeMs(32) + 2 * decodeTimeMs(3 / 100)) / 4;
  assert.ok(Math.abs(now() - expected) < 1e-9, `clock ${now()} != ${expected}`);
  assert.equal(engine.steps, 3);
});

Deno.test("the engine reports the prompt's blocks as stored and publishes metrics as each pass starts", async () => {
  const events: KvCacheEventData[] = [];
  const metrics: ForwardPassMetrics[] = [];
  const { engine } = simulated({
    numGpuBlocks: 64,
    onKvEvent: (e) => events.push(e),
    onMetrics: (m) => metrics.push(m),
  });
  const p = prompt(35);
  await collect(engine.generate(req(p, { stop_conditions: { max_tokens: 2 } })));
  const { local, sequence } = await computeBlockHashes(p, 16);
  assert.deepEqual(events, [{
    stored: {
      parent_hash: null,
      blocks: sequence.map((h, i) => ({ block_hash: h, tokens_hash: local[i]! })),
    },
  }]);
  // One as each pass starts (saying how long it will take and what it prefills), one idle.
  assert.equal(metrics.length, engine.steps + 1);
  assert.equal(metrics[0]!.kv_total_blocks, 64);
  assert.equal(metrics[0]!.request_active_slots, 1);
  assert.equal(metrics[0]!.pass_prefill_tokens, 35);
  assert.ok(metrics[0]!.pass_ms_left! > 0);
  assert.equal(metrics[1]!.pass_prefill_tokens, 0); // the second token's decode
  assert.equal(metrics.at(-1)!.request_active_slots, 0);
  assert.equal(metrics.at(-1)!.pass_ms_left, 0);
  // An engine that cannot fetch from peers does not say it can.
  assert.equal(metrics[0]!.kv_fetch_ms_per_block, undefined);
});

Deno.test("metricsIntervalMs thins the metrics of short passes but the idle engine's last report is current", async () => {
  const metrics: ForwardPassMetrics[] = [];
  // At speedup 10 the passes take under TIMED_PASS_MS: they go by the interval.
  const { engine } = simulated({
    speedupRatio: 10,
    metricsIntervalMs: 100,
    onMetrics: (m) => metrics.push(m),
  });
  await collect(engine.generate(req(prompt(20), { stop_conditions: { max_tokens: 40 } })));
  assert.ok(
    metrics.length < engine.steps / 2,
    `${metrics.length} reports for ${engine.steps} passes`,
  );
  // Passes of TIMED_PASS_MS or more are announced whatever the interval.
  const timed: ForwardPassMetrics[] = [];
  const slow = simulated({ metricsIntervalMs: 100, onMetrics: (m) => timed.push(m) }).engine;
  await collect(slow.generate(req(prompt(20), { stop_conditions: { max_tokens: 40 } })));
  assert.equal(timed.length, slow.steps + 1);
  assert.equal(metrics.at(-1)!.request_active_slots, 0);
  assert.equal(metrics.at(-1)!.kv_active_blocks, 0);
  assert.throws(
    () => new MockerEngine({ metricsIntervalMs: -1 }),
    /metricsIntervalMs must be >= 0/,
  );
});

Deno.test("stopping the context ends the stream with cancelled and frees the request's blocks", async () => {
  const { engine } = simulated();
  const ctx = new Context();
  const out = await collect(
    engine.generate(req(prompt(40), { stop_conditions: { max_tokens: 1000 } }), ctx),
    () => ctx.stopGenerating(),
  );
  assert.equal(out.at(-1)?.finish_reason, "cancelled");
  assert.ok(out.flatMap((o) => o.token_ids).length < 1000);
  assert.equal(engine.blockManager.activeBlocks, 0);
  assert.equal(engine.scheduler.hasWork, false);
});

Deno.test("a consumer that breaks out of the stream frees the request's blocks", async () => {
  const { engine } = simulated();
  for await (
    const _ of engine.generate(req(prompt(40), { stop_conditions: { max_tokens: 100 } }))
  ) {
    assert.ok(engine.blockManager.activeBlocks > 0);
    break;
  }
  assert.equal(engine.blockManager.activeBlocks, 0);
  assert.equal(engine.scheduler.hasWork, false);
});

Deno.test("many concurrent requests each get exactly their max_tokens", async () => {
  const { engine } = simulated({ maxNumSeqs: 16, numGpuBlocks: 128 });
  const runs = Array.from(
    { length: 64 },
    (_, i) =>
      collect(
        engine.generate(
          req(prompt(10 + i, i * 7), { stop_conditions: { max_tokens: 1 + (i % 9) } }),
        ),
      ),
  );
  const outs = await Promise.all(runs);
  outs.forEach((out, i) => {
    assert.equal(out.flatMap((o) => o.token_ids).length, 1 + (i % 9), `request ${i}`);
    assert.equal(out.at(-1)?.finish_reason, "length");
  });
  assert.equal(engine.blockManager.activeBlocks, 0);
});

Deno.test("closing the engine ends requests in flight with EngineShutdownError", async () => {
  const { engine } = simulated();
  const stream = engine.generate(req(prompt(8), { stop_conditions: { max_tokens: 1000 } }));
  await stream.next();
  await engine.close();
  await assert.rejects(collect(stream), EngineShutdownError);
  await assert.rejects(collect(engine.generate(req(prompt(8)))), EngineShutdownError);
  assert.equal(engine.blockManager.activeBlocks, 0);
});

Deno.test("the mocker rejects a request without token_ids", async () => {
  const { engine } = simulated();
  await assert.rejects(
    collect(engine.generate({ text: "hi" } as unknown as PreprocessedRequest)),
    /token_ids/,
  );
});

Deno.test("the mocker serves on the embedded runtime and a stopped request frees its blocks", async () => {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  const engine = new MockerEngine({ speedupRatio: 50 });
  try {
    const endpoint = runtime.namespace("test").component("mocker").endpoint("generate");
    const serving = endpoint.serveEndpoint(engine.handler);
    serving.catch(() => {});
    const client = await endpoint.client();
    await client.waitForInstances({ timeoutMs: 5000 });

    const stream = await client.generate(req(prompt(50), { stop_conditions: { max_tokens: 20 } }));
    const out = await collect(stream as AsyncIterable<LLMEngineOutput>);
    assert.equal(out.flatMap((o) => o.token_ids).length, 20);
    assert.equal(out.at(-1)?.finish_reason, "length");

    const ctx = new Context();
    const long = await client.generate(
      req(prompt(50), { stop_conditions: { max_tokens: 100_000 } }),
      { context: ctx },
    );
    for await (const _ of long as AsyncIterable<LLMEngineOutput>) {
      ctx.stopGenerating();
      break;
    }
    await until(
      () => engine.blockManager.activeBlocks === 0,
      5000,
      "the cancelled request's blocks are free",
    );
    assert.equal(engine.scheduler.hasWork, false);
  } finally {
    await runtime.shutdown();
    await engine.close();
  }
});

Deno.test("the mocker's first output says how much of the prompt its prefix cache served", async () => {
  const { engine } = simulated({ blockSize: 16 });
  try {
    const p = prompt(100);
    const first = await collect(engine.generate(req(p, { stop_conditions: { max_tokens: 2 } })));
    assert.equal(first[0]!.cached_tokens, 0);
    // Same prompt again: its 6 full blocks are cached (96 tokens).
    const again = await collect(engine.generate(req(p, { stop_conditions: { max_tokens: 2 } })));
    assert.equal(again[0]!.cached_tokens, 96);
    assert.equal(again.slice(1).some((o) => o.cached_tokens !== undefined), false);
  } finally {
    await engine.close();
  }
});

Deno.test("a prompt larger than the whole KV cache fails at once; max_tokens is capped to fit", async () => {
  // 4 blocks of 4 tokens, no watermark: 16 tokens in all.
  const { engine } = simulated({ numGpuBlocks: 4, blockSize: 4, watermark: 0 });
  try {
    await assert.rejects(
      within(collect(engine.generate(req(prompt(17)))), 2000, "the oversized request"),
      (e: unknown) =>
        e instanceof InvalidArgumentError &&
        /a prompt of 17 tokens does not fit the mocker's KV cache of 16 tokens/.test(e.message),
    );
    // 10 prompt tokens + 6 more fit (the last output token needs no KV): 7 tokens.
    const out = await within(
      collect(engine.generate(req(prompt(10), { stop_conditions: { max_tokens: 100 } }))),
      2000,
      "the capped request",
    );
    assert.equal(out.flatMap((o) => o.token_ids).length, 7);
    assert.equal(out.at(-1)?.finish_reason, "length");
    assert.equal(engine.blockManager.activeBlocks, 0);
  } finally {
    await engine.close();
  }
});

Deno.test("requests no forward pass can take end with MockerSchedulingError instead of hanging", async () => {
  const { engine } = simulated({ numGpuBlocks: 4, blockSize: 4, watermark: 0 });
  try {
    // Blocks held outside the scheduler: nothing runs that could free them.
    engine.blockManager.allocate(4);
    const a = collect(engine.generate(req(prompt(8), { stop_conditions: { max_tokens: 2 } })));
    const b = collect(engine.generate(req(prompt(5), { stop_conditions: { max_tokens: 2 } })));
    b.catch(() => {}); // checked below; handled even if the check of `a` fails first
    for (const [name, p] of [["a", a], ["b", b]] as const) {
      await assert.rejects(
        within(p, 2000, `request ${name}`),
        (e: unknown) =>
          e instanceof MockerSchedulingError &&
          /cannot schedule request .*no forward pass fits it with 0 of 4 KV blocks available/
            .test(e.message),
      );
    }
    assert.equal(engine.scheduler.hasWork, false);
    // Once the blocks are back, the engine serves again.
    engine.blockManager.release([], 4);
    const out = await within(
      collect(engine.generate(req(prompt(8), { stop_conditions: { max_tokens: 2 } }))),
      2000,
      "a request after the blocks came back",
    );
    assert.equal(out.flatMap((o) => o.token_ids).length, 2);
  } finally {
    await engine.close();
  }
});

Deno.test("KV event and metrics sinks that throw do not stop the forward passes", async () => {
  const { engine } = simulated({
    onKvEvent: () => {
      throw new Error("publisher gone");
    },
    onMetrics: () => {
      throw new Error("metrics publisher gone");
    },
  });
  try {
    const out = await within(
      collect(engine.generate(req(prompt(40), { stop_conditions: { max_tokens: 20 } }))),
      2000,
      "a request whose sinks throw",
    );
    assert.equal(out.flatMap((o) => o.token_ids).length, 20);
    assert.equal(out.at(-1)?.finish_reason, "length");
  } finally {
    await engine.close();
  }
});

Deno.test("when the forward-pass loop fails, requests in flight end with MockerSchedulingError", async () => {
  let broken = false;
  const engine = new MockerEngine({
    sleep: () =>
      broken ? Promise.reject(new Error("clock broke")) : new Promise((r) => setTimeout(r, 0)),
  });
  try {
    broken = true;
    await assert.rejects(
      within(
        collect(engine.generate(req(prompt(8), { stop_conditions: { max_tokens: 5 } }))),
        2000,
        "a request on a failed loop",
      ),
      (e: unknown) =>
        e instanceof MockerSchedulingError &&
        /the mocker's forward-pass loop failed: clock broke/.test(e.message),
    );
    assert.equal(engine.blockManager.activeBlocks, 0);
    // The next request starts a new loop.
    broken = false;
    const out = await within(
      collect(engine.generate(req(prompt(8), { stop_conditions: { max_tokens: 5 } }))),
      2000,
      "a request after the failure",
    );
    assert.equal(out.flatMap((o) => o.token_ids).length, 5);
  } finally {
    await engine.close();
  }
});

Deno.test("asked for log probabilities, the mocker gives each token its fixed synthetic values", async () => {
  const { engine } = simulated();
  const out = await collect(
    engine.generate(
      req(prompt(20), { stop_conditions: { max_tokens: 6 }, output_options: { logprobs: 2 } }),
      new Context(),
    ),
  );
  for (const o of out) {
    assert.deepEqual(o.log_probs, o.token_ids.map(syntheticLogprob));
    assert.deepEqual(o.top_logprobs, o.token_ids.map((id) => syntheticTopLogprobs(id, 2)));
  }
  const plain = await collect(
    engine.generate(req(prompt(20), { stop_conditions: { max_tokens: 2 } }), new Context()),
  );
  assert.ok(plain.every((o) => o.log_probs === undefined && o.top_logprobs === undefined));
  await engine.close();
});

Deno.test("a kv_fetch hint loads the prompt's prefix from the peer, in the copy's simulated time", async () => {
  const a = simulated({ numGpuBlocks: 64 }).engine;
  const p = prompt(100); // 6 full blocks
  await collect(a.generate(req(p, { stop_conditions: { max_tokens: 1 } })));
  const asked: Array<[string, number]> = [];
  const metrics: ForwardPassMetrics[] = [];
  const b = simulated({
    numGpuBlocks: 64,
    speedupRatio: 2,
    onMetrics: (m) => metrics.push(m),
    kvFetch: {
      msPerBlock: 4,
      peer: (source, hashes) => {
        asked.push([source, hashes.length]);
        return Promise.resolve(source === "a" ? a.blockManager.matchPrefix(hashes) : 0);
      },
    },
  });
  // The same prompt with a question after it: the router says "a" holds its first 6 blocks.
  const q = [...p, ...prompt(30, 5000)];
  const out = await collect(
    b.engine.generate(req(q, {
      stop_conditions: { max_tokens: 1 },
      kv_fetch: { source: "a", blocks: 6 },
    })),
  );
  assert.deepEqual(asked, [["a", 6]]);
  assert.equal(out[0]!.cached_tokens, 96);
  // 6 blocks at 4 ms, at speedup 2: 12 ms before the first pass, which prefills the rest only.
  assert.equal(metrics[0]!.pass_prefill_tokens, 130 - 96);
  // In the engine's real time, as its passes': 4 simulated ms at speedup 2.
  assert.equal(metrics[0]!.kv_fetch_ms_per_block, 2);
  assert.ok(b.now() >= 12, `${b.now()} ms`);
  // The copied blocks are b's own cache now (a later prompt hits them without asking).
  const again = await collect(b.engine.generate(req(p, { stop_conditions: { max_tokens: 1 } })));
  assert.equal(again[0]!.cached_tokens, 96);
  assert.equal(asked.length, 1);
});

Deno.test("a kv_fetch the peer cannot serve, or a bad hint, leaves the prompt to compute", async () => {
  const failing = simulated({
    kvFetch: { msPerBlock: 1, peer: () => Promise.reject(new Error("peer gone")) },
  }).engine;
  const p = prompt(64);
  const hint = { source: "x", blocks: 4 };
  let out = await collect(
    failing.generate(req(p, { stop_conditions: { max_tokens: 1 }, kv_fetch: hint })),
  );
  assert.equal(out[0]!.cached_tokens, 0);
  // A peer that never answers: computed after the deadline.
  const silent = simulated({
    kvFetch: { msPerBlock: 1, timeoutMs: 20, peer: (_s, _h, signal) => aborted(signal) },
  }).engine;
  out = await collect(
    silent.generate(req(p, { stop_conditions: { max_tokens: 1 }, kv_fetch: hint })),
  );
  assert.equal(out[0]!.cached_tokens, 0);
  // Hints that are not hints are ignored (no peer asked).
  let asked = 0;
  const counting = simulated({
    kvFetch: { msPerBlock: 1, peer: () => Promise.resolve(asked++) },
  }).engine;
  for (const bad of [{ source: "", blocks: 4 }, { source: "x", blocks: -1 }, { blocks: 4 }, "x"]) {
    out = await collect(counting.generate(req(p, {
      stop_conditions: { max_tokens: 1 },
      kv_fetch: bad as unknown as { source: string; blocks: number },
    })));
    assert.equal(out.at(-1)!.finish_reason, "length");
  }
  assert.equal(asked, 0);
  assert.throws(
    () => new MockerEngine({ kvFetch: { msPerBlock: NaN, peer: () => Promise.resolve(0) } }),
    /kvFetch.msPerBlock/,
  );
  // A prompt too large for the cache is refused after its prefix was copied: the copied blocks
  // are not left held.
  const small = simulated({
    numGpuBlocks: 8,
    kvFetch: { msPerBlock: 1, peer: (_s, hashes) => Promise.resolve(hashes.length) },
  }).engine;
  await assert.rejects(
    collect(small.generate(req(prompt(200), { kv_fetch: { source: "x", blocks: 4 } }))),
    /does not fit/,
  );
  assert.equal(small.blockManager.activeBlocks, 0);
  assert.equal(
    small.blockManager.matchPrefix(hashPromptBlocks(prompt(200), 16).map((b) => b.sequenceHash)),
    4,
  );

  function aborted(signal: AbortSignal): Promise<number> {
    return new Promise((_, reject) =>
      signal.addEventListener("abort", () => reject(signal.reason), { once: true })
    );
  }
});

Deno.test("a prompt whose prefix went to the host tier loads it back in the onboard time", async () => {
  // The worker's events, read as a router reads them: per tier.
  const index = new TieredIndex();
  let events = 0;
  const metrics: ForwardPassMetrics[] = [];
  const { engine, now } = simulated({
    numGpuBlocks: 16,
    hostBlocks: 64,
    hostOnboardMsPerBlock: 4,
    speedupRatio: 2,
    onKvEvent: (e, tier) => {
      events++;
      assert.ok(index.apply("w", e, tier), "every stored event names a parent the worker holds");
    },
    onMetrics: (m) => metrics.push(m),
  });
  const one = { stop_conditions: { max_tokens: 1 } };
  const p = prompt(100); // 6 full blocks
  const local = computeLocalHashes(p, 16);
  await collect(engine.generate(req(p, one)));
  // 241 tokens take all 16 GPU blocks: p's six go to the host tier, still the worker's.
  await collect(engine.generate(req(prompt(241, 5000), one)));
  assert.equal(engine.blockManager.hostCachedBlocks, 6);
  assert.equal(index.findMatches(local).device.get("w"), undefined, "off the GPU");
  assert.equal(index.findMatches(local).host_pinned.get("w"), 6, "in host memory");
  assert.equal(index.blockCount("w", "host_pinned"), 6);
  assert.equal(index.blockCount("w", "device"), 15);
  // The load metrics say how full the tier is.
  assert.equal(engine.metrics().kv_host_blocks, 6);
  assert.equal(engine.metrics().kv_host_total_blocks, 64);
  const before = now();
  metrics.length = 0;
  const out = await collect(engine.generate(req(p, one)));
  assert.equal(out[0]!.cached_tokens, 96);
  assert.equal(metrics[0]!.pass_prefill_tokens, 4, "the pass computes only the rest");
  // Six blocks at 4 simulated ms, at speedup 2, before that pass.
  const pass = prefillTimeMs(4) / 2;
  assert.ok(Math.abs(now() - before - (12 + pass)) < 1e-6, `${now() - before} ms`);
  // Back on the GPU, and announced there; what made room went to the host tier in their place.
  assert.equal(
    engine.blockManager.matchPrefix(hashPromptBlocks(p, 16).map((b) => b.sequenceHash)),
    6,
  );
  assert.equal(index.findMatches(local).device.get("w"), 6);
  assert.equal(index.blockCount("w", "host_pinned"), engine.blockManager.hostCachedBlocks);
  assert.ok(events > 0);
});

Deno.test("without a host tier an evicted prefix is computed again; by default the tier is 4x", async () => {
  const one = { stop_conditions: { max_tokens: 1 } };
  const { engine } = simulated({ numGpuBlocks: 16, hostBlocks: 0 });
  const p = prompt(100);
  await collect(engine.generate(req(p, one)));
  await collect(engine.generate(req(prompt(241, 5000), one)));
  const out = await collect(engine.generate(req(p, one)));
  assert.equal(out[0]!.cached_tokens, 0);
  assert.equal(engine.metrics().kv_host_blocks, undefined, "no tier, no such field");
  assert.equal(simulated({ numGpuBlocks: 16 }).engine.blockManager.hostBlocks, 64);
  assert.throws(
    () => simulated({ hostOnboardMsPerBlock: -1 }),
    /hostOnboardMsPerBlock must be a finite number >= 0/,
  );
});

Deno.test("with a host tier, concurrent conversations, cancellations and reloads leave no block held", async () => {
  const events: Array<{ tier: StorageTier; data: KvCacheEventData }> = [];
  const { engine } = simulated({
    maxNumSeqs: 8,
    numGpuBlocks: 48,
    hostBlocks: 96,
    hostOnboardMsPerBlock: 1,
    onKvEvent: (data, tier = "device") => events.push({ tier, data }),
  });
  // Six conversations of three turns, each turn the last one's prompt plus 40 tokens, all at
  // once in rounds: 48 GPU blocks cannot hold them, so turns reload their history from the host.
  const history = Array.from({ length: 6 }, (_, c) => prompt(120, 1000 * (c + 1)));
  const bm = engine.blockManager;
  const load = bm.load.bind(bm);
  let loads = 0;
  bm.load = (parent, blocks) => {
    loads++;
    load(parent, blocks);
  };
  let cancelled = 0;
  for (let turn = 0; turn < 3; turn++) {
    const runs = history.map((p, c) => {
      const ctx = new Context();
      const cancel = (turn + c) % 4 === 0;
      return collect(
        engine.generate(req(p, { stop_conditions: { max_tokens: 6 } }), ctx),
        () => cancel && ctx.stopGenerating(),
      ).then((out) => {
        if (cancel) cancelled++;
        else assert.equal(out.flatMap((o) => o.token_ids).length, 6, `conversation ${c}`);
        history[c] = [...p, ...prompt(40, 50_000 + 100 * c + turn)];
      });
    });
    await Promise.all(runs);
  }
  assert.ok(cancelled > 0);
  assert.equal(engine.blockManager.activeBlocks, 0);
  assert.equal(engine.scheduler.hasWork, false);
  assert.ok(loads > 0 && bm.hostCachedBlocks > 0, "the tier was used both ways");
  // The events name exactly the blocks the worker holds in each of its two tiers.
  const held = { device: new Set<bigint>(), host_pinned: new Set<bigint>(), disk: new Set() };
  for (const { tier, data: e } of events) {
    const set = held[tier];
    if (e === "cleared") set.clear();
    else if ("stored" in e) { for (const b of e.stored.blocks) set.add(b.block_hash); }
    else for (const h of e.removed.block_hashes) assert.ok(set.delete(h), `removed twice: ${h}`);
  }
  assert.equal(held.device.size, bm.inactiveBlocks);
  assert.equal(held.host_pinned.size, bm.hostCachedBlocks);
  for (const h of held.device) assert.ok(bm.isCached(h));
  for (const h of held.host_pinned) assert.ok(bm.isOnHost(h));
});
