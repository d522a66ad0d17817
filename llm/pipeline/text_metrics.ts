// The text pipeline's measurements (models that take the OpenAI request as is, such as
// out=openai): TTFT and ITL from when chunks carrying output arrive, token counts from the
// engine's `usage` (the frontend has no tokenizer for such models). The usage chunk, which
// engines may always send, reaches streaming clients only when they asked for it.

/** The per-model series a text model's answers are measured into. */
export interface TextSeries {
  ttft: { observe(value: number): void };
  itl: { observe(value: number): void };
  inputTokens: { observe(value: number): void };
  outputTokens: { observe(value: number): void };
}

/** Options of {@linkcode measuredText}. */
export interface MeasuredTextOptions {
  /** performance.now() when the request arrived. */
  started: number;
  /** Whether the client streams (`stream: true`). */
  streamed: boolean;
  /** Whether a streaming client asked for the usage chunk (`stream_options.include_usage`). */
  includeUsage: boolean;
}

/**
 * Passes a text engine's items on, measuring them into `series`: the first item with output
 * gives TTFT, each later one an inter-token gap (upstream servers send a chunk per token);
 * the last `usage` seen gives the prompt and output token counts when the stream ends.
 *
 * @param items the engine's OpenAI chunks (or one whole response)
 * @param series where the measurements go
 * @param options the request's start and what its client asked for
 * @returns the items, `usage` dropped for streaming clients that did not ask for it
 * @example
 * ```ts ignore
 * const out = measuredText(stream, series, { started, streamed: true, includeUsage: false });
 * ```
 */
export async function* measuredText(
  items: AsyncIterable<Record<string, unknown>>,
  series: TextSeries,
  options: MeasuredTextOptions,
): AsyncGenerator<Record<string, unknown>> {
  let lastAt = 0;
  let usage: { prompt_tokens?: unknown; completion_tokens?: unknown } | undefined;
  for await (const item of items) {
    if (isRecord(item.usage)) usage = item.usage;
    if (carriesOutput(item)) {
      const now = performance.now();
      if (lastAt === 0) series.ttft.observe((now - options.started) / 1000);
      else series.itl.observe((now - lastAt) / 1000);
      lastAt = now;
    }
    if (options.streamed && !options.includeUsage && item.usage !== undefined) {
      const choices = item.choices;
      if (!Array.isArray(choices) || choices.length === 0) continue;
      const { usage: _dropped, ...rest } = item;
      yield rest;
      continue;
    }
    yield item;
  }
  if (usage === undefined) return;
  if (isCount(usage.prompt_tokens)) series.inputTokens.observe(usage.prompt_tokens);
  if (isCount(usage.completion_tokens)) series.outputTokens.observe(usage.completion_tokens);
}

/** Whether an item carries generated output (text, reasoning, tool calls, a whole answer). */
function carriesOutput(item: Record<string, unknown>): boolean {
  const choices = item.choices;
  if (!Array.isArray(choices)) return false;
  return choices.some((c) => {
    if (!isRecord(c)) return false;
    if (typeof c.text === "string" && c.text !== "") return true;
    if (isRecord(c.message)) return true;
    const d = c.delta;
    if (!isRecord(d)) return false;
    return (typeof d.content === "string" && d.content !== "") ||
      (typeof d.reasoning_content === "string" && d.reasoning_content !== "") ||
      (Array.isArray(d.tool_calls) && d.tool_calls.length > 0);
  });
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}
