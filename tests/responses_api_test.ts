// The Responses API (`/v1/responses`) end to end with the official `openai` client, over an
// in-process frontend: text out (the same text the chat API gives for the same conversation),
// streamed events well formed (order, sequence numbers, deltas adding up to the done text and
// the final response), function calls out and their outputs back in (a scripted Qwen3-style
// engine behind the hermes parser), max_output_tokens, and the 400s.

import assert from "node:assert/strict";
import type OpenAI from "openai";
import { echoEngine } from "../llm/engines/echo.ts";
import { registerLlm } from "../llm/model/register.ts";
import { builtinTestModel } from "../llm/model/test_model.ts";
import {
  type LLMEngineOutput,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
} from "../llm/protocols.ts";
import type { DistributedRuntime } from "../runtime/distributed_runtime.ts";
import { withOpenAIFrontend } from "./_helpers/openai_frontend.ts";
import { qwen3Tokenizer } from "./_helpers/qwen3.ts";

const CALL_TEXT =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const FINAL_TEXT = "It is sunny in Paris, 21C.";
const PLAIN_TEXT = "Hello! How can I help?";
const THINKING_TEXT = "<think>\nThe user greets me.\n</think>\n\nHello!";

/** A worker engine that writes a tool call when tools are offered, else a reply. */
async function* scriptedEngine(req: PreprocessedRequest): AsyncGenerator<LLMEngineOutput> {
  const tok = qwen3Tokenizer();
  const prompt = tok.decode(req.token_ids, { skipSpecialTokens: false });
  const lastTurn = prompt.slice(prompt.lastIndexOf("<|im_start|>user"));
  const text = lastTurn.includes("<tool_response>")
    ? FINAL_TEXT
    : prompt.includes("<tools>")
    ? CALL_TEXT
    : PLAIN_TEXT;
  const ids = tok.encode(text, { addSpecialTokens: false });
  for (let i = 0; i < ids.length; i++) {
    yield i === ids.length - 1
      ? { token_ids: [ids[i]!], finish_reason: "stop" }
      : { token_ids: [ids[i]!] };
  }
}

/** A worker engine that thinks, then answers. */
async function* thinkingEngine(): AsyncGenerator<LLMEngineOutput> {
  const ids = qwen3Tokenizer().encode(THINKING_TEXT, { addSpecialTokens: false });
  for (let i = 0; i < ids.length; i++) {
    yield i === ids.length - 1
      ? { token_ids: [ids[i]!], finish_reason: "stop" }
      : { token_ids: [ids[i]!] };
  }
}

/** A worker engine that writes two tokens, then fails. */
async function* failingEngine(req: PreprocessedRequest): AsyncGenerator<LLMEngineOutput> {
  yield { token_ids: [req.token_ids[0]!] };
  yield { token_ids: [req.token_ids[1]!] };
  throw new Error("the engine broke down");
}

/** The test models: each an engine and the parsers its card names. */
const MODELS = {
  echo: { engine: echoEngine(), parsers: {} },
  scripted: { engine: scriptedEngine, parsers: { toolCallParser: "hermes" } },
  thinking: { engine: thinkingEngine, parsers: { reasoningParser: "qwen3" } },
  failing: { engine: failingEngine, parsers: {} },
} as const;
type ModelName = keyof typeof MODELS;

/** Starts workers serving the named test models (each its own card, tokenizer, pipeline). */
function workers(...names: ModelName[]) {
  return async (runtime: DistributedRuntime) => {
    const model = await builtinTestModel();
    for (const name of names) {
      const endpoint = runtime.namespace("resp").component(name).endpoint("generate");
      endpoint.serveEndpoint(MODELS[name].engine).catch(() => {});
      await registerLlm(
        ModelInput.Tokens,
        ModelType.Chat | ModelType.Completions,
        endpoint,
        model,
        {
          modelName: name,
          contextLength: 4096,
          ...MODELS[name].parsers,
        },
      );
    }
  };
}

const weatherTool: OpenAI.Responses.FunctionTool = {
  type: "function",
  name: "get_weather",
  description: "The current weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  strict: false,
};

type Event = OpenAI.Responses.ResponseStreamEvent;

