import assert from "node:assert/strict";
import fc from "fast-check";
import { type OutputDelta, OutputProcessor, StopStringMatcher } from "./postprocessor.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";
import { QWEN3_ENDOFTEXT, QWEN3_IM_END, qwen3Tokenizer } from "../../tests/_helpers/qwen3.ts";

const tok = qwen3Tokenizer();
const EOS = [QWEN3_IM_END, QWEN3_ENDOFTEXT];

function processor(
  options: Partial<ConstructorParameters<typeof OutputProcessor>[0]> = {},
): OutputProcessor {
  return new OutputProcessor({ tokenizer: tok, eosTokenIds: EOS, ...options });
}

/** Pushes each output, stopping at the first finish reason; finish() if none came. */
function run(p: OutputProcessor, outputs: LLMEngineOutput[]): OutputDelta & { deltas: string[] } {
  const deltas: string[] = [];
  const tokenIds: number[] = [];
  for (const output of outputs) {
    const d = p.push(output);
    deltas.push(d.text);
    tokenIds.push(...d.tokenIds);
    if (d.finishReason) {
      return { text: deltas.join(""), tokenIds, finishReason: d.finishReason, deltas };
    }
  }
  const end = p.finish();
  deltas.push(end.text);
  return { text: deltas.join(""), tokenIds, finishReason: end.finishReason, deltas };
}

const perToken = (ids: number[], last?: LLMEngineOutput["finish_reason"]): LLMEngineOutput[] =>
  ids.map((id, i) => ({
    token_ids: [id],
    finish_reason: i === ids.length - 1 ? last ?? null : null,
  }));

/** Reference semantics: stop at the earliest end of any stop string (longest on a tie). */
function cutAtStop(text: string, stops: readonly string[]): { text: string; matched: boolean } {
  for (let end = 1; end <= text.length; end++) {
    let best = "";
    for (const s of stops) {
      if (s.length > best.length && end >= s.length && text.slice(end - s.length, end) === s) {
        best = s;
      }
    }
    if (best !== "") return { text: text.slice(0, end - best.length), matched: true };
  }
  return { text, matched: false };
}

function splitAt<T>(items: readonly T[], rawCuts: readonly number[]): T[][] {
  const cuts = [...new Set(rawCuts.map((c) => c % (items.length + 1)))].sort((a, b) => a - b);
  const parts: T[][] = [];
  let from = 0;
  for (const cut of [...cuts, items.length]) {
    parts.push(items.slice(from, cut));
    from = cut;
  }
  return parts;
}

Deno.test("OutputProcessor streams text and turns the engine's eos reason into stop", () => {
  const ids = tok.encode("Hello there, 你好 🦜!");
  const p = processor();
  const r = run(p, perToken(ids, "eos"));
  assert.equal(r.text, "Hello there, 你好 🦜!");
  assert.equal(r.finishReason, "stop");
  assert.deepEqual(r.tokenIds, ids);
  assert.equal(p.completionTokens, ids.length);
  assert.ok(p.finished);
  assert.equal(p.finishReason, "stop");
});

Deno.test("OutputProcessor ends at eos, hides it and ignores later tokens", () => {
  const ids = [...tok.encode("Done."), QWEN3_IM_END, ...tok.encode(" more")];
  const p = processor();
  const d = p.push({ token_ids: ids });
  assert.equal(d.text, "Done.");
  assert.equal(d.finishReason, "stop");
  assert.deepEqual(d.tokenIds, tok.encode("Done."));
  assert.equal(p.completionTokens, tok.encode("Done.").length + 1, "eos counts as generated");
  assert.deepEqual(p.push({ token_ids: [1, 2, 3] }), { text: "", tokenIds: [] });
  assert.equal(p.completionTokens, tok.encode("Done.").length + 1);
});

Deno.test("OutputProcessor keeps going past eos when ignore_eos is set", () => {
  const ids = [...tok.encode("a"), QWEN3_ENDOFTEXT, ...tok.encode("b c d")];
  const p = processor({ ignoreEos: true, maxTokens: 4 });
  const d = p.push({ token_ids: ids });
  assert.equal(d.text, "a" + tok.decode(tok.encode("b c d").slice(0, 2)));
  assert.equal(d.finishReason, "length");
  assert.equal(p.completionTokens, 4);
});

