import assert from "node:assert/strict";
import { Context } from "../../runtime/context.ts";
import { EngineShutdownError, RemoteError, StreamIncompleteError } from "../../runtime/errors.ts";
import type { ResponseStream } from "../../runtime/stream.ts";
import {
  MigrationExhaustedError,
  openFailover,
  openMigrating,
  type Pollable,
  type SendTokens,
} from "./migration.ts";
import type { LLMEngineOutput, PreprocessedRequest } from "../protocols.ts";

const request: PreprocessedRequest = {
  model: "m",
  token_ids: [1, 2, 3],
  stop_conditions: { max_tokens: 6 },
  sampling_options: {},
  eos_token_ids: [],
};

/** An engine that counts up from the last token and fails each attempt after `failAfter[i]` items. */
function flaky(failAfter: (number | Error)[], seen: PreprocessedRequest[]): SendTokens {
  let attempt = 0;
  return (req, context) => {
    seen.push(req);
    const plan = failAfter[attempt++] ?? Infinity;
    if (plan instanceof Error) return Promise.reject(plan);
    const stream = (async function* () {
      const max = req.stop_conditions.max_tokens!;
      let last = req.token_ids.at(-1)!;
      for (let i = 0; i < max; i++) {
        if (i === plan) throw new StreamIncompleteError("worker died", i);
        last++;
        yield i === max - 1
          ? { token_ids: [last], finish_reason: "length" as const }
          : { token_ids: [last] };
      }
    })();
    return Promise.resolve(
      Object.assign(stream, { context, instanceId: `w${attempt}` }) as ResponseStream<
        LLMEngineOutput
      >,
    );
  };
}

async function tokens(s: AsyncIterable<LLMEngineOutput>): Promise<number[]> {
  const out: number[] = [];
  for await (const o of s) out.push(...o.token_ids);
  return out;
}

Deno.test("a stream that breaks twice continues seamlessly on new attempts", async () => {
  const seen: PreprocessedRequest[] = [];
  const migrated: number[] = [];
  const s = await openMigrating(flaky([2, 1], seen), request, new Context("r1"), {
    limit: 3,
    onMigrate: (n) => migrated.push(n),
  });
  assert.deepEqual(await tokens(s), [4, 5, 6, 7, 8, 9]);
  assert.deepEqual(migrated, [1, 2]);
  assert.deepEqual(
    seen.map((r) => [r.token_ids, r.stop_conditions.max_tokens, r.migrated_tokens]),
    [
      [[1, 2, 3], 6, undefined],
      [[1, 2, 3, 4, 5], 4, 2],
      [[1, 2, 3, 4, 5, 6], 3, 3],
    ],
  );
});

Deno.test("each instance whose stream broke is reported once, so routing can skip it", async () => {
  const failed: [string, string][] = [];
  const s = await openMigrating(flaky([2, 1], []), request, new Context(), {
    limit: 3,
    onInstanceFailed: (id, cause) => failed.push([id, (cause as Error).name]),
  });
  assert.deepEqual(await tokens(s), [4, 5, 6, 7, 8, 9]);
  assert.deepEqual(failed, [["w1", "StreamIncompleteError"], ["w2", "StreamIncompleteError"]]);
});

Deno.test("a failure past the migration limit says the limit is exhausted", async () => {
  const s = await openMigrating(flaky([1, 1], []), request, new Context(), { limit: 1 });
  await assert.rejects(
    tokens(s),
    (e: unknown) => e instanceof MigrationExhaustedError && /exhausted/.test(e.message),
  );
  const none = await openMigrating(flaky([1], []), request, new Context(), { limit: 0 });
  await assert.rejects(tokens(none), /migration is disabled/);
});