/** Checks the event sequence of one streamed response and returns its final response. */
function checkEvents(events: Event[]): OpenAI.Responses.Response {
  assert.ok(events.length >= 3, `too few events: ${events.map((e) => e.type)}`);
  events.forEach((e, i) => assert.equal(e.sequence_number, i, `sequence number of ${e.type}`));
  assert.equal(events[0]!.type, "response.created");
  assert.equal(events[1]!.type, "response.in_progress");
  const last = events.at(-1)!;
  assert.ok(
    last.type === "response.completed" || last.type === "response.incomplete",
    `last event ${last.type}`,
  );
  const final = (last as OpenAI.Responses.ResponseCompletedEvent).response;
  // Every item is added, then done, once, at its index; text parts inside their item.
  const open = new Map<number, string>();
  const texts = new Map<string, string>();
  for (const e of events.slice(2, -1)) {
    switch (e.type) {
      case "response.output_item.added":
        assert.ok(!open.has(e.output_index), `item ${e.output_index} added twice`);
        open.set(e.output_index, e.item.id!);
        break;
      case "response.content_part.added":
        assert.equal(open.get(e.output_index), e.item_id);
        texts.set(e.item_id, "");
        break;
      case "response.output_text.delta":
        assert.ok(texts.has(e.item_id), "a delta before its content part");
        texts.set(e.item_id, texts.get(e.item_id)! + e.delta);
        break;
      case "response.output_text.done":
        assert.equal(e.text, texts.get(e.item_id), "done text = the deltas joined");
        break;
      case "response.content_part.done":
        assert.equal(e.part.type, "output_text");
        assert.equal((e.part as { text: string }).text, texts.get(e.item_id));
        break;
      case "response.function_call_arguments.done":
        assert.equal(open.get(e.output_index), e.item_id);
        break;
      case "response.output_item.done":
        assert.equal(open.get(e.output_index), e.item.id);
        assert.deepEqual(e.item, final.output[e.output_index], "item done = the final item");
        open.set(e.output_index, "done");
        break;
    }
  }
  assert.ok([...open.values()].every((v) => v === "done"), "every item added is done");
  assert.equal(open.size, final.output.length);
  return final;
}

