// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:engine`: the llama.cpp engine on SmolLM2-135M (Q4_1, CPU), generated tokens/s
// at 1 and 8 concurrent streams through `dynamo run in=http out=llamacpp` (HTTP, SSE, the
// frontend's preprocessing and detokenizing, the request plane, LlamaCppEngine), each as a ratio
// to node-llama-cpp called directly in this process on the same prompt (the baseline: one context
// with as many sequences, greedy, eos ignored). The two sides run one after the other, in
// alternating rounds, so they never share the CPU; the median round of each is reported. Then
// time to first token for a ~1,000-token prompt, cold and with its prefix cached (the engine's
// prefix reuse against the library keeping the same prefix in its sequence), as ratios too.
//
// With --ffi, first the binding question: one greedy stream through Deno FFI straight to the
// libllama that node-llama-cpp ships (llama_decode called synchronously, and with
// `nonblocking: true`, on Deno's FFI thread) against node-llama-cpp's own sequence.evaluate.
// Struct sizes (llama_model_params 80, llama_context_params 160, llama_batch 56 bytes) and
// offsets are those of the headers in node-llama-cpp 3.21.1's llama.cpp bundle (release v0.4.0).
//
// Flags: --tokens N per stream (default 64), --rounds N (default 3), --ffi, --json PATH, --quick.

import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { startDynamoRun } from "../tests/_helpers/dynamo_run.ts";
import { smolLm2 } from "../tests/_helpers/smollm2.ts";
import { checkFlags, flag } from "./_stats.ts";
import { defaultThreads } from "../llm/engines/llamacpp/engine.ts";

checkFlags(
  "deno task bench:engine",
  "The llama.cpp engine on the SmolLM2 GGUF: streams, batching and the FFI path.",
  {
    "--tokens N": "tokens per stream (default 64; 32 with --quick)",
    "--rounds N": "rounds (default 3; 1 with --quick)",
    "--ffi": "first, one greedy stream through Deno FFI straight to llama.cpp",
    "--json PATH": "write the results there",
    "--quick": "a short run",
  },
);

const quick = Deno.args.includes("--quick");
const TOKENS = Number(flag("--tokens") ?? (quick ? 32 : 64));
const ROUNDS = Number(flag("--rounds") ?? (quick ? 1 : 3));
const jsonPath = flag("--json");
const STREAMS = [1, 8];
const PROMPT = "Write a long story about a cat who learns to sail across the ocean.";
const MODEL = "SmolLM2-135M-Instruct.Q4_1";
const CONTEXT = 4096;

const smol = await smolLm2();
if (smol.path === undefined) {
  console.log(`bench:engine not run: ${smol.reason}`);
  Deno.exit(0);
}
const path = smol.path;
const threads = defaultThreads();

// The baseline: node-llama-cpp itself.
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const context = await model.createContext({
  sequences: Math.max(...STREAMS),
  contextSize: CONTEXT,
  threads,
});
const sequences = Array.from({ length: context.totalSequences }, () => context.getSequence());
const promptIds = model.tokenize(PROMPT, false);

async function direct(streams: number): Promise<number> {
  const start = performance.now();
  const counts = await Promise.all(
    sequences.slice(0, streams).map(async (seq) => {
      let n = 0;
      for await (
        const _ of seq.evaluate(promptIds as Token[], { temperature: 0, yieldEogToken: true })
      ) {
        if (++n >= TOKENS) break;
      }
      await seq.clearHistory();
      return n;
    }),
  );
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - start) / 1000);
}

const run = await startDynamoRun([
  "out=llamacpp",
  path,
  "--max-num-seqs",
  String(Math.max(...STREAMS)),
  "--context-length",
  String(CONTEXT),
]);

