"""OpenAI API conformance with the official Python `openai` package.

Drives a running server (`dynamo run ...`) through the named cases and prints one line per
case, `ok CASE: detail` or `FAIL CASE: why`, then `N passed, N failed`; exit 0 only when every
case passed. The cases and their names are those of scripts/conformance/openai_npm.ts: adding
a case is one function here (in CASES) and one there.

    python scripts/conformance/openai_python.py --base-url http://127.0.0.1:8000 \
        --model Qwen3-0.6B --cases chat,stream,logprobs,seed,errors

Run it with the venv of scripts/setup_conformance.sh (openai pinned there).
"""

import argparse
import json
import math
import sys
import urllib.error
import urllib.request

import openai

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

# The echo engine writes its prompt back: a system message holding a call makes a call.
SCRIPTED_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)
CALL_MESSAGES = [
    {"role": "system", "content": SCRIPTED_CALL},
    {"role": "user", "content": "What is the weather in Paris?"},
]


class Ctx:
    def __init__(self, client, model, base_url):
        self.client = client
        self.model = model
        self.base_url = base_url


def check(cond, why):
    if not cond:
        raise AssertionError(why)


def only(items):
    check(len(items) == 1, f"one item, got {len(items)}")
    return items[0]


def usage_adds_up(usage):
    check(usage is not None, "usage is present")
    check(usage.prompt_tokens > 0, "prompt_tokens > 0")
    check(usage.completion_tokens >= 0, "completion_tokens >= 0")
    check(
        usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
        f"total_tokens {usage.total_tokens} != prompt + completion",
    )


def extra(obj, name):
    """A field the openai types do not declare (reasoning_content), or None."""
    value = getattr(obj, name, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(name)
    return value


def case_chat(ctx):
    """A non-streamed chat answer has the OpenAI shape and consistent usage."""
    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    check(r.object == "chat.completion", f"object {r.object}")
    check(r.model == ctx.model, f"model {r.model}")
    choice = only(r.choices)
    check(choice.message.role == "assistant", "role assistant")
    check(isinstance(choice.message.content, str), "content is a string")
    check(choice.finish_reason in ("stop", "length"), f"finish {choice.finish_reason}")
    usage_adds_up(r.usage)
    return f"{r.usage.completion_tokens} tokens, finish {choice.finish_reason}"


def case_stream(ctx):
    """A streamed chat answer: deltas, one finish reason, and a last usage-only chunk."""
    stream = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        check(chunk.object == "chat.completion.chunk", f"object {chunk.object}")
        if chunk.usage is not None:
            check(len(chunk.choices) == 0, "the usage chunk has no choices")
            usage = chunk.usage
            continue
        choice = only(chunk.choices)
        text += choice.delta.content or ""
        if choice.finish_reason:
            check(finish is None, "one finish_reason")
            finish = choice.finish_reason
    check(finish in ("stop", "length"), f"finish_reason {finish}")
    usage_adds_up(usage)
    return f"{chunks} chunks, {usage.completion_tokens} tokens"


def case_completions(ctx):
    """A legacy completion (/v1/completions), not streamed."""
    r = ctx.client.completions.create(model=ctx.model, prompt="Once upon a time", max_tokens=6)
    check(r.object == "text_completion", f"object {r.object}")
    check(isinstance(only(r.choices).text, str), "text is a string")
    usage_adds_up(r.usage)
    return f"{r.usage.completion_tokens} tokens"


def case_completions_stream(ctx):
    """A streamed legacy completion: text deltas, a finish reason, the usage chunk."""
    stream = ctx.client.completions.create(
        model=ctx.model,
        prompt="Once upon a time",
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    finish, usage = None, None
    for chunk in stream:
        check(chunk.object == "text_completion", f"object {chunk.object}")
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            finish = c.finish_reason or finish
    check(finish in ("stop", "length"), f"finish_reason {finish}")
    usage_adds_up(usage)
    return f"finish {finish}, {usage.completion_tokens} tokens"


def case_models(ctx):
    """The model list names the model, and the model can be fetched by its id."""
    ids = [m.id for m in ctx.client.models.list()]
    check(ctx.model in ids, f"{ctx.model} in {ids}")
    check(ctx.client.models.retrieve(ctx.model).id == ctx.model, "retrieve by id")
    return f"{len(ids)} model(s)"


def case_n_choices(ctx):
    """`n: 2` gives two choices, indexed 0 and 1, and usage counts both."""
    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, n=2, seed=5
    )
    check(sorted(c.index for c in r.choices) == [0, 1], f"indexes {[c.index for c in r.choices]}")
    usage_adds_up(r.usage)
    return f"2 choices, {r.usage.completion_tokens} tokens"


def case_stop(ctx):
    """A stop string ends the answer before it, with finish_reason "stop" (echo engine)."""
    r = ctx.client.completions.create(
        model=ctx.model, prompt="alpha beta gamma delta", stop=[" gamma"], max_tokens=20
    )
    choice = only(r.choices)
    check(choice.finish_reason == "stop", f"finish {choice.finish_reason}")
    check(choice.text == "alpha beta", f"text {choice.text!r}")
    return f"stopped at ' gamma': {choice.text!r}"


def case_logprobs(ctx):
    """Logprobs: one entry per token, each <= 0, alternatives sorted, greedy picks the best."""
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Name a colour."}],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    choice = only(r.choices)
    check(choice.logprobs is not None, "choices[0].logprobs is set")
    entries = choice.logprobs.content
    check(len(entries) == r.usage.completion_tokens, "one entry per generated token")
    for e in entries:
        check(isinstance(e.token, str), "token is a string")
        check(math.isfinite(e.logprob) and e.logprob <= 0, f"logprob {e.logprob}")
        check(1 <= len(e.top_logprobs) <= 3, "1..3 alternatives")
        tops = [t.logprob for t in e.top_logprobs]
        check(tops == sorted(tops, reverse=True), f"alternatives sorted: {tops}")
        check(e.logprob >= tops[0] - 1e-4, f"greedy token {e.token!r} below the best alternative")
    return f"{len(entries)} entries, first {entries[0].logprob:.3f}" if entries else "0 entries"


def sampled(ctx, seed):
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Write a word."}],
        max_tokens=12,
        temperature=1,
        seed=seed,
    )
    return only(r.choices).message.content or ""


