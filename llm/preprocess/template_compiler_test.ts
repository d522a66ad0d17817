import assert from "node:assert/strict";
import fc from "fast-check";
import { Template } from "@huggingface/jinja";
import { Bail, compileTemplate } from "./template_compiler.ts";
import { ChatTemplate } from "./chat_template.ts";
import { qwen3ChatTemplate } from "../../tests/_helpers/qwen3.ts";

type Outcome = { ok: true; text: string } | { ok: false };

function interpret(template: Template, vars: Record<string, unknown>): Outcome {
  try {
    return { ok: true, text: template.render(vars) };
  } catch {
    return { ok: false };
  }
}

/**
 * Renders with both; the compiled render must bail or give the interpreter's text.
 * @returns whether the compiled render answered (did not bail)
 */
function agree(source: string, vars: Record<string, unknown>): boolean {
  const template = new Template(source);
  const compiled = compileTemplate(template.parsed);
  assert.ok(compiled, `compiles: ${source}`);
  let text: string;
  try {
    text = compiled(vars);
  } catch (err) {
    if (err instanceof Bail) return false;
    throw err;
  }
  const expected = interpret(template, vars);
  assert.ok(
    expected.ok,
    `the interpreter fails where the compiled render gave ${JSON.stringify(text)}: ${source} ${
      JSON.stringify(vars)
    }`,
  );
  assert.equal(text, expected.text, `${source} with ${JSON.stringify(vars)}`);
  return true;
}

// Values of the kinds templates see: strings that matter to chat templates, numbers, flags,
// none, missing values, and lists and mappings of them.
const scalar = fc.oneof(
  fc.constantFrom("", "x", " x\n", "<think>", "a</think>b", "\n", "b", "c", "1", "user"),
  fc.string({ maxLength: 6 }),
  fc.integer({ min: -5, max: 5 }),
  fc.constantFrom(0, -0, 1.5, -2.25, 2 ** 53),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
);
const value = fc.letrec((tie) => ({
  v: fc.oneof(
    { depthSize: "small" },
    { arbitrary: scalar, weight: 4 },
    { arbitrary: tie("list"), weight: 1 },
    { arbitrary: tie("map"), weight: 1 },
  ),
  list: fc.array(tie("v"), { maxLength: 4 }),
  map: fc.dictionary(fc.constantFrom("b", "c", "role", "get", "items", "length", "1"), tie("v"), {
    maxKeys: 3,
  }),
})).v;
const vars = fc.record({ a: value, b: value, c: value });

const int = fc.integer({ min: -5, max: 5 });
const str = fc.oneof(
  fc.constantFrom("", "x", " x\n", "<think>", "a</think>b", "\n", "b", "c", "user"),
  fc.string({ maxLength: 6 }),
);
const prim = fc.oneof(int, str, fc.boolean());
const of = <A, B, C>(a: fc.Arbitrary<A>, b: fc.Arbitrary<B>, c: fc.Arbitrary<C>) =>
  fc.record({ a, b, c });
const ints = of(int, int, int);
const strs = of(str, str, str);
const prims = of(prim, prim, prim);
const list = fc.array(prim, { maxLength: 4 });
const lists = of(list, list, prim);
const map = fc.dictionary(fc.constantFrom("b", "c", "role", "x", "1"), prim, { maxKeys: 3 });
const maps = of(map, fc.constantFrom("b", "c", "x"), prim);
const pairs = of(fc.array(fc.tuple(prim, prim), { maxLength: 3 }), prim, prim);

