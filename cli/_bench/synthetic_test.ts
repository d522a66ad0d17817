import assert from "node:assert/strict";
import { InvalidArgumentError } from "../../runtime/errors.ts";
import {
  parseSyntheticSpec,
  splitTraceList,
  synthesizeTrace,
  SYNTHETIC_PRESETS,
} from "./synthetic.ts";
import { prefixCeiling, promptTokens } from "./trace.ts";

Deno.test("synthesizeTrace: the same seed gives the same trace, another seed another", () => {
  const a = synthesizeTrace(parseSyntheticSpec("multi-tenant,seed=7"));
  const b = synthesizeTrace(parseSyntheticSpec("multi-tenant,seed=7"));
  const c = synthesizeTrace(parseSyntheticSpec("multi-tenant,seed=8"));
  assert.deepEqual(a, b);
  assert.notDeepEqual(a, c);
  assert.ok(a.every((r, i) => i === 0 || r.timestamp >= a[i - 1]!.timestamp), "sorted by arrival");
});

Deno.test("synthesizeTrace: a tenant's users share its system prompt, a conversation its history", () => {
  const trace = synthesizeTrace({
    ...SYNTHETIC_PRESETS["multi-tenant"]!,
    seed: 3,
    tenants: 2,
    usersPerTenant: 3,
    turns: 3,
    systemTokens: 400,
  });
  // Every prompt's whole blocks are a prefix of a later turn's blocks, or nothing is: each
  // request's first block is one of the two tenants' first blocks.
  const firsts = new Set(trace.map((r) => r.hashIds[0]));
  assert.equal(firsts.size, 2, "two tenants, two distinct first blocks");
  // Turn by turn: a request's whole blocks reappear as the start of some later request.
  let extended = 0;
  for (const [i, r] of trace.entries()) {
    const whole = r.hashIds.slice(0, Math.floor(r.inputLength / 16));
    if (whole.length <= 40) continue; // at most the system prompt (<= 600 tokens): any user shares it
    const later = trace.slice(i + 1).find((q) =>
      whole.every((id, k) => q.hashIds[k] === id) && q.inputLength > r.inputLength
    );
    if (later) extended++;
  }
  assert.ok(extended > 0, "some conversation grew turn by turn");
  // Equal ids give equal tokens: two users of one tenant agree on the system prompt's tokens.
  const [x, y] = trace.filter((r) => r.hashIds[0] === trace[0]!.hashIds[0]);
  assert.deepEqual(promptTokens(x!).slice(0, 192), promptTokens(y!).slice(0, 192));
});

Deno.test("the multi-tenant presets leave most of each prompt cacheable; no-sharing none", () => {
  for (const name of ["multi-tenant", "long-system", "many-tenants"]) {
    const c = prefixCeiling(synthesizeTrace({ ...SYNTHETIC_PRESETS[name]!, seed: 1 }));
    assert.ok(c.tokens > 0.5, `${name}: ceiling ${c.tokens}`);
  }
  const none = prefixCeiling(synthesizeTrace({ ...SYNTHETIC_PRESETS["no-sharing"]!, seed: 1 }));
  assert.equal(none.tokens, 0);
});

Deno.test("parseSyntheticSpec names what is wrong", () => {
  assert.equal(parseSyntheticSpec("no-sharing,seed=4").seed, 4);
  assert.equal(parseSyntheticSpec("tenants=3").tenants, 3);
  assert.throws(() => parseSyntheticSpec("nope"), /unknown synthetic trace "nope"/);
  assert.throws(() => parseSyntheticSpec("tenants=x"), InvalidArgumentError);
  assert.throws(() => parseSyntheticSpec("users=3"), /unknown synthetic trace parameter "users"/);
});

Deno.test("splitTraceList keeps each trace's parameters with it", () => {
  assert.deepEqual(splitTraceList("mooncake,multi-tenant,seed=3,sessionsPerS=4,long-system"), [
    "mooncake",
    "multi-tenant,seed=3,sessionsPerS=4",
    "long-system",
  ]);
  assert.deepEqual(splitTraceList(" many-tenants , seed=7 "), ["many-tenants,seed=7"]);
  assert.deepEqual(splitTraceList(""), []);
  assert.throws(() => splitTraceList("seed=3,mooncake"), InvalidArgumentError);
});