async function oneStream(): Promise<number> {
  const res = await fetch(`${run.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: MODEL,
      prompt: PROMPT,
      max_tokens: TOKENS,
      temperature: 0,
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let text = "";
  for await (const chunk of res.body.pipeThrough(new TextDecoderStream())) text += chunk;
  const m = /"completion_tokens":(\d+)/.exec(text);
  if (!m) throw new Error(`no usage in the stream: ${text.slice(-300)}`);
  return Number(m[1]);
}

async function frontend(streams: number): Promise<number> {
  const start = performance.now();
  const counts = await Promise.all(Array.from({ length: streams }, oneStream));
  return counts.reduce((a, b) => a + b, 0) / ((performance.now() - start) / 1000);
}

// Time to first token with and without a cached ~1,000-token prefix. The prefix: plain prose
// long enough to tokenize to PREFIX_TOKENS or more; each round asks its own question after it.
const PREFIX_TOKENS = 1000;
const PREFIX = (() => {
  const sentence = "The river winds past the old mill, the orchard and the stone bridge. ";
  let text = "";
  while (model.tokenize(text, false).length < PREFIX_TOKENS) text += sentence;
  return text;
})();
const question = (r: number) => `Question ${r}: what stands by the river?`;

/** First-token latency of the library itself, in ms: cold (whole prompt) or prefix kept. */
async function directTtft(cached: boolean, r: number): Promise<number> {
  const seq = sequences[0]!;
  const ids = model.tokenize(PREFIX + question(r), false);
  let keep = 0;
  if (cached) {
    // Keep what the sequence already holds of this prompt (the prefix, from a warm-up).
    const held = seq.contextTokens;
    while (keep < held.length && keep < ids.length - 1 && held[keep] === ids[keep]) keep++;
    if (keep < seq.nextTokenIndex) {
      await seq.eraseContextTokenRanges([{ start: keep, end: seq.nextTokenIndex }]);
    }
  } else await seq.clearHistory();
  const start = performance.now();
  for await (const _ of seq.evaluate(ids.slice(keep) as Token[], { temperature: 0 })) break;
  return performance.now() - start;
}

/** First-token latency through the frontend, in ms (a streamed completion's first chunk). */
async function frontendTtft(prompt: string): Promise<number> {
  const start = performance.now();
  const res = await fetch(`${run.url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: 1, temperature: 0, stream: true }),
  });
  if (!res.ok || !res.body) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  await reader.read();
  const ttft = performance.now() - start;
  while (!(await reader.read()).done) { /* the rest of the stream */ }
  return ttft;
}

/** TTFT cold and with the prefix cached, direct and through the frontend; medians in ms. */
async function ttftRows(): Promise<TtftResult> {
  const d = { cold: [] as number[], cached: [] as number[] };
  const f = { cold: [] as number[], cached: [] as number[] };
  await directTtft(false, 0); // leaves the prefix in sequence 0 for the cached rounds
  await frontendTtft(PREFIX + question(0)); // the same on the frontend's side
  for (let r = 1; r <= ROUNDS; r++) {
    await settle();
    d.cached.push(await directTtft(true, r));
    await settle();
    f.cached.push(await frontendTtft(PREFIX + question(r)));
    // Cold: the library from an empty sequence; the frontend on a prompt whose first token
    // differs, so that no sequence shares its prefix.
    await settle();
    d.cold.push(await directTtft(false, r));
    await directTtft(false, 0); // the prefix back in place for the next cached round
    await settle();
    f.cold.push(await frontendTtft(`Round ${r} of ${ROUNDS}. ${PREFIX}${question(r)}`));
  }
  return {
    promptTokens: model.tokenize(PREFIX + question(1), false).length,
    direct: { cold: median(d.cold), cached: median(d.cached) },
    frontend: { cold: median(f.cold), cached: median(f.cached) },
  };
}

interface TtftResult {
  promptTokens: number;
  direct: { cold: number; cached: number };
  frontend: { cold: number; cached: number };
}

