// One Ctrl-C through the ways a new user runs `dynamo serve` (the ./dynamo launcher, or npx then
// `deno task`) must stop the graph gracefully: a terminal sends SIGINT to the whole process
// group, and wrappers may forward it again. Every service's @asyncOnShutdown hook runs, no replica is
// restarted, nothing is killed, and serve finishes its shutdown.

import assert from "node:assert/strict";
import { eachLine } from "./_helpers/process.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const DENO_VERSION = "2.9.6";

async function haveCommand(name: string): Promise<boolean> {
  try {
    const { success } = await new Deno.Command("sh", { args: ["-c", `command -v ${name}`] })
      .output();
    return success;
  } catch {
    return false;
  }
}

const ready = await haveCommand("npx") && await haveCommand("setsid");

/** Serves the shutdown graph through `command`, sends one Ctrl-C to its group, checks the stop. */
async function oneCtrlC(command: string[], mustExitZero: boolean): Promise<void> {
  const marks = await Deno.makeTempDir({ prefix: "dynamo-shutdown-marks-" });
  // setsid: the wrapper leads a process group of its own, as a terminal's foreground job does.
  const child = new Deno.Command("setsid", {
    args: [...command, "serve", "tests/_helpers/shutdown_graph.ts:Entry"],
    cwd: ROOT,
    env: { SHUTDOWN_MARK_DIR: marks, NO_COLOR: "1", NPM_CONFIG_LOGLEVEL: "error" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const collect = (line: string) => void lines.push(line);
  const drained = Promise.all([eachLine(child.stdout, collect), eachLine(child.stderr, collect)]);
  // Deno.kill takes no negative pid: kill(1) signals the whole group.
  const killGroup = (signal: string) =>
    new Deno.Command("kill", { args: [`-${signal}`, "--", `-${child.pid}`], stderr: "null" })
      .output();
  try {
    const deadline = Date.now() + 120_000;
    while (!lines.some((l) => l.startsWith("[serve] ready:"))) {
      if (Date.now() > deadline) {
        throw new Error(`dynamo serve not ready in 120 s:\n${lines.slice(-20).join("\n")}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    // The terminal's copy, then a wrapper's forwarded copy of the same Ctrl-C.
    await killGroup("INT");
    await new Promise((r) => setTimeout(r, 30));
    await killGroup("INT");
    const timer = setTimeout(() => void killGroup("KILL"), 60_000);
    const status = await child.status;
    clearTimeout(timer);
    await drained;
    const out = lines.join("\n");
    assert.ok(!out.includes("killing every service"), `a duplicate signal killed:\n${out}`);
    assert.ok(!/restarting in/.test(out), `a replica was restarted during shutdown:\n${out}`);
    const hooks = [...Deno.readDirSync(marks)].map((e) => e.name.split(".")[0]).sort();
    assert.deepEqual(hooks, ["Entry", "Leaf"], `shutdown hooks that ran: ${hooks}\n${out}`);
    assert.ok(out.includes("[serve] stopped"), `serve did not finish its shutdown:\n${out}`);
    if (mustExitZero) assert.equal(status.code, 0, `exit status ${JSON.stringify(status)}\n${out}`);
    // npx itself dies of the SIGINT (npm's own handling) while `deno task` and dynamo serve go
    // on shutting down: there, what counts is that serve finished its shutdown.
    else assert.ok(status.code === 0 || status.signal === "SIGINT", JSON.stringify(status));
  } finally {
    await killGroup("KILL");
    await child.status.catch(() => {});
    await Deno.remove(marks, { recursive: true });
  }
}

Deno.test({
  name: "one Ctrl-C to the process group of `./dynamo serve` runs every shutdown hook and exits 0",
  ignore: !await haveCommand("setsid"),
  sanitizeResources: false,
  sanitizeOps: false,
}, () => oneCtrlC(["./dynamo"], true));

Deno.test({
  name: "one Ctrl-C to the process group of `npx deno task dynamo serve` runs every shutdown hook",
  ignore: !ready,
  sanitizeResources: false,
  sanitizeOps: false,
}, () => oneCtrlC(["npx", "-y", `deno@${DENO_VERSION}`, "task", "dynamo"], false));
