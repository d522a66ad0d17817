import assert from "node:assert/strict";
import fc from "fast-check";
import FakeTimers from "@sinonjs/fake-timers";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import { guardFrontend, type GuardOptions, type GuardRequestInfo, routePath } from "./guard.ts";
import { FrontendMetrics } from "./metrics.ts";

const BASE = "http://127.0.0.1:8000";

/** A request whose response delivery the test ends by hand, as Deno.serve would. */
interface Exchange {
  response: Promise<Response>;
  /** The response's last byte went out. */
  complete(): void;
  /** The client went away (Deno.serve rejects `completed`). */
  disconnect(): void;
}

function setup(options: GuardOptions = {}) {
  const seen: string[] = [];
  const metrics = new FrontendMetrics();
  const guard = guardFrontend((request) => {
    seen.push(`${request.method} ${new URL(request.url).pathname}`);
    return Promise.resolve(Response.json({ ok: true }));
  }, { metrics, ...options });
  const send = (path: string, init: RequestInit = {}): Exchange => {
    const completed = Promise.withResolvers<void>();
    // Deno.serve does not report an unobserved `completed` rejection either.
    completed.promise.catch(() => {});
    const abort = new AbortController();
    const info: GuardRequestInfo = { completed: completed.promise };
    const request = new Request(BASE + path, {
      method: "POST",
      body: "{}",
      signal: abort.signal,
      ...init,
    });
    return {
      response: guard.fetch(request, info),
      complete: () => completed.resolve(),
      disconnect: () => {
        abort.abort();
        completed.reject(new Deno.errors.Interrupted("client went away"));
      },
    };
  };
  return { guard, metrics, seen, send };
}

async function assertOpenAIError(
  response: Response,
  status: number,
  code: string,
): Promise<{ message: string; type: string }> {
  assert.equal(response.status, status);
  assert.equal(response.headers.get("content-type"), "application/json");
  const body = await response.json();
  assert.deepEqual(Object.keys(body), ["error"]);
  assert.deepEqual(Object.keys(body.error).sort(), ["code", "message", "param", "type"]);
  assert.equal(typeof body.error.message, "string");
  assert.equal(typeof body.error.type, "string");
  assert.equal(body.error.param, null);
  assert.equal(body.error.code, code);
  return body.error;
}

async function metricValue(metrics: FrontendMetrics, line: string): Promise<number> {
  const text = await metrics.render();
  const hit = text.split("\n").find((l) => l.startsWith(line + " "));
  return hit === undefined ? 0 : Number(hit.slice(line.length + 1));
}

Deno.test("guardFrontend() refuses generation past maxInflight with 429, Retry-After and an error object", async () => {
  const { guard, metrics, send } = setup({ maxInflight: 2, retryAfterS: 3 });
  const a = send("/v1/chat/completions");
  const b = send("/v1/completions");
  assert.equal((await a.response).status, 200);
  assert.equal((await b.response).status, 200);
  assert.equal(guard.inflight, 2);

  const refused = await send("/v1/chat/completions").response;
  assert.equal(refused.headers.get("retry-after"), "3");
  const error = await assertOpenAIError(refused, 429, "overloaded");
  assert.equal(error.type, "rate_limit_error");
  assert.match(error.message, /limit of 2 requests in flight/);
  assert.equal(
    await metricValue(metrics, 'dynamo_frontend_rejected_requests_total{reason="overloaded"}'),
    1,
  );
  assert.equal(await metricValue(metrics, "dynamo_frontend_admitted_requests"), 2);
});

Deno.test("guardFrontend() frees a slot when the response is sent or the client goes away", async () => {
  const { guard, send } = setup({ maxInflight: 2 });
  const a = send("/v1/chat/completions");
  const b = send("/v1/chat/completions");
  await a.response;
  await b.response;
  a.complete();
  b.disconnect();
  await Promise.resolve(); // the settlement handlers run as microtasks
  await Promise.resolve();
  assert.equal(guard.inflight, 0);
  const c = send("/v1/chat/completions");
  const d = send("/v1/chat/completions");
  assert.equal((await c.response).status, 200);
  assert.equal((await d.response).status, 200);
  c.complete();
  c.complete(); // settling twice frees one slot, not two
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(guard.inflight, 1);
});

