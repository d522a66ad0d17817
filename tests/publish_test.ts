// The package stays publishable: `deno publish --dry-run` passes (slow types, the include
// list) and ships the library with its license and changelog, without tests or build outputs.
// The dry run reads only the local module graph: it needs no JSR access.

import assert from "node:assert/strict";

const ROOT = new URL("..", import.meta.url).pathname;

Deno.test("deno publish --dry-run passes and ships the library, LICENSE and CHANGELOG", async () => {
  const config = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`)) as {
    name: string;
    version: string;
    license: string;
  };
  const run = await new Deno.Command(Deno.execPath(), {
    args: ["publish", "--dry-run", "--allow-dirty"],
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
    signal: AbortSignal.timeout(120_000),
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  const output = decode(run.stdout) + decode(run.stderr);
  assert.equal(run.code, 0, output);
  assert.match(output, new RegExp(`Simulating publish of ${config.name}@${config.version} `));
  assert.match(output, /Dry run complete/);
  const files = [...output.matchAll(/file:\/\/\S+/g)].map((m) =>
    decodeURIComponent(new URL(m[0]).pathname).slice(ROOT.length)
  );
  for (
    const f of ["mod.ts", "LICENSE", "CHANGELOG.md", "README.md", "runtime/mod.ts", "llm/mod.ts"]
  ) {
    assert.ok(files.includes(f), `${f} is in the package (files: ${files.length})`);
  }
  const unwanted = files.filter((f) =>
    /_test\.ts$|^tests\/|^native\/target\/|^node_modules\/|^cli\/|^bench\/|^\.dynamo\//.test(f)
  );
  assert.deepEqual(unwanted, [], "tests, build outputs and the CLI stay out of the package");
  assert.equal(config.license, "Apache-2.0");
  assert.match(await Deno.readTextFile(`${ROOT}LICENSE`), /Apache License\s+Version 2\.0/);
  const changelog = await Deno.readTextFile(`${ROOT}CHANGELOG.md`);
  assert.match(changelog, new RegExp(`^## ${config.version.replaceAll(".", "\\.")}$`, "m"));
});
