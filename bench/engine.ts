// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:engine`: the llama.cpp engine on SmolLM2-135M (Q4_1, CPU), generated tokens/s
// at 1 and 8 concurrent streams through `dynamo run in=http out=llamacpp` (HTTP, SSE, the
// frontend's preprocessing and detokenizing, the request plane, LlamaCppEngine), each as a ratio
// to node-llama-cpp called directly in this process on the same prompt (the baseline: one context
// with as many sequences, greedy, eos ignored). The two sides run one after the other, in
// alternating rounds, so they never share the CPU; the median round of each is reported.
//
// Flags: --tokens N per stream (default 64), --rounds N (default 3), --json PATH, --quick.

import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { startDynamoRun } from "../tests/_helpers/dynamo_run.ts";
import { smolLm2 } from "../tests/_helpers/smollm2.ts";
import { flag } from "./_stats.ts";
import { defaultThreads } from "../llm/engines/llamacpp/engine.ts";

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

function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 500));
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

const results: Array<{ streams: number; direct: number; frontend: number; ratio: number }> = [];
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
    JSON.stringify({ tokens: TOKENS, rounds: ROUNDS, threads, results }, null, 2),
  );
}
