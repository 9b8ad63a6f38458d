// openai's ResponseStream against fakehop's /v1/responses, for every scenario that ends well.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { ENDS_WELL, REFUSAL, addRefusal, scenario, startFakehop } from './fakehop.mjs';

const REQUEST = { model: 'gpt-5.6-sol', input: 'Hello' };
let server;
let client;

before(async () => {
  server = await startFakehop();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-test', maxRetries: 2 });
});
after(() => server?.stop());

const reset = () => fetch(`${server.url}/_fakehop/reset`, { method: 'POST' });
const finalResponse = (name) => client.responses.stream(REQUEST, scenario(name)).finalResponse();

/** Keys the stream helper adds as it parses (`parsed`, `parsed_arguments`); not on the wire. */
const HELPER_KEYS = new Set(['parsed', 'parsed_arguments']);
const withoutHelperKeys = (value) => JSON.parse(JSON.stringify(value, (key, v) => (HELPER_KEYS.has(key) ? undefined : v)));

/** What the stream and the whole response must agree on (ids generated per request left out). */
function gist(response) {
  const output = withoutHelperKeys(response.output).map(({ id, call_id, ...item }) => item);
  return {
    model: response.model,
    status: response.status,
    incomplete: response.incomplete_details,
    output,
    text: response.output_text,
    usage: response.usage,
  };
}

for (const name of ENDS_WELL) {
  test(`finalResponse equals the non-streamed response: ${name}`, async () => {
    await reset();
    const whole = await client.responses.create(REQUEST, scenario(name));
    await reset();
    assert.deepEqual(gist(await finalResponse(name)), gist(whole));
  });
}

test('reasoning summary, text and a function call from think-then-tool', async () => {
  const response = await client.responses.stream({ ...REQUEST, reasoning: { summary: 'auto' } }, scenario('think-then-tool')).finalResponse();
  assert.deepEqual(response.output.map((item) => item.type), ['reasoning', 'message', 'function_call']);
  assert.equal(response.output[0].summary[0].text, 'The user wants the weather in Paris; call the tool.');
  assert.equal(response.output_text, 'Checking.');
  assert.deepEqual(JSON.parse(response.output[2].arguments), { city: 'Paris' });
  assert.deepEqual([response.usage.input_tokens, response.usage.output_tokens], [40, 30]);
});

test('function call id and arguments from weather-tool', async () => {
  const call = (await finalResponse('weather-tool')).output[1];
  assert.equal(call.call_id, 'call_weather_1');
  assert.deepEqual(JSON.parse(call.arguments), { city: 'Paris', unit: 'celsius' });
});

/** Every event a raw stream hands out before it throws, and what it throws. */
async function eventsUntilThrow(stream) {
  const events = [];
  try {
    for await (const event of stream) events.push(event);
  } catch (error) {
    return { events, error };
  }
  return { events, error: null };
}

test('a mid-stream failure throws APIError with its code, as the real error event makes it', async () => {
  await reset();
  const { events, error } = await eventsUntilThrow(await client.responses.create({ ...REQUEST, stream: true }, scenario('fail-rate-limit')));
  assert.ok(error instanceof OpenAI.APIError, `expected an APIError, got ${error}`);
  assert.equal(error.code, 'rate_limit_exceeded');
  assert.equal(error.type, 'requests');
  assert.ok(!events.some((event) => event.type === 'response.failed'));
  await assert.rejects(finalResponse('fail-server-error'), (thrown) => thrown instanceof OpenAI.APIError && thrown.code === 'server_error');
});

test('with error_event: false a failure is response.failed alone, and the stream ends without throwing', async () => {
  await reset();
  const quiet = { name: 'quiet-failure', steps: [{ text: 'Hi' }, { fail: { kind: 'server_error', error_event: false } }] };
  await fetch(`${server.url}/_fakehop/scenarios`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(quiet) });
  const { events, error } = await eventsUntilThrow(await client.responses.create({ ...REQUEST, stream: true }, scenario('quiet-failure')));
  assert.equal(error, null);
  assert.deepEqual(events.slice(-1).map((event) => [event.type, event.response.error.code]), [['response.failed', 'server_error']]);
});

test('a refusal is a refusal content part, with response.refusal events', async () => {
  const options = await addRefusal(server.url);
  const done = [];
  const stream = client.responses.stream(REQUEST, options).on('response.refusal.done', (event) => done.push(event.refusal));
  const response = await stream.finalResponse();
  assert.deepEqual(done, [REFUSAL]);
  assert.deepEqual(withoutHelperKeys(response.output[0].content), [{ type: 'refusal', refusal: REFUSAL }]);
  assert.equal(response.status, 'completed');
});
