// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// A worker whose output is malformed on request: the request's sampling seed picks what it
// sends (tests/worker_output_test.ts). Any other seed echoes the prompt's first tokens.
// Args: MODEL_PATH. Reports {"ready": instanceId} on stdout.

import {
  dynamoWorker,
  ModelInput,
  ModelType,
  type PreprocessedRequest,
  registerLlm,
} from "../../mod.ts";
import { MALFORMED } from "./malformed_outputs.ts";

await dynamoWorker(async (runtime) => {
  const component = runtime.namespace("bad").component("backend");
  await component.createService();
  const endpoint = component.endpoint("generate");
  const serving = endpoint.serveEndpoint(async function* (req: PreprocessedRequest) {
    const bad = MALFORMED[req.sampling_options.seed ?? 0];
    yield { token_ids: [req.token_ids[0]!] };
    if (bad !== undefined) {
      yield bad;
      return;
    }
    yield { token_ids: req.token_ids.slice(1, 4), finish_reason: "stop" };
  });
  await registerLlm(
    ModelInput.Tokens,
    ModelType.Chat | ModelType.Completions,
    endpoint,
    Deno.args[0]!,
    {
      modelName: "bad-model",
    },
  );
  console.log(JSON.stringify({ ready: runtime.instanceId }));
  await serving;
});
