// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// `deno task bench:tokenizer`: what encoding chat prompts costs, with the real Qwen3 tokenizer,
// next to the tokenizer library's own encode in the same run (the baseline every ratio is
// against). Two workloads of the same generated text:
//
// - conversations: each turn sends the system prompt and the whole history again, with one
//   new user message (what a chat client does), and the full prompt is encoded every turn;
// - fresh prompts: prompts of the same sizes that share nothing (nothing to reuse).
//
// Three encoders: the library's encode; ours with the word cache alone (the section cache
// off); ours as it serves (word and section caches). Every prompt's ids are checked to be the
// same from all three before anything is timed.
//
// Flags: --json PATH (write results as JSON), --quick (fewer conversations), --seed N.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { builtinTestModel } from "../llm/model/test_model.ts";
import { WordCacheEncoder } from "../llm/preprocess/_word_cache_encoder.ts";
import { checkFlags, flag, seededRandom } from "./_stats.ts";

checkFlags(
  "deno task bench:tokenizer",
  "Our tokenizer against the Hugging Face library on chat text.",
  {
    "--seed N": "seed of the text (default 7)",
    "--json PATH": "write the results there",
    "--quick": "fewer conversations",
  },
);

const quick = Deno.args.includes("--quick");
const jsonPath = flag("--json");
const SEED = Number(flag("--seed") ?? 7);
const CONVERSATIONS = quick ? 4 : 16;
const TURNS = 8;
const SYSTEM_WORDS = 400; // ~2,000 characters
const MESSAGE_WORDS = [40, 300]; // a user message or an answer, in words
const ROUNDS = quick ? 2 : 5;
if (!Number.isInteger(SEED)) throw new Error("--seed must be a whole number");

const rnd = seededRandom(SEED * 2654435761 >>> 0 || 1);
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;

// --- text -----------------------------------------------------------------------------------
// Words made of syllables (so BPE splits some of them), with numbers, punctuation, accents
// and some CJK, as chat text has.
const SYLLABLES = [
  "ka",
  "ren",
  "to",
  "mi",
  "sha",
  "lo",
  "qua",
  "ter",
  "vin",
  "do",
  "ex",
  "pla",
  "nor",
  "ti",
  "ble",
  "ction",
  "ing",
  "ed",
  "é",
  "ü",
];
const COMMON = ["the", "and", "of", "to", "a", "in", "is", "that", "for", "it", "with", "as"];
const CJK = ["数据", "模型", "请求", "服务器", "缓存"];
function word(): string {
  const r = rnd();
  if (r < 0.35) return pick(COMMON);
  if (r < 0.38) return String(Math.floor(rnd() * 100_000));
  if (r < 0.40) return pick(CJK);
  let w = "";
  for (let n = 1 + Math.floor(rnd() * 3); n > 0; n--) w += pick(SYLLABLES);
  return rnd() < 0.1 ? w[0]!.toUpperCase() + w.slice(1) : w;
}
function text(words: number): string {
  let out = "";
  for (let i = 0; i < words; i++) {
    out += word();
    const r = rnd();
    out += r < 0.06 ? ". " : r < 0.1 ? ", " : r < 0.11 ? "\n\n" : " ";
  }
  return out.trim();
}
const messageWords = () =>
  MESSAGE_WORDS[0]! + Math.floor(rnd() * (MESSAGE_WORDS[1]! - MESSAGE_WORDS[0]!));

/** A rendered chat prompt, as Qwen3's template lays messages out. */
function render(messages: Array<{ role: string; content: string }>): string {
  let out = "";
  for (const m of messages) out += `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`;
  return out + "<|im_start|>assistant\n";
}

/** Every turn's full prompt of `CONVERSATIONS` conversations, turn by turn. */
function conversations(): string[] {
  const prompts: string[] = [];
  for (let c = 0; c < CONVERSATIONS; c++) {
    const messages = [{ role: "system", content: text(SYSTEM_WORDS) }];
    for (let t = 0; t < TURNS; t++) {
      messages.push({ role: "user", content: text(messageWords()) });
      prompts.push(render(messages));
      messages.push({ role: "assistant", content: text(messageWords()) });
    }
  }
  return prompts;
}

/** Prompts of the same lengths as `like`, sharing nothing. */
function fresh(like: string[]): string[] {
  return like.map((p) => {
    let t = "";
    while (t.length < p.length) t += text(200) + " ";
    return render([{ role: "user", content: t.slice(0, p.length) }]);
  });
}

