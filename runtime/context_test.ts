import assert from "node:assert/strict";
import { Context } from "./context.ts";

Deno.test("Context.stopGenerating() aborts the signal and resolves stopped() without killing", async () => {
  const ctx = new Context("req-1");
  assert.equal(ctx.id, "req-1");
  assert.equal(ctx.isStopped(), false);
  ctx.stopGenerating();
  assert.equal(ctx.isStopped(), true);
  assert.equal(ctx.isKilled(), false);
  assert.equal(ctx.signal.aborted, true);
  await ctx.stopped();
});

Deno.test("Context.kill() after a stop still marks the context killed and tells listeners", () => {
  const ctx = new Context();
  const reasons: string[] = [];
  ctx.onStop((r) => reasons.push(r));
  ctx.stopGenerating();
  ctx.stopGenerating();
  ctx.kill();
  ctx.kill();
  assert.deepEqual(reasons, ["stop", "kill"]);
  assert.equal(ctx.isKilled(), true);
});

Deno.test("Context.linkChild() forwards stop and kill, and can be undone", () => {
  const parent = new Context();
  const a = new Context();
  const b = new Context();
  parent.linkChild(a);
  const unlink = parent.linkChild(b);
  unlink();
  parent.kill();
  assert.equal(a.isKilled(), true);
  assert.equal(b.isStopped(), false);
});

Deno.test("Context.linkChild() on an already stopped parent stops the child at once", () => {
  const parent = new Context();
  parent.stopGenerating();
  const child = new Context();
  parent.linkChild(child);
  assert.equal(child.isStopped(), true);
  assert.equal(child.isKilled(), false);
});

Deno.test("Context ids are unique by default", () => {
  assert.notEqual(new Context().id, new Context().id);
});

Deno.test("Context stop listeners run in the order added, each removable, one or many", () => {
  // Every sequence of adds and removals against a model (a list in insertion order).
  for (let seed = 0; seed < 200; seed++) {
    let x = seed * 7919 + 1;
    const rand = (n: number) => (x = (x * 1103515245 + 12345) % 2147483648) % n;
    const ctx = new Context();
    const calls: number[] = [];
    const model: number[] = [];
    const removers = new Map<number, () => void>();
    for (let step = 0, next = 0; step < rand(8); step++) {
      if (removers.size > 0 && rand(3) === 0) {
        const ids = [...removers.keys()];
        const id = ids[rand(ids.length)]!;
        removers.get(id)!();
        removers.delete(id);
        model.splice(model.indexOf(id), 1);
      } else {
        const id = next++;
        removers.set(id, ctx.onStop(() => calls.push(id)));
        model.push(id);
      }
    }
    ctx.stopGenerating();
    assert.deepEqual(calls, model, `seed ${seed}`);
  }
});
