// Probes a frontend's /live while something else runs: the worst answer time is an upper bound
// of its event loop's longest stall (HTTP included).

/** A running probe. */
export interface LiveProbe {
  /** Stops probing; resolves to the slowest /live answer seen, in ms. */
  stop(): Promise<number>;
}

/**
 * Starts asking `${base}/live` every `everyMs`, one request at a time.
 *
 * @param base the frontend's URL
 * @param everyMs pause between probes
 */
export function probeLive(base: string, everyMs = 5): LiveProbe {
  let worst = 0;
  let probing = true;
  const probes = (async () => {
    while (probing) {
      const t = performance.now();
      await (await fetch(`${base}/live`)).text();
      worst = Math.max(worst, performance.now() - t);
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    async stop() {
      probing = false;
      await probes;
      return worst;
    },
  };
}
