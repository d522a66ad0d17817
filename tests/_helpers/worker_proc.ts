// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// A worker process for cross-process tests. Serves xproc/worker/generate on the runtime
// from the environment and reports on stdout, one JSON object per line:
// {"ready": instanceId} once serving, {"stopped": requestId, "at": epochMs, "killed": bool}
// when a request's context stops.

import { type Context, dynamoWorker } from "../../mod.ts";

/** Request understood by this worker. */
export interface XprocRequest {
  /** Items to yield (default 10). */
  n?: number;
  /** Pause between items in ms (default 0). */
  delayMs?: number;
  /** Echoed in every item. */
  tag?: string | number;
  /** Yield one string of this many bytes instead (see bigString). */
  bigBytes?: number;
}

/** The deterministic big string both sides can build. */
export function bigString(bytes: number): string {
  const unit = "0123456789abcdefghijklmnopqrstuvwxyz";
  return unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);
}

function report(x: unknown): void {
  console.log(JSON.stringify(x));
}

if (import.meta.main) {
  await dynamoWorker(async (runtime) => {
    const endpoint = runtime.namespace("xproc").component("worker").endpoint("generate");
    const serving = endpoint.serveEndpoint(async function* (req: XprocRequest, ctx: Context) {
      ctx.onStop((reason) =>
        report({ stopped: ctx.id, at: Date.now(), killed: reason === "kill" })
      );
      if (req.bigBytes !== undefined) {
        yield bigString(req.bigBytes);
        return;
      }
      for (let i = 0; i < (req.n ?? 10); i++) {
        if (ctx.isStopped()) return;
        yield { i, tag: req.tag ?? null };
        if (req.delayMs) await new Promise((r) => setTimeout(r, req.delayMs));
      }
    });
    report({ ready: runtime.instanceId });
    await serving;
  });
}
