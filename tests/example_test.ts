// End-to-end tests of examples/hello_world: the one-process pipeline demo on the embedded
// default, and the basic worker and the pipeline client across processes on etcd + NATS
// (tests/sdk_serve_test.ts covers `dynamo serve` of the pipeline).

import assert from "node:assert/strict";
import { haveServers, startServers } from "./_helpers/servers.ts";
import { runDeno } from "./_helpers/process.ts";

const EXAMPLE = "examples/hello_world";
/** Empty values make DistributedRuntime.fromEnv() pick the embedded default. */
const ROOT = new URL("..", import.meta.url).pathname;
const EMBEDDED_ENV = { ETCD_ENDPOINTS: "", NATS_SERVER: "" };

/** The JSON value of each line of `stdout`. */
function items<T = string>(stdout: string): T[] {
  return stdout.trim().split("\n").filter(Boolean).map((line) => JSON.parse(line) as T);
}

/** Pipeline items with the Middle replica's instance id blanked out. */
function pipelineItems(stdout: string): string[] {
  return items(stdout).map((s) => s.replace(/Middle\(\w+\)/, "Middle(x)"));
}

/** A long-running `deno run -A` child whose standard error is collected line by line. */
class Background {
  readonly child: Deno.ChildProcess;
  readonly stderrLines: string[] = [];
  readonly #drained: Promise<void>;
  #wake: (() => void) | undefined;

  constructor(args: string[], env: Record<string, string>) {
    this.child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", ...args],
      cwd: ROOT,
      env,
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    this.#drained = this.#drain();
  }

  async #drain(): Promise<void> {
    let rest = "";
    for await (const chunk of this.child.stderr.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      this.stderrLines.push(...lines);
      this.#wake?.();
    }
    if (rest) this.stderrLines.push(rest);
    this.#wake?.();
  }

  /** Resolves when a standard-error line contains `text`. */
  async waitForLine(text: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    let exited = false;
    this.child.status.then(() => (exited = true));
    while (!this.stderrLines.some((l) => l.includes(text))) {
      const left = deadline - Date.now();
      if (left <= 0 || exited) {
        throw new Error(
          `expected a line containing "${text}" on the child's stderr within ${timeoutMs} ms` +
            `${exited ? " (it exited)" : ""}; got:\n${this.stderrLines.join("\n")}`,
        );
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 100));
        this.#wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  /** Sends `signal` and waits (up to `timeoutMs`) for the exit status. */
  async stop(signal: Deno.Signal, timeoutMs: number): Promise<Deno.CommandStatus> {
    try {
      this.child.kill(signal);
    } catch {
      // already exited
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<"late">((r) => (timer = setTimeout(() => r("late"), timeoutMs)));
    const status = await Promise.race([this.child.status, late]);
    clearTimeout(timer);
    if (status === "late") {
      await this.kill();
      throw new Error(`the child did not exit within ${timeoutMs} ms of ${signal}`);
    }
    await this.#drained;
    return status;
  }

  /** SIGKILLs the child if it still runs, and waits for it. */
  async kill(): Promise<void> {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // already exited
    }
    await this.child.status;
    await this.#drained;
  }
}

Deno.test("the hello_world demo streams the text through the three services in one process", async () => {
  const run = await runDeno([`${EXAMPLE}/main.ts`], EMBEDDED_ENV);
  assert.equal(run.code, 0, `main.ts failed:\n${run.stderr}`);
  assert.deepEqual(pipelineItems(run.stdout), [
    "Frontend: Middle(x): Backend: Hello,",
    "Frontend: Middle(x): Backend: Dynamo!-mid-back",
  ]);
});

Deno.test("the hello_world demo sends the text given on its command line", async () => {
  const run = await runDeno([`${EXAMPLE}/main.ts`, "one", "two  three"], EMBEDDED_ENV);
  assert.equal(run.code, 0, `main.ts failed:\n${run.stderr}`);
  assert.deepEqual(pipelineItems(run.stdout), [
    "Frontend: Middle(x): Backend: one",
    "Frontend: Middle(x): Backend: two",
    "Frontend: Middle(x): Backend: three-mid-back",
  ]);
});

Deno.test({
  name:
    "the hello_world basic worker and the dynamo call client talk across processes over etcd and NATS",
  ignore: !haveServers(),
  async fn() {
    const servers = await startServers();
    const env = {
      ...servers.env,
      DYN_LOG: "info",
    };
    const worker = new Background([`${EXAMPLE}/worker.ts`], env);
    try {
      await worker.waitForLine("serving", 30_000);
      const call = (text: string) =>
        runDeno([
          "cli/main.ts",
          "call",
          "hello_world/YourWorker/generate",
          JSON.stringify({ text }),
        ], env);
      const words = (stdout: string) => items<{ text: string }>(stdout).map((i) => i.text);
      const run = await call("Hello, Dynamo!");
      assert.equal(run.code, 0, `dynamo call failed:\n${run.stderr}`);
      assert.deepEqual(words(run.stdout), ["Hello,", "Dynamo!"]);

      const again = await call("across processes");
      assert.equal(again.code, 0, `dynamo call failed:\n${again.stderr}`);
      assert.deepEqual(words(again.stdout), ["across", "processes"]);

      const status = await worker.stop("SIGTERM", 15_000);
      assert.equal(
        status.code,
        0,
        `the worker should exit 0 after SIGTERM:\n${worker.stderrLines.join("\n")}`,
      );
      assert.ok(
        worker.stderrLines.some((l) => l.includes("stopped")),
        `the worker should log that its endpoint stopped:\n${worker.stderrLines.join("\n")}`,
      );
    } finally {
      await worker.kill();
      await servers.stop();
    }
  },
});