Deno.test("opening on a worker that is shutting down migrates too; handler errors do not", async () => {
  const s = await openMigrating(
    flaky([new EngineShutdownError("bye")], []),
    request,
    new Context(),
    { limit: 1 },
  );
  assert.deepEqual(await tokens(s), [4, 5, 6, 7, 8, 9]);
  await assert.rejects(
    openMigrating(flaky([new RemoteError("bad input", "TypeError")], []), request, new Context(), {
      limit: 3,
    }),
    RemoteError,
  );
});

Deno.test("a cancelled request never migrates", async () => {
  const ctx = new Context();
  const s = await openMigrating(flaky([2], []), request, ctx, { limit: 3 });
  ctx.stopGenerating();
  await assert.rejects(tokens(s), StreamIncompleteError);
});

Deno.test("openFailover() retries opening on another instance, never past the limit or a handler error", async () => {
  const died = () => new StreamIncompleteError("worker died before its prologue");
  const opener = (failures: Error[]) => {
    let calls = 0;
    const send = (context: Context) => {
      const failure = failures[calls++];
      if (failure) return Promise.reject(failure);
      return Promise.resolve({ context, instanceId: "w" } as unknown as ResponseStream<unknown>);
    };
    return { send, calls: () => calls };
  };
  const retried: number[] = [];
  const ok = opener([died(), died()]);
  const stream = await openFailover(ok.send, new Context(), {
    limit: 2,
    onMigrate: (n) => retried.push(n),
  });
  assert.equal(stream.instanceId, "w");
  assert.deepEqual(retried, [1, 2]);
  const exhausted = opener([died(), died()]);
  await assert.rejects(
    openFailover(exhausted.send, new Context(), { limit: 1 }),
    StreamIncompleteError,
    "the last failure, as it was",
  );
  const handler = opener([new RemoteError("bad request", "TypeError")]);
  await assert.rejects(openFailover(handler.send, new Context(), { limit: 3 }), RemoteError);
  assert.equal(handler.calls(), 1);
});

/** As {@linkcode flaky}, but every item is already there: the iterator can hand it over by `poll`. */
function flakyPollable(failAfter: number[], polled: { n: number }): SendTokens {
  let attempt = 0;
  return (req, context) => {
    const plan = failAfter[attempt++] ?? Infinity;
    const max = req.stop_conditions.max_tokens!;
    let last = req.token_ids.at(-1)!;
    let i = 0;
    const take = (): IteratorResult<LLMEngineOutput> => {
      if (i === plan) throw new StreamIncompleteError("worker died", i);
      if (i === max) return { value: undefined, done: true };
      i++;
      last++;
      return {
        value: i === max ? { token_ids: [last], finish_reason: "length" } : { token_ids: [last] },
        done: false,
      };
    };
    const it = {
      next: () => new Promise<IteratorResult<LLMEngineOutput>>((resolve) => resolve(take())),
      poll: () => (polled.n++, take()),
      return: () => Promise.resolve({ value: undefined, done: true as const }),
    };
    return Promise.resolve(
      { context, instanceId: `w${attempt}`, [Symbol.asyncIterator]: () => it } as ResponseStream<
        LLMEngineOutput
      >,
    );
  };
}

Deno.test("items taken by poll() are checked and counted as next() does; a failure met by poll() migrates on the next next()", async () => {
  const polled = { n: 0 };
  const migrated: number[] = [];
  const s = await openMigrating(flakyPollable([3], polled), request, new Context(), {
    limit: 1,
    onMigrate: (n) => migrated.push(n),
  });
  const it = s[Symbol.asyncIterator]() as
    & AsyncIterator<LLMEngineOutput>
    & Pollable<LLMEngineOutput>;
  const got: number[] = [];
  for (;;) {
    let r = it.poll();
    if (r === undefined) r = await it.next();
    if (r.done) break;
    got.push(...r.value.token_ids);
  }
  assert.deepEqual(got, [4, 5, 6, 7, 8, 9]);
  assert.deepEqual(migrated, [1], "the failure poll() met was migrated, once");
  assert.ok(polled.n >= 6);
});
