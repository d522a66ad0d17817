// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Runs the shell commands of README.md and the example READMEs from the repository root, in
// order, the way a user would, and prints a table: command -> ok / skipped (reason) / FAILED.
// Exits 1 on any failure. `./deno task smoke:docs [FILE.md...]` (paths from the repository root, or
// absolute); tests/doc_smoke_test.ts runs it.
//
// Every ```sh block is run as written, command by command (lines joined at a trailing `\`,
// full-line comments dropped), through bash, and must exit 0. An HTML comment right before a
// block (invisible on the rendered page) says otherwise:
//
//   <!-- smoke: background until="listening on" exports="DYN_HUB DYN_HUB_TOKEN" -->
//       start each command in the background, wait for output matching the regex (stdout or
//       stderr; `until` may be given more than once: all must match), then take NAME=VALUE for
//       each exported name from its output into the environment of the commands after it (as
//       `export` in a terminal would).
//   <!-- smoke: skip reason="needs a GPU" -->            do not run it, and say why
//   <!-- smoke: env="ETCD_ENDPOINTS={etcd} NATS_SERVER={nats}" -->
//       set variables for this block and the rest of its section; {etcd} and {nats} are the URLs
//       of real servers the script starts on free loopback ports (tests/_helpers/servers.ts)
//   <!-- smoke: expect="Qwen3-0.6B" -->                  each command's output must match
//   <!-- smoke: cleanup="k8s" -->                        remove what the block wrote there
//   <!-- smoke: timeout=120 -->                          seconds per command (default 90)
//
// A heading ends a section, like closing the terminals of a walkthrough: the background
// commands started in it get SIGINT, in reverse order, and must exit 0 within 20 s; the
// section's environment is dropped. Port 8000, which the docs use for the frontend, is used
// as written when it is free, else a free port is put in its place (the table says so).

import { freePort, type ServerProcess, startEtcd, startNats } from "../tests/_helpers/servers.ts";

const ROOT = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const DEFAULT_FILES = [
  "README.md",
  "examples/hello_world/README.md",
  "examples/sdk_config/README.md",
  "examples/kv_metrics/README.md",
  "examples/kv_router/README.md",
  "examples/disagg/README.md",
  "native/README.md",
];
const STOP_TIMEOUT_MS = 20_000;
/** DOC_SMOKE_VERBOSE=1: print the last lines of every command's output, not only on failure. */
const VERBOSE = Deno.env.get("DOC_SMOKE_VERBOSE") === "1";
const BACKGROUND_TIMEOUT_MS = 60_000;

/** One annotation's directives. */
interface Directives {
  skip?: string;
  /** Regexes a background command's output must all match before it counts as ready. */
  background?: string[];
  exports?: string[];
  env?: string;
  expect?: string;
  cleanup?: string;
  timeoutS?: number;
}

/** A step of a document: a command, or the end of a section. */
type Step =
  | { kind: "command"; file: string; line: number; command: string; directives: Directives }
  | { kind: "section-end"; file: string; line: number };

/** What the table shows per command. */
interface Row {
  where: string;
  command: string;
  result: string;
  failed: boolean;
  /** Seconds it ran (a background command: until it was ready). */
  seconds?: number;
}

class DocSyntaxError extends Error {
  override name = "DocSyntaxError";
}

/** Parses `key="value"`, `key=value` and bare `word` tokens of a smoke comment. */
export function parseDirectives(text: string, where: string): Directives {
  const out: Directives = {};
  const token = /([a-z]+)(?:=(?:"((?:[^"\\]|\\.)*)"|(\S+)))?/g;
  for (const m of text.matchAll(token)) {
    const key = m[1]!;
    const value = m[2] ?? m[3];
    switch (key) {
      case "skip":
        out.skip = "";
        break;
      case "reason":
        out.skip = value ?? "";
        break;
      case "background":
        out.background ??= [];
        break;
      case "until":
        out.background = [...(out.background ?? []), value ?? ""];
        break;
      case "exports":
        out.exports = (value ?? "").split(/\s+/).filter(Boolean);
        break;
      case "env":
        out.env = value ?? "";
        break;
      case "expect":
        out.expect = value ?? "";
        break;
      case "cleanup":
        out.cleanup = value ?? "";
        break;
      case "timeout":
        out.timeoutS = Number(value);
        break;
      default:
        throw new DocSyntaxError(`${where}: unknown smoke directive "${key}" in "${text}"`);
    }
  }
  if (out.skip === "") throw new DocSyntaxError(`${where}: "skip" needs reason="..."`);
  if (out.background?.length === 0 || out.background?.includes("")) {
    throw new DocSyntaxError(`${where}: "background" needs until="..."`);
  }
  return out;
}

