// A Text-input worker: the engine gets the OpenAI request as is and yields OpenAI chunks
// (it does its own tokenization). This one answers with the last user message reversed,
// word by word, to show the shape of the chunks.
//
//   deno run -A examples/llm/text_worker.ts

import {
  builtinTestModel,
  type Context,
  dynamoWorker,
  ModelInput,
  ModelType,
  registerLlm,
} from "../../mod.ts";

interface ChatRequest {
  model: string;
  messages: { role: string; content: string }[];
}

async function* reverseWords(req: ChatRequest, ctx: Context) {
  const last = [...req.messages].reverse().find((m) => m.role === "user")?.content ?? "";
  const words = last.split(/\s+/).filter(Boolean).reverse();
  const id = `chatcmpl-${ctx.id}`;
  const created = Math.floor(Date.now() / 1000);
  const chunk = (delta: Record<string, string>, finish_reason: string | null) => ({
    id,
    object: "chat.completion.chunk",
    created,
    model: req.model,
    choices: [{ index: 0, delta, logprobs: null, finish_reason }],
  });
  yield chunk({ role: "assistant", content: "" }, null);
  for (const [i, w] of words.entries()) {
    if (ctx.isStopped()) return;
    yield chunk({ content: i === 0 ? w : ` ${w}` }, null);
  }
  yield chunk({}, "stop");
}

await dynamoWorker(async (runtime) => {
  const component = runtime.namespace("dynamo").component("reverser");
  await component.createService();
  const endpoint = component.endpoint("generate");
  // The card still comes from a model folder (context length, name); text engines need
  // no tokenizer from Dynamo.
  await registerLlm(ModelInput.Text, ModelType.Chat, endpoint, await builtinTestModel(), {
    modelName: "reverser",
  });
  await endpoint.serveEndpoint(reverseWords);
});
