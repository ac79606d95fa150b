/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned) run against the
 * service as `npm start` runs it: `services/main.ts` on embedded defaults, a fresh DATA_DIR, and
 * the suite's own client (the official SDK's) over loopback. Every server scenario of the suite is
 * either run here and must pass, or listed in EXCLUDED with the reason; a suite upgrade that adds a
 * scenario fails the first case until the scenario is sorted into one list or the other.
 *
 * The suite has no server-side authorization scenarios (its auth/* scenarios test clients) and no
 * way to send a Bearer token, so it covers `/mcp` only, not `/mcp/signin`; nor has 0.1.16 any
 * scenario of the 2026-07-28 revision (all are 2025-06-18 / 2025-11-25, session handshake).
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { freePort } from './ports.ts';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

const SUITE = join(
  createRequire(import.meta.url)
    .resolve('@modelcontextprotocol/conformance/package.json')
    .replace(/package\.json$/, ''),
  'dist/index.js',
);

/** Scenarios that exercise what the service offers: each must pass with no failure or warning. */
const APPLICABLE = [
  'server-initialize',
  'ping',
  'tools-list',
  'resources-list',
  // Host/Origin checks against DNS rebinding (ALLOWED_HOSTS): an evil Host is 403, a loopback one served.
  'dns-rebinding-protection',
];

/** Scenarios left out, and why. None of them is a conformance fault of ours (see each reason). */
const EXCLUDED: Record<string, string> = {
  // Features the service does not offer: initialize declares tools and resources only (no
  // logging, completions, prompts or resource subscriptions), so -32601 is the answer the spec
  // asks for; and it never sends sampling or elicitation requests to the client.
  'logging-set-level': 'no logging capability declared: logging/setLevel is -32601',
  'completion-complete': 'no completions capability declared: completion/complete is -32601',
  'resources-subscribe': 'resources capability without subscribe: -32601',
  'resources-unsubscribe': 'resources capability without subscribe: -32601',
  'prompts-list': 'no prompts capability declared: -32601',
  'prompts-get-simple': 'no prompts (test_simple_prompt)',
  'prompts-get-with-args': 'no prompts (test_prompt_with_arguments)',
  'prompts-get-embedded-resource': 'no prompts (test_prompt_with_embedded_resource)',
  'prompts-get-with-image': 'no prompts (test_prompt_with_image)',
  'tools-call-sampling': 'the service never asks the client for sampling (test_sampling)',
  'tools-call-elicitation': 'the service never asks the client for elicitation (test_elicitation)',
  'elicitation-sep1034-defaults': 'no elicitation (test_elicitation_sep1034_defaults)',
  'elicitation-sep1330-enums': 'no elicitation (test_elicitation_sep1330_enums)',
  // Test-only tools and resources the suite expects the server under test to define.
  'tools-call-image': 'test-only tool test_image_content',
  'tools-call-audio': 'test-only tool test_audio_content',
  'tools-call-embedded-resource': 'test-only tool test_embedded_resource',
  'tools-call-mixed-content': 'test-only tool test_multiple_content_types',
  'tools-call-with-logging': 'test-only tool test_tool_with_logging (and no logging capability)',
  'tools-call-with-progress': 'test-only tool test_tool_with_progress',
  'json-schema-2020-12': 'test-only tool json_schema_2020_12_tool',
  'resources-read-text': 'test-only resource test://static-text',
  'resources-read-binary': 'test-only resource test://static-binary',
  'resources-templates-read': 'test-only resource template test://template/{id}/data',
  // These two pass, but only because they call test-only tools we lack (test_simple_text,
  // test_error_handling) and our unknown-tool answer is an isError result with text content:
  // asserting them would pin that accident, not a feature.
  'tools-call-simple-text': 'passes only on the unknown-tool error (test-only tool test_simple_text)',
  'tools-call-error': 'passes only on the unknown-tool error (test-only tool test_error_handling)',
  // Suite bug (modelcontextprotocol/conformance#412, in 0.1.16): after a handshake that negotiated
  // 2025-11-25 its raw POSTs send MCP-Protocol-Version: 2025-03-26, which the service refuses (400:
  // the header disagrees with the session's revision; the spec says the client SHOULD send the
  // negotiated one). server-sse-polling then only warns (no check runs; its test_reconnection tool
  // is test-only as well); server-sse-multiple-streams fails 400, 400, 400 before testing concurrency.
  'server-sse-polling':
    'suite bug #412 (non-negotiated MCP-Protocol-Version) and test-only tool test_reconnection',
  'server-sse-multiple-streams':
    'suite bug #412: sends MCP-Protocol-Version 2025-03-26 on a 2025-11-25 session',
};

interface Check {
  id: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO' | 'SKIPPED';
  errorMessage?: string;
}

function conformance(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [SUITE, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      out += chunk.toString();
    });
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, out }));
  });
}

describe('official MCP conformance suite (0.1.16) against /mcp of services/main.ts', () => {
  let service: ServiceProcess;
  let dataDir: string;
  let outDir: string;
  let url: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'mcp-conformance-data-'));
    outDir = await mkdtemp(join(tmpdir(), 'mcp-conformance-out-'));
    const port = await freePort();
    service = runServiceProcess({ PORT: String(port), DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    await vi.waitFor(
      () => {
        if (service.child.exitCode !== null) throw new Error(`service exited: ${service.stderr}`);
        if (!service.lines.some((l) => l.msg === 'service started')) throw new Error('not started yet');
      },
      { timeout: 60_000, interval: 100 },
    );
    url = `http://127.0.0.1:${port}/mcp`;
  }, 90_000);

  afterAll(async () => {
    if (service && service.child.exitCode === null) {
      service.child.kill('SIGTERM');
      await service.exit;
    }
    await rm(dataDir, { recursive: true, force: true });
    await rm(outDir, { recursive: true, force: true });
  });

  it('sorts every server scenario of the suite into run or excluded, none in both', async () => {
    const { code, out } = await conformance(['list', '--server']);
    expect(code).toBe(0);
    const listed = [...out.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]!);
    expect(listed.length).toBeGreaterThan(0);
    expect(APPLICABLE.filter((s) => s in EXCLUDED)).toEqual([]);
    expect([...listed].sort()).toEqual([...APPLICABLE, ...Object.keys(EXCLUDED)].sort());
  });

  it.each(APPLICABLE)('passes %s with no failure or warning', async (scenario) => {
    const dir = join(outDir, scenario);
    const { code, out } = await conformance(['server', '--url', url, '--scenario', scenario, '-o', dir]);
    const [run] = await readdir(dir);
    const checks = JSON.parse(await readFile(join(dir, run!, 'checks.json'), 'utf8')) as Check[];
    const graded = checks.filter((c) => c.status !== 'INFO');
    expect(
      graded.filter((c) => c.status !== 'SUCCESS').map((c) => `${c.id}: ${c.status} ${c.errorMessage ?? ''}`),
      out,
    ).toEqual([]);
    expect(graded.length).toBeGreaterThan(0);
    expect(code, out).toBe(0);
  });
});
