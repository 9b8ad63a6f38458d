// openai's ChatCompletionStream against fakehop's /v1/chat/completions, for every scenario that ends well.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { ENDS_BADLY, ENDS_WELL, REFUSAL, addRefusal, scenario, scenarioNames, startFakehop } from './fakehop.mjs';

const REQUEST = { model: 'gpt-5.6-sol', messages: [{ role: 'user', content: 'Hello' }], stream_options: { include_usage: true } };
let server;
let client;

before(async () => {
  server = await startFakehop();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-test', maxRetries: 2 });
});
after(() => server?.stop());

const reset = () => fetch(`${server.url}/_fakehop/reset`, { method: 'POST' });

/** What the stream and the whole answer must agree on (ids generated per request left out). */
function gist(completion) {
  const [choice] = completion.choices;
  const calls = (choice.message.tool_calls ?? []).map((call) => ({ type: call.type, function: call.function }));
  return {
    model: completion.model,
    role: choice.message.role,
    content: choice.message.content || null,
    calls,
    finish: choice.finish_reason,
    usage: completion.usage,
  };
}

test('every bundled scenario is listed as ending well or badly', () => {
  assert.deepEqual(scenarioNames(), [...ENDS_WELL, ...ENDS_BADLY].sort());
});

for (const name of ENDS_WELL) {
  test(`finalChatCompletion equals the non-streamed answer: ${name}`, async () => {
    await reset();
    const whole = await client.chat.completions.create(REQUEST, scenario(name));
    await reset();
    const final = await client.chat.completions.stream(REQUEST, scenario(name)).finalChatCompletion();
    assert.deepEqual(gist(final), gist(whole));
  });
}

test('tool call id and arguments from weather-tool', async () => {
  const final = await client.chat.completions.stream(REQUEST, scenario('weather-tool')).finalChatCompletion();
  const [call] = final.choices[0].message.tool_calls;
  assert.equal(call.id, 'call_weather_1');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', unit: 'celsius' });
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
});

test('hello, word by word', async () => {
  const final = await client.chat.completions.stream(REQUEST, scenario('hello')).finalChatCompletion();
  assert.equal(final.choices[0].message.content, 'Hello! How can I help you today?');
  assert.equal(final.usage.completion_tokens, 8);
});

test('a refusal streams in delta.refusal, with null content', async () => {
  const options = await addRefusal(server.url);
  const refusals = [];
  const stream = client.chat.completions.stream(REQUEST, options).on('refusal.delta', ({ delta }) => refusals.push(delta));
  const completion = await stream.finalChatCompletion();
  assert.equal(refusals.join(''), REFUSAL);
  assert.deepEqual([completion.choices[0].message.refusal, completion.choices[0].message.content], [REFUSAL, null]);
  assert.equal(completion.choices[0].finish_reason, 'stop');
});
