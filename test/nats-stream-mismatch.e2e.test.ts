import { randomUUID } from 'node:crypto';
import { jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { afterAll, describe, expect, it } from 'vitest';
import { type ServiceProcess, serviceProcesses } from './service-process.ts';

/**
 * Roles of one deployment on NATS_STREAMs that differ (one role's setting mistyped or left at its
 * default), NATS_SUBJECT_PREFIX equal: the second role's stream cannot take the subjects the first
 * one's holds. It is refused at its start, naming both streams and the rule, rather than told as a
 * NATS_URL that cannot be used (or left to read a stream no role publishes to).
 */
const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
const id = randomUUID().slice(0, 8);
const prefix = `mismatch${id}`;
const streams = [`MISMATCH_A_${id}`, `MISMATCH_B_${id}`];
const processes = serviceProcesses('nats-mismatch-');

afterAll(async () => {
  await processes.stopAll();
  const nc = await connect({ servers: NATS_URL.replace(/^nats:\/\//, '') });
  const jsm = await jetstreamManager(nc);
  for (const stream of streams) await jsm.streams.delete(stream).catch(() => false);
  await nc.close();
});

function dispatcher(stream: string, subjectPrefix = prefix): Promise<ServiceProcess> {
  return processes.start({ BUS: 'nats', NATS_URL, NATS_STREAM: stream, NATS_SUBJECT_PREFIX: subjectPrefix }, [
    '--role',
    'dispatcher',
  ]);
}

describe('a role whose NATS_STREAM differs from its deployment', () => {
  it('is refused at its start, naming the stream that holds the subjects; on that stream with another NATS_SUBJECT_PREFIX, naming that setting', async () => {
    const first = await dispatcher(streams[0]!);
    await expect
      .poll(() => first.lines.find((l) => l.msg === 'service started'), { timeout: 90_000, interval: 100 })
      .toBeTruthy();
    const second = await dispatcher(streams[1]!);
    expect(await second.exit).not.toBe(0);
    const told = JSON.stringify(second.lines) + second.stderr;
    expect(told).toContain(
      `stream ${streams[1]} (NATS_STREAM) cannot be created: its subject ${prefix}.> belongs to stream ${streams[0]} on this server`,
    );
    expect(told).toContain(`set NATS_STREAM=${streams[0]}`);
    expect(told).not.toContain('(NATS_URL) cannot be used');

    // The deployment's NATS_STREAM with another NATS_SUBJECT_PREFIX: the stream exists without
    // this role's subjects, and the refusal names the setting, not NATS_URL.
    const otherPrefix = await dispatcher(streams[0]!, `${prefix}x`);
    expect(await otherPrefix.exit).not.toBe(0);
    const toldPrefix = JSON.stringify(otherPrefix.lines) + otherPrefix.stderr;
    expect(toldPrefix).toContain(
      `stream ${streams[0]} (NATS_STREAM) exists without subject ${prefix}x.> (has ${prefix}.>)`,
    );
    expect(toldPrefix).toContain('correct NATS_SUBJECT_PREFIX');
    expect(toldPrefix).not.toContain('(NATS_URL) cannot be used');
  }, 180_000);
});
