// A real fakehop server for the JavaScript SDK tests, started by the test file that needs it.
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const PYTHON = process.env.FAKEHOP_PYTHON || 'python3';
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TIME_SCALE = '0.01';

/** Start `fakehop serve` on a free port; resolves to { url, stop }. */
export async function startFakehop() {
  const child = spawn(PYTHON, ['-m', 'fakehop', 'serve', '--port', '0', '--time-scale', TIME_SCALE], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = once(child, 'exit').then(([code]) => {
    throw new Error(`fakehop exited with code ${code} before it was listening`);
  });
  const [firstLine] = await Promise.race([once(createInterface({ input: child.stdout }), 'line'), exited]);
  exited.catch(() => {});
  const url = firstLine.match(/listening on (\S+)/)?.[1];
  if (!url) throw new Error(`unexpected first line from fakehop: ${firstLine}`);
  return {
    url,
    async stop() {
      if (child.exitCode === null) {
        child.kill();
        await once(child, 'exit');
      }
    },
  };
}

/** The names of the bundled scenarios, as `fakehop list` prints them. */
export function scenarioNames() {
  const listing = execFileSync(PYTHON, ['-m', 'fakehop', 'list'], { cwd: ROOT, encoding: 'utf8' });
  return listing.split('\n').filter(Boolean).map((line) => line.split(/\s+/)[0]);
}

/** Bundled scenarios whose answer ends well (flaky-then-ok after the SDK's retries). */
export const ENDS_WELL = [
  'agent-two-tools', 'agent-weather', 'flaky-then-ok', 'hello', 'keepalive-demo', 'long-text', 'max-tokens', 'reasoning-pause', 'slow-typing',
  'stall-recovers', 'think-then-tool', 'two-tools', 'weather-tool',
];

/** Bundled scenarios whose (first) answer is an error, a broken stream or no answer at all. */
export const ENDS_BADLY = [
  'disconnect', 'fail-invalid-prompt', 'fail-overloaded', 'fail-rate-limit', 'fail-server-error', 'hang',
  'interrupted', 'interrupted-then-ok', 'malformed', 'rate-limited', 'server-error', 'stall',
];

/** Per-request options that pick a scenario by name. */
export function scenario(name) {
  return { headers: { 'X-Fakehop-Scenario': name } };
}
