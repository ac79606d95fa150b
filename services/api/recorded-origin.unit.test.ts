import { describe, expect, it } from 'vitest';
import { asRecorded, RECORDED_ORIGIN, servedAt } from './recorded-origin.ts';

describe('recorded origin', () => {
  const run = JSON.stringify({
    issuer: 'http://localhost:8080',
    jwks_uri: 'http://127.0.0.1:43503/oauth/jwks',
    domain: 'localhost:8080',
    identifier: 'urn:air:127.0.0.1:signal-service',
    host: '127.0.0.1',
    redirect: 'http://127.0.0.1:9/callback?iss=http%3A%2F%2Flocalhost%3A8080',
  });

  it('records the run’s origins as the one stand-in origin, leaving a third party’s (a callback on 127.0.0.1:9)', () => {
    const recorded = JSON.parse(asRecorded(run, ['http://127.0.0.1:43503', 'http://localhost:8080']));
    expect(recorded).toEqual({
      issuer: RECORDED_ORIGIN,
      jwks_uri: `${RECORDED_ORIGIN}/oauth/jwks`,
      domain: 'recorded.example:8443',
      identifier: 'urn:air:recorded.example:signal-service',
      host: 'recorded.example',
      redirect: `http://127.0.0.1:9/callback?iss=${encodeURIComponent(RECORDED_ORIGIN)}`,
    });
  });

  it('serves it naming the served origin in each spelling', () => {
    const recorded = JSON.parse(asRecorded(run, ['http://127.0.0.1:43503', 'http://localhost:8080']));
    expect(servedAt(recorded, 'https://signals.example.org')).toEqual({
      issuer: 'https://signals.example.org',
      jwks_uri: 'https://signals.example.org/oauth/jwks',
      domain: 'signals.example.org',
      identifier: 'urn:air:signals.example.org:signal-service',
      host: 'signals.example.org',
      redirect: 'http://127.0.0.1:9/callback?iss=https%3A%2F%2Fsignals.example.org',
    });
    expect(servedAt(`see ${RECORDED_ORIGIN}/verify/x`, 'http://10.0.0.5:3000')).toBe(
      'see http://10.0.0.5:3000/verify/x',
    );
    const plain = { a: 1 };
    expect(servedAt(plain, 'http://10.0.0.5:3000')).toBe(plain);
  });
});