Deno.test("OutputProcessor ends at a hidden stop token id", () => {
  const stopId = tok.encode("|")[0]!;
  const p = processor({ stopTokenIdsHidden: [stopId] });
  const r = run(p, perToken(tok.encode("left|right")));
  assert.equal(r.text, "left");
  assert.equal(r.finishReason, "stop");
});

Deno.test("OutputProcessor ends with length on exactly the max_tokens-th token", () => {
  const ids = tok.encode("one two three four five six");
  const p = processor({ maxTokens: 3 });
  const d = p.push({ token_ids: ids });
  assert.equal(d.text, tok.decode(ids.slice(0, 3)));
  assert.equal(d.finishReason, "length");
  assert.deepEqual(d.tokenIds, ids.slice(0, 3));
  assert.equal(p.completionTokens, 3);
});

Deno.test("OutputProcessor stops at a stop string split across chunks and drops the rest", () => {
  const ids = tok.encode("Hello\n\nWorld and more");
  const p = processor({ stopStrings: ["\n\n"] });
  const r = run(p, perToken(ids, "length"));
  assert.equal(r.text, "Hello");
  assert.equal(r.finishReason, "stop");
});

Deno.test("OutputProcessor emits a held-back partial stop string once it turns out not to be one", () => {
  const p = processor({ stopStrings: ["<END>"] });
  const outputs = perToken(tok.encode("a <EN b <E"), "length");
  const r = run(p, outputs);
  assert.equal(r.text, "a <EN b <E");
  assert.equal(r.finishReason, "length");
  assert.ok(r.deltas.some((d) => d === ""), "something was held back on the way");
});

Deno.test("OutputProcessor passes on the engine's own finish reason and flushes held text", () => {
  for (const reason of ["length", "cancelled", "error", "stop", "content_filter"] as const) {
    const p = processor({ stopStrings: ["xyz"] });
    const r = run(p, perToken(tok.encode("abc x"), reason));
    assert.equal(r.text, "abc x");
    assert.equal(r.finishReason, reason);
  }
});

Deno.test("OutputProcessor lets nothing stop the sequence before min_tokens", () => {
  const early = [...tok.encode("hi"), QWEN3_IM_END, ...tok.encode(" STOP then")];
  const p = processor({ minTokens: 4, stopStrings: ["STOP"] });
  const r = run(p, perToken(early, "eos"));
  // Tokens: "hi", eos, " STOP", " then": eos and "STOP" come before the fourth token.
  assert.equal(early.length, 4);
  assert.equal(r.text, "hi STOP then");
  assert.equal(r.finishReason, "stop");

  const late = processor({ minTokens: 2 });
  const d = late.push({ token_ids: [...tok.encode("a b"), QWEN3_IM_END, ...tok.encode("c")] });
  assert.equal(d.text, "a b");
  assert.equal(d.finishReason, "stop");
});

Deno.test("OutputProcessor.finish releases held-back text when the stream just ends", () => {
  const p = processor({ stopStrings: ["###"] });
  const d = p.push({ token_ids: tok.encode("total #") });
  assert.equal(d.text, "total ");
  assert.equal(d.finishReason, undefined);
  const end = p.finish();
  assert.deepEqual(end, { text: "#", tokenIds: [] });
  assert.ok(p.finished);
  assert.deepEqual(p.finish(), { text: "", tokenIds: [] });
});

Deno.test("OutputProcessor reports a stop string that the final flush completes", () => {
  const [first, second] = tok.encode("🦜");
  const p = processor({ stopStrings: ["\uFFFD"] });
  // A lone first half decodes to U+FFFD only when the stream ends there.
  assert.equal(p.push({ token_ids: tok.encode("ok") }).text, "ok");
  assert.equal(p.push({ token_ids: [first!] }).text, "");
  const end = p.finish();
  assert.equal(end.text, "");
  assert.equal(end.finishReason, "stop");
  assert.ok(second !== undefined);
});

Deno.test("OutputProcessor takes engine-decoded text as is", () => {
  const p = processor({ stopStrings: ["!"] });
  assert.equal(p.push({ token_ids: [1, 2], text: "Hi" }).text, "Hi");
  const d = p.push({ token_ids: [3], text: " you! extra" });
  assert.equal(d.text, " you");
  assert.equal(d.finishReason, "stop");
  assert.equal(p.completionTokens, 3);
});

