// Per-series handles on prom-client metrics for the request hot paths (the frontend's and
// the workers' endpoints). prom-client's own children hash their label object on every
// observation (and look buckets up by number, converted to a string each time): a dozen
// updates per request cost the frontend about 5% of its CPU. These handles find their
// series once and update its numbers in place; the exposition, default labels and registry
// stay prom-client's.
//
// They use prom-client's internal series table (`hashMap`), pinned with prom-client 15.1.3
// in deno.lock; fast_series_test.ts checks their output against prom-client's own
// children, so an upgrade that changes the table fails there.

import type { LabelValues } from "prom-client";
import type { CounterMetric, GaugeMetric, HistogramMetric } from "./metric_types.ts";

interface SeriesEntry {
  labels: LabelValues<string>;
  value?: number;
  sum?: number;
  count?: number;
  bucketValues?: Record<string, number>;
}

interface Internals {
  hashMap: Record<string, SeriesEntry>;
  upperBounds?: number[];
}

function sameLabels(a: LabelValues<string>, b: LabelValues<string>): boolean {
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  return ka.every((k) => String(a[k]) === String(b[k]));
}

/**
 * The live entry of one series: found (or made by `create`) once, found again only when
 * the metric was reset and its table replaced.
 */
function seriesOf(
  metric: unknown,
  labels: LabelValues<string>,
  create: () => void,
): () => SeriesEntry {
  const internals = metric as Internals;
  let key = "";
  let entry: SeriesEntry | undefined;
  const scan = (): SeriesEntry | undefined => {
    for (const [k, e] of Object.entries(internals.hashMap)) {
      if (sameLabels(e.labels, labels)) {
        key = k;
        return (entry = e);
      }
    }
    return undefined;
  };
  const find = (): SeriesEntry => {
    const found = scan() ?? (create(), scan());
    if (found === undefined) {
      throw new Error("prom-client did not create the series (its internals changed?)");
    }
    return found;
  };
  return () => {
    const e = internals.hashMap[key];
    return e !== undefined && e === entry ? e : find();
  };
}

/**
 * A histogram series that observes without hashing labels.
 *
 * @param histogram the prom-client histogram
 * @param labels the series' labels (all of the histogram's label names)
 * @returns the series' `observe`
 * @throws {TypeError} from `observe`, a value that is not a finite number (as prom-client)
 * @example
 * ```ts
 * import { FrontendMetrics } from "./metrics.ts";
 *
 * const metrics = new FrontendMetrics();
 * const ttft = histogramSeries(metrics.ttft, { model: "m" });
 * ttft.observe(0.012);
 * ```
 */
export function histogramSeries(
  histogram: HistogramMetric,
  labels: LabelValues<string>,
): { observe(value: number): void } {
  const bounds = (histogram as unknown as Internals).upperBounds ?? [];
  // The table's bucket keys: the bounds as prom-client turns them into property names.
  const keys = bounds.map((b) => String(b));
  const entry = seriesOf(histogram, labels, () => histogram.zero(labels));
  return {
    observe(value: number): void {
      if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
      const e = entry();
      e.sum! += value;
      e.count! += 1;
      for (let i = 0; i < bounds.length; i++) {
        if (value <= bounds[i]!) {
          e.bucketValues![keys[i]!]! += 1;
          return;
        }
      }
    },
  };
}

/**
 * A counter series that counts without hashing labels.
 *
 * @param counter the prom-client counter
 * @param labels the series' labels
 * @returns the series' `inc` (by 1) and `add` (by a number >= 0, unchecked: callers pass
 *   sizes and counts)
 */
export function counterSeries(
  counter: CounterMetric,
  labels: LabelValues<string>,
): { inc(): void; add(value: number): void } {
  const entry = seriesOf(counter, labels, () => counter.inc(labels, 0));
  return {
    inc(): void {
      entry().value! += 1;
    },
    add(value: number): void {
      entry().value! += value;
    },
  };
}

/**
 * A gauge series that moves without hashing labels.
 *
 * @param gauge the prom-client gauge
 * @param labels the series' labels
 * @returns the series' `inc` and `dec` (by 1)
 */
export function gaugeSeries(
  gauge: GaugeMetric,
  labels: LabelValues<string>,
): { inc(): void; dec(): void } {
  const entry = seriesOf(gauge, labels, () => gauge.inc(labels, 0));
  return {
    inc(): void {
      entry().value! += 1;
    },
    dec(): void {
      entry().value! -= 1;
    },
  };
}
