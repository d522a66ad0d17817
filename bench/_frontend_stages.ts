// Isolated stage timings for `bench:frontend`'s profile: what each step of the dynamo
// frontend's path costs for the bench's request, each timed alone in a tight loop in this
// process (no sockets, warm JIT): a best case next to the CPU profile taken under load.

import {
  builtinTestModel,
  ChatTemplate,
  Context,
  DistributedRuntime,
  echoEngine,
  FrontendMetrics,
  type LLMEngineOutput,
  ModelInput,
  ModelManager,
  ModelType,
  openMigrating,
  OutputProcessor,
  type PreprocessedRequest,
  registerLlm,
} from "../mod.ts";
import { validateChatRequest } from "../llm/openai/validate.ts";
import { admit } from "../llm/pipeline/admit.ts";
import { chunkBase, tokenSse } from "../llm/pipeline/encode.ts";
import { TokenChoices } from "../llm/pipeline/postprocess.ts";

/** One timed stage: microseconds per request (median over batches). */
export interface StageRow {
  key: string;
  label: string;
  /** Wall-clock time per call. */
  us: number;
}

/** Options of {@linkcode measureStages}. */
export interface MeasureStagesOptions {
  /** Request body the bench sends (JSON text). */
  body: string;
  /** Time budget per stage (ms); each stage stops after its batches or this. */
  budgetMs: number;
}

const encoder = new TextEncoder();

/**
 * `outputs` as an engine stream whose items have all arrived: the SSE encoder polls them and
 * writes them in one step, as it does under load.
 */
function alreadyThere(outputs: readonly LLMEngineOutput[]): AsyncIterable<LLMEngineOutput> {
  let i = 0;
  const take = (): IteratorResult<LLMEngineOutput> =>
    i < outputs.length ? { value: outputs[i++]!, done: false } : { value: undefined, done: true };
  const it = {
    next: () => Promise.resolve(take()),
    poll: take,
    return: () => Promise.resolve({ value: undefined, done: true as const }),
  };
  return { [Symbol.asyncIterator]: () => it };
}

/** Median per-call time (µs) of `fn` over batches, after a warm-up batch. */
async function timeIt(fn: () => unknown, budgetMs: number, batches = 7): Promise<number> {
  // Size a batch to about budget / (batches + 1), from calls past the first (cold) ones.
  for (let i = 0; i < 10; i++) await fn();
  const probe0 = performance.now();
  for (let i = 0; i < 10; i++) await fn();
  const one = Math.max((performance.now() - probe0) / 10, 0.001);
  const n = Math.max(1, Math.min(20_000, Math.floor(budgetMs / (batches + 1) / one)));
  const per: number[] = [];
  const deadline = performance.now() + budgetMs * 2;
  for (let b = 0; b <= batches && performance.now() < deadline; b++) {
    const t0 = performance.now();
    for (let i = 0; i < n; i++) {
      const r = fn();
      if (r instanceof Promise) await r;
    }
    if (b > 0) per.push((performance.now() - t0) * 1000 / n);
  }
  per.sort((a, b) => a - b);
  return per[per.length >> 1] ?? Number.NaN;
}

/**
 * Times the frontend's stages for one streaming chat request, in process.
 * @returns rows in path order
 */
