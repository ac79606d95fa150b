import { afterAll, describe, expect, it } from 'vitest';
import { serviceProcesses } from './service-process.ts';

/**
 * A role exports the series of what it serves: `mcp_sessions_open` only where MCP is served (the
 * api role). On a role that serves no MCP a gauge at 0 would read as "no sessions open" on a
 * dashboard summing the deployment, and as a series an alert could be written against for nothing.
 */
const processes = serviceProcesses('metrics-roles-');
afterAll(() => processes.stopAll());

async function metricsOf(args: string[]): Promise<string> {
  const r = await processes.start({}, args);
  await expect
    .poll(() => r.lines.find((l) => l.msg === 'service started'), { timeout: 90_000, interval: 100 })
    .toBeTruthy();
  const url = r.lines.find((l) => l.msg === 'service started')!.url as string;
  const res = await fetch(`${url}/metrics`);
  expect(res.status).toBe(200);
  const text = await res.text();
  r.child.kill('SIGTERM');
  expect(await r.exit).toBe(0);
  return text;
}

describe('mcp_sessions_open on /metrics', () => {
  it('is exported where MCP is served (all roles in one process), not on a role without the api', async () => {
    expect(await metricsOf([])).toMatch(/^mcp_sessions_open 0$/m);
    const noApi = await metricsOf(['--role', 'projections,dispatcher']);
    // The process's other series are there: it is the MCP gauge alone that is left out.
    expect(noApi).toMatch(/^projection_lag_events\{/m);
    expect(noApi).not.toContain('mcp_sessions_open');
  }, 240_000);
});
