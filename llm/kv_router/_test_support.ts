// Test support for the KV router's event subscriptions.

import type { Component } from "../../runtime/component.ts";
import type { EventSubscription } from "../../runtime/events/mod.ts";

/**
 * Makes `comp`'s subscriptions to `name` report `ready` as `readiness()` says (each call
 * a new subscription), while their events still come through.
 */
export function fakeReadiness(comp: Component, name: string, readiness: () => Promise<void>): {
  subscribed: number;
} {
  const counter = { subscribed: 0 };
  const real = comp.subscribeEvents.bind(comp);
  comp.subscribeEvents = (n, options) => {
    const sub = real(n, options);
    if (n !== name) return sub;
    counter.subscribed++;
    const ready = readiness();
    ready.catch(() => {});
    const fake: EventSubscription = {
      ready,
      unsubscribe: () => sub.unsubscribe(),
      [Symbol.asyncIterator]: () => sub[Symbol.asyncIterator](),
    };
    return fake;
  };
  return counter;
}