// Each construct with values of the types it is meant for (the compiled path must answer
// most of those) and with values of any type (where it must hand over when unsure).
// A third element: how many of 200 typed renders the compiled path must answer (default 100).
const SNIPPETS: [string, fc.Arbitrary<Record<string, unknown>>, number?][] = [
  ["{{ a }}|{{ b }}", prims],
  ["{{ a ~ b }}", prims],
  ["{{ a + b }}", prims],
  ["{{ a - b }}{{ a * b }}{{ a % b }}", ints],
  ["{{ a == b }}{{ a != b }}", prims],
  ["{{ a < b }}{{ a >= b }}{{ a > b }}{{ a <= b }}", ints],
  ["{{ a in b }}{{ a not in b }}", strs],
  ["{{ a in b }}{{ a not in b }}", of(prim, list, prim)],
  ["{{ a in b }}{{ a not in b }}", of(str, map, prim)],
  ["{{ a and b }}|{{ a or b }}|{{ not a }}", prims],
  ["{{ -a }}{{ +b }}", of(int, fc.boolean(), int)],
  ["{{ a if b else c }}|{{ a if b }}", prims],
  [
    "{{ a is defined }}{{ a is undefined }}{{ a is none }}{{ a is string }}{{ a is number }}",
    prims,
  ],
  ["{{ a is integer }}{{ a is boolean }}{{ a is true }}{{ a is false }}{{ a is not none }}", prims],
  ["{{ a is mapping }}{{ a is iterable }}{{ a is sequence }}{{ (a, b) is iterable }}", maps],
  ["{{ a | length }}", strs],
  ["{{ a | length }}", lists],
  ["{{ a | length }}", maps],
  ["{{ a | tojson }}", maps],
  ["{{ a | tojson }}", lists],
  ["{{ a | tojson(indent=2) }}", maps],
  ["{{ a | trim }}{{ a | upper }}{{ a | lower }}", strs],
  ["{{ a | first }}{{ a | last }}", lists],
  ["{{ a | join(', ') }}", of(fc.array(str, { maxLength: 3 }), prim, prim)],
  [
    "{{ a | default('d') }}|{{ a | safe }}|{{ b | default(c) }}",
    of(prim, fc.constant(undefined), prim),
  ],
  ["{{ a[b] }}", of(list, int, prim)],
  ["{{ a[b] }}", of(map, str, prim)],
  ["{{ a[1:] }}|{{ a[::-1] }}|{{ a[:-1] }}|{{ a[b:c] }}|{{ a[::b] }}", of(str, int, int)],
  ["{{ a[1:] | length }}|{{ (a[::-1])[0] }}|{{ a[b:c] | length }}", of(list, int, int)],
  ["{{ a.length }}{{ a.b }}{{ a[0] }}{{ a[-1] }}", strs],
  ["{{ a.b }}{{ a.c }}{{ a.x }}", maps],
  ["{{ a.startswith(b) }}{{ a.endswith(('x', b)) }}", strs],
  [
    "{{ a.split(b)[0] }}|{{ a.split(b)[-1] }}",
    of(str, fc.constantFrom("</think>", "x", "\n"), str),
  ],
  [
    "{{ a.strip() }}|{{ a.lstrip() }}|{{ a.rstrip('\\n') }}|{{ a.upper() }}{{ a.capitalize() }}",
    strs,
  ],
  ["{{ a.get(b) }}|{{ a.get('b', 'z') }}|{{ a.keys() | length }}", maps],
  ["{% for k, v in a.items() %}{{ k }}={{ v }};{% endfor %}", maps],
  ["{% for k in a %}{{ k }}{% endfor %}{% for v in a.values() %}{{ v }}{% endfor %}", maps],
  [
    "{% for x in a %}{{ loop.index }}{{ x }}{{ loop.first }}{{ loop.last }}{% else %}empty{% endfor %}",
    lists,
  ],
  [
    "{% for x in a %}{{ loop.revindex }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{% endfor %}",
    lists,
  ],
  ["{% for x in a if x %}{{ loop.index0 }}:{{ x }}{% endfor %}", lists],
  [
    "{% for x in a %}{% if x == b %}{% continue %}{% endif %}{{ x }}" +
    "{% if loop.index > 1 %}{% break %}{% endif %}{% else %}E{% endfor %}",
    of(list, prim, prim),
  ],
  [
    "{% set ns = namespace(v=c, w=1) %}{% for x in a %}{% set ns.v = x %}{% endfor %}{{ ns.v }}{{ ns.w }}",
    lists,
  ],
  ["{% set y = c %}{% for x in a %}{% set y = x %}{% endfor %}{{ y }}", lists],
  [
    "{% set p, q = a %}{{ p }}{{ q }}",
    of(fc.array(prim, { minLength: 2, maxLength: 2 }), prim, prim),
  ],
  ["{% set t %}in{{ a }}{% endset %}[{{ t }}]", prims],
  [
    "{% for x in a %}{% for y in a %}{{ loop.index }}{{ x }}{{ y }}{% endfor %}{{ loop.index }}{% endfor %}",
    lists,
  ],
  // The interpreter refuses to unpack a tuple in a for loop: always handed over.
  ["{% for p, q in [(1, a), (b, 2)] %}{{ p }}{{ q }}{% endfor %}", prims, 0],
  ["{% for p, q in a %}{{ p }}{{ q }}{% endfor %}", pairs],
  ["{{ a | items | length }}|{{ [b, c] | tojson }}|{{ (b, c) | length }}", maps],
  ["{{ ([a] + [b]) | length }}{{ (a + [b]) | length }}", of(list, prim, prim)],
  ["{% if a %}{{ raise_exception('boom') }}{% endif %}ok", prims, 40],
  ["{% if a %}A{% elif b %}B{% else %}C{% endif %}", prims],
  ["{{ loop }}{{ a ~ b ~ c }}", prims],
  ["{%- if a -%}\n  x\n{%- endif %}\n{# comment #} y", prims],
];

