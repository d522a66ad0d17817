// Worker and client in one process on one embedded runtime (in-memory discovery and the
// in-process request plane only span one process): `deno task hello [text]`.

import { DistributedRuntime } from "../../mod.ts";
import { runClient } from "./client.ts";
import { serveWorker } from "./worker.ts";

// fromEnv: the embedded default unless ETCD_ENDPOINTS / NATS_SERVER point at real servers.
const runtime = await DistributedRuntime.fromEnv();
const serving = serveWorker(runtime);
// If serving fails, shut down; the error surfaces from `await serving` below.
serving.catch(() => runtime.shutdown());
try {
  const text = Deno.args.length > 0 ? Deno.args.join(" ") : undefined;
  await runClient(runtime, text, { timeoutMs: 5000 });
} finally {
  await runtime.shutdown();
  await serving;
}
