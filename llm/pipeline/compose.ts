// Composes a model's request pipeline once per model and card: preprocess -> route ->
// migrate -> postprocess -> encode for models that take tokens; route -> fail over before
// the first item -> encode for models that take text. The frontend only parses, admits,
// resolves the model and calls `start`.

import type { Context } from "../../runtime/context.ts";
import { DynamoError } from "../../runtime/errors.ts";
import type { Logger } from "../../runtime/logger.ts";
import type { FrontendMetrics, ModelMetrics } from "../http/metrics.ts";
import type { ModelPipeline } from "../model/loader.ts";
import type { ServedModel } from "../model/served_model.ts";
import type { ChatCompletionRequest } from "../openai/types.ts";
import { ChatOutputParser } from "../parsers/chat_output.ts";
import {
  type ReasoningFormat,
  reasoningFormat,
  ReasoningParser,
  startsInReasoning,
} from "../parsers/reasoning.ts";
import { type ToolCallFormat, toolCallFormat, ToolCallParser } from "../parsers/tool_calls.ts";
import { UnknownParserError } from "../parsers/types.ts";
import {
  type LLMEngineOutput,
  type ModelDeploymentCard,
  ModelInput,
  type PreprocessedRequest,
} from "../protocols.ts";
import type { Admission } from "./admit.ts";
import {
  chunkBase,
  type SseSource,
  textResponse,
  textSse,
  tokenResponse,
  tokenSse,
} from "./encode.ts";
import { engineOutputChecker } from "./engine_output.ts";
import { openFailover, openMigrating } from "./migration.ts";
import type { EndpointKind, OpenAIRequest } from "./parse.ts";
import { TokenChoices } from "./postprocess.ts";
import { preprocess } from "./preprocess.ts";
import { measuredText } from "./text_metrics.ts";

/** A started generation: its events for a streaming client, or its whole response. */
export interface Run {
  sse(): SseSource;
  collect(): Promise<unknown>;
}

/** One model's composed pipeline. */
export interface ServingPipeline {
  /**
   * Starts a request: resolves once the engine accepted it (failures before that reject).
   * @param ctx the request's context
   * @param admission the request's accounting (its start time and its model's series)
   * @param requestId the id the answer carries (`chatcmpl-ID`; the client's `x-request-id`
   *   when valid), default the context's
   */
  start(
    kind: EndpointKind,
    req: OpenAIRequest,
    ctx: Context,
    admission: Admission,
    requestId?: string,
  ): Promise<Run>;
}

/** What composing a model needs besides the model. */
export interface ComposeOptions {
  metrics: FrontendMetrics;
  logger: Logger;
  /**
   * The tool-call parser of models whose card names none (`runtime_config.tool_call_parser`);
   * a name from llm/parsers (hermes, llama3_json, ...).
   */
  toolCallParser?: string;
  /** The reasoning parser of models whose card names none (qwen3, deepseek_r1, ...). */
  reasoningParser?: string;
}

/** A model's parsers: the card's names first, then the frontend's. */
function modelParsers(
  card: ModelDeploymentCard,
  options: ComposeOptions,
): { tools?: ToolCallFormat; reasoning?: ReasoningFormat } {
  const pick = (fromCard: unknown, fallback: string | undefined) =>
    typeof fromCard === "string" && fromCard !== "" ? fromCard : fallback;
  const tools = pick(card.runtime_config?.tool_call_parser, options.toolCallParser);
  const reasoning = pick(card.runtime_config?.reasoning_parser, options.reasoningParser);
  try {
    return {
      tools: tools === undefined ? undefined : toolCallFormat(tools),
      reasoning: reasoning === undefined ? undefined : reasoningFormat(reasoning),
    };
  } catch (err) {
    if (!(err instanceof UnknownParserError)) throw err;
    throw new DynamoError(`model ${card.display_name}: ${err.message}`, { cause: err });
  }
}

/** How a call forced by the engine's grammar reads (see `PreprocessResult.forcedToolCall`). */
const FORCED_CALL_FORMAT = toolCallFormat("llama3_json");

/** Whether a request's answer is decoded with special tokens kept: its calls are made of them. */
function keepsSpecialTokens(req: OpenAIRequest, tools: ToolCallFormat | undefined): boolean {
  const chat = req as ChatCompletionRequest;
  return tools?.specialMarkers === true && (chat.tools?.length ?? 0) > 0 &&
    chat.tool_choice !== "none";
}

/**
 * Each choice's output parser for a chat request, or undefined when nothing is parsed: no
 * reasoning parser, and no tool-call parser or no tools asked for.
 */
function outputParsers(
  req: ChatCompletionRequest,
  n: number,
  promptText: string | undefined,
  formats: { tools?: ToolCallFormat; reasoning?: ReasoningFormat },
): ChatOutputParser[] | undefined {
  const toolsFormat = (req.tools?.length ?? 0) > 0 && req.tool_choice !== "none"
    ? formats.tools
    : undefined;
  const reasoning = formats.reasoning;
  if (toolsFormat === undefined && reasoning === undefined) return undefined;
  const inReasoning = reasoning !== undefined &&
    startsInReasoning(reasoning, {
      prompt: promptText,
      templateKwargs: { ...req.chat_template_args, ...req.chat_template_kwargs },
    });
  return Array.from({ length: n }, () =>
    new ChatOutputParser({
      reasoning: reasoning && new ReasoningParser(reasoning, inReasoning),
      tools: toolsFormat && new ToolCallParser(toolsFormat),
      singleCall: req.parallel_tool_calls === false,
    }));
}

