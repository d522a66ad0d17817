// Reading a process's routing trace (DYN_ROUTE_TRACE=1, runtime/route_trace.ts): were
// requests routed to an instance after the process had seen that instance die?

/** One line of a routing trace, as `jsonLinesRouteTrace` writes it. */
export interface RouteTraceLine {
  route_trace: "route" | "down" | "gone" | "up";
  seq: number;
  /** Epoch ms on the writer's monotonic clock. */
  t: number;
  endpoint: string;
  instance: string;
}

/** What {@linkcode routeViolations} found. */
export interface RouteCheck {
  /** Routing decisions in the trace. */
  routes: number;
  /** Decisions for a killed instance after its kill, before the process saw it die. */
  routedBeforeNoticed: number;
  /** Decisions for a killed instance after the process saw it die, one line each. */
  violations: string[];
}

/**
 * A kill and the first sign of it in a trace written by another process: the clocks are
 * the same machine's but read apart, so allow this much (ms) between them.
 */
const CLOCK_SLACK_MS = 5;

/**
 * Checks `trace` against the instances killed: once the traced process has seen a killed
 * instance die (the first `down` or `gone` for it after the kill), no `route` to it may
 * follow. Lines are ordered by `seq`, which the writer assigns in event order.
 *
 * @param trace the trace lines, in any order
 * @param killed killed instance id -> when it was killed (epoch ms, as the trace's `t`)
 * @throws {Error} a killed instance whose death the trace never shows
 */
export function routeViolations(
  trace: readonly RouteTraceLine[],
  killed: ReadonlyMap<string, number>,
): RouteCheck {
  const lines = [...trace].sort((a, b) => a.seq - b.seq);
  const routes = lines.filter((l) => l.route_trace === "route");
  let routedBeforeNoticed = 0;
  const violations: string[] = [];
  for (const [id, killedAt] of killed) {
    const seen = lines.find((l) =>
      l.instance === id && (l.route_trace === "down" || l.route_trace === "gone") &&
      l.t >= killedAt - CLOCK_SLACK_MS
    );
    if (!seen) throw new Error(`the trace never shows instance ${id} die (killed at ${killedAt})`);
    for (const r of routes) {
      if (r.instance !== id || r.t < killedAt - CLOCK_SLACK_MS) continue;
      if (r.seq < seen.seq) {
        routedBeforeNoticed++;
      } else {
        violations.push(
          `routed to ${id} ${(r.t - seen.t).toFixed(1)} ms after the frontend saw it ` +
            `${seen.route_trace} (${(seen.t - killedAt).toFixed(1)} ms after the kill)`,
        );
      }
    }
  }
  return { routes: routes.length, routedBeforeNoticed, violations };
}