/** One greedy stream: FFI to libllama (sync, nonblocking) vs node-llama-cpp; medians. */
async function ffiProbe(): Promise<void> {
  const pkg = new URL(import.meta.resolve("node-llama-cpp")).pathname;
  const bin = pkg.replace(
    /node-llama-cpp\/dist\/index\.js$/,
    "@node-llama-cpp/linux-x64/bins/linux-x64/",
  );
  const S = (n: number) => ({ struct: Array<"u64">(n / 8).fill("u64") });
  const cstr = (text: string) => new TextEncoder().encode(text + "\0");
  const ggml = Deno.dlopen(`${bin}libggml.v0.4.0.so`, {
    ggml_backend_load_all_from_path: { parameters: ["buffer"], result: "void" },
  });
  const lib = Deno.dlopen(`${bin}libllama.v0.4.0.so`, {
    llama_backend_init: { parameters: [], result: "void" },
    llama_model_default_params: { parameters: [], result: S(80) },
    llama_model_load_from_file: { parameters: ["buffer", S(80)], result: "pointer" },
    llama_context_default_params: { parameters: [], result: S(160) },
    llama_init_from_model: { parameters: ["pointer", S(160)], result: "pointer" },
    llama_batch_get_one: { parameters: ["buffer", "i32"], result: S(56) },
    llama_decode: { parameters: ["pointer", S(56)], result: "i32" },
    llama_decode_nb: {
      name: "llama_decode",
      parameters: ["pointer", S(56)],
      result: "i32",
      nonblocking: true,
    },
    llama_sampler_init_greedy: { parameters: [], result: "pointer" },
    llama_sampler_sample: { parameters: ["pointer", "pointer", "i32"], result: "i32" },
    llama_get_memory: { parameters: ["pointer"], result: "pointer" },
    llama_memory_clear: { parameters: ["pointer", "bool"], result: "void" },
  });
  const f = lib.symbols;
  ggml.symbols.ggml_backend_load_all_from_path(cstr(bin));
  f.llama_backend_init();
  const mp = f.llama_model_default_params();
  new DataView(mp.buffer).setInt32(16, 0, true); // n_gpu_layers
  const fmodel = f.llama_model_load_from_file(cstr(path), mp);
  const cp = f.llama_context_default_params();
  const cv = new DataView(cp.buffer);
  cv.setUint32(0, CONTEXT, true); // n_ctx
  cv.setUint32(4, 512, true); // n_batch
  cv.setUint32(8, 512, true); // n_ubatch
  cv.setInt32(28, threads, true); // n_threads
  cv.setInt32(32, threads, true); // n_threads_batch
  const fctx = f.llama_init_from_model(fmodel, cp);
  if (fmodel === null || fctx === null) throw new Error("FFI: model or context not created");
  const greedy = f.llama_sampler_init_greedy();

  async function viaFfi(nonblocking: boolean): Promise<{ tps: number; ids: number[] }> {
    const decode = async (ids: Int32Array) => {
      const batch = f.llama_batch_get_one(ids, ids.length);
      const rc = nonblocking ? await f.llama_decode_nb(fctx, batch) : f.llama_decode(fctx, batch);
      if (rc !== 0) throw new Error(`llama_decode returned ${rc}`);
    };
    const start = performance.now();
    f.llama_memory_clear(f.llama_get_memory(fctx), true);
    await decode(new Int32Array(promptIds));
    const ids: number[] = [];
    const one = new Int32Array(1);
    for (;;) {
      one[0] = f.llama_sampler_sample(greedy, fctx, -1);
      ids.push(one[0]);
      if (ids.length >= TOKENS) break;
      await decode(one);
    }
    return { tps: ids.length / ((performance.now() - start) / 1000), ids };
  }
  async function viaNodeLlamaCpp(): Promise<{ tps: number; ids: number[] }> {
    const seq = sequences[0]!;
    const start = performance.now();
    const ids: number[] = [];
    for await (
      const t of seq.evaluate(promptIds as Token[], { temperature: 0, yieldEogToken: true })
    ) {
      ids.push(t);
      if (ids.length >= TOKENS) break;
    }
    const tps = ids.length / ((performance.now() - start) / 1000);
    await seq.clearHistory();
    return { tps, ids };
  }
  await viaFfi(false);
  await viaNodeLlamaCpp();
  const sync: number[] = [], nb: number[] = [], nlc: number[] = [];
  let same = true;
  for (let r = 0; r < Math.max(ROUNDS, 3); r++) {
    await settle();
    const a = await viaFfi(false);
    await settle();
    const b = await viaFfi(true);
    await settle();
    const c = await viaNodeLlamaCpp();
    sync.push(a.tps);
    nb.push(b.tps);
    nlc.push(c.tps);
    same &&= a.ids.join() === c.ids.join() && b.ids.join() === c.ids.join();
  }
  console.log(
    `binding, 1 greedy stream of ${TOKENS} tokens: FFI sync ${median(sync).toFixed(1)} tok/s, ` +
      `FFI nonblocking ${median(nb).toFixed(1)} tok/s, node-llama-cpp ${median(nlc).toFixed(1)} ` +
      `tok/s (ratio node-llama-cpp / FFI sync ${(median(nlc) / median(sync)).toFixed(2)}x); ` +
      `same tokens: ${same}`,
  );
  lib.close();
  ggml.close();
}

