// The admit stage: a generation request enters the frontend's accounting (in flight,
// duration, final status) once its model is known, and leaves it exactly once.

import type { FrontendMetrics, ModelMetrics, RequestLabels } from "../http/metrics.ts";
import type { TraceSpan } from "../../runtime/tracing/types.ts";
import type { EndpointKind } from "./parse.ts";

/** How a request ended (the `status` label of the request counter). */
export type RequestStatus = "success" | "error" | "cancelled";

/** One admitted request: its start, its model's series, and its single end. */
export class Admission {
  /** When the request was admitted (`performance.now()`). */
  readonly started: number = performance.now();
  /** The model's series. */
  readonly series: ModelMetrics;
  /** The request's HTTP span when tracing is on: it ends with the request. */
  trace: TraceSpan | undefined = undefined;
  readonly #metrics: FrontendMetrics;
  readonly #labels: RequestLabels;
  #finished = false;

  constructor(metrics: FrontendMetrics, labels: RequestLabels) {
    this.#metrics = metrics;
    this.#labels = labels;
    this.series = metrics.forModel(labels.model);
    this.series.inflight.inc();
  }

  /** Ends the request (the first call counts; later ones are ignored). */
  finish(status: RequestStatus): void {
    if (this.#finished) return;
    this.#finished = true;
    this.series.inflight.dec();
    this.#metrics.countRequest(this.#labels, status);
    this.series.duration.observe((performance.now() - this.started) / 1000);
    const span = this.trace;
    if (span !== undefined) {
      span.setAttribute("dynamo.status", status);
      span.end();
    }
  }
}

/**
 * Admits a request for `model` into the frontend's accounting.
 *
 * @example
 * ```ts ignore
 * const admission = admit(metrics, "m", "chat", true);
 * try { ... admission.finish("success"); } catch { admission.finish("error"); }
 * ```
 */
export function admit(
  metrics: FrontendMetrics,
  model: string,
  kind: EndpointKind,
  stream: boolean,
): Admission {
  return new Admission(metrics, {
    model,
    endpoint: kind === "chat" ? "chat_completions" : "completions",
    request_type: stream ? "stream" : "unary",
  });
}
