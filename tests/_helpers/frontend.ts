// A `dynamo frontend` / `dynamo run` child process: where it listens, and a graceful stop.

import { type ChildHandle, spawnDeno, type SpawnDenoOptions } from "./process.ts";

/** The URL from the child's "listening on URL" line (waits up to `ms`). */
export async function frontendUrl(child: ChildHandle, ms = 30_000): Promise<string> {
  const line = await child.waitFor<{ text: string }>(
    (l) => typeof l.text === "string" && l.text.includes("listening on"),
    ms,
    "the frontend to listen",
  );
  return /listening on (\S+)/.exec(line.text)![1]!;
}

/** SIGTERM, then SIGKILL if the child has not exited after `graceMs`; waits for the exit. */
export async function stopChild(child: ChildHandle, graceMs = 10_000): Promise<void> {
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await child.status;
  clearTimeout(timer);
}

const CLI = new URL("../../cli/main.ts", import.meta.url).pathname;

/** `dynamo frontend` on a free loopback port, with `env` (backends, log level). */
export function spawnFrontend(
  env: Record<string, string>,
  options: SpawnDenoOptions = {},
): ChildHandle {
  return spawnDeno(
    CLI,
    env,
    ["frontend", "--http-port", "0", "--http-host", "127.0.0.1"],
    options,
  );
}
