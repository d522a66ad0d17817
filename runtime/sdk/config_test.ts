import assert from "node:assert/strict";
import {
  mergeConfig,
  parseConfigFlags,
  parseConfigJson,
  parseConfigYaml,
  parseFlagValue,
  SERVICE_CONFIG_ENV,
  ServiceConfig,
} from "./config.ts";
import { ConfigError, ConfigKeyMissingError } from "./errors.ts";

Deno.test("parseFlagValue reads booleans, numbers, null, JSON and plain strings", () => {
  assert.equal(parseFlagValue("true"), true);
  assert.equal(parseFlagValue("false"), false);
  assert.equal(parseFlagValue("null"), null);
  assert.equal(parseFlagValue("0.9"), 0.9);
  assert.equal(parseFlagValue("-3"), -3);
  assert.equal(parseFlagValue("1e3"), 1000);
  assert.deepEqual(parseFlagValue('{"a":[1,2]}'), { a: [1, 2] });
  assert.deepEqual(parseFlagValue("[1,2]"), [1, 2]);
  assert.equal(parseFlagValue('"007"'), "007");
  assert.equal(parseFlagValue("llama-3-70b"), "llama-3-70b");
  assert.throws(
    () => parseFlagValue("{nope", "A.b"),
    (e: unknown) => e instanceof ConfigError && /--A\.b/.test(e.message),
  );
});

Deno.test("parseConfigFlags nests dotted keys and leaves other arguments alone", () => {
  const { config, rest } = parseConfigFlags([
    "graph.ts:Frontend",
    "--Worker.temperature=0.9",
    "-f",
    "c.yaml",
    "--Worker.ServiceArgs.workers=4",
    "--Worker.ServiceArgs.resources.gpu=2",
    "--Worker.trust",
    "--Worker.model_name",
    "gpt-2",
    "--dry-run",
    '--Other.cfg={"x":1}',
  ]);
  assert.deepEqual(rest, ["graph.ts:Frontend", "-f", "c.yaml", "--dry-run"]);
  assert.deepEqual(config, {
    Worker: {
      temperature: 0.9,
      ServiceArgs: { workers: 4, resources: { gpu: 2 } },
      trust: true,
      model_name: "gpt-2",
    },
    Other: { cfg: { x: 1 } },
  });
});

Deno.test("parseConfigYaml reads service mappings and rejects other shapes", () => {
  const data = parseConfigYaml("A:\n  ServiceArgs:\n    workers: 2\n  x: hi\nB:\n", "c.yaml");
  assert.deepEqual(data, { A: { ServiceArgs: { workers: 2 }, x: "hi" }, B: {} });
  assert.deepEqual(parseConfigYaml(""), {});
  assert.throws(() => parseConfigYaml("- 1\n- 2", "c.yaml"), /c\.yaml: expected a mapping/);
  assert.throws(() => parseConfigYaml("A: 3", "c.yaml"), /settings of A must be a mapping/);
  assert.throws(() => parseConfigYaml("A: [", "c.yaml"), /c\.yaml is not valid YAML/);
  assert.throws(() => parseConfigJson("{"), /DYNAMO_SERVICE_CONFIG is not valid JSON/);
});

Deno.test("mergeConfig: later layers win key by key, arrays replace", () => {
  const yaml = { A: { ServiceArgs: { workers: 2, resources: { gpu: 1, cpu: "4" } }, l: [1, 2] } };
  const cli = { A: { ServiceArgs: { resources: { gpu: 4 } }, l: [3] } };
  assert.deepEqual(mergeConfig(yaml, cli), {
    A: { ServiceArgs: { workers: 2, resources: { gpu: 4, cpu: "4" } }, l: [3] },
  });
  assert.deepEqual(yaml.A.ServiceArgs.resources, { gpu: 1, cpu: "4" }, "inputs unchanged");
});

Deno.test("ServiceConfig.get returns a service's settings, one key, or the fallback", () => {
  const c = new ServiceConfig({ W: { model_name: "m", ServiceArgs: { workers: 2 } } });
  assert.deepEqual(c.get("W"), { model_name: "m", ServiceArgs: { workers: 2 } });
  assert.deepEqual(c.get("Nope"), {});
  assert.equal(c.get("W", "model_name"), "m");
  assert.equal(c.get("W", "temperature", 0.7), 0.7);
  assert.deepEqual(c.params("W"), { model_name: "m" });
  assert.deepEqual(c.serviceArgs("W"), { workers: 2 });
});

Deno.test("ServiceConfig.require names the service and key that are missing", () => {
  const c = new ServiceConfig({ W: { api_key: "k", empty: null } });
  assert.equal(c.require("W", "api_key"), "k");
  for (const [service, key] of [["W", "model"], ["Nope", "api_key"], ["W", "empty"]]) {
    assert.throws(() => c.require(service!, key!), (e: unknown) => {
      assert.ok(e instanceof ConfigKeyMissingError);
      assert.equal(e.service, service);
      assert.equal(e.key, key);
      assert.match(e.message, new RegExp(`${service}\\.${key}`));
      return true;
    });
  }
});

Deno.test("ServiceConfig.asArgs turns settings into flags, filtered by prefix", () => {
  const c = new ServiceConfig({
    W: {
      lib_max_model_len: 4096,
      lib_enforce_eager: true,
      lib_disabled: false,
      lib_none: null,
      lib_json: { a: 1 },
      lib_model: "m",
      other: 1,
      ServiceArgs: { workers: 2 },
    },
  });
  assert.deepEqual(c.asArgs("W", { prefix: "lib_" }), [
    "--max-model-len",
    "4096",
    "--enforce-eager",
    "--json",
    '{"a":1}',
    "--model",
    "m",
  ]);
  assert.deepEqual(new ServiceConfig({ W: { a: 1, b_c: "x" } }).asArgs("W"), [
    "--a",
    "1",
    "--b-c",
    "x",
  ]);
  assert.deepEqual(c.asArgs("Nope"), []);
});

Deno.test("ServiceConfig.getInstance reads DYNAMO_SERVICE_CONFIG once", () => {
  const before = Deno.env.get(SERVICE_CONFIG_ENV);
  const saved = ServiceConfig.setInstance(undefined);
  try {
    Deno.env.set(SERVICE_CONFIG_ENV, JSON.stringify({ W: { x: 1 } }));
    const c = ServiceConfig.getInstance();
    assert.equal(c.get("W", "x"), 1);
    Deno.env.set(SERVICE_CONFIG_ENV, JSON.stringify({ W: { x: 2 } }));
    assert.equal(ServiceConfig.getInstance(), c, "cached");
  } finally {
    if (before === undefined) Deno.env.delete(SERVICE_CONFIG_ENV);
    else Deno.env.set(SERVICE_CONFIG_ENV, before);
    ServiceConfig.setInstance(saved);
  }
});
