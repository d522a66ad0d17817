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
