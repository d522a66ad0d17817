// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// A traced LLM worker process for the tracing tests: the echo engine registered with
// registerLlm on the runtime from the environment, its spans kept by the OpenTelemetry SDK's
// in-memory exporter. Reports on stdout, one JSON object per line: {"ready": instanceId}, and
// after a graceful stop (SIGTERM) {"spans": [...]}, every span it ended.
// Args: MODEL_PATH

import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import {
  createTracing,
  dynamoWorker,
  echoEngine,
  ModelInput,
  ModelType,
  registerLlm,
} from "../../mod.ts";

/** A span as this worker reports it. */
export interface ReportedSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string | undefined;
  attributes: Record<string, unknown>;
}

const report = (x: unknown) => console.log(JSON.stringify(x));

if (import.meta.main) {
  const exporter = new InMemorySpanExporter();
  const tracing = await createTracing({ serviceName: "traced-worker", exporters: [exporter] });
  await dynamoWorker(async (runtime) => {
    const component = runtime.namespace("traced").component("backend");
    await component.createService();
    const endpoint = component.endpoint("generate");
    const serving = endpoint.serveEndpoint(echoEngine({ delayMs: 1 }));
    await registerLlm(
      ModelInput.Tokens,
      ModelType.Chat | ModelType.Completions,
      endpoint,
      Deno.args[0]!,
    );
    report({ ready: runtime.instanceId });
    await serving;
  }, { tracing });
  const spans: ReportedSpan[] = exporter.getFinishedSpans().map((s) => ({
    name: s.name,
    kind: s.kind,
    traceId: s.spanContext().traceId,
    spanId: s.spanContext().spanId,
    parentSpanId: s.parentSpanContext?.spanId,
    attributes: { ...s.attributes },
  }));
  report({ spans });
  await tracing.shutdown();
}