export async function measureStages(options: MeasureStagesOptions): Promise<StageRow[]> {
  const runtime = await DistributedRuntime.connect({ discovery: "memory", requestPlane: "local" });
  const models = new ModelManager(runtime);
  try {
    const component = runtime.namespace("dynamo").component("backend");
    const endpoint = component.endpoint("generate");
    const echo = echoEngine();
    const serving = endpoint.serveEndpoint(echo as never);
    serving.catch(() => {});
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      await builtinTestModel(),
    );
    await models.start();
    const bodyJson = JSON.parse(options.body) as { model: string };
    const model = models.get(bodyJson.model);
    if (!model) throw new Error(`model ${bodyJson.model} is not served in process`);
    const { card, tokenizer, preprocessor } = await model.pipeline();
    const template = new ChatTemplate(card.chat_template ?? "");
    const req = validateChatRequest(JSON.parse(options.body));
    const pre = preprocessor.chat(req).request;
    const prompt = template.render({
      messages: req.messages,
      bos_token: card.bos_token ?? "",
      eos_token: card.eos_token ?? "",
    });
    const send = (r: PreprocessedRequest, c: Context) => model.generate<LLMEngineOutput>(r, c);

    // The engine outputs the frontend consumes: up to the first stop id (eos), as it does.
    const stopIds = new Set(pre.eos_token_ids);
    const outputs: LLMEngineOutput[] = [];
    for await (const o of await openMigrating(send, pre, new Context(), { limit: 0 })) {
      outputs.push(o);
      if (o.token_ids.some((id) => stopIds.has(id))) break;
    }
    // The same request, cut by max_tokens so the engine itself ends the stream.
    const preSelfEnding: PreprocessedRequest = {
      ...pre,
      stop_conditions: { ...pre.stop_conditions, max_tokens: outputs.length },
    };

    const metrics = new FrontendMetrics();
    const stages: Array<[string, string, () => unknown]> = [
      ["validate", "JSON.parse + validateChatRequest", () => {
        validateChatRequest(JSON.parse(options.body));
      }],
      ["template", "chat template (jinja render)", () => {
        template.render({
          messages: req.messages,
          bos_token: card.bos_token ?? "",
          eos_token: card.eos_token ?? "",
        });
      }],
      ["tokenize", `tokenize the prompt (${pre.token_ids.length} tokens)`, () => {
        tokenizer.encode(prompt, { addSpecialTokens: false });
      }],
      ["preprocess", "preprocessor.chat (template + tokenize + build)", () => {
        preprocessor.chat(req);
      }],
      [
        "engine_cut",
        `in-process call + echo, ${outputs.length} outputs, cut at eos (as the frontend)`,
        async () => {
          const it = (await openMigrating(send, pre, new Context(), { limit: 0 }))[
            Symbol.asyncIterator
          ]();
          for (let i = 0; i < outputs.length; i++) await it.next();
          await it.return?.();
        },
      ],
      [
        "engine_self",
        `in-process call + echo, ${outputs.length} outputs, engine ends the stream`,
        async () => {
          for await (
            const _ of await openMigrating(send, preSelfEnding, new Context(), {
              limit: 0,
            })
          );
        },
      ],
      [
        "engine_alone",
        `echo engine alone, ${outputs.length} outputs (what the two rows above add to it is the hop)`,
        async () => {
          for await (const _ of echo(preSelfEnding, new Context()));
        },
      ],
      ["detokenize", `OutputProcessor: ${outputs.length} outputs (detokenize, stops)`, () => {
        const p = OutputProcessor.forRequest(tokenizer, pre);
        for (const o of outputs) p.push(o);
      }],
      [
        "sse",
        `SSE as the frontend writes it: ${outputs.length} outputs -> chunks + [DONE] ` +
        "(detokenize, TTFT/ITL and request metrics)",
        async () => {
          const admission = admit(metrics, model.name, "chat", true);
          const run = new TokenChoices(
            tokenizer,
            [pre],
            [alreadyThere(outputs)],
            pre.token_ids.length,
            admission.series,
            admission.started,
          );
          const sse = tokenSse(run, chunkBase("chat", "x", model.name), false);
          for (;;) {
            const step = await sse.next();
            encoder.encode(step.text);
            if (step.last) break;
          }
          admission.finish("success");
        },
      ],
    ];
    const rows: StageRow[] = [];
    for (const [key, label, fn] of stages) {
      rows.push({ key, label, us: await timeIt(fn, options.budgetMs) });
    }
    return rows;
  } finally {
    await models.close();
    await runtime.shutdown();
  }
}