Deno.test("compiled templates render what the interpreter renders, or hand over to it", () => {
  for (const [source, typed, least = 100] of SNIPPETS) {
    let answered = 0;
    fc.assert(
      fc.property(typed, (v) => {
        if (agree(source, v)) answered++;
      }),
      { numRuns: 200, seed: 42 },
    );
    // With the values a construct is for, the compiled path must do the rendering, or the
    // comparison checks little.
    assert.ok(answered >= least, `compiled renders answered ${answered} of 200: ${source}`);
    fc.assert(fc.property(vars, (v) => void agree(source, v)), { numRuns: 200, seed: 43 });
  }
});

Deno.test("the compiled Qwen3 template renders every conversation as the interpreter does", () => {
  const source = qwen3ChatTemplate();
  const text = fc.oneof(
    fc.constantFrom("", "Hi", "<think>\nr\n</think>\n\nA", "<tool_response>x</tool_response>"),
    fc.string({ maxLength: 8 }),
  );
  const call = fc.record({
    type: fc.constant("function"),
    function: fc.record({
      name: fc.constantFrom("f", "get_weather"),
      arguments: fc.oneof(fc.string({ maxLength: 5 }), fc.dictionary(fc.string(), fc.integer())),
    }),
  });
  const message = fc.oneof(
    fc.record({ role: fc.constantFrom("user", "system", "tool"), content: text }),
    fc.record(
      {
        role: fc.constant("assistant"),
        content: text,
        reasoning_content: text,
        tool_calls: fc.array(call, { maxLength: 2 }),
      },
      { requiredKeys: ["role", "content"] },
    ),
  );
  const conversation = fc.record({
    messages: fc.array(message, { minLength: 1, maxLength: 6 }),
    add_generation_prompt: fc.boolean(),
    enable_thinking: fc.option(fc.boolean(), { nil: undefined }),
    tools: fc.option(fc.constant([{ type: "function", function: { name: "f", parameters: {} } }]), {
      nil: undefined,
    }),
  });
  let answered = 0;
  fc.assert(
    fc.property(conversation, (c) => {
      const vars: Record<string, unknown> = { bos_token: "", eos_token: "", ...c };
      if (agree(source, vars)) answered++;
    }),
    { numRuns: 500, seed: 7 },
  );
  // Chat templates are the point of the compiler: none of these needs the interpreter.
  assert.equal(answered, 500);
});

