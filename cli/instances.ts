// `dynamo instances`: lists the endpoint instances registered in discovery.

import { DistributedRuntime } from "../mod.ts";
import { INSTANCE_PREFIX as PREFIX, instancePrefix } from "../runtime/keys.ts";
import {
  type Command,
  ExitCode,
  type Io,
  parseCommandArgs,
  parsePath,
  UsageError,
} from "./_common.ts";

const usage = `Usage: dynamo instances [NAMESPACE[/COMPONENT[/ENDPOINT]]] [--json]

Lists the endpoint instances registered in discovery (keys under ${PREFIX}), one line
each: the endpoint path and the instance id. With ETCD_ENDPOINTS / NATS_SERVER set it
reads that etcd; otherwise the embedded in-memory discovery of this process, which is
always empty.

Options:
  --json       print a JSON array of instance records instead
  -h, --help   show this help`;

/** One listed instance. */
interface InstanceRow {
  path: string;
  instance_id: string;
  record: unknown;
}

async function run(args: string[], io: Io): Promise<number> {
  const { values, positionals } = parseCommandArgs("instances", args, {
    json: { type: "boolean" },
    help: { type: "boolean", short: "h" },
  });
  if (values.help) {
    io.out(usage);
    return ExitCode.Ok;
  }
  if (positionals.length > 1) {
    throw new UsageError(
      `takes at most one path, got ${positionals.length}: ${positionals.join(" ")}`,
      "instances",
    );
  }
  const parts = positionals[0] === undefined ? [] : parsePath("instances", positionals[0], 1);
  const prefix = instancePrefix(parts[0], parts[1], parts[2]);

  const runtime = await DistributedRuntime.fromEnv();
  let rows: InstanceRow[];
  try {
    const kvs = await runtime.discovery.list(prefix);
    rows = kvs.map(({ key, value }) => {
      const rest = key.slice(PREFIX.length);
      const cut = rest.lastIndexOf("/");
      let record: unknown = value;
      try {
        record = JSON.parse(value);
      } catch {
        // not JSON: show the raw value
      }
      return { path: rest.slice(0, cut), instance_id: rest.slice(cut + 1), record };
    });
  } finally {
    await runtime.shutdown();
  }

  if (values.json) {
    io.out(JSON.stringify(rows.map((r) => r.record), null, 2));
  } else if (rows.length === 0) {
    const where = runtime.discovery.kind === "memory"
      ? " (embedded discovery: set ETCD_ENDPOINTS to list a real cluster)"
      : "";
    io.err(`no instances under ${prefix}${where}`);
  } else {
    const width = Math.max(...rows.map((r) => r.path.length));
    for (const r of rows) io.out(`${r.path.padEnd(width)}  ${r.instance_id}`);
  }
  return ExitCode.Ok;
}

/** The `instances` subcommand. */
export const instancesCommand: Command = {
  name: "instances",
  summary: "list registered endpoint instances",
  usage,
  run,
};
