// The whole hello-world pipeline in one process on one embedded runtime (`deno task hello
// [text]`): Backend, Middle and Frontend served side by side, then one request through
// them. `dynamo serve` runs the same graph.ts as one process per service.

import { DistributedRuntime, resolveGraph, serveService, ServiceConfig } from "../../mod.ts";
import { runClient } from "./client.ts";
import { Frontend } from "./graph.ts";

// fromEnv: the embedded default unless ETCD_ENDPOINTS / NATS_SERVER / DYN_HUB say otherwise.
const runtime = await DistributedRuntime.fromEnv();
try {
  const config = ServiceConfig.getInstance();
  for (const node of resolveGraph(Frontend, { config }).services) {
    await serveService(node.cls, runtime, { config, node });
  }
  const text = Deno.args.length > 0 ? Deno.args.join(" ") : undefined;
  await runClient(runtime, text, { timeoutMs: 5000 });
} finally {
  await runtime.shutdown();
}
