import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { AccessDeniedError, DeadlineExceededError, UnavailableError } from '@kurrent/kurrentdb-client';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import ccxt from 'ccxt';
import { describe, expect, it } from 'vitest';
import { EventStoreUnavailableError, StorageFullError } from '../../adapters/event-store/port.ts';
import { VenueUnavailableError } from '../../adapters/market/errors.ts';
import { ServiceError } from '../../contracts/errors.ts';
import { failureReason } from './failure-reason.ts';

const coded = (message: string, fields: Record<string, unknown>) => Object.assign(new Error(message), fields);

describe('the reason a failure is shown with', () => {
  it("comes from the error's code, or its causes', never its words", () => {
    // fetch wraps the socket's error; a connection tried on several addresses is an AggregateError.
    const fetchFailed = new TypeError('fetch failed', {
      cause: coded('getaddrinfo ENOTFOUND rpc.internal', { code: 'ENOTFOUND' }),
    });
    const happyEyeballs = new AggregateError(
      [coded('connect ECONNREFUSED ::1:5432', { code: 'ECONNREFUSED' })],
      'all attempts failed',
    );
    // Node's own check of a certificate's names (its message names the host and the altnames).
    const altname = checkServerIdentity('db-primary', {
      subject: { CN: 'other' },
      subjectaltname: 'DNS:rpc.example',
    } as unknown as PeerCertificate);
    expect(altname?.message).toContain('db-primary');
    expect(failureReason(fetchFailed)).toBe('name not resolved');
    expect(failureReason(happyEyeballs)).toBe('refused');
    expect(failureReason(altname)).toBe('TLS certificate refused');
    expect(failureReason(coded('self-signed', { code: 'DEPTH_ZERO_SELF_SIGNED_CERT' }))).toBe(
      'TLS certificate refused',
    );
    expect(failureReason(coded('x', { code: 'ETIMEDOUT' }))).toBe('timed out');
    expect(failureReason(coded('x', { code: 'ECONNRESET' }))).toBe('connection reset');
    expect(failureReason(coded('x', { code: 'EHOSTUNREACH' }))).toBe('unreachable');
    expect(failureReason(coded('x', { code: 'ENOSPC' }))).toBe('out of space');
    expect(failureReason(coded('password authentication failed for user "svc"', { code: '28P01' }))).toBe(
      'login refused',
    );
    expect(failureReason(coded('could not extend file', { code: '53100' }))).toBe('out of space');
    expect(failureReason(new Error('NOAUTH Authentication required.'))).toBe('login refused');
    expect(failureReason(coded('HTTP request failed. URL: base.example/v2/KEY', { status: 429 }))).toBe(
      'HTTP 429',
    );
    // KurrentDB's errors are named Error (their code is gRPC's number): their type tells.
    expect(failureReason(new AccessDeniedError(undefined, 'Access denied'))).toBe('login refused');
    expect(failureReason(new UnavailableError(undefined, 'esdb.internal:2113'))).toBe('unreachable');
    expect(failureReason(new DeadlineExceededError(undefined, 'x'))).toBe('timed out');
    expect(failureReason(new Error('timeout exceeded when trying to connect'))).toBe('timed out');
    expect(failureReason(new Error('connection to db-primary lost'))).toBe('failed');
    expect(failureReason('a string')).toBe('failed');
  });

  it("reads the service's own errors by their cause, not by the status the service answers with", () => {
    // A check that reads the store during a PostgreSQL outage throws the store's error (statusCode
    // 503, what an API caller is answered); /readyz read 'HTTP 503', as if PostgreSQL spoke HTTP.
    const refused = coded('connect ECONNREFUSED 10.0.0.5:5432', { code: 'ECONNREFUSED' });
    expect(failureReason(new EventStoreUnavailableError('postgres unreachable: x', { cause: refused }))).toBe(
      'refused',
    );
    const full = coded('could not extend file', { code: '53100' });
    expect(failureReason(new StorageFullError('postgres: disk full', { cause: full }))).toBe('out of space');
    expect(failureReason(new ServiceError('SERVICE_UNAVAILABLE'))).toBe('failed');
  });

  it('reads a JetStream API error by its own code, not the HTTP-like status NATS answers it with', () => {
    // NATS answers a stream or consumer the server does not have with code 404: /readyz's bus check
    // read 'HTTP 404' while the server had lost its store, as if NATS spoke HTTP.
    // (The bus meets them as StreamNotFoundError and ConsumerNotFoundError, subclasses the package
    // does not export: bus-check-readyz.int.test.ts holds the one a server answers.)
    const stream = new JetStreamApiError({
      code: 404,
      err_code: JetStreamApiCodes.StreamNotFound,
      description: 'stream not found',
    });
    const consumer = new JetStreamApiError({
      code: 404,
      err_code: JetStreamApiCodes.ConsumerNotFound,
      description: 'consumer not found',
    });
    expect(failureReason(stream)).toBe('stream not found');
    expect(failureReason(consumer)).toBe('consumer not found');
    // Wrapped, as the bus's own errors carry it in their cause.
    expect(failureReason(new Error('publish failed', { cause: stream }))).toBe('stream not found');
    // Another JetStream refusal is no HTTP status either; its words go to the log.
    const other = new JetStreamApiError({
      code: 503,
      err_code: 10008,
      description: 'JetStream system temporarily unavailable',
    });
    expect(failureReason(other)).toBe('failed');
    // A real HTTP error keeps its status.
    expect(failureReason(coded('HTTP request failed', { status: 404 }))).toBe('HTTP 404');
  });

  it('reads an OS code a client kept only in its words (ccxt drops the fetch error it wraps)', () => {
    // The live feed's refusal of a venue whose host does not resolve, as scan_funding_arb meets it.
    const words = (detail: string) =>
      new ccxt.NetworkError(
        `binanceusdm GET https://fapi.binance.com/fapi/v1/exchangeInfo fetch failed: ${detail}`,
      );
    const venue = (cause: Error) =>
      new VenueUnavailableError('BINANCE', `loadMarkets failed after 1 attempts: ${cause}`, { cause });
    expect(failureReason(venue(words('getaddrinfo ENOTFOUND fapi.binance.com')))).toBe('name not resolved');
    expect(failureReason(venue(words('connect ECONNREFUSED 127.0.0.1:443')))).toBe('refused');
    expect(failureReason(venue(words('other side closed (UND_ERR_SOCKET)')))).toBe('connection reset');
    // A word that is not an OS or undici code, or a figure, picks nothing.
    expect(failureReason(new Error('ERROR: too many connections 53300 EOF'))).toBe('failed');
  });
});
