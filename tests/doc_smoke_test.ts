// The documented commands run as written: scripts/doc_smoke.ts over README.md and the example
// READMEs, plus checks that its annotations parse and that a broken command fails the run.

import assert from "node:assert/strict";
import { parseDirectives, parseDoc } from "../scripts/doc_smoke.ts";

const ROOT = new URL("..", import.meta.url).pathname;

async function smoke(...files: string[]): Promise<{ code: number; output: string }> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/doc_smoke.ts", ...files],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
  }).output();
  const text = new TextDecoder();
  return { code, output: text.decode(stdout) + text.decode(stderr) };
}

Deno.test("parseDoc splits sh blocks into commands, with the annotation before the block", () => {
  const doc = [
    "# Title",
    "",
    '<!-- smoke: background until="listening on" exports="DYN_HUB" -->',
    "",
    "```sh",
    "./dynamo run in=http out=echo \\",
    "  --http-port 8000",
    "# a comment line",
    "curl -s localhost:8000/v1/models   # trailing comment",
    "```",
    "",
    "```ts",
    "const notShell = 1;",
    "```",
    "## Next",
    '<!-- smoke: skip reason="needs a GPU" -->',
    "```bash",
    "nvidia-smi",
    "```",
  ].join("\n");
  const steps = parseDoc("doc.md", doc);
  assert.deepEqual(steps.map((s) => s.kind === "command" ? [s.line, s.command] : [s.line, "end"]), [
    [1, "end"],
    [6, "./dynamo run in=http out=echo \\\n  --http-port 8000"],
    [9, "curl -s localhost:8000/v1/models   # trailing comment"],
    [15, "end"],
    [18, "nvidia-smi"],
    [19, "end"],
  ]);
  const first = steps[1];
  assert.ok(first?.kind === "command");
  assert.deepEqual(first.directives, { background: ["listening on"], exports: ["DYN_HUB"] });
  const last = steps[4];
  assert.ok(last?.kind === "command");
  assert.equal(last.directives.skip, "needs a GPU");
});

Deno.test("parseDirectives refuses a skip without a reason and unknown directives", () => {
  assert.throws(() => parseDirectives("skip", "x.md:1"), /needs reason=/);
  assert.throws(() => parseDirectives("background", "x.md:1"), /needs until=/);
  assert.throws(() => parseDirectives('ignore reason="x"', "x.md:1"), /unknown smoke directive/);
  assert.deepEqual(parseDirectives('background until="a" until="b"', "x.md:1"), {
    background: ["a", "b"],
  });
  assert.deepEqual(parseDirectives('env="A=1 B={etcd}" expect="ok" timeout=5', "x.md:1"), {
    env: "A=1 B={etcd}",
    expect: "ok",
    timeoutS: 5,
  });
});

Deno.test("a documented command that fails, or prints the wrong thing, fails the smoke run", async () => {
  const dir = await Deno.makeTempDir({ prefix: "doc-smoke-" });
  try {
    const md = `${dir}/broken.md`;
    await Deno.writeTextFile(
      md,
      [
        "# Broken",
        "```sh",
        "echo fine",
        "./dynamo no-such-command",
        "```",
        "## Wrong output",
        '<!-- smoke: expect="Usage: dynamo" -->',
        "```sh",
        "echo something else",
        "```",
        "## A server that never gets ready",
        '<!-- smoke: background until="listening on" -->',
        "```sh",
        "echo starting; exit 0",
        "```",
        "```sh",
        "echo after it",
        "```",
      ].join("\n"),
    );
    const { code, output } = await smoke(md);
    assert.equal(code, 1, output);
    assert.match(output, /broken\.md:3 \| `echo fine` \| [\d.]+ \| ok \|/);
    assert.match(
      output,
      /broken\.md:4 \| `\.\/dynamo no-such-command` \| [\d.]+ \| FAILED: exit code 2 \|/,
    );
    assert.match(output, /broken\.md:9 .* FAILED: output does not match \/Usage: dynamo\/ \|/);
    assert.match(output, /broken\.md:14 .* FAILED: exited \(code 0\) before printing/);
    assert.match(output, /broken\.md:17 \| `echo after it` \| [\d.]+ \| ok \|/);
    assert.match(output, /doc smoke: 2 ok, 0 skipped, 3 failed/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("every shell command of README.md and the example READMEs runs as written", async () => {
  const { code, output } = await smoke();
  assert.equal(code, 0, `scripts/doc_smoke.ts failed:\n${output}`);
  assert.match(output, /doc smoke: \d+ ok, \d+ skipped, 0 failed/);
});
