// Bad input against a running `dynamo run in=http out=echo`: random JSON, wrong types for
// every field, huge numbers, invalid UTF-8, truncated bodies, wrong content types, random
// routes, garbage on the socket and slow-loris clients. Every bad request must get a 4xx
// OpenAI error object (never a 5xx) and the process must keep serving.

import assert from "node:assert/strict";
import fc from "fast-check";
import { CHAT_ROLES } from "../llm/openai/types.ts";
import { echoOf, MODEL, openAIErrorProblem, startDynamoRun } from "./_helpers/dynamo_run.ts";

// 200 runs a step keeps the file near 5 s; DYN_FUZZ_RUNS=5000 for a longer hunt.
const NUM_RUNS = Number(Deno.env.get("DYN_FUZZ_RUNS") ?? 200);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

const CHAT = "/v1/chat/completions";
const COMPLETIONS = "/v1/completions";
const VALID: Record<string, Record<string, unknown>> = {
  [CHAT]: { model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 4 },
  [COMPLETIONS]: { model: MODEL, prompt: "hi", max_tokens: 4 },
};

type JsonType = "string" | "number" | "boolean" | "array" | "object";

/** The JSON types each request field accepts (besides null for the optional ones). */
const COMMON_FIELDS: Record<string, JsonType[]> = {
  model: ["string"],
  stream: ["boolean"],
  stream_options: ["object"],
  max_tokens: ["number"],
  temperature: ["number"],
  top_p: ["number"],
  top_k: ["number"],
  min_p: ["number"],
  presence_penalty: ["number"],
  frequency_penalty: ["number"],
  repetition_penalty: ["number"],
  n: ["number"],
  seed: ["number"],
  user: ["string"],
  ignore_eos: ["boolean"],
  min_tokens: ["number"],
  stop: ["string", "array"],
  stop_token_ids: ["array"],
  logit_bias: ["object"],
};
const FIELDS: Record<string, Record<string, JsonType[]>> = {
  [CHAT]: {
    ...COMMON_FIELDS,
    messages: ["array"],
    max_completion_tokens: ["number"],
    logprobs: ["boolean"],
    top_logprobs: ["number"],
    tools: ["array"],
    tool_choice: ["string", "object"],
    parallel_tool_calls: ["boolean"],
    response_format: ["object"],
    chat_template_kwargs: ["object"],
  },
  [COMPLETIONS]: {
    ...COMMON_FIELDS,
    prompt: ["string", "array"],
    suffix: ["string"],
    echo: ["boolean"],
    logprobs: ["number"],
    best_of: ["number"],
  },
};

const OF_TYPE: Record<JsonType, fc.Arbitrary<unknown>> = {
  string: fc.string({ maxLength: 20 }),
  number: fc.double({ noNaN: true, noDefaultInfinity: true }),
  boolean: fc.boolean(),
  array: fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
  object: fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), {
    maxKeys: 3,
  }),
};
const ALL_TYPES = Object.keys(OF_TYPE) as JsonType[];

/** A value of a JSON type other than `accepted` (and not null). */
function wrongType(accepted: JsonType[]): fc.Arbitrary<unknown> {
  return fc.oneof(...ALL_TYPES.filter((t) => !accepted.includes(t)).map((t) => OF_TYPE[t]));
}

const path = fc.constantFrom(CHAT, COMPLETIONS);

/** What a request got back. */
interface Answer {
  status: number;
  contentType: string | null;
  text: string;
}

function describe(input: unknown, answer: Answer): string {
  const shown = input instanceof Uint8Array ? `bytes ${JSON.stringify([...input])}` : input;
  return `input ${JSON.stringify(shown)} got ${answer.status} ${answer.text.slice(0, 300)}`;
}

/** Fails unless `answer` is a 4xx with a well-formed OpenAI error object. */
function assertClientError(answer: Answer, input: unknown): void {
  assert.ok(answer.status >= 400 && answer.status < 500, describe(input, answer));
  assert.equal(answer.contentType, "application/json", describe(input, answer));
  let body: unknown;
  try {
    body = JSON.parse(answer.text);
  } catch {
    assert.fail(`not JSON: ${describe(input, answer)}`);
  }
  assert.equal(openAIErrorProblem(body), undefined, describe(input, answer));
}