/** Splits a markdown file into commands and section ends. */
export function parseDoc(file: string, text: string): Step[] {
  const lines = text.split("\n");
  const steps: Step[] = [];
  let pending: Directives | undefined;
  let fence: { lang: string; start: number; body: string[] } | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const where = `${file}:${i + 1}`;
    if (fence) {
      if (/^\s*```\s*$/.test(line)) {
        if (["sh", "bash", "shell"].includes(fence.lang)) {
          for (const c of splitCommands(fence.body, fence.start)) {
            steps.push({
              kind: "command",
              file,
              line: c.line,
              command: c.command,
              directives: pending ?? {},
            });
          }
        }
        pending = undefined;
        fence = undefined;
      } else {
        fence.body.push(line);
      }
      continue;
    }
    const open = /^\s*```\s*([A-Za-z]*)/.exec(line);
    if (open) {
      fence = { lang: open[1]!.toLowerCase(), start: i + 2, body: [] };
      continue;
    }
    const note = /^<!--\s*smoke:(.*)-->\s*$/.exec(line);
    if (note) {
      pending = parseDirectives(note[1]!.trim(), where);
      continue;
    }
    if (/^#{1,6}\s/.test(line)) {
      steps.push({ kind: "section-end", file, line: i + 1 });
      pending = undefined;
    }
  }
  steps.push({ kind: "section-end", file, line: lines.length });
  return steps;
}

function splitCommands(body: string[], firstLine: number): { line: number; command: string }[] {
  const out: { line: number; command: string }[] = [];
  let current: string[] = [];
  let start = 0;
  body.forEach((raw, k) => {
    if (current.length === 0) {
      if (raw.trim() === "" || raw.trim().startsWith("#")) return;
      start = firstLine + k;
    }
    current.push(raw);
    if (!raw.trimEnd().endsWith("\\")) {
      out.push({ line: start, command: current.join("\n").trim() });
      current = [];
    }
  });
  if (current.length > 0) out.push({ line: start, command: current.join("\n").trim() });
  return out;
}

/** A command started in the background, with everything it printed so far. */
interface Background {
  row: Row;
  child: Deno.ChildProcess;
  output: () => string;
  done: Promise<void>;
}

function collect(child: Deno.ChildProcess): { output: () => string; done: Promise<void> } {
  let text = "";
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) text += chunk;
  };
  const done = Promise.all([pump(child.stdout), pump(child.stderr)]).then(() => {});
  return { output: () => text, done };
}

function tail(text: string, lines = 15): string {
  return text.trimEnd().split("\n").slice(-lines).map((l) => `      | ${l}`).join("\n");
}

function portFree(port: number): boolean {
  for (const hostname of ["127.0.0.1", "0.0.0.0"]) {
    try {
      Deno.listen({ hostname, port }).close();
    } catch {
      return false;
    }
  }
  return true;
}