Deno.test({
  name: "/v1/responses text, not streamed and streamed, with the openai client",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(
      workers("echo", "failing"),
      ["echo", "failing"],
      async ({ client, baseUrl }) => {
        // The echo engine answers with the prompt up to its first end of turn.
        const chat = await client.chat.completions.create({
          model: "echo",
          messages: [{ role: "user", content: "Hello there" }],
        });
        const expected = chat.choices[0]!.message.content!;
        assert.match(expected, /Hello there/);
        const res = await client.responses.create({
          model: "echo",
          input: "Hello there",
          metadata: { run: "1" },
        });
        assert.equal(res.object, "response");
        assert.match(res.id, /^resp_/);
        assert.equal(res.status, "completed");
        assert.equal(res.model, "echo");
        assert.deepEqual(res.metadata, { run: "1" });
        assert.equal(res.output_text, expected);
        assert.equal(res.output.length, 1);
        const item = res.output[0]!;
        assert.ok(item.type === "message");
        assert.equal(item.role, "assistant");
        assert.equal(item.status, "completed");
        assert.equal(res.usage?.input_tokens, chat.usage?.prompt_tokens);
        assert.equal(res.usage?.output_tokens, chat.usage?.completion_tokens);
        assert.equal(res.usage?.total_tokens, chat.usage?.total_tokens);

        // Instructions are the system message.
        const withSystem = await client.chat.completions.create({
          model: "echo",
          messages: [
            { role: "system", content: "Be brief." },
            { role: "user", content: "Hello there" },
          ],
        });
        const instructed = await client.responses.create({
          model: "echo",
          instructions: "Be brief.",
          input: "Hello there",
        });
        assert.equal(instructed.instructions, "Be brief.");
        assert.match(instructed.output_text, /Be brief\./);
        assert.equal(instructed.output_text, withSystem.choices[0]!.message.content);

        // Input items, with a developer message standing for the instructions.
        const items = await client.responses.create({
          model: "echo",
          input: [
            {
              type: "message",
              role: "user",
              content: [{ type: "input_text", text: "Hello " }, {
                type: "input_text",
                text: "there",
              }],
            },
          ],
        });
        assert.equal(items.output_text, expected);
        const developer = await client.responses.create({
          model: "echo",
          input: [{ role: "developer", content: "Be brief." }, {
            role: "user",
            content: "Hello there",
          }],
        });
        assert.equal(developer.output_text, instructed.output_text);

        const stream = await client.responses.create({
          model: "echo",
          input: "Hello there",
          stream: true,
        });
        const events: Event[] = [];
        for await (const e of stream) events.push(e);
        const final = checkEvents(events);
        assert.equal(final.status, "completed");
        assert.equal(final.output_text ?? outputText(final), expected);
        assert.ok(events.some((e) => e.type === "response.output_text.delta"));
        assert.ok(events.filter((e) => e.type === "response.output_text.delta").length > 1);
        assert.equal(final.usage?.output_tokens, chat.usage?.completion_tokens);

        // The SDK's own accumulator (responses.stream) folds the events into the same response.
        const helper = client.responses.stream({ model: "echo", input: "Hello there" });
        let helperText = "";
        helper.on("response.output_text.delta", (e) => helperText += e.delta);
        const folded = await helper.finalResponse();
        assert.equal(folded.output_text, expected);
        assert.equal(helperText, expected);

        // The wire: `event:` names the data's type; x-request-id comes back.
        const raw = await fetch(`${baseUrl}/v1/responses`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-request-id": "resp-test-1" },
          body: JSON.stringify({ model: "echo", input: "Hi", stream: true }),
        });
        assert.equal(raw.headers.get("x-request-id"), "resp-test-1");
        assert.match(raw.headers.get("content-type") ?? "", /text\/event-stream/);
        const blocks = (await raw.text()).split("\n\n").filter((b) => b !== "");
        for (const block of blocks) {
          const [eventLine, dataLine] = block.split("\n");
          const type = /^event: (\S+)$/.exec(eventLine ?? "")?.[1];
          assert.equal(JSON.parse(dataLine!.replace(/^data: /, "")).type, type);
        }
        assert.match(blocks.at(-1)!, /^event: response\.completed/);
        // The client's id is the response's.
        assert.match(blocks[0]!, /"id":"resp_resp-test-1"/);

        // A worker that fails mid-stream: the stream ends with response.failed, saying why.
        const broken = await client.responses.create({
          model: "failing",
          input: "Hello there",
          stream: true,
        });
        const brokenEvents: Event[] = [];
        for await (const e of broken) brokenEvents.push(e);
        brokenEvents.forEach((e, i) => assert.equal(e.sequence_number, i));
        const failed = brokenEvents.at(-1)!;
        assert.equal(failed.type, "response.failed");
        assert.ok(failed.type === "response.failed");
        assert.equal(failed.response.status, "failed");
        assert.match(failed.response.error?.message ?? "", /the engine broke down/);

        // Out of tokens: incomplete, and says why.
        const short = await client.responses.create({
          model: "echo",
          input: "Hello there",
          max_output_tokens: 3,
        });
        assert.equal(short.status, "incomplete");
        assert.equal(short.incomplete_details?.reason, "max_output_tokens");
        assert.equal(short.usage?.output_tokens, 3);
      },
    );
  },
});

function outputText(r: OpenAI.Responses.Response): string {
  return r.output.flatMap((o) =>
    o.type === "message" ? o.content.map((c) => c.type === "output_text" ? c.text : "") : []
  ).join("");
}

Deno.test({
  name: "/v1/responses function calls out and their outputs back in, streamed and not",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(
      workers("scripted"),
      ["scripted"],
      async ({ client }) => {
        const first = await client.responses.create({
          model: "scripted",
          input: "What is the weather in Paris?",
          tools: [weatherTool],
        });
        assert.equal(first.status, "completed");
        const calls = first.output.filter((o) => o.type === "function_call");
        assert.equal(calls.length, 1);
        const call = calls[0]! as OpenAI.Responses.ResponseFunctionToolCall;
        assert.equal(call.name, "get_weather");
        assert.deepEqual(JSON.parse(call.arguments), { city: "Paris" });
        assert.match(call.call_id, /^call_/);
        assert.match(call.id ?? "", /^fc_/);

        const second = await client.responses.create({
          model: "scripted",
          input: [
            { role: "user", content: "What is the weather in Paris?" },
            {
              type: "function_call",
              call_id: call.call_id,
              name: call.name,
              arguments: call.arguments,
            },
            { type: "function_call_output", call_id: call.call_id, output: '{"sky": "sunny"}' },
          ],
          tools: [weatherTool],
        });
        assert.equal(second.output_text, FINAL_TEXT);

        const stream = await client.responses.create({
          model: "scripted",
          input: "What is the weather in Paris?",
          tools: [weatherTool],
          stream: true,
        });
        const events: Event[] = [];
        for await (const e of stream) events.push(e);
        const final = checkEvents(events);
        const streamedCall = final.output.find((o) => o.type === "function_call") as
          | OpenAI.Responses.ResponseFunctionToolCall
          | undefined;
        assert.equal(streamedCall?.name, "get_weather");
        assert.deepEqual(JSON.parse(streamedCall!.arguments), { city: "Paris" });
        const argsDone = events.find((e) => e.type === "response.function_call_arguments.done");
        assert.ok(argsDone && argsDone.type === "response.function_call_arguments.done");
        assert.equal(argsDone.arguments, streamedCall!.arguments);

        const helper = client.responses.stream({
          model: "scripted",
          input: "What is the weather in Paris?",
          tools: [weatherTool],
        });
        const folded = await helper.finalResponse();
        const foldedCall = folded.output.find((o) => o.type === "function_call");
        assert.ok(foldedCall?.type === "function_call");
        assert.deepEqual(JSON.parse(foldedCall.arguments), { city: "Paris" });

        const plain = await client.responses.create({ model: "scripted", input: "Hi" });
        assert.equal(plain.output_text, PLAIN_TEXT);
      },
    );
  },
});

