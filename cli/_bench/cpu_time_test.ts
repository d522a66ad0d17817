import assert from "node:assert/strict";
import { cpuSeconds, cpuWarnings, MACHINE_BUSY_SHARE, SERVER_BUSY_CORES } from "./cpu_time.ts";

Deno.test("cpuWarnings: a busy server or machine is named per mode with what to do; idle runs and NaN say nothing", () => {
  const lines = cpuWarnings({
    kv: { server_cores: 0.7, machine_cores: 1 },
    "round-robin": { server_cores: 0.1, machine_cores: MACHINE_BUSY_SHARE * 2 + 0.1 },
    random: { server_cores: SERVER_BUSY_CORES - 0.01, machine_cores: 1 },
    off_linux: { server_cores: Number.NaN, machine_cores: Number.NaN },
  }, 2);
  assert.equal(lines.length, 2);
  assert.match(lines[0]!, /^warning: kv: the server process was busy 0\.70 of a core/);
  assert.match(lines[0]!, /--engine-speedup 0\.25/);
  assert.match(lines[0]!, /--simulate/);
  assert.match(lines[1]!, /^warning: round-robin: the machine was busy 1\.80 of its 2 cores/);
});

Deno.test("cpuSeconds: this process's own CPU time grows with work (Linux); NaN for no such process", () => {
  if (Deno.build.os !== "linux") return;
  const before = cpuSeconds("self");
  const until = performance.now() + 200;
  let x = 0;
  while (performance.now() < until) x += Math.sqrt(x + 1);
  assert.ok(x > 0);
  assert.ok(cpuSeconds("self") > before, "CPU time grew");
  assert.ok(Number.isNaN(cpuSeconds(2 ** 30)));
});
