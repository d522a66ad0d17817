// An in-process frontend on a free loopback port over workers a test starts on the same
// embedded runtime, with the official `openai` client pointed at it; all stopped afterwards.

import OpenAI from "openai";
import { DistributedRuntime } from "../../runtime/distributed_runtime.ts";
import { ModelManager, type ModelManagerOptions } from "../../llm/model/registry.ts";
import { createFrontend, type FrontendOptions } from "../../llm/http/app.ts";

/** What a test body gets: the client, the server's base URL (`http://127.0.0.1:PORT`). */
export interface OpenAIFrontend {
  client: OpenAI;
  baseUrl: string;
  runtime: DistributedRuntime;
}

/**
 * Starts an embedded runtime, lets `setup` start workers on it, serves a frontend over it on
 * a free loopback port, waits (up to 10 s) until every model in `models` is listed, runs
 * `body`, and stops everything.
 *
 * @param setup starts the workers (and returns what to close afterwards, if anything)
 * @param names the model names to wait for
 * @param body the test
 * @param frontend extra createFrontend options
 * @param manager ModelManager options (router mode)
 */
export async function withOpenAIFrontend(
  setup: (runtime: DistributedRuntime) => Promise<(() => Promise<void>) | void>,
  names: string[],
  body: (f: OpenAIFrontend) => Promise<void>,
  frontend: Partial<FrontendOptions> = {},
  manager: ModelManagerOptions = {},
): Promise<void> {
  const runtime = await DistributedRuntime.connect();
  let cleanup: (() => Promise<void>) | void = undefined;
  let server: Deno.HttpServer | undefined;
  const models = new ModelManager(runtime, manager);
  try {
    cleanup = await setup(runtime);
    await models.start();
    const app = createFrontend({ ...frontend, models });
    const listening = Promise.withResolvers<Deno.NetAddr>();
    server = Deno.serve({
      port: 0,
      hostname: "127.0.0.1",
      onListen: (addr) => listening.resolve(addr as Deno.NetAddr),
    }, app.fetch);
    const { port } = await listening.promise;
    const baseUrl = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 10_000;
    while (!names.every((name) => models.list().some((m) => m.name === name))) {
      if (Date.now() > deadline) {
        throw new Error(`models ${names.join(", ")} were not all listed within 10 s`);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: "unused", maxRetries: 0 });
    await body({ client, baseUrl, runtime });
  } finally {
    await server?.shutdown();
    await models.close();
    await runtime.shutdown();
    if (cleanup) await cleanup();
  }
}
