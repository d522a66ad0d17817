import assert from "node:assert/strict";
import { anyIn, idSet, idsWithin, type IdWatch, waitForIds } from "./_id_set.ts";
import { RuntimeShutdownError, TimeoutError } from "./errors.ts";

/** A watch over `ids`, changed by `set` (which wakes the waiters) and closed by `close`. */
function watch(initial: string[]) {
  let ids = initial;
  const stop = new AbortController();
  const w: IdWatch = {
    ids: () => ids,
    waiters: new Set(),
    closed: stop.signal,
    path: "ns/c/e",
    noun: "instance(s)",
  };
  const wake = () => {
    for (const f of [...w.waiters]) f();
  };
  return {
    w,
    set(next: string[]) {
      ids = next;
      wake();
    },
    close() {
      stop.abort();
      wake();
    },
  };
}

Deno.test("idsWithin gives the list itself when every id is allowed, else the allowed ones", () => {
  const ids = ["a", "b", "c"];
  assert.equal(idsWithin(ids, new Set(["a", "b", "c", "d"])), ids);
  assert.deepEqual(idsWithin(ids, new Set(["c", "a"])), ["a", "c"]);
  assert.deepEqual(idsWithin(ids, new Set()), []);
  const set = new Set(["x"]);
  assert.equal(idSet(set), set);
  assert.deepEqual([...idSet(["x", "y"])], ["x", "y"]);
  assert.equal(anyIn(["a", "b"], new Set(["b"])), true);
  assert.equal(anyIn(["a", "b"], new Set(["c"])), false);
});

Deno.test("waitForIds counts only the ids among those given, as a list or a set", async () => {
  const { w, set } = watch(["a"]);
  assert.deepEqual(await waitForIds(w, { among: ["a"] }), ["a"]);
  const among = new Set(["b", "c"]);
  const waiting = waitForIds(w, { among, count: 2, timeoutMs: 5_000 });
  set(["a", "b", "x"]); // one of the two
  set(["a", "b", "c"]);
  assert.deepEqual(await waiting, ["a", "b", "c"]);
  assert.equal(w.waiters.size, 0);
});

Deno.test("waitForIds fails on its deadline, on an abort and when the client closes", async () => {
  const { w, close } = watch(["a"]);
  await assert.rejects(
    waitForIds(w, { among: ["b"], timeoutMs: 10 }),
    (err: unknown) =>
      err instanceof TimeoutError &&
      err.message === "no 1 instance(s) of ns/c/e within 10 ms (have 0)",
  );
  const ac = new AbortController();
  const aborted = waitForIds(w, { count: 2, signal: ac.signal });
  ac.abort(new Error("gave up"));
  await assert.rejects(aborted, /gave up/);
  const closing = waitForIds(w, { count: 2 });
  close();
  await assert.rejects(closing, RuntimeShutdownError);
  await assert.rejects(waitForIds(w, {}), RuntimeShutdownError);
  assert.equal(w.waiters.size, 0);
});
