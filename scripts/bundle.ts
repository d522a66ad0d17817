// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Builds dist/dynamo.js, the `dynamo` command as one file: `deno task bundle`.
//
// Every npm package the command imports is bundled in, except the ones listed in EXTERNAL,
// which stay `npm:` imports pinned to deno.json's versions and are fetched (or read from Deno's
// cache) on first run. Only etcd3 has to stay out: it loads its .proto files from its package
// folder at run time (`__dirname` + "proto/..."), which a bundle does not have. Each other
// package was checked bundled in with `deno run -A dist/dynamo.js --help`, a chat request to
// `dist/dynamo.js run in=http out=echo`, and `dist/dynamo.js frontend` on etcd + NATS.
// Test-only packages (fast-check, @sinonjs/fake-timers, openai, hash-wasm) are not imported by
// cli/main.ts, so they are not in the bundle at all.

import denoJson from "../deno.json" with { type: "json" };

const OUT = "dist/dynamo.js";
const ENTRY = "cli/main.ts";
/** Packages kept out of the bundle, with the reason (printed by the build). */
const EXTERNAL: Record<string, string> = {
  etcd3: "loads its .proto files from its package folder at run time",
};

const imports = denoJson.imports as Record<string, string>;
const external = Object.keys(EXTERNAL).map((name) => {
  const target = imports[name];
  if (!target?.startsWith("npm:")) {
    throw new Error(`scripts/bundle.ts: ${name} is not an npm: import in deno.json`);
  }
  return [name, target] as const;
});

await Deno.mkdir("dist", { recursive: true });
const { code } = await new Deno.Command(Deno.execPath(), {
  args: [
    "bundle",
    "--platform=deno",
    ...external.map(([name]) => `--external=${name}`),
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
for (const [name, target] of external) {
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
const mib = (text.length / 2 ** 20).toFixed(1);
console.log(
  `wrote ${OUT} (${mib} MiB; imported at run time: ${
    external.map(([n, t]) => `${t} (${EXTERNAL[n]})`).join(", ")
  })`,
);