/**
 * A tokens model's pipeline, over its loaded card, tokenizer and preprocessor. Chat answers
 * go through the model's output parsers (reasoning, tool calls) when it has them.
 *
 * @throws {DynamoError} the card names a parser that does not exist
 * @example
 * ```ts ignore
 * const pipeline = tokensPipeline(model, await model.pipeline(), { metrics, logger });
 * const run = await pipeline.start("chat", req, ctx, admission);
 * ```
 */
export function tokensPipeline(
  model: ServedModel,
  loaded: ModelPipeline,
  options: ComposeOptions,
): ServingPipeline {
  const { card, tokenizer, preprocessor } = loaded;
  const name = model.name;
  const series = options.metrics.forModel(name);
  const send = (r: PreprocessedRequest, c: Context) => model.generate<LLMEngineOutput>(r, c);
  const log = options.logger;
  const migration = {
    limit: card.migration_limit,
    logger: log,
    onMigrate: () => series.migrations.inc(),
    onInstanceFailed: (id: string) => model.reportInstanceDown(id),
    check: engineOutputChecker({ vocabSize: tokenizer.vocabSize }, (err) => {
      series.invalidOutputs.inc();
      log.warn("refused an invalid worker output", {
        model: name,
        worker: err.instanceId,
        reason: err.reason,
      });
    }),
  };
  const migrate = (r: PreprocessedRequest, ctx: Context) => openMigrating(send, r, ctx, migration);
  const formats = modelParsers(card, options);
  const renderTools = formats.tools !== undefined;
  return {
    async start(kind, req, ctx, admission, requestId) {
      const span = ctx.trace?.child("preprocess");
      let pre;
      try {
        pre = preprocess(preprocessor, kind, req, { renderTools });
        span?.setAttribute("gen_ai.usage.input_tokens", pre.promptTokens);
      } catch (err) {
        span?.fail(err);
        throw err;
      } finally {
        span?.end();
      }
      const { choices, promptTokens, promptText } = pre;
      // A grammar-forced call is `{"name", "parameters"}` JSON, whatever the model's format.
      const answerFormats = pre.forcedToolCall
        ? { ...formats, tools: FORCED_CALL_FORMAT }
        : formats;
      const parsers = kind === "chat"
        ? outputParsers(req as ChatCompletionRequest, choices.length, promptText, answerFormats)
        : undefined;
      series.inputTokens.observe(promptTokens);
      const streams = choices.length === 1
        ? [await migrate(choices[0]!, ctx)]
        : await Promise.all(choices.map((r) => migrate(r, ctx)));
      const run = new TokenChoices(
        tokenizer,
        choices,
        streams,
        promptTokens,
        series,
        admission.started,
        {
          ...(parsers && { parsers, keepSpecialTokens: keepsSpecialTokens(req, formats.tools) }),
          ...(typeof choices[0]?.output_options?.logprobs === "number" && { logprobs: kind }),
        },
      );
      const base = chunkBase(kind, requestId ?? ctx.id, name);
      const includeUsage = req.stream_options?.include_usage === true;
      return {
        sse: () => tokenSse(run, base, includeUsage),
        collect: () => tokenResponse(run, base),
      };
    },
  };
}

/**
 * A text model's pipeline: the OpenAI request goes to the engine as is; a stream fails
 * over to another instance only before its first item (text cannot be resumed); its answer
 * is measured (TTFT, ITL, token counts from the engine's usage: llm/pipeline/text_metrics.ts).
 */
export function textPipeline(
  model: ServedModel,
  card: ModelDeploymentCard,
  options: ComposeOptions,
): ServingPipeline {
  const series: ModelMetrics = options.metrics.forModel(model.name);
  const failover = { limit: card.migration_limit, onMigrate: () => series.migrations.inc() };
  return {
    async start(_kind, req, ctx, admission) {
      const stream = measuredText(
        await openFailover((c) => model.generate<Record<string, unknown>>(req, c), ctx, failover),
        series,
        {
          started: admission.started,
          streamed: req.stream === true,
          includeUsage: req.stream_options?.include_usage === true,
        },
      );
      return { sse: () => textSse(stream), collect: () => textResponse(stream) };
    },
  };
}

/**
 * The composed pipelines of a frontend's models: each composed once per model and card
 * (a new card, or a model that left and came back, composes anew). A request for a model
 * whose card did not change gets the pipeline already composed, without loading anything.
 */
export class ModelPipelines {
  readonly #options: ComposeOptions;
  readonly #composed = new WeakMap<ServedModel, Composed>();

  constructor(options: ComposeOptions) {
    this.#options = options;
  }

  /** The pipeline of `model` for its current card. */
  get(model: ServedModel): Promise<ServingPipeline> {
    const cardKey = model.cardKey;
    const input = model.modelInput;
    const cached = this.#composed.get(model);
    if (cached !== undefined && cached.cardKey === cardKey && cached.input === input) {
      return cached.pipeline;
    }
    const pipeline = this.#compose(model, input);
    this.#composed.set(model, { cardKey, input, pipeline });
    pipeline.catch(() => {
      // Not cached when it failed: the next request loads again.
      if (this.#composed.get(model)?.pipeline === pipeline) this.#composed.delete(model);
    });
    return pipeline;
  }

  async #compose(model: ServedModel, input: ModelInput): Promise<ServingPipeline> {
    return input === ModelInput.Tokens
      ? tokensPipeline(model, await model.pipeline(), this.#options)
      : textPipeline(model, await model.card(), this.#options);
  }
}

/** A model's pipeline and the card and input kind it was composed for. */
interface Composed {
  cardKey: string;
  input: ModelInput;
  pipeline: Promise<ServingPipeline>;
}