def case_seed(ctx):
    """The same seed at temperature 1 gives the same answer."""
    a, b = sampled(ctx, 1234), sampled(ctx, 1234)
    check(a == b, f"same seed, different answers: {a!r} vs {b!r}")
    return f"repeatable: {a[:30]!r}"


def case_seed_differs(ctx):
    """Different seeds give different answers (engines whose sampling follows the seed)."""
    check(sampled(ctx, 1) != sampled(ctx, 2), "seeds 1 and 2 gave the same answer")
    return "seeds 1 and 2 differ"


def case_fields(ctx):
    """Fields OpenAI accepts that the server does not use are accepted."""
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=2,
        seed=7,
        user="conformance",
        metadata={"suite": "conformance"},
        service_tier="auto",
        store=False,
        parallel_tool_calls=True,
        prompt_cache_key="conformance",
        safety_identifier="user-1",
        logit_bias={},
        n=1,
    )
    only(r.choices)
    return "seed, user, metadata, service_tier, store, parallel_tool_calls, ... accepted"


def raw_error_shape(ctx, body, status):
    """The error body as sent: exactly {"error": {message, type, param, code}}."""
    req = urllib.request.Request(
        f"{ctx.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("a bad request was accepted")
    except urllib.error.HTTPError as err:
        check(err.code == status, f"status {err.code}")
        payload = json.loads(err.read())
    check(list(payload) == ["error"], f"keys {list(payload)}")
    check(sorted(payload["error"]) == ["code", "message", "param", "type"], str(payload))


def case_errors(ctx):
    """Bad requests give OpenAI's error shape and the client's matching error class."""
    bad = [
        ("temperature", {"temperature": 5}, "temperature"),
        ("metadata", {"metadata": {"k": 1}}, "metadata"),
        ("service_tier", {"service_tier": "gold"}, "service_tier"),
        ("store", {"store": "yes"}, "store"),
        ("seed", {"seed": 1.5}, "seed"),
        ("messages", {"messages": []}, "messages"),
    ]
    for name, fields, param in bad:
        body = {"model": ctx.model, "messages": [{"role": "user", "content": "Hi"}], **fields}
        try:
            ctx.client.chat.completions.create(**body)
            raise AssertionError(f"{name}: a bad value was accepted")
        except openai.BadRequestError as err:
            check(err.status_code == 400, f"{name}: status {err.status_code}")
            check(err.type == "invalid_request_error", f"{name}: type {err.type}")
            check(err.param == param, f"{name}: param {err.param}")
        raw_error_shape(ctx, body, 400)
    try:
        ctx.client.chat.completions.create(
            model="no-such-model", messages=[{"role": "user", "content": "Hi"}]
        )
        raise AssertionError("an unknown model was served")
    except openai.NotFoundError as err:
        check(err.code == "model_not_found", f"code {err.code}")
    return f"{len(bad)} bad fields -> 400 invalid_request_error with param; unknown model -> 404"


def final_answer(ctx, assistant, call_id):
    """The second leg of a tool round trip: the tool's result in, a final answer out.

    The echo engine answers its prompt's first turn (it stops at the first end-of-turn token),
    so the result's arrival shows in the prompt's size: the same request without it is shorter.
    """

    def ask(tool_result):
        return ctx.client.chat.completions.create(
            model=ctx.model,
            messages=[*CALL_MESSAGES, assistant, *tool_result],
            tools=[WEATHER_TOOL],
            tool_choice="none",
        )

    r = ask([{"role": "tool", "tool_call_id": call_id, "content": "sunny, 21C"}])
    choice = only(r.choices)
    check(choice.finish_reason == "stop", f"finish {choice.finish_reason}")
    check(not choice.message.tool_calls, "no call in the final answer")
    check(isinstance(choice.message.content, str), "the answer is text")
    grew = r.usage.prompt_tokens - ask([]).usage.prompt_tokens
    check(grew >= 3, f"the tool result adds to the prompt ({grew} tokens)")
    return f"call {call_id[:12]}..., tool result (+{grew} prompt tokens), final answer"


def case_tools(ctx):
    """Tool round trip, not streamed: call, tool result, final answer (echo engine + hermes)."""
    r = ctx.client.chat.completions.create(
        model=ctx.model, messages=CALL_MESSAGES, tools=[WEATHER_TOOL], tool_choice="required"
    )
    choice = only(r.choices)
    check(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
    call = only(choice.message.tool_calls or [])
    check(call.type == "function" and call.id, "a function call with an id")
    check(call.function.name == "get_weather", f"name {call.function.name}")
    check(json.loads(call.function.arguments) == {"city": "Paris"}, call.function.arguments)
    return final_answer(ctx, choice.message.model_dump(exclude_none=True), call.id)


def case_tools_stream(ctx):
    """Tool round trip, streamed: the call arrives as deltas, then the final answer."""
    stream = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=CALL_MESSAGES,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        stream=True,
    )
    call_id, name, args, finish = "", "", "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for d in choice.delta.tool_calls or []:
            check(d.index == 0, f"index {d.index}")
            call_id += d.id or ""
            name += (d.function.name or "") if d.function else ""
            args += (d.function.arguments or "") if d.function else ""
        finish = choice.finish_reason or finish
    check(finish == "tool_calls", f"finish {finish}")
    check(name == "get_weather", f"name {name}")
    check(json.loads(args) == {"city": "Paris"}, args)
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
        ],
    }
    return final_answer(ctx, assistant, call_id)