/** Fails on a 5xx; a 4xx must be an error object, a 200 a completion or a whole stream. */
function assertNoServerError(answer: Answer, input: unknown): void {
  if (answer.status !== 200) return assertClientError(answer, input);
  if (answer.contentType === "text/event-stream") {
    // Every event is a chunk (no error event), and the stream ends with [DONE].
    const events = answer.text.split("\n\n").filter((e) => e !== "");
    assert.equal(events.at(-1), "data: [DONE]", describe(input, answer));
    for (const event of events.slice(0, -1)) {
      assert.ok(event.startsWith("data: "), describe(input, answer));
      const chunk = JSON.parse(event.slice(6));
      assert.ok(Array.isArray(chunk.choices) && !("error" in chunk), describe(input, answer));
    }
    return;
  }
  const body = JSON.parse(answer.text);
  assert.ok(Array.isArray(body.choices), describe(input, answer));
}

Deno.test("the HTTP API answers bad input with 4xx OpenAI errors and keeps serving", async (t) => {
  const run = await startDynamoRun();
  const { port } = new URL(run.url);
  const post = async (
    to: string,
    body: string | Uint8Array,
    contentType: string | null = "application/json",
  ): Promise<Answer> => {
    const headers: Record<string, string> = {};
    if (contentType !== null) headers["content-type"] = contentType;
    const r = await fetch(run.url + to, {
      method: "POST",
      headers,
      body: body as BodyInit,
    });
    return { status: r.status, contentType: r.headers.get("content-type"), text: await r.text() };
  };
  const healthy = async () => {
    const r = await post(COMPLETIONS, JSON.stringify({ model: MODEL, prompt: "still here" }));
    assert.equal(r.status, 200, r.text);
    assert.equal(JSON.parse(r.text).choices[0].text, await echoOf("still here"));
  };

  try {
    await t.step("random JSON values", async () => {
      await fc.assert(
        fc.asyncProperty(path, fc.jsonValue(), async (to, value) => {
          assertClientError(await post(to, JSON.stringify(value)), value);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("each field with a value of the wrong type", async () => {
      const field = path.chain((to) =>
        fc.constantFrom(...Object.entries(FIELDS[to]!)).chain(([name, accepted]) =>
          wrongType(accepted).map((value) => ({ to, body: { ...VALID[to], [name]: value } }))
        )
      );
      await fc.assert(
        fc.asyncProperty(field, async ({ to, body }) => {
          assertClientError(await post(to, JSON.stringify(body)), body);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("a malformed message", async () => {
      const message = fc.oneof(
        wrongType(["object"]),
        fc.record({ role: wrongType(["string"]), content: fc.constant("hi") }),
        fc.record({ role: fc.string({ maxLength: 12 }), content: fc.constant("hi") }).filter(
          (m) => !(CHAT_ROLES as readonly string[]).includes(m.role),
        ),
        fc.record({ role: fc.constant("user"), content: wrongType(["string", "array"]) }),
        fc.record({ role: fc.constant("user") }),
      );
      await fc.assert(
        fc.asyncProperty(message, async (m) => {
          const body = { ...VALID[CHAT], messages: [m] };
          assertClientError(await post(CHAT, JSON.stringify(body)), body);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("huge, tiny, negative and fractional numbers never get a 5xx", async () => {
      const numeric = Object.entries(COMMON_FIELDS).filter(([, t]) => t.includes("number"))
        .map(([name]) => name);
      const raw = fc.oneof(
        fc.constantFrom(
          "1e400",
          "-1e400",
          "1e308",
          "-1e308",
          "1.7976931348623157e308",
          "5e-324",
          "1e-400",
          "-0",
          "0",
          "-1",
          "0.5",
          "9007199254740993",
          "18446744073709551616",
          "123456789012345678901234567890123456789",
        ),
        fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
        fc.bigInt().map(String),
      );
      await fc.assert(
        fc.asyncProperty(path, fc.constantFrom(...numeric), raw, async (to, name, number) => {
          const body = JSON.stringify(VALID[to]).slice(0, -1) + `,"${name}":${number}}`;
          assertNoServerError(await post(to, body), body);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("well-typed but odd requests, streamed or not, never get a 5xx", async () => {
      // Any code point, and now and then lone UTF-16 surrogates (valid JSON escapes).
      const text = fc.oneof(
        { weight: 4, arbitrary: fc.string({ maxLength: 30, unit: "binary" }) },
        fc.string({
          maxLength: 4,
          unit: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
        }),
      );
      // Mostly what the server supports, so most requests reach the engine (unsupported
      // fields, each refused with a 400, are covered by the other steps).
      const part = fc.oneof(
        { weight: 8, arbitrary: fc.record({ type: fc.constant("text"), text }) },
        fc.record({
          type: fc.constantFrom("image_url", "input_audio", "file", "refusal"),
          image_url: fc.record({ url: fc.webUrl() }),
        }),
        fc.record({ type: fc.string({ maxLength: 8 }) }),
      );
      const message = fc.oneof(
        fc.record({
          role: fc.constantFrom(...CHAT_ROLES),
          content: fc.oneof(text, fc.array(part, { maxLength: 3 })),
        }),
        fc.record({
          role: fc.constant("assistant"),
          tool_calls: fc.array(
            fc.record({
              id: fc.string({ maxLength: 8 }),
              type: fc.constant("function"),
              function: fc.record({ name: fc.string({ maxLength: 8 }), arguments: text }),
            }),
            { maxLength: 2 },
          ),
        }),
        fc.record({ role: fc.constant("tool"), content: text, tool_call_id: text }),
      );
      const common = {
        stream: fc.boolean(),
        max_tokens: fc.integer({ min: 1, max: 64 }),
        n: fc.integer({ min: 1, max: 3 }),
        temperature: fc.double({ min: 0, max: 2, noNaN: true }),
        seed: fc.integer(),
        stop: fc.oneof(
          text.filter((x) => x !== ""),
          fc.array(text.filter((x) => x !== ""), { maxLength: 4 }),
        ),
        stop_token_ids: fc.array(fc.nat({ max: 200_000 }), { maxLength: 3 }),
        ignore_eos: fc.boolean(),
        user: text,
      };
      const chat = fc.record({
        model: fc.constant(MODEL),
        messages: fc.array(message, { minLength: 1, maxLength: 4 }),
        ...common,
        tools: fc.array(
          fc.record({
            type: fc.constant("function"),
            function: fc.record({
              name: fc.stringMatching(/^[A-Za-z0-9_-]{1,10}$/),
              parameters: fc.dictionary(
                fc.string({ maxLength: 6 }),
                fc.jsonValue({ maxDepth: 2 }),
                {
                  maxKeys: 3,
                },
              ),
            }),
          }),
          { maxLength: 2 },
        ),
        tool_choice: fc.constant("none"),
        response_format: fc.constant({ type: "text" }),
        chat_template_kwargs: fc.dictionary(
          fc.string({ maxLength: 16 }),
          fc.jsonValue({ maxDepth: 2 }),
          {
            maxKeys: 3,
          },
        ),
      }, { requiredKeys: ["model", "messages"] });
      const completion = fc.record({
        model: fc.constant(MODEL),
        prompt: fc.oneof(
          text,
          fc.array(fc.nat({ max: 151_000 }), { minLength: 1, maxLength: 8 }),
        ),
        ...common,
      }, { requiredKeys: ["model", "prompt"] });
      const request = fc.oneof(
        chat.map((body) => ({ to: CHAT, body })),
        completion.map((body) => ({ to: COMPLETIONS, body })),
      );
      await fc.assert(
        fc.asyncProperty(request, async ({ to, body }) => {
          assertNoServerError(await post(to, JSON.stringify(body)), body);
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("bodies that are not valid UTF-8", async () => {
      const invalid = fc.constantFrom(
        [0xff],
        [0xfe, 0xff],
        [0xc3],
        [0xc0, 0xaf], // overlong "/"
        [0xe0, 0x80, 0xaf], // overlong
        [0xed, 0xa0, 0x80], // a UTF-16 surrogate
        [0xf4, 0x90, 0x80, 0x80], // past U+10FFFF
        [0x80],
        [0xf0, 0x9f, 0x98], // a truncated emoji
      );
      await fc.assert(
        fc.asyncProperty(path, fc.string(), invalid, fc.nat(), async (to, prompt, bad, at) => {
          const good = encoder.encode(JSON.stringify({ ...VALID[to], prompt, user: prompt }));
          // Inside a string (only UTF-8 validation can see it) or anywhere.
          const cut = at % 2 === 0 ? good.indexOf(0x22, /* " */ 8) + 1 : at % (good.length + 1);
          const body = new Uint8Array([...good.slice(0, cut), ...bad, ...good.slice(cut)]);
          const answer = await post(to, body);
          assertClientError(answer, body);
          assert.equal(answer.status, 400, describe(body, answer));
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("truncated bodies", async () => {
      await fc.assert(
        fc.asyncProperty(path, fc.string(), fc.nat(), async (to, prompt, at) => {
          const whole = encoder.encode(JSON.stringify({ ...VALID[to], prompt }));
          const body = whole.slice(0, at % whole.length);
          const answer = await post(to, body);
          assertClientError(answer, body);
          assert.equal(answer.status, 400, describe(body, answer));
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step(
      "a body shorter than its Content-Length, then the client stops sending",
      async () => {
        for (const to of [CHAT, COMPLETIONS]) {
          const body = JSON.stringify(VALID[to]);
          const head = `POST ${to} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
            `content-length: ${body.length + 50}\r\nconnection: close\r\n\r\n`;
          const reply = await rawExchange(port, head + body.slice(0, 20), { halfClose: true });
          assertNoRawServerError(reply, `${to} truncated`);
        }
      },
    );

    await t.step("wrong content types: the body decides, never a 5xx", async () => {
      const contentType = fc.oneof(
        fc.constantFrom(
          null,
          "",
          "text/plain",
          "application/x-www-form-urlencoded",
          "multipart/form-data; boundary=x",
          "application/xml",
          "application/json; charset=utf-16",
          "image/png",
        ),
        fc.stringMatching(/^[!-~][ -~]{0,30}$/),
      );
      const body = fc.oneof(
        path.map((to) => ({ to, text: JSON.stringify(VALID[to]), valid: true })),
        fc.tuple(path, fc.string()).map(([to, text]) => ({ to, text, valid: false })),
        fc.tuple(path, fc.string()).map(([to, text]) => ({
          to,
          text: `a=1&b=${encodeURIComponent(text)}`,
          valid: false,
        })),
      );
      await fc.assert(
        fc.asyncProperty(contentType, body, async (type, { to, text, valid }) => {
          const answer = await post(to, text, type);
          // The content type is not checked (curl -d sends a form type); the JSON is.
          if (valid) assert.equal(answer.status, 200, describe({ type, text }, answer));
          else assertClientError(answer, { type, text });
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("random methods and paths", async () => {
      const method = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS");
      const route = fc.oneof(
        fc.webPath(),
        fc.constantFrom("/v1/chat/completions", "/v1/completions", "/v1/models", "/v1"),
      );
      await fc.assert(
        fc.asyncProperty(method, route, fc.jsonValue(), async (m, p, value) => {
          const r = await fetch(run.url + p, {
            method: m,
            headers: { "content-type": "application/json" },
            body: m === "GET" ? undefined : JSON.stringify(value),
          });
          const answer = {
            status: r.status,
            contentType: r.headers.get("content-type"),
            text: await r.text(),
          };
          if (answer.status < 400) return;
          assertClientError(answer, { method: m, path: p, value });
        }),
        { numRuns: NUM_RUNS },
      );
    });

    await t.step("garbage on the socket does not hurt the server", async () => {
      await fc.assert(
        fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 200 }), async (bytes) => {
          const reply = await rawExchange(port, bytes, { halfClose: true });
          assertNoRawServerError(reply, `bytes ${JSON.stringify([...bytes])}`);
        }),
        { numRuns: 30 },
      );
      await healthy();
    });

    await t.step("a slow-loris client does not keep others waiting", async () => {
      // One connection stalls half way through its headers for the whole step.
      const stalled = await Deno.connect({ hostname: "127.0.0.1", port: Number(port) });
      await writeAll(stalled, encoder.encode("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncont"));
      // Another sends a whole request one byte at a time.
      const body = JSON.stringify({ model: MODEL, prompt: "slow and steady" });
      const request = encoder.encode(
        `POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
          `content-length: ${encoder.encode(body).length}\r\nconnection: close\r\n\r\n${body}`,
      );
      const slow = await Deno.connect({ hostname: "127.0.0.1", port: Number(port) });
      let sending = true;
      const trickle = (async () => {
        for (const byte of request) {
          await writeAll(slow, new Uint8Array([byte]));
          await new Promise((r) => setTimeout(r, 8));
        }
        sending = false;
      })();
      try {
        // Others are served while both are pending.
        for (let i = 0; i < 5; i++) {
          await healthy();
          assert.equal((await fetch(run.url + "/health").then((r) => r.text())).length > 0, true);
        }
        assert.ok(sending, "the slow client is still sending while others were served");
        await trickle;
        const reply = decoder.decode(await readAll(slow, 10_000));
        assert.match(reply, /^HTTP\/1\.1 200 /, reply);
        const json = JSON.parse(reply.slice(reply.indexOf("\r\n\r\n") + 4));
        assert.equal(json.choices[0].text, await echoOf("slow and steady"));
      } finally {
        await trickle.catch(() => {});
        slow.close();
        stalled.close();
      }
    });

    await t.step("after all that, a good request still succeeds", async () => {
      await healthy();
      assert.equal(run.exited(), false);
    });
  } finally {
    const status = await run.stop();
    assert.equal(status.code, 0, run.output());
  }
  assert.doesNotMatch(run.output(), /request failed|ERROR/, "nothing was logged as an error");
});

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let rest = bytes;
  while (rest.length > 0) rest = rest.subarray(await conn.write(rest));
}

/** Reads until the peer closes, or `ms` pass (then what came so far). */
async function readAll(conn: Deno.Conn, ms: number): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  const buf = new Uint8Array(16 * 1024);
  const timer = setTimeout(() => {
    try {
      conn.close();
    } catch {
      // closed already
    }
  }, ms);
  try {
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      parts.push(buf.slice(0, n));
    }
  } catch (err) {
    // The deadline closed the connection, or the peer reset it.
    if (
      !(err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Interrupted ||
        err instanceof Deno.errors.ConnectionReset)
    ) {
      throw err;
    }
  } finally {
    clearTimeout(timer);
  }
  return new Uint8Array(parts.flatMap((p) => [...p]));
}

/** Sends raw bytes on a fresh connection and returns the reply (maybe empty). */
async function rawExchange(
  port: string,
  data: string | Uint8Array,
  options: { halfClose: boolean },
): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: Number(port) });
  try {
    await writeAll(conn, typeof data === "string" ? encoder.encode(data) : data);
    if (options.halfClose) await conn.closeWrite();
    return decoder.decode(await readAll(conn, 5_000));
  } finally {
    try {
      conn.close();
    } catch {
      // closed by the deadline
    }
  }
}

/** An HTTP reply on a raw socket: nothing, a 4xx, or a 2xx; never a 5xx. */
function assertNoRawServerError(reply: string, what: string): void {
  if (reply === "") return; // the server closed the connection: fine for a broken request
  const m = /^HTTP\/1\.[01] (\d{3}) /.exec(reply);
  assert.ok(m, `${what}: not an HTTP reply: ${JSON.stringify(reply.slice(0, 200))}`);
  const status = Number(m[1]);
  assert.ok(status < 500, `${what}: got ${reply.slice(0, 400)}`);
}
