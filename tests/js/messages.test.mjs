// @anthropic-ai/sdk's MessageStream against fakehop's /v1/messages.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import { ENDS_WELL, REFUSAL, addRefusal, scenario, startFakehop } from './fakehop.mjs';

const REQUEST = { model: 'claude-sonnet-5', max_tokens: 1024, messages: [{ role: 'user', content: 'Hello' }], thinking: { type: 'adaptive' } };
let server;
let client;

before(async () => {
  server = await startFakehop();
  client = new Anthropic({ baseURL: server.url, apiKey: 'sk-test', maxRetries: 2 });
});
after(() => server?.stop());

const finalMessage = (name) => client.messages.stream(REQUEST, scenario(name)).finalMessage();
const reset = () => fetch(`${server.url}/_fakehop/reset`, { method: 'POST' });

/** What the stream and the whole message must agree on (signatures and generated ids left out). */
function gist(message) {
  const blocks = message.content.map(({ signature, id, ...block }) => (id?.startsWith('toolu_') ? block : { id, ...block }));
  return { model: message.model, blocks, stop_reason: message.stop_reason, usage: message.usage };
}

for (const name of ENDS_WELL) {
  test(`finalMessage equals the non-streamed message: ${name}`, async () => {
    await reset();
    const whole = await client.messages.create(REQUEST, scenario(name));
    await reset();
    assert.deepEqual(gist(await finalMessage(name)), gist(whole));
  });
}

test('text: finalMessage holds the whole answer and its usage', async () => {
  const message = await finalMessage('hello');
  assert.deepEqual(message.content, [{ type: 'text', text: 'Hello! How can I help you today?' }]);
  assert.equal(message.stop_reason, 'end_turn');
  assert.equal(message.usage.output_tokens, 8);
  assert.match(message.id, /^msg_/);
});

test('text events add up to the answer', async () => {
  const texts = [];
  const stream = client.messages.stream(REQUEST, scenario('slow-typing')).on('text', (delta) => texts.push(delta));
  await stream.finalMessage();
  assert.equal(texts.join(''), 'The quick brown fox jumps over the lazy dog.');
  assert.equal(texts.length, 44);
});

test('thinking, text and tool_use blocks', async () => {
  const message = await finalMessage('think-then-tool');
  const [thinking, text, tool] = message.content;
  assert.equal(thinking.type, 'thinking');
  assert.equal(thinking.thinking, 'The user wants the weather in Paris; call the tool.');
  assert.match(thinking.signature, /^[A-Za-z0-9+/]{40,}={0,2}$/);
  assert.deepEqual(text, { type: 'text', text: 'Checking.' });
  assert.equal(tool.type, 'tool_use');
  assert.match(tool.id, /^toolu_/);
  assert.equal(tool.name, 'get_weather');
  assert.deepEqual(tool.input, { city: 'Paris' });
  assert.equal(message.stop_reason, 'tool_use');
  assert.deepEqual([message.usage.input_tokens, message.usage.output_tokens], [40, 30]);
});

test('tool_use input streamed in pieces, with the id the scenario gave', async () => {
  const message = await finalMessage('weather-tool');
  assert.deepEqual(message.content[1], {
    type: 'tool_use', id: 'call_weather_1', name: 'get_weather', input: { city: 'Paris', unit: 'celsius' }, caller: { type: 'direct' },
  });
});

test('two tool calls in one answer', async () => {
  const message = await finalMessage('two-tools');
  assert.deepEqual(message.content.map((block) => [block.name, block.input]), [
    ['get_weather', { city: 'Paris' }],
    ['get_time', { timezone: 'Europe/Paris' }],
  ]);
});

test('keepalives and a long pause do not disturb the stream', async () => {
  const message = await finalMessage('reasoning-pause');
  assert.deepEqual(message.content.map((block) => block.type), ['thinking', 'text']);
  assert.equal(message.content[1].text, 'Here is the proof, step by step.');
});

test('interrupted: the error event rejects finalMessage with api_error', async () => {
  const texts = [];
  const stream = client.messages.stream(REQUEST, scenario('interrupted')).on('text', (delta) => texts.push(delta));
  await assert.rejects(stream.finalMessage(), (error) => {
    assert.ok(error instanceof Anthropic.APIError);
    assert.equal(error.type, 'api_error');
    assert.equal(error.apiMessage, 'Response stream interrupted, please retry');
    return true;
  });
  assert.equal(texts.join(''), 'The answer to your question is');
});

test('overloaded: the error event carries overloaded_error', async () => {
  await assert.rejects(finalMessage('fail-overloaded'), { type: 'overloaded_error' });
});

test('a refusal ends the message with stop_reason refusal', async () => {
  const options = await addRefusal(server.url);
  const message = await client.messages.stream(REQUEST, options).finalMessage();
  assert.equal(message.stop_reason, 'refusal');
  assert.deepEqual(message.content, [{ type: 'text', text: REFUSAL }]);
});

test("the beta toolRunner runs agent-weather's loop, its turns threaded where the SDK threads them", async () => {
  await reset();
  const { betaTool } = await import('@anthropic-ai/sdk/helpers/beta/json-schema');
  const getWeather = betaTool({
    name: 'get_weather',
    description: 'The weather in a city.',
    inputSchema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    run: async ({ city }) => `Rain, 12 °C in ${city}`,
  });
  const runner = client.beta.messages.toolRunner(
    { model: 'claude-sonnet-5', max_tokens: 256, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [getWeather] },
    scenario('agent-weather'),
  );
  const stops = [];
  for await (const message of runner) stops.push(message.stop_reason);
  assert.deepEqual(stops, ['tool_use', 'end_turn']);
  const { requests } = await (await fetch(`${server.url}/_fakehop/requests`)).json();
  assert.deepEqual(requests.map((r) => [r.status, r.turn]), [[200, 1], [200, 2]]);
});