def case_tool_shape(ctx):
    """A forced tool choice on a real model: well formed; any call names an offered tool."""
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=48,
        temperature=0,
    )
    choice = only(r.choices)
    calls = choice.message.tool_calls or []
    for call in calls:
        check(call.function.name == "get_weather", f"name {call.function.name}")
        json.loads(call.function.arguments)
    if calls:
        check(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
        return f"model called {[c.function.name for c in calls]}"
    content = (choice.message.content or "")[:40]
    return f"model answered in prose (no constrained decoding): {content!r}"


def case_tools_forced(ctx):
    """A tool round trip on an engine whose grammar forces the call (tool_choice required)."""
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=messages,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=64,
        temperature=0,
    )
    choice = only(r.choices)
    check(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
    call = only(choice.message.tool_calls or [])
    check(call.function.name == "get_weather", call.function.name)
    args = json.loads(call.function.arguments)
    check(isinstance(args.get("city"), str), call.function.arguments)
    final = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=messages
        + [
            choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
        ],
        tools=[WEATHER_TOOL],
        tool_choice="none",
        max_tokens=24,
        temperature=0,
    )
    answer = only(final.choices)
    check(answer.finish_reason in ("stop", "length"), answer.finish_reason)
    check(not answer.message.tool_calls, "no call in the final answer")
    check(isinstance(answer.message.content, str), "content")
    check(final.usage.prompt_tokens > r.usage.prompt_tokens, "the call and result in")
    return f"call get_weather({call.function.arguments[:30]}), result, final answer"


def case_reasoning(ctx):
    """Reasoning split (qwen3 parser): the think block goes to reasoning_content."""
    messages = [{"role": "user", "content": "<think>pondering</think>The answer"}]
    r = ctx.client.chat.completions.create(model=ctx.model, messages=messages)
    msg = only(r.choices).message
    check((extra(msg, "reasoning_content") or "").strip() == "pondering", str(msg))
    check("The answer" in (msg.content or ""), f"content {msg.content!r}")
    check("pondering" not in msg.content and "<think>" not in msg.content, msg.content)
    reasoning, content = "", ""
    for chunk in ctx.client.chat.completions.create(
        model=ctx.model, messages=messages, stream=True
    ):
        if chunk.choices:
            reasoning += extra(chunk.choices[0].delta, "reasoning_content") or ""
            content += chunk.choices[0].delta.content or ""
    check(reasoning.strip() == "pondering", f"streamed reasoning {reasoning!r}")
    check(content == msg.content, "streamed content = unary content")
    return "reasoning_content split, streamed and not"


PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


def case_json_schema(ctx):
    """response_format json_schema (strict): the answer parses and fits the schema.

    Greedy, with room to finish: sampled, a small model sometimes wrote a name string past
    max_tokens.
    """
    r = ctx.client.chat.completions.create(
        model=ctx.model,
        messages=[{"role": "user", "content": "Describe a person as JSON."}],
        max_tokens=160,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True},
        },
    )
    value = json.loads(only(r.choices).message.content)
    check(isinstance(value, dict), f"an object: {value!r}")
    check(sorted(value) == ["age", "name"], f"exactly name and age: {value!r}")
    check(isinstance(value["name"], str), "name is a string")
    check(isinstance(value["age"], int) and not isinstance(value["age"], bool), "age is an int")
    return f"valid: {json.dumps(value)[:60]}"


def case_json_schema_refused(ctx):
    """An engine without guided decoding: a 400 naming the engine, in OpenAI's shape."""
    try:
        ctx.client.chat.completions.create(
            model=ctx.model,
            messages=[{"role": "user", "content": "JSON please"}],
            response_format={"type": "json_object"},
        )
    except openai.BadRequestError as err:
        body = err.body or {}
        code = body.get("code") if isinstance(body, dict) else None
        check(code == "unsupported_response_format", f"code {code!r}")
        return "400 unsupported_response_format"
    raise AssertionError("json_object accepted by an engine that cannot enforce it")


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    na = sum(x * x for x in a) ** 0.5
    nb = sum(y * y for y in b) ** 0.5
    return dot / (na * nb)


def case_embeddings(ctx):
    """/v1/embeddings: one vector per input, identical inputs at cosine 1, different ones not."""
    inputs = ["the cat sat on the mat", "the cat sat on the mat", "quarterly revenue grew"]
    r = ctx.client.embeddings.create(model=ctx.model, input=inputs)
    check(len(r.data) == 3, f"3 vectors, got {len(r.data)}")
    check([d.index for d in r.data] == [0, 1, 2], "indexes in order")
    vecs = [d.embedding for d in r.data]
    check(len(set(len(v) for v in vecs)) == 1 and len(vecs[0]) > 0, "one width")
    same, other = cosine(vecs[0], vecs[1]), cosine(vecs[0], vecs[2])
    check(abs(same - 1) < 1e-5, f"identical inputs at cosine {same}")
    check(other < 0.999, f"different inputs at cosine {other}")
    check(r.usage.prompt_tokens > 0, "usage.prompt_tokens")
    return f"{len(vecs[0])} dims, cosine same {same:.6f}, other {other:.3f}"


def case_responses(ctx):
    """/v1/responses: a completed (or incomplete) response with output text and usage."""
    r = ctx.client.responses.create(model=ctx.model, input="Say hello.", max_output_tokens=16)
    check(r.object == "response", f"object {r.object!r}")
    check(r.status in ("completed", "incomplete"), f"status {r.status!r}")
    check(isinstance(r.output_text, str) and r.output_text != "", "output_text")
    check(r.usage.output_tokens > 0, "usage.output_tokens")
    return f"{r.status}, {r.usage.output_tokens} tokens"


def case_responses_stream(ctx):
    """/v1/responses streamed: created first, completed last, deltas adding up to the text."""
    kinds, text, done, final = [], "", None, None
    # The SDK's get_final_response() wants response.completed; an answer cut by
    # max_output_tokens ends with response.incomplete (as OpenAI's does), which carries it too.
    with ctx.client.responses.stream(
        model=ctx.model, input="Say hello.", max_output_tokens=16
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.output_text.done":
                done = event.text
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response
    check(final is not None, "no response.completed or response.incomplete event")
    check(kinds[0] == "response.created", f"first {kinds[0]}")
    check(kinds[-1] in ("response.completed", "response.incomplete"), f"last {kinds[-1]}")
    check(done == text and text != "", "deltas add up to the done text")
    check(final.output_text == text, "the final response holds the text")
    return f"{len(kinds)} events, {len(text)} characters"


CASES = {
    name[len("case_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--cases", default="chat,stream,completions,logprobs,seed,fields,errors")
    args = parser.parse_args()
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}", file=sys.stderr)
        return 2
    base_url = args.base_url.rstrip("/").removesuffix("/v1") + "/v1"
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0, timeout=120)
    ctx = Ctx(client, args.model, base_url)
    failed = 0
    for name in names:
        try:
            print(f"ok {name}: {CASES[name](ctx)}", flush=True)
        except Exception as err:  # noqa: BLE001 - every failure is reported, then counted
            failed += 1
            why = f"{type(err).__name__}: {err}".replace("\n", " ")
            print(f"FAIL {name}: {why}", flush=True)
    print(f"{len(names) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
