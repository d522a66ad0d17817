// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Builds dist/dynamo.js, the `dynamo` command as one file: `deno task bundle`.
// npm packages stay outside the bundle as `npm:` imports, because etcd3 reads its .proto
// files from its package folder at load time (bundled, it fails on `__dirname`).

import denoJson from "../deno.json" with { type: "json" };

const OUT = "dist/dynamo.js";
const ENTRY = "cli/main.ts";

const npmImports = Object.entries(denoJson.imports as Record<string, string>)
  .filter(([, target]) => target.startsWith("npm:"));

const { code } = await new Deno.Command(Deno.execPath(), {
  args: [
    "bundle",
    "--platform=deno",
    ...npmImports.map(([name]) => `--external=${name}`),
    "-o",
    OUT,
    ENTRY,
  ],
  stdout: "inherit",
  stderr: "inherit",
}).output();
if (code !== 0) Deno.exit(code);

// The bundle keeps bare names ("etcd3"), which only resolve next to our deno.json: pin
// them to the exact npm versions so the file runs from anywhere.
let text = await Deno.readTextFile(OUT);
for (const [name, target] of npmImports) {
  const escaped = name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
  const bare = new RegExp(`((?:from|import)\\s*\\(?\\s*)(["'])${escaped}((?:/[^"']*)?)\\2`, "g");
  text = text.replace(
    bare,
    (_m, head: string, q: string, sub: string) => `${head}${q}${target}${sub}${q}`,
  );
}
if (!text.startsWith("#!")) text = "#!/usr/bin/env -S deno run -A\n" + text;
await Deno.writeTextFile(OUT, text);
await Deno.chmod(OUT, 0o755);
console.log(
  `wrote ${OUT} (npm packages imported at run time: ${npmImports.map(([n]) => n).join(", ")})`,
);
