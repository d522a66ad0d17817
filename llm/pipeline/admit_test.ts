import assert from "node:assert/strict";
import { FrontendMetrics } from "../http/metrics.ts";
import { admit } from "./admit.ts";

Deno.test("an admitted request is in flight until it finishes, and is counted once", async () => {
  const metrics = new FrontendMetrics();
  const admission = admit(metrics, "m", "chat", true);
  const text = () => metrics.render();
  assert.match(await text(), /dynamo_frontend_inflight_requests\{model="m"\} 1/);
  admission.finish("cancelled");
  admission.finish("success");
  const after = await text();
  assert.match(after, /dynamo_frontend_inflight_requests\{model="m"\} 0/);
  assert.match(
    after,
    /dynamo_frontend_requests_total\{model="m",endpoint="chat_completions",request_type="stream",status="cancelled"\} 1/,
  );
  assert.doesNotMatch(after, /status="success"/);
  assert.match(after, /dynamo_frontend_request_duration_seconds_count\{model="m"\} 1/);
});