// --- encoders -------------------------------------------------------------------------------
const dir = await builtinTestModel();
const json = {
  added_tokens: [],
  ...JSON.parse(await Deno.readTextFile(`${dir}/tokenizer.json`)),
};
const config = JSON.parse(await Deno.readTextFile(`${dir}/tokenizer_config.json`));
function ours(sectionCache: boolean): WordCacheEncoder {
  const enc = WordCacheEncoder.create(
    new HfTokenizer(json, config),
    json,
    config,
    sectionCache ? undefined : { minLength: Infinity, maxChars: 0 },
  );
  if (!enc) throw new Error("the Qwen3 tokenizer should take the cached path");
  return enc;
}
const library = new HfTokenizer(json, config);
type Encode = (text: string) => number[];
const encoders: Array<{ key: string; label: string; make: () => Encode }> = [
  {
    key: "library",
    label: "library encode (@huggingface/tokenizers)",
    make: () => (t) => library.encode(t, { add_special_tokens: false }).ids,
  },
  {
    key: "words",
    label: "ours, word cache only",
    make: () => {
      const e = ours(false);
      return (t) => e.encode(t);
    },
  },
  {
    key: "ours",
    label: "ours (word + section caches)",
    make: () => {
      const e = ours(true);
      return (t) => e.encode(t);
    },
  },
];

// --- run ------------------------------------------------------------------------------------
const workloads = [{ key: "conversations", prompts: conversations() }];
workloads.push({ key: "fresh", prompts: fresh(workloads[0]!.prompts) });

for (const w of workloads) {
  const fns = encoders.map((e) => e.make());
  for (const p of w.prompts) {
    const want = JSON.stringify(fns[0]!(p));
    for (let i = 1; i < fns.length; i++) {
      if (JSON.stringify(fns[i]!(p)) !== want) {
        throw new Error(`${encoders[i]!.key} differs from the library on a ${w.key} prompt`);
      }
    }
  }
}

interface Row {
  workload: string;
  encoder: string;
  prompts: number;
  tokens: number;
  /** Median over rounds, each with a fresh encoder (empty caches). */
  ms: number;
  tokensPerSecond: number;
  vsLibrary: number;
}
const rows: Row[] = [];
for (const w of workloads) {
  const tokens = w.prompts.reduce((s, p) => s + library.encode(p).ids.length, 0);
  const times = new Map(encoders.map((e) => [e.key, [] as number[]]));
  // Rounds take turns between the encoders, so drift hits all of them.
  for (let r = 0; r < ROUNDS; r++) {
    for (const e of encoders) {
      const fn = e.make();
      const t0 = performance.now();
      for (const p of w.prompts) fn(p);
      times.get(e.key)!.push(performance.now() - t0);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const base = median(times.get("library")!);
  for (const e of encoders) {
    const ms = median(times.get(e.key)!);
    rows.push({
      workload: w.key,
      encoder: e.label,
      prompts: w.prompts.length,
      tokens,
      ms,
      tokensPerSecond: tokens / (ms / 1000),
      vsLibrary: base / ms,
    });
  }
}

console.log(
  `\nencoding chat prompts, Qwen3 tokenizer (${CONVERSATIONS} conversations x ${TURNS} turns; ` +
    `median of ${ROUNDS} rounds, each encoder fresh)`,
);
console.log(
  "| workload      | encoder                                   | prompts |    tokens |       ms |   tokens/s | speed vs library |",
);
console.log(
  "| ------------- | ----------------------------------------- | ------: | --------: | -------: | ---------: | ---------------: |",
);
for (const r of rows) {
  console.log(
    `| ${r.workload.padEnd(13)} | ${r.encoder.padEnd(41)} | ${String(r.prompts).padStart(7)} | ${
      r.tokens.toLocaleString("en-US").padStart(9)
    } | ${r.ms.toFixed(1).padStart(8)} | ${
      Math.round(r.tokensPerSecond).toLocaleString("en-US").padStart(10)
    } | ${(r.vsLibrary.toFixed(2) + "x").padStart(16)} |`,
  );
}
if (jsonPath) {
  await Deno.writeTextFile(jsonPath, JSON.stringify({ seed: SEED, rows }, null, 2) + "\n");
  console.log(`wrote ${jsonPath}`);
}
