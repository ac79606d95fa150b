import { isIP } from 'node:net';
import { Agent, buildConnector } from 'undici';
import { type AddressPolicy, forbiddenAddress, ipLiteral } from './address-policy.ts';
import { resolveAll } from './url-policy.ts';

/** Refused at connect time: the socket was never opened. */
export class ForbiddenAddressError extends Error {
  override readonly name = 'ForbiddenAddressError';
  readonly code = 'ERR_SSRF_FORBIDDEN';
}

export interface GuardedAgentOptions {
  addresses: AddressPolicy;
  connectTimeoutMs: number;
  /** Connections kept per origin: the per-endpoint concurrency. */
  connectionsPerOrigin: number;
  resolve?: (host: string) => Promise<string[]>;
  /** TLS options (tests pass the receiver's self-signed CA here). */
  tls?: { ca?: string | Buffer | (string | Buffer)[]; rejectUnauthorized?: boolean };
}

/**
 * An undici Agent whose connector checks the address it is about to dial: IP literals (in any
 * spelling) directly, names after resolving them here, so the address checked is the address
 * dialled. The certificate is still verified against the name (SNI). Undici does not follow
 * redirects unless told to, so a 3xx is returned to the caller as is.
 */
export function guardedAgent(options: GuardedAgentOptions): Agent {
  const base = buildConnector({
    timeout: options.connectTimeoutMs,
    ...(options.tls ?? {}),
  });
  const resolve = options.resolve ?? resolveAll;
  const connect: buildConnector.connector = (opts, callback) => {
    const host = opts.hostname;
    const literal = ipLiteral(host);
    if (literal !== null) {
      const why = forbiddenAddress(literal, options.addresses);
      if (why !== null) {
        callback(new ForbiddenAddressError(`refused to connect to ${host}: ${why}`), null);
        return;
      }
      base(opts, callback);
      return;
    }
    resolve(host).then(
      (addresses) => {
        const refused = addresses.map((a) => forbiddenAddress(a, options.addresses)).find((w) => w !== null);
        const address = addresses.find((a) => isIP(a) !== 0);
        if (refused || address === undefined) {
          callback(
            new ForbiddenAddressError(`refused to connect to ${host}: ${refused ?? 'no address'}`),
            null,
          );
          return;
        }
        base({ ...opts, hostname: address, servername: opts.servername || host }, callback);
      },
      (err: unknown) => callback(err instanceof Error ? err : new Error(String(err)), null),
    );
  };
  return new Agent({
    connect,
    connections: options.connectionsPerOrigin,
    pipelining: 1,
  });
}