function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 500));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

if (Deno.args.includes("--ffi")) await ffiProbe();

const results: Array<{ streams: number; direct: number; frontend: number; ratio: number }> = [];
let ttft: TtftResult | undefined;
try {
  // Warm-up: first decodes pay for page faults and thread start-up on both sides.
  await direct(1);
  await frontend(1);
  for (const streams of STREAMS) {
    const d: number[] = [];
    const f: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      // llama.cpp's worker threads spin a while after a decode: let the other side's go idle.
      await settle();
      d.push(await direct(streams));
      await settle();
      f.push(await frontend(streams));
    }
    console.log(
      `  rounds: direct ${d.map((x) => x.toFixed(1))}, frontend ${f.map((x) => x.toFixed(1))}`,
    );
    const row = { streams, direct: median(d), frontend: median(f), ratio: median(f) / median(d) };
    results.push(row);
    console.log(
      `${streams} stream(s), ${TOKENS} tokens each: direct ${row.direct.toFixed(1)} tok/s, ` +
        `through the frontend ${row.frontend.toFixed(1)} tok/s, ratio ${row.ratio.toFixed(2)}x`,
    );
  }
  ttft = await ttftRows();
  const { direct: dt, frontend: ft } = ttft;
  const ms = (x: number) => `${x.toFixed(1)} ms`;
  console.log(
    `TTFT, ${ttft.promptTokens}-token prompt, cold: direct ${ms(dt.cold)}, through the frontend ` +
      `${ms(ft.cold)}, ratio ${(ft.cold / dt.cold).toFixed(2)}x`,
  );
  console.log(
    `TTFT, same prompt with its ${PREFIX_TOKENS}+-token prefix cached: direct ${ms(dt.cached)}, ` +
      `through the frontend ${ms(ft.cached)}, ratio ${(ft.cached / dt.cached).toFixed(2)}x`,
  );
  console.log(
    `cached / cold TTFT: direct ${(dt.cached / dt.cold).toFixed(2)}x, through the frontend ` +
      `${(ft.cached / ft.cold).toFixed(2)}x (goal: at most 0.3x)`,
  );
} finally {
  await run.stop();
  await context.dispose();
  await model.dispose();
}
console.log(
  `(SmolLM2-135M-Instruct Q4_1, CPU, ${threads} threads, prompt ${promptIds.length} tokens, ` +
    `${ROUNDS} round(s), median)`,
);
if (jsonPath) {
  await Deno.writeTextFile(
    jsonPath,
    JSON.stringify({ tokens: TOKENS, rounds: ROUNDS, threads, results, ttft }, null, 2),
  );
}
