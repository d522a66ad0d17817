// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// The bare baseline of `bench:frontend`: a plain `Deno.serve` endpoint, in its own process,
// that answers `POST /v1/chat/completions` with an SSE stream of the same chunks, of the same
// shape, as the dynamo frontend's echo answer. No runtime, no tokenizer, no template.
//
// Argument: a JSON `BareArgs`. Prints `listening on URL` on stdout; stops on SIGTERM/SIGINT.

/** What the bare server answers with: one SSE chunk per delta. */
export interface BareArgs {
  /** Model name echoed in each chunk. */
  model: string;
  /** `delta.content` of each chunk, in order; the first also carries `role`. */
  contents: string[];
  /** finish_reason of the last chunk (sent with an empty delta, as the frontend does). */
  finishReason: string;
  /**
   * Write the whole answer (every chunk and [DONE]) in one body pull, as the dynamo frontend
   * does with the outputs that have already arrived; default: one chunk per pull.
   */
  oneWrite?: boolean;
}

const encoder = new TextEncoder();
const DONE = encoder.encode("data: [DONE]\n\n");
const SSE_HEADERS = {
  "content-type": "text/event-stream",
  "cache-control": "no-cache",
  connection: "keep-alive",
};

/** The bare answer to one request (also timed in-process by the stage breakdown). */
export function bareAnswer(args: BareArgs, body: { model?: unknown }): Response {
  const base = {
    id: `chatcmpl-${crypto.randomUUID()}`,
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: typeof body.model === "string" ? body.model : args.model,
  };
  let i = 0;
  const last = args.contents.length;
  const chunk = (i: number) => {
    const choice = i === last
      ? { index: 0, delta: {}, logprobs: null, finish_reason: args.finishReason }
      : {
        index: 0,
        delta: i === 0
          ? { role: "assistant", content: args.contents[i] }
          : { content: args.contents[i] },
        logprobs: null,
        finish_reason: null,
      };
    return `data: ${JSON.stringify({ ...base, choices: [choice] })}\n\n`;
  };
  if (args.oneWrite) {
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        let text = "";
        for (let k = 0; k <= last; k++) text += chunk(k);
        controller.enqueue(encoder.encode(text + "data: [DONE]\n\n"));
        controller.close();
      },
    }, { highWaterMark: 0 });
    return new Response(stream, { headers: SSE_HEADERS });
  }
  // One chunk per pull with no buffering ahead, as the frontend streams its answer.
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (i > last) {
        controller.enqueue(DONE);
        controller.close();
        return;
      }
      controller.enqueue(encoder.encode(chunk(i++)));
    },
  }, { highWaterMark: 0 });
  return new Response(stream, { headers: SSE_HEADERS });
}

if (import.meta.main) {
  const args = JSON.parse(Deno.args[0] ?? "") as BareArgs;
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen: (addr) => console.log(`listening on http://127.0.0.1:${addr.port}`),
  }, async (request) => {
    const url = new URL(request.url);
    if (request.method !== "POST" || url.pathname !== "/v1/chat/completions") {
      return new Response("not found", { status: 404 });
    }
    // Parse the request like any server would; the answer does not depend on it.
    const body = await request.json() as { model?: unknown };
    return bareAnswer(args, body);
  });
  const stop = () => void server.shutdown();
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
  await server.finished;
  Deno.exit(0);
}