Deno.test("guardFrontend() frees the slot of a handler that throws", async () => {
  const guard = guardFrontend(() => Promise.reject(new Error("boom")), { maxInflight: 1 });
  const request = () => new Request(BASE + "/v1/completions", { method: "POST", body: "{}" });
  const never = { completed: new Promise<void>(() => {}) };
  await assert.rejects(guard.fetch(request(), never), /boom/);
  assert.equal(guard.inflight, 0);
  await assert.rejects(guard.fetch(request(), never), /boom/);
});

Deno.test("guardFrontend() never limits the probes, /metrics, /v1/models or a wrong method", async () => {
  const { guard, seen, send } = setup({ maxInflight: 1 });
  await send("/v1/chat/completions").response;
  for (
    const [method, path] of [
      ["GET", "/health"],
      ["GET", "/live"],
      ["GET", "/metrics"],
      [
        "GET",
        "/v1/models",
      ],
      ["GET", "/v1/chat/completions"],
      ["POST", "/v1/models"],
    ] as const
  ) {
    const r = await send(path, { method, body: method === "GET" ? null : "{}" }).response;
    assert.equal(r.status, 200, `${method} ${path}`);
  }
  assert.equal(guard.inflight, 1);
  assert.equal(seen.length, 7);
});

Deno.test("guardFrontend() counts a generation route however its path is spelled", async () => {
  const { guard, send } = setup({ maxInflight: 1 });
  await send("/v1/completions/?x=1").response;
  for (const path of ["/v1/./completions", "/v1/chat/completions//", "/v1/x/../completions"]) {
    assert.equal((await send(path).response).status, 429, path);
  }
  assert.equal(guard.inflight, 1);
});

Deno.test("guardFrontend() queues up to maxQueued requests and admits them in arrival order", async () => {
  const clock = FakeTimers.withGlobal(globalThis).install({
    toFake: ["setTimeout", "clearTimeout"],
  });
  try {
    const { guard, metrics, seen, send } = setup({
      maxInflight: 1,
      maxQueued: 2,
      queueTimeoutMs: 500,
    });
    const first = send("/v1/completions");
    await first.response;
    const second = send("/v1/chat/completions");
    const third = send("/v1/completions");
    const overflow = await send("/v1/completions").response;
    await assertOpenAIError(overflow, 429, "overloaded");
    assert.equal(guard.queued, 2);
    assert.equal(await metricValue(metrics, "dynamo_frontend_queued_requests"), 2);

    first.complete();
    assert.equal((await second.response).status, 200);
    assert.deepEqual(seen, ["POST /v1/completions", "POST /v1/chat/completions"]);
    assert.equal(guard.inflight, 1);
    assert.equal(guard.queued, 1);

    await clock.tickAsync(500);
    const late = await third.response;
    assert.equal(late.headers.get("retry-after"), "1");
    await assertOpenAIError(late, 429, "queue_timeout");
    assert.equal(guard.queued, 0);
    assert.equal(guard.inflight, 1);
    assert.equal(
      await metricValue(metrics, 'dynamo_frontend_rejected_requests_total{reason="queue_timeout"}'),
      1,
    );
  } finally {
    clock.uninstall();
  }
});

Deno.test("guardFrontend() drops a queued request whose client goes away", async () => {
  const { guard, send } = setup({ maxInflight: 1, maxQueued: 1, queueTimeoutMs: 60_000 });
  const first = send("/v1/completions");
  await first.response;
  const waiting = send("/v1/completions");
  assert.equal(guard.queued, 1);
  waiting.disconnect();
  assert.equal((await waiting.response).status, 429);
  assert.equal(guard.queued, 0);
  first.complete();
  await Promise.resolve();
  await Promise.resolve();
  assert.equal(guard.inflight, 0);
});

