// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// An LLM worker process for end-to-end tests: the echo engine registered with
// registerLlm on the runtime from the environment. Reports on stdout, one JSON object
// per line: {"step": ...} as it starts (so a start that hangs says where), {"ready": instanceId},
// {"request": id} when a request starts,
// {"stopped": id, "at": epochMs} when its context stops.
// Args: MODEL_PATH [--delay-ms N] [--migration-limit N] [--model-name NAME]

import { parseArgs } from "node:util";
import {
  type Context,
  dynamoWorker,
  echoEngine,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
} from "../../mod.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  allowPositionals: true,
  options: {
    "delay-ms": { type: "string", default: "0" },
    "migration-limit": { type: "string", default: "0" },
    "model-name": { type: "string" },
  },
});
const report = (x: unknown) => console.log(JSON.stringify(x));

report({ step: "started" });
await dynamoWorker(async (runtime) => {
  report({ step: "connected", instance: runtime.instanceId });
  const component = runtime.namespace("e2e").component("backend");
  await component.createService();
  report({ step: "service created" });
  const endpoint = component.endpoint("generate");
  const echo = echoEngine({ delayMs: Number(values["delay-ms"]) });
  const serving = endpoint.serveEndpoint(async function* (req: PreprocessedRequest, ctx: Context) {
    report({ request: ctx.id, migrated: req.migrated_tokens ?? 0 });
    ctx.onStop((reason) => report({ stopped: ctx.id, at: Date.now(), reason }));
    yield* echo(req, ctx);
  });
  report({ step: "serving; registering the model" });
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    positionals[0]!,
    {
      migrationLimit: Number(values["migration-limit"]),
      modelName: values["model-name"],
    },
  );
  report({ ready: runtime.instanceId });
  await serving;
});
