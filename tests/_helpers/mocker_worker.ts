// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// A mocker worker process for end-to-end tests: a MockerEngine served and registered on the
// runtime from the environment (so DYN_SYSTEM_PORT gives it a system server). Reports
// {"ready": instanceId} on stdout once its model is registered.
// Args: [--speedup-ratio X] [--num-gpu-blocks N]

import { parseArgs } from "node:util";
import { dynamoWorker, runMockerWorker } from "../../mod.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    "speedup-ratio": { type: "string", default: "10" },
    "num-gpu-blocks": { type: "string", default: "2048" },
  },
});

await dynamoWorker(async (runtime) => {
  const endpoint = runtime.namespace("dynamo").component("backend").endpoint("generate");
  const worker = await runMockerWorker(endpoint, {
    speedupRatio: Number(values["speedup-ratio"]),
    numGpuBlocks: Number(values["num-gpu-blocks"]),
    metricsIntervalMs: 100,
  });
  console.log(JSON.stringify({ ready: runtime.instanceId }));
  await worker.serving;
});
