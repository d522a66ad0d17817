import assert from "node:assert/strict";
import type FakeTimers from "@sinonjs/fake-timers";
import { addDeadline, deadlineTimerArmed, pendingDeadlines, removeDeadline } from "./_deadlines.ts";
import { onFakeClock as withFakeClock } from "../../tests/_helpers/fake_clock.ts";

/** Runs `test` with the shared timer and `performance.now()` on a fake clock. */
function onFakeClock(test: (clock: FakeTimers.Clock) => void): void {
  withFakeClock(["setInterval", "clearInterval", "performance"], test);
}

Deno.test("a deadline fires once after its time, at most one grain late, and the timer then stops", () =>
  onFakeClock((clock) => {
    let fired = 0;
    addDeadline({ at: performance.now() + 25, fire: () => fired++ });
    clock.tick(20);
    assert.equal(fired, 0, "not before its time");
    clock.tick(10);
    assert.equal(fired, 1, "fired within one grain of its time");
    clock.tick(100);
    assert.equal(fired, 1, "fired once");
    assert.equal(pendingDeadlines(), 0);
    assert.equal(deadlineTimerArmed(), false, "no timer once nothing is pending");
  }));

Deno.test("deadlines added and removed in turn share one timer, which stops at the next idle sweep", () =>
  onFakeClock((clock) => {
    let fired = 0;
    const before = clock.countTimers();
    for (let i = 0; i < 1000; i++) {
      const d = { at: performance.now() + 5_000, fire: () => fired++ };
      addDeadline(d);
      removeDeadline(d);
    }
    assert.equal(clock.countTimers() - before, 1, "one timer for a thousand add/remove pairs");
    assert.equal(pendingDeadlines(), 0);
    clock.tick(10);
    assert.equal(deadlineTimerArmed(), false, "the first sweep with nothing pending stops it");
    clock.tick(10_000);
    assert.equal(fired, 0, "a removed deadline never fires");
  }));

Deno.test("a deadline that throws does not keep the others from firing", () =>
  onFakeClock((clock) => {
    const order: string[] = [];
    addDeadline({
      at: performance.now() + 1,
      fire: () => {
        order.push("a");
        throw new Error("a waiter's own failure");
      },
    });
    addDeadline({ at: performance.now() + 1, fire: () => order.push("b") });
    clock.tick(20);
    assert.deepEqual(order, ["a", "b"]);
    clock.tick(20);
    assert.equal(deadlineTimerArmed(), false);
  }));
