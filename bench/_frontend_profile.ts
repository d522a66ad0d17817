// deno-lint-ignore-file no-console -- a program or test that prints; library code takes a Logger
// Where the dynamo server's CPU goes under `bench:frontend`'s streaming load: starts
// `dynamo run in=http out=echo` with the V8 inspector, records a CPU profile over the
// Chrome DevTools Protocol while this process drives streaming chat completions at a fixed
// concurrency, and prints main-thread time per request by stage and the hottest functions.
// Then times each stage alone, in this process (bench/_frontend_stages.ts).
//
// deno run -A bench/_frontend_profile.ts [--requests N] [--concurrency N] [--out FILE.cpuprofile]
//   [--stages N] (how many of the largest stages to break down by function, default 6)
//   [--warmup N] (requests before profiling, default 20,000)

import { chatBody, streamOnce } from "./_frontend_client.ts";
import { measureStages } from "./_frontend_stages.ts";
import { startServer } from "./_frontend_proc.ts";
import { flag, measureConcurrent, rate, withTimeout } from "./_stats.ts";

const REQUESTS = Number(flag("--requests") ?? 4_000);
const CONCURRENCY = Number(flag("--concurrency") ?? 32);
const SAMPLING_US = Number(flag("--sampling-us") ?? 200);
const outPath = flag("--out");
const STAGES = Number(flag("--stages") ?? 6);
// As bench:frontend: the dynamo server keeps getting faster for its first ~20,000 requests.
const WARMUP = Number(flag("--warmup") ?? 20_000);
const log = (msg: string) => console.error(`[profile] ${msg}`);

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** A minimal DevTools Protocol session over the inspector's WebSocket. */
async function connectInspector(wsUrl: string) {
  const ws = new WebSocket(wsUrl);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = () => reject(new Error(`cannot connect to ${wsUrl}`));
  });
  let seq = 0;
  const waiting = new Map<number, (msg: { result?: unknown; error?: unknown }) => void>();
  ws.onmessage = (e) => {
    const msg = JSON.parse(String(e.data)) as { id?: number; result?: unknown; error?: unknown };
    if (msg.id !== undefined) waiting.get(msg.id)?.(msg), waiting.delete(msg.id);
  };
  return {
    async send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
      const id = ++seq;
      const answer = new Promise<{ result?: unknown; error?: unknown }>((r) => waiting.set(id, r));
      ws.send(JSON.stringify({ id, method, params }));
      const msg = await withTimeout(answer, 30_000, `inspector ${method}`);
      if (msg.error) throw new Error(`${method}: ${JSON.stringify(msg.error)}`);
      return msg.result as T;
    },
    close: () => ws.close(),
  };
}

