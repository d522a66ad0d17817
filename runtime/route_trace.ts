// An opt-in trace of what clients route where and when they learn an instance is gone,
// so a test can check from outside a process that nothing is routed to a dead instance.

/** One event of a routing trace. */
export interface RouteTraceEvent {
  /**
   * `route`: a request is being sent to `instance` (every attempt, retries included);
   * `down`: the instance failed to answer or its stream broke, so routing skips it for a
   * while; `gone`: discovery no longer lists it; `up`: discovery lists it (again).
   */
  event: "route" | "down" | "gone" | "up";
  /** The client's `namespace/component/endpoint`. */
  endpoint: string;
  /** The instance id the event is about. */
  instance: string;
}

/** Receives routing trace events, synchronously and in the order they happen. */
export type RouteTrace = (event: RouteTraceEvent) => void;

/** Options of {@linkcode jsonLinesRouteTrace}. */
export interface JsonLinesRouteTraceOptions {
  /** Sink for finished lines (default: standard error, written synchronously). */
  write?: (line: string) => void;
  /**
   * Clock in ms (default `performance.timeOrigin + performance.now()`: monotonic in this
   * process, and comparable with other processes' on the same machine).
   */
  now?: () => number;
}

const encoder = new TextEncoder();

/**
 * A trace that writes one JSON object per event:
 * `{"route_trace":"route","seq":12,"t":1767225600123.4,"endpoint":"ns/backend/generate","instance":"694d..."}`.
 * `seq` counts the events of this trace from 1, so lines order events exactly even when
 * `t` (see `now`) ties. `DYN_ROUTE_TRACE=1` turns it on for
 * runtimes built with `DistributedRuntime.fromEnv`.
 *
 * @param options where lines go and which clock stamps them
 * @returns the trace, for `DistributedRuntimeOptions.routeTrace`
 * @example
 * ```ts ignore
 * const rt = await DistributedRuntime.connect({ routeTrace: jsonLinesRouteTrace() });
 * ```
 */
export function jsonLinesRouteTrace(options: JsonLinesRouteTraceOptions = {}): RouteTrace {
  const write = options.write ??
    ((line: string) => Deno.stderr.writeSync(encoder.encode(line + "\n")));
  const origin = performance.timeOrigin;
  const now = options.now ?? (() => origin + performance.now());
  let seq = 0;
  return (ev) =>
    write(JSON.stringify({
      route_trace: ev.event,
      seq: ++seq,
      t: now(),
      endpoint: ev.endpoint,
      instance: ev.instance,
    }));
}