async function pathExists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Runs the documents' commands; returns the table's rows. */
export async function runDocs(files: string[]): Promise<Row[]> {
  const rows: Row[] = [];
  const steps = await Promise.all(
    files.map(async (f) =>
      parseDoc(f, await Deno.readTextFile(f.startsWith("/") ? f : `${ROOT}/${f}`))
    ),
  );

  let port = "8000";
  if (!portFree(8000)) {
    port = String(freePort());
    console.log(`port 8000 is taken here: the docs' port 8000 runs as ${port}`);
  }
  const servers: { etcd?: ServerProcess; nats?: ServerProcess } = {};
  const baseEnv: Record<string, string> = { ...Deno.env.toObject(), NO_COLOR: "1" };
  for (const name of ["ETCD_ENDPOINTS", "NATS_SERVER", "DYN_HUB", "DYN_HUB_TOKEN"]) {
    delete baseEnv[name]; // the docs start from a clean terminal
  }

  let sectionEnv: Record<string, string> = {};
  let background: Background[] = [];

  const stopBackground = async () => {
    for (const bg of background.reverse()) {
      try {
        bg.child.kill("SIGINT");
      } catch {
        // already gone: its status says how
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      const status = await Promise.race([
        bg.child.status,
        new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), STOP_TIMEOUT_MS))),
      ]);
      clearTimeout(timer);
      if (!status) {
        bg.child.kill("SIGKILL");
        await bg.child.status;
        fail(bg.row, `did not stop within ${STOP_TIMEOUT_MS / 1000} s of SIGINT`, bg.output());
      } else if (!status.success && !bg.row.failed) {
        fail(bg.row, `exit code ${status.code} after SIGINT`, bg.output());
      }
      // A child the command left behind could keep its pipes open: do not wait for it forever.
      let pipes: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([bg.done, new Promise((r) => (pipes = setTimeout(r, 5_000)))]);
      clearTimeout(pipes);
    }
    background = [];
    sectionEnv = {};
  };

  const fail = (row: Row, why: string, output: string) => {
    row.result = `FAILED: ${why}`;
    row.failed = true;
    console.log(`  FAILED ${row.where}: ${row.command.split("\n")[0]}: ${why}\n${tail(output)}`);
  };

  const expand = async (value: string): Promise<string> => {
    if (value.includes("{etcd}")) {
      servers.etcd ??= await startEtcd();
      value = value.replaceAll("{etcd}", servers.etcd.url);
    }
    if (value.includes("{nats}")) {
      servers.nats ??= await startNats();
      value = value.replaceAll("{nats}", servers.nats.url);
    }
    return value;
  };

  try {
    for (const step of steps.flat()) {
      if (step.kind === "section-end") {
        await stopBackground();
        continue;
      }
      const d = step.directives;
      const shown = step.command.replace(/\s*\\\n\s*/g, " ");
      const row: Row = {
        where: `${step.file}:${step.line}`,
        command: shown,
        result: "ok",
        failed: false,
      };
      rows.push(row);
      if (d.skip !== undefined) {
        row.result = `skipped (${d.skip})`;
        continue;
      }
      let command = step.command;
      if (port !== "8000") {
        command = command.replace(/(:|--http-port )8000\b/g, `$1${port}`);
        if (command !== step.command) row.result = `ok (port 8000 as ${port})`;
      }
      if (d.env) {
        let pairs: string[];
        try {
          pairs = (await expand(d.env)).split(/\s+/).filter(Boolean);
        } catch (err: unknown) {
          fail(row, `cannot start the servers it needs: ${String(err)}`, "");
          continue;
        }
        for (const pair of pairs) {
          const eq = pair.indexOf("=");
          sectionEnv[pair.slice(0, eq)] = pair.slice(eq + 1);
        }
      }
      const env = { ...baseEnv, ...sectionEnv };
      const cleanupBefore = d.cleanup ? await pathExists(`${ROOT}/${d.cleanup}`) : true;
      console.log(`$ ${shown}`);
      const started = Date.now();
      const took = () => (row.seconds = (Date.now() - started) / 1000);

      if (d.background !== undefined) {
        const child = spawnBash(`exec ${command}`, env);
        const { output, done } = collect(child);
        const bg: Background = { row, child, output, done };
        background.push(bg);
        const until = d.background.map((r) => new RegExp(r, "m"));
        const ready = () => until.every((r) => r.test(output()));
        const shownUntil = d.background.map((r) => `/${r}/`).join(" and ");
        const waitS = d.timeoutS ?? BACKGROUND_TIMEOUT_MS / 1000;
        const deadline = Date.now() + waitS * 1000;
        let exited: Deno.CommandStatus | undefined;
        child.status.then((s) => (exited = s));
        while (!ready() && !exited && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 50));
        }
        took();
        if (!ready()) {
          const why = exited
            ? `exited (code ${exited.code}) before printing ${shownUntil}`
            : `no output matching ${shownUntil} within ${waitS} s`;
          fail(row, why, output());
          continue;
        }
        for (const name of d.exports ?? []) {
          const found = [...output().matchAll(new RegExp(`\\b${name}=(\\S+)`, "g"))].at(-1);
          if (!found) {
            fail(row, `printed no ${name}=...`, output());
            break;
          }
          sectionEnv[name] = found[1]!;
        }
        continue;
      }

      const child = spawnBash(command, env);
      const { output, done } = collect(child);
      const timeoutS = d.timeoutS ?? 90;
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill("SIGKILL");
      }, timeoutS * 1000);
      const status = await child.status;
      clearTimeout(timer);
      await done;
      took();
      if (timedOut) {
        fail(row, `still running after ${timeoutS} s`, output());
      } else if (!status.success) {
        fail(row, `exit code ${status.code}`, output());
      } else if (d.expect && !new RegExp(d.expect, "m").test(output())) {
        fail(row, `output does not match /${d.expect}/`, output());
      }
      if (VERBOSE && !row.failed) console.log(tail(output(), 8));
      if (d.cleanup && !cleanupBefore) {
        await Deno.remove(`${ROOT}/${d.cleanup}`, { recursive: true }).catch(() => {});
      }
    }
  } finally {
    await stopBackground();
    await servers.etcd?.stop();
    await servers.nats?.stop();
  }
  return rows;
}

function printTable(rows: Row[]): void {
  const width = 72;
  console.log("\n| where | command | s | result |\n| --- | --- | --: | --- |");
  for (const r of rows) {
    const cmd = r.command.length > width ? `${r.command.slice(0, width - 3)}...` : r.command;
    const s = r.seconds === undefined ? "" : r.seconds.toFixed(1);
    console.log(`| ${r.where} | \`${cmd.replaceAll("|", "\\|")}\` | ${s} | ${r.result} |`);
  }
  const count = (prefix: string) => rows.filter((r) => r.result.startsWith(prefix)).length;
  console.log(
    `\ndoc smoke: ${count("ok")} ok, ${count("skipped")} skipped, ${count("FAILED")} failed`,
  );
}

if (import.meta.main) {
  const files = Deno.args.length > 0 ? Deno.args : DEFAULT_FILES;
  const started = Date.now();
  const rows = await runDocs(files);
  printTable(rows);
  console.log(`(${((Date.now() - started) / 1000).toFixed(0)} s)`);
  Deno.exit(rows.some((r) => r.failed) ? 1 : 0);
}

/** Runs `script` with bash from the repository root, in exactly `env`, its output piped. */
function spawnBash(script: string, env: Record<string, string>): Deno.ChildProcess {
  return new Deno.Command("bash", {
    args: ["-c", script],
    cwd: ROOT,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}
