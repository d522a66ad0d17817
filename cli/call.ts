// `dynamo call`: sends one JSON request to an endpoint and prints the streamed items.

import { type Client, DistributedRuntime, TimeoutError } from "../mod.ts";
import {
  applyRequestPlaneFlag,
  type Command,
  ExitCode,
  type Io,
  parseCommandArgs,
  parseMs,
  parsePath,
  REQUEST_PLANE_FLAG,
  REQUEST_PLANE_HELP,
  UsageError,
} from "./_common.ts";

const DEFAULT_TIMEOUT_MS = 10_000;

const usage =
  `Usage: dynamo call NAMESPACE/COMPONENT/ENDPOINT 'JSON' [--instance ID] [--timeout-ms N]

Waits for an instance of the endpoint, sends the JSON request (round robin, or to one
instance with --instance) and prints each streamed item as one JSON line. Ctrl-C stops
the request. Exit code 1 when the call fails (no instance, handler error, broken
stream), 2 for a bad command line.

Options:
  --instance ID     send to this instance (lowercase hex id, see 'dynamo instances')
  --timeout-ms N    how long to wait for an instance, in ms (default ${DEFAULT_TIMEOUT_MS})
${REQUEST_PLANE_HELP}
  -h, --help        show this help`;

async function run(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommandArgs("call", args, {
    instance: { type: "string" },
    "timeout-ms": { type: "string" },
    ...REQUEST_PLANE_FLAG,
    help: { type: "boolean", short: "h" },
  });
  applyRequestPlaneFlag("call", values["request-plane"]);
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length !== 2) {
    throw new UsageError(
      `needs an endpoint path and a JSON request, got ${positionals.length} argument(s)`,
      "call",
    );
  }
  const [path, json] = positionals as [string, string];
  const [namespace, component, endpoint] = parsePath("call", path, 3) as [string, string, string];
  let request: unknown;
  try {
    request = JSON.parse(json);
  } catch (err: unknown) {
    throw new UsageError(
      `the request is not valid JSON (${(err as Error).message}): ${json}`,
      "call",
    );
  }
  const timeoutMs = values["timeout-ms"] === undefined
    ? DEFAULT_TIMEOUT_MS
    : parseMs("call", "timeout-ms", values["timeout-ms"]);
  const instance = values.instance;
  if (instance !== undefined && !/^[0-9a-f]+$/.test(instance)) {
    throw new UsageError(
      `--instance must be a lowercase hex id, got ${JSON.stringify(instance)}`,
      "call",
    );
  }

  // Ctrl-C stops the request (the worker's context is stopped too) instead of killing us.
  const interrupt = new AbortController();
  const onSigint = () => interrupt.abort();
  Deno.addSignalListener("SIGINT", onSigint);
  const runtime = await DistributedRuntime.fromEnv();
  try {
    const client = await runtime.namespace(namespace).component(component).endpoint(endpoint)
      .client();
    await waitForInstance(client, instance, timeoutMs, interrupt.signal);
    const stream = instance === undefined
      ? await client.generate(request, { signal: interrupt.signal })
      : await client.direct(request, instance, { signal: interrupt.signal });
    for await (const item of stream) io.out(JSON.stringify(item));
    return ExitCode.Ok;
  } catch (err: unknown) {
    if (interrupt.signal.aborted) {
      io.err("dynamo call: interrupted");
      return ExitCode.Interrupted;
    }
    throw err;
  } finally {
    Deno.removeSignalListener("SIGINT", onSigint);
    await runtime.shutdown();
  }
}

/**
 * Waits until any instance, or the named one, is known.
 * @throws {TimeoutError} none (or not the named one) within `timeoutMs`
 */
async function waitForInstance(
  client: Client,
  instance: string | undefined,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await client.waitForInstances({ timeoutMs, signal });
  if (instance === undefined) return;
  // The named instance may register after others: look again until the deadline.
  while (!client.instanceIds().includes(instance)) {
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new TimeoutError(
        `instance ${instance} of ${client.path} did not appear within ${timeoutMs} ms ` +
          `(known: ${client.instanceIds().join(", ") || "none"})`,
      );
    }
    signal.throwIfAborted();
    await new Promise((r) => setTimeout(r, Math.min(50, left)));
  }
}

/** The `call` subcommand. */
export const callCommand: Command = {
  name: "call",
  summary: "send a JSON request to an endpoint and print the streamed items",
  usage,
  run,
};