Deno.test({
  name: "/v1/responses puts reasoning in a reasoning item, streamed and not",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(
      workers("thinking"),
      ["thinking"],
      async ({ client }) => {
        const res = await client.responses.create({ model: "thinking", input: "Hi" });
        assert.deepEqual(res.output.map((o) => o.type), ["reasoning", "message"]);
        const reasoning = res.output[0]!;
        assert.ok(reasoning.type === "reasoning");
        assert.deepEqual(reasoning.content, [{
          type: "reasoning_text",
          text: "\nThe user greets me.\n",
        }]);
        assert.equal(res.output_text, "Hello!");

        const stream = await client.responses.create({
          model: "thinking",
          input: "Hi",
          stream: true,
        });
        const events: Event[] = [];
        for await (const e of stream) events.push(e);
        const final = checkEvents(events);
        assert.deepEqual(
          final.output,
          res.output.map((o, i) => ({ ...o, id: final.output[i]!.id })),
        );
        const done = events.find((e) => e.type === "response.reasoning_text.done");
        assert.ok(done?.type === "response.reasoning_text.done");
        assert.equal(done.text, "\nThe user greets me.\n");
        // The reasoning item is done before the message starts.
        const types = events.map((e) => e.type);
        assert.ok(
          types.indexOf("response.reasoning_text.done") <
            types.indexOf("response.output_text.delta"),
        );
      },
    );
  },
});

Deno.test({
  name: "/v1/responses refuses what it cannot serve in OpenAI's error shape",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withOpenAIFrontend(
      workers("echo"),
      ["echo"],
      async ({ baseUrl }) => {
        const fails = async (
          body: Record<string, unknown>,
          status: number,
          param: string | null,
        ) => {
          const res = await fetch(`${baseUrl}/v1/responses`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
          });
          const json = await res.json();
          assert.equal(res.status, status, JSON.stringify(json));
          assert.equal(json.error.param, param, JSON.stringify(json));
          assert.equal(json.error.type, "invalid_request_error");
          return json.error;
        };
        const stored = await fails(
          { model: "echo", input: "hi", previous_response_id: "resp_1" },
          400,
          "previous_response_id",
        );
        assert.match(stored.message, /stores no responses/);
        await fails({ model: "echo" }, 400, "input");
        await fails({ model: "echo", input: [] }, 400, "input");
        await fails(
          { model: "echo", input: [{ role: "robot", content: "x" }] },
          400,
          "input[0].role",
        );
        await fails(
          { model: "echo", input: [{ role: "user", content: [{ type: "input_image" }] }] },
          400,
          "input[0].content[0].type",
        );
        await fails({ model: "echo", input: "hi", max_output_tokens: 0 }, 400, "max_output_tokens");
        await fails({ model: "echo", input: "hi", temperature: 5 }, 400, "temperature");
        await fails(
          { model: "echo", input: "hi", tools: [{ type: "web_search" }] },
          400,
          "tools[0].type",
        );
        await fails(
          { model: "echo", input: "hi", text: { format: { type: "json_object" } } },
          400,
          "text.format",
        );
        await fails({ model: "nope", input: "hi" }, 404, "model");
      },
    );
  },
});