Deno.test("guardFrontend() never admits more than maxInflight, and frees every slot (property)", async () => {
  // Random arrivals, completions and disconnects: the count stays in bounds and ends at 0.
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 4 }),
      fc.array(fc.constantFrom("arrive", "complete", "disconnect"), { maxLength: 60 }),
      async (maxInflight, ops) => {
        const { guard, send } = setup({ maxInflight });
        const open: Exchange[] = [];
        for (const op of ops) {
          if (op === "arrive") {
            const ex = send("/v1/completions");
            if ((await ex.response).status === 200) open.push(ex);
            else assert.equal(open.length, maxInflight);
          } else {
            const ex = open.shift();
            if (op === "complete") ex?.complete();
            else ex?.disconnect();
            await Promise.resolve();
            await Promise.resolve();
          }
          assert.equal(guard.inflight, open.length);
          assert.ok(guard.inflight <= maxInflight);
        }
        open.forEach((ex) => ex.complete());
        await Promise.resolve();
        await Promise.resolve();
        assert.equal(guard.inflight, 0);
      },
    ),
    { numRuns: 200 },
  );
});

Deno.test("guardFrontend() with an apiKey answers 401 without `Authorization: Bearer <key>`", async () => {
  const key = "sk-test-0123456789";
  const { metrics, seen, send } = setup({ apiKey: key });
  const cases: [string, string | undefined][] = [
    ["no header", undefined],
    ["another scheme", `Basic ${key}`],
    ["no key after the scheme", "Bearer"],
    ["a wrong key", "Bearer sk-wrong"],
    ["a prefix of the key", `Bearer ${key.slice(0, -1)}`],
    ["the key and more", `Bearer ${key}x`],
  ];
  for (const [what, header] of cases) {
    for (
      const [method, path] of [["POST", "/v1/chat/completions"], ["GET", "/v1/models"], [
        "GET",
        "/v1/nothing",
      ]]
    ) {
      const headers = header === undefined ? undefined : { authorization: header };
      const r = await send(path!, {
        method,
        headers,
        body: method === "GET" ? null : "{}",
      }).response;
      assert.equal(r.headers.get("www-authenticate"), "Bearer", what);
      const error = await assertOpenAIError(r, 401, "invalid_api_key");
      assert.equal(error.type, "authentication_error");
      assert.ok(!error.message.includes("sk-"), `${what}: the message holds no key`);
    }
  }
  assert.deepEqual(seen, []);
  assert.equal(
    await metricValue(metrics, 'dynamo_frontend_rejected_requests_total{reason="unauthorized"}'),
    cases.length * 3,
  );
});

Deno.test("guardFrontend() with an apiKey lets the right key through and leaves the probes and /metrics open", async () => {
  const key = "sk-test-0123456789";
  const { seen, send } = setup({ apiKey: key });
  for (const header of [`Bearer ${key}`, `bearer ${key}`, `BEARER   ${key}`]) {
    const r = await send("/v1/completions", { headers: { authorization: header } }).response;
    assert.equal(r.status, 200, header);
  }
  for (const path of ["/health", "/live", "/metrics", "/health/"]) {
    const r = await send(path, { method: "GET", body: null }).response;
    assert.equal(r.status, 200, path);
  }
  assert.equal(seen.length, 7);
});

Deno.test("guardFrontend() refuses bad limits and keys without repeating the key", () => {
  const handler = () => Promise.resolve(new Response());
  for (
    const options of [
      { maxInflight: 0 },
      { maxInflight: 1.5 },
      { maxInflight: Infinity },
      { maxQueued: -1 },
      { queueTimeoutMs: NaN },
      { retryAfterS: -1 },
    ]
  ) {
    assert.throws(() => guardFrontend(handler, options), InvalidArgumentError);
  }
  for (const apiKey of ["", "has space", "tab\there", "ключ"]) {
    assert.throws(
      () => guardFrontend(handler, { apiKey }),
      (err: unknown) =>
        err instanceof InvalidArgumentError && (apiKey === "" || !err.message.includes(apiKey)),
    );
  }
});

Deno.test("routePath() matches the frontend's routing", () => {
  assert.equal(routePath("http://h:1/v1/completions"), "/v1/completions");
  assert.equal(routePath("http://h:1/v1/completions/?a=b#c"), "/v1/completions");
  assert.equal(routePath("http://h:1/v1/./chat/completions"), "/v1/chat/completions");
  assert.equal(routePath("http://h:1/v1/%63ompletions"), "/v1/%63ompletions");
  assert.equal(routePath("http://h:1"), "/");
  assert.equal(routePath("http://h:1/"), "/");
});