/** The stage a sample belongs to, from the innermost frame of the project or its npm deps. */
function stageOf(stack: CallFrame[]): string {
  const leaf = stack[0];
  if (leaf?.url === "") {
    if (leaf.functionName === "(garbage collector)") return "V8 garbage collector";
    if (leaf.functionName === "(program)") return "(program): native code outside JS";
  }
  let sawTokenizerLib = false;
  for (const f of stack) {
    const u = f.url;
    if (u.includes("@huggingface/jinja") || u.endsWith("/llm/chat_template.ts")) {
      return "chat template (jinja render)";
    }
    if (u.includes("@huggingface/tokenizers")) {
      sawTokenizerLib = true;
      continue;
    }
    if (u.endsWith("/llm/tokenizer.ts")) {
      return f.functionName === "encode" ? "tokenize the prompt" : "detokenize (incremental)";
    }
    if (u.includes("prom-client")) return "metrics (prom-client)";
    // Tokenizer.encode is inlined into preprocessor.chat.
    if (sawTokenizerLib) {
      return u.endsWith("/llm/preprocessor.ts") ? "tokenize the prompt" : "tokenizer (other)";
    }
    // Any other file of the project: the file itself (llm/pipeline/encode.ts, runtime/...).
    const own = /\/((?:llm|runtime|cli)\/[^?#]+\.ts)$/.exec(u);
    if (own && !u.includes("node_modules")) return own[1]!;
  }
  if (sawTokenizerLib) return "tokenizer (other)";
  return "Deno HTTP server + web streams (no project frame)";
}

/** Self time by function and main-thread time by stage, in µs per request. */
function report(profile: Profile, requests: number): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const selfUs = new Map<number, number>();
  profile.samples.forEach((id, i) => {
    selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i + 1] ?? 0));
  });
  let busyUs = 0;
  const byStage = new Map<string, number>();
  const byFunction = new Map<string, number>();
  const byStageFunction = new Map<string, Map<string, number>>();
  for (const [id, us] of selfUs) {
    const leaf = byId.get(id)!.callFrame;
    if (leaf.functionName === "(idle)") continue;
    busyUs += us;
    const stack: CallFrame[] = [];
    for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
      stack.push(byId.get(n)!.callFrame);
    }
    const stage = stageOf(stack);
    byStage.set(stage, (byStage.get(stage) ?? 0) + us);
    const where = leaf.url === ""
      ? ""
      : ` ${leaf.url.replace(/^.*\/(llm|runtime|node_modules\/\.deno)\//, "$1/")}:${
        leaf.lineNumber + 1
      }`;
    const fn = `${leaf.functionName || "(anonymous)"}${where}`;
    byFunction.set(fn, (byFunction.get(fn) ?? 0) + us);
    const inStage = byStageFunction.get(stage) ?? new Map<string, number>();
    inStage.set(fn, (inStage.get(fn) ?? 0) + us);
    byStageFunction.set(stage, inStage);
  }
  const perReq = (us: number) => (us / requests).toFixed(1).padStart(7);
  const pct = (us: number) => `${(100 * us / busyUs).toFixed(1).padStart(5)}%`;
  const lines: string[] = [];
  lines.push(
    `main thread busy ${(busyUs / 1e6).toFixed(2)} s for ${requests} requests: ` +
      `${(busyUs / requests).toFixed(1)} us per request (profiler overhead included)`,
  );
  lines.push("", "main-thread time by stage (innermost project frame on the stack)");
  lines.push(`${"us/req".padStart(7)}  ${"share".padStart(6)}  stage`);
  for (const [stage, us] of [...byStage].sort((a, b) => b[1] - a[1])) {
    lines.push(`${perReq(us)}  ${pct(us)}  ${stage}`);
  }
  lines.push("", "hottest functions, self time");
  for (const [fn, us] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 25)) {
    lines.push(`${perReq(us)}  ${pct(us)}  ${fn}`);
  }
  lines.push("", `inside the ${STAGES} largest stages, self time`);
  for (const [stage] of [...byStage].sort((a, b) => b[1] - a[1]).slice(0, STAGES)) {
    lines.push(`  ${stage}`);
    const fns = [...byStageFunction.get(stage)!].sort((a, b) => b[1] - a[1]).slice(0, 6);
    for (const [fn, us] of fns) lines.push(`  ${perReq(us)}  ${pct(us)}  ${fn}`);
  }
  return lines.join("\n");
}

async function main(): Promise<void> {
  // A free port for the inspector (taken and given back; loopback only).
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const inspectPort = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const wsUrl = Promise.withResolvers<string>();
  const server = await startServer(
    "dynamo",
    [
      "run",
      "-A",
      `--inspect=127.0.0.1:${inspectPort}`,
      "cli/main.ts",
      "run",
      "in=http",
      "out=echo",
      "--http-port",
      "0",
    ],
    log,
    (line) => {
      const m = /(ws:\/\/\S+)/.exec(line);
      if (m) wsUrl.resolve(m[1]!);
    },
  );
  const body = chatBody("Qwen3-0.6B");
  try {
    const url = `${server.url}/v1/chat/completions`;
    log(`warm-up: ${WARMUP} requests`);
    await measureConcurrent(
      () => streamOnce(url, body).then(() => {}),
      CONCURRENCY,
      WARMUP,
      60_000,
    );
    const inspector = await connectInspector(await withTimeout(wsUrl.promise, 5_000, "ws url"));
    await inspector.send("Profiler.enable");
    await inspector.send("Profiler.setSamplingInterval", { interval: SAMPLING_US });
    await inspector.send("Profiler.start");
    const res = await measureConcurrent(
      () => streamOnce(url, body).then(() => {}),
      CONCURRENCY,
      REQUESTS,
      30_000,
    );
    const { profile } = await inspector.send<{ profile: Profile }>("Profiler.stop");
    inspector.close();
    log(
      `${
        rate(res.perSecond)
      } req/s while profiling (${res.ops} requests, ${CONCURRENCY} in flight)`,
    );
    if (outPath) await Deno.writeTextFile(outPath, JSON.stringify(profile));
    console.log(report(profile, res.ops));
  } finally {
    await server.stop();
  }
  log("timing each stage alone, in this process");
  const rows = await measureStages({ body, budgetMs: 400 });
  const lines = [
    "",
    "each stage alone, tight loop in process (us per request, median of 7 batches)",
  ];
  for (const r of rows) lines.push(`${r.us.toFixed(1).padStart(7)}  ${r.label}`);
  console.log(lines.join("\n"));
}

if (import.meta.main) {
  try {
    await main();
    Deno.exit(0);
  } catch (err) {
    console.error("[profile] failed:", err);
    Deno.exit(1);
  }
}
