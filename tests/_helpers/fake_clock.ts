// A fake clock for one synchronous test: the named timer functions faked, restored after.

import FakeTimers from "@sinonjs/fake-timers";

/**
 * Runs `test` with `toFake` (e.g. setInterval, performance) on a fake clock, uninstalled after,
 * also when the test throws.
 *
 * @param toFake the globals to fake
 * @param test the test, driving the clock with `clock.tick`
 */
export function onFakeClock(
  toFake: FakeTimers.FakeMethod[],
  test: (clock: FakeTimers.Clock) => void,
): void {
  const clock = FakeTimers.withGlobal(globalThis).install({ toFake });
  try {
    test(clock);
  } finally {
    clock.uninstall();
  }
}