// Chat templates in the styles of other model families (written for this test after their
// shapes: system-message extraction, alternation checks, role renames, date strings).
const FAMILY_TEMPLATES: Record<string, string> = {
  chatml: "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + " +
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}" +
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
  llama3: "{{- bos_token }}\n" +
    "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}\n" +
    "{%- if not tools is defined %}{%- set tools = none %}{%- endif %}\n" +
    "{%- if messages[0]['role'] == 'system' %}\n" +
    "  {%- set system_message = messages[0]['content']|trim %}\n" +
    "  {%- set messages = messages[1:] %}\n" +
    "{%- else %}{%- set system_message = '' %}{%- endif %}\n" +
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n" +
    "{%- if tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}\n" +
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}{{- system_message }}{{- '<|eot_id|>' }}\n" +
    "{%- for message in messages %}\n" +
    "  {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + " +
    "message['content'] | trim + '<|eot_id|>' }}\n" +
    "{%- endfor %}\n" +
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}" +
    "{%- endif %}",
  mistral: "{%- if messages[0]['role'] == 'system' %}\n" +
    "  {%- set system_message = messages[0]['content'] %}{%- set loop_messages = messages[1:] %}\n" +
    "{%- else %}{%- set loop_messages = messages %}{%- endif %}\n" +
    "{{- bos_token }}\n" +
    "{%- for message in loop_messages %}\n" +
    "  {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n" +
    "    {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}\n" +
    "  {%- endif %}\n" +
    "  {%- if message['role'] == 'user' %}\n" +
    "    {%- if loop.first and system_message is defined %}\n" +
    "      {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n" +
    "    {%- else %}{{- ' [INST] ' + message['content'] + ' [/INST]' }}{%- endif %}\n" +
    "  {%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}\n" +
    "  {%- else %}{{- raise_exception('Only user and assistant roles are supported') }}\n" +
    "  {%- endif %}\n" +
    "{%- endfor %}",
  gemma: "{{ bos_token }}{% if messages[0]['role'] == 'system' %}" +
    "{{ raise_exception('System role not supported') }}{% endif %}" +
    "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}" +
    "{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}" +
    "{% else %}{% set role = message['role'] %}{% endif %}" +
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}" +
    "{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
};

Deno.test("compiled templates of other families' styles render as the interpreter does", () => {
  const message = fc.record({
    role: fc.constantFrom("system", "user", "assistant", "tool"),
    content: fc.oneof(fc.constantFrom("", " hi ", "a\nb"), fc.string({ maxLength: 8 })),
  });
  const text = fc.oneof(fc.constantFrom("", " hi ", "a\nb"), fc.string({ maxLength: 8 }));
  // Half the conversations alternate user/assistant (after an optional system message), as
  // the strict templates demand; the others are any roles in any order.
  const alternating = fc.tuple(fc.boolean(), fc.array(text, { minLength: 1, maxLength: 5 })).map((
    [system, texts],
  ) => [
    ...(system ? [{ role: "system", content: "Be brief." }] : []),
    ...texts.map((content, i) => ({ role: i % 2 === 0 ? "user" : "assistant", content })),
  ]);
  const conversation = fc.record({
    messages: fc.oneof(fc.array(message, { minLength: 1, maxLength: 5 }), alternating),
    add_generation_prompt: fc.boolean(),
    bos_token: fc.constantFrom("", "<s>", "<|begin_of_text|>"),
    eos_token: fc.constantFrom("", "</s>"),
  }, { requiredKeys: ["messages", "add_generation_prompt", "bos_token", "eos_token"] });
  for (const [family, source] of Object.entries(FAMILY_TEMPLATES)) {
    let answered = 0;
    fc.assert(
      fc.property(conversation, (c) => {
        if (agree(source, c)) answered++;
      }),
      { numRuns: 300, seed: 3 },
    );
    // Raised errors (alternation, roles) go to the interpreter; the rest must not.
    assert.ok(answered >= 100, `${family}: compiled renders answered ${answered} of 300`);
  }
});

Deno.test("templates using what the compiler does not cover stay with the interpreter", () => {
  for (
    const source of [
      "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}",
      "{{ 1.5 }}",
      "{{ a / 2 }}",
      "{% for i in range(3) %}{{ i }}{% endfor %}",
      "{{ {'a': 1} }}",
      "{{ a | odd_filter }}",
      "{{ a is odd }}",
      "{% filter upper %}x{% endfilter %}",
      "{{ namespace }}",
    ]
  ) {
    assert.equal(compileTemplate(new Template(source).parsed), undefined, source);
  }
});

Deno.test("ChatTemplate compiles Qwen3's template and still words template errors as the interpreter", () => {
  assert.equal(new ChatTemplate(qwen3ChatTemplate()).compiled, true);
  const strict = new ChatTemplate(
    "{% for m in messages %}{% if m.role == 'user' and loop.index0 % 2 == 1 %}" +
      "{{ raise_exception('roles must alternate') }}{% endif %}{{ m.content }}{% endfor %}",
  );
  assert.equal(strict.compiled, true);
  assert.equal(strict.render({ messages: [{ role: "user", content: "a" }] }), "a");
  assert.throws(
    () =>
      strict.render({
        messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }],
      }),
    /roles must alternate/,
  );
});
