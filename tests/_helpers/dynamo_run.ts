// `dynamo run in=http out=echo` as a child process for HTTP tests: everything it prints
// (stdout and stderr) is kept, its URL is read from the "listening on" line, and the echo
// engine's expected answers come from the same built-in tokenizer.

import { builtinTestModel, Tokenizer } from "../../mod.ts";
import { terminate } from "./process.ts";

const CLI = new URL("../../cli/main.ts", import.meta.url).pathname;

/** The model name `dynamo run` serves the built-in test model under. */
export const MODEL = "Qwen3-0.6B";

/** A running `dynamo run`. */
export interface DynamoRun {
  /** `http://127.0.0.1:PORT`. */
  readonly url: string;
  /** Everything printed so far, stdout and stderr interleaved. */
  output(): string;
  /** Whether the process has exited. */
  exited(): boolean;
  /** SIGTERM (SIGKILL after 10 s), then waits for the exit and the end of its output. */
  stop(): Promise<Deno.CommandStatus>;
}

/**
 * Starts `dynamo run in=http out=echo --http-port 0 ...args` (another `out=` in `args` replaces
 * the echo engine) and waits until it listens.
 *
 * @param args more flags (`--delay-ms 50`, `--max-inflight 4`)
 * @param env more environment (DYN_LOG defaults to warn)
 * @throws {Error} the process does not listen within 60 s, or exits first
 */
export async function startDynamoRun(
  args: string[] = [],
  env: Record<string, string> = {},
): Promise<DynamoRun> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      CLI,
      "run",
      "in=http",
      ...(args.some((a) => a.startsWith("out=")) ? [] : ["out=echo"]),
      "--http-port",
      "0",
      ...args,
    ],
    env: { DYN_LOG: "warn", ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let text = "";
  const listening = Promise.withResolvers<string>();
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      const m = /listening on (\S+)/.exec(text);
      if (m) listening.resolve(m[1]!);
    }
  };
  const pumped = Promise.all([pump(child.stdout), pump(child.stderr)]);
  let done = false;
  const status = child.status.then((s) => {
    done = true;
    listening.reject(new Error(`dynamo run exited with ${s.code} before listening:\n${text}`));
    return s;
  });
  const stop = async () => {
    await terminate(child);
    const s = await status;
    await pumped;
    return s;
  };
  const timer = setTimeout(
    () => listening.reject(new Error(`dynamo run did not listen within 60 s:\n${text}`)),
    60_000,
  );
  try {
    const url = await listening.promise;
    return { url, output: () => text, exited: () => done, stop };
  } catch (err) {
    await stop();
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

let tokenizerCache: Tokenizer | undefined;

/** What the echo engine answers to a completion prompt: the prompt's own tokens, as text. */
export async function echoOf(prompt: string): Promise<string> {
  if (!tokenizerCache) {
    const dir = await builtinTestModel();
    tokenizerCache = Tokenizer.fromBytes(
      await Deno.readFile(`${dir}/tokenizer.json`),
      await Deno.readFile(`${dir}/tokenizer_config.json`),
    );
  }
  return tokenizerCache.decode(tokenizerCache.encode(prompt));
}

/** The number of tokens of `prompt` (so the number of echo steps). */
export async function tokenCount(prompt: string): Promise<number> {
  await echoOf("");
  return tokenizerCache!.encode(prompt).length;
}

/** Asserts-free check of an OpenAI error object; returns what is wrong, or undefined. */
export function openAIErrorProblem(body: unknown): string | undefined {
  if (typeof body !== "object" || body === null) return `not an object: ${JSON.stringify(body)}`;
  const keys = Object.keys(body);
  if (keys.length !== 1 || keys[0] !== "error") return `keys ${JSON.stringify(keys)}`;
  const e = (body as { error: unknown }).error;
  if (typeof e !== "object" || e === null) return `error is ${JSON.stringify(e)}`;
  const { message, type, param, code } = e as Record<string, unknown>;
  if (typeof message !== "string" || message === "") return "error.message is not a string";
  if (typeof type !== "string" || type === "") return "error.type is not a string";
  if (!(param === null || typeof param === "string")) return "error.param not string|null";
  if (!(code === null || typeof code === "string")) return "error.code not string|null";
  if (!("param" in e) || !("code" in e)) return "error.param or error.code missing";
  return undefined;
}

/** The value of a metric line of `/metrics` whose labels include all of `labels`. */
export async function metricValue(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split("\n")) {
    const m = /^([a-z_:]+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    if (want.every((w) => (m[2] ?? "").includes(w))) return Number(m[3]);
  }
  return 0;
}