Deno.test("OutputProcessor keeps log probabilities aligned with the ids it passes on", () => {
  const ids = tok.encode("a b");
  const p = processor();
  const d = p.push({
    token_ids: [...ids, QWEN3_IM_END],
    log_probs: [...ids.map((_, i) => -i), -9],
  });
  assert.deepEqual(d.tokenIds, ids);
  assert.deepEqual(d.logProbs, ids.map((_, i) => -i));
});

Deno.test("OutputProcessor.forRequest applies a pre-processed request's stop conditions", () => {
  const request: PreprocessedRequest = {
    model: "m",
    token_ids: tok.encode("Q:"),
    stop_conditions: { max_tokens: 50, stop: ["\nQ:"], min_tokens: 1 },
    sampling_options: {},
    eos_token_ids: EOS,
  };
  const p = OutputProcessor.forRequest(tok, request);
  const r = run(p, perToken(tok.encode(" 42\nQ: next")));
  assert.equal(r.text, " 42");
  assert.equal(r.finishReason, "stop");
});

Deno.test("StopStringMatcher stops where the first stop string completes, inside a longer one too", () => {
  const m = new StopStringMatcher(["abcd", "bc"]);
  assert.deepEqual(m.push("xabcd"), { text: "xa", matched: true });
  const tie = new StopStringMatcher(["c", "bc"]);
  assert.deepEqual(tie.push("abc"), { text: "a", matched: true });
  const chunked = new StopStringMatcher(["abcd", "bc"]);
  assert.deepEqual(chunked.push("xa"), { text: "x", matched: false });
  assert.deepEqual(chunked.push("b"), { text: "", matched: false });
  assert.deepEqual(chunked.push("cd"), { text: "a", matched: true });
  assert.deepEqual(chunked.push("more"), { text: "", matched: true });
});

Deno.test("StopStringMatcher matches across any chunking as on the whole text", () => {
  const alphabet = fc.constantFrom("a", "b", "c", "é", "🦜");
  const word = fc.array(alphabet, { minLength: 1, maxLength: 4 }).map((a) => a.join(""));
  // Texts built partly from the stop strings themselves, so matches and overlaps are common.
  const case_ = fc.array(word, { minLength: 1, maxLength: 3 }).chain((stops) =>
    fc.tuple(
      fc.array(fc.oneof(alphabet, fc.constantFrom(...stops)), { maxLength: 30 })
        .map((a) => a.join("")),
      fc.constant(stops),
    )
  );
  fc.assert(
    fc.property(
      case_,
      fc.array(fc.nat(), { maxLength: 12 }),
      ([text, stops], rawCuts) => {
        const chars = [...text];
        const m = new StopStringMatcher(stops);
        let out = "";
        let matched = false;
        for (const chunk of splitAt(chars, rawCuts)) {
          const r = m.push(chunk.join(""));
          out += r.text;
          if (r.matched) {
            matched = true;
            break;
          }
        }
        if (!matched) out += m.flush();
        assert.deepEqual({ text: out, matched }, cutAtStop(text, stops));
      },
    ),
    { numRuns: 1000 },
  );
});

Deno.test("OutputProcessor output over any token chunking equals cutting the decoded text", () => {
  const piece = fc.constantFrom("ab", " ab", "a", "b", "\n", "你", "🦜", "é", " ", "ba");
  fc.assert(
    fc.property(
      fc.array(piece, { minLength: 1, maxLength: 20 }).map((a) => a.join("")),
      fc.array(fc.constantFrom("ab", "b\n", "🦜a", "你 ", "a a", "ba b"), { maxLength: 3 }),
      fc.array(fc.nat(), { maxLength: 8 }),
      (text, stops, rawCuts) => {
        const ids = tok.encode(text);
        const p = processor({ stopStrings: stops });
        const outputs = splitAt(ids, rawCuts).map((chunk, i, all): LLMEngineOutput => ({
          token_ids: chunk,
          finish_reason: i === all.length - 1 ? "length" : null,
        }));
        const r = run(p, outputs);
        const expected = cutAtStop(tok.decode(ids), stops);
        assert.equal(r.text, expected.text);
        assert.equal(r.finishReason, expected.matched ? "stop" : "length");
      },
    ),
    { numRuns: 300 },
  );
});
